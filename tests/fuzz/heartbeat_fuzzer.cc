// libFuzzer target: heartbeat answers as the sidecar decodes them (sidecar/detect/src/poller.cc,
// DecodeHeartbeatAnswer) and then judges them (TaskTracker), over a history of polls: a task's
// answers are the bytes any process on the watched port can send. Each record of the input
// (fuzz_records.h) is one poll: the tag gives the delay before it and its latency, the payload
// is the serialized HeartbeatResponse. The tracker watches worker:0 of cluster "demo" on this
// machine; /proc is a stand-in that follows the tag too.
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "fuzz_records.h"
#include "google/protobuf/stubs/logging.h"
#include "trainscope/sidecar/poller.h"
#include "trainscope/sidecar/stragglers.h"
#include "trainscope/sidecar/task_tracker.h"

namespace {

using trainscope::ProcStat;
using trainscope::TaskRef;
using trainscope::sidecar::PollResult;
using trainscope::sidecar::TaskTracker;
using trainscope::sidecar::TaskView;

constexpr double kStartS = 1000;
constexpr double kStartUnix = 1.7e9;
constexpr double kIntervalS = 0.1;

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses; at fuzzing speed that is noise.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  TaskTracker tracker("demo", TaskRef{"worker", 0}, "127.0.0.1:2223", /*local=*/true,
                      trainscope::sidecar::TrackerOptions{}, kStartS, kStartUnix);
  char proc_state = 'S';
  auto proc = [&](int64_t pid) -> std::optional<ProcStat> {
    if (proc_state == 'X') return std::nullopt;
    ProcStat stat;
    stat.state = proc_state;
    stat.cpu_seconds = static_cast<double>(pid % 1000);
    return stat;
  };
  trainscope::fuzz::RecordReader reader(data, size);
  trainscope::fuzz::Record record;
  double now = kStartS;
  std::vector<TaskView> views;
  for (int polls = 0; polls < 64 && reader.Next(&record); ++polls) {
    // Tag: bits 0-2 the gap before this poll (in intervals), bits 3-5 its latency, bits 6-7 the
    // process state /proc shows.
    now += kIntervalS * (1 + (record.tag & 7));
    const double latency = 0.001 * (1 << ((record.tag >> 3) & 7));
    proc_state = "SRTX"[record.tag >> 6];
    if (tracker.MaySkipPoll(now, proc)) tracker.OnPollSkipped();
    PollResult result =
        trainscope::sidecar::DecodeHeartbeatAnswer(record.payload, now, now + latency);
    // As the poller's identity check passes for a local task: the /proc paths are fuzzed too.
    if (result.ok) result.heartbeat.pid_verified = true;
    tracker.OnResult(result);
    views.push_back(tracker.Evaluate(now + latency, kStartUnix + now - kStartS, proc));
    (void)tracker.TakeEvents();
  }
  if (!views.empty()) {
    // The fail-slow diagnosis over what the tracker made of the input: the last view as the
    // task, its earlier views as its peers.
    std::map<trainscope::TaskRef, trainscope::sidecar::TaskView> tasks;
    for (size_t i = 0; i < views.size() && i < 8; ++i) {
      trainscope::sidecar::TaskView v = views[views.size() - 1 - i];
      v.task.index = static_cast<int>(i);
      tasks[v.task] = v;
    }
    const auto map = trainscope::sidecar::BuildWorkerPsMap(tasks);
    for (const auto& s : trainscope::sidecar::FindStragglers(tasks, map)) {
      (void)trainscope::sidecar::StragglerWords(s);
    }
  }
  return 0;
}
