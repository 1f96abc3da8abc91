// Table tests of the one TF_CONFIG parser: every bad spec is a one-line error quoting what is
// wrong; task names and task lists; host:port addresses. The same table runs against both
// binaries in tests/integration/spec_table_test.py.
#include "trainscope/common/cluster_spec.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace trainscope {
namespace {

struct BadCase {
  const char* name;
  const char* json;
  const char* expected;  // A part of the error message.
};

class BadTfConfigTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadTfConfigTest, IsOneLineErrorQuotingTheProblem) {
  const BadCase& c = GetParam();
  auto parsed = ParseTfConfig(c.json, /*require_task=*/true);
  ASSERT_FALSE(parsed.ok()) << c.json;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(parsed.status().message());
  EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Table, BadTfConfigTest,
    ::testing::Values(
        BadCase{"empty", "", "not valid JSON"},
        BadCase{"bad_json", R"({"cluster": {"ps": ["a:1"]})", "not valid JSON: '{\"cluster\""},
        BadCase{"not_object", "[1,2]", "must be a JSON object, got '[1,2]'"},
        BadCase{"no_cluster", R"({"task": {"type": "ps", "index": 0}})", "no \"cluster\""},
        BadCase{"cluster_list", R"({"cluster": ["a:1"]})", "must map job names"},
        BadCase{"job_not_list", R"({"cluster": {"ps": "a:1"}})", "job 'ps' must be a list"},
        BadCase{"job_as_object", R"({"cluster": {"ps": {"0": "a:1"}}})", "job 'ps' must be a list"},
        BadCase{"address_not_string", R"({"cluster": {"ps": [1]}})", "non-string address '1'"},
        BadCase{"no_jobs", R"({"cluster": {}})", "lists no jobs"},
        BadCase{"empty_job", R"({"cluster": {"ps": []}})", "job 'ps' lists no tasks"},
        BadCase{"job_with_colon", R"({"cluster": {"p:s": ["a:1"]}})", "job name 'p:s'"},
        BadCase{"job_with_slash", R"({"cluster": {"p/s": ["a:1"]}})", "job name 'p/s'"},
        BadCase{"job_empty_name", R"({"cluster": {"": ["a:1"]}})", "job name ''"},
        BadCase{"no_port", R"({"cluster": {"ps": ["host"]}})", "ps:0: bad address 'host'"},
        BadCase{"bad_port", R"({"cluster": {"ps": ["host:99999"]}})", "'host:99999': port"},
        BadCase{"port_text", R"({"cluster": {"ps": ["host:http"]}})", "'host:http': port"},
        BadCase{"port_plus", R"({"cluster": {"ps": ["host:+1"]}})", "'host:+1': port"},
        BadCase{"no_host", R"({"cluster": {"ps": [":2222"]}})", "':2222': no host"},
        BadCase{"bad_host_char", R"({"cluster": {"ps": ["ho st:1"]}})", "host has character"},
        BadCase{"v6_no_brackets", R"({"cluster": {"ps": ["::1:2222"]}})", "must be written [addr]"},
        BadCase{"duplicate", R"({"cluster": {"ps": ["a:1"], "worker": ["a:1"]}})",
                "'a:1' is listed twice: for ps:0 and for worker:0"},
        BadCase{"no_task", R"({"cluster": {"ps": ["a:1"]}})", "no \"task\""},
        BadCase{"task_not_object", R"({"cluster": {"ps": ["a:1"]}, "task": 3})",
                "\"task\" must be"},
        BadCase{"task_no_type", R"({"cluster": {"ps": ["a:1"]}, "task": {"index": 0}})",
                "\"task\" must be"},
        BadCase{"index_out_of_range",
                R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 1}})",
                "task index 1 is out of range: job 'ps' has 1 task"},
        BadCase{"negative_index",
                R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": -1}})",
                "out of range"},
        BadCase{"index_text",
                R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": "0"}})",
                "must be an integer, got '\"0\"'"},
        BadCase{"unknown_job",
                R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "worker", "index": 0}})",
                "no job 'worker'"}),
    [](const auto& p) { return std::string(p.param.name); });

