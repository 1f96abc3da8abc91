// The operator's proof between sidecars (operator_proof.h): a table of proofs that must not hold.
#include "trainscope/sidecar/operator_proof.h"

#include <gtest/gtest.h>

namespace trainscope::sidecar {
namespace {

constexpr char kProofToken[] = "0123456789abcdef0123456789abcdef";
constexpr char kProofSelf[] = "10.0.0.1:4317";
constexpr double kProofNow = 1.7e9;
constexpr uint64_t kProofNowNs = 1'700'000'000'000'000'000;

TEST(OperatorProof, HoldsOnceForItsRecipientSubjectAndTime) {
  ProofChecker checker(kProofSelf);
  const pb::OperatorProof proof = ProveOperator(kProofToken, kProofSelf, "ps:0", kProofNowNs);
  EXPECT_EQ(checker.Check(proof, "ps:0", kProofToken, kProofNow), ProofCheck::kValid);
  EXPECT_EQ(checker.Check(proof, "ps:0", kProofToken, kProofNow + 1), ProofCheck::kReplayed);
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
  pb::OperatorProof altered = ProveOperator(kProofToken, kProofSelf, "ps:0", kProofNowNs);
  altered.mutable_mac()->back() ^= 1;
  pb::OperatorProof relabelled = ProveOperator(kProofToken, "10.0.0.2:4317", "ps:0", kProofNowNs);
  relabelled.set_recipient(kProofSelf);
  pb::OperatorProof shifted = ProveOperator(kProofToken, kProofSelf, "ps:0", kProofNowNs);
  shifted.set_asked_unix_ns(kProofNowNs + 1);
  const Case cases[] = {
      {"no proof", {}, "ps:0", kProofToken, kProofNow, ProofCheck::kNoCredential},
      {"no token here", ProveOperator(kProofToken, kProofSelf, "ps:0", kProofNowNs), "ps:0", "",
       kProofNow, ProofCheck::kNoTokenFile},
      {"another token",
       ProveOperator("ffffffffffffffffffffffffffffffff", kProofSelf, "ps:0", kProofNowNs), "ps:0",
       kProofToken, kProofNow, ProofCheck::kBadToken},
      {"another recipient", ProveOperator(kProofToken, "10.0.0.2:4317", "ps:0", kProofNowNs),
       "ps:0", kProofToken, kProofNow, ProofCheck::kBadToken},
      {"recipient rewritten", relabelled, "ps:0", kProofToken, kProofNow, ProofCheck::kBadToken},
      {"another task", ProveOperator(kProofToken, kProofSelf, "ps:1", kProofNowNs), "ps:0",
       kProofToken, kProofNow, ProofCheck::kBadToken},
      {"time rewritten", shifted, "ps:0", kProofToken, kProofNow, ProofCheck::kBadToken},
      {"altered", altered, "ps:0", kProofToken, kProofNow, ProofCheck::kBadToken},
      {"too old", ProveOperator(kProofToken, kProofSelf, "ps:0", kProofNowNs), "ps:0", kProofToken,
       kProofNow + kProofWindowS + 1, ProofCheck::kStale},
      {"from the future", ProveOperator(kProofToken, kProofSelf, "ps:0", kProofNowNs), "ps:0",
       kProofToken, kProofNow - kProofWindowS - 1, ProofCheck::kStale},
  };
  for (const Case& c : cases) {
    ProofChecker checker(kProofSelf);
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
