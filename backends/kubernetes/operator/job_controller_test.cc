// The job controller against the fake API server: what a user sees when the
// API server refuses a pod the operator creates (admission, quota, RBAC).
#include "backends/kubernetes/operator/job_controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <optional>

#include "api/manifest/manifest.h"
#include "backends/kubernetes/reconciler/reconciler.h"
#include "core/bridge/bridge.h"
#include "core/monitor/monitor.h"
#include "testing/kube-fake/fake_api.h"
#include "testing/kube-fake/test_util.h"

namespace antdt::kube_operator {
namespace {

using kube::Json;
using kube::testing::Eventually;

Json Job() {
  return Json::parse(R"({
    "apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "refused", "namespace": "team-a"},
    "spec": {"dataset": {"records": 1000, "shardSize": 100},
             "workers": {"replicas": 2}}})");
}

// The fake API server whose admission refuses every pod and Service while
// `refusing` (Events and status writes still pass).
class RefusingApi : public kube::Api {
 public:
  explicit RefusingApi(kube::FakeApi* api) : api_(api) {}
  std::atomic<bool> refusing{true};
  absl::StatusOr<Json> Get(const kube::ResourceRef& r, const std::string& ns,
                           const std::string& name) override {
    return api_->Get(r, ns, name);
  }
  absl::StatusOr<Json> List(const kube::ResourceRef& r, const std::string& ns,
                            const kube::ListOptions& o) override {
    return api_->List(r, ns, o);
  }
  absl::StatusOr<Json> Create(const kube::ResourceRef& r, const std::string& ns,
                              const Json& o) override {
    if (refusing && (r.plural == "pods" || r.plural == "services")) {
      return absl::PermissionDeniedError(
          "exceeded quota: compute-resources, requested: pods=1, used: pods=10, limited: "
          "pods=10");
    }
    return api_->Create(r, ns, o);
  }
  absl::StatusOr<Json> Update(const kube::ResourceRef& r, const std::string& ns,
                              const Json& o) override {
    return api_->Update(r, ns, o);
  }
  absl::StatusOr<Json> UpdateStatus(const kube::ResourceRef& r, const std::string& ns,
                                    const Json& o) override {
    return api_->UpdateStatus(r, ns, o);
  }
  absl::StatusOr<Json> Patch(const kube::ResourceRef& r, const std::string& ns,
                             const std::string& n, const Json& p, kube::PatchType t,
                             const std::string& s) override {
    return api_->Patch(r, ns, n, p, t, s);
  }
  absl::Status Delete(const kube::ResourceRef& r, const std::string& ns, const std::string& n,
                      const kube::DeleteOptions& o) override {
    return api_->Delete(r, ns, n, o);
  }
  absl::Status Watch(const kube::ResourceRef& r, const std::string& ns, const kube::WatchOptions& o,
                     const std::function<bool(const kube::WatchEvent&)>& f,
                     kube::Cancel* c) override {
    return api_->Watch(r, ns, o, f, c);
  }

 private:
  kube::FakeApi* api_;
};

std::vector<Json> Events(kube::FakeApi& api) {
  auto list = api.List(kube::EventsResource(), "team-a", {});
  EXPECT_TRUE(list.ok()) << list.status();
  return list.ok() ? (*list)["items"].get<std::vector<Json>>() : std::vector<Json>{};
}

const Json* ReplicaFailure(kube::FakeApi& api, Json* job) {
  auto got = api.Get(kube::AntDTJobsResource(), "team-a", "refused");
  if (!got.ok()) return nullptr;
  *job = *got;
  return reconciler::FindCondition((*job)["status"], "ReplicaFailure");
}

// A started job controller over `api`, with a Monitor of its own.
class RunningController {
 public:
  explicit RunningController(kube::Api* api)
      : monitor_service_(
            *monitor::Monitor::Create(bridge::MonitorConfigFor(manifest::MonitorSpec{})),
            &RealClock::Get()),
        controller_(api, &monitor_service_, Options(), &registry_) {
    started_ = controller_.Start(5000);
  }
  ~RunningController() { controller_.Stop(); }
  bool started() const { return started_; }