TEST(TfConfigTest, ParsesTensorFlowFormat) {
  auto parsed = ParseTfConfig(
      R"({"cluster": {"chief": ["c:2222"], "ps": ["p0:2222", "p1:2222"], "worker": ["w0:2222"],
          "evaluator": ["[::1]:2300"]}, "task": {"type": "ps", "index": 1}})",
      true);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->task->ShortName(), "ps:1");
  EXPECT_EQ(parsed->task->FullName(), "/job:ps/replica:0/task:1");
  EXPECT_EQ(parsed->cluster.NumTasks("ps"), 2);
  EXPECT_EQ(parsed->cluster.NumTasks("evaluator"), 1);
  EXPECT_EQ(*parsed->cluster.AddressOf({"ps", 1}), "p1:2222");
  EXPECT_EQ(*parsed->cluster.FindAddress({"evaluator", 0}), "[::1]:2300");
  EXPECT_EQ(parsed->cluster.FindAddress({"ps", 2}), nullptr);
  EXPECT_EQ(parsed->cluster.AllTasks().size(), 5u);
}

TEST(TfConfigTest, TaskMayBeAbsentOrEmptyWhenNotRequired) {
  for (const char* json :
       {R"({"cluster": {"ps": ["a:1"]}})", R"({"cluster": {"ps": ["a:1"]}, "task": null})",
        R"({"cluster": {"ps": ["a:1"]}, "task": {}})"}) {
    auto parsed = ParseTfConfig(json, false);
    ASSERT_TRUE(parsed.ok()) << json << ": " << parsed.status();
    EXPECT_FALSE(parsed->task.has_value());
  }
  // A task that is given is checked even when it is not required.
  EXPECT_FALSE(
      ParseTfConfig(R"({"cluster": {"ps": ["a:1"]}, "task": {"type": "ps", "index": 3}})", false)
          .ok());
}

// TF_CONFIG as TensorFlow gives it to each task of a job with a chief and an evaluator: the
// evaluator is outside the cluster, and only a process that need not be a task accepts it.
TEST(TfConfigTest, ChiefAndEvaluatorAsTensorFlowDefinesThem) {
  constexpr char kCluster[] =
      R"("cluster": {"chief": ["c:1"], "ps": ["p:1", "p:2"], "worker": ["w:1", "w:2"]})";
  auto chief = ParseTfConfig(
      absl::StrCat("{", kCluster, R"(, "task": {"type": "chief", "index": 0}})"), true);
  ASSERT_TRUE(chief.ok()) << chief.status();
  EXPECT_EQ(chief->task->ShortName(), "chief:0");
  const std::string evaluator =
      absl::StrCat("{", kCluster, R"(, "task": {"type": "evaluator", "index": 0}})");
  auto watcher = ParseTfConfig(evaluator, false);
  ASSERT_TRUE(watcher.ok()) << watcher.status();
  EXPECT_FALSE(watcher->task.has_value());
  EXPECT_EQ(watcher->cluster.AllTasks().size(), 5u);
  auto runtime = ParseTfConfig(evaluator, true);
  ASSERT_FALSE(runtime.ok());
  EXPECT_NE(std::string(runtime.status().message()).find("an evaluator is outside the cluster"),
            std::string::npos)
      << runtime.status();
  // A cluster that lists evaluators makes them ordinary tasks, checked as any.
  auto listed = ParseTfConfig(
      R"({"cluster": {"ps": ["p:1"], "evaluator": ["e:1"]}, "task": {"type": "evaluator", "index": 1}})",
      false);
  EXPECT_FALSE(listed.ok());
}

