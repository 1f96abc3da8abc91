#pragma once
// Test support: start a real binary as a child process with its own environment, capture its
// output to a file, wait for lines in it, signal it, and reap it. Also: free loopback ports.
// Not thread-safe: one Process is driven from one test thread.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainscope::testing {

// Path of a binary built into build/bin (the directory of the running test binary).
std::string BinPath(const std::string& name);

// What `command` (run by /bin/sh) prints on stdout, and its wait status (-1: not run).
std::pair<std::string, int> Shell(const std::string& command);

// A TCP port on 127.0.0.1 that nothing holds right now, below the kernel's ephemeral range (so no
// outgoing connection or port-0 bind takes it before its program binds it), and that this
// process has not been given before. Thread-safe.
int FreePort();

// A child process. The destructor kills (SIGKILL) and reaps it if still running.
class Process {
 public:
  Process(std::string binary, std::vector<std::string> args,
          std::map<std::string, std::string> env = {});
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // Everything the child wrote to stdout and stderr so far.
  std::string Output() const;
  // Waits until the output contains `needle`; false on timeout or exit without it.
  bool WaitForOutput(const std::string& needle, std::chrono::milliseconds timeout);
  // Waits for exit; the exit code (128+signal when killed), or nullopt on timeout.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();
  void Signal(int sig);

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

// TF_CONFIG JSON for a cluster of the given jobs and this task.
std::string TfConfig(const std::map<std::string, std::vector<std::string>>& cluster,
                     const std::string& role, int index);

}  // namespace trainscope::testing

namespace trainscope::testing {

// GET http://host:port/path over a plain socket; the body, or nullopt when the connection or
// the status line fails (anything but 200).
std::optional<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                   std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace trainscope::testing

namespace trainscope::testing {

// A socket listening on 127.0.0.1:`port` (another process holding a port, as users meet it).
// Closed when destroyed; fd() is -1 when the port could not be bound.
class ListeningSocket {
 public:
  explicit ListeningSocket(int port);
  ~ListeningSocket();
  ListeningSocket(const ListeningSocket&) = delete;
  ListeningSocket& operator=(const ListeningSocket&) = delete;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace trainscope::testing
