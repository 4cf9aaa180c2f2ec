#include "backends/kubernetes/reconciler/reconciler.h"

// The status: its small helpers, the conditions over a view of the
// children (step 5), the new status (step 6), the Events it commits.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "backends/kubernetes/client/object.h"
#include "backends/kubernetes/reconciler/pod_defaults.h"
#include "backends/kubernetes/reconciler/reconciler_internal.h"
#include "common/credential.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/jobconfig/worker_env.h"

namespace antdt::reconciler {

// ---- Status ----

double Round2(double v) { return std::round(v * 100.0) / 100.0; }

// The job's state in one word, for `kubectl get adt` (the STATE column), as
// Kubeflow's jobs show it: the first of Failed, Succeeded, Suspended, Running
// whose condition is True, else Created.
std::string JobState(const Json& status) {
  for (const char* state : {"Failed", "Succeeded", "Suspended", "Running"}) {
    if (ConditionTrue(status, state)) return state;
  }
  return "Created";
}

Json Counts(int64_t desired, int64_t active, int64_t ready, int64_t succeeded, int64_t failed,
            int64_t restarts) {
  return {{"desired", desired},
          {"active", active},
          {"ready", ready},
          {"succeeded", succeeded},
          {"failed", failed},
          {"restarts", restarts},
          {"summary", absl::StrCat(ready, "/", desired)}};
}

Json ProgressJson(int64_t committed, int64_t total, int64_t epoch, int64_t epochs, double eta,
                  bool complete) {
  int64_t percent = total > 0 ? std::clamp<int64_t>(committed * 100 / total, 0, 100) : 0;
  if (complete) {
    percent = 100;
    eta = 0;
  }
  Json p = {{"recordsCommitted", committed},
            {"recordsTotal", total},
            {"epoch", epoch},
            {"epochs", epochs},
            {"percent", percent}};
  if (eta >= 0) p["etaSeconds"] = static_cast<int64_t>(std::llround(eta));
  return p;
}

// The changes for a spec that does not parse: Failed=True InvalidSpec, nothing
// else touched.
Changes InvalidSpecPlan(const Snapshot& o, const Json& old_status, int64_t generation) {
  Changes changes;
  Json status = old_status.is_object() ? old_status : Json::object();
  const std::string message(o.spec.status().message());
  const Json* failed = FindCondition(status, "Failed");
  const bool already = failed != nullptr && GetString(*failed, "reason") == "InvalidSpec" &&
                       GetString(*failed, "message") == message &&
                       GetString(*failed, "status") == "True";
  Conditions conditions(status, generation, o.now_ms);
  if (!ConditionTrue(status, "Created")) {
    conditions.Set("Created", false, "InvalidSpec", "nothing is created for an invalid spec");
  }
  conditions.Set("Running", false, "InvalidSpec", "the spec is invalid");
  conditions.Set("StragglersDetected", false, "NoStragglers", "no stragglers");
  conditions.Set("Mitigating", false, "NoMitigation", "no action in progress");
  conditions.Set("Succeeded", false, "InvalidSpec", "the spec is invalid");
  conditions.Set("Failed", true, "InvalidSpec", message);
  status["conditions"] = conditions.json();
  status["state"] = JobState(status);
  status["observedGeneration"] = generation;
  if (!status.contains("startTime")) status["startTime"] = kube::FormatTime(o.now_ms);
  if (!already) changes.events.push_back({"Warning", "InvalidSpec", message});
  if (status != old_status) changes.status = std::move(status);
  return changes;
}

const Json* FindCondition(const Json& status, const std::string& type) {
  const Json& conditions = Get(status, "conditions");
  if (!conditions.is_array()) return nullptr;
  for (const Json& c : conditions) {
    if (GetString(c, "type") == type) return &c;
  }
  return nullptr;
}

bool SetCondition(Json& conditions, const std::string& type, const std::string& status,
                  const std::string& reason, const std::string& message,
                  int64_t observed_generation, int64_t now_ms) {
  if (!conditions.is_array()) conditions = Json::array();
  for (Json& c : conditions) {
    if (GetString(c, "type") != type) continue;
    const Json before = c;
    if (GetString(c, "status") != status || GetString(c, "lastTransitionTime").empty()) {
      c["lastTransitionTime"] = kube::FormatTime(now_ms);
    }
    c["status"] = status;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = observed_generation;
    return c != before;
  }
  conditions.push_back({{"type", type},
                        {"status", status},
                        {"reason", reason},
                        {"message", message},
                        {"observedGeneration", observed_generation},
                        {"lastTransitionTime", kube::FormatTime(now_ms)}});
  return true;
}

// ---- Step 5: the conditions, over a view of the children ----

// How many of a group of pods (nullptr: not created) stand in each state.
struct Tally {
  int32_t exist = 0, active = 0, running = 0, ready = 0, succeeded = 0, failed = 0;
  int64_t container_restarts = 0;
};

Tally Count(const std::vector<const Json*>& pods) {
  Tally t;
  for (const Json* pod : pods) {
    t.active += IsActive(pod) ? 1 : 0;
    t.running += IsRunning(pod) ? 1 : 0;
    t.ready += IsReady(pod) ? 1 : 0;
    t.succeeded += IsSucceeded(pod) ? 1 : 0;
    if (pod == nullptr) continue;
    ++t.exist;
    t.failed += kube::PodPhase(*pod) == "Failed" ? 1 : 0;
    const Json& statuses = Get(Get(*pod, "status"), "containerStatuses");
    if (!statuses.is_array()) continue;
    for (const Json& c : statuses) t.container_restarts += GetInt(c, "restartCount", 0);
  }
  return t;
}

// The children the status speaks of, once the pass chose each worker's
// desired pod; nullptr where a pod does not exist.
struct View {
  bool services_exist = false;
  const Json* sharding = nullptr;
  std::vector<const Json*> servers;  // parameter server k at k
  std::vector<const Json*> workers;  // each worker's desired pod, as Records::instances
  Tally server_tally, worker_tally;
};

View ViewChildren(const Pass& pass, const Records& r) {
  View v;
  v.services_exist = pass.children.HasService(ShardingName(pass.job)) &&
                     (pass.p == 0 || pass.children.HasService(PsServiceName(pass.job))) &&
                     pass.children.HasService(WorkersServiceName(pass.job));
  v.sharding = pass.children.Pod(ShardingName(pass.job));
  for (const ServerInstance& si : r.servers) {
    v.servers.push_back(pass.children.Pod(PsPodName(pass.job, si.index, si.incarnation)));
  }
  for (const WorkerInstance& w : r.instances) v.workers.push_back(pass.children.Worker(w));
  v.server_tally = Count(v.servers);
  v.worker_tally = Count(v.workers);
  return v;
}

// A pod's phase for a message: `absent` when there is no pod.
std::string PhaseText(const Json* pod, const std::string& absent) {
  if (pod == nullptr) return absent;
  const std::string phase = kube::PodPhase(*pod);
  return phase.empty() ? "Pending" : phase;
}

// One function per condition, as reconciler.h defines them. NewStatus sets them
// in a fixed order: a condition seen for the first time is appended.
void SetCreated(const Pass& pass, const Records& r, const View& v, Conditions& c) {
  const Tally& servers = v.server_tally;
  const Tally& workers = v.worker_tally;
  const bool all_exist = v.services_exist && v.sharding != nullptr && servers.exist == pass.p &&
                         workers.exist == pass.n;
  if (ConditionTrue(pass.old_status, "Created") || all_exist) {
    c.Set("Created", true, "AllChildrenCreated",
          absl::StrCat(
              "created the sharding service",
              pass.p > 0 ? ", " + Plural(pass.p, "parameter server", "parameter servers") : "",
              " and ", Plural(pass.n, "worker", "workers")));
  } else if (!r.dataset_created) {
    c.Set("Created", false, "WaitingForDataset",
          "the parameter servers and workers are created once the sharding service holds the "
          "dataset");
  } else {
    c.Set("Created", false, "CreatingChildren",
          absl::StrCat(
              pass.p > 0 ? absl::StrCat(servers.exist, "/", pass.p, " parameter servers and ") : "",
              workers.exist, "/", pass.n, " workers created"));
  }
}

void SetRunning(const Pass& pass, const Records& r, const View& v, Conditions& c) {
  if (r.Finished()) {
    c.Set("Running", false, r.succeeded ? "JobSucceeded" : "JobFailed", "the job finished");
    return;
  }
  if (r.suspended) {
    c.Set("Running", false, "JobSuspended", "the job is suspended (spec.suspend)");
    return;
  }
  const Tally& workers = v.worker_tally;
  const int32_t unfinished = pass.n - workers.succeeded;
  const bool sharding_running = IsRunning(v.sharding);
  const std::string workers_text = absl::StrCat(
      workers.running, "/", unfinished, " workers running",
      workers.succeeded > 0 ? absl::StrCat(" (", workers.succeeded, " succeeded)") : "");
  if (sharding_running && r.dataset_created && v.server_tally.running == pass.p &&
      workers.running == unfinished) {
    c.Set("Running", true, "AllPodsRunning", workers_text);
  } else if (!r.dataset_created) {
    c.Set("Running", false, "WaitingForDataset",
          absl::StrCat("waiting for the sharding service (pod ", ShardingName(pass.job), ": ",
                       PhaseText(v.sharding, "not created"), ") to hold the dataset"));
  } else {
    c.Set("Running", false, "PodsNotRunning",
          absl::StrCat(workers_text,
                       pass.p > 0 ? absl::StrCat(", ", v.server_tally.running, "/", pass.p,
                                                 " parameter servers running")
                                  : "",
                       sharding_running ? "" : ", the sharding service is not running"));
  }
}

// status.stragglers, and the stragglers (not the leaders) the condition names;
// none once the job finished.
struct StragglerReport {
  Json list = Json::array();
  std::vector<std::string> named;
};

StragglerReport ReportStragglers(const Snapshot& o, bool finished) {
  StragglerReport report;
  if (finished) return report;
  for (const Straggler& st : o.stragglers) {
    report.list.push_back({{"worker", st.worker},
                           {"node", st.node},
                           {"pod", st.pod},
                           {"class", vocab::KubernetesName(st.straggler_class)},
                           {"compensated", st.compensated},
                           {"cause", st.cause},
                           {"score", Round2(st.score)},
                           {"since", kube::FormatTime(st.since_ms)}});
    if (vocab::IsStraggler(st.straggler_class)) {
      report.named.push_back(absl::StrCat(st.worker, " on ", st.node.empty() ? "?" : st.node, " (",
                                          vocab::KubernetesName(st.straggler_class),
                                          st.cause.empty() ? "" : ": " + st.cause, ")"));
    }
  }
  return report;
}

void SetStragglersDetected(const StragglerReport& report, Conditions& c) {
  if (report.named.empty()) {
    c.Set("StragglersDetected", false, "NoStragglers", "no stragglers");
  } else {
    c.Set("StragglersDetected", true, "StragglersFound", absl::StrJoin(report.named, "; "));
  }
}

void SetMitigating(const Pass& pass, const Records& r, const View& v, Conditions& c) {
  if (r.Finished()) {
    c.Set("Mitigating", false, "JobFinished", "the job finished");
    return;
  }
  std::vector<std::string> restarting, adjusted;
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const WorkerInstance& w = r.instances[i];
    const Json* pod = v.workers[i];
    if (w.incarnation > 0 && !w.resumed && !r.suspended && !IsRunning(pod) && !IsSucceeded(pod)) {
      restarting.push_back(
          absl::StrCat(w.id, " (pod ", w.pod, ": ", PhaseText(pod, "not created yet"), ")"));
    }
    if (w.local_batch_size != jobconfig::InitialLocalBatch(pass.spec, w.index)) {
      adjusted.push_back(absl::StrCat(w.id, "=", w.local_batch_size));
    }
  }
  if (!restarting.empty()) {
    c.Set("Mitigating", true, "RestartingWorker",
          absl::StrCat("restarting ", absl::StrJoin(restarting, ", ")));
  } else if (!adjusted.empty()) {
    c.Set("Mitigating", true, "BatchSizesAdjusted",
          absl::StrCat("local batch sizes adjusted: ", absl::StrJoin(adjusted, ", ")));
  } else {
    c.Set("Mitigating", false, "NoMitigation", "no action in progress");
  }
}

