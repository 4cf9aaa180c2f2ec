#include "core/loop/control_loop.h"

#include <algorithm>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace antdt::loop {

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
    : options_(std::move(options)), backend_(backend), clock_(clock) {
  memory_ = options_.node_memory;
  if (memory_ == nullptr) {
    own_memory_.emplace(*nodememory::NodeMemory::Create());  // the defaults are valid
    memory_ = &*own_memory_;
  }
}

void ControlLoop::RememberNodes(const v1::GetJobHealthResponse& health,
                                std::vector<policy::NodeState>* nodes) {
  const int64_t now = health.time_unix_ms();
  for (const v1::StragglerRecord& r : health.stragglers()) {
    auto [it, inserted] = remembered_.try_emplace({r.worker_id(), r.first_seen_unix_ms()});
    const std::pair<int64_t, bool> seen{r.last_seen_unix_ms(), r.active()};
    if (!inserted && it->second == seen) continue;
    it->second = seen;
    // A record the memory cannot take (no node) is simply not remembered.
    memory_->Record(r, std::max(now, r.last_seen_unix_ms())).IgnoreError();
  }
  // Nothing seen anywhere yet (most turns of most jobs): every node gets the
  // answer for a node with no history, without a lookup per node per turn.
  const bool empty = memory_->nodes() == 0;
  const nodememory::Estimate unseen = memory_->For("", now);
  for (policy::NodeState& n : *nodes) {
    // What the backend already knows of it (a cluster's memory: the
    // operator's node controller) stands beside the job's own.
    const nodememory::Estimate e = empty ? unseen : memory_->For(n.name, now);
    n.slowdown_expected_seconds =
        std::max(n.slowdown_expected_seconds, e.expected_duration_seconds);
    n.chronic = n.chronic || e.chronic;
    n.avoid = std::max(n.avoid, e.avoid);
  }
}

void ControlLoop::Seed(std::vector<policy::Decision> decisions) {
  for (const policy::Decision& d : decisions) Remember(d);
  budget_reported_ = false;
}

