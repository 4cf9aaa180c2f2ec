#include "testing/kube-emulator/rbac.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;

bool Has(const json& list, const std::string& value) {
  if (!list.is_array()) return false;
  for (const json& v : list) {
    if (v.is_string() && (v.get<std::string>() == "*" || v.get<std::string>() == value)) {
      return true;
    }
  }
  return false;
}

bool RuleAllows(const json& rule, const RequestAttributes& a) {
  if (!Has(rule.value("verbs", json::array()), a.verb)) return false;
  if (!Has(rule.value("apiGroups", json::array()), a.api_group)) return false;
  const std::string resource =
      a.subresource.empty() ? a.resource : absl::StrCat(a.resource, "/", a.subresource);
  const json resources = rule.value("resources", json::array());
  bool resource_ok = Has(resources, resource);
  // "*/status" style: any resource's subresource.
  if (!resource_ok && !a.subresource.empty()) resource_ok = Has(resources, "*/" + a.subresource);
  if (!resource_ok) return false;
  const json names = rule.value("resourceNames", json::array());
  if (names.is_array() && !names.empty()) {
    // Named rules cover only requests that name an object.
    if (a.name.empty()) return false;
    return std::find(names.begin(), names.end(), json(a.name)) != names.end();
  }
  return true;
}

bool SubjectMatches(const json& s, const UserInfo& user, const std::string& binding_ns) {
  const std::string kind = s.value("kind", "");
  const std::string name = s.value("name", "");
  if (kind == "User") return name == user.name;
  if (kind == "Group") {
    return std::find(user.groups.begin(), user.groups.end(), name) != user.groups.end();
  }
  if (kind == "ServiceAccount") {
    const std::string ns = s.value("namespace", binding_ns);
    return user.name == absl::StrCat("system:serviceaccount:", ns, ":", name);
  }
  return false;
}

bool Bound(const json& binding, const UserInfo& user, const std::string& binding_ns) {
  for (const json& s : binding.value("subjects", json::array())) {
    if (SubjectMatches(s, user, binding_ns)) return true;
  }
  return false;
}

const json* FindRole(const std::vector<json>& roles, const std::string& name,
                     const std::string& ns) {
  for (const json& r : roles) {
    const json& md = r["metadata"];
    if (md.value("name", "") == name && md.value("namespace", "") == ns) return &r;
  }
  return nullptr;
}

bool RoleAllows(const json* role, const RequestAttributes& a) {
  if (role == nullptr) return false;
  for (const json& rule : role->value("rules", json::array())) {
    if (RuleAllows(rule, a)) return true;
  }
  return false;
}

}  // namespace

UserInfo ServiceAccountUser(const std::string& ns, const std::string& name) {
  return {absl::StrCat("system:serviceaccount:", ns, ":", name),
          {"system:serviceaccounts", absl::StrCat("system:serviceaccounts:", ns),
           "system:authenticated"}};
}

bool RbacAllows(const UserInfo& user, const RequestAttributes& a, const RbacObjects& objects) {
  if (std::find(user.groups.begin(), user.groups.end(), "system:masters") != user.groups.end()) {
    return true;
  }
  for (const json& b : objects.cluster_role_bindings) {
    if (!Bound(b, user, "")) continue;
    const json& ref = b["roleRef"];
    if (ref.value("kind", "") != "ClusterRole") continue;
    if (RoleAllows(FindRole(objects.cluster_roles, ref.value("name", ""), ""), a)) return true;
  }
  if (a.namespace_.empty()) return false;
  for (const json& b : objects.role_bindings) {
    const std::string ns = b["metadata"].value("namespace", "");
    if (ns != a.namespace_ || !Bound(b, user, ns)) continue;
    const json& ref = b["roleRef"];
    const std::string kind = ref.value("kind", "");
    const json* role = kind == "Role" ? FindRole(objects.roles, ref.value("name", ""), ns)
                                      : FindRole(objects.cluster_roles, ref.value("name", ""), "");
    if (RoleAllows(role, a)) return true;
  }
  return false;
}

std::string ForbiddenMessage(const UserInfo& user, const RequestAttributes& a) {
  const std::string resource =
      a.subresource.empty() ? a.resource : absl::StrCat(a.resource, "/", a.subresource);
  std::string subject = a.name.empty() ? resource : absl::StrCat(resource, " \"", a.name, "\"");
  if (!a.api_group.empty() && a.name.empty()) subject = absl::StrCat(a.resource, ".", a.api_group);
  if (!a.api_group.empty() && !a.name.empty()) {
    subject = absl::StrCat(a.resource, ".", a.api_group, " \"", a.name, "\"");
  }
  const std::string who = user.name.empty() ? "system:anonymous" : user.name;
  return absl::StrCat(subject, " is forbidden: User \"", who, "\" cannot ", a.verb, " resource \"",
                      resource, "\" in API group \"", a.api_group, "\"",
                      a.namespace_.empty()
                          ? " at the cluster scope"
                          : absl::StrCat(" in the namespace \"", a.namespace_, "\""));
}

}  // namespace antdt::kubeemu
