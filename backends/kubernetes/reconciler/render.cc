#include "backends/kubernetes/reconciler/reconciler.h"

// The renderers: the pods, Services, claim, PodGroup and Secret of a job,
// pure functions of the job, its spec and the settings (golden-file tested).
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
#include "backends/kubernetes/reconciler/reconciler_internal.h"
#include "common/credential.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/jobconfig/worker_env.h"

namespace antdt::reconciler {

// ---- Rendering ----

Json EnvValue(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}
Json EnvField(const std::string& name, const std::string& field_path) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", field_path}}}}}};
}
// ANTDT_TOKEN from the job's Secret (Settings::job_credentials).
Json TokenEnv(const manifest::Job& spec) {
  return {{"name", kEnvToken},
          {"valueFrom",
           {{"secretKeyRef", {{"name", TokenSecretName(spec.name, spec.uid)}, {"key", "token"}}}}}};
}

// A queue's labels on the job (Kueue's queue-name and priority-class) go to
// every pod, so quota and priority apply to what the job runs.
constexpr char kQueueLabelPrefix[] = "kueue.x-k8s.io/";

Json Labels(const manifest::Job& spec, const std::string& role, const Settings& s) {
  Json labels = {{"app.kubernetes.io/name", "antdt"},
                 {"app.kubernetes.io/managed-by", s.manager},
                 {"app.kubernetes.io/instance", spec.name},
                 {vocab::kLabelJob, spec.name},
                 {vocab::kLabelRole, role}};
  for (const auto& [key, value] : spec.labels) {
    if (absl::StartsWith(key, kQueueLabelPrefix)) labels[key] = value;
  }
  return labels;
}

Json OwnerReference(const Json& job, const manifest::Job& spec) {
  return {{"apiVersion", kJobApiVersion},
          {"kind", "AntDTJob"},
          {"name", spec.name},
          {"uid", Uid(job)},
          {"controller", true},
          {"blockOwnerDeletion", true}};
}

Json Metadata(const Json& job, const manifest::Job& spec, const std::string& name,
              const Json& labels) {
  return {{"name", name},
          {"namespace", spec.namespace_},
          {"labels", labels},
          {"ownerReferences", Json::array({OwnerReference(job, spec)})}};
}

std::string ShardingAddress(const manifest::Job& spec, const Settings& s) {
  return absl::StrCat(ShardingName(spec.name), ".", spec.namespace_, ".svc:", s.sharding_port);
}

std::vector<std::string> PsAddresses(const manifest::Job& spec, const Settings& s) {
  std::vector<std::string> out;
  for (int32_t k = 0; k < jobconfig::ParameterServerCount(spec); ++k) {
    out.push_back(absl::StrCat(PsPodName(spec.name, k), ".", PsServiceName(spec.name), ".",
                               spec.namespace_, ".svc:", s.ps_port));
  }
  return out;
}

// PyTorch's rendezvous: worker-0's stable DNS name (its hostname under the
// workers' headless Service), as Kubeflow's PyTorchJob gives it.
std::string MasterAddress(const manifest::Job& spec) {
  return absl::StrCat(WorkerHostname(spec.name, 0), ".", WorkersServiceName(spec.name), ".",
                      spec.namespace_, ".svc");
}

// Where a worker (rank `index`) runs, as jobconfig::WorkerEnv takes it: in
// Kubernetes terms, $(VAR) references that the kubelet expands. Without
// spec.checkpoint.path there is no shared storage: no journal, no loss log.
jobconfig::WorkerPlacement Placement(const manifest::Job& spec, const Settings& s,
                                     const WorkerInstance& w) {
  jobconfig::WorkerPlacement p;
  p.sharding_addr = ShardingAddress(spec, s);
  p.ps_addrs = PsAddresses(spec, s);
  p.agent_addr = absl::StrCat("$(HOST_IP):", s.agent_port);
  p.checkpoint_path = JobStateDir(spec);
  p.rank = w.index;
  p.incarnation = static_cast<int32_t>(w.incarnation);
  p.local_batch = w.local_batch_size;
  if (!spec.checkpoint.path.empty()) {
    const std::string dir = absl::StrCat("$(", jobconfig::kEnvCheckpointPath, ")");
    p.journal = absl::StrCat(dir, "/journals/", w.id, ".journal");
    p.loss_log = absl::StrCat(dir, "/loss/", w.id, ".jsonl");
  }
  p.master_addr = MasterAddress(spec);
  p.master_port = s.master_port;
  return p;
}

