// The exchange's cluster key; see exchange_keys.h.
#include "trainscope/sidecar/exchange_keys.h"

#include <openssl/crypto.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "trainscope/common/secret_file.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {
namespace {

constexpr size_t kMaxSeen = 1 << 16;  // Signatures remembered within the replay window.

uint32_t KeyId(const std::string& secret) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), digest);
  return (uint32_t{digest[0]} << 24) | (uint32_t{digest[1]} << 16) | (uint32_t{digest[2]} << 8) |
         uint32_t{digest[3]};
}

// The message's Header, through reflection: every signed message has `Header header = 1`.
const v1::Header* HeaderOf(const google::protobuf::Message& m) {
  const auto* field = m.GetDescriptor()->FindFieldByName("header");
  if (field == nullptr || field->message_type() != v1::Header::descriptor()) return nullptr;
  if (!m.GetReflection()->HasField(m, field)) return nullptr;
  return static_cast<const v1::Header*>(&m.GetReflection()->GetMessage(m, field));
}

v1::Header* MutableHeaderOf(google::protobuf::Message* m) {
  const auto* field = m->GetDescriptor()->FindFieldByName("header");
  if (field == nullptr || field->message_type() != v1::Header::descriptor()) return nullptr;
  return static_cast<v1::Header*>(m->GetReflection()->MutableMessage(m, field));
}

std::string Deterministic(const google::protobuf::Message& m) {
  std::string bytes;
  google::protobuf::io::StringOutputStream out(&bytes);
  google::protobuf::io::CodedOutputStream coded(&out);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return bytes;
}

// HMAC-SHA256 of the message's deterministic serialization with the header's `mac` empty. The
// header is field 1, written first, so that is the header without `mac` as field 1, then the
// rest of the message's own serialization: no copy of the message (a Sync answer holds every
// record) is made, only of its header.
std::string Mac(const google::protobuf::Message& m, const std::string& secret) {
  const v1::Header* header = HeaderOf(m);
  v1::Header bare = *header;
  bare.clear_mac();
  const std::string whole = Deterministic(m);
  const size_t header_bytes = header->ByteSizeLong();
  const size_t prefix =
      1 + google::protobuf::io::CodedOutputStream::VarintSize64(header_bytes) + header_bytes;
  std::string bytes;
  bytes.reserve(whole.size());
  bytes.push_back(static_cast<char>(0x0a));  // Field 1, length-delimited.
  const std::string bare_bytes = Deterministic(bare);
  {
    google::protobuf::io::StringOutputStream out(&bytes);
    google::protobuf::io::CodedOutputStream coded(&out);
    coded.WriteVarint64(bare_bytes.size());
  }
  bytes += bare_bytes;
  bytes.append(whole, std::min(prefix, whole.size()), std::string::npos);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

}  // namespace

absl::StatusOr<std::string> ReadExchangeKeyFile(const std::string& path) {
  constexpr size_t kMaxKeyFileBytes = 64 << 10;
  auto content = ReadSecretFile("--exchange_key_file", path, kMaxKeyFileBytes);
  if (!content.ok()) return content.status();
  std::string key(absl::StripAsciiWhitespace(*content));
  if (key.size() < kMinKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--exchange_key_file ", path, ": the key is ", key.size(), " bytes, at least ",
        kMinKeyBytes, " are needed (make one with: openssl rand -base64 32 > ", path, ")"));
  }
  return key;
}

std::string_view RefusalName(Refusal refusal) {
  switch (refusal) {
    case Refusal::kNone:
      return "none";
    case Refusal::kUnsigned:
      return "unsigned";
    case Refusal::kUnknownKey:
      return "unknown_key";
    case Refusal::kBadSignature:
      return "bad_signature";
    case Refusal::kStale:
      return "stale";
    case Refusal::kReplayed:
      return "replayed";
    case Refusal::kSigned:
      return "signed";
    case Refusal::kHeader:
      return "header";
    case Refusal::kCertificate:
      return "certificate";
  }
  return "unknown";
}

