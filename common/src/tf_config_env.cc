// TF_CONFIG read from other processes' environments; see tf_config_env.h.
#include "trainscope/common/tf_config_env.h"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <fstream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/process_identity.h"

namespace trainscope {
namespace {

constexpr std::string_view kVariable = "TF_CONFIG=";

std::string ReadBounded(const std::string& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

// The value of TF_CONFIG in a NUL-separated environment; "" when absent.
std::string TfConfigOf(const std::string& environ) {
  for (size_t at = 0; at < environ.size();) {
    size_t end = environ.find('\0', at);
    if (end == std::string::npos) end = environ.size();
    if (environ.compare(at, kVariable.size(), kVariable) == 0) {
      return environ.substr(at + kVariable.size(), end - at - kVariable.size());
    }
    at = end + 1;
  }
  return "";
}

bool IsPid(const char* name) {
  if (*name == '\0') return false;
  for (const char* c = name; *c != '\0'; ++c) {
    if (!std::isdigit(static_cast<unsigned char>(*c))) return false;
  }
  return true;
}

}  // namespace

std::string TfConfigInEnviron(const std::string& environ) { return TfConfigOf(environ); }

absl::StatusOr<FoundTfConfig> FindTfConfigInProcesses(const std::string& proc_root) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(proc_root.c_str()), closedir);
  if (!dir) return absl::NotFoundError(absl::StrCat("cannot list ", proc_root));
  const int self = getpid();
  int read = 0;
  std::optional<FoundTfConfig> found;
  std::string found_fingerprint;
  while (dirent* entry = readdir(dir.get())) {
    if (!IsPid(entry->d_name) || std::atoi(entry->d_name) == self) continue;
    const std::string base = absl::StrCat(proc_root, "/", entry->d_name);
    const std::string environ =
        ReadProcessEnviron(std::atoi(entry->d_name), proc_root).value_or("");
    if (environ.empty()) continue;
    ++read;
    std::string text = TfConfigOf(environ);
    if (text.empty()) continue;
    auto config = ParseTfConfig(text, /*require_task=*/false);
    if (!config.ok()) continue;  // Not a spec this sidecar could use; another process may hold one.
    std::string command = ReadBounded(base + "/comm", 64);
    while (!command.empty() && command.back() == '\n') command.pop_back();
    const std::string fingerprint = config->cluster.Fingerprint();
    if (!found) {
      found = FoundTfConfig{std::move(text), std::atoi(entry->d_name), std::move(command)};
      found_fingerprint = fingerprint;
    } else if (fingerprint != found_fingerprint) {
      return absl::InvalidArgumentError(
          absl::StrCat("processes hold different TF_CONFIG cluster specs: pid ", found->pid, " (",
                       found->command, ") and pid ", entry->d_name, " (", command,
                       "); give the sidecar the job's spec with --cluster_spec FILE or TF_CONFIG"));
    }
  }
  if (found) return *std::move(found);
  return absl::NotFoundError(
      absl::StrCat("none of the ", read,
                   " other processes whose environment this sidecar can read has TF_CONFIG"));
}

}  // namespace trainscope
