#include "backends/local/runner.h"

// The Runner as the control loop's backend: the Monitor's view, the nodes,
// directives, actions recorded, and each turn of the loop with its progress.
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
#include "backends/local/runner_internal.h"
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

std::optional<v1::GetJobHealthResponse> Runner::Health() {
  absl::StatusOr<v1::GetJobHealthResponse> health =
      monitor_->hub().Health(job_.namespace_, job_.name);
  if (!health.ok()) return std::nullopt;  // NOT_FOUND: no reports yet
  const double t = static_cast<double>(clock_.NowMillis()) / 1000.0;
  // A Monitor that forgot the job (every member silent) answers no records:
  // keep the last ones.
  if (health->workers_size() > 0 || health->stragglers_size() > 0) {
    result_.stragglers.assign(health->stragglers().begin(), health->stragglers().end());
  }
  for (const v1::WorkerHealth& h : health->workers()) {
    result_.timeline.push_back({t, h.worker_id(), h.samples_per_second(), h.score(), h.class_(),
                                h.cause(), h.role(), h.sample_score(), h.speed_class(),
                                h.compensated()});
  }
  return *std::move(health);
}

loop::Observation Runner::Observe() {
  loop::Observation now;
  now.now_ms = clock_.NowMillis();
  now.windows_closed = WindowsClosed();
  if (loop_->Due(now.now_ms, now.windows_closed)) now.health = Health();
  now.members = Members();
  if (now.health) {
    now.nodes = Nodes();
    now.remaining_seconds = RemainingSeconds();
  }
  for (const auto& [id, s] : moved_servers_) now.servers_serving.push_back(s);
  return now;
}

std::vector<policy::NodeState> Runner::Nodes() const {
  std::map<std::string, bool> busy = workers_->BusyNodes();
  for (const auto& [node, b] : servers_->BusyNodes()) busy[node] = b;
  std::vector<policy::NodeState> nodes;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    policy::NodeState ns;
    ns.name = n.name;
    ns.spare = n.spare && !busy.count(n.name);
    nodes.push_back(ns);
  }
  return nodes;
}

bool Runner::SendDirective(const std::string& node, const v1::Directive& directive) {
  WorkerSlot* w = workers_->Find(directive.worker_id());
  if (w == nullptr || w->done) return false;
  if (directive.has_adjust_batch()) {
    w->local_batch = directive.adjust_batch().local_batch_size();
    w->accumulation_steps = std::max(1, directive.adjust_batch().accumulation_steps());
  }
  // The worker's node now: a plan that restarts a worker elsewhere and then
  // sizes it names the node it was observed on, which it has just left.
  const std::string& at = w->node.empty() ? node : w->node;
  if (monitor_->hub().SendDirective(at, directive)) return true;
  Event("directive for " + w->id + " not delivered: agent of " + at + " not connected");
  return false;
}

void Runner::RecordAction(const policy::Decision& d, loop::Outcome outcome) {
  policy::Decision rec = d;
  // The Monitor's cause for the subject, from its last view.
  for (auto p = result_.timeline.rbegin(); !d.subject.empty() && p != result_.timeline.rend();
       ++p) {
    if (p->worker != d.subject) continue;
    rec.cause = p->cause;
    break;
  }
  metrics_.Decided(d, loop::OutcomeName(outcome));
  if (outcome != loop::Outcome::kDone) {
    rec.reason = absl::StrCat("(", loop::OutcomeName(outcome), ") ", rec.reason);
  }
  if (policy::IsRebalance(rec)) {
    // Batch changes that only keep the global batch constant are summed up in
    // one line per plan by Control().
    const auto& a = std::get<policy::AdjustBatchSize>(d.action);
    rebalanced_.push_back(absl::StrCat(a.worker, "->", a.local_batch_size));
  } else {
    rebalanced_for_.push_back(
        absl::StrCat(policy::ActionTarget(rec.action), "'s ", policy::ActionName(rec.action)));
    Event(ActionLine(rec));
    if (const std::string evidence = EvidenceText(rec); !evidence.empty()) {
      Event("    " + evidence);
    }
  }
  result_.actions.push_back(std::move(rec));
}

