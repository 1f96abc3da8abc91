// Checkpoint files: the format round-trips; a truncated, corrupt or foreign file is refused
// with the reason; the directory keeps the newest few and loads the newest whole one; Push ids
// are remembered per sender.
#include "checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "parameter_store.h"

namespace trainscope {
namespace {

Checkpoint Sample(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.num_ps = 2;
  c.unix_seconds = 1700000000.5;
  c.variables.push_back({"linear/w/part_0", 0, {DType::kFloat, {2}}, std::string(8, '\x01')});
  c.variables.push_back({"linear/b", 1, {DType::kDouble, {}}, std::string(8, '\x02')});
  return c;
}

std::string TempDir() {
  char path[] = "/tmp/trainscope_ckpt_unit_XXXXXX";
  return mkdtemp(path);
}

TEST(Checkpoint, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);
}

TEST(Checkpoint, RoundTrips) {
  auto decoded = DecodeCheckpoint(EncodeCheckpoint(Sample(42)));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->step, 42);
  EXPECT_EQ(decoded->num_ps, 2);
  ASSERT_EQ(decoded->variables.size(), 2u);
  EXPECT_EQ(decoded->variables[0].name, "linear/w/part_0");
  EXPECT_EQ(decoded->variables[1].ps, 1);
  EXPECT_EQ(decoded->variables[1].spec, (TensorSpec{DType::kDouble, {}}));
  EXPECT_EQ(decoded->variables[1].value, std::string(8, '\x02'));
}

TEST(Checkpoint, TruncatedCorruptAndForeignFilesAreRefusedSayingWhy) {
  const std::string bytes = EncodeCheckpoint(Sample(1));
  auto truncated = DecodeCheckpoint(bytes.substr(0, bytes.size() - 3));
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
  std::string flipped = bytes;
  flipped[40] ^= 0x10;
  auto corrupt = DecodeCheckpoint(flipped);
  EXPECT_NE(corrupt.status().message().find("checksum mismatch"), std::string::npos)
      << corrupt.status();
  EXPECT_NE(DecodeCheckpoint("hello").status().message().find("not a trainscope checkpoint"),
            std::string::npos);
}

TEST(Checkpoint, DirectoryKeepsTheNewestAndLoadsTheNewestWholeOne) {
  const std::string dir = TempDir();
  std::string path;
  for (int64_t step : {10, 20, 30, 40})
    ASSERT_TRUE(WriteCheckpoint(dir, Sample(step), 3, &path).ok());
  std::vector<std::string> all = ListCheckpoints(dir);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0], dir + "/ckpt-000000000040.tsckpt");
  EXPECT_EQ(all[2], dir + "/ckpt-000000000020.tsckpt");
  std::filesystem::resize_file(all[0], 30);  // Truncated, as by a full disk.
  auto loaded = LoadLatestCheckpoint(dir);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->checkpoint.step, 30);
  ASSERT_EQ(loaded->refused.size(), 1u);
  EXPECT_NE(loaded->refused[0].find(all[0] + ": corrupt checkpoint: truncated"), std::string::npos)
      << loaded->refused[0];
  std::filesystem::remove_all(dir);
  EXPECT_EQ(LoadLatestCheckpoint(dir).status().code(), absl::StatusCode::kNotFound);
}

TEST(RecentRequests, ASeenIdIsRefusedUntilErasedOrANewIncarnation) {
  RecentRequests recent(60);
  EXPECT_TRUE(recent.Insert("worker:0", 7, 1));
  EXPECT_FALSE(recent.Insert("worker:0", 7, 1));
  EXPECT_TRUE(recent.Insert("worker:1", 7, 1));  // Another sender.
  recent.Erase("worker:0", 1);
  EXPECT_TRUE(recent.Insert("worker:0", 7, 1));
  EXPECT_TRUE(recent.Insert("worker:0", 8, 1));  // Restarted: a new incarnation.
}

}  // namespace
}  // namespace trainscope
