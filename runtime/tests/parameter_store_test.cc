// The ps's variable store: dtype/shape checks with messages, memory budget, SGD updates.
#include "parameter_store.h"

#include <gtest/gtest.h>

#include <cstring>

namespace trainscope {
namespace {

std::string Floats(std::initializer_list<float> v) {
  std::string s(v.size() * sizeof(float), '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

TEST(ParameterStoreTest, CreateIsIdempotentAndChecksShape) {
  ParameterStore store({"ps:0", 0});
  TensorSpec spec{DType::kFloat, {2}};
  auto first = store.Create("w", spec, Floats({1, 2}), "worker:0");
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(*first);
  auto again = store.Create("w", spec, Floats({5, 5}), "worker:1");
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(*again);
  auto mismatch = store.Create("w", {DType::kFloat, {3}}, Floats({1, 2, 3}), "worker:1");
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(mismatch.status().message(),
            "variable 'w' on ps:0 is float32[2] but worker:1 creates it as float32[3]: every "
            "task must build the same model (check flags such as --features)");
  auto dtype = store.Create("w", {DType::kDouble, {2}}, std::string(16, '\0'), "worker:1");
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("float64[2]"), std::string::npos);
}

TEST(ParameterStoreTest, AppliesSgdAndRejectsMismatchedGradients) {
  ParameterStore store({"ps:0", 0});
  TensorSpec spec{DType::kFloat, {2}};
  ASSERT_TRUE(store.Create("w", spec, Floats({1, 2}), "worker:0").ok());
  ASSERT_TRUE(store.ApplyGradient("w", spec, Floats({10, 20}), 0.1f, "worker:0").ok());
  TensorSpec read_spec;
  std::string value;
  ASSERT_TRUE(store.Read("w", &read_spec, &value).ok());
  EXPECT_EQ(read_spec, spec);
  float out[2];
  std::memcpy(out, value.data(), sizeof(out));
  EXPECT_FLOAT_EQ(out[0], 0.0f);
  EXPECT_FLOAT_EQ(out[1], 0.0f);
  EXPECT_EQ(store.updates_applied(), 1u);

  absl::Status bad =
      store.ApplyGradient("w", {DType::kFloat, {3}}, Floats({1, 1, 1}), 0.1f, "worker:3");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.message(),
            "variable 'w' on ps:0 is float32[2] but worker:3 pushed a gradient of float32[3]");
  absl::Status short_bytes = store.ApplyGradient("w", spec, Floats({1}), 0.1f, "worker:3");
  EXPECT_EQ(short_bytes.code(), absl::StatusCode::kInvalidArgument);
  absl::Status missing = store.ApplyGradient("v", spec, Floats({1, 1}), 0.1f, "worker:3");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store.updates_applied(), 1u);
}

TEST(ParameterStoreTest, MemoryBudgetIsResourceExhaustedWithFigures) {
  ParameterStore store({"ps:1", 4096});
  ASSERT_TRUE(store.Create("a", {DType::kFloat, {512}}, std::string(2048, '\0'), "w:0").ok());
  auto over = store.Create("b", {DType::kFloat, {1024}}, std::string(4096, '\0'), "w:0");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(over.status().message(),
            "ps:1 cannot hold variable 'b' (float32[1024], 4.0 KiB): it holds 2.0 KiB and would "
            "need 6.0 KiB of its 4.0 KiB budget (--ps_memory_limit_bytes=4096); raise the budget "
            "or add ps tasks");
  EXPECT_EQ(store.bytes_held(), 2048);
  EXPECT_EQ(store.num_variables(), 1);
}

TEST(ParameterStoreTest, RejectsBadSpecs) {
  ParameterStore store({"ps:0", 0});
  EXPECT_FALSE(store.Create("x", {DType::kInvalid, {1}}, "", "w:0").ok());
  EXPECT_FALSE(store.Create("x", {DType::kFloat, {-1}}, "", "w:0").ok());
  EXPECT_FALSE(store.Create("x", {DType::kFloat, {1LL << 62, 1LL << 62}}, "", "w:0").ok());
  EXPECT_FALSE(store.Create("", {DType::kFloat, {1}}, Floats({1}), "w:0").ok());
  EXPECT_FALSE(store.Create("x", {DType::kFloat, {2}}, Floats({1}), "w:0").ok());
  EXPECT_EQ(store.num_variables(), 0);
}

TEST(RecentRequestsTest, AnsweredPushesAreKeptByCountHoweverOldAndPerIncarnation) {
  RecentRequests recent(3);
  EXPECT_TRUE(recent.Insert("worker:0", 7, 1));
  EXPECT_FALSE(recent.Insert("worker:0", 7, 1));  // A retry: answered, not applied.
  EXPECT_TRUE(recent.Insert("worker:1", 9, 1));   // Another sender's ids are its own.
  EXPECT_TRUE(recent.Insert("worker:0", 7, 2));
  EXPECT_TRUE(recent.Insert("worker:0", 7, 3));
  EXPECT_FALSE(recent.Insert("worker:0", 7, 2));
  EXPECT_TRUE(recent.Insert("worker:0", 7, 4));  // Past the bound: the oldest id goes.
  EXPECT_TRUE(recent.Insert("worker:0", 7, 1));
  recent.Erase("worker:0", 4);  // Not applied after all: its retry applies.
  EXPECT_TRUE(recent.Insert("worker:0", 7, 4));
  EXPECT_TRUE(recent.Insert("worker:0", 8, 3));  // Restarted: a new incarnation starts afresh.
}

}  // namespace
}  // namespace trainscope
