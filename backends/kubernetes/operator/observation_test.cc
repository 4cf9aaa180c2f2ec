// The control loop's Observation of a sync, built from what the sync gathered
// (no API server, Monitor or clock): which members are alive where, which
// nodes are spare, and what the loop sees with and without the Monitor's view.
#include "backends/kubernetes/operator/observation.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace antdt::kube_operator {
namespace {

using kube::Json;

// A pod of the job: a worker (`worker` "worker-K") or a parameter server
// (`ps_index` >= 0), at `incarnation` ("" for none), on `node`, in `phase`.
Json Pod(const std::string& name, const std::string& worker, int ps_index,
         const std::string& incarnation, const std::string& node, const std::string& phase,
         bool terminating = false) {
  Json p = {{"metadata", {{"name", name}, {"labels", {{"antdt.io/job", "j"}}}}},
            {"spec", {{"nodeName", node}}},
            {"status", {{"phase", phase}}}};
  Json& labels = p["metadata"]["labels"];
  if (!worker.empty()) labels["antdt.io/worker-id"] = worker;
  if (ps_index >= 0) {
    labels["antdt.io/role"] = "ps";
    labels["antdt.io/replica-index"] = std::to_string(ps_index);
  }
  if (!incarnation.empty()) labels["antdt.io/incarnation"] = incarnation;
  if (terminating) p["metadata"]["deletionTimestamp"] = "2026-12-06T08:00:00Z";
  return p;
}

Json Node(const std::string& name, bool cordoned = false) {
  Json n = {{"metadata", {{"name", name}}}};
  if (cordoned) n["spec"]["unschedulable"] = true;
  return n;
}

// Two workers (worker-1 restarted: incarnation 1 desired, its old pod still
// running on node-1) and one parameter server moved to incarnation 1.
reconciler::Snapshot Snapshot() {
  reconciler::Snapshot s;
  s.job = Json::parse(R"({"metadata": {"name": "j", "namespace": "ns"}, "status": {
      "workerInstances": [
        {"id": "worker-0", "incarnation": 0, "pod": "j-worker-0", "localBatchSize": 64},
        {"id": "worker-1", "incarnation": 1, "pod": "j-worker-1-1", "localBatchSize": 32,
         "accumulationSteps": 2}],
      "serverInstances": [{"id": "ps-0", "incarnation": 1, "node": "node-4"}]}})");
  s.pods = {Pod("j-worker-0", "worker-0", -1, "0", "node-0", "Running"),
            Pod("j-worker-1", "worker-1", -1, "0", "node-1", "Running"),
            Pod("j-worker-1-1", "worker-1", -1, "1", "node-2", "Pending"),
            Pod("j-ps-0", "", 0, "", "node-3", "Running", /*terminating=*/true),
            Pod("j-ps-0-1", "", 0, "1", "node-4", "Running")};
  s.now_ms = 1'700'000'000'000;
  s.progress = reconciler::Progress{};
  s.progress->eta_seconds = 120;
  return s;
}

TEST(LoopObservation, MembersAreTheDesiredIncarnationsAliveWhileTheirPodRuns) {
  const std::vector<policy::WorkerState> m = LoopMembers(Snapshot().job, Snapshot().pods);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].id, "worker-0");
  EXPECT_TRUE(m[0].alive);
  EXPECT_EQ(m[0].node, "node-0");
  EXPECT_EQ(m[0].local_batch_size, 64);
  EXPECT_EQ(m[0].accumulation_steps, 1);
  // Its old incarnation still runs; the desired one is pending: not alive.
  EXPECT_EQ(m[1].id, "worker-1");
  EXPECT_EQ(m[1].incarnation, 1);
  EXPECT_FALSE(m[1].alive);
  EXPECT_EQ(m[1].node, "");
  EXPECT_EQ(m[1].local_batch_size, 32);
  EXPECT_EQ(m[1].accumulation_steps, 2);
  // The server's moved incarnation runs; its terminating old pod does not count.
  EXPECT_EQ(m[2].id, "ps-0");
  EXPECT_EQ(m[2].role, vocab::Role::kParameterServer);
  EXPECT_EQ(m[2].incarnation, 1);
  EXPECT_TRUE(m[2].alive);
  EXPECT_EQ(m[2].node, "node-4");
}

