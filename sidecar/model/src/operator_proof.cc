// The operator's credential between sidecars; see operator_proof.h.
#include "trainscope/sidecar/operator_proof.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace trainscope::sidecar {
namespace {

std::string Mac(std::string_view token, std::string_view recipient, std::string_view subject,
                uint64_t asked_unix_ns) {
  // Each part is length-prefixed, so that no two (recipient, subject) pairs read the same.
  std::string text = absl::StrCat("trainscope operator proof v1\n", recipient.size(), ":");
  text.append(recipient);
  absl::StrAppend(&text, "\n", subject.size(), ":");
  text.append(subject);
  absl::StrAppend(&text, "\n", asked_unix_ns);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(text.data()), text.size(), mac, &length);
  return std::string(reinterpret_cast<const char*>(mac), length);
}

}  // namespace

pb::OperatorProof ProveOperator(std::string_view token, std::string_view recipient,
                                std::string_view subject, uint64_t asked_unix_ns) {
  pb::OperatorProof proof;
  proof.set_recipient(std::string(recipient));
  proof.set_asked_unix_ns(asked_unix_ns);
  proof.set_mac(Mac(token, recipient, subject, asked_unix_ns));
  return proof;
}

std::string_view ProofRefusalName(ProofCheck check) {
  switch (check) {
    case ProofCheck::kValid:
      return "";
    case ProofCheck::kNoTokenFile:
      return "no_token_file";
    case ProofCheck::kNoCredential:
      return "no_credential";
    case ProofCheck::kBadToken:
      return "bad_token";
    case ProofCheck::kStale:
      return "stale_credential";
    case ProofCheck::kReplayed:
      return "replayed_credential";
  }
  return "bad_token";
}

ProofCheck ProofChecker::Check(const pb::OperatorProof& proof, std::string_view subject,
                               std::string_view token, double now_unix) {
  if (token.empty()) return ProofCheck::kNoTokenFile;
  if (proof.mac().empty()) return ProofCheck::kNoCredential;
  const double asked = static_cast<double>(proof.asked_unix_ns()) / 1e9;
  if (std::fabs(now_unix - asked) > kProofWindowS) return ProofCheck::kStale;
  const std::string expected = Mac(token, self_, subject, proof.asked_unix_ns());
  // A proof made for another node or subject, or with another token, gives another MAC.
  if (proof.recipient() != self_ || proof.mac().size() != expected.size() ||
      CRYPTO_memcmp(proof.mac().data(), expected.data(), expected.size()) != 0) {
    return ProofCheck::kBadToken;
  }
  std::lock_guard lock(mu_);
  while (!order_.empty() &&
         (order_.size() >= kMaxSeen || now_unix - order_.front().first > 2 * kProofWindowS)) {
    seen_.erase(order_.front().second);
    order_.pop_front();
  }
  if (!seen_.insert(proof.mac()).second) return ProofCheck::kReplayed;
  order_.emplace_back(now_unix, proof.mac());
  return ProofCheck::kValid;
}

void StripAddresses(pb::StackSnapshot* snapshot) {
  for (pb::ThreadStack& t : *snapshot->mutable_threads()) {
    for (pb::StackFrame& f : *t.mutable_frames()) f.clear_pc();
  }
}

}  // namespace trainscope::sidecar
