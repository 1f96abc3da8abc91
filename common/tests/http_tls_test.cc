// HttpTls: what it accepts at start, what a change of its files does, and one HTTPS exchange
// with the HTTP server (mutual TLS and rotation end to end: tests/integration/http_tls_test.py).
#include "trainscope/common/http_tls.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "trainscope/common/http_server.h"

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

int ConnectTo(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(port));
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
  return fd;
}

// What an HTTPS GET of `path` gets back (the client does not check the certificate).
std::string HttpsGet(int port, const std::string& path) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  const int fd = ConnectTo(port);
  SSL_set_fd(ssl, fd);
  std::string got;
  if (SSL_connect(ssl) == 1) {
    const std::string request = "GET " + path + " HTTP/1.0\r\n\r\n";
    SSL_write(ssl, request.data(), static_cast<int>(request.size()));
    char buf[4096];
    for (int n; (n = SSL_read(ssl, buf, sizeof(buf))) > 0;) got.append(buf, static_cast<size_t>(n));
  }
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  close(fd);
  return got;
}

TEST_F(HttpTlsTest, TheHttpServerServesHttpsAndEndsAStalledHandshake) {
  auto tls = HttpTls::Create(Files("a.pem", "a.key"));
  ASSERT_TRUE(tls.ok()) << tls.status();
  HttpServerOptions o;
  o.tls_handshake_timeout_ms = 500;
  auto server = HttpServer::Start(
      {"127.0.0.1"}, 0,
      [](const HttpServer::Request& r) {
        return HttpServer::Response{200, "text/plain", r.path};
      },
      tls->get(), o);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string got = HttpsGet((*server)->port(), "/over-tls");
  EXPECT_NE(got.find("HTTP/1.0 200 OK"), std::string::npos) << got;
  EXPECT_NE(got.find("/over-tls"), std::string::npos) << got;

  // A client that connects and never says hello is cut off at the handshake's deadline.
  const int fd = ConnectTo((*server)->port());
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 10000), 1) << "a stalled handshake was held for 10 s";
  char c;
  EXPECT_LE(recv(fd, &c, 1, 0), 0);
  close(fd);
}

}  // namespace
}  // namespace trainscope
