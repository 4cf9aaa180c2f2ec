#include "backends/kubernetes/reconciler/reconciler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/kubernetes/client/object.h"
#include "common/testing/testing.h"
#include "core/jobconfig/jobconfig.h"

namespace antdt::reconciler {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr int64_t kT0 = 1795986000000;  // 2026-11-29T21:00:00Z
constexpr char kJob[] = "quickstart-k8s";
constexpr char kJobUid[] = "0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10";

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An example job as the API server stores it.
Json ExampleJob(const std::string& file) {
  Json job = kube::YamlToJson(YAML::Load(ReadText(testing::SourcePath(file))));
  job["metadata"]["namespace"] = "default";
  job["metadata"]["uid"] = kJobUid;
  job["metadata"]["generation"] = 1;
  job["metadata"]["resourceVersion"] = "100";
  job["metadata"]["creationTimestamp"] = "2026-11-29T20:59:59Z";
  return job;
}

Json QuickstartJob() { return ExampleJob("examples/k8s/quickstart.yaml"); }
// PyTorch DDP: no parameter servers, the workers' own command.
Json PytorchJob() { return ExampleJob("examples/k8s/pytorch.yaml"); }

manifest::Job MustParse(const Json& job) {
  auto spec = manifest::ParseJob(job.dump());
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// ---- A fake cluster that applies changes as the operator's glue does ----

struct Cluster {
  Json job = QuickstartJob();
  std::vector<Json> pods, services, podgroups, secrets, claims;
  Settings settings;
  std::vector<std::string> left;  // kLeaveParameterServers, in order
  std::vector<std::string> created_pods;
  bool job_deleted = false;
  bool dataset_ready = false;
  int64_t now = kT0;
  int next_uid = 0;
  bool clear_pending_events = true;  // false: the operator stops before writing Events

  std::string job_token;  // Settings::job_credentials: the glue's derived token
  bool dataset_lost = false;
  std::vector<std::string> avoided_nodes;  // the node memory's marks

  Snapshot Observe(std::vector<policy::Decision> actions = {},
                   std::vector<Straggler> stragglers = {}) const {
    Snapshot o;
    o.job_token = job_token;
    o.dataset_lost = dataset_lost;
    o.token_secret_exists = !secrets.empty();
    o.sharding_claim_exists = !claims.empty();
    o.job = job;
    o.spec = manifest::ParseJob(job.dump());
    o.pods = pods;
    o.services = services;
    o.dataset_ready = dataset_ready;
    o.pod_group_exists = !podgroups.empty();
    o.actions = std::move(actions);
    o.stragglers = std::move(stragglers);
    o.now_ms = now;
    o.avoided_nodes = avoided_nodes;
    return o;
  }

  Json* FindPod(const std::string& name) {
    for (Json& p : pods) {
      if (p["metadata"]["name"] == name) return &p;
    }
    return nullptr;
  }

  // Status first (through a JSON round trip, as the API server stores it),
  // then the writes in order.
  void Apply(const Changes& changes) {
    if (changes.status) job["status"] = Json::parse(changes.status->dump());
    // The operator writes the committed Events, then clears the list.
    if (clear_pending_events) job["status"].erase("pendingEvents");
    for (const Write& w : changes.writes) {
      switch (w.kind) {
        case Write::Kind::kCreate: {
          Json obj = w.object;
          const std::string name = obj["metadata"]["name"];
          obj["metadata"]["uid"] = absl::StrCat("uid-", ++next_uid);
          if (w.resource == "services") {
            for (const Json& s : services) ASSERT_NE(s["metadata"]["name"], name);
            services.push_back(obj);
            break;
          }
          if (w.resource == "podgroups") {
            ASSERT_TRUE(podgroups.empty()) << "a second PodGroup";
            podgroups.push_back(obj);
            break;
          }
          if (w.resource == "secrets") {
            ASSERT_TRUE(secrets.empty()) << "a second Secret";
            secrets.push_back(obj);
            break;
          }
          if (w.resource == "persistentvolumeclaims") {
            ASSERT_TRUE(claims.empty()) << "a second claim";
            claims.push_back(obj);
            break;
          }
          ASSERT_EQ(FindPod(name), nullptr) << "created " << name << " twice";
          const Json& labels = obj["metadata"]["labels"];
          if (labels["antdt.io/role"] == "worker") {
            for (const Json& p : pods) {
              ASSERT_NE(p["metadata"]["labels"].value("antdt.io/worker-id", ""),
                        labels["antdt.io/worker-id"])
                  << "created " << name << " while " << p["metadata"]["name"] << " exists";
            }
          }
          obj["status"] = {{"phase", "Pending"}};
          pods.push_back(obj);
          created_pods.push_back(name);
          break;
        }
        case Write::Kind::kDelete: {
          Json* pod = FindPod(w.name);
          ASSERT_NE(pod, nullptr) << w.name;
          ASSERT_EQ((*pod)["metadata"]["uid"], w.uid);
          ASSERT_FALSE((*pod)["metadata"].contains("deletionTimestamp"));
          (*pod)["metadata"]["deletionTimestamp"] = kube::FormatTime(now);
          break;
        }
        case Write::Kind::kLeaveParameterServers:
          left.push_back(w.worker);
          break;
        case Write::Kind::kDeleteJob:
          ASSERT_EQ(w.uid, kJobUid);
          job_deleted = true;
          break;
        case Write::Kind::kResizeParameterServers:
        case Write::Kind::kAdjustBatch:
        case Write::Kind::kReleaseShards:
          break;  // servers outside the API server: Describe shows them
      }
    }
  }

  Changes Pass(std::vector<policy::Decision> actions = {}, std::vector<Straggler> stragglers = {}) {
    Changes changes = Reconcile(Observe(std::move(actions), std::move(stragglers)), settings);
    Apply(changes);
    return changes;
  }

  // Terminating pods disappear (the kubelet confirmed).
  void RemoveTerminating() {
    std::vector<Json> keep;
    for (Json& p : pods) {
      if (!p["metadata"].contains("deletionTimestamp")) keep.push_back(p);
    }
    pods = keep;
  }

  void SetPhase(const std::string& name, const std::string& phase) {
    Json* pod = FindPod(name);
    ASSERT_NE(pod, nullptr) << name;
    (*pod)["status"]["phase"] = phase;
  }

  // Every pod scheduled (worker i on node-i, servers on node-9) and Running.
  void RunAll() {
    for (Json& p : pods) {
      if (p["metadata"].contains("deletionTimestamp")) continue;
      const std::string id = p["metadata"]["labels"].value("antdt.io/worker-id", "");
      p["spec"]["nodeName"] = id.empty() ? "node-9" : "node-" + id.substr(7);
      p["status"]["phase"] = "Running";
    }
  }

  // A job whose pods all run and whose status has settled.
  void Settle() {
    dataset_ready = true;
    for (int i = 0; i < 6; ++i) {
      Pass();
      RunAll();
    }
    Changes changes = Pass();
    ASSERT_THAT(changes.writes, IsEmpty());
    ASSERT_FALSE(changes.status.has_value()) << changes.status->dump(2);
  }

  const Json& Status() const { return job["status"]; }
};

const Json& Condition(const Json& status, const std::string& type) {
  const Json* c = FindCondition(status, type);
  static const Json kNull;
  EXPECT_NE(c, nullptr) << type;
  return c == nullptr ? kNull : *c;
}

std::vector<std::string> Describe(const std::vector<Write>& writes) {
  std::vector<std::string> out;
  for (const Write& w : writes) {
    switch (w.kind) {
      case Write::Kind::kCreate:
        out.push_back(absl::StrCat("create ", w.resource, " ",
                                   w.object["metadata"]["name"].get<std::string>()));
        break;
      case Write::Kind::kDelete:
        out.push_back(absl::StrCat("delete ", w.resource, " ", w.name, " uid=", w.uid,
                                   " grace=", w.grace_period_seconds));
        break;
      case Write::Kind::kLeaveParameterServers:
        out.push_back("leave " + w.worker);
        break;
      case Write::Kind::kDeleteJob:
        out.push_back("delete job " + w.name);
        break;
      case Write::Kind::kResizeParameterServers:
        out.push_back(absl::StrCat("resize ", w.workers, " -", absl::StrJoin(w.removed, ","), " +",
                                   absl::StrJoin(w.added, ",")));
        break;
      case Write::Kind::kAdjustBatch:
        out.push_back(
            absl::StrCat("adjust ", w.worker, " on ", w.node, " to ", w.local_batch_size));
        break;
      case Write::Kind::kReleaseShards:
        out.push_back(absl::StrCat("release ", w.worker, " <= ", w.incarnation));
        break;
    }
  }
  return out;
}

std::vector<std::string> EventReasons(const Changes& changes) {
  std::vector<std::string> out;
  for (const Event& e : changes.events) out.push_back(e.type + " " + e.reason);
  return out;
}

std::string Env(const Json& pod, const std::string& name) {
  for (const Json& e : pod["spec"]["containers"][0]["env"]) {
    if (e["name"] == name) return e.value("value", "<fieldRef>");
  }
  return "<unset>";
}

// ---- Golden files ----

void ExpectGolden(const Json& actual, const std::string& file) {
  const std::string path = testing::SourcePath("backends/kubernetes/reconciler/testdata/" + file);
  const std::string text = actual.dump(2) + "\n";  // nlohmann::json sorts keys
  const char* update = std::getenv("ANTDT_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream(path) << text;
    return;
  }
  const std::string expected = ReadText(path);
  ASSERT_FALSE(expected.empty()) << path << " is missing; run with ANTDT_UPDATE_GOLDEN=1";
  EXPECT_EQ(Json::parse(expected), actual)
      << "differs from " << path << " (ANTDT_UPDATE_GOLDEN=1 regenerates it):\n"
      << text;
}

TEST(ExampleTest, ParsesAsAnAntDTJob) {
  auto spec = manifest::ParseJob(ReadText(testing::SourcePath("examples/k8s/quickstart.yaml")));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, kJob);
  EXPECT_EQ(spec->workers.replicas, 4);
  EXPECT_EQ(spec->parameter_servers.replicas, 1);
  EXPECT_EQ(spec->dataset.records, 20000);
  EXPECT_EQ(spec->dataset.shard_size, 200);
  EXPECT_EQ(spec->dataset.epochs, 2);
  EXPECT_EQ(spec->straggler_policy.name, vocab::Policy::kAntdtNd);
  EXPECT_EQ(spec->monitor.window_ms, 2000);
  EXPECT_EQ(spec->checkpoint.path, "/var/lib/antdt/quickstart-k8s");
  EXPECT_EQ(spec->workers.image, "antdt/antdt:0.1.0");
}

TEST(GoldenTest, ShardingPod) {
  const Json job = QuickstartJob();
  ExpectGolden(RenderShardingPod(job, MustParse(job), Settings{}), "sharding-pod.json");
}

TEST(GoldenTest, ParameterServerPod) {
  const Json job = QuickstartJob();
  ExpectGolden(RenderParameterServerPod(job, MustParse(job), 0, Settings{}), "ps-pod.json");
}

TEST(GoldenTest, WorkerPodWithExcludedNodesAndTemplateAffinity) {
  Json job = QuickstartJob();
  // The user's template already requires Linux nodes in one of two zones.
  job["spec"]["workers"]["template"]["spec"]["affinity"] = Json::parse(R"({
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
      {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]},
      {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["b"]}]}
    ]}}})");
  job["spec"]["workers"]["template"]["metadata"] = {
      {"labels", {{"team", "ranking"}, {"antdt.io/role", "user-value-is-overridden"}}},
      {"annotations", {{"example.com/owner", "ranking"}}}};
  WorkerInstance w;
  w.id = "worker-2";
  w.index = 2;
  w.incarnation = 1;
  w.node = "node-5";
  w.local_batch_size = 48;
  w.excluded_nodes = {"node-2", "node-7"};
  ExpectGolden(RenderWorkerPod(job, MustParse(job), w, Settings{}), "worker-pod.json");
}

