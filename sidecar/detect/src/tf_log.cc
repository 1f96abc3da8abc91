// TensorFlow's own words from a task's log; see tf_log.h.
#include "trainscope/sidecar/tf_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/process_identity.h"
#include "trainscope/common/tf_config_env.h"
#include "trainscope/sidecar/task_tracker.h"

namespace trainscope::sidecar {
namespace {

constexpr size_t kMaxPartial = 4096;         // A longer "line" is cut: logs are text.
constexpr double kFirstWaitLineAfterS = 10;  // TensorFlow says it first after 10 s of waiting.

bool HasWord(std::string_view line, std::string_view word) {
  return line.find(word) != std::string_view::npos;
}

// "/job:ps/replica:0/task:1" in `line`, as a task.
std::optional<TaskRef> JobTask(std::string_view line) {
  const size_t at = line.find("/job:");
  if (at == std::string_view::npos) return std::nullopt;
  size_t i = at + 5;
  size_t end = i;
  while (end < line.size() && end - i < 64 &&
         (std::isalnum(static_cast<unsigned char>(line[end])) || line[end] == '_' ||
          line[end] == '-')) {
    ++end;
  }
  if (end == i) return std::nullopt;
  TaskRef ref;
  ref.role = std::string(line.substr(i, end - i));
  const size_t task = line.find("/task:", end);
  if (task == std::string_view::npos || task > end + 24) return std::nullopt;
  size_t d = task + 6;
  size_t digits = d;
  while (digits < line.size() && digits - d < 8 &&
         std::isdigit(static_cast<unsigned char>(line[digits]))) {
    ++digits;
  }
  if (digits - d > 6) return std::nullopt;  // No cluster has a million tasks of a job.
  int index = 0;
  const std::string_view number = line.substr(d, digits - d);
  if (digits == d || !absl::SimpleAtoi(absl::string_view(number.data(), number.size()), &index)) {
    return std::nullopt;
  }
  ref.index = index;
  return ref;
}

// "ipv4:10.0.0.3:2223" in `line`, as "10.0.0.3:2223".
std::string Ipv4Address(std::string_view line) {
  const size_t at = line.find("ipv4:");
  if (at == std::string_view::npos) return "";
  size_t end = at + 5;
  while (end < line.size() && end - at < 32 &&
         (std::isdigit(static_cast<unsigned char>(line[end])) || line[end] == '.' ||
          line[end] == ':')) {
    ++end;
  }
  while (end > at + 5 && (line[end - 1] == ':' || line[end - 1] == '.')) --end;
  return std::string(line.substr(at + 5, end - at - 5));
}

std::string CleanLogText(std::string_view line) {
  std::string out;
  out.reserve(std::min(line.size(), kMaxTfLogLine));
  for (char c : line) {
    if (out.size() >= kMaxTfLogLine) break;
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

TfLogLine ClassifyTfLogLine(std::string_view line) {
  TfLogLine out;
  if (HasWord(line, "CreateSession still waiting for response from")) {
    out.kind = TfLogKind::kCreateSessionWaiting;
  } else if (HasWord(line, "Could not start gRPC server") ||
             HasWord(line, "Address already in use")) {
    out.kind = TfLogKind::kPortInUse;
  } else if (HasWord(line, "OOM when allocating") || HasWord(line, "ResourceExhaustedError") ||
             HasWord(line, "MemoryError") || HasWord(line, "std::bad_alloc")) {
    out.kind = TfLogKind::kOutOfMemory;
  } else if (HasWord(line, "DeadlineExceeded") || HasWord(line, "DEADLINE_EXCEEDED") ||
             HasWord(line, "Deadline Exceeded")) {
    out.kind = TfLogKind::kDeadlineExceeded;
  } else if (HasWord(line, "UnavailableError") || HasWord(line, "UNAVAILABLE") ||
             HasWord(line, "failed to connect to all addresses") ||
             HasWord(line, "Socket closed") || HasWord(line, "Connection reset by peer") ||
             HasWord(line, "Connection refused")) {
    out.kind = TfLogKind::kUnavailable;
  } else {
    return out;
  }
  out.peer = JobTask(line);
  out.peer_address = Ipv4Address(line);
  out.text = CleanLogText(line);
  return out;
}

void TfLogFollower::Start(const VerifiedProcess& process) {
  *this = TfLogFollower(std::move(finder_), std::move(proc_root_));
  pid_ = process.pid;
  start_ticks_ = process.start_ticks;
  absl::StatusOr<std::string> environ = finder_.read_environ
                                            ? finder_.read_environ(process)
                                            : ReadProcessEnviron(process.pid, proc_root_);
  if (!environ.ok()) return;
  auto config = ParseTfConfig(TfConfigInEnviron(*environ), /*require_task=*/false);
  if (!config.ok()) return;
  for (const TaskRef& t : config->cluster.AllTasks()) {
    if (const std::string* a = config->cluster.FindAddress(t)) addresses_[t.ShortName()] = *a;
  }
}

void TfLogFollower::ReadNew(const VerifiedProcess& process, double now_unix) {
  absl::StatusOr<LogChunk> chunk =
      finder_.read_log ? finder_.read_log(process, offset_)
                       : ReadProcessLog(process.pid, offset_, kMaxLogChunk, proc_root_);
  found_ = chunk.ok();
  if (!chunk.ok()) return;
  // The file's name as the task's mount namespace has it; the bytes were read through /proc.
  shown_path_ = !chunk->path.empty() && chunk->path[0] == '/' ? CleanLogText(chunk->path)
                                                              : absl::StrCat("fd 2 of pid ", pid_);
  if (chunk->inode != inode_ || chunk->offset != offset_) partial_.clear();  // Another file.
  inode_ = chunk->inode;
  offset_ = chunk->offset + static_cast<int64_t>(chunk->bytes.size());
  const std::string& bytes = chunk->bytes;
  size_t start = 0;
  for (size_t nl = bytes.find('\n'); nl != std::string::npos; nl = bytes.find('\n', start)) {
    partial_.append(bytes, start,
                    std::min(nl - start, kMaxPartial - std::min(kMaxPartial, partial_.size())));
    Take(partial_, now_unix);
    partial_.clear();
    start = nl + 1;
  }
  partial_.append(
      bytes, start,
      std::min(bytes.size() - start, kMaxPartial - std::min(kMaxPartial, partial_.size())));
}

void TfLogFollower::Take(std::string_view line, double now_unix) {
  TfLogLine l = ClassifyTfLogLine(line);
  if (l.kind != TfLogKind::kCreateSessionWaiting || !l.peer) return;
  Wait& w = waits_[l.peer->ShortName()];
  if (w.first_unix == 0 || now_unix - w.last_unix > kWaitFreshS) w.first_unix = now_unix;
  w.last_unix = now_unix;
  w.line = std::move(l.text);
}

void TfLogFollower::Fill(double now_unix, HeartbeatInfo* hb) {
  double since = 0;
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (now_unix - it->second.last_unix > kWaitFreshS) {
      it = waits_.erase(it);
      continue;
    }
    const double began = it->second.first_unix - kFirstWaitLineAfterS;
    since = since == 0 ? began : std::min(since, began);
    PeerInfo p;
    if (auto ref = ParseTaskRef(it->first); ref.ok()) p.peer = *ref;
    if (auto a = addresses_.find(it->first); a != addresses_.end()) p.address = a->second;
    const std::string& line = it->second.line;
    p.last_error = absl::StrCat(
        "TensorFlow logs \"", line.substr(std::min(line.size(), line.find("CreateSession"))), "\"");
    hb->waiting_on.push_back(std::move(p));
    ++it;
  }
  if (hb->waiting_on.empty()) return;
  hb->waiting = true;
  hb->waiting_what = "CreateSession";
  hb->waiting_since_unix = since;
}

void TfLogFollower::Follow(const VerifiedProcess& process, double now_unix, HeartbeatInfo* hb) {
  if (process.pid <= 0) return;
  if (process.pid != pid_ || process.start_ticks != start_ticks_) Start(process);
  if (now_unix - read_at_ >= kReadEveryS) {
    read_at_ = now_unix;
    ReadNew(process, now_unix);
  }
  if (!found_) return;
  hb->log_path = shown_path_;
  Fill(now_unix, hb);
}

}  // namespace trainscope::sidecar
