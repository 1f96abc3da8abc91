// HttpTls: what it accepts at start, and what a change of its files does (the handshakes
// themselves are tested end to end by tests/integration/http_tls_test.py).
#include "trainscope/common/http_tls.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace trainscope {
namespace {

class HttpTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trainscope-http-tls-unit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (const char* name : {"a", "b"}) {
      const std::string cmd =
          "cd " + dir_ + " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=" + name +
          " -keyout " + name + ".key -out " + name + ".pem >/dev/null 2>&1";
      ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl is needed: " << cmd;
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  TlsFiles Files(const std::string& cert, const std::string& key) const {
    return {Path(cert), Path(key), ""};
  }
  // Replaces `to` by a copy of `from` (a new inode: what a rotation by rename looks like).
  void Replace(const std::string& to, const std::string& from) {
    std::filesystem::copy_file(Path(from), Path(to + ".new"));
    std::filesystem::rename(Path(to + ".new"), Path(to));
  }

  std::string dir_;
};

TEST_F(HttpTlsTest, LoadsAMatchingPairAndNamesTheFileOtherwise) {
  EXPECT_TRUE(HttpTls::Create(Files("a.pem", "a.key")).ok());
  auto mismatched = HttpTls::Create(Files("a.pem", "b.key"));
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("b.key is not the key of the certificate"),
            std::string::npos)
      << mismatched.status();
  auto missing = HttpTls::Create(Files("none.pem", "a.key"));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read"), std::string::npos);
  auto key_as_cert = HttpTls::Create(Files("a.key", "a.key"));
  EXPECT_FALSE(key_as_cert.ok());
  TlsFiles bad_ca = Files("a.pem", "a.key");
  bad_ca.ca_file = Path("a.key");
  EXPECT_FALSE(HttpTls::Create(bad_ca).ok());
}

TEST_F(HttpTlsTest, ReloadsAChangedPairAndKeepsTheLastGoodOneWhileHalfWritten) {
  std::filesystem::copy_file(Path("a.pem"), Path("cert.pem"));
  std::filesystem::copy_file(Path("a.key"), Path("key.pem"));
  std::string heard;
  auto tls =
      HttpTls::Create(Files("cert.pem", "key.pem"), [&](const std::string& m) { heard = m; });
  ASSERT_TRUE(tls.ok()) << tls.status();
  (*tls)->MaybeReload(0);
  EXPECT_EQ((*tls)->reloads(), 0u) << "nothing changed";

  Replace("cert.pem", "b.pem");  // Half a rotation: b's certificate, a's key.
  (*tls)->MaybeReload(0);
  EXPECT_EQ((*tls)->reloads(), 0u);
  EXPECT_NE(heard.find("do not load yet"), std::string::npos) << heard;

  Replace("key.pem", "b.key");  // The other half.
  (*tls)->MaybeReload(0);
  EXPECT_EQ((*tls)->reloads(), 1u);
  EXPECT_NE(heard.find("reloaded"), std::string::npos) << heard;

  Replace("cert.pem", "a.pem");
  (*tls)->MaybeReload(60'000);  // Checked less than a minute ago: not yet.
  EXPECT_EQ((*tls)->reloads(), 1u);
}

}  // namespace
}  // namespace trainscope
