// antdt-operator's configuration: defaults, then --config YAML, then flags
// (the same keys; errors name the key or the flag).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/config.h"

namespace antdt::kube_operator {

struct OperatorConfig {
  std::string kubeconfig;               // "" : in-cluster, then $KUBECONFIG, then ~/.kube/config
  std::string watch_namespace;          // "" all namespaces
  std::string listen = "0.0.0.0:9401";  // the Monitor's gRPC endpoint for agents
  std::string metrics_listen;           // /metrics, /healthz, /readyz
  std::string ready_file;
  bool leader_elect = true;
  std::string leader_election_namespace;  // "" : the kubeconfig's namespace
  std::string leader_election_id = "antdt-operator";
  int64_t lease_duration_ms = 15'000;
  int64_t renew_deadline_ms = 10'000;
  int64_t retry_period_ms = 2'000;
  std::string identity;  // "" : hostname_pid
  std::string image = "antdt/antdt:0.1.0";
  int32_t sharding_port = 50051;
  int32_t ps_port = 50052;
  int32_t agent_port = 9400;
  int32_t master_port = 29500;  // MASTER_PORT of every worker (worker-0's rendezvous)
  // Gang scheduling: "" (none), "volcano" or "scheduler-plugins" (coscheduling):
  // a PodGroup per job, its parameter servers and workers in it.
  std::string gang_scheduler;
  // Per-job credentials (common/credential.h): each job's token is
  // HMAC(key, its UID), the key kept in the Secret `token_key_secret` of the
  // leader-election namespace (created on first start).
  bool job_credentials = true;
  std::string token_key_secret = "antdt-operator-key";
  // TLS for the jobs' pods: the Secret (in each job's namespace; tls.crt,
  // tls.key, ca.crt: cert-manager's layout) they mount and serve and dial
  // with. "" : plaintext pods.
  std::string pod_tls_secret;
  int64_t monitor_window_ms = 10'000;  // the Monitor's window for every job
  // > 0: windows of that many steps, monitor_window_ms being the first ones'.
  int monitor_window_steps = 0;
  // The cluster's node memory (node_controller.h): Recommend keeps and
  // reports it; Act also publishes it on the Nodes (the AntDTSlowNode
  // condition, the memory annotation; needs nodes/status patch); with
  // node_taint a PreferNoSchedule taint too (needs nodes patch).
  bool node_memory_act = false;  // node_memory: Act | Recommend
  bool node_taint = false;
  int64_t node_memory_half_life_ms = 6LL * 3600 * 1000;
  // This replica's pod (the downward API's metadata.name and .namespace): the
  // acting replica labels it antdt.io/leader=true. "" outside a pod.
  std::string pod_name;
  std::string pod_namespace;
};

absl::StatusOr<OperatorConfig> ParseOperatorConfig(const std::string& yaml);
absl::StatusOr<OperatorConfig> ApplyOperatorFlags(OperatorConfig base, const ParsedFlags& flags);
absl::Status ValidateOperatorConfig(const OperatorConfig& c);

}  // namespace antdt::kube_operator
