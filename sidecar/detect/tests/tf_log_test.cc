// TensorFlow's own words (tf_log.h): the table on lines TensorFlow prints (tests/tensorflow/logs
// has them whole, as captured from the real programs), bytes that are no line at all, and the
// follower on a fixture /proc tree whose task writes its log as it runs.
#include "trainscope/sidecar/tf_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "trainscope/sidecar/task_tracker.h"

namespace trainscope::sidecar {
namespace {

TEST(TfLog, TheTableNamesTheKindAndThePeer) {
  struct Case {
    const char* line;
    TfLogKind kind;
    const char* peer;  // "" when none.
    const char* address;
  };
  const Case cases[] = {
      {"2026-12-04 23:40:01.123456: I tensorflow/core/distributed_runtime/master.cc:221] "
       "CreateSession still waiting for response from worker: /job:ps/replica:0/task:1",
       TfLogKind::kCreateSessionWaiting, "ps:1", ""},
      {"I0000 00:00:1733355601.123456   4242 master.cc:221] CreateSession still waiting for "
       "response from worker: /job:worker/replica:0/task:12",
       TfLogKind::kCreateSessionWaiting, "worker:12", ""},
      {"tensorflow.python.framework.errors_impl.UnavailableError: From /job:ps/replica:0/task:0:"
       " Socket closed",
       TfLogKind::kUnavailable, "ps:0", ""},
      {"UNAVAILABLE: failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:2223:"
       " Failed to connect to remote host: Connection refused",
       TfLogKind::kUnavailable, "", "127.0.0.1:2223"},
      {"tensorflow.python.framework.errors_impl.DeadlineExceededError: Deadline Exceeded",
       TfLogKind::kDeadlineExceeded, "", ""},
      {"tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server",
       TfLogKind::kPortInUse, "", ""},
      {"ResourceExhaustedError: OOM when allocating tensor with shape[1000000,1000]",
       TfLogKind::kOutOfMemory, "", ""},
      {"step 120 loss 0.0312 rate 85.1/s", TfLogKind::kNone, "", ""},
      {"", TfLogKind::kNone, "", ""},
      {"/job:", TfLogKind::kNone, "", ""},
      {"CreateSession still waiting for response from worker: /job:/task:",
       TfLogKind::kCreateSessionWaiting, "", ""},
      {"CreateSession still waiting for response from worker: /job:ps/replica:0/task:99999999999",
       TfLogKind::kCreateSessionWaiting, "", ""},
  };
  for (const Case& c : cases) {
    const TfLogLine l = ClassifyTfLogLine(c.line);
    EXPECT_EQ(l.kind, c.kind) << c.line;
    EXPECT_EQ(l.peer ? l.peer->ShortName() : "", c.peer) << c.line;
    EXPECT_EQ(l.peer_address, c.address) << c.line;
    EXPECT_LE(l.text.size(), kMaxTfLogLine);
  }
}

// Every line of TensorFlow 2.21's own output for the classic failures (tests/tensorflow/logs,
// captured from the real programs): what the table makes of each file.
TEST(TfLog, TensorFlowsOwnLinesAsCaptured) {
  struct Case {
    const char* file;
    TfLogKind kind;    // At least one line of this kind ...
    const char* peer;  // ... naming this peer ("" = any).
  };
  const Case cases[] = {
      {"tf1-ps-never-started.chief.log", TfLogKind::kCreateSessionWaiting, "ps:1"},
      {"tf1-wrong-ps-port.worker.log", TfLogKind::kCreateSessionWaiting, "ps:1"},
      {"tf1-port-in-use.chief.log", TfLogKind::kCreateSessionWaiting, "ps:0"},
      {"tf1-port-in-use.ps.log", TfLogKind::kPortInUse, ""},
      {"tf1-port-taken-by-another-ps.ps.log", TfLogKind::kPortInUse, ""},
      {"tf1-ps-killed.chief.log", TfLogKind::kUnavailable, "ps:1"},
      {"tf2-ps-killed.chief.log", TfLogKind::kUnavailable, ""},
  };
  for (const Case& c : cases) {
    std::ifstream in(std::string(TRAINSCOPE_TF_LOGS) + "/" + c.file);
    ASSERT_TRUE(in) << c.file;
    std::string line;
    int found = 0;
    int waits = 0;
    while (std::getline(in, line)) {
      const TfLogLine l = ClassifyTfLogLine(line);
      waits += l.kind == TfLogKind::kCreateSessionWaiting;
      if (l.kind == c.kind && (*c.peer == '\0' || (l.peer && l.peer->ShortName() == c.peer))) {
        ++found;
      }
    }
    EXPECT_GT(found, 0) << c.file;
    // Only a CreateSession wait changes a state: no other case may read as one.
    if (c.kind != TfLogKind::kCreateSessionWaiting) {
      EXPECT_EQ(waits, 0) << c.file;
    }
  }
  // A ps stopped for 20 s: TensorFlow says nothing the table takes for a wait.
  std::ifstream quiet(std::string(TRAINSCOPE_TF_LOGS) + "/tf1-ps-sigstop-20s.chief.log");
  std::string line;
  while (std::getline(quiet, line)) {
    EXPECT_NE(ClassifyTfLogLine(line).kind, TfLogKind::kCreateSessionWaiting) << line;
  }
}

TEST(TfLog, AnyBytesAreBoundedAndNeverFatal) {
  std::mt19937 random(7);
  for (int i = 0; i < 2000; ++i) {
    std::string line(random() % 2000, '\0');
    for (char& c : line) c = static_cast<char>(random());
    if (i % 3 == 0) line.insert(random() % (line.size() + 1), "/job:ps/replica:0/task:");
    if (i % 5 == 0) line.insert(random() % (line.size() + 1), "UNAVAILABLE ipv4:");
    const TfLogLine l = ClassifyTfLogLine(line);
    EXPECT_LE(l.text.size(), kMaxTfLogLine);
    for (char c : l.text) EXPECT_TRUE(c >= 0x20 && c < 0x7f) << static_cast<int>(c);
  }
}

const VerifiedProcess kFollowedTask{42, 0, "", 0};

// A task's /proc entry made of files: fd/2 its log (a regular file), environ its TF_CONFIG.
class FakeTaskProc {
 public:
  explicit FakeTaskProc(const std::string& tf_config)
      : root_(::testing::TempDir() + "/tf-log-proc-" + std::to_string(getpid())) {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ + "/42/fd");
    std::ofstream(root_ + "/42/environ", std::ios::binary)
        << "PATH=/bin" << '\0' << "TF_CONFIG=" << tf_config << '\0';
    Write(
        "history: CreateSession still waiting for response from worker: "
        "/job:ps/replica:0/task:0\n");
  }
  ~FakeTaskProc() { std::filesystem::remove_all(root_); }
  void Write(const std::string& text) { std::ofstream(root_ + "/42/fd/2", std::ios::app) << text; }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(TfLog, TheFollowerMakesTheTaskWaitOnWhomItsLogNamesAtItsOwnAddress) {
  // Its TF_CONFIG has ps:1 at a port where no ps of the cluster listens: the seeds' typo.
  FakeTaskProc task(
      R"({"cluster": {"ps": ["10.0.0.1:2222", "10.0.0.2:9999"], "worker": ["10.0.0.3:2222"]},
                   "task": {"type": "worker", "index": 0}})");
  TfLogFollower follower(ProcessFinder{}, task.root());
  HeartbeatInfo first;
  follower.Follow(kFollowedTask, 1000, &first);
  EXPECT_FALSE(first.waiting);  // What it wrote before it was followed is history.
  EXPECT_NE(first.log_path.find("42"), std::string::npos) << first.log_path;

