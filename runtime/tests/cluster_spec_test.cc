// Table tests of TF_CONFIG parsing: every bad spec is a one-line error quoting what is wrong.
#include "trainscope/runtime/cluster_spec.h"

#include <gtest/gtest.h>

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
        BadCase{"job_not_list", R"({"cluster": {"ps": "a:1"}})", "job \"ps\" must be a list"},
        BadCase{"address_not_string", R"({"cluster": {"ps": [1]}})", "non-string address '1'"},
        BadCase{"no_jobs", R"({"cluster": {}})", "lists no jobs"},
        BadCase{"empty_job", R"({"cluster": {"ps": []}})", "job 'ps' lists no tasks"},
        BadCase{"no_port", R"({"cluster": {"ps": ["host"]}})", "ps:0: bad address 'host'"},
        BadCase{"bad_port", R"({"cluster": {"ps": ["host:99999"]}})", "'host:99999': port"},
        BadCase{"port_text", R"({"cluster": {"ps": ["host:http"]}})", "'host:http': port"},
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
  EXPECT_EQ(parsed->cluster.AllTasks().size(), 5u);
}

TEST(TfConfigTest, TaskMayBeAbsentWhenNotRequired) {
  auto parsed = ParseTfConfig(R"({"cluster": {"ps": ["a:1"]}})", false);
  ASSERT_TRUE(parsed.ok());
  EXPECT_FALSE(parsed->task.has_value());
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
  std::string host;
  int port = 0;
  ASSERT_TRUE(ParseHostPort("[::1]:2222", &host, &port).ok());
  EXPECT_EQ(host, "::1");
  EXPECT_EQ(port, 2222);
  ASSERT_TRUE(ParseHostPort("ps-0.train.svc:1", &host, &port).ok());
  EXPECT_EQ(host, "ps-0.train.svc");
  EXPECT_FALSE(ParseHostPort("[::1]2222", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("h:0", &host, &port).ok());
  EXPECT_FALSE(ParseHostPort("h:+1", &host, &port).ok());
}

// Arbitrary bytes never crash the parser.
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