 private:
  static JobControllerOptions Options() {
    JobControllerOptions options;
    options.identity = "test";
    options.rpc_timeout_ms = 100;
    return options;
  }
  monitor::MonitorServiceImpl monitor_service_;
  prometheus::Registry registry_;
  JobController controller_;
  bool started_ = false;
};

TEST(JobControllerTest, ARefusedCreateIsAWarningEventAndAConditionUntilItSucceeds) {
  kube::FakeApi api;
  ASSERT_TRUE(api.Create(kube::AntDTJobsResource(), "team-a", Job()).ok());
  // The API server's admission refuses the first pod or Service the job needs.
  const std::string refusal =
      "pods \"refused-sharding\" is forbidden: violates PodSecurity \"restricted:latest\": "
      "runAsNonRoot != true";
  api.FailNext("create", absl::PermissionDeniedError(refusal), 1);

  RunningController controller(&api);
  ASSERT_TRUE(controller.started());

  // A Warning Event on the job, as `kubectl describe antdtjob` shows it.
  ASSERT_TRUE(Eventually([&] {
    for (const Json& e : Events(api)) {
      if (e.value("reason", "") == "FailedCreate") return true;
    }
    return false;
  }));
  for (const Json& e : Events(api)) {
    if (e.value("reason", "") != "FailedCreate") continue;
    EXPECT_EQ(e["type"], "Warning");
    EXPECT_EQ(e["involvedObject"]["name"], "refused");
    EXPECT_NE(e["message"].get<std::string>().find("Error creating "), std::string::npos);
    EXPECT_NE(e["message"].get<std::string>().find(refusal), std::string::npos);
  }
  // The retry creates every child; the condition then says so.
  Json job;
  ASSERT_TRUE(Eventually([&] {
    const Json* c = ReplicaFailure(api, &job);
    return c != nullptr && (*c)["status"] == "False";
  })) << job["status"].dump(1);
  const Json* c = ReplicaFailure(api, &job);
  EXPECT_EQ((*c)["reason"], "Created");
  auto pods = api.List(kube::PodsResource(), "team-a", {});
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ((*pods)["items"].size(), 1u);  // the sharding service (workers wait for the dataset)
  auto services = api.List(kube::ServicesResource(), "team-a", {});
  ASSERT_TRUE(services.ok());
  EXPECT_EQ((*services)["items"].size(), 3u);
}

TEST(JobControllerTest, TheConditionStaysTrueWhileTheServerRefuses) {
  kube::FakeApi api;
  ASSERT_TRUE(api.Create(kube::AntDTJobsResource(), "team-a", Job()).ok());
  RefusingApi refusing(&api);
  RunningController controller(&refusing);
  ASSERT_TRUE(controller.started());
  Json job;
  ASSERT_TRUE(Eventually([&] {
    const Json* c = ReplicaFailure(api, &job);
    return c != nullptr && (*c)["status"] == "True";
  }));
  const Json* c = ReplicaFailure(api, &job);
  EXPECT_EQ((*c)["reason"], "FailedCreate");
  EXPECT_NE((*c)["message"].get<std::string>().find("exceeded quota"), std::string::npos);
  // Retries count on the one Event instead of adding Events.
  ASSERT_TRUE(Eventually([&] {
    for (const Json& e : Events(api)) {
      if (e.value("reason", "") == "FailedCreate" && e.value("count", 0) >= 2) return true;
    }
    return false;
  }));
  int failed_create_events = 0;
  for (const Json& e : Events(api)) failed_create_events += e.value("reason", "") == "FailedCreate";
  EXPECT_EQ(failed_create_events, 1);
  c = ReplicaFailure(api, &job);
  EXPECT_EQ((*c)["status"], "True");  // still refused: still True
  // The quota is raised: the next retry creates the children, the condition clears.
  refusing.refusing = false;
  ASSERT_TRUE(Eventually(
      [&] {
        const Json* now = ReplicaFailure(api, &job);
        return now != nullptr && (*now)["status"] == "False";
      },
      20000))
      << job["status"].dump(1);
}

TEST(JobControllerTest, EventsAStoppedOperatorCommittedAreWrittenAndCleared) {
  kube::FakeApi api;
  auto created = api.Create(kube::AntDTJobsResource(), "team-a", Job());
  ASSERT_TRUE(created.ok());
  // As an operator SIGKILLed between committing a restart and writing its Event left it.
  Json stored = *created;
  stored["status"] = Json::parse(R"j({"pendingEvents": [{"type": "Warning",
      "reason": "StragglerRestarted", "message": "restarted worker-1 (pod refused-worker-1)"
}]
})j");
  ASSERT_TRUE(api.UpdateStatus(kube::AntDTJobsResource(), "team-a", stored).ok());

  RunningController controller(&api);
  ASSERT_TRUE(controller.started());
  ASSERT_TRUE(Eventually([&] {
    for (const Json& e : Events(api)) {
      if (e.value("reason", "") == "StragglerRestarted") return true;
    }
    return false;
  }));
  Json job;
  ASSERT_TRUE(Eventually([&] {
    auto got = api.Get(kube::AntDTJobsResource(), "team-a", "refused");
    if (got.ok()) job = *got;
    return got.ok() && job["status"].contains("conditions") &&
           !job["status"].contains("pendingEvents");
  })) << job["status"].dump(1);
  int restarted = 0;
  for (const Json& e : Events(api)) {
    if (e.value("reason", "") != "StragglerRestarted") continue;
    ++restarted;
    EXPECT_EQ(e["type"], "Warning");
    EXPECT_EQ(e.value("count", 0), 1);
    EXPECT_EQ(e["involvedObject"]["name"], "refused");
  }
  EXPECT_EQ(restarted, 1);
}

