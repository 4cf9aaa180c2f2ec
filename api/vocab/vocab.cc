#include "api/vocab/vocab.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace antdt::vocab {
namespace {

// Each enum's values with their names, in the order of its All...() list.
template <typename E>
using Table = std::vector<std::pair<E, std::string>>;

const Table<Policy>& Policies() {
  static const auto* const kTable = new Table<Policy>{{Policy::kAntdtNd, "antdt-nd"},
                                                      {Policy::kAntdtDd, "antdt-dd"},
                                                      {Policy::kCustom, "custom"},
                                                      {Policy::kNone, "none"},
                                                      {Policy::kBackupWorkers, "backup-workers"},
                                                      {Policy::kLbBsp, "lb-bsp"}};
  return *kTable;
}

const Table<Role>& Roles() {
  static const auto* const kTable =
      new Table<Role>{{Role::kWorker, "worker"}, {Role::kParameterServer, "ps"}};
  return *kTable;
}

const Table<ActionKind>& ActionKinds() {
  static const auto* const kTable =
      new Table<ActionKind>{{ActionKind::kAdjustBatchSize, "ADJUST_BS"},
                            {ActionKind::kKillRestart, "KILL_RESTART"},
                            {ActionKind::kBackupWorkers, "BACKUP_WORKERS"}};
  return *kTable;
}

const Table<Signal>& Signals() {
  static const auto* const kTable = new Table<Signal>{
      {Signal::kScore, "score"}, {Signal::kSelfScore, "self_score"}, {Signal::kClass, "class"}};
  return *kTable;
}

const Table<Mode>& Modes() {
  static const auto* const kTable =
      new Table<Mode>{{Mode::kAct, "Act"}, {Mode::kRecommend, "Recommend"}};
  return *kTable;
}

const Table<DecideBy>& DecideBys() {
  static const auto* const kTable = new Table<DecideBy>{
      {DecideBy::kExpectedDuration, "expectedDuration"}, {DecideBy::kThresholds, "thresholds"}};
  return *kTable;
}

const Table<AvoidSlowNodes>& AvoidSlowNodesNames() {
  static const auto* const kTable =
      new Table<AvoidSlowNodes>{{AvoidSlowNodes::kPreferred, "Preferred"},
                                {AvoidSlowNodes::kRequired, "Required"},
                                {AvoidSlowNodes::kIgnore, "Ignore"}};
  return *kTable;
}

// Lower case, then Kubernetes style; UNSPECIFIED is not in the table.
struct ClassNames {
  v1::StragglerClass cls;
  std::string lower;
  std::string kubernetes;
};

const std::vector<ClassNames>& Classes() {
  static const auto* const kTable =
      new std::vector<ClassNames>{{v1::HEALTHY, "healthy", ""},
                                  {v1::LEADER, "leader", "Leader"},
                                  {v1::DETERMINISTIC, "deterministic", "Deterministic"},
                                  {v1::TRANSIENT, "transient", "Transient"},
                                  {v1::PERSISTENT, "persistent", "Persistent"}};
  return *kTable;
}

template <typename E>
const std::vector<E>& Values(const Table<E>& table) {
  static const auto* const kValues = [&] {
    auto* values = new std::vector<E>;
    for (const auto& entry : table) values->push_back(entry.first);
    return values;
  }();
  return *kValues;
}

template <typename E>
const std::string& NameIn(const Table<E>& table, E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  // Only a value cast from an integer out of the enum's range gets here.
  static const auto* const kUnknown = new std::string("?");
  return *kUnknown;
}

template <typename E>
std::optional<E> ParseIn(const Table<E>& table, absl::string_view name) {
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return std::nullopt;
}

const ClassNames* FindClass(v1::StragglerClass cls) {
  for (const ClassNames& c : Classes()) {
    if (c.cls == cls) return &c;
  }
  return nullptr;
}

}  // namespace

const std::vector<Policy>& AllPolicies() { return Values(Policies()); }
const std::vector<Mode>& AllModes() { return Values(Modes()); }
const std::vector<DecideBy>& AllDecideBy() { return Values(DecideBys()); }
const std::vector<AvoidSlowNodes>& AllAvoidSlowNodes() { return Values(AvoidSlowNodesNames()); }
const std::vector<Role>& AllRoles() { return Values(Roles()); }
const std::vector<ActionKind>& AllActionKinds() { return Values(ActionKinds()); }
const std::vector<Signal>& AllSignals() { return Values(Signals()); }
const std::vector<ActionKind>& RuleActionKinds() {
  static const auto* const kKinds =
      new std::vector<ActionKind>{ActionKind::kAdjustBatchSize, ActionKind::kKillRestart};
  return *kKinds;
}

