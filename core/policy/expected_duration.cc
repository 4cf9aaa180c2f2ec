#include "core/policy/expected_duration.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace antdt::policy {

const char* Name(DurationAction a) {
  switch (a) {
    case DurationAction::kRideOut:
      return "ride out";
    case DurationAction::kAdjustBatch:
      return "ADJUST_BS";
    case DurationAction::kKillRestart:
      return "KILL_RESTART";
  }
  return "?";
}

DurationChoice ChooseByExpectedDuration(const DurationInput& in) {
  DurationChoice out;
  const double s = std::isfinite(in.slowdown) ? std::max(1.0, in.slowdown) : 1.0;
  const double elapsed = std::max(0.0, in.elapsed_seconds);
  const bool known = in.remaining_seconds >= 0;
  const double remaining = known ? in.remaining_seconds : HUGE_VAL;
  const bool for_good = in.straggler_class == v1::DETERMINISTIC || in.node_chronic;
  double d = for_good ? remaining : std::max(in.node_expected_seconds - elapsed, elapsed);
  d = std::min(d, remaining);
  if (!std::isfinite(d)) d = std::max(in.node_expected_seconds, elapsed);  // unknown rest
  out.expected_remaining_seconds = d;
  const double ridden = in.step_deadline > 1 ? std::min(s, in.step_deadline) : s;
  out.loss_ride_out = d * (1 - 1 / ridden);
  out.loss_adjust = in.adjust_loss_rate >= 0 && std::isfinite(in.adjust_loss_rate)
                        ? d * in.adjust_loss_rate
                        : d * (1 - 1 / s) / std::max(1, in.workers);
  const double cost = std::max(0.0, in.restart_cost_seconds);
  out.loss_restart = known && remaining > cost ? cost : -1;

  out.action =
      out.loss_ride_out < out.loss_adjust ? DurationAction::kRideOut : DurationAction::kAdjustBatch;
  const double best = std::min(out.loss_ride_out, out.loss_adjust);
  const double ratio = std::max(0.0, in.min_saving_ratio);
  if (out.loss_restart >= 0 && best > ratio * out.loss_restart) {
    out.action = DurationAction::kKillRestart;
  }
  out.why = absl::StrFormat(
      "expected to last %.1fs more (%s); expected loss: ride out %.2fs, ADJUST_BS %.2fs, "
      "KILL_RESTART %s%s: %s",
      d,
      for_good ? (in.node_chronic ? "a chronically slow node: the rest of the job"
                                  : "deterministic: the rest of the job")
      : in.node_expected_seconds > 0
          ? absl::StrFormat("%.1fs so far, %.1fs expected on its node", elapsed,
                            in.node_expected_seconds)
          : absl::StrFormat("%.1fs so far, no history on its node", elapsed),
      out.loss_ride_out, out.loss_adjust,
      out.loss_restart >= 0 ? absl::StrFormat("%.2fs", out.loss_restart)
                            : std::string(known ? "not with this little of the job left"
                                                : "not weighed: the job's remaining time is "
                                                  "unknown"),
      ratio != 1 && out.loss_restart >= 0 ? absl::StrFormat(" (x%g)", ratio) : "",
      Name(out.action));
  return out;
}

}  // namespace antdt::policy
