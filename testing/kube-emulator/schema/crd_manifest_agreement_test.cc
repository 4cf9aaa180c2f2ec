// The AntDTJob CRD (crds/antdt.io_antdtjobs.yaml) and the manifest parser
// (api/manifest ParseJob) describe the same jobs: every example manifest
// passes both, each invalid variant below is rejected by both naming the same
// field, and the valid variants pass both with the same effective values once
// the CRD's defaults are applied. One known, documented difference: Kubernetes
// prunes unknown fields where ParseJob rejects them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "api/manifest/manifest.h"
#include "backends/kubernetes/client/object.h"
#include "common/config.h"
#include "common/testing/testing.h"
#include "testing/kube-emulator/schema/schema.h"

namespace antdt::kubeemu {
namespace {

using json = nlohmann::json;

// Emits `n` as flow YAML, keeping quoted scalars quoted (YAML::Dump does not).
std::string Emit(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "~";
    case YAML::NodeType::Sequence: {
      std::string out = "[";
      for (size_t i = 0; i < n.size(); ++i) out += (i ? ", " : "") + Emit(n[i]);
      return out + "]";
    }
    case YAML::NodeType::Map: {
      std::string out = "{";
      bool first = true;
      for (const auto& kv : n) {
        out += (first ? "" : ", ") + kv.first.Scalar() + ": " + Emit(kv.second);
        first = false;
      }
      return out + "}";
    }
    case YAML::NodeType::Scalar:
      break;
  }
  if (n.Tag() == "?") return n.Scalar();
  return json(n.Scalar()).dump();  // a double-quoted YAML string
}

std::string ReadSource(const std::string& relative) {
  absl::StatusOr<std::string> text = ReadFile(antdt::testing::SourcePath(relative));
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

const json& Crd() {
  static const json crd = kube::YamlToJson(YAML::Load(ReadSource("crds/antdt.io_antdtjobs.yaml")));
  return crd;
}
const json& Version() { return Crd()["spec"]["versions"][0]; }
const json& Schema() { return Version()["schema"]["openAPIV3Schema"]; }

std::string Fields(const std::vector<Cause>& causes) {
  std::string out;
  for (const Cause& c : causes) out += "\n  " + c.field + " [" + c.type + "] " + c.message;
  return out;
}

// The field path an error of ParseJob names ("spec.workers.replicas: must be ...").
std::string ParserField(const absl::Status& status) {
  const std::string m(status.message());
  return m.substr(0, m.find(": "));
}

TEST(CrdTest, IsAValidStructuralCrd) {
  const json& crd = Crd();
  EXPECT_EQ(crd["apiVersion"], "apiextensions.k8s.io/v1");
  EXPECT_EQ(crd["kind"], "CustomResourceDefinition");
  EXPECT_EQ(crd["metadata"]["name"], "antdtjobs.antdt.io");
  EXPECT_EQ(crd["spec"]["group"], "antdt.io");
  EXPECT_EQ(crd["spec"]["scope"], "Namespaced");
  EXPECT_EQ(crd["spec"]["names"], json::parse(R"({"kind": "AntDTJob", "listKind": "AntDTJobList",
      "plural": "antdtjobs", "singular": "antdtjob", "shortNames": ["adt"], "categories": ["antdt"]})"));
  ASSERT_EQ(crd["spec"]["versions"].size(), 1u);
  EXPECT_EQ(Version()["name"], "v1alpha1");
  EXPECT_EQ(Version()["served"], true);
  EXPECT_EQ(Version()["storage"], true);
  EXPECT_EQ(Version()["subresources"], json::parse(R"({"status": {}, "scale": {
      "specReplicasPath": ".spec.workers.replicas",
      "statusReplicasPath": ".status.workers.active"}})"));
  // The scale paths name integer fields of the schema.
  for (const char* path : {".spec.workers.replicas", ".status.workers.active"}) {
    const json* at = &Schema();
    for (absl::string_view part : absl::StrSplit(absl::string_view(path).substr(1), '.')) {
      ASSERT_TRUE((*at)["properties"].contains(std::string(part))) << path;
      at = &(*at)["properties"][std::string(part)];
    }
    EXPECT_EQ((*at)["type"], "integer") << path;
  }
  std::vector<std::string> columns;
  for (const json& c : Version()["additionalPrinterColumns"]) {
    columns.push_back(c["name"].get<std::string>() + ":" + c["type"].get<std::string>() + ":" +
                      c["jsonPath"].get<std::string>());
  }
  EXPECT_THAT(
      columns,
      ::testing::ElementsAre(
          "State:string:.status.state",
          "Ready:string:.status.conditions[?(@.type==\"Running\")].status",
          "Workers:string:.status.workers.summary", "Progress:integer:.status.progress.percent",
          "Stragglers:integer:.status.stragglerCount", "Age:date:.metadata.creationTimestamp"));
  EXPECT_THAT(ValidateCrdSchema(Schema()), ::testing::IsEmpty())
      << Fields(ValidateCrdSchema(Schema()));
}

TEST(CrdTest, PrinterColumnsRenderAStatus) {
  json job = kube::YamlToJson(YAML::Load(ReadSource("examples/jobs/quickstart.yaml")));
  job["metadata"]["creationTimestamp"] = "2024-05-01T11:59:00Z";
  job["status"] = json::parse(R"({"observedGeneration": 1,
    "conditions": [{"type": "Created", "status": "True", "reason": "Created", "message": "",
                    "lastTransitionTime": "2024-05-01T11:59:01Z"},
                   {"type": "Running", "status": "True", "reason": "AllWorkersReady", "message": "4/4",
                    "lastTransitionTime": "2024-05-01T11:59:30Z", "observedGeneration": 1}],
    "workers": {"desired": 4, "active": 4, "ready": 4, "succeeded": 0, "failed": 0, "restarts": 1, "summary": "4/4"},
    "parameterServers": {"desired": 1, "active": 1, "ready": 1, "summary": "1/1"},
    "progress": {"recordsCommitted": 10000, "recordsTotal": 40000, "epoch": 0, "epochs": 2, "percent": 25, "etaSeconds": 12.5},
    "stragglerCount": 1,
    "stragglers": [{"worker": "2", "node": "node-2", "pod": "quickstart-worker-2", "class": "persistent",
                    "cause": "slow device", "score": 2.9, "since": "2024-05-01T11:59:40Z"}],
    "lastActions": [{"time": "2024-05-01T11:59:50Z", "action": "KILL_RESTART", "worker": "2",
                     "fromNode": "node-2", "toNode": "node-5", "avoidedNodes": ["node-3"],
                     "rule": "antdt-nd", "reason": "persistent straggler",
                     "evidence": "score 2.9 over 3 windows"}],
    "workerInstances": [{"id": "2", "incarnation": 1, "node": "node-5", "pod": "quickstart-worker-2",
                         "localBatchSize": 64, "excludedNodes": ["node-2"]}],
    "datasetCreated": true, "state": "Running", "startTime": "2024-05-01T11:59:02Z"})");
  json written = job;
  EXPECT_THAT(ValidateCustomResource(Schema(), written, nullptr), ::testing::IsEmpty())
      << Fields(ValidateCustomResource(Schema(), written, nullptr));
  EXPECT_EQ(written["status"],
            job["status"]);  // nothing pruned: the operator's fields are declared
  const json table = RenderTable(Version()["additionalPrinterColumns"], {written}, "7", 1714564800);
  EXPECT_EQ(table["rows"][0]["cells"],
            json::parse(R"(["quickstart", "Running", "True", "4/4", 25, 1, "60s"])"));

