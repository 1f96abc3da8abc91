// Node and GPU readings; see system_metrics.h.
#include "system_metrics.h"

#include <dlfcn.h>
#include <unistd.h>

#include <fstream>
#include <mutex>
#include <sstream>

namespace trainscope::telemetry {

NodeUsage ReadNodeUsage() {
  NodeUsage usage;
  static const double kTicks = static_cast<double>(sysconf(_SC_CLK_TCK));
  std::ifstream stat("/proc/stat");
  std::string label;
  stat >> label;
  if (label == "cpu") {
    static const char* kModes[] = {"user",   "nice", "system",  "idle",
                                   "iowait", "irq",  "softirq", "steal"};
    for (const char* mode : kModes) {
      double ticks = 0;
      if (!(stat >> ticks)) break;
      usage.cpu_seconds_by_mode.emplace_back(mode, ticks / kTicks);
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream in(line);
    std::string key;
    int64_t kib = 0;
    in >> key >> kib;
    if (key == "MemTotal:") usage.memory_total_bytes = kib * 1024;
    if (key == "MemAvailable:") usage.memory_available_bytes = kib * 1024;
  }
  return usage;
}

namespace {

// The few NVML entry points we use, with NVML's own C types.
struct Nvml {
  using Device = void*;
  struct Utilization {
    unsigned int gpu;
    unsigned int memory;
  };
  struct Memory {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
  };
  int (*init)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, Device*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  bool ok = false;
};

const Nvml& LoadNvml() {
  static Nvml nvml;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    nvml.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    nvml.count = reinterpret_cast<int (*)(unsigned int*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
    nvml.handle = reinterpret_cast<int (*)(unsigned int, Nvml::Device*)>(
        dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    nvml.utilization = reinterpret_cast<int (*)(Nvml::Device, Nvml::Utilization*)>(
        dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    nvml.memory = reinterpret_cast<int (*)(Nvml::Device, Nvml::Memory*)>(
        dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    nvml.ok = nvml.init && nvml.count && nvml.handle && nvml.utilization && nvml.memory &&
              nvml.init() == 0;
  });
  return nvml;
}

}  // namespace

std::vector<GpuUsage> ReadGpuUsage() {
  std::vector<GpuUsage> out;
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return out;
  unsigned int count = 0;
  if (nvml.count(&count) != 0) return out;
  for (unsigned int i = 0; i < count; ++i) {
    Nvml::Device device = nullptr;
    Nvml::Utilization util{};
    Nvml::Memory mem{};
    if (nvml.handle(i, &device) != 0 || nvml.utilization(device, &util) != 0 ||
        nvml.memory(device, &mem) != 0) {
      continue;
    }
    out.push_back({static_cast<int>(i), util.gpu / 100.0, static_cast<int64_t>(mem.used),
                   static_cast<int64_t>(mem.total)});
  }
  return out;
}

}  // namespace trainscope::telemetry