// With TLS for pods every container mounts the Secret, finds it through
// ANTDT_TLS_*, and a gRPC readiness probe becomes a TCP one (a kubelet's
// gRPC probe speaks plaintext only).
TEST(RenderTest, PodsWithTlsMountTheSecretAndProbeOverTcp) {
  const Json job = QuickstartJob();
  Settings s;
  s.pod_tls_secret = "antdt-tls";
  s.tls_server_name = "antdt.internal";
  WorkerInstance w;
  w.id = "worker-0";
  const std::vector<Json> pods = {RenderShardingPod(job, MustParse(job), s),
                                  RenderParameterServerPod(job, MustParse(job), 0, s),
                                  RenderWorkerPod(job, MustParse(job), w, s)};
  for (const Json& pod : pods) {
    const std::string name = pod["metadata"]["name"];
    EXPECT_THAT(
        pod["spec"]["volumes"],
        Contains(Json::parse(R"({"name":"antdt-tls","secret":{"secretName":"antdt-tls"}})")))
        << name;
    for (const Json& c : pod["spec"]["containers"]) {
      EXPECT_THAT(c["volumeMounts"], Contains(Json::parse(
                                         R"({"name":"antdt-tls","mountPath":"/etc/antdt/tls",
                                             "readOnly":true})")))
          << name;
      std::map<std::string, std::string> env;
      for (const Json& e : c["env"]) env[e["name"]] = e.value("value", "");
      EXPECT_EQ(env["ANTDT_TLS_CERT"], "/etc/antdt/tls/tls.crt") << name;
      EXPECT_EQ(env["ANTDT_TLS_KEY"], "/etc/antdt/tls/tls.key") << name;
      EXPECT_EQ(env["ANTDT_TLS_CA"], "/etc/antdt/tls/ca.crt") << name;
      EXPECT_EQ(env["ANTDT_TLS_SERVER_NAME"], "antdt.internal") << name;
      EXPECT_FALSE(c.contains("readinessProbe") && c["readinessProbe"].contains("grpc")) << name;
    }
  }
  EXPECT_EQ(pods[0]["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"], 50051);
  // Without it nothing changes.
  EXPECT_EQ(RenderShardingPod(job, MustParse(job), Settings{}).dump().find("antdt-tls"),
            std::string::npos);
}

TEST(GoldenTest, Services) {
  const Json job = QuickstartJob();
  const std::vector<Json> services = RenderServices(job, MustParse(job), Settings{});
  ExpectGolden(Json(services), "services.json");
}

TEST(RenderTest, WorkerEnvironmentAndAffinity) {
  const Json job = QuickstartJob();
  WorkerInstance w;
  w.id = "worker-3";
  w.index = 3;
  w.incarnation = 2;
  w.local_batch_size = 70;
  w.excluded_nodes = {"node-3"};
  const Json pod = RenderWorkerPod(job, MustParse(job), w, Settings{});
  EXPECT_EQ(pod["metadata"]["name"], "quickstart-k8s-worker-3");
  EXPECT_EQ(pod["metadata"]["labels"]["antdt.io/incarnation"], "2");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(Env(pod, "ANTDT_SHARDING_ADDR"), "quickstart-k8s-sharding.default.svc:50051");
  EXPECT_EQ(Env(pod, "ANTDT_PS_ADDRS"), "quickstart-k8s-ps-0.quickstart-k8s-ps.default.svc:50052");
  EXPECT_EQ(Env(pod, "ANTDT_AGENT_ADDR"), "$(HOST_IP):9400");
  EXPECT_EQ(Env(pod, "ANTDT_LOCAL_BATCH"), "70");
  EXPECT_EQ(Env(pod, "ANTDT_INCARNATION"), "2");
  // The job's own folder under its checkpoint.path, named by its UID.
  EXPECT_EQ(Env(pod, "ANTDT_CHECKPOINT_PATH"),
            "/var/lib/antdt/quickstart-k8s/0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10");
  EXPECT_EQ(pod["spec"]["containers"][0]["env"][0]["name"], "POD_IP");
  // The template had no affinity: one new term.
  const Json& terms = pod["spec"]["affinity"]["nodeAffinity"]
                         ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(
      terms[0]["matchExpressions"][0],
      Json::parse(R"({"key":"kubernetes.io/hostname","operator":"NotIn","values":["node-3"]})"));
  EXPECT_FALSE(pod["spec"]["affinity"]["nodeAffinity"].contains(
      "preferredDuringSchedulingIgnoredDuringExecution"));
}

TEST(RenderTest, WorkerRendezvousIsStableAcrossIncarnations) {
  const Json job = QuickstartJob();
  const manifest::Job spec = MustParse(job);
  Settings s;
  s.master_port = 31000;
  WorkerInstance w;
  w.id = "worker-3";
  w.index = 3;
  w.local_batch_size = 64;
  const Json first = RenderWorkerPod(job, spec, w, s);
  w.incarnation = 2;
  const Json later = RenderWorkerPod(job, spec, w, s);
  // One name for every incarnation (as Kubeflow's), the incarnation a label.
  EXPECT_EQ(first["metadata"]["name"], "quickstart-k8s-worker-3");
  EXPECT_EQ(later["metadata"]["name"], "quickstart-k8s-worker-3");
  EXPECT_EQ(first["metadata"]["labels"]["antdt.io/incarnation"], "0");
  EXPECT_EQ(later["metadata"]["labels"]["antdt.io/incarnation"], "2");
  const std::map<std::string, std::string> expected = {
      {"MASTER_ADDR", "quickstart-k8s-worker-0.quickstart-k8s-workers.default.svc"},
      {"MASTER_PORT", "31000"},
      {"RANK", "3"},
      {"WORLD_SIZE", "4"},
      {"LOCAL_RANK", "0"},
      {"ANTDT_RECORDS", "20000"},
      {"ANTDT_EPOCHS", "2"},
      {"ANTDT_SHARD_SIZE", "200"},
      {"ANTDT_SHUFFLE", "false"},
      {"ANTDT_SEED", "0"},
      {"ANTDT_JOURNAL", "$(ANTDT_CHECKPOINT_PATH)/journals/worker-3.journal"},
      {"ANTDT_LOSS_LOG", "$(ANTDT_CHECKPOINT_PATH)/loss/worker-3.jsonl"},
      {"ANTDT_MODE", "antdt"},
      // The node gives the emulated speed (the test kubelet's --speed-dir).
      {"ANTDT_NODE_SPEED_FILE", "<unset>"}};
  for (const Json* pod : {&first, &later}) {
    EXPECT_EQ((*pod)["spec"]["hostname"], "quickstart-k8s-worker-3");
    EXPECT_EQ((*pod)["spec"]["subdomain"], "quickstart-k8s-workers");
    for (const auto& [name, value] : expected) EXPECT_EQ(Env(*pod, name), value) << name;
  }

  // The workers' headless Service selects every incarnation, on MASTER_PORT.
  const std::vector<Json> services = RenderServices(job, spec, s);
  ASSERT_EQ(services.size(), 3u);
  const Json& svc = services[2];
  EXPECT_EQ(svc["metadata"]["name"], "quickstart-k8s-workers");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 31000);
  for (const auto& [key, value] : svc["spec"]["selector"].items()) {
    EXPECT_EQ(later["metadata"]["labels"][key], value) << key;
  }
}

TEST(RenderTest, WorkerWithoutCheckpointPathHasNoJournal) {
  Json job = QuickstartJob();
  job["spec"].erase("checkpoint");
  WorkerInstance w;
  w.id = "worker-0";
  const Json pod = RenderWorkerPod(job, MustParse(job), w, Settings{});
  EXPECT_EQ(Env(pod, "ANTDT_JOURNAL"), "");
  EXPECT_EQ(Env(pod, "ANTDT_LOSS_LOG"), "");
}

TEST(RenderTest, PytorchWorkerRunsItsTemplateAfterTheOperatorsVariables) {
  const Json job = PytorchJob();
  const manifest::Job spec = MustParse(job);
  EXPECT_EQ(jobconfig::ParameterServerCount(spec), 0);
  WorkerInstance w;
  w.id = "worker-1";
  w.index = 1;
  w.local_batch_size = 32;
  const Json pod = RenderWorkerPod(job, spec, w, Settings{});
  const Json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(container["command"], Json::array({"/usr/bin/python3"}));
  EXPECT_EQ(container["args"], Json::array({"/opt/antdt/examples/pytorch/train.py"}));
  EXPECT_EQ(container["env"].back(), Json::parse(R"({"name":"OMP_NUM_THREADS","value":"1"})"));
  for (const auto& [name, value] : std::map<std::string, std::string>{
           {"ANTDT_PS_ADDRS", ""},
           {"MASTER_ADDR", "pytorch-k8s-worker-0.pytorch-k8s-workers.default.svc"},
           {"MASTER_PORT", "29500"},
           {"WORLD_SIZE", "2"},
           {"ANTDT_GLOBAL_BATCH", "64"},
           {"ANTDT_LOCAL_BATCH", "32"}}) {
    EXPECT_EQ(Env(pod, name), value) << name;
  }
}

TEST(RenderTest, ParameterServersSplitTheFeaturesAsTheRunnerDoes) {
  Json job = QuickstartJob();
  job["spec"]["parameterServers"]["replicas"] = 3;
  job["spec"]["model"] = {{"features", 16}};
  const manifest::Job spec = MustParse(job);
  EXPECT_EQ(jobconfig::ParameterServerCount(spec), 3);
  EXPECT_EQ(jobconfig::ParameterServerFeatures(spec, 0), 6);
  EXPECT_EQ(jobconfig::ParameterServerFeatures(spec, 1), 5);
  EXPECT_EQ(jobconfig::ParameterServerFeatures(spec, 2), 5);
  const Json pod = RenderParameterServerPod(job, spec, 1, Settings{});
  EXPECT_EQ(pod["spec"]["hostname"], "quickstart-k8s-ps-1");
  EXPECT_EQ(pod["spec"]["subdomain"], "quickstart-k8s-ps");
  EXPECT_EQ(Env(pod, "ANTDT_PS_FEATURES"), "5");
  EXPECT_THAT(pod["spec"]["containers"][0]["args"].get<std::vector<std::string>>(),
              ::testing::Contains("ps-1"));

  job["spec"]["parameterServers"]["replicas"] = 0;
  EXPECT_EQ(jobconfig::ParameterServerCount(MustParse(job)), 1);  // as the local runner
}

TEST(RenderTest, ShardingPodWithEphemeralStorageKeepsStateInAnEmptyDir) {
  Json job = QuickstartJob();
  job["spec"].erase("checkpoint");
  job["spec"]["shardingService"]["storage"] = {{"ephemeral", true}};
  const Json pod = RenderShardingPod(job, MustParse(job), Settings{});
  const auto args = pod["spec"]["containers"][0]["args"].get<std::vector<std::string>>();
  EXPECT_THAT(args,
              ::testing::Contains("/var/lib/antdt/sharding/0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10"));
  EXPECT_EQ(pod["spec"]["volumes"][0]["emptyDir"], Json::object());
  EXPECT_FALSE(ShardingStateOnClaim(job, MustParse(job)));
}

