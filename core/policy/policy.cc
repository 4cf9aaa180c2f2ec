#include "core/policy/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::controller {
namespace {

using vocab::ActionKind;
using vocab::IsStraggler;
using vocab::Median;
using vocab::Policy;
using vocab::Role;
using vocab::Signal;

constexpr char kNdPsRestart[] = "antdt-nd:ps-restart";
constexpr char kNdPersistentRestart[] = "antdt-nd:persistent-restart";
constexpr char kNdPersistentAdjust[] = "antdt-nd:persistent-adjust";
constexpr char kNdCompensatedRestart[] = "antdt-nd:compensated-restart";
constexpr char kNdTransientAdjust[] = "antdt-nd:transient-adjust";
constexpr char kNdDeterministicAdjust[] = "antdt-nd:deterministic-adjust";
constexpr char kNdLeaderAdjust[] = "antdt-nd:leader-adjust";
constexpr char kNdRebalance[] = "antdt-nd:rebalance";
constexpr char kNdRestartShare[] = "antdt-nd:restart-share";
constexpr char kDdProportional[] = "antdt-dd:proportional";
constexpr char kLbBspProportional[] = "lb-bsp:proportional";
constexpr char kCustomRebalance[] = "custom:rebalance";
constexpr char kBackupStart[] = "backup-workers:start";

// Short numbers for reasons: at most three decimals.
std::string Num(double v) { return absl::StrCat(std::round(v * 1000) / 1000); }

// A duration in milliseconds as seconds for a sentence: "4 s", "12.3 s". The
// policy's clock is the caller's (job-relative locally, Unix time on a
// cluster), so sentences say "x s ago" or "for x s", never a clock reading.
std::string Secs(int64_t ms) {
  return absl::StrCat(std::round(static_cast<double>(ms) / 100) / 10, " s");
}

std::string RuleName(const Rule& rule, size_t index) {
  return rule.name.empty() ? absl::StrCat("rules[", index, "]") : rule.name;
}

// Integers proportional to `weights` (each > 0), each >= `floor_value`, summing
// exactly to `total` (the caller ensures total >= floor_value x size). Members
// whose share falls below the floor get the floor, and the rest is shared again
// among the others. The remainder goes to the largest fractional parts, ties to
// the larger weight, then to the lower index.
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
  std::vector<double> fraction(n, 0);
  int64_t given = 0;
  for (size_t i : free_members) {
    const double share = static_cast<double>(left) * weights[i] / sum;
    out[i] = std::max<int64_t>(floor_value, static_cast<int64_t>(std::floor(share)));
    fraction[i] = share - std::floor(share);
    given += out[i];
  }
  std::vector<size_t> order = free_members;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (fraction[a] != fraction[b]) return fraction[a] > fraction[b];
    return weights[a] > weights[b];
  });
  // Rounding of doubles can leave the remainder off by one either way: loop.
  for (size_t k = 0; given < left; k = (k + 1) % order.size()) {
    ++out[order[k]];
    ++given;
  }
  for (size_t k = order.size(); given > left;) {
    k = (k == 0 ? order.size() : k) - 1;
    if (out[order[k]] > floor_value) {
      --out[order[k]];
      --given;
    }
  }
  return out;
}

// A worker or parameter server joined with its Monitor view.
struct Member {
  const WorkerState* state = nullptr;
  const v1::WorkerHealth* health = nullptr;  // null when the Monitor has none

  const std::string& id() const { return state->id; }
  bool is_ps() const { return state->role == Role::kParameterServer; }
  double score() const {
    const double s = health != nullptr ? health->score() : 1;
    return std::isfinite(s) && s > 0 ? s : 1;
  }
  v1::StragglerClass cls() const { return health != nullptr ? health->class_() : v1::HEALTHY; }
  int windows_slow() const { return health != nullptr ? health->windows_slow() : 0; }
  int64_t batch() const { return state->local_batch_size; }
  // Samples per median step time at its current batch.
  // Measured directly when the Monitor has the window's own throughput
  // (samples over the worker's own processing time), so that a batch changed
  // during or after the window does not skew it; else from batch and score.
  double capacity() const {
    if (health != nullptr && health->samples_per_second() > 0 && health->median_bpt_seconds() > 0) {
      return health->samples_per_second() * health->median_bpt_seconds();
    }
    return static_cast<double>(batch()) / score();
  }
};

int32_t Accumulation(const WorkerState& w, int64_t batch) {
  if (w.max_micro_batch > 0) {
    return static_cast<int32_t>(
        std::max<int64_t>(1, (batch + w.max_micro_batch - 1) / w.max_micro_batch));
  }
  return static_cast<int32_t>(
      std::clamp<int64_t>(w.accumulation_steps, 1, std::max<int64_t>(1, batch)));
}

// An ADJUST_BS subject of a round: the rule behind it and what it is.
struct Subject {
  std::string rule;
  std::string what;  // e.g. "TRANSIENT straggler (score 1.6, 1 slow window)"
};

