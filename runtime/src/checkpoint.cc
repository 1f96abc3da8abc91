// Checkpoint files; see checkpoint.h and docs/runtime.md for the format.
#include "checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"
#include "trainscope/common/clock.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'T', 'S', 'C', 'K', 'P', 'T', '\r', '\n'};
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8;  // magic, version, crc32c of the body, body size
constexpr absl::string_view kPrefix = "ckpt-";
constexpr absl::string_view kSuffix = ".tsckpt";

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

// Little-endian appends.
template <typename T>
void Put(std::string* out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // The machines we run on are little-endian.
  out->append(bytes, sizeof(T));
}

// Bounds-checked little-endian reads over a checkpoint's body.
class Reader {
 public:
  explicit Reader(absl::string_view data) : data_(data) {}
  template <typename T>
  bool Get(T* value) {
    if (data_.size() < sizeof(T)) return false;
    std::memcpy(value, data_.data(), sizeof(T));
    data_.remove_prefix(sizeof(T));
    return true;
  }
  bool Bytes(uint64_t n, std::string* out) {
    if (data_.size() < n) return false;
    out->assign(data_.data(), n);
    data_.remove_prefix(n);
    return true;
  }
  bool empty() const { return data_.empty(); }

 private:
  absl::string_view data_;
};

absl::Status Corrupt(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("corrupt checkpoint: ", why));
}

absl::StatusOr<CheckpointVariable> DecodeVariable(Reader& r) {
  CheckpointVariable v;
  uint32_t name_size = 0, ps = 0, dtype = 0, rank = 0;
  if (!r.Get(&name_size) || name_size > (1u << 20) || !r.Bytes(name_size, &v.name) || !r.Get(&ps) ||
      !r.Get(&dtype) || !r.Get(&rank) || rank > 64) {
    return Corrupt("a variable's header is cut short or out of range");
  }
  v.ps = static_cast<int>(ps);
  v.spec.dtype = static_cast<DType>(dtype);
  v.spec.shape.resize(rank);
  for (int64_t& dim : v.spec.shape) {
    if (!r.Get(&dim)) return Corrupt(absl::StrCat("variable '", v.name, "' is cut short"));
  }
  uint64_t size = 0;
  if (!r.Get(&size) || static_cast<int64_t>(size) != v.spec.ByteSize() ||
      !r.Bytes(size, &v.value)) {
    return Corrupt(absl::StrCat("variable '", v.name, "' (", v.spec.DebugString(),
                                ") does not have the bytes its shape says"));
  }
  return v;
}

// The step a checkpoint file name carries, or -1.
int64_t StepOfName(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !absl::StartsWith(name, kPrefix) ||
      !absl::EndsWith(name, kSuffix)) {
    return -1;
  }
  const std::string digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

}  // namespace

uint32_t Crc32c(absl::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> kTable = MakeCrcTable();
  crc = ~crc;
  for (unsigned char c : data) crc = kTable[(crc ^ c) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::string EncodeCheckpoint(const Checkpoint& checkpoint) {
  std::string body;
  Put<int64_t>(&body, checkpoint.step);
  Put<double>(&body, checkpoint.unix_seconds);
  Put<uint32_t>(&body, static_cast<uint32_t>(checkpoint.num_ps));
  Put<uint32_t>(&body, static_cast<uint32_t>(checkpoint.variables.size()));
  for (const CheckpointVariable& v : checkpoint.variables) {
    Put<uint32_t>(&body, static_cast<uint32_t>(v.name.size()));
    body.append(v.name);
    Put<uint32_t>(&body, static_cast<uint32_t>(v.ps));
    Put<uint32_t>(&body, static_cast<uint32_t>(v.spec.dtype));
    Put<uint32_t>(&body, static_cast<uint32_t>(v.spec.shape.size()));
    for (int64_t dim : v.spec.shape) Put<int64_t>(&body, dim);
    Put<uint64_t>(&body, v.value.size());
    body.append(v.value);
  }
  std::string out(kMagic, sizeof(kMagic));
  Put<uint32_t>(&out, kCheckpointVersion);
  Put<uint32_t>(&out, Crc32c(body));
  Put<uint64_t>(&out, body.size());
  return out + body;
}

absl::StatusOr<Checkpoint> DecodeCheckpoint(absl::string_view bytes) {
  if (bytes.size() < kHeaderSize || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return Corrupt("not a trainscope checkpoint (no header)");
  }
  Reader header(bytes.substr(sizeof(kMagic), kHeaderSize - sizeof(kMagic)));
  uint32_t version = 0, crc = 0;
  uint64_t body_size = 0;
  header.Get(&version);
  header.Get(&crc);
  header.Get(&body_size);
  if (version != kCheckpointVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint format version ", version, "; this build reads version ", kCheckpointVersion));
  }
  const absl::string_view body = bytes.substr(kHeaderSize);
  if (body.size() != body_size) {
    return Corrupt(
        absl::StrCat("truncated: ", body.size(), " bytes of body, the header says ", body_size));
  }
  if (const uint32_t actual = Crc32c(body); actual != crc) {
    return Corrupt(absl::StrCat("checksum mismatch (CRC32C ", absl::Hex(actual),
                                ", the header says ", absl::Hex(crc), ")"));
  }
  Reader r(body);
  Checkpoint checkpoint;
  uint32_t num_ps = 0, num_variables = 0;
  if (!r.Get(&checkpoint.step) || !r.Get(&checkpoint.unix_seconds) || !r.Get(&num_ps) ||
      !r.Get(&num_variables)) {
    return Corrupt("its header is cut short");
  }
  checkpoint.num_ps = static_cast<int>(num_ps);
  for (uint32_t i = 0; i < num_variables; ++i) {
    auto v = DecodeVariable(r);
    if (!v.ok()) return v.status();
    checkpoint.variables.push_back(*std::move(v));
  }
  if (!r.empty()) return Corrupt("bytes after the last variable");
  return checkpoint;
}

std::vector<std::string> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = StepOfName(entry.path().filename().string());
    if (step >= 0) found.emplace_back(step, entry.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::vector<std::string> paths;
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

absl::Status WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint, int keep,
                             std::string* path) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  char name[64];
  std::snprintf(name, sizeof(name), "ckpt-%012lld.tsckpt", static_cast<long long>(checkpoint.step));
  const std::string final_path = (fs::path(dir) / name).string();
  const std::string temp_path = absl::StrCat(final_path, ".tmp.", getpid());
  const std::string bytes = EncodeCheckpoint(checkpoint);
  const int fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot write checkpoint ", temp_path, ": ", std::strerror(errno)));
  }
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  // Durable before it is visible: a crash leaves the previous checkpoint, never half of this one.
  const bool ok = written == bytes.size() && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!ok || ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    ::unlink(temp_path.c_str());
    return absl::UnavailableError(absl::StrCat("cannot write checkpoint ", final_path, ": ",
                                               std::strerror(ok ? errno : saved_errno)));
  }
  *path = final_path;
  const std::vector<std::string> all = ListCheckpoints(dir);
  for (size_t i = static_cast<size_t>(std::max(keep, 1)); i < all.size(); ++i) {
    fs::remove(all[i], ec);
  }
  return absl::OkStatus();
}

absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open checkpoint ", path));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  auto checkpoint = DecodeCheckpoint(bytes.str());
  if (!checkpoint.ok()) {
    return absl::Status(checkpoint.status().code(),
                        absl::StrCat(path, ": ", checkpoint.status().message()));
  }
  return checkpoint;
}

absl::StatusOr<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& dir) {
  LoadedCheckpoint loaded;
  for (const std::string& path : ListCheckpoints(dir)) {
    auto checkpoint = ReadCheckpoint(path);
    if (!checkpoint.ok()) {
      loaded.refused.emplace_back(checkpoint.status().message());
      continue;
    }
    loaded.checkpoint = *std::move(checkpoint);
    loaded.path = path;
    return loaded;
  }
  return absl::NotFoundError(absl::StrCat(
      "no checkpoint in ", dir,
      loaded.refused.empty() ? ""
                             : absl::StrCat(" that reads whole (refused: ",
                                            absl::StrJoin(loaded.refused, "; "), ")")));
}

CheckpointSaver::CheckpointSaver(CheckpointSaverOptions options)
    : options_(std::move(options)), last_due_s_(MonotonicSeconds()) {
  thread_ = std::thread([this] { Loop(); });
}

CheckpointSaver::~CheckpointSaver() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
    cv_.notify_all();
  }
  thread_.join();
}

bool CheckpointSaver::Due(int64_t step) const {
  std::lock_guard lock(mu_);
  if (busy_ || pending_) return false;
  const bool by_time = options_.every_s > 0 && MonotonicSeconds() - last_due_s_ >= options_.every_s;
  const bool by_steps = options_.every_steps > 0 && step - last_due_step_ >= options_.every_steps;
  return by_time || by_steps;
}

void CheckpointSaver::Save(Checkpoint checkpoint) {
  std::lock_guard lock(mu_);
  if (busy_ || pending_) return;
  last_due_s_ = MonotonicSeconds();
  last_due_step_ = checkpoint.step;
  pending_ = std::move(checkpoint);
  cv_.notify_all();
}

void CheckpointSaver::ResumedAt(int64_t step) {
  std::lock_guard lock(mu_);
  last_due_s_ = MonotonicSeconds();
  last_due_step_ = step;
}

CheckpointSaver::Stats CheckpointSaver::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CheckpointSaver::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return quit_ || pending_.has_value(); });
    if (!pending_) return;  // Quitting with nothing left to write.
    Checkpoint checkpoint = std::move(*pending_);
    pending_.reset();
    busy_ = true;
    lock.unlock();
    Write(checkpoint);
    lock.lock();
    busy_ = false;
  }
}

void CheckpointSaver::Write(const Checkpoint& checkpoint) {
  const double start = MonotonicSeconds();
  std::string path;
  absl::Status st = WriteCheckpoint(options_.dir, checkpoint, options_.keep, &path);
  const double took = MonotonicSeconds() - start;
  std::error_code ec;
  const auto bytes = st.ok() ? static_cast<int64_t>(fs::file_size(path, ec)) : 0;
  if (options_.on_written) options_.on_written(st.ok(), took, bytes);
  std::lock_guard lock(mu_);
  if (!st.ok()) {
    ++stats_.failures;
    spdlog::error("{} could not save the checkpoint of step {}: {}", options_.task_name,
                  checkpoint.step, std::string(st.message()));
    return;
  }
  ++stats_.saved;
  stats_.last_unix_seconds = UnixSeconds();
  stats_.last_duration_seconds = took;
  stats_.last_bytes = bytes;
  stats_.last_step = checkpoint.step;
  spdlog::info("checkpoint of step {} saved to {} ({} variables, {} bytes, {:.1f} ms)",
               checkpoint.step, path, checkpoint.variables.size(), bytes, took * 1000);
}

}  // namespace trainscope
