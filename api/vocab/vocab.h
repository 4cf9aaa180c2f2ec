// AntDT's vocabulary as types: the straggler policies, member roles, actions
// and rule signals as enums, with the straggler classes and causes of the
// Monitor's proto (v1::StragglerClass, v1::Cause). Text is parsed into these
// once, at the edges (the manifest, the CRD status, the CLI's flags), and
// written back only for people (logs, Events, status fields, reports), so a
// misspelt name is a compile error inside and a message naming the field at
// the edge. Pure; links only Abseil and the proto library.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "antdt/v1/monitor.pb.h"
#include "common/spelling.h"

namespace antdt::vocab {

// spec.stragglerPolicy.name; see core/policy/policy.h.
enum class Policy { kAntdtNd, kAntdtDd, kCustom, kNone, kBackupWorkers, kLbBsp };
// A member of a job: a worker, or a parameter server.
enum class Role { kWorker, kParameterServer };
// What the Controller decides (policy::Action); a custom rule takes the first two.
enum class ActionKind { kAdjustBatchSize, kKillRestart, kBackupWorkers };
// What a custom rule watches (spec.stragglerPolicy.rules[i].signal).
enum class Signal { kScore, kSelfScore, kClass };
// spec.stragglerPolicy.mode: carry decisions out, or only recommend them
// (observe and decide as usual, execute nothing).
enum class Mode { kAct, kRecommend };
// spec.stragglerPolicy.decideBy: how antdt-nd weighs a restart — by how long
// the slowdown is expected to last (policy/expected_duration.h), or by its
// thresholds (a PERSISTENT class, a compensated slowdown) and the saving over
// the rest of the job.
enum class DecideBy { kExpectedDuration, kThresholds };
// spec.stragglerPolicy.avoidSlowNodes: how a worker pod keeps off the nodes
// the operator's node memory marks slow (under --node-memory Act) — a
// preferred node affinity (placed there only when nothing else fits), a
// required one (never placed there; Pending while nothing else fits), or not
// at all.
enum class AvoidSlowNodes { kPreferred, kRequired, kIgnore };

// Every value, in the order "must be one of" messages list them. AllPolicies()
// is the one list of policy names.
const std::vector<Policy>& AllPolicies();
const std::vector<Role>& AllRoles();
const std::vector<ActionKind>& AllActionKinds();
const std::vector<Signal>& AllSignals();
const std::vector<Mode>& AllModes();
const std::vector<DecideBy>& AllDecideBy();
const std::vector<AvoidSlowNodes>& AllAvoidSlowNodes();
// The actions a custom rule may take: ADJUST_BS, KILL_RESTART.
const std::vector<ActionKind>& RuleActionKinds();

// The names in manifests, logs and Events:
//   Policy      antdt-nd, antdt-dd, custom, none, backup-workers, lb-bsp
//   Role        worker, ps
//   ActionKind  ADJUST_BS, KILL_RESTART, BACKUP_WORKERS
//   Signal      score, self_score, class
//   Mode        Act, Recommend
//   DecideBy    expectedDuration, thresholds
//   AvoidSlowNodes  Preferred, Required, Ignore
const std::string& Name(Policy policy);
const std::string& Name(Role role);
const std::string& Name(ActionKind kind);
const std::string& Name(Signal signal);
const std::string& Name(Mode mode);
const std::string& Name(DecideBy by);
const std::string& Name(AvoidSlowNodes avoid);
// A straggler class in lower case, as manifests and `antdt run`'s report
// spell it: healthy, leader, deterministic, transient, persistent; "-" for
// STRAGGLER_CLASS_UNSPECIFIED.
const std::string& Name(v1::StragglerClass cls);

// A member of a job, typed: its role and its index among that role's
// members. Its id (MemberName) is "worker-<index>" or "ps-<index>", as the
// SDKs, pods, metrics and status spell it; parse ids with ParseMemberId
// rather than by their prefix.
struct MemberId {
  Role role = Role::kWorker;
  int32_t index = 0;
  bool operator==(const MemberId& o) const { return role == o.role && index == o.index; }
};
std::string MemberName(Role role, int32_t index);
inline std::string MemberName(const MemberId& id) { return MemberName(id.role, id.index); }
// The member "worker-<i>" or "ps-<i>" (i a decimal integer >= 0, no sign or
// leading zeros); nullopt for anything else.
std::optional<MemberId> ParseMemberId(absl::string_view id);

// The value whose Name is exactly `name`; nullopt for anything else.
std::optional<Policy> ParsePolicy(absl::string_view name);
std::optional<Role> ParseRole(absl::string_view name);
std::optional<ActionKind> ParseActionKind(absl::string_view name);
std::optional<Signal> ParseSignal(absl::string_view name);
std::optional<v1::StragglerClass> ParseStragglerClass(absl::string_view name);

// "antdt-nd, antdt-dd, custom, none, backup-workers, lb-bsp".
const std::string& PolicyNames();

// The names of `values`, comma-separated, for "must be one of" messages.
template <typename E>
std::string Names(const std::vector<E>& values) {
  return absl::StrJoin(values, ", ",
                       [](std::string* out, E value) { absl::StrAppend(out, Name(value)); });
}

// The value of `allowed` whose Name is `text`; otherwise InvalidArgument
// `<field>: must be one of <Names(allowed)>, got "<text>"`, the message of
// every edge, with `; did you mean "<name>"?` when a name is near
// (common/spelling.h).
template <typename E>
absl::StatusOr<E> ParseOneOf(absl::string_view field, absl::string_view text,
                             const std::vector<E>& allowed) {
  std::vector<std::string> names;
  for (E value : allowed) {
    if (Name(value) == text) return value;
    names.push_back(Name(value));
  }
  return absl::InvalidArgumentError(absl::StrCat(field, ": must be one of ", Names(allowed),
                                                 ", got \"", text, "\"", DidYouMean(text, names)));
}

// A straggler class as Kubernetes objects show it (status.stragglers, Events,
// conditions): Leader, Deterministic, Transient, Persistent; "" for HEALTHY
// and unspecified.
const std::string& KubernetesName(v1::StragglerClass cls);

// TRANSIENT, PERSISTENT or DETERMINISTIC: slower than its peers. A LEADER is not.
bool IsStraggler(v1::StragglerClass cls);

// A cause as status.stragglers shows it: its proto name (CPU_CONTENTION, ...),
// "UNKNOWN" when unspecified.
std::string CauseName(v1::Cause cause);
// A cause as metric labels show it: the proto name in lower case without a
// prefix (cpu_contention, cpu_throttling, memory_pressure, network,
// gpu_throttling, io_pressure, hardware, data_loading), "unknown" for
// CAUSE_UNKNOWN and unspecified. A member that is not a straggler has the
// label "none" (kNoCauseLabel) whatever its cause.
const std::string& CauseLabel(v1::Cause cause);
inline constexpr char kNoCauseLabel[] = "none";
// A cause as a Kubernetes condition's or Event's reason (CamelCase):
// CPUContention, CPUThrottling, MemoryPressure, Network, GPUThrottling,
// IOPressure, Hardware, DataLoading; UnknownCause for CAUSE_UNKNOWN and
// unspecified.
const std::string& CauseReason(v1::Cause cause);

// The median of `values`: the middle one, or the mean of the middle two; 0
// for none.
double Median(std::vector<double> values);

// For test failure messages: the Name.
std::ostream& operator<<(std::ostream& os, Policy policy);
std::ostream& operator<<(std::ostream& os, Role role);
std::ostream& operator<<(std::ostream& os, ActionKind kind);
std::ostream& operator<<(std::ostream& os, Signal signal);

}  // namespace antdt::vocab
