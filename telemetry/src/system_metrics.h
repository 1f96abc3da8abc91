#pragma once
// Readings of the machine for /metrics: node CPU time by mode and memory from /proc, and NVIDIA
// GPU utilization and memory through NVML loaded at run time (no GPU, no driver: no readings).

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::telemetry {

struct NodeUsage {
  std::vector<std::pair<std::string, double>> cpu_seconds_by_mode;
  int64_t memory_total_bytes = 0;
  int64_t memory_available_bytes = 0;
};
NodeUsage ReadNodeUsage();

struct GpuUsage {
  int index = 0;
  double utilization_ratio = 0;
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
};
// Empty when libnvidia-ml.so.1 cannot be loaded or reports no device. Thread-safe.
std::vector<GpuUsage> ReadGpuUsage();

}  // namespace trainscope::telemetry
