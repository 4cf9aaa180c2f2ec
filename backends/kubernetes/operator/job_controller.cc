#include "backends/kubernetes/operator/job_controller.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "api/vocab/labels.h"
#include "api/vocab/vocab.h"
#include "backends/kubernetes/operator/job_controller_internal.h"
#include "backends/kubernetes/operator/observation.h"
#include "backends/metrics/job_metrics.h"
#include "client/sharding_client.h"
#include "common/credential.h"
#include "common/job_key.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/loop/control_loop.h"

namespace antdt::kube_operator {

namespace {

// The decisions a previous operator committed to the job's status
// (status.lastActions, the newest 20), so cool-downs, budgets and exclusions
// hold across an operator restart.
std::vector<policy::Decision> HistoryFromStatus(const Json& job, const manifest::Job& spec) {
  std::vector<policy::Decision> history;
  const Json& last = kube::At(job, {"status", "lastActions"});
  if (!last.is_array()) return history;
  for (const Json& entry : last) {
    if (std::optional<policy::Decision> d = reconciler::DecisionFromRecord(entry, spec)) {
      history.push_back(std::move(*d));
    }
  }
  return history;
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
  owned.label_selector = vocab::kLabelJob;
  io.name = "pods";
  pods_ = std::make_unique<kube::Informer>(api_, kube::PodsResource(), options_.watch_namespace,
                                           owned, io);
  io.name = "services";
  services_ = std::make_unique<kube::Informer>(api_, kube::ServicesResource(),
                                               options_.watch_namespace, owned, io);
  if (options_.node_controller != nullptr) {
    nodes_ = options_.node_controller->nodes();  // started and stopped by it
  } else {
    own_nodes_ = NewNodesInformer(api_);
    nodes_ = own_nodes_.get();
  }
  queue_ = NewControllerQueue(kController, registry);
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
  if (own_nodes_) own_nodes_->Start();
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
  if (own_nodes_) own_nodes_->Stop();
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
      rt->metrics = std::make_unique<metrics::JobMetrics>(
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
    rt->backend = std::make_unique<LoopBackend>(this, rt.get());
  }
  const std::string policy_spec = PolicySpecOf(job);
  if (rt->loop == nullptr || rt->policy_spec != policy_spec) {
    if (rt->loop != nullptr) {
      // Acted on, and said: the new policy decides from the next turn on, with
      // the decisions committed so far (cool-downs, budget) as its history.
      // (The Event is the writing phase's: RecordGatheredEvents.)
      rt->policy_changed =
          absl::StrCat("spec.stragglerPolicy or spec.monitor changed: policy ",
                       vocab::Name(spec.straggler_policy.name), " decides from now on (generation ",
                       kube::At(job, {"metadata", "generation"}).dump(), ")");
    }
    rt->policy_spec = policy_spec;
    loop::LoopOptions lo;
    lo.job = spec.name;
    lo.namespace_ = spec.namespace_;
    lo.interval_ms = jobconfig::ControlIntervalMs(spec.monitor);
    lo.policy = jobconfig::PolicySpecFor(spec, spec.straggler_policy.name, lo.interval_ms);
    lo.global_batch_size = spec.model.global_batch_size;
    lo.window_ms = spec.monitor.window_ms;
    lo.regroup_seconds = jobconfig::RegroupSeconds(spec);  // a collective job re-forms its group
    // A pod starts from the spec's batch, and a directive is lost with the
    // operator that sent it: the committed batch goes to each incarnation.
    lo.redeliver_batches = true;
    lo.mode = spec.straggler_policy.mode;
    rt->loop = std::make_unique<loop::ControlLoop>(lo, rt->backend.get(), options_.clock);
    if (rt->metrics) {
      rt->metrics->Expect(policy::PossibleDecisions(lo.policy), lo.mode == vocab::Mode::kRecommend);
    }
    // Decisions a previous operator committed to the status.
    rt->loop->Seed(HistoryFromStatus(job, spec));
  }
  return *rt;
}

absl::Status JobController::SyncForTest(const std::string& key) {
  int64_t requeue = 0;
  return Sync(key, &requeue);
}

void JobController::ConnectSharding(const Json& job, const manifest::Job& spec,
                                    const std::vector<Json>& pods, JobRuntime& rt) {
  const auto& s = options_.settings;
  // The sharding service: its running pod's address.
  std::string address;
  for (const Json& p : pods) {
    if (kube::Label(p, vocab::kLabelRole) == "sharding" && kube::PodPhase(p) == "Running" &&
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
}

bool JobController::CreateDataset(const Json& job, const manifest::Job& spec, JobRuntime& rt) {
  if (!rt.driver || rt.dataset_ready) return false;
  auto created = rt.driver->CreateDataset(jobconfig::DatasetSpecFor(spec));
  if (!created.ok()) {
    LogEvent("operator", {{"event", "create_dataset_failed"},
                          {"job", kube::KeyOf(job)},
                          {"error", created.status().ToString()}});
    return false;
  }
  rt.dataset_ready = true;
  return true;
}

void JobController::Observe(const Json& job, const manifest::Job& spec,
                            const std::vector<Json>& pods, const v1::GetJobHealthResponse* health,
                            JobRuntime& rt, reconciler::Snapshot* obs) {
  if (rt.driver && rt.dataset_ready) {
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
        if (kube::Label(p, vocab::kLabelWorkerId) == rec.worker_id() && !kube::Terminating(p)) {
          st.pod = NameOf(p);
        }
      }
      st.straggler_class = rec.class_();
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
                                        reconciler::Snapshot* obs) {
  rt.serving.clear();
  const Json& moved = kube::At(job, {"status", "serverInstances"});
  if (!moved.is_array()) return;
  for (const Json& entry : moved) {
    // The reconciler's parser, as every reader of status.serverInstances.
    const reconciler::ServerInstance si = reconciler::ServerInstanceFromJson(entry);
    const std::string& id = si.id;
    const int64_t incarnation = si.incarnation;
    const std::optional<vocab::MemberId> member = vocab::ParseMemberId(id);
    if (!member || member->role != vocab::Role::kParameterServer) continue;
    const int32_t k = member->index;
    const std::string desired = reconciler::PsPodName(spec.name, k, incarnation);
    const Json* pod = nullptr;
    bool older = false;
    for (const Json& p : pods) {
      if (kube::Label(p, vocab::kLabelRole) != "ps" ||
          kube::Label(p, vocab::kLabelReplicaIndex) != std::to_string(k) || kube::Terminating(p)) {
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
    rt.serving.push_back({id, static_cast<int32_t>(incarnation), address, "pod " + desired});
    if (stats.step() > stats.loaded_step()) obs->servers_followed.insert(id);
  }
}

loop::Ready JobController::Step(const Json& job, JobRuntime& rt, loop::Observation now) {
  const bool finished = ConditionTrue(job, "Succeeded") || ConditionTrue(job, "Failed");
  const bool acting = rt.dataset_ready && kube::At(job, {"spec", "suspend"}) != true &&
                      ConditionTrue(job, "Running") && !finished;
  return rt.loop->Step(std::move(now), /*may_decide=*/acting);
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
  const int64_t now_ms = options_.clock->NowMillis();

  reconciler::Snapshot obs;
  obs.job = job;
  obs.now_ms = now_ms;
  obs.spec = manifest::ParseJob(job.dump());
  // This job's children only: ones with its labels but another controller
  // (an earlier job of the same name, still being garbage-collected) or
  // none (left by `kubectl delete --cascade=orphan`) are not counted.
  const std::string uid = kube::StringAt(job, {"metadata", "uid"});
  const std::vector<Json> labelled_pods = pods_->List(ns, {{vocab::kLabelJob, name}});
  const std::vector<Json> labelled_services = services_->List(ns, {{vocab::kLabelJob, name}});
  obs.pods = ControlledBy(labelled_pods, uid);
  obs.services = ControlledBy(labelled_services, uid);
  std::set<std::string> foreign = Foreign(labelled_pods, obs.pods);
  foreign.merge(Foreign(labelled_services, obs.services));
  std::optional<loop::Ready> ready;
  JobRuntime* rt = nullptr;
  std::vector<reconciler::Event> gathered_events;  // recorded in the writing phase
  std::optional<v1::GetJobHealthResponse> health;
  if (obs.spec.ok()) {
    rt = &RuntimeFor(job, *obs.spec);
    if (rt->policy_changed)
      gathered_events.push_back({"Normal", "PolicyChanged", *rt->policy_changed});
    ReportOrphans(job, labelled_pods, labelled_services, rt, &gathered_events);
    ConnectSharding(job, *obs.spec, obs.pods, *rt);
    // The Monitor's view, read once for the status and the policy.
    if (monitor_ != nullptr) {
      auto view = monitor_->hub().Health(ns, obs.spec->name);
      if (view.ok()) health = std::move(*view);  // NOT_FOUND: no reports yet
    }
    if (options_.node_controller != nullptr) {
      if (health) options_.node_controller->Record(job, *health);
      // Published only under the cluster's Act; the reconciler's pass decides
      // whether this job acts on them (its own mode and avoidSlowNodes).
      if (options_.node_controller->mode() == vocab::Mode::kAct) {
        obs.avoided_nodes = options_.node_controller->Marked();
      }
    }
    const v1::GetJobHealthResponse* h = health ? &*health : nullptr;
    Observe(job, *obs.spec, obs.pods, h, *rt, &obs);
    rt->job = job;
    rt->server_pods = ServerPods(obs.pods, options_.settings.ps_port);
    // The loop's step on what this pass observed: its decisions go to the
    // reconciler, which commits them.
    // The Monitor's view (a copy) and the cluster's nodes (a list of them
    // all) only when a turn is due, as the runner and the simulator gather
    // them: not on every sync of every job.
    const bool due = rt->loop->Due(now_ms, /*windows_closed=*/-1);
    ready = Step(job, *rt,
                 LoopObservation(obs, due ? nodes_->List() : std::vector<Json>{}, due ? h : nullptr,
                                 rt->serving));
    // Recommended decisions are not the reconciler's to commit.
    if (!ready->recommend_only) obs.actions = ready->plan.decisions;
  }
  const reconciler::Changes changes = reconciler::Reconcile(obs, options_.settings);
  // The status first: it commits every decision of this pass.
  absl::StatusOr<Json> current = Commit(job, changes, rt, gathered_events);
  if (!current.ok()) return current.status();
  // Then the loop carries out every effect, its own and the reconciler's:
  // departures (the parameter servers told, shards released), directives to
  // the agents (restarts were committed above), a scale's batches,
  // re-deliveries, server moves, and the history (cool-downs, budgets).
  if (ready) {
    AddReconcilerEffects(changes, obs.pods, *rt->loop, &*ready);
    RETURN_IF_ERROR(rt->loop->Apply(*ready));
  }
  // Then the objects: a restarted worker's new pod once its earlier
  // incarnation left the parameter servers (above).
  RETURN_IF_ERROR(WriteObjects(job, *current, changes, obs.pods, foreign, rt));
  if (rt != nullptr) {
    for (const reconciler::Write& w : changes.writes) {
      if (w.resource == "podgroups") rt->pod_group_created = true;  // created, or there
      if (w.resource == "secrets") rt->token_secret_created = true;
      if (w.resource == "persistentvolumeclaims") rt->sharding_claim_created = true;
    }
  }
  *requeue_after_ms = changes.requeue_after_ms;
  if (obs.spec.ok() && changes.requeue_after_ms > 0) {
    *requeue_after_ms =
        std::min(changes.requeue_after_ms, jobconfig::ControlIntervalMs(obs.spec->monitor));
  }
  // The dataset, once its sharding service runs: the next pass, at once,
  // records it (status.datasetCreated) and creates the workers.
  if (rt != nullptr && CreateDataset(job, *obs.spec, *rt)) *requeue_after_ms = 1;
  return absl::OkStatus();
}

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

std::string PolicySpecOf(const Json& job) {
  return kube::At(job, {"spec", "stragglerPolicy"}).dump() +
         kube::At(job, {"spec", "monitor"}).dump();
}

}  // namespace antdt::kube_operator
