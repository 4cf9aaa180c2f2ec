// The job controller against the fake API server: what a user sees when the
// API server refuses a pod the operator creates (admission, quota, RBAC).
#include "backends/kubernetes/operator/job_controller.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "api/manifest/manifest.h"
#include "backends/kubernetes/reconciler/reconciler.h"
#include "core/jobconfig/jobconfig.h"
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
            *monitor::Monitor::Create(jobconfig::MonitorConfigFor(manifest::MonitorSpec{})),
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

// Worker `id`'s incarnation-0 pod of job `job` (uid `uid`) in team-a, on
// `node`, Running at 127.0.0.1 (as the operator would have created it).
absl::Status RunningWorkerPod(kube::FakeApi& api, const std::string& job, const Json& uid,
                              const std::string& id, const std::string& node) {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", job + "-" + id},
                {"namespace", "team-a"},
                {"labels",
                 {{"antdt.io/job", job},
                  {"antdt.io/role", "worker"},
                  {"antdt.io/worker-id", id},
                  {"antdt.io/incarnation", "0"}}},
                {"ownerReferences", Json::array({{{"apiVersion", "antdt.io/v1alpha1"},
                                                  {"kind", "AntDTJob"},
                                                  {"name", job},
                                                  {"uid", uid},
                                                  {"controller", true}}})}}},
              {"spec",
               {{"nodeName", node},
                {"containers", Json::array({{{"name", "worker"}, {"image", "antdt"}}})}}}};
  auto made = api.Create(kube::PodsResource(), "team-a", pod);
  if (!made.ok()) return made.status();
  Json running = *made;
  running["status"] = {{"phase", "Running"}, {"podIP", "127.0.0.1"}};
  return api.UpdateStatus(kube::PodsResource(), "team-a", running).status();
}