TEST(ClusterSpecTest, FingerprintAndDifference) {
  auto a = *ClusterSpec::FromJobs({{"ps", {"h:1"}}, {"worker", {"h:2", "h:3"}}});
  auto b = *ClusterSpec::FromJobs({{"ps", {"h:1"}}, {"worker", {"h:2", "h:3", "h:4"}}});
  auto a2 = *ClusterSpec::FromJobs({{"worker", {"h:2", "h:3"}}, {"ps", {"h:1"}}});
  EXPECT_EQ(a.Fingerprint(), a2.Fingerprint());
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
  EXPECT_EQ(DescribeSpecDifference(a, "ps:0", a2, "worker:0"), "");
  EXPECT_EQ(DescribeSpecDifference(a, "ps:0", b, "worker:0"),
            "job 'worker' lists 2 tasks [h:2, h:3] in ps:0's spec but 3 [h:2, h:3, h:4] in "
            "worker:0's");
  auto c = *ClusterSpec::FromJobs({{"ps", {"h:1"}}, {"chief", {"h:9"}}});
  EXPECT_NE(DescribeSpecDifference(a, "x", c, "y").find("job 'chief' is only in y's spec"),
            std::string::npos);
}

TEST(ParseHostPortTest, AcceptsNamesV4AndV6) {
  auto v6 = ParseHostPort("[::1]:2222");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 2222);
  auto name = ParseHostPort("ps-0.train.svc:1");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->host, "ps-0.train.svc");
  EXPECT_TRUE(ParseHostPort("[fe80::1%eth0]:1").ok());
  for (const char* bad : {"[::1]2222", "h:0", "h:+1", "h:", ":80", "h:x", "h", "[::1]", "a b:1"}) {
    EXPECT_FALSE(ParseHostPort(bad).ok()) << bad;
  }
}

TEST(JoinHostPortTest, BracketsV6AndParsesBack) {
  EXPECT_EQ(JoinHostPort("10.0.0.1", 2222), "10.0.0.1:2222");
  EXPECT_EQ(JoinHostPort("ps-0.train.svc", 1), "ps-0.train.svc:1");
  EXPECT_EQ(JoinHostPort("::1", 4317), "[::1]:4317");
  for (const char* host : {"10.0.0.1", "::1", "fe80::1%eth0", "n1"}) {
    auto back = ParseHostPort(JoinHostPort(host, 9400));
    ASSERT_TRUE(back.ok()) << host;
    EXPECT_EQ(back->host, host);
    EXPECT_EQ(back->port, 9400);
  }
}

TEST(TaskRefTest, ParsesShortNamesAndLists) {
  EXPECT_EQ(ParseTaskRef(" ps:3 ")->ShortName(), "ps:3");
  for (const char* bad : {"ps", "ps:-1", ":0", "ps:x", "p s:0", "ps:1.5", "a:b:0"}) {
    EXPECT_FALSE(ParseTaskRef(bad).ok()) << bad;
  }
  auto spec = ParseTfConfig(R"({"cluster": {"ps": ["a:1", "a:2"], "worker": ["b:1"]}})", false);
  ASSERT_TRUE(spec.ok());
  auto list = ParseTaskList("ps:1, worker:0,ps:1", spec->cluster);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].ShortName(), "ps:1");
  EXPECT_FALSE(ParseTaskList("ps:2", spec->cluster).ok());
  EXPECT_FALSE(ParseTaskList("chief:0", spec->cluster).ok());
}

// Arbitrary bytes never crash the parser (a fuzz target runs longer: tests/fuzz).
TEST(TfConfigTest, SurvivesGarbage) {
  std::string seed = R"({"cluster": {"ps": ["a:1", "b:2"]}, "task": {"type": "ps", "index": 0}})";
  uint32_t x = 12345;
  for (int round = 0; round < 5000; ++round) {
    std::string s = seed;
    for (int k = 0; k < 3; ++k) {
      x = x * 1103515245 + 12345;
      size_t pos = (x >> 8) % s.size();
      x = x * 1103515245 + 12345;
      s[pos] = static_cast<char>(x >> 16);
    }
    auto parsed = ParseTfConfig(s, round % 2 == 0);
    if (!parsed.ok()) {
      EXPECT_FALSE(parsed.status().message().empty());
    }
  }
}

}  // namespace
}  // namespace trainscope