void SetSucceeded(const Pass& pass, const Records& r, const View& v, Conditions& c) {
  if (r.was_succeeded) {
    const Json* old = FindCondition(pass.old_status, "Succeeded");
    c.Set("Succeeded", true, GetString(*old, "reason"), GetString(*old, "message"));
  } else if (r.succeeded) {
    c.Set("Succeeded", true, "AllWorkersSucceeded",
          absl::StrCat(pass.n, "/", pass.n, " workers succeeded"));
  } else {
    c.Set("Succeeded", false, r.failed ? "JobFailed" : "InProgress",
          absl::StrCat(v.worker_tally.succeeded, "/", pass.n, " workers succeeded"));
  }
}

void SetFailed(const Pass& pass, const Records& r, Conditions& c) {
  if (r.failed) {
    c.Set("Failed", true, r.failed_reason.empty() ? "BackoffLimitExceeded" : r.failed_reason,
          r.failed_message);
  } else {
    c.Set("Failed", false, "NoFailures",
          absl::StrCat(Plural(r.failures, "worker failure", "worker failures"), " (backoffLimit ",
                       pass.spec.run_policy.backoff_limit, ")"));
  }
}

// Suspended: only on a job that was ever suspended (as Kubernetes Jobs).
void SetSuspended(const Pass& pass, const Records& r, const View& v, Conditions& c) {
  if (r.suspended) {
    const bool kept = v.sharding != nullptr && !ShardingStateIsDurable(pass.o.job, pass.spec);
    c.Set("Suspended", true, "JobSuspended",
          absl::StrCat("spec.suspend is set: the job holds no pods",
                       kept ? " but the sharding service's, whose state would be lost "
                              "(spec.shardingService.storage.ephemeral)"
                            : "",
                       "; it resumes from its sharding state once cleared"));
  } else if (FindCondition(pass.old_status, "Suspended") != nullptr) {
    c.Set("Suspended", false, "JobResumed",
          "spec.suspend was cleared: the unfinished workers resumed as their next incarnation");
  }
}

