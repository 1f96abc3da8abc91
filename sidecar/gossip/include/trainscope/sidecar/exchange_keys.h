#pragma once
// The cluster key of the exchange between sidecars: every exchange message (Ping, PingReq,
// Sync and their answers, the requests of Snapshots.Stacks and Snapshots.Evidence) carries an
// HMAC-SHA256 of itself under the key, with the key's id and the time it was sent, in its
// Header. A message that does not verify is refused before anything in it is read, so a process
// without the key can neither page people (a forged SILENT), change a view (a forged record)
// nor learn the cluster's name.
//
// Keys come from files (--exchange_key_file, repeatable: the same files on every node). The
// first key signs; every key verifies, so that a key is rotated without a flag day: add the
// new one second everywhere, then first everywhere, then remove the old one (docs/security.md).
//
// Replays: a message is accepted within kReplayWindowS of its sending time (clocks of a cluster
// are kept within that), and each signature only once in that window. What is older is refused;
// what the protocol does with a replay inside the window is nothing, since records and member
// updates are versioned and one already applied is not newer.
//
// Thread-safe.

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"

namespace google::protobuf {
class Message;
}

namespace trainscope::sidecar {

inline constexpr double kReplayWindowS = 30;
inline constexpr size_t kMinKeyBytes = 16;

// Why a message was refused; also the `reason` label of
// trainscope_sidecar_exchange_refused_total.
enum class Refusal {
  kNone,
  kUnsigned,      // No signature, and this node requires one.
  kUnknownKey,    // Signed with a key this node does not hold.
  kBadSignature,  // The signature does not verify: altered, or another key with the same id.
  kStale,         // Sent too long ago or in the future: a replay, or clocks far apart.
  kReplayed,      // This very message came already.
  kSigned,        // Signed, and this node has no key (it cannot check it: it refuses it).
  kHeader,        // Another cluster or protocol, or no node id (ExchangeCore::CheckHeader).
  kCertificate,   // Under mutual TLS: the caller's certificate does not name the node it claims.
};
std::string_view RefusalName(Refusal refusal);
inline constexpr Refusal kAllRefusals[] = {
    Refusal::kUnsigned, Refusal::kUnknownKey, Refusal::kBadSignature, Refusal::kStale,
    Refusal::kReplayed, Refusal::kSigned,     Refusal::kHeader,       Refusal::kCertificate};

struct Verdict {
  Refusal refusal = Refusal::kNone;
  std::string why;  // In words, for the caller and the log; never the key or the cluster's name.
  bool ok() const { return refusal == Refusal::kNone; }
};

// One key file's key: its content without surrounding white space, at least kMinKeyBytes.
// Errors name the file and the fix.
absl::StatusOr<std::string> ReadExchangeKeyFile(const std::string& path);

class ExchangeKeys {
 public:
  // Reads each file: the key is its content without surrounding white space (e.g.
  // `openssl rand -base64 32`), at least kMinKeyBytes. Errors name the file and the fix.
  static absl::StatusOr<std::shared_ptr<ExchangeKeys>> Load(const std::vector<std::string>& files);
  // The same from the keys themselves (tests, benches).
  static absl::StatusOr<std::shared_ptr<ExchangeKeys>> FromSecrets(
      const std::vector<std::string>& secrets);

  // Signs `message`, whose field `header` (trainscope.sidecar.v1.Header) is set: its key id,
  // its sending time and its MAC.
  void Sign(google::protobuf::Message* message, double now_unix) const;
  // Whether `message` was signed with one of these keys, recently, and not seen before.
  Verdict Verify(const google::protobuf::Message& message, double now_unix);
  // What an unkeyed sidecar says of a message: refused when signed (it cannot check it).
  static Verdict VerifyUnkeyed(const google::protobuf::Message& message);

  size_t size() const { return keys_.size(); }
  // Key ids, as hex, signing key first (logs: which key is in use, never the key).
  std::vector<std::string> Ids() const;

 private:
  struct Key {
    uint32_t id = 0;
    std::string secret;
  };
  explicit ExchangeKeys(std::vector<Key> keys) : keys_(std::move(keys)) {}
  bool Seen(const std::string& mac, double sent_unix, double now_unix);

  const std::vector<Key> keys_;
  std::mutex mu_;  // Guards the replay window below.
  std::unordered_set<std::string> seen_;
  std::deque<std::pair<double, std::string>> seen_order_;  // (sent, mac), oldest first.
};

}  // namespace trainscope::sidecar
