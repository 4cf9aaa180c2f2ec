// What the reconciler's files share: JSON access, pods as observed, a
// pass's inputs and records, and the steps each file implements. Internal:
// nothing outside backends/kubernetes/reconciler/ includes it.
#pragma once

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
#include "api/vocab/labels.h"
#include "backends/kubernetes/client/object.h"
#include "backends/kubernetes/reconciler/pod_defaults.h"
#include "common/credential.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/jobconfig/worker_env.h"

namespace antdt::reconciler {

inline constexpr char kJobApiVersion[] = "antdt.io/v1alpha1";
inline constexpr char kHostnameKey[] = "kubernetes.io/hostname";
inline constexpr char kDefaultShardingStateDir[] = "/var/lib/antdt/sharding";
inline constexpr size_t kMaxLastActions = 20;
inline constexpr size_t kMaxPendingEvents = 50;  // status.pendingEvents keeps the newest
inline constexpr int64_t kRunningRequeueMs = 2000;

// ---- JSON access that never throws on a missing or mistyped field ----

inline const Json& Get(const Json& j, const std::string& key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

inline std::string GetString(const Json& j, const std::string& key) {
  const Json& v = Get(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

inline int64_t GetInt(const Json& j, const std::string& key, int64_t fallback) {
  const Json& v = Get(j, key);
  return v.is_number() ? v.get<int64_t>() : fallback;
}

// ---- Pods as observed ----

inline std::string Name(const Json& obj) { return GetString(Get(obj, "metadata"), "name"); }
inline std::string Uid(const Json& obj) { return GetString(Get(obj, "metadata"), "uid"); }
inline bool Finished(const Json& pod) {
  const std::string phase = kube::PodPhase(pod);
  return phase == "Succeeded" || phase == "Failed";
}
inline bool IsRunning(const Json* pod) {
  return pod != nullptr && !kube::Terminating(*pod) && kube::PodPhase(*pod) == "Running";
}
inline bool IsActive(const Json* pod) {
  return pod != nullptr && !kube::Terminating(*pod) && !Finished(*pod);
}
// Running, and Ready when the kubelet reports readiness.
bool IsReady(const Json* pod);
inline std::string PodIp(const Json& pod) { return GetString(Get(pod, "status"), "podIP"); }
inline bool IsSucceeded(const Json* pod) {
  return pod != nullptr && kube::PodPhase(*pod) == "Succeeded";
}

// Why a pod failed, from its status: "exit code 1 (Error)", or the pod's reason.
std::string FailureText(const Json& pod);

// status.conditions as a pass sets them, each with the job's generation.
class Conditions {
 public:
  Conditions(const Json& old_status, int64_t generation, int64_t now_ms)
      : json_(Get(old_status, "conditions").is_array() ? Get(old_status, "conditions")
                                                       : Json::array()),
        generation_(generation),
        now_ms_(now_ms) {}

  void Set(const std::string& type, bool value, const std::string& reason,
           const std::string& message) {
    SetCondition(json_, type, value ? "True" : "False", reason, message, generation_, now_ms_);
  }
  const Json& json() const { return json_; }

 private:
  Json json_;
  int64_t generation_, now_ms_;
};

// The job's pods and services as observed, indexed once.
class Children {
 public:
  explicit Children(const Snapshot& o);

  // The pod of that name, or nullptr.
  const Json* Pod(const std::string& name) const {
    auto it = pod_by_name_.find(name);
    return it == pod_by_name_.end() ? nullptr : it->second;
  }
  // Every pod of the worker "worker-<i>", whatever its incarnation, as observed.
  const std::vector<const Json*>& PodsOfWorker(const std::string& id) const {
    static const std::vector<const Json*> kNone;
    auto it = pods_of_worker_.find(id);
    return it == pods_of_worker_.end() ? kNone : it->second;
  }
  bool HasService(const std::string& name) const { return service_names_.count(name) > 0; }
  // Every pod of parameter server k, whatever its incarnation.
  const std::vector<const Json*>& PodsOfServer(int32_t k) const {
    static const std::vector<const Json*> kNone;
    auto it = pods_of_server_.find(k);
    return it == pods_of_server_.end() ? kNone : it->second;
  }
  // The worker's desired pod: its name with the worker's incarnation, or
  // nullptr (absent, or the previous incarnation's pod still there).
  const Json* Worker(const WorkerInstance& w) const {
    const Json* pod = Pod(w.pod);
    if (pod == nullptr) return nullptr;
    return kube::Label(*pod, vocab::kLabelIncarnation) == std::to_string(w.incarnation) ? pod
                                                                                        : nullptr;
  }

 private:
  std::map<std::string, const Json*> pod_by_name_;
  std::map<std::string, std::vector<const Json*>> pods_of_worker_;
  std::map<int32_t, std::vector<const Json*>> pods_of_server_;
  std::set<std::string> service_names_;
};

// What every step of a pass over a job with a valid spec reads.
struct Pass {
  Pass(const Snapshot& observed, const Settings& settings)
      : o(observed),
        s(settings),
        spec(*observed.spec),
        job(spec.name),
        old_status(Get(observed.job, "status")),
        generation(GetInt(Get(observed.job, "metadata"), "generation", 0)),
        n(spec.workers.replicas),
        p(jobconfig::ParameterServerCount(spec)),
        now(observed.now_ms),
        avoided(reconciler::AvoidedNodes(observed)),
        children(observed) {}

  const Snapshot& o;
  const Settings& s;
  const manifest::Job& spec;
  const std::string& job;  // its name
  const Json& old_status;
  const int64_t generation;
  const int32_t n;  // workers
  const int32_t p;  // parameter servers
  const int64_t now;
  const std::vector<std::string>& avoided;  // the nodes new worker pods keep off (o's or none)
  const Children children;
};

// The durable facts of the job's status, as the pass updates them.
struct Records {
  std::vector<WorkerInstance> instances;  // worker-0 .. worker-<n-1>
  std::vector<ServerInstance> servers;    // ps-0 .. ps-<p-1>
  Json last_actions;
  int64_t failures = 0;
  bool dataset_created = false;
  bool was_succeeded = false;  // before this pass
  bool succeeded = false;
  bool failed = false;  // BackoffLimitExceeded or DeadlineExceeded, before or in this pass
  std::string failed_reason, failed_message;
  bool suspended = false;  // spec.suspend, on a job not finished
  bool resuming = false;   // Suspended was True and spec.suspend is cleared
  std::optional<int64_t> completion;
  // Scaling: the workers removed (status.removedWorkers, by index), and in
  // this pass the workers added and removed and how many there were (-1: not
  // scaled in this pass).
  std::vector<WorkerInstance> removed;
  std::vector<std::string> added, newly_removed;
  int32_t scaled_from = -1;

  bool Finished() const { return succeeded || failed; }
};

// ---- Defined in the file of their step ----

void NextIncarnation(WorkerInstance& w);

// The workers' volume and mount that hold spec.checkpoint.path, or nulls.
std::pair<const Json*, const Json*> CheckpointVolume(const Json& job, const manifest::Job& spec);

// A scale in this pass (LoadInstances found spec.workers.replicas changed):
// the global batch split evenly over the workers there are now. With
// parameter servers each remaining worker that runs is told its new batch
// and the servers their new members, before any new worker starts; a
// collective job's running ranks begin their next incarnation (their
// WORLD_SIZE changed). Neither is a restart. A suspended job only records it.
void Rescale(const Pass& pass, Records& r, Changes& changes);

// A suspended job holds no pods: each unfinished worker's pod goes (the
// worker resumes as its next incarnation: a new process, whose sharding
// leases and journal pick up where the last one committed), the parameter
// servers' go, and the sharding service's unless its state would go with it
// (ephemeral storage).
void PlanSuspend(const Pass& pass, Records& r, Changes& changes);

// The removed workers: their pods deleted, and once gone their shards
// released (their incarnation fenced on the sharding service) and the
// parameter servers told again that they are no members (the same Resize as
// the scale's: harmless twice, and a second chance when an operator stopped
// before the first).
void PlanRemoved(const Pass& pass, Records& r, Changes& changes);

// A running job: the services and the sharding pod, then, once the sharding
// service holds the dataset, the parameter servers and the workers.
void PlanChildren(const Pass& pass, const Records& r, Changes& changes);

Json NewStatus(const Pass& pass, const Records& r);

// The changes for a spec that does not parse: Failed=True InvalidSpec, nothing
// else touched.
Changes InvalidSpecPlan(const Snapshot& o, const Json& old_status, int64_t generation);

// Events committed with the status: those a pass before left pending (its
// operator stopped before writing them), then this pass's.
void CommitEvents(const Pass& pass, Changes& changes, Json& status);

// ---- Small helpers every file uses ----

std::string ToLower(std::string s);

// The observed pods in name order (deletions are written in a stable order).
std::vector<const Json*> ByName(const std::vector<Json>& pods);

inline void AddWrite(Changes& changes, Write w) { changes.writes.push_back(std::move(w)); }

Write Create(const std::string& resource, Json object, std::string reason);

Write Delete(const Json& pod, int64_t grace, std::string reason);

// The parameter servers' new members (kResizeParameterServers).
Write Resize(int32_t workers, std::vector<std::string> removed, std::vector<std::string> added,
             std::string reason);

std::string Plural(int64_t n, const std::string& one, const std::string& many);

// Everything this job keeps under spec.checkpoint.path (the sharding
// service's state, journals, loss logs, model checkpoints) lives in a folder
// of its own, named by the job's UID: a job deleted and applied again under
// the same name (a new UID) starts fresh rather than finding the old run's
// finished state, and two jobs never share one. "" without a path.
std::string JobStateDir(const manifest::Job& spec);

bool ShardingStateIsDurable(const Json& job, const manifest::Job& spec);

inline bool ConditionTrue(const Json& status, const std::string& type) {
  const Json* c = FindCondition(status, type);
  return c != nullptr && GetString(*c, "status") == "True";
}

// A finished job: stop what still runs (the servers never exit by themselves).
void PlanCleanup(const Pass& pass, const Records& r, Changes& changes);

// An ADJUST_BS deserves an Event when it is about a straggler, not when it only
// keeps the global batch constant around one.
bool NamesStraggler(const policy::Decision& d, const std::vector<Straggler>& stragglers);

// ReplicaFailure (set True by the controller when the API server refuses a
// create) turns False once a pass finds every child it needs in place.
void ClearReplicaFailure(const Pass& pass, const Changes& changes, Json& status);

}  // namespace antdt::reconciler
