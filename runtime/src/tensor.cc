// Tensor metadata helpers; see tensor.h.
#include "trainscope/runtime/tensor.h"

#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainscope {

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
      return "float32";
    case DType::kDouble:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kInvalid:
      break;
  }
  return "invalid";
}

int64_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat:
    case DType::kInt32:
      return 4;
    case DType::kDouble:
    case DType::kInt64:
      return 8;
    case DType::kInvalid:
      break;
  }
  return 0;
}

int64_t TensorSpec::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return -1;
    n *= d;
  }
  return n;
}

int64_t TensorSpec::ByteSize() const {
  int64_t n = NumElements();
  int64_t size = DTypeSize(dtype);
  if (n < 0 || size == 0 || n > std::numeric_limits<int64_t>::max() / size) return -1;
  return n * size;
}

std::string TensorSpec::DebugString() const {
  return absl::StrCat(DTypeName(dtype), "[", absl::StrJoin(shape, ","), "]");
}

}  // namespace trainscope
