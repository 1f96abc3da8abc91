// Table tests of the sidecar's cluster spec parser, task lists and local-host matching.
#include "trainscope/sidecar/cluster_spec.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

TEST(ClusterSpec, ParsesTfConfigWithAndWithoutTask) {
  auto spec = ParseClusterSpec(
      R"({"cluster": {"ps": ["10.0.0.1:2222"], "worker": ["h1:2222", "[::1]:2223"]},
          "task": {"type": "worker", "index": 1}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->Tasks().size(), 3u);
  EXPECT_EQ(*spec->Address({"worker", 1}), "[::1]:2223");
  ASSERT_TRUE(spec->task);
  EXPECT_EQ(spec->task->Name(), "worker:1");
  auto no_task = ParseClusterSpec(R"({"cluster": {"ps": ["a:1"]}})");
  ASSERT_TRUE(no_task.ok());
  EXPECT_FALSE(no_task->task);
}

TEST(ClusterSpec, ErrorsQuoteTheOffendingPart) {
  struct Case {
    const char* json;
    const char* message;
  } cases[] = {
      {"", "not valid JSON"},
      {"{\"cluster\": ", "not valid JSON"},
      {"42", "expected a JSON object, got 42"},
      {"{}", "no \"cluster\" key"},
      {"{\"cluster\": []}", "\"cluster\" must map job names"},
      {"{\"cluster\": {}}", "\"cluster\" must map job names"},
      {"{\"cluster\": {\"ps\": []}}", "cluster.ps lists no address"},
      {"{\"cluster\": {\"ps\": [\"a:1\", 7]}}", "cluster.ps[1] = 7 is not host:port"},
      {"{\"cluster\": {\"ps\": [\"a:99999\"]}}", "cluster.ps[0] = \"a:99999\" is not host:port"},
      {"{\"cluster\": {\"ps\": [\"a\"]}}", "cluster.ps[0] = \"a\" is not host:port"},
      {"{\"cluster\": {\"p:s\": [\"a:1\"]}}", "job name \"p:s\""},
      {"{\"cluster\": {\"ps\": [\"a:1\"]}, \"task\": 3}", "\"task\" must be an object"},
      {"{\"cluster\": {\"ps\": [\"a:1\"]}, \"task\": {\"index\": 0}}", "task.type"},
      {"{\"cluster\": {\"ps\": [\"a:1\"]}, \"task\": {\"type\": \"ps\", \"index\": \"0\"}}",
       "task.index must be an integer"},
      {"{\"cluster\": {\"ps\": [\"a:1\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}",
       "is not in the cluster"},
  };
  for (const Case& c : cases) {
    auto spec = ParseClusterSpec(c.json);
    ASSERT_FALSE(spec.ok()) << c.json;
    EXPECT_NE(std::string(spec.status().message()).find(c.message), std::string::npos)
        << c.json << " -> " << spec.status().message();
    EXPECT_EQ(std::string(spec.status().message()).find('\n'), std::string::npos);
  }
}

TEST(ClusterSpec, TaskLists) {
  auto spec = ParseClusterSpec(R"({"cluster": {"ps": ["a:1", "a:2"], "worker": ["b:1"]}})");
  ASSERT_TRUE(spec.ok());
  auto list = ParseTaskList("ps:1, worker:0,ps:1", *spec);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].Name(), "ps:1");
  EXPECT_FALSE(ParseTaskList("ps:2", *spec).ok());
  EXPECT_FALSE(ParseTaskList("ps", *spec).ok());
  EXPECT_FALSE(ParseTaskList("ps:-1", *spec).ok());
  EXPECT_FALSE(ParseTaskList("chief:0", *spec).ok());
}

TEST(ClusterSpec, SplitHostPort) {
  EXPECT_EQ(SplitHostPort("h:1")->first, "h");
  EXPECT_EQ(SplitHostPort("[::1]:80")->first, "::1");
  EXPECT_EQ(SplitHostPort("[::1]:80")->second, 80);
  EXPECT_FALSE(SplitHostPort(":80").ok());
  EXPECT_FALSE(SplitHostPort("h:").ok());
  EXPECT_FALSE(SplitHostPort("h:x").ok());
}

TEST(LocalHosts, LoopbackHostnameAndInterfaces) {
  LocalHosts hosts("node7", {"10.1.2.3", "fe80::1"});
  EXPECT_TRUE(hosts.IsLocal("127.0.0.1"));
  EXPECT_TRUE(hosts.IsLocal("127.8.9.1"));
  EXPECT_TRUE(hosts.IsLocal("localhost"));
  EXPECT_TRUE(hosts.IsLocal("::1"));
  EXPECT_TRUE(hosts.IsLocal("node7"));
  EXPECT_TRUE(hosts.IsLocal("10.1.2.3"));
  EXPECT_FALSE(hosts.IsLocal("10.1.2.4"));
  EXPECT_FALSE(hosts.IsLocal("no-such-host.invalid"));
}

}  // namespace
}  // namespace trainscope::sidecar
