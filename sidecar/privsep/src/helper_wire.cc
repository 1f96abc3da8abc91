// The helper's wire form: see helper_wire.h.
#include "helper_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace trainscope::sidecar::wire {
namespace {

constexpr uint32_t kMaxThreads = 1 << 16;
constexpr uint32_t kMaxFrames = 4096;

class Writer {
 public:
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  void I64(int64_t v) { U64(static_cast<uint64_t>(v)); }
  void F64(double v) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(bits));
    U64(bits);
  }
  void Str(const std::string& s) {
    U64(s.size());
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads what Writer wrote; any read past the end sets `bad` and yields zeros.
class Reader {
 public:
  explicit Reader(const std::string& in) : in_(in) {}
  uint64_t U64() {
    if (in_.size() - pos_ < 8) return Fail();
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in_[pos_ + i])} << (8 * i);
    pos_ += 8;
    return v;
  }
  int64_t I64() { return static_cast<int64_t>(U64()); }
  double F64() {
    const uint64_t bits = U64();
    double v = 0;
    std::memcpy(&v, &bits, sizeof(v));
    return v;
  }
  std::string Str() {
    const uint64_t n = U64();
    if (bad || n > in_.size() - pos_) return Fail(), std::string();
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool bad = false;
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  uint64_t Fail() {
    bad = true;
    pos_ = in_.size();
    return 0;
  }
  const std::string& in_;
  size_t pos_ = 0;
};

// The status part of a reply; OK leaves `r` at the body.
absl::Status ReadStatus(Reader& r) {
  const auto code = static_cast<absl::StatusCode>(r.U64());
  std::string message = r.Str();
  if (r.bad) return absl::DataLossError("the capture helper's answer is cut short");
  if (code == absl::StatusCode::kOk) return absl::OkStatus();
  return absl::Status(code, message);
}

}  // namespace

std::string EncodeRequest(const Request& request) {
  Writer w;
  w.U64(static_cast<uint64_t>(request.kind));
  w.I64(request.target.pid);
  w.U64(request.target.start_ticks);
  w.Str(request.target.host);
  w.I64(request.target.port);
  w.I64(request.offset);
  return w.Take();
}

absl::StatusOr<Request> DecodeRequest(const std::string& bytes) {
  Reader r(bytes);
  Request q;
  const uint64_t kind = r.U64();
  q.target.pid = r.I64();
  q.target.start_ticks = r.U64();
  q.target.host = r.Str();
  const int64_t port = r.I64();
  q.offset = r.I64();
  if (r.bad || !r.AtEnd() || kind < 1 || kind > 5 || port < 0 || port > 65535) {
    return absl::InvalidArgumentError("not a request the capture helper knows");
  }
  q.kind = static_cast<Kind>(kind);
  q.target.port = static_cast<int>(port);
  return q;
}

std::string EncodeError(const absl::Status& status) {
  Writer w;
  w.U64(static_cast<uint64_t>(status.code()));
  w.Str(std::string(status.message()));
  return w.Take();
}

std::string EncodeSnapshot(const forensics::ProcessSnapshot& s) {
  Writer w;
  w.U64(0);
  w.Str("");
  w.I64(s.pid);
  w.Str(s.command);
  w.U64(static_cast<unsigned char>(s.state));
  w.F64(s.taken_unix);
  w.F64(s.pause_ms_max);
  w.F64(s.pause_ms_total);
  w.U64(s.stacks ? 1 : 0);
  w.Str(s.stacks_error);
  w.U64(s.threads.size());
  for (const forensics::ThreadSnapshot& t : s.threads) {
    w.I64(t.tid);
    w.Str(t.name);
    w.U64(static_cast<unsigned char>(t.state));
    w.Str(t.wchan);
    w.Str(t.syscall);
    w.Str(t.stack_error);
    w.U64(t.frames.size());
    for (const forensics::Frame& f : t.frames) {
      w.U64(f.pc);
      w.Str(f.function);
      w.Str(f.module);
      w.Str(f.file);
      w.I64(f.line);
    }
  }
  return w.Take();
}

