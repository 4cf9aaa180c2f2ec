#include "api/manifest/manifest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/config.h"

namespace antdt::manifest {
namespace {

using ::testing::HasSubstr;

// A small valid manifest; the error cases below change one field of it.
constexpr char kBase[] = R"(
apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: demo
spec:
  dataset:
    records: 1000
    shardSize: 100
  workers:
    replicas: 4
)";

// `base` with the field at dotted `path` set to the YAML `value`, or removed
// when `value` is nullopt. Missing mappings on the way are created.
std::string With(const std::string& base, const std::string& path,
                 const std::optional<std::string>& value) {
  YAML::Node root = YAML::Load(base);
  std::vector<std::string> keys = absl::StrSplit(path, '.');
  YAML::Node node = root;
  for (size_t i = 0; i + 1 < keys.size(); ++i) node.reset(node[keys[i]]);
  if (value) {
    node[keys.back()] = YAML::Load(*value);
  } else {
    node.remove(keys.back());
  }
  return YAML::Dump(root);
}

std::string SourceFile(const std::string& relative) {
  const char* dir = std::getenv("ANTDT_SOURCE_DIR");  // set by CTest
  EXPECT_NE(dir, nullptr) << "ANTDT_SOURCE_DIR is not set: run the test under ctest";
  return std::string(dir ? dir : ".") + "/" + relative;
}

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << path << ": " << text.status();
  return text.ok() ? *text : "";
}

