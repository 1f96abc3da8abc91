// TF_CONFIG found in other processes' environments (tf_config_env.h): a table of /proc trees
// made of fixture files, and a real child process started with TF_CONFIG.
#include "trainscope/common/tf_config_env.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

namespace trainscope {
namespace {

constexpr char kSpecA[] =
    R"({"cluster": {"ps": ["p:1"], "worker": ["w:1"]}, "task": {"type": "worker", "index": 0}})";
constexpr char kSpecA2[] =
    R"({"cluster": {"ps": ["p:1"], "worker": ["w:1"]}, "task": {"type": "ps", "index": 0}})";
constexpr char kSpecB[] = R"({"cluster": {"ps": ["q:1"]}})";

// A /proc of fixture files: pid -> environment (entries joined by NUL) and comm.
std::string FakeProcTree(const std::map<int, std::pair<std::string, std::string>>& processes) {
  const std::string root = ::testing::TempDir() + "/proc-" + std::to_string(getpid()) + "-" +
                           std::to_string(std::rand());
  std::filesystem::create_directories(root + "/self");
  for (const auto& [pid, env_comm] : processes) {
    const std::string dir = root + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/environ", std::ios::binary) << env_comm.first;
    std::ofstream(dir + "/comm") << env_comm.second << "\n";
  }
  return root;
}

std::string Env(std::initializer_list<std::string> entries) {
  std::string out;
  for (const std::string& e : entries) out += e + std::string(1, '\0');
  return out;
}

TEST(TfConfigEnv, FindsTheJobsSpecOrSaysWhyNot) {
  // One process has it, among others.
  auto found = FindTfConfigInProcesses(
      FakeProcTree({{10, {Env({"PATH=/bin", "HOME=/root"}), "bash"}},
                    {42, {Env({"PATH=/bin", std::string("TF_CONFIG=") + kSpecA}), "python3"}}}));
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->pid, 42);
  EXPECT_EQ(found->command, "python3");
  EXPECT_EQ(found->text, kSpecA);
  // Two tasks of one job (the same cluster, other tasks): the spec is theirs.
  EXPECT_TRUE(FindTfConfigInProcesses(
                  FakeProcTree({{42, {Env({std::string("TF_CONFIG=") + kSpecA}), "python3"}},
                                {43, {Env({std::string("TF_CONFIG=") + kSpecA2}), "python3"}}}))
                  .ok());
  // Two clusters: refused, naming both.
  auto two = FindTfConfigInProcesses(
      FakeProcTree({{42, {Env({std::string("TF_CONFIG=") + kSpecA}), "python3"}},
                    {77, {Env({std::string("TF_CONFIG=") + kSpecB}), "python3"}}}));
  ASSERT_FALSE(two.ok());
  EXPECT_NE(std::string(two.status().message()).find("different TF_CONFIG cluster specs"),
            std::string::npos)
      << two.status();
  // None, or only garbage: NotFound, counting what was read.
  auto none = FindTfConfigInProcesses(
      FakeProcTree({{10, {Env({"PATH=/bin"}), "bash"}},
                    {11, {Env({"TF_CONFIG={not json", "TF_CONFIG"}), "python3"}},
                    {12, {"", "kthreadd"}},
                    {13, {std::string(2 << 20, 'x'), "big"}}}));
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(none.status().message()).find("none of the 3 other processes"),
            std::string::npos)
      << none.status();
  EXPECT_EQ(FindTfConfigInProcesses("/no/such/proc").status().code(), absl::StatusCode::kNotFound);
}

TEST(TfConfigEnv, ReadsARealProcessesEnvironment) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    setenv("TF_CONFIG", kSpecB, 1);
    execlp("sleep", "sleep", "30", nullptr);
    _exit(127);
  }
  // Only the child, through the real /proc: other processes of the machine may hold TF_CONFIG.
  const std::string root = ::testing::TempDir() + "/proc-real-" + std::to_string(getpid());
  std::filesystem::create_directories(root);
  std::filesystem::create_directory_symlink("/proc/" + std::to_string(child),
                                            root + "/" + std::to_string(child));
  std::optional<FoundTfConfig> found;
  for (int i = 0; i < 200 && !found; ++i) {  // Until the child has exec'd with its environment.
    auto f = FindTfConfigInProcesses(root);
    if (f.ok()) found = *f;
    if (!found) usleep(20000);
  }
  std::filesystem::remove_all(root);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->text, kSpecB);
  EXPECT_EQ(found->command, "sleep");
}

}  // namespace
}  // namespace trainscope
