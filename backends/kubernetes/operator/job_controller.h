// The AntDTJob controller of `antdt-operator`: informers on AntDTJobs, their
// pods and services, and the cluster's nodes feed a rate-limited work queue of
// job keys; one worker syncs a key at a time. A sync gathers what the
// reconciler cannot see in the API (the sharding service's progress, the
// Monitor's view, the Controller's decisions), asks the pure reconciler for its
// changes, and carries them out: the status first (the commit point of every
// decision), then the children, then the directives to agents and the Events.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "antdt/v1/trainer.grpc.pb.h"
#include "backends/kubernetes/client/api.h"
#include "backends/kubernetes/operator/node_controller.h"
#include "backends/kubernetes/reconciler/reconciler.h"
#include "backends/kubernetes/runtime/event_recorder.h"
#include "backends/kubernetes/runtime/informer.h"
#include "backends/kubernetes/runtime/workqueue.h"
#include "common/clock.h"
#include "core/loop/control_loop.h"
#include "core/policy/policy.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "services/monitor/monitor_service.h"

namespace antdt::kube_operator {

struct JobControllerOptions {
  std::string watch_namespace;  // "" all namespaces
  reconciler::Settings settings;
  std::string identity;           // this replica, for Events
  int64_t rpc_timeout_ms = 2000;  // calls to the job's sharding service and servers
  // settings.job_credentials: the key each job's token is derived from.
  std::string token_key;
  // The cluster's node memory (borrowed; null: none): each sync hands it the
  // job's straggler records, and under Act new and restarted pods of a job in
  // Act mode prefer the nodes it does not mark.
  NodeController* node_controller = nullptr;
  // The time of a sync (timestamps, the control loop's turns and directive
  // versions); borrowed, outlives the controller. A test drives syncs with a
  // FakeClock.
  const Clock* clock = &RealClock::Get();
};

class JobController {
 public:
  JobController(kube::Api* api, monitor::MonitorServiceImpl* monitor, JobControllerOptions options,
                prometheus::Registry* registry);
  ~JobController();

  // Starts the informers and the worker; returns once the caches synced or
  // `sync_timeout_ms` passed (false).
  bool Start(int64_t sync_timeout_ms);
  void Stop();
  // Whether every informer has listed once (false before Start).
  bool HasSynced() const;

  // Runs one sync of `key` ("ns/name") now, on the calling thread (tests).
  absl::Status SyncForTest(const std::string& key);

  // The namespace of the one job named `name` this controller runs; nullopt
  // when none, or when jobs of that name run in several namespaces (the
  // Monitor keys jobs by name and cannot tell them apart). Thread-safe.
  std::optional<std::string> NamespaceOf(const std::string& name);

