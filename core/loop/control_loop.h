// The control loop of the paper's control plane, written once: observe (the
// Monitor's view, the job's members and nodes, its ETA) -> decide (the
// Controller's policy, run from here and nowhere else) -> execute (each
// decision through a backend). `antdt run` (processes on one machine) and
// `antdt-operator` (pods) are backends of it; a simulator can be a third.
//
// A turn is data in, data out (raft's Node: what happened in, a Ready out):
// the backend gathers an Observation once (the Monitor's view, the members,
// the nodes, the ETA, the servers that moved, the time), Step() decides on it
// and says what to deliver and restart; the backend persists the decisions
// where it keeps them (the operator: the job's status, before anything is
// carried out), then hands the Ready to Apply(), which carries out each effect
// through the backend and adds the decisions to the history. A backend with
// nothing to persist between the two runs Apply(Step(Observe())). The Backend
// interface is only the carrying out and the recording.
//
// What the loop owns, so that no backend has its own copy:
// - the policy's input (policy::Observed) and the one call of
//   policy::Decide;
// - the history of decisions taken (cool-downs, budgets, exclusions), seeded
//   by a backend that rebuilds it after a restart of its own;
// - the restart-cost model: the mean relaunch time measured on this job's
//   restarts so far (a decision until the member is alive again at its new
//   incarnation), never less than kMinRelaunchSeconds, plus one Monitor window
//   to see the member again, plus LoopOptions::regroup_seconds (a collective
//   job's group re-forming, when every rank waits); parameter servers apart:
//   their relaunch is a move (the state handed over at a step boundary, or a
//   restore from the last checkpoint and the replay after it), measured on
//   their own moves, with no regroup;
// - directives, every one a backend delivers: one ADJUST_BS directive per
//   batch change, with the decision's accumulation steps; the committed batch
//   re-delivered to a member's incarnation that has not had it
//   (LoopOptions::redeliver_batches); every worker pointed at a parameter
//   server that serves from a new place (Observation::servers_serving), once per
//   move. Versions increase across the loop's lifetime, so an SDK applies the
//   newest; no backend builds a directive of its own;
// - the order of a restart: the backend stops the member and starts it
//   elsewhere (RestartElsewhere); parameter servers are told it left and its
//   shards released by the backend's Retire (see below), before the new
//   incarnation starts where the backend does it at once.
//
// Thread-safety: none; one thread drives a loop and its backend.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "antdt/v1/agent.pb.h"
#include "antdt/v1/monitor.pb.h"
#include "common/clock.h"
#include "core/loop/time_ledger.h"
#include "core/nodememory/node_memory.h"
#include "core/policy/policy.h"

namespace antdt::loop {

// How a decision's execution went (a label of antdt_controller_actions_total).
enum class Outcome {
  kDone,          // carried out
  kNotDelivered,  // an ADJUST_BS directive whose agent was not connected: re-planned next turn
  kFailed,        // the backend could not carry it out (the loop stops there)
};
const char* OutcomeName(Outcome outcome);  // "done", "not_delivered", "failed"

// A parameter server that serves from a new place now, its state taken over
// (its old incarnation may still be about): every worker is pointed there.
struct ServerServing {
  std::string id;  // "ps-K"
  int32_t incarnation = 0;
  std::string address;  // host:port
  std::string where;    // for the directive's reason: "node-3", "pod job-ps-0-1"
};

// A decision the loop recommends and does not carry out, with what it would
// save and cost (Effect's figures).
struct Recommendation {
  policy::Decision decision;
  double predicted_saving_seconds = 0;
  double cost_seconds = 0;
  int times = 1;  // a backend's record of it: how often it was decided (again after cool-downs)
};

// What the loop sees in one turn, as data: its backend gathers it once per
// turn. The Monitor's view, the nodes and the ETA are a decision's input
// only; a backend may leave them out when ControlLoop::Due() says no turn is
// due (a Monitor view of thousands of members is not free).
struct Observation {
  int64_t now_ms = 0;  // when it was gathered, on the backend's clock
  // Windows the Monitor has closed for the job so far; -1 when not known. A
  // new one is a turn of the loop at once (its news is freshest then).
  int64_t windows_closed = -1;
  // The Monitor's view of the job; nullopt while nothing has been reported.
  std::optional<v1::GetJobHealthResponse> health;
  // The job's workers and parameter servers as they are now (alive: running as
  // desired; node: where).
  std::vector<policy::WorkerState> members;
  // Every node the job may use (spare: free to take a restarted member), with
  // what the backend knows of it beyond this job (chronic, avoid, expected
  // slowdown: a cluster's node memory; the defaults when none): the loop adds
  // what its own memory (LoopOptions::node_memory) says, never less.
  std::vector<policy::NodeState> nodes;
  double remaining_seconds = -1;  // the job's ETA at its current throughput; -1 unknown
  // Parameter servers that moved and serve from their new place (announced
  // once per incarnation); a backend without moves has none.
  std::vector<ServerServing> servers_serving;
};

// What the loop asks of the place a job runs in: carrying out and recording.
// Every call comes from the loop's thread.
class Backend {
 public:
  virtual ~Backend() = default;

