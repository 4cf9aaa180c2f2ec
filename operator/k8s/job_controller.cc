#include "operator/k8s/job_controller.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "client/sharding_client.h"
#include "common/log.h"
#include "common/status.h"
#include "operator/bridge/bridge.h"

namespace antdt::k8s {
namespace {

using kube::Json;

constexpr char kController[] = "antdtjob";

std::string Str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const Json& Field(const Json& j, std::initializer_list<const char*> path) {
  static const Json kNull;
  const Json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object()) return kNull;
    auto it = cur->find(k);
    if (it == cur->end()) return kNull;
    cur = &*it;
  }
  return *cur;
}

std::string Label(const Json& obj, const char* key) {
  const Json& v = Field(obj, {"metadata", "labels", key});
  return v.is_string() ? v.get<std::string>() : std::string();
}

bool Terminating(const Json& pod) {
  return !Field(pod, {"metadata", "deletionTimestamp"}).is_null();
}

std::string Phase(const Json& pod) {
  const Json& v = Field(pod, {"status", "phase"});
  return v.is_string() ? v.get<std::string>() : std::string();
}

std::string PodIp(const Json& pod) {
  const Json& v = Field(pod, {"status", "podIP"});
  return v.is_string() ? v.get<std::string>() : std::string();
}

std::string NodeOf(const Json& pod) {
  const Json& v = Field(pod, {"spec", "nodeName"});
  return v.is_string() ? v.get<std::string>() : std::string();
}

int64_t ParseTimeMs(const std::string& rfc3339) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err)) return 0;
  return absl::ToUnixMillis(t);
}

std::string ClassName(v1::StragglerClass c) {
  switch (c) {
    case v1::LEADER:
      return "Leader";
    case v1::DETERMINISTIC:
      return "Deterministic";
    case v1::TRANSIENT:
      return "Transient";
    case v1::PERSISTENT:
      return "Persistent";
    default:
      return "";
  }
}

std::string CauseName(v1::Cause c) {
  std::string name = v1::Cause_Name(c);
  return name.empty() || c == v1::CAUSE_UNSPECIFIED ? "UNKNOWN" : name;
}

}  // namespace

struct JobController::JobRuntime {
  std::string uid;
  std::string sharding_address;
  std::unique_ptr<client::ShardingClient> driver;
  bool dataset_ready = false;
  std::optional<reconciler::Progress> progress;
  std::vector<controller::Decision> history;
  bool history_seeded = false;
  int64_t next_control_ms = 0;
  int64_t directive_version = 0;
};

JobController::JobController(kube::Api* api, monitor::MonitorServiceImpl* monitor,
                             JobControllerOptions options, prometheus::Registry* registry)
    : api_(api), monitor_(monitor), options_(std::move(options)) {
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
}

JobController::~JobController() { Stop(); }