// The downward API's variables, first in every container of the job, so the
// rest can refer to them as $(VAR).
std::vector<Json> DownwardEnv() {
  return {EnvField("POD_IP", "status.podIP"), EnvField("HOST_IP", "status.hostIP"),
          EnvField("NODE_NAME", "spec.nodeName"), EnvField("ANTDT_POD_UID", "metadata.uid")};
}

// A worker's variables: the downward API's, then jobconfig::WorkerEnv's (the
// names the local runner sets too). ANTDT_NODE_SPEED_FILE is left to the
// node (the test kubelet's --speed-dir).
std::vector<Json> WorkerVariables(const manifest::Job& spec, const Settings& s,
                                  const WorkerInstance& w) {
  std::vector<Json> env = DownwardEnv();
  for (const auto& [name, value] : jobconfig::WorkerEnv(spec, Placement(spec, s, w))) {
    if (name != jobconfig::kEnvNodeSpeedFile) env.push_back(EnvValue(name, value));
  }
  if (s.job_credentials) env.push_back(TokenEnv(spec));
  return env;
}

// A parameter server's variables: the downward API's, then the job-wide part
// of jobconfig::WorkerEnv (everything up to ANTDT_CHECKPOINT_PATH; the
// per-worker variables follow it).
std::vector<Json> ParameterServerVariables(const manifest::Job& spec, const Settings& s) {
  std::vector<Json> env = DownwardEnv();
  for (const auto& [name, value] :
       jobconfig::WorkerEnv(spec, Placement(spec, s, WorkerInstance{}))) {
    env.push_back(EnvValue(name, value));
    if (name == jobconfig::kEnvCheckpointPath) break;
  }
  return env;
}

std::string FormatDouble(double v) { return absl::StrCat(v); }

void PrependEnv(Json& container, std::vector<Json> env) {
  const Json& existing = Get(container, "env");
  if (existing.is_array()) env.insert(env.end(), existing.begin(), existing.end());
  container["env"] = env;
}

// A pod from a user's template (`template` may be null): its labels and
// annotations merged under ours, its spec copied.
Json FromTemplate(const Json& job, const manifest::Job& spec, const Json& tmpl,
                  const std::string& name, const Json& labels) {
  const Json& tmeta = Get(tmpl, "metadata");
  Json merged = Get(tmeta, "labels").is_object() ? Get(tmeta, "labels") : Json::object();
  for (const auto& [k, v] : labels.items()) merged[k] = v;
  Json pod = {
      {"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", Metadata(job, spec, name, merged)}};
  if (Get(tmeta, "annotations").is_object() && !Get(tmeta, "annotations").empty()) {
    pod["metadata"]["annotations"] = Get(tmeta, "annotations");
  }
  pod["spec"] = Get(tmpl, "spec").is_object() ? Get(tmpl, "spec") : Json::object();
  return pod;
}

const Json& WorkerTemplate(const Json& job) {
  return Get(Get(Get(job, "spec"), "workers"), "template");
}

// Gives `pod` the volume under which the workers' template mounts
// spec.checkpoint.path, so the sharding service's state lands on the same
// (shared) volume. Nothing when the template mounts no such volume.
// The workers' volume and mount that hold spec.checkpoint.path, or nulls.
std::pair<const Json*, const Json*> CheckpointVolume(const Json& job, const manifest::Job& spec) {
  const std::string& path = spec.checkpoint.path;
  if (path.empty()) return {nullptr, nullptr};
  const Json& tspec = Get(WorkerTemplate(job), "spec");
  const Json& containers = Get(tspec, "containers");
  if (!containers.is_array() || containers.empty()) return {nullptr, nullptr};
  const Json& mounts = Get(containers[0], "volumeMounts");
  const Json& volumes = Get(tspec, "volumes");
  if (!mounts.is_array() || !volumes.is_array()) return {nullptr, nullptr};
  for (const Json& m : mounts) {
    const std::string mount_path = GetString(m, "mountPath");
    if (mount_path.empty() ||
        !(path == mount_path || absl::StartsWith(path, absl::StrCat(mount_path, "/")) ||
          mount_path == "/")) {
      continue;
    }
    for (const Json& v : volumes) {
      if (GetString(v, "name") == GetString(m, "name")) return {&v, &m};
    }
  }
  return {nullptr, nullptr};
}

