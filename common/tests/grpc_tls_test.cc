// TLS credentials from the --tls_* files: which combinations are accepted, and the identity
// check of a caller's certificate. Handshakes themselves: tests/tls/tls_test.py.
#include "trainscope/common/grpc_tls.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace trainscope {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
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
  const std::string key = WriteFile("k.pem", "-----BEGIN PRIVATE KEY-----\nx\n");
  EXPECT_TRUE(CheckTlsFiles({cert, key, cert}, true).ok());
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

}  // namespace
}  // namespace trainscope
