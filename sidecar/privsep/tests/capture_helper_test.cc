// Tests of the capture helper against real processes: the helper is forked as the sidecar forks
// it, and captures a forensics_wedge that holds a listening socket. Run by ctest in a PID
// namespace of its own (unshare -pf --mount-proc), where this test is PID 1. Needs root.

#include "trainscope/sidecar/capture_helper.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "skip.h"
#include "trainscope/common/proc.h"

namespace trainscope::sidecar {
namespace {

using std::chrono::milliseconds;

constexpr uint64_t kHelperCaps = (1u << 2) | (1u << 5) | (1u << 19);

#define SKIP_UNLESS_ROOT() \
  TRAINSCOPE_SKIP_UNLESS(geteuid() == 0, "needs root: the helper ptraces the wedge")

bool WaitFor(const std::function<bool()>& done, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// "State" and "TracerPid" of every thread of `pid`, as "S0 S0 t123 ...".
std::string ThreadStates(pid_t pid) {
  std::string out;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream in(dir + "/" + e->d_name + "/status");
    std::string line, state, tracer;
    while (std::getline(in, line)) {
      if (line.rfind("State:", 0) == 0) state = line.substr(7, 1);
      if (line.rfind("TracerPid:", 0) == 0) tracer = line.substr(11);
    }
    out += state + tracer + " ";
  }
  closedir(d);
  return out;
}
bool AnyTraced(pid_t pid) {
  std::istringstream in(ThreadStates(pid));
  for (std::string s; in >> s;) {
    if (s.size() > 1 && s.substr(1) != "0") return true;
  }
  return false;
}
bool NoneStoppedOrTraced(pid_t pid) {
  std::istringstream in(ThreadStates(pid));
  int n = 0;
  for (std::string s; in >> s; ++n) {
    if (s[0] == 't' || s[0] == 'T' || s.substr(1) != "0") return false;
  }
  return n > 0;
}

// A forensics_wedge (deadlock: two threads in a lock cycle) that holds a TCP socket listening
// on 127.0.0.1; killed and reaped when destroyed.
class ListeningWedge {
 public:
  // `log`: a file the wedge's stderr goes to ("" = this process's stderr).
  explicit ListeningWedge(const std::string& log = "") {
    const int s = socket(AF_INET, SOCK_STREAM, 0);  // Inherited by the wedge (no CLOEXEC).
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(s, 1) != 0 ||
        getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close(s);
      return;
    }
    port_ = ntohs(a.sin_port);
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], STDOUT_FILENO);
      if (!log.empty()) {
        const int f = open(log.c_str(), O_WRONLY | O_APPEND);
        if (f >= 0) dup2(f, STDERR_FILENO);
      }
      setenv("TF_CONFIG", "{\"cluster\": {\"ps\": [\"127.0.0.1:1\"]}}", 1);
      execl(FORENSICS_WEDGE, FORENSICS_WEDGE, "deadlock", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(s);
    close(out[1]);
    pollfd fd = {out[0], POLLIN, 0};
    char buf[16] = {};
    ready_ = pid_ > 0 && poll(&fd, 1, 10000) == 1 && read(out[0], buf, sizeof(buf) - 1) > 0;
    close(out[0]);
  }
  ~ListeningWedge() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  ListeningWedge(const ListeningWedge&) = delete;
  ListeningWedge& operator=(const ListeningWedge&) = delete;

  bool ready() const { return ready_; }
  pid_t pid() const { return pid_; }
  CaptureTarget Target() const {
    std::optional<ProcStat> st = ReadProcStat(pid_);
    return {pid_, st ? st->start_ticks : 0, "127.0.0.1", port_};
  }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
  bool ready_ = false;
};

std::unique_ptr<CaptureHelper> StartHelper(double deadline_s = 10, int hold_ms = 0) {
  CaptureHelperOptions o;
  o.deadline_s = deadline_s;
  o.capture.hold_ms_for_tests = hold_ms;
  absl::StatusOr<std::unique_ptr<CaptureHelper>> h = CaptureHelper::Start(o);
  EXPECT_TRUE(h.ok()) << h.status();
  return h.ok() ? std::move(*h) : nullptr;
}

