#pragma once
// Checkpoints: the values of every variable of a training run at one step, in one file of our
// own format (docs/runtime.md, "Checkpoints"), and the directory that keeps the last few.
// Files are written to a temporary name and renamed into place, so a reader never sees one
// half-written; each carries a CRC32C of its contents, so a corrupt or truncated one is refused
// (with the reason and its path) and the one before it used. Knows nothing of gRPC.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainscope/runtime/tensor.h"

namespace trainscope {

inline constexpr uint32_t kCheckpointVersion = 1;

struct CheckpointVariable {
  std::string name;
  int ps = 0;  // The ps task that holds it.
  TensorSpec spec;
  std::string value;  // spec.ByteSize() bytes.
};

struct Checkpoint {
  int64_t step = 0;  // Steps the saving task had done when it pulled these values.
  int num_ps = 0;    // ps tasks of the cluster that wrote it (placement depends on it).
  double unix_seconds = 0;
  std::vector<CheckpointVariable> variables;
};

// CRC32C (Castagnoli), as iSCSI and ext4 use it; `crc` continues an earlier one.
uint32_t Crc32c(absl::string_view data, uint32_t crc = 0);

std::string EncodeCheckpoint(const Checkpoint& checkpoint);
// DATA_LOSS naming what is wrong (bad magic, version, size, checksum) when `bytes` is not a
// whole checkpoint of ours.
absl::StatusOr<Checkpoint> DecodeCheckpoint(absl::string_view bytes);

// Checkpoint files in `dir` ("ckpt-<step>.tsckpt"), newest (highest step) first.
std::vector<std::string> ListCheckpoints(const std::string& dir);

// Writes `checkpoint` into `dir` (created if missing) through a temporary file, fsync and
// rename, then deletes all but the newest `keep`. Its path into `*path`.
absl::Status WriteCheckpoint(const std::string& dir, const Checkpoint& checkpoint, int keep,
                             std::string* path);

// Reads and checks one checkpoint file; errors name the file.
absl::StatusOr<Checkpoint> ReadCheckpoint(const std::string& path);

struct LoadedCheckpoint {
  Checkpoint checkpoint;
  std::string path;
  std::vector<std::string> refused;  // Why each newer file was refused.
};
// The newest checkpoint in `dir` that reads whole, skipping (and explaining, in `refused`) the
// ones that do not. NOT_FOUND when there is none, its message listing the refused files.
absl::StatusOr<LoadedCheckpoint> LoadLatestCheckpoint(const std::string& dir);

struct CheckpointSaverOptions {
  std::string dir;
  double every_s = 60;      // 0 = not by time.
  int64_t every_steps = 0;  // 0 = not by steps.
  int keep = 3;
  std::string task_name;  // In log lines.
  // Called after each write: whether it worked, how long it took, the file's size.
  std::function<void(bool ok, double seconds, int64_t bytes)> on_written;
};

// Writes checkpoints on a thread of its own, so that the training loop only copies the values
// it pulled anyway (no extra call to any ps, no lock held on one). Thread-safe.
class CheckpointSaver {
 public:
  explicit CheckpointSaver(CheckpointSaverOptions options);
  // Finishes the write in progress, if any.
  ~CheckpointSaver();

  // True when a checkpoint is due at `step` (by time or by steps since the last one) and the
  // writer is free to take it.
  bool Due(int64_t step) const;
  // Hands `checkpoint` to the writer; dropped when the writer is still busy with the last one.
  void Save(Checkpoint checkpoint);
  // The run goes on from `step` (restored): the next checkpoint is due counting from it.
  void ResumedAt(int64_t step);

  struct Stats {
    int64_t saved = 0;
    int64_t failures = 0;
    double last_unix_seconds = 0;  // When the newest checkpoint was written; 0 = none yet.
    double last_duration_seconds = 0;
    int64_t last_bytes = 0;
    int64_t last_step = 0;
  };
  Stats stats() const;

 private:
  void Loop();
  void Write(const Checkpoint& checkpoint);

  const CheckpointSaverOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Checkpoint> pending_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  double last_due_s_ ABSL_GUARDED_BY(mu_);  // MonotonicSeconds() of the last checkpoint taken.
  int64_t last_due_step_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace trainscope