// A sync runs on the clock it is given (JobControllerOptions::clock), not the
// wall clock: the conditions it writes carry that time.
TEST(JobControllerTest, ASyncRunsOnTheClockItIsGiven) {
  kube::FakeApi api;
  ASSERT_TRUE(api.Create(kube::AntDTJobsResource(), "team-a", Job()).ok());
  FakeClock clock(1'893'456'000'000);  // 2030-01-01T00:00:00Z
  monitor::MonitorServiceImpl monitor_service(
      *monitor::Monitor::Create(jobconfig::MonitorConfigFor(manifest::MonitorSpec{})), &clock);
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
  ASSERT_TRUE(
      RunningWorkerPod(api, "dd", (*created)["metadata"]["uid"], "worker-0", "node-a").ok());

  monitor::MonitorServiceImpl monitor_service(
      *monitor::Monitor::Create(jobconfig::MonitorConfigFor(manifest::MonitorSpec{})),
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

// One job's syncs on a fake clock (issue 42, part 5), through a straggler's
// detection, the decision, its commit to the status and its delivery: three
// workers on three nodes report steps stamped with the fake clock's time, the
// Monitor closes its windows when the test ticks it, and worker-2 turns 4x
// slower. The operator's control loop (on the same clock) decides ADJUST_BS
// for it, commits the smaller batch to status.workerInstances and
// status.lastActions at the fake time, and sends the directive to node-c's
// agent alone.
TEST(JobControllerTest, AStragglerOnAFakeClockIsDetectedDecidedCommittedAndDelivered) {
  constexpr int64_t kStart = 1'893'456'000'000;  // 2030-01-01T00:00:00Z
  FakeClock clock(kStart);
  kube::FakeApi api;
  Json job = Json::parse(R"({
    "apiVersion": "antdt.io/v1alpha1", "kind": "AntDTJob",
    "metadata": {"name": "fake-clock", "namespace": "team-a"},
    "spec": {"dataset": {"records": 100000, "shardSize": 100},
             "model": {"globalBatchSize": 96},
             "workers": {"replicas": 3, "template": {"spec": {"containers": [
                 {"name": "worker", "image": "antdt", "command": ["python3", "train.py"]}]}}},
             "stragglerPolicy": {"name": "antdt-nd", "cooldown": "5s"},
             "monitor": {"window": "1s", "allowedLateness": "100ms"}}})");
  auto created = api.Create(kube::AntDTJobsResource(), "team-a", job);
  ASSERT_TRUE(created.ok()) << created.status();
  const std::vector<std::string> nodes = {"node-a", "node-b", "node-c"};
  Json stored = *created;
  stored["status"] = {
      {"conditions",
       Json::array({{{"type", "Running"}, {"status", "True"}, {"reason", "Running"}}})},
      {"datasetCreated", true},
      {"workerInstances", Json::array()}};
  for (int i = 0; i < 3; ++i) {
    stored["status"]["workerInstances"].push_back(
        {{"id", "worker-" + std::to_string(i)},
         {"incarnation", 0},
         {"node", nodes[static_cast<size_t>(i)]},
         {"pod", "fake-clock-worker-" + std::to_string(i)},
         {"localBatchSize", 32},
         {"excludedNodes", Json::array()}});
  }
  ASSERT_TRUE(api.UpdateStatus(kube::AntDTJobsResource(), "team-a", stored).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(RunningWorkerPod(api, "fake-clock", (*created)["metadata"]["uid"],
                                 "worker-" + std::to_string(i), nodes[static_cast<size_t>(i)])
                    .ok());
  }

  // The Monitor on the fake clock; windows close only when the test ticks it.
  monitor::MonitorServiceImpl monitor_service(
      *monitor::Monitor::Create(jobconfig::MonitorConfigFor(manifest::MonitorSpec{})), &clock);
  std::mutex mu;
  std::map<std::string, std::vector<v1::Directive>> directives;  // by node
  std::vector<std::shared_ptr<monitor::MonitorHub::AgentStream>> streams;
  for (const std::string& node : nodes) {
    auto stream =
        monitor_service.hub().OpenStream("agent-" + node, [&, node](const v1::MonitorMessage& m) {
          std::lock_guard<std::mutex> lock(mu);
          if (m.has_directive()) directives[node].push_back(m.directive());
          return true;
        });
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node(node);
    ASSERT_TRUE(monitor_service.hub().Receive(*stream, hello));
    streams.push_back(stream);
  }
  prometheus::Registry registry;
  JobControllerOptions options;
  options.identity = "test";
  options.rpc_timeout_ms = 100;
  options.clock = &clock;
  JobController controller(&api, &monitor_service, options, &registry);
  ASSERT_TRUE(controller.Start(5000));
  // The sharding service's pod, which the operator creates, runs.
  Json sharding;
  ASSERT_TRUE(Eventually([&] {
    auto got = api.Get(kube::PodsResource(), "team-a", "fake-clock-sharding");
    if (got.ok()) sharding = *got;
    return got.ok();
  }));
  sharding["status"] = {{"phase", "Running"}, {"podIP", "127.0.0.1"}};
  ASSERT_TRUE(api.UpdateStatus(kube::PodsResource(), "team-a", sharding).ok());

  // 0.1 s steps of 32 samples; worker-2 takes 0.4 s from 4 s on. Each tenth
  // of a fake second: one report per worker, the clock on, a tick.
  int64_t step = 0;
  auto run = [&](int64_t until_ms) {
    while (clock.NowMillis() < kStart + until_ms) {
      clock.Advance(100);
      for (int i = 0; i < 3; ++i) {
        v1::AgentMessage m;
        v1::StepReport* r = m.mutable_step();
        r->set_job("fake-clock");
        r->set_namespace_("team-a");
        r->set_worker_id("worker-" + std::to_string(i));
        r->set_role("worker");
        r->set_node(nodes[static_cast<size_t>(i)]);
        r->set_step(step);
        r->set_samples(32);
        r->set_bpt_seconds(i == 2 && clock.NowMillis() > kStart + 4'000 ? 0.4 : 0.1);
        r->set_time_unix_ms(clock.NowMillis());
        monitor_service.hub().Receive(*streams[static_cast<size_t>(i)], m);
      }
      ++step;
      monitor_service.Tick();
    }
  };
  auto batch_of = [&](const Json& status, const std::string& id) {
    for (const Json& w : status.value("workerInstances", Json::array())) {
      if (w.value("id", "") == id) return w.value("localBatchSize", 0);
    }
    return 0;
  };
  auto get = [&] {
    auto got = api.Get(kube::AntDTJobsResource(), "team-a", "fake-clock");
    return got.ok() ? *got : Json();
  };
  run(4'000);
  // Nothing slow yet: no batch moved while the clock stands still, however
  // many syncs pass (one at least every 2 s of real time).
  std::this_thread::sleep_for(std::chrono::milliseconds(2'500));
  EXPECT_EQ(batch_of(get()["status"], "worker-2"), 32) << get()["status"].dump(1);
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [node, sent] : directives) {
      for (const v1::Directive& d : sent) {
        EXPECT_FALSE(d.has_adjust_batch() && d.adjust_batch().local_batch_size() != 32)
            << node << ": " << d.ShortDebugString();
      }
    }
  }
  run(6'000);
  Json status;
  const bool committed = Eventually([&] {
    status = get()["status"];
    return batch_of(status, "worker-2") < 32;
  });
  auto adjust_for = [&](const std::string& node) -> std::optional<v1::Directive> {
    std::lock_guard<std::mutex> lock(mu);
    std::optional<v1::Directive> last;  // the newest (the first may re-deliver 32)
    for (const v1::Directive& d : directives[node]) {
      if (d.worker_id() == "worker-2" && d.has_adjust_batch()) last = d;
    }
    return last;
  };
  const bool delivered = Eventually([&] {
    const std::optional<v1::Directive> d = adjust_for("node-c");
    return d && d->adjust_batch().local_batch_size() < 32;
  });
  controller.Stop();
  for (auto& stream : streams) monitor_service.hub().CloseStream(*stream);
  ASSERT_TRUE(committed) << status.dump(1);
  ASSERT_TRUE(delivered) << "no ADJUST_BS reached node-c's agent";
  const int64_t batch = batch_of(status, "worker-2");
  EXPECT_GE(batch, 4);
  EXPECT_LE(batch, 16) << "a quarter of its share, give or take the rounding";
  EXPECT_EQ(adjust_for("node-c")->adjust_batch().local_batch_size(), batch);
  EXPECT_GT(batch_of(status, "worker-0") + batch_of(status, "worker-1"), 64)
      << "its samples went to the faster workers";
  const Json* action = nullptr;
  const Json& actions = status["lastActions"];
  ASSERT_TRUE(actions.is_array()) << status.dump(1);
  for (const Json& a : actions) {
    if (a.value("worker", "") == "worker-2" && a.value("action", "") == "ADJUST_BS") action = &a;
  }
  ASSERT_NE(action, nullptr) << status.dump(1);
  // Decided on the fake clock, between the slowdown and the test's last tick.
  const std::optional<int64_t> at = kube::ParseTime(action->value("time", ""));
  ASSERT_TRUE(at.has_value()) << action->dump();
  EXPECT_GT(*at, kStart + 4'000);
  EXPECT_LE(*at, kStart + 6'000);
  std::lock_guard<std::mutex> lock(mu);
  for (const char* node : {"node-a", "node-b"}) {
    for (const v1::Directive& d : directives[node]) {
      EXPECT_NE(d.worker_id(), "worker-2") << "the straggler's directive went to " << node;
    }
  }
}

}  // namespace
}  // namespace antdt::kube_operator