// No volume of the job holds its state (no checkpoint path, or one no volume
// mounts): the state goes on the job's own claim, of the size and class the
// job asks for, owned by the job.
TEST(RenderTest, ShardingStateWithoutAVolumeGoesOnTheJobsClaim) {
  for (const bool with_path : {false, true}) {
    Json job = QuickstartJob();
    if (!with_path) job["spec"].erase("checkpoint");
    job["spec"]["shardingService"]["storage"] = {{"size", "5Gi"}, {"storageClassName", "fast-ssd"}};
    const manifest::Job spec = MustParse(job);
    ASSERT_TRUE(ShardingStateOnClaim(job, spec));
    const Json claim = RenderShardingClaim(job, spec, Settings{});
    EXPECT_EQ(claim["kind"], "PersistentVolumeClaim");
    EXPECT_EQ(claim["metadata"]["name"],
              "quickstart-k8s-sharding-state-0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10");
    EXPECT_EQ(claim["metadata"]["ownerReferences"][0]["uid"], kJobUid);
    EXPECT_EQ(claim["spec"]["resources"]["requests"]["storage"], "5Gi");
    EXPECT_EQ(claim["spec"]["storageClassName"], "fast-ssd");
    EXPECT_EQ(claim["spec"]["accessModes"], Json::array({"ReadWriteOnce"}));
    const Json pod = RenderShardingPod(job, spec, Settings{});
    EXPECT_EQ(pod["spec"]["volumes"][0]["name"], "state") << pod["spec"]["volumes"].dump();
    EXPECT_EQ(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
              claim["metadata"]["name"]);
    const std::string state_dir = pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"];
    EXPECT_THAT(pod["spec"]["containers"][0]["args"], Contains(state_dir));
  }
  // A volume the workers mount at the checkpoint path holds it: no claim.
  Json job = QuickstartJob();
  job["spec"]["workers"]["template"]["spec"]["volumes"] = {
      {{"name", "ckpt"}, {"persistentVolumeClaim", {{"claimName", "shared"}}}}};
  job["spec"]["workers"]["template"]["spec"]["containers"][0]["volumeMounts"] = {
      {{"name", "ckpt"}, {"mountPath", job["spec"]["checkpoint"]["path"]}}};
  EXPECT_FALSE(ShardingStateOnClaim(job, MustParse(job)));
}

// A job applied again under an old name (a new UID) gets a folder of its own:
// it does not find the first run's finished sharding state.
TEST(RenderTest, ANewUidIsANewStateFolder) {
  Json job = QuickstartJob();
  const Json first = RenderShardingPod(job, MustParse(job), Settings{});
  job["metadata"]["uid"] = "9d1c0e7a-1111-4222-8333-944455556666";
  const Json second = RenderShardingPod(job, MustParse(job), Settings{});
  const auto state_dir = [](const Json& pod) {
    const auto args = pod["spec"]["containers"][0]["args"].get<std::vector<std::string>>();
    auto it = std::find(args.begin(), args.end(), "--state-dir");
    return it == args.end() || it + 1 == args.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(state_dir(second),
            "/var/lib/antdt/quickstart-k8s/9d1c0e7a-1111-4222-8333-944455556666/sharding");
  EXPECT_NE(state_dir(first), state_dir(second));
}

TEST(RenderTest, ShardingPodMountsTheWorkersCheckpointVolume) {
  Json job = QuickstartJob();
  Json& tspec = job["spec"]["workers"]["template"]["spec"];
  tspec["volumes"] = Json::parse(R"([{"name":"ckpt","persistentVolumeClaim":{"claimName":"c"}}])");
  tspec["containers"][0]["volumeMounts"] =
      Json::parse(R"([{"name":"ckpt","mountPath":"/var/lib/antdt"}])");
  const Json pod = RenderShardingPod(job, MustParse(job), Settings{});
  // The template's volume, and the emptyDir at /tmp every AntDT container gets.
  EXPECT_EQ(pod["spec"]["volumes"][0], tspec["volumes"][0]);
  EXPECT_EQ(pod["spec"]["volumes"][1]["name"], "tmp");
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][0],
            tspec["containers"][0]["volumeMounts"][0]);
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"][1]["mountPath"], "/tmp");
}

// Pod Security "restricted", as the API server's admission checks it, for the
// pods the operator runs from AntDT's image.
void ExpectRestricted(const Json& pod) {
  const Json& spec = pod["spec"];
  SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
  EXPECT_EQ(spec["securityContext"]["runAsNonRoot"], true);
  EXPECT_EQ(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_FALSE(spec.contains("hostNetwork"));
  for (const Json& v : spec["volumes"]) {
    EXPECT_TRUE(v.contains("emptyDir") || v.contains("persistentVolumeClaim")) << v;
  }
  for (const Json& c : spec["containers"]) {
    EXPECT_EQ(c["securityContext"]["allowPrivilegeEscalation"], false);
    EXPECT_EQ(c["securityContext"]["capabilities"]["drop"], Json::array({"ALL"}));
    EXPECT_EQ(c["securityContext"]["readOnlyRootFilesystem"], true);
    EXPECT_TRUE(c["resources"].contains("requests")) << c;
  }
}

TEST(RenderTest, AntdtPodsMeetPodSecurityRestricted) {
  Json job = QuickstartJob();
  const manifest::Job spec = MustParse(job);
  ExpectRestricted(RenderShardingPod(job, spec, Settings{}));
  ExpectRestricted(RenderParameterServerPod(job, spec, 0, Settings{}));
  // The built-in trainer (no container in the workers' template).
  job["spec"]["workers"].erase("template");
  ExpectRestricted(RenderWorkerPod(job, MustParse(job),
                                   WorkerInstance{"worker-0", 0, 0, "", "", 0, {}}, Settings{}));
  // A job's own worker container is left as the job wrote it.
  Json torch = PytorchJob();
  const Json worker = RenderWorkerPod(torch, MustParse(torch),
                                      WorkerInstance{"worker-0", 0, 0, "", "", 0, {}}, Settings{});
  EXPECT_FALSE(worker["spec"]["containers"][0].contains("securityContext"));
}

TEST(RenderTest, TemplatesMergeOverTheSecureDefaults) {
  Json job = QuickstartJob();
  job["spec"]["shardingService"]["template"] = Json::parse(R"({
    "metadata": {"labels": {"team": "a", "antdt.io/role": "mine"},
                 "annotations": {"example.com/cost-center": "42"}},
    "spec": {
      "tolerations": [{"key": "dedicated", "operator": "Exists"}],
      "nodeSelector": {"pool": "cpu"},
      "imagePullSecrets": [{"name": "regcred"}],
      "priorityClassName": "batch",
      "securityContext": {"runAsUser": 1000},
      "containers": [{"name": "sharding",
                      "image": "registry.example.com/antdt:0.1.0",
                      "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}})");
  job["spec"]["parameterServers"]["template"] = Json::parse(R"({
    "spec": {"containers": [{"resources": {"limits": {"memory": "8Gi"}}}]}})");
  const manifest::Job spec = MustParse(job);
  const Json pod = RenderShardingPod(job, spec, Settings{});
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "a");
  EXPECT_EQ(pod["metadata"]["labels"]["antdt.io/role"], "sharding");  // ours select it
  EXPECT_EQ(pod["metadata"]["annotations"]["example.com/cost-center"], "42");
  EXPECT_EQ(pod["spec"]["tolerations"][0]["key"], "dedicated");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "cpu");
  EXPECT_EQ(pod["spec"]["imagePullSecrets"][0]["name"], "regcred");
  EXPECT_EQ(pod["spec"]["priorityClassName"], "batch");
  EXPECT_EQ(pod["spec"]["securityContext"]["runAsUser"], 1000);     // the template's
  EXPECT_EQ(pod["spec"]["securityContext"]["runAsNonRoot"], true);  // the default's
  const Json& c = pod["spec"]["containers"][0];
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  EXPECT_EQ(c["image"], "registry.example.com/antdt:0.1.0");
  EXPECT_EQ(c["resources"], Json::parse(R"({"requests": {"cpu": "2", "memory": "4Gi"}})"));
  EXPECT_EQ(c["command"], Json::array({"antdt-sharding-service"}));  // still the service
  EXPECT_EQ(c["args"][0], "--listen");
  ExpectRestricted(pod);
  // An unnamed container merges into the first: the server keeps its command.
  const Json ps = RenderParameterServerPod(job, spec, 0, Settings{});
  EXPECT_EQ(ps["spec"]["containers"][0]["command"], Json::array({"antdt-ps"}));
  EXPECT_EQ(ps["spec"]["containers"][0]["resources"]["limits"]["memory"], "8Gi");
  // A container with its own command replaces the server's command and args.
  job["spec"]["parameterServers"]["template"] = Json::parse(R"({
    "spec": {"containers": [{"name": "ps", "image": "my/ps:1", "command": ["my-ps"]}]}})");
  const Json custom = RenderParameterServerPod(job, MustParse(job), 0, Settings{});
  EXPECT_EQ(custom["spec"]["containers"][0]["command"], Json::array({"my-ps"}));
  EXPECT_FALSE(custom["spec"]["containers"][0].contains("args"));
  EXPECT_EQ(custom["spec"]["containers"][0]["image"], "my/ps:1");
}

// ---- Conditions ----

TEST(SetConditionTest, KeepsTransitionTimeUnlessStatusChanges) {
  Json conditions = Json::array();
  EXPECT_TRUE(SetCondition(conditions, "Running", "False", "Pending", "0/4", 1, kT0));
  EXPECT_EQ(conditions[0]["lastTransitionTime"], "2026-11-29T21:00:00Z");
  EXPECT_FALSE(SetCondition(conditions, "Running", "False", "Pending", "0/4", 1, kT0 + 5000));
  EXPECT_TRUE(SetCondition(conditions, "Running", "False", "Pending", "2/4", 2, kT0 + 5000));
  EXPECT_EQ(conditions[0]["lastTransitionTime"], "2026-11-29T21:00:00Z");
  EXPECT_EQ(conditions[0]["message"], "2/4");
  EXPECT_EQ(conditions[0]["observedGeneration"], 2);
  EXPECT_TRUE(SetCondition(conditions, "Running", "True", "AllPodsRunning", "4/4", 2, kT0 + 9000));
  EXPECT_EQ(conditions[0]["lastTransitionTime"], "2026-11-29T21:00:09Z");
  EXPECT_EQ(conditions.size(), 1u);
}

TEST(TimeTest, Rfc3339RoundTrips) {
  EXPECT_EQ(kube::FormatTime(kT0 + 999), "2026-11-29T21:00:00Z");
  EXPECT_EQ(kube::ParseTime("2026-11-29T21:00:00Z"), kT0);
  EXPECT_EQ(kube::ParseTime("yesterday"), std::nullopt);
}

// ---- Reconcile ----

