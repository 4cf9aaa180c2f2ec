#include "core/policy/planner.h"

namespace antdt::policy::internal {

// ---- antdt-dd and lb-bsp ------------------------------------------------------

void Planner::Proportional(const std::string& rule, double hysteresis) {
  if (last_round_ms_ != kNever && last_round_ms_ + spec_.cooldown_ms > o_.now_ms) {
    WaitUntil(last_round_ms_ + spec_.cooldown_ms);
    Skip("job", SkipReason::kCooldown,
         absl::StrCat("batch re-plan in cool-down until ",
                      Secs(last_round_ms_ + spec_.cooldown_ms - o_.now_ms),
                      " from now (last round ", Secs(o_.now_ms - last_round_ms_), " ago)"));
    return;
  }
  std::vector<const Member*> parts;
  for (const Member& m : workers_) {
    if (m.batch() > 0 && m.health != nullptr) parts.push_back(&m);
  }
  std::vector<int64_t> targets;
  int64_t total = 0;
  const auto capacity = [](const Member& m) { return m.capacity(); };
  if (!Targets(parts, capacity, &targets, &total)) return;
  double drift = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const double b = static_cast<double>(parts[i]->batch());
    drift = std::max(drift, std::abs(static_cast<double>(targets[i]) - b) / b);
  }
  bool changes = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    changes |= targets[i] != parts[i]->batch() ||
               Accumulation(*parts[i]->state, targets[i]) != parts[i]->state->accumulation_steps;
  }
  if (!changes) return;
  if (drift <= hysteresis && drift > 0) {
    Skip("job", SkipReason::kNotNeeded,
         absl::StrCat("batches within the hysteresis margin: drift ", Num(drift),
                      " <= ", Num(hysteresis)));
    return;
  }
  if (!JobBudgetLeft()) {
    Skip("job", SkipReason::kBudget, absl::StrCat("batch re-plan skipped: ", BudgetSpent()));
    return;
  }
  ++used_;
  ++used_by_rule_[rule];
  for (size_t i = 0; i < parts.size(); ++i) {
    const Member& m = *parts[i];
    const int32_t acc = Accumulation(*m.state, targets[i]);
    if (targets[i] == m.batch() && acc == m.state->accumulation_steps) continue;
    auto evidence = RoundEvidence(m, targets[i], total);
    evidence["drift"] = drift;
    evidence["hysteresis"] = hysteresis;
    Emit(AdjustBatchSize{m.id(), targets[i], acc}, rule, "",
         absl::StrCat("batch proportional to measured speed (score ", Num(m.score()),
                      "): local batch ", m.batch(), " -> ", targets[i], ", accumulation steps ",
                      acc, "; drift ", Num(drift), " > hysteresis ", Num(hysteresis),
                      "; global batch ", global_batch_, " kept"),
         std::move(evidence));
  }
}

}  // namespace antdt::policy::internal
