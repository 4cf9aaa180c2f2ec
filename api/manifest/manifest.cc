#include "api/manifest/manifest.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <regex>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "api/manifest/yaml_fields.h"
#include "common/config.h"
#include "common/spelling.h"
#include "common/status.h"
#include "common/step_deadline.h"

namespace antdt::manifest {
namespace {

// ---- AntDTJob ----

absl::Status ParseMetadata(const YAML::Node& node, Job* job) {
  const std::string path = "metadata";
  if (!Present(node)) return Invalid(path, "required");
  // Fields the API server sets are accepted and ignored, so the operator can
  // parse a custom resource as read back from the cluster.
  RETURN_IF_ERROR(CheckMapping(
      node, path,
      {"name", "namespace", "labels", "annotations", "uid", "resourceVersion", "generation",
       "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
       "finalizers", "ownerReferences", "selfLink"}));
  RETURN_IF_ERROR(Required(node, path, "name"));
  RETURN_IF_ERROR(ReadString(node, path, "name", &job->name));
  RETURN_IF_ERROR(CheckDns1123Label("metadata.name", job->name));
  RETURN_IF_ERROR(ReadString(node, path, "namespace", &job->namespace_));
  RETURN_IF_ERROR(CheckDns1123Label("metadata.namespace", job->namespace_));
  RETURN_IF_ERROR(ReadStringMap(Get(node, "labels"), "metadata.labels", &job->labels));
  RETURN_IF_ERROR(ReadString(node, path, "uid", &job->uid));
  return absl::OkStatus();
}

absl::Status ParseDataset(const YAML::Node& node, DatasetSpec* d) {
  const std::string path = "spec.dataset";
  if (!Present(node)) return Invalid(path, "required");
  RETURN_IF_ERROR(CheckMapping(
      node, path, {"records", "shardSize", "epochs", "shuffle", "seed", "guidedLeasing"}));
  RETURN_IF_ERROR(Required(node, path, "records"));
  RETURN_IF_ERROR(ReadInt64(node, path, "records", &d->records));
  RETURN_IF_ERROR(AtLeast(Join(path, "records"), d->records, 1));
  RETURN_IF_ERROR(Required(node, path, "shardSize"));
  RETURN_IF_ERROR(ReadInt64(node, path, "shardSize", &d->shard_size));
  RETURN_IF_ERROR(AtLeast(Join(path, "shardSize"), d->shard_size, 1));
  RETURN_IF_ERROR(ReadInt32(node, path, "epochs", &d->epochs));
  RETURN_IF_ERROR(AtLeast(Join(path, "epochs"), d->epochs, 1));
  RETURN_IF_ERROR(ReadBool(node, path, "shuffle", &d->shuffle));
  RETURN_IF_ERROR(ReadUint64(node, path, "seed", &d->seed));
  RETURN_IF_ERROR(ReadBool(node, path, "guidedLeasing", &d->guided_leasing));
  return absl::OkStatus();
}

absl::Status ParseModel(const YAML::Node& node, ModelSpec* m) {
  const std::string path = "spec.model";
  RETURN_IF_ERROR(CheckMapping(node, path, {"features", "learningRate", "globalBatchSize"}));
  RETURN_IF_ERROR(ReadInt32(node, path, "features", &m->features));
  if (m->features < 1 || m->features > 4096) {
    return Invalid(Join(path, "features"),
                   absl::StrCat("must be between 1 and 4096, got ", m->features));
  }
  RETURN_IF_ERROR(ReadDouble(node, path, "learningRate", &m->learning_rate));
  RETURN_IF_ERROR(Positive(Join(path, "learningRate"), m->learning_rate));
  RETURN_IF_ERROR(ReadInt64(node, path, "globalBatchSize", &m->global_batch_size));
  return AtLeast(Join(path, "globalBatchSize"), m->global_batch_size, 1);
}

// A list of strings (`command`, `args`); absent reads as empty.
absl::Status ReadStringList(const YAML::Node& map, const std::string& path, const char* key,
                            std::vector<std::string>* out) {
  const YAML::Node node = Get(map, key);
  if (!Present(node)) return absl::OkStatus();
  const std::string field = Join(path, key);
  if (!node.IsSequence()) {
    return Invalid(field, absl::StrCat("must be a list of strings, got ", Describe(node)));
  }
  for (size_t i = 0; i < node.size(); ++i) {
    if (!node[i].IsScalar()) {
      return Invalid(Index(field, i), absl::StrCat("must be a string, got ", Describe(node[i])));
    }
    out->push_back(node[i].Scalar());
  }
  return absl::OkStatus();
}

absl::Status ParseEnvVar(const YAML::Node& node, const std::string& path, EnvVar* var) {
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  RETURN_IF_ERROR(CheckMapping(node, path, {"name", "value", "valueFrom"}));
  RETURN_IF_ERROR(Required(node, path, "name"));
  RETURN_IF_ERROR(ReadString(node, path, "name", &var->name));
  if (var->name.empty()) return Invalid(Join(path, "name"), "must not be empty");
  RETURN_IF_ERROR(ReadString(node, path, "value", &var->value));
  var->value_from = Present(Get(node, "valueFrom"));
  if (var->value_from && Present(Get(node, "value"))) {
    return Invalid(Join(path, "valueFrom"), "not allowed together with value");
  }
  return absl::OkStatus();
}

// containers[0]'s command, args and env (the rest of the container is the
// pod's business, kept in template_yaml).
absl::Status ParseContainer(const YAML::Node& node, const std::string& path, ReplicaSpec* r) {
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  const YAML::Node image = Get(node, "image");
  if (Present(image) && image.IsScalar()) r->image = image.Scalar();
  RETURN_IF_ERROR(ReadStringList(node, path, "command", &r->container.command));
  RETURN_IF_ERROR(ReadStringList(node, path, "args", &r->container.args));
  const YAML::Node env = Get(node, "env");
  if (!Present(env)) return absl::OkStatus();
  const std::string env_path = Join(path, "env");
  if (!env.IsSequence()) {
    return Invalid(env_path, absl::StrCat("must be a list, got ", Describe(env)));
  }
  for (size_t i = 0; i < env.size(); ++i) {
    EnvVar var;
    RETURN_IF_ERROR(ParseEnvVar(env[i], Index(env_path, i), &var));
    r->container.env.push_back(std::move(var));
  }
  return absl::OkStatus();
}

// `template` is free-form: kept as YAML text, with containers[0]'s image,
// command, args and env taken out.
absl::Status ParseReplicas(const YAML::Node& node, const std::string& path, int32_t min_replicas,
                           ReplicaSpec* r) {
  if (!Present(node) && min_replicas > 0) return Invalid(path, "required");
  RETURN_IF_ERROR(CheckMapping(node, path, {"replicas", "template"}));
  if (min_replicas > 0) RETURN_IF_ERROR(Required(node, path, "replicas"));
  RETURN_IF_ERROR(ReadInt32(node, path, "replicas", &r->replicas));
  RETURN_IF_ERROR(AtLeast(Join(path, "replicas"), r->replicas, min_replicas));
  const YAML::Node tmpl = Get(node, "template");
  if (!Present(tmpl)) return absl::OkStatus();
  if (!tmpl.IsMap()) {
    return Invalid(Join(path, "template"), absl::StrCat("must be a mapping, got ", Describe(tmpl)));
  }
  r->template_yaml = YAML::Dump(tmpl);
  const YAML::Node spec = Get(tmpl, "spec");
  const YAML::Node containers = Get(spec, "containers");
  if (Present(containers) && containers.IsSequence() && containers.size() > 0) {
    RETURN_IF_ERROR(ParseContainer(containers[0], Join(path, "template.spec.containers[0]"), r));
  }
  return absl::OkStatus();
}

// The operator restarts a failed worker itself, as a new incarnation counted
// against spec.runPolicy.backoffLimit: a kubelet restarting it in place
// (OnFailure, Always) would do so behind the failure count and the sharding
// service's leases, so only Never (or nothing) is accepted.
absl::Status CheckWorkerRestartPolicy(const YAML::Node& workers) {
  const YAML::Node policy = Get(Get(Get(workers, "template"), "spec"), "restartPolicy");
  if (!Present(policy)) return absl::OkStatus();
  const std::string path = "spec.workers.template.spec.restartPolicy";
  if (!policy.IsScalar()) {
    return Invalid(path, absl::StrCat("must be a string, got ", Describe(policy)));
  }
  if (policy.Scalar() == "Never") return absl::OkStatus();
  return Invalid(path, absl::StrCat("must be Never or absent, got \"", policy.Scalar(),
                                    "\": AntDT restarts a failed worker itself, as a new pod "
                                    "counted against spec.runPolicy.backoffLimit"));
}

// A DNS-1123 subdomain (a StorageClass name): dot-separated labels, at most
// 253 characters.
bool IsDnsSubdomain(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(s, '.')) {
    if (!IsDns1123Label(std::string(label))) return false;
  }
  return true;
}

// A Kubernetes quantity as storage sizes are written: 512Mi, 1Gi, 10G, 1e9.
bool IsStorageQuantity(const std::string& s) {
  static const std::regex kQuantity(R"(^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P|e[0-9]+)?$)");
  return std::regex_match(s, kQuantity);
}

absl::Status ParseShardingStorage(const YAML::Node& node, ShardingStorageSpec* st) {
  const std::string path = "spec.shardingService.storage";
  if (!Present(node)) return absl::OkStatus();
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  RETURN_IF_ERROR(CheckMapping(node, path, {"size", "storageClassName", "ephemeral"}));
  RETURN_IF_ERROR(ReadString(node, path, "size", &st->size));
  if (!IsStorageQuantity(st->size) || std::strtod(st->size.c_str(), nullptr) <= 0) {
    return Invalid(Join(path, "size"),
                   absl::StrCat("must be a positive quantity such as 1Gi, got \"", st->size, "\""));
  }
  RETURN_IF_ERROR(ReadString(node, path, "storageClassName", &st->storage_class));
  if (!st->storage_class.empty() && !IsDnsSubdomain(st->storage_class)) {
    return Invalid(Join(path, "storageClassName"),
                   absl::StrCat("must be a StorageClass name, got \"", st->storage_class, "\""));
  }
  return ReadBool(node, path, "ephemeral", &st->ephemeral);
}

// spec.shardingService: a pod template (free-form, as the workers') and
// where its state is kept.
absl::Status ParseShardingService(const YAML::Node& node, std::string* template_yaml,
                                  ShardingStorageSpec* storage) {
  const std::string path = "spec.shardingService";
  if (!Present(node)) return absl::OkStatus();
  RETURN_IF_ERROR(CheckMapping(node, path, {"template", "storage"}));
  RETURN_IF_ERROR(ParseShardingStorage(Get(node, "storage"), storage));
  const YAML::Node tmpl = Get(node, "template");
  if (!Present(tmpl)) return absl::OkStatus();
  if (!tmpl.IsMap()) {
    return Invalid(Join(path, "template"), absl::StrCat("must be a mapping, got ", Describe(tmpl)));
  }
  *template_yaml = YAML::Dump(tmpl);
  return absl::OkStatus();
}

absl::Status ParseRule(const YAML::Node& node, const std::string& path, Rule* rule) {
  if (!node.IsMap()) return Invalid(path, absl::StrCat("must be a mapping, got ", Describe(node)));
  RETURN_IF_ERROR(CheckMapping(
      node, path, {"signal", "threshold", "class", "windows", "action", "cooldown", "budget"}));
  RETURN_IF_ERROR(Required(node, path, "signal"));
  RETURN_IF_ERROR(ReadOneOf(node, path, "signal", vocab::AllSignals(), &rule->signal));
  if (rule->signal == vocab::Signal::kClass) {
    if (Present(Get(node, "threshold"))) {
      return Invalid(Join(path, "threshold"), "only allowed with signal score or self_score");
    }
    RETURN_IF_ERROR(Required(node, path, "class"));
    RETURN_IF_ERROR(ReadOneOf(node, path, "class",
                              {v1::TRANSIENT, v1::PERSISTENT, v1::DETERMINISTIC},
                              &rule->straggler_class));
  } else {
    if (Present(Get(node, "class"))) {
      return Invalid(Join(path, "class"), "only allowed with signal class");
    }
    RETURN_IF_ERROR(Required(node, path, "threshold"));
    RETURN_IF_ERROR(ReadDouble(node, path, "threshold", &rule->threshold));
    RETURN_IF_ERROR(Positive(Join(path, "threshold"), rule->threshold));
  }
  RETURN_IF_ERROR(ReadInt32(node, path, "windows", &rule->windows));
  RETURN_IF_ERROR(AtLeast(Join(path, "windows"), rule->windows, 1));
  RETURN_IF_ERROR(Required(node, path, "action"));
  RETURN_IF_ERROR(ReadOneOf(node, path, "action", vocab::RuleActionKinds(), &rule->action));
  RETURN_IF_ERROR(ReadDurationMs(node, path, "cooldown", &rule->cooldown_ms));
  RETURN_IF_ERROR(ReadInt32(node, path, "budget", &rule->budget));
  return AtLeast(Join(path, "budget"), rule->budget, 0);
}

absl::Status ParseStragglerPolicy(const YAML::Node& node, int32_t workers, StragglerPolicySpec* p) {
  const std::string path = "spec.stragglerPolicy";
  RETURN_IF_ERROR(
      CheckMapping(node, path,
                   {"name", "mode", "cooldown", "maxActions", "minSavingRatio", "backupWorkers",
                    "stepDeadline", "decideBy", "avoidSlowNodes", "rules"}));
  RETURN_IF_ERROR(ReadOneOf(node, path, "name", vocab::AllPolicies(), &p->name));
  RETURN_IF_ERROR(ReadOneOf(node, path, "mode", vocab::AllModes(), &p->mode));
  RETURN_IF_ERROR(ReadOneOf(node, path, "decideBy", vocab::AllDecideBy(), &p->decide_by));
  RETURN_IF_ERROR(
      ReadOneOf(node, path, "avoidSlowNodes", vocab::AllAvoidSlowNodes(), &p->avoid_slow_nodes));
  p->cooldown_derived = !Present(Get(node, "cooldown"));
  RETURN_IF_ERROR(ReadDurationMs(node, path, "cooldown", &p->cooldown_ms));
  if (!Present(Get(node, "maxActions"))) p->max_actions = std::max(10, (workers + 4) / 5);
  RETURN_IF_ERROR(ReadInt32(node, path, "maxActions", &p->max_actions));
  RETURN_IF_ERROR(AtLeast(Join(path, "maxActions"), p->max_actions, 0));
  RETURN_IF_ERROR(ReadDouble(node, path, "minSavingRatio", &p->min_saving_ratio));
  if (p->min_saving_ratio < 0) {
    return Invalid(Join(path, "minSavingRatio"),
                   absl::StrCat("must be >= 0, got ", p->min_saving_ratio));
  }
  RETURN_IF_ERROR(ReadInt32(node, path, "backupWorkers", &p->backup_workers));
  RETURN_IF_ERROR(AtLeast(Join(path, "backupWorkers"), p->backup_workers, 0));
  if (p->name == vocab::Policy::kBackupWorkers &&
      (p->backup_workers < 1 || p->backup_workers >= workers)) {
    return Invalid(Join(path, "backupWorkers"),
                   absl::StrCat("must be between 1 and spec.workers.replicas - 1 (", workers - 1,
                                ") with backup-workers, got ", p->backup_workers));
  }
  RETURN_IF_ERROR(ReadDouble(node, path, "stepDeadline", &p->step_deadline));
  p->step_deadline_fitted = !Present(Get(node, "stepDeadline"));
  // The least a set deadline may be is the least a fitted one goes to.
  if (p->step_deadline != 0 &&
      !(p->step_deadline >= DeadlineFit::kFloor && p->step_deadline <= 10)) {
    return Invalid(Join(path, "stepDeadline"),
                   absl::StrCat("must be 0 (off) or between ", DeadlineFit::kFloor, " and 10, got ",
                                p->step_deadline));
  }
  const std::string rules_path = Join(path, "rules");
  const YAML::Node rules = Get(node, "rules");
  if (p->name != vocab::Policy::kCustom) {
    if (Present(rules)) {
      return Invalid(rules_path, absl::StrCat("only allowed with name custom, got name \"",
                                              vocab::Name(p->name), "\""));
    }
    return absl::OkStatus();
  }
  if (!Present(rules)) return Invalid(rules_path, "required with name custom");
  if (!rules.IsSequence()) {
    return Invalid(rules_path, absl::StrCat("must be a list, got ", Describe(rules)));
  }
  if (rules.size() == 0) return Invalid(rules_path, "must list at least one rule with name custom");
  for (size_t i = 0; i < rules.size(); ++i) {
    Rule rule;
    RETURN_IF_ERROR(ParseRule(rules[i], Index(rules_path, i), &rule));
    p->rules.push_back(std::move(rule));
  }
  return absl::OkStatus();
}

absl::Status ParseMonitor(const YAML::Node& node, MonitorSpec* m) {
  const std::string path = "spec.monitor";
  RETURN_IF_ERROR(CheckMapping(node, path,
                               {"window", "windowSteps", "allowedLateness", "stragglerThreshold",
                                "recoverThreshold", "persistentWindows", "warmupWindows"}));
  // A window in time alone keeps windows in time; windowSteps measures them in steps.
  if (Present(Get(node, "window")) && !Present(Get(node, "windowSteps"))) m->window_steps = 0;
  RETURN_IF_ERROR(ReadDurationMs(node, path, "window", &m->window_ms));
  if (m->window_ms <= 0) {
    return Invalid(Join(path, "window"), absl::StrCat("must be > 0, got ", m->window_ms, "ms"));
  }
  RETURN_IF_ERROR(ReadInt32(node, path, "windowSteps", &m->window_steps));
  if (m->window_steps < 0 || m->window_steps > 1000) {
    return Invalid(
        Join(path, "windowSteps"),
        absl::StrCat("must be in [0, 1000] (0: windows in time), got ", m->window_steps));
  }
  RETURN_IF_ERROR(ReadDurationMs(node, path, "allowedLateness", &m->allowed_lateness_ms));
  RETURN_IF_ERROR(ReadDouble(node, path, "stragglerThreshold", &m->straggler_threshold));
  if (!(m->straggler_threshold > 1)) {
    return Invalid(Join(path, "stragglerThreshold"),
                   absl::StrCat("must be > 1, got ", m->straggler_threshold));
  }
  RETURN_IF_ERROR(ReadDouble(node, path, "recoverThreshold", &m->recover_threshold));
  RETURN_IF_ERROR(Positive(Join(path, "recoverThreshold"), m->recover_threshold));
  if (m->recover_threshold >= m->straggler_threshold) {
    return Invalid(Join(path, "recoverThreshold"),
                   absl::StrCat("must be < spec.monitor.stragglerThreshold (",
                                m->straggler_threshold, "), got ", m->recover_threshold));
  }
  RETURN_IF_ERROR(ReadInt32(node, path, "persistentWindows", &m->persistent_windows));
  RETURN_IF_ERROR(AtLeast(Join(path, "persistentWindows"), m->persistent_windows, 1));
  RETURN_IF_ERROR(ReadInt32(node, path, "warmupWindows", &m->warmup_windows));
  return AtLeast(Join(path, "warmupWindows"), m->warmup_windows, 0);
}

absl::Status ParseCheckpoint(const YAML::Node& node, CheckpointSpec* c) {
  const std::string path = "spec.checkpoint";
  RETURN_IF_ERROR(CheckMapping(node, path, {"path", "everySteps"}));
  RETURN_IF_ERROR(ReadString(node, path, "path", &c->path));
  RETURN_IF_ERROR(ReadInt64(node, path, "everySteps", &c->every_steps));
  RETURN_IF_ERROR(AtLeast(Join(path, "everySteps"), c->every_steps, 0));
  if (c->every_steps > 0 && c->path.empty()) {
    return Invalid(Join(path, "path"), "required when everySteps > 0");
  }
  return absl::OkStatus();
}

absl::Status ParseSchedulingPolicy(const YAML::Node& node, RunPolicySpec* r) {
  const std::string path = "spec.runPolicy.schedulingPolicy";
  RETURN_IF_ERROR(CheckMapping(node, path, {"minAvailable", "queue", "scheduleTimeoutSeconds"}));
  if (Present(Get(node, "minAvailable"))) {
    RETURN_IF_ERROR(ReadInt32(node, path, "minAvailable", &r->min_available));
    RETURN_IF_ERROR(AtLeast(Join(path, "minAvailable"), r->min_available, 1));
  }
  RETURN_IF_ERROR(ReadString(node, path, "queue", &r->queue));
  if (!Present(Get(node, "scheduleTimeoutSeconds"))) return absl::OkStatus();
  RETURN_IF_ERROR(ReadInt64(node, path, "scheduleTimeoutSeconds", &r->schedule_timeout_seconds));
  return AtLeast(Join(path, "scheduleTimeoutSeconds"), r->schedule_timeout_seconds, 1);
}

absl::Status ParseRunPolicy(const YAML::Node& node, RunPolicySpec* r) {
  const std::string path = "spec.runPolicy";
  RETURN_IF_ERROR(CheckMapping(
      node, path,
      {"backoffLimit", "ttlSecondsAfterFinished", "activeDeadlineSeconds", "schedulingPolicy"}));
  RETURN_IF_ERROR(ParseSchedulingPolicy(Get(node, "schedulingPolicy"), r));
  RETURN_IF_ERROR(ReadInt32(node, path, "backoffLimit", &r->backoff_limit));
  RETURN_IF_ERROR(AtLeast(Join(path, "backoffLimit"), r->backoff_limit, 0));
  if (Present(Get(node, "activeDeadlineSeconds"))) {
    RETURN_IF_ERROR(ReadInt64(node, path, "activeDeadlineSeconds", &r->active_deadline_seconds));
    RETURN_IF_ERROR(AtLeast(Join(path, "activeDeadlineSeconds"), r->active_deadline_seconds, 1));
  }
  if (!Present(Get(node, "ttlSecondsAfterFinished"))) return absl::OkStatus();
  RETURN_IF_ERROR(ReadInt64(node, path, "ttlSecondsAfterFinished", &r->ttl_seconds_after_finished));
  return AtLeast(Join(path, "ttlSecondsAfterFinished"), r->ttl_seconds_after_finished, 0);
}

absl::Status ParseLocal(const YAML::Node& node, LocalSpec* l) {
  const std::string path = "spec.local";
  RETURN_IF_ERROR(CheckMapping(
      node, path, {"scenario", "deviceTimePerSample", "serverTimePerStep", "deviceWork"}));
  std::string work = "sleep";
  RETURN_IF_ERROR(ReadString(node, path, "deviceWork", &work));
  if (work != "sleep" && work != "cpu") {
    return Invalid(Join(path, "deviceWork"),
                   absl::StrCat("must be sleep or cpu, got \"", work, "\"",
                                DidYouMean(work, {"sleep", "cpu"})));
  }
  l->device_work_cpu = work == "cpu";
  RETURN_IF_ERROR(ReadString(node, path, "scenario", &l->scenario));
  RETURN_IF_ERROR(ReadDurationUs(node, path, "deviceTimePerSample", &l->device_time_per_sample_us));
  RETURN_IF_ERROR(AtLeast(Join(path, "deviceTimePerSample"), l->device_time_per_sample_us, 0));
  RETURN_IF_ERROR(ReadDurationUs(node, path, "serverTimePerStep", &l->server_time_per_step_us));
  return AtLeast(Join(path, "serverTimePerStep"), l->server_time_per_step_us, 0);
}

// The job's name makes its children's on a cluster (the CRD's rules, the same
// words): Services <name>-sharding, <name>-ps, <name>-workers (DNS-1035 labels)
// and the workers' host names <name>-worker-<index>, 63 characters at most.
absl::Status CheckChildNames(const Job& job) {
  if (job.name.front() < 'a' || job.name.front() > 'z') {
    return Invalid("metadata.name",
                   "must start with a letter: the job's Services (<name>-sharding, "
                   "<name>-workers) are named after it (DNS-1035)");
  }
  if (job.name.size() > 54) {
    return Invalid("metadata.name",
                   "must be at most 54 characters: the job's Service <name>-sharding must fit "
                   "in 63");
  }
  if (job.name.size() + std::to_string(job.workers.replicas - 1).size() > 55) {
    return Invalid("metadata.name",
                   "is too long for spec.workers.replicas: the workers' host names "
                   "<name>-worker-<index> must fit in 63 characters");
  }
  return absl::OkStatus();
}

absl::Status ParseJobRoot(const YAML::Node& root, Job* job) {
  if (!root.IsMap())
    return Invalid("manifest", absl::StrCat("must be a mapping, got ", Describe(root)));
  // `status` is written by the operator; it is accepted and ignored.
  RETURN_IF_ERROR(CheckMapping(root, "", {"apiVersion", "kind", "metadata", "spec", "status"}));
  std::string api_version;
  std::string kind;
  RETURN_IF_ERROR(Required(root, "", "apiVersion"));
  RETURN_IF_ERROR(ReadString(root, "", "apiVersion", &api_version));
  if (api_version != kApiVersion) {
    return Invalid("apiVersion",
                   absl::StrCat("must be \"", kApiVersion, "\", got \"", api_version, "\""));
  }
  RETURN_IF_ERROR(Required(root, "", "kind"));
  RETURN_IF_ERROR(ReadString(root, "", "kind", &kind));
  if (kind != kKind) {
    return Invalid("kind", absl::StrCat("must be \"", kKind, "\", got \"", kind, "\""));
  }
  RETURN_IF_ERROR(ParseMetadata(Get(root, "metadata"), job));

  const YAML::Node spec = Get(root, "spec");
  if (!Present(spec)) return Invalid("spec", "required");
  RETURN_IF_ERROR(
      CheckMapping(spec, "spec",
                   {"dataset", "model", "workers", "parameterServers", "shardingService",
                    "stragglerPolicy", "monitor", "checkpoint", "runPolicy", "local", "suspend"}));
  RETURN_IF_ERROR(ReadBool(spec, "spec", "suspend", &job->suspend));
  RETURN_IF_ERROR(ParseDataset(Get(spec, "dataset"), &job->dataset));
  RETURN_IF_ERROR(ParseReplicas(Get(spec, "workers"), "spec.workers", 1, &job->workers));
  RETURN_IF_ERROR(CheckWorkerRestartPolicy(Get(spec, "workers")));
  RETURN_IF_ERROR(CheckChildNames(*job));
  RETURN_IF_ERROR(ParseReplicas(Get(spec, "parameterServers"), "spec.parameterServers", 0,
                                &job->parameter_servers));
  RETURN_IF_ERROR(ParseShardingService(
      Get(spec, "shardingService"), &job->sharding_service_template_yaml, &job->sharding_storage));
  RETURN_IF_ERROR(ParseModel(Get(spec, "model"), &job->model));
  if (job->model.global_batch_size < job->workers.replicas) {
    return Invalid("spec.model.globalBatchSize",
                   absl::StrCat("must be >= spec.workers.replicas (", job->workers.replicas,
                                "), got ", job->model.global_batch_size));
  }
  RETURN_IF_ERROR(ParseStragglerPolicy(Get(spec, "stragglerPolicy"), job->workers.replicas,
                                       &job->straggler_policy));
  RETURN_IF_ERROR(ParseMonitor(Get(spec, "monitor"), &job->monitor));
  RETURN_IF_ERROR(ParseCheckpoint(Get(spec, "checkpoint"), &job->checkpoint));
  RETURN_IF_ERROR(ParseRunPolicy(Get(spec, "runPolicy"), &job->run_policy));
  return ParseLocal(Get(spec, "local"), &job->local);
}

}  // namespace

absl::StatusOr<Job> ParseJob(const std::string& yaml) {
  ASSIGN_OR_RETURN(const YAML::Node root, LoadOne(yaml, "manifest"));
  Job job;
  try {
    RETURN_IF_ERROR(ParseJobRoot(root, &job));
  } catch (const YAML::Exception& e) {  // a shape the walk above did not expect
    return Invalid("manifest", e.what());
  }
  return job;
}

}  // namespace antdt::manifest
