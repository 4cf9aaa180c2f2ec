// Status helpers shared by every part: the RETURN_IF_ERROR / ASSIGN_OR_RETURN
// macros (status_macros.h) and conversion to grpc::Status.
#pragma once

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/status_macros.h"

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
