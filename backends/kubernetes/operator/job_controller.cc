#include "backends/kubernetes/operator/job_controller.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "api/vocab/vocab.h"
#include "client/sharding_client.h"
#include "common/credential.h"
#include "common/job_key.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"
#include "core/bridge/bridge.h"
#include "core/loop/control_loop.h"
#include "core/loop/job_metrics.h"

namespace antdt::k8s {
namespace {

using kube::Json;

constexpr char kController[] = "antdtjob";

// The node a pod was bound to, and its address.
std::string NodeOf(const Json& pod) { return kube::StringAt(pod, {"spec", "nodeName"}); }
std::string PodIp(const Json& pod) { return kube::StringAt(pod, {"status", "podIP"}); }
std::string NameOf(const Json& object) { return kube::StringAt(object, {"metadata", "name"}); }

// The objects whose controller ownerReference is `uid`.
// The API resource a write is for: pods, Services, or the gang scheduler's
// PodGroups (the group from the object's apiVersion).
kube::ResourceRef RefOf(const reconciler::Write& w) {
  if (w.resource == "services") return kube::ServicesResource();
  if (w.resource == "secrets") return kube::SecretsResource();
  if (w.resource == "persistentvolumeclaims") return kube::PersistentVolumeClaimsResource();
  if (w.resource != "podgroups") return kube::PodsResource();
  const std::string api_version = kube::StringAt(w.object, {"apiVersion"});
  const size_t slash = api_version.find('/');
  kube::ResourceRef ref;
  ref.group = api_version.substr(0, slash);
  ref.version = slash == std::string::npos ? "" : api_version.substr(slash + 1);
  ref.plural = "podgroups";
  ref.kind = "PodGroup";
  return ref;
}

bool HasController(const Json& object) {
  const Json& refs = kube::At(object, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return false;
  return std::any_of(refs.begin(), refs.end(),
                     [](const Json& ref) { return ref.value("controller", false); });
}

// Names of `objects` that `controlled` (the ones the job controls) leaves out.
std::set<std::string> Foreign(const std::vector<Json>& objects,
                              const std::vector<Json>& controlled) {
  std::set<std::string> names;
  for (const Json& o : objects) names.insert(NameOf(o));
  for (const Json& o : controlled) names.erase(NameOf(o));
  return names;
}

std::vector<Json> ControlledBy(std::vector<Json> objects, const std::string& uid) {
  std::vector<Json> out;
  for (Json& o : objects) {
    const Json& refs = kube::At(o, {"metadata", "ownerReferences"});
    if (!refs.is_array()) continue;
    for (const Json& ref : refs) {
      if (ref.value("controller", false) && kube::StringAt(ref, {"uid"}) == uid) {
        out.push_back(std::move(o));
        break;
      }
    }
  }
  return out;
}

bool ConditionTrue(const Json& job, const std::string& type) {
  const Json* c = reconciler::FindCondition(kube::At(job, {"status"}), type);
  return c != nullptr && kube::StringAt(*c, {"status"}) == "True";
}

}  // namespace

struct JobController::JobRuntime {
  std::string uid;
  std::string sharding_address;
  std::unique_ptr<client::ShardingClient> driver;
  bool dataset_ready = false;
  std::optional<reconciler::Progress> progress;
  // The control loop of this job and the operator's backend of it.
  std::unique_ptr<LoopBackend> backend;
  std::unique_ptr<control::ControlLoop> loop;
  // Its series on the operator's /metrics; they go with the runtime.
  std::unique_ptr<control::JobMetrics> metrics;
  // spec.stragglerPolicy and spec.monitor as the loop was built from them: a
  // change (they may change on a running job) builds the loop again.
  std::string policy_spec;
  std::string reported_orphans;    // the orphaned pods last reported
  bool pod_group_created = false;  // gang scheduling: the job's PodGroup exists
  std::string token;               // the job's credential ("" without)
  bool token_secret_created = false;
  bool sharding_claim_created = false;
  // Per worker, the DeliveredKey of the last ADJUST_BS this process delivered
  // (ResyncBatches sends what is committed and not delivered yet).
  std::map<std::string, std::string> delivered;
  // Per moved parameter server, the incarnation the workers were told of.
  std::map<std::string, int64_t> moves_announced;
};

namespace {

// "incarnation/batch/accumulation steps": what a worker's incarnation was sent.
std::string DeliveredKey(int64_t incarnation, int64_t batch, int32_t accumulation_steps) {
  return absl::StrCat(incarnation, "/", batch, "/", std::max(1, accumulation_steps));
}

std::string PolicySpecOf(const Json& job) {
  return kube::At(job, {"spec", "stragglerPolicy"}).dump() +
         kube::At(job, {"spec", "monitor"}).dump();
}

}  // namespace

// The operator as a backend of the control loop, bound to what one sync
// observed. A restart is committed by the reconciler in the same pass (the
// new incarnation in status.workerInstances); its writes delete the old pod,
// tell the parameter servers once it is gone, and create the new one.
class JobController::LoopBackend final : public control::Backend {
 public:
  explicit LoopBackend(JobController* controller) : controller_(controller) {}

  void Bind(const Json* job, const std::vector<Json>* pods, const v1::GetJobHealthResponse* health,
            JobRuntime* rt) {
    job_ = job;
    pods_ = pods;
    health_ = health;
    rt_ = rt;
  }

  std::optional<v1::GetJobHealthResponse> Health() override {
    if (health_ == nullptr) return std::nullopt;
    return *health_;
  }

  std::vector<controller::WorkerState> Members() override {
    std::vector<controller::WorkerState> members;
    const Json& instances = kube::At(*job_, {"status", "workerInstances"});
    if (!instances.is_array()) return members;
    for (const Json& inst : instances) {
      controller::WorkerState ws;
      ws.id = kube::StringAt(inst, {"id"});
      ws.role = vocab::Role::kWorker;
      ws.local_batch_size = inst.value("localBatchSize", int64_t{0});
      ws.accumulation_steps = std::max(1, inst.value("accumulationSteps", 1));
      ws.incarnation = inst.value("incarnation", 0);
      ws.alive = false;
      const std::string desired = kube::StringAt(inst, {"pod"});
      for (const Json& p : *pods_) {
        if (kube::Label(p, "antdt.io/worker-id") == ws.id && !kube::Terminating(p) &&
            NameOf(p) == desired &&
            kube::Label(p, "antdt.io/incarnation") == std::to_string(ws.incarnation) &&
            kube::PodPhase(p) == "Running") {
          ws.alive = true;
          ws.node = NodeOf(p);
        }
      }
      members.push_back(ws);
    }
    for (controller::WorkerState& ps : ServerMembers()) members.push_back(std::move(ps));
    return members;
  }

