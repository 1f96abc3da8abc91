// Variables are spread over the ps tasks by size, the same way on every worker.
#include <gtest/gtest.h>

#include "trainscope/runtime/parameter_client.h"

namespace trainscope {
namespace {

TEST(PlacementTest, BalancesBySize) {
  std::vector<VariableDef> vars = {
      {"big", {DType::kFloat, {1000}}, ""},
      {"mid1", {DType::kFloat, {500}}, ""},
      {"mid2", {DType::kFloat, {500}}, ""},
      {"small", {DType::kFloat, {10}}, ""},
  };
  auto placement = PlaceVariables(vars, 2);
  EXPECT_EQ(placement["big"], 0);
  EXPECT_EQ(placement["mid1"], 1);
  EXPECT_EQ(placement["mid2"], 1);
  EXPECT_EQ(placement["small"], 0);
  std::reverse(vars.begin(), vars.end());
  EXPECT_EQ(PlaceVariables(vars, 2), placement);
}

TEST(PlacementTest, OnePsHoldsEverything) {
  std::vector<VariableDef> vars = {{"a", {DType::kFloat, {3}}, ""},
                                   {"b", {DType::kDouble, {}}, ""}};
  auto placement = PlaceVariables(vars, 1);
  EXPECT_EQ(placement["a"], 0);
  EXPECT_EQ(placement["b"], 0);
}

}  // namespace
}  // namespace trainscope