std::string Summary(const Member& m) {
  if (m.health != nullptr && m.health->compensated()) {
    const int slow = m.health->speed_windows_slow();
    return absl::StrCat(v1::StragglerClass_Name(m.health->speed_class()),
                        " worker compensated by its smaller batch (", Num(m.health->sample_score()),
                        "x slower per sample, batch time score ", Num(m.score()), ", ", slow,
                        " slow window", slow == 1 ? "" : "s", ")");
  }
  std::string out =
      absl::StrCat(v1::StragglerClass_Name(m.cls()), " ", m.is_ps() ? "parameter server" : "worker",
                   " (score ", Num(m.score()));
  if (m.windows_slow() > 0) {
    absl::StrAppend(&out, ", ", m.windows_slow(), " slow window", m.windows_slow() == 1 ? "" : "s");
  }
  return absl::StrCat(out, ")");
}

class Planner {
 public:
  Planner(const Observed& observed, const PolicySpec& spec) : o_(observed), spec_(spec) {
    std::map<std::string, const v1::WorkerHealth*> health;
    for (const v1::WorkerHealth& h : o_.health.workers()) health[h.worker_id()] = &h;
    std::set<std::string> known;
    for (const WorkerState& w : o_.workers) {
      known.insert(w.id);
      if (!w.alive) continue;
      auto it = health.find(w.id);
      Member m{&w, it == health.end() ? nullptr : it->second};
      (w.role == Role::kParameterServer ? servers_ : workers_).push_back(m);
    }
    auto by_id = [](const Member& a, const Member& b) { return a.id() < b.id(); };
    std::sort(workers_.begin(), workers_.end(), by_id);
    std::sort(servers_.begin(), servers_.end(), by_id);
    for (const auto& [id, h] : health) {
      if (!known.count(id) && IsStraggler(h->class_())) {
        Skip(id, SkipReason::kNotApplicable,
             "in the Monitor's view but not among the job's members; ignored");
      }
    }

    for (const Decision& d : o_.history) {
      if (!d.subject.empty()) {
        const Decision*& last = last_own_[d.subject];
        if (last == nullptr || d.at_ms >= last->at_ms) last = &d;
      }
    }
    // The history is in time order: each subject's trailing run of own
    // straggler ADJUST_BS decisions, from its first.
    for (const Decision& d : o_.history) {
      if (d.subject.empty()) continue;
      if (std::holds_alternative<AdjustBatchSize>(d.action) &&
          (d.rule == kNdTransientAdjust || d.rule == kNdPersistentAdjust)) {
        compensated_since_.try_emplace(d.subject, d.at_ms);
      } else {
        compensated_since_.erase(d.subject);
      }
    }
    // Interventions so far: per job (BudgetUsed), and per rule the same way.
    used_ = BudgetUsed(o_.history);
    std::map<std::string, std::set<int64_t>> rule_rounds;
    for (const Decision& d : o_.history) {
      if (std::holds_alternative<AdjustBatchSize>(d.action)) {
        last_round_ms_ = std::max(last_round_ms_, d.at_ms);
        if (d.rule == kNdRebalance && d.subject.empty()) continue;  // a tidy round's, or shares one
        rule_rounds[d.rule].insert(d.at_ms);
      } else {
        ++used_by_rule_[d.rule];
      }
    }
    for (const auto& [rule, at] : rule_rounds) used_by_rule_[rule] += static_cast<int>(at.size());
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

  Plan Run() {
    switch (spec_.name) {
      case Policy::kAntdtNd:
        Nd();
        break;
      case Policy::kAntdtDd:
        Proportional(kDdProportional, spec_.hysteresis);
        break;
      case Policy::kLbBsp:
        Proportional(kLbBspProportional, 0);
        break;
      case Policy::kCustom:
        Custom();
        break;
      case Policy::kBackupWorkers:
        BackupWorkers();
        break;
      case Policy::kNone:
        break;
    }
    return std::move(plan_);
  }

 private:
  // ---- antdt-nd ------------------------------------------------------------------
  void Nd() {
    if (o_.health.job_slowdown()) {
      Skip("job", SkipReason::kJobSlowdown,
           "job_slowdown: everyone slowed together, not a straggler; no action");
      return;
    }
    for (const Member& m : servers_) {
      const v1::StragglerClass cls = m.cls();
      if (!IsStraggler(cls) || !OutOfCooldown(m, Summary(m))) continue;
      if (cls == v1::PERSISTENT) {
        std::string why;
        SkipReason reason = SkipReason::kNotApplicable;
        if (!TryRestart(m, kNdPsRestart, Summary(m), &why, &reason)) {
          Skip(m.id(), reason,
               absl::StrCat("KILL_RESTART skipped (", kNdPsRestart, "): ", why,
                            "; batch sizing cannot help a parameter server"));
        }
      } else if (cls == v1::TRANSIENT) {
        Skip(m.id(), SkipReason::kNotApplicable,
             absl::StrCat(Summary(m),
                          ": batch sizing cannot help a parameter server; a restart "
                          "waits until it is PERSISTENT"));
      } else {
        Skip(m.id(), SkipReason::kNotApplicable,
             absl::StrCat(Summary(m), ": a restart will not change its hardware"));
      }
    }

    std::map<std::string, Subject> subjects;
    std::set<std::string> frozen;
    for (const Member& m : workers_) {
      const v1::StragglerClass cls = m.cls();
      const bool straggler = IsStraggler(cls);
      const Decision* last = LastOwn(m.id());
      const bool compensated =
          last != nullptr && std::holds_alternative<AdjustBatchSize>(last->action) &&
          (last->rule == kNdTransientAdjust || last->rule == kNdPersistentAdjust);
      const bool interesting = straggler || cls == v1::LEADER || compensated;
      // A restart is weighed once it has been compensated for a cool-down,
      // however often its batch was re-sized since.
      const bool proven = compensated && CompensatedSince(m.id()) + spec_.cooldown_ms <= o_.now_ms;
      if (!proven && compensated && straggler && InCooldown(*last) && Resettled(m, *last)) {
        subjects[m.id()] = {last->rule, absl::StrCat(Summary(m),
                                                     ", still slow one window after its batch "
                                                     "was sized: sized again")};
        continue;
      }
      if (!proven && !OutOfCooldown(m, interesting ? Summary(m) : "")) {
        frozen.insert(m.id());
        continue;
      }
      if (cls == v1::LEADER) {
        subjects[m.id()] = {kNdLeaderAdjust, Summary(m)};
        continue;
      }
      if (cls == v1::DETERMINISTIC) {
        subjects[m.id()] = {kNdDeterministicAdjust, Summary(m)};
        continue;
      }
      std::string restart_rule;
      std::string what = Summary(m);
      if (cls == v1::PERSISTENT) {
        restart_rule = kNdPersistentRestart;
      } else if (compensated) {
        const double slowdown = CapacitySlowdown(m);
        if (slowdown >= spec_.compensated_slowdown) {
          restart_rule = kNdCompensatedRestart;
          what = absl::StrCat(what, ", compensated by ADJUST_BS ", Secs(o_.now_ms - last->at_ms),
                              " ago and still ", Num(slowdown), "x slower than its peers");
        }
      }
      if (!restart_rule.empty()) {
        std::string why;
        SkipReason reason = SkipReason::kNotApplicable;
        if (TryRestart(m, restart_rule, what, &why, &reason)) {
          // On a healthy node it is a median worker again: its share back at
          // once, not after a LEADER window and a cool-down.
          fresh_.insert(m.id());
          subjects[m.id()] = {kNdRestartShare,
                              absl::StrCat(what,
                                           ", restarted on a healthy node: a median "
                                           "worker's share again")};
          continue;
        }
        if (straggler) {
          Skip(m.id(), reason,
               absl::StrCat("KILL_RESTART skipped (", restart_rule, "): ", why,
                            "; ADJUST_BS instead"));
          subjects[m.id()] = {cls == v1::PERSISTENT ? kNdPersistentAdjust : kNdTransientAdjust,
                              absl::StrCat(what, ", restart skipped: ", why)};
        } else {
          Skip(m.id(), reason,
               absl::StrCat("KILL_RESTART skipped (", restart_rule, "): ", why,
                            "; stays compensated by its smaller batch"));
        }
        continue;
      }
      if (cls == v1::TRANSIENT) subjects[m.id()] = {kNdTransientAdjust, what};
    }
    if (subjects.empty()) {
      Tidy(frozen);
    } else {
      Round(subjects, frozen, kNdRebalance);
    }
  }

  // A drift below the Monitor's straggler threshold still slows every step (a
  // step waits for the slowest worker): a worker left 10% slow after a round
  // (a restarted one sized before the others settled, a speed that moved a
  // little) costs 10% of the rest of the job. When no member is a subject and
  // the slowest worker outside a cool-down scores at least 1 + kTidyMargin, one
  // round sizes every worker outside a cool-down by its measured capacity
  // (antdt-nd:rebalance: no subject, so no cool-down of anyone's own), at most
  // once per cooldown_ms. It moves no straggler, so it does not count against
  // max_actions (but is not taken once they are spent).
  void Tidy(const std::set<std::string>& frozen) {
    std::set<std::string> measured;
    const Member* slowest = nullptr;
    for (const Member& m : workers_) {
      if (m.batch() <= 0 || m.health == nullptr || frozen.count(m.id())) continue;
      measured.insert(m.id());
      if (slowest == nullptr || m.score() > slowest->score()) slowest = &m;
    }
    if (slowest == nullptr || slowest->score() < 1 + kTidyMargin) return;
    if (last_round_ms_ != kNever && last_round_ms_ + spec_.cooldown_ms > o_.now_ms) {
      WaitUntil(last_round_ms_ + spec_.cooldown_ms);
      Skip("job", SkipReason::kCooldown,
           absl::StrCat("rebalance (", slowest->id(), " scores ", Num(slowest->score()),
                        ") in cool-down until ",
                        Secs(last_round_ms_ + spec_.cooldown_ms - o_.now_ms), " from now"));
      return;
    }
    Round({}, frozen, kNdRebalance, measured,
          absl::StrCat("the slowest worker, ", slowest->id(), ", scores ", Num(slowest->score()),
                       " (>= ", Num(1 + kTidyMargin), "): batches in proportion to speed"));
  }

  // When the cool-down of a member's own decision ends.
  int64_t CooldownEnd(const Decision& own) const { return own.at_ms + RuleCooldown(own.rule); }
  bool InCooldown(const Decision& own) const { return CooldownEnd(own) > o_.now_ms; }

  // When the member's trailing run of own straggler ADJUST_BS decisions began.
  int64_t CompensatedSince(const std::string& id) const {
    auto it = compensated_since_.find(id);
    return it == compensated_since_.end() ? kNever : it->second;
  }

  // A straggler sized on a window that began before its slowdown was sized
  // for part of it only: once a whole window at its new batch has been seen
  // (settle_ms), a member still slower than its peers by the tidy margin is
  // sized again, before its cool-down ends.
  bool Resettled(const Member& m, const Decision& last) const {
    return spec_.settle_ms > 0 && last.at_ms + spec_.settle_ms <= o_.now_ms &&
           m.score() >= 1 + kTidyMargin;
  }

  // How many times slower than its peers' median capacity a worker is.
  double CapacitySlowdown(const Member& m) const {
    std::vector<double> others;
    for (const Member& w : workers_) {
      if (w.id() != m.id() && w.batch() > 0) others.push_back(w.capacity());
    }
    const double cap = m.capacity();
    if (others.empty() || !(cap > 0)) return 1;
    return Median(others) / cap;
  }

  // ---- antdt-dd and lb-bsp ------------------------------------------------------
  void Proportional(const std::string& rule, double hysteresis) {
    if (last_round_ms_ != kNever && last_round_ms_ + spec_.cooldown_ms > o_.now_ms) {
      WaitUntil(last_round_ms_ + spec_.cooldown_ms);
      Skip("job", SkipReason::kCooldown,
           absl::StrCat("batch re-plan in cool-down until ",
                        Secs(last_round_ms_ + spec_.cooldown_ms - o_.now_ms),
                        " from now (last round ", Secs(o_.now_ms - last_round_ms_), " ago)"));
      return;
    }
    std::vector<const Member*> parts;
    for (const Member& m : workers_) {
      if (m.batch() > 0 && m.health != nullptr) parts.push_back(&m);
    }
    std::vector<int64_t> targets;
    int64_t total = 0;
    const auto capacity = [](const Member& m) { return m.capacity(); };
    if (!Targets(parts, capacity, &targets, &total)) return;
    double drift = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      const double b = static_cast<double>(parts[i]->batch());
      drift = std::max(drift, std::abs(static_cast<double>(targets[i]) - b) / b);
    }
    bool changes = false;
    for (size_t i = 0; i < parts.size(); ++i) {
      changes |= targets[i] != parts[i]->batch() ||
                 Accumulation(*parts[i]->state, targets[i]) != parts[i]->state->accumulation_steps;
    }
    if (!changes) return;
    if (drift <= hysteresis && drift > 0) {
      Skip("job", SkipReason::kNotNeeded,
           absl::StrCat("batches within the hysteresis margin: drift ", Num(drift),
                        " <= ", Num(hysteresis)));
      return;
    }
    if (!JobBudgetLeft()) {
      Skip("job", SkipReason::kBudget, absl::StrCat("batch re-plan skipped: ", BudgetSpent()));
      return;
    }
    ++used_;
    ++used_by_rule_[rule];
    for (size_t i = 0; i < parts.size(); ++i) {
      const Member& m = *parts[i];
      const int32_t acc = Accumulation(*m.state, targets[i]);
      if (targets[i] == m.batch() && acc == m.state->accumulation_steps) continue;
      auto evidence = RoundEvidence(m, targets[i], total);
      evidence["drift"] = drift;
      evidence["hysteresis"] = hysteresis;
      Emit(AdjustBatchSize{m.id(), targets[i], acc}, rule, "",
           absl::StrCat("batch proportional to measured speed (score ", Num(m.score()),
                        "): local batch ", m.batch(), " -> ", targets[i], ", accumulation steps ",
                        acc, "; drift ", Num(drift), " > hysteresis ", Num(hysteresis),
                        "; global batch ", global_batch_, " kept"),
           std::move(evidence));
    }
  }

