#include "core/policy/planner.h"

namespace antdt::policy::internal {

// ---- custom ---------------------------------------------------------------------

bool Planner::Matches(const Rule& rule, const Member& m) const {
  if (rule.role && *rule.role != m.state->role) return false;
  if (m.health == nullptr) return false;
  const bool persisted = m.windows_slow() >= rule.windows;
  switch (rule.signal) {
    case Signal::kScore:
      return m.health->score() >= rule.threshold && persisted;
    case Signal::kSelfScore:
      return m.health->self_score() >= rule.threshold && persisted;
    case Signal::kClass:
      return m.straggler_class() == rule.straggler_class &&
             (!IsStraggler(m.straggler_class()) || persisted);
  }
  return false;
}

void Planner::Custom() {
  if (o_.health.job_slowdown()) {
    Skip("job", SkipReason::kJobSlowdown,
         "job_slowdown: everyone slowed together, not a straggler; no action");
    return;
  }
  std::vector<const Member*> members;
  for (const Member& m : workers_) members.push_back(&m);
  for (const Member& m : servers_) members.push_back(&m);
  std::sort(members.begin(), members.end(),
            [](const Member* a, const Member* b) { return a->id() < b->id(); });

  std::map<std::string, Subject> subjects;
  std::set<std::string> frozen;
  std::set<std::string> round_rules;  // rules with an ADJUST_BS subject in this plan
  for (const Member* mp : members) {
    const Member& m = *mp;
    bool matched = false;
    for (const Rule& rule : spec_.rules) matched |= Matches(rule, m);
    if (!OutOfCooldown(m, matched ? Summary(m) : "")) {
      frozen.insert(m.id());
      continue;
    }
    for (size_t i = 0; i < spec_.rules.size(); ++i) {
      const Rule& rule = spec_.rules[i];
      if (!Matches(rule, m)) continue;
      const std::string name = RuleName(rule, i);
      const std::string what = absl::StrCat(Summary(m), " matched ", name);
      const bool adjust = rule.action == ActionKind::kAdjustBatchSize;
      const int cost = adjust && round_rules.count(name) ? 0 : 1;
      if (rule.budget && used_by_rule_[name] + cost > *rule.budget) {
        Skip(m.id(), SkipReason::kBudget,
             absl::StrCat(vocab::Name(rule.action), " skipped (", name, "): the rule's budget of ",
                          *rule.budget, " is spent"));
        continue;
      }
      if (adjust) {
        if (m.is_ps()) {
          Skip(m.id(), SkipReason::kNotApplicable,
               absl::StrCat("ADJUST_BS skipped (", name,
                            "): batch sizing cannot help a parameter server"));
          continue;
        }
        subjects[m.id()] = {name, what};
        round_rules.insert(name);
        break;
      }
      std::string why;
      SkipReason reason = SkipReason::kNotApplicable;
      if (TryRestart(m, name, what, &why, &reason)) {
        frozen.insert(m.id());
        break;
      }
      Skip(m.id(), reason, absl::StrCat("KILL_RESTART skipped (", name, "): ", why));
    }
  }
  Round(subjects, frozen, kCustomRebalance);
}

// ---- backup-workers ---------------------------------------------------------------

void Planner::BackupWorkers() {
  if (history_->BackupWorkersStarted()) return;
  const int64_t n = static_cast<int64_t>(workers_.size());
  if (spec_.backup_workers >= n) {
    Skip("job", SkipReason::kNotApplicable,
         absl::StrCat("backup workers skipped: ", spec_.backup_workers,
                      " backups need more workers than ", n));
    return;
  }
  if (!JobBudgetLeft()) {
    Skip("job", SkipReason::kBudget, absl::StrCat("backup workers skipped: ", BudgetSpent()));
    return;
  }
  ++used_;
  ++used_by_rule_[kBackupStart];
  Emit(UseBackupWorkers{spec_.backup_workers}, kBackupStart, "",
       absl::StrCat("baseline: a step takes the first ", n - spec_.backup_workers, " of ", n,
                    " gradients"),
       {{"workers", static_cast<double>(n)},
        {"backups", static_cast<double>(spec_.backup_workers)}});
}

}  // namespace antdt::policy::internal
