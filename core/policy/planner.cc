#include "core/policy/planner.h"

#include <cmath>
#include <tuple>

namespace antdt::policy::internal {

Planner::Planner(const Observed& observed, const PolicySpec& spec) : o_(observed), spec_(spec) {
  // Hashed by views of the observation's own strings: ten thousand members a turn.
  std::unordered_map<std::string_view, const v1::WorkerHealth*> health;
  health.reserve(static_cast<size_t>(o_.health.workers_size()));
  for (const v1::WorkerHealth& h : o_.health.workers()) health[h.worker_id()] = &h;
  std::unordered_set<std::string_view> known;
  known.reserve(o_.workers.size());
  for (const WorkerState& w : o_.workers) {
    known.insert(w.id);
    if (!w.alive) continue;
    auto it = health.find(w.id);
    Member m{&w, it == health.end() ? nullptr : it->second};
    (w.role == Role::kParameterServer ? servers_ : workers_).push_back(m);
  }
  auto by_id = [](const Member& a, const Member& b) { return a.id() < b.id(); };
  // Callers that keep their members in id order (the simulator) skip the sort.
  for (std::vector<Member>* members : {&workers_, &servers_}) {
    if (!std::is_sorted(members->begin(), members->end(), by_id)) {
      std::sort(members->begin(), members->end(), by_id);
    }
  }
  std::vector<std::string_view> strangers;  // stragglers not among the members, by id
  for (const auto& [id, h] : health) {
    if (!known.count(id) && IsStraggler(h->class_())) strangers.push_back(id);
  }
  std::sort(strangers.begin(), strangers.end());
  for (std::string_view id : strangers) {
    Skip(std::string(id), SkipReason::kNotApplicable,
         "in the Monitor's view but not among the job's members; ignored");
  }

  // What the history says, from the caller's index when it has one (the
  // control loop keeps it as it appends: no pass over thousands of decisions).
  if (o_.history_index == nullptr || o_.history_index->size() != o_.history.size()) {
    own_index_.emplace(o_.history);
  }
  history_ = own_index_ ? &*own_index_ : o_.history_index;
  used_ = history_->BudgetUsed();
  used_by_rule_ = history_->UsedByRule();
  last_round_ms_ = history_->LastRoundMs();
  for (size_t i = 0; i < spec_.rules.size(); ++i) {
    rules_[RuleName(spec_.rules[i], i)] = &spec_.rules[i];
  }

  global_batch_ = o_.global_batch_size;
  if (global_batch_ <= 0) {
    global_batch_ = 0;
    for (const WorkerState& w : o_.workers) {
      if (w.role != Role::kParameterServer) {
        global_batch_ += std::max<int64_t>(0, w.local_batch_size);
      }
    }
  }
  plan_.requeue_after_ms = spec_.interval_ms > 0 ? spec_.interval_ms : 10'000;
}

// ---- shared pieces ------------------------------------------------------------------

const Decision* Planner::LastOwn(const std::string& id) const {
  const std::optional<size_t> at = history_->LastOwn(id);
  return at ? &o_.history[*at] : nullptr;
}

int64_t Planner::RuleCooldown(const std::string& rule) const {
  auto it = rules_.find(rule);
  if (it != rules_.end() && it->second->cooldown_ms) return *it->second->cooldown_ms;
  return spec_.cooldown_ms;
}

bool Planner::OutOfCooldown(const Member& m, const std::string& what) {
  const Decision* last = LastOwn(m.id());
  if (last == nullptr) return true;
  const int64_t until = CooldownEnd(*last);
  if (until <= o_.now_ms) return true;
  WaitUntil(until);
  if (!what.empty()) {
    Skip(m.id(), SkipReason::kCooldown,
         absl::StrCat(what, ": in cool-down until ", Secs(until - o_.now_ms), " from now after ",
                      ActionName(last->action), " (", last->rule, ") ",
                      Secs(o_.now_ms - last->at_ms), " ago"));
  }
  return false;
}

std::string Planner::BudgetSpent() const {
  return absl::StrCat("action budget spent (", used_, " of ", spec_.max_actions, " interventions)");
}

std::map<std::string, double> Planner::BaseEvidence(const Member& m) const {
  std::map<std::string, double> e;
  e["score"] = m.health != nullptr ? m.health->score() : 0;
  e["windows_slow"] = m.windows_slow();
  if (m.health != nullptr) {
    e["self_score"] = m.health->self_score();
    e["class"] = static_cast<double>(m.health->class_());
    if (m.health->sample_score() > 0) e["sample_score"] = m.health->sample_score();
    if (m.health->compensated()) e["compensated"] = 1;
  }
  return e;
}

std::map<std::string, double> Planner::RoundEvidence(const Member& m, int64_t target,
                                                     int64_t total) const {
  auto e = BaseEvidence(m);
  e["batch_before"] = static_cast<double>(m.batch());
  e["batch_after"] = static_cast<double>(target);
  e["capacity"] = m.capacity();
  e["global_batch"] = static_cast<double>(global_batch_);
  e["round_batch"] = static_cast<double>(total);
  return e;
}

const Planner::WorkerTotals& Planner::Totals() const {
  if (totals_) return *totals_;
  WorkerTotals& t = totals_.emplace();
  for (const Member& w : workers_) {
    if (w.batch() <= 0) continue;
    t.sum_batch += static_cast<double>(w.batch());
    t.max_score = std::max(t.max_score, w.score());
    t.keep += w.capacity();
    t.capacities.push_back(w.capacity());
  }
  std::sort(t.capacities.begin(), t.capacities.end());
  return t;
}

double Planner::MedianCapacityWithout(const Member& m, size_t* count) const {
  const std::vector<double>& v = Totals().capacities;
  // m's place among them (any of equal values: the rest is the same), or past
  // the end when m has no batch and is not one of them.
  size_t skip = v.size();
  if (m.batch() > 0) {
    skip = static_cast<size_t>(std::lower_bound(v.begin(), v.end(), m.capacity()) - v.begin());
  }
  const size_t n = skip < v.size() ? v.size() - 1 : v.size();
  *count = n;
  if (n == 0) return 0;
  auto at = [&](size_t k) { return k < skip ? v[k] : v[k + 1]; };
  const size_t mid = n / 2;
  return n % 2 == 1 ? at(mid) : (at(mid - 1) + at(mid)) / 2;
}

double Planner::SavedSeconds(const Member& m, std::map<std::string, double>& e) const {
  const double r = o_.remaining_seconds;
  if (m.is_ps()) return r * (1 - 1 / m.score());
  const WorkerTotals& t = Totals();
  const double sum_batch = t.sum_batch, max_score = t.max_score, keep = t.keep;
  size_t others = 0;
  const double median = MedianCapacityWithout(m, &others);
  const double ref = others == 0 ? m.capacity() : median;
  const double restart = keep - std::max(0.0, m.capacity()) + ref;
  const double now = max_score > 0 ? sum_batch / max_score : 0;
  e["throughput_now"] = now;
  e["throughput_keep"] = keep;
  e["throughput_restart"] = restart;
  if (!(keep > 0 && restart > 0)) return 0;
  const double work = r * now;
  return std::max(0.0, work / keep - work / restart);
}

const NodeState* Planner::PickNode(const std::string& from) const {
  std::vector<const NodeState*> nodes;
  for (const NodeState& n : o_.nodes) nodes.push_back(&n);
  std::sort(nodes.begin(), nodes.end(), [](const NodeState* a, const NodeState* b) {
    return std::tie(a->avoid, a->name) < std::tie(b->avoid, b->name);
  });
  for (const NodeState* n : nodes) {
    if (!n->spare || n->chronic || n->excluded_until_ms > o_.now_ms || n->name == from ||
        chosen_nodes_.count(n->name)) {
      continue;
    }
    bool blocked = false;
    for (size_t at : history_->Restarts()) {
      const Decision& d = o_.history[at];
      const auto* k = std::get_if<KillRestart>(&d.action);
      blocked |= k->from_node == n->name && k->exclude_node_until_ms > o_.now_ms;
      blocked |= k->to_node == n->name && d.at_ms + spec_.cooldown_ms > o_.now_ms;
    }
    if (!blocked) return n;
  }
  return nullptr;
}

bool Planner::TryRestart(const Member& m, const std::string& rule, const std::string& what,
                         std::string* why, SkipReason* reason, const DurationChoice* weighed) {
  const WorkerState& w = *m.state;
  if (w.last_restart_ms >= 0 && w.last_restart_ms + spec_.cooldown_ms > o_.now_ms) {
    WaitUntil(w.last_restart_ms + spec_.cooldown_ms);
    *reason = SkipReason::kCooldown;
    *why = absl::StrCat("restarted ", Secs(o_.now_ms - w.last_restart_ms),
                        " ago, within the cool-down (", Secs(spec_.cooldown_ms), ")");
    return false;
  }
  if (o_.remaining_seconds < 0) {
    *reason = SkipReason::kRemainingUnknown;
    *why = "the job's remaining time is unknown, so a restart cannot be weighed";
    return false;
  }
  auto evidence = BaseEvidence(m);
  double saved = SavedSeconds(m, evidence);
  std::string over = absl::StrCat(Num(o_.remaining_seconds), "s left");
  if (weighed != nullptr) {
    saved = std::min(weighed->loss_ride_out, weighed->loss_adjust);
    evidence["expected_remaining_seconds"] = weighed->expected_remaining_seconds;
    evidence["loss_ride_out_seconds"] = weighed->loss_ride_out;
    evidence["loss_adjust_seconds"] = weighed->loss_adjust;
    over = absl::StrCat("the ", Num(weighed->expected_remaining_seconds),
                        "s its slowdown is expected to last (", over, ")");
  }
  const double cost =
      std::max(0.0, m.is_ps() ? o_.ps_restart_cost_seconds : o_.restart_cost_seconds);
  evidence["remaining_seconds"] = o_.remaining_seconds;
  evidence["saved_seconds"] = saved;
  evidence["cost_seconds"] = cost;
  evidence["min_saving_ratio"] = spec_.min_saving_ratio;
  if (!m.is_ps()) evidence["capacity_slowdown"] = CapacitySlowdown(m);
  if (!(saved > spec_.min_saving_ratio * cost)) {
    *reason = SkipReason::kCostAboveSaving;
    *why = absl::StrCat("saves ", Num(saved), "s, not more than its cost ", Num(cost),
                        "s x min_saving_ratio ", Num(spec_.min_saving_ratio));
    return false;
  }
  auto budget = rules_.find(rule);
  if (budget != rules_.end() && budget->second->budget &&
      used_by_rule_[rule] + 1 > *budget->second->budget) {
    *reason = SkipReason::kBudget;
    *why = absl::StrCat("the rule's budget of ", *budget->second->budget, " is spent");
    return false;
  }
  if (!JobBudgetLeft()) {
    *reason = SkipReason::kBudget;
    *why = BudgetSpent();
    return false;
  }
  const NodeState* node = PickNode(w.node);
  if (node == nullptr) {
    *reason = SkipReason::kNoSpareNode;
    *why = "no spare node (spare, not excluded, not just given a restarted member)";
    return false;
  }
  chosen_nodes_.insert(node->name);
  ++used_;
  ++used_by_rule_[rule];
  const int64_t exclude_until = o_.now_ms + spec_.cooldown_ms;
  Emit(KillRestart{w.id, w.node, node->name, exclude_until}, rule, w.id,
       absl::StrCat(what, ": restart on ", node->name, " saves ", Num(saved), "s of ", over,
                    ", cost ", Num(cost), "s; ", w.node.empty() ? "source node" : w.node,
                    " excluded until its cool-down ends (", Secs(spec_.cooldown_ms), ")"),
       std::move(evidence));
  return true;
}

// The weight in a round of a worker sized as it is: a sample above or below
// the median, where a sample is within the tidy margin, is an earlier round's
// rounding, not capacity, and weighs as the median. Weighed by its batch, the
// worker given the remainder once is the cheapest to give it again, and its
// batch climbs a sample a round (32 -> 34 at 1,000 workers, every step 6 %
// slower). On small batches a sample is more than noise: the batch is kept.
double Planner::RoundingWeight(double batch, double median_batch) {
  const bool rounding = median_batch * kTidyMargin >= 1 && std::abs(batch - median_batch) <= 1;
  return rounding ? median_batch : batch;
}

void Planner::Round(const std::map<std::string, Subject>& subjects,
                    const std::set<std::string>& frozen, const std::string& rebalance_rule,
                    const std::set<std::string>& by_capacity, const std::string& why) {
  if (subjects.empty() && by_capacity.empty()) return;
  if (!JobBudgetLeft()) {
    for (const auto& [id, s] : subjects) {
      Skip(id, SkipReason::kBudget,
           absl::StrCat("ADJUST_BS skipped (", s.rule, "): ", BudgetSpent()));
    }
    return;
  }
  // Who is who, once a round: the lookups below are per worker.
  const std::vector<char> held = Marked(frozen), subject = Marked(subjects), fresh = Marked(fresh_),
                          capacity_sized = Marked(by_capacity);
  std::vector<const Member*> parts;
  for (const Member& m : workers_) {
    if (m.batch() > 0 && !held[At(m)]) parts.push_back(&m);
  }
  std::vector<int64_t> targets;
  int64_t total = 0;
  // A freshly restarted worker weighs as much as the median of the others.
  std::vector<double> others;
  for (const Member* m : parts) {
    if (!subject[At(*m)]) others.push_back(static_cast<double>(m->batch()));
  }
  const double median_batch = others.empty() ? 0 : Median(others);
  // A subject that is not a LEADER (nor restarted) is sized down or left: its
  // measured capacity may read above its batch in a window that mixes two
  // batches or a throttled burst, but a straggler takes no samples.
  auto slow_subject = [&](const Member& m) {
    return subject[At(m)] && !fresh[At(m)] && m.straggler_class() != v1::LEADER;
  };
  const bool ok = Targets(
      parts,
      [&](const Member& m) {
        if (fresh[At(m)] && median_batch > 0) return median_batch;
        if (slow_subject(m)) return std::min(m.capacity(), static_cast<double>(m.batch()));
        if (subject[At(m)] || capacity_sized[At(m)]) return m.capacity();
        // Anyone else as if at the median (noise moves nobody), but not one
        // that a step already waits for (a tidy round's margin): its capacity.
        if (m.health != nullptr && m.score() >= 1 + kTidyMargin) {
          return std::min(m.capacity(), static_cast<double>(m.batch()));
        }
        return RoundingWeight(static_cast<double>(m.batch()), median_batch);
      },
      &targets, &total);
  if (!ok) return;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!slow_subject(*parts[i]) || targets[i] <= parts[i]->batch()) continue;
    // Rounding gave it more than it has: it keeps its batch, the round goes on without it.
    std::map<std::string, Subject> rest = subjects;
    std::set<std::string> also_held = frozen;
    const Subject s = rest[parts[i]->id()];
    rest.erase(parts[i]->id());
    also_held.insert(parts[i]->id());
    Skip(parts[i]->id(), SkipReason::kNotNeeded,
         absl::StrCat("ADJUST_BS not needed (", s.rule, "): its measured capacity ",
                      Num(parts[i]->capacity()), " does not call for a batch below ",
                      parts[i]->batch()));
    Round(rest, also_held, rebalance_rule, by_capacity, why);
    return;
  }
  if (parts.size() == 1) {
    for (const auto& [id, s] : subjects) {
      Skip(id, SkipReason::kNotApplicable,
           absl::StrCat("ADJUST_BS skipped (", s.rule,
                        "): no other worker outside a cool-down to trade samples with"));
    }
    return;
  }
  bool subject_changes = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const size_t at = At(*parts[i]);
    subject_changes |= (subject[at] || capacity_sized[at]) && targets[i] != parts[i]->batch();
  }
  if (!subject_changes) {
    for (const auto& [id, s] : subjects) {
      Skip(
          id, SkipReason::kNotNeeded,
          absl::StrCat("ADJUST_BS not needed (", s.rule, "): its batch already matches its speed"));
    }
    return;
  }
  if (!subjects.empty()) ++used_;  // a tidy round (no subject) is not an intervention
  std::set<std::string> rules;
  for (const auto& [id, s] : subjects) rules.insert(s.rule);
  for (const std::string& r : rules) ++used_by_rule_[r];

  // Who the others' changes are around, named once a round (thousands of
  // them at scale), the first few by name: a line a person reads.
  const std::string around = Around(subjects);
  for (size_t i = 0; i < parts.size(); ++i) {
    const Member& m = *parts[i];
    const int32_t acc = Accumulation(*m.state, targets[i]);
    if (targets[i] == m.batch() && acc == m.state->accumulation_steps) continue;
    auto it = subject[At(m)] ? subjects.find(m.id()) : subjects.end();
    const std::string change = absl::StrCat("local batch ", m.batch(), " -> ", targets[i],
                                            " (accumulation steps ", acc, ")");
    if (it != subjects.end()) {
      Emit(AdjustBatchSize{m.id(), targets[i], acc}, it->second.rule, m.id(),
           absl::StrCat(it->second.what, ": ", change,
                        targets[i] < m.batch()
                            ? " in proportion to its speed, samples to faster workers"
                            : ", takes samples from slower workers",
                        "; global batch ", global_batch_, " kept"),
           RoundEvidence(m, targets[i], total));
    } else {
      Emit(AdjustBatchSize{m.id(), targets[i], acc}, rebalance_rule, "",
           subjects.empty()
               ? absl::StrCat(why, ": ", change, "; global batch ", global_batch_, " kept")
               : absl::StrCat("keeps the global batch ", global_batch_, " around ", around, ": ",
                              change),
           RoundEvidence(m, targets[i], total));
    }
  }
}

