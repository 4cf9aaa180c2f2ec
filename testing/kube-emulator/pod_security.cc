#include "testing/kube-emulator/pod_security.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;

const json& At(const json& obj, const char* key) {
  static const json kNull;
  return obj.is_object() && obj.contains(key) ? obj[key] : kNull;
}

bool True(const json& v) { return v.is_boolean() && v.get<bool>(); }

// Every container of the pod: init, regular and ephemeral.
std::vector<const json*> Containers(const json& spec) {
  std::vector<const json*> out;
  for (const char* key : {"initContainers", "containers", "ephemeralContainers"}) {
    const json& list = At(spec, key);
    if (!list.is_array()) continue;
    for (const json& c : list) out.push_back(&c);
  }
  return out;
}

std::string Quoted(const std::vector<std::string>& names) {
  std::vector<std::string> q;
  for (const std::string& n : names) q.push_back(absl::StrCat("\"", n, "\""));
  return absl::StrJoin(q, ", ");
}

// `container "a"` or `containers "a", "b"`.
std::string Subject(const char* one, const char* many, const std::vector<std::string>& names) {
  return absl::StrCat(names.size() == 1 ? one : many, " ", Quoted(names));
}

std::string Name(const json& c) { return c.value("name", ""); }

void Baseline(const json& spec, std::vector<std::string>* out) {
  std::vector<std::string> hosts;
  for (const char* field : {"hostNetwork", "hostPID", "hostIPC"}) {
    if (True(At(spec, field))) hosts.push_back(absl::StrCat(field, "=true"));
  }
  if (!hosts.empty())
    out->push_back(absl::StrCat("host namespaces (", absl::StrJoin(hosts, ", "), ")"));

  std::vector<std::string> privileged, host_path;
  std::vector<std::string> ports_of;
  std::vector<std::string> port_numbers;
  std::vector<std::string> caps;
  for (const json* c : Containers(spec)) {
    const json& sc = At(*c, "securityContext");
    if (True(At(sc, "privileged"))) privileged.push_back(Name(*c));
    const json& add = At(At(sc, "capabilities"), "add");
    static const std::set<std::string> kAllowed = {
        "AUDIT_WRITE",      "CHOWN",   "DAC_OVERRIDE", "FOWNER",  "FSETID", "KILL",      "MKNOD",
        "NET_BIND_SERVICE", "SETFCAP", "SETGID",       "SETPCAP", "SETUID", "SYS_CHROOT"};
    if (add.is_array()) {
      for (const json& cap : add) {
        if (cap.is_string() && !kAllowed.count(cap.get<std::string>())) {
          caps.push_back(absl::StrCat("container \"", Name(*c), "\" must not include \"",
                                      cap.get<std::string>(),
                                      "\" in securityContext.capabilities.add"));
        }
      }
    }
    bool uses = false;
    for (const json& p : At(*c, "ports").is_array() ? At(*c, "ports") : json::array()) {
      if (At(p, "hostPort").is_number_integer() && At(p, "hostPort").get<int64_t>() != 0) {
        port_numbers.push_back(std::to_string(At(p, "hostPort").get<int64_t>()));
        uses = true;
      }
    }
    if (uses) ports_of.push_back(Name(*c));
  }
  if (!privileged.empty()) {
    out->push_back(absl::StrCat("privileged (", Subject("container", "containers", privileged),
                                " must not set securityContext.privileged=true)"));
  }
  if (!caps.empty()) {
    out->push_back(absl::StrCat("non-default capabilities (", absl::StrJoin(caps, "; "), ")"));
  }
  for (const json& v : At(spec, "volumes").is_array() ? At(spec, "volumes") : json::array()) {
    if (v.contains("hostPath")) host_path.push_back(Name(v));
  }
  if (!host_path.empty()) {
    out->push_back(
        absl::StrCat("hostPath volumes (", Subject("volume", "volumes", host_path), ")"));
  }
  if (!ports_of.empty()) {
    out->push_back(absl::StrCat("hostPort (", Subject("container", "containers", ports_of),
                                " uses ", port_numbers.size() == 1 ? "hostPort " : "hostPorts ",
                                absl::StrJoin(port_numbers, ", "), ")"));
  }
  const json& pod_seccomp = At(At(At(spec, "securityContext"), "seccompProfile"), "type");
  if (pod_seccomp == "Unconfined") {
    out->push_back(
        "seccompProfile (pod must not set securityContext.seccompProfile.type to \"Unconfined\")");
  }
}

