// The local runner's Runner (one job's processes, the backend of its
// control loop) and its clock, shared by runner.cc (starting, running and
// collecting the job) and runner_backend.cc (what the loop asks of it).
// Internal to backends/local/.
#pragma once

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "backends/local/cgroup.h"
#include "backends/local/interference.h"
#include "backends/local/loss_log.h"
#include "backends/local/progress.h"
#include "backends/local/prometheus.h"
#include "backends/local/servers.h"
#include "backends/local/worker_command.h"
#include "backends/local/workers.h"
#include "backends/metrics/job_metrics.h"
#include "client/sharding_client.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/status.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/loop/control_loop.h"
#include "core/policy/policy.h"
#include "services/monitor/monitor_service.h"

namespace antdt::local::internal {

using SteadyClock = std::chrono::steady_clock;
namespace fs = std::filesystem;

// How long an agent keeps the series of a worker that stopped reporting: three
// Monitor windows (at least 5 s), so a worker restarted elsewhere soon shows
// on its new node only.
inline int64_t WorkerIdleAfterMs(const manifest::Job& job) {
  return std::max<int64_t>(3 * job.monitor.window_ms, 5'000);
}

// Milliseconds since the job started: the runner's time for the policy, the
// scenario and the report.
class JobClock final : public Clock {
 public:
  JobClock()
      : start_(SteadyClock::now()),
        start_unix_(
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count()) {}
  int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start_)
        .count();
  }
  // The start in seconds since the Unix epoch (for the workers' loss logs).
  double start_unix() const { return start_unix_; }
  // The job's time starts again at 0 (before its workers start).
  void Restart() { *this = JobClock(); }

 private:
  SteadyClock::time_point start_;
  double start_unix_;
};

// The local backend of the control loop: the job's processes on this machine.
class Runner final : public loop::Backend {
 public:
  Runner(const manifest::Job& job, const manifest::Scenario& scenario, const RunOptions& o)
      : job_(job), scenario_(scenario), o_(o) {}

  absl::StatusOr<RunResult> Run();

  // What the control loop sees now (the Monitor's view, the nodes and the ETA
  // only when a turn is due).
  loop::Observation Observe();

  // ---- loop::Backend
  absl::Status RestartElsewhere(const policy::WorkerState& member,
                                const policy::KillRestart& restart) override {
    // The source node's exclusion is the decision's (exclude_node_until_ms),
    // which the policy reads from the loop's history.
    if (member.role == vocab::Role::kParameterServer) {
      return MoveParameterServer(member, restart.to_node);
    }
    return workers_->RestartElsewhere(member.id, restart.to_node);
  }
  bool SendDirective(const std::string& node, const v1::Directive& directive) override;
  void LeaveParameterServers(const std::string& worker) override;
  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override {
    client::ShardingClientOptions copts = driver_->options();
    copts.worker_id = worker;
    copts.incarnation = incarnation;
    return client::ReleaseWorker(sharding_.address, copts);
  }
  void RecordAction(const policy::Decision& d, loop::Outcome outcome) override;
  void RecordTime(const loop::TimeDelta& delta) override { metrics_.Time(delta); }
  void RecordSkipped(const std::string& line, policy::SkipReason reason) override {
    metrics_.Skipped(policy::SkipReasonName(reason));
    // Why nothing was done, in the run's log (not on the terminal: a skip
    // repeats every window while it holds).
    LogEvent("skipped", {{"job", job_.name},
                         {"t", static_cast<double>(clock_.NowMillis()) / 1000.0},
                         {"reason", policy::SkipReasonName(reason)},
                         {"message", line}});
  }
  void RecordBudgetUsed(int used) override { metrics_.BudgetUsed(used); }
  void RecordRecommendation(const loop::Recommendation& r) override;