TEST(CaptureHelper, KeepsOnlyTheCaptureCapabilitiesAndCapturesTheTask) {
  SKIP_UNLESS_ROOT();
  ListeningWedge wedge;
  ASSERT_TRUE(wedge.ready());
  auto helper = StartHelper();
  ASSERT_NE(helper, nullptr);
  ASSERT_TRUE(WaitFor([&] { return EffectiveCapabilities(helper->pid()) == kHelperCaps; }))
      << std::hex << EffectiveCapabilities(helper->pid()).value_or(0);
  // The look-up helper: SYS_PTRACE and DAC_READ_SEARCH only (it reads fds, never attaches).
  const uint64_t lookup_caps = kHelperCaps & ~(uint64_t{1} << 5);
  EXPECT_TRUE(WaitFor([&] { return EffectiveCapabilities(helper->lookup_pid()) == lookup_caps; }))
      << std::hex << EffectiveCapabilities(helper->lookup_pid()).value_or(0);
  absl::StatusOr<forensics::ProcessSnapshot> s = helper->Capture(wedge.Target());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->pid, wedge.pid());
  EXPECT_TRUE(s->stacks) << s->stacks_error;
  EXPECT_GE(s->threads.size(), 3u);
  EXPECT_TRUE(NoneStoppedOrTraced(wedge.pid())) << ThreadStates(wedge.pid());
  absl::StatusOr<ProcessIdentity> owner = helper->FindPort("127.0.0.1", wedge.Target().port);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->pid, wedge.pid());
}