TEST(ReconcileTest, FirstPassCreatesServicesAndShardingPodAndSetsAllConditions) {
  Cluster c;
  const Changes changes = Reconcile(c.Observe(), Settings{});
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre("create services quickstart-k8s-sharding", "create services quickstart-k8s-ps",
                  "create services quickstart-k8s-workers",
                  "create persistentvolumeclaims "
                  "quickstart-k8s-sharding-state-0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10",
                  "create pods quickstart-k8s-sharding"));
  ASSERT_TRUE(changes.status.has_value());
  const Json& st = *changes.status;
  EXPECT_EQ(st["observedGeneration"], 1);
  std::vector<std::string> types;
  for (const Json& cond : st["conditions"]) {
    types.push_back(cond["type"]);
    EXPECT_EQ(cond["observedGeneration"], 1);
    EXPECT_EQ(cond["lastTransitionTime"], "2026-11-29T21:00:00Z");
    EXPECT_FALSE(cond["reason"].get<std::string>().empty());
  }
  EXPECT_THAT(types, ElementsAre("Created", "Running", "StragglersDetected", "Mitigating",
                                 "Succeeded", "Failed"));
  EXPECT_EQ(Condition(st, "Created")["status"], "False");
  EXPECT_EQ(Condition(st, "Created")["reason"], "WaitingForDataset");
  EXPECT_EQ(Condition(st, "Running")["reason"], "WaitingForDataset");
  EXPECT_EQ(st["startTime"], "2026-11-29T21:00:00Z");
  EXPECT_EQ(st["workers"]["summary"], "0/4");
  EXPECT_EQ(st["progress"]["recordsTotal"], 40000);
  EXPECT_EQ(st["progress"]["percent"], 0);
  ASSERT_EQ(st["workerInstances"].size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(st["workerInstances"][i]["id"], absl::StrCat("worker-", i));
    EXPECT_EQ(st["workerInstances"][i]["incarnation"], 0);
    EXPECT_EQ(st["workerInstances"][i]["localBatchSize"], 64);  // 256 / 4
    EXPECT_EQ(st["workerInstances"][i]["pod"], absl::StrCat("quickstart-k8s-worker-", i));
  }
  EXPECT_EQ(st["datasetCreated"], false);
  EXPECT_EQ(changes.requeue_after_ms, 2000);

  // Services and pods carry the labels and the owner reference.
  const Json& pod = changes.writes[3].object;
  EXPECT_EQ(pod["metadata"]["labels"]["antdt.io/role"], "sharding");
  EXPECT_EQ(pod["metadata"]["labels"]["app.kubernetes.io/managed-by"], "antdt-operator");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], kJobUid);
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
}

TEST(ReconcileTest, DatasetReadyCreatesParameterServersAndWorkers) {
  Cluster c;
  c.Pass();
  EXPECT_THAT(Reconcile(c.Observe(), Settings{}).writes, IsEmpty());  // waiting for the dataset
  c.dataset_ready = true;
  const Changes changes = c.Pass();
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre("create pods quickstart-k8s-ps-0", "create pods quickstart-k8s-worker-0",
                  "create pods quickstart-k8s-worker-1", "create pods quickstart-k8s-worker-2",
                  "create pods quickstart-k8s-worker-3"));
  EXPECT_EQ(c.Status()["datasetCreated"], true);
  EXPECT_EQ(Env(changes.writes[1].object, "ANTDT_LOCAL_BATCH"), "64");
  EXPECT_EQ(c.Status()["state"], "Created");
  // Said once, with where the job's own state lives (its UID's folder).
  ASSERT_THAT(EventReasons(changes), ElementsAre("Normal DatasetCreated"));
  EXPECT_THAT(changes.events[0].message,
              HasSubstr("from the start; this job's state under "
                        "/var/lib/antdt/quickstart-k8s/0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10"));
  EXPECT_THAT(c.Pass().events, IsEmpty());
}

TEST(ReconcileTest, IsIdempotent) {
  Cluster c;
  c.dataset_ready = true;
  EXPECT_EQ(c.Pass().writes.size(), 10u);  // 3 services, claim, sharding pod, 1 PS, 4 workers
  Changes changes = c.Pass();  // everything exists now: Created turns True, nothing to write
  EXPECT_THAT(changes.writes, IsEmpty());
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ(Condition(*changes.status, "Created")["status"], "True");
  changes = c.Pass();
  EXPECT_THAT(changes.writes, IsEmpty());
  EXPECT_FALSE(changes.status.has_value()) << changes.status->dump(2);

  c.RunAll();
  c.now += 4000;
  changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ(Condition(*changes.status, "Running")["status"], "True");
  EXPECT_EQ(Condition(*changes.status, "Running")["message"], "4/4 workers running");
  EXPECT_EQ((*changes.status)["workers"]["summary"], "4/4");
  EXPECT_EQ((*changes.status)["parameterServers"]["summary"], "1/1");
  c.now += 4000;
  changes = c.Pass();
  EXPECT_THAT(changes.writes, IsEmpty());
  EXPECT_FALSE(changes.status.has_value());
  EXPECT_THAT(changes.events, IsEmpty());
  EXPECT_EQ(changes.requeue_after_ms, 2000);
}

TEST(ReconcileTest, ConditionsKeepTransitionTimeWhenUnchanged) {
  Cluster c;
  c.Pass();
  const Json before = Condition(c.Status(), "Running");
  c.now += 60000;
  c.dataset_ready = true;
  c.Pass();  // Running stays False, with another reason and message
  const Json& after = Condition(c.Status(), "Running");
  EXPECT_EQ(after["status"], "False");
  EXPECT_NE(after["reason"], before["reason"]);
  EXPECT_EQ(after["lastTransitionTime"], before["lastTransitionTime"]);
  EXPECT_EQ(Condition(c.Status(), "Failed")["lastTransitionTime"], "2026-11-29T21:00:00Z");
  c.RunAll();
  c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Running")["lastTransitionTime"], "2026-11-29T21:01:00Z");
}

TEST(ReconcileTest, ProgressFromTheShardingService) {
  Cluster c;
  c.Settle();
  Snapshot o = c.Observe();
  o.progress = Progress{10000, 40000, 0, 2, 12.6, false};
  Changes changes = Reconcile(o, Settings{});
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ((*changes.status)["progress"],
            Json::parse(R"({"recordsCommitted":10000,"recordsTotal":40000,"epoch":0,"epochs":2,
                            "percent":25,"etaSeconds":13})"));
  c.Apply(changes);
  o = c.Observe();
  o.progress = Progress{10000, 40000, 0, 2, 12.9, false};  // rounds to the same second
  EXPECT_FALSE(Reconcile(o, Settings{}).status.has_value());
  // Without a fresh reading the last one stays.
  EXPECT_FALSE(Reconcile(c.Observe(), Settings{}).status.has_value());
}

policy::Decision KillRestart(const std::string& worker, const std::string& from,
                             const std::string& to) {
  policy::Decision d;
  d.action = policy::KillRestart{worker, from, to, kT0 + 90000};
  d.policy = vocab::Policy::kAntdtNd;
  d.subject = worker;
  d.rule = "antdt-nd:persistent-restart";
  d.reason = "PERSISTENT straggler (score 2.4, 4 slow windows), restarted on a healthy node";
  d.evidence = {{"score", 2.4}, {"windows_slow", 4}, {"saved_seconds", 31}};
  d.at_ms = kT0 + 30000;
  return d;
}

// An ADJUST_BS of `worker` to `batch`, about it (`subject`) or only keeping the
// global batch around another's (no subject).
policy::Decision Adjust(const std::string& worker, int64_t batch, const std::string& rule,
                        const std::string& reason, bool subject) {
  policy::Decision d;
  d.action = policy::AdjustBatchSize{worker, batch, 1};
  d.policy = vocab::Policy::kAntdtNd;
  d.rule = rule;
  d.reason = reason;
  if (subject) {
    d.subject = worker;
    d.evidence = {{"score", 1.6}};
  }
  return d;
}

TEST(ReconcileTest, KillRestartCommitsInStatusThenReplacesThePod) {
  Cluster c;
  c.Settle();
  const std::string old_uid = c.FindPod("quickstart-k8s-worker-2")->at("metadata").at("uid");
  Changes changes = Reconcile(c.Observe({KillRestart("worker-2", "node-2", "node-5")}), Settings{});

  ASSERT_TRUE(changes.status.has_value());
  const Json& st = *changes.status;
  const Json& w2 = st["workerInstances"][2];
  EXPECT_EQ(w2["incarnation"], 1);
  EXPECT_EQ(w2["pod"], "quickstart-k8s-worker-2");
  EXPECT_EQ(w2["excludedNodes"], Json::array({"node-2"}));
  EXPECT_EQ(w2["node"], "node-5");
  EXPECT_EQ(st["workers"]["restarts"], 1);
  ASSERT_EQ(st["lastActions"].size(), 1u);
  EXPECT_EQ(st["lastActions"][0],
            Json::parse(R"({"time":"2026-11-29T21:00:30Z","action":"KILL_RESTART",
              "worker":"worker-2","fromNode":"node-2","toNode":"node-5",
              "rule":"antdt-nd:persistent-restart","subject":"worker-2",
              "reason":"PERSISTENT straggler (score 2.4, 4 slow windows), restarted on a healthy node",
              "evidence":"saved_seconds=31 score=2.4 windows_slow=4"})"));
  EXPECT_EQ(Condition(st, "Mitigating")["status"], "True");
  EXPECT_EQ(Condition(st, "Mitigating")["reason"], "RestartingWorker");
  // The old pod goes at once; the new one waits for it.
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("delete pods quickstart-k8s-worker-2 uid=" + old_uid + " grace=0"));
  ASSERT_EQ(changes.events.size(), 1u);
  EXPECT_EQ(changes.events[0].type, "Warning");
  EXPECT_EQ(changes.events[0].reason, "StragglerRestarted");
  for (const char* part :
       {"worker-2", "quickstart-k8s-worker-2", "node-2", "node-5", "antdt-nd:persistent-restart",
        "PERSISTENT straggler", "saved_seconds=31"}) {
    EXPECT_THAT(changes.events[0].message, HasSubstr(part));
  }
  c.Apply(changes);

  // Terminating: nothing is created.
  c.now += 1000;
  changes = c.Pass();
  EXPECT_THAT(changes.writes, IsEmpty());
  EXPECT_THAT(c.left, IsEmpty());

  // Gone: the parameter servers stop waiting for it, then the new pod.
  c.RemoveTerminating();
  changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("leave worker-2", "create pods quickstart-k8s-worker-2"));
  const Json& pod = changes.writes[1].object;
  EXPECT_EQ(Env(pod, "ANTDT_INCARNATION"), "1");
  EXPECT_EQ(pod["metadata"]["labels"]["antdt.io/incarnation"], "1");
  const Json& affinity = pod["spec"]["affinity"]["nodeAffinity"];
  EXPECT_EQ(
      affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
              ["matchExpressions"][0],
      Json::parse(R"({"key":"kubernetes.io/hostname","operator":"NotIn","values":["node-2"]})"));
  EXPECT_EQ(affinity["preferredDuringSchedulingIgnoredDuringExecution"][0]["preference"]
                    ["matchExpressions"][0]["values"],
            Json::array({"node-5"}));

  // Running on node-5: the mitigation is over.
  c.RunAll();
  c.FindPod("quickstart-k8s-worker-2")->at("spec")["nodeName"] = "node-5";
  c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Mitigating")["status"], "False");
  EXPECT_EQ(c.Status()["workerInstances"][2]["node"], "node-5");
  EXPECT_FALSE(Reconcile(c.Observe(), Settings{}).status.has_value());
}

