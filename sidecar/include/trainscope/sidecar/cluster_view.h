#pragma once
// The cluster view: this sidecar's own tasks merged with what the sidecars of other nodes report,
// then read as a whole: a blocked task's reason says what is known of each peer it waits on
// (dead, missing, listening elsewhere), and a task that answers its own sidecar while its peers
// cannot reach it is flagged as a likely partition. Pure functions over TaskView values.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/sidecar/task_view.h"

namespace trainscope::sidecar {

// What one peer sidecar said the last time it was asked.
struct PeerReport {
  std::string sidecar;  // host:port
  bool ok = false;
  std::string error;  // When !ok.
  std::vector<TaskView> views;
};

// Local views win for local tasks; for the others, the freshest view of any peer sidecar of the
// same cluster. Tasks of `spec` nobody reports on become `unreachable` with a reason naming the
// sidecars tried. Views of tasks outside `spec` or of another cluster are dropped.
std::vector<TaskView> MergeViews(const std::string& cluster, const ClusterSpec& spec,
                                 const std::vector<TaskView>& local,
                                 const std::vector<PeerReport>& peers, double now_unix);

// Appends to each blocked task's reason what `all` knows of the peers it waits on.
void AnnotateBlocked(std::vector<TaskView>& views, const ClusterSpec& spec);

// True for an error that says the peer answered too late (DEADLINE_EXCEEDED): the peer was
// reached, so it is no evidence of a partition.
bool IsDeadlineError(absl::string_view error);

// Marks tasks that are `up` for their own sidecar but that at least one other task fails to
// reach (PeerView: not connected, >= 3 consecutive failures, no success for >= 3 s) as
// `unreachable`, with a reason that says partition.
void MarkPartitions(std::vector<TaskView>& views, double now_unix);

// True when two host:port addresses name the same place as far as a watcher can tell
// (wildcard or loopback hosts compare by port).
bool SameAddress(const std::string& a, const std::string& b);

}  // namespace trainscope::sidecar
