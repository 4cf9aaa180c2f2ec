// A fleet simulation (`antdt sim --fleet`): jobs of different sizes arriving
// over time on a pool of shared nodes, some of them chronically slow (noisy
// neighbours that stay: the paper's non-dedicated setting), placed by a
// first-come-first-served scheduler, each job run by the simulator (the real
// Monitor, control loop and policies, as `antdt sim` runs one). The same
// arrivals, sizes and slowdowns are run four ways:
//   - without node memory: each job's loop remembers only its own job, and
//     the scheduler places a job on free nodes at random;
//   - with node memory: one memory for the fleet (core/nodememory), fed each
//     job's straggler records when it ends; the scheduler gives a job the
//     free nodes it least avoids (chronic ones last; the least avoided of
//     all are its spares, where a worker on a marked node is moved), and each job's loop
//     reads it (a slowdown on a chronic node is expected to last, so it is
//     moved at once; a restart never lands on a chronic node);
//   - oracle: a memory that knows the slow nodes from the start (the limit);
//   - ideal: no slow node and no transient slowdown, what each job's
//     slowdown is measured against (its completion time, queueing included,
//     over its completion time here).
//
// The fleet file (every field optional but `job`; errors name the field):
//   name: shared-pool
//   job: fleet-job.yaml          # the AntDTJob each job runs (relative to this file)
//   pool:
//     nodes: 48
//     slowNodes: 6               # chronically slow, drawn per seed
//     slowFactor: [2, 4]         # how much slower each is (a value or [min, max])
//   jobs:
//     count: 30
//     arrivalEvery: 20s          # mean time between arrivals (exponential draws)
//     workers: [4, 16]           # each job's workers, drawn uniformly; its dataset
//                                # grows with them (the job's records per worker)
//     spares: 2                  # nodes a job holds for its restarts
//     restart: 30s               # what a restart takes (a pod rescheduled and started)
//     transientChance: 0.3       # a job meets a transient slowdown on one of its nodes
//     transientFactor: [2, 4]
//     transientStart: [0s, 30s]
//     transientDuration: [5s, 20s]
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"

namespace antdt::sim {

struct FleetSpec {
  std::string name = "fleet";
  std::string job;  // the job manifest's path, as the file gives it
  int32_t nodes = 48;
  int32_t slow_nodes = 6;
  double slow_factor_min = 2, slow_factor_max = 4;
  int32_t jobs = 30;
  int64_t arrival_every_ms = 20'000;
  int32_t workers_min = 4, workers_max = 16;
  int32_t spares = 2;
  // From a KILL_RESTART to the new incarnation's first step: a pod deleted,
  // scheduled, pulled and started again, its framework initialised.
  int64_t restart_ms = 30'000;
  double transient_chance = 0.3;
  double transient_factor_min = 2, transient_factor_max = 4;
  int64_t transient_start_min_ms = 0, transient_start_max_ms = 30'000;
  int64_t transient_duration_min_ms = 5'000, transient_duration_max_ms = 20'000;
};

// The fleet file; InvalidArgument naming the field (an unknown field, a
// negative or zero rate, a job larger than the pool), and nothing else.
absl::StatusOr<FleetSpec> ParseFleet(const std::string& yaml);

enum class FleetMode { kWithout, kWith, kOracle, kIdeal };
// "without_node_memory", "with_node_memory", "oracle", "ideal".
const char* Name(FleetMode mode);

struct FleetJob {
  int32_t workers = 0;
  double arrival_seconds = 0;
  double start_seconds = 0;
  double jct_seconds = 0;  // finish - arrival: its queueing and its run
  int restarts = 0;
  int on_slow_nodes = 0;  // of its workers, placed on a slow node
  bool exactly_once = true;
};

struct FleetResult {
  FleetMode mode = FleetMode::kWithout;
  uint64_t seed = 0;
  std::vector<FleetJob> jobs;  // in arrival order
  double total_jct_seconds = 0;
  double makespan_seconds = 0;  // the last job's end
  int restarts = 0;
  int placed_on_slow_nodes = 0;  // workers, over every job
  bool exactly_once = true;
  double wall_seconds = 0;
};

// The fleet run one way with `seed` (arrivals, sizes, slow nodes and
// transients drawn from it, the same for every mode). `job` is the template
// (its workers.replicas and dataset.records are set per job; its policy runs).
absl::StatusOr<FleetResult> RunFleet(const FleetSpec& spec, const manifest::Job& job,
                                     FleetMode mode, uint64_t seed);

// Each job's slowdown: its JCT over the same job's JCT in `ideal` (the same
// seed), in arrival order.
std::vector<double> Slowdowns(const FleetResult& run, const FleetResult& ideal);

}  // namespace antdt::sim
