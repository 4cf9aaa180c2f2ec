#include "backends/kubernetes/operator/readiness.h"

#include <gtest/gtest.h>

#include <atomic>

#include "backends/kubernetes/operator/config.h"
#include "common/config.h"
#include "testing/kube-fake/fake_api.h"

namespace antdt::kube_operator {
namespace {

TEST(ReadinessTest, UnreadyUntilTheApiServerAnswers) {
  FakeClock clock;
  Readiness r(10'000, &clock);
  EXPECT_EQ(r.Check().message(), "the API server has not answered yet");
  EXPECT_TRUE(r.Quiet());
  r.OnResponse(0);    // no connection
  r.OnResponse(503);  // the server, but not serving
  EXPECT_FALSE(r.Check().ok());
  r.OnResponse(404);  // an answer, even if not the object
  EXPECT_TRUE(r.Check().ok());
  EXPECT_FALSE(r.Quiet());
}

TEST(ReadinessTest, UnreadyWhenTheApiServerFallsSilent) {
  FakeClock clock;
  Readiness r(10'000, &clock);
  r.OnResponse(200);
  clock.Advance(5'001);
  EXPECT_TRUE(r.Quiet());  // time to ask it something
  EXPECT_TRUE(r.Check().ok());
  clock.Advance(5'000);
  EXPECT_EQ(r.Check().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(r.Check().message(), "the API server has not answered for 10 s");
  r.OnResponse(403);  // forbidden is still an answer
  EXPECT_TRUE(r.Check().ok());
}

TEST(ReadinessTest, TheActingReplicaWaitsForItsInformers) {
  FakeClock clock;
  Readiness r(10'000, &clock);
  r.OnResponse(200);
  std::atomic<bool> synced{false};
  r.SetActing([&] { return synced.load(); });
  EXPECT_EQ(r.Check().message(), "the informers have not synced");
  synced = true;
  EXPECT_TRUE(r.Check().ok());
  clock.Advance(20'000);
  EXPECT_FALSE(r.Check().ok());  // synced, but the API server is silent
}

TEST(MarkLeaderTest, LabelsThePodAndRemovesTheLabel) {
  kube::FakeApi api;
  kube::Json pod = {{"apiVersion", "v1"},
                    {"kind", "Pod"},
                    {"metadata", {{"name", "op-1"}, {"labels", {{"app", "antdt"}}}}}};
  ASSERT_TRUE(api.Create(kube::PodsResource(), "antdt-system", pod).ok());
  ASSERT_TRUE(MarkLeader(&api, "antdt-system", "op-1", true).ok());
  auto got = api.Get(kube::PodsResource(), "antdt-system", "op-1");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ((*got)["metadata"]["labels"][vocab::kLabelLeader], "true");
  EXPECT_EQ((*got)["metadata"]["labels"]["app"], "antdt");  // other labels kept
  ASSERT_TRUE(MarkLeader(&api, "antdt-system", "op-1", false).ok());
  got = api.Get(kube::PodsResource(), "antdt-system", "op-1");
  EXPECT_FALSE((*got)["metadata"]["labels"].contains(vocab::kLabelLeader));
  EXPECT_EQ((*got)["metadata"]["labels"]["app"], "antdt");
  // A pod that is gone is an error; no pod name (outside a cluster) is a no-op.
  EXPECT_FALSE(MarkLeader(&api, "antdt-system", "op-2", true).ok());
  const int64_t patches = api.Requests("patch");
  EXPECT_TRUE(MarkLeader(&api, "", "", true).ok());
  EXPECT_EQ(api.Requests("patch"), patches);
}

TEST(OperatorConfigTest, PodNameAndNamespace) {
  auto c = ParseOperatorConfig("pod-name: op-1\npod_namespace: antdt-system\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pod_name, "op-1");
  EXPECT_EQ(c->pod_namespace, "antdt-system");
  auto bad = ParseOperatorConfig("pod_name: op-1\n");
  EXPECT_EQ(bad.status().message(), "pod_namespace: must be set with pod_name");
}

TEST(OperatorConfigTest, NodeMemory) {
  auto c = ParseOperatorConfig("node_memory: Act\nnode-taint: true\nnode_memory_half_life: 2m\n");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->node_memory_act);
  EXPECT_TRUE(c->node_taint);
  EXPECT_EQ(c->node_memory_half_life_ms, 120'000);
  auto defaults = ParseOperatorConfig("");
  ASSERT_TRUE(defaults.ok());
  EXPECT_FALSE(defaults->node_memory_act);  // Recommend
  EXPECT_EQ(ParseOperatorConfig("node_memory: act\n").status().message(),
            "node_memory: must be Act or Recommend, got \"act\"");
  EXPECT_EQ(ParseOperatorConfig("node_taint: true\n").status().message(),
            "node_taint: needs node_memory Act (Recommend writes nothing)");
  EXPECT_EQ(ParseOperatorConfig("node_memory_half_life: 0s\n").status().message(),
            "node_memory_half_life: must be > 0");
}

}  // namespace
}  // namespace antdt::kube_operator