TEST(ReconcileTest, ASlowServerMovesToItsNextIncarnationWhichTakesOverThenTheOldPodGoes) {
  Cluster c;
  c.Settle();
  (*c.FindPod("quickstart-k8s-ps-0"))["status"]["podIP"] = "10.0.0.9";
  policy::Decision move = KillRestart("ps-0", "node-9", "node-5");
  move.rule = "antdt-nd:ps-restart";
  Changes changes = c.Pass({move});
  ASSERT_TRUE(c.job["status"].contains("serverInstances")) << c.Status().dump(2);
  EXPECT_EQ(c.Status()["serverInstances"],
            Json::parse(R"([{"id":"ps-0","incarnation":1,"node":"node-5",
                             "excludedNodes":["node-9"]}])"));
  EXPECT_EQ(c.Status()["lastActions"].back()["worker"], "ps-0");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning ParameterServerMoved"));
  EXPECT_THAT(changes.events[0].message, HasSubstr("quickstart-k8s-ps-0-1"));
  // The old server keeps serving; the new one is created beside it, taking
  // its state over, with the stable host name and off the node it left.
  ASSERT_THAT(Describe(changes.writes), ElementsAre("create pods quickstart-k8s-ps-0-1"));
  const Json& pod = changes.writes[0].object;
  const Json& args = pod["spec"]["containers"][0]["args"];
  auto arg = [&](const std::string& flag) {
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == flag) return args[i + 1].get<std::string>();
    }
    return std::string("<unset>");
  };
  EXPECT_EQ(arg("--take-over"), "10.0.0.9:50052");
  EXPECT_EQ(arg("--advertise"), "$(POD_IP):50052");
  EXPECT_EQ(pod["metadata"]["labels"]["antdt.io/incarnation"], "1");
  EXPECT_EQ(pod["spec"]["hostname"], "quickstart-k8s-ps-0");
  EXPECT_EQ(
      pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
         ["nodeSelectorTerms"][0]["matchExpressions"][0]["values"],
      Json::array({"node-9"}));
  // Both run; until the glue sees a step completed on the new one, nothing.
  c.RunAll();
  EXPECT_THAT(c.Pass().writes, IsEmpty());
  // Then the old pod goes, and the job's Running condition follows the new.
  Snapshot o = c.Observe();
  o.servers_followed = {"ps-0"};
  changes = Reconcile(o, Settings{});
  c.Apply(changes);
  ASSERT_EQ(changes.writes.size(), 1u);
  EXPECT_EQ(Describe(changes.writes)[0].rfind("delete pods quickstart-k8s-ps-0 ", 0), 0u)
      << Describe(changes.writes)[0];
  c.RemoveTerminating();
  c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Running")["status"], "True");
  EXPECT_EQ(c.FindPod("quickstart-k8s-ps-0"), nullptr);
  EXPECT_FALSE(Reconcile(c.Observe(), Settings{}).status.has_value());
}

// worker-2 restarted off node-2 (KILL_RESTART to node-5) while the node
// memory marks node-2 and node-7: the action's record and the new pod's node
// affinity, which keeps the node it left as a hard exclusion in every case.
void RestartWorker2WhileMarked(Cluster& c, Json* action, Json* affinity) {
  c.avoided_nodes = {"node-2", "node-7"};
  Changes changes = c.Pass({KillRestart("worker-2", "node-2", "node-5")});
  ASSERT_TRUE(changes.status.has_value());
  ASSERT_EQ((*changes.status)["lastActions"].size(), 1u) << changes.status->dump(2);
  *action = (*changes.status)["lastActions"][0];
  c.RemoveTerminating();
  changes = c.Pass();
  ASSERT_THAT(Describe(changes.writes),
              ElementsAre("leave worker-2", "create pods quickstart-k8s-worker-2"));
  *affinity = changes.writes[1].object["spec"]["affinity"]["nodeAffinity"];
  EXPECT_EQ((*affinity)["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
                       ["matchExpressions"][0]["values"],
            Json::array({"node-2"}));
}

// Nodes the cluster's node memory marks slow: the restart's record names them
// and the new pod prefers other nodes (weight 50, below the chosen node's
// 100), never excluded by it; the node the worker left stays a hard exclusion.
TEST(ReconcileTest, KillRestartAvoidsTheNodesTheMemoryMarksAndRecordsThem) {
  Cluster c;
  c.Settle();
  Json action, affinity;
  ASSERT_NO_FATAL_FAILURE(RestartWorker2WhileMarked(c, &action, &affinity));
  EXPECT_EQ(action["avoidedNodes"], Json::array({"node-2", "node-7"}));
  const Json& preferred = affinity["preferredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(preferred.size(), 2u);
  EXPECT_EQ(preferred[0]["weight"], 100);
  EXPECT_EQ(preferred[1], Json::parse(R"({"weight":50,"preference":{"matchExpressions":[
              {"key":"kubernetes.io/hostname","operator":"NotIn","values":["node-7"]}]}})"));
  // Without marks, nothing is added.
  c.avoided_nodes.clear();
  const Json plain =
      RenderWorkerPod(c.job, *manifest::ParseJob(c.job.dump()), WorkerInstance{}, Settings{});
  EXPECT_FALSE(plain["spec"].contains("affinity"));
}

// spec.stragglerPolicy.avoidSlowNodes: Required keeps the pod off the marked
// nodes in every term of the template's own required affinity (terms are
// ORed).
TEST(ReconcileTest, AvoidSlowNodesRequiredExcludesTheMarkedNodesInEveryTerm) {
  Cluster c;
  Json job = c.job;
  job["spec"]["stragglerPolicy"]["avoidSlowNodes"] = "Required";
  job["spec"]["workers"]["template"]["spec"]["affinity"]["nodeAffinity"]
     ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = Json::parse(R"([
       {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
       {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}])");
  auto spec = manifest::ParseJob(job.dump());
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->straggler_policy.avoid_slow_nodes, vocab::AvoidSlowNodes::kRequired);
  WorkerInstance moved;
  moved.excluded_nodes = {"node-2"};
  const Json pod = RenderWorkerPod(job, *spec, moved, Settings{}, {"node-2", "node-7"});
  const Json& affinity = pod["spec"]["affinity"]["nodeAffinity"];
  const Json& terms =
      affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
  ASSERT_EQ(terms.size(), 2u);
  for (const Json& term : terms) {
    EXPECT_EQ(
        term["matchExpressions"],
        Json::array(
            {term["matchExpressions"][0],
             {{"key", "kubernetes.io/hostname"}, {"operator", "NotIn"}, {"values", {"node-2"}}},
             {{"key", "kubernetes.io/hostname"}, {"operator", "NotIn"}, {"values", {"node-7"}}}}))
        << term.dump();
  }
  EXPECT_FALSE(affinity.contains("preferredDuringSchedulingIgnoredDuringExecution"))
      << affinity.dump();

  job["spec"]["stragglerPolicy"]["avoidSlowNodes"] = "Always";
  auto bad = manifest::ParseJob(job.dump());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("spec.stragglerPolicy.avoidSlowNodes"));
}

// The marks the cluster publishes are the job's to act on: under
// avoidSlowNodes: Ignore, or a stragglerPolicy in Recommend mode, a restarted
// worker's pod keeps off only the node it left, and its record names no
// avoided node.
TEST(ReconcileTest, AJobThatIgnoresTheMarksOrOnlyRecommendsAvoidsNone) {
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"avoidSlowNodes", "Ignore"}, {"mode", "Recommend"}}) {
    SCOPED_TRACE(field + ": " + value);
    Cluster c;
    c.job["spec"]["stragglerPolicy"][field] = value;
    c.Settle();
    Json action, affinity;
    ASSERT_NO_FATAL_FAILURE(RestartWorker2WhileMarked(c, &action, &affinity));
    EXPECT_FALSE(action.contains("avoidedNodes")) << action.dump();
    EXPECT_EQ(affinity.dump().find("node-7"), std::string::npos) << affinity.dump();
  }
}

TEST(ReconcileTest, OperatorRestartedMidRestartConvergesToTheSameWrites) {
  Cluster c;
  c.Settle();
  Cluster fresh = c;  // the same cluster, seen by an operator that restarts
  const Changes first =
      Reconcile(c.Observe({KillRestart("worker-2", "node-2", "node-5")}), Settings{});
  ASSERT_TRUE(first.status.has_value());
  // Only the status was written before the crash: incarnation 1 in status,
  // only incarnation 0 in pods, and no action to replay.
  fresh.job["status"] = *first.status;
  const Changes after = Reconcile(fresh.Observe(), Settings{});
  EXPECT_EQ(Describe(after.writes), Describe(first.writes));
  EXPECT_FALSE(after.status.has_value());
  fresh.Apply(after);
  fresh.RemoveTerminating();
  EXPECT_THAT(Describe(fresh.Pass().writes),
              ElementsAre("leave worker-2", "create pods quickstart-k8s-worker-2"));
}

TEST(ReconcileTest, JobWithoutParameterServersCreatesAndWaitsForNone) {
  Cluster c;
  c.job = PytorchJob();
  Changes changes = c.Pass();
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre("create services pytorch-k8s-sharding", "create services pytorch-k8s-workers",
                  HasSubstr("create persistentvolumeclaims pytorch-k8s-sharding-state"),
                  "create pods pytorch-k8s-sharding"));
  c.dataset_ready = true;
  changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("create pods pytorch-k8s-worker-0", "create pods pytorch-k8s-worker-1"));
  c.Settle();
  EXPECT_EQ(Condition(c.Status(), "Created")["status"], "True");
  EXPECT_EQ(Condition(c.Status(), "Created")["message"],
            "created the sharding service and 2 workers");
  EXPECT_EQ(Condition(c.Status(), "Running")["status"], "True");
  EXPECT_EQ(c.Status()["parameterServers"]["summary"], "0/0");

  // A restart: no parameter server to leave.
  c.Pass({KillRestart("worker-1", "node-1", "node-5")});
  c.RemoveTerminating();
  changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes), ElementsAre("create pods pytorch-k8s-worker-1"));
  EXPECT_THAT(c.left, IsEmpty());
  EXPECT_EQ(changes.writes[0].object["spec"]["hostname"], "pytorch-k8s-worker-1");
  c.RunAll();
  c.Pass();

  // Success: only the sharding service is left to stop.
  c.SetPhase("pytorch-k8s-worker-0", "Succeeded");
  c.SetPhase("pytorch-k8s-worker-1", "Succeeded");
  changes = c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Succeeded")["status"], "True");
  EXPECT_THAT(Describe(changes.writes), ElementsAre(HasSubstr("delete pods pytorch-k8s-sharding")));
}

TEST(ReconcileTest, NeverTwoPodsOfOneWorker) {
  Cluster c;
  c.Settle();
  // Three restarts of the same worker before any old pod is gone.
  for (int i = 0; i < 3; ++i) {
    c.now += 1000;
    const Changes changes =
        c.Pass({KillRestart("worker-1", absl::StrCat("node-", 1 + 10 * i), "")});
    for (const Write& w : changes.writes) EXPECT_NE(w.kind, Write::Kind::kCreate);
    c.SetPhase("quickstart-k8s-worker-1", "Failed");  // terminating pods may fail too
  }
  EXPECT_EQ(c.Status()["workerInstances"][1]["incarnation"], 3);
  EXPECT_EQ(c.Status()["workerInstances"][1]["excludedNodes"],
            Json::array({"node-1", "node-11", "node-21"}));
  EXPECT_EQ(c.Status()["workers"]["failed"], 0);  // not a failure: we deleted it
  c.RemoveTerminating();
  const Changes changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("leave worker-1", "create pods quickstart-k8s-worker-1"));
  c.created_pods.clear();
  for (int i = 0; i < 3; ++i) c.Pass();  // Apply asserts on every create
  EXPECT_THAT(c.created_pods, IsEmpty());
}

TEST(ReconcileTest, FailedWorkerWithinBackoffLimitIsRestarted) {
  Cluster c;
  c.Settle();
  c.SetPhase("quickstart-k8s-worker-1", "Failed");
  c.FindPod("quickstart-k8s-worker-1")->at("status")["containerStatuses"] =
      Json::parse(R"([{"name":"trainer","state":{"terminated":{"exitCode":2,"reason":"Error"}}}])");
  Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ((*changes.status)["workers"]["failed"], 1);
  EXPECT_EQ((*changes.status)["workers"]["restarts"], 1);
  EXPECT_EQ((*changes.status)["workerInstances"][1]["incarnation"], 1);
  EXPECT_EQ((*changes.status)["workerInstances"][1]["excludedNodes"], Json::array());
  EXPECT_EQ(Condition(*changes.status, "Failed")["status"], "False");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning WorkerFailed"));
  EXPECT_THAT(changes.events[0].message, HasSubstr("exit code 2"));
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre(HasSubstr("delete pods quickstart-k8s-worker-1")));
  c.RemoveTerminating();
  changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("leave worker-1", "create pods quickstart-k8s-worker-1"));
  const Json& affinity = changes.writes[1].object["spec"];
  EXPECT_FALSE(affinity.contains("affinity"));    // no node excluded, none preferred
  EXPECT_EQ(c.Status()["workers"]["failed"], 1);  // counted once
}