std::string Planner::Around(const std::map<std::string, Subject>& subjects) {
  constexpr size_t kNamed = 3;
  std::string out;
  size_t named = 0;
  for (const auto& [id, s] : subjects) {
    if (named == kNamed) break;
    absl::StrAppend(&out, named++ == 0 ? "" : ",", id);
  }
  if (subjects.size() > named) absl::StrAppend(&out, " and ", subjects.size() - named, " more");
  return out;
}

void Planner::Emit(Action action, const std::string& rule, const std::string& subject,
                   std::string reason, std::map<std::string, double> evidence) {
  Decision d;
  d.action = std::move(action);
  d.at_ms = o_.now_ms;
  d.policy = spec_.name;
  d.rule = rule;
  d.subject = subject;
  d.reason = std::move(reason);
  d.evidence = std::move(evidence);
  plan_.decisions.push_back(std::move(d));
}

void Planner::Skip(const std::string& who, SkipReason reason, const std::string& line) {
  plan_.skipped.push_back(absl::StrCat(who, ": ", line));
  plan_.skip_reasons.push_back(reason);
}

void Planner::WaitUntil(int64_t until_ms) {
  if (until_ms > o_.now_ms) {
    plan_.requeue_after_ms = std::min(plan_.requeue_after_ms, until_ms - o_.now_ms);
  }
}

