// The Controller's policy library: pure functions from the Monitor's view of a
// job (with the current time in it) to a plan of actions. Actions are data; the
// executors (agents for ADJUST_BS, the operator or the local backend for
// KILL_RESTART, the sharding service for shard release) live elsewhere. No I/O,
// no threads, no clock reads: time is Observed::now_ms. Linked only against
// common, vocab and proto, so nothing else can creep in.
//
// ---- Batches --------------------------------------------------------------
// A worker's local_batch_size is the number of samples it contributes to one
// global step, all its micro-batches together, so the global batch is the sum
// of local_batch_size over the job's workers, and every plan keeps that sum
// exactly equal to Observed::global_batch_size (integers; remainders go to the
// largest fractional shares, then to the faster worker, then to the lower id).
// accumulation_steps is how many micro-batches the worker splits it into
// (ceil(local / steps) each, the last one smaller when it does not divide);
// with WorkerState::max_micro_batch known it is ceil(local / max_micro_batch),
// so every device runs at its largest micro-batch (AntDT-DD), otherwise the
// worker's current value is kept. Gradients are weighted by sample count.
//
// Speeds come from the Monitor: score = window BPT / peers' median BPT, measured
// at the worker's current batch, so a worker's capacity is
//   capacity = local_batch_size / score   (samples per median step time)
// and "batch proportional to speed" means batch_i = B x capacity_i / sum(capacity).
// (Not batch proportional to 1 / score: a worker already given a smaller batch
// scores near 1 and would get its full share back, and oscillate.)
//
// ---- Policies ---------------------------------------------------------------
// antdt-nd (non-dedicated clusters). Nothing at all while the Monitor reports
// job_slowdown (everyone slowed together). Per alive member, in id order,
// members inside their cool-down skipped:
//   parameter server PERSISTENT   -> KILL_RESTART (rule antdt-nd:ps-restart) when
//                                    the restart pays (see Restarts); TRANSIENT and
//                                    DETERMINISTIC servers: noted in skipped only
//                                    (batch sizing cannot help a server, and a
//                                    restart will not change hardware).
//   worker PERSISTENT             -> KILL_RESTART (antdt-nd:persistent-restart) when
//                                    it pays, else ADJUST_BS (antdt-nd:persistent-adjust)
//                                    with the reason in skipped.
//   worker compensated            -> KILL_RESTART (antdt-nd:compensated-restart) when
//                                    it pays. "Compensated": its last own decision
//                                    shrank it as a TRANSIENT or PERSISTENT straggler,
//                                    that decision's cool-down is over, it is not a
//                                    LEADER (it would be if it had recovered), and its
//                                    capacity is still below its peers' median
//                                    capacity / compensated_slowdown. ADJUST_BS makes a
//                                    straggler score ~1, so the Monitor stops seeing it
//                                    as slow; this is how a persistent straggler is
//                                    still found and restarted once it has proven
//                                    persistent. (If it is TRANSIENT again, a failed
//                                    restart falls back to ADJUST_BS.)
//   (The two restarts above are decideBy: thresholds. By default, decideBy
//   expectedDuration, a TRANSIENT or PERSISTENT worker, and a compensated one
//   still compensated_slowdown slower, is weighed by ChooseByExpectedDuration
//   (expected_duration.h): how long its slowdown has lasted, its node's
//   history, the job's remaining time, the restart's measured cost and the
//   saving below over the expected duration rather than the rest of the job.
//   KILL_RESTART (antdt-nd:duration-restart) when that says so and the
//   safeguards allow it; otherwise the ADJUST_BS below, or nothing when
//   riding it out loses least. The reason and evidence carry the expected
//   duration and each choice's expected loss.)
//   worker TRANSIENT              -> ADJUST_BS (antdt-nd:transient-adjust)
//   worker DETERMINISTIC          -> ADJUST_BS (antdt-nd:deterministic-adjust), never
//                                    a restart (the hardware will not change) — but
//                                    under expectedDuration, on a node the memory
//                                    calls chronic (it is the node that is slow, in
//                                    job after job) it is weighed as above, its
//                                    slowdown expected to last the rest of the job.
//   worker LEADER                 -> ADJUST_BS (antdt-nd:leader-adjust): leaders take
//                                    the samples of stragglers, and a recovered straggler
//                                    (a LEADER at its reduced batch) gets its share back.
// The ADJUST_BS subjects are sized together in one round over the workers not in
// a cool-down and not being restarted: subjects by their measured capacity
// (batch / score), every other worker as if at the median (batch / 1, so noise
// moves nobody); each worker whose batch changes gets a decision (the others'
// rule is antdt-nd:rebalance, subject ""). The round is taken only when a
// subject's batch changes.
// Re-sizing: a straggler sized by a window that straddled its slowdown's start
// is sized for part of it; once a whole window at its new batch has been seen
// (settle_ms: two windows and the lateness) and it still scores >= 1.08, it is
// sized again inside its cool-down (same rule). A restart is weighed a
// cool-down after it was first compensated, however often it was re-sized.
// Tidy: with no subject, when the slowest worker outside a cool-down scores
// >= 1.08 (a step waits for it: 8% on every step), one round sizes by capacity
// every worker outside a cool-down whose score is off 1 by 0.08 either way
// (within it is a window's noise: the others keep their batches), as
// antdt-nd:rebalance with subject "", at most once per cooldown_ms after the
// last round. It moves no straggler, so it does not
// count against max_actions (and is not taken once they are spent).
//
// antdt-dd (dedicated clusters): every alive worker with a score gets a batch
// proportional to its capacity (no classes, no restarts), re-planned only when
// some worker's target differs from its current batch by more than
// `hysteresis` (relative), and not within `cooldown_ms` of the last round.
// lb-bsp (baseline): the same sizing with no hysteresis margin (any difference
// re-plans) and the current accumulation steps unless max_micro_batch forces more.
// backup-workers (baseline): one UseBackupWorkers{backup_workers} decision, the
// first time, nothing else. none: nothing. Static sharding is not a policy
// decision: it is the sharding service's mode with policy none.
//
// custom: for each alive member in id order (out of its cool-down, and not during
// job_slowdown), the rules in order; the first rule that matches and is allowed
// (its budget left; for KILL_RESTART, the restart safeguards below) acts; a
// matching rule passed over is noted in skipped and the next one is tried. A rule
// matches when the member's role fits and
//   signal score / self_score: the value >= threshold and windows_slow >= windows;
//   signal class: the class is straggler_class (and windows_slow >= windows for
//                 the straggler classes; LEADER has no slow windows).
// ADJUST_BS subjects are sized in one round as under antdt-nd (rule
// custom:rebalance for the others).
//
// ---- Safeguards (every policy) ------------------------------------------------
// - Cool-down: a member's last own decision (Decision::subject == its id) at time
//   t keeps it out of every plan (no action, its batch frozen) until t + the
//   cool-down of the rule behind that decision (a custom rule's own, else
//   cooldown_ms). antdt-dd and lb-bsp rounds concern the whole job: none within
//   cooldown_ms of the previous round.
// - Budget: max_actions interventions over the job (history + plan). Each
//   KILL_RESTART and UseBackupWorkers is one; all ADJUST_BS decisions of one plan
//   (one at_ms) are one together, since only together do they keep the global
//   batch constant. A custom rule's budget counts its own interventions.
// - Hysteresis: the Monitor's classes have their own (enter at 1.3, leave at
//   1.15); antdt-dd adds `hysteresis` on the batch proportions.
// - Restarts: none for a member restarted (WorkerState::last_restart_ms) within
//   cooldown_ms; none when remaining_seconds is unknown; only when
//   saved_seconds > min_saving_ratio x restart_cost_seconds (ps_restart_cost_seconds
//   for a parameter server); onto the first spare
//   node by name that is not excluded (excluded_until_ms > now, or the source of a
//   restart in history whose exclusion still runs), not the target of a restart
//   within cooldown_ms, and not already chosen in this plan; the source node is
//   excluded until now + cooldown_ms. No spare node: skipped with the reason.
//   Restarts take the budget before the ADJUST_BS round.
//
// ---- What a restart saves -------------------------------------------------------
// R = remaining_seconds, the job's ETA at the current throughput. For a
// parameter server with score s (every step waits for it, batch sizing cannot
// help): saved = R x (1 - 1/s). For a worker the alternative to a restart is
// ADJUST_BS, so the saving is measured against it. With capacity_j =
// batch_j / score_j over the alive workers:
//   now     = sum(batch) / max(score)            (steps wait for the slowest)
//   keep    = sum(capacity)                      (perfectly balanced by ADJUST_BS)
//   restart = keep - capacity_i + median(capacity of the others)
//   saved   = R x now / keep - R x now / restart
// (For one straggler at s among n workers this is about R x (1 - 1/s) / n: with
// ADJUST_BS available, restarting a worker buys back one worker's lost capacity,
// not the whole slowdown.)
//
// Every decision carries evidence: score, self_score, windows_slow and class (the
// StragglerClass number) of its member, batches before and after, and for restarts
// remaining_seconds, saved_seconds, cost_seconds, min_saving_ratio and the
// throughput figures above (UseBackupWorkers: workers and backups).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "antdt/v1/monitor.pb.h"
#include "api/vocab/vocab.h"

