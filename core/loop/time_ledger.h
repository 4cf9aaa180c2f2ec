// What stragglers cost a job and what the Controller's actions won back,
// accrued view by view from the Monitor's per-sample speeds (the Controller's
// estimate, checked against measured runs in docs/benchmarks.md).
//
// Each view of the Monitor gives, per worker i, its batch time bpt_i and its
// own pace c_i (samples per second of its processing time). A synchronous step
// takes as long as its slowest worker, so with B = sum(bpt_i x c_i) samples a
// step, n workers and m = median(c_i):
//   now       T     = max(bpt_i)                 the step as it runs
//   ideal     T_0   = (B / n) / m                 every worker at the median pace
//   untouched T_u   = max((B / n) / c'_i)         equal batches, no restart
// where c'_i is c_i, except for a worker restarted elsewhere: m / its slowdown
// (m / c_i) in the last view before the restart, as if it had stayed on the
// slow node (restarts are made for persistent slowdowns). Over the dt since
// the previous view the job made dt / T steps, which would have taken
// dt x T_0 / T without stragglers and dt x T_u / T without any action:
//   lost  += dt x (1 - T_0 / T)       (>= 0: job seconds lost to stragglers)
//   saved += dt x (T_u / T - 1)       (< 0 when the actions made it slower)
//   worker i lost += dt x max(0, 1 - c_i / m)   (its own capacity lost)
// Under policy none (equal batches, no restarts) T_u = T, so nothing is saved.
// What the model leaves out: a restarted worker's relaunch (it is absent from
// the views until it reports again), and the per-step costs that do not grow
// with the batch (they are inside bpt, so a smaller batch looks slower per
// sample than it is).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "antdt/v1/monitor.pb.h"

namespace antdt::loop {

// One view's increments.
struct TimeDelta {
  double lost_seconds = 0;
  double saved_seconds = 0;  // may be negative
  // Each worker slower than the median: half of a job's workers, every turn
  // (hashed, not a tree of thousands of new nodes).
  absl::flat_hash_map<std::string, double> worker_lost_seconds;
};

class TimeLedger {
 public:
  // Views further apart than this (the job was paused, the loop stalled) add nothing.
  static constexpr int64_t kMaxGapMs = 60'000;

  // A worker restarted elsewhere: its slowdown in the last view is kept as
  // what it would still be without the restart.
  void Restarted(const std::string& worker);
  // The increments since the previous view (none for the first).
  TimeDelta Observe(int64_t now_ms, const v1::GetJobHealthResponse& health);

  double lost_seconds() const { return lost_; }
  double saved_seconds() const { return saved_; }

 private:
  int64_t last_ms_ = -1;
  absl::flat_hash_map<std::string, double> last_slowdown_;  // worker -> m / c_i in the last view
  std::map<std::string, double> restarted_;  // worker -> slowdown kept at its restart
  double lost_ = 0;
  double saved_ = 0;
};

}  // namespace antdt::loop
