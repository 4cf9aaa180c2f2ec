#include "core/loop/time_ledger.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "api/vocab/vocab.h"

namespace antdt::loop {

void TimeLedger::Restarted(const std::string& worker) {
  auto it = last_slowdown_.find(worker);
  // Restarted before any view of it: nothing known, nothing counted.
  if (it != last_slowdown_.end() && it->second > 1) restarted_[worker] = it->second;
}

TimeDelta TimeLedger::Observe(int64_t now_ms, const v1::GetJobHealthResponse& health) {
  struct Pace {
    const std::string* id;  // the health's own
    double bpt = 0;
    double pace = 0;  // samples per second
  };
  std::vector<Pace> workers;
  for (const v1::WorkerHealth& w : health.workers()) {
    if (w.role() == "ps") continue;
    const double bpt = w.bpt_seconds(), pace = w.samples_per_second();
    if (std::isfinite(bpt) && bpt > 0 && std::isfinite(pace) && pace > 0) {
      workers.push_back({&w.worker_id(), bpt, pace});
    }
  }
  TimeDelta delta;
  const int64_t last = std::exchange(last_ms_, now_ms);
  if (workers.empty()) return delta;
  std::vector<double> paces;
  double batch = 0, step = 0;
  for (const Pace& w : workers) {
    paces.push_back(w.pace);
    batch += w.bpt * w.pace;
    step = std::max(step, w.bpt);
  }
  const double median = vocab::Median(paces);
  const double share = batch / static_cast<double>(workers.size());
  double untouched = 0;
  for (const Pace& w : workers) {
    last_slowdown_[*w.id] = median / w.pace;
    auto r = restarted_.find(*w.id);
    const double pace = r != restarted_.end() ? median / r->second : w.pace;
    untouched = std::max(untouched, share / pace);
  }
  if (last < 0 || now_ms <= last || now_ms - last > kMaxGapMs) return delta;
  const double dt = static_cast<double>(now_ms - last) / 1000.0;
  const double ideal = share / median;
  delta.lost_seconds = dt * std::max(0.0, 1 - ideal / step);
  // Equal batches and no restart: untouched is the step itself, up to rounding.
  const double ratio = untouched / step;
  delta.saved_seconds = std::abs(ratio - 1) < 1e-9 ? 0 : dt * (ratio - 1);
  delta.worker_lost_seconds.reserve(workers.size() / 2 + 1);
  for (const Pace& w : workers) {
    if (w.pace < median) delta.worker_lost_seconds[*w.id] = dt * (1 - w.pace / median);
  }
  lost_ += delta.lost_seconds;
  saved_ += delta.saved_seconds;
  return delta;
}

}  // namespace antdt::loop