  // ---- Execute
  // Stops `member` and starts it again as incarnation member.incarnation + 1
  // on restart.to_node: at once (processes: the backend calls Retire between
  // the two), or by committing the new incarnation (pods: the reconciler's
  // writes delete the old pod, retire it once gone, and create the new one).
  virtual absl::Status RestartElsewhere(const policy::WorkerState& member,
                                        const policy::KillRestart& restart) = 0;
  // Delivers `directive` to the agent of `node`; false when it is not connected.
  virtual bool SendDirective(const std::string& node, const v1::Directive& directive) = 0;
  // Tells the parameter servers that `worker` left (a step no longer waits for it).
  virtual void LeaveParameterServers(const std::string& worker) = 0;
  // Returns the shards `worker` holds under `incarnation` to the queue now,
  // rather than at lease expiry.
  virtual absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) = 0;
  // A decision was carried out (or tried, `outcome`): logs, Events, reports,
  // metrics.
  virtual void RecordAction(const policy::Decision& decision, Outcome outcome) = 0;
  // The time ledger's increments for the view just observed (metrics).
  virtual void RecordTime(const TimeDelta& /*delta*/) {}
  // A decision recommended and not carried out (LoopOptions::mode Recommend).
  virtual void RecordRecommendation(const Recommendation& /*recommendation*/) {}
  // An action the plan passed over (its line in Plan::skipped), and why.
  virtual void RecordSkipped(const std::string& /*line*/, policy::SkipReason /*reason*/) {}
  // The job's action budget used so far, as the policy counts it against
  // maxActions (policy::BudgetUsed of the history): after the first
  // Execute, and after each that carried out a decision.
  virtual void RecordBudgetUsed(int /*used*/) {}

  // A member that stopped for good under `incarnation`: the parameter servers
  // stop waiting for it and its shards go back to the queue.
  absl::Status Retire(const std::string& worker, int32_t incarnation);
};

// A directive and the node whose agent delivers it.
struct Delivery {
  std::string node;
  v1::Directive directive;
  int32_t incarnation = 0;  // the member's, as observed: an ADJUST_BS delivered counts for it
  // A committed batch re-delivered: passed over when the member was sent
  // another batch between the Step that built it and its Apply.
  bool redelivery = false;
  uint64_t sent_before = 0;  // redelivery: the member's delivery count at the Step
};

// A decision and what carrying it out takes, as data.
struct Effect {
  policy::Decision decision;
  // What it saves, as predicted when decided: the time its subject's
  // slowdown would cost the job's remaining time at its pace now
  // (remaining x (1 - 1/score)), or the policy's own estimate (a restart's
  // saved_seconds); 0 for a decision about no straggler. Its cost: a
  // restart's (the loop's model), 0 for a batch change.
  double predicted_saving_seconds = 0;
  double cost_seconds = 0;
  std::optional<Delivery> delivery;  // ADJUST_BS to a member running on a node
  // KILL_RESTART: the member as observed (nullopt: not a member; Apply fails).
  std::optional<policy::WorkerState> restart;
};

// A member whose part in the job ended outside the loop's decisions, by its
// backend's own writes (the operator: a worker removed by a scale, once its
// pod is gone; a restarted worker's earlier pod gone): the parameter servers
// stop waiting for it, and/or its shards go back to the queue.
struct Departure {
  std::string worker;
  int32_t incarnation = 0;  // release_shards: this one and older are fenced
  bool leave_servers = false;
  bool release_shards = false;
};

// One step's output: what was decided and every effect of it.
struct Ready {
  bool decided = false;  // the policy ran (a turn was due, the Monitor had a view)
  // Mode Recommend: Apply carries nothing out, and a backend persists none
  // of the decisions as taken (the operator commits none to the status).
  bool recommend_only = false;
  policy::Plan plan;            // what it decided and passed over
  std::vector<Effect> effects;  // one per plan.decisions, in order
  // Of no decision: the backend's own batch changes (a scale), server moves,
  // batches re-delivered; in this order.
  std::vector<Delivery> deliveries;
  std::vector<Departure> departures;  // the backend's own (Step adds none)
};