void AddCheckpointVolume(const Json& job, const manifest::Job& spec, Json& pod) {
  const auto [volume, mount] = CheckpointVolume(job, spec);
  if (volume == nullptr) return;
  pod["spec"]["volumes"].push_back(*volume);
  pod["spec"]["containers"][0]["volumeMounts"].push_back(*mount);
}

// A required `hostname NotIn nodes`, in every term of the template's own
// required affinity (terms are ORed: each must keep off them).
void RequireNotIn(Json& pod_spec, const Json& nodes) {
  const Json expr = {{"key", kHostnameKey}, {"operator", "NotIn"}, {"values", nodes}};
  Json& terms = pod_spec["affinity"]["nodeAffinity"]
                        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  if (!terms.is_array() || terms.empty()) {
    terms = Json::array();
    terms.push_back({{"matchExpressions", Json::array({expr})}});
  } else {
    for (Json& term : terms) term["matchExpressions"].push_back(expr);
  }
}

// Excluded nodes as a required NotIn term (RequireNotIn), and the
// Controller's chosen node as a preference.
void AddNodeAffinity(Json& pod_spec, const std::vector<std::string>& excluded,
                     const std::string& preferred) {
  if (!excluded.empty()) RequireNotIn(pod_spec, excluded);
  if (!preferred.empty() &&
      std::find(excluded.begin(), excluded.end(), preferred) == excluded.end()) {
    const Json expr = {
        {"key", kHostnameKey}, {"operator", "In"}, {"values", Json::array({preferred})}};
    Json term = {{"weight", 100}, {"preference", {{"matchExpressions", Json::array({expr})}}}};
    pod_spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        .push_back(term);
  }
}

// Nodes the node memory marks slow, but for those already excluded: by
// default a preferred NotIn term (weight 50, below the Controller's chosen
// node's 100), so the scheduler places the pod elsewhere when it can and
// there when not; under avoidSlowNodes: Required, a required one.
void AvoidNodes(Json& pod_spec, const std::vector<std::string>& avoided,
                const std::vector<std::string>& excluded, vocab::AvoidSlowNodes how) {
  Json values = Json::array();
  for (const std::string& n : avoided) {
    if (std::find(excluded.begin(), excluded.end(), n) == excluded.end()) values.push_back(n);
  }
  if (values.empty()) return;
  if (how == vocab::AvoidSlowNodes::kRequired) {
    RequireNotIn(pod_spec, values);
    return;
  }
  const Json expr = {{"key", kHostnameKey}, {"operator", "NotIn"}, {"values", values}};
  pod_spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"].push_back(
      {{"weight", 50}, {"preference", {{"matchExpressions", Json::array({expr})}}}});
}

// The demo trainer, for a job whose workers' template names no container.
Json DefaultWorkerContainer(const manifest::Job& spec, const Settings& s) {
  const std::string journal = spec.checkpoint.path.empty()
                                  ? "/tmp/$(ANTDT_WORKER_ID).journal"
                                  : "$(ANTDT_CHECKPOINT_PATH)/$(ANTDT_WORKER_ID).journal";
  Json args = {"--sharding",    "$(ANTDT_SHARDING_ADDR)", "--job",         "$(ANTDT_JOB)",
               "--dataset",     "$(ANTDT_DATASET)",       "--worker-id",   "$(ANTDT_WORKER_ID)",
               "--incarnation", "$(ANTDT_INCARNATION)",   "--journal",     journal,
               "--ps",          "$(ANTDT_PS_ADDRS)",      "--features",    "$(ANTDT_FEATURES)",
               "--agent",       "$(ANTDT_AGENT_ADDR)",    "--local-batch", "$(ANTDT_LOCAL_BATCH)"};
  // A step deadline is told between micro-batches (as the local runner does).
  if (jobconfig::StepDeadline(spec, spec.straggler_policy.name, spec.straggler_policy.mode) > 0) {
    args.push_back("--micro-batches");
    args.push_back(std::to_string(jobconfig::kDeadlineMicroBatches));
  }
  return {{"name", "trainer"},
          {"image", s.image},
          {"command", Json::array({"antdt-trainer-worker"})},
          {"args", std::move(args)}};
}