TEST(ParseJob, BaseIsValidAndDefaultsApply) {
  absl::StatusOr<Job> job = ParseJob(kBase);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "demo");
  EXPECT_EQ(job->namespace_, "default");
  EXPECT_TRUE(job->labels.empty());
  EXPECT_EQ(job->dataset.records, 1000);
  EXPECT_EQ(job->dataset.shard_size, 100);
  EXPECT_EQ(job->dataset.epochs, 1);
  EXPECT_FALSE(job->dataset.shuffle);
  EXPECT_EQ(job->dataset.seed, 0u);
  EXPECT_TRUE(job->dataset.guided_leasing);
  EXPECT_EQ(job->model.features, 16);
  EXPECT_DOUBLE_EQ(job->model.learning_rate, 0.1);
  EXPECT_EQ(job->model.global_batch_size, 256);
  EXPECT_EQ(job->workers.replicas, 4);
  EXPECT_EQ(job->workers.image, "");
  EXPECT_EQ(job->workers.template_yaml, "");
  EXPECT_EQ(job->parameter_servers.replicas, 0);
  EXPECT_EQ(job->straggler_policy.name, vocab::Policy::kAntdtNd);
  EXPECT_EQ(job->straggler_policy.cooldown_ms, 60'000);  // until the windows are known
  EXPECT_TRUE(job->straggler_policy.cooldown_derived);
  EXPECT_EQ(job->straggler_policy.max_actions, 10);
  EXPECT_DOUBLE_EQ(job->straggler_policy.min_saving_ratio, 1.0);
  EXPECT_EQ(job->straggler_policy.backup_workers, 1);
  EXPECT_DOUBLE_EQ(job->straggler_policy.step_deadline, 1.25);
  EXPECT_TRUE(job->straggler_policy.step_deadline_fitted);
  EXPECT_EQ(job->straggler_policy.mode, vocab::Mode::kAct);
  EXPECT_EQ(job->straggler_policy.decide_by, vocab::DecideBy::kExpectedDuration);
  EXPECT_TRUE(job->straggler_policy.rules.empty());
  EXPECT_EQ(job->monitor.window_ms, 1'000);  // the first windows', then two steps
  EXPECT_EQ(job->monitor.window_steps, 2);
  EXPECT_EQ(job->monitor.allowed_lateness_ms, -1);  // the Monitor's max(500ms, window / 4)
  EXPECT_DOUBLE_EQ(job->monitor.straggler_threshold, 1.3);
  EXPECT_DOUBLE_EQ(job->monitor.recover_threshold, 1.15);
  EXPECT_EQ(job->monitor.persistent_windows, 3);
  EXPECT_EQ(job->monitor.warmup_windows, 2);
  EXPECT_EQ(job->checkpoint.path, "");
  EXPECT_EQ(job->checkpoint.every_steps, 0);
  EXPECT_EQ(job->run_policy.backoff_limit, 3);
  EXPECT_EQ(job->run_policy.ttl_seconds_after_finished, -1);
  EXPECT_EQ(job->local.scenario, "");
  EXPECT_EQ(job->local.device_time_per_sample_us, 200);
}

TEST(ParseJob, EveryFieldIsRead) {
  absl::StatusOr<Job> job = ParseJob(R"(
apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: full-job
  namespace: team-a
  labels: {team: ml, tier: "1"}
  annotations: {anything: [1, 2, {x: y}]}
spec:
  dataset: {records: 5000, shardSize: 50, epochs: 3, shuffle: true, seed: 18446744073709551615}
  model: {features: 4096, learningRate: 0.05, globalBatchSize: 8}
  workers:
    replicas: 8
    template:
      metadata: {labels: {app: trainer}}
      spec:
        containers:
          - name: trainer
            image: registry.example/antdt/trainer:1.2
            args: ["--epochs", "3"]
  parameterServers: {replicas: 2}
  stragglerPolicy:
    name: custom
    mode: Recommend
    cooldown: 90s
    maxActions: 4
    minSavingRatio: 0.5
    backupWorkers: 0
    stepDeadline: 1.5
    decideBy: thresholds
    rules:
      - {signal: score, threshold: 1.5, windows: 2, action: ADJUST_BS}
      - {signal: class, class: persistent, action: KILL_RESTART, cooldown: 2m, budget: 2}
  monitor: {window: 500ms, allowedLateness: 100ms, stragglerThreshold: 2, recoverThreshold: 1.1, persistentWindows: 5,
            warmupWindows: 0}
  checkpoint: {path: /ckpt, everySteps: 100}
  runPolicy: {backoffLimit: 0, ttlSecondsAfterFinished: 600, activeDeadlineSeconds: 3600}
  local: {scenario: s.yaml, deviceTimePerSample: 1.5ms}
  suspend: true
)");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->namespace_, "team-a");
  EXPECT_EQ(job->labels.at("tier"), "1");
  EXPECT_EQ(job->dataset.epochs, 3);
  EXPECT_TRUE(job->dataset.shuffle);
  EXPECT_EQ(job->dataset.seed, 18446744073709551615u);
  EXPECT_EQ(job->model.features, 4096);
  EXPECT_DOUBLE_EQ(job->model.learning_rate, 0.05);
  EXPECT_EQ(job->model.global_batch_size, 8);
  EXPECT_EQ(job->workers.replicas, 8);
  EXPECT_EQ(job->workers.image, "registry.example/antdt/trainer:1.2");
  YAML::Node tmpl = YAML::Load(job->workers.template_yaml);
  EXPECT_EQ(tmpl["metadata"]["labels"]["app"].as<std::string>(), "trainer");
  EXPECT_EQ(tmpl["spec"]["containers"][0]["args"][1].as<std::string>(), "3");
  EXPECT_EQ(job->parameter_servers.replicas, 2);
  EXPECT_EQ(job->parameter_servers.template_yaml, "");
  const StragglerPolicySpec& p = job->straggler_policy;
  EXPECT_EQ(p.name, vocab::Policy::kCustom);
  EXPECT_EQ(p.cooldown_ms, 90'000);
  EXPECT_EQ(p.max_actions, 4);
  EXPECT_DOUBLE_EQ(p.min_saving_ratio, 0.5);
  EXPECT_EQ(p.mode, vocab::Mode::kRecommend);
  EXPECT_EQ(p.backup_workers, 0);
  EXPECT_DOUBLE_EQ(p.step_deadline, 1.5);
  EXPECT_FALSE(p.step_deadline_fitted) << "set: that multiple, always";
  EXPECT_EQ(p.decide_by, vocab::DecideBy::kThresholds);
  ASSERT_EQ(p.rules.size(), 2u);
  EXPECT_EQ(p.rules[0].signal, vocab::Signal::kScore);
  EXPECT_DOUBLE_EQ(p.rules[0].threshold, 1.5);
  EXPECT_EQ(p.rules[0].windows, 2);
  EXPECT_EQ(p.rules[0].action, vocab::ActionKind::kAdjustBatchSize);
  EXPECT_EQ(p.rules[0].cooldown_ms, 0);
  EXPECT_EQ(p.rules[0].budget, 0);
  EXPECT_EQ(p.rules[1].signal, vocab::Signal::kClass);
  EXPECT_EQ(p.rules[1].straggler_class, v1::PERSISTENT);
  EXPECT_EQ(p.rules[1].windows, 1);
  EXPECT_EQ(p.rules[1].action, vocab::ActionKind::kKillRestart);
  EXPECT_EQ(p.rules[1].cooldown_ms, 120'000);
  EXPECT_EQ(p.rules[1].budget, 2);
  EXPECT_EQ(job->monitor.window_ms, 500);
  EXPECT_EQ(job->monitor.window_steps, 0) << "a window alone is in time";
  EXPECT_EQ(job->monitor.allowed_lateness_ms, 100);
  EXPECT_DOUBLE_EQ(job->monitor.straggler_threshold, 2);
  EXPECT_DOUBLE_EQ(job->monitor.recover_threshold, 1.1);
  EXPECT_EQ(job->monitor.persistent_windows, 5);
  EXPECT_EQ(job->monitor.warmup_windows, 0);
  EXPECT_EQ(job->checkpoint.path, "/ckpt");
  EXPECT_EQ(job->checkpoint.every_steps, 100);
  EXPECT_EQ(job->run_policy.backoff_limit, 0);
  EXPECT_EQ(job->run_policy.ttl_seconds_after_finished, 600);
  EXPECT_EQ(job->run_policy.active_deadline_seconds, 3600);
  EXPECT_TRUE(job->suspend);
  EXPECT_EQ(job->local.scenario, "s.yaml");
  EXPECT_EQ(job->local.device_time_per_sample_us, 1500);
}

TEST(ParseJob, ReadsTheWorkersCommandArgsAndEnv) {
  absl::StatusOr<Job> job = ParseJob(With(kBase, "spec.workers.template", R"yaml(
spec:
  containers:
    - name: trainer
      image: pytorch
      command: [python3, "-u"]
      args: [train.py, "--lr", "$(ANTDT_LEARNING_RATE)"]
      env:
        - {name: A, value: "1"}
        - {name: B}
        - name: POD_IP
          valueFrom: {fieldRef: {fieldPath: status.podIP}}
)yaml"));
  ASSERT_TRUE(job.ok()) << job.status();
  const ContainerSpec& c = job->workers.container;
  EXPECT_EQ(job->workers.image, "pytorch");
  EXPECT_THAT(c.command, ::testing::ElementsAre("python3", "-u"));
  EXPECT_THAT(c.args, ::testing::ElementsAre("train.py", "--lr", "$(ANTDT_LEARNING_RATE)"));
  ASSERT_EQ(c.env.size(), 3u);
  EXPECT_EQ(c.env[0].name, "A");
  EXPECT_EQ(c.env[0].value, "1");
  EXPECT_FALSE(c.env[0].value_from);
  EXPECT_EQ(c.env[1].value, "");
  EXPECT_TRUE(c.env[2].value_from);
  // Without a template there is no command: the demo trainer runs.
  absl::StatusOr<Job> plain = ParseJob(kBase);
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->workers.container.command.empty());
}

TEST(ParseJob, AcceptsAnObjectAsReadBackFromTheApiServer) {
  std::string yaml = With(kBase, "metadata.uid", "6f1c2a9e-0000-4000-8000-000000000001");
  yaml = With(yaml, "metadata.resourceVersion", "'42'");
  yaml = With(yaml, "metadata.generation", "3");
  yaml = With(yaml, "metadata.creationTimestamp", "2025-01-01T00:00:00Z");
  yaml = With(yaml, "metadata.managedFields", "[{manager: kubectl}]");
  yaml = With(yaml, "status", "{phase: Running}");
  absl::StatusOr<Job> job = ParseJob(yaml);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name, "demo");
}

TEST(ParseJob, NullFieldsReadAsAbsent) {
  absl::StatusOr<Job> job =
      ParseJob(With(With(kBase, "spec.model", "~"), "spec.monitor.window", "null"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model.features, 16);
  EXPECT_EQ(job->monitor.window_ms, 1'000);
  EXPECT_EQ(job->monitor.window_steps, 2);
}

TEST(ParseJob, WindowsInStepsAndDefaultsThatFitTheJob) {
  // windowSteps with a window: steps, the window the first ones' length.
  absl::StatusOr<Job> job =
      ParseJob(With(With(kBase, "spec.monitor.window", "\"2s\""), "spec.monitor.windowSteps", "3"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->monitor.window_ms, 2'000);
  EXPECT_EQ(job->monitor.window_steps, 3);
  // A cooldown given is kept; the budget grows with the workers unless given.
  const std::string wide =
      With(With(kBase, "spec.workers.replicas", "1000"), "spec.model.globalBatchSize", "32000");
  job = ParseJob(With(wide, "spec.stragglerPolicy.cooldown", "\"5s\""));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->straggler_policy.cooldown_ms, 5'000);
  EXPECT_FALSE(job->straggler_policy.cooldown_derived);
  EXPECT_EQ(job->straggler_policy.max_actions, 200);
  job = ParseJob(With(wide, "spec.stragglerPolicy.maxActions", "7"));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->straggler_policy.max_actions, 7);
}

struct ErrorCase {
  std::string path;                  // the field changed in kBase
  std::optional<std::string> value;  // its new YAML value; nullopt: removed
  std::string error;                 // the exact message
};

void PrintTo(const ErrorCase& c, std::ostream* os) {
  *os << c.path << "=" << c.value.value_or("<removed>");
}

class JobErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(JobErrorTest, NamesTheFieldPath) {
  const ErrorCase& c = GetParam();
  absl::StatusOr<Job> job = ParseJob(With(kBase, c.path, c.value));
  ASSERT_FALSE(job.ok()) << c.path;
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(job.status().message()), c.error);
}

const char kCustomRule[] = "[{signal: score, threshold: 1.5, action: ADJUST_BS}]";

INSTANTIATE_TEST_SUITE_P(
    Cases, JobErrorTest,
    ::testing::Values(
        // Unknown fields, at every level.
        ErrorCase{"spec.workers.replcas", "4",
                  "spec.workers.replcas: unknown field; did you mean \"replicas\"?"},
        ErrorCase{"spec.replicas", "4", "spec.replicas: unknown field"},
        ErrorCase{"extra", "1", "extra: unknown field"},
        ErrorCase{"metadata.nmae", "x", "metadata.nmae: unknown field; did you mean \"name\"?"},
        ErrorCase{"spec.dataset.shards", "1", "spec.dataset.shards: unknown field"},
        ErrorCase{"spec.monitor.windows", "2s",
                  "spec.monitor.windows: unknown field; did you mean \"window\"?"},
        ErrorCase{"spec.local.speed", "2", "spec.local.speed: unknown field"},
        // A near name is suggested (common/spelling.h), case slips included.
        ErrorCase{"spec.workers.replica", "4",
                  "spec.workers.replica: unknown field; did you mean \"replicas\"?"},
        ErrorCase{"spec.dataset.shardsize", "10",
                  "spec.dataset.shardsize: unknown field; did you mean \"shardSize\"?"},
        ErrorCase{"spec.stragglerPolicy.maxAction", "2",
                  "spec.stragglerPolicy.maxAction: unknown field; did you mean \"maxActions\"?"},
        ErrorCase{"spec.monitor.persistentWindow", "2",
                  "spec.monitor.persistentWindow: unknown field; did you mean "
                  "\"persistentWindows\"?"},
        ErrorCase{"spec.stragglerPolicy.name", "antdt-ndd",
                  "spec.stragglerPolicy.name: must be one of antdt-nd, antdt-dd, custom, none, "
                  "backup-workers, lb-bsp, got \"antdt-ndd\"; did you mean \"antdt-nd\"?"},
        ErrorCase{"spec.stragglerPolicy.name", "AntDT-DD",
                  "spec.stragglerPolicy.name: must be one of antdt-nd, antdt-dd, custom, none, "
                  "backup-workers, lb-bsp, got \"AntDT-DD\"; did you mean \"antdt-dd\"?"},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: selfscore, threshold: 1.5, action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[0].signal: must be one of score, self_score, class, "
                  "got \"selfscore\"; did you mean \"self_score\"?"},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: score, threshold: 1.5, action: KILL_RESTRAT}]}",
                  "spec.stragglerPolicy.rules[0].action: must be one of ADJUST_BS, KILL_RESTART, "
                  "got \"KILL_RESTRAT\"; did you mean \"KILL_RESTART\"?"},
        // apiVersion, kind, metadata.
        ErrorCase{"apiVersion", "v1", "apiVersion: must be \"antdt.io/v1alpha1\", got \"v1\""},
        ErrorCase{"apiVersion", std::nullopt, "apiVersion: required"},
        ErrorCase{"kind", "TFJob", "kind: must be \"AntDTJob\", got \"TFJob\""},
        ErrorCase{"metadata", std::nullopt, "metadata: required"},
        ErrorCase{"metadata.name", std::nullopt, "metadata.name: required"},
        ErrorCase{"metadata.name", "My_Job",
                  "metadata.name: must be a DNS-1123 label (lowercase letters, digits and '-', at "
                  "most 63 characters, starting and ending with a letter or digit), got "
                  "\"My_Job\""},
        ErrorCase{"metadata.name", "job-",
                  "metadata.name: must be a DNS-1123 label (lowercase letters, digits and '-', at "
                  "most 63 characters, starting and ending with a letter or digit), got \"job-\""},
        ErrorCase{"metadata.name", std::string(64, 'a'),
                  "metadata.name: must be a DNS-1123 label (lowercase letters, digits and '-', at "
                  "most 63 characters, starting and ending with a letter or digit), got \"" +
                      std::string(64, 'a') + "\""},
        ErrorCase{"metadata.name", "1job",
                  "metadata.name: must start with a letter: the job's Services (<name>-sharding, "
                  "<name>-workers) are named after it (DNS-1035)"},
        ErrorCase{"metadata.name", std::string(55, 'a'),
                  "metadata.name: must be at most 54 characters: the job's Service "
                  "<name>-sharding must fit in 63"},
        ErrorCase{"metadata.namespace", "Team.A",
                  "metadata.namespace: must be a DNS-1123 label (lowercase letters, digits and "
                  "'-', at most 63 characters, starting and ending with a letter or digit), got "
                  "\"Team.A\""},
        ErrorCase{"metadata.labels", "[a, b]", "metadata.labels: must be a mapping, got a list"},
        ErrorCase{"metadata.labels.team", "{a: b}",
                  "metadata.labels.team: must be a string, got a mapping"},
        // Wrong types.
        ErrorCase{"spec", std::nullopt, "spec: required"},
        ErrorCase{"spec", "[1]", "spec: must be a mapping, got a list"},
        ErrorCase{"spec.workers", "[1]", "spec.workers: must be a mapping, got a list"},
        ErrorCase{"spec.dataset.records", "abc",
                  "spec.dataset.records: must be an integer, got \"abc\""},
        ErrorCase{"spec.dataset.records", "1.5",
                  "spec.dataset.records: must be an integer, got \"1.5\""},
        ErrorCase{"spec.dataset.records", "[1]",
                  "spec.dataset.records: must be an integer, got a list"},
        ErrorCase{"spec.dataset.shuffle", "yes",
                  "spec.dataset.shuffle: must be true or false, got \"yes\""},
        ErrorCase{"spec.dataset.seed", "-1", "spec.dataset.seed: must be >= 0, got -1"},
        ErrorCase{"spec.dataset.guidedLeasing", "sometimes",
                  "spec.dataset.guidedLeasing: must be true or false, got \"sometimes\""},
        ErrorCase{"spec.model.learningRate", "fast",
                  "spec.model.learningRate: must be a number, got \"fast\""},
        ErrorCase{"spec.model.learningRate", ".nan",
                  "spec.model.learningRate: must be a number, got \".nan\""},
        ErrorCase{"spec.workers.replicas", "3000000000",
                  "spec.workers.replicas: must be <= 2147483647, got 3000000000"},
        ErrorCase{"spec.checkpoint.path", "{a: 1}",
                  "spec.checkpoint.path: must be a string, got a mapping"},
        ErrorCase{"spec.workers.template", "abc",
                  "spec.workers.template: must be a mapping, got \"abc\""},
        ErrorCase{"spec.workers.template", "{spec: {containers: [{command: python3}]}}",
                  "spec.workers.template.spec.containers[0].command: must be a list of strings, "
                  "got \"python3\""},
        ErrorCase{"spec.workers.template", "{spec: {containers: [{args: [a, [b]]}]}}",
                  "spec.workers.template.spec.containers[0].args[1]: must be a string, got a "
                  "list"},
        ErrorCase{"spec.workers.template", "{spec: {containers: [{env: {A: b}}]}}",
                  "spec.workers.template.spec.containers[0].env: must be a list, got a mapping"},
        ErrorCase{"spec.workers.template", "{spec: {containers: [{env: [{value: b}]}]}}",
                  "spec.workers.template.spec.containers[0].env[0].name: required"},
        ErrorCase{"spec.workers.template",
                  "{spec: {containers: [{env: [{name: A, value: b}, {name: B, valu: c}]}]}}",
                  "spec.workers.template.spec.containers[0].env[1].valu: unknown field; did you "
                  "mean \"value\"?"},
        ErrorCase{"spec.workers.template",
                  "{spec: {containers: [{env: [{name: A, value: b, valueFrom: {}}]}]}}",
                  "spec.workers.template.spec.containers[0].env[0].valueFrom: not allowed "
                  "together with value"},
        ErrorCase{"spec.parameterServers.template", "{spec: {containers: [abc]}}",
                  "spec.parameterServers.template.spec.containers[0]: must be a mapping, got "
                  "\"abc\""},
        // Ranges and required fields.
        ErrorCase{"spec.dataset", std::nullopt, "spec.dataset: required"},
        ErrorCase{"spec.dataset.records", std::nullopt, "spec.dataset.records: required"},
        ErrorCase{"spec.dataset.records", "0", "spec.dataset.records: must be >= 1, got 0"},
        ErrorCase{"spec.dataset.shardSize", "-5", "spec.dataset.shardSize: must be >= 1, got -5"},
        ErrorCase{"spec.dataset.epochs", "0", "spec.dataset.epochs: must be >= 1, got 0"},
        ErrorCase{"spec.workers", std::nullopt, "spec.workers: required"},
        ErrorCase{"spec.workers.replicas", std::nullopt, "spec.workers.replicas: required"},
        ErrorCase{"spec.workers.replicas", "-2", "spec.workers.replicas: must be >= 1, got -2"},
        ErrorCase{"spec.workers.replicas", "0", "spec.workers.replicas: must be >= 1, got 0"},
        ErrorCase{"spec.parameterServers.replicas", "-1",
                  "spec.parameterServers.replicas: must be >= 0, got -1"},
        ErrorCase{"spec.model.features", "5000",
                  "spec.model.features: must be between 1 and 4096, got 5000"},
        ErrorCase{"spec.model.learningRate", "0", "spec.model.learningRate: must be > 0, got 0"},
        ErrorCase{"spec.model.globalBatchSize", "2",
                  "spec.model.globalBatchSize: must be >= spec.workers.replicas (4), got 2"},
        // Straggler policy.
        ErrorCase{"spec.stragglerPolicy.name", "fast",
                  "spec.stragglerPolicy.name: must be one of antdt-nd, antdt-dd, custom, none, "
                  "backup-workers, lb-bsp, got \"fast\""},
        ErrorCase{"spec.stragglerPolicy.cooldown", "60",
                  "spec.stragglerPolicy.cooldown: must be a duration like \"30s\", \"500ms\" or "
                  "\"2m\", got \"60\""},
        ErrorCase{"spec.stragglerPolicy.mode", "Advise",
                  "spec.stragglerPolicy.mode: must be one of Act, Recommend, got \"Advise\""},
        ErrorCase{"spec.stragglerPolicy.decideBy", "hunch",
                  "spec.stragglerPolicy.decideBy: must be one of expectedDuration, thresholds, got "
                  "\"hunch\""},
        ErrorCase{"spec.stragglerPolicy.maxActions", "-1",
                  "spec.stragglerPolicy.maxActions: must be >= 0, got -1"},
        ErrorCase{"spec.stragglerPolicy.minSavingRatio", "-0.5",
                  "spec.stragglerPolicy.minSavingRatio: must be >= 0, got -0.5"},
        ErrorCase{"spec.stragglerPolicy.stepDeadline", "1.05",
                  "spec.stragglerPolicy.stepDeadline: must be 0 (off) or between 1.1 and 10, got "
                  "1.05"},
        ErrorCase{"spec.stragglerPolicy.stepDeadline", "-1",
                  "spec.stragglerPolicy.stepDeadline: must be 0 (off) or between 1.1 and 10, got "
                  "-1"},
        ErrorCase{"spec.stragglerPolicy.stepDeadline", "11",
                  "spec.stragglerPolicy.stepDeadline: must be 0 (off) or between 1.1 and 10, got "
                  "11"},
        ErrorCase{"spec.stragglerPolicy", "{name: backup-workers, backupWorkers: 4}",
                  "spec.stragglerPolicy.backupWorkers: must be between 1 and "
                  "spec.workers.replicas - 1 (3) with backup-workers, got 4"},
        ErrorCase{"spec.stragglerPolicy.rules", kCustomRule,
                  "spec.stragglerPolicy.rules: only allowed with name custom, got name "
                  "\"antdt-nd\""},
        ErrorCase{"spec.stragglerPolicy", "{name: custom}",
                  "spec.stragglerPolicy.rules: required with name custom"},
        ErrorCase{"spec.stragglerPolicy", "{name: custom, rules: []}",
                  "spec.stragglerPolicy.rules: must list at least one rule with name custom"},
        ErrorCase{"spec.stragglerPolicy", "{name: custom, rules: {signal: score}}",
                  "spec.stragglerPolicy.rules: must be a list, got a mapping"},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: score, threshold: 1.5, action: ADJUST_BS}, "
                  "{signal: loud, action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[1].signal: must be one of score, self_score, class, "
                  "got \"loud\""},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: score, treshold: 1.5, action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[0].treshold: unknown field; did you mean "
                  "\"threshold\"?"},
        ErrorCase{"spec.stragglerPolicy", "{name: custom, rules: [{signal: score, action: X}]}",
                  "spec.stragglerPolicy.rules[0].threshold: required"},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: score, threshold: 1.5, action: RESTART}]}",
                  "spec.stragglerPolicy.rules[0].action: must be one of ADJUST_BS, KILL_RESTART, "
                  "got \"RESTART\""},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: class, threshold: 2, action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[0].threshold: only allowed with signal score or "
                  "self_score"},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: class, class: slow, action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[0].class: must be one of transient, persistent, "
                  "deterministic, got \"slow\""},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: self_score, threshold: 2, class: transient, "
                  "action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[0].class: only allowed with signal class"},
        ErrorCase{"spec.stragglerPolicy",
                  "{name: custom, rules: [{signal: score, threshold: 2, windows: 0, "
                  "action: ADJUST_BS}]}",
                  "spec.stragglerPolicy.rules[0].windows: must be >= 1, got 0"},
        ErrorCase{"spec.stragglerPolicy", "{name: custom, rules: [7]}",
                  "spec.stragglerPolicy.rules[0]: must be a mapping, got \"7\""},
        // Monitor.
        ErrorCase{"spec.monitor.window", "10",
                  "spec.monitor.window: must be a duration like \"30s\", \"500ms\" or \"2m\", "
                  "got \"10\""},
        ErrorCase{"spec.monitor.window", "0", "spec.monitor.window: must be > 0, got 0ms"},
        ErrorCase{"spec.monitor.window", "-2s",
                  "spec.monitor.window: must be a duration like \"30s\", \"500ms\" or \"2m\", "
                  "got \"-2s\""},
        ErrorCase{"spec.monitor.windowSteps", "-1",
                  "spec.monitor.windowSteps: must be in [0, 1000] (0: windows in time), got -1"},
        ErrorCase{"spec.monitor.windowSteps", "5000",
                  "spec.monitor.windowSteps: must be in [0, 1000] (0: windows in time), got 5000"},
        ErrorCase{"spec.monitor.allowedLateness", "-1s",
                  "spec.monitor.allowedLateness: must be a duration like \"30s\", \"500ms\" or "
                  "\"2m\", got \"-1s\""},
        ErrorCase{"spec.monitor.stragglerThreshold", "0.9",
                  "spec.monitor.stragglerThreshold: must be > 1, got 0.9"},
        ErrorCase{"spec.monitor.recoverThreshold", "1.5",
                  "spec.monitor.recoverThreshold: must be < spec.monitor.stragglerThreshold "
                  "(1.3), got 1.5"},
        ErrorCase{"spec.monitor.recoverThreshold", "1.3",
                  "spec.monitor.recoverThreshold: must be < spec.monitor.stragglerThreshold "
                  "(1.3), got 1.3"},
        ErrorCase{"spec.monitor.persistentWindows", "0",
                  "spec.monitor.persistentWindows: must be >= 1, got 0"},
        ErrorCase{"spec.monitor.warmupWindows", "-1",
                  "spec.monitor.warmupWindows: must be >= 0, got -1"},
        // Checkpoint, run policy, local.
        ErrorCase{"spec.checkpoint.everySteps", "100",
                  "spec.checkpoint.path: required when everySteps > 0"},
        ErrorCase{"spec.runPolicy.backoffLimit", "-1",
                  "spec.runPolicy.backoffLimit: must be >= 0, got -1"},
        ErrorCase{"spec.runPolicy.ttlSecondsAfterFinished", "-1",
                  "spec.runPolicy.ttlSecondsAfterFinished: must be >= 0, got -1"},
        ErrorCase{"spec.runPolicy.schedulingPolicy.minAvailable", "0",
                  "spec.runPolicy.schedulingPolicy.minAvailable: must be >= 1, got 0"},
        ErrorCase{"spec.runPolicy.schedulingPolicy.minMember", "2",
                  "spec.runPolicy.schedulingPolicy.minMember: unknown field"},
        ErrorCase{"spec.runPolicy.activeDeadlineSeconds", "0",
                  "spec.runPolicy.activeDeadlineSeconds: must be >= 1, got 0"},
        ErrorCase{"spec.suspend", "maybe", "spec.suspend: must be true or false, got \"maybe\""},
        ErrorCase{"spec.workers.template.spec.restartPolicy", "OnFailure",
                  "spec.workers.template.spec.restartPolicy: must be Never or absent, got "
                  "\"OnFailure\": AntDT restarts a failed worker itself, as a new pod counted "
                  "against spec.runPolicy.backoffLimit"},
        ErrorCase{"spec.local.deviceTimePerSample", "200",
                  "spec.local.deviceTimePerSample: must be a duration like \"200us\" or \"1ms\", "
                  "got \"200\""}));

