#pragma once
// Dense tensor metadata as the runtime's bookkeeping sees it: dtype and shape, without protobuf.
// Tensor bytes travel as raw little-endian, row-major element bytes.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace trainscope {

// Element types. Values match trainscope.v1.DataType on the wire.
enum class DType : int { kInvalid = 0, kFloat = 1, kDouble = 2, kInt32 = 3, kInt64 = 4 };

// "float32", "float64", "int32", "int64" or "invalid".
absl::string_view DTypeName(DType dtype);
// Bytes per element; 0 for kInvalid.
int64_t DTypeSize(DType dtype);

// A tensor's dtype and shape. Value type.
struct TensorSpec {
  DType dtype = DType::kInvalid;
  std::vector<int64_t> shape;

  // Product of the dimensions (1 for a scalar); -1 when a dimension is negative or the product
  // overflows.
  int64_t NumElements() const;
  // NumElements() * DTypeSize(dtype), or -1 when not representable.
  int64_t ByteSize() const;
  // "float32[8,4]" (a scalar is "float32[]").
  std::string DebugString() const;
  bool operator==(const TensorSpec&) const = default;
};

}  // namespace trainscope
