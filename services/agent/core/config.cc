#include "services/agent/core/config.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace antdt::agent {
namespace {

absl::Status ParseLabels(const std::string& text, const std::string& field,
                         std::map<std::string, std::string>& out) {
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() != 2 || kv[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be KEY=VALUE[,KEY=VALUE...], got \"", text, "\""));
    }
    out[kv[0]] = kv[1];
  }
  return absl::OkStatus();
}

absl::Status SetField(AgentConfig& c, std::string key, const std::string& value,
                      const std::string& field) {
  for (char& ch : key) {
    if (ch == '-') ch = '_';
  }
  if (key == "node") {
    c.node = value;
  } else if (key == "listen") {
    c.listen = value;
  } else if (key == "socket") {
    c.socket = value;
  } else if (key == "monitor") {
    c.monitor = value;
  } else if (key == "metrics_listen") {
    c.metrics_listen = value;
  } else if (key == "ready_file") {
    c.ready_file = value;
  } else if (key == "state_dir") {
    c.state_dir = value;
  } else if (key == "proc_root") {
    c.proc_root = value;
  } else if (key == "cgroup_root") {
    c.cgroup_root = value;
  } else if (key == "cgroups") {
    c.cgroups = absl::StrSplit(value, ',', absl::SkipEmpty());
  } else if (key == "labels") {
    RETURN_IF_ERROR(ParseLabels(value, field, c.labels));
  } else if (key == "nvml_library") {
    c.nvml_library = value;
  } else if (key == "node_pids_file") {
    c.node_pids_file = value;
  } else if (key == "interval") {
    ASSIGN_OR_RETURN(c.interval_ms, ParseDurationMs(value, field));
  } else if (key == "worker_idle_after") {
    ASSIGN_OR_RETURN(c.worker_idle_after_ms, ParseDurationMs(value, field));
  } else if (key == "buffer") {
    if (!absl::SimpleAtoi(value, &c.buffer) || c.buffer <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be an integer > 0, got \"", value, "\""));
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(field, ": unknown field"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<AgentConfig> ParseAgentConfig(const std::string& yaml) {
  AgentConfig c;
  RETURN_IF_ERROR(ForEachYamlField(yaml, [&](const std::string& key, const std::string& value) {
    return SetField(c, key, value, key);
  }));
  RETURN_IF_ERROR(ValidateAgentConfig(c));
  return c;
}

absl::StatusOr<AgentConfig> ApplyAgentFlags(AgentConfig base, const ParsedFlags& flags) {
  for (const auto& [name, value] : flags.values) {
    if (name == "config" || name == "once" || name == "help") continue;
    RETURN_IF_ERROR(SetField(base, name, value, "--" + name));
  }
  RETURN_IF_ERROR(ValidateAgentConfig(base));
  return base;
}

absl::Status ValidateAgentConfig(const AgentConfig& c) {
  RETURN_IF_ERROR(ValidateHostPort(c.listen, "listen"));
  // One Monitor, or the operator's replicas, comma-separated (tried in turn).
  for (absl::string_view address : absl::StrSplit(c.monitor, ',', absl::SkipEmpty())) {
    RETURN_IF_ERROR(ValidateHostPort(std::string(address), "monitor"));
  }
  if (!c.metrics_listen.empty())
    RETURN_IF_ERROR(ValidateHostPort(c.metrics_listen, "metrics_listen"));
  if (c.interval_ms < 100) {
    return absl::InvalidArgumentError("interval: must be at least 100ms");
  }
  if (c.worker_idle_after_ms < 1000) {
    return absl::InvalidArgumentError("worker_idle_after: must be at least 1s");
  }
  return absl::OkStatus();
}

}  // namespace antdt::agent
