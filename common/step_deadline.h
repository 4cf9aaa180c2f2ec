// The step deadline fitted to the job: spec.stragglerPolicy.stepDeadline left
// unset. A healthy worker's step varies by its own jitter (data, the host, the
// network); a deadline need only clear that. So the deadline is measured: the
// spread of each step's times over the workers that trained in it, as the
// median absolute deviation relative to the median (robust to a straggling
// minority: up to half of the workers may be slow), smoothed over steps; the
// deadline is 1 + kSpreads x that spread, no less than the floor (kFloor for a
// manifest's job) and no more than the ceiling (stepDeadline's default, 1.25).
// Until a step of kMinWorkers (16) was measured: the ceiling, so a job of
// fewer workers keeps it.
//
// The demo's parameter server (antdt-ps --step-deadline-floor) measures the
// times its gradients arrived in; the simulator, its workers' compute times.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>
#include <vector>

namespace antdt {

class DeadlineFit {
 public:
  static constexpr double kFloor = 1.1;  // the least stepDeadline a manifest may set
  // A worker at the median plus kSpreads x the deviation: past every healthy
  // worker when the jitter is uniform (2 x it at most) and past all but the
  // slowest few of hundreds when it is normal (about 4.5 x for a thousand
  // workers). A healthy worker cut costs little: it trains what it has, and
  // the rest of its batch moves to its next step. (4 x: the simulator's
  // deterministic stragglers at 1,000 workers 1.06x, not 1.05x.)
  static constexpr double kSpreads = 3;
  // Fewer workers in a step: not measured. Over a handful of times, some of
  // them a straggler's (paper-mix slows 3 of its 8 workers), the median
  // deviation says little of the healthy ones' jitter; the ceiling stands.
  static constexpr size_t kMinWorkers = 16;
  static constexpr double kSmoothing = 0.2;  // the newest step's weight

  DeadlineFit(double floor, double ceiling) : floor_(std::min(floor, ceiling)), ceiling_(ceiling) {}

  // One step's times, one per worker that trained in it (the order does not
  // matter; `times` is reordered). Non-positive times are left out.
  void AddStep(std::vector<double>& times) {
    times.erase(std::remove_if(times.begin(), times.end(),
                               [](double t) { return !(t > 0) || !std::isfinite(t); }),
                times.end());
    if (times.size() < kMinWorkers) return;
    const double median = Median(times);
    for (double& t : times) t = std::fabs(t - median);
    const double spread = Median(times) / median;
    spread_ = spread_ ? (1 - kSmoothing) * *spread_ + kSmoothing * spread : spread;
  }

  // The deadline as a multiple of the step's median time.
  double Factor() const {
    if (!spread_) return ceiling_;
    return std::clamp(1 + kSpreads * *spread_, floor_, ceiling_);
  }

  // The smoothed spread measured; none before a step of kMinWorkers.
  std::optional<double> Spread() const { return spread_; }

 private:
  static double Median(std::vector<double>& v) {
    auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
    std::nth_element(v.begin(), mid, v.end());
    return *mid;
  }

  double floor_;
  double ceiling_;
  std::optional<double> spread_;
};

}  // namespace antdt
