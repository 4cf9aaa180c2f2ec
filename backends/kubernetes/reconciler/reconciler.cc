#include "backends/kubernetes/reconciler/reconciler.h"

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
#include "common/credential.h"
#include "common/tls.h"
#include "core/bridge/bridge.h"
#include "core/bridge/worker_env.h"

namespace antdt::reconciler {
namespace {

constexpr char kJobApiVersion[] = "antdt.io/v1alpha1";
constexpr char kHostnameKey[] = "kubernetes.io/hostname";
constexpr char kDefaultShardingStateDir[] = "/var/lib/antdt/sharding";
constexpr size_t kMaxLastActions = 20;
constexpr size_t kMaxPendingEvents = 50;  // status.pendingEvents keeps the newest
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
std::string PodIp(const Json& pod) { return GetString(Get(pod, "status"), "podIP"); }
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
                 {"antdt.io/job", spec.name},
                 {"antdt.io/role", role}};
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
  for (int32_t k = 0; k < bridge::ParameterServerCount(spec); ++k) {
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

// Everything this job keeps under spec.checkpoint.path (the sharding
// service's state, journals, loss logs, model checkpoints) lives in a folder
// of its own, named by the job's UID: a job deleted and applied again under
// the same name (a new UID) starts fresh rather than finding the old run's
// finished state, and two jobs never share one. "" without a path.
std::string JobStateDir(const manifest::Job& spec) {
  if (spec.checkpoint.path.empty()) return "";
  if (spec.uid.empty()) return spec.checkpoint.path;
  return absl::StrCat(spec.checkpoint.path, "/", spec.uid);
}

// Where a worker (rank `index`) runs, as bridge::WorkerEnv takes it: in
// Kubernetes terms, $(VAR) references that the kubelet expands. Without
// spec.checkpoint.path there is no shared storage: no journal, no loss log.
bridge::WorkerPlacement Placement(const manifest::Job& spec, const Settings& s,
                                  const WorkerInstance& w) {
  bridge::WorkerPlacement p;
  p.sharding_addr = ShardingAddress(spec, s);
  p.ps_addrs = PsAddresses(spec, s);
  p.agent_addr = absl::StrCat("$(HOST_IP):", s.agent_port);
  p.checkpoint_path = JobStateDir(spec);
  p.rank = w.index;
  p.incarnation = static_cast<int32_t>(w.incarnation);
  p.local_batch = w.local_batch_size;
  if (!spec.checkpoint.path.empty()) {
    const std::string dir = absl::StrCat("$(", bridge::kEnvCheckpointPath, ")");
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

// A worker's variables: the downward API's, then bridge::WorkerEnv's (the
// names the local runner sets too). ANTDT_NODE_SPEED_FILE is left to the
// node (the test kubelet's --speed-dir).
std::vector<Json> WorkerVariables(const manifest::Job& spec, const Settings& s,
                                  const WorkerInstance& w) {
  std::vector<Json> env = DownwardEnv();
  for (const auto& [name, value] : bridge::WorkerEnv(spec, Placement(spec, s, w))) {
    if (name != bridge::kEnvNodeSpeedFile) env.push_back(EnvValue(name, value));
  }
  if (s.job_credentials) env.push_back(TokenEnv(spec));
  return env;
}

// A parameter server's variables: the downward API's, then the job-wide part
// of bridge::WorkerEnv (everything up to ANTDT_CHECKPOINT_PATH; the
// per-worker variables follow it).
std::vector<Json> ParameterServerVariables(const manifest::Job& spec, const Settings& s) {
  std::vector<Json> env = DownwardEnv();
  for (const auto& [name, value] : bridge::WorkerEnv(spec, Placement(spec, s, WorkerInstance{}))) {
    env.push_back(EnvValue(name, value));
    if (name == bridge::kEnvCheckpointPath) break;
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

// The job's state in one word, for `kubectl get adt` (the STATE column), as
// Kubeflow's jobs show it: the first of Failed, Succeeded, Suspended, Running
// whose condition is True, else Created.
std::string JobState(const Json& status) {
  for (const char* state : {"Failed", "Succeeded", "Suspended", "Running"}) {
    if (ConditionTrue(status, state)) return state;
  }
  return "Created";
}

std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// An ADJUST_BS deserves an Event when it is about a straggler, not when it only
// keeps the global batch constant around one.
bool NamesStraggler(const Action& a, const std::vector<Straggler>& stragglers) {
  if (absl::StrContains(ToLower(absl::StrCat(a.reason, " ", a.evidence)), "straggler")) return true;
  for (const Straggler& s : stragglers) {
    if (vocab::IsStraggler(s.klass) && s.worker == a.worker) return true;
  }
  return false;
}

Json LastAction(const Action& a, int64_t now_ms) {
  return {{"time", kube::FormatTime(a.at_ms != 0 ? a.at_ms : now_ms)},
          {"action", vocab::Name(a.kind)},
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

// The parameter servers' new members (kResizeParameterServers).
Write Resize(int32_t workers, std::vector<std::string> removed, std::vector<std::string> added,
             std::string reason) {
  Write w;
  w.kind = Write::Kind::kResizeParameterServers;
  w.workers = workers;
  w.removed = std::move(removed);
  w.added = std::move(added);
  w.reason = std::move(reason);
  return w;
}

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
  if (!already) plan.events.push_back({"Warning", "InvalidSpec", message});
  if (status != old_status) plan.status = std::move(status);
  return plan;
}

}  // namespace

// ---- Public helpers ----

std::string ShardingName(const std::string& job) { return job + "-sharding"; }
std::string PsServiceName(const std::string& job) { return job + "-ps"; }
std::string PsPodName(const std::string& job, int32_t k, int64_t incarnation) {
  return incarnation == 0 ? absl::StrCat(job, "-ps-", k)
                          : absl::StrCat(job, "-ps-", k, "-", incarnation);
}
std::string WorkersServiceName(const std::string& job) { return job + "-workers"; }
std::string WorkerHostname(const std::string& job, int32_t index) {
  return absl::StrCat(job, "-worker-", index);
}
std::string WorkerPodName(const std::string& job, int32_t index) {
  return WorkerHostname(job, index);
}
std::string TokenSecretName(const std::string& job, const std::string& uid) {
  return uid.empty() ? job + "-token" : absl::StrCat(job, "-token-", uid);
}

Json ToJson(const WorkerInstance& w) {
  Json j = {
      {"id", w.id},   {"incarnation", w.incarnation},         {"node", w.node},
      {"pod", w.pod}, {"localBatchSize", w.local_batch_size}, {"excludedNodes", w.excluded_nodes}};
  if (w.accumulation_steps > 1) j["accumulationSteps"] = w.accumulation_steps;
  if (w.resumes > 0) {
    j["resumes"] = w.resumes;
    j["resumed"] = w.resumed;
  }
  if (w.retired) j["retired"] = true;
  return j;
}

Json ToJson(const ServerInstance& s) {
  return {{"id", s.id},
          {"incarnation", s.incarnation},
          {"node", s.node},
          {"excludedNodes", s.excluded_nodes}};
}

ServerInstance ServerInstanceFromJson(const Json& j) {
  ServerInstance s;
  s.id = GetString(j, "id");
  int32_t index = -1;
  if (absl::StartsWith(s.id, "ps-") && absl::SimpleAtoi(s.id.substr(3), &index)) s.index = index;
  s.incarnation = GetInt(j, "incarnation", 0);
  s.node = GetString(j, "node");
  const Json& excluded = Get(j, "excludedNodes");
  if (excluded.is_array()) {
    for (const Json& e : excluded) {
      if (e.is_string()) s.excluded_nodes.push_back(e.get<std::string>());
    }
  }
  return s;
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
  w.accumulation_steps =
      std::max<int32_t>(1, static_cast<int32_t>(GetInt(j, "accumulationSteps", 1)));
  w.resumes = GetInt(j, "resumes", 0);
  w.resumed = Get(j, "resumed") == true;
  w.retired = Get(j, "retired") == true;
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
                  {"selector", {{"antdt.io/job", spec.name}, {"antdt.io/role", role}}},
                  {"ports", Json::array({{{"name", port_name},
                                          {"port", port},
                                          {"targetPort", port},
                                          {"protocol", "TCP"}}})}}}};
  };
  std::vector<Json> services = {
      service(ShardingName(spec.name), "sharding", "grpc", s.sharding_port)};
  if (bridge::ParameterServerCount(spec) > 0) {
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

bool ShardingStateIsDurable(const Json& job, const manifest::Job& spec) {
  return !spec.sharding_storage.ephemeral || CheckpointVolume(job, spec).first != nullptr;
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
                              : spec.workers.replicas + bridge::ParameterServerCount(spec);
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
  labels["antdt.io/replica-index"] = std::to_string(k);
  labels["antdt.io/incarnation"] = std::to_string(inst.incarnation);
  const int32_t slice = bridge::ParameterServerFeatures(spec, k);
  const int32_t backup = spec.straggler_policy.name == vocab::Policy::kBackupWorkers
                             ? spec.straggler_policy.backup_workers
                             : 0;
  std::vector<Json> env = ParameterServerVariables(spec, s);
  env.push_back(EnvValue("ANTDT_PS_INDEX", std::to_string(k)));
  env.push_back(EnvValue("ANTDT_PS_ID", absl::StrCat("ps-", k)));
  env.push_back(EnvValue("ANTDT_PS_FEATURES", std::to_string(slice)));
  std::vector<std::string> args = {"--listen",
                                   absl::StrCat("$(POD_IP):", s.ps_port),
                                   "--id",
                                   absl::StrCat("ps-", k),
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
                     const Settings& s) {
  Json labels = Labels(spec, "worker", s);
  labels["antdt.io/worker-id"] = instance.id;
  labels["antdt.io/incarnation"] = std::to_string(instance.incarnation);
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
  JoinGang(spec, s, pod);
  UseTls(s, pod);
  return pod;
}

// ---- Reconcile, step by step ----

namespace {

// The job's pods and services as observed, indexed once.
class Children {
 public:
  explicit Children(const Observed& o) {
    for (const Json& pod : o.pods) {
      pod_by_name_[Name(pod)] = &pod;
      const std::string worker = kube::Label(pod, "antdt.io/worker-id");
      if (kube::Label(pod, "antdt.io/role") == "worker" && !worker.empty()) {
        pods_of_worker_[worker].push_back(&pod);
      }
      int32_t k = -1;
      if (kube::Label(pod, "antdt.io/role") == "ps" &&
          absl::SimpleAtoi(kube::Label(pod, "antdt.io/replica-index"), &k)) {
        pods_of_server_[k].push_back(&pod);
      }
    }
    for (const Json& svc : o.services) service_names_.insert(Name(svc));
  }

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
    return kube::Label(*pod, "antdt.io/incarnation") == std::to_string(w.incarnation) ? pod
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
  Pass(const Observed& observed, const Settings& settings)
      : o(observed),
        s(settings),
        spec(*observed.spec),
        job(spec.name),
        old_status(Get(observed.job, "status")),
        generation(GetInt(Get(observed.job, "metadata"), "generation", 0)),
        n(spec.workers.replicas),
        p(bridge::ParameterServerCount(spec)),
        now(observed.now_ms),
        children(observed) {}

  const Observed& o;
  const Settings& s;
  const manifest::Job& spec;
  const std::string& job;  // its name
  const Json& old_status;
  const int64_t generation;
  const int32_t n;  // workers
  const int32_t p;  // parameter servers
  const int64_t now;
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

// ---- Step 1: the records of the previous status ----

// The worker records of a status list, by index.
std::map<int32_t, WorkerInstance> RecordsOf(const Json& list) {
  std::map<int32_t, WorkerInstance> by_index;
  if (!list.is_array()) return by_index;
  for (const Json& j : list) {
    WorkerInstance w = WorkerInstanceFromJson(j);
    if (!w.id.empty()) by_index[w.index] = std::move(w);
  }
  return by_index;
}

void NextIncarnation(WorkerInstance& w);

// Each worker's record from the previous status, or a fresh one; its desired
// pod named after its incarnation. On a job that has recorded its workers and
// has not finished, spec.workers.replicas may have changed: records beyond it
// move to the removed, and a worker added again continues from its removed
// record as its next incarnation (the sharding service refuses an older one).
void LoadInstances(const Pass& pass, Records& r) {
  std::map<int32_t, WorkerInstance> recorded = RecordsOf(Get(pass.old_status, "workerInstances"));
  std::map<int32_t, WorkerInstance> removed = RecordsOf(Get(pass.old_status, "removedWorkers"));
  if (r.Finished() && !recorded.empty()) {  // as it finished
    for (auto& [index, w] : recorded) r.instances.push_back(std::move(w));
    for (auto& [index, w] : removed) r.removed.push_back(std::move(w));
    return;
  }
  for (int32_t i = 0; i < pass.n; ++i) {
    WorkerInstance w;
    if (auto it = recorded.find(i); it != recorded.end()) {
      w = it->second;
    } else if (auto gone = removed.find(i); gone != removed.end()) {
      w = gone->second;
      removed.erase(gone);
      NextIncarnation(w);
      ++w.resumes;
      w.resumed = true;
      w.retired = false;
      r.added.push_back(w.id);
    } else {
      w.id = absl::StrCat("worker-", i);
      w.local_batch_size = static_cast<int32_t>(bridge::InitialLocalBatch(pass.spec, i));
      if (!recorded.empty()) r.added.push_back(w.id);
    }
    w.index = i;
    w.pod = WorkerPodName(pass.job, i);
    r.instances.push_back(std::move(w));
  }
  for (auto& [index, w] : recorded) {
    if (index < pass.n) continue;
    r.newly_removed.push_back(w.id);
    removed[index] = std::move(w);
  }
  for (auto& [index, w] : removed) r.removed.push_back(std::move(w));
  if (!r.added.empty() || !r.newly_removed.empty()) {
    r.scaled_from = static_cast<int32_t>(recorded.size());
  }
}

Records LoadRecords(const Pass& pass) {
  const Json& old = pass.old_status;
  Records r;
  r.last_actions = Get(old, "lastActions").is_array() ? Get(old, "lastActions") : Json::array();
  r.failures = GetInt(Get(old, "workers"), "failed", 0);
  r.dataset_created = pass.o.dataset_ready || Get(old, "datasetCreated") == true;
  if (!GetString(old, "completionTime").empty()) {
    r.completion = kube::ParseTime(GetString(old, "completionTime"));
  }
  const Json* old_failed = FindCondition(old, "Failed");
  r.was_succeeded = ConditionTrue(old, "Succeeded");
  r.succeeded = r.was_succeeded;
  r.failed = old_failed != nullptr && GetString(*old_failed, "status") == "True" &&
             GetString(*old_failed, "reason") != "InvalidSpec";
  if (r.failed) {
    r.failed_reason = GetString(*old_failed, "reason");
    r.failed_message = GetString(*old_failed, "message");
  }
  r.suspended = pass.spec.suspend && !r.Finished();
  r.resuming = !pass.spec.suspend && ConditionTrue(old, "Suspended");
  LoadInstances(pass, r);
  for (int32_t k = 0; k < pass.p; ++k) {
    ServerInstance& si = r.servers.emplace_back();
    si.id = absl::StrCat("ps-", k);
    si.index = k;
  }
  const Json& moved = Get(old, "serverInstances");
  for (const Json& j : moved.is_array() ? moved : Json::array()) {
    ServerInstance si = ServerInstanceFromJson(j);
    if (si.index >= 0 && si.index < pass.p && si.id == r.servers[si.index].id) {
      r.servers[si.index] = std::move(si);
    }
  }
  return r;
}

// ---- Step 2: the Controller's decisions ----

WorkerInstance* FindInstance(std::vector<WorkerInstance>& instances, const std::string& id) {
  for (WorkerInstance& w : instances) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

// A restart: the worker's next incarnation (its pod of the same name, once the
// previous one is gone), on any node unless the caller chooses one; not a
// resume unless the caller says so.
void NextIncarnation(WorkerInstance& w) {
  ++w.incarnation;
  w.node.clear();
  w.resumed = false;
}

std::string EvidenceText(const Action& a) {
  return a.evidence.empty() ? "" : "; evidence: " + a.evidence;
}

// KILL_RESTART: the worker's next incarnation, never again on the node it left.
Event KillRestart(const Action& a, WorkerInstance& w) {
  const std::string old_pod = w.pod;
  NextIncarnation(w);
  if (!a.from_node.empty() && std::find(w.excluded_nodes.begin(), w.excluded_nodes.end(),
                                        a.from_node) == w.excluded_nodes.end()) {
    w.excluded_nodes.push_back(a.from_node);
  }
  w.node = a.to_node;
  return {
      "Warning", "StragglerRestarted",
      absl::StrCat("restarted ", w.id, " (pod ", old_pod, ") from node ",
                   a.from_node.empty() ? "?" : a.from_node, " to ",
                   a.to_node.empty() ? "any other node" : "node " + a.to_node, " as incarnation ",
                   w.incarnation, ": rule ", a.rule, "; ", a.reason, EvidenceText(a))};
}

// ADJUST_BS: the worker's new local batch, and an Event when about a straggler.
void AdjustBatch(const Action& a, const std::vector<Straggler>& stragglers, WorkerInstance& w,
                 std::vector<Event>& events) {
  if (a.local_batch_size > 0) {
    w.local_batch_size = a.local_batch_size;
    w.accumulation_steps = std::max(1, a.accumulation_steps);
  }
  if (!NamesStraggler(a, stragglers)) return;
  events.push_back({"Normal", "BatchSizeAdjusted",
                    absl::StrCat(w.id, " local batch set to ", a.local_batch_size, ": rule ",
                                 a.rule, "; ", a.reason, EvidenceText(a))});
}

// status.lastActions keeps the newest kMaxLastActions.
void TrimLastActions(Json& last_actions) {
  if (last_actions.size() <= kMaxLastActions) return;
  last_actions.erase(
      last_actions.begin(),
      last_actions.begin() + static_cast<std::ptrdiff_t>(last_actions.size() - kMaxLastActions));
}

// KILL_RESTART of a parameter server: its next incarnation on another node
// (see reconciler.h).
Event MoveServer(const Action& a, ServerInstance& si, const std::string& job) {
  const std::string old_pod = PsPodName(job, si.index, si.incarnation);
  ++si.incarnation;
  if (!a.from_node.empty() && std::find(si.excluded_nodes.begin(), si.excluded_nodes.end(),
                                        a.from_node) == si.excluded_nodes.end()) {
    si.excluded_nodes.push_back(a.from_node);
  }
  si.node = a.to_node;
  return {"Warning", "ParameterServerMoved",
          absl::StrCat("moving ", si.id, " (pod ", old_pod, ") from node ",
                       a.from_node.empty() ? "?" : a.from_node, " to ",
                       a.to_node.empty() ? "any other node" : "node " + a.to_node, " as pod ",
                       PsPodName(job, si.index, si.incarnation),
                       ", its state handed over at a step boundary: rule ", a.rule, "; ", a.reason,
                       EvidenceText(a))};
}

void ApplyActions(const Pass& pass, Records& r, Plan& plan) {
  for (const Action& a : pass.o.actions) {
    if (a.kind == vocab::ActionKind::kKillRestart && absl::StartsWith(a.worker, "ps-")) {
      auto si = std::find_if(r.servers.begin(), r.servers.end(),
                             [&](const ServerInstance& x) { return x.id == a.worker; });
      if (si != r.servers.end()) {
        plan.events.push_back(MoveServer(a, *si, pass.job));
        r.last_actions.push_back(LastAction(a, pass.now));
        continue;
      }
    }
    WorkerInstance* w = FindInstance(r.instances, a.worker);
    if (w == nullptr || a.kind == vocab::ActionKind::kBackupWorkers) {
      plan.events.push_back({"Warning", "ActionIgnored",
                             absl::StrCat(vocab::Name(a.kind), " for ", a.worker,
                                          ": the operator carries out KILL_RESTART for the "
                                          "job's workers and servers and ADJUST_BS for its "
                                          "workers only")});
      continue;
    }
    if (a.kind == vocab::ActionKind::kKillRestart) {
      plan.events.push_back(KillRestart(a, *w));
    } else {
      AdjustBatch(a, pass.o.stragglers, *w, plan.events);
    }
    r.last_actions.push_back(LastAction(a, pass.now));
  }
  TrimLastActions(r.last_actions);
}

// ---- Step 3: failures and success ----

// Why a failed pod was disrupted (evicted by the kubelet or the eviction API,
// preempted by a higher priority), "" when it failed by itself: the pod's
// DisruptionTarget condition (Kubernetes 1.26+) or its status.reason.
std::string DisruptionOf(const Json& pod) {
  const Json& st = Get(pod, "status");
  const Json& conditions = Get(st, "conditions");
  if (conditions.is_array()) {
    for (const Json& c : conditions) {
      if (GetString(c, "type") == "DisruptionTarget" && GetString(c, "status") == "True") {
        return GetString(c, "reason").empty() ? "DisruptionTarget" : GetString(c, "reason");
      }
    }
  }
  const std::string reason = GetString(st, "reason");
  return reason == "Evicted" || reason == "Preempting" || reason == "Shutdown" ? reason : "";
}

// A disrupted worker restarts as its next incarnation, not counted against
// the backoff limit (as a Job's podFailurePolicy Ignore on DisruptionTarget).
void RestartDisrupted(const std::string& disruption, const std::string& what, WorkerInstance& w,
                      Plan& plan) {
  NextIncarnation(w);
  plan.events.push_back(
      {"Warning", "WorkerDisrupted",
       absl::StrCat(what, "; disrupted (", disruption, "), restarting as incarnation ",
                    w.incarnation, ", not counted against spec.runPolicy.backoffLimit")});
}

// A worker whose desired pod failed is restarted in place (its next
// incarnation, on any node) until the failures exceed the backoff limit.
void ApplyFailures(const Pass& pass, Records& r, Plan& plan) {
  const int32_t limit = pass.spec.run_policy.backoff_limit;
  for (WorkerInstance& w : r.instances) {
    const Json* pod = pass.children.Worker(w);
    if (pod == nullptr || kube::Terminating(*pod) || kube::PodPhase(*pod) != "Failed") continue;
    const std::string node = GetString(Get(*pod, "spec"), "nodeName");
    const std::string what =
        absl::StrCat(w.id, " failed (pod ", w.pod, node.empty() ? "" : " on node " + node, ": ",
                     FailureText(*pod), ")");
    const std::string disruption = DisruptionOf(*pod);
    if (!disruption.empty()) {
      RestartDisrupted(disruption, what, w, plan);
      continue;
    }
    ++r.failures;
    if (r.failures > limit) {
      r.failed = true;
      r.failed_reason = "BackoffLimitExceeded";
      r.failed_message = absl::StrCat(what, "; ", r.failures, " worker failures exceed ",
                                      "spec.runPolicy.backoffLimit ", limit);
      plan.events.push_back({"Warning", "BackoffLimitExceeded", r.failed_message});
      return;
    }
    NextIncarnation(w);
    plan.events.push_back(
        {"Warning", "WorkerFailed",
         absl::StrCat(what, "; restarting as incarnation ", w.incarnation, " (failure ", r.failures,
                      " of backoffLimit ", limit, ")")});
  }
}

// Success: every worker's desired pod succeeded.
void CheckSuccess(const Pass& pass, Records& r, Plan& plan) {
  bool all = pass.n > 0;
  for (const WorkerInstance& w : r.instances) all = all && IsSucceeded(pass.children.Worker(w));
  if (!all) return;
  r.succeeded = true;
  const std::optional<Progress>& progress = pass.o.progress;
  plan.events.push_back(
      {"Normal", "JobSucceeded",
       absl::StrCat(
           "all ", Plural(pass.n, "worker", "workers"), " succeeded",
           progress ? absl::StrCat("; ", progress->records_committed, " records committed") : "")});
}

// When the job started (status.startTime), or now; a resumed job starts
// again, as a Kubernetes Job does, so its deadline counts from the resume.
int64_t StartMs(const Pass& pass, const Records& r) {
  const std::string start = GetString(pass.old_status, "startTime");
  if (start.empty() || r.resuming) return pass.now;
  return kube::ParseTime(start).value_or(pass.now);
}

// spec.runPolicy.activeDeadlineSeconds: the job fails once it has run that
// long (never while suspended).
void CheckDeadline(const Pass& pass, Records& r, Plan& plan) {
  const int64_t deadline = pass.spec.run_policy.active_deadline_seconds;
  if (deadline < 0 || r.suspended || r.Finished()) return;
  if (pass.now - StartMs(pass, r) < deadline * 1000) return;
  r.failed = true;
  r.failed_reason = "DeadlineExceeded";
  r.failed_message = absl::StrCat("the job ran longer than spec.runPolicy.activeDeadlineSeconds (",
                                  deadline, "s) since ", GetString(pass.old_status, "startTime"));
  plan.events.push_back({"Warning", "DeadlineExceeded", r.failed_message});
}

// The sharding service answered without the job's dataset: its state is gone
// (in the pod without spec.checkpoint.path, or a wiped volume). Creating the
// dataset again would train committed records a second time; the job fails,
// saying why and what keeps the state.
void CheckShardingState(const Pass& pass, Records& r, Plan& plan) {
  if (!pass.o.dataset_lost || !r.dataset_created) return;
  r.failed = true;
  r.failed_reason = "ShardingStateLost";
  r.failed_message = absl::StrCat(
      "the sharding service (pod ", ShardingName(pass.job),
      ") came back without the job's dataset, so which records were committed is lost; ",
      !ShardingStateIsDurable(pass.o.job, pass.spec)
          ? "its state was in the pod (spec.shardingService.storage.ephemeral, and no volume "
            "holds spec.checkpoint.path): drop ephemeral, or mount a shared volume at "
            "spec.checkpoint.path, for state that outlives the pod"
      : ShardingStateOnClaim(pass.o.job, pass.spec)
          ? absl::StrCat("its claim ", ShardingClaimName(pass.spec), " holds no state")
          : absl::StrCat("its state under ", JobStateDir(pass.spec), "/sharding is gone"),
      "; create the job again to train from the start");
  plan.events.push_back({"Warning", "ShardingStateLost", r.failed_message});
}

// Steps 2 and 3, for a job not finished before this pass. A suspended job
// carries out no decision (it has no workers to act on).
void Decide(const Pass& pass, Records& r, Plan& plan) {
  CheckShardingState(pass, r, plan);
  if (r.failed) {
    r.completion = (pass.now / 1000) * 1000;
    return;
  }
  if (!r.suspended) ApplyActions(pass, r, plan);
  ApplyFailures(pass, r, plan);
  if (!r.failed) CheckSuccess(pass, r, plan);
  if (!r.failed && !r.succeeded) CheckDeadline(pass, r, plan);
  if (r.Finished()) r.completion = (pass.now / 1000) * 1000;
}

// Where each worker's desired pod runs.
void RecordNodes(const Pass& pass, Records& r) {
  for (WorkerInstance& w : r.instances) {
    const Json* pod = pass.children.Worker(w);
    if (pod == nullptr) continue;
    const std::string node = GetString(Get(*pod, "spec"), "nodeName");
    if (!node.empty()) w.node = node;
  }
}

// ---- Step 4: the children to create and delete ----

// The batches of a scale, for its Event: "worker-0=128, worker-1=128".
std::string BatchesText(const std::vector<WorkerInstance>& instances) {
  std::vector<std::string> parts;
  for (const WorkerInstance& w : instances) {
    parts.push_back(absl::StrCat(w.id, "=", w.local_batch_size));
  }
  return absl::StrJoin(parts, ", ");
}

// A scale in this pass (LoadInstances found spec.workers.replicas changed):
// the global batch split evenly over the workers there are now. With
// parameter servers each remaining worker that runs is told its new batch
// and the servers their new members, before any new worker starts; a
// collective job's running ranks begin their next incarnation (their
// WORLD_SIZE changed). Neither is a restart. A suspended job only records it.
void Rescale(const Pass& pass, Records& r, Plan& plan) {
  if (r.scaled_from < 0 || r.Finished()) return;
  const bool collective = pass.p == 0;
  const bool acting = !r.suspended;
  int32_t regrouped = 0;
  for (WorkerInstance& w : r.instances) {
    const int32_t batch = static_cast<int32_t>(bridge::InitialLocalBatch(pass.spec, w.index));
    const bool added = std::find(r.added.begin(), r.added.end(), w.id) != r.added.end();
    const Json* pod = pass.children.Worker(w);
    const bool runs = pod != nullptr && !kube::Terminating(*pod) && !Finished(*pod);
    if (acting && !added && runs && collective) {
      NextIncarnation(w);
      ++w.resumes;
      w.resumed = true;
      ++regrouped;
    } else if (acting && !added && runs && batch != w.local_batch_size) {
      Write adjust;
      adjust.kind = Write::Kind::kAdjustBatch;
      adjust.worker = w.id;
      adjust.node = GetString(Get(*pod, "spec"), "nodeName");
      adjust.local_batch_size = batch;
      adjust.accumulation_steps = w.accumulation_steps;
      adjust.reason = absl::StrCat("scaled to ", pass.n, " workers: the global batch ",
                                   pass.spec.model.global_batch_size, " split evenly");
      AddWrite(plan, std::move(adjust));
    }
    w.local_batch_size = batch;
  }
  if (acting && !collective) {
    AddWrite(plan, Resize(pass.n, r.newly_removed, r.added,
                          absl::StrCat("scaled from ", r.scaled_from, " to ", pass.n, " workers")));
  }
  std::string message =
      absl::StrCat("spec.workers.replicas changed from ", r.scaled_from, " to ", pass.n);
  if (!r.newly_removed.empty()) {
    absl::StrAppend(&message, "; removed ", absl::StrJoin(r.newly_removed, ", "),
                    " (pods deleted; their shards go back to the queue once the pods are gone)");
  }
  if (!r.added.empty()) absl::StrAppend(&message, "; added ", absl::StrJoin(r.added, ", "));
  absl::StrAppend(&message, "; local batches ", BatchesText(r.instances), " (global batch ",
                  pass.spec.model.global_batch_size, " kept)");
  if (regrouped > 0) {
    absl::StrAppend(&message, "; ", Plural(regrouped, "running rank", "running ranks"),
                    " restart with WORLD_SIZE=", pass.n, " (not counted as restarts)");
  }
  if (r.suspended) absl::StrAppend(&message, "; the job is suspended: applied when it resumes");
  plan.events.push_back({"Normal", "Scaled", message});
}

// The removed workers: their pods deleted, and once gone their shards
// released (their incarnation fenced on the sharding service) and the
// parameter servers told again that they are no members (the same Resize as
// the scale's: harmless twice, and a second chance when an operator stopped
// before the first).
void PlanRemoved(const Pass& pass, Records& r, Plan& plan) {
  std::vector<std::string> gone;
  for (WorkerInstance& w : r.removed) {
    if (w.retired) continue;
    const std::vector<const Json*>& pods = pass.children.PodsOfWorker(w.id);
    for (const Json* pod : pods) {
      if (kube::Terminating(*pod)) continue;
      AddWrite(plan, Delete(*pod, -1,
                            absl::StrCat(w.id, " was removed: spec.workers.replicas is ", pass.n)));
    }
    if (!pods.empty()) continue;
    Write release;
    release.kind = Write::Kind::kReleaseShards;
    release.worker = w.id;
    release.incarnation = w.incarnation;
    release.reason = absl::StrCat(w.id, " was removed and its pod is gone");
    AddWrite(plan, std::move(release));
    w.retired = true;
    gone.push_back(w.id);
  }
  if (pass.p > 0 && !gone.empty()) {
    AddWrite(plan, Resize(pass.n, gone, {}, "removed workers' pods are gone"));
  }
}

// A server pod is created when missing; one that failed (evicted, say) is
// deleted, and created again once it is gone.
void EnsureServer(const Pass& pass, const std::string& name, const std::function<Json()>& render,
                  Plan& plan) {
  const Json* pod = pass.children.Pod(name);
  if (pod == nullptr) {
    AddWrite(plan, Create("pods", render(), "missing"));
  } else if (!kube::Terminating(*pod) && kube::PodPhase(*pod) == "Failed") {
    AddWrite(plan,
             Delete(*pod, -1,
                    absl::StrCat("failed (", FailureText(*pod), "); created again once gone")));
  }
}

// Parameter server `si`'s desired pod; while it is being moved, its earlier
// incarnation hands over to it and is deleted once followed.
void EnsureParameterServer(const Pass& pass, const ServerInstance& si, Plan& plan) {
  const std::string desired = PsPodName(pass.job, si.index, si.incarnation);
  std::string take_over;
  for (const Json* pod : pass.children.PodsOfServer(si.index)) {
    if (Name(*pod) == desired || kube::Terminating(*pod)) continue;
    if (pass.o.servers_followed.count(si.id) > 0 || Finished(*pod)) {
      AddWrite(plan,
               Delete(*pod, -1,
                      absl::StrCat(si.id, " moved to ", desired, " and every worker follows")));
    } else if (IsRunning(pod) && !PodIp(*pod).empty()) {
      take_over = absl::StrCat(PodIp(*pod), ":", pass.s.ps_port);
    }
  }
  EnsureServer(
      pass, desired,
      [&] {
        return RenderParameterServerPod(pass.o.job, pass.spec, si.index, pass.s, si, take_over);
      },
      plan);
}

// True when some worker still has a pod of an earlier incarnation.
bool AnySuperseded(const Pass& pass, const Records& r) {
  for (const WorkerInstance& w : r.instances) {
    const Json* desired = pass.children.Worker(w);
    for (const Json* pod : pass.children.PodsOfWorker(w.id)) {
      if (pod != desired) return true;
    }
  }
  return false;
}

// A worker's other pods are deleted at once; its desired pod is created once
// they are gone (and, with `hold`, not yet), after a restarted worker left the
// parameter servers.
void EnsureWorker(const Pass& pass, const WorkerInstance& w, bool hold, Plan& plan) {
  bool others = false;
  const Json* desired = pass.children.Worker(w);
  for (const Json* pod : pass.children.PodsOfWorker(w.id)) {
    if (pod == desired) continue;
    others = true;
    if (!kube::Terminating(*pod)) {
      AddWrite(plan, Delete(*pod, 0, absl::StrCat("superseded by incarnation ", w.incarnation)));
    }
  }
  if (others || desired != nullptr || hold) return;
  if (w.incarnation > 0 && pass.p > 0) {
    Write leave;
    leave.kind = Write::Kind::kLeaveParameterServers;
    leave.worker = w.id;
    leave.reason = absl::StrCat("incarnation ", w.incarnation - 1, " is gone");
    AddWrite(plan, std::move(leave));
  }
  AddWrite(plan,
           Create("pods", RenderWorkerPod(pass.o.job, pass.spec, w, pass.s),
                  w.incarnation > 0 ? absl::StrCat("incarnation ", w.incarnation) : "missing"));
}

// A running job: the services and the sharding pod, then, once the sharding
// service holds the dataset, the parameter servers and the workers.
void PlanChildren(const Pass& pass, const Records& r, Plan& plan) {
  for (Json& svc : RenderServices(pass.o.job, pass.spec, pass.s)) {
    if (!pass.children.HasService(Name(svc))) {
      AddWrite(plan, Create("services", std::move(svc), "missing"));
    }
  }
  // The sharding service's claim before its pod.
  if (ShardingStateOnClaim(pass.o.job, pass.spec) && !pass.o.sharding_claim_exists) {
    AddWrite(plan, Create("persistentvolumeclaims",
                          RenderShardingClaim(pass.o.job, pass.spec, pass.s), "missing"));
  }
  // The job's credential before the pods that read it.
  if (pass.s.job_credentials && !pass.o.token_secret_exists && !pass.o.job_token.empty()) {
    AddWrite(plan,
             Create("secrets", RenderTokenSecret(pass.o.job, pass.spec, pass.o.job_token, pass.s),
                    "missing"));
  }
  EnsureServer(
      pass, ShardingName(pass.job),
      [&] { return RenderShardingPod(pass.o.job, pass.spec, pass.s); }, plan);
  if (!r.dataset_created) return;
  if (Get(pass.old_status, "datasetCreated") != true) {
    // Said once, when the status first records it: a job of an old name
    // starts from nothing, in its own folder.
    const std::string dir = JobStateDir(pass.spec);
    plan.events.push_back(
        {"Normal", "DatasetCreated",
         absl::StrCat(pass.spec.dataset.records, " records x ", pass.spec.dataset.epochs,
                      " epochs to train, from the start",
                      dir.empty() ? std::string(" (no checkpoint.path: state in the pods)")
                                  : absl::StrCat("; this job's state under ", dir))});
  }
  // The gang's PodGroup before its members (the parameter servers, workers).
  if (!pass.s.gang_scheduler.empty() && !pass.o.pod_group_exists) {
    AddWrite(plan, Create("podgroups", RenderPodGroup(pass.o.job, pass.spec, pass.s), "missing"));
  }
  for (const ServerInstance& si : r.servers) EnsureParameterServer(pass, si, plan);
  // A collective job's group forms once: while an earlier incarnation of some
  // rank is still there (a scale restarts them all), no new rank starts, so
  // none meets the old group at its rendezvous.
  const bool hold = pass.p == 0 && AnySuperseded(pass, r);
  for (const WorkerInstance& w : r.instances) EnsureWorker(pass, w, hold, plan);
}

// The observed pods in name order (deletions are written in a stable order).
std::vector<const Json*> ByName(const std::vector<Json>& pods) {
  std::vector<const Json*> sorted;
  for (const Json& pod : pods) sorted.push_back(&pod);
  std::sort(sorted.begin(), sorted.end(),
            [](const Json* a, const Json* b) { return Name(*a) < Name(*b); });
  return sorted;
}

// A suspended job holds no pods: each unfinished worker's pod goes (the
// worker resumes as its next incarnation: a new process, whose sharding
// leases and journal pick up where the last one committed), the parameter
// servers' go, and the sharding service's unless its state would go with it
// (ephemeral storage).
void PlanSuspend(const Pass& pass, Records& r, Plan& plan) {
  std::set<std::string> kept;
  if (!ShardingStateIsDurable(pass.o.job, pass.spec)) kept.insert(ShardingName(pass.job));
  for (WorkerInstance& w : r.instances) {
    const Json* pod = pass.children.Worker(w);
    if (IsSucceeded(pod)) kept.insert(w.pod);
    if (pod == nullptr || kube::Terminating(*pod) || Finished(*pod)) continue;
    NextIncarnation(w);
    ++w.resumes;
    w.resumed = true;
  }
  for (const Json* pod : ByName(pass.o.pods)) {
    if (kube::Terminating(*pod) || kept.count(Name(*pod)) > 0) continue;
    AddWrite(plan, Delete(*pod, -1, "the job is suspended (spec.suspend)"));
  }
}

// A finished job: stop what still runs (the servers never exit by themselves).
void PlanCleanup(const Pass& pass, const Records& r, Plan& plan) {
  for (const Json* pod : ByName(pass.o.pods)) {
    if (kube::Terminating(*pod) || Finished(*pod)) continue;
    AddWrite(plan, Delete(*pod, -1, r.succeeded ? "the job succeeded" : "the job failed"));
  }
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

StragglerReport ReportStragglers(const Observed& o, bool finished) {
  StragglerReport report;
  if (finished) return report;
  for (const Straggler& st : o.stragglers) {
    report.list.push_back({{"worker", st.worker},
                           {"node", st.node},
                           {"pod", st.pod},
                           {"class", vocab::KubernetesName(st.klass)},
                           {"compensated", st.compensated},
                           {"cause", st.cause},
                           {"score", Round2(st.score)},
                           {"since", kube::FormatTime(st.since_ms)}});
    if (vocab::IsStraggler(st.klass)) {
      report.named.push_back(absl::StrCat(st.worker, " on ", st.node.empty() ? "?" : st.node, " (",
                                          vocab::KubernetesName(st.klass),
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
    if (w.local_batch_size != bridge::InitialLocalBatch(pass.spec, w.index)) {
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

// ---- Step 7: when to look again ----

// Soon while the job runs; once it finished, when
// spec.runPolicy.ttlSecondsAfterFinished has passed, and then the job is deleted.
void PlanRequeue(const Pass& pass, const Records& r, Plan& plan) {
  if (!r.Finished()) {
    plan.requeue_after_ms = kRunningRequeueMs;
    return;
  }
  const int64_t ttl = pass.spec.run_policy.ttl_seconds_after_finished;
  if (ttl < 0 || !r.completion) return;
  const int64_t deadline = *r.completion + ttl * 1000;
  if (pass.now < deadline) {
    plan.requeue_after_ms = deadline - pass.now;
    return;
  }
  Write w;
  w.kind = Write::Kind::kDeleteJob;
  w.name = pass.job;
  w.uid = Uid(pass.o.job);
  w.reason =
      absl::StrCat("spec.runPolicy.ttlSecondsAfterFinished (", ttl, "s) passed since completion");
  AddWrite(plan, std::move(w));
}

// Events committed with the status: those a pass before left pending (its
// operator stopped before writing them), then this pass's.
void CommitEvents(const Pass& pass, Plan& plan, Json& status) {
  std::vector<Event> events;
  const Json& pending = Get(pass.old_status, "pendingEvents");
  if (pending.is_array()) {
    for (const Json& e : pending) {
      events.push_back({GetString(e, "type"), GetString(e, "reason"), GetString(e, "message")});
    }
  }
  events.insert(events.end(), plan.events.begin(), plan.events.end());
  if (events.size() > kMaxPendingEvents) {
    events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(kMaxPendingEvents));
  }
  plan.events = std::move(events);
  if (plan.events.empty()) return;
  Json list = Json::array();
  for (const Event& e : plan.events) {
    list.push_back({{"type", e.type}, {"reason", e.reason}, {"message", e.message}});
  }
  status["pendingEvents"] = std::move(list);
}

// ReplicaFailure (set True by the controller when the API server refuses a
// create) turns False once a pass finds every child it needs in place.
void ClearReplicaFailure(const Pass& pass, const Plan& plan, Json& status) {
  if (!ConditionTrue(pass.old_status, kReplicaFailure)) return;
  for (const Write& w : plan.writes) {
    if (w.kind == Write::Kind::kCreate) return;
  }
  SetCondition(status["conditions"], kReplicaFailure, "False", "Created",
               "every pod and Service the job needs exists", pass.generation, pass.now);
}

}  // namespace

Plan Reconcile(const Observed& o, const Settings& s) {
  const Json& meta = Get(o.job, "metadata");
  // Being deleted: the garbage collector removes the children.
  if (!Get(meta, "deletionTimestamp").is_null()) return Plan{};
  if (!o.spec.ok()) return InvalidSpecPlan(o, Get(o.job, "status"), GetInt(meta, "generation", 0));

  const Pass pass(o, s);
  Plan plan;
  Records r = LoadRecords(pass);
  if (!r.Finished()) Decide(pass, r, plan);
  RecordNodes(pass, r);
  Rescale(pass, r, plan);
  if (r.Finished()) {
    PlanCleanup(pass, r, plan);
  } else if (r.suspended) {
    if (!ConditionTrue(pass.old_status, "Suspended")) {
      plan.events.push_back(
          {"Normal", "Suspended", "spec.suspend is set: deleting the job's pods"});
    }
    PlanSuspend(pass, r, plan);
  } else {
    if (r.resuming) {
      plan.events.push_back(
          {"Normal", "Resumed", "spec.suspend was cleared: creating the job's pods again"});
    }
    PlanRemoved(pass, r, plan);
    PlanChildren(pass, r, plan);
  }
  Json status = NewStatus(pass, r);
  ClearReplicaFailure(pass, plan, status);
  CommitEvents(pass, plan, status);
  if (status != pass.old_status) plan.status = std::move(status);
  PlanRequeue(pass, r, plan);
  return plan;
}

}  // namespace antdt::reconciler
