#pragma once
// Which process is a task's, from what the kernel says and never from the PID the task reports:
// the process that holds the task's listening socket (its inode among the process's fds, the
// socket found in the process's own network namespace, /proc/PID/net/tcp*) and whose PID in its
// own PID namespace (the last of NSpid in /proc/PID/status) is the one the task reported. So a
// task in a pod (its own PID and network namespaces) is found from a hostPID sidecar, and a
// task that claims another process's PID is refused. The /proc tree is a parameter: tests give
// a fake one.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope {

// A task's process, verified. Values; the start time tells a reused PID apart.
struct ProcessIdentity {
  int64_t pid = 0;           // In the PID namespace of the /proc read (the sidecar's).
  int64_t ns_pid = 0;        // In the task's own PID namespace: what it reported.
  uint64_t start_ticks = 0;  // /proc/PID/stat field 22 when it was verified.
  uint64_t socket_inode = 0;
  std::string command;  // /proc/PID/comm.

  // "pid 9486" or "pid 9486 (pid 1 in its own PID namespace)".
  std::string Describe() const;
};

// Finds the process of a task that reported `reported_pid` and listens on TCP `host`:`port`.
// Pods on one node often all listen on the same port, each in its own network namespace: the
// socket must be bound to `host`, or to every address of a namespace that has `host` (a name is
// resolved first; an empty host matches any). Errors,
// each in words a user can act on:
//   NotFound: no process here has that PID in its own PID namespace (the sidecar does not see
//     the task's PID namespace: run it with hostPID, or shareProcessNamespace);
//   FailedPrecondition: processes with that PID exist but none holds the port (never read as the
//     task: "claims pid N, but ...");
//   PermissionDenied: a candidate's fds or sockets cannot be read (what to grant).
// The candidate's start time is read before and after its sockets and fds: one that changed
// (the PID was reused meanwhile) is not taken. Reads every process's status when the reported
// PID is not the task's here: call it when a task (re)appears, not on every poll.
absl::StatusOr<ProcessIdentity> FindTaskProcess(int64_t reported_pid, const std::string& host,
                                                int port, const std::string& proc_root = "/proc");

// The process that holds the socket listening on TCP `host`:`port`, in whichever network
// namespace it is (a pod's own, or this one), for a task watched from outside: it reports no
// pid. Its `ns_pid` is its pid in its own PID namespace. Reads each network namespace's socket
// table once, then the fds of the processes in a namespace that has the socket. NotFound when
// no process here listens there; PermissionDenied when the holder's fds cannot be read.
absl::StatusOr<ProcessIdentity> FindListeningProcess(const std::string& host, int port,
                                                     const std::string& proc_root = "/proc");

// How the sidecar finds tasks' processes: FindTaskProcess and FindListeningProcess on this
// process's /proc, or through a process that may read every task's fds (the sidecar's capture
// helper, when the sidecar has dropped its capabilities). Either member may be empty: the
// function above is used. Each must be thread-safe.
// A process as a task's port verified it: what a reader of its files is checked against.
struct VerifiedProcess {
  int64_t pid = 0;
  uint64_t start_ticks = 0;
  std::string host;  // The socket it listens on.
  int port = 0;
};

// A piece of a process's log, the regular file its stderr (else its stdout) is: that file's
// inode and size, and up to `max` of its bytes from `offset` (from 0 when the file is now
// shorter than `offset`: truncated or replaced; none, at its end, when `offset` < 0).
struct LogChunk {
  uint64_t inode = 0;
  int64_t size = 0;
  int64_t offset = 0;  // Where `bytes` begin.
  std::string bytes;
  std::string path;  // What /proc/PID/fd/N names (bounded), for people.
};
inline constexpr size_t kMaxLogChunk = 256 << 10;
inline constexpr size_t kMaxEnvironBytes = 1 << 20;

// Reads them from `proc_root`/PID (NotFound when the process writes to no regular file).
absl::StatusOr<LogChunk> ReadProcessLog(int64_t pid, int64_t offset, size_t max,
                                        const std::string& proc_root = "/proc");
// Its environment (/proc/PID/environ), up to kMaxEnvironBytes.
absl::StatusOr<std::string> ReadProcessEnviron(int64_t pid, const std::string& proc_root = "/proc");

struct ProcessFinder {
  std::function<absl::StatusOr<ProcessIdentity>(int64_t reported_pid, const std::string& host,
                                                int port)>
      find_task;
  std::function<absl::StatusOr<ProcessIdentity>(const std::string& host, int port)> find_listening;
  // The log and environment of a verified process: read by whoever may (the capture helper's
  // look-up process, which copies bytes and parses none of them).
  std::function<absl::StatusOr<LogChunk>(const VerifiedProcess& process, int64_t offset)> read_log;
  std::function<absl::StatusOr<std::string>(const VerifiedProcess& process)> read_environ;
};

// Whether `id` still names the same process: its /proc/PID/stat exists, is not a zombie, and
// has the start time it was verified with.
bool StillSameProcess(const ProcessIdentity& id, const std::string& proc_root = "/proc");

// The PIDs of process `pid` in each PID namespace from the one of `proc_root` down to its own
// (NSpid in /proc/PID/status); empty when unknown.
std::vector<int64_t> ReadNsPids(int64_t pid, const std::string& proc_root = "/proc");

// A socket listening on TCP, as /proc/PID/net/tcp* lists it.
struct ListeningSocket {
  uint64_t inode = 0;
  std::string address;  // "10.0.0.3", "::1"; "" for every address (0.0.0.0 or ::).
};

// The sockets listening on TCP `port` in the network namespace of process `pid` (its
// /proc/PID/net/tcp and tcp6).
std::vector<ListeningSocket> ListeningSockets(int64_t pid, int port,
                                              const std::string& proc_root = "/proc");

// The addresses of the network namespace of process `pid` (its /proc/PID/net/fib_trie's local
// IPv4 addresses and /proc/PID/net/if_inet6), as text.
std::vector<std::string> NamespaceAddresses(int64_t pid, const std::string& proc_root = "/proc");

}  // namespace trainscope
