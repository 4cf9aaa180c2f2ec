// Configuration of antdt-sharding-service: a YAML file (--config) overridden
// by flags. Parsing is pure; every error names the field.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace antdt::sharding {

struct ServiceConfig {
  std::string listen = "127.0.0.1:7070";
  std::string metrics_listen;  // empty: no metrics endpoint
  std::string state_dir = "antdt-state";
  std::string ready_file;
  // The job's credential (common/credential.h): every call must carry it.
  // Empty: $ANTDT_TOKEN or $ANTDT_TOKEN_FILE. With none of the three the
  // service refuses to start unless auth is "none".
  std::string token_file;
  // "token" (the default: a credential is required) or "none" (calls are not
  // checked; said in a warning at start). Nothing else turns the check off.
  bool auth_none = false;
  // The job the service serves: a call on a dataset of another job is refused
  // (PERMISSION_DENIED naming dataset.job), so the job's token reaches only its
  // own datasets. "" serves any job.
  std::string job;
  // The Kubernetes namespace of the job it serves: a `namespace` label on its
  // per-job series ("" none).
  std::string namespace_;
  int64_t lease_ttl_ms = 30'000;
  bool sync_full = true;  // fsync every group commit (power-loss safe)
  // Totals over every dataset; see LedgerOptions for the defaults' reasons.
  int64_t max_datasets = 10'000;
  int64_t max_total_shards = 100'000'000;
};

// Parses the YAML text of --config; unknown keys are rejected.
absl::StatusOr<ServiceConfig> ParseServiceConfig(const std::string& yaml);
// Applies --flags over `base`.
absl::StatusOr<ServiceConfig> ApplyServiceFlags(ServiceConfig base, const ParsedFlags& flags);
absl::Status ValidateServiceConfig(const ServiceConfig& config);

}  // namespace antdt::sharding
