// TLS credentials from the --tls_* files: which combinations are accepted, and the identity
// check of a caller's certificate. Handshakes themselves: tests/tls/tls_test.py.
#include "trainscope/common/grpc_tls.h"

#include <grpc/support/log.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace trainscope {
namespace {

std::string WriteFile(const std::string& name, const std::string& text, mode_t mode = 0644) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
  return path;
}

TEST(GrpcTlsTest, PlainTextByDefault) {
  TlsFiles none;
  EXPECT_TRUE(CheckTlsFiles(none, true).ok());
  EXPECT_TRUE(MakeServerCredentials(none).ok());
  EXPECT_TRUE(MakeChannelCredentials(none).ok());
}

TEST(GrpcTlsTest, FilesMustGoTogetherAndRead) {
  const std::string cert = WriteFile("c.pem", "-----BEGIN CERTIFICATE-----\nx\n");
  const std::string key = WriteFile("k.pem", "-----BEGIN PRIVATE KEY-----\nx\n", 0600);
  EXPECT_TRUE(CheckTlsFiles({cert, key, cert}, true).ok());
  // A private key every user may read is refused, saying how to fix it (secret_file.h).
  const std::string open_key = WriteFile("k-open.pem", "-----BEGIN PRIVATE KEY-----\nx\n", 0644);
  absl::Status open = CheckTlsFiles({cert, open_key, cert}, true);
  EXPECT_NE(open.message().find("--tls_key_file " + open_key), std::string::npos) << open;
  EXPECT_NE(open.message().find("chmod 600"), std::string::npos) << open;
  absl::Status no_key = CheckTlsFiles({cert, "", cert}, false);
  EXPECT_NE(no_key.message().find("give both or neither"), std::string::npos) << no_key;
  absl::Status ca_only = CheckTlsFiles({"", "", cert}, true);
  EXPECT_NE(ca_only.message().find("needs a certificate"), std::string::npos) << ca_only;
  EXPECT_TRUE(CheckTlsFiles({"", "", cert}, false).ok());  // A client that verifies servers.
  absl::Status missing = MakeServerCredentials({"/nonexistent.pem", key, ""}).status();
  EXPECT_NE(missing.message().find("--tls_cert_file /nonexistent.pem: cannot read it"),
            std::string::npos)
      << missing;
  absl::Status swapped = CheckTlsFiles({key, cert, ""}, true);
  EXPECT_NE(swapped.message().find("not a PEM file with a CERTIFICATE"), std::string::npos)
      << swapped;
}

TEST(GrpcTlsTest, CertificateMustNameTheSpecsHost) {
  EXPECT_TRUE(CheckCertificateNamesHost({"10.0.0.3", "worker-0"}, "10.0.0.3").ok());
  EXPECT_TRUE(CheckCertificateNamesHost({"Worker-0.Example"}, "worker-0.example").ok());
  absl::Status st = CheckCertificateNamesHost({"10.0.0.4", "ps-1"}, "10.0.0.3");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(st.message(),
            "its certificate names 10.0.0.4, ps-1, not 10.0.0.3 (the host the cluster spec gives "
            "it)");
  EXPECT_EQ(CheckCertificateNamesHost({}, "h").message(),
            "its certificate names nothing, not h (the host the cluster spec gives it)");
}

// gRPC 1.51's own lines, as its server and OpenSSL write them, in and out of the hook.
TEST(GrpcTlsTest, RefusalsAreOneLinePerReasonAndClientHost) {
  std::vector<std::string> lines;
  LogTlsRefusalsAs("ps:0 at 10.0.0.5:2222", [&](const std::string& l) { lines.push_back(l); });
  const char* refused =
      "Handshaking failed: UNKNOWN:Tls handshake failed: SSL_ERROR_SSL: error:0A000086:SSL "
      "routines::certificate verify failed {file:\"security_handshaker.cc\", tsi_code:10}";
  const char* hung_up =
      "Handshaking failed: UNKNOWN:Handshake read failed {children:[INTERNAL:Socket closed "
      "{fd:11, grpc_status:14, target_address:\"ipv4:10.0.0.9:50312\"}]}";
  for (int i = 0; i < 3; ++i) {
    gpr_log(GPR_DEBUG, "%s", refused);
    gpr_log(GPR_ERROR, "Handshake failed with fatal error SSL_ERROR_SSL: certificate verify x");
    gpr_log(GPR_DEBUG, "%s", hung_up);
    gpr_log(GPR_DEBUG, "Handshaking failed: OK");  // A server shutting down: not a refusal.
  }
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0],
            "ps:0 at 10.0.0.5:2222 refused a TLS client: certificate signed by an unknown "
            "authority (or expired) (gRPC does not say which client) (not repeated for a minute)");
  EXPECT_EQ(lines[1],
            "ps:0 at 10.0.0.5:2222 refused a TLS client at 10.0.0.9:50312: it closed the "
            "connection during the handshake (does it not trust this task's certificate? its log "
            "says) (not repeated for a minute)");
}

}  // namespace
}  // namespace trainscope
