// Kubernetes objects as JSON (nlohmann::json): reading their fields, and YAML
// read the way the API server stores it. No I/O; used by the operator, the
// pure reconciler, the API-server emulator and the tests.
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
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

// YAML as kubectl sends it and the API server stores it: plain scalars
// resolve by the YAML core schema (null, bool, int, float, else string);
// quoted or explicitly tagged scalars are strings; integers beyond int64 are
// floats.
Json YamlToJson(const YAML::Node& node);

}  // namespace antdt::kube