// The sidecar's own order: fork the helper, then drop every capability; captures and
// look-ups still work through the helper. In a child, so that this test keeps its own.
TEST(CaptureHelper, WorksForAProcessWithNoCapabilityLeft) {
  SKIP_UNLESS_ROOT();
  ListeningWedge wedge;
  ASSERT_TRUE(wedge.ready());
  const pid_t child = fork();
  if (child == 0) {
    auto helper = StartHelper();
    if (helper == nullptr || !KeepOnlyCapabilities(0).ok()) _exit(2);
    if (EffectiveCapabilities() != 0u) _exit(3);
    absl::StatusOr<forensics::ProcessSnapshot> s = helper->Capture(wedge.Target());
    if (!s.ok() || !s->stacks) _exit(4);
    absl::StatusOr<ProcessIdentity> owner = helper->FindPort("127.0.0.1", wedge.Target().port);
    _exit(owner.ok() && owner->pid == wedge.pid() ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
}

// A verified process's log and environment, read by the look-up helper for a sidecar that has
// no capability left (it could not open /proc/PID/fd/2 of a root task itself); an unverified
// one is refused. In a child, so that this test keeps its own capabilities.
TEST(CaptureHelper, ReadsAVerifiedProcesssLogAndEnvironmentForAProcessWithNoCapability) {
  SKIP_UNLESS_ROOT();
  const std::string log = ::testing::TempDir() + "/wedge-log-" + std::to_string(getpid());
  {
    std::ofstream(log) << "I master.cc:278] CreateSession still waiting for response from worker: "
                          "/job:ps/replica:0/task:1\n";
  }
  ListeningWedge wedge(log), other;
  ASSERT_TRUE(wedge.ready() && other.ready());
  const pid_t child = fork();
  if (child == 0) {
    auto helper = StartHelper();
    if (helper == nullptr || !KeepOnlyCapabilities(0).ok()) _exit(2);
    if (ReadProcessLog(wedge.pid(), 0, kMaxLogChunk).ok()) _exit(3);  // Not by itself.
    absl::StatusOr<LogChunk> chunk = helper->ReadLog(wedge.Target(), 0);
    if (!chunk.ok() || chunk->bytes.find("CreateSession still waiting") == std::string::npos) {
      _exit(4);
    }
    absl::StatusOr<LogChunk> end = helper->ReadLog(wedge.Target(), -1);
    if (!end.ok() || !end->bytes.empty() || end->offset != chunk->size) _exit(5);
    absl::StatusOr<std::string> env = helper->ReadEnviron(wedge.Target());
    if (!env.ok() || env->find("TF_CONFIG={\"cluster\"") == std::string::npos) _exit(6);
    CaptureTarget wrong = wedge.Target();
    wrong.port = other.Target().port;
    if (helper->ReadLog(wrong, 0).ok() || helper->ReadEnviron(wrong).ok()) _exit(7);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "exit status " << status;
  std::remove(log.c_str());
}

TEST(CaptureHelper, RefusesWhatFailsTheIdentityCheck) {
  SKIP_UNLESS_ROOT();
  ListeningWedge wedge, other;
  ASSERT_TRUE(wedge.ready() && other.ready());
  auto helper = StartHelper();
  ASSERT_NE(helper, nullptr);
  CaptureTarget late = wedge.Target();
  late.start_ticks += 1;
  CaptureTarget wrong_socket = wedge.Target();
  wrong_socket.port = other.Target().port;
  CaptureTarget init = wedge.Target();
  init.pid = 1;
  CaptureTarget itself = wedge.Target();
  itself.pid = helper->pid();
  CaptureTarget parent = wedge.Target();
  parent.pid = getpid();
  const std::pair<CaptureTarget, std::string> cases[] = {
      {late, "another process has that pid"},
      {wrong_socket, "does not hold"},
      {init, "pid 1 (init) is never captured"},
      {itself, "never captures itself"},
      {parent, getpid() == 1 ? "pid 1" : "the sidecar itself"}};
  for (const auto& [target, why] : cases) {
    absl::StatusOr<forensics::ProcessSnapshot> s = helper->Capture(target);
    ASSERT_FALSE(s.ok()) << "pid " << target.pid;
    EXPECT_NE(s.status().message().find(why), std::string::npos) << s.status();
  }
  EXPECT_FALSE(AnyTraced(wedge.pid()));
  EXPECT_TRUE(helper->Capture(wedge.Target()).ok());  // Refusals leave the helper working.
}

TEST(CaptureHelper, KilledMidCaptureLeavesNoTaskStoppedAndSaysCapturesAreGone) {
  SKIP_UNLESS_ROOT();
  ListeningWedge wedge;
  ASSERT_TRUE(wedge.ready());
  auto helper = StartHelper(/*deadline_s=*/30, /*hold_ms=*/3000);
  ASSERT_NE(helper, nullptr);
  auto capture = std::async(std::launch::async, [&] { return helper->Capture(wedge.Target()); });
  ASSERT_TRUE(WaitFor([&] { return AnyTraced(wedge.pid()); })) << ThreadStates(wedge.pid());
  ASSERT_EQ(kill(helper->pid(), SIGKILL), 0);
  absl::StatusOr<forensics::ProcessSnapshot> s = capture.get();
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsUnavailable(s.status())) << s.status();
  EXPECT_TRUE(WaitFor([&] { return NoneStoppedOrTraced(wedge.pid()); }))
      << ThreadStates(wedge.pid());
  std::this_thread::sleep_for(milliseconds(200));
  EXPECT_TRUE(NoneStoppedOrTraced(wedge.pid())) << ThreadStates(wedge.pid());
  absl::StatusOr<forensics::ProcessSnapshot> again = helper->Capture(wedge.Target());
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("cannot be started again"), std::string::npos)
      << again.status();
  // The look-up helper lives on: the poll loop still verifies tasks.
  absl::StatusOr<ProcessIdentity> owner = helper->FindPort("127.0.0.1", wedge.Target().port);
  ASSERT_TRUE(owner.ok()) << owner.status();
  EXPECT_EQ(owner->pid, wedge.pid());
}

TEST(CaptureHelper, ADeadlineStopsTheCaptureAndLetsTheTaskGo) {
  SKIP_UNLESS_ROOT();
  ListeningWedge wedge;
  ASSERT_TRUE(wedge.ready());
  auto helper = StartHelper(/*deadline_s=*/0.5, /*hold_ms=*/3000);
  ASSERT_NE(helper, nullptr);
  absl::StatusOr<forensics::ProcessSnapshot> s = helper->Capture(wedge.Target());
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(s.status())) << s.status();
  EXPECT_TRUE(WaitFor([&] { return NoneStoppedOrTraced(wedge.pid()); }))
      << ThreadStates(wedge.pid());
  absl::StatusOr<ProcessIdentity> owner = helper->FindPort("127.0.0.1", wedge.Target().port);
  EXPECT_TRUE(owner.ok()) << owner.status();  // The helper itself lives on.
}

}  // namespace
}  // namespace trainscope::sidecar
