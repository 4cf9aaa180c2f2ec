// Status helpers shared by every part: the RETURN_IF_ERROR / ASSIGN_OR_RETURN
// macros Debian's Abseil lacks, and conversion to grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define ANTDT_CONCAT_INNER(a, b) a##b
#define ANTDT_CONCAT(a, b) ANTDT_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status _antdt_status = (expr);         \
    if (!_antdt_status.ok()) return _antdt_status; \
  } while (0)

#define ASSIGN_OR_RETURN(lhs, expr) \
  ANTDT_ASSIGN_OR_RETURN_IMPL(ANTDT_CONCAT(_antdt_statusor_, __LINE__), lhs, expr)

#define ANTDT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

namespace antdt {

// The codes are gRPC's codes, so this is a cast plus the message.
inline grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

inline absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

}  // namespace antdt