  // The parameter servers: each one's desired incarnation (status.serverInstances,
  // else 0), alive while that pod runs.
  std::vector<controller::WorkerState> ServerMembers() const {
    std::map<int32_t, int64_t> desired;
    const Json& moved = kube::At(*job_, {"status", "serverInstances"});
    for (const Json& si : moved.is_array() ? moved : Json::array()) {
      int32_t k = -1;
      const std::string id = si.value("id", "");
      if (absl::StartsWith(id, "ps-") && absl::SimpleAtoi(id.substr(3), &k)) {
        desired[k] = si.value("incarnation", int64_t{0});
      }
    }
    std::map<int32_t, controller::WorkerState> servers;
    for (const Json& p : *pods_) {
      int32_t k = -1;
      if (kube::Label(p, "antdt.io/role") != "ps" || kube::Terminating(p) ||
          !absl::SimpleAtoi(kube::Label(p, "antdt.io/replica-index"), &k)) {
        continue;
      }
      controller::WorkerState& ws = servers[k];
      ws.id = absl::StrCat("ps-", k);
      ws.role = vocab::Role::kParameterServer;
      ws.incarnation = static_cast<int32_t>(desired[k]);
      const std::string incarnation = kube::Label(p, "antdt.io/incarnation");
      if ((incarnation.empty() ? "0" : incarnation) == std::to_string(desired[k])) {
        ws.alive = kube::PodPhase(p) == "Running";
        ws.node = NodeOf(p);
      }
    }
    std::vector<controller::WorkerState> out;
    for (auto& [k, ws] : servers) out.push_back(std::move(ws));
    return out;
  }

  std::vector<controller::NodeState> Nodes() override {
    std::map<std::string, bool> busy;
    for (const Json& p : *pods_) {
      const bool member =
          !kube::Label(p, "antdt.io/worker-id").empty() || kube::Label(p, "antdt.io/role") == "ps";
      if (!member || kube::Terminating(p)) continue;
      if (!NodeOf(p).empty() &&
          (kube::PodPhase(p) == "Running" || kube::PodPhase(p) == "Pending")) {
        busy[NodeOf(p)] = true;
      }
    }
    std::vector<controller::NodeState> nodes;
    for (const Json& n : controller_->nodes_->List()) {
      controller::NodeState ns;
      ns.name = NameOf(n);
      ns.spare = !busy[ns.name] && kube::At(n, {"spec", "unschedulable"}) != Json(true);
      nodes.push_back(ns);
    }
    return nodes;
  }

  double RemainingSeconds() override { return rt_->progress ? rt_->progress->eta_seconds : -1; }

  absl::Status RestartElsewhere(const controller::WorkerState&,
                                const controller::KillRestart&) override {
    return absl::OkStatus();  // committed by this pass's reconciler (see above)
  }

  bool SendDirective(const std::string& node, const v1::Directive& directive) override {
    if (controller_->monitor_->hub().SendDirective(node, directive)) {
      for (const controller::WorkerState& m : Members()) {
        if (m.id == directive.worker_id()) {
          rt_->delivered[m.id] =
              DeliveredKey(m.incarnation, directive.adjust_batch().local_batch_size(),
                           directive.adjust_batch().accumulation_steps());
        }
      }
      return true;
    }
    LogEvent("operator", {{"event", "directive_not_delivered"},
                          {"job", kube::KeyOf(*job_)},
                          {"worker", directive.worker_id()},
                          {"node", node}});
    return false;
  }

  void LeaveParameterServers(const std::string& worker) override {
    controller_->LeaveParameterServers(worker, *pods_, rt_->token);
  }

  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override {
    if (rt_->sharding_address.empty()) return absl::UnavailableError("no sharding service yet");
    client::ShardingClientOptions co = rt_->driver->options();
    co.worker_id = worker;
    co.incarnation = incarnation;
    return client::ReleaseWorker(rt_->sharding_address, co);
  }

  void RecordAction(const controller::Decision& d, control::Outcome outcome) override {
    if (controller_->actions_total_ != nullptr && outcome == control::Outcome::kDone) {
      controller_->actions_total_->Add({{"action", controller::ActionName(d.action)}}).Increment();
    }
    if (rt_->metrics) {
      rt_->metrics->Decided(d, control::OutcomeName(outcome));
    }
  }

  void RecordTime(const control::TimeDelta& delta) override {
    if (rt_->metrics) rt_->metrics->Time(delta);
  }

  void RecordSkipped(const std::string& /*line*/, controller::SkipReason reason) override {
    if (rt_->metrics) rt_->metrics->Skipped(controller::SkipReasonName(reason));
  }

  void RecordBudgetUsed(int used) override {
    if (rt_->metrics) rt_->metrics->BudgetUsed(used);
  }

