#pragma once
// The operator's credential, carried from one sidecar to another without sending it. A request
// relayed over the exchange that acts on a process (a fresh capture) or reads what shows a
// task's address layout (program counters in kept stacks and evidence) carries an
// OperatorProof: an HMAC-SHA256 keyed with the API token (--api_token_file, the same file on
// every node) over the recipient's node id, the subject (the task or the incident) and the time
// it was asked. The recipient recomputes it with its own token, so a proof holds for one
// recipient, one subject and kProofWindowS, and (ProofChecker) once.

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>

#include "absl/base/thread_annotations.h"
#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {

namespace pb = ::trainscope::sidecar::v1;

inline constexpr double kProofWindowS = 30;

// What the exchange needs of the operator's credential; serve's ApiAuth is one. Thread-safe.
class OperatorCredential {
 public:
  virtual ~OperatorCredential() = default;
  // The API token now; "" when this sidecar has none.
  virtual std::string Token() = 0;
  // Counts one refused action by reason (trainscope_sidecar_api_refused_total{reason}).
  virtual void CountRefusal(std::string_view reason) = 0;
};

// A proof that the holder of `token` asks `recipient` about `subject` at `asked_unix_ns`.
pb::OperatorProof ProveOperator(std::string_view token, std::string_view recipient,
                                std::string_view subject, uint64_t asked_unix_ns);

// Why a proof does not hold; kValid when it does. ProofRefusalName gives the `reason` label.
enum class ProofCheck { kValid, kNoTokenFile, kNoCredential, kBadToken, kStale, kReplayed };
std::string_view ProofRefusalName(ProofCheck check);

// Checks proofs addressed to one node, each accepted once within kProofWindowS. Thread-safe.
class ProofChecker {
 public:
  explicit ProofChecker(std::string self) : self_(std::move(self)) {}
  // Whether `proof` holds for a request about `subject` to this node, at `now_unix`, under
  // `token` ("" when this node has none: kNoTokenFile).
  ProofCheck Check(const pb::OperatorProof& proof, std::string_view subject, std::string_view token,
                   double now_unix);

 private:
  static constexpr size_t kMaxSeen = 4096;
  const std::string self_;
  std::mutex mu_;                                              // Guards seen_ and order_.
  std::unordered_set<std::string> seen_ ABSL_GUARDED_BY(mu_);  // MACs accepted in the window.
  std::deque<std::pair<double, std::string>> order_ ABSL_GUARDED_BY(mu_);  // (accepted, MAC).
};

// `snapshot` without its program counters (the tasks' address layout), for an asker without
// the operator's credential; the functions, modules, files and lines stay.
void StripAddresses(pb::StackSnapshot* snapshot);

}  // namespace trainscope::sidecar
