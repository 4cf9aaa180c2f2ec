// The Planner: one plan of one policy over one observation, shared by its
// files: planner.cc (the pieces every policy uses), planner_nd.cc (antdt-nd),
// planner_proportional.cc (antdt-dd and lb-bsp), planner_custom.cc (custom
// rules and backup workers). Internal to core/policy/: policy.cc runs it.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/policy/expected_duration.h"
#include "core/policy/policy.h"

namespace antdt::policy::internal {

using vocab::ActionKind;
using vocab::IsStraggler;
using vocab::Median;
using vocab::Policy;
using vocab::Role;
using vocab::Signal;

inline constexpr char kNdPsRestart[] = "antdt-nd:ps-restart";
inline constexpr char kNdPersistentRestart[] = "antdt-nd:persistent-restart";
inline constexpr char kNdPersistentAdjust[] = "antdt-nd:persistent-adjust";
inline constexpr char kNdCompensatedRestart[] = "antdt-nd:compensated-restart";
inline constexpr char kNdDurationRestart[] = "antdt-nd:duration-restart";
inline constexpr char kNdTransientAdjust[] = "antdt-nd:transient-adjust";
inline constexpr char kNdDeterministicAdjust[] = "antdt-nd:deterministic-adjust";
inline constexpr char kNdLeaderAdjust[] = "antdt-nd:leader-adjust";
inline constexpr char kNdRebalance[] = "antdt-nd:rebalance";
inline constexpr char kNdRestartShare[] = "antdt-nd:restart-share";
inline constexpr char kDdProportional[] = "antdt-dd:proportional";
inline constexpr char kLbBspProportional[] = "lb-bsp:proportional";
inline constexpr char kCustomRebalance[] = "custom:rebalance";
inline constexpr char kBackupStart[] = "backup-workers:start";

// Short numbers for reasons: at most three decimals.
inline std::string Num(double v) { return absl::StrCat(std::round(v * 1000) / 1000); }

// A duration in milliseconds as seconds for a sentence: "4 s", "12.3 s". The
// policy's clock is the caller's (job-relative locally, Unix time on a
// cluster), so sentences say "x s ago" or "for x s", never a clock reading.
inline std::string Secs(int64_t ms) {
  return absl::StrCat(std::round(static_cast<double>(ms) / 100) / 10, " s");
}

inline std::string RuleName(const Rule& rule, size_t index) {
  return rule.name.empty() ? absl::StrCat("rules[", index, "]") : rule.name;
}

// Integers proportional to `weights` (each > 0), each >= `floor_value`, summing
// exactly to `total` (the caller ensures total >= floor_value x size). Members
// whose share falls below the floor get the floor, and the rest is shared again
// among the others. The remainder goes, one sample at a time, where it
// lengthens a step least (see below).
inline std::vector<int64_t> Apportion(const std::vector<double>& weights, int64_t total,
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
  v1::StragglerClass straggler_class() const {
    return health != nullptr ? health->class_() : v1::HEALTHY;
  }
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

inline int32_t Accumulation(const WorkerState& w, int64_t batch) {
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

inline std::string Summary(const Member& m) {
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

class Planner {
 public:
  Planner(const Observed& observed, const PolicySpec& spec) : o_(observed), spec_(spec) {
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
    std::sort(workers_.begin(), workers_.end(), by_id);
    std::sort(servers_.begin(), servers_.end(), by_id);
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
  void Nd();
  // antdt-nd's parameter servers: a PERSISTENT one restarted when that pays.
  void NdServers();

  // A drift below the Monitor's straggler threshold still slows every step (a
  // step waits for the slowest worker): a worker left 10% slow after a round
  // (a restarted one sized before the others settled, a speed that moved a
  // little) costs 10% of the rest of the job. When no member is a subject and
  // the slowest worker outside a cool-down scores at least 1 + kTidyMargin, one
  // round sizes every worker outside a cool-down by its measured capacity
  // (antdt-nd:rebalance: no subject, so no cool-down of anyone's own), at most
  // once per cooldown_ms. It moves no straggler, so it does not count against
  // max_actions (but is not taken once they are spent).
  void Tidy(const std::set<std::string>& frozen);

  // When the cool-down of a member's own decision ends.
  int64_t CooldownEnd(const Decision& own) const { return own.at_ms + RuleCooldown(own.rule); }
  bool InCooldown(const Decision& own) const { return CooldownEnd(own) > o_.now_ms; }

  // When the member's trailing run of own straggler ADJUST_BS decisions began.
  int64_t CompensatedSince(const std::string& id) const;

  // A straggler sized on a window that began before its slowdown was sized
  // for part of it only: once a whole window at its new batch has been seen
  // (settle_ms), a member still slower than its peers by the tidy margin is
  // sized again, before its cool-down ends.
  bool Resettled(const Member& m, const Decision& last) const;

  // How many times slower than its peers' median capacity a worker is.
  double CapacitySlowdown(const Member& m) const;
  // ", compensated by ADJUST_BS <t> ago and still <s>x slower than its peers":
  // a compensated worker's case for a restart, `last` its shrink.
  std::string StillSlow(const Decision& last, double slowdown) const;

  // decideBy expectedDuration: the least-loss choice for a slow worker.
  DurationChoice ByDuration(const Member& m) const;
  // How long the worker's current slowdown has lasted, from its open
  // straggler record (the Monitor's clock); its slow windows when none.
  double SlowSeconds(const Member& m) const;
  // Whether the node memory calls the member's node chronically slow.
  bool OnChronicNode(const Member& m) const;
  // The node by name in the observation; null when it is not there.
  const NodeState* FindNode(const std::string& name) const;

  // ---- antdt-dd and lb-bsp ------------------------------------------------------
  void Proportional(const std::string& rule, double hysteresis);

  // ---- custom ---------------------------------------------------------------------
  bool Matches(const Rule& rule, const Member& m) const;

  void Custom();

  // ---- backup-workers ---------------------------------------------------------------
  void BackupWorkers();

  // ---- shared pieces ------------------------------------------------------------------
  const Decision* LastOwn(const std::string& id) const;

  int64_t RuleCooldown(const std::string& rule) const;

  // False (and a note in skipped when `what` is not empty) while the member's
  // last own decision's cool-down runs.
  bool OutOfCooldown(const Member& m, const std::string& what);

  bool JobBudgetLeft() const { return used_ < spec_.max_actions; }
  std::string BudgetSpent() const;

  std::map<std::string, double> BaseEvidence(const Member& m) const;

  std::map<std::string, double> RoundEvidence(const Member& m, int64_t target, int64_t total) const;

  // The time saved by restarting `m` (see the header), with its figures in `e`.
  double SavedSeconds(const Member& m, std::map<std::string, double>& e) const;
  // The workers with a batch, summed once a turn (a plan's input does not
  // change while it is made): what SavedSeconds and CapacitySlowdown read for
  // every straggler, which made each turn O(stragglers x workers).
  struct WorkerTotals {
    std::vector<double> capacities;  // sorted
    double sum_batch = 0, max_score = 0, keep = 0;
  };
  const WorkerTotals& Totals() const;
  // The median capacity of the workers with a batch other than `m` (as
  // vocab::Median of them), and how many there are.
  double MedianCapacityWithout(const Member& m, size_t* count) const;

  // The spare node that can take a member from `from`: never a chronic one,
  // the least to avoid first, then by name.
  const NodeState* PickNode(const std::string& from) const;

  // Restarts `m` when every safeguard allows it; otherwise says why not.
  // `weighed`: the expected-duration choice that called for it; its saving
  // is then over the slowdown's expected duration, not the rest of the job.
  bool TryRestart(const Member& m, const std::string& rule, const std::string& what,
                  std::string* why, SkipReason* reason, const DurationChoice* weighed = nullptr);

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
             const std::string& why = "");

  void Emit(Action action, const std::string& rule, const std::string& subject, std::string reason,
            std::map<std::string, double> evidence);

  void Skip(const std::string& who, SkipReason reason, const std::string& line);

  void WaitUntil(int64_t until_ms);

  static constexpr int64_t kNever = HistoryIndex::kNever;
  // A worker this much slower than the median slows every step by as much;
  // a window's noise on a shared machine stays below it.
  static constexpr double kTidyMargin = 0.08;

  const Observed& o_;
  const PolicySpec& spec_;
  Plan plan_;
  std::vector<Member> workers_;               // alive workers, by id
  std::vector<Member> servers_;               // alive parameter servers, by id
  std::optional<HistoryIndex> own_index_;     // o_.history's, when the caller has none
  const HistoryIndex* history_ = nullptr;     // o_.history's index
  std::map<std::string, const Rule*> rules_;  // custom rules by name
  std::set<std::string> chosen_nodes_;        // restart targets in this plan
  std::set<std::string> fresh_;               // workers restarted in this plan
  int used_ = 0;                              // job interventions, history + plan
  std::map<std::string, int> used_by_rule_;
  int64_t last_round_ms_ = kNever;  // the last ADJUST_BS round in history
  int64_t global_batch_ = 0;
  mutable std::optional<WorkerTotals> totals_;  // Totals(), once
  // FindNode's and SlowSeconds' indexes, built on first use.
  mutable std::optional<std::unordered_map<std::string, const NodeState*>> node_index_;
  mutable std::optional<std::unordered_map<std::string, const v1::StragglerRecord*>> records_;
};

// key=value, the value quoted when it is empty or has spaces, quotes or '='.
inline std::string Field(const std::string& key, const std::string& value) {
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
