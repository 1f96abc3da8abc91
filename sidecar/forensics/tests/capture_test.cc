// Tests of Capture and FormatSnapshot against real processes (forensics_wedge, started with
// fork+exec) and real ptrace. Tests that attach need root (as in CI) and skip otherwise (fail
// under CI=true: skip.h).

#include "trainscope/forensics/capture.h"

#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "skip.h"

#ifndef FORENSICS_WEDGE
#error "FORENSICS_WEDGE must name the forensics_wedge binary"
#endif

namespace trainscope::forensics {
namespace {

using std::chrono::milliseconds;

#define SKIP_UNLESS_ROOT() \
  TRAINSCOPE_SKIP_UNLESS(geteuid() == 0, "needs root: attaches to processes with ptrace")

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The state letter of /proc/PID/stat, '?' when there is no such process.
char ProcState(pid_t pid) {
  const std::string stat = ReadAll("/proc/" + std::to_string(pid) + "/stat");
  const size_t close_paren = stat.rfind(')');
  return close_paren == std::string::npos || close_paren + 2 >= stat.size() ? '?'
                                                                            : stat[close_paren + 2];
}

// The line of /proc/PID/status that starts with `key` ("TracerPid:"), empty when there is none.
std::string StatusLine(pid_t pid, const std::string& key) {
  std::istringstream status(ReadAll("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(key, 0) == 0) return line;
  }
  return "";
}

std::string TracerPidLine(pid_t pid) { return StatusLine(pid, "TracerPid:"); }

// The Threads: count of /proc/PID/status, 0 when there is no such process.
int ThreadsOf(pid_t pid) {
  const std::string line = StatusLine(pid, "Threads:");
  return line.empty() ? 0 : std::atoi(line.c_str() + 8);
}

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// A forensics_wedge child process; killed and reaped when destroyed.
class Wedge {
 public:
  explicit Wedge(const char* mode) {
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      close(out[0]);
      close(out[1]);
      execl(FORENSICS_WEDGE, FORENSICS_WEDGE, mode, static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    pollfd fd = {out[0], POLLIN, 0};
    char buf[16] = {};
    ready_ = pid_ > 0 && poll(&fd, 1, 10000) == 1 && read(out[0], buf, sizeof(buf) - 1) > 0 &&
             std::string(buf) == "ready\n";
    close(out[0]);
  }
  ~Wedge() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  Wedge(const Wedge&) = delete;
  Wedge& operator=(const Wedge&) = delete;

  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }
  // Alive, not reaped, and not stopped.
  bool Running() const {
    return kill(pid_, 0) == 0 && waitpid(pid_, nullptr, WNOHANG) == 0 && ProcState(pid_) != 'T' &&
           ProcState(pid_) != 'Z';
  }

 private:
  pid_t pid_ = -1;
  bool ready_ = false;
};

const ThreadSnapshot* FindThread(const ProcessSnapshot& snapshot, const std::string& name) {
  for (const ThreadSnapshot& thread : snapshot.threads) {
    if (thread.name == name) return &thread;
  }
  return nullptr;
}

const Frame* FindFrame(const ThreadSnapshot& thread, const std::string& function_part) {
  for (const Frame& frame : thread.frames) {
    if (frame.function.find(function_part) != std::string::npos) return &frame;
  }
  return nullptr;
}

// Index of the first frame whose function contains `part`, or -1.
int FrameIndex(const ThreadSnapshot& thread, const std::string& part) {
  const Frame* frame = FindFrame(thread, part);
  return frame == nullptr ? -1 : static_cast<int>(frame - thread.frames.data());
}

void ExpectLockedIn(const ProcessSnapshot& snapshot, const std::string& name,
                    const std::string& function) {
  SCOPED_TRACE(name);
  const ThreadSnapshot* thread = FindThread(snapshot, name);
  ASSERT_NE(thread, nullptr) << FormatSnapshot(snapshot);
  EXPECT_EQ(thread->state, 'S');
  EXPECT_EQ(thread->syscall, "futex");
  const int owner = FrameIndex(*thread, function);
  const int lock = FrameIndex(*thread, "lock");
  ASSERT_GE(owner, 0) << FormatSnapshot(snapshot);
  ASSERT_GE(lock, 0) << FormatSnapshot(snapshot);
  EXPECT_LT(lock, owner) << "innermost first";
  const Frame& frame = thread->frames[static_cast<size_t>(owner)];
  EXPECT_EQ(frame.module, "forensics_wedge");
#ifdef __clang__
  // elfutils 0.188 reads clang's line table but not the scopes of its DWARF 5: the line is that
  // of the innermost inlined code (std::mutex::lock's header), not the function's own.
  EXPECT_FALSE(frame.file.empty());
#else
  EXPECT_NE(frame.file.find("wedge_main.cc"), std::string::npos) << frame.file;
#endif
  EXPECT_GT(frame.line, 0);
}

TEST(CaptureTest, DeadlockShowsBothThreadsInTheirLockCalls) {
  SKIP_UNLESS_ROOT();
  Wedge wedge("deadlock");
  ASSERT_TRUE(wedge.ready());
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(wedge.pid());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(snapshot->stacks) << snapshot->stacks_error;
  EXPECT_EQ(snapshot->pid, wedge.pid());
  EXPECT_EQ(snapshot->command, "forensics_wedge");
  ASSERT_EQ(snapshot->threads.size(), 3u);
  EXPECT_EQ(snapshot->threads[0].tid, wedge.pid()) << "main thread first";
  EXPECT_NE(FindFrame(snapshot->threads[0], "WaitForever"), nullptr) << FormatSnapshot(*snapshot);
  ExpectLockedIn(*snapshot, "lock-a", "TakeAThenB");
  ExpectLockedIn(*snapshot, "lock-b", "TakeBThenA");
  EXPECT_EQ(TracerPidLine(wedge.pid()), "TracerPid:\t0");
  EXPECT_TRUE(wedge.Running());
}

TEST(CaptureTest, StoppedProcessStaysStopped) {
  SKIP_UNLESS_ROOT();
  Wedge wedge("spin");
  ASSERT_TRUE(wedge.ready());
  ASSERT_EQ(kill(wedge.pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitFor([&] { return ProcState(wedge.pid()) == 'T'; }));
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(wedge.pid());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(snapshot->state, 'T');
  ASSERT_EQ(snapshot->threads.size(), 31u);
  for (const ThreadSnapshot& thread : snapshot->threads) {
    EXPECT_FALSE(thread.frames.empty()) << thread.tid << ": " << thread.stack_error;
  }
  EXPECT_EQ(TracerPidLine(wedge.pid()), "TracerPid:\t0");
  // Every thread stays stopped for a while after the capture.
  for (int i = 0; i < 10; ++i) {
    for (const ThreadSnapshot& thread : snapshot->threads) {
      const std::string stat = ReadAll("/proc/" + std::to_string(wedge.pid()) + "/task/" +
                                       std::to_string(thread.tid) + "/stat");
      ASSERT_NE(stat.find(") T "), std::string::npos) << stat;
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_EQ(kill(wedge.pid(), SIGCONT), 0);
  EXPECT_TRUE(WaitFor([&] { return ProcState(wedge.pid()) == 'S'; }));
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(wedge.Running());
}

TEST(CaptureTest, NoSuchProcessIsNotFound) {
  int pid_max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(pid_max + 1);
  ASSERT_EQ(snapshot.status().code(), absl::StatusCode::kNotFound) << snapshot.status();
  EXPECT_NE(snapshot.status().message().find(std::to_string(pid_max + 1)), std::string::npos);
}

TEST(CaptureTest, ZombieIsNotFound) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(0);
  // Under TSan the child has a second thread (the sanitizer's), which may still be exiting when
  // the main thread is already a zombie: that process still runs, so wait until it is gone.
  ASSERT_TRUE(WaitFor([&] { return ProcState(child) == 'Z' && ThreadsOf(child) == 1; }));
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(child);
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kNotFound)
      << (snapshot.ok() ? FormatSnapshot(*snapshot) : snapshot.status().ToString());
  EXPECT_NE(snapshot.status().message().find(std::to_string(child)), std::string::npos);
  waitpid(child, nullptr, 0);
}

// Its main thread exited (Z), another still runs: the process is there to capture.
TEST(CaptureTest, MainThreadGoneOtherThreadsStillCaptured) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::thread([] { pause(); }).detach();
    syscall(SYS_exit, 0);  // This thread only (pthread_exit would unwind through gtest).
  }
  ASSERT_TRUE(WaitFor([&] { return ProcState(child) == 'Z'; }));
  CaptureOptions options;
  options.stacks = false;
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(child, options);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // The exited main thread and the one still running (a sanitizer may add its own).
  EXPECT_GE(snapshot->threads.size(), 2u) << FormatSnapshot(*snapshot);
  EXPECT_EQ(snapshot->threads[0].tid, child) << FormatSnapshot(*snapshot);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(CaptureTest, BadPidIsInvalidArgument) {
  EXPECT_EQ(Capture(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Capture(-5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Capture(int64_t{1} << 40).status().code(), absl::StatusCode::kInvalidArgument);
}

// Runs Capture(pid) in a child that dropped to uid/gid 65534; returns its summary line(s).
std::string CaptureAsNobody(pid_t pid) {
  int out[2];
  if (pipe(out) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child == 0) {
    close(out[0]);
    std::string summary = "could not drop privileges";
    if (setgroups(0, nullptr) == 0 && setgid(65534) == 0 && setuid(65534) == 0) {
      absl::StatusOr<ProcessSnapshot> s = Capture(pid);
      summary = !s.ok() ? s.status().ToString()
                        : "stacks=" + std::to_string(s->stacks) +
                              " threads=" + std::to_string(s->threads.size()) +
                              " name0=" + s->threads[0].name + "\n" + s->stacks_error;
    }
    (void)!write(out[1], summary.data(), summary.size());
    _exit(0);
  }
  close(out[1]);
  std::string summary;
  char buf[1024];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) summary.append(buf, size_t(n));
  close(out[0]);
  waitpid(child, nullptr, 0);
  return summary;
}

TEST(CaptureTest, WithoutPermissionListsThreadsAndSaysWhatToGrant) {
  SKIP_UNLESS_ROOT();
  Wedge wedge("deadlock");
  ASSERT_TRUE(wedge.ready());
  const std::string summary = CaptureAsNobody(wedge.pid());
  EXPECT_EQ(summary.rfind("stacks=0 threads=3 name0=forensics_wedge\n", 0), 0u) << summary;
  EXPECT_NE(summary.find("cannot attach to pid " + std::to_string(wedge.pid()) + " with ptrace"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("CAP_SYS_PTRACE"), std::string::npos) << summary;
  EXPECT_NE(summary.find("hostPID"), std::string::npos) << summary;
  EXPECT_EQ(TracerPidLine(wedge.pid()), "TracerPid:\t0");
  EXPECT_TRUE(wedge.Running());
}

TEST(CaptureTest, ProcOnlyWhenStacksNotAsked) {
  Wedge wedge("deadlock");
  ASSERT_TRUE(wedge.ready());
  CaptureOptions options;
  options.stacks = false;
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(wedge.pid(), options);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_FALSE(snapshot->stacks);
  EXPECT_NE(snapshot->stacks_error.find("not asked"), std::string::npos);
  ASSERT_EQ(snapshot->threads.size(), 3u);
  const ThreadSnapshot* lock_a = FindThread(*snapshot, "lock-a");
  ASSERT_NE(lock_a, nullptr);
  EXPECT_EQ(lock_a->state, 'S');
  EXPECT_TRUE(lock_a->frames.empty());
}

TEST(CaptureTest, OwnProcessGetsProcDataOnly) {
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(getpid());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_FALSE(snapshot->stacks);
  EXPECT_FALSE(snapshot->stacks_error.empty());
  ASSERT_FALSE(snapshot->threads.empty());
  EXPECT_EQ(snapshot->threads[0].tid, getpid());
  EXPECT_EQ(snapshot->threads[0].state, 'R');
}

TEST(CaptureTest, MaxThreadsAndMaxFramesBoundTheWork) {
  SKIP_UNLESS_ROOT();
  Wedge wedge("spin");
  ASSERT_TRUE(wedge.ready());
  CaptureOptions options;
  options.max_threads = 2;
  options.max_frames = 2;
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(wedge.pid(), options);
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_EQ(snapshot->threads.size(), 31u);
  for (size_t i = 0; i < snapshot->threads.size(); ++i) {
    const ThreadSnapshot& thread = snapshot->threads[i];
    if (i < 2) {
      EXPECT_EQ(thread.frames.size(), 2u);
      EXPECT_NE(thread.stack_error.find("max_frames"), std::string::npos) << thread.stack_error;
    } else {
      EXPECT_TRUE(thread.frames.empty());
      EXPECT_NE(thread.stack_error.find("max_threads"), std::string::npos) << thread.stack_error;
    }
  }
}

TEST(CaptureTest, PauseIsMeasured) {
  SKIP_UNLESS_ROOT();
  Wedge wedge("spin");
  ASSERT_TRUE(wedge.ready());
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(wedge.pid());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  ASSERT_EQ(snapshot->threads.size(), 31u);
  for (const ThreadSnapshot& thread : snapshot->threads) {
    EXPECT_NE(FindFrame(thread, thread.tid == wedge.pid() ? "WaitForever" : "SleepingThread"),
              nullptr)
        << thread.tid << ": " << thread.stack_error;
  }
  EXPECT_GT(snapshot->pause_ms_max, 0);
  EXPECT_GE(snapshot->pause_ms_total, snapshot->pause_ms_max);
  EXPECT_TRUE(wedge.Running());
}

TEST(FormatSnapshotTest, OneBlockPerThreadInnermostFirst) {
  ProcessSnapshot snapshot;
  snapshot.pid = 42;
  snapshot.command = "trainer";
  snapshot.state = 'S';
  snapshot.stacks = true;
  ThreadSnapshot thread;
  thread.tid = 43;
  thread.name = "worker-train";
  thread.state = 'S';
  thread.wchan = "futex_wait";
  thread.syscall = "futex";
  thread.frames.resize(3);
  thread.frames[0].pc = 0x7f0000001000;
  thread.frames[0].function = "__lll_lock_wait";
  thread.frames[0].module = "libc.so.6";
  thread.frames[1].pc = 0x555500002000;
  thread.frames[1].function = "trainscope::Pull()";
  thread.frames[1].module = "trainer";
  thread.frames[1].file = "pull.cc";
  thread.frames[1].line = 12;
  thread.frames[2].pc = 0x555500003000;
  thread.stack_error = "cut at max_frames (3)";
  snapshot.threads.push_back(thread);
  const std::string text = FormatSnapshot(snapshot);
  EXPECT_NE(text.find("Thread 43 \"worker-train\" (S, futex_wait, futex)\n"
                      "  #0  0x00007f0000001000 __lll_lock_wait (libc.so.6)\n"
                      "  #1  0x0000555500002000 trainscope::Pull() (trainer) at pull.cc:12\n"
                      "  #2  0x0000555500003000 \?\? (\?\?)\n"
                      "  (cut at max_frames (3))\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.rfind("Process 42 \"trainer\" (S), 1 threads", 0), 0u) << text;
}

TEST(FormatSnapshotTest, RealDeadlockReadsInnermostFirst) {
  SKIP_UNLESS_ROOT();
  Wedge wedge("deadlock");
  ASSERT_TRUE(wedge.ready());
  absl::StatusOr<ProcessSnapshot> snapshot = Capture(wedge.pid());
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  const std::string text = FormatSnapshot(*snapshot);
  const size_t block = text.find("\"lock-a\"");
  ASSERT_NE(block, std::string::npos) << text;
  const size_t first = text.find("#0 ", block);
  const size_t owner = text.find("TakeAThenB", block);
  ASSERT_NE(first, std::string::npos) << text;
  ASSERT_NE(owner, std::string::npos) << text;
  EXPECT_LT(first, owner) << text;
  EXPECT_LT(text.find("lock", first), owner) << "a lock frame before TakeAThenB:\n" << text;
  EXPECT_NE(text.find("WaitForever"), std::string::npos) << text;
  EXPECT_NE(text.find("TakeBThenA"), std::string::npos) << text;
}

}  // namespace
}  // namespace trainscope::forensics
