// Checkpoints as a task takes part in them: the ps that restores its variables at startup and
// tells its callers what it restored, and the checkpointing worker that saves what it pulls.
// The file format is in checkpoint.cc; the worker's side of a ps restart in parameter_client.cc.
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "task_impl.h"
#include "trainscope/common/clock.h"
#include "trainscope/runtime/status_macros.h"

namespace trainscope {
namespace {

// The task that saves checkpoints: the chief, or worker:0 when the cluster has no chief.
bool IsCheckpointer(const ClusterSpec& cluster, const TaskRef& self) {
  if (cluster.NumTasks("chief") > 0) return self.role == "chief" && self.index == 0;
  return self.role == "worker" && self.index == 0;
}

}  // namespace

absl::Status Task::Impl::RestoreFromCheckpoint() {
  const std::string& dir = options_.checkpoint_dir;
  if (dir.empty()) return absl::OkStatus();
  const std::string me = self_.ShortName();
  const double start = MonotonicSeconds();
  auto loaded = LoadLatestCheckpoint(dir);
  if (loaded.ok()) {
    for (const std::string& why : loaded->refused) {
      spdlog::error("{} refused a checkpoint: {}; using the one before it", me, why);
    }
  }
  if (!loaded.ok()) {
    spdlog::info("{} starts empty: {}", me, std::string(loaded.status().message()));
    return absl::OkStatus();
  }
  const Checkpoint& c = loaded->checkpoint;
  const int num_ps = cluster_.NumTasks("ps");
  if (c.num_ps != num_ps) {
    return absl::FailedPreconditionError(
        absl::StrCat(me, " cannot restore ", loaded->path, ": it was written by a cluster of ",
                     c.num_ps, " ps tasks and this one has ", num_ps,
                     " (the variables are placed differently); give "
                     "this run another --checkpoint_dir"));
  }
  int restored = 0;
  for (const CheckpointVariable& v : c.variables) {
    if (v.ps != self_.index) continue;
    auto created = store_->Create(v.name, v.spec, v.value, "a checkpoint");
    if (!created.ok()) {
      return absl::Status(
          created.status().code(),
          absl::StrCat(me, " cannot restore ", loaded->path, ": ", created.status().message()));
    }
    ++restored;
  }
  metrics_->RecordRestore();
  ps_memory_.SetRestored(c.step, loaded->path);
  spdlog::info(
      "{} restored {} variables ({}) of step {} from {} (written {:.1f} s ago) in {:.1f} ms", me,
      restored, HumanBytes(store_->bytes_held()), c.step, loaded->path,
      UnixSeconds() - c.unix_seconds, (MonotonicSeconds() - start) * 1000);
  return absl::OkStatus();
}

void Task::Impl::StartCheckpointSaver() {
  if (options_.checkpoint_dir.empty() || !IsCheckpointer(cluster_, self_)) return;
  if (options_.checkpoint_every_s <= 0 && options_.checkpoint_every_steps <= 0) return;
  saver_ = std::make_unique<CheckpointSaver>(CheckpointSaverOptions{
      options_.checkpoint_dir, options_.checkpoint_every_s, options_.checkpoint_every_steps,
      options_.checkpoints_to_keep, self_.ShortName(),
      [m = metrics_.get()](bool ok, double seconds, int64_t bytes) {
        m->RecordCheckpoint(ok, seconds, bytes);
      }});
  metrics_->StartCheckpointing();
  client_->SetAfterPull(
      [this](const std::vector<std::string>& values) { MaybeCheckpoint(values); });
  spdlog::info("{} saves a checkpoint every {} into {} (keeping {})", self_.ShortName(),
               options_.checkpoint_every_steps > 0
                   ? absl::StrCat(options_.checkpoint_every_steps, " steps")
                   : absl::StrCat(options_.checkpoint_every_s, " s"),
               options_.checkpoint_dir, options_.checkpoints_to_keep);
}

void Task::Impl::MaybeCheckpoint(const std::vector<std::string>& values) {
  // The values were pulled at the start of a step: they hold every update of the steps done.
  const int64_t step = status_.steps();
  if (!saver_ || !saver_->Due(step)) return;
  Checkpoint c;
  c.step = step;
  c.num_ps = cluster_.NumTasks("ps");
  c.unix_seconds = UnixSeconds();
  const std::vector<VariableDef>& vars = client_->variables();
  for (size_t i = 0; i < vars.size() && i < values.size(); ++i) {
    c.variables.push_back({vars[i].name, client_->PlacementOf(i), vars[i].spec, values[i]});
  }
  saver_->Save(std::move(c));
}

}  // namespace trainscope