// ---- Renderers ----

std::vector<Json> RenderServices(const Json& job, const manifest::Job& spec, const Settings& s) {
  auto service = [&](const std::string& name, const std::string& role, const std::string& port_name,
                     int32_t port) {
    const Json labels = Labels(spec, role, s);
    return Json{{"apiVersion", "v1"},
                {"kind", "Service"},
                {"metadata", Metadata(job, spec, name, labels)},
                {"spec",
                 {{"clusterIP", "None"},
                  // Pods resolve each other while they start, before readiness.
                  {"publishNotReadyAddresses", true},
                  {"selector", {{vocab::kLabelJob, spec.name}, {vocab::kLabelRole, role}}},
                  {"ports", Json::array({{{"name", port_name},
                                          {"port", port},
                                          {"targetPort", port},
                                          {"protocol", "TCP"}}})}}}};
  };
  std::vector<Json> services = {
      service(ShardingName(spec.name), "sharding", "grpc", s.sharding_port)};
  if (jobconfig::ParameterServerCount(spec) > 0) {
    services.push_back(service(PsServiceName(spec.name), "ps", "grpc", s.ps_port));
  }
  services.push_back(service(WorkersServiceName(spec.name), "worker", "rendezvous", s.master_port));
  return services;
}

Json RenderTokenSecret(const Json& job, const manifest::Job& spec, const std::string& token,
                       const Settings& s) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           Metadata(job, spec, TokenSecretName(spec.name, spec.uid), Labels(spec, "token", s))},
          {"type", "Opaque"},
          {"data", {{"token", absl::Base64Escape(token)}}}};
}

// TLS for a pod's containers (Settings::pod_tls_secret): the Secret mounted
// read-only at kTlsMountPath, ANTDT_TLS_* pointing into it (common/tls.h
// reads them: servers, SDKs and the built-in trainer alike), and a gRPC
// readiness probe turned into a TCP one (a kubelet's gRPC probe speaks
// plaintext only).
void UseTls(const Settings& s, Json& pod) {
  if (s.pod_tls_secret.empty()) return;
  constexpr char kVolume[] = "antdt-tls";
  pod["spec"]["volumes"].push_back(
      {{"name", kVolume}, {"secret", {{"secretName", s.pod_tls_secret}}}});
  const std::string dir = kTlsMountPath;
  std::vector<Json> env = {EnvValue(kEnvTlsCert, dir + "/tls.crt"),
                           EnvValue(kEnvTlsKey, dir + "/tls.key"),
                           EnvValue(kEnvTlsCa, dir + "/ca.crt")};
  if (!s.tls_server_name.empty()) env.push_back(EnvValue(kEnvTlsServerName, s.tls_server_name));
  for (Json& container : pod["spec"]["containers"]) {
    container["volumeMounts"].push_back(
        {{"name", kVolume}, {"mountPath", dir}, {"readOnly", true}});
    PrependEnv(container, env);
    Json& probe = container["readinessProbe"];
    if (probe.is_object() && probe.contains("grpc")) {
      probe["tcpSocket"] = {{"port", probe["grpc"]["port"]}};
      probe.erase("grpc");
    } else if (probe.is_null()) {
      container.erase("readinessProbe");
    }
  }
}

bool ShardingStateOnClaim(const Json& job, const manifest::Job& spec) {
  return !spec.sharding_storage.ephemeral && CheckpointVolume(job, spec).first == nullptr;
}