  // ---- custom ---------------------------------------------------------------------
  bool Matches(const Rule& rule, const Member& m) const {
    if (rule.role && *rule.role != m.state->role) return false;
    if (m.health == nullptr) return false;
    const bool persisted = m.windows_slow() >= rule.windows;
    switch (rule.signal) {
      case Signal::kScore:
        return m.health->score() >= rule.threshold && persisted;
      case Signal::kSelfScore:
        return m.health->self_score() >= rule.threshold && persisted;
      case Signal::kClass:
        return m.cls() == rule.straggler_class && (!IsStraggler(m.cls()) || persisted);
    }
    return false;
  }

  void Custom() {
    if (o_.health.job_slowdown()) {
      Skip("job", SkipReason::kJobSlowdown,
           "job_slowdown: everyone slowed together, not a straggler; no action");
      return;
    }
    std::vector<const Member*> members;
    for (const Member& m : workers_) members.push_back(&m);
    for (const Member& m : servers_) members.push_back(&m);
    std::sort(members.begin(), members.end(),
              [](const Member* a, const Member* b) { return a->id() < b->id(); });

    std::map<std::string, Subject> subjects;
    std::set<std::string> frozen;
    std::set<std::string> round_rules;  // rules with an ADJUST_BS subject in this plan
    for (const Member* mp : members) {
      const Member& m = *mp;
      bool matched = false;
      for (const Rule& rule : spec_.rules) matched |= Matches(rule, m);
      if (!OutOfCooldown(m, matched ? Summary(m) : "")) {
        frozen.insert(m.id());
        continue;
      }
      for (size_t i = 0; i < spec_.rules.size(); ++i) {
        const Rule& rule = spec_.rules[i];
        if (!Matches(rule, m)) continue;
        const std::string name = RuleName(rule, i);
        const std::string what = absl::StrCat(Summary(m), " matched ", name);
        const bool adjust = rule.action == ActionKind::kAdjustBatchSize;
        const int cost = adjust && round_rules.count(name) ? 0 : 1;
        if (rule.budget && used_by_rule_[name] + cost > *rule.budget) {
          Skip(m.id(), SkipReason::kBudget,
               absl::StrCat(vocab::Name(rule.action), " skipped (", name,
                            "): the rule's budget of ", *rule.budget, " is spent"));
          continue;
        }
        if (adjust) {
          if (m.is_ps()) {
            Skip(m.id(), SkipReason::kNotApplicable,
                 absl::StrCat("ADJUST_BS skipped (", name,
                              "): batch sizing cannot help a parameter server"));
            continue;
          }
          subjects[m.id()] = {name, what};
          round_rules.insert(name);
          break;
        }
        std::string why;
        SkipReason reason = SkipReason::kNotApplicable;
        if (TryRestart(m, name, what, &why, &reason)) {
          frozen.insert(m.id());
          break;
        }
        Skip(m.id(), reason, absl::StrCat("KILL_RESTART skipped (", name, "): ", why));
      }
    }
    Round(subjects, frozen, kCustomRebalance);
  }

