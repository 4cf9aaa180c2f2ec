// Mitigation by expected duration (issue 43): for one straggler, how long its
// slowdown is expected to last from here, and the action with the least
// expected loss of job time — ride it out, ADJUST_BS, or KILL_RESTART — the
// ski-rental choice FALCON and Greyhound make in research code. Pure.
// antdt-nd weighs its restarts with it (spec.stragglerPolicy.decideBy
// expectedDuration, the default; see planner_nd.cc).
//
// Expected remaining duration D, capped at the job's remaining time:
//   - a DETERMINISTIC straggler, or one on a node the memory calls chronic:
//     the rest of the job (its hardware or its neighbours stay);
//   - otherwise max(expected - elapsed, elapsed): at least what the node's
//     history (core/nodememory) says is left, and a slowdown that has lasted
//     t is expected to last about t more (the longer it has gone on, the
//     longer it will). On a node with no history (expected 0) this is the
//     ski-rental break-even rule: keep paying the smaller loss until what it
//     has cost reaches the restart's cost, then restart — never more than
//     twice the loss of the best choice made in hindsight.
// Expected loss over D, in seconds of job time, for a worker s times slower
// among n:
//   - ride out: the job runs at the straggler's pace, D x (1 - 1/s') with s'
//     the slowdown the step deadline leaves (min(s, deadline) when one is
//     set);
//   - ADJUST_BS: the straggler's share moves to its peers, D x r, where r is
//     the fraction of the job's throughput a restart would buy back from the
//     balanced job (the policy's measured figure, shard tail included), or
//     (1 - 1/s) / n when not given;
//   - KILL_RESTART: its measured cost, and only with more than that left of
//     the job (near the end nothing is restarted). It is chosen when the
//     least of the other two exceeds min_saving_ratio x its cost.
// Riding out is chosen only when it loses strictly less than ADJUST_BS (with
// nothing known yet, D = 0, the straggler's batch is still sized).
#pragma once

#include <string>

#include "antdt/v1/monitor.pb.h"

namespace antdt::policy {

struct DurationInput {
  v1::StragglerClass straggler_class = v1::TRANSIENT;
  double slowdown = 1;         // how much slower per sample than its peers
  double elapsed_seconds = 0;  // since its slowdown began
  // A slowdown's expected length on its node (the node memory's estimate);
  // 0: no history, D = elapsed (the break-even rule).
  double node_expected_seconds = 0;
  bool node_chronic = false;        // the node memory's verdict
  double remaining_seconds = -1;    // the job's; < 0: unknown
  double restart_cost_seconds = 0;  // measured (RestartCostSeconds)
  double step_deadline = 0;         // spec.stragglerPolicy.stepDeadline in force; 0: none
  int workers = 1;                  // in the job
  // The fraction of throughput lost per second while it stays (compensated)
  // rather than restarting; < 0: (1 - 1/slowdown) / workers.
  double adjust_loss_rate = -1;
  double min_saving_ratio = 1;  // spec.stragglerPolicy.minSavingRatio
};

enum class DurationAction { kRideOut, kAdjustBatch, kKillRestart };
const char* Name(DurationAction a);

struct DurationChoice {
  DurationAction action = DurationAction::kRideOut;
  double expected_remaining_seconds = 0;
  // Expected seconds of job time lost by each; a restart not possible: < 0.
  double loss_ride_out = 0, loss_adjust = 0, loss_restart = -1;
  std::string why;  // for the decision's record: the duration, the losses, the choice
};

DurationChoice ChooseByExpectedDuration(const DurationInput& in);

}  // namespace antdt::policy
