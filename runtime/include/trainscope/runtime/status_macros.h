#pragma once
// Small helpers for absl::Status code paths (abseil 20220623 has no public RETURN_IF_ERROR),
// and the one place where absl::Status and grpc::Status convert into each other.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TS_STATUS_CONCAT_INNER(a, b) a##b
#define TS_STATUS_CONCAT(a, b) TS_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define TS_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status ts_status_ = (expr);      \
    if (!ts_status_.ok()) return ts_status_; \
  } while (0)

// `lhs = value of expr` (an absl::StatusOr<T>), or returns its status.
#define TS_ASSIGN_OR_RETURN(lhs, expr) \
  TS_ASSIGN_OR_RETURN_IMPL(TS_STATUS_CONCAT(ts_statusor_, __LINE__), lhs, expr)
#define TS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()

namespace grpc {
class Status;
}

namespace trainscope {

// Same canonical codes on both sides; the message is kept as it is.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace trainscope
