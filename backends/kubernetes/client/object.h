// Kubernetes objects as JSON (nlohmann::json): reading their fields, and YAML
// read the way the API server stores it. No I/O; used by the operator, the
// pure reconciler, the API-server emulator and the tests.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace antdt::kube {

using Json = nlohmann::json;

// The value at `path` ({"status", "podIP"}); null when a step is missing or
// not an object.
const Json& At(const Json& object, std::initializer_list<const char*> path);
// The string at `path`; "" when missing or not a string.
std::string StringAt(const Json& object, std::initializer_list<const char*> path);

std::string Label(const Json& object, const std::string& key);  // "" when absent
bool Terminating(const Json& object);                           // metadata.deletionTimestamp is set
std::string PodPhase(const Json& pod);                          // status.phase

// "namespace/name" (or "name" for cluster-scoped objects) of an object.
std::string KeyOf(const Json& object);
std::string ResourceVersionOf(const Json& object);

// metav1.Time, "2026-11-29T21:00:00Z" (whole seconds, UTC).
std::string FormatTime(int64_t unix_ms);
// metav1.MicroTime, "2026-11-29T21:00:00.123000Z" (Lease acquire/renew times).
std::string FormatMicroTime(int64_t unix_ms);
// Either form (any RFC 3339 time) in Unix milliseconds; nullopt when it is not one.
std::optional<int64_t> ParseTime(const std::string& text);

// YAML as kubectl sends it and the API server stores it: plain scalars
// resolve by the YAML core schema (null, bool, int, float, else string);
// quoted or explicitly tagged scalars are strings; integers beyond int64 are
// floats.
Json YamlToJson(const YAML::Node& node);

}  // namespace antdt::kube
