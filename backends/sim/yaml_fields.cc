#include "backends/sim/yaml_fields.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/spelling.h"
#include "common/status.h"

namespace antdt::sim {

absl::Status Unknown(const YAML::Node& map, const std::string& where,
                     const std::set<std::string>& known) {
  for (const auto& kv : map) {
    const std::string key = kv.first.as<std::string>();
    if (!known.count(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, ": unknown field",
                       DidYouMean(key, std::vector<std::string>(known.begin(), known.end()))));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Number(const YAML::Node& node, const std::string& field, double lo,
                              double hi) {
  double v = 0;
  try {
    v = node.as<double>();
  } catch (const YAML::Exception&) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be a number"));
  }
  if (!(v >= lo && v <= hi)) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must be in [", lo, ", ", hi, "]"));
  }
  return v;
}

// A value or a range [a, b].
absl::Status Range(const YAML::Node& node, const std::string& field, double lo, double hi,
                   double* a, double* b) {
  if (node.IsSequence()) {
    if (node.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": a value or [min, max]"));
    }
    ASSIGN_OR_RETURN(*a, Number(node[0], field + "[0]", lo, hi));
    ASSIGN_OR_RETURN(*b, Number(node[1], field + "[1]", lo, hi));
    if (*b < *a) return absl::InvalidArgumentError(absl::StrCat(field, ": max below min"));
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*a, Number(node, field, lo, hi));
  *b = *a;
  return absl::OkStatus();
}

absl::Status DurationRange(const YAML::Node& node, const std::string& field, int64_t* a,
                           int64_t* b) {
  auto one = [&](const YAML::Node& n, const std::string& f, int64_t* out) -> absl::Status {
    ASSIGN_OR_RETURN(*out, ParseDurationMs(n.as<std::string>(), f));
    return absl::OkStatus();
  };
  if (node.IsSequence() && node.size() == 2) {
    RETURN_IF_ERROR(one(node[0], field + "[0]", a));
    RETURN_IF_ERROR(one(node[1], field + "[1]", b));
    if (*b < *a) return absl::InvalidArgumentError(absl::StrCat(field, ": max below min"));
    return absl::OkStatus();
  }
  if (!node.IsScalar()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": a duration or [min, max]"));
  }
  RETURN_IF_ERROR(one(node, field, a));
  *b = *a;
  return absl::OkStatus();
}

}  // namespace antdt::sim
