#include "services/sharding/config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace antdt::sharding {
namespace {

absl::StatusOr<int64_t> ParsePositive(const std::string& value, const std::string& field) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a whole number > 0, got \"", value, "\""));
  }
  return n;
}

absl::Status SetField(ServiceConfig& c, const std::string& key, const std::string& value,
                      const std::string& field) {
  if (key == "listen") {
    c.listen = value;
  } else if (key == "metrics_listen" || key == "metrics-listen") {
    c.metrics_listen = value;
  } else if (key == "state_dir" || key == "state-dir") {
    c.state_dir = value;
  } else if (key == "namespace") {
    c.namespace_ = value;
  } else if (key == "ready_file" || key == "ready-file") {
    c.ready_file = value;
  } else if (key == "token_file" || key == "token-file") {
    c.token_file = value;
  } else if (key == "auth") {
    if (value != "token" && value != "none") {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be \"token\" or \"none\", got \"", value, "\""));
    }
    c.auth_none = value == "none";
  } else if (key == "job") {
    c.job = value;
  } else if (key == "lease_ttl" || key == "lease-ttl") {
    ASSIGN_OR_RETURN(c.lease_ttl_ms, ParseDurationMs(value, field));
  } else if (key == "max_datasets" || key == "max-datasets") {
    ASSIGN_OR_RETURN(c.max_datasets, ParsePositive(value, field));
  } else if (key == "max_total_shards" || key == "max-total-shards") {
    ASSIGN_OR_RETURN(c.max_total_shards, ParsePositive(value, field));
  } else if (key == "sync") {
    if (value != "full" && value != "normal") {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be \"full\" or \"normal\", got \"", value, "\""));
    }
    c.sync_full = value == "full";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(field, ": unknown field"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ServiceConfig> ParseServiceConfig(const std::string& yaml) {
  ServiceConfig c;
  RETURN_IF_ERROR(ForEachYamlField(yaml, [&](const std::string& key, const std::string& value) {
    return SetField(c, key, value, key);
  }));
  RETURN_IF_ERROR(ValidateServiceConfig(c));
  return c;
}

absl::StatusOr<ServiceConfig> ApplyServiceFlags(ServiceConfig base, const ParsedFlags& flags) {
  for (const auto& [name, value] : flags.values) {
    if (name == "config") continue;
    RETURN_IF_ERROR(SetField(base, name, value, "--" + name));
  }
  RETURN_IF_ERROR(ValidateServiceConfig(base));
  return base;
}

absl::Status ValidateServiceConfig(const ServiceConfig& c) {
  RETURN_IF_ERROR(ValidateHostPort(c.listen, "listen"));
  if (!c.metrics_listen.empty())
    RETURN_IF_ERROR(ValidateHostPort(c.metrics_listen, "metrics_listen"));
  if (c.state_dir.empty()) return absl::InvalidArgumentError("state_dir: must not be empty");
  if (c.lease_ttl_ms <= 0) return absl::InvalidArgumentError("lease_ttl: must be > 0");
  if (!c.job.empty()) {
    if (c.job.size() > 253) return absl::InvalidArgumentError("job: longer than 253 bytes");
    for (unsigned char ch : c.job) {
      if (ch < 0x20 || ch == 0x7f) {
        return absl::InvalidArgumentError("job: holds a control character");
      }
    }
  }
  if (!c.namespace_.empty() && !IsDns1123Label(c.namespace_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace: must be a Kubernetes namespace (a DNS-1123 label), got \"",
                     c.namespace_, "\""));
  }
  return absl::OkStatus();
}

}  // namespace antdt::sharding
