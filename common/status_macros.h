// The RETURN_IF_ERROR / ASSIGN_OR_RETURN macros Debian's Abseil lacks: Abseil
// only, so the pure core (core/) can use them without linking gRPC.
#pragma once

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
