// The .tar.gz writer and the whole-or-nothing file; see tar_gz.h.
#include "trainscope/sidecar/tar_gz.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainscope::sidecar {
namespace {

constexpr size_t kBlock = 512;

// InvalidArgument unless `name` is a relative path of printable ASCII without "." or ".." parts.
absl::Status CheckName(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.back() == '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("a file in an archive needs a relative name: \"", name, "\""));
  }
  for (char c : name) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrCat("a file name in an archive must be printable ASCII: \"", name, "\""));
    }
  }
  for (absl::string_view part : absl::StrSplit(name, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("a file name in an archive has an empty, . or .. part: \"", name, "\""));
    }
  }
  return absl::OkStatus();
}

// `value` in octal, zero-padded, in a field of `width` bytes ending in NUL.
void Octal(char* field, size_t width, uint64_t value) {
  field[width - 1] = '\0';
  for (size_t i = width - 1; i-- > 0; value >>= 3) field[i] = static_cast<char>('0' + (value & 7));
}

// One ustar header block for `name` ('0' a file of `size` bytes, '5' a folder).
absl::StatusOr<std::string> Header(const std::string& name, char type, uint64_t size,
                                   int64_t mtime) {
  std::string h(kBlock, '\0');
  std::string_view prefix;
  std::string_view rest = name;
  if (name.size() > 100) {
    // Split at a '/' so that the folder part fits in 155 bytes and the rest in 100.
    // (A folder's own trailing '/' is not a place to split.)
    const size_t last = name.size() - (name.back() == '/' ? 2 : 1);
    size_t at = name.rfind('/', std::min<size_t>(155, last));
    if (at != std::string_view::npos && name.size() - at - 1 > 100) at = std::string_view::npos;
    if (at == std::string_view::npos || at == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a file name too long for a tar archive (ustar): \"", name, "\""));
    }
    prefix = std::string_view(name).substr(0, at);
    rest = std::string_view(name).substr(at + 1);
  }
  if (size >= (uint64_t{1} << 33)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a file of 8 GiB or more does not fit a ustar header: ", name));
  }
  if (!rest.empty()) std::memcpy(&h[0], rest.data(), rest.size());
  Octal(&h[100], 8, type == '5' ? 0700 : 0600);  // Stacks and traces: the owner's only.
  Octal(&h[108], 8, 0);
  Octal(&h[116], 8, 0);
  Octal(&h[124], 12, size);
  Octal(&h[136], 12, static_cast<uint64_t>(std::max<int64_t>(0, mtime)));
  h[156] = type;
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memcpy(&h[265], "root", 4);
  std::memcpy(&h[297], "root", 4);
  // (memcpy from an empty view's null data is undefined, even for 0 bytes.)
  if (!prefix.empty()) std::memcpy(&h[345], prefix.data(), prefix.size());
  // The checksum: the sum of the header's bytes with its own field as spaces.
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  Octal(&h[148], 7, sum);  // Six digits and a NUL, then the space left there.
  return h;
}

absl::StatusOr<std::string> Gzip(std::string_view in) {
  z_stream zs{};
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return absl::InternalError("zlib: deflateInit2 failed");
  }
  std::string out;
  char buf[64 * 1024];
  size_t fed = 0;
  int rc = Z_OK;
  do {
    if (zs.avail_in == 0 && fed < in.size()) {
      const size_t n = std::min<size_t>(in.size() - fed, 1u << 30);
      zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + fed));
      zs.avail_in = static_cast<uInt>(n);
      fed += n;
    }
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = deflate(&zs, fed == in.size() ? Z_FINISH : Z_NO_FLUSH);
    if (rc == Z_STREAM_ERROR) break;
    out.append(buf, sizeof(buf) - zs.avail_out);
  } while (rc != Z_STREAM_END);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) return absl::InternalError("zlib: deflate failed");
  return out;
}

absl::Status Errno(const char* what, const std::string& path, int err) {
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

}  // namespace

absl::StatusOr<std::string> TarGz(const std::vector<TarFile>& files, int64_t mtime_unix) {
  std::string tar;
  std::set<std::string, std::less<>> folders;
  std::set<std::string, std::less<>> names;
  for (const TarFile& f : files) {
    if (absl::Status st = CheckName(f.name); !st.ok()) return st;
    if (!names.insert(f.name).second) {
      return absl::InvalidArgumentError(absl::StrCat("the archive names ", f.name, " twice"));
    }
    for (size_t at = f.name.find('/'); at != std::string::npos; at = f.name.find('/', at + 1)) {
      std::string folder = f.name.substr(0, at + 1);
      if (!folders.insert(folder).second) continue;
      auto h = Header(folder, '5', 0, mtime_unix);
      if (!h.ok()) return h.status();
      tar += *h;
    }
    auto h = Header(f.name, '0', f.data.size(), mtime_unix);
    if (!h.ok()) return h.status();
    tar += *h;
    tar += f.data;
    tar.append((kBlock - f.data.size() % kBlock) % kBlock, '\0');
  }
  tar.append(2 * kBlock, '\0');  // The end: two blocks of zeros.
  return Gzip(tar);
}

absl::Status CheckWritable(const std::string& path, bool overwrite) {
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (path.empty() || slash == path.size() - 1) {
    return absl::InvalidArgumentError(absl::StrCat("\"", path, "\" names no file"));
  }
  struct stat st;
  if (stat(folder.c_str(), &st) != 0) return Errno("cannot use the folder", folder, errno);
  if (!S_ISDIR(st.st_mode)) return absl::NotFoundError(absl::StrCat(folder, " is not a folder"));
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(path + " is a folder");
    if (!overwrite) return absl::AlreadyExistsError(absl::StrCat(path, " exists"));
  }
  return absl::OkStatus();
}

absl::Status WriteFileWhole(const std::string& path, std::string_view bytes, bool overwrite) {
  if (absl::Status st = CheckWritable(path, overwrite); !st.ok()) return st;
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string tmp = (slash == std::string::npos ? "" : folder) + "." + base + ".XXXXXX";
  const int fd = mkstemp(tmp.data());
  if (fd < 0) return Errno("cannot create a file in", folder, errno);
  fchmod(fd, 0600);  // A bundle holds stacks and traces of the tasks: its owner's only.
  absl::Status result = absl::OkStatus();
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      result = Errno("cannot write", tmp, n < 0 ? errno : EIO);
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (result.ok() && fsync(fd) != 0) result = Errno("cannot sync", tmp, errno);
  if (close(fd) != 0 && result.ok()) result = Errno("cannot write", tmp, errno);
  if (result.ok()) {
    if (overwrite) {
      if (rename(tmp.c_str(), path.c_str()) != 0) result = Errno("cannot write", path, errno);
    } else if (link(tmp.c_str(), path.c_str()) != 0) {
      result = errno == EEXIST ? absl::AlreadyExistsError(absl::StrCat(path, " exists"))
                               : Errno("cannot write", path, errno);
    }
  }
  // After a rename the temporary name is gone already; after a link it is the second name.
  if (!(result.ok() && overwrite)) unlink(tmp.c_str());
  return result;
}

}  // namespace trainscope::sidecar
