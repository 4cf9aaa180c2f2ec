#include "backends/kubernetes/reconciler/pod_defaults.h"

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace antdt::reconciler {
namespace {

// Sets `key` in `obj` to `value` unless it is set.
void Default(Json& obj, const std::string& key, const Json& value) {
  if (!obj.is_object()) obj = Json::object();
  if (!obj.contains(key) || obj[key].is_null()) obj[key] = value;
}

bool MergedByName(const std::string& key) {
  return key == "containers" || key == "initContainers" || key == "volumes" ||
         key == "volumeMounts" || key == "env" || key == "ports";
}

void Merge(Json& base, const Json& patch);

void MergeNamedList(Json& base, const Json& patch, bool containers) {
  if (!base.is_array()) base = Json::array();
  for (size_t i = 0; i < patch.size(); ++i) {
    const Json& item = patch[i];
    Json* target = nullptr;
    const std::string name = item.is_object() ? item.value("name", "") : "";
    for (Json& b : base) {
      if (b.is_object() && !name.empty() && b.value("name", "") == name) target = &b;
    }
    if (target == nullptr && name.empty() && i == 0 && !base.empty()) target = &base[0];
    if (target == nullptr) {
      base.push_back(item);
      continue;
    }
    if (containers && item.is_object() && item.contains("command")) target->erase("args");
    Merge(*target, item);
  }
}

void Merge(Json& base, const Json& patch) {
  if (!patch.is_object() || !base.is_object()) {
    base = patch;
    return;
  }
  for (const auto& [key, value] : patch.items()) {
    if (value.is_null()) {
      base.erase(key);
    } else if (MergedByName(key) && value.is_array()) {
      MergeNamedList(base[key], value, key == "containers" || key == "initContainers");
    } else if (value.is_object() && base.contains(key) && base[key].is_object()) {
      Merge(base[key], value);
    } else {
      base[key] = value;
    }
  }
}

}  // namespace

void ApplySecureDefaults(Json& pod_spec, const Json& resources) {
  Json& psc = pod_spec["securityContext"];
  Default(psc, "runAsNonRoot", true);
  Default(psc, "runAsUser", kImageUid);
  Default(psc, "runAsGroup", kImageUid);
  Default(psc, "fsGroup", kImageUid);
  Default(psc, "seccompProfile", {{"type", "RuntimeDefault"}});
  bool has_tmp_volume = false;
  for (const Json& v : pod_spec.value("volumes", Json::array())) {
    if (v.value("name", "") == "tmp") has_tmp_volume = true;
  }
  if (!has_tmp_volume) {
    pod_spec["volumes"].push_back({{"name", "tmp"}, {"emptyDir", {{"sizeLimit", "1Gi"}}}});
  }
  for (Json& c : pod_spec["containers"]) {
    Json& sc = c["securityContext"];
    Default(sc, "allowPrivilegeEscalation", false);
    Default(sc, "readOnlyRootFilesystem", true);
    Default(sc, "capabilities", {{"drop", Json::array({"ALL"})}});
    if (!resources.is_null()) Default(c, "resources", resources);
    bool mounts_tmp = false;
    for (const Json& m : c.value("volumeMounts", Json::array())) {
      if (m.value("mountPath", "") == "/tmp") mounts_tmp = true;
    }
    if (!mounts_tmp) c["volumeMounts"].push_back({{"name", "tmp"}, {"mountPath", "/tmp"}});
  }
}

void EnsureWritable(Json& pod_spec, const std::string& path, const std::string& volume) {
  if (path.empty() || !pod_spec["containers"].is_array() || pod_spec["containers"].empty()) return;
  Json& c = pod_spec["containers"][0];
  for (const Json& m : c.value("volumeMounts", Json::array())) {
    const std::string at = m.value("mountPath", "");
    if (at == "/" || path == at || absl::StartsWith(path, absl::StrCat(at, "/"))) return;
  }
  pod_spec["volumes"].push_back({{"name", volume}, {"emptyDir", Json::object()}});
  c["volumeMounts"].push_back({{"name", volume}, {"mountPath", path}});
}

void MergePodTemplate(Json& pod, const Json& tmpl) {
  if (!tmpl.is_object()) return;
  const Json meta = tmpl.value("metadata", Json::object());
  for (const char* field : {"labels", "annotations"}) {
    if (!meta.contains(field) || !meta[field].is_object()) continue;
    Json merged = meta[field];
    const Json own = pod["metadata"].value(field, Json::object());
    for (const auto& [k, v] : own.items()) merged[k] = v;
    if (!merged.empty()) pod["metadata"][field] = merged;
  }
  if (tmpl.contains("spec") && tmpl["spec"].is_object()) Merge(pod["spec"], tmpl["spec"]);
}

}  // namespace antdt::reconciler