namespace antdt::policy {

// ---- Actions: data, executed elsewhere ----------------------------------------

// A worker's new batch (see the file comment for the meaning of the two fields).
struct AdjustBatchSize {
  std::string worker;
  int64_t local_batch_size = 0;
  int32_t accumulation_steps = 1;
};

// Relaunch a worker or parameter server on `to_node`; its in-flight shards are
// released at once, and `from_node` is excluded for this job until
// exclude_node_until_ms.
struct KillRestart {
  std::string worker;
  std::string from_node;
  std::string to_node;
  int64_t exclude_node_until_ms = 0;
};

// Baseline: run with `backups` extra workers; a step takes the first N of N + b
// gradients.
struct UseBackupWorkers {
  int32_t backups = 0;
};

using Action = std::variant<AdjustBatchSize, KillRestart, UseBackupWorkers>;

// ADJUST_BS, KILL_RESTART or BACKUP_WORKERS, as a type.
vocab::ActionKind KindOf(const Action& action);
// Its kind's name: "ADJUST_BS", "KILL_RESTART" or "BACKUP_WORKERS".
const char* ActionName(const Action& action);
// The worker or server an action is about; "" for UseBackupWorkers.
const std::string& ActionTarget(const Action& action);

struct Decision {
  Action action;
  int64_t at_ms = 0;  // Observed::now_ms of the plan: on the control loop's clock (clock.h)
  vocab::Policy policy = vocab::Policy::kNone;  // PolicySpec::name
  std::string rule;  // e.g. "antdt-nd:transient-adjust", a custom rule's name
  // The member whose own signal led to this decision, and whose cool-down it
  // starts; "" when the decision concerns the job (antdt-dd, lb-bsp, backups) or
  // only keeps the global batch constant around someone else's.
  std::string subject;
  std::string reason;                      // one human-readable sentence
  std::map<std::string, double> evidence;  // score, windows_slow, saved_seconds, ...
  // The Monitor's cause for the subject when it was decided: a record's (a
  // backend sets it from its last view of the subject); the policy leaves it.
  v1::Cause cause = v1::CAUSE_UNSPECIFIED;
};

// A decision's time in seconds on the loop's clock (since the job started,
// locally and in the simulator): what its records show.
inline double AtSeconds(const Decision& d) { return static_cast<double>(d.at_ms) / 1000.0; }

// `d` as a history keeps it: everything but its reason and evidence (no
// policy reads them; a job of 10,000 workers takes some 200,000 decisions).
Decision WithoutReasons(const Decision& d);

// A job's decisions in the order taken: a deque, which grows without moving
// what it holds (a 10,000-worker job takes some 200,000).
using History = std::deque<Decision>;

// The job's interventions in `history`, as the Budget safeguard counts them
// against max_actions (below): each KILL_RESTART and UseBackupWorkers one,
// each ADJUST_BS round (decisions sharing at_ms) one, antdt-nd's tidy rounds
// none.
int BudgetUsed(const History& history);

// What the policies read of a history of decisions on every turn, kept as the
// history grows (Add each decision in order), so that a turn of a job with
// thousands of past decisions costs no pass over them. Positions are indexes
// into that history.
class HistoryIndex {
 public:
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::min();