void Runner::RecordRecommendation(const loop::Recommendation& r) {
  const policy::Decision& d = r.decision;
  metrics_.Recommended(d, r.predicted_saving_seconds);
  const vocab::ActionKind kind = policy::KindOf(d.action);
  const std::string& worker = policy::ActionTarget(d.action);
  for (loop::Recommendation& known : result_.recommendations) {
    if (policy::KindOf(known.decision.action) == kind &&
        policy::ActionTarget(known.decision.action) == worker && known.decision.rule == d.rule) {
      ++known.times;  // decided again (after its cool-down): told once
      return;
    }
  }
  result_.recommendations.push_back(r);
  if (policy::IsRebalance(d)) return;  // keeps the global batch around another: not a line
  Event(
      absl::StrFormat("%.1fs recommended (not carried out): %s %s, rule %s; saves ~%.1f s, "
                      "costs %.1f s: %s",
                      policy::AtSeconds(d), vocab::Name(kind), worker.empty() ? "job" : worker,
                      d.rule, r.predicted_saving_seconds, r.cost_seconds, d.reason));
}

absl::Status Runner::Control() {
  rebalanced_.clear();
  rebalanced_for_.clear();
  RETURN_IF_ERROR(loop_->Apply(loop_->Step(Observe())));
  if (!rebalanced_.empty()) {
    Event(RebalanceLine(static_cast<double>(clock_.NowMillis()) / 1000.0, rebalanced_for_,
                        rebalanced_));
  }
  return absl::OkStatus();
}

void Runner::ShowProgress() {
  auto p = driver_->Progress();
  if (!p.ok()) return;
  const int64_t total = job_.dataset.records * job_.dataset.epochs;
  metrics_.Progress(p->records_committed_total(), total, p->records_per_second(), p->eta_seconds());
  if (!o_.on_status) return;
  ProgressFigures f;
  if (!result_.timeline.empty()) {
    const double last = result_.timeline.back().at_seconds;
    for (auto it = result_.timeline.rbegin();
         it != result_.timeline.rend() && it->at_seconds == last; ++it) {
      if (vocab::IsStraggler(it->straggler_class) || it->compensated) ++f.stragglers;
      if (it->compensated) ++f.compensated;
    }
  }
  for (const policy::Decision& a : result_.actions) {
    ++(policy::IsRebalance(a) ? f.rebalances : f.actions);
  }
  f.committed = p->records_committed_total();
  f.total = total;
  f.epoch = std::min(p->epoch() + 1, p->epochs());
  f.epochs = p->epochs();
  f.records_per_second = p->records_per_second();
  f.eta_seconds = p->eta_seconds();
  // One column short of the width: a full line would wrap in some terminals.
  o_.on_status(ProgressLine(f, TerminalColumns(STDOUT_FILENO) - 1));
}

void Runner::Teardown() {
  if (workers_) workers_->KillAll();
  interference_.reset();  // spinners killed, relays closed
  if (servers_) servers_->StopAll();
  for (auto& [node, a] : agents_) Stop(a);
  if (monitor_) monitor_->Stop();
  if (monitor_server_) monitor_server_->Shutdown(std::chrono::seconds(1));
  Stop(sharding_);
  if (prometheus_) {
    prometheus_->Signal(SIGTERM);
    if (!prometheus_->Wait(std::chrono::seconds(10))) prometheus_->Signal(SIGKILL);
    prometheus_.reset();
  }
  if (cgroups_) {
    if (absl::Status s = cgroups_->RemoveAll(); !s.ok()) Event("cgroups: " + s.ToString());
    cgroups_.reset();
  }
}

}  // namespace antdt::local::internal