  // ---- backup-workers ---------------------------------------------------------------
  void BackupWorkers() {
    for (const Decision& d : o_.history) {
      if (std::holds_alternative<UseBackupWorkers>(d.action)) return;
    }
    const int64_t n = static_cast<int64_t>(workers_.size());
    if (spec_.backup_workers >= n) {
      Skip("job", SkipReason::kNotApplicable,
           absl::StrCat("backup workers skipped: ", spec_.backup_workers,
                        " backups need more workers than ", n));
      return;
    }
    if (!JobBudgetLeft()) {
      Skip("job", SkipReason::kBudget, absl::StrCat("backup workers skipped: ", BudgetSpent()));
      return;
    }
    ++used_;
    ++used_by_rule_[kBackupStart];
    Emit(UseBackupWorkers{spec_.backup_workers}, kBackupStart, "",
         absl::StrCat("baseline: a step takes the first ", n - spec_.backup_workers, " of ", n,
                      " gradients"),
         {{"workers", static_cast<double>(n)},
          {"backups", static_cast<double>(spec_.backup_workers)}});
  }

  // ---- shared pieces ------------------------------------------------------------------
  const Decision* LastOwn(const std::string& id) const {
    auto it = last_own_.find(id);
    return it == last_own_.end() ? nullptr : it->second;
  }

