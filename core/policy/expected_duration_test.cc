#include "core/policy/expected_duration.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace antdt::policy {
namespace {

// The rule's table (issue 43): a short transient is ridden out or
// batch-adjusted; a long persistent one is restarted once the expected saving
// exceeds the cost; a node the memory calls chronic shortens the wait; near
// the end of a job nothing is restarted.
TEST(ExpectedDurationTest, TheRulesTable) {
  DurationInput base;  // 8 workers, 1.3 s to restart, 200 s of the job left, deadline 1.25
  base.workers = 8;
  base.restart_cost_seconds = 1.3;
  base.remaining_seconds = 200;
  base.step_deadline = 1.25;
  base.node_expected_seconds = 5;
  struct Case {
    std::string name;
    DurationInput in;
    DurationAction want;
    double want_duration;
  };
  auto with = [&](auto edit) {
    DurationInput in = base;
    edit(in);
    return in;
  };
  const std::vector<Case> cases = {
      {"a short transient, 1 s in: batch-adjusted", with([](DurationInput& i) {
         i.slowdown = 3;
         i.elapsed_seconds = 1;
       }),
       DurationAction::kAdjustBatch, 4},
      {"a short transient alone in its job: nothing to move, ridden out",
       with([](DurationInput& i) {
         i.slowdown = 3;
         i.elapsed_seconds = 1;
         i.workers = 1;
       }),
       DurationAction::kRideOut, 4},
      {"a persistent 4x, 0.5 s in: 4.5 s expected, adjusting loses less than a restart",
       with([](DurationInput& i) {
         i.straggler_class = v1::PERSISTENT;
         i.slowdown = 4;
         i.elapsed_seconds = 0.5;
       }),
       DurationAction::kAdjustBatch, 4.5},
      {"the same, 12 s in: 12 s expected, still below the cost", with([](DurationInput& i) {
         i.straggler_class = v1::PERSISTENT;
         i.slowdown = 4;
         i.elapsed_seconds = 12;
       }),
       DurationAction::kAdjustBatch, 12},
      {"the same, 20 s in: 20 s expected, the saving exceeds the cost: restarted",
       with([](DurationInput& i) {
         i.straggler_class = v1::PERSISTENT;
         i.slowdown = 4;
         i.elapsed_seconds = 20;
       }),
       DurationAction::kKillRestart, 20},
      {"the same 0.5 s in on a chronically slow node: the rest of the job, restarted at once",
       with([](DurationInput& i) {
         i.straggler_class = v1::PERSISTENT;
         i.slowdown = 4;
         i.elapsed_seconds = 0.5;
         i.node_chronic = true;
       }),
       DurationAction::kKillRestart, 200},
      {"deterministic: the rest of the job", with([](DurationInput& i) {
         i.straggler_class = v1::DETERMINISTIC;
         i.slowdown = 1.5;
       }),
       DurationAction::kKillRestart, 200},
      {"near the end, chronic and 4x: nothing restarted with 1 s left", with([](DurationInput& i) {
         i.straggler_class = v1::PERSISTENT;
         i.slowdown = 4;
         i.node_chronic = true;
         i.remaining_seconds = 1;
       }),
       DurationAction::kAdjustBatch, 1},
      {"the job's remaining time unknown: never a restart", with([](DurationInput& i) {
         i.straggler_class = v1::DETERMINISTIC;
         i.slowdown = 4;
         i.remaining_seconds = -1;
       }),
       DurationAction::kAdjustBatch, 5},
  };
  for (const Case& c : cases) {
    const DurationChoice got = ChooseByExpectedDuration(c.in);
    EXPECT_EQ(Name(got.action), std::string(Name(c.want))) << c.name << ": " << got.why;
    EXPECT_NEAR(got.expected_remaining_seconds, c.want_duration, 1e-9) << c.name;
    EXPECT_NE(got.why.find(Name(c.want)), std::string::npos) << c.name << ": " << got.why;
  }
}

// paper-mix's node-3 (issue 43): a 3x transient among 8 workers on a node
// with no history, weighed with the policy's measured loss rate and the
// job's minSavingRatio 0.5. Ridden with ADJUST_BS for as long as it lasted
// (5 s); restarted only once it had lasted long enough to pay.
TEST(ExpectedDurationTest, NoHistoryIsTheBreakEvenRule) {
  DurationInput in;
  in.straggler_class = v1::PERSISTENT;  // the Monitor's class after 11 windows
  in.slowdown = 3;
  in.workers = 8;
  in.remaining_seconds = 55;
  in.restart_cost_seconds = 1.3;
  in.step_deadline = 1.25;
  in.adjust_loss_rate = 4.34 / 55.5;  // the policy's figure at 9.7 s
  in.min_saving_ratio = 0.5;
  for (double elapsed : {0.5, 3.3, 5.0, 8.0}) {
    in.elapsed_seconds = elapsed;
    const DurationChoice c = ChooseByExpectedDuration(in);
    EXPECT_EQ(c.action, DurationAction::kAdjustBatch) << elapsed << ": " << c.why;
    EXPECT_DOUBLE_EQ(c.expected_remaining_seconds, elapsed);
    EXPECT_NE(c.why.find("no history on its node"), std::string::npos) << c.why;
  }
  in.elapsed_seconds = 9;  // 9 s x 0.078 = 0.70 s > 0.5 x 1.3 s
  DurationChoice c = ChooseByExpectedDuration(in);
  EXPECT_EQ(c.action, DurationAction::kKillRestart) << c.why;
  EXPECT_NE(c.why.find("(x0.5)"), std::string::npos) << c.why;
  in.min_saving_ratio = 1;  // the same with no margin: not yet (0.70 s < 1.3 s)
  c = ChooseByExpectedDuration(in);
  EXPECT_EQ(c.action, DurationAction::kAdjustBatch) << c.why;
  in.node_expected_seconds = 60;  // a node whose slowdowns last a minute: at once
  in.elapsed_seconds = 1;
  c = ChooseByExpectedDuration(in);
  EXPECT_EQ(c.action, DurationAction::kKillRestart) << c.why;
  EXPECT_DOUBLE_EQ(c.expected_remaining_seconds, 55);  // 59 s, capped at the job's rest
}

// The losses behind the choice, which the decision's record shows.
TEST(ExpectedDurationTest, TheLossesAreTheRulesArithmetic) {
  DurationInput in;
  in.straggler_class = v1::TRANSIENT;
  in.slowdown = 4;
  in.elapsed_seconds = 2;
  in.node_expected_seconds = 10;
  in.workers = 4;
  in.remaining_seconds = 100;
  in.restart_cost_seconds = 3;
  DurationChoice c = ChooseByExpectedDuration(in);
  EXPECT_DOUBLE_EQ(c.expected_remaining_seconds, 8);
  EXPECT_DOUBLE_EQ(c.loss_ride_out, 8 * 0.75);
  EXPECT_DOUBLE_EQ(c.loss_adjust, 8 * 0.75 / 4);
  EXPECT_DOUBLE_EQ(c.loss_restart, 3);
  EXPECT_EQ(c.action, DurationAction::kAdjustBatch);  // 1.5 s against 3 s
  in.step_deadline = 1.25;  // the deadline bounds what riding it out costs
  c = ChooseByExpectedDuration(in);
  EXPECT_DOUBLE_EQ(c.loss_ride_out, 8 * 0.2);
  EXPECT_NE(c.why.find("expected to last 8.0s more"), std::string::npos) << c.why;
}

}  // namespace
}  // namespace antdt::policy
