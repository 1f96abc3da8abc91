// The .tar.gz writer read back by Debian's own tar (tar -tzf, tar -xzf), byte for byte, and the
// whole-or-nothing file.
#include "trainscope/sidecar/tar_gz.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "process.h"

namespace trainscope::sidecar {
namespace {

using trainscope::testing::Shell;

// A fresh folder under /tmp, removed when destroyed.
class TempDir {
 public:
  TempDir() {
    char t[] = "/tmp/tar_gz_test.XXXXXX";
    path_ = mkdtemp(t) ? t : "";
  }
  ~TempDir() {
    if (!path_.empty()) (void)system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> Entries(const std::string& folder) {
  std::set<std::string> out;
  DIR* d = opendir(folder.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") out.insert(e->d_name);
  }
  closedir(d);
  return out;
}

TEST(TarGz, DebiansTarReadsBackEveryFileByteForByte) {
  std::mt19937 random(34);
  std::string big(1536 * 1024 + 7, '\0');  // Over 1 MiB, not a multiple of 512.
  for (char& c : big) c = static_cast<char>(random() & 0xff);
  const std::string name99 = std::string(95, 'a') + ".txt";   // 99 bytes
  const std::string name100 = std::string(96, 'b') + ".txt";  // 100 bytes: no NUL in the field
  // 170 bytes: a folder part in the ustar prefix field, the rest in the name field.
  const std::string long_nested = std::string(80, 'd') + "/" + std::string(85, 'e') + ".txt";
  const std::vector<TarFile> files = {
      {"README.txt", "what this is\n"},
      {"incident.json", "{\"id\":\"inc-0123456789ab\"}\n"},
      {"stacks/worker_0.txt", "=== worker:0 pid 42\n"},
      {"stacks/worker_0.now.txt", ""},              // empty
      {"traces/slow.json", std::string(512, 'x')},  // exactly one block
      {"big.bin", big},
      {name99, "ninety-nine\n"},
      {name100, "a hundred\n"},
      {long_nested, "nested\n"},
  };
  auto gz = TarGz(files, 1700000000);
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_LT(gz->size(), big.size() + 64 * 1024);  // Compressed (random bytes barely shrink).

  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string archive = dir.path() + "/bundle.tar.gz";
  ASSERT_TRUE(WriteFileWhole(archive, *gz, false).ok());

  auto [listing, rc] = Shell("tar -tzf '" + archive + "' 2>&1");
  ASSERT_EQ(rc, 0) << listing;
  std::set<std::string> listed;
  std::istringstream lines(listing);
  for (std::string line; std::getline(lines, line);) listed.insert(line);
  std::set<std::string> want = {"stacks/", "traces/", std::string(80, 'd') + "/"};
  for (const TarFile& f : files) want.insert(f.name);
  EXPECT_EQ(listed, want) << listing;

  const std::string out = dir.path() + "/out";
  ASSERT_EQ(mkdir(out.c_str(), 0755), 0);
  auto [words, xrc] = Shell("tar -xzf '" + archive + "' -C '" + out + "' 2>&1");
  ASSERT_EQ(xrc, 0) << words;
  EXPECT_EQ(words, "");  // No warning (checksum, unknown header, trailing garbage).
  for (const TarFile& f : files) {
    const std::string got = Slurp(out + "/" + f.name);
    EXPECT_EQ(got.size(), f.data.size()) << f.name;
    EXPECT_TRUE(got == f.data) << f.name << " differs";
    struct stat st;
    ASSERT_EQ(stat((out + "/" + f.name).c_str(), &st), 0) << f.name;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << f.name;
    EXPECT_EQ(st.st_mtime, 1700000000) << f.name;
  }
  // The verbose listing: owner root, sizes as written.
  auto [verbose, vrc] = Shell("tar -tvzf '" + archive + "' big.bin");
  ASSERT_EQ(vrc, 0);
  EXPECT_NE(verbose.find("root/root"), std::string::npos) << verbose;
  EXPECT_NE(verbose.find(std::to_string(big.size())), std::string::npos) << verbose;
}

TEST(TarGz, AnEmptyArchiveIsAValidOne) {
  auto gz = TarGz({}, 0);
  ASSERT_TRUE(gz.ok());
  TempDir dir;
  const std::string archive = dir.path() + "/empty.tar.gz";
  ASSERT_TRUE(WriteFileWhole(archive, *gz, false).ok());
  auto [listing, rc] = Shell("tar -tzf '" + archive + "' 2>&1");
  EXPECT_EQ(rc, 0) << listing;
  EXPECT_EQ(listing, "");
}

TEST(TarGz, RefusesNamesThatTarCannotHoldOrThatEscape) {
  for (const std::string& bad :
       {std::string(""), std::string("/etc/passwd"), std::string("../up.txt"),
        std::string("a/../../b"), std::string("a//b"), std::string("./a"), std::string("dir/"),
        std::string("tab\there"), std::string("caf\xc3\xa9"), std::string(101, 'n'),
        std::string(156, 'p') + "/x", "x/" + std::string(101, 'q')}) {
    auto gz = TarGz({{bad, "x"}}, 0);
    EXPECT_EQ(gz.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto twice = TarGz({{"a.txt", "1"}, {"a.txt", "2"}}, 0);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(WriteFileWhole, RefusesToOverwriteUnlessAskedAndLeavesNoTemporaryFile) {
  TempDir dir;
  const std::string path = dir.path() + "/f.tar.gz";
  ASSERT_TRUE(WriteFileWhole(path, "first", false).ok());
  absl::Status again = WriteFileWhole(path, "second", false);
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  EXPECT_EQ(Slurp(path), "first");
  ASSERT_TRUE(WriteFileWhole(path, "third", true).ok());
  EXPECT_EQ(Slurp(path), "third");
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);  // A bundle holds stacks and traces: its owner's only.
  EXPECT_EQ(Entries(dir.path()), std::set<std::string>{"f.tar.gz"});

  absl::Status nowhere = WriteFileWhole(dir.path() + "/no/such/f.tar.gz", "x", false);
  EXPECT_EQ(nowhere.code(), absl::StatusCode::kNotFound) << nowhere;
  EXPECT_NE(nowhere.message().find("no/such"), std::string::npos) << nowhere;
  EXPECT_EQ(Entries(dir.path()), std::set<std::string>{"f.tar.gz"});
}

}  // namespace
}  // namespace trainscope::sidecar