  int64_t RuleCooldown(const std::string& rule) const {
    auto it = rules_.find(rule);
    if (it != rules_.end() && it->second->cooldown_ms) return *it->second->cooldown_ms;
    return spec_.cooldown_ms;
  }

  // False (and a note in skipped when `what` is not empty) while the member's
  // last own decision's cool-down runs.
  bool OutOfCooldown(const Member& m, const std::string& what) {
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

  bool JobBudgetLeft() const { return used_ < spec_.max_actions; }
  std::string BudgetSpent() const {
    return absl::StrCat("action budget spent (", used_, " of ", spec_.max_actions,
                        " interventions)");
  }

  std::map<std::string, double> BaseEvidence(const Member& m) const {
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

  std::map<std::string, double> RoundEvidence(const Member& m, int64_t target,
                                              int64_t total) const {
    auto e = BaseEvidence(m);
    e["batch_before"] = static_cast<double>(m.batch());
    e["batch_after"] = static_cast<double>(target);
    e["capacity"] = m.capacity();
    e["global_batch"] = static_cast<double>(global_batch_);
    e["round_batch"] = static_cast<double>(total);
    return e;
  }

  // The time saved by restarting `m` (see the header), with its figures in `e`.
  double SavedSeconds(const Member& m, std::map<std::string, double>& e) const {
    const double r = o_.remaining_seconds;
    if (m.is_ps()) return r * (1 - 1 / m.score());
    double sum_batch = 0, max_score = 0, keep = 0;
    std::vector<double> others;
    for (const Member& w : workers_) {
      if (w.batch() <= 0) continue;
      sum_batch += static_cast<double>(w.batch());
      max_score = std::max(max_score, w.score());
      keep += w.capacity();
      if (w.id() != m.id()) others.push_back(w.capacity());
    }
    const double ref = others.empty() ? m.capacity() : Median(others);
    const double restart = keep - std::max(0.0, m.capacity()) + ref;
    const double now = max_score > 0 ? sum_batch / max_score : 0;
    e["throughput_now"] = now;
    e["throughput_keep"] = keep;
    e["throughput_restart"] = restart;
    if (!(keep > 0 && restart > 0)) return 0;
    const double work = r * now;
    return std::max(0.0, work / keep - work / restart);
  }

  // The first spare node by name that can take a member from `from`.
  const NodeState* PickNode(const std::string& from) const {
    std::vector<const NodeState*> nodes;
    for (const NodeState& n : o_.nodes) nodes.push_back(&n);
    std::sort(nodes.begin(), nodes.end(),
              [](const NodeState* a, const NodeState* b) { return a->name < b->name; });
    for (const NodeState* n : nodes) {
      if (!n->spare || n->excluded_until_ms > o_.now_ms || n->name == from ||
          chosen_nodes_.count(n->name)) {
        continue;
      }
      bool blocked = false;
      for (const Decision& d : o_.history) {
        const auto* k = std::get_if<KillRestart>(&d.action);
        if (k == nullptr) continue;
        blocked |= k->from_node == n->name && k->exclude_node_until_ms > o_.now_ms;
        blocked |= k->to_node == n->name && d.at_ms + spec_.cooldown_ms > o_.now_ms;
      }
      if (!blocked) return n;
    }
    return nullptr;
  }

  // Restarts `m` when every safeguard allows it; otherwise says why not.
  bool TryRestart(const Member& m, const std::string& rule, const std::string& what,
                  std::string* why, SkipReason* reason) {
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
    const double saved = SavedSeconds(m, evidence);
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
         absl::StrCat(what, ": restart on ", node->name, " saves ", Num(saved), "s of ",
                      Num(o_.remaining_seconds), "s left, cost ", Num(cost), "s; ",
                      w.node.empty() ? "source node" : w.node,
                      " excluded until its cool-down ends (", Secs(spec_.cooldown_ms), ")"),
         std::move(evidence));
    return true;
  }

  // Integer batches for `parts` proportional to `weight`, summing with the other
  // workers' (fixed) batches to the global batch. False, with a note, when the
  // global batch cannot give each part the minimum.
  template <typename Weight>
  bool Targets(const std::vector<const Member*>& parts, Weight weight,
               std::vector<int64_t>* targets, int64_t* total) {
    if (parts.empty()) return false;
    std::set<std::string> in;
    for (const Member* m : parts) in.insert(m->id());
    int64_t fixed = 0;
    for (const WorkerState& w : o_.workers) {
      if (w.role != Role::kParameterServer && !in.count(w.id)) {
        fixed += std::max<int64_t>(0, w.local_batch_size);
      }
    }
    *total = global_batch_ - fixed;
    const int64_t floor_value = std::max<int64_t>(1, spec_.min_local_batch);
    if (*total < floor_value * static_cast<int64_t>(parts.size())) {
      Skip("job", SkipReason::kNotApplicable,
           absl::StrCat("ADJUST_BS skipped: ", *total, " samples left of the global batch ",
                        global_batch_, " for ", parts.size(),
                        " workers cannot give each the minimum ", floor_value));
      return false;
    }
    std::vector<double> weights;
    for (const Member* m : parts) {
      const double v = weight(*m);
      weights.push_back(std::isfinite(v) && v > 0 ? v : 1);
    }
    *targets = Apportion(weights, *total, floor_value);
    return true;
  }

  // Sizes the ADJUST_BS subjects in one round over the workers neither frozen
  // nor restarted: subjects by capacity, the others as if at the median.
  // `by_capacity`: other workers sized by capacity too, without a subject's
  // cool-down (Tidy), for `why`.
  void Round(const std::map<std::string, Subject>& subjects, const std::set<std::string>& frozen,
             const std::string& rebalance_rule, const std::set<std::string>& by_capacity = {},
             const std::string& why = "") {
    if (subjects.empty() && by_capacity.empty()) return;
    if (!JobBudgetLeft()) {
      for (const auto& [id, s] : subjects) {
        Skip(id, SkipReason::kBudget,
             absl::StrCat("ADJUST_BS skipped (", s.rule, "): ", BudgetSpent()));
      }
      return;
    }
    std::vector<const Member*> parts;
    for (const Member& m : workers_) {
      if (m.batch() > 0 && !frozen.count(m.id())) parts.push_back(&m);
    }
    std::vector<int64_t> targets;
    int64_t total = 0;
    // A freshly restarted worker weighs as much as the median of the others.
    std::vector<double> others;
    for (const Member* m : parts) {
      if (!subjects.count(m->id())) others.push_back(static_cast<double>(m->batch()));
    }
    const double median_batch = others.empty() ? 0 : Median(others);
    const bool ok = Targets(
        parts,
        [&](const Member& m) {
          if (fresh_.count(m.id()) && median_batch > 0) return median_batch;
          return subjects.count(m.id()) || by_capacity.count(m.id())
                     ? m.capacity()
                     : static_cast<double>(m.batch());
        },
        &targets, &total);
    if (!ok) return;
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
      subject_changes |= (subjects.count(parts[i]->id()) || by_capacity.count(parts[i]->id())) &&
                         targets[i] != parts[i]->batch();
    }
    if (!subject_changes) {
      for (const auto& [id, s] : subjects) {
        Skip(id, SkipReason::kNotNeeded,
             absl::StrCat("ADJUST_BS not needed (", s.rule,
                          "): its batch already matches its speed"));
      }
      return;
    }
    if (!subjects.empty()) ++used_;  // a tidy round (no subject) is not an intervention
    std::set<std::string> rules;
    for (const auto& [id, s] : subjects) rules.insert(s.rule);
    for (const std::string& r : rules) ++used_by_rule_[r];

    std::vector<std::string> subject_ids;
    for (const auto& [id, s] : subjects) subject_ids.push_back(id);
    for (size_t i = 0; i < parts.size(); ++i) {
      const Member& m = *parts[i];
      const int32_t acc = Accumulation(*m.state, targets[i]);
      if (targets[i] == m.batch() && acc == m.state->accumulation_steps) continue;
      auto it = subjects.find(m.id());
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
             subject_ids.empty()
                 ? absl::StrCat(why, ": ", change, "; global batch ", global_batch_, " kept")
                 : absl::StrCat("keeps the global batch ", global_batch_, " around ",
                                absl::StrJoin(subject_ids, ","), ": ", change),
             RoundEvidence(m, targets[i], total));
      }
    }
  }

  void Emit(Action action, const std::string& rule, const std::string& subject, std::string reason,
            std::map<std::string, double> evidence) {
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

  void Skip(const std::string& who, SkipReason reason, const std::string& line) {
    plan_.skipped.push_back(absl::StrCat(who, ": ", line));
    plan_.skip_reasons.push_back(reason);
  }

  void WaitUntil(int64_t until_ms) {
    if (until_ms > o_.now_ms) {
      plan_.requeue_after_ms = std::min(plan_.requeue_after_ms, until_ms - o_.now_ms);
    }
  }

  static constexpr int64_t kNever = std::numeric_limits<int64_t>::min();
  // A worker this much slower than the median slows every step by as much;
  // a window's noise on a shared machine stays below it.
  static constexpr double kTidyMargin = 0.08;

  const Observed& o_;
  const PolicySpec& spec_;
  Plan plan_;
  std::vector<Member> workers_;                      // alive workers, by id
  std::vector<Member> servers_;                      // alive parameter servers, by id
  std::map<std::string, const Decision*> last_own_;  // member id -> its last own decision
  std::map<std::string, const Rule*> rules_;         // custom rules by name
  std::set<std::string> chosen_nodes_;               // restart targets in this plan
  std::set<std::string> fresh_;                      // workers restarted in this plan
  int used_ = 0;                                     // job interventions, history + plan
  std::map<std::string, int> used_by_rule_;
  int64_t last_round_ms_ = kNever;                    // the last ADJUST_BS round in history
  std::map<std::string, int64_t> compensated_since_;  // see CompensatedSince
  int64_t global_batch_ = 0;
};

