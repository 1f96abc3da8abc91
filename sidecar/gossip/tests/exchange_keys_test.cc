// The cluster key: what verifies, what does not, and why (exchange_keys.h).
#include "trainscope/sidecar/exchange_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "trainscope/sidecar/v1/sidecar.pb.h"

namespace trainscope::sidecar {
namespace {

constexpr double kNow = 1.7e9;
const std::string kKey = "0123456789abcdef0123456789abcdef";
const std::string kOther = "fedcba9876543210fedcba9876543210";

std::shared_ptr<ExchangeKeys> Keys(std::vector<std::string> secrets) {
  auto keys = ExchangeKeys::FromSecrets(secrets);
  EXPECT_TRUE(keys.ok()) << keys.status();
  return *keys;
}

v1::PingRequest Ping() {
  v1::PingRequest req;
  req.mutable_header()->set_cluster("c");
  req.mutable_header()->set_node("b:1");
  req.set_target("a:1");
  v1::MemberUpdate* u = req.mutable_gossip()->add_members();
  u->set_node("a:1");
  u->set_status(v1::MemberUpdate::ALIVE);
  return req;
}

TEST(ExchangeKeys, ASignedMessageVerifiesOnceAndOnlyAsSent) {
  auto keys = Keys({kKey});
  v1::PingRequest req = Ping();
  keys->Sign(&req, kNow);
  EXPECT_EQ(req.header().mac().size(), 32u);
  EXPECT_TRUE(keys->Verify(req, kNow + 1).ok());
  EXPECT_EQ(keys->Verify(req, kNow + 1).refusal, Refusal::kReplayed);
  v1::PingRequest altered = req;
  altered.mutable_gossip()->mutable_members(0)->set_status(v1::MemberUpdate::SILENT);
  EXPECT_EQ(keys->Verify(altered, kNow).refusal, Refusal::kBadSignature);
  v1::PingRequest renamed = req;
  renamed.mutable_header()->set_node("m:1");
  EXPECT_EQ(keys->Verify(renamed, kNow).refusal, Refusal::kBadSignature);
}

TEST(ExchangeKeys, RefusesUnsignedForeignAndOldMessagesSayingWhy) {
  auto keys = Keys({kKey});
  v1::PingRequest req = Ping();
  Verdict v = keys->Verify(req, kNow);
  EXPECT_EQ(v.refusal, Refusal::kUnsigned);
  EXPECT_NE(v.why.find("--exchange_key_file"), std::string::npos);
  Keys({kOther})->Sign(&req, kNow);
  v = keys->Verify(req, kNow);
  EXPECT_EQ(v.refusal, Refusal::kUnknownKey);
  EXPECT_EQ(v.why.find(kOther), std::string::npos) << "a refusal tells a key";
  keys->Sign(&req, kNow - 120);
  v = keys->Verify(req, kNow);
  EXPECT_EQ(v.refusal, Refusal::kStale);
  EXPECT_NE(v.why.find("120 s behind"), std::string::npos) << v.why;
  keys->Sign(&req, kNow + 120);
  EXPECT_EQ(keys->Verify(req, kNow).refusal, Refusal::kStale);
  // An unkeyed sidecar cannot check a signature, and says so rather than take it unchecked.
  EXPECT_EQ(ExchangeKeys::VerifyUnkeyed(req).refusal, Refusal::kSigned);
  EXPECT_TRUE(ExchangeKeys::VerifyUnkeyed(Ping()).ok());
}

// Rotation: a node with the new key first and the old second signs with the new one and still
// takes what the others sign with the old one.
TEST(ExchangeKeys, TwoKeysRotateWithoutAFlagDay) {
  auto old_only = Keys({kKey});
  auto rotating = Keys({kOther, kKey});
  v1::PingRequest from_old = Ping();
  old_only->Sign(&from_old, kNow);
  EXPECT_TRUE(rotating->Verify(from_old, kNow).ok());
  v1::PingRequest from_new = Ping();
  rotating->Sign(&from_new, kNow);
  EXPECT_EQ(old_only->Verify(from_new, kNow).refusal, Refusal::kUnknownKey);
  EXPECT_EQ(rotating->Ids().size(), 2u);
}

TEST(ExchangeKeys, KeyFilesAreCheckedAtStart) {
  const std::string dir = ::testing::TempDir();
  const std::string shortf = dir + "/short.key", good = dir + "/good.key";
  std::ofstream(shortf) << "tooshort\n";
  std::ofstream(good) << kKey << "\n";
  chmod(shortf.c_str(), 0600);
  chmod(good.c_str(), 0600);
  auto keys = ExchangeKeys::Load({shortf});
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("openssl rand -base64 32"), std::string::npos);
  keys = ExchangeKeys::Load({dir + "/missing.key"});
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("missing.key"), std::string::npos);
  keys = ExchangeKeys::Load({good});
  ASSERT_TRUE(keys.ok()) << keys.status();
  v1::PingRequest req = Ping();
  (*keys)->Sign(&req, kNow);
  EXPECT_TRUE(Keys({kKey})->Verify(req, kNow).ok()) << "the trailing newline is not the key";
  // A key every user of the machine can read is refused, saying how to fix it.
  chmod(good.c_str(), 0644);
  keys = ExchangeKeys::Load({good});
  ASSERT_FALSE(keys.ok());
  EXPECT_NE(keys.status().message().find("chmod 600 " + good), std::string::npos) << keys.status();
  unlink(shortf.c_str());
  unlink(good.c_str());
}

}  // namespace
}  // namespace trainscope::sidecar
