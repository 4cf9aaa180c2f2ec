#include "testing/kube-emulator/pod_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

json Restricted() {
  return json::parse(R"({
    "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
    "volumes": [{"name": "tmp", "emptyDir": {}}],
    "containers": [{"name": "c", "securityContext": {
        "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]})");
}

TEST(PodSecurityTest, LevelsParse) {
  EXPECT_EQ(ParsePodSecurityLevel("restricted"), PodSecurityLevel::kRestricted);
  EXPECT_EQ(ParsePodSecurityLevel("baseline"), PodSecurityLevel::kBaseline);
  EXPECT_EQ(ParsePodSecurityLevel("privileged"), PodSecurityLevel::kPrivileged);
  EXPECT_EQ(ParsePodSecurityLevel("Restricted"), std::nullopt);
}

TEST(PodSecurityTest, ARestrictedPodPassesEveryLevel) {
  for (auto level : {PodSecurityLevel::kPrivileged, PodSecurityLevel::kBaseline,
                     PodSecurityLevel::kRestricted}) {
    EXPECT_THAT(PodSecurityViolations(level, Restricted()), IsEmpty());
  }
}

TEST(PodSecurityTest, AnEmptyPodPassesBaselineButNotRestricted) {
  const json spec = json::parse(R"({"containers": [{"name": "a"}, {"name": "b"}]})");
  EXPECT_THAT(PodSecurityViolations(PodSecurityLevel::kBaseline, spec), IsEmpty());
  EXPECT_THAT(
      PodSecurityViolations(PodSecurityLevel::kRestricted, spec),
      ElementsAre("allowPrivilegeEscalation != false (containers \"a\", \"b\" must set "
                  "securityContext.allowPrivilegeEscalation=false)",
                  "unrestricted capabilities (containers \"a\", \"b\" must set "
                  "securityContext.capabilities.drop=[\"ALL\"])",
                  "runAsNonRoot != true (pod or containers \"a\", \"b\" must set "
                  "securityContext.runAsNonRoot=true)",
                  "seccompProfile (pod or containers \"a\", \"b\" must set "
                  "securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"));
}

TEST(PodSecurityTest, HostAccessBreaksBaseline) {
  json spec = Restricted();
  spec["hostNetwork"] = true;
  spec["volumes"].push_back({{"name", "proc"}, {"hostPath", {{"path", "/proc"}}}});
  spec["containers"][0]["ports"] = json::parse(R"([{"containerPort": 9400, "hostPort": 9400}])");
  spec["containers"][0]["securityContext"]["capabilities"]["add"] = {"NET_ADMIN"};
  spec["containers"][0]["securityContext"]["privileged"] = true;
  EXPECT_THAT(
      PodSecurityViolations(PodSecurityLevel::kBaseline, spec),
      ElementsAre("host namespaces (hostNetwork=true)",
                  "privileged (container \"c\" must not set securityContext.privileged=true)",
                  "non-default capabilities (container \"c\" must not include \"NET_ADMIN\" "
                  "in securityContext.capabilities.add)",
                  "hostPath volumes (volume \"proc\")",
                  "hostPort (container \"c\" uses hostPort 9400)"));
  const auto restricted = PodSecurityViolations(PodSecurityLevel::kRestricted, spec);
  EXPECT_THAT(restricted,
              ::testing::Contains("restricted volume types (volume \"proc\" uses restricted volume "
                                  "type \"hostPath\")"));
  EXPECT_THAT(restricted, ::testing::Contains("unrestricted capabilities (container \"c\" must set "
                                              "securityContext.capabilities.drop=[\"ALL\"])"));
  EXPECT_THAT(PodSecurityViolations(PodSecurityLevel::kPrivileged, spec), IsEmpty());
}

TEST(PodSecurityTest, ContainerSettingsOverrideThePods) {
  json spec = Restricted();
  spec["containers"][0]["securityContext"]["runAsNonRoot"] = false;
  spec["containers"][0]["securityContext"]["seccompProfile"] = {{"type", "Unconfined"}};
  spec["containers"][0]["securityContext"]["runAsUser"] = 0;
  EXPECT_THAT(PodSecurityViolations(PodSecurityLevel::kRestricted, spec),
              ElementsAre("runAsNonRoot != true (pod or container \"c\" must set "
                          "securityContext.runAsNonRoot=true)",
                          "runAsUser=0 (container \"c\" must not set runAsUser=0)",
                          "seccompProfile (pod or container \"c\" must set "
                          "securityContext.seccompProfile.type to \"RuntimeDefault\" or "
                          "\"Localhost\")"));
  EXPECT_EQ(PodSecurityMessage(PodSecurityLevel::kRestricted, {"a", "b"}),
            "violates PodSecurity \"restricted:latest\": a, b");
}

}  // namespace
}  // namespace antdt::kubeemu
