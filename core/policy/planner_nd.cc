#include "core/policy/planner.h"

namespace antdt::policy::internal {

// ---- antdt-nd ------------------------------------------------------------------

void Planner::Nd() {
  if (o_.health.job_slowdown()) {
    Skip("job", SkipReason::kJobSlowdown,
         "job_slowdown: everyone slowed together, not a straggler; no action");
    return;
  }
  for (const Member& m : servers_) {
    const v1::StragglerClass cls = m.straggler_class();
    if (!IsStraggler(cls) || !OutOfCooldown(m, Summary(m))) continue;
    if (cls == v1::PERSISTENT) {
      std::string why;
      SkipReason reason = SkipReason::kNotApplicable;
      if (!TryRestart(m, kNdPsRestart, Summary(m), &why, &reason)) {
        Skip(m.id(), reason,
             absl::StrCat("KILL_RESTART skipped (", kNdPsRestart, "): ", why,
                          "; batch sizing cannot help a parameter server"));
      }
    } else if (cls == v1::TRANSIENT) {
      Skip(m.id(), SkipReason::kNotApplicable,
           absl::StrCat(Summary(m),
                        ": batch sizing cannot help a parameter server; a restart "
                        "waits until it is PERSISTENT"));
    } else {
      Skip(m.id(), SkipReason::kNotApplicable,
           absl::StrCat(Summary(m), ": a restart will not change its hardware"));
    }
  }

  std::map<std::string, Subject> subjects;
  std::set<std::string> frozen;
  for (const Member& m : workers_) {
    const v1::StragglerClass cls = m.straggler_class();
    const bool straggler = IsStraggler(cls);
    const Decision* last = LastOwn(m.id());
    const bool compensated =
        last != nullptr && std::holds_alternative<AdjustBatchSize>(last->action) &&
        (last->rule == kNdTransientAdjust || last->rule == kNdPersistentAdjust);
    const bool interesting = straggler || cls == v1::LEADER || compensated;
    // A restart is weighed once it has been compensated for a cool-down,
    // however often its batch was re-sized since.
    const bool proven = compensated && CompensatedSince(m.id()) + spec_.cooldown_ms <= o_.now_ms;
    if (!proven && compensated && straggler && InCooldown(*last) && Resettled(m, *last)) {
      subjects[m.id()] = {last->rule, absl::StrCat(Summary(m),
                                                   ", still slow one window after its batch "
                                                   "was sized: sized again")};
      continue;
    }
    if (!proven && !OutOfCooldown(m, interesting ? Summary(m) : "")) {
      frozen.insert(m.id());
      continue;
    }
    if (cls == v1::LEADER) {
      subjects[m.id()] = {kNdLeaderAdjust, Summary(m)};
      continue;
    }
    if (cls == v1::DETERMINISTIC) {
      subjects[m.id()] = {kNdDeterministicAdjust, Summary(m)};
      continue;
    }
    std::string restart_rule;
    std::string what = Summary(m);
    if (cls == v1::PERSISTENT) {
      restart_rule = kNdPersistentRestart;
    } else if (compensated) {
      const double slowdown = CapacitySlowdown(m);
      if (slowdown >= spec_.compensated_slowdown) {
        restart_rule = kNdCompensatedRestart;
        what = absl::StrCat(what, ", compensated by ADJUST_BS ", Secs(o_.now_ms - last->at_ms),
                            " ago and still ", Num(slowdown), "x slower than its peers");
      }
    }
    if (!restart_rule.empty()) {
      std::string why;
      SkipReason reason = SkipReason::kNotApplicable;
      if (TryRestart(m, restart_rule, what, &why, &reason)) {
        // On a healthy node it is a median worker again: its share back at
        // once, not after a LEADER window and a cool-down.
        fresh_.insert(m.id());
        subjects[m.id()] = {kNdRestartShare, absl::StrCat(what,
                                                          ", restarted on a healthy node: a median "
                                                          "worker's share again")};
        continue;
      }
      if (straggler) {
        Skip(m.id(), reason,
             absl::StrCat("KILL_RESTART skipped (", restart_rule, "): ", why,
                          "; ADJUST_BS instead"));
        subjects[m.id()] = {cls == v1::PERSISTENT ? kNdPersistentAdjust : kNdTransientAdjust,
                            absl::StrCat(what, ", restart skipped: ", why)};
      } else {
        Skip(m.id(), reason,
             absl::StrCat("KILL_RESTART skipped (", restart_rule, "): ", why,
                          "; stays compensated by its smaller batch"));
      }
      continue;
    }
    if (cls == v1::TRANSIENT) subjects[m.id()] = {kNdTransientAdjust, what};
  }
  if (subjects.empty()) {
    Tidy(frozen);
  } else {
    Round(subjects, frozen, kNdRebalance);
  }
}

void Planner::Tidy(const std::set<std::string>& frozen) {
  std::set<std::string> measured;
  const Member* slowest = nullptr;
  for (const Member& m : workers_) {
    if (m.batch() <= 0 || m.health == nullptr || frozen.count(m.id())) continue;
    measured.insert(m.id());
    if (slowest == nullptr || m.score() > slowest->score()) slowest = &m;
  }
  if (slowest == nullptr || slowest->score() < 1 + kTidyMargin) return;
  if (last_round_ms_ != kNever && last_round_ms_ + spec_.cooldown_ms > o_.now_ms) {
    WaitUntil(last_round_ms_ + spec_.cooldown_ms);
    Skip("job", SkipReason::kCooldown,
         absl::StrCat("rebalance (", slowest->id(), " scores ", Num(slowest->score()),
                      ") in cool-down until ", Secs(last_round_ms_ + spec_.cooldown_ms - o_.now_ms),
                      " from now"));
    return;
  }
  Round({}, frozen, kNdRebalance, measured,
        absl::StrCat("the slowest worker, ", slowest->id(), ", scores ", Num(slowest->score()),
                     " (>= ", Num(1 + kTidyMargin), "): batches in proportion to speed"));
}

int64_t Planner::CompensatedSince(const std::string& id) const {
  auto it = compensated_since_.find(id);
  return it == compensated_since_.end() ? kNever : it->second;
}

bool Planner::Resettled(const Member& m, const Decision& last) const {
  return spec_.settle_ms > 0 && last.at_ms + spec_.settle_ms <= o_.now_ms &&
         m.score() >= 1 + kTidyMargin;
}

double Planner::CapacitySlowdown(const Member& m) const {
  size_t others = 0;
  const double median = MedianCapacityWithout(m, &others);
  const double cap = m.capacity();
  if (others == 0 || !(cap > 0)) return 1;
  return median / cap;
}

}  // namespace antdt::policy::internal
