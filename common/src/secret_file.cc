#include "trainscope/common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainscope {

absl::StatusOr<std::string> ReadSecretFile(std::string_view flag, const std::string& path,
                                           size_t max_bytes) {
  const std::string where = std::string(flag) + " " + path;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": cannot read it (", std::strerror(errno), ")"));
  }
  struct stat st {};
  std::string error;
  if (fstat(fd, &st) != 0) {
    error = absl::StrCat(where, ": cannot stat it (", std::strerror(errno), ")");
  } else if (!S_ISREG(st.st_mode)) {
    error = absl::StrCat(where, ": not a regular file");
  } else if ((st.st_mode & S_IRWXO) != 0) {
    error = absl::StrFormat(
        "%s: every user of this machine may read or change this secret (mode %04o); it is "
        "refused. Make it private: chmod 600 %s (or give it as a systemd credential, "
        "docs/security.md)",
        where, st.st_mode & 07777, path);
  } else if (static_cast<size_t>(st.st_size) > max_bytes) {
    error = absl::StrCat(where, ": ", st.st_size, " bytes, more than a secret of this kind (",
                         max_bytes, ")");
  }
  std::string text;
  if (error.empty()) {
    text.resize(max_bytes + 1);
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = read(fd, text.data() + got, text.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        error = absl::StrCat(where, ": cannot read it (", std::strerror(errno), ")");
        break;
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (error.empty() && got > max_bytes) {
      error = absl::StrCat(where, ": more than ", max_bytes,
                           " bytes, more than a secret of this "
                           "kind");
    }
    text.resize(got);
  }
  close(fd);
  if (!error.empty()) return absl::InvalidArgumentError(error);
  return text;
}

std::string CredentialPath(std::string_view name, const char* credentials_dir) {
  const char* dir = credentials_dir ? credentials_dir : std::getenv("CREDENTIALS_DIRECTORY");
  if (dir == nullptr || *dir == '\0' || name.empty()) return "";
  const std::string own = std::string(dir) + "/" + std::string(name);
  const std::string loaded = std::string(dir) + "/trainscope_" + std::string(name);
  for (const std::string& candidate : {own, loaded}) {
    struct stat st {};
    if (stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode)) return candidate;
  }
  return "";
}

}  // namespace trainscope