// A sync runs on the clock it is given (JobControllerOptions::clock), not the
// wall clock: the conditions it writes carry that time.
TEST(JobControllerTest, ASyncRunsOnTheClockItIsGiven) {
  kube::FakeApi api;
  ASSERT_TRUE(api.Create(kube::AntDTJobsResource(), "team-a", Job()).ok());
  FakeClock clock(1'893'456'000'000);  // 2030-01-01T00:00:00Z
  monitor::MonitorServiceImpl monitor_service(
      *monitor::Monitor::Create(bridge::MonitorConfigFor(manifest::MonitorSpec{})), &clock);
  prometheus::Registry registry;
  JobControllerOptions options;
  options.identity = "test";
  options.rpc_timeout_ms = 100;
  options.clock = &clock;
  JobController controller(&api, &monitor_service, options, &registry);
  ASSERT_TRUE(controller.Start(5000));
  Json job;
  const bool written = Eventually([&] {
    auto got = api.Get(kube::AntDTJobsResource(), "team-a", "refused");
    if (got.ok()) job = *got;
    return got.ok() && reconciler::FindCondition(job["status"], "Created") != nullptr;
  });
  controller.Stop();
  ASSERT_TRUE(written) << job.dump(1);
  EXPECT_EQ(reconciler::FindCondition(job["status"], "Created")->value("lastTransitionTime", ""),
            "2030-01-01T00:00:00Z");
}

// An AntDT-DD job whose committed batch (status.workerInstances, as a leader
// that died before delivering it left it) is delivered by this operator with
// its accumulation steps, not with one micro-batch.
TEST(JobControllerTest, ABatchReDeliveredKeepsItsAccumulationSteps) {
  kube::FakeApi api;
  Json job = Json::parse(R"({
    "apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "dd", "namespace": "team-a"},
    "spec": {"dataset": {"records": 1000, "shardSize": 100},
             "model": {"globalBatchSize": 64},
             "workers": {"replicas": 1},
             "stragglerPolicy": {"name": "antdt-dd"}}})");
  auto created = api.Create(kube::AntDTJobsResource(), "team-a", job);
  ASSERT_TRUE(created.ok()) << created.status();
  Json stored = *created;
  stored["status"] = Json::parse(R"({
    "conditions": [{"type": "Running", "status": "True", "reason": "Running"}],
    "workerInstances": [{"id": "worker-0", "incarnation": 0, "node": "node-a",
                         "pod": "dd-worker-0", "localBatchSize": 16,
                         "accumulationSteps": 4, "excludedNodes": []}]})");
  ASSERT_TRUE(api.UpdateStatus(kube::AntDTJobsResource(), "team-a", stored).ok());
  Json pod = Json::parse(R"({"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "dd-worker-0", "namespace": "team-a",
                 "labels": {"antdt.io/job": "dd", "antdt.io/role": "worker",
                            "antdt.io/worker-id": "worker-0", "antdt.io/incarnation": "0"}},
    "spec": {"nodeName": "node-a", "containers": [{"name": "worker", "image": "antdt"}]}})");
  pod["metadata"]["ownerReferences"] = Json::array({{{"apiVersion", "antdt.io/v1alpha1"},
                                                     {"kind", "AntDTJob"},
                                                     {"name", "dd"},
                                                     {"uid", (*created)["metadata"]["uid"]},
                                                     {"controller", true}}});
  auto made = api.Create(kube::PodsResource(), "team-a", pod);
  ASSERT_TRUE(made.ok()) << made.status();
  Json running = *made;
  running["status"] = {{"phase", "Running"}, {"podIP", "127.0.0.1"}};
  ASSERT_TRUE(api.UpdateStatus(kube::PodsResource(), "team-a", running).ok());

  monitor::MonitorServiceImpl monitor_service(
      *monitor::Monitor::Create(bridge::MonitorConfigFor(manifest::MonitorSpec{})),
      &RealClock::Get());
  std::mutex mu;
  std::vector<v1::Directive> directives;
  auto stream = monitor_service.hub().OpenStream("test", [&](const v1::MonitorMessage& m) {
    std::lock_guard<std::mutex> lock(mu);
    if (m.has_directive()) directives.push_back(m.directive());
    return true;
  });
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node("node-a");
  ASSERT_TRUE(monitor_service.hub().Receive(*stream, hello));

  prometheus::Registry registry;
  JobControllerOptions options;
  options.identity = "test";
  options.rpc_timeout_ms = 100;
  JobController controller(&api, &monitor_service, options, &registry);
  ASSERT_TRUE(controller.Start(5000));
  auto adjust = [&]() -> std::optional<v1::AdjustBatch> {
    std::lock_guard<std::mutex> lock(mu);
    for (const v1::Directive& d : directives) {
      if (d.worker_id() == "worker-0" && d.has_adjust_batch()) return d.adjust_batch();
    }
    return std::nullopt;
  };
  const bool delivered = Eventually([&] { return adjust().has_value(); });
  controller.Stop();
  monitor_service.hub().CloseStream(*stream);
  ASSERT_TRUE(delivered) << "no ADJUST_BS reached node-a's agent";
  EXPECT_EQ(adjust()->local_batch_size(), 16);
  EXPECT_EQ(adjust()->accumulation_steps(), 4);
}

}  // namespace
}  // namespace antdt::kube_operator