 private:
  JobController* const controller_;
  const Json* job_ = nullptr;
  const std::vector<Json>* pods_ = nullptr;
  const v1::GetJobHealthResponse* health_ = nullptr;
  JobRuntime* rt_ = nullptr;
};

namespace {

// The decisions a previous operator committed to the job's status
// (status.lastActions, the newest 20), so cool-downs, budgets and exclusions
// hold across an operator restart. A batch change that only kept the global
// batch around someone else's was written without evidence: it has no subject.
std::vector<controller::Decision> HistoryFromStatus(const Json& job, const manifest::Job& spec) {
  std::vector<controller::Decision> history;
  const Json& last = kube::At(job, {"status", "lastActions"});
  if (!last.is_array()) return history;
  for (const Json& a : last) {
    controller::Decision d;
    d.at_ms = kube::ParseTime(kube::StringAt(a, {"time"})).value_or(0);
    const std::string worker = kube::StringAt(a, {"worker"});
    const std::optional<vocab::ActionKind> action =
        vocab::ParseActionKind(kube::StringAt(a, {"action"}));
    if (action == vocab::ActionKind::kKillRestart) {
      d.action = controller::KillRestart{worker, kube::StringAt(a, {"fromNode"}),
                                         kube::StringAt(a, {"toNode"}),
                                         d.at_ms + spec.straggler_policy.cooldown_ms};
      d.subject = worker;
    } else if (action == vocab::ActionKind::kAdjustBatchSize) {
      d.action = controller::AdjustBatchSize{worker, 0, 1};
      if (!kube::StringAt(a, {"evidence"}).empty()) d.subject = worker;
    } else {
      continue;
    }
    d.rule = kube::StringAt(a, {"rule"});
    d.policy = spec.straggler_policy.name;
    history.push_back(std::move(d));
  }
  return history;
}

// A decision as the reconciler commits it; nullopt for what the operator does
// not run (backup workers, a baseline).
std::optional<reconciler::Action> ToReconcilerAction(const controller::Decision& d) {
  reconciler::Action a;
  a.rule = d.rule;
  a.reason = d.reason;
  a.evidence = controller::Describe(d);
  a.at_ms = d.at_ms;
  if (const auto* k = std::get_if<controller::KillRestart>(&d.action)) {
    a.kind = vocab::ActionKind::kKillRestart;
    a.worker = k->worker;
    a.from_node = k->from_node;
    a.to_node = k->to_node;
  } else if (const auto* b = std::get_if<controller::AdjustBatchSize>(&d.action)) {
    a.kind = vocab::ActionKind::kAdjustBatchSize;
    a.worker = b->worker;
    a.local_batch_size = static_cast<int32_t>(b->local_batch_size);
    a.accumulation_steps = b->accumulation_steps;
    if (d.subject.empty()) a.evidence.clear();  // only keeps the global batch
  } else {
    return std::nullopt;
  }
  return a;
}

}  // namespace

JobController::JobController(kube::Api* api, monitor::MonitorServiceImpl* monitor,
                             JobControllerOptions options, prometheus::Registry* registry)
    : api_(api), monitor_(monitor), options_(std::move(options)), registry_(registry) {
  kube::InformerOptions io;
  io.name = "antdtjobs";
  jobs_ = std::make_unique<kube::Informer>(api_, kube::AntDTJobsResource(),
                                           options_.watch_namespace, kube::ListOptions{}, io);
  kube::ListOptions owned;
  owned.label_selector = "antdt.io/job";
  io.name = "pods";
  pods_ = std::make_unique<kube::Informer>(api_, kube::PodsResource(), options_.watch_namespace,
                                           owned, io);
  io.name = "services";
  services_ = std::make_unique<kube::Informer>(api_, kube::ServicesResource(),
                                               options_.watch_namespace, owned, io);
  io.name = "nodes";
  nodes_ =
      std::make_unique<kube::Informer>(api_, kube::NodesResource(), "", kube::ListOptions{}, io);
  kube::WorkQueueOptions qo;
  qo.name = kController;
  qo.registry = registry;
  queue_ = std::make_unique<kube::WorkQueue>(qo);
  recorder_ = std::make_unique<kube::EventRecorder>(api_, "antdt-operator", options_.identity);

  kube::Handlers job_handlers;
  job_handlers.on_add = [this](const Json& j) { queue_->Add(kube::KeyOf(j)); };
  job_handlers.on_update = [this](const Json&, const Json& j) { queue_->Add(kube::KeyOf(j)); };
  job_handlers.on_delete = [this](const Json& j, bool) { queue_->Add(kube::KeyOf(j)); };
  jobs_->AddHandler(job_handlers);
  kube::Handlers child_handlers;
  child_handlers.on_add = [this](const Json& j) { EnqueueOwner(j); };
  child_handlers.on_update = [this](const Json&, const Json& j) { EnqueueOwner(j); };
  child_handlers.on_delete = [this](const Json& j, bool) { EnqueueOwner(j); };
  pods_->AddHandler(child_handlers);
  services_->AddHandler(child_handlers);

  if (registry != nullptr) {
    reconcile_total_ = &prometheus::BuildCounter()
                            .Name("controller_runtime_reconcile_total")
                            .Help("Reconciliations per controller and result")
                            .Register(*registry);
    reconcile_errors_ = &prometheus::BuildCounter()
                             .Name("controller_runtime_reconcile_errors_total")
                             .Help("Reconciliations that returned an error")
                             .Register(*registry);
    reconcile_time_ = &prometheus::BuildHistogram()
                           .Name("controller_runtime_reconcile_time_seconds")
                           .Help("Time per reconciliation")
                           .Register(*registry);
    actions_total_ = &prometheus::BuildCounter()
                          .Name("antdt_operator_actions_total")
                          .Help("Straggler actions carried out, by action")
                          .Register(*registry);
  }
  // Step reports count only with their job's credential: a pod of another
  // team cannot make this job's workers look slow.
  if (monitor_ != nullptr && options_.settings.job_credentials) {
    monitor_->hub().SetStepGate([this](const v1::StepReport& step) {
      std::lock_guard<std::mutex> lock(cred_mu_);
      auto it = digests_.find(JobKey(step.namespace_(), step.job()));
      return it != digests_.end() && DigestsMatch(step.credential_digest(), it->second);
    });
  }
}

JobController::~JobController() {
  Stop();
  if (monitor_ != nullptr && options_.settings.job_credentials) {
    monitor_->hub().SetStepGate(nullptr);
  }
}

void JobController::EnqueueOwner(const Json& child) {
  const Json& refs = kube::At(child, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return;
  for (const Json& ref : refs) {
    if (kube::StringAt(ref, {"kind"}) == "AntDTJob" && ref.value("controller", false)) {
      queue_->Add(kube::StringAt(child, {"metadata", "namespace"}) + "/" +
                  kube::StringAt(ref, {"name"}));
    }
  }
}

bool JobController::Start(int64_t sync_timeout_ms) {
  nodes_->Start();
  services_->Start();
  pods_->Start();
  jobs_->Start();
  const bool synced = nodes_->WaitForSync(sync_timeout_ms) &&
                      services_->WaitForSync(sync_timeout_ms) &&
                      pods_->WaitForSync(sync_timeout_ms) && jobs_->WaitForSync(sync_timeout_ms);
  worker_ = std::thread([this] { Worker(); });
  return synced;
}

bool JobController::HasSynced() const {
  return nodes_->HasSynced() && services_->HasSynced() && pods_->HasSynced() && jobs_->HasSynced();
}

void JobController::Stop() {
  if (stopping_.exchange(true)) return;
  queue_->ShutDown();
  if (worker_.joinable()) worker_.join();
  jobs_->Stop();
  pods_->Stop();
  services_->Stop();
  nodes_->Stop();
}

void JobController::Worker() {
  std::string key;
  while (queue_->Get(&key)) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t requeue_after_ms = 0;
    absl::Status s = Sync(key, &requeue_after_ms);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string result;
    if (!s.ok()) {
      result = "error";
      LogEvent("operator", {{"event", "sync_failed"}, {"job", key}, {"error", s.ToString()}});
      if (reconcile_errors_ != nullptr)
        reconcile_errors_->Add({{"controller", kController}}).Increment();
      queue_->AddRateLimited(key);
    } else if (requeue_after_ms > 0) {
      result = "requeue_after";
      queue_->Forget(key);
      queue_->AddAfter(key, requeue_after_ms);
    } else {
      result = "success";
      queue_->Forget(key);
    }
    if (reconcile_total_ != nullptr) {
      reconcile_total_->Add({{"controller", kController}, {"result", result}}).Increment();
    }
    if (reconcile_time_ != nullptr) {
      reconcile_time_
          ->Add({{"controller", kController}},
                prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                                        2.5, 5, 10})
          .Observe(seconds);
    }
    queue_->Done(key);
  }
}

std::optional<std::string> JobController::NamespaceOf(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<std::string> found;
  for (const auto& [key, rt] : runtimes_) {
    const size_t slash = key.find('/');
    if (key.substr(slash + 1) != name) continue;
    if (found) return std::nullopt;  // two namespaces: ambiguous
    found = key.substr(0, slash);
  }
  return found;
}

JobController::JobRuntime& JobController::RuntimeFor(const Json& job, const manifest::Job& spec) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = kube::KeyOf(job);
  const std::string uid = kube::StringAt(job, {"metadata", "uid"});
  auto& rt = runtimes_[key];
  if (!rt || rt->uid != uid) {
    rt.reset();  // a re-created job's series start again, not shared with the old one's
    rt = std::make_unique<JobRuntime>();
    if (registry_ != nullptr) {
      rt->metrics = std::make_unique<control::JobMetrics>(
          *registry_, kube::StringAt(job, {"metadata", "namespace"}), spec.name,
          spec.straggler_policy.max_actions);
    }
    rt->uid = uid;
    if (options_.settings.job_credentials) {
      rt->token = DeriveToken(options_.token_key, uid);
      {
        std::lock_guard<std::mutex> cred_lock(cred_mu_);
        digests_[key] = TokenDigest(rt->token);
      }
      // The agents refuse this job's reports without it (outside cred_mu_:
      // the hub's lock is taken before it by the step gate).
      if (monitor_ != nullptr) {
        monitor_->hub().SetJobCredential(kube::StringAt(job, {"metadata", "namespace"}), spec.name,
                                         TokenDigest(rt->token));
      }
    }
    rt->backend = std::make_unique<LoopBackend>(this);
  }
  const std::string policy_spec = PolicySpecOf(job);
  if (rt->loop == nullptr || rt->policy_spec != policy_spec) {
    if (rt->loop != nullptr) {
      // Acted on, and said: the new policy decides from the next turn on, with
      // the decisions committed so far (cool-downs, budget) as its history.
      recorder_->Record(
          job, "Normal", "PolicyChanged",
          absl::StrCat("spec.stragglerPolicy or spec.monitor changed: policy ",
                       vocab::Name(spec.straggler_policy.name), " decides from now on (generation ",
                       kube::At(job, {"metadata", "generation"}).dump(), ")"));
    }
    rt->policy_spec = policy_spec;
    control::LoopOptions lo;
    lo.job = spec.name;
    lo.namespace_ = spec.namespace_;
    lo.interval_ms = bridge::ControlIntervalMs(spec.monitor);
    lo.policy = bridge::PolicySpecFor(spec, spec.straggler_policy.name, lo.interval_ms);
    lo.global_batch_size = spec.model.global_batch_size;
    lo.window_ms = spec.monitor.window_ms;
    lo.regroup_seconds = bridge::RegroupSeconds(spec);  // a collective job re-forms its group
    rt->loop = std::make_unique<control::ControlLoop>(lo, rt->backend.get(), &RealClock::Get());
    // Decisions a previous operator committed to the status.
    rt->loop->Seed(HistoryFromStatus(job, spec));
  }
  return *rt;
}

