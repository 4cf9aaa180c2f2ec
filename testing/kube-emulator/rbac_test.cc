#include "testing/kube-emulator/rbac.h"

#include <gtest/gtest.h>

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;

json Role(const std::string& kind, const std::string& ns, const std::string& name,
          const char* rules) {
  json r = {{"kind", kind}, {"metadata", {{"name", name}}}, {"rules", json::parse(rules)}};
  if (!ns.empty()) r["metadata"]["namespace"] = ns;
  return r;
}

json Binding(const std::string& ns, const std::string& role_kind, const std::string& role,
             const json& subjects) {
  json b = {{"metadata", {{"name", "b"}}},
            {"roleRef", {{"kind", role_kind}, {"name", role}}},
            {"subjects", subjects}};
  if (!ns.empty()) b["metadata"]["namespace"] = ns;
  return b;
}

RequestAttributes Req(const std::string& verb, const std::string& group,
                      const std::string& resource, const std::string& ns,
                      const std::string& name = "", const std::string& sub = "") {
  return {verb, group, resource, sub, ns, name};
}

TEST(RbacTest, AClusterRoleBoundInANamespaceGrantsOnlyThere) {
  RbacObjects o;
  o.cluster_roles.push_back(Role("ClusterRole", "", "edit",
                                 R"([{"apiGroups": ["", "apps"], "resources": ["*"],
                                      "verbs": ["*"]}])"));
  o.role_bindings.push_back(Binding("team-a", "ClusterRole", "edit",
                                    json::parse(R"([{"kind": "Group", "name": "devs"}])")));
  const UserInfo dev{"alice", {"devs", "system:authenticated"}};
  EXPECT_TRUE(RbacAllows(dev, Req("create", "apps", "deployments", "team-a"), o));
  EXPECT_TRUE(
      RbacAllows(dev, Req("get", "", "pods", "team-a", "p", "log"), o));  // "*": subresources too
  EXPECT_FALSE(RbacAllows(dev, Req("create", "apps", "deployments", "team-b"), o));
  EXPECT_FALSE(RbacAllows(dev, Req("list", "", "pods", ""), o));
  EXPECT_FALSE(RbacAllows(dev, Req("list", "batch", "jobs", "team-a"), o));
  EXPECT_FALSE(RbacAllows(UserInfo{"bob", {"others"}}, Req("list", "", "pods", "team-a"), o));
}

TEST(RbacTest, SubresourcesAndNamesAreTheirOwnGrants) {
  RbacObjects o;
  o.roles.push_back(Role("Role", "ns", "r",
                         R"([{"apiGroups": ["antdt.io"], "resources": ["antdtjobs/status"],
                              "verbs": ["update"]},
                             {"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["one"], "verbs": ["get", "update"]}])"));
  o.role_bindings.push_back(
      Binding("ns", "Role", "r", json::parse(R"([{"kind": "ServiceAccount", "name": "sa"}])")));
  const UserInfo sa = ServiceAccountUser("ns", "sa");
  EXPECT_EQ(sa.name, "system:serviceaccount:ns:sa");
  EXPECT_TRUE(RbacAllows(sa, Req("update", "antdt.io", "antdtjobs", "ns", "j", "status"), o));
  EXPECT_FALSE(RbacAllows(sa, Req("update", "antdt.io", "antdtjobs", "ns", "j"), o));
  EXPECT_TRUE(RbacAllows(sa, Req("get", "", "configmaps", "ns", "one"), o));
  EXPECT_FALSE(RbacAllows(sa, Req("get", "", "configmaps", "ns", "two"), o));
  EXPECT_FALSE(RbacAllows(sa, Req("list", "", "configmaps", "ns"), o));  // names: no list
  // The ServiceAccount subject's namespace defaults to the binding's.
  EXPECT_FALSE(RbacAllows(ServiceAccountUser("other", "sa"),
                          Req("get", "", "configmaps", "other", "one"), o));
}

TEST(RbacTest, MastersMayDoAnythingAndTheMessageNamesTheRequest) {
  EXPECT_TRUE(RbacAllows(UserInfo{"admin", {"system:masters"}}, Req("delete", "", "nodes", "", "n"),
                         RbacObjects{}));
  EXPECT_EQ(ForbiddenMessage(ServiceAccountUser("a", "b"), Req("list", "", "nodes", "")),
            "nodes is forbidden: User \"system:serviceaccount:a:b\" cannot list resource "
            "\"nodes\" in API group \"\" at the cluster scope");
  EXPECT_EQ(
      ForbiddenMessage(UserInfo{}, Req("update", "antdt.io", "antdtjobs", "x", "j", "status")),
      "antdtjobs.antdt.io \"j\" is forbidden: User \"system:anonymous\" cannot update resource "
      "\"antdtjobs/status\" in API group \"antdt.io\" in the namespace \"x\"");
}

}  // namespace
}  // namespace antdt::kubeemu