TEST(ReconcileTest, FailuresOverBackoffLimitFailTheJob) {
  Cluster c;
  c.job["spec"]["runPolicy"] = {{"backoffLimit", 1}};
  c.Settle();
  c.SetPhase("quickstart-k8s-worker-0", "Failed");
  c.Pass();
  c.RemoveTerminating();
  c.Pass();
  c.RunAll();
  c.Pass();
  c.SetPhase("quickstart-k8s-worker-3", "Failed");
  c.now += 10000;
  const Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  const Json& failed = Condition(*changes.status, "Failed");
  EXPECT_EQ(failed["status"], "True");
  EXPECT_EQ(failed["reason"], "BackoffLimitExceeded");
  EXPECT_THAT(failed["message"].get<std::string>(), HasSubstr("worker-3"));
  EXPECT_EQ((*changes.status)["workers"]["failed"], 2);
  EXPECT_EQ((*changes.status)["completionTime"], "2026-11-29T21:00:10Z");
  EXPECT_EQ(Condition(*changes.status, "Running")["status"], "False");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning BackoffLimitExceeded"));
  // Every pod still running is deleted; the failed one stays for its logs.
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre(HasSubstr("quickstart-k8s-ps-0"), HasSubstr("quickstart-k8s-sharding"),
                  HasSubstr("quickstart-k8s-worker-0"), HasSubstr("quickstart-k8s-worker-1"),
                  HasSubstr("quickstart-k8s-worker-2")));
  EXPECT_EQ(changes.requeue_after_ms, 0);
  // Terminal: later passes write nothing, emit nothing.
  c.now += 10000;
  const Changes later = c.Pass();
  EXPECT_THAT(later.writes, IsEmpty());
  EXPECT_THAT(later.events, IsEmpty());
}

TEST(ReconcileTest, SuccessStopsTheServers) {
  Cluster c;
  c.Settle();
  for (int i = 0; i < 4; ++i) c.SetPhase(absl::StrCat("quickstart-k8s-worker-", i), "Succeeded");
  c.now += 90000;
  Snapshot o = c.Observe();
  o.progress = Progress{40000, 40000, 2, 2, 0, true};
  const Changes changes = Reconcile(o, Settings{});
  c.Apply(changes);
  ASSERT_TRUE(changes.status.has_value());
  const Json& st = *changes.status;
  EXPECT_EQ(Condition(st, "Succeeded")["status"], "True");
  EXPECT_EQ(Condition(st, "Succeeded")["reason"], "AllWorkersSucceeded");
  EXPECT_EQ(Condition(st, "Running")["status"], "False");
  EXPECT_EQ(st["completionTime"], "2026-11-29T21:01:30Z");
  EXPECT_EQ(st["progress"]["percent"], 100);
  EXPECT_EQ(st["workers"]["succeeded"], 4);
  EXPECT_EQ(st["state"], "Succeeded");
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre(HasSubstr("delete pods quickstart-k8s-ps-0"),
                          HasSubstr("delete pods quickstart-k8s-sharding")));
  EXPECT_THAT(EventReasons(changes), ElementsAre("Normal JobSucceeded"));
  EXPECT_EQ(changes.requeue_after_ms, 0);
  c.RemoveTerminating();
  Changes later = c.Pass();
  EXPECT_THAT(later.writes, IsEmpty());
  EXPECT_THAT(later.events, IsEmpty());
  later = c.Pass();
  EXPECT_FALSE(later.status.has_value());
  EXPECT_FALSE(c.job_deleted);  // no TTL
}

TEST(ReconcileTest, TtlAfterFinishedDeletesTheJob) {
  Cluster c;
  c.job["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 60}};
  c.Settle();
  for (int i = 0; i < 4; ++i) c.SetPhase(absl::StrCat("quickstart-k8s-worker-", i), "Succeeded");
  const int64_t done = c.now;
  Changes changes = c.Pass();
  EXPECT_EQ(changes.requeue_after_ms, 60000);
  c.now = done + 10000;
  changes = c.Pass();
  EXPECT_EQ(changes.requeue_after_ms, 50000);
  EXPECT_FALSE(c.job_deleted);
  c.now = done + 60000;
  changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes), ElementsAre("delete job quickstart-k8s"));
  EXPECT_TRUE(c.job_deleted);
}

TEST(ReconcileTest, InvalidSpecFailsWithoutChildren) {
  Cluster c;
  c.job["spec"]["workers"]["replicas"] = -2;
  Changes changes = c.Pass();
  EXPECT_THAT(changes.writes, IsEmpty());
  ASSERT_TRUE(changes.status.has_value());
  const Json& failed = Condition(*changes.status, "Failed");
  EXPECT_EQ(failed["status"], "True");
  EXPECT_EQ(failed["reason"], "InvalidSpec");
  EXPECT_THAT(failed["message"].get<std::string>(), HasSubstr("spec.workers.replicas"));
  EXPECT_EQ(changes.status->at("conditions").size(), 6u);
  EXPECT_EQ(changes.status->at("state"), "Failed");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning InvalidSpec"));
  EXPECT_EQ(changes.requeue_after_ms, 0);
  changes = c.Pass();
  EXPECT_FALSE(changes.status.has_value());
  EXPECT_THAT(changes.events, IsEmpty());

  // Fixed (a new generation): the job starts.
  c.job["spec"]["workers"]["replicas"] = 4;
  c.job["metadata"]["generation"] = 2;
  changes = c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Failed")["status"], "False");
  EXPECT_EQ(Condition(c.Status(), "Failed")["observedGeneration"], 2);
  EXPECT_EQ(c.Status()["observedGeneration"], 2);
  EXPECT_THAT(Describe(changes.writes), Not(IsEmpty()));
}

TEST(ReconcileTest, StragglersInStatusAndCondition) {
  Cluster c;
  c.Settle();
  const std::vector<Straggler> view = {
      {"worker-2", "node-2", "quickstart-k8s-worker-2", v1::PERSISTENT,
       "cpu contention from co-located pods", 2.3456, kT0 + 12000},
      {"worker-0", "node-0", "quickstart-k8s-worker-0", v1::LEADER, "faster device", 0.61, kT0}};
  Changes changes = c.Pass({}, view);
  ASSERT_TRUE(changes.status.has_value());
  const Json& st = *changes.status;
  EXPECT_EQ(st["stragglerCount"], 1);
  ASSERT_EQ(st["stragglers"].size(), 2u);
  EXPECT_EQ(st["stragglers"][0],
            Json::parse(R"({"worker":"worker-2","node":"node-2","pod":"quickstart-k8s-worker-2",
                            "class":"Persistent","compensated":false,
                            "cause":"cpu contention from co-located pods",
                            "score":2.35,"since":"2026-11-29T21:00:12Z"})"));
  const Json& cond = Condition(st, "StragglersDetected");
  EXPECT_EQ(cond["status"], "True");
  const std::string message = cond["message"];
  for (const char* part : {"worker-2", "node-2", "Persistent", "cpu contention"}) {
    EXPECT_THAT(message, HasSubstr(part));
  }
  EXPECT_THAT(message, Not(HasSubstr("worker-0")));
  EXPECT_FALSE(c.Pass({}, view).status.has_value());
  changes = c.Pass();
  EXPECT_EQ(Condition(c.Status(), "StragglersDetected")["status"], "False");
  EXPECT_EQ(Condition(c.Status(), "StragglersDetected")["reason"], "NoStragglers");
}

TEST(ReconcileTest, AdjustBatchSize) {
  struct Case {
    std::string name;
    std::string rule, reason;
    std::vector<Straggler> stragglers;
    bool event;
    bool subject;  // about worker-2 itself, not keeping the global batch around another's
  };
  const std::vector<Case> cases = {
      {"straggler's own adjustment",
       "antdt-nd:transient-adjust",
       "TRANSIENT straggler (score 1.6, 1 slow window): local batch 64 -> 40",
       {},
       true,
       true},
      {"worker the Monitor lists",
       "custom:slow",
       "score 1.9 over 1.5",
       {{"worker-2", "node-2", "", v1::TRANSIENT, "cpu", 1.9, kT0}},
       true,
       true},
      {"rebalance around someone else",
       "antdt-nd:rebalance",
       "keeps the global batch 256 around worker-3: local batch 64 -> 70",
       {},
       false,
       false},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    Cluster c;
    c.Settle();
    const Changes changes =
        c.Pass({Adjust("worker-2", 40, tc.rule, tc.reason, tc.subject)}, tc.stragglers);
    EXPECT_THAT(changes.writes, IsEmpty());
    EXPECT_EQ(c.Status()["workerInstances"][2]["localBatchSize"], 40);
    EXPECT_EQ(c.Status()["lastActions"].back()["action"], "ADJUST_BS");
    EXPECT_EQ(Condition(c.Status(), "Mitigating")["reason"], "BatchSizesAdjusted");
    if (tc.event) {
      EXPECT_THAT(EventReasons(changes), ElementsAre("Normal BatchSizeAdjusted"));
    } else {
      EXPECT_THAT(changes.events, IsEmpty());
    }
  }
}

TEST(ReconcileTest, LastActionsKeepsTheLatestTwenty) {
  Cluster c;
  c.Settle();
  for (int i = 0; i < 25; ++i) {
    c.Pass({Adjust("worker-0", 10 + i, "antdt-nd:rebalance", "", false)});
  }
  ASSERT_EQ(c.Status()["lastActions"].size(), 20u);
  EXPECT_EQ(c.Status()["workerInstances"][0]["localBatchSize"], 34);
}

// Backup workers are the policy's decision under the operator too: the
// servers start with them (the spec), the decision is recorded, nothing is
// ignored; and an entry of lastActions reads back as the action it records.
TEST(ReconcileTest, BackupWorkersAreRecordedAndEveryRecordReadsBack) {
  Cluster c;
  c.Settle();
  policy::Decision backups;
  backups.action = policy::UseBackupWorkers{1};
  backups.policy = vocab::Policy::kBackupWorkers;
  backups.rule = "backup-workers:start";
  backups.reason = "baseline";
  const Changes changes = c.Pass({backups, KillRestart("worker-2", "node-2", "node-9")});
  EXPECT_THAT(EventReasons(changes), Contains("Normal BackupWorkers"));
  EXPECT_THAT(EventReasons(changes), Not(Contains("Warning ActionIgnored")));
  const Json& last = c.Status()["lastActions"];
  ASSERT_EQ(last.size(), 2u);
  EXPECT_EQ(last[0]["action"], "BACKUP_WORKERS");
  const manifest::Job spec = *manifest::ParseJob(c.job.dump());
  const std::optional<policy::Decision> read = DecisionFromRecord(last[1], spec);
  ASSERT_TRUE(read.has_value());
  const auto* restart = std::get_if<policy::KillRestart>(&read->action);
  ASSERT_NE(restart, nullptr);
  EXPECT_EQ(restart->worker, "worker-2");
  EXPECT_EQ(restart->from_node, "node-2");
  EXPECT_EQ(restart->to_node, "node-9");
  EXPECT_EQ(restart->exclude_node_until_ms, kT0 + 30000 + spec.straggler_policy.cooldown_ms)
      << "excluded until the cool-down ends";
  EXPECT_EQ(read->subject, "worker-2");
  EXPECT_EQ(read->evidence.at("saved_seconds"), 31);
  EXPECT_EQ(read->evidence.at("windows_slow"), 4);
  EXPECT_EQ(DecisionRecord(*read, 0), last[1]) << "written and read by one pair";
  const std::optional<policy::Decision> backup = DecisionFromRecord(last[0], spec);
  ASSERT_TRUE(backup.has_value());
  EXPECT_TRUE(std::holds_alternative<policy::UseBackupWorkers>(backup->action));
  EXPECT_EQ(DecisionRecord(*backup, 0), last[0]);
  EXPECT_FALSE(DecisionFromRecord(Json{{"action", "RESTART_ALL"}}, spec).has_value());
  // An entry written before subject was kept: a batch change with evidence is
  // about its worker, one without only keeps the global batch.
  const std::optional<policy::Decision> legacy = DecisionFromRecord(
      Json{{"action", "ADJUST_BS"}, {"worker", "worker-1"}, {"evidence", "score=1.7"}}, spec);
  ASSERT_TRUE(legacy.has_value());
  EXPECT_EQ(legacy->subject, "worker-1");
  EXPECT_EQ(
      DecisionFromRecord(Json{{"action", "ADJUST_BS"}, {"worker", "worker-1"}}, spec)->subject, "");
}

