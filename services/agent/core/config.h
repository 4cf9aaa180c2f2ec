// Configuration of antdt-agent: a YAML file (--config) overridden by flags.
// Parsing is pure; every error names the field.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace antdt::agent {

struct AgentConfig {
  std::string node;                    // default: the host name
  std::string listen = "127.0.0.1:0";  // TCP endpoint for step reports
  std::string socket;                  // unix socket for step reports (optional)
  std::string monitor;                 // HOST:PORT of the Monitor (optional)
  std::string metrics_listen;
  std::string ready_file;
  std::string state_dir;  // unused today; accepted like every server
  std::string proc_root = "/proc";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::vector<std::string> cgroups;  // relative to cgroup_root
  std::map<std::string, std::string> labels;
  std::string nvml_library;  // default: libnvidia-ml.so.1
  int64_t interval_ms = 1000;
  // A worker with no step report for this long has left the node: its series
  // go (AgentServiceImpl::ForgetIdle).
  int64_t worker_idle_after_ms = 120'000;
  int64_t buffer = 10'000;  // messages kept while the Monitor is away
  // A file listing the node's processes, one pid per line (the local runner's
  // emulated nodes share one host): the CPU those that are not the job's
  // workers use is NodeSample.neighbour_cpu_cores. "": not measured.
  std::string node_pids_file;
};

absl::StatusOr<AgentConfig> ParseAgentConfig(const std::string& yaml);
absl::StatusOr<AgentConfig> ApplyAgentFlags(AgentConfig base, const ParsedFlags& flags);
absl::Status ValidateAgentConfig(const AgentConfig& config);

}  // namespace antdt::agent
