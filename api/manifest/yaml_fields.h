// The YAML toolkit the manifest's parsers share: fields read under their
// path (errors name it: spec.workers.replicas: must be >= 1), with "did you
// mean" for an unknown key. Internal to api/manifest/.
#pragma once

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
#include "api/manifest/manifest.h"
#include "common/config.h"
#include "common/spelling.h"
#include "common/status.h"

namespace antdt::manifest {

inline constexpr char kApiVersion[] = "antdt.io/v1alpha1";
inline constexpr char kKind[] = "AntDTJob";

inline absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

inline std::string Join(const std::string& path, absl::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(path, ".", key);
}

inline std::string Index(const std::string& path, size_t i) {
  return absl::StrCat(path, "[", i, "]");
}

// How a node looks in an error message: the scalar quoted, or its shape.
inline std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return absl::StrCat("\"", node.Scalar(), "\"");
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "null";
}

// Present means given and not null: `key:` and `key: ~` read as absent.
inline bool Present(const YAML::Node& node) { return node.IsDefined() && !node.IsNull(); }

// The field `key` of the mapping `map` (undefined when absent).
inline YAML::Node Get(const YAML::Node& map, const char* key) {
  return Present(map) && map.IsMap() ? map[key] : YAML::Node(YAML::NodeType::Undefined);
}

// `node` must be a mapping whose keys are all in `known` (each at most once).
// An absent or null node reads as an empty mapping.
inline absl::Status CheckMapping(const YAML::Node& node, const std::string& path,
                                 std::initializer_list<absl::string_view> known) {
  if (!Present(node)) return absl::OkStatus();
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  std::set<std::string> seen;
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Invalid(path, "keys must be strings");
    const std::string key = kv.first.Scalar();
    bool ok = false;
    for (absl::string_view k : known) ok = ok || k == key;
    if (!ok) {
      return Invalid(
          Join(path, key),
          absl::StrCat("unknown field",
                       DidYouMean(key, std::vector<std::string>(known.begin(), known.end()))));
    }
    if (!seen.insert(key).second) return Invalid(Join(path, key), "duplicate field");
  }
  return absl::OkStatus();
}

// A number or boolean must be a plain scalar: `"3"` is a string, as in a CRD.
inline absl::Status PlainScalar(const YAML::Node& node, const std::string& path,
                                absl::string_view what) {
  if (!node.IsScalar())
    return Invalid(path, absl::StrCat("must be ", what, ", got ", Describe(node)));
  if (node.Tag() == "!") {
    return Invalid(path, absl::StrCat("must be ", what, ", got ", Describe(node), " (quoted)"));
  }
  return absl::OkStatus();
}

inline absl::StatusOr<int64_t> AsInt(const YAML::Node& node, const std::string& path) {
  RETURN_IF_ERROR(PlainScalar(node, path, "an integer"));
  int64_t v = 0;
  if (!absl::SimpleAtoi(node.Scalar(), &v)) {
    return Invalid(path, absl::StrCat("must be an integer, got ", Describe(node)));
  }
  return v;
}

inline absl::StatusOr<double> AsDouble(const YAML::Node& node, const std::string& path) {
  RETURN_IF_ERROR(PlainScalar(node, path, "a number"));
  double v = 0;
  if (!absl::SimpleAtod(node.Scalar(), &v) || !std::isfinite(v)) {
    return Invalid(path, absl::StrCat("must be a number, got ", Describe(node)));
  }
  return v;
}

// The optional field `key` of `map`, under `path`; `*out` keeps its default
// when the field is absent.
inline absl::Status ReadInt64(const YAML::Node& map, const std::string& path, const char* key,
                              int64_t* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  ASSIGN_OR_RETURN(*out, AsInt(node, Join(path, key)));
  return absl::OkStatus();
}

inline absl::Status ReadInt32(const YAML::Node& map, const std::string& path, const char* key,
                              int32_t* out) {
  int64_t v = *out;
  RETURN_IF_ERROR(ReadInt64(map, path, key, &v));
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    return Invalid(Join(path, key), absl::StrCat("must be <= 2147483647, got ", v));
  }
  *out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

inline absl::Status ReadUint64(const YAML::Node& map, const std::string& path, const char* key,
                               uint64_t* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  const std::string field = Join(path, key);
  RETURN_IF_ERROR(PlainScalar(node, field, "an integer"));
  if (!absl::SimpleAtoi(node.Scalar(), out)) {
    int64_t negative = 0;
    if (absl::SimpleAtoi(node.Scalar(), &negative)) {
      return Invalid(field, absl::StrCat("must be >= 0, got ", negative));
    }
    return Invalid(field, absl::StrCat("must be an integer, got ", Describe(node)));
  }
  return absl::OkStatus();
}

inline absl::Status ReadDouble(const YAML::Node& map, const std::string& path, const char* key,
                               double* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  ASSIGN_OR_RETURN(*out, AsDouble(node, Join(path, key)));
  return absl::OkStatus();
}