struct TextCase {
  std::string name;
  std::string yaml;
  std::string error;
};

void PrintTo(const TextCase& c, std::ostream* os) { *os << c.name; }

class JobTextErrorTest : public ::testing::TestWithParam<TextCase> {};

TEST_P(JobTextErrorTest, Rejects) {
  absl::StatusOr<Job> job = ParseJob(GetParam().yaml);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(std::string(job.status().message()), GetParam().error);
}

constexpr char kHead[] = "apiVersion: antdt.io/v1alpha1\nkind: AntDTJob\nmetadata: {name: a}\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, JobTextErrorTest,
    ::testing::Values(
        TextCase{"Empty", "", "manifest: empty document"},
        TextCase{"OnlyComments", "# nothing\n", "manifest: empty document"},
        TextCase{"NotAMapping", "- a\n- b\n", "manifest: must be a mapping, got a list"},
        TextCase{"TwoDocuments", std::string(kBase) + "---\n" + kBase,
                 "manifest: must hold one YAML document, got 2"},
        TextCase{"QuotedInteger",
                 std::string(kHead) +
                     "spec:\n  dataset: {records: \"1000\", shardSize: 1}\n  workers: "
                     "{replicas: 1}\n",
                 "spec.dataset.records: must be an integer, got \"1000\" (quoted)"},
        TextCase{"DuplicateField",
                 std::string(kHead) +
                     "spec:\n  dataset: {records: 1, shardSize: 1}\n  workers:\n    replicas: 1\n"
                     "    replicas: 2\n",
                 "spec.workers.replicas: duplicate field"},
        TextCase{"UnclosedFlowMapping",
                 std::string(kHead) + "spec:\n  dataset: {records: 1\n  workers: {}\n",
                 "manifest: not valid YAML: line 6, column 10: end of map flow not found"},
        TextCase{"BadIndentation",
                 std::string(kHead) + "spec:\n  dataset:\n    records: 1\n   shardSize: 2\n",
                 "manifest: not valid YAML: line 7, column 4: end of map not found"}),
    [](const ::testing::TestParamInfo<TextCase>& param_info) { return param_info.param.name; });

