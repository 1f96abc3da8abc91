#pragma once
// Secret files: the API token, the exchange's cluster key, a TLS private key. Each is read whole
// and bounded, and refused when every user of the machine may read or write it, as sshd refuses
// a private key others can read: a token others can read lets them pause any task. The refusal
// says how to fix it. Group access is allowed (a Kubernetes Secret mounted with fsGroup is 0440).
//
// Under systemd, LoadCredential= hands the service private copies in $CREDENTIALS_DIRECTORY
// (readable by the unit's user only, which a DynamicUser cannot get from a root-only file
// otherwise); CredentialPath finds one there.

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace trainscope {

// The bytes of the secret file at `path`, at most `max_bytes` of them. `flag` names where the
// path came from in errors ("--api_token_file"). InvalidArgument, saying why and how to fix it,
// when it cannot be opened, is not a regular file, is larger than max_bytes, or has any
// permission bit for others (mode & 007).
absl::StatusOr<std::string> ReadSecretFile(std::string_view flag, const std::string& path,
                                           size_t max_bytes);

// The path of the systemd credential `name` in $CREDENTIALS_DIRECTORY (or `credentials_dir`
// when given), as LoadCredential=NAME:FILE names it or as a directory load names it
// (LoadCredential=trainscope:/etc/trainscope/credentials gives trainscope_NAME); "" when there
// is no such credential.
std::string CredentialPath(std::string_view name, const char* credentials_dir = nullptr);

}  // namespace trainscope
