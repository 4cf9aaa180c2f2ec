#include "core/loop/time_ledger.h"

#include <gtest/gtest.h>

#include <string>

namespace antdt::loop {
namespace {

// A view of `paces` (samples per second) at `batches` (samples per step).
v1::GetJobHealthResponse View(const std::vector<double>& paces,
                              const std::vector<double>& batches) {
  v1::GetJobHealthResponse h;
  for (size_t i = 0; i < paces.size(); ++i) {
    v1::WorkerHealth* w = h.add_workers();
    w->set_worker_id("worker-" + std::to_string(i));
    w->set_role("worker");
    w->set_samples_per_second(paces[i]);
    w->set_bpt_seconds(batches[i] / paces[i]);
  }
  v1::WorkerHealth* ps = h.add_workers();  // parameter servers have no pace
  ps->set_worker_id("ps-0");
  ps->set_role("ps");
  ps->set_bpt_seconds(5);
  return h;
}

// Four workers at 100 samples/s, one at 25 (4x slower), equal batches of 100:
// steps take 4 s instead of 1 s, so 3/4 of the time is lost, nothing saved.
TEST(TimeLedger, PolicyNoneLosesTimeAndSavesNothing) {
  TimeLedger ledger;
  const auto view = View({100, 100, 100, 25}, {100, 100, 100, 100});
  EXPECT_EQ(ledger.Observe(10'000, view).lost_seconds, 0);  // the first view: no interval
  const TimeDelta d = ledger.Observe(14'000, view);
  EXPECT_DOUBLE_EQ(d.lost_seconds, 3.0);
  EXPECT_DOUBLE_EQ(d.saved_seconds, 0.0);
  EXPECT_DOUBLE_EQ(d.worker_lost_seconds.at("worker-3"), 3.0);
  EXPECT_EQ(d.worker_lost_seconds.count("worker-0"), 0u);
  EXPECT_EQ(d.worker_lost_seconds.count("ps-0"), 0u);
  EXPECT_DOUBLE_EQ(ledger.lost_seconds(), 3.0);
}

// The same speeds with batches in proportion (ADJUST_BS: 400 samples as
// 123,123,123,31): a step takes about 1.24 s; untouched it would take 4 s.
TEST(TimeLedger, BatchesInProportionSaveTheDifference) {
  TimeLedger ledger;
  const auto view = View({100, 100, 100, 25}, {123, 123, 123, 31});
  ledger.Observe(0, view);
  const TimeDelta d = ledger.Observe(10'000, view);
  const double step = 1.24, untouched = 4.0;
  EXPECT_NEAR(d.saved_seconds, 10 * (untouched / step - 1), 1e-9);
  EXPECT_NEAR(d.lost_seconds, 10 * (1 - 1.0 / step), 1e-9);
  // Per sample the straggler is still 4x slower: its capacity is lost, compensated or not.
  EXPECT_DOUBLE_EQ(d.worker_lost_seconds.at("worker-3"), 7.5);
}

// A worker restarted off a 4x slower node runs at the median pace; the ledger
// keeps counting what staying would have cost.
TEST(TimeLedger, ARestartKeepsItsSlowdownAsTheCounterfactual) {
  TimeLedger ledger;
  ledger.Observe(0, View({100, 100, 100, 25}, {100, 100, 100, 100}));
  ledger.Restarted("worker-3");
  ledger.Restarted("worker-9");  // never seen: nothing to keep
  const auto healthy = View({100, 100, 100, 100}, {100, 100, 100, 100});
  const TimeDelta d = ledger.Observe(2'000, healthy);
  EXPECT_DOUBLE_EQ(d.saved_seconds, 2 * (4.0 / 1.0 - 1));
  EXPECT_DOUBLE_EQ(d.lost_seconds, 0.0);
  EXPECT_TRUE(d.worker_lost_seconds.empty());
}

// Actions that made the job slower than untouched cost time: negative savings.
TEST(TimeLedger, WorseThanUntouchedIsNegative) {
  TimeLedger ledger;
  const auto view = View({100, 100, 100, 100}, {50, 50, 50, 250});
  ledger.Observe(0, view);
  EXPECT_DOUBLE_EQ(ledger.Observe(5'000, view).saved_seconds, 5 * (1.0 / 2.5 - 1));
  EXPECT_DOUBLE_EQ(ledger.saved_seconds(), -3.0);
}

TEST(TimeLedger, GapsAndEmptyViewsAddNothing) {
  TimeLedger ledger;
  const auto view = View({100, 25}, {100, 100});
  ledger.Observe(0, view);
  EXPECT_EQ(ledger.Observe(TimeLedger::kMaxGapMs + 1, view).lost_seconds, 0);
  EXPECT_EQ(ledger.Observe(TimeLedger::kMaxGapMs + 1, view).lost_seconds, 0);  // no time passed
  EXPECT_EQ(ledger.Observe(TimeLedger::kMaxGapMs + 1'000, v1::GetJobHealthResponse{}).lost_seconds,
            0);
  EXPECT_EQ(ledger.lost_seconds(), 0);
}

}  // namespace
}  // namespace antdt::loop