TEST(ParseJob, ExampleQuickstart) {
  const std::string path = SourceFile("examples/jobs/quickstart.yaml");
  absl::StatusOr<Job> job = ParseJob(Read(path));
  ASSERT_TRUE(job.ok()) << path << ": " << job.status();
  EXPECT_EQ(job->name, "quickstart");
  EXPECT_EQ(job->dataset.records, 60'000);
  EXPECT_EQ(job->dataset.shard_size, 200);
  EXPECT_EQ(job->dataset.epochs, 2);
  EXPECT_EQ(job->workers.replicas, 4);
  EXPECT_EQ(job->parameter_servers.replicas, 1);
  EXPECT_EQ(job->straggler_policy.name, vocab::Policy::kAntdtNd);
  EXPECT_EQ(job->monitor.window_ms, 2'000);
  EXPECT_EQ(job->local.scenario, "../scenarios/quickstart.yaml");
  EXPECT_TRUE(job->local.device_work_cpu);
  // The scenario path is relative to the manifest, and every worker has a node.
  absl::StatusOr<Scenario> scenario =
      ParseScenario(Read(SourceFile("examples/jobs/" + job->local.scenario)));
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  int workers_nodes = 0;
  for (const NodeSpec& n : scenario->nodes) workers_nodes += n.spare ? 0 : 1;
  EXPECT_EQ(workers_nodes, job->workers.replicas);
}

TEST(ParseJob, ExamplePaperMix) {
  const std::string path = SourceFile("examples/jobs/paper-mix.yaml");
  absl::StatusOr<Job> job = ParseJob(Read(path));
  ASSERT_TRUE(job.ok()) << path << ": " << job.status();
  EXPECT_EQ(job->name, "paper-mix");
  EXPECT_EQ(job->dataset.records, 400'000);
  EXPECT_EQ(job->dataset.shard_size, 250);
  EXPECT_EQ(job->dataset.epochs, 1);
  EXPECT_EQ(job->workers.replicas, 8);
  EXPECT_EQ(job->parameter_servers.replicas, 2);
  EXPECT_EQ(job->straggler_policy.name, vocab::Policy::kAntdtNd);
  EXPECT_EQ(job->monitor.window_ms, 300);
  EXPECT_EQ(job->monitor.allowed_lateness_ms, 100);
  EXPECT_EQ(job->straggler_policy.cooldown_ms, 3'000);
  EXPECT_EQ(job->model.global_batch_size, 512);
  EXPECT_EQ(job->local.device_time_per_sample_us, 1'000);
  absl::StatusOr<Scenario> scenario =
      ParseScenario(Read(SourceFile("examples/jobs/" + job->local.scenario)));
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  EXPECT_EQ(scenario->name, "paper-mix");
}

TEST(ParseJob, ExampleHeterogeneousAndItsBound) {
  const std::string path = SourceFile("examples/jobs/heterogeneous.yaml");
  absl::StatusOr<Job> job = ParseJob(Read(path));
  ASSERT_TRUE(job.ok()) << path << ": " << job.status();
  EXPECT_EQ(job->straggler_policy.name, vocab::Policy::kAntdtDd);
  absl::StatusOr<Scenario> real =
      ParseScenario(Read(SourceFile("examples/jobs/" + job->local.scenario)));
  absl::StatusOr<Scenario> bound =
      ParseScenario(Read(SourceFile("examples/scenarios/heterogeneous-bound.yaml")));
  ASSERT_TRUE(real.ok()) << real.status();
  ASSERT_TRUE(bound.ok()) << bound.status();
  // The bound spreads the same total speed evenly over the same nodes.
  double total_real = 0, total_bound = 0;
  for (const NodeSpec& n : real->nodes) total_real += n.speed;
  for (const NodeSpec& n : bound->nodes) total_bound += n.speed;
  EXPECT_EQ(real->nodes.size(), bound->nodes.size());
  EXPECT_NEAR(total_real, total_bound, 1e-9);
}

TEST(ParseScenario, ExampleQuickstart) {
  absl::StatusOr<Scenario> s =
      ParseScenario(Read(SourceFile("examples/scenarios/quickstart.yaml")));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes.size(), 5u);
  EXPECT_EQ(s->nodes[0].name, "node-0");
  EXPECT_EQ(s->nodes[4].name, "spare-0");
  EXPECT_TRUE(s->nodes[4].spare);
  EXPECT_FALSE(s->nodes[3].spare);
  ASSERT_EQ(s->slowdowns.size(), 1u);
  EXPECT_EQ(s->slowdowns[0].kind, v1::PERSISTENT);
  // A real slowdown (a CPU quota), not the emulated speed.
  EXPECT_EQ(s->slowdowns[0].via, SlowdownVia::kCpuQuota);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-2", 4'000), 1.0);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("node-2", 3'999), 1.0);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("node-2", 4'000), 3.0);
  EXPECT_DOUBLE_EQ(s->FactorVia("node-1", SlowdownVia::kCpuQuota, 4'000), 1.0);
  EXPECT_TRUE(s->Uses("node-2", SlowdownVia::kCpuQuota));
  EXPECT_FALSE(s->Uses("node-2", SlowdownVia::kCpuContention));
}

TEST(ParseScenario, ExamplePaperMix) {
  absl::StatusOr<Scenario> s = ParseScenario(Read(SourceFile("examples/scenarios/paper-mix.yaml")));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes.size(), 10u);
  int spares = 0;
  for (const NodeSpec& n : s->nodes) {
    spares += n.spare ? 1 : 0;
    EXPECT_EQ(n.labels.at("antdt.io/hardware"), n.name == "node-1" ? "older-gpu" : "h200");
  }
  EXPECT_EQ(spares, 2);
  ASSERT_EQ(s->slowdowns.size(), 3u);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-1", 0), 1 / 1.5);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-3", 5'999), 1.0);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-3", 6'000), 1.0 / 3);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-3", 14'000), 1.0);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-5", 3'000), 0.25);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-6", 10'000), 1.5);
  EXPECT_DOUBLE_EQ(s->SpeedAt("node-0", 10'000), 1.0);
}

TEST(ParseScenario, ExampleHeterogeneous) {
  absl::StatusOr<Scenario> s =
      ParseScenario(Read(SourceFile("examples/scenarios/heterogeneous.yaml")));
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<double> speeds;
  for (const NodeSpec& n : s->nodes) {
    EXPECT_FALSE(n.spare) << n.name;
    speeds.push_back(s->SpeedAt(n.name, 60'000));
  }
  EXPECT_THAT(speeds, ::testing::ElementsAre(1.0, 1.0, 0.5, 0.7, 1.5, 1.0, 1.2, 1.0));
  EXPECT_TRUE(s->slowdowns.empty());
}

constexpr char kTimeline[] = R"(
name: timeline
nodes:
  - {name: plain}
  - {name: leader, speed: 1.5}
  - {name: det}
  - {name: tr}
  - {name: per}
  - {name: mixed, speed: 2}
  - {name: spare, spare: true}
slowdowns:
  - {node: det, kind: deterministic, factor: 2}
  - {node: tr, kind: transient, factor: 4, start: 1s, duration: 2s}
  - {node: per, kind: persistent, factor: 3, start: 500ms}
  - {node: mixed, kind: deterministic, factor: 2, start: 0s}
  - {node: mixed, kind: transient, factor: 2, start: 0, duration: 1s}
  - {node: mixed, kind: persistent, factor: 5, start: 2s}
)";

struct SpeedCase {
  std::string node;
  int64_t t_ms;
  double speed;
};

void PrintTo(const SpeedCase& c, std::ostream* os) { *os << c.node << "@" << c.t_ms << "ms"; }

class SpeedAtTest : public ::testing::TestWithParam<SpeedCase> {};

TEST_P(SpeedAtTest, FollowsTheSlowdowns) {
  absl::StatusOr<Scenario> scenario = ParseScenario(kTimeline);
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  const SpeedCase& c = GetParam();
  EXPECT_DOUBLE_EQ(scenario->SpeedAt(c.node, c.t_ms), c.speed) << c.node << " at " << c.t_ms;
}

INSTANTIATE_TEST_SUITE_P(
    Timeline, SpeedAtTest,
    ::testing::Values(
        SpeedCase{"plain", 0, 1.0}, SpeedCase{"plain", 100'000, 1.0}, SpeedCase{"leader", 0, 1.5},
        SpeedCase{"leader", 100'000, 1.5}, SpeedCase{"unknown-node", 5'000, 1.0},
        // Deterministic: from the start, for good.
        SpeedCase{"det", 0, 0.5}, SpeedCase{"det", 100'000, 0.5},
        // Transient: [1s, 3s).
        SpeedCase{"tr", 0, 1.0}, SpeedCase{"tr", 999, 1.0}, SpeedCase{"tr", 1'000, 0.25},
        SpeedCase{"tr", 2'999, 0.25}, SpeedCase{"tr", 3'000, 1.0}, SpeedCase{"tr", 100'000, 1.0},
        // Persistent: from 500ms on.
        SpeedCase{"per", 499, 1.0}, SpeedCase{"per", 500, 1.0 / 3},
        SpeedCase{"per", 100'000, 1.0 / 3},
        // Overlapping slowdowns multiply.
        SpeedCase{"mixed", 0, 0.5}, SpeedCase{"mixed", 999, 0.5}, SpeedCase{"mixed", 1'000, 1.0},
        SpeedCase{"mixed", 2'000, 0.2}, SpeedCase{"spare", 0, 1.0}));

TEST(ParseScenario, CpuQuotaSlowdownsLeaveTheEmulatedSpeedAlone) {
  absl::StatusOr<Scenario> s = ParseScenario(R"(
nodes: [{name: a}, {name: b, speed: 2}]
slowdowns:
  - {node: a, kind: persistent, factor: 3, start: 5s, via: cpu-quota}
  - {node: a, kind: transient, factor: 2, start: 6s, duration: 1s, via: cpu-quota}
  - {node: b, kind: persistent, factor: 4, start: 1s, via: emulated}
)");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->slowdowns[0].via, SlowdownVia::kCpuQuota);
  EXPECT_EQ(s->slowdowns[2].via, SlowdownVia::kEmulated);
  EXPECT_DOUBLE_EQ(s->SpeedAt("a", 10'000), 1.0);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("a", 4'999), 1.0);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("a", 5'000), 3.0);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("a", 6'500), 6.0);
  EXPECT_DOUBLE_EQ(s->SpeedAt("b", 2'000), 0.5);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("b", 2'000), 1.0);
  size_t index = 99;
  EXPECT_TRUE(s->UsesCpuQuota("a", &index));
  EXPECT_EQ(index, 0u);
  EXPECT_FALSE(s->UsesCpuQuota("b"));
}

TEST(ParseScenario, ExamplePytorchCpuQuota) {
  absl::StatusOr<Scenario> s =
      ParseScenario(Read(SourceFile("examples/scenarios/pytorch-cpu-quota.yaml")));
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->nodes.size(), 4u);
  EXPECT_TRUE(s->nodes[3].spare);
  ASSERT_EQ(s->slowdowns.size(), 1u);
  EXPECT_EQ(s->slowdowns[0].node, "node-1");
  EXPECT_EQ(s->slowdowns[0].via, SlowdownVia::kCpuQuota);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("node-1", 5'000), 3.0);
  EXPECT_DOUBLE_EQ(s->CpuQuotaFactorAt("node-1", 4'999), 1.0);
}

class ScenarioErrorTest : public ::testing::TestWithParam<TextCase> {};

TEST_P(ScenarioErrorTest, NamesTheFieldPath) {
  absl::StatusOr<Scenario> s = ParseScenario(GetParam().yaml);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.status().message()), GetParam().error);
}

constexpr char kNodes[] = "nodes: [{name: node-0}, {name: node-1}, {name: node-2}]\n";

INSTANTIATE_TEST_SUITE_P(
    Cases, ScenarioErrorTest,
    ::testing::Values(
        TextCase{"Empty", "", "scenario: empty document"},
        TextCase{"NotYaml", "nodes: [a\n",
                 "scenario: not valid YAML: line 2, column 1: end of "
                 "sequence flow not found"},
        TextCase{"UnknownTop", std::string(kNodes) + "speed: 2\n", "speed: unknown field"},
        TextCase{"NoNodes", "name: x\n", "nodes: required"},
        TextCase{"EmptyNodes", "nodes: []\n", "nodes: must list at least one node"},
        TextCase{"NodesNotList", "nodes: {a: 1}\n", "nodes: must be a list, got a mapping"},
        TextCase{"NodeUnknownField", "nodes: [{name: a, sped: 2}]\n",
                 "nodes[0].sped: unknown field; did you mean \"speed\"?"},
        TextCase{"NodeNoName", "nodes: [{name: a}, {speed: 2}]\n", "nodes[1].name: required"},
        TextCase{"DuplicateNode", "nodes: [{name: a}, {name: b}, {name: a}]\n",
                 "nodes[2].name: duplicate node \"a\""},
        TextCase{"ZeroSpeed", "nodes: [{name: a, speed: 0}]\n",
                 "nodes[0].speed: must be > 0, got 0"},
        TextCase{"SpareNotBool", "nodes: [{name: a, spare: 1}]\n",
                 "nodes[0].spare: must be true or false, got \"1\""},
        TextCase{"LabelNotString", "nodes: [{name: a, labels: {hw: [1]}}]\n",
                 "nodes[0].labels.hw: must be a string, got a list"},
        TextCase{"NoSuchNode",
                 std::string(kNodes) + "slowdowns:\n"
                                       "  - {node: node-0, kind: persistent, factor: 2}\n"
                                       "  - {node: node-1, kind: persistent, factor: 2}\n"
                                       "  - {node: node-9, kind: persistent, factor: 2}\n",
                 "slowdowns[2].node: no node \"node-9\""},
        TextCase{"SlowdownNoNode", std::string(kNodes) + "slowdowns: [{kind: persistent}]\n",
                 "slowdowns[0].node: required"},
        TextCase{"SlowdownsNotList", std::string(kNodes) + "slowdowns: {node: node-0}\n",
                 "slowdowns: must be a list, got a mapping"},
        TextCase{"BadKind", std::string(kNodes) + "slowdowns: [{node: node-0, kind: sticky}]\n",
                 "slowdowns[0].kind: must be one of deterministic, transient, persistent, got "
                 "\"sticky\""},
        TextCase{"NoFactor",
                 std::string(kNodes) + "slowdowns: [{node: node-0, kind: persistent}]\n",
                 "slowdowns[0].factor: required"},
        TextCase{"FactorOne",
                 std::string(kNodes) + "slowdowns: [{node: node-0, kind: persistent, factor: 1}]\n",
                 "slowdowns[0].factor: must be > 1, got 1"},
        TextCase{"BadStart",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: persistent, factor: 2, start: 4}]\n",
                 "slowdowns[0].start: must be a duration like \"30s\", \"500ms\" or \"2m\", got "
                 "\"4\""},
        TextCase{"DeterministicLateStart",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: deterministic, factor: 2, start: 2s}]\n",
                 "slowdowns[0].start: must be 0 for a deterministic slowdown, got \"2s\""},
        TextCase{"TransientNoDuration",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: transient, factor: 2, start: 2s}]\n",
                 "slowdowns[0].duration: required for a transient slowdown"},
        TextCase{"TransientZeroDuration",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: transient, factor: 2, duration: 0s}]\n",
                 "slowdowns[0].duration: must be > 0, got \"0s\""},
        TextCase{"PersistentDuration",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: persistent, factor: 2, duration: 5s}]\n",
                 "slowdowns[0].duration: only allowed for a transient slowdown (a persistent one "
                 "lasts until the end)"},
        TextCase{"NearKind", std::string(kNodes) + "slowdowns: [{node: node-0, kind: transeint}]\n",
                 "slowdowns[0].kind: must be one of deterministic, transient, persistent, got "
                 "\"transeint\"; did you mean \"transient\"?"},
        TextCase{"NearSlowdownField",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: persistent, factor: 2, strat: 1s}]\n",
                 "slowdowns[0].strat: unknown field; did you mean \"start\"?"},
        TextCase{"NearTopField", std::string(kNodes) + "slowdown: []\n",
                 "slowdown: unknown field; did you mean \"slowdowns\"?"},
        TextCase{"NearRole", "nodes: [{name: a, role: PS}]\n",
                 "nodes[0].role: must be one of worker, ps, got \"PS\"; did you mean \"ps\"?"},
        TextCase{"BadRole", "nodes: [{name: a, role: server}]\n",
                 "nodes[0].role: must be one of worker, ps, got \"server\""},
        TextCase{"NearVia",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: persistent, factor: 2, via: cpu_quota}]\n",
                 "slowdowns[0].via: must be emulated, cpu-quota, cpu-contention, slow-data or "
                 "gpu-throttle, got \"cpu_quota\"; did you mean \"cpu-quota\"?"},
        TextCase{"BadVia",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-0, kind: persistent, factor: 2, via: cgroup}]\n",
                 "slowdowns[0].via: must be emulated, cpu-quota, cpu-contention, slow-data or "
                 "gpu-throttle, got \"cgroup\""},
        TextCase{"DeterministicDuration",
                 std::string(kNodes) +
                     "slowdowns: [{node: node-1, kind: deterministic, factor: 2, duration: 5s}]\n",
                 "slowdowns[0].duration: only allowed for a transient slowdown (a deterministic "
                 "one lasts until the end)"}),
    [](const ::testing::TestParamInfo<TextCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace antdt::manifest