 private:
  struct JobRuntime;
  struct ServerPod;
  class LoopBackend;
  absl::Status Sync(const std::string& key, int64_t* requeue_after_ms);
  void Worker();
  void EnqueueOwner(const kube::Json& child);
  JobRuntime& RuntimeFor(const kube::Json& job, const manifest::Job& spec);
  // The sharding service's running pod, and a client of it (rt.driver) for
  // its address; the dataset known created once status.datasetCreated says so.
  void ConnectSharding(const kube::Json& job, const manifest::Job& spec,
                       const std::vector<kube::Json>& pods, JobRuntime& rt);
  // The writing phase's: the dataset created on the connected sharding service
  // (a CreateDataset that an existing dataset answers as done); true when it
  // was created now, so that a pass soon records it and starts the workers.
  bool CreateDataset(const kube::Json& job, const manifest::Job& spec, JobRuntime& rt);
  // The gather: what this pass sees beyond the API objects (progress, the
  // Monitor's stragglers, moved servers). Reads only.
  void Observe(const kube::Json& job, const manifest::Job& spec,
               const std::vector<kube::Json>& pods, const v1::GetJobHealthResponse* health,
               JobRuntime& rt, reconciler::Snapshot* obs);
  // Parameter servers being moved (status.serverInstances): once the new pod
  // has the state, rt.serving names it (the loop points the workers there);
  // once it has completed a step, obs->servers_followed does.
  void ObserveMovedServers(const kube::Json& job, const manifest::Job& spec,
                           const std::vector<kube::Json>& pods, JobRuntime& rt,
                           reconciler::Snapshot* obs);
  // The control loop's step for this pass, on what it observed: a plan when a
  // decision is due and the job runs, and the deliveries due (server moves,
  // re-deliveries).
  loop::Ready Step(const kube::Json& job, JobRuntime& rt, loop::Observation now);
  // A create the API server refused (admission, quota, permissions): a Warning
  // Event FailedCreate on the job, as the ReplicaSet controller reports one,
  // and its condition ReplicaFailure True (the reconciler sets it False once
  // a pass needs no create).
  void ReportFailedCreate(const kube::Json& job, const reconciler::Write& w,
                          const absl::Status& error);
  absl::Status SetReplicaFailure(const kube::Json& job, const std::string& reason,
                                 const std::string& message);
  // Writes the Events the status committed, then clears status.pendingEvents
  // (`current` is the job as last written, or as this pass found it when it
  // wrote no status; updated).
  void RecordCommittedEvents(const reconciler::Changes& changes, bool status_written,
                             kube::Json* current);
  // The commit point of a pass: the status written (every decision of the
  // pass with it), then the Events it committed and the ones the gather found
  // due (`gathered`), before any other write can fail. The job as written (as
  // found, when the pass writes no status); a conflict: nothing else done.
  // `rt`: the job's runtime, null for a job with an invalid spec.
  absl::StatusOr<kube::Json> Commit(const kube::Json& job, const reconciler::Changes& changes,
                                    JobRuntime* rt, const std::vector<reconciler::Event>& gathered);
  // The pass's object writes in order (creates, deletes, the parameter
  // servers' new members on a scale), after the loop carried out its effects.
  // `current`: the job as Commit left it. `foreign`: names of objects with the
  // job's labels that it does not control (orphans, or an earlier job's being
  // collected).
  absl::Status WriteObjects(const kube::Json& job, const kube::Json& current,
                            const reconciler::Changes& changes, const std::vector<kube::Json>& pods,
                            const std::set<std::string>& foreign, JobRuntime* rt);
  // The reconciler's writes that are the loop's to carry out, into `ready`:
  // a scale's batch changes (ADJUST_BS directives, before the loop's own
  // deliveries) and the departures (a removed worker's shards released once
  // its pod is gone, a restarted worker's earlier incarnation leaving the
  // parameter servers once its pod is gone). One stream of effects: the loop's
  // Apply carries out all of them.
  static void AddReconcilerEffects(const reconciler::Changes& changes,
                                   const std::vector<kube::Json>& pods, loop::ControlLoop& loop,
                                   loop::Ready* ready);
  // The parameter servers told the job's new members (a scale), best effort:
  // logged when a call fails.
  void ResizeParameterServers(const kube::Json& job, const reconciler::Write& w,
                              const std::vector<kube::Json>& pods, JobRuntime* rt);
  // The running parameter servers of `pods` (with an address, not terminating).
  static std::vector<ServerPod> ServerPods(const std::vector<kube::Json>& pods, int port);
  // Calls each of `servers` (a deadline set, the job's credential `token`
  // added); logs failures.
  void ForEachParameterServer(
      const std::vector<ServerPod>& servers, const std::string& token,
      const std::function<grpc::Status(v1::ParameterServer::Stub&, grpc::ClientContext&)>& call);
  // A Warning Event naming the pods and Services with the job's labels and no
  // controller, each time that set changes: into `events` (the gather writes
  // nothing; the writing phase records them, RecordGatheredEvents).
  void ReportOrphans(const kube::Json& job, const std::vector<kube::Json>& pods,
                     const std::vector<kube::Json>& services, JobRuntime* rt,
                     std::vector<reconciler::Event>* events);
  // The Events the gather found due (a policy changed, orphaned children),
  // recorded once this pass's status is written; the orphans then count as
  // reported.
  void RecordGatheredEvents(const kube::Json& job, const std::vector<reconciler::Event>& events,
                            JobRuntime* rt);
  void LeaveParameterServers(const std::string& worker, const std::vector<ServerPod>& servers,
                             const std::string& token);

  kube::Api* const api_;
  monitor::MonitorServiceImpl* const monitor_;
  const JobControllerOptions options_;

  std::unique_ptr<kube::Informer> jobs_;
  std::unique_ptr<kube::Informer> pods_;
  std::unique_ptr<kube::Informer> services_;
  // The node controller's when there is one (one cache of the Nodes), else own_nodes_.
  std::unique_ptr<kube::Informer> own_nodes_;
  kube::Informer* nodes_ = nullptr;
  std::unique_ptr<kube::WorkQueue> queue_;
  std::unique_ptr<kube::EventRecorder> recorder_;
  std::thread worker_;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<JobRuntime>> runtimes_;  // by job uid
  // The Monitor's step gate (settings.job_credentials): each job's credential
  // digest by namespace/name. Its own mutex: the gate runs under the hub's
  // lock, and mu_ is held while calling the hub.
  std::mutex cred_mu_;
  std::map<std::string, std::string> digests_;

  prometheus::Family<prometheus::Counter>* reconcile_total_ = nullptr;
  prometheus::Family<prometheus::Counter>* reconcile_errors_ = nullptr;
  prometheus::Family<prometheus::Histogram>* reconcile_time_ = nullptr;
  prometheus::Family<prometheus::Counter>* actions_total_ = nullptr;
  prometheus::Registry* registry_ = nullptr;  // each job's series (metrics::JobMetrics)
  prometheus::Family<prometheus::Gauge>* jobs_gauge_ = nullptr;
};

}  // namespace antdt::kube_operator