TEST(ReconcileTest, RestartedWorkerGetsItsAdjustedBatch) {
  Cluster c;
  c.Settle();
  c.Pass({Adjust("worker-2", 40, "antdt-nd:transient-adjust", "", true),
          KillRestart("worker-2", "node-2", "")});
  c.RemoveTerminating();
  const Changes changes = c.Pass();
  ASSERT_EQ(changes.writes.size(), 2u);
  EXPECT_EQ(Env(changes.writes[1].object, "ANTDT_LOCAL_BATCH"), "40");
}

TEST(ReconcileTest, JobBeingDeletedIsLeftToTheGarbageCollector) {
  Cluster c;
  c.Settle();
  c.job["metadata"]["deletionTimestamp"] = "2026-11-29T21:05:00Z";
  const Changes changes = Reconcile(c.Observe(), Settings{});
  EXPECT_THAT(changes.writes, IsEmpty());
  EXPECT_FALSE(changes.status.has_value());
}

TEST(ReconcileTest, SuspendDeletesEveryPodAndResumeStartsTheNextIncarnations) {
  Cluster c;
  c.job["spec"]["checkpoint"] = {{"path", "/data/ckpt"}};
  c.Settle();
  c.SetPhase("quickstart-k8s-worker-2", "Succeeded");
  c.Pass();
  c.job["spec"]["suspend"] = true;
  c.job["metadata"]["generation"] = 2;
  c.now += 1000;
  Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ(Condition(*changes.status, "Suspended")["status"], "True");
  EXPECT_EQ(Condition(*changes.status, "Running")["reason"], "JobSuspended");
  EXPECT_EQ((*changes.status)["state"], "Suspended");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Normal Suspended"));
  // Every running pod goes, the sharding service's too (its state is under the
  // checkpoint path); the succeeded worker's pod stays: it is its result.
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre(HasSubstr("delete pods quickstart-k8s-ps-0"),
                          HasSubstr("delete pods quickstart-k8s-sharding"),
                          HasSubstr("delete pods quickstart-k8s-worker-0"),
                          HasSubstr("delete pods quickstart-k8s-worker-1"),
                          HasSubstr("delete pods quickstart-k8s-worker-3")));
  EXPECT_EQ((*changes.status)["workerInstances"][0]["incarnation"], 1);
  EXPECT_EQ((*changes.status)["workerInstances"][2]["incarnation"], 0);
  EXPECT_EQ((*changes.status)["workers"]["restarts"], 0);  // a suspension is no restart
  c.RemoveTerminating();
  c.now += 60000;
  for (int i = 0; i < 3; ++i) {
    changes = c.Pass();
    EXPECT_THAT(changes.writes, IsEmpty());  // nothing while suspended
    EXPECT_THAT(changes.events, IsEmpty());
  }
  ASSERT_EQ(c.pods.size(), 1u);

  c.job["spec"]["suspend"] = false;
  c.job["metadata"]["generation"] = 3;
  c.now += 1000;
  changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ(Condition(*changes.status, "Suspended")["status"], "False");
  EXPECT_EQ(Condition(*changes.status, "Suspended")["reason"], "JobResumed");
  EXPECT_EQ((*changes.status)["startTime"], kube::FormatTime(c.now));  // a Job's deadline restarts
  EXPECT_THAT(EventReasons(changes), ElementsAre("Normal Resumed"));
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("create pods quickstart-k8s-sharding", "create pods quickstart-k8s-ps-0",
                          "leave worker-0", "create pods quickstart-k8s-worker-0", "leave worker-1",
                          "create pods quickstart-k8s-worker-1", "leave worker-3",
                          "create pods quickstart-k8s-worker-3"));
  // A resumed worker is not a worker being restarted.
  EXPECT_EQ(Condition(*changes.status, "Mitigating")["status"], "False");
  c.RunAll();
  changes = c.Pass();
  EXPECT_EQ(c.Status()["state"], "Running");
  EXPECT_EQ(c.Status()["workers"]["restarts"], 0);
  EXPECT_EQ(c.Status()["workerInstances"][0]["resumes"], 1);
}

int64_t BatchSum(const Json& status) {
  int64_t sum = 0;
  for (const Json& w : status["workerInstances"]) sum += w.value("localBatchSize", int64_t{0});
  return sum;
}

// 4 workers scaled to 2 and then to 3 (with a parameter server): the global
// batch of 256 is split evenly over the workers there are at each step, the
// remaining ones told their batch and the server its members, the removed
// workers' pods deleted and, once gone, their shards released; the one added
// back resumes as its next incarnation. No step is a restart.
TEST(ReconcileTest, ScalingDownAndUpKeepsTheGlobalBatchAndReleasesTheRemoved) {
  Cluster c;
  c.Settle();
  ASSERT_EQ(BatchSum(c.Status()), 256);
  c.job["spec"]["workers"]["replicas"] = 2;
  c.job["metadata"]["generation"] = 2;
  c.now += 1000;
  Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_THAT(EventReasons(changes), ElementsAre("Normal Scaled"));
  EXPECT_THAT(changes.events[0].message, HasSubstr("from 4 to 2; removed worker-2, worker-3"));
  EXPECT_THAT(changes.events[0].message, HasSubstr("global batch 256 kept"));
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre("adjust worker-0 on node-0 to 128", "adjust worker-1 on node-1 to 128",
                  "resize 2 -worker-2,worker-3 +", HasSubstr("delete pods quickstart-k8s-worker-2"),
                  HasSubstr("delete pods quickstart-k8s-worker-3")));
  EXPECT_EQ(c.Status()["workerInstances"].size(), 2u);
  EXPECT_EQ(BatchSum(c.Status()), 256);
  EXPECT_EQ(c.Status()["workers"]["desired"], 2);
  EXPECT_EQ(c.Status()["workers"]["summary"], "2/2");
  ASSERT_EQ(c.Status()["removedWorkers"].size(), 2u);
  EXPECT_FALSE(c.Status()["removedWorkers"][0].value("retired", false));
  EXPECT_EQ(Condition(c.Status(), "Mitigating")["status"], "False");
  EXPECT_EQ(Condition(c.Status(), "Running")["status"], "True");

  // Their pods still terminating: nothing more; once gone, their shards go back.
  changes = c.Pass();
  EXPECT_THAT(changes.writes, IsEmpty());
  c.RemoveTerminating();
  changes = c.Pass();
  EXPECT_THAT(Describe(changes.writes),
              ElementsAre("release worker-2 <= 0", "release worker-3 <= 0",
                          "resize 2 -worker-2,worker-3 +"));
  EXPECT_TRUE(c.Status()["removedWorkers"][0].value("retired", false));
  changes = c.Pass();
  EXPECT_THAT(changes.writes, IsEmpty());
  EXPECT_FALSE(changes.status.has_value());

  // Up to 3: worker-2 comes back as incarnation 1.
  c.job["spec"]["workers"]["replicas"] = 3;
  c.job["metadata"]["generation"] = 3;
  changes = c.Pass();
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre("adjust worker-0 on node-0 to 86", "adjust worker-1 on node-1 to 85",
                  "resize 3 - +worker-2", "leave worker-2", "create pods quickstart-k8s-worker-2"));
  EXPECT_EQ(changes.writes[4].object["metadata"]["labels"]["antdt.io/incarnation"], "1");
  EXPECT_EQ(Env(changes.writes[4].object, "ANTDT_LOCAL_BATCH"), "85");
  EXPECT_EQ(BatchSum(c.Status()), 256);
  EXPECT_EQ(c.Status()["workerInstances"][2]["incarnation"], 1);
  EXPECT_EQ(c.Status()["workerInstances"][2]["resumes"], 1);
  ASSERT_EQ(c.Status()["removedWorkers"].size(), 1u);
  EXPECT_EQ(c.Status()["removedWorkers"][0]["id"], "worker-3");
  c.RunAll();
  c.Pass();
  EXPECT_EQ(c.Status()["workers"]["summary"], "3/3");
  EXPECT_EQ(c.Status()["workers"]["restarts"], 0) << "scaling is no restart";
  EXPECT_EQ(Condition(c.Status(), "Running")["status"], "True");
}

// A collective job (no parameter servers) scaled from 2 to 3: every running
// rank begins its next incarnation with WORLD_SIZE=3 and its share of the
// global batch, not counted as a restart.
TEST(ReconcileTest, ScalingACollectiveJobRestartsItsRanksWithTheNewWorldSize) {
  Cluster c;
  c.job = PytorchJob();
  c.Settle();
  c.job["spec"]["workers"]["replicas"] = 3;
  c.job["metadata"]["generation"] = 2;
  Changes changes = c.Pass();
  EXPECT_THAT(EventReasons(changes), ElementsAre("Normal Scaled"));
  EXPECT_THAT(changes.events[0].message, HasSubstr("2 running ranks restart with WORLD_SIZE=3"));
  // No rank starts while the old group is still there (it would meet it at
  // its rendezvous).
  EXPECT_THAT(Describe(changes.writes), ElementsAre(HasSubstr("delete pods pytorch-k8s-worker-0"),
                                                    HasSubstr("delete pods pytorch-k8s-worker-1")));
  c.RemoveTerminating();
  changes = c.Pass();
  ASSERT_THAT(Describe(changes.writes),
              ElementsAre("create pods pytorch-k8s-worker-0", "create pods pytorch-k8s-worker-1",
                          "create pods pytorch-k8s-worker-2"));
  EXPECT_EQ(Env(changes.writes[2].object, "WORLD_SIZE"), "3");
  EXPECT_EQ(Env(changes.writes[0].object, "WORLD_SIZE"), "3");
  EXPECT_EQ(Env(changes.writes[0].object, "ANTDT_LOCAL_BATCH"), "22");  // 64 = 22 + 21 + 21
  EXPECT_EQ(Env(changes.writes[1].object, "ANTDT_LOCAL_BATCH"), "21");
  EXPECT_EQ(BatchSum(c.Status()), 64);
  c.RunAll();
  c.Pass();
  EXPECT_EQ(c.Status()["workers"]["summary"], "3/3");
  EXPECT_EQ(c.Status()["workers"]["restarts"], 0);
}

TEST(ReconcileTest, SuspendWithEphemeralStorageKeepsTheShardingServicesState) {
  Cluster c;
  c.job["spec"].erase("checkpoint");
  c.job["spec"]["shardingService"]["storage"] = {{"ephemeral", true}};
  c.Settle();
  c.job["spec"]["suspend"] = true;
  Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  for (const std::string& write : Describe(changes.writes)) {
    EXPECT_THAT(write, Not(HasSubstr("sharding")));
  }
  EXPECT_EQ(changes.writes.size(), 5u);  // ps-0 and four workers
  EXPECT_THAT(Condition(*changes.status, "Suspended")["message"].get<std::string>(),
              HasSubstr("spec.shardingService.storage.ephemeral"));
}

