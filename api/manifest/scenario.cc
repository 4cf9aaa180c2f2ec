#include "api/manifest/manifest.h"

// The straggler scenario: nodes, slowdowns, and the speed of a node at a time.

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "api/manifest/yaml_fields.h"
#include "common/config.h"
#include "common/spelling.h"
#include "common/status.h"

namespace antdt::manifest {
namespace {

// ---- Scenario ----

absl::Status ParseNode(const YAML::Node& node, const std::string& path, NodeSpec* n) {
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  RETURN_IF_ERROR(CheckMapping(node, path, {"name", "speed", "spare", "role", "labels"}));
  RETURN_IF_ERROR(Required(node, path, "name"));
  RETURN_IF_ERROR(ReadString(node, path, "name", &n->name));
  RETURN_IF_ERROR(ReadDouble(node, path, "speed", &n->speed));
  RETURN_IF_ERROR(Positive(Join(path, "speed"), n->speed));
  RETURN_IF_ERROR(ReadBool(node, path, "spare", &n->spare));
  RETURN_IF_ERROR(ReadOneOf(node, path, "role", vocab::AllRoles(), &n->role));
  return ReadStringMap(Get(node, "labels"), Join(path, "labels"), &n->labels);
}

absl::Status ParseSlowdown(const YAML::Node& node, const std::string& path,
                           const std::set<std::string>& nodes, Slowdown* s) {
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  RETURN_IF_ERROR(CheckMapping(node, path, {"node", "kind", "factor", "start", "duration", "via"}));
  RETURN_IF_ERROR(Required(node, path, "node"));
  RETURN_IF_ERROR(ReadString(node, path, "node", &s->node));
  if (nodes.count(s->node) == 0) {
    return Invalid(Join(path, "node"), absl::StrCat("no node \"", s->node, "\""));
  }
  RETURN_IF_ERROR(Required(node, path, "kind"));
  RETURN_IF_ERROR(
      ReadOneOf(node, path, "kind", {v1::DETERMINISTIC, v1::TRANSIENT, v1::PERSISTENT}, &s->kind));
  RETURN_IF_ERROR(Required(node, path, "factor"));
  RETURN_IF_ERROR(ReadDouble(node, path, "factor", &s->factor));
  if (!(s->factor > 1)) {
    return Invalid(Join(path, "factor"), absl::StrCat("must be > 1, got ", s->factor));
  }
  std::string via = "emulated";
  RETURN_IF_ERROR(ReadString(node, path, "via", &via));
  static const auto* const kVia =
      new std::map<std::string, SlowdownVia>{{"emulated", SlowdownVia::kEmulated},
                                             {"cpu-quota", SlowdownVia::kCpuQuota},
                                             {"cpu-contention", SlowdownVia::kCpuContention},
                                             {"slow-data", SlowdownVia::kSlowData},
                                             {"gpu-throttle", SlowdownVia::kGpuThrottle}};
  if (auto it = kVia->find(via); it != kVia->end()) {
    s->via = it->second;
  } else {
    return Invalid(Join(path, "via"),
                   absl::StrCat("must be emulated, cpu-quota, cpu-contention, slow-data or "
                                "gpu-throttle, got \"",
                                via, "\"",
                                DidYouMean(via, {"emulated", "cpu-quota", "cpu-contention",
                                                 "slow-data", "gpu-throttle"})));
  }
  RETURN_IF_ERROR(ReadDurationMs(node, path, "start", &s->start_ms));
  if (s->kind == v1::DETERMINISTIC && s->start_ms != 0) {
    return Invalid(Join(path, "start"), absl::StrCat("must be 0 for a deterministic slowdown, got ",
                                                     Describe(Get(node, "start"))));
  }
  const bool has_duration = Present(Get(node, "duration"));
  if (s->kind != v1::TRANSIENT) {
    if (has_duration) {
      return Invalid(Join(path, "duration"),
                     absl::StrCat("only allowed for a transient slowdown (a ", vocab::Name(s->kind),
                                  " one lasts until the end)"));
    }
    return absl::OkStatus();
  }
  if (!has_duration) return Invalid(Join(path, "duration"), "required for a transient slowdown");
  RETURN_IF_ERROR(ReadDurationMs(node, path, "duration", &s->duration_ms));
  if (s->duration_ms <= 0) {
    return Invalid(Join(path, "duration"),
                   absl::StrCat("must be > 0, got ", Describe(Get(node, "duration"))));
  }
  return absl::OkStatus();
}

absl::Status ParseScenarioRoot(const YAML::Node& root, Scenario* s) {
  if (!root.IsMap()) {
    return Invalid("scenario", absl::StrCat("must be a mapping, got ", Describe(root)));
  }
  RETURN_IF_ERROR(CheckMapping(root, "", {"name", "nodes", "slowdowns"}));
  RETURN_IF_ERROR(ReadString(root, "", "name", &s->name));
  const YAML::Node nodes = Get(root, "nodes");
  if (!Present(nodes)) return Invalid("nodes", "required");
  if (!nodes.IsSequence())
    return Invalid("nodes", absl::StrCat("must be a list, got ", Describe(nodes)));
  if (nodes.size() == 0) return Invalid("nodes", "must list at least one node");
  std::set<std::string> names;
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeSpec n;
    const std::string path = Index("nodes", i);
    RETURN_IF_ERROR(ParseNode(nodes[i], path, &n));
    if (!names.insert(n.name).second) {
      return Invalid(Join(path, "name"), absl::StrCat("duplicate node \"", n.name, "\""));
    }
    s->nodes.push_back(std::move(n));
  }
  const YAML::Node slowdowns = Get(root, "slowdowns");
  if (!Present(slowdowns)) return absl::OkStatus();
  if (!slowdowns.IsSequence()) {
    return Invalid("slowdowns", absl::StrCat("must be a list, got ", Describe(slowdowns)));
  }
  for (size_t i = 0; i < slowdowns.size(); ++i) {
    Slowdown slowdown;
    RETURN_IF_ERROR(ParseSlowdown(slowdowns[i], Index("slowdowns", i), names, &slowdown));
    s->slowdowns.push_back(std::move(slowdown));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Scenario> ParseScenario(const std::string& yaml) {
  ASSIGN_OR_RETURN(const YAML::Node root, LoadOne(yaml, "scenario"));
  Scenario scenario;
  try {
    RETURN_IF_ERROR(ParseScenarioRoot(root, &scenario));
  } catch (const YAML::Exception& e) {
    return Invalid("scenario", e.what());
  }
  return scenario;
}

bool Slowdown::ActiveAt(int64_t t_ms) const {
  if (kind == v1::DETERMINISTIC) return true;
  if (kind == v1::PERSISTENT) return t_ms >= start_ms;
  if (kind == v1::TRANSIENT) return t_ms >= start_ms && t_ms < start_ms + duration_ms;
  return false;
}

double Scenario::SpeedAt(const std::string& node, int64_t t_ms) const {
  double speed = 1.0;  // a node the scenario does not list runs at nominal speed
  for (const NodeSpec& n : nodes) {
    if (n.name == node) speed = n.speed;
  }
  for (const Slowdown& s : slowdowns) {
    if (s.node == node && s.ActiveAt(t_ms) &&
        (s.via == SlowdownVia::kEmulated || s.via == SlowdownVia::kGpuThrottle)) {
      speed /= s.factor;
    }
  }
  return speed;
}

double Scenario::CpuQuotaFactorAt(const std::string& node, int64_t t_ms) const {
  return FactorVia(node, SlowdownVia::kCpuQuota, t_ms);
}

double Scenario::FactorVia(const std::string& node, SlowdownVia via, int64_t t_ms) const {
  double factor = 1.0;
  for (const Slowdown& s : slowdowns) {
    if (s.node == node && s.via == via && s.ActiveAt(t_ms)) factor *= s.factor;
  }
  return factor;
}

bool Scenario::Uses(const std::string& node, SlowdownVia via) const {
  return std::any_of(slowdowns.begin(), slowdowns.end(),
                     [&](const Slowdown& s) { return s.node == node && s.via == via; });
}

bool Scenario::UsesCpuQuota(const std::string& node, size_t* index) const {
  for (size_t i = 0; i < slowdowns.size(); ++i) {
    if (slowdowns[i].node != node || slowdowns[i].via != SlowdownVia::kCpuQuota) continue;
    if (index != nullptr) *index = i;
    return true;
  }
  return false;
}

}  // namespace antdt::manifest
