// The fields of the simulator's own files (a generated scenario, a fleet):
// each error names the field, as the manifest's do.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace antdt::sim {

// InvalidArgument "<where><key>: unknown field" (with a did-you-mean) for a
// key of `map` not in `known`.
absl::Status Unknown(const YAML::Node& map, const std::string& where,
                     const std::set<std::string>& known);
// A number in [lo, hi].
absl::StatusOr<double> Number(const YAML::Node& node, const std::string& field, double lo,
                              double hi);
// A value or a range [a, b], each in [lo, hi].
absl::Status Range(const YAML::Node& node, const std::string& field, double lo, double hi,
                   double* a, double* b);
// A duration ("5s") or a range of two.
absl::Status DurationRange(const YAML::Node& node, const std::string& field, int64_t* a,
                           int64_t* b);

}  // namespace antdt::sim
