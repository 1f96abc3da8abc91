// The operator's proof between sidecars (operator_proof.h): a table of proofs that must not hold.
#include "trainscope/sidecar/operator_proof.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
constexpr char kSelf[] = "10.0.0.1:4317";
constexpr double kNow = 1.7e9;
constexpr uint64_t kNowNs = 1'700'000'000'000'000'000;

TEST(OperatorProof, HoldsOnceForItsRecipientSubjectAndTime) {
  ProofChecker checker(kSelf);
  const pb::OperatorProof proof = ProveOperator(kToken, kSelf, "ps:0", kNowNs);
  EXPECT_EQ(checker.Check(proof, "ps:0", kToken, kNow), ProofCheck::kValid);
  EXPECT_EQ(checker.Check(proof, "ps:0", kToken, kNow + 1), ProofCheck::kReplayed);
}

TEST(OperatorProof, DoesNotHoldWhenAnythingDiffers) {
  struct Case {
    const char* what;
    pb::OperatorProof proof;
    std::string subject;
    std::string token;
    double now;
    ProofCheck want;
  };
  pb::OperatorProof altered = ProveOperator(kToken, kSelf, "ps:0", kNowNs);
  altered.mutable_mac()->back() ^= 1;
  pb::OperatorProof relabelled = ProveOperator(kToken, "10.0.0.2:4317", "ps:0", kNowNs);
  relabelled.set_recipient(kSelf);
  pb::OperatorProof shifted = ProveOperator(kToken, kSelf, "ps:0", kNowNs);
  shifted.set_asked_unix_ns(kNowNs + 1);
  const Case cases[] = {
      {"no proof", {}, "ps:0", kToken, kNow, ProofCheck::kNoCredential},
      {"no token here", ProveOperator(kToken, kSelf, "ps:0", kNowNs), "ps:0", "", kNow,
       ProofCheck::kNoTokenFile},
      {"another token", ProveOperator("ffffffffffffffffffffffffffffffff", kSelf, "ps:0", kNowNs),
       "ps:0", kToken, kNow, ProofCheck::kBadToken},
      {"another recipient", ProveOperator(kToken, "10.0.0.2:4317", "ps:0", kNowNs), "ps:0",
       kToken, kNow, ProofCheck::kBadToken},
      {"recipient rewritten", relabelled, "ps:0", kToken, kNow, ProofCheck::kBadToken},
      {"another task", ProveOperator(kToken, kSelf, "ps:1", kNowNs), "ps:0", kToken, kNow,
       ProofCheck::kBadToken},
      {"time rewritten", shifted, "ps:0", kToken, kNow, ProofCheck::kBadToken},
      {"altered", altered, "ps:0", kToken, kNow, ProofCheck::kBadToken},
      {"too old", ProveOperator(kToken, kSelf, "ps:0", kNowNs), "ps:0", kToken,
       kNow + kProofWindowS + 1, ProofCheck::kStale},
      {"from the future", ProveOperator(kToken, kSelf, "ps:0", kNowNs), "ps:0", kToken,
       kNow - kProofWindowS - 1, ProofCheck::kStale},
  };
  for (const Case& c : cases) {
    ProofChecker checker(kSelf);
    EXPECT_EQ(checker.Check(c.proof, c.subject, c.token, c.now), c.want) << c.what;
    EXPECT_NE(ProofRefusalName(c.want), "") << c.what;
  }
}

TEST(OperatorProof, StripAddressesKeepsTheFunctions) {
  pb::StackSnapshot s;
  pb::StackFrame* f = s.add_threads()->add_frames();
  f->set_pc(0x7f0012345678);
  f->set_function("futex_wait");
  f->set_module("libc.so.6");
  StripAddresses(&s);
  EXPECT_EQ(s.threads(0).frames(0).pc(), 0u);
  EXPECT_EQ(s.threads(0).frames(0).function(), "futex_wait");
  EXPECT_EQ(s.threads(0).frames(0).module(), "libc.so.6");
}

}  // namespace
}  // namespace trainscope::sidecar
