#include "backends/sim/scenario_file.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/sim/simulator.h"
#include "backends/sim/yaml_fields.h"
#include "common/config.h"
#include "common/spelling.h"
#include "common/status.h"

namespace antdt::sim {
namespace {

// A kind slowing nodes from some time on: its fraction, factor and start.
absl::Status SlowedNodes(const YAML::Node& kind, const std::string& where, double* fraction,
                         double* factor_min, double* factor_max, int64_t* start_min,
                         int64_t* start_max) {
  ASSIGN_OR_RETURN(*fraction, Number(kind["fraction"], where + "fraction", 0, 1));
  if (kind["factor"]) {
    RETURN_IF_ERROR(Range(kind["factor"], where + "factor", 1, 1000, factor_min, factor_max));
  }
  if (kind["start"]) {
    RETURN_IF_ERROR(DurationRange(kind["start"], where + "start", start_min, start_max));
  }
  return absl::OkStatus();
}

absl::Status ParseMix(const YAML::Node& g, StragglerMix* mix) {
  double unused = 0;
  if (const YAML::Node d = g["deterministic"]) {
    RETURN_IF_ERROR(Unknown(d, "generate.deterministic.", {"fraction", "factor"}));
    ASSIGN_OR_RETURN(mix->deterministic_fraction,
                     Number(d["fraction"], "generate.deterministic.fraction", 0, 1));
    if (d["factor"]) {
      ASSIGN_OR_RETURN(mix->deterministic_factor,
                       Number(d["factor"], "generate.deterministic.factor", 1, 1000));
    }
  }
  if (const YAML::Node t = g["transient"]) {
    RETURN_IF_ERROR(Unknown(t, "generate.transient.", {"fraction", "factor", "start", "duration"}));
    RETURN_IF_ERROR(SlowedNodes(t, "generate.transient.", &mix->transient_fraction,
                                &mix->transient_factor_min, &mix->transient_factor_max,
                                &mix->transient_start_min_ms, &mix->transient_start_max_ms));
    if (t["duration"]) {
      RETURN_IF_ERROR(DurationRange(t["duration"], "generate.transient.duration",
                                    &mix->transient_duration_min_ms,
                                    &mix->transient_duration_max_ms));
    }
  }
  if (const YAML::Node p = g["persistent"]) {
    RETURN_IF_ERROR(Unknown(p, "generate.persistent.", {"fraction", "factor", "start"}));
    RETURN_IF_ERROR(SlowedNodes(p, "generate.persistent.", &mix->persistent_fraction,
                                &mix->persistent_factor_min, &mix->persistent_factor_max,
                                &mix->persistent_start_min_ms, &mix->persistent_start_max_ms));
  }
  if (const YAML::Node l = g["leader"]) {
    RETURN_IF_ERROR(Unknown(l, "generate.leader.", {"fraction", "speed"}));
    ASSIGN_OR_RETURN(mix->leader_fraction, Number(l["fraction"], "generate.leader.fraction", 0, 1));
    if (l["speed"]) {
      RETURN_IF_ERROR(
          Range(l["speed"], "generate.leader.speed", 1, 100, &mix->leader_speed, &unused));
    }
  }
  const double total = mix->deterministic_fraction + mix->transient_fraction +
                       mix->persistent_fraction + mix->leader_fraction;
  if (total > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("generate: the fractions add up to ", total, ", more than 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<manifest::Scenario> ParseSimScenario(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("scenario: not YAML: ", e.what()));
  }
  if (!root.IsMap() || !root["generate"]) return manifest::ParseScenario(yaml);
  RETURN_IF_ERROR(Unknown(root, "", {"name", "generate"}));
  const YAML::Node g = root["generate"];
  if (!g.IsMap()) return absl::InvalidArgumentError("generate: must be a mapping");
  RETURN_IF_ERROR(
      Unknown(g, "generate.",
              {"workers", "spares", "seed", "deterministic", "transient", "persistent", "leader"}));
  if (!g["workers"]) return absl::InvalidArgumentError("generate.workers: required");
  ASSIGN_OR_RETURN(double workers, Number(g["workers"], "generate.workers", 1, 1'000'000));
  double spares = 0, seed = 1;
  if (g["spares"]) {
    ASSIGN_OR_RETURN(spares, Number(g["spares"], "generate.spares", 0, 1'000'000));
  }
  if (g["seed"]) {
    ASSIGN_OR_RETURN(seed, Number(g["seed"], "generate.seed", 0, 1e15));
  }
  StragglerMix mix;
  try {
    RETURN_IF_ERROR(ParseMix(g, &mix));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("generate: ", e.what()));
  }
  const std::string name = root["name"] ? root["name"].as<std::string>() : "generated";
  return GenerateScenario(name, static_cast<int32_t>(workers), static_cast<int32_t>(spares), mix,
                          static_cast<uint64_t>(seed));
}

}  // namespace antdt::sim