absl::StatusOr<std::shared_ptr<ExchangeKeys>> ExchangeKeys::Load(
    const std::vector<std::string>& files) {
  std::vector<std::string> secrets;
  for (const std::string& path : files) {
    auto key = ReadExchangeKeyFile(path);
    if (!key.ok()) return key.status();
    secrets.push_back(*std::move(key));
  }
  return FromSecrets(secrets);
}

absl::StatusOr<std::shared_ptr<ExchangeKeys>> ExchangeKeys::FromSecrets(
    const std::vector<std::string>& secrets) {
  if (secrets.empty()) return absl::InvalidArgumentError("no exchange key given");
  std::vector<Key> keys;
  for (const std::string& s : secrets) {
    if (s.size() < kMinKeyBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("an exchange key must be at least ", kMinKeyBytes, " bytes"));
    }
    keys.push_back({KeyId(s), s});
  }
  return std::shared_ptr<ExchangeKeys>(new ExchangeKeys(std::move(keys)));
}

std::vector<std::string> ExchangeKeys::Ids() const {
  std::vector<std::string> ids;
  for (const Key& k : keys_) ids.push_back(absl::StrFormat("%08x", k.id));
  return ids;
}

void ExchangeKeys::Sign(google::protobuf::Message* message, double now_unix) const {
  v1::Header* header = MutableHeaderOf(message);
  if (header == nullptr) return;
  header->set_key_id(keys_.front().id);
  header->set_sent_unix_ns(static_cast<uint64_t>(std::max(0.0, now_unix) * 1e9));
  header->clear_mac();
  header->set_mac(Mac(*message, keys_.front().secret));
}

Verdict ExchangeKeys::VerifyUnkeyed(const google::protobuf::Message& message) {
  const v1::Header* header = HeaderOf(message);
  if (header != nullptr && !header->mac().empty()) {
    return {Refusal::kSigned,
            "signs its messages with a cluster key, and this sidecar has none "
            "(give every sidecar the same --exchange_key_file)"};
  }
  return {};
}

Verdict ExchangeKeys::Verify(const google::protobuf::Message& message, double now_unix) {
  const v1::Header* header = HeaderOf(message);
  if (header == nullptr || header->mac().empty()) {
    return {Refusal::kUnsigned,
            "sent an unsigned message, and this sidecar requires the cluster key "
            "(--exchange_key_file)"};
  }
  const Key* key = nullptr;
  for (const Key& k : keys_) {
    if (k.id == header->key_id()) key = &k;
  }
  if (key == nullptr) {
    return {Refusal::kUnknownKey,
            absl::StrFormat("signed with key %08x, which this sidecar does not hold "
                            "(is its --exchange_key_file the cluster's?)",
                            header->key_id())};
  }
  const std::string expected = Mac(message, key->secret);
  if (header->mac().size() != expected.size() ||
      CRYPTO_memcmp(header->mac().data(), expected.data(), expected.size()) != 0) {
    return {Refusal::kBadSignature, "sent a message whose signature does not verify"};
  }
  const double sent = static_cast<double>(header->sent_unix_ns()) / 1e9;
  if (std::fabs(now_unix - sent) > kReplayWindowS) {
    return {Refusal::kStale,
            absl::StrFormat("sent a message dated %.0f s %s this sidecar's clock (a replay, or "
                            "clocks apart: keep the nodes' clocks within %.0f s)",
                            std::fabs(now_unix - sent), sent < now_unix ? "behind" : "ahead of",
                            kReplayWindowS)};
  }
  if (Seen(header->mac(), sent, now_unix)) {
    return {Refusal::kReplayed, "sent a message this sidecar has had already (a replay)"};
  }
  return {};
}

bool ExchangeKeys::Seen(const std::string& mac, double sent_unix, double now_unix) {
  std::lock_guard lock(mu_);
  while (!seen_order_.empty() && (seen_order_.front().first < now_unix - 2 * kReplayWindowS ||
                                  seen_order_.size() >= kMaxSeen)) {
    seen_.erase(seen_order_.front().second);
    seen_order_.pop_front();
  }
  if (!seen_.insert(mac).second) return true;
  seen_order_.emplace_back(sent_unix, mac);
  return false;
}

}  // namespace trainscope::sidecar