  json bad = job;
  bad["status"]["lastActions"] = json::array();
  for (int i = 0; i < 21; ++i)
    bad["status"]["lastActions"].push_back(job["status"]["lastActions"][0]);
  bad["status"]["progress"]["percent"] = 101;
  bad["status"]["conditions"][1]["status"] = "Yes";
  std::vector<std::string> fields;
  for (const Cause& c : ValidateCustomResource(Schema(), bad, nullptr)) fields.push_back(c.field);
  EXPECT_THAT(fields, ::testing::IsSupersetOf({"status.lastActions", "status.progress.percent",
                                               "status.conditions[1].status"}));
}

TEST(AgreementTest, ExamplesPassBoth) {
  int n = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(antdt::testing::SourcePath("examples/jobs"))) {
    if (entry.path().extension() != ".yaml") continue;
    ++n;
    const std::string text = ReadSource("examples/jobs/" + entry.path().filename().string());
    EXPECT_TRUE(manifest::ParseJob(text).ok())
        << entry.path() << ": " << manifest::ParseJob(text).status();
    json obj = kube::YamlToJson(YAML::Load(text));
    const std::vector<Cause> causes = ValidateCustomResource(Schema(), obj, nullptr);
    EXPECT_TRUE(causes.empty()) << entry.path() << Fields(causes);
  }
  EXPECT_GE(n, 3);
}

