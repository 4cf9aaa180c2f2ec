#include "common/step_deadline.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace antdt {
namespace {

// One step of `n` workers at 1 +- `jitter` (uniform), the first `slow` of
// them `factor` times slower.
std::vector<double> Step(std::mt19937& rng, int n, double jitter, int slow = 0, double factor = 1) {
  std::uniform_real_distribution<double> u(1 - jitter, 1 + jitter);
  std::vector<double> times;
  for (int i = 0; i < n; ++i) times.push_back(u(rng) * (i < slow ? factor : 1));
  return times;
}

TEST(DeadlineFitTest, TheCeilingUntilAStepWasMeasured) {
  DeadlineFit fit(1.1, 1.25);
  EXPECT_DOUBLE_EQ(fit.Factor(), 1.25);
  std::vector<double> eight(8, 1.0);  // fewer than kMinWorkers: paper-mix's 8 workers
  fit.AddStep(eight);
  EXPECT_FALSE(fit.Spread().has_value());
  EXPECT_DOUBLE_EQ(fit.Factor(), 1.25);
  std::vector<double> bad(15, 1.0);  // 15 usable times and three not
  bad.insert(bad.end(), {std::numeric_limits<double>::quiet_NaN(), 0, -1});
  fit.AddStep(bad);
  EXPECT_DOUBLE_EQ(fit.Factor(), 1.25);
}

// Healthy workers within +-5%: a deadline at 1.1 clears every one of them,
// so the fit goes to its floor; within +-20% it stays at the ceiling.
TEST(DeadlineFitTest, EvenStepsGetTheFloorUnevenOnesTheCeiling) {
  std::mt19937 rng(1);
  DeadlineFit even(1.1, 1.25), uneven(1.1, 1.25);
  for (int s = 0; s < 20; ++s) {
    std::vector<double> a = Step(rng, 1000, 0.05), b = Step(rng, 1000, 0.20);
    even.AddStep(a);
    uneven.AddStep(b);
  }
  EXPECT_DOUBLE_EQ(even.Factor(), 1.1);
  EXPECT_NEAR(*even.Spread(), 0.025, 0.003);
  EXPECT_DOUBLE_EQ(uneven.Factor(), 1.25);
}

// Nearly half of the workers straggling do not widen it: the spread is the
// median absolute deviation.
TEST(DeadlineFitTest, AStragglingMinorityDoesNotLoosenIt) {
  std::mt19937 rng(2);
  DeadlineFit fit(1.1, 1.25);
  for (int s = 0; s < 20; ++s) {
    std::vector<double> t = Step(rng, 16, 0.02, /*slow=*/7, /*factor=*/4);
    fit.AddStep(t);
  }
  EXPECT_DOUBLE_EQ(fit.Factor(), 1.1);
}

// Between the floor and the ceiling: 1 + kSpreads x the smoothed spread.
TEST(DeadlineFitTest, InBetweenItIsThreeSpreadsAboveTheMedian) {
  DeadlineFit fit(1.1, 1.25);
  // Seventeen workers around 1: one at it, eight `d` away and eight `far`.
  auto around = [](double d, double far) {
    std::vector<double> t = {1};
    for (int i = 0; i < 8; ++i) t.push_back(i % 2 ? 1 + d : 1 - d);
    for (int i = 0; i < 8; ++i) t.push_back(i % 2 ? 1 + far : 1 - far);
    return t;
  };
  std::vector<double> t = around(0.02, 0.04);
  fit.AddStep(t);
  EXPECT_NEAR(*fit.Spread(), 0.02, 1e-12);
  EXPECT_NEAR(fit.Factor(), 1.1, 1e-12);
  std::vector<double> wide = around(0.1, 0.3);  // spread 0.1
  fit.AddStep(wide);
  EXPECT_NEAR(*fit.Spread(), 0.8 * 0.02 + 0.2 * 0.1, 1e-12);
  EXPECT_NEAR(fit.Factor(), 1 + DeadlineFit::kSpreads * 0.036, 1e-12);
  DeadlineFit low_ceiling(1.1, 1.05);  // a floor above the ceiling: the ceiling
  t = around(0.02, 0.04);
  low_ceiling.AddStep(t);
  EXPECT_DOUBLE_EQ(low_ceiling.Factor(), 1.05);
}

}  // namespace
}  // namespace antdt
