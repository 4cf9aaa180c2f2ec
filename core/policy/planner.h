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
std::vector<int64_t> Apportion(const std::vector<double>& weights, int64_t total,
                               int64_t floor_value);

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

std::string Summary(const Member& m);

class Planner {
 public:
  Planner(const Observed& observed, const PolicySpec& spec);

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
  // round sizes every worker outside a cool-down whose score is off 1 by the
  // margin either way by its measured capacity (within it: noise, kept)
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
    // Views of the members' own ids: ten thousand parts a round.
    std::unordered_set<std::string_view> in;
    in.reserve(parts.size());
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

  // A round's weight of a worker sized as it is: its batch, or the median
  // where the two are a rounding apart.
  static double RoundingWeight(double batch, double median_batch);

  // Sizes the ADJUST_BS subjects in one round over the workers neither frozen
  // nor restarted: subjects by capacity, the others as if at the median.
  // `by_capacity`: other workers sized by capacity too, without a subject's
  // cool-down (Tidy), for `why`.
  void Round(const std::map<std::string, Subject>& subjects, const std::set<std::string>& frozen,
             const std::string& rebalance_rule, const std::set<std::string>& by_capacity = {},
             const std::string& why = "");

  // Which of workers_ (by position) have their id among `ids`' keys: a
  // binary search of the id-ordered workers_ per id, not a lookup of `ids`
  // per worker (a round weighs thousands of workers around a few ids).
  template <typename Ids>
  std::vector<char> Marked(const Ids& ids) const {
    std::vector<char> marked(workers_.size(), 0);
    for (const auto& entry : ids) {
      const std::string& id = KeyOf(entry);
      auto [first, last] = std::equal_range(workers_.begin(), workers_.end(), id, ById{});
      for (auto it = first; it != last; ++it) marked[it - workers_.begin()] = 1;
    }
    return marked;
  }
  struct ById {
    bool operator()(const Member& m, const std::string& id) const { return m.id() < id; }
    bool operator()(const std::string& id, const Member& m) const { return id < m.id(); }
  };
  static const std::string& KeyOf(const std::string& id) { return id; }
  template <typename V>
  static const std::string& KeyOf(const std::pair<const std::string, V>& entry) {
    return entry.first;
  }
  // A worker's position in workers_.
  size_t At(const Member& m) const { return static_cast<size_t>(&m - workers_.data()); }

  // The subjects a rebalanced worker's change is around: "worker-3",
  // "worker-3,worker-7,worker-9 and 117 more".
  static std::string Around(const std::map<std::string, Subject>& subjects);

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
std::string Field(const std::string& key, const std::string& value);

}  // namespace antdt::policy::internal
