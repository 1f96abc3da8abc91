#pragma once
// The detect part's metric families, built at scrape time with telemetry's builders: each local
// task's state, heartbeat and resources as its tracker saw them first-hand, the watcher's own
// counters, and the snapshots of stuck tasks. Series grow with this node's tasks only.

#include <cstdint>
#include <map>
#include <vector>

#include "prometheus/client_metric.h"
#include "trainscope/sidecar/stack_keeper.h"
#include "trainscope/sidecar/task_view.h"
#include "trainscope/sidecar/task_watcher.h"

namespace prometheus {
struct MetricFamily;
}

namespace trainscope::sidecar {

// `decided`: each task's state as the cluster view decided it (it may blame a ps slower than its
// peers); a task missing from it has its tracker's state.
void AddTaskFamilies(const LocalSnapshot& local, const std::map<TaskRef, TaskState>& decided,
                     std::vector<prometheus::MetricFamily>* out);
// What each local task's cgroup says (TaskView::cgroup): a family per fact, a series per task
// whose fact is known.
void AddCgroupFamilies(const LocalSnapshot& local, std::vector<prometheus::MetricFamily>* out);
// Tasks watched, and the times the watcher's own loop was paused.
void AddWatcherFamilies(const LocalSnapshot& local, int64_t pauses,
                        std::vector<prometheus::MetricFamily>* out);
// Snapshots taken and failed, their bytes kept, the last capture's longest pause.
void AddSnapshotFamilies(const KeeperStats& keeper, std::vector<prometheus::MetricFamily>* out);

}  // namespace trainscope::sidecar
