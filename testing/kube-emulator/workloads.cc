#include "testing/kube-emulator/workloads.h"

#include <cstdio>
#include <functional>

namespace antdt::kubeemu {
namespace {

const json& At(const json& obj, const char* key) {
  static const json kNull;
  return obj.is_object() && obj.contains(key) ? obj[key] : kNull;
}

std::string Label(const json& labels, const std::string& key) {
  return labels.is_object() && labels.contains(key) && labels[key].is_string()
             ? labels[key].get<std::string>()
             : "";
}

bool InList(const json& values, const std::string& v) {
  if (!values.is_array()) return false;
  for (const json& x : values) {
    if (x == v) return true;
  }
  return false;
}

// One matchExpressions / matchFields requirement against a value that may be absent.
bool Requirement(const json& req, bool present, const std::string& value) {
  const std::string op = req.value("operator", "");
  const json& values = At(req, "values");
  if (op == "In") return present && InList(values, value);
  if (op == "NotIn") return !present || !InList(values, value);
  if (op == "Exists") return present;
  if (op == "DoesNotExist") return !present;
  return false;  // Gt, Lt: not used by AntDT's pods
}

bool TermMatches(const json& term, const json& node) {
  const json& labels = At(At(node, "metadata"), "labels");
  for (const json& req :
       At(term, "matchExpressions").is_array() ? At(term, "matchExpressions") : json::array()) {
    const std::string key = req.value("key", "");
    const bool present = labels.is_object() && labels.contains(key);
    if (!Requirement(req, present, Label(labels, key))) return false;
  }
  for (const json& req :
       At(term, "matchFields").is_array() ? At(term, "matchFields") : json::array()) {
    if (req.value("key", "") != "metadata.name") return false;
    if (!Requirement(req, true, At(node, "metadata").value("name", ""))) return false;
  }
  return true;
}

bool Tolerates(const json& tolerations, const json& taint) {
  if (!tolerations.is_array()) return false;
  for (const json& t : tolerations) {
    const std::string op = t.value("operator", "Equal");
    const std::string key = t.value("key", "");
    const std::string effect = t.value("effect", "");
    if (!effect.empty() && effect != taint.value("effect", "")) continue;
    if (op == "Exists" && (key.empty() || key == taint.value("key", ""))) return true;
    if (op == "Equal" && key == taint.value("key", "") &&
        t.value("value", "") == taint.value("value", "")) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string PodTemplateHash(const json& pod_template) {
  const size_t h = std::hash<std::string>{}(pod_template.dump());
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016zx", h);
  // Kubernetes' hashes are short and DNS-safe; these letters and digits are.
  return std::string(buf).substr(0, 10);
}

json ControllerRef(const json& owner, const std::string& api_version, const std::string& kind) {
  return {{"apiVersion", api_version},
          {"kind", kind},
          {"name", owner["metadata"].value("name", "")},
          {"uid", owner["metadata"].value("uid", "")},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

json PodFromTemplate(const json& pod_template, const std::string& ns, const json& owner_ref,
                     const std::string& name, const std::string& generate_name,
                     const json& extra_labels) {
  json meta =
      At(pod_template, "metadata").is_object() ? At(pod_template, "metadata") : json::object();
  json labels = At(meta, "labels").is_object() ? meta["labels"] : json::object();
  for (const auto& [k, v] : extra_labels.items()) labels[k] = v;
  json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", json::object()}};
  pod["metadata"]["namespace"] = ns;
  if (!name.empty()) pod["metadata"]["name"] = name;
  if (name.empty()) pod["metadata"]["generateName"] = generate_name;
  if (!labels.empty()) pod["metadata"]["labels"] = labels;
  if (At(meta, "annotations").is_object()) pod["metadata"]["annotations"] = meta["annotations"];
  pod["metadata"]["ownerReferences"] = json::array({owner_ref});
  pod["spec"] = At(pod_template, "spec").is_object() ? pod_template["spec"] : json::object();
  return pod;
}

bool PodReady(const json& pod) {
  if (At(pod, "metadata").contains("deletionTimestamp")) return false;
  const json& conditions = At(At(pod, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (c.value("type", "") == "Ready" && c.value("status", "") == "True") return true;
  }
  return false;
}

bool DaemonPodFits(const json& pod_spec, const json& node) {
  const json& labels = At(At(node, "metadata"), "labels");
  const json& selector = At(pod_spec, "nodeSelector");
  if (selector.is_object()) {
    for (const auto& [k, v] : selector.items()) {
      if (!v.is_string() || Label(labels, k) != v.get<std::string>()) return false;
    }
  }
  const json& required = At(At(At(At(pod_spec, "affinity"), "nodeAffinity"),
                               "requiredDuringSchedulingIgnoredDuringExecution"),
                            "nodeSelectorTerms");
  if (required.is_array() && !required.empty()) {
    bool any = false;
    for (const json& term : required) any = any || TermMatches(term, node);
    if (!any) return false;
  }
  const json& taints = At(At(node, "spec"), "taints");
  if (taints.is_array()) {
    for (const json& taint : taints) {
      const std::string effect = taint.value("effect", "");
      if ((effect == "NoSchedule" || effect == "NoExecute") &&
          !Tolerates(At(pod_spec, "tolerations"), taint)) {
        return false;
      }
    }
  }
  return true;
}

bool SelectorMatches(const json& selector, const json& labels) {
  if (!selector.is_object()) return false;
  const json& match = At(selector, "matchLabels");
  if (match.is_object()) {
    for (const auto& [k, v] : match.items()) {
      if (!v.is_string() || Label(labels, k) != v.get<std::string>()) return false;
    }
  }
  const json& exprs = At(selector, "matchExpressions");
  if (exprs.is_array()) {
    for (const json& req : exprs) {
      const std::string key = req.value("key", "");
      const bool present = labels.is_object() && labels.contains(key);
      if (!Requirement(req, present, Label(labels, key))) return false;
    }
  }
  return true;
}

}  // namespace antdt::kubeemu