struct LoopOptions {
  std::string job;
  std::string namespace_;         // the job's; directives carry it (jobs are namespace/name)
  policy::PolicySpec policy;      // valid (policy::Validate)
  int64_t global_batch_size = 0;  // <= 0: the sum of the current local batches
  int64_t window_ms = 10'000;     // the Monitor's window: a restarted member is seen after it
  int64_t interval_ms = 10'000;   // how often Step decides
  // Re-deliver each worker's committed batch to an incarnation that has not
  // been sent it (a backend whose members start from the job's spec, or whose
  // directives are lost with the process that sent them: the operator). The
  // runner starts each incarnation with its batch and needs none.
  bool redeliver_batches = false;
  // kRecommend: observe and decide as usual, carry nothing out: each decision
  // goes to Backend::RecordRecommendation (and to the history, so that its
  // cool-downs and budget hold as they would have).
  vocab::Mode mode = vocab::Mode::kAct;
  // Added to every restart's cost: in a job without parameter servers (an
  // AllReduce group) a restarted rank stalls every rank until the group has
  // re-formed around it; kDefaultRegroupSeconds there, 0 for a job with
  // parameter servers (a restarted worker only leaves and rejoins the barrier).
  double regroup_seconds = 0;
  // What AntDT saw on each node across jobs (borrowed; a fleet, or a backend
  // that keeps it). Null: the loop keeps its own, for this job. Each turn the
  // loop folds the Monitor's straggler records in and gives the policy each
  // node's estimate (policy::NodeState).
  nodememory::NodeMemory* node_memory = nullptr;
};

// The regroup cost of a job without parameter servers: a torch.distributed
// group re-forming after one rank restarted (the survivors see the rank gone,
// tear down and rendezvous again, the restarted rank imports torch and joins)
// takes a few seconds on one machine; 5 s is a round figure above that, to be
// measured per job (jobconfig::RegroupSeconds).
inline constexpr double kDefaultRegroupSeconds = 5.0;

// The least a relaunch costs, and what is assumed before one was measured:
// after it is alive again a member still pulls the parameters and rejoins the
// step barrier, which no backend observes; about a second for the demo
// trainer on the local runner (docs/straggler-benchmark.md). A pod that takes
// longer to be scheduled and started is measured.
inline constexpr double kMinRelaunchSeconds = 1.0;

class ControlLoop {
 public:
  // `backend` and `clock` are borrowed and must outlive the loop.
  ControlLoop(LoopOptions options, Backend* backend, const Clock* clock);

  // Decisions already taken for this job (a backend rebuilding them after its
  // own restart); appended to the history.
  void Seed(std::vector<policy::Decision> decisions);
  // Without reasons and evidence (Remember).
  const policy::History& history() const { return history_; }

  // Whether a decision is due at `now_ms` with the Monitor at
  // `windows_closed` (every interval_ms, or at once when the Monitor closed a
  // window since the last turn): a backend gathers the Monitor's view, the
  // nodes and the ETA into its Observation only then.
  bool Due(int64_t now_ms, int64_t windows_closed) const;
  // Due(), and the next turn is then scheduled. Step takes its turn itself; a
  // backend calls it once at the start to place the first decision one
  // interval in.
  bool TakeTurn(int64_t now_ms, int64_t windows_closed);
  // The policy's input from `now` (the history not in it: Step lends its
  // own); nullopt while the Monitor has nothing on the job. Step's first part
  // in a turn: it measures the relaunches `now` shows done and accrues the
  // time ledger. Takes now.health (thousands of workers' a turn), copies the
  // rest.
  std::optional<policy::Observed> PolicyInput(Observation& now);
  std::optional<policy::Observed> PolicyInput(Observation&& now) { return PolicyInput(now); }
  // The one call of the policy: policy::Decide over `observed`.
  policy::Plan Decide(const policy::Observed& observed) const;

  // Decide on `now` when due, and the effects of what was decided, with the
  // deliveries due whether or not a decision was (server moves, re-deliveries).
  // `may_decide` false: the backend holds decisions back (a job not running
  // yet, suspended or finished); the deliveries are still due. Changes
  // nothing outside the loop but directive versions and what it measured.
  Ready Step(Observation now, bool may_decide = true);
  // Carries out `ready` (from the last Step, its decisions persisted where the
  // backend keeps them, and the backend's own departures and batch changes
  // added): the departures first, then reports the plan's skipped actions,
  // carries out each effect in order and adds its decision to the history (so
  // it counts for cool-downs and budgets), then sends the other deliveries.
  // Stops at the first error: the decisions before it are in the history, the
  // rest are not.
  absl::Status Apply(const Ready& ready);
  // Sends `delivery` through the backend, counting an ADJUST_BS delivered
  // for the member's incarnation (it is not re-delivered); false when its
  // agent is not connected.
  bool Deliver(const Delivery& delivery);

