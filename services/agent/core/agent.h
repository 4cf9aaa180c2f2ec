// The node agent's moving parts, wired by services/agent/main.cc:
//  - AgentServiceImpl: the local endpoint where worker SDKs report steps;
//  - MonitorLink: one bidirectional stream to the Monitor, reconnecting with
//    backoff, fed from the bounded Outbox;
//  - NodeView: the latest node sample and the Monitor's health view of this
//    node's workers, exported as Prometheus metrics at scrape time.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "antdt/v1/agent.grpc.pb.h"
#include "antdt/v1/monitor.grpc.pb.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "services/agent/core/outbox.h"

namespace antdt::agent {

// Latest node sample and worker health; read by the metrics collector.
// Thread-safe.
class NodeView {
 public:
  void SetSample(const v1::NodeSample& sample);
  void SetHealth(const v1::HealthUpdate& update);
  // Drops the health of a worker that left this node (AgentServiceImpl::ForgetIdle).
  void Forget(const std::string& job, const std::string& worker);
  v1::NodeSample sample() const;
  std::vector<v1::WorkerHealth> health() const;

 private:
  mutable std::mutex mu_;
  v1::NodeSample sample_;
  std::map<std::pair<std::string, std::string>, v1::WorkerHealth> health_;
};

// The namespace of a worker of a job on this node ("" unknown).
using NamespaceOf = std::function<std::string(const std::string& job, const std::string& worker)>;

// Renders NodeView as antdt_node_*, antdt_cgroup_*, antdt_gpu_* and
// antdt_worker_straggler_* gauges; the latter with `namespace` where
// `namespace_of` knows it.
std::shared_ptr<prometheus::Collectable> MakeNodeCollector(const NodeView* view,
                                                           NamespaceOf namespace_of = nullptr);

class AgentServiceImpl final : public v1::Agent::Service {
 public:
  AgentServiceImpl(std::string node, Outbox* outbox, const DirectiveTable* directives,
                   prometheus::Registry& registry);
  grpc::Status ReportStep(grpc::ServerContext* ctx, const v1::ReportStepRequest* req,
                          v1::ReportStepResponse* resp) override;

  // Whether the process `pid` runs: true, false (it ended), nullopt (cannot
  // tell); e.g. ProcessRunning over /proc.
  using ProcessCheck = std::function<std::optional<bool>(int64_t pid)>;
  // A worker that reported no step for `idle` has left this node (it ended,
  // or was restarted elsewhere): its antdt_worker_* series are removed, so
  // that nothing shows it as live here. So has, at once, a worker whose
  // process `running` saw run and now says ended (a worker killed to be
  // restarted elsewhere: its series end with it, not `idle` later); only a
  // process named by pid alone (no pod UID: a pod's pid is in its own PID
  // namespace), and only once seen running. Returns the (job, worker) pairs
  // forgotten now.
  std::vector<std::pair<std::string, std::string>> ForgetIdle(
      std::chrono::milliseconds idle, const ProcessCheck& running = nullptr);
  // The namespace the worker's step reports carry ("" none, or not known here).
  std::string NamespaceOf(const std::string& job, const std::string& worker) const;

  // The processes of the workers reporting here, as their last reports name
  // them: where the agent finds their cgroups (FindPodCgroup by pod UID,
  // ProcessCgroup by pid).
  struct WorkerProcess {
    std::string pod_uid;
    int64_t pid = 0;
  };
  std::vector<WorkerProcess> Processes() const;

 private:
  using WorkerKey = std::pair<std::string, std::string>;  // job, worker
  void Account(const v1::StepReport& step);               // step metrics
  bool ProcessEnded(const WorkerKey& key, const ProcessCheck& running);
  const std::string node_;
  Outbox* const outbox_;
  const DirectiveTable* const directives_;
  prometheus::Family<prometheus::Histogram>& step_seconds_;
  prometheus::Family<prometheus::Counter>& steps_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Counter>& steps_cut_;
  prometheus::Family<prometheus::Gauge>& samples_per_second_;
  prometheus::Family<prometheus::Counter>& refused_;  // by reason
  mutable std::mutex mu_;
  std::map<WorkerKey, double> rate_;  // EWMA of samples/s per worker of a job
  // The label sets each worker's series were made with, and its last report.
  std::map<WorkerKey, std::map<std::string, std::map<std::string, std::string>>> labels_;
  std::map<WorkerKey, std::chrono::steady_clock::time_point> last_report_;
  std::map<WorkerKey, WorkerProcess> processes_;
  std::set<WorkerKey> seen_running_;  // whose process ForgetIdle's check saw run
};

struct MonitorLinkOptions {
  // HOST:PORT, or several comma-separated (the operator's replicas): each
  // session tries the next after one that ended or was refused (a standby's
  // Monitor refuses agents until it leads).
  std::string address;
  std::string node;
  std::map<std::string, std::string> labels;
  int64_t min_backoff_ms = 100;
  int64_t max_backoff_ms = 5'000;
  // After a standby refused (UNAVAILABLE from a live replica: a leader is
  // being elected), the next try comes this soon, not after a growing
  // backoff: agents reach a new leader within this of its taking over.
  int64_t standby_retry_ms = 200;
  // Step reports queued together go in one stream message (Outbox::Take).
  Outbox::Batching batching;
};

// Keeps one stream to the Monitor open; sends what the Outbox holds; hands
// directives to the DirectiveTable and health to the NodeView.
class MonitorLink {
 public:
  MonitorLink(MonitorLinkOptions options, Outbox* outbox, DirectiveTable* directives,
              NodeView* view, prometheus::Registry& registry);
  ~MonitorLink();  // stops and joins
  void Start();
  bool connected() const { return connected_; }

 private:
  // How a session ended: it streamed; a standby refused it; it failed
  // (unreachable, or refused otherwise).
  enum class SessionEnd { kStreamed, kStandby, kFailed };
  void Run();
  SessionEnd Session(const std::string& address);  // one connection; returns after it breaks

  const MonitorLinkOptions options_;
  const std::vector<std::string> addresses_;  // options_.address, split
  Outbox* const outbox_;
  DirectiveTable* const directives_;
  NodeView* const view_;
  prometheus::Gauge& connected_gauge_;
  prometheus::Counter& reconnects_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> connected_{false};
  std::mutex ctx_mu_;
  grpc::ClientContext* ctx_ = nullptr;
  std::thread thread_;
};

// Validates a step report from an SDK; errors name the field.
absl::Status ValidateStep(const v1::StepReport& step);

}  // namespace antdt::agent
