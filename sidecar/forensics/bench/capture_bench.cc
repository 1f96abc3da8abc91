// forensics_capture_bench: how long a capture holds a process's threads. Starts
// `forensics_wedge spin` (31 threads), or takes a running process (--pid: a TensorFlow task,
// whose libraries hold hundreds of thousands of symbols), captures it N times and prints the
// median and max of pause_ms_max and pause_ms_total, the capture's own wall time (symbolization
// included) and the formatted size.
// Usage: forensics_capture_bench WEDGE_PATH [N=50] | --pid PID [N]   (ptrace permission: root)

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "trainscope/forensics/capture.h"

namespace {

struct BenchOptions {
  std::string wedge;
  pid_t pid = 0;  // A running process to capture instead of a wedge.
  int captures = 50;
};

// Starts `wedge spin` and waits for its "ready"; -1 on failure.
pid_t StartWedge(const std::string& wedge) {
  int out[2];
  if (pipe(out) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    execl(wedge.c_str(), wedge.c_str(), "spin", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  pollfd fd = {out[0], POLLIN, 0};
  char buf[16] = {};
  const bool ready = pid > 0 && poll(&fd, 1, 10000) == 1 && read(out[0], buf, 15) > 0 &&
                     std::string(buf) == "ready\n";
  close(out[0]);
  if (!ready && pid > 0) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return ready ? pid : -1;
}

// {median, max} of `values` (not empty).
std::pair<double, double> MedianMax(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {values[values.size() / 2], values.back()};
}

int Run(const BenchOptions& options) {
  const pid_t pid = options.pid > 0 ? options.pid : StartWedge(options.wedge);
  if (pid < 0) {
    std::fprintf(stderr, "cannot start %s spin\n", options.wedge.c_str());
    return 1;
  }
  std::vector<double> pause_max, pause_total, wall;
  size_t text_bytes = 0;
  size_t threads = 0;
  int exit_code = 0;
  for (int i = 0; i < options.captures && exit_code == 0; ++i) {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<trainscope::forensics::ProcessSnapshot> snapshot =
        trainscope::forensics::Capture(pid);
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (!snapshot.ok() || !snapshot->stacks) {
      std::fprintf(
          stderr, "capture failed: %s\n",
          snapshot.ok() ? snapshot->stacks_error.c_str() : snapshot.status().ToString().c_str());
      exit_code = 1;
      break;
    }
    pause_max.push_back(snapshot->pause_ms_max);
    pause_total.push_back(snapshot->pause_ms_total);
    text_bytes = trainscope::forensics::FormatSnapshot(*snapshot).size();
    threads = snapshot->threads.size();
  }
  if (options.pid <= 0) {  // Ours: a wedge.
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  if (exit_code != 0) return exit_code;
  const auto [max_median, max_max] = MedianMax(pause_max);
  const auto [total_median, total_max] = MedianMax(pause_total);
  const auto [wall_median, wall_max] = MedianMax(wall);
  std::printf("captures=%d threads=%zu\n", options.captures, threads);
  std::printf("pause_ms_max:   median %.3f  max %.3f\n", max_median, max_max);
  std::printf("pause_ms_total: median %.3f  max %.3f\n", total_median, total_max);
  std::printf("capture wall ms: median %.3f  max %.3f\n", wall_median, wall_max);
  std::printf("formatted snapshot: %zu bytes\n", text_bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  BenchOptions options;
  const bool by_pid = argc >= 3 && std::string(argv[1]) == "--pid";
  if (argc < 2 || argc > (by_pid ? 4 : 3) || (by_pid && (options.pid = std::atoi(argv[2])) <= 1)) {
    std::fprintf(stderr, "usage: %s WEDGE_PATH [N=50] | --pid PID [N=50] (not pid 1)\n", argv[0]);
    return 2;
  }
  if (!by_pid) options.wedge = argv[1];
  const int n_arg = by_pid ? 3 : 2;
  if (argc > n_arg) options.captures = std::atoi(argv[n_arg]);
  if (options.captures < 1) {
    std::fprintf(stderr, "N must be a positive number\n");
    return 2;
  }
  if (geteuid() != 0) {
    const char* ci = std::getenv("CI");
    if (ci != nullptr && std::string(ci) == "true") {
      std::fprintf(stderr,
                   "FAILED: the capture needs ptrace permission (run as root; CI=true: a "
                   "bench that cannot run fails the run)\n");
      return 1;
    }
    std::fprintf(stderr, "skipped: the capture needs ptrace permission (run as root)\n");
    return 77;
  }
  return Run(options);
}
