#include "core/loop/control_loop.h"

#include <algorithm>
#include <unordered_map>
#include <utility>

#include "common/status.h"

namespace antdt::control {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kNotDelivered:
      return "not_delivered";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kDone:
      break;
  }
  return "done";
}

absl::Status Backend::Retire(const std::string& worker, int32_t incarnation) {
  LeaveParameterServers(worker);
  return ReleaseShards(worker, incarnation);
}

ControlLoop::ControlLoop(LoopOptions options, Backend* backend, const Clock* clock)
    : options_(std::move(options)), backend_(backend), clock_(clock) {}

void ControlLoop::Seed(std::vector<controller::Decision> decisions) {
  for (controller::Decision& d : decisions) history_.push_back(std::move(d));
  budget_reported_ = false;
}

double ControlLoop::RestartCostSeconds(vocab::Role role) const {
  const bool ps = role == vocab::Role::kParameterServer;
  const Measured& m = measured_[ps ? 1 : 0];
  const double measured = m.restarts > 0 ? m.seconds / m.restarts : 0;
  const double relaunch = std::max(measured, kMinRelaunchSeconds);
  return relaunch + static_cast<double>(options_.window_ms) / 1000.0 +
         (ps ? 0.0 : std::max(0.0, options_.regroup_seconds));
}

int64_t ControlLoop::NextDirectiveVersion() {
  directive_version_ = std::max(directive_version_ + 1, clock_->NowMillis());
  return directive_version_;
}

v1::Directive ControlLoop::NewDirective(const std::string& worker, const std::string& reason) {
  v1::Directive d;
  d.set_job(options_.job);
  d.set_namespace_(options_.namespace_);
  d.set_worker_id(worker);
  d.set_version(NextDirectiveVersion());
  d.set_reason(reason);
  return d;
}

v1::Directive ControlLoop::BatchDirective(const std::string& worker, int64_t local_batch_size,
                                          int32_t accumulation_steps, const std::string& reason) {
  v1::Directive d = NewDirective(worker, reason);
  d.mutable_adjust_batch()->set_local_batch_size(local_batch_size);
  d.mutable_adjust_batch()->set_accumulation_steps(std::max<int32_t>(1, accumulation_steps));
  return d;
}

std::vector<Delivery> ControlLoop::ServerMoved(const std::string& ps_id, const std::string& address,
                                               const std::vector<controller::WorkerState>& members,
                                               const std::string& reason) {
  std::vector<Delivery> out;
  for (const controller::WorkerState& m : members) {
    if (m.role != vocab::Role::kWorker || !m.alive || m.node.empty()) continue;
    Delivery& delivery = out.emplace_back(Delivery{m.node, NewDirective(m.id, reason)});
    delivery.directive.mutable_move_parameter_server()->set_ps_id(ps_id);
    delivery.directive.mutable_move_parameter_server()->set_address(address);
  }
  return out;
}

void ControlLoop::MeasureRelaunches(const std::vector<controller::WorkerState>& members) {
  const int64_t now = clock_->NowMillis();
  for (const controller::WorkerState& m : members) {
    auto it = relaunching_.find(m.id);
    if (it == relaunching_.end() || !m.alive || m.incarnation <= it->second.first) continue;
    Measured& measured = measured_[m.role == vocab::Role::kParameterServer ? 1 : 0];
    measured.seconds += static_cast<double>(now - it->second.second) / 1000.0;
    ++measured.restarts;
    relaunching_.erase(it);
  }
}

