#include "backends/kubernetes/client/object.h"

#include <cerrno>
#include <cstdlib>
#include <regex>

#include "absl/time/time.h"

namespace antdt::kube {

const Json& At(const Json& object, std::initializer_list<const char*> path) {
  static const Json kNull;
  const Json* cur = &object;
  for (const char* key : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(key);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

std::string StringAt(const Json& object, std::initializer_list<const char*> path) {
  const Json& v = At(object, path);
  return v.is_string() ? v.get<std::string>() : std::string();
}

std::string Label(const Json& object, const std::string& key) {
  const Json& labels = At(object, {"metadata", "labels"});
  if (!labels.is_object()) return "";
  auto it = labels.find(key);
  return it != labels.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool Terminating(const Json& object) {
  return !At(object, {"metadata", "deletionTimestamp"}).is_null();
}

std::string PodPhase(const Json& pod) { return StringAt(pod, {"status", "phase"}); }

std::string KeyOf(const Json& object) {
  const std::string ns = StringAt(object, {"metadata", "namespace"});
  const std::string name = StringAt(object, {"metadata", "name"});
  return ns.empty() ? name : ns + "/" + name;
}

std::string ResourceVersionOf(const Json& object) {
  return StringAt(object, {"metadata", "resourceVersion"});
}

std::string FormatTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

std::string FormatMicroTime(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::optional<int64_t> ParseTime(const std::string& text) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) return std::nullopt;
  return absl::ToUnixMillis(t);
}

Json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const YAML::Node& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.Scalar()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Scalar:
      break;
  }
  const std::string& s = node.Scalar();
  if (node.Tag() != "?") return s;  // quoted ("!") or explicitly tagged
  static const std::regex kNull("^(~|null|Null|NULL)$");
  static const std::regex kInt("^[-+]?[0-9]+$");
  static const std::regex kFloat(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (s.empty() || std::regex_match(s, kNull)) return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  if (std::regex_match(s, kInt)) {
    errno = 0;
    const long long v = std::strtoll(s.c_str(), nullptr, 10);
    if (errno != ERANGE) return static_cast<int64_t>(v);
    return std::strtod(s.c_str(), nullptr);
  }
  if (std::regex_match(s, kFloat)) return std::strtod(s.c_str(), nullptr);
  return s;
}

}  // namespace antdt::kube