void Restricted(const json& spec, std::vector<std::string>* out) {
  static const std::set<std::string> kVolumes = {"configMap", "csi",       "downwardAPI",
                                                 "emptyDir",  "ephemeral", "persistentVolumeClaim",
                                                 "projected", "secret"};
  std::vector<std::string> restricted_volumes;
  std::set<std::string> restricted_types;
  for (const json& v : At(spec, "volumes").is_array() ? At(spec, "volumes") : json::array()) {
    for (const auto& [key, _] : v.items()) {
      if (key == "name" || kVolumes.count(key)) continue;
      restricted_volumes.push_back(Name(v));
      restricted_types.insert(key);
    }
  }
  if (!restricted_volumes.empty()) {
    std::vector<std::string> types(restricted_types.begin(), restricted_types.end());
    out->push_back(absl::StrCat("restricted volume types (",
                                Subject("volume", "volumes", restricted_volumes),
                                restricted_volumes.size() == 1 ? " uses" : " use",
                                " restricted volume type ", Quoted(types), ")"));
  }
  const json& psc = At(spec, "securityContext");
  const bool pod_non_root = True(At(psc, "runAsNonRoot"));
  const json& pod_seccomp = At(At(psc, "seccompProfile"), "type");
  std::vector<std::string> escalation, capabilities, non_root, root_user, seccomp;
  for (const json* c : Containers(spec)) {
    const json& sc = At(*c, "securityContext");
    const std::string name = Name(*c);
    if (At(sc, "allowPrivilegeEscalation") != false) escalation.push_back(name);
    const json& caps = At(sc, "capabilities");
    const json& drop = At(caps, "drop");
    bool drops_all = false;
    if (drop.is_array()) {
      for (const json& d : drop) drops_all = drops_all || d == "ALL";
    }
    bool adds_other = false;
    if (At(caps, "add").is_array()) {
      for (const json& a : At(caps, "add")) adds_other = adds_other || a != "NET_BIND_SERVICE";
    }
    if (!drops_all || adds_other) capabilities.push_back(name);
    const json& non_root_c = At(sc, "runAsNonRoot");
    if (!(True(non_root_c) || (pod_non_root && non_root_c != false))) non_root.push_back(name);
    if (At(sc, "runAsUser") == 0) root_user.push_back(name);
    const json& type = At(At(sc, "seccompProfile"), "type");
    const json& effective = type.is_null() ? pod_seccomp : type;
    if (effective != "RuntimeDefault" && effective != "Localhost") seccomp.push_back(name);
  }
  if (!escalation.empty()) {
    out->push_back(absl::StrCat("allowPrivilegeEscalation != false (",
                                Subject("container", "containers", escalation),
                                " must set securityContext.allowPrivilegeEscalation=false)"));
  }
  if (!capabilities.empty()) {
    out->push_back(absl::StrCat("unrestricted capabilities (",
                                Subject("container", "containers", capabilities),
                                " must set securityContext.capabilities.drop=[\"ALL\"])"));
  }
  if (!non_root.empty()) {
    out->push_back(absl::StrCat("runAsNonRoot != true (pod or ",
                                Subject("container", "containers", non_root),
                                " must set securityContext.runAsNonRoot=true)"));
  }
  if (At(psc, "runAsUser") == 0 || !root_user.empty()) {
    out->push_back(absl::StrCat(
        "runAsUser=0 (", root_user.empty() ? "pod" : Subject("container", "containers", root_user),
        " must not set runAsUser=0)"));
  }
  if (!seccomp.empty()) {
    out->push_back(absl::StrCat(
        "seccompProfile (pod or ", Subject("container", "containers", seccomp),
        " must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"));
  }
}

}  // namespace

std::optional<PodSecurityLevel> ParsePodSecurityLevel(const std::string& text) {
  if (text == "privileged") return PodSecurityLevel::kPrivileged;
  if (text == "baseline") return PodSecurityLevel::kBaseline;
  if (text == "restricted") return PodSecurityLevel::kRestricted;
  return std::nullopt;
}

std::string PodSecurityLevelName(PodSecurityLevel level) {
  switch (level) {
    case PodSecurityLevel::kPrivileged:
      return "privileged";
    case PodSecurityLevel::kBaseline:
      return "baseline";
    case PodSecurityLevel::kRestricted:
      return "restricted";
  }
  return "";
}

std::vector<std::string> PodSecurityViolations(PodSecurityLevel level, const json& pod_spec) {
  std::vector<std::string> out;
  if (level == PodSecurityLevel::kPrivileged) return out;
  Baseline(pod_spec, &out);
  if (level == PodSecurityLevel::kRestricted) Restricted(pod_spec, &out);
  return out;
}

std::string PodSecurityMessage(PodSecurityLevel level, const std::vector<std::string>& violations) {
  if (violations.empty()) return "";
  return absl::StrCat("violates PodSecurity \"", PodSecurityLevelName(level),
                      ":latest\": ", absl::StrJoin(violations, ", "));
}

}  // namespace antdt::kubeemu