std::vector<int64_t> Apportion(const std::vector<double>& weights, int64_t total,
                               int64_t floor_value) {
  const size_t n = weights.size();
  std::vector<int64_t> out(n, 0);
  std::vector<bool> pinned(n, false);
  int64_t left = total;
  for (bool changed = true; changed;) {
    changed = false;
    double sum = 0;
    for (size_t i = 0; i < n; ++i) {
      if (!pinned[i]) sum += weights[i];
    }
    if (!(sum > 0)) break;
    for (size_t i = 0; i < n; ++i) {
      // Pinning a member gives it more than its share, which lowers the
      // others' shares: every member below the floor at this sum stays below
      // it, so they are all pinned at once.
      if (!pinned[i] &&
          static_cast<double>(left) * weights[i] / sum < static_cast<double>(floor_value)) {
        pinned[i] = true;
        out[i] = floor_value;
        left -= floor_value;
        changed = true;
      }
    }
  }
  std::vector<size_t> free_members;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!pinned[i]) {
      free_members.push_back(i);
      sum += weights[i];
    }
  }
  if (free_members.empty()) {
    if (n > 0) out[0] += left;  // unreachable when total >= floor_value x n
    return out;
  }
  int64_t given = 0;
  for (size_t i : free_members) {
    const double share = static_cast<double>(left) * weights[i] / sum;
    out[i] = std::max<int64_t>(floor_value, static_cast<int64_t>(std::floor(share)));
    given += out[i];
  }
  // The rest one sample at a time to the member whose step grows least by
  // it ((out + 1) / weight, ties to the lower index): the step waits for the
  // slowest, so a sample goes where it costs least, never where it made a
  // member slower than the others. (Largest remainders instead gave the
  // remainder of every round to the same largest weights, which grew by one
  // each round: 32 -> 40 over ten rounds at 1,000 workers.)
  using Key = std::pair<double, size_t>;
  auto cost = [&](size_t i, int64_t extra) {
    return static_cast<double>(out[i] + extra) / weights[i];
  };
  std::priority_queue<Key, std::vector<Key>, std::greater<Key>> cheapest;
  for (size_t i : free_members) cheapest.emplace(cost(i, 1), i);
  while (given < left) {  // rounding of doubles can leave it off by one either way
    const size_t i = cheapest.top().second;
    cheapest.pop();
    ++out[i];
    ++given;
    cheapest.emplace(cost(i, 1), i);
  }
  std::priority_queue<Key> slowest;  // the one that sheds a sample saves most
  for (size_t i : free_members) {
    if (out[i] > floor_value) slowest.emplace(cost(i, 0), n - 1 - i);
  }
  while (given > left && !slowest.empty()) {
    const size_t i = n - 1 - slowest.top().second;
    slowest.pop();
    --out[i];
    --given;
    if (out[i] > floor_value) slowest.emplace(cost(i, 0), n - 1 - i);
  }
  return out;
}

