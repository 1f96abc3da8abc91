#pragma once
// The helper's wire form (capture_helper.h): frames of a 4-byte little-endian length and a
// payload of fixed-width integers and length-prefixed strings. Decoding bad bytes is an error,
// never a crash: the network process reads what a helper that parsed a target's ELF files says.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "trainscope/common/process_identity.h"
#include "trainscope/forensics/capture.h"
#include "trainscope/sidecar/capture_helper.h"

namespace trainscope::sidecar::wire {

inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

enum class Kind : uint8_t {
  kCapture = 1,
  kFindTask = 2,
  kFindPort = 3,
  kReadLog = 4,
  kReadEnviron = 5
};

struct Request {
  Kind kind = Kind::kCapture;
  CaptureTarget target;  // find_task: target.pid is the reported pid; find_port: pid unused.
  int64_t offset = 0;    // read_log: where to read from.
};

std::string EncodeRequest(const Request& request);
absl::StatusOr<Request> DecodeRequest(const std::string& bytes);

// A reply: a status, then (when OK) a snapshot or an identity.
std::string EncodeError(const absl::Status& status);
std::string EncodeSnapshot(const forensics::ProcessSnapshot& snapshot);
std::string EncodeIdentity(const ProcessIdentity& identity);
std::string EncodeLogChunk(const LogChunk& chunk);
std::string EncodeBytes(const std::string& bytes);
absl::StatusOr<LogChunk> DecodeLogChunk(const std::string& bytes);
absl::StatusOr<std::string> DecodeBytes(const std::string& bytes);
absl::StatusOr<forensics::ProcessSnapshot> DecodeSnapshot(const std::string& bytes);
absl::StatusOr<ProcessIdentity> DecodeIdentity(const std::string& bytes);

// Whole frames over a blocking socket (no SIGPIPE); false when the other end is gone.
bool WriteFrame(int fd, const std::string& payload);
// Reads one frame, waiting at most `timeout_ms` (-1: forever). DeadlineExceeded, Unavailable
// (EOF: the other end is gone) or DataLoss (a bad length).
absl::StatusOr<std::string> ReadFrame(int fd, int timeout_ms);

}  // namespace trainscope::sidecar::wire
