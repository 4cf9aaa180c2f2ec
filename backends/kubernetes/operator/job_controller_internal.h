// What the job controller's files share: the per-job runtime, the loop's
// backend over one sync's observation, and small helpers over objects.
// Internal: only backends/kubernetes/operator/*.cc include it.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "backends/kubernetes/operator/job_controller.h"
#include "backends/metrics/job_metrics.h"
#include "client/sharding_client.h"
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

// The API resource a write is for: pods, Services, or the gang scheduler's
// PodGroups (the group from the object's apiVersion).
kube::ResourceRef RefOf(const reconciler::Write& w);

bool HasController(const Json& object);

// Names of `objects` that `controlled` (the ones the job controls) leaves out.
std::set<std::string> Foreign(const std::vector<Json>& objects,
                              const std::vector<Json>& controlled);

// The objects whose controller ownerReference is `uid`.
std::vector<Json> ControlledBy(std::vector<Json> objects, const std::string& uid);

bool ConditionTrue(const Json& job, const std::string& type);

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

std::string PolicySpecOf(const Json& job);

// The operator as a backend of the control loop: it carries out and records
// the effects of one sync on what that sync's gather put in the job's runtime
// (the job, its parameter servers). A restart is committed by the reconciler
// in the same pass (the new incarnation in status.workerInstances); its writes
// delete the old pod and create the new one, and once the old pod is gone the
// loop tells the parameter servers (a Departure).
class JobController::LoopBackend final : public loop::Backend {
 public:
  LoopBackend(JobController* controller, JobRuntime* rt) : controller_(controller), rt_(rt) {}

  absl::Status RestartElsewhere(const policy::WorkerState&, const policy::KillRestart&) override;

  bool SendDirective(const std::string& node, const v1::Directive& directive) override;

  void LeaveParameterServers(const std::string& worker) override;

  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override;

  void RecordAction(const policy::Decision& d, loop::Outcome outcome) override;

  void RecordTime(const loop::TimeDelta& delta) override;

  void RecordSkipped(const std::string& /*line*/, policy::SkipReason reason) override;

  // Mode Recommend: an Event on the job and the metrics; nothing carried out.
  void RecordRecommendation(const loop::Recommendation& r) override;

  void RecordBudgetUsed(int used) override;

 private:
  JobController* const controller_;
  JobRuntime* const rt_;  // owns this backend
};

}  // namespace antdt::kube_operator