std::string ShardingClaimName(const manifest::Job& spec) {
  return spec.uid.empty() ? spec.name + "-sharding-state"
                          : absl::StrCat(spec.name, "-sharding-state-", spec.uid);
}

Json RenderShardingClaim(const Json& job, const manifest::Job& spec, const Settings& s) {
  Json claim = {
      {"apiVersion", "v1"},
      {"kind", "PersistentVolumeClaim"},
      {"metadata", Metadata(job, spec, ShardingClaimName(spec), Labels(spec, "sharding", s))},
      {"spec",
       {{"accessModes", Json::array({"ReadWriteOnce"})},
        {"resources", {{"requests", {{"storage", spec.sharding_storage.size}}}}}}}};
  if (!spec.sharding_storage.storage_class.empty()) {
    claim["spec"]["storageClassName"] = spec.sharding_storage.storage_class;
  }
  return claim;
}

Json RenderShardingPod(const Json& job, const manifest::Job& spec, const Settings& s) {
  const bool own_state = spec.checkpoint.path.empty();
  // Per job even where the volume is shared (a hostPath, the test kubelet).
  const std::string state_dir =
      own_state ? (spec.uid.empty() ? std::string(kDefaultShardingStateDir)
                                    : absl::StrCat(kDefaultShardingStateDir, "/", spec.uid))
                : JobStateDir(spec) + "/sharding";
  Json container = {
      {"name", "sharding"},
      {"image", s.image},
      {"command", Json::array({"antdt-sharding-service"})},
      {"args",
       {"--listen", absl::StrCat("$(POD_IP):", s.sharding_port), "--metrics-listen",
        absl::StrCat("$(POD_IP):", s.metrics_port), "--state-dir", state_dir, "--lease-ttl", "10s",
        "--namespace", kube::StringAt(job, {"metadata", "namespace"}), "--job", spec.name}},
      {"env", s.job_credentials ? Json::array({EnvField("POD_IP", "status.podIP"), TokenEnv(spec)})
                                : Json::array({EnvField("POD_IP", "status.podIP")})},
      {"ports", Json::array({{{"name", "grpc"}, {"containerPort", s.sharding_port}},
                             {{"name", "metrics"}, {"containerPort", s.metrics_port}}})},
      {"readinessProbe",
       {{"grpc", {{"port", s.sharding_port}}}, {"periodSeconds", 5}, {"failureThreshold", 3}}}};
  // Without job credentials (the operator's choice, said in its flags) the
  // service is told so: it refuses to start for want of a token otherwise.
  if (!s.job_credentials) {
    container["args"].push_back("--auth");
    container["args"].push_back("none");
  }
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", Metadata(job, spec, ShardingName(spec.name), Labels(spec, "sharding", s))},
      {"spec", {{"restartPolicy", "Always"}, {"containers", Json::array({container})}}}};
  if (ShardingStateOnClaim(job, spec)) {
    // The job's claim (RenderShardingClaim): the state outlives the pod.
    pod["spec"]["volumes"] = Json::array(
        {{{"name", "state"}, {"persistentVolumeClaim", {{"claimName", ShardingClaimName(spec)}}}}});
    pod["spec"]["containers"][0]["volumeMounts"] =
        Json::array({{{"name", "state"}, {"mountPath", state_dir}}});
  } else if (own_state) {
    pod["spec"]["volumes"] = Json::array({{{"name", "state"}, {"emptyDir", Json::object()}}});
    pod["spec"]["containers"][0]["volumeMounts"] =
        Json::array({{{"name", "state"}, {"mountPath", kDefaultShardingStateDir}}});
  } else {
    AddCheckpointVolume(job, spec, pod);
  }
  MergePodTemplate(pod, Get(Get(Get(job, "spec"), "shardingService"), "template"));
  // The state on no shared volume: the pod's own (lost with it, as without one).
  EnsureWritable(pod["spec"], state_dir, "state");
  ApplySecureDefaults(pod["spec"], {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}},
                                    {"limits", {{"memory", "1Gi"}}}});
  UseTls(s, pod);
  return pod;
}