absl::Status JobController::SyncForTest(const std::string& key) {
  int64_t requeue = 0;
  return Sync(key, &requeue);
}

void JobController::Observe(const Json& job, const manifest::Job& spec,
                            const std::vector<Json>& pods, const v1::GetJobHealthResponse* health,
                            JobRuntime& rt, reconciler::Observed* obs) {
  const auto& s = options_.settings;
  // The sharding service: its running pod's address.
  std::string address;
  for (const Json& p : pods) {
    if (kube::Label(p, "antdt.io/role") == "sharding" && kube::PodPhase(p) == "Running" &&
        !kube::Terminating(p) && !PodIp(p).empty()) {
      address = absl::StrCat(PodIp(p), ":", s.sharding_port);
    }
  }
  if (address != rt.sharding_address) {
    rt.sharding_address = address;
    rt.driver.reset();
    if (!address.empty()) {
      client::ShardingClientOptions co;
      co.job = spec.name;
      co.dataset = "train";
      co.worker_id = "antdt-operator";
      co.retry_budget_ms = options_.rpc_timeout_ms;
      co.call_timeout_ms = options_.rpc_timeout_ms;
      co.token = rt.token;
      rt.driver =
          std::make_unique<client::ShardingClient>(client::CreateShardingChannel(address), co);
    }
  }
  if (kube::At(job, {"status", "datasetCreated"}) == Json(true)) rt.dataset_ready = true;
  if (rt.driver) {
    if (!rt.dataset_ready) {
      const v1::DatasetSpec ds = bridge::DatasetSpecFor(spec);
      auto created = rt.driver->CreateDataset(ds);
      if (created.ok()) {
        rt.dataset_ready = true;
      } else {
        LogEvent("operator", {{"event", "create_dataset_failed"},
                              {"job", kube::KeyOf(job)},
                              {"error", created.status().ToString()}});
      }
    }
    if (rt.dataset_ready) {
      auto p = rt.driver->Progress();
      if (p.ok()) {
        reconciler::Progress pr;
        pr.records_committed = p->records_committed_total();
        pr.records_total = p->records_per_epoch() * p->epochs();
        pr.epoch = p->epoch();
        pr.epochs = p->epochs();
        pr.eta_seconds = p->eta_seconds();
        pr.done = p->finished();
        rt.progress = pr;
        if (rt.metrics) {
          rt.metrics->Progress(pr.records_committed, pr.records_total, p->records_per_second(),
                               p->eta_seconds());
        }
      } else if (p.status().code() == absl::StatusCode::kNotFound) {
        // The service answers, without the dataset it was given: its state is gone.
        obs->dataset_lost = true;
      }
    }
  }
  obs->progress = rt.progress;
  obs->dataset_ready = rt.dataset_ready;
  obs->pod_group_exists = rt.pod_group_created;
  obs->job_token = rt.token;
  obs->token_secret_exists = rt.token_secret_created;
  obs->sharding_claim_exists = rt.sharding_claim_created;

  // The Monitor's open straggler records: the same account of each straggler
  // (compensated ones included) as its metrics and `antdt run`'s report.
  if (health != nullptr) {
    std::map<std::string, double> scores;
    for (const v1::WorkerHealth& h : health->workers()) scores[h.worker_id()] = h.score();
    for (const v1::StragglerRecord& rec : health->stragglers()) {
      if (!rec.active()) continue;
      reconciler::Straggler st;
      st.worker = rec.worker_id();
      st.node = rec.node();
      for (const Json& p : pods) {
        if (kube::Label(p, "antdt.io/worker-id") == rec.worker_id() && !kube::Terminating(p)) {
          st.pod = NameOf(p);
        }
      }
      st.klass = rec.class_();
      st.compensated = rec.compensated();
      st.cause = vocab::CauseLabel(rec.cause());
      st.score = scores.count(rec.worker_id()) ? scores[rec.worker_id()] : rec.max_score();
      st.since_ms = rec.first_seen_unix_ms();
      obs->stragglers.push_back(st);
    }
  }
  ObserveMovedServers(job, spec, pods, rt, obs);
}