 private:
  // The parts of an Observation.
  std::optional<v1::GetJobHealthResponse> Health();  // also the run's timeline
  std::vector<policy::WorkerState> Members() const {
    std::vector<policy::WorkerState> members = workers_->Members();
    for (policy::WorkerState& m : servers_->Members()) members.push_back(std::move(m));
    return members;
  }
  std::vector<policy::NodeState> Nodes() const;
  double RemainingSeconds() const {
    auto progress = driver_->Progress();
    return progress.ok() ? progress->eta_seconds() : -1;
  }
  int64_t WindowsClosed() const {
    if (monitor_ == nullptr) return -1;  // the loop starts before the Monitor
    return monitor_->hub().WindowsClosed(job_.namespace_, job_.name);
  }

  void Event(const std::string& line) {
    LogEvent("runner", {{"job", job_.name},
                        {"t", static_cast<double>(clock_.NowMillis()) / 1000.0},
                        {"message", line}});
    if (o_.on_event) o_.on_event(line);
  }
  // Run, in three steps.
  absl::Status StartJob();
  absl::Status Loop();
  absl::Status Collect();

  // The control loop's options for this job; StartLoop starts it with them.
  loop::LoopOptions LoopOptionsOf() const;
  void StartLoop(const loop::LoopOptions& lo);
  absl::StatusOr<std::vector<const manifest::NodeSpec*>> Placement() const;
  absl::StatusOr<std::vector<std::string>> ServerPlacement() const;
  absl::Status PrepareWorkers();
  absl::Status StartShardingService();
  absl::Status StartMonitor();
  absl::Status StartAgents();
  absl::Status StartPrometheus();
  absl::Status StartParameterServers(const std::vector<std::string>& nodes);
  absl::Status MoveParameterServer(const policy::WorkerState& server, const std::string& to_node);
  absl::Status PollParameterServers();
  absl::Status StartWorkers(const std::vector<const manifest::NodeSpec*>& placement);
  absl::Status ApplyScenario();
  void CollectLoss();
  absl::Status Control();
  void ShowProgress();
  void Teardown();

  const manifest::Job& job_;
  manifest::Scenario scenario_;
  const RunOptions& o_;
  std::string dir_;
  vocab::Policy policy_ = vocab::Policy::kNone;
  vocab::Mode mode_ = vocab::Mode::kAct;
  JobClock clock_;

  Server sharding_;
  std::string token_;  // the run's credential (WORK_DIR/token)
  std::unique_ptr<client::ShardingClient> driver_;
  std::unique_ptr<monitor::MonitorServiceImpl> monitor_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  metrics::JobMetrics metrics_{*registry_, job_.namespace_, job_.name,
                               job_.straggler_policy.max_actions};
  std::shared_ptr<prometheus::Collectable> monitor_collector_;  // the exposer holds it weakly
  std::unique_ptr<Serving> monitor_server_;  // the Monitor's gRPC, the runner's /metrics
  std::string monitor_address_;
  std::unique_ptr<Process> prometheus_;   // with RunOptions::prometheus
  std::map<std::string, Server> agents_;  // by node
  std::unique_ptr<ServerSet> servers_;
  std::unique_ptr<Launcher> launcher_ = NewProcessLauncher();
  std::unique_ptr<WorkerSet> workers_;
  std::unique_ptr<loop::ControlLoop> loop_;
  WorkerSite site_;
  std::optional<NodeCgroups> cgroups_;               // nodes with a cpu-quota slowdown
  std::unique_ptr<Interference> interference_;       // the other real slowdowns
  const std::string cgroup_root_ = CpuCgroupRoot();  // v1 cpu controller, or v2
  std::map<std::string, std::string> speeds_written_;
  // Each moved parameter server where it serves now (the loop points the
  // workers there once per move).
  std::map<std::string, loop::ServerServing> moved_servers_;  // by id
  std::vector<std::string> rebalanced_;                       // batch changes of the current plan
  std::vector<std::string> rebalanced_for_;  // its other actions: "worker-2's ADJUST_BS"
  RunResult result_;
};

}  // namespace antdt::local::internal