double ControlLoop::RestartCostSeconds(vocab::Role role) const {
  const bool ps = role == vocab::Role::kParameterServer;
  const Measured& m = measured_[ps ? 1 : 0];
  const double measured = m.restarts > 0 ? m.seconds / m.restarts : 0;
  const double relaunch = std::max(measured, kMinRelaunchSeconds);
  const int64_t window = window_ms_seen_ > 0 ? window_ms_seen_ : options_.window_ms;
  return relaunch + static_cast<double>(window) / 1000.0 +
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

void ControlLoop::Announce(const ServerServing& s, const std::vector<policy::WorkerState>& members,
                           std::vector<Delivery>* out) {
  for (const policy::WorkerState& m : members) {
    if (m.role != vocab::Role::kWorker || !m.alive || m.node.empty()) continue;
    Delivery& delivery = out->emplace_back(Delivery{
        m.node, NewDirective(m.id, absl::StrCat(s.id, " moved to ", s.where)), m.incarnation});
    delivery.directive.mutable_move_parameter_server()->set_ps_id(s.id);
    delivery.directive.mutable_move_parameter_server()->set_address(s.address);
  }
}

void ControlLoop::Redeliver(const std::vector<policy::WorkerState>& members, Ready* ready) {
  std::set<std::string> sized;
  for (const Effect& e : ready->effects) {
    if (e.delivery) sized.insert(e.delivery->directive.worker_id());
  }
  for (const policy::WorkerState& m : members) {
    if (m.role != vocab::Role::kWorker || !m.alive || m.node.empty() || m.local_batch_size <= 0 ||
        sized.count(m.id) > 0) {
      continue;
    }
    const int32_t steps = std::max<int32_t>(1, m.accumulation_steps);
    const Sent& sent = sent_[m.id];
    if (sent.incarnation == m.incarnation && sent.batch == m.local_batch_size &&
        sent.steps == steps) {
      continue;
    }
    Delivery& d = ready->deliveries.emplace_back(
        Delivery{m.node,
                 BatchDirective(m.id, m.local_batch_size, steps,
                                "the committed local batch, not delivered to this incarnation"),
                 m.incarnation});
    d.redelivery = true;
    d.sent_before = sent.count;
  }
}

bool ControlLoop::Deliver(const Delivery& delivery) {
  const std::string& worker = delivery.directive.worker_id();
  if (delivery.redelivery) {
    auto it = sent_.find(worker);
    if (it != sent_.end() && it->second.count != delivery.sent_before) return true;  // superseded
  }
  if (!backend_->SendDirective(delivery.node, delivery.directive)) return false;
  if (delivery.directive.has_adjust_batch()) {
    Sent& sent = sent_[worker];
    sent.incarnation = delivery.incarnation;
    sent.batch = delivery.directive.adjust_batch().local_batch_size();
    sent.steps = delivery.directive.adjust_batch().accumulation_steps();
    ++sent.count;
  }
  return true;
}

void ControlLoop::MeasureRelaunches(const std::vector<policy::WorkerState>& members, int64_t now) {
  for (const policy::WorkerState& m : members) {
    auto it = relaunching_.find(m.id);
    if (it == relaunching_.end() || !m.alive || m.incarnation <= it->second.first) continue;
    Measured& measured = measured_[m.role == vocab::Role::kParameterServer ? 1 : 0];
    measured.seconds += static_cast<double>(now - it->second.second) / 1000.0;
    ++measured.restarts;
    relaunching_.erase(it);
  }
}

std::optional<policy::Observed> ControlLoop::PolicyInput(Observation& now) {
  MeasureRelaunches(now.members, now.now_ms);
  if (!now.health) return std::nullopt;
  policy::Observed obs;
  // Taken, not copied: thousands of workers' health a turn.
  obs.health = *std::move(now.health);
  now.health.reset();
  const v1::GetJobHealthResponse& health = obs.health;
  if (health.window_ms() > 0) window_ms_seen_ = health.window_ms();
  obs.now_ms = now.now_ms;
  backend_->RecordTime(time_ledger_.Observe(obs.now_ms, health));
  obs.job = options_.job;
  obs.workers = now.members;
  // A member restarted by a decision in the history was restarted then, even
  // when its backend does not remember it (after the backend's own restart).
  if (!history_index_.Restarts().empty()) {
    for (policy::WorkerState& m : obs.workers) {
      m.last_restart_ms = std::max(m.last_restart_ms, history_index_.LastRestartMs(m.id));
    }
  }
  obs.nodes = std::move(now.nodes);  // read by nothing after this: taken, not copied
  RememberNodes(health, &obs.nodes);
  obs.global_batch_size = options_.global_batch_size;
  obs.remaining_seconds = now.remaining_seconds;
  obs.restart_cost_seconds = RestartCostSeconds();
  obs.ps_restart_cost_seconds = RestartCostSeconds(vocab::Role::kParameterServer);
  return obs;
}

void ControlLoop::Remember(const policy::Decision& decision) {
  history_.push_back(policy::WithoutReasons(decision));
  history_index_.Add(history_.back());
}

policy::Plan ControlLoop::Decide(const policy::Observed& observed) const {
  return policy::Decide(observed, options_.policy);
}

std::vector<Effect> ControlLoop::Effects(const policy::Plan& plan, const policy::Observed& observed,
                                         const std::vector<policy::WorkerState>& members) {
  std::vector<Effect> effects;
  if (plan.decisions.empty()) return effects;
  // Views of the observation's own strings: thousands of members a turn.
  std::unordered_map<std::string_view, double> scores;
  for (const v1::WorkerHealth& h : observed.health.workers()) scores[h.worker_id()] = h.score();
  std::unordered_map<std::string_view, size_t> index;
  for (size_t i = 0; i < members.size(); ++i) {
    index[members[i].id] = i;  // the last of an id, as a scan finds
  }
  for (const policy::Decision& d : plan.decisions) {
    Effect& e = effects.emplace_back();
    e.decision = d;
    if (auto saved = d.evidence.find("saved_seconds"); saved != d.evidence.end()) {
      e.predicted_saving_seconds = saved->second;
    } else if (auto score = scores.find(d.subject);
               score != scores.end() && score->second > 1 && observed.remaining_seconds > 0) {
      e.predicted_saving_seconds = observed.remaining_seconds * (1 - 1 / score->second);
    }
    if (std::holds_alternative<policy::KillRestart>(d.action)) {
      auto cost = d.evidence.find("cost_seconds");
      e.cost_seconds = cost != d.evidence.end() ? cost->second : observed.restart_cost_seconds;
    }
    auto found = index.find(policy::ActionTarget(d.action));
    const policy::WorkerState* member = found == index.end() ? nullptr : &members[found->second];
    // A member not running now (being started) gets no directive; the decision
    // stands (committed, recorded) and it starts with the batch the next plan sees.
    if (const auto* a = std::get_if<policy::AdjustBatchSize>(&d.action)) {
      if (member != nullptr && !member->node.empty()) {
        e.delivery = Delivery{
            member->node,
            BatchDirective(a->worker, a->local_batch_size, a->accumulation_steps, d.reason),
            member->incarnation};
      }
    } else if (std::holds_alternative<policy::KillRestart>(d.action) && member != nullptr) {
      e.restart = *member;
    }
    // UseBackupWorkers: set on the parameter servers when they start; recorded only.
  }
  return effects;
}

absl::Status ControlLoop::ApplyOne(const Effect& e) {
  Outcome outcome = Outcome::kDone;
  // Not delivered: the agent is reconnecting; the next plan sees the member's
  // batch and re-plans (the backend logs it).
  if (e.delivery && !Deliver(*e.delivery)) outcome = Outcome::kNotDelivered;
  if (const auto* k = std::get_if<policy::KillRestart>(&e.decision.action)) {
    if (!e.restart) {
      return absl::FailedPreconditionError("KILL_RESTART of " + k->worker +
                                           ": not a member of job " + options_.job);
    }
    relaunching_[e.restart->id] = {e.restart->incarnation, clock_->NowMillis()};
    time_ledger_.Restarted(e.restart->id);
    if (absl::Status s = backend_->RestartElsewhere(*e.restart, *k); !s.ok()) {
      backend_->RecordAction(e.decision, Outcome::kFailed);
      return s;
    }
  }
  backend_->RecordAction(e.decision, outcome);
  return absl::OkStatus();
}

Ready ControlLoop::Step(Observation now, bool may_decide) {
  Ready ready;
  ready.recommend_only = options_.mode == vocab::Mode::kRecommend;
  if (may_decide && TakeTurn(now.now_ms, now.windows_closed)) {
    std::optional<policy::Observed> observed = PolicyInput(now);
    if (observed) {
      // The history is lent to the policy, not copied: thousands of decisions.
      observed->history.swap(history_);
      observed->history_index = &history_index_;
      ready.plan = Decide(*observed);
      ready.decided = true;
      history_.swap(observed->history);
      observed->history_index = nullptr;
      ready.effects = Effects(ready.plan, *observed, now.members);
    }
  }
  const std::vector<policy::WorkerState>& members = now.members;
  for (const ServerServing& s : now.servers_serving) {
    int32_t& announced = announced_.try_emplace(s.id, -1).first->second;
    if (announced == s.incarnation) continue;
    Announce(s, members, &ready.deliveries);
    announced = s.incarnation;
  }
  if (options_.redeliver_batches) Redeliver(members, &ready);
  return ready;
}

absl::Status ControlLoop::Apply(const Ready& ready) {
  for (const Departure& d : ready.departures) {
    if (d.leave_servers) backend_->LeaveParameterServers(d.worker);
    // Not fatal: the leases expire by themselves (the backend logs it).
    if (d.release_shards) (void)backend_->ReleaseShards(d.worker, d.incarnation);
  }
  const policy::Plan& plan = ready.plan;
  for (size_t i = 0; i < plan.skipped.size() && i < plan.skip_reasons.size(); ++i) {
    backend_->RecordSkipped(plan.skipped[i], plan.skip_reasons[i]);
  }
  absl::Status status;
  for (const Effect& e : ready.effects) {
    if (ready.recommend_only) {
      backend_->RecordRecommendation({e.decision, e.predicted_saving_seconds, e.cost_seconds});
      Remember(e.decision);
      continue;
    }
    status = ApplyOne(e);
    if (!status.ok()) break;
    Remember(e.decision);
  }
  if (ready.decided && (!plan.decisions.empty() || !budget_reported_)) {
    backend_->RecordBudgetUsed(history_index_.BudgetUsed());
    budget_reported_ = true;
  }
  RETURN_IF_ERROR(status);
  // Not delivered: a moved server's old incarnation sends its workers on; a
  // re-delivery is tried again at the next step.
  for (const Delivery& d : ready.deliveries) (void)Deliver(d);
  return absl::OkStatus();
}

bool ControlLoop::Due(int64_t now_ms, int64_t windows_closed) const {
  const bool fresh = windows_closed > windows_seen_ && windows_seen_ >= 0;
  return now_ms >= next_run_ms_ || fresh;
}

bool ControlLoop::TakeTurn(int64_t now_ms, int64_t windows_closed) {
  const bool due = Due(now_ms, windows_closed);
  windows_seen_ = std::max(windows_seen_, windows_closed);
  if (!due) return false;
  next_run_ms_ = now_ms + options_.interval_ms;
  return true;
}

}  // namespace antdt::loop