const std::string& Name(Policy policy) { return NameIn(Policies(), policy); }
const std::string& Name(Role role) { return NameIn(Roles(), role); }
const std::string& Name(ActionKind kind) { return NameIn(ActionKinds(), kind); }
const std::string& Name(Signal signal) { return NameIn(Signals(), signal); }
const std::string& Name(Mode mode) { return NameIn(Modes(), mode); }
const std::string& Name(DecideBy by) { return NameIn(DecideBys(), by); }
const std::string& Name(AvoidSlowNodes avoid) { return NameIn(AvoidSlowNodesNames(), avoid); }

const std::string& Name(v1::StragglerClass cls) {
  static const auto* const kNone = new std::string("-");
  const ClassNames* c = FindClass(cls);
  return c != nullptr ? c->lower : *kNone;
}

const std::string& KubernetesName(v1::StragglerClass cls) {
  static const auto* const kNone = new std::string();
  const ClassNames* c = FindClass(cls);
  return c != nullptr ? c->kubernetes : *kNone;
}

std::optional<Policy> ParsePolicy(absl::string_view name) { return ParseIn(Policies(), name); }
std::optional<Role> ParseRole(absl::string_view name) { return ParseIn(Roles(), name); }

std::string MemberName(Role role, int32_t index) {
  return absl::StrCat(role == Role::kParameterServer ? "ps-" : "worker-", index);
}

std::optional<MemberId> ParseMemberId(absl::string_view id) {
  for (const Role role : {Role::kWorker, Role::kParameterServer}) {
    const absl::string_view prefix = role == Role::kParameterServer ? "ps-" : "worker-";
    if (!absl::ConsumePrefix(&id, prefix)) continue;
    int32_t index = -1;
    const bool canonical =
        !id.empty() && (id == "0" || id[0] != '0') &&
        std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!canonical || !absl::SimpleAtoi(id, &index) || index < 0) return std::nullopt;
    return MemberId{role, index};
  }
  return std::nullopt;
}

std::optional<ActionKind> ParseActionKind(absl::string_view name) {
  return ParseIn(ActionKinds(), name);
}
std::optional<Signal> ParseSignal(absl::string_view name) { return ParseIn(Signals(), name); }

std::optional<v1::StragglerClass> ParseStragglerClass(absl::string_view name) {
  for (const ClassNames& c : Classes()) {
    if (c.lower == name) return c.cls;
  }
  return std::nullopt;
}

const std::string& PolicyNames() {
  static const auto* const kNames = new std::string(Names(AllPolicies()));
  return *kNames;
}

bool IsStraggler(v1::StragglerClass cls) {
  return cls == v1::TRANSIENT || cls == v1::PERSISTENT || cls == v1::DETERMINISTIC;
}

std::string CauseName(v1::Cause cause) {
  const std::string& name = v1::Cause_Name(cause);
  return name.empty() || cause == v1::CAUSE_UNSPECIFIED ? "UNKNOWN" : name;
}

namespace {

// Each cause the Monitor names, as metric labels and as Kubernetes reasons
// say it; one table, so that the two never disagree on which causes exist.
struct CauseNames {
  std::string label, reason;
};

const CauseNames& NamesOf(v1::Cause cause) {
  static const auto* const kNames = new std::map<v1::Cause, CauseNames>{
      {v1::CPU_CONTENTION, {"cpu_contention", "CPUContention"}},
      {v1::CPU_THROTTLING, {"cpu_throttling", "CPUThrottling"}},
      {v1::MEMORY_PRESSURE, {"memory_pressure", "MemoryPressure"}},
      {v1::NETWORK, {"network", "Network"}},
      {v1::GPU_THROTTLING, {"gpu_throttling", "GPUThrottling"}},
      {v1::IO_PRESSURE, {"io_pressure", "IOPressure"}},
      {v1::HARDWARE, {"hardware", "Hardware"}},
      {v1::DATA_LOADING, {"data_loading", "DataLoading"}}};
  static const auto* const kUnknown = new CauseNames{"unknown", "UnknownCause"};
  auto it = kNames->find(cause);
  return it == kNames->end() ? *kUnknown : it->second;
}

}  // namespace

const std::string& CauseLabel(v1::Cause cause) { return NamesOf(cause).label; }

const std::string& CauseReason(v1::Cause cause) { return NamesOf(cause).reason; }

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  const double upper = values[mid];
  if (values.size() % 2 == 1) return upper;
  const double lower = *std::max_element(values.begin(), values.begin() + mid);
  return (lower + upper) / 2;
}

std::ostream& operator<<(std::ostream& os, Policy policy) { return os << Name(policy); }
std::ostream& operator<<(std::ostream& os, Role role) { return os << Name(role); }
std::ostream& operator<<(std::ostream& os, ActionKind kind) { return os << Name(kind); }
std::ostream& operator<<(std::ostream& os, Signal signal) { return os << Name(signal); }

}  // namespace antdt::vocab