// key=value, the value quoted when it is empty or has spaces, quotes or '='.
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

}  // namespace

const char* SkipReasonName(SkipReason reason) {
  switch (reason) {
    case SkipReason::kCooldown:
      return "cooldown";
    case SkipReason::kBudget:
      return "budget";
    case SkipReason::kCostAboveSaving:
      return "cost_above_saving";
    case SkipReason::kNoSpareNode:
      return "no_spare_node";
    case SkipReason::kRemainingUnknown:
      return "remaining_unknown";
    case SkipReason::kJobSlowdown:
      return "job_slowdown";
    case SkipReason::kNotNeeded:
      return "not_needed";
    case SkipReason::kNotApplicable:
      break;
  }
  return "not_applicable";
}

vocab::ActionKind KindOf(const Action& action) {
  if (std::holds_alternative<AdjustBatchSize>(action)) return ActionKind::kAdjustBatchSize;
  if (std::holds_alternative<KillRestart>(action)) return ActionKind::kKillRestart;
  return ActionKind::kBackupWorkers;
}

int BudgetUsed(const std::vector<Decision>& history) {
  std::set<int64_t> rounds;  // the at_ms of each ADJUST_BS round
  int used = 0;
  for (const Decision& d : history) {
    if (!std::holds_alternative<AdjustBatchSize>(d.action)) {
      ++used;
    } else if (!(d.rule == kNdRebalance && d.subject.empty())) {  // a tidy round's, or shares one
      rounds.insert(d.at_ms);
    }
  }
  return used + static_cast<int>(rounds.size());
}