  HistoryIndex() = default;
  explicit HistoryIndex(const History& history) {
    for (const Decision& d : history) Add(d);
  }
  // `d` is the history's next decision (at position size()).
  void Add(const Decision& d);
  // How many decisions were added.
  size_t size() const { return size_; }

  // The position of `subject`'s last own decision (the latest at_ms, the later
  // of a tie); nullopt when it has none.
  std::optional<size_t> LastOwn(const std::string& subject) const;
  // When `subject`'s trailing run of own straggler ADJUST_BS decisions
  // (antdt-nd's transient and persistent adjust) began; kNever outside one.
  int64_t CompensatedSince(const std::string& subject) const;
  // When `subject` was last restarted (KILL_RESTART); -1 never.
  int64_t LastRestartMs(const std::string& subject) const;
  // BudgetUsed(history), and the same count per rule (tidy rounds in none).
  int BudgetUsed() const { return non_adjust_ + static_cast<int>(rounds_.size()); }
  const std::map<std::string, int>& UsedByRule() const { return used_by_rule_; }
  // The latest ADJUST_BS decision's at_ms (tidy rounds too); kNever none.
  int64_t LastRoundMs() const { return last_round_ms_; }
  // The positions of the KILL_RESTART decisions, in order.
  const std::vector<size_t>& Restarts() const { return restarts_; }
  bool BackupWorkersStarted() const { return backup_started_; }

