// A discrete-event simulator of a synchronous data-parallel job driving the
// real control plane: the Monitor (core/monitor), the control loop and its
// policies (core/loop, core/policy) and the sharding ledger
// (sharding-service, over a MemoryStore), all through an injected clock. It
// is the control loop's third backend, beside `antdt run` (processes) and the
// operator (pods): two cores cannot run a thousand workers, a simulation can.
//
// The step model (a parameter-server job, as the demo trainer runs it):
// every step each live worker takes its local batch from its shard leases
// (acquiring from the ledger as they run out) and computes it in
//   batch x deviceTimePerSample / speed(node, t) x (1 + jitter draw)
// where speed is the scenario's (node speed over the factors of the slowdowns
// active at t); the step lasts as long as the slowest worker's compute, plus
// a fixed communication time (push, barrier, pull). Each worker's step is a
// StepReport to the Monitor (its BPT is its compute: the wait at the barrier
// is not its own), and its records are committed to the ledger at the end of
// the step (ReportProgress, CompleteShard when a shard is done). A worker
// with no record left to take joins the step with none.
//
// The control loop decides every interval, as in the other backends:
// ADJUST_BS takes effect at the worker's next step; KILL_RESTART stops the
// worker at once (its uncommitted records go back to the queue, released by
// the loop's Retire), and starts it relaunch_seconds later as the next
// incarnation on the spare node, with regroup_seconds more for the job
// (jobconfig::RegroupSeconds). A job without parameter servers (AllReduce)
// stalls every worker through a restart.
//
// Not modelled: parameter servers' own speed (their moves are refused),
// backup workers (the decision is recorded, the step still waits for all).
//
// Thread-compatible; each Simulate() call is independent.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"
#include "api/vocab/vocab.h"
#include "core/nodememory/node_memory.h"
#include "core/policy/policy.h"

namespace antdt::sim {

struct SimOptions {
  vocab::Policy policy = vocab::Policy::kNone;
  bool no_slowdown = false;  // drop the scenario's slowdowns (the ideal run)
  uint64_t seed = 1;
  // Each worker's compute in each step is scaled by a uniform draw in
  // [1 - jitter, 1 + jitter] (the seed's): the noise of real machines.
  double jitter = 0.05;
  // Push, barrier and pull of one step, on top of the slowest compute.
  double communication_seconds = 0.003;
  // From a KILL_RESTART to the new incarnation's first step.
  double relaunch_seconds = 1.0;
  // A simulated job longer than this is stopped (an error).
  double max_seconds = 86'400;
  // The Unix time (ms) at which the job starts: the Monitor's and the
  // ledger's clocks start there (a fleet's jobs start at different times).
  int64_t start_unix_ms = 1'700'000'000'000;
  // The node memory the control loop reads and feeds (borrowed; a fleet's).
  // Null: the loop keeps its own, for this job.
  nodememory::NodeMemory* node_memory = nullptr;
};

struct SimResult {
  std::string policy;  // its name; "no-slowdown" for the ideal run
  uint64_t seed = 0;
  double jct_seconds = 0;  // simulated
  int64_t steps = 0;
  int64_t records = 0;            // the dataset's, over every epoch
  int64_t records_committed = 0;  // by the ledger
  int64_t duplicates = 0;         // records committed more than once (must be 0)
  int64_t missing = 0;            // records never committed (must be 0)
  // Carried out, at the loop's clock (job ms); each without its reason and
  // evidence, which no result shows (a 10,000-worker job carries out hundreds
  // of thousands).
  ::antdt::policy::History actions;
  int restarts = 0;
  // Actions the policy considered and passed over, by reason ("cooldown",
  // "cost_above_saving", ...: policy::SkipReasonName).
  std::map<std::string, int64_t> skipped;
  double estimated_saved_seconds = 0;  // the control loop's time ledger
  double estimated_lost_seconds = 0;
  // What the control plane sustained, per simulated second and in total.
  int64_t step_reports = 0;
  int64_t ledger_calls = 0;  // acquire, progress, complete, release
  double wall_seconds = 0;   // the simulation's own running time
  // The real ideal under the scenario's slowdowns: every step's global batch
  // spread over the workers' nodes by their speed at that moment (no tail, no
  // detection delay, no spare nodes), plus the communication time; what no
  // policy can beat without moving work to faster nodes.
  double capacity_bound_seconds = 0;
  // Steps the step deadline cut (spec.stragglerPolicy.stepDeadline), one per
  // worker cut, and the samples they took into a later step.
  int64_t cut_steps = 0;
  int64_t cut_samples = 0;
  // Leases the ledger ended before their shard's end (its GetProgress).
  int64_t leases_shortened = 0;
  // The Monitor's straggler records at the end of the job: what a fleet's
  // node memory learns from it.
  std::vector<v1::StragglerRecord> stragglers;

  bool exactly_once() const { return duplicates == 0 && missing == 0; }
};

// Runs `job` on `scenario`'s nodes (worker i on the i-th non-spare worker
// node) under options.policy. Errors name the manifest field (too few nodes)
// or say where the run stopped.
absl::StatusOr<SimResult> Simulate(const manifest::Job& job, const manifest::Scenario& scenario,
                                   const SimOptions& options);

// A scenario of `workers` worker nodes and `spares` spare nodes drawn from
// `spec` with `seed`: the stragglers the paper names, in proportions.
struct StragglerMix {
  double deterministic_fraction = 0;  // nodes slower from the start (older hardware)
  double deterministic_factor = 1.5;
  double transient_fraction = 0;  // nodes slowed for a while, once
  double transient_factor_min = 2, transient_factor_max = 4;
  int64_t transient_start_min_ms = 0, transient_start_max_ms = 60'000;
  int64_t transient_duration_min_ms = 5'000, transient_duration_max_ms = 20'000;
  double persistent_fraction = 0;  // nodes slowed from some time on, for good
  double persistent_factor_min = 2, persistent_factor_max = 5;
  int64_t persistent_start_min_ms = 0, persistent_start_max_ms = 30'000;
  double leader_fraction = 0;  // nodes faster than the rest
  double leader_speed = 1.5;
};
manifest::Scenario GenerateScenario(const std::string& name, int32_t workers, int32_t spares,
                                    const StragglerMix& mix, uint64_t seed);

}  // namespace antdt::sim