// ---- Step 6: the new status ----

// status.progress: the sharding service's, else the last known, else none yet.
Json ProgressStatus(const Pass& pass, bool succeeded) {
  const manifest::Job& spec = pass.spec;
  if (pass.o.progress) {
    const Progress& now = *pass.o.progress;
    return ProgressJson(now.records_committed, now.records_total, now.epoch, now.epochs,
                        now.eta_seconds, succeeded);
  }
  const Json& old = Get(pass.old_status, "progress");
  if (old.is_object()) {
    return ProgressJson(GetInt(old, "recordsCommitted", 0), GetInt(old, "recordsTotal", 0),
                        GetInt(old, "epoch", 0), GetInt(old, "epochs", spec.dataset.epochs),
                        static_cast<double>(GetInt(old, "etaSeconds", -1)), succeeded);
  }
  return ProgressJson(0, spec.dataset.records * spec.dataset.epochs, 0, spec.dataset.epochs, -1,
                      succeeded);
}

Json NewStatus(const Pass& pass, const Records& r) {
  const View v = ViewChildren(pass, r);
  const StragglerReport stragglers = ReportStragglers(pass.o, r.Finished());
  Conditions conditions(pass.old_status, pass.generation, pass.now);
  SetCreated(pass, r, v, conditions);
  SetRunning(pass, r, v, conditions);
  SetStragglersDetected(stragglers, conditions);
  SetMitigating(pass, r, v, conditions);
  SetSucceeded(pass, r, v, conditions);
  SetFailed(pass, r, conditions);
  SetSuspended(pass, r, v, conditions);

  int64_t restarts = 0;
  Json instances = Json::array();
  for (const WorkerInstance& w : r.instances) {
    restarts += w.incarnation - w.resumes;
    instances.push_back(ToJson(w));
  }
  Json removed = Json::array();
  for (const WorkerInstance& w : r.removed) {
    restarts += w.incarnation - w.resumes;
    removed.push_back(ToJson(w));
  }
  const Tally& wt = v.worker_tally;
  const Tally& pt = v.server_tally;
  // A job created suspended has not started; a resumed one starts again.
  const std::string start = GetString(pass.old_status, "startTime");
  const bool starting = (start.empty() || r.resuming) && !r.suspended;
  Json status = {
      {"observedGeneration", pass.generation},
      {"conditions", conditions.json()},
      {"workers", Counts(pass.n, wt.active, wt.ready, wt.succeeded, r.failures, restarts)},
      {"parameterServers",
       Counts(pass.p, pt.active, pt.ready, pt.succeeded, pt.failed, pt.container_restarts)},
      {"progress", ProgressStatus(pass, r.succeeded)},
      {"stragglerCount", static_cast<int64_t>(stragglers.named.size())},
      {"stragglers", stragglers.list},
      {"lastActions", r.last_actions},
      {"workerInstances", instances},
      {"datasetCreated", r.dataset_created}};
  if (starting) {
    status["startTime"] = kube::FormatTime(pass.now);
  } else if (!start.empty()) {
    status["startTime"] = start;
  }
  if (r.completion) status["completionTime"] = kube::FormatTime(*r.completion);
  if (!removed.empty()) status["removedWorkers"] = std::move(removed);
  Json servers = Json::array();
  for (const ServerInstance& si : r.servers) {
    if (si.incarnation > 0) servers.push_back(ToJson(si));
  }
  if (!servers.empty()) status["serverInstances"] = std::move(servers);
  status["state"] = JobState(status);
  return status;
}

// Events committed with the status: those a pass before left pending (its
// operator stopped before writing them), then this pass's.
void CommitEvents(const Pass& pass, Changes& changes, Json& status) {
  std::vector<Event> events;
  const Json& pending = Get(pass.old_status, "pendingEvents");
  if (pending.is_array()) {
    for (const Json& e : pending) {
      events.push_back({GetString(e, "type"), GetString(e, "reason"), GetString(e, "message")});
    }
  }
  events.insert(events.end(), changes.events.begin(), changes.events.end());
  if (events.size() > kMaxPendingEvents) {
    events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(kMaxPendingEvents));
  }
  changes.events = std::move(events);
  if (changes.events.empty()) return;
  Json list = Json::array();
  for (const Event& e : changes.events) {
    list.push_back({{"type", e.type}, {"reason", e.reason}, {"message", e.message}});
  }
  status["pendingEvents"] = std::move(list);
}

}  // namespace antdt::reconciler
