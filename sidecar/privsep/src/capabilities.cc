// Dropping capabilities with the system calls themselves (capset, prctl): libcap is not a
// dependency of the project, and these are the only calls needed.
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainscope/sidecar/capture_helper.h"

namespace trainscope::sidecar {

absl::Status KeepOnlyCapabilities(uint64_t keep) {
  // The bounding set first: dropping from it needs CAP_SETPCAP, which goes below. EINVAL ends
  // the kernel's list of capabilities; EPERM (no CAP_SETPCAP, as under the Debian unit's
  // ambient set) leaves the bounding set as it is: it grants nothing by itself.
  for (int cap = 0; cap < 64; ++cap) {
    if ((keep >> cap) & 1) continue;
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) < 0) break;
    prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (syscall(SYS_capget, &header, data) != 0) {
    return absl::InternalError(absl::StrCat("capget: ", strerror(errno)));
  }
  for (int i = 0; i < 2; ++i) {
    const auto mask = static_cast<uint32_t>(keep >> (32 * i));
    data[i].permitted &= mask;
    data[i].effective = data[i].permitted;
    data[i].inheritable = 0;
  }
  if (syscall(SYS_capset, &header, data) != 0) {
    return absl::InternalError(absl::StrCat("capset: ", strerror(errno)));
  }
  // Nothing gained back by exec'ing a setuid or file-capability program.
  if (keep == 0) prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  return absl::OkStatus();
}

std::optional<uint64_t> EffectiveCapabilities(pid_t pid) {
  std::ifstream in(pid == 0 ? std::string("/proc/self/status")
                            : absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    uint64_t mask = 0;
    const std::string hex(absl::StripAsciiWhitespace(line.substr(7)));
    if (absl::SimpleHexAtoi(hex, &mask)) return mask;
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace trainscope::sidecar