void JobController::ObserveMovedServers(const Json& job, const manifest::Job& spec,
                                        const std::vector<Json>& pods, JobRuntime& rt,
                                        reconciler::Observed* obs) {
  const Json& moved = kube::At(job, {"status", "serverInstances"});
  if (!moved.is_array()) return;
  for (const Json& si : moved) {
    const std::string id = si.value("id", "");
    const int64_t incarnation = si.value("incarnation", int64_t{0});
    int32_t k = -1;
    if (!absl::StartsWith(id, "ps-") || !absl::SimpleAtoi(id.substr(3), &k)) continue;
    const std::string desired = reconciler::PsPodName(spec.name, k, incarnation);
    const Json* pod = nullptr;
    bool older = false;
    for (const Json& p : pods) {
      if (kube::Label(p, "antdt.io/role") != "ps" ||
          kube::Label(p, "antdt.io/replica-index") != std::to_string(k) || kube::Terminating(p)) {
        continue;
      }
      if (NameOf(p) == desired) {
        if (kube::PodPhase(p) == "Running" && !PodIp(p).empty()) pod = &p;
      } else {
        older = true;
      }
    }
    if (pod == nullptr || !older) continue;
    const std::string address = absl::StrCat(PodIp(*pod), ":", options_.settings.ps_port);
    auto stub = v1::ParameterServer::NewStub(antdt::CreateChannel(address));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options_.rpc_timeout_ms));
    AddCredential(ctx, rt.token);
    v1::ParameterServerStats stats;
    if (!stub->Stats(&ctx, v1::StatsRequest(), &stats).ok() || stats.generation() < 1) continue;
    if (rt.moves_announced[id] != incarnation) {
      // Each running worker is pointed at it between two steps (one that
      // pushes to the old server first is sent on by it).
      std::vector<controller::WorkerState> running;
      for (const Json& p : pods) {
        const std::string worker = kube::Label(p, "antdt.io/worker-id");
        if (worker.empty() || kube::Terminating(p) || kube::PodPhase(p) != "Running") continue;
        controller::WorkerState& w = running.emplace_back();
        w.id = worker;
        w.node = NodeOf(p);
        w.alive = true;
      }
      for (const control::Delivery& d : rt.loop->ServerMoved(
               id, address, running, absl::StrCat(id, " moved to pod ", desired))) {
        if (monitor_ != nullptr) (void)monitor_->hub().SendDirective(d.node, d.directive);
      }
      rt.moves_announced[id] = incarnation;
      LogEvent("operator", {{"event", "parameter_server_took_over"},
                            {"job", kube::KeyOf(job)},
                            {"ps", id},
                            {"pod", desired},
                            {"step", stats.loaded_step()}});
    }
    if (stats.step() > stats.loaded_step()) obs->servers_followed.insert(id);
  }
}

std::optional<controller::Plan> JobController::PlanIfDue(const Json& job, JobRuntime& rt) {
  if (!rt.dataset_ready || kube::At(job, {"spec", "suspend"}) == true) return std::nullopt;
  const bool running = ConditionTrue(job, "Running");
  const bool finished = ConditionTrue(job, "Succeeded") || ConditionTrue(job, "Failed");
  if (!running || finished || !rt.loop->TakeTurn()) return std::nullopt;
  std::optional<controller::Observed> observed = rt.loop->Observe();
  if (!observed) return std::nullopt;  // no reports yet
  controller::Plan plan = rt.loop->Decide(*observed);
  // The operator does not run backup workers (a baseline): left out.
  plan.decisions.erase(
      std::remove_if(plan.decisions.begin(), plan.decisions.end(),
                     [](const controller::Decision& d) {
                       return std::holds_alternative<controller::UseBackupWorkers>(d.action);
                     }),
      plan.decisions.end());
  return plan;
}