inline absl::Status ReadBool(const YAML::Node& map, const std::string& path, const char* key,
                             bool* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  const std::string field = Join(path, key);
  RETURN_IF_ERROR(PlainScalar(node, field, "true or false"));
  const std::string& s = node.Scalar();
  if (s == "true" || s == "True" || s == "TRUE") {
    *out = true;
  } else if (s == "false" || s == "False" || s == "FALSE") {
    *out = false;
  } else {
    return Invalid(field, absl::StrCat("must be true or false, got ", Describe(node)));
  }
  return absl::OkStatus();
}

inline absl::Status ReadString(const YAML::Node& map, const std::string& path, const char* key,
                               std::string* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  if (!node.IsScalar()) {
    return Invalid(Join(path, key), absl::StrCat("must be a string, got ", Describe(node)));
  }
  *out = node.Scalar();
  return absl::OkStatus();
}

// A duration string ("30s", "500ms", "2m"; "0" as in Go) in milliseconds.
inline absl::Status ReadDurationMs(const YAML::Node& map, const std::string& path, const char* key,
                                   int64_t* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  const std::string field = Join(path, key);
  if (!node.IsScalar()) {
    return Invalid(field, absl::StrCat("must be a duration like \"30s\", \"500ms\" or \"2m\", got ",
                                       Describe(node)));
  }
  if (node.Scalar() == "0") {
    *out = 0;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(*out, ParseDurationMs(node.Scalar(), field));
  return absl::OkStatus();
}

// Like ReadDurationMs in microseconds: "200us", "1.5ms", "1s".
inline absl::Status ReadDurationUs(const YAML::Node& map, const std::string& path, const char* key,
                                   int64_t* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  const std::string field = Join(path, key);
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  const size_t unit_pos = text.find_first_not_of("0123456789.");
  double value = 0;
  double scale = 0;
  if (node.IsScalar() && unit_pos != 0 && unit_pos != std::string::npos &&
      absl::SimpleAtod(text.substr(0, unit_pos), &value)) {
    const std::string unit = text.substr(unit_pos);
    if (unit == "us") scale = 1;
    if (unit == "ms") scale = 1e3;
    if (unit == "s") scale = 1e6;
  }
  if (scale == 0 && text != "0") {
    return Invalid(
        field, absl::StrCat("must be a duration like \"200us\" or \"1ms\", got ", Describe(node)));
  }
  *out = static_cast<int64_t>(value * scale + 0.5);
  return absl::OkStatus();
}

// The optional field `key` of `map`, one of `allowed` by its vocab::Name;
// `*out` keeps its default when the field is absent.
template <typename E>
inline absl::Status ReadOneOf(const YAML::Node& map, const std::string& path, const char* key,
                              const std::vector<E>& allowed, E* out) {
  if (!Present(Get(map, key))) return absl::OkStatus();
  std::string text;
  RETURN_IF_ERROR(ReadString(map, path, key, &text));
  ASSIGN_OR_RETURN(*out, vocab::ParseOneOf(Join(path, key), text, allowed));
  return absl::OkStatus();
}

inline absl::Status ReadStringMap(const YAML::Node& node, const std::string& path,
                                  std::map<std::string, std::string>* out) {
  if (!Present(node)) return absl::OkStatus();
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  for (const auto& kv : node) {
    if (!kv.first.IsScalar()) return Invalid(path, "keys must be strings");
    const std::string field = Join(path, kv.first.Scalar());
    if (!kv.second.IsScalar()) {
      return Invalid(field, absl::StrCat("must be a string, got ", Describe(kv.second)));
    }
    if (!out->emplace(kv.first.Scalar(), kv.second.Scalar()).second) {
      return Invalid(field, "duplicate field");
    }
  }
  return absl::OkStatus();
}

inline absl::Status Required(const YAML::Node& map, const std::string& path, const char* key) {
  if (!Present(Get(map, key))) return Invalid(Join(path, key), "required");
  return absl::OkStatus();
}

inline absl::Status AtLeast(const std::string& path, int64_t v, int64_t min) {
  if (v < min) return Invalid(path, absl::StrCat("must be >= ", min, ", got ", v));
  return absl::OkStatus();
}

inline absl::Status Positive(const std::string& path, double v) {
  if (!(v > 0)) return Invalid(path, absl::StrCat("must be > 0, got ", v));
  return absl::OkStatus();
}

inline absl::Status CheckDns1123Label(const std::string& path, const std::string& s) {
  if (IsDns1123Label(s)) return absl::OkStatus();
  return Invalid(path, absl::StrCat("must be a DNS-1123 label (lowercase letters, digits and "
                                    "'-', at most 63 characters, starting and ending with a "
                                    "letter or digit), got \"",
                                    s, "\""));
}

// Loads exactly one YAML document; `what` prefixes the errors.
inline absl::StatusOr<YAML::Node> LoadOne(const std::string& yaml, const std::string& what) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(yaml);
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return Invalid(what, absl::StrCat("not valid YAML: ", e.msg));
    return Invalid(what, absl::StrCat("not valid YAML: line ", e.mark.line + 1, ", column ",
                                      e.mark.column + 1, ": ", e.msg));
  }
  if (docs.empty() || docs[0].IsNull()) return Invalid(what, "empty document");
  if (docs.size() > 1) {
    return Invalid(what, absl::StrCat("must hold one YAML document, got ", docs.size()));
  }
  return docs[0];
}

}  // namespace antdt::manifest