Json RenderPodGroup(const Json& job, const manifest::Job& spec, const Settings& s) {
  if (s.gang_scheduler.empty()) return nullptr;
  const manifest::RunPolicySpec& rp = spec.run_policy;
  const int32_t members = rp.min_available > 0
                              ? rp.min_available
                              : spec.workers.replicas + jobconfig::ParameterServerCount(spec);
  Json group = {{"metadata", Metadata(job, spec, spec.name, Labels(spec, "gang", s))},
                {"spec", {{"minMember", members}}}};
  if (s.gang_scheduler == "volcano") {
    group["apiVersion"] = "scheduling.volcano.sh/v1beta1";
    if (!rp.queue.empty()) group["spec"]["queue"] = rp.queue;
  } else {
    group["apiVersion"] = "scheduling.x-k8s.io/v1alpha1";
    if (rp.schedule_timeout_seconds > 0) {
      group["spec"]["scheduleTimeoutSeconds"] = rp.schedule_timeout_seconds;
    }
  }
  group["kind"] = "PodGroup";
  return group;
}

// A gang member: in the job's PodGroup, scheduled by the gang scheduler
// (unless its template names another scheduler).
void JoinGang(const manifest::Job& spec, const Settings& s, Json& pod) {
  if (s.gang_scheduler.empty()) return;
  if (s.gang_scheduler == "volcano") {
    pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] = spec.name;
  } else {
    pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = spec.name;
  }
  if (!pod["spec"].contains("schedulerName")) {
    pod["spec"]["schedulerName"] =
        s.gang_scheduler == "volcano" ? "volcano" : "scheduler-plugins-scheduler";
  }
}

// The flags of server k's checkpoints under the job's state directory (with
// spec.checkpoint.everySteps): the first server also checkpoints the data
// position, with the job's credential.
std::vector<std::string> CheckpointFlags(const manifest::Job& spec, int32_t k, const Settings& s) {
  const std::string dir = JobStateDir(spec);
  if (dir.empty() || spec.checkpoint.every_steps <= 0) return {};
  std::vector<std::string> flags = {"--checkpoint-dir", dir + "/ps", "--checkpoint-every-steps",
                                    std::to_string(spec.checkpoint.every_steps)};
  if (k == 0) {
    flags.insert(flags.end(), {"--sharding", ShardingAddress(spec, s), "--job", spec.name,
                               "--dataset", "train"});
  }
  return flags;
}

