// The reconciler of one AntDTJob: a pure function from what the operator
// observed (the job as stored, its pods and services, the sharding service's
// progress, the Monitor's view, the Controller's new decisions, the time) to
// what it must write (the job's new status, then pod and service creations and
// deletions in order). No I/O, no clock reads, no threads: the operator's glue
// observes, calls Reconcile, writes `status` first (guarded by the job's
// resourceVersion) and applies `writes` only if that succeeded, so the status
// is the commit point of every decision and a pass that is interrupted or
// repeated converges to the same writes.
//
// Level-triggered: every durable fact (each worker's desired incarnation, its
// excluded nodes and local batch size, the failure count, the last actions)
// lives in the job's status; everything else is recomputed from the objects.
//
// Children of job J in namespace N (all labelled antdt.io/job=J, owned by J):
//   Service J-sharding (headless)  + pod J-sharding   antdt-sharding-service
//   Service J-ps (headless)        + pods J-ps-<k>    antdt-ps (or the PS template);
//                                    none when jobconfig::ParameterServerCount is 0
//   Service J-workers (headless)   + pods J-worker-<i>   the workers' template
// Every incarnation of worker i is the pod J-worker-<i> (as Kubeflow's
// PyTorchJob names its pods, so `kubectl logs J-worker-0` finds the current
// one), labelled antdt.io/incarnation; a restart deletes the previous
// incarnation's pod and creates the next only once it is gone. Each has
// hostname J-worker-<i> under subdomain J-workers, so J-worker-<i>.J-workers.N.svc
// names it across restarts (MASTER_ADDR is worker-0's).
//
// Workers' containers[0] get, before the template's own env: POD_IP, HOST_IP,
// NODE_NAME (downward API), then jobconfig::WorkerEnv's variables (the local
// runner's names: ANTDT_*, MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK) but ANTDT_NODE_SPEED_FILE, which is the node's to give.
// ANTDT_JOURNAL and ANTDT_LOSS_LOG lie under spec.checkpoint.path
// (journals/<worker-id>.journal, loss/<worker-id>.jsonl); empty without it.
//
// Conditions (status.conditions, metav1.Condition, observedGeneration set):
//   Created             True once every child has existed (stays True).
//   Running             True while the sharding service, every parameter server
//                       and every unfinished worker's pod is Running.
//   StragglersDetected  True while the Monitor classifies a worker as a
//                       Transient, Persistent or Deterministic straggler
//                       (Leaders are listed in status.stragglers, not counted).
//   Mitigating          True while a restarted worker's new pod is not Running
//                       yet (RestartingWorker), or while some worker's local
//                       batch differs from its even share (BatchSizesAdjusted).
//   Succeeded           True once every worker's pod Succeeded.
//   Failed              True on an invalid spec (InvalidSpec; cleared when the
//                       spec is fixed), when the sharding service came back
//                       without the job's state (ShardingStateLost: what was
//                       committed is unknown, so nothing is trained twice),
//                       when worker failures exceed
//                       spec.runPolicy.backoffLimit (BackoffLimitExceeded; a pod
//                       evicted or preempted is restarted but not counted), or
//                       spec.runPolicy.activeDeadlineSeconds after startTime
//                       (DeadlineExceeded).
//   Suspended           Present once spec.suspend was set: True while it is
//                       (no pods; the sharding service's pod stays only when its
//                       state is not under spec.checkpoint.path), False once
//                       resumed (each unfinished worker as its next incarnation;
//                       startTime restarts, as a Kubernetes Job's does).
//
// Moving a parameter server (KILL_RESTART of "ps-K"; a ParameterServerMoved
// Event, the action in status.lastActions, the server's record in
// status.serverInstances): its next incarnation J-ps-<K>-<n> is created,
// kept off the node it left, with --take-over the running predecessor's
// address (the new server takes its state at a step boundary and the old
// one sends every later push on) and --advertise its own; the predecessor
// is deleted once the glue saw the new server complete a step
// (Snapshot::servers_followed). With no running predecessor the new pod
// starts from its own newest checkpoint (--restore-step latest), as a
// server's container restarted in place does.
//
// Scaling (spec.workers.replicas changed on a running job; a Scaled Event):
// the global batch is split evenly again over the workers there are now.
// Workers beyond the new count are removed: their pods deleted and, once gone,
// their shards released on the sharding service (fencing their incarnation);
// their records stay in status.removedWorkers, so one scaled up again resumes
// as its next incarnation. With parameter servers the remaining workers keep
// running, each told its new local batch (an ADJUST_BS directive), and the
// servers their new members; a collective job's ranks (no parameter servers)
// all begin their next incarnation with the new WORLD_SIZE. Neither counts as
// a restart.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"
#include "api/vocab/vocab.h"
#include "core/policy/policy.h"

