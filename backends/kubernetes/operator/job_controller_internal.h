// What the job controller's files share: the per-job runtime, the loop's
// backend over one sync's observation, and small helpers over objects.
// Internal: only backends/kubernetes/operator/*.cc include it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "api/vocab/labels.h"
#include "api/vocab/vocab.h"
#include "backends/kubernetes/operator/job_controller.h"
#include "backends/kubernetes/operator/observation.h"
#include "backends/metrics/job_metrics.h"
#include "client/sharding_client.h"
#include "common/credential.h"
#include "common/job_key.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"
#include "core/bridge/bridge.h"
#include "core/loop/control_loop.h"

namespace antdt::kube_operator {

using kube::Json;

inline constexpr char kController[] = "antdtjob";

// The node a pod was bound to, and its address.
inline std::string NodeOf(const Json& pod) { return kube::StringAt(pod, {"spec", "nodeName"}); }
inline std::string PodIp(const Json& pod) { return kube::StringAt(pod, {"status", "podIP"}); }
inline std::string NameOf(const Json& object) {
  return kube::StringAt(object, {"metadata", "name"});
}

// The objects whose controller ownerReference is `uid`.
// The API resource a write is for: pods, Services, or the gang scheduler's
// PodGroups (the group from the object's apiVersion).
inline kube::ResourceRef RefOf(const reconciler::Write& w) {
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

inline bool HasController(const Json& object) {
  const Json& refs = kube::At(object, {"metadata", "ownerReferences"});
  if (!refs.is_array()) return false;
  return std::any_of(refs.begin(), refs.end(),
                     [](const Json& ref) { return ref.value("controller", false); });
}

// Names of `objects` that `controlled` (the ones the job controls) leaves out.
inline std::set<std::string> Foreign(const std::vector<Json>& objects,
                                     const std::vector<Json>& controlled) {
  std::set<std::string> names;
  for (const Json& o : objects) names.insert(NameOf(o));
  for (const Json& o : controlled) names.erase(NameOf(o));
  return names;
}

inline std::vector<Json> ControlledBy(std::vector<Json> objects, const std::string& uid) {
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

inline bool ConditionTrue(const Json& job, const std::string& type) {
  const Json* c = reconciler::FindCondition(kube::At(job, {"status"}), type);
  return c != nullptr && kube::StringAt(*c, {"status"}) == "True";
}

// A parameter server's running pod: where a Leave or Resize goes.
struct JobController::ServerPod {
  std::string name;
  std::string address;  // ip:port
};

struct JobController::JobRuntime {
  std::string uid;
  std::string sharding_address;
  std::unique_ptr<client::ShardingClient> driver;
  bool dataset_ready = false;
  std::optional<reconciler::Progress> progress;
  // The control loop of this job and the operator's backend of it.
  std::unique_ptr<LoopBackend> backend;
  std::unique_ptr<loop::ControlLoop> loop;
  // Its series on the operator's /metrics; they go with the runtime.
  std::unique_ptr<metrics::JobMetrics> metrics;
  // spec.stragglerPolicy and spec.monitor as the loop was built from them: a
  // change (they may change on a running job) builds the loop again.
  std::string policy_spec;
  std::string reported_orphans;  // the orphaned pods last reported
  std::string orphans_seen;      // the orphaned pods this pass's gather saw
  // The PolicyChanged Event's message, from the gather that rebuilt the loop
  // until the writing phase records it.
  std::optional<std::string> policy_changed;
  bool pod_group_created = false;  // gang scheduling: the job's PodGroup exists
  std::string token;               // the job's credential ("" without)
  bool token_secret_created = false;
  bool sharding_claim_created = false;
  // Moved parameter servers serving from their new pod (this pass's gather).
  std::vector<loop::ServerServing> serving;
  // The job as this pass found it (the loop's Events are recorded on it), and
  // its running parameter servers (the loop's Leaves go there): this pass's
  // gather.
  Json job;
  std::vector<ServerPod> server_pods;
};

inline std::string PolicySpecOf(const Json& job) {
  return kube::At(job, {"spec", "stragglerPolicy"}).dump() +
         kube::At(job, {"spec", "monitor"}).dump();
}

// The operator as a backend of the control loop: it carries out and records
// the effects of one sync on what that sync's gather put in the job's runtime
// (the job, its parameter servers). A restart is committed by the reconciler
// in the same pass (the new incarnation in status.workerInstances); its writes
// delete the old pod and create the new one, and once the old pod is gone the
// loop tells the parameter servers (a Departure).
class JobController::LoopBackend final : public loop::Backend {
 public:
  LoopBackend(JobController* controller, JobRuntime* rt) : controller_(controller), rt_(rt) {}

  absl::Status RestartElsewhere(const policy::WorkerState&, const policy::KillRestart&) override {
    return absl::OkStatus();  // committed by this pass's reconciler (see above)
  }

  bool SendDirective(const std::string& node, const v1::Directive& directive) override {
    if (controller_->monitor_ == nullptr) return false;
    if (controller_->monitor_->hub().SendDirective(node, directive)) return true;
    LogEvent("operator", {{"event", "directive_not_delivered"},
                          {"job", kube::KeyOf(rt_->job)},
                          {"worker", directive.worker_id()},
                          {"node", node}});
    return false;
  }

  void LeaveParameterServers(const std::string& worker) override {
    controller_->LeaveParameterServers(worker, rt_->server_pods, rt_->token);
  }

  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override {
    absl::Status s = absl::UnavailableError("no sharding service yet");
    if (!rt_->sharding_address.empty() && rt_->driver != nullptr) {
      client::ShardingClientOptions co = rt_->driver->options();
      co.worker_id = worker;
      co.incarnation = incarnation;
      s = client::ReleaseWorker(rt_->sharding_address, co);
    }
    LogEvent("operator", {{"event", s.ok() ? "shards_released" : "shards_not_released"},
                          {"job", kube::KeyOf(rt_->job)},
                          {"worker", worker},
                          {"incarnation", incarnation},
                          {"error", std::string(s.message())}});
    return s;
  }

  void RecordAction(const policy::Decision& d, loop::Outcome outcome) override {
    if (controller_->actions_total_ != nullptr && outcome == loop::Outcome::kDone) {
      controller_->actions_total_->Add({{"action", policy::ActionName(d.action)}}).Increment();
    }
    if (rt_->metrics) {
      rt_->metrics->Decided(d, loop::OutcomeName(outcome));
    }
  }

  void RecordTime(const loop::TimeDelta& delta) override {
    if (rt_->metrics) rt_->metrics->Time(delta);
  }

  void RecordSkipped(const std::string& /*line*/, policy::SkipReason reason) override {
    if (rt_->metrics) rt_->metrics->Skipped(policy::SkipReasonName(reason));
  }

  // Mode Recommend: an Event on the job and the metrics; nothing carried out.
  void RecordRecommendation(const loop::Recommendation& r) override {
    if (rt_->metrics) rt_->metrics->Recommended(r.decision, r.predicted_saving_seconds);
    if (policy::IsRebalance(r.decision)) return;  // only keeps the global batch around another
    const std::string& target = policy::ActionTarget(r.decision.action);
    controller_->recorder_->Record(
        rt_->job, "Normal", "Recommendation",
        absl::StrFormat("recommended, not carried out (stragglerPolicy.mode Recommend): %s %s, "
                        "rule %s; saves ~%.1f s, costs %.1f s: %s",
                        policy::ActionName(r.decision.action), target.empty() ? "job" : target,
                        r.decision.rule, r.predicted_saving_seconds, r.cost_seconds,
                        r.decision.reason));
  }

  void RecordBudgetUsed(int used) override {
    if (rt_->metrics) rt_->metrics->BudgetUsed(used);
  }

 private:
  JobController* const controller_;
  JobRuntime* const rt_;  // owns this backend
};

}  // namespace antdt::kube_operator