void JobController::EnqueueOwner(const Json& child) {
  const Json& refs = Field(child, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return;
  for (const Json& ref : refs) {
    if (Str(ref, "kind") == "AntDTJob" && ref.value("controller", false)) {
      queue_->Add(Str(child["metadata"], "namespace") + "/" + Str(ref, "name"));
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

JobController::JobRuntime& JobController::RuntimeFor(const Json& job) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = kube::KeyOf(job);
  const std::string uid = Str(job["metadata"], "uid");
  auto& rt = runtimes_[key];
  if (!rt || rt->uid != uid) {
    rt = std::make_unique<JobRuntime>();
    rt->uid = uid;
  }
  return *rt;
}

absl::Status JobController::SyncForTest(const std::string& key) {
  int64_t requeue = 0;
  return Sync(key, &requeue);
}

void JobController::Observe(const Json& job, const manifest::Job& spec,
                            const std::vector<Json>& pods, JobRuntime& rt,
                            reconciler::Observed* obs) {
  const auto& s = options_.settings;
  // The sharding service: its running pod's address.
  std::string address;
  for (const Json& p : pods) {
    if (Label(p, "antdt.io/role") == "sharding" && Phase(p) == "Running" && !Terminating(p) &&
        !PodIp(p).empty()) {
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
      rt.driver =
          std::make_unique<client::ShardingClient>(client::CreateShardingChannel(address), co);
    }
  }
  if (Field(job, {"status", "datasetCreated"}) == Json(true)) rt.dataset_ready = true;
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
      }
    }
  }
  obs->progress = rt.progress;
  obs->dataset_ready = rt.dataset_ready;

  // The Monitor's view of the job's members.
  v1::GetJobHealthRequest req;
  req.set_job(spec.name);
  v1::GetJobHealthResponse health;
  grpc::ServerContext ctx;
  if (monitor_ != nullptr && monitor_->GetJobHealth(&ctx, &req, &health).ok()) {
    for (const v1::WorkerHealth& h : health.workers()) {
      const std::string klass = ClassName(h.class_());
      if (klass.empty() || klass == "Leader") continue;
      reconciler::Straggler st;
      st.worker = h.worker_id();
      st.node = h.node();
      for (const Json& p : pods) {
        if (Label(p, "antdt.io/worker-id") == h.worker_id() && !Terminating(p)) {
          st.pod = Str(p["metadata"], "name");
        }
      }
      st.klass = klass;
      st.cause = CauseName(h.cause());
      st.score = h.score();
      st.since_ms = h.since_unix_ms();
      obs->stragglers.push_back(st);
    }
  }
}

std::vector<reconciler::Action> JobController::Decide(const Json& job, const manifest::Job& spec,
                                                      const std::vector<Json>& pods, JobRuntime& rt,
                                                      int64_t now_ms,
                                                      std::vector<controller::Decision>* taken) {
  std::vector<reconciler::Action> actions;
  if (monitor_ == nullptr || !rt.dataset_ready) return actions;
  const Json& conditions = Field(job, {"status", "conditions"});
  bool running = false;
  bool finished = false;
  if (conditions.is_array()) {
    for (const Json& c : conditions) {
      const bool is_true = Str(c, "status") == "True";
      if (Str(c, "type") == "Running" && is_true) running = true;
      if ((Str(c, "type") == "Succeeded" || Str(c, "type") == "Failed") && is_true) finished = true;
    }
  }
  if (!running || finished || now_ms < rt.next_control_ms) return actions;
  const int64_t interval = bridge::ControlIntervalMs(spec.monitor);
  rt.next_control_ms = now_ms + interval;

  // Decisions already taken, from the job's status after an operator restart.
  if (!rt.history_seeded) {
    rt.history_seeded = true;
    const Json& last = Field(job, {"status", "lastActions"});
    if (last.is_array()) {
      for (const Json& a : last) {
        if (Str(a, "action") != "KILL_RESTART") continue;
        controller::Decision d;
        d.at_ms = ParseTimeMs(Str(a, "time"));
        d.action = controller::KillRestart{Str(a, "worker"), Str(a, "fromNode"), Str(a, "toNode"),
                                           d.at_ms + spec.straggler_policy.cooldown_ms};
        d.subject = Str(a, "worker");
        d.rule = Str(a, "rule");
        d.policy = spec.straggler_policy.name;
        rt.history.push_back(d);
      }
    }
  }

  controller::Observed obs;
  obs.now_ms = now_ms;
  obs.job = spec.name;
  v1::GetJobHealthRequest req;
  req.set_job(spec.name);
  grpc::ServerContext ctx;
  if (!monitor_->GetJobHealth(&ctx, &req, &obs.health).ok()) return actions;
  std::map<std::string, bool> busy;
  const Json& instances = Field(job, {"status", "workerInstances"});
  if (!instances.is_array()) return actions;
  for (const Json& inst : instances) {
    controller::WorkerState ws;
    ws.id = Str(inst, "id");
    ws.role = "worker";
    ws.local_batch_size = inst.value("localBatchSize", int64_t{0});
    ws.incarnation = inst.value("incarnation", 0);
    ws.alive = false;
    const std::string desired = Str(inst, "pod");
    for (const Json& p : pods) {
      if (Label(p, "antdt.io/worker-id") != ws.id || Terminating(p)) continue;
      if (Str(p["metadata"], "name") == desired && Phase(p) == "Running") {
        ws.alive = true;
        ws.node = NodeOf(p);
      }
      if (!NodeOf(p).empty() && (Phase(p) == "Running" || Phase(p) == "Pending")) {
        busy[NodeOf(p)] = true;
      }
    }
    for (const controller::Decision& d : rt.history) {
      if (std::holds_alternative<controller::KillRestart>(d.action) && d.subject == ws.id) {
        ws.last_restart_ms = std::max(ws.last_restart_ms, d.at_ms);
      }
    }
    obs.workers.push_back(ws);
  }
  for (const Json& n : nodes_->List()) {
    controller::NodeState ns;
    ns.name = Str(n["metadata"], "name");
    ns.spare = !busy[ns.name] && Field(n, {"spec", "unschedulable"}) != Json(true);
    obs.nodes.push_back(ns);
  }
  obs.global_batch_size = spec.model.global_batch_size;
  obs.remaining_seconds = rt.progress ? rt.progress->eta_seconds : -1;
  // A restart costs a pod start, a parameter pull, and the Monitor's windows
  // to see the worker again.
  obs.restart_cost_seconds = 2.0 + static_cast<double>(spec.monitor.window_ms) / 1000.0;
  obs.history = rt.history;
  const controller::PolicySpec policy =
      bridge::PolicySpecFor(spec, spec.straggler_policy.name, interval);
  const controller::Plan plan = controller::Decide(obs, policy);
  for (const controller::Decision& d : plan.decisions) {
    reconciler::Action a;
    a.rule = d.rule;
    a.reason = d.reason;
    a.evidence = controller::Describe(d);
    a.at_ms = d.at_ms;
    if (const auto* k = std::get_if<controller::KillRestart>(&d.action)) {
      a.kind = "KILL_RESTART";
      a.worker = k->worker;
      a.from_node = k->from_node;
      a.to_node = k->to_node;
    } else if (const auto* b = std::get_if<controller::AdjustBatchSize>(&d.action)) {
      a.kind = "ADJUST_BS";
      a.worker = b->worker;
      a.local_batch_size = static_cast<int32_t>(b->local_batch_size);
      if (d.subject.empty()) a.evidence.clear();  // only keeps the global batch
    } else {
      continue;  // backup workers: a baseline the operator does not run
    }
    actions.push_back(a);
    taken->push_back(d);
  }
  return actions;
}