Json RenderParameterServerPod(const Json& job, const manifest::Job& spec, int32_t k,
                              const Settings& s, const ServerInstance& inst,
                              const std::string& take_over) {
  const std::string name = PsPodName(spec.name, k, inst.incarnation);
  Json labels = Labels(spec, "ps", s);
  labels[vocab::kLabelReplicaIndex] = std::to_string(k);
  labels[vocab::kLabelIncarnation] = std::to_string(inst.incarnation);
  const int32_t slice = jobconfig::ParameterServerFeatures(spec, k);
  const int32_t backup = spec.straggler_policy.name == vocab::Policy::kBackupWorkers
                             ? spec.straggler_policy.backup_workers
                             : 0;
  std::vector<Json> env = ParameterServerVariables(spec, s);
  env.push_back(EnvValue("ANTDT_PS_INDEX", std::to_string(k)));
  env.push_back(EnvValue("ANTDT_PS_ID", vocab::MemberName(vocab::Role::kParameterServer, k)));
  env.push_back(EnvValue("ANTDT_PS_FEATURES", std::to_string(slice)));
  std::vector<std::string> args = {"--listen",
                                   absl::StrCat("$(POD_IP):", s.ps_port),
                                   "--id",
                                   vocab::MemberName(vocab::Role::kParameterServer, k),
                                   "--features",
                                   std::to_string(slice),
                                   "--workers",
                                   std::to_string(spec.workers.replicas),
                                   "--backup",
                                   std::to_string(backup),
                                   "--learning-rate",
                                   FormatDouble(spec.model.learning_rate),
                                   "--step-timeout",
                                   "30s"};
  if (const double deadline =
          jobconfig::StepDeadline(spec, spec.straggler_policy.name, spec.straggler_policy.mode);
      deadline > 0) {
    args.insert(args.end(), {"--step-deadline", FormatDouble(deadline)});
  }
  if (const double floor = jobconfig::StepDeadlineFloor(spec, spec.straggler_policy.name,
                                                        spec.straggler_policy.mode);
      floor > 0) {
    args.insert(args.end(), {"--step-deadline-floor", FormatDouble(floor)});
  }
  const std::vector<std::string> checkpoints = CheckpointFlags(spec, k, s);
  args.insert(args.end(), checkpoints.begin(), checkpoints.end());
  if (!take_over.empty()) {
    args.insert(args.end(),
                {"--take-over", take_over, "--advertise", absl::StrCat("$(POD_IP):", s.ps_port)});
  }
  // A container restarted in place, or a move whose old server is gone before
  // it handed over: the server's own newest checkpoint.
  if (!checkpoints.empty()) args.insert(args.end(), {"--restore-step", "latest"});
  // The job's credential: every call to the server must carry it (and the
  // server sends it to the sharding service and the server it takes over).
  if (s.job_credentials) env.push_back(TokenEnv(spec));
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", Metadata(job, spec, name, labels)},
      {"spec",
       {{"containers",
         Json::array(
             {{{"name", "ps"},
               {"image", s.image},
               {"command", Json::array({"antdt-ps"})},
               {"args", args},
               {"ports", Json::array({{{"name", "grpc"}, {"containerPort", s.ps_port}}})}}})}}}};
  MergePodTemplate(pod, Get(Get(Get(job, "spec"), "parameterServers"), "template"));
  ApplySecureDefaults(pod["spec"], {{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}}});
  PrependEnv(pod["spec"]["containers"][0], env);
  if (!checkpoints.empty()) AddCheckpointVolume(job, spec, pod);
  AddNodeAffinity(pod["spec"], inst.excluded_nodes, inst.node);
  pod["spec"]["hostname"] = PsPodName(spec.name, k);  // every incarnation's
  pod["spec"]["subdomain"] = PsServiceName(spec.name);
  pod["spec"]["restartPolicy"] = "Always";
  JoinGang(spec, s, pod);
  UseTls(s, pod);
  return pod;
}

Json RenderWorkerPod(const Json& job, const manifest::Job& spec, const WorkerInstance& instance,
                     const Settings& s, const std::vector<std::string>& avoided) {
  Json labels = Labels(spec, "worker", s);
  labels[vocab::kLabelWorkerId] = instance.id;
  labels[vocab::kLabelIncarnation] = std::to_string(instance.incarnation);
  Json pod = FromTemplate(job, spec, WorkerTemplate(job), WorkerPodName(spec.name, instance.index),
                          labels);
  Json& pod_spec = pod["spec"];
  if (!Get(pod_spec, "containers").is_array() || pod_spec["containers"].empty()) {
    // The built-in trainer, from AntDT's image: its secure defaults too. A
    // job's own worker container is the job's business.
    pod_spec["containers"] = Json::array({DefaultWorkerContainer(spec, s)});
    EnsureWritable(pod_spec, spec.checkpoint.path, "checkpoint");  // the journal
    ApplySecureDefaults(pod_spec, {{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}}});
  }
  PrependEnv(pod_spec["containers"][0], WorkerVariables(spec, s, instance));
  // A stable DNS name across incarnations: <hostname>.<job>-workers.<namespace>.svc, MASTER_ADDR
  // for worker-0.
  pod_spec["hostname"] = WorkerHostname(spec.name, instance.index);
  pod_spec["subdomain"] = WorkersServiceName(spec.name);
  pod_spec["restartPolicy"] = "Never";  // the operator restarts workers, as new pods
  AddNodeAffinity(pod_spec, instance.excluded_nodes, instance.node);
  AvoidNodes(pod_spec, avoided, instance.excluded_nodes, spec.straggler_policy.avoid_slow_nodes);
  JoinGang(spec, s, pod);
  UseTls(s, pod);
  return pod;
}

// ---- Reconcile, step by step ----

}  // namespace antdt::reconciler