void JobController::ForEachParameterServer(
    const std::vector<Json>& pods, const std::string& token,
    const std::function<grpc::Status(v1::ParameterServer::Stub&, grpc::ClientContext&)>& call) {
  for (const Json& p : pods) {
    if (kube::Label(p, "antdt.io/role") != "ps" || PodIp(p).empty() || kube::Terminating(p))
      continue;
    auto stub = v1::ParameterServer::NewStub(
        antdt::CreateChannel(absl::StrCat(PodIp(p), ":", options_.settings.ps_port)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options_.rpc_timeout_ms));
    AddCredential(ctx, token);
    const grpc::Status s = call(*stub, ctx);
    if (!s.ok()) {
      LogEvent("operator", {{"event", "parameter_server_call_failed"},
                            {"pod", NameOf(p)},
                            {"code", static_cast<int>(s.error_code())},
                            {"error", s.error_message()}});
    }
  }
}

void JobController::LeaveParameterServers(const std::string& worker, const std::vector<Json>& pods,
                                          const std::string& token) {
  ForEachParameterServer(pods, token,
                         [&](v1::ParameterServer::Stub& stub, grpc::ClientContext& ctx) {
                           v1::LeaveRequest req;
                           req.set_worker_id(worker);
                           v1::LeaveResponse resp;
                           return stub.Leave(&ctx, req, &resp);
                         });
}

void JobController::ApplyServerWrite(const Json& job, const reconciler::Write& w,
                                     const std::vector<Json>& pods, JobRuntime* rt) {
  const std::string key = kube::KeyOf(job);
  switch (w.kind) {
    case reconciler::Write::Kind::kLeaveParameterServers:
      LeaveParameterServers(w.worker, pods, rt == nullptr ? "" : rt->token);
      return;
    case reconciler::Write::Kind::kResizeParameterServers:
      ForEachParameterServer(pods, rt == nullptr ? "" : rt->token,
                             [&](v1::ParameterServer::Stub& stub, grpc::ClientContext& ctx) {
                               v1::ResizeRequest req;
                               req.set_workers(w.workers);
                               for (const std::string& id : w.removed) req.add_removed(id);
                               for (const std::string& id : w.added) req.add_added(id);
                               v1::ResizeResponse resp;
                               return stub.Resize(&ctx, req, &resp);
                             });
      break;
    case reconciler::Write::Kind::kAdjustBatch: {
      std::string incarnation;
      for (const Json& p : pods) {
        if (kube::Label(p, "antdt.io/worker-id") == w.worker && !kube::Terminating(p)) {
          incarnation = kube::Label(p, "antdt.io/incarnation");
        }
      }
      const bool sent = SendBatch(w.worker, incarnation, w.node, w.local_batch_size,
                                  w.accumulation_steps, w.reason, rt);
      LogEvent("operator", {{"event", sent ? "directive_sent" : "directive_not_delivered"},
                            {"job", key},
                            {"worker", w.worker},
                            {"node", w.node},
                            {"local_batch", w.local_batch_size}});
      return;
    }
    case reconciler::Write::Kind::kReleaseShards: {
      const absl::Status s =
          rt == nullptr ? absl::FailedPreconditionError("no runtime")
                        : rt->backend->ReleaseShards(w.worker, static_cast<int32_t>(w.incarnation));
      // Not fatal: the leases expire by themselves.
      LogEvent("operator", {{"event", s.ok() ? "shards_released" : "shards_not_released"},
                            {"job", key},
                            {"worker", w.worker},
                            {"error", std::string(s.message())}});
      return;
    }
    default:
      return;
  }
  LogEvent("operator", {{"event", "parameter_servers_resized"},
                        {"job", key},
                        {"workers", w.workers},
                        {"removed", absl::StrJoin(w.removed, ",")},
                        {"added", absl::StrJoin(w.added, ",")}});
}