namespace antdt::reconciler {

using Json = nlohmann::json;

struct Settings {
  std::string image = "antdt/antdt:0.1.0";  // sharding and default PS pods
  int32_t sharding_port = 50051;
  int32_t ps_port = 50052;
  int32_t agent_port = 9400;    // the node agent's hostPort
  int32_t master_port = 29500;  // MASTER_PORT: worker-0's rendezvous (torch's default)
  int32_t metrics_port = 9090;
  std::string manager = "antdt-operator";  // app.kubernetes.io/managed-by
  // "" none, "volcano" or "scheduler-plugins": a PodGroup per job whose
  // members are its parameter servers and workers (not the sharding service,
  // which must run before they are created).
  std::string gang_scheduler;
  // Per-job credentials: each job gets a Secret <job>-token (Snapshot::
  // job_token) that its sharding service and workers read as ANTDT_TOKEN;
  // the service refuses calls without it.
  bool job_credentials = false;
  // TLS for the job's pods (common/tls.h): each mounts this Secret of the
  // job's namespace (tls.crt, tls.key, ca.crt) at kTlsMountPath and gets
  // ANTDT_TLS_* pointing there, and ANTDT_TLS_SERVER_NAME = tls_server_name;
  // readiness probes are TCP then (a kubelet's gRPC probe speaks plaintext).
  // "" : plaintext.
  std::string pod_tls_secret;
  std::string tls_server_name;
};
inline constexpr char kTlsMountPath[] = "/etc/antdt/tls";

// One straggler (or leader) as the Monitor currently classifies it.
struct Straggler {
  std::string worker, node, pod;
  v1::StragglerClass straggler_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
  std::string cause;  // as status.stragglers shows it (vocab::CauseLabel)
  double score = 0;
  int64_t since_ms = 0;
  bool compensated = false;  // slower per sample, its smaller batch hides it
};

// The sharding service's view of the dataset.
struct Progress {
  int64_t records_committed = 0, records_total = 0;
  int32_t epoch = 0, epochs = 0;
  double eta_seconds = -1;  // < 0: unknown
  bool done = false;
};

// What one pass sees of a job (the glue's gather; not the policy's
// policy::Observed).
struct Snapshot {
  Json job;  // the AntDTJob as stored (metadata incl. uid/generation, spec, status)
  // ParseJob of it; an error sets Failed=True reason InvalidSpec, no children.
  absl::StatusOr<manifest::Job> spec;
  // Objects labelled antdt.io/job=<name> in the job's namespace, including
  // terminating ones (metadata.deletionTimestamp set).
  std::vector<Json> pods, services;
  std::optional<Progress> progress;  // from the sharding service, when known
  bool dataset_ready = false;        // the glue created the dataset on the sharding service
  // The sharding service answers NOT_FOUND for a dataset it was given: it came
  // back without its state (Failed, ShardingStateLost).
  bool dataset_lost = false;
  bool pod_group_exists = false;  // the glue created the job's PodGroup (gang scheduling)
  // Settings::job_credentials: the job's token (the glue derives it from the
  // job's UID), and whether its Secret was created.
  std::string job_token;
  bool token_secret_exists = false;
  bool sharding_claim_exists = false;  // the sharding service's claim was created
  std::vector<Straggler> stragglers;   // current view of the Monitor
  // The Controller's decisions to carry out in this pass (committed to
  // status.lastActions: DecisionRecord, DecisionFromRecord).
  std::vector<policy::Decision> actions;  // new Controller decisions to carry out in this pass
  // Parameter servers ("ps-K") being moved whose new pod has the state and
  // has completed a step with it (the glue asks it: every worker follows it
  // now), so their earlier pods can go.
  std::set<std::string> servers_followed;
  // Nodes the cluster's node memory marks slow (the node controller, under
  // Act). A job in Act mode keeps its workers' new pods off them, by a
  // preferred affinity or, under spec.stragglerPolicy.avoidSlowNodes:
  // Required, a required one; under Ignore or Recommend, the pass leaves them.
  std::vector<std::string> avoided_nodes;
  int64_t now_ms = 0;  // wall clock, for timestamps
};

struct Write {
  enum class Kind {
    kCreate,
    kDelete,
    kLeaveParameterServers,
    kDeleteJob,
    kResizeParameterServers,  // the job was scaled: the servers' new members
    kAdjustBatch,             // an ADJUST_BS directive to a running worker
    kReleaseShards,           // a removed worker's shards go back to the queue
  } kind;
  std::string resource;  // "pods" | "services" | "podgroups" | "secrets" (kCreate, kDelete)
  Json object;           // kCreate
  std::string name;      // kDelete, kDeleteJob
  std::string uid;       // kDelete, kDeleteJob: precondition
  int64_t grace_period_seconds = -1;  // kDelete; -1: the default
  std::string worker;                 // kLeaveParameterServers, kAdjustBatch, kReleaseShards
  std::string reason;                 // for logs
  // kResizeParameterServers: the world size, the workers gone, the workers new.
  int32_t workers = 0;
  std::vector<std::string> removed, added;
  std::string node;                // kAdjustBatch: where the worker runs (its agent)
  int64_t local_batch_size = 0;    // kAdjustBatch
  int32_t accumulation_steps = 1;  // kAdjustBatch
  int64_t incarnation = 0;         // kReleaseShards: this one and older are fenced
};

struct Event {
  std::string type;    // Normal | Warning
  std::string reason;  // CamelCase
  std::string message;
};

// What one pass changes: the status, the writes after it, the Events (not the
// policy's policy::Plan).
struct Changes {
  std::optional<Json> status;  // the new status, only when it differs from job.status
  std::vector<Write> writes;   // in order, applied after the status was written
  // The pass's Events, after those of status.pendingEvents. They are committed
  // with the status (status.pendingEvents); the operator writes them once the
  // status is written and then clears that list, so an operator stopped in
  // between writes them on its next pass (at least once).
  std::vector<Event> events;
  int64_t requeue_after_ms = 0;  // 0: only on the next watch event
};

Changes Reconcile(const Snapshot& o, const Settings& s);

// The one gate on the node memory's marks (o.avoided_nodes): acted on only by
// a job in Act mode whose stragglerPolicy.avoidSlowNodes is not Ignore, by
// the pass (its new pods' affinity, a restart's record) and by the policy
// (a marked node is chronic to it: operator/observation.h); else none.
const std::vector<std::string>& AvoidedNodes(const Snapshot& o);

// The durable record of one worker (an entry of status.workerInstances).
struct WorkerInstance {
  std::string id;           // "worker-<index>"
  int32_t index = 0;        // parsed from id
  int64_t incarnation = 0;  // the desired pod: <job>-worker-<index> with this incarnation label
  std::string node;         // where the desired pod runs, or the Controller's choice before
  std::string pod;          // the desired pod's name
  int32_t local_batch_size = 0;
  std::vector<std::string> excluded_nodes;  // never scheduled there again
  // Micro-batches per step (AntDT-DD's gradient accumulation); written to the
  // status only when above 1.
  int32_t accumulation_steps = 1;
  // Incarnations begun because the job resumed or was scaled (not restarts).
  int64_t resumes = 0;
  bool resumed = false;  // the current incarnation is one of those
  bool retired = false;  // removed by a scale-down, its pods gone, its shards released
};

Json ToJson(const WorkerInstance& w);
WorkerInstance WorkerInstanceFromJson(const Json& j);

// The durable record of a parameter server that was moved (an entry of
// status.serverInstances; a server never moved has none).
struct ServerInstance {
  std::string id;  // "ps-<index>"
  int32_t index = 0;
  int64_t incarnation = 0;  // the desired pod: PsPodName(job, index, incarnation)
  std::string node;         // the Controller's choice
  std::vector<std::string> excluded_nodes;
};
// A decision as an entry of status.lastActions: time (`now_ms` when its
// at_ms is 0), action, worker, fromNode, toNode (KILL_RESTART), localBatchSize
// and accumulationSteps (ADJUST_BS), rule, subject, reason, and its evidence
// as "key=value ..." (the numbers the policy weighed); and back, with what the
// job's `spec` says of the rest (the policy, a restart's node exclusion until
// its cool-down ends, the backups), nullopt for an entry whose action is
// unknown. An entry written before subject was kept reads its subject as the
// worker of a restart or of a batch change with evidence.
Json DecisionRecord(const policy::Decision& d, int64_t now_ms);
std::optional<policy::Decision> DecisionFromRecord(const Json& entry, const manifest::Job& spec);

Json ToJson(const ServerInstance& s);
ServerInstance ServerInstanceFromJson(const Json& j);

// Child names.
std::string ShardingName(const std::string& job);  // pod and Service
// The sharding service's PersistentVolumeClaim (spec.shardingService.storage),
// owned by the job: made when no volume holds spec.checkpoint.path and the
// storage is not ephemeral.
std::string ShardingClaimName(const manifest::Job& spec);
bool ShardingStateOnClaim(const Json& job, const manifest::Job& spec);
Json RenderShardingClaim(const Json& job, const manifest::Job& spec, const Settings& s);
std::string PsServiceName(const std::string& job);
// Parameter server k: J-ps-<k>, then J-ps-<k>-<incarnation> for each move;
// every incarnation has the host name J-ps-<k> under J-ps (stable DNS).
std::string PsPodName(const std::string& job, int32_t k, int64_t incarnation = 0);
std::string WorkersServiceName(const std::string& job);             // J-workers
std::string WorkerHostname(const std::string& job, int32_t index);  // J-worker-<i>
std::string WorkerPodName(const std::string& job, int32_t index);   // J-worker-<i>, as the hostname
// J-token-<uid>: an earlier job's of the same name (orphaned by `kubectl
// delete --cascade=orphan`, or still being collected) never stands in for it.
std::string TokenSecretName(const std::string& job, const std::string& uid);

// How many parameter servers, their feature slices and the workers' initial
// batches: core/jobconfig (shared with the local runner).

// Renderers (pure; `job` is the AntDTJob as stored, for its uid and templates).
Json RenderShardingPod(const Json& job, const manifest::Job& spec, const Settings& s);
// Parameter server k as incarnation inst.incarnation; `take_over`: the
// address of the running predecessor whose state it takes.
Json RenderParameterServerPod(const Json& job, const manifest::Job& spec, int32_t k,
                              const Settings& s, const ServerInstance& inst = {},
                              const std::string& take_over = "");
// `avoided`: nodes it keeps off, as spec.stragglerPolicy.avoidSlowNodes says
// (Preferred or Required; the pass passes none under Ignore).
Json RenderWorkerPod(const Json& job, const manifest::Job& spec, const WorkerInstance& instance,
                     const Settings& s, const std::vector<std::string>& avoided = {});
// The job's PodGroup for Settings::gang_scheduler (Volcano's
// scheduling.volcano.sh/v1beta1 or coscheduling's scheduling.x-k8s.io/v1alpha1),
// named after the job; min members spec.runPolicy.schedulingPolicy.minAvailable
// or every parameter server and worker. Null without gang scheduling.
Json RenderPodGroup(const Json& job, const manifest::Job& spec, const Settings& s);
// The job's credential as a Secret (data.token, base64) owned by the job.
Json RenderTokenSecret(const Json& job, const manifest::Job& spec, const std::string& token,
                       const Settings& s);
// The headless Services: sharding, ps (when the job has parameter servers),
// workers.
std::vector<Json> RenderServices(const Json& job, const manifest::Job& spec, const Settings& s);

// metav1 SetStatusCondition on a JSON array of conditions: adds the condition
// if missing (lastTransitionTime = now), changes lastTransitionTime only when
// status changes, always updates reason, message and observedGeneration.
// Returns whether anything changed.
bool SetCondition(Json& conditions, const std::string& type, const std::string& status,
                  const std::string& reason, const std::string& message,
                  int64_t observed_generation, int64_t now_ms);
// The condition of that type in a status, or nullptr.
const Json* FindCondition(const Json& status, const std::string& type);
// The condition the controller sets when the API server refuses a child.
inline constexpr char kReplicaFailure[] = "ReplicaFailure";

}  // namespace antdt::reconciler