std::string Summary(const Member& m) {
  if (m.health != nullptr && m.health->compensated()) {
    const int slow = m.health->speed_windows_slow();
    return absl::StrCat(v1::StragglerClass_Name(m.health->speed_class()),
                        " worker compensated by its smaller batch (", Num(m.health->sample_score()),
                        "x slower per sample, batch time score ", Num(m.score()), ", ", slow,
                        " slow window", slow == 1 ? "" : "s", ")");
  }
  std::string out =
      absl::StrCat(v1::StragglerClass_Name(m.straggler_class()), " ",
                   m.is_ps() ? "parameter server" : "worker", " (score ", Num(m.score()));
  if (m.windows_slow() > 0) {
    absl::StrAppend(&out, ", ", m.windows_slow(), " slow window", m.windows_slow() == 1 ? "" : "s");
  }
  return absl::StrCat(out, ")");
}

std::string Field(const std::string& key, const std::string& value) {
  if (!value.empty() && value.find_first_of(" \"=\t\n") == std::string::npos) {
    return absl::StrCat(key, "=", value);
  }
  std::string quoted;
  for (char c : value) {
    if (c == '"' || c == '\\') quoted.push_back('\\');
    quoted.push_back(c == '\n' ? ' ' : c);
  }
  return absl::StrCat(key, "=\"", quoted, "\"");
}

}  // namespace antdt::policy::internal