void JobController::LeaveParameterServers(const std::string& worker,
                                          const std::vector<Json>& pods) {
  for (const Json& p : pods) {
    if (Label(p, "antdt.io/role") != "ps" || PodIp(p).empty() || Terminating(p)) continue;
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(absl::StrCat(PodIp(p), ":", options_.settings.ps_port),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options_.rpc_timeout_ms));
    v1::LeaveRequest req;
    req.set_worker_id(worker);
    v1::LeaveResponse resp;
    (void)stub->Leave(&ctx, req, &resp);
  }
}

absl::Status JobController::Apply(const Json& job, const manifest::Job* spec,
                                  const reconciler::Plan& plan,
                                  const std::vector<reconciler::Action>& actions,
                                  const std::vector<Json>& pods) {
  const std::string ns = Str(job["metadata"], "namespace");
  const std::string key = kube::KeyOf(job);
  if (plan.status) {
    Json updated = job;
    updated["status"] = *plan.status;
    auto r = api_->UpdateStatus(kube::AntDTJobsResource(), ns, updated);
    if (!r.ok()) return r.status();  // a conflict: requeued, nothing else done
  }
  for (const reconciler::Write& w : plan.writes) {
    const kube::ResourceRef& ref =
        w.resource == "services" ? kube::ServicesResource() : kube::PodsResource();
    switch (w.kind) {
      case reconciler::Write::Kind::kCreate: {
        auto r = api_->Create(ref, ns, w.object);
        if (!r.ok() && !kube::IsAlreadyExists(r.status())) return r.status();
        if (r.ok()) {
          LogEvent("operator", {{"event", "created"},
                                {"job", key},
                                {"resource", w.resource},
                                {"name", Str(w.object["metadata"], "name")},
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
        LeaveParameterServers(w.worker, pods);
        break;
      case reconciler::Write::Kind::kDeleteJob: {
        kube::DeleteOptions d;
        d.propagation_policy = "Background";
        d.precondition_uid = Str(job["metadata"], "uid");
        absl::Status s =
            api_->Delete(kube::AntDTJobsResource(), ns, Str(job["metadata"], "name"), d);
        if (!s.ok() && !kube::IsNotFound(s)) return s;
        break;
      }
    }
  }
  // Batch sizes reach the workers through their node's agent.
  for (const reconciler::Action& a : actions) {
    if (actions_total_ != nullptr) actions_total_->Add({{"action", a.kind}}).Increment();
    if (a.kind != "ADJUST_BS" || spec == nullptr) continue;
    std::string node;
    for (const Json& p : pods) {
      if (Label(p, "antdt.io/worker-id") == a.worker && !Terminating(p) && Phase(p) == "Running") {
        node = NodeOf(p);
      }
    }
    if (node.empty()) continue;
    v1::Directive directive;
    directive.set_job(spec->name);
    directive.set_worker_id(a.worker);
    directive.set_version(RealClock::Get().NowMillis());
    directive.mutable_adjust_batch()->set_local_batch_size(a.local_batch_size);
    directive.mutable_adjust_batch()->set_accumulation_steps(1);
    directive.set_reason(a.reason);
    if (!monitor_->SendDirective(node, directive)) {
      LogEvent("operator", {{"event", "directive_not_delivered"},
                            {"job", key},
                            {"worker", a.worker},
                            {"node", node}});
    }
  }
  for (const reconciler::Event& e : plan.events)
    recorder_->Record(job, e.type, e.reason, e.message);
  return absl::OkStatus();
}

absl::Status JobController::Sync(const std::string& key, int64_t* requeue_after_ms) {
  std::optional<Json> found = jobs_->Get(key);
  if (!found || !Field(*found, {"metadata", "deletionTimestamp"}).is_null()) {
    std::lock_guard<std::mutex> lock(mu_);
    runtimes_.erase(key);  // its children go with it (owner references)
    return absl::OkStatus();
  }
  const Json& job = *found;
  const std::string ns = Str(job["metadata"], "namespace");
  const std::string name = Str(job["metadata"], "name");
  const int64_t now_ms = RealClock::Get().NowMillis();

  reconciler::Observed obs;
  obs.job = job;
  obs.now_ms = now_ms;
  obs.spec = manifest::ParseJob(job.dump());
  obs.pods = pods_->List(ns, {{"antdt.io/job", name}});
  obs.services = services_->List(ns, {{"antdt.io/job", name}});
  std::vector<reconciler::Action> actions;
  std::vector<controller::Decision> taken;
  JobRuntime& rt = RuntimeFor(job);
  if (obs.spec.ok()) {
    Observe(job, *obs.spec, obs.pods, rt, &obs);
    actions = Decide(job, *obs.spec, obs.pods, rt, now_ms, &taken);
    obs.actions = actions;
  }
  const reconciler::Plan plan = reconciler::Reconcile(obs, options_.settings);
  RETURN_IF_ERROR(Apply(job, obs.spec.ok() ? &*obs.spec : nullptr, plan, actions, obs.pods));
  // Decisions count (cool-downs, budgets) once their status write landed.
  rt.history.insert(rt.history.end(), taken.begin(), taken.end());
  *requeue_after_ms = plan.requeue_after_ms;
  if (obs.spec.ok() && plan.requeue_after_ms > 0) {
    *requeue_after_ms =
        std::min(plan.requeue_after_ms, bridge::ControlIntervalMs(obs.spec->monitor));
  }
  return absl::OkStatus();
}

}  // namespace antdt::k8s
