#include <cmath>

#include "core/policy/planner.h"

namespace antdt::policy::internal {

// ---- antdt-nd ------------------------------------------------------------------

void Planner::Nd() {
  if (o_.health.job_slowdown()) {
    Skip("job", SkipReason::kJobSlowdown,
         "job_slowdown: everyone slowed together, not a straggler; no action");
    return;
  }
  NdServers();

  std::map<std::string, Subject> subjects;
  std::set<std::string> frozen;
  for (const Member& m : workers_) {
    const v1::StragglerClass cls = m.straggler_class();
    const bool straggler = IsStraggler(cls);
    const Decision* last = LastOwn(m.id());
    // Sized down for a slowdown that may pass; or for slower hardware on a
    // node that the memory now says is itself slow, job after job (marked
    // while this job ran): a move may pay where a smaller batch was all.
    const bool compensated =
        last != nullptr && std::holds_alternative<AdjustBatchSize>(last->action) &&
        (last->rule == kNdTransientAdjust || last->rule == kNdPersistentAdjust ||
         (last->rule == kNdDeterministicAdjust && spec_.by_expected_duration && OnChronicNode(m)));
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
    // Slower hardware stays slower wherever the job's member goes, unless the
    // node memory says it is this node that is slow, across jobs.
    if (cls == v1::DETERMINISTIC && !(spec_.by_expected_duration && OnChronicNode(m))) {
      subjects[m.id()] = {kNdDeterministicAdjust, Summary(m)};
      continue;
    }
    std::string restart_rule;
    std::string what = Summary(m);
    std::optional<DurationChoice> weighed;
    // A compensated worker's slowdown per sample, against its peers'.
    const double slowdown = compensated ? CapacitySlowdown(m) : 1;
    if (spec_.by_expected_duration) {
      const bool still_slow = compensated && slowdown >= spec_.compensated_slowdown;
      if (straggler || still_slow) {
        weighed = ByDuration(m);
        if (weighed->action == DurationAction::kKillRestart) {
          restart_rule = kNdDurationRestart;
          if (!straggler) absl::StrAppend(&what, StillSlow(*last, slowdown));
          what = absl::StrCat(what, "; ", weighed->why);
        } else if (!straggler) {
          Skip(m.id(), SkipReason::kCostAboveSaving,
               absl::StrCat(what, ": no KILL_RESTART yet (", kNdDurationRestart,
                            "): ", weighed->why, "; stays compensated by its smaller batch"));
          continue;
        } else if (weighed->action == DurationAction::kRideOut) {
          Skip(m.id(), SkipReason::kNotNeeded, absl::StrCat(what, ": ridden out: ", weighed->why));
          continue;
        } else {
          subjects[m.id()] = {cls == v1::PERSISTENT      ? kNdPersistentAdjust
                              : cls == v1::DETERMINISTIC ? kNdDeterministicAdjust
                                                         : kNdTransientAdjust,
                              absl::StrCat(what, "; ", weighed->why)};
          continue;
        }
      }
    } else if (cls == v1::PERSISTENT) {
      restart_rule = kNdPersistentRestart;
    } else if (compensated && slowdown >= spec_.compensated_slowdown) {
      restart_rule = kNdCompensatedRestart;
      absl::StrAppend(&what, StillSlow(*last, slowdown));
    }
    if (!restart_rule.empty()) {
      std::string why;
      SkipReason reason = SkipReason::kNotApplicable;
      if (TryRestart(m, restart_rule, what, &why, &reason, weighed ? &*weighed : nullptr)) {
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

void Planner::NdServers() {
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
}

void Planner::Tidy(const std::set<std::string>& frozen) {
  auto measured_now = [&](const Member& m) {
    return m.batch() > 0 && m.health != nullptr && !frozen.count(m.id());
  };
  const Member* slowest = nullptr;
  for (const Member& m : workers_) {
    if (measured_now(m) && (slowest == nullptr || m.score() > slowest->score())) slowest = &m;
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
  // Sized by capacity: the workers a step waits for and those with room to
  // spare, by the margin. One within it is as fast as its batch says, give or
  // take a window's noise: sized by that, a thousand workers' noise gave the
  // fastest-measured a sample or two more each round (32 -> 34: 6 % on every
  // step after it), where what a step waits for is the slowest.
  std::set<std::string> measured;  // a round's worth: only when there is one
  for (const Member& m : workers_) {
    if (measured_now(m) && std::abs(m.score() - 1) >= kTidyMargin) measured.insert(m.id());
  }
  Round({}, frozen, kNdRebalance, measured,
        absl::StrCat("the slowest worker, ", slowest->id(), ", scores ", Num(slowest->score()),
                     " (>= ", Num(1 + kTidyMargin),
                     "): batches in proportion to speed where it is off by the margin"));
}

int64_t Planner::CompensatedSince(const std::string& id) const {
  return history_->CompensatedSince(id);
}

bool Planner::Resettled(const Member& m, const Decision& last) const {
  return spec_.settle_ms > 0 && last.at_ms + spec_.settle_ms <= o_.now_ms &&
         m.score() >= 1 + kTidyMargin;
}

DurationChoice Planner::ByDuration(const Member& m) const {
  DurationInput in;
  if (m.health != nullptr) {
    in.straggler_class = m.health->compensated() ? m.health->speed_class() : m.straggler_class();
  }
  in.slowdown = CapacitySlowdown(m);
  in.elapsed_seconds = SlowSeconds(m);
  if (const NodeState* node = FindNode(m.state->node); node != nullptr) {
    in.node_expected_seconds = node->slowdown_expected_seconds;
    in.node_chronic = node->chronic;
  }
  in.remaining_seconds = o_.remaining_seconds;
  in.restart_cost_seconds = o_.restart_cost_seconds;
  in.step_deadline = spec_.step_deadline;
  in.workers = static_cast<int>(workers_.size());
  in.min_saving_ratio = spec_.min_saving_ratio;
  if (o_.remaining_seconds > 0) {
    std::map<std::string, double> figures;
    in.adjust_loss_rate = SavedSeconds(m, figures) / o_.remaining_seconds;
  }
  return ChooseByExpectedDuration(in);
}

double Planner::SlowSeconds(const Member& m) const {
  if (!records_) {
    records_.emplace();
    // Oldest first: the last record of a worker is its current episode.
    for (const v1::StragglerRecord& r : o_.health.stragglers()) (*records_)[r.worker_id()] = &r;
  }
  auto it = records_->find(m.id());
  if (it != records_->end()) {
    const v1::StragglerRecord& r = *it->second;
    const int64_t now =
        o_.health.time_unix_ms() > 0 ? o_.health.time_unix_ms() : r.last_seen_unix_ms();
    return std::max<int64_t>(0, now - r.first_seen_unix_ms()) / 1000.0;
  }
  const int slow = m.health != nullptr && m.health->compensated() ? m.health->speed_windows_slow()
                                                                  : m.windows_slow();
  return slow * static_cast<double>(o_.health.window_ms()) / 1000.0;
}

std::string Planner::StillSlow(const Decision& last, double slowdown) const {
  return absl::StrCat(", compensated by ADJUST_BS ", Secs(o_.now_ms - last.at_ms),
                      " ago and still ", Num(slowdown), "x slower than its peers");
}

bool Planner::OnChronicNode(const Member& m) const {
  const NodeState* node = FindNode(m.state->node);
  return node != nullptr && node->chronic;
}

const NodeState* Planner::FindNode(const std::string& name) const {
  if (!node_index_) {
    node_index_.emplace();
    for (const NodeState& n : o_.nodes) (*node_index_)[n.name] = &n;
  }
  auto it = node_index_->find(name);
  return it == node_index_->end() ? nullptr : it->second;
}

double Planner::CapacitySlowdown(const Member& m) const {
  size_t others = 0;
  const double median = MedianCapacityWithout(m, &others);
  const double cap = m.capacity();
  if (others == 0 || !(cap > 0)) return 1;
  return median / cap;
}

}  // namespace antdt::policy::internal
