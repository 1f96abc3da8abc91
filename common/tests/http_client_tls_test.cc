// HttpGet over HTTPS checks the server's name (issue 32): against our HTTP server on loopback, a
// certificate from the test's own CA that names 127.0.0.1 is accepted, one that names another
// host is refused, saying so. Certificates made here with openssl, as tests/tls/ does.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "trainscope/common/http_client.h"
#include "trainscope/common/http_server.h"
#include "trainscope/common/http_tls.h"

namespace trainscope {
namespace {

class HttpClientTls : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/trainscope-http-client-tls-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    Run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 "
        "-subj '/CN=test CA' -keyout ca.key -out ca.pem");
    Server("right", "IP:127.0.0.1,DNS:localhost");
    Server("wrong", "DNS:elsewhere.invalid,IP:10.255.255.1");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void Run(const std::string& command) {
    const std::string cmd = "cd " + dir_ + " && " + command + " >/dev/null 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "openssl is needed: " << cmd;
  }
  // A server certificate `name`.pem signed by the CA, naming `san`.
  void Server(const std::string& name, const std::string& san) {
    Run("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + name +
        " -keyout " + name + ".key -out " + name + ".csr");
    std::ofstream(Path(name + ".ext"))
        << "subjectAltName=" << san << "\nextendedKeyUsage=serverAuth\n";
    Run("openssl x509 -req -in " + name +
        ".csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
        "-out " +
        name + ".pem -extfile " + name + ".ext");
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // GET /hello from an HTTPS server presenting `name`'s certificate, verified against the CA.
  absl::StatusOr<HttpResponse> GetFrom(const std::string& name) {
    auto tls = HttpTls::Create({Path(name + ".pem"), Path(name + ".key"), ""});
    if (!tls.ok()) return tls.status();
    auto server = HttpServer::Start(
        {"127.0.0.1"}, 0,
        [](const HttpServer::Request&) {
          return HttpServer::Response{200, "text/plain", "hi"};
        },
        tls->get());
    if (!server.ok()) return server.status();
    TlsFiles client;
    client.ca_file = Path("ca.pem");
    return HttpGet("127.0.0.1:" + std::to_string((*server)->port()), "/hello", 5000, 1 << 20,
                   client);
  }

  std::string dir_;
};

TEST_F(HttpClientTls, AcceptsAServerWhoseCertificateNamesTheHost) {
  auto r = GetFrom("right");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hi");
}

TEST_F(HttpClientTls, RefusesAServerWhoseCertificateNamesAnotherHost) {
  auto r = GetFrom("wrong");
  ASSERT_FALSE(r.ok()) << "answered " << r->status << ": a certificate for another host passed";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("its TLS certificate does not name the host dialled"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("https://127.0.0.1:"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace trainscope
