#include "backends/kubernetes/operator/config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace antdt::kube_operator {
namespace {

absl::Status Bool(const std::string& value, const std::string& field, bool* out) {
  if (value == "true" || value.empty()) {
    *out = true;
  } else if (value == "false") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be true or false, got \"", value, "\""));
  }
  return absl::OkStatus();
}

absl::Status Port(const std::string& value, const std::string& field, int32_t* out) {
  if (!absl::SimpleAtoi(value, out) || *out <= 0 || *out > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a port number (1-65535), got \"", value, "\""));
  }
  return absl::OkStatus();
}

std::string Canonical(std::string key) {
  for (char& c : key) {
    if (c == '-') c = '_';
  }
  return key;
}

absl::Status SetField(OperatorConfig& c, const std::string& raw_key, const std::string& value,
                      const std::string& field) {
  const std::string key = Canonical(raw_key);
  if (key == "kubeconfig") {
    c.kubeconfig = value;
  } else if (key == "namespace") {
    c.watch_namespace = value;
  } else if (key == "listen") {
    c.listen = value;
  } else if (key == "metrics_listen") {
    c.metrics_listen = value;
  } else if (key == "ready_file") {
    c.ready_file = value;
  } else if (key == "leader_elect") {
    RETURN_IF_ERROR(Bool(value, field, &c.leader_elect));
  } else if (key == "leader_election_namespace") {
    c.leader_election_namespace = value;
  } else if (key == "leader_election_id") {
    c.leader_election_id = value;
  } else if (key == "lease_duration") {
    ASSIGN_OR_RETURN(c.lease_duration_ms, ParseDurationMs(value, field));
  } else if (key == "renew_deadline") {
    ASSIGN_OR_RETURN(c.renew_deadline_ms, ParseDurationMs(value, field));
  } else if (key == "retry_period") {
    ASSIGN_OR_RETURN(c.retry_period_ms, ParseDurationMs(value, field));
  } else if (key == "identity") {
    c.identity = value;
  } else if (key == "image") {
    c.image = value;
  } else if (key == "sharding_port") {
    RETURN_IF_ERROR(Port(value, field, &c.sharding_port));
  } else if (key == "ps_port") {
    RETURN_IF_ERROR(Port(value, field, &c.ps_port));
  } else if (key == "agent_port") {
    RETURN_IF_ERROR(Port(value, field, &c.agent_port));
  } else if (key == "master_port") {
    RETURN_IF_ERROR(Port(value, field, &c.master_port));
  } else if (key == "gang_scheduler") {
    if (value != "" && value != "volcano" && value != "scheduler-plugins") {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": must be volcano or scheduler-plugins (or empty: none), got \"", value, "\""));
    }
    c.gang_scheduler = value;
  } else if (key == "job_credentials") {
    RETURN_IF_ERROR(Bool(value, field, &c.job_credentials));
  } else if (key == "pod_tls_secret") {
    if (!value.empty() && !IsDns1123Label(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be a Secret name (a DNS-1123 label), got \"", value, "\""));
    }
    c.pod_tls_secret = value;
  } else if (key == "token_key_secret") {
    if (!IsDns1123Label(value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be a Secret name (a DNS-1123 label), got \"", value, "\""));
    }
    c.token_key_secret = value;
  } else if (key == "monitor_window") {
    ASSIGN_OR_RETURN(c.monitor_window_ms, ParseDurationMs(value, field));
  } else if (key == "monitor_window_steps") {
    if (!absl::SimpleAtoi(value, &c.monitor_window_steps) || c.monitor_window_steps < 0 ||
        c.monitor_window_steps > 1000) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": must be an integer in [0, 1000] (0: windows in time), got \"", value, "\""));
    }
  } else if (key == "node_memory") {
    if (value != "Act" && value != "Recommend") {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be Act or Recommend, got \"", value, "\""));
    }
    c.node_memory_act = value == "Act";
  } else if (key == "node_taint") {
    RETURN_IF_ERROR(Bool(value, field, &c.node_taint));
  } else if (key == "node_memory_half_life") {
    ASSIGN_OR_RETURN(c.node_memory_half_life_ms, ParseDurationMs(value, field));
  } else if (key == "pod_name") {
    c.pod_name = value;
  } else if (key == "pod_namespace") {
    c.pod_namespace = value;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(field, ": unknown field"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OperatorConfig> ParseOperatorConfig(const std::string& yaml) {
  OperatorConfig c;
  RETURN_IF_ERROR(ForEachYamlField(yaml, [&](const std::string& key, const std::string& value) {
    return SetField(c, key, value, key);
  }));
  RETURN_IF_ERROR(ValidateOperatorConfig(c));
  return c;
}

absl::StatusOr<OperatorConfig> ApplyOperatorFlags(OperatorConfig base, const ParsedFlags& flags) {
  for (const auto& [name, value] : flags.values) {
    if (name == "config") continue;
    RETURN_IF_ERROR(SetField(base, name, value, "--" + name));
  }
  RETURN_IF_ERROR(ValidateOperatorConfig(base));
  return base;
}

absl::Status ValidateOperatorConfig(const OperatorConfig& c) {
  RETURN_IF_ERROR(ValidateHostPort(c.listen, "listen"));
  if (!c.metrics_listen.empty())
    RETURN_IF_ERROR(ValidateHostPort(c.metrics_listen, "metrics_listen"));
  if (c.leader_elect) {
    if (c.retry_period_ms <= 0) return absl::InvalidArgumentError("retry_period: must be > 0");
    if (c.renew_deadline_ms * 10 <= c.retry_period_ms * 12) {
      return absl::InvalidArgumentError("renew_deadline: must be longer than 1.2 x retry_period");
    }
    if (c.lease_duration_ms <= c.renew_deadline_ms) {
      return absl::InvalidArgumentError("lease_duration: must be longer than renew_deadline");
    }
    if (c.leader_election_id.empty()) {
      return absl::InvalidArgumentError("leader_election_id: must not be empty");
    }
  }
  if (c.image.empty()) return absl::InvalidArgumentError("image: must not be empty");
  if (c.monitor_window_ms <= 0) return absl::InvalidArgumentError("monitor_window: must be > 0");
  if (c.node_memory_half_life_ms <= 0) {
    return absl::InvalidArgumentError("node_memory_half_life: must be > 0");
  }
  if (c.node_taint && !c.node_memory_act) {
    return absl::InvalidArgumentError(
        "node_taint: needs node_memory Act (Recommend writes nothing)");
  }
  if (!c.pod_name.empty() && c.pod_namespace.empty()) {
    return absl::InvalidArgumentError("pod_namespace: must be set with pod_name");
  }
  return absl::OkStatus();
}

}  // namespace antdt::kube_operator