bool IsRebalance(const Decision& decision) {
  return std::holds_alternative<AdjustBatchSize>(decision.action) && decision.subject.empty();
}

const char* ActionName(const Action& action) { return vocab::Name(KindOf(action)).c_str(); }

const std::string& ActionTarget(const Action& action) {
  static const std::string* const kEmpty = new std::string();
  if (const auto* a = std::get_if<AdjustBatchSize>(&action)) return a->worker;
  if (const auto* k = std::get_if<KillRestart>(&action)) return k->worker;
  return *kEmpty;
}

std::string Describe(const Action& action) {
  std::string out = absl::StrCat("action=", ActionName(action));
  if (const auto* a = std::get_if<AdjustBatchSize>(&action)) {
    absl::StrAppend(&out, " ", Field("worker", a->worker),
                    " local_batch_size=", a->local_batch_size,
                    " accumulation_steps=", a->accumulation_steps);
  } else if (const auto* k = std::get_if<KillRestart>(&action)) {
    absl::StrAppend(&out, " ", Field("worker", k->worker), " ", Field("from_node", k->from_node),
                    " ", Field("to_node", k->to_node),
                    " exclude_node_until_ms=", k->exclude_node_until_ms);
  } else if (const auto* b = std::get_if<UseBackupWorkers>(&action)) {
    absl::StrAppend(&out, " backups=", b->backups);
  }
  return out;
}

