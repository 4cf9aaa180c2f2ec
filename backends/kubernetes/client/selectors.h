// Label and field selectors of the Kubernetes list/watch API (pure parsing and
// matching, no I/O): the API-server emulator and FakeApi filter with them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace antdt::kube {

// One requirement: `key=v`, `key==v`, `key!=v`, `key in (a,b)`,
// `key notin (a,b)`, `key` (exists) or `!key` (does not exist).
struct Requirement {
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  std::string key;
  Op op = Op::kEquals;
  std::vector<std::string> values;
};

// Requirements joined by AND; empty matches everything.
struct LabelSelector {
  std::vector<Requirement> requirements;
  bool Matches(const nlohmann::json& labels) const;  // labels: object or null
};
absl::StatusOr<LabelSelector> ParseLabelSelector(const std::string& text);

// Field selector: `field=v`, `field==v`, `field!=v`, comma means AND. A field
// is a dotted path into the object ("metadata.name", "spec.nodeName"); a
// missing field reads as "".
struct FieldSelector {
  std::vector<Requirement> requirements;  // ops kEquals or kNotEquals only
  bool Matches(const nlohmann::json& object) const;
};
absl::StatusOr<FieldSelector> ParseFieldSelector(const std::string& text);

// The string value of a dotted path ("" when absent; numbers and bools as text).
std::string FieldValue(const nlohmann::json& object, const std::string& path);

}  // namespace antdt::kube
