// One table of cluster specs, run against the parser and against both binaries that read it:
// linear_regression (a program on the runtime) and trainscope-sidecar, each with --check_config.
// All three must accept the same specs, and reject the same ones with the parser's message.
#include <gtest/gtest.h>

#include <chrono>

#include "process.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope::testing {
namespace {

using std::chrono::seconds;

struct Row {
  const char* name;
  const char* tf_config;
  const char* error;  // A part of the message; nullptr when the spec is valid.
};

// Every row names a task, as the runtime requires; the sidecar checks a given task too.
constexpr Row kRows[] = {
    {"minimal", R"({"cluster": {"ps": ["127.0.0.1:2222"]}, "task": {"type": "ps", "index": 0}})",
     nullptr},
    {"chief_ps_worker_evaluator",
     R"({"cluster": {"chief": ["c:1"], "ps": ["p0:1", "p1:1"], "worker": ["w0:1"],
         "evaluator": ["e:1"]}, "task": {"type": "worker", "index": 0}})",
     nullptr},
    {"ipv6_bracketed", R"({"cluster": {"ps": ["[::1]:2222"]}, "task": {"type": "ps"}})", nullptr},
    {"names_with_dots_and_dashes",
     R"({"cluster": {"ps": ["ps-0.train.svc.cluster.local:2222"]},
         "task": {"type": "ps", "index": 0}})",
     nullptr},
    {"extra_keys_ignored",
     R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 0}, "environment": "cloud",
         "rpc_layer": "grpc"})",
     nullptr},
    // What the sidecar's own parser used to accept and the runtime's rejected.
    {"job_as_object", R"({"cluster": {"ps": {"0": "a:1"}}, "task": {"type": "ps", "index": 0}})",
     "job 'ps' must be a list"},
    {"duplicate_address",
     R"({"cluster": {"ps": ["a:1"], "worker": ["a:1"]}, "task": {"type": "ps", "index": 0}})",
     "'a:1' is listed twice: for ps:0 and for worker:0"},
    {"ipv6_unbracketed", R"({"cluster": {"ps": ["::1:2222"]}, "task": {"type": "ps", "index": 0}})",
     "must be written [addr]:port"},
    // What the runtime's parser used to accept and the sidecar's rejected.
    {"job_name_with_colon", R"({"cluster": {"p:s": ["a:1"]}, "task": {"type": "p:s", "index": 0}})",
     "job name 'p:s'"},
    // Rejected by both, before and now.
    {"not_json", R"({"cluster": )", "not valid JSON"},
    {"not_object", "[1, 2]", "must be a JSON object"},
    {"no_cluster", R"({"task": {"type": "ps", "index": 0}})", "no \"cluster\""},
    {"cluster_list", R"({"cluster": ["a:1"], "task": {"type": "ps", "index": 0}})",
     "must map job names"},
    {"no_jobs", R"({"cluster": {}, "task": {"type": "ps", "index": 0}})", "lists no jobs"},
    {"empty_job", R"({"cluster": {"ps": []}, "task": {"type": "ps", "index": 0}})",
     "job 'ps' lists no tasks"},
    {"address_not_string", R"({"cluster": {"ps": [7]}, "task": {"type": "ps", "index": 0}})",
     "non-string address '7'"},
    {"no_port", R"({"cluster": {"ps": ["localhost"]}, "task": {"type": "ps", "index": 0}})",
     "bad address 'localhost'"},
    {"port_out_of_range", R"({"cluster": {"ps": ["a:99999"]}, "task": {"type": "ps", "index": 0}})",
     "port must be"},
    {"port_zero", R"({"cluster": {"ps": ["a:0"]}, "task": {"type": "ps", "index": 0}})",
     "port must be"},
    {"space_in_host", R"({"cluster": {"ps": ["a b:1"]}, "task": {"type": "ps", "index": 0}})",
     "host has character"},
    {"task_not_object", R"({"cluster": {"ps": ["a:1"]}, "task": 3})", "\"task\" must be"},
    {"task_without_type", R"({"cluster": {"ps": ["a:1"]}, "task": {"index": 0}})",
     "\"task\" must be"},
    {"index_out_of_range", R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 1}})",
     "task index 1 is out of range"},
    {"index_negative", R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": -1}})",
     "out of range"},
    {"index_text", R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": "0"}})",
     "must be an integer"},
    {"unknown_job", R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "chief", "index": 0}})",
     "no job 'chief'"},
};

struct Outcome {
  int code = -1;
  std::string output;
};

Outcome RunCheck(const std::string& binary, std::vector<std::string> args,
                 const std::string& tf_config) {
  Process p(BinPath(binary), std::move(args), {{"TF_CONFIG", tf_config}});
  auto code = p.Wait(seconds(20));
  return {code.value_or(-1), p.Output()};
}

TEST(SpecTable, ParserRuntimeAndSidecarAgreeOnEveryRow) {
  for (const Row& row : kRows) {
    SCOPED_TRACE(row.name);
    auto parsed = ParseTfConfig(row.tf_config, /*require_task=*/true);
    Outcome runtime = RunCheck("linear_regression", {"--check_config"}, row.tf_config);
    Outcome sidecar =
        RunCheck("trainscope-sidecar", {"--check_config", "--grpc_port", "-1"}, row.tf_config);
    if (row.error == nullptr) {
      EXPECT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(runtime.code, 0) << runtime.output;
      EXPECT_EQ(sidecar.code, 0) << sidecar.output;
      EXPECT_NE(runtime.output.find("TF_CONFIG is valid"), std::string::npos) << runtime.output;
      EXPECT_NE(sidecar.output.find("is valid"), std::string::npos) << sidecar.output;
      continue;
    }
    ASSERT_FALSE(parsed.ok());
    const std::string message(parsed.status().message());
    EXPECT_NE(message.find(row.error), std::string::npos) << message;
    EXPECT_EQ(runtime.code, 2) << runtime.output;
    EXPECT_EQ(sidecar.code, 2) << sidecar.output;
    // Both say exactly what the parser says.
    EXPECT_NE(runtime.output.find(message), std::string::npos) << runtime.output;
    EXPECT_NE(sidecar.output.find(message), std::string::npos) << sidecar.output;
  }
}

}  // namespace
}  // namespace trainscope::testing
