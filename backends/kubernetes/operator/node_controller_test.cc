// The node controller against the fake API server: what `kubectl describe
// node` shows of AntDT's node memory, what survives a new operator, and what
// happens without the RBAC grant.
#include "backends/kubernetes/operator/node_controller.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "testing/kube-fake/fake_api.h"
#include "testing/kube-fake/test_util.h"

namespace antdt::kube_operator {
namespace {

using kube::Json;
using kube::testing::Eventually;

constexpr int64_t kHour = 3600 * 1000;

Json Node(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", name}}},
          {"status", {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

Json JobObject(const std::string& name) {
  return {{"apiVersion", "antdt.io/v1alpha1"},
          {"kind", "AntDTJob"},
          {"metadata", {{"name", name}, {"namespace", "team-a"}, {"uid", "uid-" + name}}}};
}

// One job's Monitor view: worker-0 on `node`, `slowdown` times slower over
// five windows ending now, `cause` named.
v1::GetJobHealthResponse Health(const std::string& job, const std::string& node, double slowdown,
                                v1::Cause cause, int64_t now_ms) {
  v1::GetJobHealthResponse h;
  v1::StragglerRecord* r = h.add_stragglers();
  r->set_job(job);
  r->set_namespace_("team-a");
  r->set_worker_id("worker-0");
  r->set_node(node);
  r->set_class_(v1::PERSISTENT);
  r->set_cause(cause);
  r->set_max_score(slowdown);
  r->set_max_sample_score(slowdown);
  r->set_windows(5);
  r->set_first_seen_unix_ms(now_ms - 60'000);
  r->set_last_seen_unix_ms(now_ms);
  return h;
}

class NodeControllerTest : public ::testing::Test {
 protected:
  NodeControllerTest() {
    api_.EnableStatusSubresource(kube::NodesResource());
    for (const char* n : {"node-a", "node-b"}) AddNode(Node(n));
  }

  // Created, then its status written (the kubelet's part).
  void AddNode(const Json& node) {
    auto created = api_.Create(kube::NodesResource(), "", node);
    ASSERT_TRUE(created.ok()) << created.status();
    (*created)["status"] = node["status"];
    ASSERT_TRUE(api_.UpdateStatus(kube::NodesResource(), "", *created).ok());
  }

  std::unique_ptr<NodeController> Controller(vocab::Mode mode, bool taint = false) {
    NodeControllerOptions o;
    o.mode = mode;
    o.taint = taint;
    o.memory.half_life_ms = kHour;
    o.resync_ms = 20;  // decay is looked at often (real time)
    o.clock = &clock_;
    auto c = std::make_unique<NodeController>(&api_, o, &registry_);
    EXPECT_TRUE(c->Start(5000));
    return c;
  }

  Json Get(const std::string& node) {
    auto n = api_.Get(kube::NodesResource(), "", node);
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : Json();
  }

  // node's AntDTSlowNode condition, or an empty object.
  Json Condition(const std::string& node) {
    const Json n = Get(node);
    for (const Json& c : kube::At(n, {"status", "conditions"})) {
      if (c.value("type", "") == kSlowNodeCondition) return c;
    }
    return Json::object();
  }

  int SlowConditions(const std::string& node) {
    const Json n = Get(node);
    int count = 0;
    for (const Json& c : kube::At(n, {"status", "conditions"})) {
      count += c.value("type", "") == kSlowNodeCondition;
    }
    return count;
  }

  std::vector<Json> Events(const std::string& ns, const std::string& reason) {
    std::vector<Json> out;
    auto list = api_.List(kube::EventsResource(), ns, {});
    if (!list.ok()) return out;
    for (const Json& e : (*list)["items"]) {
      if (e.value("reason", "") == reason) out.push_back(e);
    }
    return out;
  }

  // Two jobs slow on node-a, with `cause`: the memory marks it.
  void TwoSlowJobsOn(NodeController& c, v1::Cause cause = v1::CPU_THROTTLING) {
    c.Record(JobObject("j1"), Health("j1", "node-a", 3.0, cause, clock_.NowMillis()));
    clock_.Advance(120'000);
    c.Record(JobObject("j2"), Health("j2", "node-a", 2.5, cause, clock_.NowMillis()));
  }

  FakeClock clock_{1'800'000'000'000};
  kube::FakeApi api_;
  prometheus::Registry registry_;
};

TEST_F(NodeControllerTest, ASlowNodeInTwoJobsGetsTheConditionWithItsCauseAndEvidence) {
  auto c = Controller(vocab::Mode::kAct);
  c->Record(JobObject("j1"), Health("j1", "node-a", 3.0, v1::CPU_THROTTLING, clock_.NowMillis()));
  // One job is an incident, not the node's nature: the memory is kept on the
  // Node, the condition is not set.
  ASSERT_TRUE(Eventually([&] {
    return !kube::StringAt(Get("node-a"), {"metadata", "annotations", kNodeMemoryAnnotation})
                .empty();
  }));
  EXPECT_TRUE(Condition("node-a").empty());
  clock_.Advance(120'000);
  c->Record(JobObject("j2"), Health("j2", "node-a", 2.5, v1::CPU_THROTTLING, clock_.NowMillis()));
  ASSERT_TRUE(Eventually([&] { return !Condition("node-a").empty(); }));
  const Json cond = Condition("node-a");
  EXPECT_EQ(cond.value("status", ""), "True");
  EXPECT_EQ(cond.value("reason", ""), "CPUThrottling");
  const std::string message = cond.value("message", "");
  EXPECT_TRUE(absl::StrContains(message, "3.00x slower")) << message;
  EXPECT_TRUE(absl::StrContains(message, "in 2 recent jobs")) << message;
  EXPECT_TRUE(absl::StrContains(message, "since 2027-01-15T07:59:00Z")) << message;
  EXPECT_FALSE(cond.value("lastTransitionTime", "").empty());
  EXPECT_EQ(c->Marked(), std::vector<std::string>{"node-a"});
  // The Node keeps its other conditions; a healthy node gets nothing.
  EXPECT_EQ(kube::At(Get("node-a"), {"status", "conditions"}).size(), 2u);
  EXPECT_EQ(SlowConditions("node-a"), 1);
  EXPECT_TRUE(Condition("node-b").empty());
  ASSERT_TRUE(Eventually([&] { return Events("default", "AntDTSlowNode").size() == 1; }));
  EXPECT_EQ(kube::StringAt(Events("default", "AntDTSlowNode")[0], {"involvedObject", "name"}),
            "node-a");
  // Looked at again and again, the marked node costs no more writes.
  const int64_t patches = api_.Requests("patch");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(api_.Requests("patch"), patches);
  EXPECT_EQ(SlowConditions("node-a"), 1);
}

TEST_F(NodeControllerTest, TheMemoryOutlivesTheOperatorAndTheConditionClearsAsItDecays) {
  {
    auto c = Controller(vocab::Mode::kAct);
    TwoSlowJobsOn(*c);
    ASSERT_TRUE(Eventually([&] { return Condition("node-a").value("status", "") == "True"; }));
  }
  // A new leader: the memory comes back from the Node, not from the jobs.
  auto next = Controller(vocab::Mode::kAct);
  EXPECT_TRUE(next->For("node-a").chronic);
  EXPECT_EQ(next->For("node-a").jobs, 2);
  EXPECT_EQ(next->Marked(), std::vector<std::string>{"node-a"});
  // A few half-lives later it no longer marks the node: False, and an Event.
  clock_.Advance(3 * kHour);
  ASSERT_TRUE(Eventually([&] { return Condition("node-a").value("status", "") == "False"; }));
  EXPECT_EQ(Condition("node-a").value("reason", ""), "MemoryDecayed");
  EXPECT_TRUE(next->Marked().empty());
  ASSERT_TRUE(Eventually([&] { return Events("default", "AntDTNodeRecovered").size() == 1; }));
}

TEST_F(NodeControllerTest, TheTaintFollowsTheMark) {
  auto c = Controller(vocab::Mode::kAct, /*taint=*/true);
  auto tainted = [&] {
    const Json node = Get("node-a");
    for (const Json& t : kube::At(node, {"spec", "taints"})) {
      if (t.value("key", "") == kSlowNodeTaint) return t.value("effect", "") == "PreferNoSchedule";
    }
    return false;
  };
  TwoSlowJobsOn(*c);
  ASSERT_TRUE(Eventually(tainted));
  EXPECT_FALSE(Get("node-b").contains("spec") && Get("node-b")["spec"].contains("taints"));
  clock_.Advance(3 * kHour);
  ASSERT_TRUE(Eventually([&] { return !tainted(); }));
}

TEST_F(NodeControllerTest, RecommendKeepsAndReportsTheMemoryAndWritesNothing) {
  auto c = Controller(vocab::Mode::kRecommend);
  TwoSlowJobsOn(*c);
  ASSERT_TRUE(Eventually([&] { return c->For("node-a").chronic; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(api_.Requests("patch"), 0);
  EXPECT_TRUE(Condition("node-a").empty());
  // The gauge reports it.
  bool reported = false;
  for (const auto& family : registry_.Collect()) {
    if (family.name != "antdt_node_slow_score") continue;
    for (const auto& m : family.metric) {
      reported |= m.label.size() == 1 && m.label[0].value == "node-a" && m.gauge.value > 0.5;
    }
  }
  EXPECT_TRUE(reported);
}

TEST_F(NodeControllerTest, WithoutTheGrantOneWarningNamesItAndTheMemoryIsKept) {
  api_.FailNext("patch",
                kube::ApiError(403, {{"kind", "Status"},
                                     {"reason", "Forbidden"},
                                     {"code", 403},
                                     {"message",
                                      "nodes \"node-a\" is forbidden: cannot patch "
                                      "resource \"nodes/status\""}}),
                1000);
  auto c = Controller(vocab::Mode::kAct);
  TwoSlowJobsOn(*c);
  ASSERT_TRUE(Eventually([&] { return Events("team-a", "NodeMemoryForbidden").size() == 1; }));
  const Json warning = Events("team-a", "NodeMemoryForbidden")[0];
  EXPECT_EQ(warning.value("type", ""), "Warning");
  EXPECT_TRUE(absl::StrContains(warning.value("message", ""), "nodes/status"));
  EXPECT_EQ(kube::StringAt(warning, {"involvedObject", "kind"}), "AntDTJob");
  // No retry storm: the writes wait (forbidden_retry_ms) while the memory is kept.
  const int64_t patches = api_.Requests("patch");
  c->Record(JobObject("j3"), Health("j3", "node-a", 2.0, v1::CPU_THROTTLING, clock_.NowMillis()));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(api_.Requests("patch"), patches);
  EXPECT_EQ(Events("team-a", "NodeMemoryForbidden").size(), 1u);
  EXPECT_TRUE(c->For("node-a").chronic);
  EXPECT_EQ(c->For("node-a").jobs, 3);
}

TEST_F(NodeControllerTest, AnUnreadableMemoryAnnotationIsSkippedNamingIt) {
  Json bad = Node("node-c");
  bad["metadata"]["annotations"] = {{kNodeMemoryAnnotation, "{not json"}};
  AddNode(bad);
  Json other = Node("node-d");
  other["metadata"]["annotations"] = {{kNodeMemoryAnnotation, R"({"node": "node-a"})"}};
  AddNode(other);
  {
    auto c = Controller(vocab::Mode::kAct);
    TwoSlowJobsOn(*c);
    ASSERT_TRUE(Eventually([&] { return Condition("node-a").value("status", "") == "True"; }));
  }
  auto next = Controller(vocab::Mode::kAct);
  EXPECT_TRUE(next->For("node-a").chronic);  // the good ones restore
  EXPECT_EQ(next->For("node-c").episodes, 0);
  EXPECT_EQ(next->For("node-d").episodes, 0);
}

}  // namespace
}  // namespace antdt::kube_operator