std::string Describe(const Decision& decision) {
  std::string out =
      absl::StrCat(Describe(decision.action), " at_ms=", decision.at_ms, " ",
                   Field("policy", vocab::Name(decision.policy)), " ", Field("rule", decision.rule),
                   " ", Field("subject", decision.subject), " ", Field("reason", decision.reason));
  for (const auto& [key, value] : decision.evidence) absl::StrAppend(&out, " ", key, "=", value);
  return out;
}

absl::Status Validate(const PolicySpec& spec, const std::string& path) {
  auto bad = [&](const std::string& field, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", field, ": ", message));
  };
  if (spec.cooldown_ms < 0) return bad("cooldown", "must be >= 0");
  if (spec.max_actions < 0) return bad("maxActions", "must be >= 0");
  if (!(spec.min_saving_ratio >= 0 && std::isfinite(spec.min_saving_ratio))) {
    return bad("minSavingRatio", "must be a number >= 0");
  }
  if (spec.backup_workers < 1) return bad("backupWorkers", "must be >= 1");
  if (!(spec.hysteresis >= 0 && spec.hysteresis < 1)) return bad("hysteresis", "must be in [0, 1)");
  if (!(spec.compensated_slowdown > 1 && std::isfinite(spec.compensated_slowdown))) {
    return bad("compensatedSlowdown", "must be > 1");
  }
  if (spec.min_local_batch < 1) return bad("minLocalBatch", "must be >= 1");
  if (spec.interval_ms <= 0) return bad("interval", "must be > 0");
  if (spec.name == Policy::kCustom && spec.rules.empty()) {
    return bad("rules", "the custom policy needs at least one rule");
  }
  if (spec.name != Policy::kCustom && !spec.rules.empty()) {
    return bad("rules",
               absl::StrCat("only the custom policy takes rules, not ", vocab::Name(spec.name)));
  }
  const std::vector<ActionKind>& actions = vocab::RuleActionKinds();
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < spec.rules.size(); ++i) {
    const Rule& r = spec.rules[i];
    const std::string at = absl::StrCat("rules[", i, "].");
    if (r.signal == Signal::kClass) {
      if (!IsStraggler(r.straggler_class) && r.straggler_class != v1::LEADER) {
        return bad(at + "class", "must be one of TRANSIENT, PERSISTENT, DETERMINISTIC, LEADER");
      }
    } else if (!(r.threshold > 1 && std::isfinite(r.threshold))) {
      return bad(at + "threshold",
                 absl::StrCat("must be > 1 (1 is the median), got ", r.threshold));
    }
    if (r.windows < 1) return bad(at + "windows", "must be >= 1");
    if (std::find(actions.begin(), actions.end(), r.action) == actions.end()) {
      return bad(at + "action", absl::StrCat("must be one of ", vocab::Names(actions)));
    }
    if (r.action == ActionKind::kAdjustBatchSize && r.role == Role::kParameterServer) {
      return bad(at + "action", "ADJUST_BS cannot help a parameter server (role ps)");
    }
    if (r.cooldown_ms && *r.cooldown_ms < 0) return bad(at + "cooldown", "must be >= 0");
    if (r.budget && *r.budget < 0) return bad(at + "budget", "must be >= 0");
    auto [it, inserted] = names.emplace(RuleName(r, i), i);
    if (!inserted) {
      return bad(at + "name", absl::StrCat("\"", it->first, "\" is also rules[", it->second, "]"));
    }
  }
  return absl::OkStatus();
}

Plan Decide(const Observed& observed, const PolicySpec& spec) {
  return Planner(observed, spec).Run();
}

}  // namespace antdt::controller
