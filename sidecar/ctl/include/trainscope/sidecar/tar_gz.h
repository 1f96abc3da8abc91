#pragma once
// A gzip-compressed tar archive (POSIX ustar, what `tar -xzf` reads) of a few files held in
// memory, and a file written whole or not at all: what trainscopectl's incident bundle is made
// of. zlib compresses; the 512-byte ustar headers are written here. Thread-safe (no state).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace trainscope::sidecar {

// One regular file of an archive: its path inside it ("stacks/worker_0.txt") and its bytes.
struct TarFile {
  std::string name;
  std::string data;
};

// The bytes of a .tar.gz holding `files` in order, each mode 0644 with modification time
// `mtime_unix`, preceded by an entry (mode 0755) for each folder they are in. InvalidArgument
// when a name is empty, absolute, has a ".." or empty part, a byte that is not printable ASCII,
// or is too long for ustar (a name up to 100 bytes, or a folder part up to 155 and a last part
// up to 100), or names the same file twice.
absl::StatusOr<std::string> TarGz(const std::vector<TarFile>& files, int64_t mtime_unix);

// The checks WriteFileWhole makes before it writes, to make them before the bytes are gathered:
// NotFound when the folder of `path` does not exist, AlreadyExists when `path` does and
// `overwrite` is false, InvalidArgument when `path` names a folder.
absl::Status CheckWritable(const std::string& path, bool overwrite);

// Writes `bytes` to `path` whole or not at all: into a temporary file in the same folder, synced,
// then moved to `path`. Without `overwrite`, AlreadyExists when `path` exists (checked
// atomically: the temporary file is linked, never renamed, over it). NotFound when the folder
// does not exist; other failures (permissions, a full disk) as the system says them. The
// temporary file is removed on any failure.
absl::Status WriteFileWhole(const std::string& path, std::string_view bytes, bool overwrite);

}  // namespace trainscope::sidecar
