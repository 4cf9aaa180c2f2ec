#include "operator/reconciler/reconciler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "operator/bridge/bridge.h"
#include "operator/kube/object.h"

namespace antdt::reconciler {
namespace {

constexpr char kJobApiVersion[] = "antdt.io/v1alpha1";
constexpr char kHostnameKey[] = "kubernetes.io/hostname";
constexpr char kDataset[] = "train";
constexpr char kDefaultShardingStateDir[] = "/var/lib/antdt/sharding";
constexpr size_t kMaxLastActions = 20;
constexpr int64_t kRunningRequeueMs = 2000;

// ---- JSON access that never throws on a missing or mistyped field ----

const Json& Get(const Json& j, const std::string& key) {
  static const Json kNull;
  if (!j.is_object()) return kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

std::string GetString(const Json& j, const std::string& key) {
  const Json& v = Get(j, key);
  return v.is_string() ? v.get<std::string>() : "";
}

int64_t GetInt(const Json& j, const std::string& key, int64_t fallback) {
  const Json& v = Get(j, key);
  return v.is_number() ? v.get<int64_t>() : fallback;
}

// ---- Pods as observed ----

std::string Name(const Json& obj) { return GetString(Get(obj, "metadata"), "name"); }
std::string Uid(const Json& obj) { return GetString(Get(obj, "metadata"), "uid"); }
bool Finished(const Json& pod) {
  const std::string phase = kube::PodPhase(pod);
  return phase == "Succeeded" || phase == "Failed";
}
bool IsRunning(const Json* pod) {
  return pod != nullptr && !kube::Terminating(*pod) && kube::PodPhase(*pod) == "Running";
}
bool IsActive(const Json* pod) {
  return pod != nullptr && !kube::Terminating(*pod) && !Finished(*pod);
}
// Running, and Ready when the kubelet reports readiness.
bool IsReady(const Json* pod) {
  if (!IsRunning(pod)) return false;
  const Json& conditions = Get(Get(*pod, "status"), "conditions");
  if (!conditions.is_array()) return true;
  for (const Json& c : conditions) {
    if (GetString(c, "type") == "Ready") return GetString(c, "status") == "True";
  }
  return true;
}
bool IsSucceeded(const Json* pod) { return pod != nullptr && kube::PodPhase(*pod) == "Succeeded"; }

// Why a pod failed, from its status: "exit code 1 (Error)", or the pod's reason.
std::string FailureText(const Json& pod) {
  const Json& st = Get(pod, "status");
  const Json& statuses = Get(st, "containerStatuses");
  if (statuses.is_array() && !statuses.empty()) {
    const Json& t = Get(Get(statuses[0], "state"), "terminated");
    if (t.is_object()) {
      std::string out = absl::StrCat("exit code ", GetInt(t, "exitCode", -1));
      if (!GetString(t, "reason").empty()) absl::StrAppend(&out, " (", GetString(t, "reason"), ")");
      return out;
    }
  }
  std::string out = GetString(st, "reason");
  if (!GetString(st, "message").empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ": ", GetString(st, "message"));
  }
  return out.empty() ? "phase Failed" : out;
}

// ---- Rendering ----

Json EnvValue(const std::string& name, const std::string& value) {
  return {{"name", name}, {"value", value}};
}
Json EnvField(const std::string& name, const std::string& field_path) {
  return {{"name", name}, {"valueFrom", {{"fieldRef", {{"fieldPath", field_path}}}}}};
}

Json Labels(const manifest::Job& spec, const std::string& role, const Settings& s) {
  return {{"app.kubernetes.io/name", "antdt"},
          {"app.kubernetes.io/managed-by", s.manager},
          {"app.kubernetes.io/instance", spec.name},
          {"antdt.io/job", spec.name},
          {"antdt.io/role", role}};
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

std::string PsAddresses(const manifest::Job& spec, const Settings& s) {
  std::vector<std::string> out;
  for (int32_t k = 0; k < bridge::ParameterServerCount(spec); ++k) {
    out.push_back(absl::StrCat(PsPodName(spec.name, k), ".", PsServiceName(spec.name), ".",
                               spec.namespace_, ".svc:", s.ps_port));
  }
  return absl::StrJoin(out, ",");
}

std::string FormatDouble(double v) { return absl::StrCat(v); }

// The variables every pod of the job gets, first in containers[0].env, so the
// user's env and args can refer to them as $(VAR).
std::vector<Json> CommonEnv(const manifest::Job& spec, const Settings& s) {
  return {EnvField("POD_IP", "status.podIP"),
          EnvField("HOST_IP", "status.hostIP"),
          EnvField("NODE_NAME", "spec.nodeName"),
          EnvValue("ANTDT_JOB", spec.name),
          EnvValue("ANTDT_NAMESPACE", spec.namespace_),
          EnvValue("ANTDT_DATASET", kDataset),
          EnvValue("ANTDT_WORKERS", std::to_string(spec.workers.replicas)),
          EnvValue("ANTDT_SHARDING_ADDR", ShardingAddress(spec, s)),
          EnvValue("ANTDT_PS_ADDRS", PsAddresses(spec, s)),
          EnvValue("ANTDT_AGENT_ADDR", absl::StrCat("$(HOST_IP):", s.agent_port)),
          EnvValue("ANTDT_GLOBAL_BATCH", std::to_string(spec.model.global_batch_size)),
          EnvValue("ANTDT_FEATURES", std::to_string(spec.model.features)),
          EnvValue("ANTDT_LEARNING_RATE", FormatDouble(spec.model.learning_rate)),
          EnvValue("ANTDT_CHECKPOINT_PATH", spec.checkpoint.path)};
}

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
void AddCheckpointVolume(const Json& job, const manifest::Job& spec, Json& pod) {
  const std::string& path = spec.checkpoint.path;
  if (path.empty()) return;
  const Json& tspec = Get(WorkerTemplate(job), "spec");
  const Json& containers = Get(tspec, "containers");
  if (!containers.is_array() || containers.empty()) return;
  const Json& mounts = Get(containers[0], "volumeMounts");
  const Json& volumes = Get(tspec, "volumes");
  if (!mounts.is_array() || !volumes.is_array()) return;
  for (const Json& m : mounts) {
    const std::string mount_path = GetString(m, "mountPath");
    if (mount_path.empty() ||
        !(path == mount_path || absl::StartsWith(path, absl::StrCat(mount_path, "/")) ||
          mount_path == "/")) {
      continue;
    }
    for (const Json& v : volumes) {
      if (GetString(v, "name") != GetString(m, "name")) continue;
      pod["spec"]["volumes"].push_back(v);
      pod["spec"]["containers"][0]["volumeMounts"].push_back(m);
      return;
    }
  }
}

// Excluded nodes as a required NotIn term, ANDed into every existing
// nodeSelectorTerm (terms are ORed, so each must exclude them), and the
// Controller's chosen node as a preference.
void AddNodeAffinity(Json& pod_spec, const std::vector<std::string>& excluded,
                     const std::string& preferred) {
  if (!excluded.empty()) {
    const Json expr = {{"key", kHostnameKey}, {"operator", "NotIn"}, {"values", excluded}};
    Json& terms = pod_spec["affinity"]["nodeAffinity"]
                          ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
    if (!terms.is_array() || terms.empty()) {
      terms = Json::array();
      terms.push_back({{"matchExpressions", Json::array({expr})}});
    } else {
      for (Json& term : terms) term["matchExpressions"].push_back(expr);
    }
  }
  if (!preferred.empty() &&
      std::find(excluded.begin(), excluded.end(), preferred) == excluded.end()) {
    const Json expr = {
        {"key", kHostnameKey}, {"operator", "In"}, {"values", Json::array({preferred})}};
    Json term = {{"weight", 100}, {"preference", {{"matchExpressions", Json::array({expr})}}}};
    pod_spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        .push_back(term);
  }
}

// The demo trainer, for a job whose workers' template names no container.
Json DefaultWorkerContainer(const manifest::Job& spec, const Settings& s) {
  const std::string journal = spec.checkpoint.path.empty()
                                  ? "/tmp/$(ANTDT_WORKER_ID).journal"
                                  : "$(ANTDT_CHECKPOINT_PATH)/$(ANTDT_WORKER_ID).journal";
  return {{"name", "trainer"},
          {"image", s.image},
          {"command", Json::array({"antdt-trainer-worker"})},
          {"args",
           {"--sharding",    "$(ANTDT_SHARDING_ADDR)", "--job",         "$(ANTDT_JOB)",
            "--dataset",     "$(ANTDT_DATASET)",       "--worker-id",   "$(ANTDT_WORKER_ID)",
            "--incarnation", "$(ANTDT_INCARNATION)",   "--journal",     journal,
            "--ps",          "$(ANTDT_PS_ADDRS)",      "--features",    "$(ANTDT_FEATURES)",
            "--agent",       "$(ANTDT_AGENT_ADDR)",    "--local-batch", "$(ANTDT_LOCAL_BATCH)"}}};
}

// ---- Status ----

std::string Plural(int64_t n, const std::string& one, const std::string& many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

double Round2(double v) { return std::round(v * 100.0) / 100.0; }

bool ConditionTrue(const Json& status, const std::string& type) {
  const Json* c = FindCondition(status, type);
  return c != nullptr && GetString(*c, "status") == "True";
}

std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool IsStraggler(const Straggler& s) { return s.klass != "Leader" && s.klass != "LEADER"; }

// An ADJUST_BS deserves an Event when it is about a straggler, not when it only
// keeps the global batch constant around one.
bool NamesStraggler(const Action& a, const std::vector<Straggler>& stragglers) {
  if (absl::StrContains(ToLower(absl::StrCat(a.reason, " ", a.evidence)), "straggler")) return true;
  for (const Straggler& s : stragglers) {
    if (IsStraggler(s) && s.worker == a.worker) return true;
  }
  return false;
}

Json LastAction(const Action& a, int64_t now_ms) {
  return {{"time", kube::FormatTime(a.at_ms != 0 ? a.at_ms : now_ms)},
          {"action", a.kind},
          {"worker", a.worker},
          {"fromNode", a.from_node},
          {"toNode", a.to_node},
          {"rule", a.rule},
          {"reason", a.reason},
          {"evidence", a.evidence}};
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

void AddWrite(Plan& plan, Write w) { plan.writes.push_back(std::move(w)); }

Write Create(const std::string& resource, Json object, std::string reason) {
  Write w;
  w.kind = Write::Kind::kCreate;
  w.resource = resource;
  w.name = Name(object);
  w.object = std::move(object);
  w.reason = std::move(reason);
  return w;
}

Write Delete(const Json& pod, int64_t grace, std::string reason) {
  Write w;
  w.kind = Write::Kind::kDelete;
  w.resource = "pods";
  w.name = Name(pod);
  w.uid = Uid(pod);
  w.grace_period_seconds = grace;
  w.reason = std::move(reason);
  return w;
}

// The plan for a spec that does not parse: Failed=True InvalidSpec, nothing
// else touched.
Plan InvalidSpecPlan(const Observed& o, const Json& old_status, int64_t generation) {
  Plan plan;
  Json status = old_status.is_object() ? old_status : Json::object();
  const std::string message(o.spec.status().message());
  const Json* failed = FindCondition(status, "Failed");
  const bool already = failed != nullptr && GetString(*failed, "reason") == "InvalidSpec" &&
                       GetString(*failed, "message") == message &&
                       GetString(*failed, "status") == "True";
  Json conditions =
      Get(status, "conditions").is_array() ? Get(status, "conditions") : Json::array();
  auto set = [&](const char* type, const char* st, const char* reason, const std::string& msg) {
    SetCondition(conditions, type, st, reason, msg, generation, o.now_ms);
  };
  const bool was_created = ConditionTrue(status, "Created");
  if (!was_created)
    set("Created", "False", "InvalidSpec", "nothing is created for an invalid spec");
  set("Running", "False", "InvalidSpec", "the spec is invalid");
  set("StragglersDetected", "False", "NoStragglers", "no stragglers");
  set("Mitigating", "False", "NoMitigation", "no action in progress");
  set("Succeeded", "False", "InvalidSpec", "the spec is invalid");
  set("Failed", "True", "InvalidSpec", message);
  status["conditions"] = conditions;
  status["observedGeneration"] = generation;
  if (!status.contains("startTime")) status["startTime"] = kube::FormatTime(o.now_ms);
  if (!already) plan.events.push_back({"Warning", "InvalidSpec", message});
  if (status != old_status) plan.status = std::move(status);
  return plan;
}

}  // namespace

// ---- Public helpers ----

std::string ShardingName(const std::string& job) { return job + "-sharding"; }
std::string PsServiceName(const std::string& job) { return job + "-ps"; }
std::string PsPodName(const std::string& job, int32_t k) { return absl::StrCat(job, "-ps-", k); }
std::string WorkerPodName(const std::string& job, int32_t index, int64_t incarnation) {
  return absl::StrCat(job, "-worker-", index, "-", incarnation);
}

Json ToJson(const WorkerInstance& w) {
  return {
      {"id", w.id},   {"incarnation", w.incarnation},         {"node", w.node},
      {"pod", w.pod}, {"localBatchSize", w.local_batch_size}, {"excludedNodes", w.excluded_nodes}};
}

WorkerInstance WorkerInstanceFromJson(const Json& j) {
  WorkerInstance w;
  w.id = GetString(j, "id");
  int32_t index = 0;
  if (absl::StartsWith(w.id, "worker-") && absl::SimpleAtoi(w.id.substr(7), &index)) {
    w.index = index;
  }
  w.incarnation = GetInt(j, "incarnation", 0);
  w.node = GetString(j, "node");
  w.pod = GetString(j, "pod");
  w.local_batch_size = static_cast<int32_t>(GetInt(j, "localBatchSize", 0));
  const Json& excluded = Get(j, "excludedNodes");
  if (excluded.is_array()) {
    for (const Json& e : excluded) {
      if (e.is_string()) w.excluded_nodes.push_back(e.get<std::string>());
    }
  }
  return w;
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

// ---- Renderers ----

std::vector<Json> RenderServices(const Json& job, const manifest::Job& spec, const Settings& s) {
  auto service = [&](const std::string& name, const std::string& role, int32_t port) {
    const Json labels = Labels(spec, role, s);
    return Json{
        {"apiVersion", "v1"},
        {"kind", "Service"},
        {"metadata", Metadata(job, spec, name, labels)},
        {"spec",
         {{"clusterIP", "None"},
          // Workers resolve the servers while they start, before readiness.
          {"publishNotReadyAddresses", true},
          {"selector", {{"antdt.io/job", spec.name}, {"antdt.io/role", role}}},
          {"ports",
           Json::array(
               {{{"name", "grpc"}, {"port", port}, {"targetPort", port}, {"protocol", "TCP"}}})}}}};
  };
  return {service(ShardingName(spec.name), "sharding", s.sharding_port),
          service(PsServiceName(spec.name), "ps", s.ps_port)};
}

Json RenderShardingPod(const Json& job, const manifest::Job& spec, const Settings& s) {
  const bool own_state = spec.checkpoint.path.empty();
  const std::string state_dir =
      own_state ? kDefaultShardingStateDir : spec.checkpoint.path + "/sharding";
  Json container = {
      {"name", "sharding"},
      {"image", s.image},
      {"command", Json::array({"antdt-sharding-service"})},
      {"args",
       {"--listen", absl::StrCat("$(POD_IP):", s.sharding_port), "--metrics-listen",
        absl::StrCat("$(POD_IP):", s.metrics_port), "--state-dir", state_dir, "--lease-ttl",
        "10s"}},
      {"env", Json::array({EnvField("POD_IP", "status.podIP")})},
      {"ports", Json::array({{{"name", "grpc"}, {"containerPort", s.sharding_port}},
                             {{"name", "metrics"}, {"containerPort", s.metrics_port}}})},
      {"readinessProbe",
       {{"grpc", {{"port", s.sharding_port}}}, {"periodSeconds", 5}, {"failureThreshold", 3}}}};
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", Metadata(job, spec, ShardingName(spec.name), Labels(spec, "sharding", s))},
      {"spec", {{"restartPolicy", "Always"}, {"containers", Json::array({container})}}}};
  if (own_state) {
    pod["spec"]["volumes"] = Json::array({{{"name", "state"}, {"emptyDir", Json::object()}}});
    pod["spec"]["containers"][0]["volumeMounts"] =
        Json::array({{{"name", "state"}, {"mountPath", kDefaultShardingStateDir}}});
  } else {
    AddCheckpointVolume(job, spec, pod);
  }
  return pod;
}

Json RenderParameterServerPod(const Json& job, const manifest::Job& spec, int32_t k,
                              const Settings& s) {
  const std::string name = PsPodName(spec.name, k);
  Json labels = Labels(spec, "ps", s);
  labels["antdt.io/replica-index"] = std::to_string(k);
  const int32_t slice = bridge::ParameterServerFeatures(spec, k);
  const int32_t backup =
      spec.straggler_policy.name == "backup-workers" ? spec.straggler_policy.backup_workers : 0;
  std::vector<Json> env = CommonEnv(spec, s);
  env.push_back(EnvValue("ANTDT_PS_INDEX", std::to_string(k)));
  env.push_back(EnvValue("ANTDT_PS_ID", absl::StrCat("ps-", k)));
  env.push_back(EnvValue("ANTDT_PS_FEATURES", std::to_string(slice)));
  const Json& tmpl = Get(Get(Get(job, "spec"), "parameterServers"), "template");
  Json pod;
  if (tmpl.is_object() && Get(Get(tmpl, "spec"), "containers").is_array() &&
      !Get(Get(tmpl, "spec"), "containers").empty()) {
    pod = FromTemplate(job, spec, tmpl, name, labels);
  } else {
    pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", Metadata(job, spec, name, labels)},
        {"spec",
         {{"containers",
           Json::array(
               {{{"name", "ps"},
                 {"image", s.image},
                 {"command", Json::array({"antdt-ps"})},
                 {"args",
                  {"--listen", absl::StrCat("$(POD_IP):", s.ps_port), "--id",
                   absl::StrCat("ps-", k), "--features", std::to_string(slice), "--workers",
                   std::to_string(spec.workers.replicas), "--backup", std::to_string(backup),
                   "--learning-rate", FormatDouble(spec.model.learning_rate), "--step-timeout",
                   "30s"}},
                 {"ports", Json::array({{{"name", "grpc"}, {"containerPort", s.ps_port}}})}}})}}}};
  }
  PrependEnv(pod["spec"]["containers"][0], env);
  pod["spec"]["hostname"] = name;
  pod["spec"]["subdomain"] = PsServiceName(spec.name);
  pod["spec"]["restartPolicy"] = "Always";
  return pod;
}

Json RenderWorkerPod(const Json& job, const manifest::Job& spec, const WorkerInstance& instance,
                     const Settings& s) {
  Json labels = Labels(spec, "worker", s);
  labels["antdt.io/worker-id"] = instance.id;
  labels["antdt.io/incarnation"] = std::to_string(instance.incarnation);
  Json pod = FromTemplate(job, spec, WorkerTemplate(job),
                          WorkerPodName(spec.name, instance.index, instance.incarnation), labels);
  Json& pod_spec = pod["spec"];
  if (!Get(pod_spec, "containers").is_array() || pod_spec["containers"].empty()) {
    pod_spec["containers"] = Json::array({DefaultWorkerContainer(spec, s)});
  }
  std::vector<Json> env = CommonEnv(spec, s);
  env.push_back(EnvValue("ANTDT_WORKER_ID", instance.id));
  env.push_back(EnvValue("ANTDT_INCARNATION", std::to_string(instance.incarnation)));
  env.push_back(EnvValue("ANTDT_LOCAL_BATCH", std::to_string(instance.local_batch_size)));
  PrependEnv(pod_spec["containers"][0], env);
  pod_spec["restartPolicy"] = "Never";  // the operator restarts workers, as new pods
  AddNodeAffinity(pod_spec, instance.excluded_nodes, instance.node);
  return pod;
}

// ---- Reconcile ----

Plan Reconcile(const Observed& o, const Settings& s) {
  const Json& meta = Get(o.job, "metadata");
  // Being deleted: the garbage collector removes the children.
  if (!Get(meta, "deletionTimestamp").is_null()) return Plan{};
  const int64_t generation = GetInt(meta, "generation", 0);
  const Json& old_status = Get(o.job, "status");
  if (!o.spec.ok()) return InvalidSpecPlan(o, old_status, generation);

  Plan plan;
  const manifest::Job& spec = *o.spec;
  const std::string& job = spec.name;
  const int32_t n = spec.workers.replicas;
  const int32_t p = bridge::ParameterServerCount(spec);
  const int64_t now = o.now_ms;

  // Durable records from the previous status.
  std::map<std::string, WorkerInstance> recorded;
  if (Get(old_status, "workerInstances").is_array()) {
    for (const Json& j : old_status["workerInstances"]) {
      WorkerInstance w = WorkerInstanceFromJson(j);
      recorded[w.id] = w;
    }
  }
  std::vector<WorkerInstance> instances;
  for (int32_t i = 0; i < n; ++i) {
    const std::string id = absl::StrCat("worker-", i);
    auto it = recorded.find(id);
    WorkerInstance w;
    if (it != recorded.end()) {
      w = it->second;
    } else {
      w.id = id;
      w.local_batch_size = static_cast<int32_t>(bridge::InitialLocalBatch(spec, i));
    }
    w.index = i;
    w.pod = WorkerPodName(job, i, w.incarnation);
    instances.push_back(std::move(w));
  }
  Json last_actions =
      Get(old_status, "lastActions").is_array() ? Get(old_status, "lastActions") : Json::array();
  int64_t failures = GetInt(Get(old_status, "workers"), "failed", 0);
  const bool dataset_created = o.dataset_ready || Get(old_status, "datasetCreated") == true;
  std::optional<int64_t> completion;
  if (!GetString(old_status, "completionTime").empty()) {
    completion = kube::ParseTime(GetString(old_status, "completionTime"));
  }
  const Json* old_failed = FindCondition(old_status, "Failed");
  const bool was_succeeded = ConditionTrue(old_status, "Succeeded");
  const bool was_failed = old_failed != nullptr && GetString(*old_failed, "status") == "True" &&
                          GetString(*old_failed, "reason") != "InvalidSpec";
  bool succeeded = was_succeeded;
  bool failed = was_failed;
  std::string failed_message = was_failed ? GetString(*old_failed, "message") : "";

  // The observed children.
  std::map<std::string, const Json*> pod_by_name;
  std::map<std::string, std::vector<const Json*>> pods_of_worker;
  for (const Json& pod : o.pods) {
    pod_by_name[Name(pod)] = &pod;
    if (kube::Label(pod, "antdt.io/role") == "worker" &&
        !kube::Label(pod, "antdt.io/worker-id").empty()) {
      pods_of_worker[kube::Label(pod, "antdt.io/worker-id")].push_back(&pod);
    }
  }
  std::set<std::string> service_names;
  for (const Json& svc : o.services) service_names.insert(Name(svc));
  auto find_pod = [&](const std::string& name) -> const Json* {
    auto it = pod_by_name.find(name);
    return it == pod_by_name.end() ? nullptr : it->second;
  };
  auto find_instance = [&](const std::string& id) -> WorkerInstance* {
    for (WorkerInstance& w : instances) {
      if (w.id == id) return &w;
    }
    return nullptr;
  };

  if (!succeeded && !failed) {
    // The Controller's decisions.
    for (const Action& a : o.actions) {
      WorkerInstance* w = find_instance(a.worker);
      if (w == nullptr || (a.kind != "KILL_RESTART" && a.kind != "ADJUST_BS")) {
        plan.events.push_back({"Warning", "ActionIgnored",
                               absl::StrCat(a.kind, " for ", a.worker,
                                            ": the operator carries out KILL_RESTART and "
                                            "ADJUST_BS for the job's workers only")});
        continue;
      }
      if (a.kind == "KILL_RESTART") {
        const std::string old_pod = w->pod;
        ++w->incarnation;
        w->pod = WorkerPodName(job, w->index, w->incarnation);
        if (!a.from_node.empty() && std::find(w->excluded_nodes.begin(), w->excluded_nodes.end(),
                                              a.from_node) == w->excluded_nodes.end()) {
          w->excluded_nodes.push_back(a.from_node);
        }
        w->node = a.to_node;
        plan.events.push_back(
            {"Warning", "StragglerRestarted",
             absl::StrCat("restarted ", w->id, " (pod ", old_pod, ") from node ",
                          a.from_node.empty() ? "?" : a.from_node, " to ",
                          a.to_node.empty() ? "any other node" : "node " + a.to_node,
                          " as incarnation ", w->incarnation, ": rule ", a.rule, "; ", a.reason,
                          a.evidence.empty() ? "" : "; evidence: " + a.evidence)});
      } else {
        if (a.local_batch_size > 0) w->local_batch_size = a.local_batch_size;
        if (NamesStraggler(a, o.stragglers)) {
          plan.events.push_back(
              {"Normal", "BatchSizeAdjusted",
               absl::StrCat(w->id, " local batch set to ", a.local_batch_size, ": rule ", a.rule,
                            "; ", a.reason,
                            a.evidence.empty() ? "" : "; evidence: " + a.evidence)});
        }
      }
      last_actions.push_back(LastAction(a, now));
    }
    if (last_actions.size() > kMaxLastActions) {
      last_actions.erase(last_actions.begin(),
                         last_actions.begin() +
                             static_cast<std::ptrdiff_t>(last_actions.size() - kMaxLastActions));
    }

    // Failed workers: restarted in place up to the backoff limit.
    for (WorkerInstance& w : instances) {
      const Json* pod = find_pod(w.pod);
      if (pod == nullptr || kube::Terminating(*pod) || kube::PodPhase(*pod) != "Failed") continue;
      ++failures;
      const std::string node = GetString(Get(*pod, "spec"), "nodeName");
      const std::string what =
          absl::StrCat(w.id, " failed (pod ", w.pod, node.empty() ? "" : " on node " + node, ": ",
                       FailureText(*pod), ")");
      if (failures > spec.run_policy.backoff_limit) {
        failed = true;
        failed_message =
            absl::StrCat(what, "; ", failures, " worker failures exceed ",
                         "spec.runPolicy.backoffLimit ", spec.run_policy.backoff_limit);
        plan.events.push_back({"Warning", "BackoffLimitExceeded", failed_message});
        break;
      }
      ++w.incarnation;
      w.pod = WorkerPodName(job, w.index, w.incarnation);
      w.node.clear();
      plan.events.push_back(
          {"Warning", "WorkerFailed",
           absl::StrCat(what, "; restarting as incarnation ", w.incarnation, " (failure ", failures,
                        " of backoffLimit ", spec.run_policy.backoff_limit, ")")});
    }

    // Success: every worker's pod succeeded.
    if (!failed) {
      bool all = n > 0;
      for (const WorkerInstance& w : instances) all = all && IsSucceeded(find_pod(w.pod));
      if (all) {
        succeeded = true;
        plan.events.push_back(
            {"Normal", "JobSucceeded",
             absl::StrCat("all ", Plural(n, "worker", "workers"), " succeeded",
                          o.progress ? absl::StrCat("; ", o.progress->records_committed,
                                                    " records committed")
                                     : "")});
      }
    }
    if (succeeded || failed) completion = (now / 1000) * 1000;
  }
  const bool finished = succeeded || failed;

  // Where each worker's desired pod runs.
  for (WorkerInstance& w : instances) {
    const Json* pod = find_pod(w.pod);
    if (pod == nullptr) continue;
    const std::string node = GetString(Get(*pod, "spec"), "nodeName");
    if (!node.empty()) w.node = node;
  }

  // ---- Writes ----
  if (!finished) {
    for (Json& svc : RenderServices(o.job, spec, s)) {
      if (service_names.count(Name(svc)) == 0) {
        AddWrite(plan, Create("services", std::move(svc), "missing"));
      }
    }
    // A server pod that failed (evicted, say) is deleted, and created again
    // once it is gone.
    auto ensure_server = [&](const std::string& name, const std::function<Json()>& render) {
      const Json* pod = find_pod(name);
      if (pod == nullptr) {
        AddWrite(plan, Create("pods", render(), "missing"));
      } else if (!kube::Terminating(*pod) && kube::PodPhase(*pod) == "Failed") {
        AddWrite(plan,
                 Delete(*pod, -1,
                        absl::StrCat("failed (", FailureText(*pod), "); created again once gone")));
      }
    };
    ensure_server(ShardingName(job), [&] { return RenderShardingPod(o.job, spec, s); });
    if (dataset_created) {
      for (int32_t k = 0; k < p; ++k) {
        ensure_server(PsPodName(job, k),
                      [&] { return RenderParameterServerPod(o.job, spec, k, s); });
      }
      for (const WorkerInstance& w : instances) {
        bool others = false;
        for (const Json* pod : pods_of_worker[w.id]) {
          if (Name(*pod) == w.pod) continue;
          others = true;
          if (!kube::Terminating(*pod)) {
            AddWrite(plan,
                     Delete(*pod, 0, absl::StrCat("superseded by incarnation ", w.incarnation)));
          }
        }
        if (others || find_pod(w.pod) != nullptr) continue;
        if (w.incarnation > 0) {
          Write leave;
          leave.kind = Write::Kind::kLeaveParameterServers;
          leave.worker = w.id;
          leave.reason = absl::StrCat("incarnation ", w.incarnation - 1, " is gone");
          AddWrite(plan, std::move(leave));
        }
        AddWrite(plan, Create("pods", RenderWorkerPod(o.job, spec, w, s),
                              w.incarnation > 0 ? absl::StrCat("incarnation ", w.incarnation)
                                                : "missing"));
      }
    }
  } else {
    // Finished: stop what still runs (the servers never exit by themselves).
    std::vector<const Json*> sorted;
    for (const Json& pod : o.pods) sorted.push_back(&pod);
    std::sort(sorted.begin(), sorted.end(),
              [](const Json* a, const Json* b) { return Name(*a) < Name(*b); });
    for (const Json* pod : sorted) {
      if (kube::Terminating(*pod) || Finished(*pod)) continue;
      AddWrite(plan, Delete(*pod, -1, succeeded ? "the job succeeded" : "the job failed"));
    }
  }

  // ---- Status ----
  Json conditions =
      Get(old_status, "conditions").is_array() ? Get(old_status, "conditions") : Json::array();
  auto set = [&](const std::string& type, bool value, const std::string& reason,
                 const std::string& message) {
    SetCondition(conditions, type, value ? "True" : "False", reason, message, generation, now);
  };

  // Created.
  bool all_exist = service_names.count(ShardingName(job)) > 0 &&
                   service_names.count(PsServiceName(job)) > 0 &&
                   find_pod(ShardingName(job)) != nullptr;
  int32_t ps_exist = 0;
  for (int32_t k = 0; k < p; ++k) ps_exist += find_pod(PsPodName(job, k)) != nullptr ? 1 : 0;
  int32_t workers_exist = 0;
  for (const WorkerInstance& w : instances) workers_exist += find_pod(w.pod) != nullptr ? 1 : 0;
  all_exist = all_exist && ps_exist == p && workers_exist == n;
  const std::string created_message = absl::StrCat(
      "created the sharding service, ", Plural(p, "parameter server", "parameter servers"), " and ",
      Plural(n, "worker", "workers"));
  if (ConditionTrue(old_status, "Created") || all_exist) {
    set("Created", true, "AllChildrenCreated", created_message);
  } else if (!dataset_created) {
    set("Created", false, "WaitingForDataset",
        "the parameter servers and workers are created once the sharding service holds the "
        "dataset");
  } else {
    set("Created", false, "CreatingChildren",
        absl::StrCat(ps_exist, "/", p, " parameter servers and ", workers_exist, "/", n,
                     " workers created"));
  }

  // Running.
  int32_t active_workers = 0, running_workers = 0, ready_workers = 0, succeeded_workers = 0;
  int64_t restarts = 0;
  for (const WorkerInstance& w : instances) {
    const Json* pod = find_pod(w.pod);
    active_workers += IsActive(pod) ? 1 : 0;
    running_workers += IsRunning(pod) ? 1 : 0;
    ready_workers += IsReady(pod) ? 1 : 0;
    succeeded_workers += IsSucceeded(pod) ? 1 : 0;
    restarts += w.incarnation;
  }
  int32_t ps_active = 0, ps_running = 0, ps_ready = 0, ps_succeeded = 0, ps_failed = 0;
  int64_t ps_restarts = 0;
  for (int32_t k = 0; k < p; ++k) {
    const Json* pod = find_pod(PsPodName(job, k));
    ps_active += IsActive(pod) ? 1 : 0;
    ps_running += IsRunning(pod) ? 1 : 0;
    ps_ready += IsReady(pod) ? 1 : 0;
    ps_succeeded += IsSucceeded(pod) ? 1 : 0;
    ps_failed += pod != nullptr && kube::PodPhase(*pod) == "Failed" ? 1 : 0;
    if (pod != nullptr && Get(Get(*pod, "status"), "containerStatuses").is_array()) {
      for (const Json& c : (*pod)["status"]["containerStatuses"]) {
        ps_restarts += GetInt(c, "restartCount", 0);
      }
    }
  }
  const int32_t unfinished_workers = n - succeeded_workers;
  if (finished) {
    set("Running", false, succeeded ? "JobSucceeded" : "JobFailed", "the job finished");
  } else {
    const Json* sharding = find_pod(ShardingName(job));
    const bool sharding_running = IsRunning(sharding);
    std::string workers_text = absl::StrCat(
        running_workers, "/", unfinished_workers, " workers running",
        succeeded_workers > 0 ? absl::StrCat(" (", succeeded_workers, " succeeded)") : "");
    if (sharding_running && dataset_created && ps_running == p &&
        running_workers == unfinished_workers) {
      set("Running", true, "AllPodsRunning", workers_text);
    } else if (!dataset_created) {
      set("Running", false, "WaitingForDataset",
          absl::StrCat("waiting for the sharding service (pod ", ShardingName(job), ": ",
                       sharding == nullptr                 ? "not created"
                       : kube::PodPhase(*sharding).empty() ? "Pending"
                                                           : kube::PodPhase(*sharding),
                       ") to hold the dataset"));
    } else {
      set("Running", false, "PodsNotRunning",
          absl::StrCat(workers_text, ", ", ps_running, "/", p, " parameter servers running",
                       sharding_running ? "" : ", the sharding service is not running"));
    }
  }

  // StragglersDetected.
  Json stragglers = Json::array();
  std::vector<std::string> named;
  if (!finished) {
    for (const Straggler& st : o.stragglers) {
      stragglers.push_back({{"worker", st.worker},
                            {"node", st.node},
                            {"pod", st.pod},
                            {"class", st.klass},
                            {"cause", st.cause},
                            {"score", Round2(st.score)},
                            {"since", kube::FormatTime(st.since_ms)}});
      if (IsStraggler(st)) {
        named.push_back(absl::StrCat(st.worker, " on ", st.node.empty() ? "?" : st.node, " (",
                                     st.klass, st.cause.empty() ? "" : ": " + st.cause, ")"));
      }
    }
  }
  if (named.empty()) {
    set("StragglersDetected", false, "NoStragglers", "no stragglers");
  } else {
    set("StragglersDetected", true, "StragglersFound", absl::StrJoin(named, "; "));
  }

  // Mitigating.
  std::vector<std::string> restarting, adjusted;
  for (const WorkerInstance& w : instances) {
    const Json* pod = find_pod(w.pod);
    if (w.incarnation > 0 && !IsRunning(pod) && !IsSucceeded(pod)) {
      restarting.push_back(absl::StrCat(w.id, " (pod ", w.pod, ": ",
                                        pod == nullptr                 ? "not created yet"
                                        : kube::PodPhase(*pod).empty() ? "Pending"
                                                                       : kube::PodPhase(*pod),
                                        ")"));
    }
    if (w.local_batch_size != bridge::InitialLocalBatch(spec, w.index)) {
      adjusted.push_back(absl::StrCat(w.id, "=", w.local_batch_size));
    }
  }
  if (finished) {
    set("Mitigating", false, "JobFinished", "the job finished");
  } else if (!restarting.empty()) {
    set("Mitigating", true, "RestartingWorker",
        absl::StrCat("restarting ", absl::StrJoin(restarting, ", ")));
  } else if (!adjusted.empty()) {
    set("Mitigating", true, "BatchSizesAdjusted",
        absl::StrCat("local batch sizes adjusted: ", absl::StrJoin(adjusted, ", ")));
  } else {
    set("Mitigating", false, "NoMitigation", "no action in progress");
  }

  // Succeeded and Failed.
  if (was_succeeded) {
    const Json* c = FindCondition(old_status, "Succeeded");
    set("Succeeded", true, GetString(*c, "reason"), GetString(*c, "message"));
  } else if (succeeded) {
    set("Succeeded", true, "AllWorkersSucceeded", absl::StrCat(n, "/", n, " workers succeeded"));
  } else {
    set("Succeeded", false, failed ? "JobFailed" : "InProgress",
        absl::StrCat(succeeded_workers, "/", n, " workers succeeded"));
  }
  if (failed) {
    set("Failed", true, "BackoffLimitExceeded", failed_message);
  } else {
    set("Failed", false, "NoFailures",
        absl::StrCat(Plural(failures, "worker failure", "worker failures"), " (backoffLimit ",
                     spec.run_policy.backoff_limit, ")"));
  }

  // Progress.
  Json progress;
  if (o.progress) {
    progress =
        ProgressJson(o.progress->records_committed, o.progress->records_total, o.progress->epoch,
                     o.progress->epochs, o.progress->eta_seconds, succeeded);
  } else if (Get(old_status, "progress").is_object()) {
    const Json& old = old_status["progress"];
    progress = ProgressJson(GetInt(old, "recordsCommitted", 0), GetInt(old, "recordsTotal", 0),
                            GetInt(old, "epoch", 0), GetInt(old, "epochs", spec.dataset.epochs),
                            static_cast<double>(GetInt(old, "etaSeconds", -1)), succeeded);
  } else {
    progress = ProgressJson(0, spec.dataset.records * spec.dataset.epochs, 0, spec.dataset.epochs,
                            -1, succeeded);
  }

  Json instances_json = Json::array();
  for (const WorkerInstance& w : instances) instances_json.push_back(ToJson(w));

  Json status = {
      {"observedGeneration", generation},
      {"conditions", conditions},
      {"workers", Counts(n, active_workers, ready_workers, succeeded_workers, failures, restarts)},
      {"parameterServers", Counts(p, ps_active, ps_ready, ps_succeeded, ps_failed, ps_restarts)},
      {"progress", progress},
      {"stragglerCount", static_cast<int64_t>(named.size())},
      {"stragglers", stragglers},
      {"lastActions", last_actions},
      {"workerInstances", instances_json},
      {"datasetCreated", dataset_created},
      {"startTime", GetString(old_status, "startTime").empty()
                        ? kube::FormatTime(now)
                        : GetString(old_status, "startTime")}};
  if (completion) status["completionTime"] = kube::FormatTime(*completion);
  if (status != old_status) plan.status = std::move(status);

  // ---- When to look again ----
  if (!finished) {
    plan.requeue_after_ms = kRunningRequeueMs;
  } else if (spec.run_policy.ttl_seconds_after_finished >= 0 && completion) {
    const int64_t deadline = *completion + spec.run_policy.ttl_seconds_after_finished * 1000;
    if (now >= deadline) {
      Write w;
      w.kind = Write::Kind::kDeleteJob;
      w.name = job;
      w.uid = Uid(o.job);
      w.reason =
          absl::StrCat("spec.runPolicy.ttlSecondsAfterFinished (",
                       spec.run_policy.ttl_seconds_after_finished, "s) passed since completion");
      AddWrite(plan, std::move(w));
    } else {
      plan.requeue_after_ms = deadline - now;
    }
  }
  return plan;
}

}  // namespace antdt::reconciler
