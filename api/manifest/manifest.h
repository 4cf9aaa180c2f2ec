// The AntDTJob manifest (group antdt.io, version v1alpha1, kind AntDTJob): the
// one schema read by `antdt run` (the local runner) and, as the CRD's spec, by
// the operator. Parsing is pure: text in, struct or an error naming the field
// path out ("spec.workers.replicas: must be >= 1, got -2"). Unknown fields are
// rejected, durations are strings like "30s", "500ms", "2m".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "api/vocab/vocab.h"

namespace antdt::manifest {

struct DatasetSpec {
  int64_t records = 0;     // spec.dataset.records (> 0)
  int64_t shard_size = 0;  // spec.dataset.shardSize (> 0)
  int32_t epochs = 1;      // spec.dataset.epochs (> 0)
  bool shuffle = false;    // spec.dataset.shuffle
  uint64_t seed = 0;       // spec.dataset.seed
  // spec.dataset.guidedLeasing: shards shrink towards an epoch's end, down to
  // a worker's batch, and a much slower worker leases only its share there,
  // so that no worker holds a large share of the end while the others wait
  // (v1::DatasetSpec.min_shard_records and workers).
  bool guided_leasing = true;
};

struct ModelSpec {                  // the demo trainer's model
  int32_t features = 16;            // spec.model.features (1..4096)
  double learning_rate = 0.1;       // spec.model.learningRate (> 0)
  int64_t global_batch_size = 256;  // spec.model.globalBatchSize (>= workers)
};

struct EnvVar {  // spec.*.template.spec.containers[0].env[i]
  std::string name;
  std::string value;        // `value`, $(VAR) references expanded when the container starts
  bool value_from = false;  // `valueFrom` given instead: Kubernetes resolves it, `antdt run` not
};

// spec.*.template.spec.containers[0], the fields a backend runs by itself.
struct ContainerSpec {
  std::vector<std::string> command;  // empty: the image's entrypoint (locally: the demo trainer)
  std::vector<std::string> args;
  std::vector<EnvVar> env;
};

struct ReplicaSpec {
  int32_t replicas = 0;       // spec.{workers,parameterServers}.replicas (>= 0; workers >= 1)
  std::string image;          // spec.*.template.spec.containers[0].image (Kubernetes only)
  std::string template_yaml;  // the pod template as given, re-emitted by the operator
  ContainerSpec container;    // containers[0]'s command, args and env
};

struct Rule {  // spec.stragglerPolicy.rules[i]
  vocab::Signal signal = vocab::Signal::kScore;
  double threshold = 0;  // for score signals
  // For signal class: TRANSIENT, PERSISTENT or DETERMINISTIC (spelt in lower case).
  v1::StragglerClass straggler_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
  int32_t windows = 1;  // persistence: consecutive windows
  // ADJUST_BS or KILL_RESTART (vocab::RuleActionKinds).
  vocab::ActionKind action = vocab::ActionKind::kAdjustBatchSize;
  int64_t cooldown_ms = 0;  // 0: the policy's
  int32_t budget = 0;       // 0: the policy's
};

struct StragglerPolicySpec {
  vocab::Policy name = vocab::Policy::kAntdtNd;  // spec.stragglerPolicy.name
  // spec.stragglerPolicy.cooldown; absent: derived from the Monitor's windows
  // (cooldown_derived, twice the time a decision takes to be measured), this
  // value until they are known.
  int64_t cooldown_ms = 60'000;
  bool cooldown_derived = true;
  // spec.stragglerPolicy.maxActions; absent: 10, or one per 5 workers when more.
  int32_t max_actions = 10;
  double min_saving_ratio = 1.0;  // spec.stragglerPolicy.minSavingRatio
  int32_t backup_workers = 1;     // spec.stragglerPolicy.backupWorkers
  // spec.stragglerPolicy.stepDeadline: under antdt-nd, antdt-dd and custom, a
  // step ends for a worker still training at this multiple of its median
  // worker's time; the worker trains what it has and takes the rest of its
  // batch into its next step. 0: off. Other policies never cut a step.
  double step_deadline = 1.25;
  // stepDeadline absent: the deadline is fitted to the job's steps, between
  // 1.1 and 1.25 by how evenly its healthy workers' steps take
  // (common/step_deadline.h); present: that multiple, always.
  bool step_deadline_fitted = true;
  vocab::Mode mode = vocab::Mode::kAct;  // spec.stragglerPolicy.mode
  // spec.stragglerPolicy.decideBy: antdt-nd restarts a straggler when its
  // slowdown is expected to last long enough to pay (expectedDuration), or by
  // its thresholds and the rest of the job (thresholds). Other policies: unused.
  vocab::DecideBy decide_by = vocab::DecideBy::kExpectedDuration;
  // spec.stragglerPolicy.avoidSlowNodes: the worker pods' node affinity away
  // from the nodes the operator's node memory marks slow (--node-memory Act,
  // docs/node-memory.md): Preferred, Required or Ignore.
  vocab::AvoidSlowNodes avoid_slow_nodes = vocab::AvoidSlowNodes::kPreferred;
  std::vector<Rule> rules;  // required (non-empty) for custom, rejected otherwise
};

struct MonitorSpec {  // spec.monitor
  // window: windows of this length in time; windowSteps: windows of that many
  // steps, window (1s when absent) being the length of the first ones, before
  // the job's step time is known. Neither given: windows of 2 steps.
  int64_t window_ms = 1'000;
  int32_t window_steps = 2;  // 0: windows in time
  // allowedLateness: how long after its end a window waits for reports; -1
  // (absent) is max(500ms, window / 4).
  int64_t allowed_lateness_ms = -1;
  double straggler_threshold = 1.3;
  double recover_threshold = 1.15;
  int32_t persistent_windows = 3;
  int32_t warmup_windows = 2;
};

struct CheckpointSpec {     // spec.checkpoint
  std::string path;         // where model and shard state go
  int64_t every_steps = 0;  // 0: no periodic checkpoints
};

struct RunPolicySpec {  // spec.runPolicy
  int32_t backoff_limit = 3;
  int64_t ttl_seconds_after_finished = -1;  // -1 (field absent): keep; given: >= 0
  // Fail the job (DeadlineExceeded) this long after it started; -1 (absent): no deadline.
  int64_t active_deadline_seconds = -1;
  // spec.runPolicy.schedulingPolicy, read when the operator gang-schedules:
  int32_t min_available = -1;             // minAvailable; -1: every server and worker
  std::string queue;                      // queue (Volcano)
  int64_t schedule_timeout_seconds = -1;  // scheduleTimeoutSeconds (coscheduling)
};

struct LocalSpec {       // spec.local: only `antdt run` reads it
  std::string scenario;  // straggler scenario file, relative to the manifest
  // spec.local.deviceTimePerSample, a duration like "200us" or "1.5ms": emulated
  // compute per sample at speed 1.
  int64_t device_time_per_sample_us = 200;
  // spec.local.serverTimePerStep: emulated time a parameter server spends on
  // each step at speed 1 (its node's speed divides it); 0: none.
  int64_t server_time_per_step_us = 0;
  // spec.local.deviceWork: "sleep" (the default) spends the device time
  // asleep; "cpu" computes for that much CPU time on the worker's training
  // thread, so that CPU contention and quotas slow it for real.
  bool device_work_cpu = false;
};

// spec.shardingService.storage: where the sharding service keeps its state
// when no volume of the job holds spec.checkpoint.path. On a cluster the
// operator provisions a PersistentVolumeClaim of `size` from
// `storage_class` ("" : the cluster's default class), owned by the job; with
// `ephemeral` the state lives in the pod (an emptyDir) and is lost with it.
struct ShardingStorageSpec {
  std::string size = "1Gi";  // a Kubernetes quantity
  std::string storage_class;
  bool ephemeral = false;
};

struct Job {
  std::string name;                           // metadata.name (DNS-1123 label)
  std::string namespace_ = "default";         // metadata.namespace
  std::string uid;                            // metadata.uid, set by the API server ("" locally)
  std::map<std::string, std::string> labels;  // metadata.labels
  DatasetSpec dataset;
  ModelSpec model;
  ReplicaSpec workers;
  ReplicaSpec parameter_servers;
  // spec.shardingService.template: the sharding service pod's template (YAML;
  // on a cluster merged over the operator's secure defaults; "" none).
  std::string sharding_service_template_yaml;
  ShardingStorageSpec sharding_storage;
  StragglerPolicySpec straggler_policy;
  MonitorSpec monitor;
  CheckpointSpec checkpoint;
  RunPolicySpec run_policy;
  LocalSpec local;
  // spec.suspend: hold no pods (Kueue sets it until it admits the job); the
  // sharding state is kept and the job resumes from it when cleared.
  bool suspend = false;
};

// Parses a whole manifest document (exactly one YAML document). Besides the
// fields above, the metadata fields the API server sets (uid, resourceVersion,
// generation, creationTimestamp, managedFields, ...), metadata.annotations and
// a top-level `status` are accepted and ignored, so the operator can parse an
// object read back from the cluster. `null` values read as absent.
absl::StatusOr<Job> ParseJob(const std::string& yaml);

// A straggler scenario for the local runner and the simulator: emulated nodes
// with their speeds, spares, and slowdowns over time.

// How a slowdown is made (slowdowns[i].via).
enum class SlowdownVia {
  kEmulated,  // "emulated": the node's speed file, which the demo trainer reads
  kCpuQuota,  // "cpu-quota": a real CPU cap on the node's worker processes (cgroup v1)
  // "cpu-contention": factor - 1 co-located processes that spin on the CPU
  // the node's workers are pinned to (the non-dedicated cluster's neighbours).
  kCpuContention,
  // "slow-data": the node's workers reach the sharding service through a
  // relay that holds every chunk (factor - 1) x a step's device time / 2 in
  // each direction: a data source far away.
  kSlowData,
  // "gpu-throttle": the node's agent reads GPUs from a test NVML library
  // that reports thermal throttling while it is active, and the node's
  // device time grows by factor, as a throttled GPU's does.
  kGpuThrottle,
};

struct Slowdown {
  std::string node;  // slowdowns[i].node (must name a node)
  // DETERMINISTIC, TRANSIENT or PERSISTENT (spelt in lower case).
  v1::StragglerClass kind = v1::STRAGGLER_CLASS_UNSPECIFIED;
  double factor = 1;        // > 1: that many times slower
  int64_t start_ms = 0;     // slowdowns[i].start (deterministic: 0)
  int64_t duration_ms = 0;  // transient: > 0; others: until the end
  SlowdownVia via = SlowdownVia::kEmulated;
  // Deterministic slowdowns apply at every t, persistent ones from start_ms
  // on, transient ones in [start_ms, start_ms + duration_ms).
  bool ActiveAt(int64_t t_ms) const;
};

struct NodeSpec {
  std::string name;
  double speed = 1.0;  // nodes[i].speed: relative device speed (> 0; 1.5 = a leader)
  bool spare = false;  // nodes[i].spare: idle, can take a restarted worker or server
  // nodes[i].role: what the node runs when not spare, "worker" (the default)
  // or "ps" (the job's parameter servers, the k-th server on the k-th such node).
  vocab::Role role = vocab::Role::kWorker;
  std::map<std::string, std::string> labels;
};

struct Scenario {
  std::string name;
  std::vector<NodeSpec> nodes;
  std::vector<Slowdown> slowdowns;
  // The emulated speed of `node` at `t_ms` after the job started (speed /
  // factor of every emulated slowdown active then; cpu-quota ones leave it
  // alone). A node the scenario does not list has speed 1.
  double SpeedAt(const std::string& node, int64_t t_ms) const;
  // The product of the factors of the cpu-quota slowdowns of `node` active at
  // `t_ms`; 1 when none is.
  double CpuQuotaFactorAt(const std::string& node, int64_t t_ms) const;
  // True when some slowdown of `node` is via cpu-quota; the index of the first
  // in `*index` (for error messages).
  bool UsesCpuQuota(const std::string& node, size_t* index = nullptr) const;
  // The factor of the slowdown of `node` via `via` active at `t_ms`; 1 when
  // none is.
  double FactorVia(const std::string& node, SlowdownVia via, int64_t t_ms) const;
  bool Uses(const std::string& node, SlowdownVia via) const;
};

absl::StatusOr<Scenario> ParseScenario(const std::string& yaml);

}  // namespace antdt::manifest