  // Seconds a restart costs under the model above (of a worker, or of a
  // parameter server).
  double RestartCostSeconds(vocab::Role role = vocab::Role::kWorker) const;
  // Restarts measured so far (workers and servers).
  int measured_restarts() const { return measured_[0].restarts + measured_[1].restarts; }
  // An ADJUST_BS directive for `worker`: its committed local batch and
  // accumulation steps again (a backend re-delivering what was decided but not
  // delivered, or not seen by a worker's new incarnation), at a new version.
  v1::Directive BatchDirective(const std::string& worker, int64_t local_batch_size,
                               int32_t accumulation_steps, const std::string& reason);
  // Time lost to stragglers and saved by the actions so far (time_ledger.h),
  // accrued at each turn.
  const TimeLedger& time_ledger() const { return time_ledger_; }

 private:
  absl::Status ApplyOne(const Effect& effect);
  // Appends `decision` to the history and its index: what the policies read
  // of it (its action, time, policy, rule, subject and cause), not its reason
  // or evidence, which the backend recorded. A job of 10,000 workers takes
  // some 200,000 decisions; kept whole they held 800 MB in the simulator.
  void Remember(const policy::Decision& decision);
  // The effects of `plan`, decided on `observed`, for `members` as observed.
  std::vector<Effect> Effects(const policy::Plan& plan, const policy::Observed& observed,
                              const std::vector<policy::WorkerState>& members);
  // Parameter server `s` serves from its new place: a directive for each
  // worker of `members` that runs on a node, pointing it there between two
  // steps (one that pushes to the old server first is sent on by it).
  void Announce(const ServerServing& s, const std::vector<policy::WorkerState>& members,
                std::vector<Delivery>* out);
  // Each running worker's committed batch, to an incarnation not sent it, but
  // for the workers `ready` already sizes.
  void Redeliver(const std::vector<policy::WorkerState>& members, Ready* ready);
  // A directive to `worker` of this job, at the next version, with no action yet.
  v1::Directive NewDirective(const std::string& worker, const std::string& reason);
  // Above every version the loop has used, and not below the clock's now (a
  // loop rebuilt after a restart of its backend still outranks its past).
  int64_t NextDirectiveVersion();
  void MeasureRelaunches(const std::vector<policy::WorkerState>& members, int64_t now_ms);
  // Folds the records of `health` that changed since the last turn into the
  // node memory, and sets each of `nodes` to what the memory says of it.
  void RememberNodes(const v1::GetJobHealthResponse& health, std::vector<policy::NodeState>* nodes);

  const LoopOptions options_;
  Backend* const backend_;
  const Clock* const clock_;
  policy::History history_;
  policy::HistoryIndex history_index_;  // of history_, kept as it grows (Remember)
  int64_t next_run_ms_ = 0;
  int64_t windows_seen_ = -1;   // Observation::windows_closed at the last turn
  int64_t window_ms_seen_ = 0;  // the Monitor's window length, as its health last said
  int64_t directive_version_ = 0;
  // Per worker: the last ADJUST_BS delivered (incarnation, batch, steps) and
  // how many were.
  struct Sent {
    int32_t incarnation = -1;
    int64_t batch = 0;
    int32_t steps = 0;
    uint64_t count = 0;
  };
  std::unordered_map<std::string, Sent> sent_;
  std::map<std::string, int32_t> announced_;  // per moved server, the incarnation announced
  bool budget_reported_ = false;              // RecordBudgetUsed since the last Seed
  // Restarts in flight: member id -> (incarnation it restarts from, when).
  std::map<std::string, std::pair<int32_t, int64_t>> relaunching_;
  struct Measured {
    int restarts = 0;
    double seconds = 0;
  };
  Measured measured_[2];  // [0] workers, [1] parameter servers
  TimeLedger time_ledger_;
  std::optional<nodememory::NodeMemory> own_memory_;  // when LoopOptions has none
  nodememory::NodeMemory* memory_ = nullptr;
  // Per episode (worker, start): its end and whether it was active, as last
  // folded in; an episode re-sent unchanged is not folded again.
  std::map<std::pair<std::string, int64_t>, std::pair<int64_t, bool>> remembered_;
};

}  // namespace antdt::loop