std::optional<controller::Observed> ControlLoop::Observe(bool with_history) {
  std::optional<v1::GetJobHealthResponse> health = backend_->Health();
  observed_members_ = backend_->Members();
  observed_index_.clear();
  for (size_t i = 0; i < observed_members_.size(); ++i) {
    observed_index_[observed_members_[i].id] = i;  // the last of an id, as a scan found
  }
  MeasureRelaunches(observed_members_);
  if (!health) return std::nullopt;
  controller::Observed obs;
  obs.now_ms = clock_->NowMillis();
  backend_->RecordTime(ledger_.Observe(obs.now_ms, *health));
  obs.job = options_.job;
  obs.health = std::move(*health);
  obs.workers = observed_members_;
  // A member restarted by a decision in the history was restarted then, even
  // when its backend does not remember it (after the backend's own restart).
  // One pass over each: thousands of members and decisions.
  std::unordered_map<std::string, int64_t> restarted;
  for (const controller::Decision& d : history_) {
    if (std::holds_alternative<controller::KillRestart>(d.action)) {
      int64_t& at = restarted.try_emplace(d.subject, d.at_ms).first->second;
      at = std::max(at, d.at_ms);
    }
  }
  for (controller::WorkerState& m : obs.workers) {
    auto it = restarted.find(m.id);
    if (it != restarted.end()) m.last_restart_ms = std::max(m.last_restart_ms, it->second);
  }
  obs.nodes = backend_->Nodes();
  obs.global_batch_size = options_.global_batch_size;
  obs.remaining_seconds = backend_->RemainingSeconds();
  obs.restart_cost_seconds = RestartCostSeconds();
  obs.ps_restart_cost_seconds = RestartCostSeconds(vocab::Role::kParameterServer);
  if (with_history) obs.history = history_;
  return obs;
}

controller::Plan ControlLoop::Decide(const controller::Observed& observed) const {
  return controller::Decide(observed, options_.policy);
}

absl::Status ControlLoop::ExecuteOne(const controller::Decision& d) {
  const std::string& target = controller::ActionTarget(d.action);
  auto found = observed_index_.find(target);
  const controller::WorkerState* member =
      found == observed_index_.end() ? nullptr : &observed_members_[found->second];
  const auto* a = std::get_if<controller::AdjustBatchSize>(&d.action);
  Outcome outcome = Outcome::kDone;
  // A member not running now (being started) gets no directive; the decision
  // stands (committed, recorded) and it starts with the batch the next plan sees.
  if (a != nullptr && member != nullptr && !member->node.empty()) {
    const v1::Directive directive =
        BatchDirective(a->worker, a->local_batch_size, a->accumulation_steps, d.reason);
    // Not delivered: the agent is reconnecting; the next plan sees the
    // member's batch and re-plans (the backend logs it).
    if (!backend_->SendDirective(member->node, directive)) outcome = Outcome::kNotDelivered;
  } else if (const auto* k = std::get_if<controller::KillRestart>(&d.action)) {
    if (member == nullptr) {
      return absl::FailedPreconditionError("KILL_RESTART of " + k->worker +
                                           ": not a member of job " + options_.job);
    }
    relaunching_[member->id] = {member->incarnation, clock_->NowMillis()};
    ledger_.Restarted(member->id);
    if (absl::Status s = backend_->RestartElsewhere(*member, *k); !s.ok()) {
      backend_->RecordAction(d, Outcome::kFailed);
      return s;
    }
  }
  // UseBackupWorkers: set on the parameter servers when they start; recorded only.
  backend_->RecordAction(d, outcome);
  return absl::OkStatus();
}

absl::Status ControlLoop::Execute(const controller::Plan& plan) {
  for (size_t i = 0; i < plan.skipped.size() && i < plan.skip_reasons.size(); ++i) {
    backend_->RecordSkipped(plan.skipped[i], plan.skip_reasons[i]);
  }
  absl::Status status;
  for (const controller::Decision& d : plan.decisions) {
    status = ExecuteOne(d);
    if (!status.ok()) break;
    history_.push_back(d);
  }
  if (!plan.decisions.empty() || !budget_reported_) {
    backend_->RecordBudgetUsed(controller::BudgetUsed(history_));
    budget_reported_ = true;
  }
  return status;
}

bool ControlLoop::TakeTurn() {
  const int64_t now = clock_->NowMillis();
  const int64_t windows = backend_->WindowsClosed();
  const bool fresh = windows > windows_seen_ && windows_seen_ >= 0;
  windows_seen_ = std::max(windows_seen_, windows);
  if (now < next_run_ms_ && !fresh) return false;
  next_run_ms_ = now + options_.interval_ms;
  return true;
}

absl::StatusOr<controller::Plan> ControlLoop::RunOnce() {
  if (!TakeTurn()) return controller::Plan{};
  std::optional<controller::Observed> observed = Observe(/*with_history=*/false);
  if (!observed) return controller::Plan{};
  // The history is lent to the policy, not copied: thousands of decisions.
  observed->history.swap(history_);
  controller::Plan plan = Decide(*observed);
  history_.swap(observed->history);
  RETURN_IF_ERROR(Execute(plan));
  return plan;
}

}  // namespace antdt::control