  task.Write(
      "I master.cc:221] CreateSession still waiting for response from worker: "
      "/job:ps/replica:0/task:1\n");
  HeartbeatInfo waiting;
  follower.Follow(kFollowedTask, 1001, &waiting);
  ASSERT_TRUE(waiting.waiting);
  EXPECT_EQ(waiting.waiting_what, "CreateSession");
  EXPECT_DOUBLE_EQ(waiting.waiting_since_unix, 991);  // TensorFlow says it after 10 s.
  ASSERT_EQ(waiting.waiting_on.size(), 1u);
  EXPECT_EQ(waiting.waiting_on[0].peer.ShortName(), "ps:1");
  EXPECT_EQ(waiting.waiting_on[0].address, "10.0.0.2:9999");
  EXPECT_EQ(waiting.waiting_on[0].last_error,
            "TensorFlow logs \"CreateSession still waiting for response from worker: "
            "/job:ps/replica:0/task:1\"");

  // Half a line, then the rest: one line.
  task.Write("CreateSession still waiting for response from wor");
  HeartbeatInfo half;
  follower.Follow(kFollowedTask, 1011, &half);
  task.Write("ker: /job:ps/replica:0/task:1\n");
  HeartbeatInfo again;
  follower.Follow(kFollowedTask, 1012, &again);
  ASSERT_TRUE(again.waiting);
  EXPECT_DOUBLE_EQ(again.waiting_since_unix, 991);  // The same wait.

  // No such line for longer than TensorFlow repeats it: the wait is over.
  task.Write("step 10 loss 0.5 rate 80/s\n");
  HeartbeatInfo done;
  follower.Follow(kFollowedTask, 1012 + TfLogFollower::kWaitFreshS + 1, &done);
  EXPECT_FALSE(done.waiting);
  EXPECT_TRUE(done.waiting_on.empty());
}

TEST(TfLog, AHugeLogIsReadABoundedAmountAPoll) {
  FakeTaskProc task(R"({"cluster": {"ps": ["10.0.0.1:2222"]}})");
  TfLogFollower follower(ProcessFinder{}, task.root());
  HeartbeatInfo hb;
  follower.Follow(kFollowedTask, 1000, &hb);
  task.Write(std::string(3 * kMaxLogChunk, 'x') +
             "\nCreateSession still waiting for response from worker: /job:ps/replica:0/task:0\n");
  int polls = 0;
  HeartbeatInfo seen;
  while (!seen.waiting && polls < 10) {
    seen = HeartbeatInfo{};
    follower.Follow(kFollowedTask, 1001 + polls++, &seen);
  }
  EXPECT_TRUE(seen.waiting);
  EXPECT_EQ(polls, 4);  // Three bounded reads of x, then the line.
}

TEST(TfLog, NoLogFileNoWaitAndNoPath) {
  const std::string root = ::testing::TempDir() + "/tf-log-none-" + std::to_string(getpid());
  std::filesystem::create_directories(root + "/7/fd");
  TfLogFollower follower(ProcessFinder{}, root);
  HeartbeatInfo hb;
  follower.Follow({7, 0, "", 0}, 1000, &hb);
  EXPECT_FALSE(hb.waiting);
  EXPECT_EQ(hb.log_path, "");
  std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace trainscope::sidecar
