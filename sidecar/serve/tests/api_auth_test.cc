// ApiAuth: which requests may act (a bearer token from the file, or a verified client
// certificate), the answers that refuse the others (401 with WWW-Authenticate, 403 without a
// token file), a rotated token file, refusals counted, and the token never echoed.
#include "trainscope/sidecar/api_auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace trainscope::sidecar {
namespace {

constexpr char kToken[] = "0123456789abcdef0123456789abcdef";
constexpr char kOther[] = "fedcba9876543210fedcba9876543210";

class ApiAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trainscope-api-token-XXXXXX";
    const int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    path_ = tmpl;
    Write(std::string(kToken) + "\n");
  }
  void TearDown() override { std::remove(path_.c_str()); }
  // Replaces the file by a new one (a new inode, as a rotation by rename).
  void Write(const std::string& text) {
    std::ofstream(path_ + ".new") << text;
    chmod((path_ + ".new").c_str(), 0600);
    std::filesystem::rename(path_ + ".new", path_);
  }
  static HttpServer::Request Asking(const std::string& authorization, bool cert = false) {
    HttpServer::Request r;
    r.path = "/api/v1/stacks";
    r.query = "task=worker:0&fresh=1";
    r.authorization = authorization;
    r.client_address = "192.0.2.7";
    r.client_certificate = cert;
    return r;
  }
  std::string path_;
};

TEST_F(ApiAuthTest, TheTokenOrAVerifiedCertificateMayAct) {
  auto auth = ApiAuth::Create({path_, 0});
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_FALSE((*auth)->Refusal(Asking(std::string("Bearer ") + kToken), "fresh captures"));
  EXPECT_FALSE((*auth)->Refusal(Asking(std::string("bearer   ") + kToken + " "), "x"));
  EXPECT_FALSE((*auth)->Refusal(Asking("", /*cert=*/true), "fresh captures"));
}

TEST_F(ApiAuthTest, NoOrAWrongTokenIs401AndNeverEchoed) {
  auto auth = ApiAuth::Create({path_, 0});
  ASSERT_TRUE(auth.ok());
  for (const std::string& header :
       {std::string(""), std::string("Basic dXNlcjpwYXNz"), std::string("Bearer"),
        std::string("Bearer ") + kOther, std::string("Bearer ") + kToken + "0",
        std::string("Bearer ") + std::string(kToken).substr(0, 31)}) {
    auto refusal = (*auth)->Refusal(Asking(header), "fresh captures");
    ASSERT_TRUE(refusal) << header;
    EXPECT_EQ(refusal->status, 401) << header;
    ASSERT_EQ(refusal->headers.size(), 1u);
    EXPECT_EQ(refusal->headers[0].first, "WWW-Authenticate");
    EXPECT_EQ(refusal->headers[0].second.rfind("Bearer realm=", 0), 0u);
    EXPECT_EQ(refusal->body.find(kToken), std::string::npos) << refusal->body;
    EXPECT_NE(refusal->body.find("fresh captures"), std::string::npos) << refusal->body;
  }
  const auto refused = (*auth)->refused();
  EXPECT_EQ(refused.at("no_credential"), 3);  // None, another scheme, a bare "Bearer".
  EXPECT_EQ(refused.at("bad_token"), 3);
  EXPECT_EQ(refused.at("no_token_file"), 0);
}

TEST_F(ApiAuthTest, WithoutATokenFileActionsAre403SayingHowToEnableThem) {
  auto auth = ApiAuth::Create({"", 0});
  ASSERT_TRUE(auth.ok());
  auto refusal = (*auth)->Refusal(Asking(std::string("Bearer ") + kToken), "fresh captures");
  ASSERT_TRUE(refusal);
  EXPECT_EQ(refusal->status, 403);
  EXPECT_NE(refusal->body.find(
                "fresh captures need a credential: start the sidecar with --api_token_file"),
            std::string::npos)
      << refusal->body;
  EXPECT_FALSE((*auth)->Refusal(Asking("", /*cert=*/true), "fresh captures"));
  EXPECT_EQ((*auth)->refused().at("no_token_file"), 1);
}

TEST_F(ApiAuthTest, ARotatedTokenReplacesTheOldOneAndAHalfWrittenFileKeepsIt) {
  auto auth = ApiAuth::Create({path_, 0});
  ASSERT_TRUE(auth.ok());
  Write(std::string(kOther) + "\n");
  EXPECT_FALSE((*auth)->Refusal(Asking(std::string("Bearer ") + kOther), "x"));
  EXPECT_TRUE((*auth)->Refusal(Asking(std::string("Bearer ") + kToken), "x"));
  Write("");  // Caught half written: the last good token stays.
  EXPECT_FALSE((*auth)->Refusal(Asking(std::string("Bearer ") + kOther), "x"));
}

TEST_F(ApiAuthTest, BadTokenFilesAreRefusedAtStartNamingTheFile) {
  for (const std::string& text :
       {std::string(""), std::string("short\n"), std::string("two words that are long enough\n")}) {
    Write(text);
    auto auth = ApiAuth::Create({path_, 0});
    ASSERT_FALSE(auth.ok()) << text;
    EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(auth.status().message().find(path_), std::string::npos) << auth.status();
  }
  auto missing = ApiAuth::Create({path_ + ".none", 0});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read"), std::string::npos);
}

// A token every user of the machine can read would let any of them pause any task: refused at
// start with the fix, and a rotation to such a file keeps the last good token.
TEST_F(ApiAuthTest, ATokenOthersCanReadIsRefusedSayingHowToFixIt) {
  chmod(path_.c_str(), 0644);
  auto open = ApiAuth::Create({path_, 0});
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.status().message().find("--api_token_file " + path_), std::string::npos)
      << open.status();
  EXPECT_NE(open.status().message().find("chmod 600 " + path_), std::string::npos) << open.status();
  chmod(path_.c_str(), 0600);
  auto auth = ApiAuth::Create({path_, 0});
  ASSERT_TRUE(auth.ok()) << auth.status();
  std::ofstream(path_ + ".new") << kOther << "\n";
  chmod((path_ + ".new").c_str(), 0644);
  std::filesystem::rename(path_ + ".new", path_);
  EXPECT_TRUE((*auth)->Refusal(Asking(std::string("Bearer ") + kOther), "x"));
  EXPECT_FALSE((*auth)->Refusal(Asking(std::string("Bearer ") + kToken), "x"));
}

TEST(SameToken, ComparesWholeTokens) {
  EXPECT_TRUE(SameToken(kToken, kToken));
  EXPECT_FALSE(SameToken(kOther, kToken));
  EXPECT_FALSE(SameToken("", kToken));
  EXPECT_FALSE(SameToken(kToken, ""));
  EXPECT_FALSE(SameToken(std::string(kToken) + kToken, kToken));  // Repeats do not match.
}

}  // namespace
}  // namespace trainscope::sidecar
