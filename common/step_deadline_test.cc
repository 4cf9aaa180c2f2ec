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
  std::vector<double> three = {1, 1, 1};  // fewer than kMinWorkers
  fit.AddStep(three);
  EXPECT_FALSE(fit.Spread().has_value());
  EXPECT_DOUBLE_EQ(fit.Factor(), 1.25);
  std::vector<double> bad = {1, 1, std::numeric_limits<double>::quiet_NaN(), 0, -1};
  fit.AddStep(bad);  // two usable times
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

// Up to half of the workers straggling do not widen it: the spread is the
// median absolute deviation.
TEST(DeadlineFitTest, AStragglingMinorityDoesNotLoosenIt) {
  std::mt19937 rng(2);
  DeadlineFit fit(1.1, 1.25);
  for (int s = 0; s < 20; ++s) {
    std::vector<double> t = Step(rng, 8, 0.02, /*slow=*/3, /*factor=*/4);
    fit.AddStep(t);
  }
  EXPECT_DOUBLE_EQ(fit.Factor(), 1.1);
}

// Between the floor and the ceiling: 1 + kSpreads x the smoothed spread.
TEST(DeadlineFitTest, InBetweenItIsThreeSpreadsAboveTheMedian) {
  DeadlineFit fit(1.1, 1.25);
  std::vector<double> t = {0.96, 0.98, 1.0, 1.02, 1.04};  // deviations .04 .02 0 .02 .04
  fit.AddStep(t);
  EXPECT_NEAR(*fit.Spread(), 0.02, 1e-12);
  EXPECT_NEAR(fit.Factor(), 1.1, 1e-12);
  std::vector<double> wide = {0.7, 0.9, 1.0, 1.1, 1.3};  // spread 0.1
  fit.AddStep(wide);
  EXPECT_NEAR(*fit.Spread(), 0.8 * 0.02 + 0.2 * 0.1, 1e-12);
  EXPECT_NEAR(fit.Factor(), 1 + DeadlineFit::kSpreads * 0.036, 1e-12);
  DeadlineFit low_ceiling(1.1, 1.05);  // a floor above the ceiling: the ceiling
  low_ceiling.AddStep(t);
  EXPECT_DOUBLE_EQ(low_ceiling.Factor(), 1.05);
}

}  // namespace
}  // namespace antdt
