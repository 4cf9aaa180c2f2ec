// RBAC authorization, as the API server's (kubernetes.io/docs/reference/
// access-authn-authz/rbac): a request's user and groups, verb, API group,
// resource (and subresource), namespace and name are allowed when a
// RoleBinding in the namespace or a ClusterRoleBinding grants them through a
// Role or ClusterRole rule. Members of system:masters may do anything.
// A refusal reads as the API server's 403:
//
//   pods is forbidden: User "system:serviceaccount:ns:sa" cannot list
//   resource "pods" in API group "" in the namespace "team-a"
//
// Pure functions over the stored objects; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace antdt::kubeemu {

struct UserInfo {
  std::string name;  // "" : not authenticated
  std::vector<std::string> groups;
};

// What a resource request asks to do.
struct RequestAttributes {
  std::string verb;  // get list watch create update patch delete deletecollection
  std::string api_group;
  std::string resource;
  std::string subresource;
  std::string namespace_;  // "" cluster-scoped (or all namespaces)
  std::string name;
};

// The user a ServiceAccount's token stands for, and its groups.
UserInfo ServiceAccountUser(const std::string& ns, const std::string& name);

// The stored RBAC objects the decision reads.
struct RbacObjects {
  std::vector<nlohmann::json> roles, cluster_roles, role_bindings, cluster_role_bindings;
};

bool RbacAllows(const UserInfo& user, const RequestAttributes& a, const RbacObjects& objects);

// The 403 message the API server gives for a refused request.
std::string ForbiddenMessage(const UserInfo& user, const RequestAttributes& a);

}  // namespace antdt::kubeemu