absl::Status JobController::Apply(const Json& job, const reconciler::Plan& plan,
                                  const std::vector<Json>& pods,
                                  const std::set<std::string>& foreign, JobRuntime* rt) {
  const std::string ns = kube::StringAt(job, {"metadata", "namespace"});
  const std::string key = kube::KeyOf(job);
  Json current = job;  // the job as last written, for ReplicaFailure
  if (plan.status) {
    Json updated = job;
    updated["status"] = *plan.status;
    auto r = api_->UpdateStatus(kube::AntDTJobsResource(), ns, updated);
    if (!r.ok()) return r.status();  // a conflict: requeued, nothing else done
    current = *r;
  }
  // The decisions are committed: their Events now, before any write can fail.
  RecordCommittedEvents(plan, plan.status.has_value(), &current);

  for (const reconciler::Write& w : plan.writes) {
    const kube::ResourceRef ref = RefOf(w);
    switch (w.kind) {
      case reconciler::Write::Kind::kCreate: {
        auto r = api_->Create(ref, ns, w.object);
        if (!r.ok() && kube::IsAlreadyExists(r.status()) && foreign.count(NameOf(w.object)) > 0) {
          // The name is taken by an object that is not this job's: said, not waited on silently.
          const absl::Status taken = absl::AlreadyExistsError(absl::StrCat(
              r.status().message(), ": it is not this job's (no controller: left by `kubectl ",
              "delete --cascade=orphan`?, or an earlier job's being deleted); delete it so that "
              "the job can create its own"));
          ReportFailedCreate(current, w, taken);
          return taken;
        }
        if (!r.ok() && !kube::IsAlreadyExists(r.status())) {
          ReportFailedCreate(current, w, r.status());
          return r.status();
        }
        if (r.ok()) {
          LogEvent("operator", {{"event", "created"},
                                {"job", key},
                                {"resource", w.resource},
                                {"name", NameOf(w.object)},
                                {"reason", w.reason}});
        }
        break;
      }
      case reconciler::Write::Kind::kDelete: {
        kube::DeleteOptions d;
        d.precondition_uid = w.uid;
        if (w.grace_period_seconds >= 0) d.grace_period_seconds = w.grace_period_seconds;
        absl::Status s = api_->Delete(ref, ns, w.name, d);
        if (!s.ok() && !kube::IsNotFound(s) && !kube::IsConflict(s)) return s;
        LogEvent("operator", {{"event", "deleted"},
                              {"job", key},
                              {"resource", w.resource},
                              {"name", w.name},
                              {"reason", w.reason}});
        break;
      }
      case reconciler::Write::Kind::kLeaveParameterServers:
      case reconciler::Write::Kind::kResizeParameterServers:
      case reconciler::Write::Kind::kAdjustBatch:
      case reconciler::Write::Kind::kReleaseShards:
        ApplyServerWrite(job, w, pods, rt);
        break;
      case reconciler::Write::Kind::kDeleteJob: {
        kube::DeleteOptions d;
        d.propagation_policy = "Background";
        d.precondition_uid = kube::StringAt(job, {"metadata", "uid"});
        absl::Status s = api_->Delete(kube::AntDTJobsResource(), ns, NameOf(job), d);
        if (!s.ok() && !kube::IsNotFound(s)) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

void JobController::ReportOrphans(const Json& job, const std::vector<Json>& pods,
                                  const std::vector<Json>& services, JobRuntime* rt) {
  std::vector<std::string> orphans;
  for (const Json& p : pods) {
    if (!HasController(p)) orphans.push_back("pod/" + NameOf(p));
  }
  for (const Json& s : services) {
    if (!HasController(s)) orphans.push_back("service/" + NameOf(s));
  }
  std::sort(orphans.begin(), orphans.end());
  const std::string names = absl::StrJoin(orphans, ", ");
  if (names == rt->reported_orphans) return;
  rt->reported_orphans = names;
  if (orphans.empty()) return;
  recorder_->Record(
      job, "Warning", "OrphanedChildren",
      absl::StrCat(orphans.size(), orphans.size() == 1 ? " object carries" : " objects carry",
                   " this job's label antdt.io/job but no controller (left by `kubectl delete ",
                   "--cascade=orphan` of an earlier job?): ", names,
                   ". The job neither counts nor adopts them (they hold an earlier run's state); "
                   "delete them when done with them"));
}

void JobController::ResyncBatches(const Json& status, const std::vector<Json>& pods,
                                  JobRuntime& rt) {
  if (monitor_ == nullptr) return;
  const Json& instances = kube::At(status, {"workerInstances"});
  if (!instances.is_array()) return;
  for (const Json& inst : instances) {
    const std::string id = kube::StringAt(inst, {"id"});
    const std::string incarnation = std::to_string(inst.value("incarnation", int64_t{0}));
    const int64_t batch = inst.value("localBatchSize", int64_t{0});
    const int32_t accumulation = std::max(1, inst.value("accumulationSteps", 1));
    if (batch <= 0) continue;
    if (rt.delivered[id] ==
        DeliveredKey(inst.value("incarnation", int64_t{0}), batch, accumulation))
      continue;
    std::string node;
    for (const Json& p : pods) {
      if (NameOf(p) == kube::StringAt(inst, {"pod"}) && !kube::Terminating(p) &&
          kube::Label(p, "antdt.io/incarnation") == incarnation && kube::PodPhase(p) == "Running") {
        node = NodeOf(p);
      }
    }
    if (node.empty()) continue;
    SendBatch(id, incarnation, node, batch, accumulation,
              "the committed local batch (status.workerInstances), not delivered before", &rt);
  }
}

bool JobController::SendBatch(const std::string& worker, const std::string& incarnation,
                              const std::string& node, int64_t batch, int32_t accumulation_steps,
                              const std::string& reason, JobRuntime* rt) {
  if (monitor_ == nullptr || rt == nullptr) return false;
  const v1::Directive d = rt->loop->BatchDirective(worker, batch, accumulation_steps, reason);
  if (!monitor_->hub().SendDirective(node, d)) return false;
  int64_t inc = 0;
  if (absl::SimpleAtoi(incarnation, &inc)) {
    rt->delivered[worker] = DeliveredKey(inc, batch, d.adjust_batch().accumulation_steps());
  }
  return true;
}

void JobController::RecordCommittedEvents(const reconciler::Plan& plan, bool status_written,
                                          Json* current) {
  if (plan.events.empty()) return;
  if (!status_written) {
    // The status is as this pass found it, pendingEvents and all: left by an
    // operator that stopped before writing them, or written by this one a
    // moment ago and cleared since, the cache not yet showing it. Only the job
    // as stored now tells them apart (a cache behind: the next pass sees it).
    auto stored = api_->Get(kube::AntDTJobsResource(),
                            kube::StringAt(*current, {"metadata", "namespace"}), NameOf(*current));
    if (!stored.ok() || kube::StringAt(*stored, {"metadata", "resourceVersion"}) !=
                            kube::StringAt(*current, {"metadata", "resourceVersion"})) {
      return;
    }
  }
  for (const reconciler::Event& e : plan.events) {
    recorder_->Record(*current, e.type, e.reason, e.message);
  }
  if (!kube::At(*current, {"status", "pendingEvents"}).is_array()) return;
  Json cleared = *current;
  cleared["status"].erase("pendingEvents");
  auto r = api_->UpdateStatus(kube::AntDTJobsResource(),
                              kube::StringAt(*current, {"metadata", "namespace"}), cleared);
  if (!r.ok()) {
    // Left pending: the next pass writes them again (counted on the same Events).
    LogEvent("operator", {{"event", "pending_events_not_cleared"},
                          {"job", kube::KeyOf(*current)},
                          {"error", r.status().ToString()}});
    return;
  }
  *current = *r;
}

void JobController::ReportFailedCreate(const Json& job, const reconciler::Write& w,
                                       const absl::Status& error) {
  // Not the API server refusing, but not reaching it: retried, not reported.
  if (error.code() == absl::StatusCode::kUnavailable ||
      error.code() == absl::StatusCode::kDeadlineExceeded) {
    return;
  }
  const std::string message = absl::StrCat("Error creating ",
                                           w.resource == "services"    ? "service "
                                           : w.resource == "podgroups" ? "PodGroup "
                                                                       : "pod ",
                                           NameOf(w.object), ": ", error.message());
  LogEvent("operator", {{"event", "create_failed"},
                        {"job", kube::KeyOf(job)},
                        {"resource", w.resource},
                        {"name", NameOf(w.object)},
                        {"error", error.ToString()}});
  recorder_->Record(job, "Warning", "FailedCreate", message);
  absl::Status s = SetReplicaFailure(job, "FailedCreate", message);
  if (!s.ok() && !kube::IsConflict(s)) {
    LogEvent(
        "operator",
        {{"event", "status_update_failed"}, {"job", kube::KeyOf(job)}, {"error", s.ToString()}});
  }
}

absl::Status JobController::SetReplicaFailure(const Json& job, const std::string& reason,
                                              const std::string& message) {
  Json updated = job;
  if (!reconciler::SetCondition(updated["status"]["conditions"], reconciler::kReplicaFailure,
                                "True", reason, message,
                                kube::At(job, {"metadata", "generation"}).is_number_integer()
                                    ? kube::At(job, {"metadata", "generation"}).get<int64_t>()
                                    : 0,
                                RealClock::Get().NowMillis())) {
    return absl::OkStatus();
  }
  return api_
      ->UpdateStatus(kube::AntDTJobsResource(), kube::StringAt(job, {"metadata", "namespace"}),
                     updated)
      .status();
}

absl::Status JobController::Sync(const std::string& key, int64_t* requeue_after_ms) {
  std::optional<Json> found = jobs_->Get(key);
  if (!found || !kube::At(*found, {"metadata", "deletionTimestamp"}).is_null()) {
    std::lock_guard<std::mutex> lock(mu_);
    {
      std::lock_guard<std::mutex> cred_lock(cred_mu_);
      digests_.erase(key);
    }
    if (monitor_ != nullptr) {
      const auto [ns, name] = SplitJobKey(key);
      monitor_->hub().SetJobCredential(ns, name, "");
    }
    if (runtimes_.erase(key) > 0 && monitor_ != nullptr) {
      // The Monitor keys jobs by namespace/name (`key`); workers that report
      // no namespace by the bare name: that one is forgotten unless a job
      // of the same name lives on in another namespace.
      monitor_->hub().ForgetJob(key);
      const std::string name = SplitJobKey(key).second;
      const bool shared = std::any_of(runtimes_.begin(), runtimes_.end(), [&](const auto& kv) {
        return SplitJobKey(kv.first).second == name;
      });
      if (!shared) monitor_->hub().ForgetJob(name);
    }
    return absl::OkStatus();  // its children go with it (owner references)
  }
  const Json& job = *found;
  const std::string ns = kube::StringAt(job, {"metadata", "namespace"});
  const std::string name = NameOf(job);
  const int64_t now_ms = RealClock::Get().NowMillis();

  reconciler::Observed obs;
  obs.job = job;
  obs.now_ms = now_ms;
  obs.spec = manifest::ParseJob(job.dump());
  // This job's children only: ones with its labels but another controller
  // (an earlier job of the same name, still being garbage-collected) or
  // none (left by `kubectl delete --cascade=orphan`) are not counted.
  const std::string uid = kube::StringAt(job, {"metadata", "uid"});
  const std::vector<Json> labelled_pods = pods_->List(ns, {{"antdt.io/job", name}});
  const std::vector<Json> labelled_services = services_->List(ns, {{"antdt.io/job", name}});
  obs.pods = ControlledBy(labelled_pods, uid);
  obs.services = ControlledBy(labelled_services, uid);
  std::set<std::string> foreign = Foreign(labelled_pods, obs.pods);
  foreign.merge(Foreign(labelled_services, obs.services));
  std::optional<controller::Plan> decided;
  JobRuntime* rt = nullptr;
  std::optional<v1::GetJobHealthResponse> health;
  if (obs.spec.ok()) {
    rt = &RuntimeFor(job, *obs.spec);
    ReportOrphans(job, labelled_pods, labelled_services, rt);
    // The Monitor's view, read once for the status and the policy.
    if (monitor_ != nullptr) {
      auto view = monitor_->hub().Health(ns, obs.spec->name);
      if (view.ok()) health = std::move(*view);  // NOT_FOUND: no reports yet
    }
    const v1::GetJobHealthResponse* h = health ? &*health : nullptr;
    Observe(job, *obs.spec, obs.pods, h, *rt, &obs);
    rt->backend->Bind(&job, &obs.pods, h, rt);
    decided = PlanIfDue(job, *rt);
    if (decided) {
      for (const controller::Decision& d : decided->decisions) {
        obs.actions.push_back(*ToReconcilerAction(d));
      }
    }
  }
  const reconciler::Plan plan = reconciler::Reconcile(obs, options_.settings);
  // The status first: it commits every decision of this pass.
  RETURN_IF_ERROR(Apply(job, plan, obs.pods, foreign, rt));
  if (rt != nullptr) {
    for (const reconciler::Write& w : plan.writes) {
      if (w.resource == "podgroups") rt->pod_group_created = true;  // created, or there
      if (w.resource == "secrets") rt->token_secret_created = true;
      if (w.resource == "persistentvolumeclaims") rt->sharding_claim_created = true;
    }
  }
  if (decided) {
    // Then the loop carries them out: directives to the agents (restarts were
    // committed above), and the history (cool-downs, budgets).
    RETURN_IF_ERROR(rt->loop->Execute(*decided));
  }
  if (rt != nullptr)
    ResyncBatches(plan.status ? *plan.status : kube::At(job, {"status"}), obs.pods, *rt);
  *requeue_after_ms = plan.requeue_after_ms;
  if (obs.spec.ok() && plan.requeue_after_ms > 0) {
    *requeue_after_ms =
        std::min(plan.requeue_after_ms, bridge::ControlIntervalMs(obs.spec->monitor));
  }
  return absl::OkStatus();
}

}  // namespace antdt::k8s
