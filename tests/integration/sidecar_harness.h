#pragma once
// Helpers for the sidecar's integration tests: start the real trainscope-sidecar, the real
// linear_regression tasks or the scripted sidecar_fake_task on free loopback ports, and wait
// (generously) for a task to reach a state in the sidecar's /api/v1/tasks. One test thread.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "process.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::testing {

using Cluster = std::map<std::string, std::vector<std::string>>;

// "127.0.0.1:<free port>".
std::string FreeAddress();
// Writes the cluster (no task part) as TF_CONFIG JSON to a temporary file; returns its path.
std::string WriteSpecFile(const Cluster& cluster);

// The cluster key every harness sidecar is given (--exchange_key_file, 0600), as the docs ask:
// without a key (or mutual TLS) a sidecar does not open its exchange.
const std::string& HarnessKeyFile();
const std::string& HarnessKey();  // The secret in it.
// Among a Sidecar's extra_args: start it without the harness's key.
inline constexpr char kNoExchangeKey[] = "--harness:no-exchange-key";

// A running trainscope-sidecar on free ports, with the harness's cluster key unless extra_args
// hold kNoExchangeKey or an --exchange_key_file of their own.
class Sidecar {
 public:
  Sidecar(const Cluster& cluster, std::vector<std::string> extra_args);
  // Stops the sidecar, then removes its spec file.
  ~Sidecar();
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;
  std::string http() const { return "127.0.0.1:" + std::to_string(http_port_); }
  int http_port() const { return http_port_; }
  Process& process() { return *process_; }
  // The task list of /api/v1/tasks (`query` e.g. "?local=1"); empty on any error.
  std::vector<sidecar::TaskView> Tasks(const std::string& query = "");
  std::optional<sidecar::TaskView> Task(const std::string& name);
  // Waits until `name` is in `state` (with `reason_has` in its reason); returns its view then, or
  // nullopt (the test then prints Describe()).
  std::optional<sidecar::TaskView> WaitForState(const std::string& name, sidecar::TaskState state,
                                                std::chrono::milliseconds timeout,
                                                const std::string& reason_has = "");
  // GET a path; "" on error.
  std::string Get(const std::string& path);
  // All tasks, one per line, for failure messages.
  std::string Describe();

 private:
  int http_port_ = 0;
  std::string spec_path_;
  std::unique_ptr<Process> process_;
};

// A token for the sidecar's actions (--api_token_file), and a file holding it (mode 0600),
// removed when destroyed.
inline constexpr char kTestToken[] =
    "5f0c3a9e8b7d6c5f4e3d2c1b0a998877665544332211ffeeddccbbaa00112233";
class TokenFile {
 public:
  TokenFile();
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;
  const std::string& path() const { return path_; }
  // The header field that carries the token.
  static std::string Header() { return std::string("Authorization: Bearer ") + kTestToken; }

 private:
  std::string path_;
};

// A ps and a worker on loopback, watched by a sidecar (--stall_after_s 1.5), whose worker's
// training thread is then deadlocked on two mutexes (trainscopectl fault --deadlock_training):
// its heartbeats go on, its steps do not. Start() returns "" once the sidecar calls it stalled,
// else what failed (with the sidecar's view).
struct StalledWorker {
  Cluster cluster;
  std::unique_ptr<Process> ps, worker;
  std::unique_ptr<Sidecar> sidecar;
  std::string Start();
};

// Flags that keep a worker training for as long as a test needs (5 ms between steps), then `more`.
std::vector<std::string> LongTraining(std::vector<std::string> more = {});

// linear_regression as `role:index` of `cluster`, with the given extra flags.
std::unique_ptr<Process> StartTask(const Cluster& cluster, const std::string& role, int index,
                                   std::vector<std::string> extra_args = {});
// sidecar_fake_task serving `role:index` at `address` with extra flags.
std::unique_ptr<Process> StartFakeTask(const std::string& address, const std::string& role,
                                       int index, std::vector<std::string> extra_args = {});

}  // namespace trainscope::testing
