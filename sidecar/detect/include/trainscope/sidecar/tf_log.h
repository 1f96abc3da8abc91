#pragma once
// TensorFlow's own words, read from the log of a task watched from outside (a TensorFlow
// program that does not link the runtime): the lines that say whom it waits on or what failed
// ("CreateSession still waiting for response from worker: /job:ps/replica:0/task:1",
// UnavailableError, DEADLINE_EXCEEDED, out of memory, a port in use), classified by a bounded
// table, and followed from the file the task's stderr (or stdout) goes to, as /proc shows it.
// Not thread-safe: driven by the poll loop.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/process_identity.h"

namespace trainscope::sidecar {

struct HeartbeatInfo;

enum class TfLogKind {
  kNone,
  kCreateSessionWaiting,  // The master waits for a task to answer CreateSession.
  kUnavailable,           // A peer could not be reached (refused, reset, socket closed).
  kDeadlineExceeded,      // A call to a peer ran past its deadline.
  kOutOfMemory,           // The task ran out of memory (an allocation failed).
  kPortInUse,             // The task's own server could not bind its port.
};

// One line as the table reads it: its kind, the peer it names (a task "/job:ps/replica:0/task:1"
// or an address "ipv4:10.0.0.3:2223"), and the line cleaned of control characters and cut to
// kMaxTfLogLine characters.
struct TfLogLine {
  TfLogKind kind = TfLogKind::kNone;
  std::optional<TaskRef> peer;
  std::string peer_address;
  std::string text;
};
inline constexpr size_t kMaxTfLogLine = 240;

// The table: total over any bytes (never throws, bounded work per byte).
TfLogLine ClassifyTfLogLine(std::string_view line);

// Follows the log of one task's process: the regular file its stderr (else stdout) is, read from
// where it was at the first look on (what was there before is history), at most kMaxLogChunk
// bytes a poll, through `finder` (the capture helper's look-up process when the sidecar has
// dropped its capabilities: it copies the bytes, this parses them). What it read goes into the
// heartbeat made from outside: a CreateSession wait seen in the last kWaitFreshS seconds makes it
// waiting on that peer (the tracker then calls it blocked), with the peer's address as the task's
// own TF_CONFIG gives it.
class TfLogFollower {
 public:
  static constexpr double kWaitFreshS = 15;  // TensorFlow repeats the line every 10 s.
  static constexpr double kReadEveryS = 1;   // How often the log is read.

  // `proc_root`: where /proc is when `finder` has no reader (tests give a fixture tree).
  explicit TfLogFollower(ProcessFinder finder = {}, std::string proc_root = "/proc")
      : finder_(std::move(finder)), proc_root_(std::move(proc_root)) {}

  // Reads what `process` wrote since the last call (at most once per kReadEveryS of `now_unix`)
  // and fills `hb`'s waiting fields and log_path.
  void Follow(const VerifiedProcess& process, double now_unix, HeartbeatInfo* hb);

 private:
  struct Wait {
    double first_unix = 0;
    double last_unix = 0;
    std::string line;
  };
  void Start(const VerifiedProcess& process);
  void ReadNew(const VerifiedProcess& process, double now_unix);
  void Take(std::string_view line, double now_unix);
  void Fill(double now_unix, HeartbeatInfo* hb);

  ProcessFinder finder_;
  std::string proc_root_;
  int64_t pid_ = 0;
  uint64_t start_ticks_ = 0;
  bool found_ = false;      // The process writes its log to a file.
  std::string shown_path_;  // What /proc/PID/fd/2 (or 1) names, for people.
  uint64_t inode_ = 0;
  int64_t offset_ = -1;  // -1: not read yet (the first read starts at the end).
  double read_at_ = -1e300;
  std::string partial_;                           // A line not ended yet (bounded).
  std::map<std::string, Wait> waits_;             // Peer ("ps:1") -> its CreateSession wait.
  std::map<std::string, std::string> addresses_;  // Peer -> address, from the task's TF_CONFIG.
};

}  // namespace trainscope::sidecar