TEST(ReconcileTest, AJobCreatedSuspendedCreatesNoPodAndHasNotStarted) {
  Cluster c;
  c.job["spec"]["suspend"] = true;
  c.job["spec"]["checkpoint"] = {{"path", "/data/ckpt"}};
  const Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  for (const std::string& write : Describe(changes.writes)) {
    EXPECT_THAT(write, Not(HasSubstr("create pods")));
  }
  EXPECT_FALSE(changes.status->contains("startTime"));
  EXPECT_EQ((*changes.status)["state"], "Suspended");
}

TEST(ReconcileTest, ActiveDeadlineFailsTheJob) {
  Cluster c;
  c.job["spec"]["runPolicy"] = {{"activeDeadlineSeconds", 60}};
  c.Settle();
  c.now += 59000;
  Changes changes = c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Failed")["status"], "False");
  c.now += 1000;
  changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ(Condition(*changes.status, "Failed")["reason"], "DeadlineExceeded");
  EXPECT_THAT(Condition(*changes.status, "Failed")["message"].get<std::string>(),
              HasSubstr("activeDeadlineSeconds (60s)"));
  EXPECT_EQ((*changes.status)["state"], "Failed");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning DeadlineExceeded"));
  EXPECT_EQ(changes.writes.size(), 6u);  // every pod still running stops
  c.now += 1000;
  c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Failed")["reason"], "DeadlineExceeded");
}

TEST(ReconcileTest, EvictedOrPreemptedWorkerIsRestartedWithoutCountingAFailure) {
  Cluster c;
  c.job["spec"]["runPolicy"] = {{"backoffLimit", 0}};
  c.Settle();
  Json* pod = c.FindPod("quickstart-k8s-worker-1");
  (*pod)["status"] = Json::parse(
      R"({"phase":"Failed","reason":"Evicted","message":"The node was low on resource: memory."})");
  Changes changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ((*changes.status)["workers"]["failed"], 0);
  EXPECT_EQ(Condition(*changes.status, "Failed")["status"], "False");
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning WorkerDisrupted"));
  EXPECT_THAT(changes.events[0].message, HasSubstr("Evicted"));
  c.RemoveTerminating();
  c.Pass();
  c.RunAll();
  c.Pass();
  // Preempted: the DisruptionTarget condition the scheduler sets.
  pod = c.FindPod("quickstart-k8s-worker-2");
  (*pod)["status"]["phase"] = "Failed";
  (*pod)["status"]["conditions"] = Json::parse(
      R"([{"type":"DisruptionTarget","status":"True","reason":"PreemptionByScheduler"}])");
  changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ((*changes.status)["workers"]["failed"], 0);
  EXPECT_THAT(changes.events[0].message, HasSubstr("PreemptionByScheduler"));
  // A failure of its own still counts (and here, with backoffLimit 0, fails the job).
  c.SetPhase("quickstart-k8s-worker-0", "Failed");
  changes = c.Pass();
  ASSERT_TRUE(changes.status.has_value());
  EXPECT_EQ(Condition(*changes.status, "Failed")["reason"], "BackoffLimitExceeded");
}

TEST(ReconcileTest, QueueLabelsOfTheJobGoToEveryPod) {
  Cluster c;
  c.job["metadata"]["labels"] = {{"kueue.x-k8s.io/queue-name", "team-a"},
                                 {"kueue.x-k8s.io/priority-class", "high"},
                                 {"team", "a"}};
  c.Settle();
  ASSERT_FALSE(c.pods.empty());
  for (const Json& pod : c.pods) {
    const Json& labels = pod["metadata"]["labels"];
    EXPECT_EQ(labels.value("kueue.x-k8s.io/queue-name", ""), "team-a") << pod["metadata"]["name"];
    EXPECT_EQ(labels.value("kueue.x-k8s.io/priority-class", ""), "high");
    EXPECT_FALSE(labels.contains("team"));
  }
}

TEST(ReconcileTest, EventsOfACommittedDecisionAreWrittenAfterACrash) {
  Cluster c;
  c.Settle();
  // The operator commits a KILL_RESTART and stops before writing its Event.
  c.clear_pending_events = false;
  Changes changes = c.Pass({KillRestart("worker-2", "node-2", "node-5")});
  EXPECT_THAT(EventReasons(changes), ElementsAre("Warning StragglerRestarted"));
  ASSERT_TRUE(c.Status().contains("pendingEvents"));
  EXPECT_EQ(c.Status()["pendingEvents"][0]["reason"], "StragglerRestarted");
  // Its successor's first pass writes it again, before its own.
  c.clear_pending_events = true;
  c.RemoveTerminating();
  changes = c.Pass();
  ASSERT_FALSE(changes.events.empty());
  EXPECT_EQ(changes.events[0].reason, "StragglerRestarted");
  EXPECT_THAT(changes.events[0].message, HasSubstr("worker-2"));
  EXPECT_FALSE(c.Status().contains("pendingEvents"));
  // Once written, never again.
  c.RunAll();
  c.Pass();
  EXPECT_THAT(c.Pass().events, IsEmpty());
}

TEST(ReconcileTest, GangSchedulingPutsTheServersAndWorkersInAPodGroup) {
  for (const std::string scheduler : {"volcano", "scheduler-plugins"}) {
    SCOPED_TRACE(scheduler);
    Cluster c;
    c.settings.gang_scheduler = scheduler;
    c.job["spec"]["runPolicy"] = {{"schedulingPolicy", {{"queue", "team-a"}}}};
    c.Pass();
    ASSERT_TRUE(c.podgroups.empty()) << "not before the dataset";
    c.dataset_ready = true;
    const Changes changes = c.Pass();
    ASSERT_FALSE(changes.writes.empty());
    EXPECT_EQ(changes.writes[0].resource, "podgroups");  // before its members
    ASSERT_EQ(c.podgroups.size(), 1u);
    const Json& group = c.podgroups[0];
    EXPECT_EQ(group["kind"], "PodGroup");
    EXPECT_EQ(group["metadata"]["name"], "quickstart-k8s");
    EXPECT_EQ(group["metadata"]["ownerReferences"][0]["uid"], kJobUid);
    EXPECT_EQ(group["spec"]["minMember"], 5);  // 1 parameter server + 4 workers
    for (const Json& pod : c.pods) {
      const std::string role = pod["metadata"]["labels"]["antdt.io/role"];
      SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
      const bool member = role != "sharding";  // it must run before the others exist
      if (scheduler == "volcano") {
        EXPECT_EQ(group["apiVersion"], "scheduling.volcano.sh/v1beta1");
        EXPECT_EQ(group["spec"]["queue"], "team-a");
        EXPECT_EQ(pod["metadata"].contains("annotations") &&
                      pod["metadata"]["annotations"].value("scheduling.k8s.io/group-name", "") ==
                          "quickstart-k8s",
                  member);
        EXPECT_EQ(pod["spec"].value("schedulerName", ""), member ? "volcano" : "");
      } else {
        EXPECT_EQ(group["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
        EXPECT_EQ(pod["metadata"]["labels"].value("scheduling.x-k8s.io/pod-group", ""),
                  member ? "quickstart-k8s" : "");
        EXPECT_EQ(pod["spec"].value("schedulerName", ""),
                  member ? "scheduler-plugins-scheduler" : "");
      }
    }
    c.RunAll();
    c.Pass();  // the PodGroup is not created twice (the harness asserts it)
  }
}

// Per-job credentials: the job's Secret (its token, base64, owned by the job)
// is created before any pod; the sharding service and every worker read it as
// ANTDT_TOKEN through a secretKeyRef (the value is in no pod spec); the
// parameter servers do not.
TEST(ReconcileTest, JobCredentialsGoInAnOwnedSecretThePodsReference) {
  Cluster c;
  c.settings.job_credentials = true;
  c.job_token = "t0k3n";
  Changes changes = c.Pass();
  EXPECT_THAT(
      Describe(changes.writes),
      ElementsAre("create services quickstart-k8s-sharding", "create services quickstart-k8s-ps",
                  "create services quickstart-k8s-workers",
                  "create persistentvolumeclaims "
                  "quickstart-k8s-sharding-state-0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10",
                  "create secrets quickstart-k8s-token-0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10",
                  "create pods quickstart-k8s-sharding"));
  ASSERT_EQ(c.secrets.size(), 1u);
  const Json& secret = c.secrets[0];
  EXPECT_EQ(secret["kind"], "Secret");
  EXPECT_EQ(secret["data"]["token"], "dDBrM24=");  // base64("t0k3n")
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["uid"], kJobUid);
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["controller"], true);
  const Json token_env = Json::parse(R"({"name": "ANTDT_TOKEN", "valueFrom": {"secretKeyRef":
      {"name": "quickstart-k8s-token-0b6f3a52-4c1e-4d7a-9a43-5f0e8c2d7b10", "key": "token"}}})");
  auto has_token = [&](const Json& pod) {
    for (const Json& e : pod["spec"]["containers"][0]["env"]) {
      if (e == token_env) return true;
    }
    return false;
  };
  ASSERT_NE(c.FindPod("quickstart-k8s-sharding"), nullptr);
  EXPECT_TRUE(has_token(*c.FindPod("quickstart-k8s-sharding")));
  EXPECT_EQ(c.FindPod("quickstart-k8s-sharding")->dump().find("t0k3n"), std::string::npos);
  c.Settle();
  EXPECT_EQ(c.secrets.size(), 1u) << "created once";
  EXPECT_TRUE(has_token(*c.FindPod("quickstart-k8s-worker-0")));
  // The parameter servers take the credential too: every call to them
  // carries it.
  EXPECT_TRUE(has_token(*c.FindPod("quickstart-k8s-ps-0")));
  for (const Json& p : c.pods) EXPECT_EQ(p.dump().find("t0k3n"), std::string::npos);
}

// The sharding service came back without the job's dataset (its state was in
// its pod): the job fails, saying why and what keeps the state, rather than
// creating the dataset again and training committed records twice; its pods
// are stopped.
TEST(ReconcileTest, AShardingServiceBackWithoutItsStateFailsTheJobSayingWhy) {
  Cluster c;
  c.job["spec"].erase("checkpoint");
  c.job["spec"]["shardingService"]["storage"] = {{"ephemeral", true}};
  c.Settle();
  c.dataset_lost = true;
  c.now += 1000;
  Changes changes = c.Pass();
  EXPECT_EQ(Condition(c.Status(), "Failed")["status"], "True");
  EXPECT_EQ(Condition(c.Status(), "Failed")["reason"], "ShardingStateLost");
  EXPECT_THAT(Condition(c.Status(), "Failed")["message"].get<std::string>(),
              HasSubstr("drop ephemeral, or mount a shared volume at spec.checkpoint.path"));
  EXPECT_EQ(c.Status()["state"], "Failed");
  EXPECT_THAT(EventReasons(changes), Contains("Warning ShardingStateLost"));
  EXPECT_THAT(Describe(changes.writes), Contains(HasSubstr("delete pods quickstart-k8s-worker-0")));
  // Said once; nothing created again.
  c.RemoveTerminating();
  changes = c.Pass();
  EXPECT_THAT(EventReasons(changes), Not(Contains("Warning ShardingStateLost")));
  for (const Write& w : changes.writes) EXPECT_NE(w.kind, Write::Kind::kCreate);
}

TEST(RenderTest, NoPodGroupWithoutGangScheduling) {
  const Json job = QuickstartJob();
  EXPECT_TRUE(RenderPodGroup(job, MustParse(job), Settings{}).is_null());
}

}  // namespace
}  // namespace antdt::reconciler