 private:
  size_t size_ = 0;
  std::unordered_map<std::string, std::pair<size_t, int64_t>> last_own_;  // position, at_ms
  std::unordered_map<std::string, int64_t> compensated_since_;
  std::unordered_map<std::string, int64_t> last_restart_ms_;
  int non_adjust_ = 0;        // KILL_RESTART and UseBackupWorkers decisions
  std::set<int64_t> rounds_;  // the at_ms of each ADJUST_BS round but tidy ones
  std::map<std::string, std::set<int64_t>> rule_rounds_;
  std::map<std::string, int> used_by_rule_;
  int64_t last_round_ms_ = kNever;
  std::vector<size_t> restarts_;
  bool backup_started_ = false;
};

// A batch change that only keeps the global batch constant (ADJUST_BS with
// no subject: around another member's action, a tidy round, an antdt-dd or
// lb-bsp round): counted apart from the actions users read first.
bool IsRebalance(const Decision& decision);

// Why an action a policy considered was not taken (Plan::skip_reasons).
enum class SkipReason {
  kCooldown,          // the member's (or the job's) cool-down runs
  kBudget,            // the job's or the rule's action budget is spent
  kCostAboveSaving,   // a restart would not save more than it costs
  kNoSpareNode,       // nowhere to restart it
  kRemainingUnknown,  // the job's remaining time is unknown: a restart cannot be weighed
  kJobSlowdown,       // everyone slowed together: not a straggler
  kNotNeeded,         // batches already match the speeds (or within the hysteresis)
  kNotApplicable,     // the action cannot help this member (a parameter server, ...)
};
inline constexpr SkipReason kSkipReasons[] = {
    SkipReason::kCooldown,    SkipReason::kBudget,           SkipReason::kCostAboveSaving,
    SkipReason::kNoSpareNode, SkipReason::kRemainingUnknown, SkipReason::kJobSlowdown,
    SkipReason::kNotNeeded,   SkipReason::kNotApplicable};
// "cooldown", "budget", "cost_above_saving", "no_spare_node",
// "remaining_unknown", "job_slowdown", "not_needed", "not_applicable".
const char* SkipReasonName(SkipReason reason);

struct Plan {
  std::vector<Decision> decisions;
  // What was considered and why not (cool-down, budget, cost, no spare node),
  // one line each, starting with the member id or "job".
  std::vector<std::string> skipped;
  std::vector<SkipReason> skip_reasons;  // one per line of `skipped`
  int64_t requeue_after_ms = 0;          // when to decide again
};

// One key=value line for logs and Events, e.g.
//   action=KILL_RESTART worker=w-3 from_node=node-3 to_node=spare-0 exclude_node_until_ms=...
std::string Describe(const Action& action);
// Describe(action) then at_ms, policy, rule, subject, reason and the evidence.
std::string Describe(const Decision& decision);
// "key=value key=value": a decision's evidence, as Describe and its records say it.
std::string EvidenceLine(const std::map<std::string, double>& evidence);

// ---- The observed view ---------------------------------------------------------------

struct WorkerState {
  std::string id;
  vocab::Role role = vocab::Role::kWorker;
  std::string node;
  int64_t local_batch_size = 0;  // workers: samples per global step
  int32_t accumulation_steps = 1;
  int64_t max_micro_batch = 0;  // the largest micro-batch that fits; 0 unknown
  int32_t incarnation = 0;
  bool alive = true;             // false while being (re)started: left alone, batch kept
  int64_t last_restart_ms = -1;  // -1 never
};

struct NodeState {
  std::string name;
  bool spare = false;  // unused, can take a restarted member
  int64_t excluded_until_ms = 0;
  // What the node memory (core/nodememory) says of it; the defaults when it
  // has no history. antdt-nd weighs a slowdown on the node by the first two,
  // and restarts onto the spare node with the least `avoid`, never a chronic one.
  double slowdown_expected_seconds = 0;  // how long a slowdown that starts there lasts
  bool chronic = false;                  // slow in jobs before, by the memory's measure
  double avoid = 0;                      // in [0, 1): how strongly new work should avoid it
};

struct Observed {
  int64_t now_ms = 0;
  std::string job;
  v1::GetJobHealthResponse health;   // the Monitor's view
  std::vector<WorkerState> workers;  // workers and parameter servers
  std::vector<NodeState> nodes;
  int64_t global_batch_size = 0;     // <= 0: the sum of the current local batches
  double remaining_seconds = -1;     // the job's ETA from the sharding service; -1 unknown
  double restart_cost_seconds = 60;  // measured relaunch + warm-up, or a default
  // A parameter server's move: measured (the handoff at a step boundary, or a
  // restore from its checkpoint and the replay after it) + warm-up, or a default.
  double ps_restart_cost_seconds = 60;
  // Decisions already taken for this job; the control loop keeps them without
  // their reasons and evidence (ControlLoop::Remember), which no policy reads.
  History history;
  // An index of `history` its holder keeps as it appends (the control loop);
  // null, or not of the history's size: the policy builds its own.
  const HistoryIndex* history_index = nullptr;
};

// ---- The policy specification (spec.stragglerPolicy in the manifest) ---------------

struct Rule {
  std::string name;                 // Decision::rule and the budget's key; "" -> "rules[i]"
  std::optional<vocab::Role> role;  // unset: any
  vocab::Signal signal = vocab::Signal::kScore;
  double threshold = 0;  // score signals: fires at value >= threshold (> 1)
  // Class signal: TRANSIENT, PERSISTENT, DETERMINISTIC or LEADER.
  v1::StragglerClass straggler_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
  int windows = 1;  // persistence: WorkerHealth::windows_slow >= windows
  // ADJUST_BS or KILL_RESTART (vocab::RuleActionKinds).
  vocab::ActionKind action = vocab::ActionKind::kAdjustBatchSize;
  std::optional<int64_t> cooldown_ms;  // unset: PolicySpec::cooldown_ms
  std::optional<int> budget;           // interventions by this rule; unset: no own limit
};

// Manifest field names (for Validate's messages): cooldown, maxActions,
// minSavingRatio, backupWorkers, hysteresis, compensatedSlowdown, minLocalBatch,
// interval, rules[i].{name, threshold, class, windows, action, cooldown,
// budget}.
struct PolicySpec {
  vocab::Policy name = vocab::Policy::kNone;
  int64_t cooldown_ms = 60'000;
  int max_actions = 10;           // interventions over the job (see Budget above)
  double min_saving_ratio = 1.0;  // restart only if saved_seconds > ratio x cost
  int32_t backup_workers = 1;
  double hysteresis = 0.1;  // antdt-dd: relative batch drift that re-plans
  // antdt-nd: a compensated straggler whose capacity is still below its peers'
  // median / this is restarted when that pays.
  double compensated_slowdown = 1.3;
  int64_t min_local_batch = 1;
  int64_t interval_ms = 10'000;  // Plan::requeue_after_ms, less when a cool-down ends sooner
  // antdt-nd: how long after an ADJUST_BS a whole Monitor window at the new
  // batch has been measured (two windows and the lateness); a straggler still
  // slow then is sized again inside its cool-down. 0: not before the cool-down.
  int64_t settle_ms = 0;
  // The cool-down from the Monitor's windows rather than cooldown_ms: twice
  // the settle time, so that a decision's effect is measured before the next
  // (a manifest without a cooldown). Used once the health says its windows.
  bool derive_cooldown = false;
  // antdt-nd: weigh a worker's restart by how long its slowdown is expected to
  // last (expected_duration.h: from how long it has lasted and its node's
  // history, restarted once that makes the restart pay); false: by the
  // thresholds (a PERSISTENT class, a compensated slowdown) and the saving over
  // the rest of the job (decideBy: thresholds). Parameter servers: thresholds.
  bool by_expected_duration = true;
  // The step deadline in force (spec.stragglerPolicy.stepDeadline under a
  // policy that cuts steps; 0: none): what riding a slowdown out costs.
  double step_deadline = 0;
  std::vector<Rule> rules;  // custom only
};

// An action and rule a policy may decide (its metrics' series): `rebalance`
// when it only keeps the global batch around another's (IsRebalance).
struct PossibleDecision {
  vocab::ActionKind action = vocab::ActionKind::kAdjustBatchSize;
  std::string rule;
  bool rebalance = false;
};
// Every action and rule `spec`'s policy may decide, so that a job's counters
// exist at 0 before its first decision (a series born at 1 loses that
// increment in rate() and increase()).
std::vector<PossibleDecision> PossibleDecisions(const PolicySpec& spec);

// The spec a pass runs with: settle_ms from the Monitor's windows now (two
// windows and the lateness) when the health says them, and with
// derive_cooldown, cooldown_ms = 2 x settle_ms.
PolicySpec EffectiveSpec(PolicySpec spec, const v1::GetJobHealthResponse& health);

// OK, or InvalidArgument naming the field path, e.g.
//   "spec.stragglerPolicy.rules[1].action: must be one of ADJUST_BS, KILL_RESTART".
absl::Status Validate(const PolicySpec& spec, const std::string& path = "spec.stragglerPolicy");

// The plan for one pass. `spec` must be valid.
Plan Decide(const Observed& observed, const PolicySpec& spec);

}  // namespace antdt::policy
