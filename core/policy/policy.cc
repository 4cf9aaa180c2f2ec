#include "core/policy/policy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/policy/planner.h"

namespace antdt::policy {

using internal::Field;
using internal::kNdRebalance;
using internal::Planner;
using internal::RuleName;
using vocab::ActionKind;
using vocab::IsStraggler;
using vocab::Median;
using vocab::Policy;
using vocab::Role;
using vocab::Signal;

const char* SkipReasonName(SkipReason reason) {
  switch (reason) {
    case SkipReason::kCooldown:
      return "cooldown";
    case SkipReason::kBudget:
      return "budget";
    case SkipReason::kCostAboveSaving:
      return "cost_above_saving";
    case SkipReason::kNoSpareNode:
      return "no_spare_node";
    case SkipReason::kRemainingUnknown:
      return "remaining_unknown";
    case SkipReason::kJobSlowdown:
      return "job_slowdown";
    case SkipReason::kNotNeeded:
      return "not_needed";
    case SkipReason::kNotApplicable:
      break;
  }
  return "not_applicable";
}

vocab::ActionKind KindOf(const Action& action) {
  if (std::holds_alternative<AdjustBatchSize>(action)) return ActionKind::kAdjustBatchSize;
  if (std::holds_alternative<KillRestart>(action)) return ActionKind::kKillRestart;
  return ActionKind::kBackupWorkers;
}

Decision WithoutReasons(const Decision& d) {
  return Decision{d.action,  d.at_ms,       d.policy,        d.rule,
                  d.subject, /*reason=*/"", /*evidence=*/{}, d.cause};
}

int BudgetUsed(const History& history) { return HistoryIndex(history).BudgetUsed(); }

void HistoryIndex::Add(const Decision& d) {
  const size_t at = size_++;
  const bool adjust = std::holds_alternative<AdjustBatchSize>(d.action);
  if (!d.subject.empty()) {
    auto [last, added] = last_own_.try_emplace(d.subject, at, d.at_ms);
    if (!added && d.at_ms >= last->second.second) last->second = {at, d.at_ms};
    if (adjust &&
        (d.rule == internal::kNdTransientAdjust || d.rule == internal::kNdPersistentAdjust)) {
      compensated_since_.try_emplace(d.subject, d.at_ms);
    } else {
      compensated_since_.erase(d.subject);
    }
  }
  if (adjust) {
    last_round_ms_ = std::max(last_round_ms_, d.at_ms);
    if (d.rule == kNdRebalance && d.subject.empty()) return;  // a tidy round's, or shares one
    rounds_.insert(d.at_ms);
    if (rule_rounds_[d.rule].insert(d.at_ms).second) ++used_by_rule_[d.rule];
    return;
  }
  ++non_adjust_;
  ++used_by_rule_[d.rule];
  if (std::holds_alternative<KillRestart>(d.action)) {
    restarts_.push_back(at);
    int64_t& restarted = last_restart_ms_.try_emplace(d.subject, d.at_ms).first->second;
    restarted = std::max(restarted, d.at_ms);
  }
  if (std::holds_alternative<UseBackupWorkers>(d.action)) backup_started_ = true;
}

std::optional<size_t> HistoryIndex::LastOwn(const std::string& subject) const {
  auto it = last_own_.find(subject);
  if (it == last_own_.end()) return std::nullopt;
  return it->second.first;
}

int64_t HistoryIndex::CompensatedSince(const std::string& subject) const {
  auto it = compensated_since_.find(subject);
  return it == compensated_since_.end() ? kNever : it->second;
}

int64_t HistoryIndex::LastRestartMs(const std::string& subject) const {
  auto it = last_restart_ms_.find(subject);
  return it == last_restart_ms_.end() ? -1 : it->second;
}

std::vector<PossibleDecision> PossibleDecisions(const PolicySpec& spec) {
  using internal::kBackupStart;
  using internal::kCustomRebalance;
  constexpr ActionKind kAdjust = ActionKind::kAdjustBatchSize;
  constexpr ActionKind kRestart = ActionKind::kKillRestart;
  switch (spec.name) {
    case Policy::kAntdtNd:
      return {
          {kRestart, internal::kNdPsRestart},          {kRestart, internal::kNdPersistentRestart},
          {kRestart, internal::kNdCompensatedRestart}, {kRestart, internal::kNdDurationRestart},
          {kAdjust, internal::kNdTransientAdjust},     {kAdjust, internal::kNdPersistentAdjust},
          {kAdjust, internal::kNdDeterministicAdjust}, {kAdjust, internal::kNdLeaderAdjust},
          {kAdjust, internal::kNdRestartShare},        {kAdjust, internal::kNdRebalance, true}};
    case Policy::kAntdtDd:
      return {{kAdjust, internal::kDdProportional, true}};
    case Policy::kLbBsp:
      return {{kAdjust, internal::kLbBspProportional, true}};
    case Policy::kCustom: {
      std::vector<PossibleDecision> out;
      for (size_t i = 0; i < spec.rules.size(); ++i) {
        out.push_back({spec.rules[i].action, RuleName(spec.rules[i], i)});
      }
      out.push_back({kAdjust, kCustomRebalance, true});
      return out;
    }
    case Policy::kBackupWorkers:
      return {{ActionKind::kBackupWorkers, kBackupStart}};
    case Policy::kNone:
      break;
  }
  return {};
}

bool IsRebalance(const Decision& decision) {
  return std::holds_alternative<AdjustBatchSize>(decision.action) && decision.subject.empty();
}

const char* ActionName(const Action& action) { return vocab::Name(KindOf(action)).c_str(); }

const std::string& ActionTarget(const Action& action) {
  static const std::string* const kEmpty = new std::string();
  if (const auto* a = std::get_if<AdjustBatchSize>(&action)) return a->worker;
  if (const auto* k = std::get_if<KillRestart>(&action)) return k->worker;
  return *kEmpty;
}

std::string Describe(const Action& action) {
  std::string out = absl::StrCat("action=", ActionName(action));
  if (const auto* a = std::get_if<AdjustBatchSize>(&action)) {
    absl::StrAppend(&out, " ", Field("worker", a->worker),
                    " local_batch_size=", a->local_batch_size,
                    " accumulation_steps=", a->accumulation_steps);
  } else if (const auto* k = std::get_if<KillRestart>(&action)) {
    absl::StrAppend(&out, " ", Field("worker", k->worker), " ", Field("from_node", k->from_node),
                    " ", Field("to_node", k->to_node),
                    " exclude_node_until_ms=", k->exclude_node_until_ms);
  } else if (const auto* b = std::get_if<UseBackupWorkers>(&action)) {
    absl::StrAppend(&out, " backups=", b->backups);
  }
  return out;
}

std::string Describe(const Decision& decision) {
  std::string out =
      absl::StrCat(Describe(decision.action), " at_ms=", decision.at_ms, " ",
                   Field("policy", vocab::Name(decision.policy)), " ", Field("rule", decision.rule),
                   " ", Field("subject", decision.subject), " ", Field("reason", decision.reason));
  if (!decision.evidence.empty()) absl::StrAppend(&out, " ", EvidenceLine(decision.evidence));
  return out;
}

std::string EvidenceLine(const std::map<std::string, double>& evidence) {
  std::vector<std::string> parts;
  for (const auto& [key, value] : evidence) parts.push_back(absl::StrCat(key, "=", value));
  return absl::StrJoin(parts, " ");
}

absl::Status Validate(const PolicySpec& spec, const std::string& path) {
  auto bad = [&](const std::string& field, const std::string& message) {
    return absl::InvalidArgumentError(absl::StrCat(path, ".", field, ": ", message));
  };
  if (spec.cooldown_ms < 0) return bad("cooldown", "must be >= 0");
  if (spec.max_actions < 0) return bad("maxActions", "must be >= 0");
  if (!(spec.min_saving_ratio >= 0 && std::isfinite(spec.min_saving_ratio))) {
    return bad("minSavingRatio", "must be a number >= 0");
  }
  if (spec.backup_workers < 1) return bad("backupWorkers", "must be >= 1");
  if (!(spec.hysteresis >= 0 && spec.hysteresis < 1)) return bad("hysteresis", "must be in [0, 1)");
  if (!(spec.compensated_slowdown > 1 && std::isfinite(spec.compensated_slowdown))) {
    return bad("compensatedSlowdown", "must be > 1");
  }
  if (spec.min_local_batch < 1) return bad("minLocalBatch", "must be >= 1");
  if (spec.interval_ms <= 0) return bad("interval", "must be > 0");
  if (spec.name == Policy::kCustom && spec.rules.empty()) {
    return bad("rules", "the custom policy needs at least one rule");
  }
  if (spec.name != Policy::kCustom && !spec.rules.empty()) {
    return bad("rules",
               absl::StrCat("only the custom policy takes rules, not ", vocab::Name(spec.name)));
  }
  const std::vector<ActionKind>& actions = vocab::RuleActionKinds();
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < spec.rules.size(); ++i) {
    const Rule& r = spec.rules[i];
    const std::string at = absl::StrCat("rules[", i, "].");
    if (r.signal == Signal::kClass) {
      if (!IsStraggler(r.straggler_class) && r.straggler_class != v1::LEADER) {
        return bad(at + "class", "must be one of TRANSIENT, PERSISTENT, DETERMINISTIC, LEADER");
      }
    } else if (!(r.threshold > 1 && std::isfinite(r.threshold))) {
      return bad(at + "threshold",
                 absl::StrCat("must be > 1 (1 is the median), got ", r.threshold));
    }
    if (r.windows < 1) return bad(at + "windows", "must be >= 1");
    if (std::find(actions.begin(), actions.end(), r.action) == actions.end()) {
      return bad(at + "action", absl::StrCat("must be one of ", vocab::Names(actions)));
    }
    if (r.action == ActionKind::kAdjustBatchSize && r.role == Role::kParameterServer) {
      return bad(at + "action", "ADJUST_BS cannot help a parameter server (role ps)");
    }
    if (r.cooldown_ms && *r.cooldown_ms < 0) return bad(at + "cooldown", "must be >= 0");
    if (r.budget && *r.budget < 0) return bad(at + "budget", "must be >= 0");
    auto [it, inserted] = names.emplace(RuleName(r, i), i);
    if (!inserted) {
      return bad(at + "name", absl::StrCat("\"", it->first, "\" is also rules[", it->second, "]"));
    }
  }
  return absl::OkStatus();
}

PolicySpec EffectiveSpec(PolicySpec spec, const v1::GetJobHealthResponse& health) {
  if (health.window_ms() > 0) {
    spec.settle_ms = 2 * health.window_ms() + std::max<int64_t>(0, health.allowed_lateness_ms());
    if (spec.derive_cooldown) spec.cooldown_ms = 2 * spec.settle_ms;
  }
  return spec;
}

Plan Decide(const Observed& observed, const PolicySpec& spec) {
  return Planner(observed, EffectiveSpec(spec, observed.health)).Run();
}

}  // namespace antdt::policy
