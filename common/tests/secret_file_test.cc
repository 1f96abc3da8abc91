// Secret files (secret_file.h): a table of modes, kinds and sizes, each read or refused with a
// sentence that says how to fix it; systemd credentials found by either name.
#include "trainscope/common/secret_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainscope {
namespace {

std::string FreshDir() {
  static int n = 0;
  const std::string dir =
      ::testing::TempDir() + "/secret-" + std::to_string(getpid()) + "-" + std::to_string(++n);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Write(const std::string& dir, const std::string& name, const std::string& text,
                  mode_t mode) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  chmod(path.c_str(), mode);
  return path;
}

struct ModeCase {
  mode_t mode;
  bool accepted;
};

TEST(SecretFile, ModesOthersCanUseAreRefusedOwnerAndGroupAreNot) {
  const std::string dir = FreshDir();
  const ModeCase cases[] = {
      {0400, true},  {0600, true},  {0640, true},  {0440, true},  {0660, true},  {0644, false},
      {0604, false}, {0602, false}, {0601, false}, {0666, false}, {0777, false},
  };
  for (const ModeCase& c : cases) {
    const std::string path = Write(dir, "token", "s3cret\n", c.mode);
    auto text = ReadSecretFile("--api_token_file", path, 64);
    EXPECT_EQ(text.ok(), c.accepted) << std::oct << c.mode << ": " << text.status();
    if (text.ok()) {
      EXPECT_EQ(*text, "s3cret\n");
    } else {
      const std::string message(text.status().message());
      EXPECT_NE(message.find("--api_token_file " + path), std::string::npos) << message;
      EXPECT_NE(message.find("chmod 600 " + path), std::string::npos) << message;
      char octal[8];
      std::snprintf(octal, sizeof octal, "%04o", static_cast<unsigned>(c.mode));
      EXPECT_NE(message.find(std::string("mode ") + octal), std::string::npos) << message;
    }
    std::filesystem::remove(path);
  }
}

TEST(SecretFile, MissingDirectoryTooLargeAndEmptyFiles) {
  const std::string dir = FreshDir();
  auto missing = ReadSecretFile("--exchange_key_file", dir + "/absent", 64);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("cannot read it"), std::string::npos);

  std::filesystem::create_directories(dir + "/a-directory");
  chmod((dir + "/a-directory").c_str(), 0700);
  auto directory = ReadSecretFile("--exchange_key_file", dir + "/a-directory", 64);
  ASSERT_FALSE(directory.ok());
  EXPECT_NE(directory.status().message().find("not a regular file"), std::string::npos);

  const std::string big = Write(dir, "big", std::string(65, 'k'), 0600);
  auto too_large = ReadSecretFile("--exchange_key_file", big, 64);
  ASSERT_FALSE(too_large.ok());
  EXPECT_NE(too_large.status().message().find("65 bytes"), std::string::npos);
  auto exact =
      ReadSecretFile("--exchange_key_file", Write(dir, "exact", std::string(64, 'k'), 0600), 64);
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->size(), 64u);

  auto empty = ReadSecretFile("--exchange_key_file", Write(dir, "empty", "", 0600), 64);
  ASSERT_TRUE(empty.ok());  // Whether empty is a valid secret is its parser's call.
  EXPECT_EQ(*empty, "");
}

// A symbolic link (as a Kubernetes Secret volume mounts each key) is judged by its target.
TEST(SecretFile, ALinkIsJudgedByTheFileItNames) {
  const std::string dir = FreshDir();
  const std::string target = Write(dir, "..data-token", "t\n", 0440);
  std::filesystem::create_symlink(target, dir + "/token");
  EXPECT_TRUE(ReadSecretFile("--api_token_file", dir + "/token", 64).ok());
  chmod(target.c_str(), 0644);
  EXPECT_FALSE(ReadSecretFile("--api_token_file", dir + "/token", 64).ok());
}

TEST(SecretFile, CredentialsByTheirOwnNameOrTheDirectoryLoadsName) {
  const std::string dir = FreshDir();
  EXPECT_EQ(CredentialPath("api.token", dir.c_str()), "");
  const std::string prefixed = Write(dir, "trainscope_api.token", "t\n", 0400);
  EXPECT_EQ(CredentialPath("api.token", dir.c_str()), prefixed);
  const std::string own = Write(dir, "api.token", "t\n", 0400);
  EXPECT_EQ(CredentialPath("api.token", dir.c_str()), own);  // LoadCredential=api.token:FILE
  EXPECT_EQ(CredentialPath("exchange.key", dir.c_str()), "");
  EXPECT_EQ(CredentialPath("", dir.c_str()), "");
  EXPECT_EQ(CredentialPath("api.token", ""), "");
}

}  // namespace
}  // namespace trainscope