TEST(LoopObservation, SpareNodesHoldNoMemberAndAreNotCordoned) {
  const reconciler::Snapshot s = Snapshot();
  const std::vector<policy::NodeState> nodes =
      LoopNodes(s.pods, {Node("node-0"), Node("node-2"), Node("node-3"), Node("node-5"),
                         Node("node-6", /*cordoned=*/true)});
  ASSERT_EQ(nodes.size(), 5u);
  EXPECT_FALSE(nodes[0].spare) << "a running worker";
  EXPECT_FALSE(nodes[1].spare) << "a pending worker";
  EXPECT_TRUE(nodes[2].spare) << "only a terminating pod";
  EXPECT_TRUE(nodes[3].spare);
  EXPECT_FALSE(nodes[4].spare) << "cordoned";
}

// A node the cluster's memory marks is chronic to the policy, for a job that
// acts on the marks (Act, avoidSlowNodes not Ignore) and for no other.
TEST(LoopObservation, ANodeTheClusterMarksIsChronicToAJobThatActsOnTheMarks) {
  reconciler::Snapshot s = Snapshot();
  s.spec = manifest::Job{};
  s.spec->straggler_policy.mode = vocab::Mode::kAct;
  s.avoided_nodes = {"node-5"};
  v1::GetJobHealthResponse health;
  const loop::Observation acting =
      LoopObservation(s, {Node("node-5"), Node("node-6")}, &health, {});
  ASSERT_EQ(acting.nodes.size(), 2u);
  EXPECT_TRUE(acting.nodes[0].chronic);
  EXPECT_FALSE(acting.nodes[1].chronic);
  for (const auto& [mode, avoid] :
       {std::pair{vocab::Mode::kRecommend, vocab::AvoidSlowNodes::kPreferred},
        std::pair{vocab::Mode::kAct, vocab::AvoidSlowNodes::kIgnore}}) {
    s.spec->straggler_policy.mode = mode;
    s.spec->straggler_policy.avoid_slow_nodes = avoid;
    const loop::Observation o = LoopObservation(s, {Node("node-5")}, &health, {});
    ASSERT_EQ(o.nodes.size(), 1u);
    EXPECT_FALSE(o.nodes[0].chronic) << vocab::Name(mode) << " " << static_cast<int>(avoid);
  }
}

TEST(LoopObservation, NodesAndTheEtaComeWithTheMonitorsView) {
  const reconciler::Snapshot s = Snapshot();
  const std::vector<loop::ServerServing> serving = {{"ps-0", 1, "10.0.0.4:50052", "pod"}};
  loop::Observation blind = LoopObservation(s, {Node("node-5")}, nullptr, serving);
  EXPECT_EQ(blind.now_ms, s.now_ms);
  EXPECT_FALSE(blind.health.has_value());
  EXPECT_EQ(blind.members.size(), 3u);
  EXPECT_TRUE(blind.nodes.empty());
  EXPECT_EQ(blind.remaining_seconds, -1);
  ASSERT_EQ(blind.servers_serving.size(), 1u);
  EXPECT_EQ(blind.servers_serving[0].address, "10.0.0.4:50052");

  v1::GetJobHealthResponse health;
  health.set_job("j");
  loop::Observation seen = LoopObservation(s, {Node("node-5")}, &health, serving);
  ASSERT_TRUE(seen.health.has_value());
  EXPECT_EQ(seen.health->job(), "j");
  ASSERT_EQ(seen.nodes.size(), 1u);
  EXPECT_TRUE(seen.nodes[0].spare);
  EXPECT_EQ(seen.remaining_seconds, 120);
}

// A status written by hand or by an older operator: fields of the wrong type
// read as absent, nothing throws.
TEST(LoopObservation, AMalformedStatusReadsAsAbsentFields) {
  reconciler::Snapshot s = Snapshot();
  s.job["status"]["workerInstances"] = Json::parse(
      R"([{"id": "worker-0", "incarnation": "one", "localBatchSize": "big", "pod": 7}])");
  s.job["status"]["serverInstances"] = "not a list";
  std::vector<policy::WorkerState> m;
  ASSERT_NO_THROW(m = LoopMembers(s.job, s.pods));
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].incarnation, 0);
  EXPECT_EQ(m[0].local_batch_size, 0);
  EXPECT_FALSE(m[0].alive) << "its pod is no name";
  EXPECT_EQ(m[1].id, "ps-0");
  EXPECT_EQ(m[1].incarnation, 0);
}

}  // namespace
}  // namespace antdt::kube_operator