absl::StatusOr<forensics::ProcessSnapshot> DecodeSnapshot(const std::string& bytes) {
  Reader r(bytes);
  if (absl::Status st = ReadStatus(r); !st.ok()) return st;
  forensics::ProcessSnapshot s;
  s.pid = r.I64();
  s.command = r.Str();
  s.state = static_cast<char>(r.U64());
  s.taken_unix = r.F64();
  s.pause_ms_max = r.F64();
  s.pause_ms_total = r.F64();
  s.stacks = r.U64() != 0;
  s.stacks_error = r.Str();
  const uint64_t threads = r.U64();
  for (uint64_t i = 0; i < threads && i < kMaxThreads && !r.bad; ++i) {
    forensics::ThreadSnapshot& t = s.threads.emplace_back();
    t.tid = r.I64();
    t.name = r.Str();
    t.state = static_cast<char>(r.U64());
    t.wchan = r.Str();
    t.syscall = r.Str();
    t.stack_error = r.Str();
    const uint64_t frames = r.U64();
    for (uint64_t k = 0; k < frames && k < kMaxFrames && !r.bad; ++k) {
      forensics::Frame& f = t.frames.emplace_back();
      f.pc = r.U64();
      f.function = r.Str();
      f.module = r.Str();
      f.file = r.Str();
      f.line = static_cast<int>(r.I64());
    }
  }
  if (r.bad || !r.AtEnd()) return absl::DataLossError("the capture helper's snapshot is garbled");
  return s;
}

std::string EncodeIdentity(const ProcessIdentity& id) {
  Writer w;
  w.U64(0);
  w.Str("");
  w.I64(id.pid);
  w.I64(id.ns_pid);
  w.U64(id.start_ticks);
  w.U64(id.socket_inode);
  w.Str(id.command);
  return w.Take();
}

absl::StatusOr<ProcessIdentity> DecodeIdentity(const std::string& bytes) {
  Reader r(bytes);
  if (absl::Status st = ReadStatus(r); !st.ok()) return st;
  ProcessIdentity id;
  id.pid = r.I64();
  id.ns_pid = r.I64();
  id.start_ticks = r.U64();
  id.socket_inode = r.U64();
  id.command = r.Str();
  if (r.bad || !r.AtEnd()) return absl::DataLossError("the capture helper's identity is garbled");
  return id;
}

std::string EncodeLogChunk(const LogChunk& chunk) {
  Writer w;
  w.U64(0);
  w.Str("");
  w.U64(chunk.inode);
  w.I64(chunk.size);
  w.I64(chunk.offset);
  w.Str(chunk.bytes);
  w.Str(chunk.path);
  return w.Take();
}

absl::StatusOr<LogChunk> DecodeLogChunk(const std::string& bytes) {
  Reader r(bytes);
  if (absl::Status st = ReadStatus(r); !st.ok()) return st;
  LogChunk chunk;
  chunk.inode = r.U64();
  chunk.size = r.I64();
  chunk.offset = r.I64();
  chunk.bytes = r.Str();
  chunk.path = r.Str();
  if (r.bad || !r.AtEnd() || chunk.bytes.size() > kMaxLogChunk || chunk.path.size() > 4096) {
    return absl::DataLossError("the look-up helper's log chunk is garbled");
  }
  return chunk;
}

std::string EncodeBytes(const std::string& bytes) {
  Writer w;
  w.U64(0);
  w.Str("");
  w.Str(bytes);
  return w.Take();
}

absl::StatusOr<std::string> DecodeBytes(const std::string& bytes) {
  Reader r(bytes);
  if (absl::Status st = ReadStatus(r); !st.ok()) return st;
  std::string out = r.Str();
  if (r.bad || !r.AtEnd()) return absl::DataLossError("the look-up helper's answer is garbled");
  return out;
}

bool WriteFrame(int fd, const std::string& payload) {
  std::string frame(4, '\0');
  const auto n = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  frame += payload;
  size_t done = 0;
  while (done < frame.size()) {
    const ssize_t w = send(fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

namespace {

// Reads exactly `n` bytes by `deadline`.
absl::Status ReadExactly(int fd, char* out, size_t n,
                         std::chrono::steady_clock::time_point deadline, bool forever) {
  size_t done = 0;
  while (done < n) {
    int wait_ms = -1;
    if (!forever) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return absl::DeadlineExceededError("no answer in time");
      wait_ms = static_cast<int>(left.count());
    }
    pollfd p{fd, POLLIN, 0};
    const int rc = poll(&p, 1, wait_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return absl::DeadlineExceededError("no answer in time");
    const ssize_t r = read(fd, out + done, n - done);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r <= 0) return absl::UnavailableError(r == 0 ? "closed" : std::strerror(errno));
    done += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFrame(int fd, int timeout_ms) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  char head[4];
  if (absl::Status st = ReadExactly(fd, head, 4, deadline, timeout_ms < 0); !st.ok()) return st;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<unsigned char>(head[i])} << (8 * i);
  if (n > kMaxFrameBytes) return absl::DataLossError(absl::StrCat("a frame of ", n, " bytes"));
  std::string payload(n, '\0');
  if (absl::Status st = ReadExactly(fd, payload.data(), n, deadline, timeout_ms < 0); !st.ok()) {
    return st;
  }
  return payload;
}

}  // namespace trainscope::sidecar::wire