constexpr char kBase[] = R"(
apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: agree
spec:
  dataset:
    records: 20000
    shardSize: 200
  workers:
    replicas: 4
)";

constexpr char kDelete[] = "<delete>";

struct Variant {
  std::string name;
  std::vector<std::pair<std::string, std::string>> sets;  // dotted path -> YAML value (or kDelete)
  std::string field;                                      // the field both must name ("" = valid)
};

void SetPath(YAML::Node node, const std::vector<std::string>& keys, size_t i,
             const std::string& value) {
  if (i + 1 == keys.size()) {
    if (value == kDelete) {
      node.remove(keys[i]);
    } else {
      node[keys[i]] = YAML::Load(value);
    }
    return;
  }
  if (!node[keys[i]].IsMap()) node[keys[i]] = YAML::Node(YAML::NodeType::Map);
  SetPath(node[keys[i]], keys, i + 1, value);
}

std::string Build(const Variant& v) {
  YAML::Node root = YAML::Load(kBase);
  for (const auto& [path, value] : v.sets) {
    std::vector<std::string> keys;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      keys.push_back(path.substr(start, dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    SetPath(root, keys, 0, value);
  }
  return Emit(root);
}

const char kCustom[] = "custom";
const char kClassRule[] = "[{signal: class, class: persistent, windows: 3, action: KILL_RESTART}]";

std::vector<Variant> InvalidVariants() {
  return {
      {"negative replicas", {{"spec.workers.replicas", "-2"}}, "spec.workers.replicas"},
      {"zero replicas", {{"spec.workers.replicas", "0"}}, "spec.workers.replicas"},
      {"quoted replicas", {{"spec.workers.replicas", "'3'"}}, "spec.workers.replicas"},
      {"fractional replicas", {{"spec.workers.replicas", "2.5"}}, "spec.workers.replicas"},
      {"replicas over int32", {{"spec.workers.replicas", "3000000000"}}, "spec.workers.replicas"},
      {"workers not a mapping", {{"spec.workers", "3"}}, "spec.workers"},
      {"no workers", {{"spec.workers", kDelete}}, "spec.workers"},
      {"no worker replicas", {{"spec.workers.replicas", kDelete}}, "spec.workers.replicas"},
      {"no spec", {{"spec", kDelete}}, "spec"},
      {"no dataset", {{"spec.dataset", kDelete}}, "spec.dataset"},
      {"zero records", {{"spec.dataset.records", "0"}}, "spec.dataset.records"},
      {"no shard size", {{"spec.dataset.shardSize", kDelete}}, "spec.dataset.shardSize"},
      {"negative shard size", {{"spec.dataset.shardSize", "-1"}}, "spec.dataset.shardSize"},
      {"zero epochs", {{"spec.dataset.epochs", "0"}}, "spec.dataset.epochs"},
      {"quoted shuffle", {{"spec.dataset.shuffle", "'yes'"}}, "spec.dataset.shuffle"},
      {"negative seed", {{"spec.dataset.seed", "-1"}}, "spec.dataset.seed"},
      {"too many features", {{"spec.model.features", "5000"}}, "spec.model.features"},
      {"zero features", {{"spec.model.features", "0"}}, "spec.model.features"},
      {"zero learning rate", {{"spec.model.learningRate", "0"}}, "spec.model.learningRate"},
      {"word learning rate", {{"spec.model.learningRate", "fast"}}, "spec.model.learningRate"},
      {"model a list", {{"spec.model", "[1, 2]"}}, "spec.model"},
      {"batch below workers", {{"spec.model.globalBatchSize", "2"}}, "spec.model.globalBatchSize"},
      {"word storage size",
       {{"spec.shardingService.storage.size", "big"}},
       "spec.shardingService.storage.size"},
      {"storage class not a name",
       {{"spec.shardingService.storage.storageClassName", "Fast_SSD"}},
       "spec.shardingService.storage.storageClassName"},
      {"quoted ephemeral",
       {{"spec.shardingService.storage.ephemeral", "'yes'"}},
       "spec.shardingService.storage.ephemeral"},
      {"storage a list", {{"spec.shardingService.storage", "[1]"}}, "spec.shardingService.storage"},
      {"default batch below workers",
       {{"spec.workers.replicas", "300"}},
       "spec.model.globalBatchSize"},
      {"negative ps replicas",
       {{"spec.parameterServers.replicas", "-1"}},
       "spec.parameterServers.replicas"},
      {"template a string", {{"spec.workers.template", "pod"}}, "spec.workers.template"},
      {"sharding template a list",
       {{"spec.shardingService.template", "[1]"}},
       "spec.shardingService.template"},
      {"unknown policy", {{"spec.stragglerPolicy.name", "fastest"}}, "spec.stragglerPolicy.name"},
      {"cooldown without unit",
       {{"spec.stragglerPolicy.cooldown", "'30'"}},
       "spec.stragglerPolicy.cooldown"},
      {"cooldown bad unit",
       {{"spec.stragglerPolicy.cooldown", "30sec"}},
       "spec.stragglerPolicy.cooldown"},
      {"cooldown negative",
       {{"spec.stragglerPolicy.cooldown", "-5s"}},
       "spec.stragglerPolicy.cooldown"},
      {"cooldown two dots",
       {{"spec.stragglerPolicy.cooldown", "1..2s"}},
       "spec.stragglerPolicy.cooldown"},
      {"negative max actions",
       {{"spec.stragglerPolicy.maxActions", "-1"}},
       "spec.stragglerPolicy.maxActions"},
      {"negative saving ratio",
       {{"spec.stragglerPolicy.minSavingRatio", "-0.5"}},
       "spec.stragglerPolicy.minSavingRatio"},
      {"step deadline below 1.1",
       {{"spec.stragglerPolicy.stepDeadline", "1.05"}},
       "spec.stragglerPolicy.stepDeadline"},
      {"step deadline above 10",
       {{"spec.stragglerPolicy.stepDeadline", "11"}},
       "spec.stragglerPolicy.stepDeadline"},
      {"custom without rules",
       {{"spec.stragglerPolicy.name", kCustom}},
       "spec.stragglerPolicy.rules"},
      {"custom with no rules",
       {{"spec.stragglerPolicy.name", kCustom}, {"spec.stragglerPolicy.rules", "[]"}},
       "spec.stragglerPolicy.rules"},
      {"rules without custom",
       {{"spec.stragglerPolicy.rules", kClassRule}},
       "spec.stragglerPolicy.rules"},
      {"rules a mapping",
       {{"spec.stragglerPolicy.name", kCustom}, {"spec.stragglerPolicy.rules", "{a: 1}"}},
       "spec.stragglerPolicy.rules"},
      {"class rule with threshold",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules",
         "[{signal: class, class: transient, threshold: 1.5, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].threshold"},
      {"class rule without class",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules", "[{signal: class, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].class"},
      {"score rule without threshold",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules", "[{signal: score, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].threshold"},
      {"score rule with class",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules",
         "[{signal: score, threshold: 2, class: transient, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].class"},
      {"rule zero threshold",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules", "[{signal: self_score, threshold: 0, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].threshold"},
      {"rule unknown class",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules", "[{signal: class, class: sometimes, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].class"},
      {"rule unknown action",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules", "[{signal: score, threshold: 2, action: RESTART}]"}},
       "spec.stragglerPolicy.rules[0].action"},
      {"rule without signal",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules", "[{threshold: 2, action: ADJUST_BS}]"}},
       "spec.stragglerPolicy.rules[0].signal"},
      {"second rule zero windows",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules",
         "[{signal: score, threshold: 2, action: ADJUST_BS}, {signal: score, threshold: 3, "
         "windows: 0, action: KILL_RESTART}]"}},
       "spec.stragglerPolicy.rules[1].windows"},
      {"rule bad cooldown",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules",
         "[{signal: score, threshold: 2, action: ADJUST_BS, cooldown: soon}]"}},
       "spec.stragglerPolicy.rules[0].cooldown"},
      {"rule negative budget",
       {{"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.rules",
         "[{signal: score, threshold: 2, action: ADJUST_BS, budget: -1}]"}},
       "spec.stragglerPolicy.rules[0].budget"},
      {"backup workers all of them",
       {{"spec.stragglerPolicy.name", "backup-workers"},
        {"spec.stragglerPolicy.backupWorkers", "4"}},
       "spec.stragglerPolicy.backupWorkers"},
      {"backup workers none",
       {{"spec.stragglerPolicy.name", "backup-workers"},
        {"spec.stragglerPolicy.backupWorkers", "0"}},
       "spec.stragglerPolicy.backupWorkers"},
      {"zero window", {{"spec.monitor.window", "0s"}}, "spec.monitor.window"},
      {"bare zero window", {{"spec.monitor.window", "'0'"}}, "spec.monitor.window"},
      {"window an integer", {{"spec.monitor.window", "10"}}, "spec.monitor.window"},
      {"negative window steps", {{"spec.monitor.windowSteps", "-1"}}, "spec.monitor.windowSteps"},
      {"too many window steps", {{"spec.monitor.windowSteps", "1001"}}, "spec.monitor.windowSteps"},
      {"negative lateness",
       {{"spec.monitor.allowedLateness", "-1s"}},
       "spec.monitor.allowedLateness"},
      {"lateness an integer",
       {{"spec.monitor.allowedLateness", "100"}},
       "spec.monitor.allowedLateness"},
      {"straggler threshold one",
       {{"spec.monitor.stragglerThreshold", "1"}},
       "spec.monitor.stragglerThreshold"},
      {"recover above straggler",
       {{"spec.monitor.recoverThreshold", "1.5"}},
       "spec.monitor.recoverThreshold"},
      {"recover equals straggler",
       {{"spec.monitor.stragglerThreshold", "2"}, {"spec.monitor.recoverThreshold", "2"}},
       "spec.monitor.recoverThreshold"},
      {"zero persistent windows",
       {{"spec.monitor.persistentWindows", "0"}},
       "spec.monitor.persistentWindows"},
      {"negative warmup", {{"spec.monitor.warmupWindows", "-1"}}, "spec.monitor.warmupWindows"},
      {"checkpoint without path", {{"spec.checkpoint.everySteps", "100"}}, "spec.checkpoint.path"},
      {"checkpoint empty path",
       {{"spec.checkpoint.everySteps", "100"}, {"spec.checkpoint.path", "''"}},
       "spec.checkpoint.path"},
      {"negative checkpoint steps",
       {{"spec.checkpoint.everySteps", "-5"}},
       "spec.checkpoint.everySteps"},
      {"negative backoff", {{"spec.runPolicy.backoffLimit", "-1"}}, "spec.runPolicy.backoffLimit"},
      {"negative ttl",
       {{"spec.runPolicy.ttlSecondsAfterFinished", "-1"}},
       "spec.runPolicy.ttlSecondsAfterFinished"},
      {"device time in ns",
       {{"spec.local.deviceTimePerSample", "200ns"}},
       "spec.local.deviceTimePerSample"},
      {"device time in minutes",
       {{"spec.local.deviceTimePerSample", "1m"}},
       "spec.local.deviceTimePerSample"},
      {"uppercase name", {{"metadata.name", "Bad_Name"}}, "metadata.name"},
      {"long name", {{"metadata.name", std::string(64, 'a')}}, "metadata.name"},
      {"name starting with a digit", {{"metadata.name", "1job"}}, "metadata.name"},
      {"name too long for its Services",
       {{"metadata.name", std::string(55, 'a')}},
       "metadata.name"},
      {"name too long for its workers' host names",
       {{"metadata.name", std::string(54, 'a')}, {"spec.workers.replicas", "11"}},
       "metadata.name"},
  };
}

TEST(AgreementTest, InvalidVariantsAreRejectedByBothAtTheSameField) {
  const std::vector<Variant> variants = InvalidVariants();
  EXPECT_GE(variants.size(), 25u);
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    const std::string text = Build(v);
    const absl::StatusOr<manifest::Job> job = manifest::ParseJob(text);
    ASSERT_FALSE(job.ok()) << text;
    EXPECT_EQ(ParserField(job.status()), v.field) << job.status();
    json obj = kube::YamlToJson(YAML::Load(text));
    const std::vector<Cause> causes = ValidateCustomResource(Schema(), obj, nullptr);
    std::vector<std::string> fields;
    for (const Cause& c : causes) fields.push_back(c.field);
    EXPECT_THAT(fields, ::testing::Contains(v.field)) << text << Fields(causes);
  }
}

std::vector<Variant> ValidVariants() {
  return {
      {"minimal", {}, ""},
      {"nulls read as absent",
       {{"spec.model", "~"}, {"spec.monitor", "~"}, {"spec.dataset.epochs", "~"}},
       ""},
      {"everything",
       {{"spec.dataset.epochs", "3"},
        {"spec.dataset.shuffle", "true"},
        {"spec.dataset.seed", "42"},
        {"spec.model.features", "4096"},
        {"spec.model.learningRate", "1"},
        {"spec.model.globalBatchSize", "4"},
        {"spec.parameterServers.replicas", "0"},
        {"spec.shardingService.template",
         "{metadata: {labels: {team: a}}, spec: {tolerations: [{key: k, operator: Exists}]}}"},
        {"spec.workers.template",
         "{metadata: {labels: {app: x}}, spec: {containers: [{name: w, image: 'img:1'}]}}"},
        {"spec.stragglerPolicy.name", kCustom},
        {"spec.stragglerPolicy.cooldown", "'0'"},
        {"spec.stragglerPolicy.maxActions", "0"},
        {"spec.stragglerPolicy.minSavingRatio", "0"},
        {"spec.stragglerPolicy.stepDeadline", "0"},
        {"spec.stragglerPolicy.rules",
         "[{signal: score, threshold: 1.5, windows: 2, action: ADJUST_BS, cooldown: 500ms, budget: "
         "3},"
         " {signal: class, class: deterministic, action: KILL_RESTART, cooldown: '1.5m'}]"},
        {"spec.monitor.window", ".5s"},
        {"spec.monitor.allowedLateness", "'0'"},
        {"spec.monitor.stragglerThreshold", "1.01"},
        {"spec.monitor.recoverThreshold", "1"},
        {"spec.monitor.persistentWindows", "1"},
        {"spec.monitor.warmupWindows", "0"},
        {"spec.checkpoint.path", "/ckpt"},
        {"spec.checkpoint.everySteps", "100"},
        {"spec.runPolicy.backoffLimit", "0"},
        {"spec.runPolicy.ttlSecondsAfterFinished", "0"},
        {"spec.local.scenario", "s.yaml"},
        {"spec.local.deviceTimePerSample", "1.5ms"}},
       ""},
      {"backup workers",
       {{"spec.stragglerPolicy.name", "backup-workers"},
        {"spec.stragglerPolicy.backupWorkers", "3"}},
       ""},
      {"durations",
       {{"spec.stragglerPolicy.cooldown", "1h"},
        {"spec.monitor.window", "2m"},
        {"spec.monitor.allowedLateness", "150ms"},
        {"spec.local.deviceTimePerSample", "'0'"}},
       ""},
      {"checkpoint path without steps", {{"spec.checkpoint.path", "/x"}}, ""},
      {"windows in steps", {{"spec.monitor.window", "2s"}, {"spec.monitor.windowSteps", "3"}}, ""},
      {"window in time alone", {{"spec.monitor.window", "300ms"}}, ""},
      {"status is ignored", {{"status", "{anything: [1, 2]}"}}, ""},
  };
}

TEST(AgreementTest, ValidVariantsPassBothWithTheSameEffectiveValues) {
  for (const Variant& v : ValidVariants()) {
    SCOPED_TRACE(v.name);
    const std::string text = Build(v);
    const absl::StatusOr<manifest::Job> job = manifest::ParseJob(text);
    ASSERT_TRUE(job.ok()) << job.status() << "\n" << text;
    json obj = kube::YamlToJson(YAML::Load(text));
    const std::vector<Cause> causes = ValidateCustomResource(Schema(), obj, nullptr);
    EXPECT_TRUE(causes.empty()) << text << Fields(causes);
    // What the apiserver stores (defaults applied, status pruned from the spec
    // view) parses to the same job: the CRD's defaults are the parser's.
    obj.erase("status");
    const absl::StatusOr<manifest::Job> stored = manifest::ParseJob(obj.dump());
    ASSERT_TRUE(stored.ok()) << stored.status() << "\n" << obj.dump(2);
    const manifest::Job& a = *job;
    const manifest::Job& b = *stored;
    EXPECT_EQ(a.dataset.epochs, b.dataset.epochs);
    EXPECT_EQ(a.dataset.shuffle, b.dataset.shuffle);
    EXPECT_EQ(a.dataset.seed, b.dataset.seed);
    EXPECT_EQ(a.model.features, b.model.features);
    EXPECT_EQ(a.model.learning_rate, b.model.learning_rate);
    EXPECT_EQ(a.model.global_batch_size, b.model.global_batch_size);
    EXPECT_EQ(a.parameter_servers.replicas, b.parameter_servers.replicas);
    EXPECT_EQ(a.workers.image, b.workers.image);
    EXPECT_EQ(a.straggler_policy.name, b.straggler_policy.name);
    EXPECT_EQ(a.straggler_policy.cooldown_ms, b.straggler_policy.cooldown_ms);
    EXPECT_EQ(a.straggler_policy.max_actions, b.straggler_policy.max_actions);
    EXPECT_EQ(a.straggler_policy.min_saving_ratio, b.straggler_policy.min_saving_ratio);
    EXPECT_EQ(a.straggler_policy.step_deadline, b.straggler_policy.step_deadline);
    EXPECT_EQ(a.straggler_policy.backup_workers, b.straggler_policy.backup_workers);
    ASSERT_EQ(a.straggler_policy.rules.size(), b.straggler_policy.rules.size());
    for (size_t i = 0; i < a.straggler_policy.rules.size(); ++i) {
      EXPECT_EQ(a.straggler_policy.rules[i].windows, b.straggler_policy.rules[i].windows);
      EXPECT_EQ(a.straggler_policy.rules[i].cooldown_ms, b.straggler_policy.rules[i].cooldown_ms);
    }
    EXPECT_EQ(a.monitor.window_ms, b.monitor.window_ms);
    EXPECT_EQ(a.monitor.window_steps, b.monitor.window_steps);
    EXPECT_EQ(a.straggler_policy.cooldown_derived, b.straggler_policy.cooldown_derived);
    EXPECT_EQ(a.straggler_policy.step_deadline_fitted, b.straggler_policy.step_deadline_fitted);
    EXPECT_EQ(a.monitor.allowed_lateness_ms, b.monitor.allowed_lateness_ms);
    EXPECT_EQ(a.monitor.straggler_threshold, b.monitor.straggler_threshold);
    EXPECT_EQ(a.monitor.recover_threshold, b.monitor.recover_threshold);
    EXPECT_EQ(a.monitor.persistent_windows, b.monitor.persistent_windows);
    EXPECT_EQ(a.monitor.warmup_windows, b.monitor.warmup_windows);
    EXPECT_EQ(a.checkpoint.every_steps, b.checkpoint.every_steps);
    EXPECT_EQ(a.run_policy.backoff_limit, b.run_policy.backoff_limit);
    EXPECT_EQ(a.run_policy.ttl_seconds_after_finished, b.run_policy.ttl_seconds_after_finished);
    EXPECT_EQ(a.local.device_time_per_sample_us, b.local.device_time_per_sample_us);
  }
}

// The one deliberate difference: Kubernetes prunes unknown fields (kubectl
// warns, or fails with --validate=strict), ParseJob rejects them.
TEST(AgreementTest, UnknownFieldsArePrunedByKubernetesAndRejectedByTheParser) {
  const Variant v{
      "unknown fields",
      {{"spec.workers.gpus", "2"}, {"spec.priority", "high"}, {"spec.monitor.smoothing", "0.5"}},
      ""};
  const std::string text = Build(v);
  const absl::StatusOr<manifest::Job> job = manifest::ParseJob(text);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()), ::testing::HasSubstr("unknown field"));
  json obj = kube::YamlToJson(YAML::Load(text));
  EXPECT_THAT(ValidateCustomResource(Schema(), obj, nullptr), ::testing::IsEmpty());
  EXPECT_FALSE(obj["spec"]["workers"].contains("gpus"));
  EXPECT_FALSE(obj["spec"].contains("priority"));
  EXPECT_FALSE(obj["spec"]["monitor"].contains("smoothing"));
  EXPECT_TRUE(manifest::ParseJob(obj.dump()).ok());  // what the apiserver stores parses
}

}  // namespace
}  // namespace antdt::kubeemu
