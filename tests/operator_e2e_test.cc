// End to end through Kubernetes: the API-server emulator, the test kubelet
// (pods run as local processes, one agent per node) and antdt-operator, with
// the real `kubectl` applying the CRD and the job. A job trains for real; the
// workers' journals prove every record committed exactly once. The demo
// trainer's jobs (examples/k8s/quickstart.yaml, with parameter servers) and the
// PyTorch DDP example (examples/k8s/pytorch.yaml: Debian's python3-torch, the
// build tree's antdt package; no parameter servers).
#define _TURN_OFF_PLATFORM_STRING  // cpprest's U() clashes with gtest
#include <cpprest/http_client.h>
#include <signal.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "antdt/v1/agent.grpc.pb.h"
#include "antdt/v1/monitor.grpc.pb.h"
#include "antdt/v1/sharding.grpc.pb.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "backends/kubernetes/client/client.h"
#include "backends/kubernetes/client/config.h"
#include "backends/kubernetes/reconciler/reconciler.h"
#include "common/config.h"
#include "common/testing/testing.h"
#include "gtest/gtest.h"
#include "workload/demo/journal.h"

namespace antdt {
namespace {

using kube::Json;
using testing::BinPath;
using testing::SourcePath;
using testing::TempDir;
namespace fs = std::filesystem;

std::string Str(const Json& j, std::initializer_list<const char*> path) {
  const Json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->contains(k)) return "";
    cur = &(*cur)[k];
  }
  return cur->is_string() ? cur->get<std::string>() : "";
}

// The lines of `metrics` (Prometheus text) of series `name` whose labels
// contain every one of `labels` (each `key="value"`).
// The value of a series without labels ("name 3"), or -1 when absent.
double MetricValue(const std::string& metrics, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name + " ")) continue;
    double value = -1;
    if (absl::SimpleAtod(line.substr(name.size() + 1), &value)) return value;
  }
  return -1;
}

std::vector<std::string> SeriesLines(const std::string& metrics, const std::string& name,
                                     const std::vector<std::string>& labels) {
  std::vector<std::string> out;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name + "{")) continue;
    if (std::all_of(labels.begin(), labels.end(),
                    [&](const std::string& l) { return absl::StrContains(line, l); })) {
      out.emplace_back(line);
    }
  }
  return out;
}

std::string Condition(const Json& job, const std::string& type) {
  if (!job.contains("status") || !job["status"].contains("conditions")) return "";
  for (const Json& c : job["status"]["conditions"]) {
    if (c.value("type", "") == type) return c.value("status", "");
  }
  return "";
}

int RunCommand(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* f = popen(full.c_str(), "r");
  if (f == nullptr) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) output->append(buf, n);
  return WEXITSTATUS(pclose(f));
}

// ANTDT_E2E_CONTROL_PLANE=real: the cluster is the real control plane
// (testing/control-plane: etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler built by scripts/build-k8s.sh) instead of the emulator; the
// test kubelet then acts for each node with its node credentials and the real
// scheduler binds the pods. Only the cases registered as operator_e2e_real.*
// (tests/CMakeLists.txt) run so: the others use the emulator's fault injection.
bool RealControlPlane() {
  const char* mode = std::getenv("ANTDT_E2E_CONTROL_PLANE");
  return mode != nullptr && std::string(mode) == "real";
}

// ANTDT_E2E_PLANE_DIR: the folder of a real control plane shared by the test
// processes of this binary (the ctest fixture operator_e2e_real.plane, which
// `antdt_control_plane.py start` runs); empty: each Cluster starts its own.
std::string SharedPlaneDir() {
  const char* dir = std::getenv("ANTDT_E2E_PLANE_DIR");
  return RealControlPlane() && dir != nullptr ? dir : "";
}

// What an authorizer decides on: a request's verb, group, resource,
// subresource, namespace and name.
struct RequestAttributes {
  std::string verb, api_group, resource, subresource, namespace_, name;
  // "group/resource[/subresource]", as a role's rule names it.
  std::string Resource() const {
    return api_group + "/" + resource + (subresource.empty() ? "" : "/" + subresource);
  }
};

// A request the API server served: who made it, its answer, and what the
// authorizer decided on (verb empty for a non-resource path).
struct ServedRequest {
  std::string user;
  int code = 0;
  RequestAttributes attributes;
};

// A request of the emulator's log (method, path, query) as RBAC sees it;
// nullopt for a non-resource path.
std::optional<RequestAttributes> EmulatorRequestAttributes(const Json& request) {
  std::vector<std::string> segs = absl::StrSplit(Str(request, {"path"}), '/', absl::SkipEmpty());
  if (segs.size() < 3 || (segs[0] != "api" && segs[0] != "apis")) return std::nullopt;
  const bool core = segs[0] == "api";
  RequestAttributes a;
  a.api_group = core ? "" : segs[1];
  std::vector<std::string> rest(segs.begin() + (core ? 2 : 3), segs.end());
  if (rest.size() >= 3 && rest[0] == "namespaces") {
    a.namespace_ = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
  }
  if (rest.empty()) return std::nullopt;
  a.resource = rest[0];
  if (rest.size() >= 2) a.name = rest[1];
  if (rest.size() >= 3) a.subresource = rest[2];
  const std::string method = Str(request, {"method"});
  const bool named = !a.name.empty();
  if (method == "GET") {
    const std::string query = "&" + Str(request, {"query"});
    const bool watch = query.find("&watch=true") != std::string::npos ||
                       query.find("&watch=1") != std::string::npos;
    a.verb = watch ? "watch" : named ? "get" : "list";
  } else if (method == "POST") {
    a.verb = "create";
  } else if (method == "PUT") {
    a.verb = "update";
  } else if (method == "PATCH") {
    a.verb = "patch";
  } else if (method == "DELETE") {
    a.verb = named ? "delete" : "deletecollection";
  }
  return a;
}

// kShared: on a shared real control plane, when there is one, the cluster is a
// namespace of its own whose pods only its own nodes run (PodNodeSelector), with
// operators that watch only that namespace. kOwn: a plane of its own, for cases
// that need the cluster-wide view (several namespaces, a chart's cluster roles).
enum class Plane { kShared, kOwn };

// One little cluster: emulator (or the real control plane), kubelet with its
// nodes and agents, operators.
class Cluster {
 public:
  // `rbac`: the emulator authorizes every request by RBAC; the test's own
  // token (the kubeconfig's) is the admin's.
  explicit Cluster(int nodes, bool rbac = false, Plane plane = Plane::kShared) : nodes_(nodes) {
    std::random_device rd;
    ip_base_ = absl::StrCat("127.", 20 + rd() % 200, ".", (rd() % 100) * 2);
    // The workers' MASTER_PORT: torch's store binds it on every address, so
    // each cluster draws its own (below the ephemeral range), as its IPs.
    master_port_ = 20000 + static_cast<int>(rd() % 10000);
    if (RealControlPlane() && plane == Plane::kShared && !SharedPlaneDir().empty()) {
      plane_dir_ = SharedPlaneDir();
      shared_plane_ = true;
      AttachSharedPlane(rd());
    } else if (RealControlPlane()) {
      plane_dir_ = dir_.File("cp");
      StartRealControlPlane();
    } else {
      StartEmulator(rbac);
    }
    auto cfg = kube::LoadKubeconfig(dir_.File("kubeconfig"));
    EXPECT_TRUE(cfg.ok()) << cfg.status();
    if (!cfg.ok()) return;
    kube::ClientOptions o;
    o.user_agent = "antdt-e2e-test";
    auto c = kube::Client::Create(*cfg, o);
    EXPECT_TRUE(c.ok()) << c.status();
    api_ = std::move(*c);
    fs::create_directories(dir_.File("speeds"));
    fs::create_directories(dir_.File("checkpoints"));
  }

  // The real control plane, its admin kubeconfig as the test's, and node
  // credentials (with a serving certificate for `kubectl logs`) for each node.
  void StartRealControlPlane() {
    const std::string harness = SourcePath("testing/control-plane/antdt_control_plane.py");
    plane_ = std::make_unique<Process>(
        std::vector<std::string>{"/usr/bin/python3", harness, "run", "--dir", dir_.File("cp"),
                                 "--ready-file", dir_.File("cp.ready")},
        dir_.File("control-plane.log"));
    const auto ready = WaitForReadyFile(dir_.File("cp.ready"), std::chrono::seconds(120));
    if (!ready) {
      ADD_FAILURE() << "the control plane did not start; see " << dir_.File("control-plane.log");
      return;
    }
    const Json info = Json::parse(*ready, nullptr, false);
    if (info.is_object()) k8s_bin_dir_ = info.value("bin_dir", "");
    std::cerr << "real control plane: kube-apiserver "
              << (info.is_object() ? info.value("version", "?") : "?") << ", ready in "
              << (info.is_object() ? info.value("start_seconds", 0.0) : 0.0) << " s\n";
    fs::copy_file(dir_.File("cp/admin.kubeconfig"), dir_.File("kubeconfig"),
                  fs::copy_options::overwrite_existing);
    MakeNodeCredentials();
  }

  // The shared plane: a namespace of this cluster's own (named after the test
  // case), the admin kubeconfig with it as the context's namespace, node names
  // of its own, and the namespace's pods pinned to those nodes.
  void AttachSharedPlane(unsigned draw) {
    std::ifstream in(plane_dir_ + "/ready.json");
    const Json info = Json::parse(in, nullptr, false);
    if (!info.is_object()) {
      ADD_FAILURE() << "no shared control plane in " << plane_dir_ << " (ready.json)";
      return;
    }
    k8s_bin_dir_ = info.value("bin_dir", "");
    const std::string tag = absl::StrCat(absl::Hex(draw % 0x10000, absl::kZeroPad4));
    const std::string name =
        absl::AsciiStrToLower(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ns_ = absl::StrCat("e2e-", name.substr(0, 48), "-", tag);
    node_prefix_ = absl::StrCat("c", tag, "-node-");
    std::ifstream admin(plane_dir_ + "/admin.kubeconfig");
    Json kubeconfig = Json::parse(admin, nullptr, false);
    ASSERT_TRUE(kubeconfig.is_object()) << plane_dir_ << "/admin.kubeconfig";
    for (Json& c : kubeconfig["contexts"]) c["context"]["namespace"] = ns_;
    std::ofstream(dir_.File("kubeconfig")) << kubeconfig.dump(2);
    const Json ns = {
        {"apiVersion", "v1"},
        {"kind", "Namespace"},
        {"metadata",
         {{"name", ns_},
          {"annotations",
           {{"scheduler.alpha.kubernetes.io/node-selector", "antdt.io/e2e-cluster=" + tag}}}}}};
    std::ofstream(dir_.File("namespace.json")) << ns.dump();
    int rc = 0;
    std::string out = Kubectl("create -f " + dir_.File("namespace.json"), &rc);
    ASSERT_EQ(rc, 0) << out;
    // Pods are admitted once the namespace's default ServiceAccount exists.
    ASSERT_TRUE(WaitFor(
        [&] {
          Kubectl("get serviceaccount default -o name", &rc);
          return rc == 0;
        },
        std::chrono::seconds(30)))
        << "no default ServiceAccount in " << ns_;
    node_labels_ = "antdt.io/e2e-cluster: \"" + tag + "\", ";
    std::cerr << "shared control plane " << info.value("server", "?") << ": namespace " << ns_
              << ", nodes " << node_prefix_ << "0..\n";
    MakeNodeCredentials();
  }

  // Node credentials (with a serving certificate for `kubectl logs`) per node.
  void MakeNodeCredentials() {
    const std::string harness = SourcePath("testing/control-plane/antdt_control_plane.py");
    const std::vector<std::string> base = absl::StrSplit(ip_base_, '.');
    int third = 0;
    EXPECT_TRUE(absl::SimpleAtoi(base[2], &third));
    for (int i = 0; i < nodes_; ++i) {
      // The node's host IP as the kubelet gives it (127.X.(Y+1).(i+1)).
      const std::string ip = absl::StrCat(base[0], ".", base[1], ".", third + 1, ".", i + 1);
      std::string out;
      const int rc =
          RunCommand(absl::StrCat("/usr/bin/python3 ", harness, " kubeconfig --dir ", plane_dir_,
                                  " --node ", NodeName(i), " --serving-ip ", ip),
                     &out);
      EXPECT_EQ(rc, 0) << out;
    }
  }

  void StartEmulator(bool rbac) {
    std::vector<std::string> emulator = {BinPath("antdt-kube-emulator"),
                                         "--listen",
                                         "127.0.0.1:0",
                                         "--ready-file",
                                         dir_.File("emulator.ready"),
                                         "--bookmark-interval",
                                         "1s",
                                         "--pod-logs-dir",
                                         dir_.File("kubelet/pods")};
    if (rbac) {
      // Over https: kubectl sends no bearer token to an http server.
      const std::string cmd =
          "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 "
          "-addext subjectAltName=IP:127.0.0.1 -keyout " +
          dir_.File("key.pem") + " -out " + dir_.File("cert.pem") + " >/dev/null 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << "openssl could not make a certificate";
      for (const std::string& a :
           {std::string("--token"), std::string("test-token"), std::string("--authorization-mode"),
            std::string("RBAC"), std::string("--tls-cert"), dir_.File("cert.pem"),
            std::string("--tls-key"), dir_.File("key.pem")}) {
        emulator.push_back(a);
      }
    }
    emulator_ = std::make_unique<Process>(emulator, dir_.File("emulator.log"));
    auto addr = WaitForReadyFile(dir_.File("emulator.ready"), std::chrono::seconds(20));
    if (!addr) {
      ADD_FAILURE() << "emulator did not start";
      return;
    }
    server_ = (rbac ? "https://" : "http://") + *addr;
    std::ofstream(dir_.File("kubeconfig"))
        << "apiVersion: v1\nkind: Config\ncurrent-context: emu\n"
        << "clusters:\n- name: emu\n  cluster:\n    server: " << server_ << "\n"
        << (rbac ? "    certificate-authority: " + dir_.File("cert.pem") + "\n" : "")
        << "contexts:\n- name: emu\n  context:\n    cluster: emu\n    user: test\n    namespace: "
           "default\n"
        << "users:\n- name: test\n  user:\n    token: test-token\n";
  }

  ~Cluster() {
    for (auto& [name, p] : operators_) Stop(p.get());
    Stop(kubelet_.get());
    Stop(emulator_.get());
    Stop(plane_.get());
    if (shared_plane_) {
      // On the shared plane the cases stay apart: every pod of this cluster's
      // namespace was bound to one of its own nodes. Then its namespace and
      // nodes go (the controllers delete what was in it meanwhile).
      auto pods = api_ ? api_->List(kube::PodsResource(), ns_, {}) : absl::StatusOr<Json>();
      EXPECT_TRUE(pods.ok()) << pods.status();
      for (const Json& p : pods.ok() ? (*pods)["items"] : Json::array()) {
        const std::string node = Str(p, {"spec", "nodeName"});
        EXPECT_TRUE(node.empty() || absl::StartsWith(node, node_prefix_))
            << Str(p, {"metadata", "name"}) << " ran on " << node << ", another cluster's node";
      }
      Kubectl("delete namespace " + ns_ + " --wait=false");
      std::string nodes;
      for (int i = 0; i < nodes_; ++i) absl::StrAppend(&nodes, " ", NodeName(i));
      Kubectl("delete nodes --wait=false" + nodes);
    }
  }

  static void Stop(Process* p) {
    if (p == nullptr || !p->Running()) return;
    p->Signal(SIGTERM);
    if (!p->Wait(std::chrono::seconds(15))) {
      p->Signal(SIGKILL);
      p->Wait(std::chrono::seconds(5));
    }
  }

  std::string Kubectl(const std::string& args, int* rc = nullptr) {
    std::string out;
    const int code = RunCommand(absl::StrCat("kubectl --kubeconfig ", dir_.File("kubeconfig"),
                                             " --cache-dir ", dir_.File("kube-cache"), " ", args),
                                &out);
    if (rc != nullptr) *rc = code;
    return out;
  }

  void ApplyCrd() {
    int rc = 0;
    std::string out = Kubectl("apply -f " + SourcePath("crds/antdt.io_antdtjobs.yaml"), &rc);
    ASSERT_EQ(rc, 0) << out;
    out = Kubectl("wait --for=condition=established --timeout=20s crd/antdtjobs.antdt.io", &rc);
    ASSERT_EQ(rc, 0) << out;
  }

  // Starts an operator replica; returns its Monitor address.
  std::string StartOperator(const std::string& name, const std::vector<std::string>& extra = {}) {
    const std::string ready = dir_.File(name + ".ready");
    fs::remove(ready);
    std::vector<std::string> argv{BinPath("antdt-operator"),
                                  "--kubeconfig",
                                  dir_.File("kubeconfig"),
                                  "--listen",
                                  "127.0.0.1:0",
                                  "--metrics-listen",
                                  "127.0.0.1:0",
                                  "--ready-file",
                                  ready,
                                  "--identity",
                                  name,
                                  "--leader-election-namespace",
                                  ns_,
                                  "--lease-duration",
                                  "4s",
                                  "--renew-deadline",
                                  "3s",
                                  "--retry-period",
                                  "500ms",
                                  "--monitor-window",
                                  "1s",
                                  "--master-port",
                                  std::to_string(master_port_)};
    if (shared_plane_) {
      argv.push_back("--namespace");
      argv.push_back(ns_);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    operators_[name] = std::make_unique<Process>(argv, dir_.File(name + ".log"));
    auto addr = WaitForReadyFile(ready, std::chrono::seconds(30));
    EXPECT_TRUE(addr.has_value()) << "operator " << name << " did not start";
    return addr.value_or("");
  }

  Process* Operator(const std::string& name) { return operators_[name].get(); }

  // Waits until `identity` holds the operators' Lease; the Lease as last seen.
  Json WaitForLeader(const std::string& identity) {
    Json lease;
    WaitFor(
        [&] {
          auto l = api_->Get(kube::LeasesResource(), ns_, "antdt-operator");
          if (l.ok()) lease = *l;
          return l.ok() && Str(*l, {"spec", "holderIdentity"}) == identity;
        },
        std::chrono::seconds(30));
    return lease;
  }

  // The CRD, op-a leading, op-b standing by, and the kubelet, whose agents
  // know both replicas, the standby's first: it refuses them until it leads,
  // so they stream to the leader.
  void StartTwoReplicas() {
    ASSERT_NO_FATAL_FAILURE(ApplyCrd());
    const std::string monitor_a = StartOperator("op-a");
    ASSERT_EQ(Str(WaitForLeader("op-a"), {"spec", "holderIdentity"}), "op-a");
    const std::string monitor_b = StartOperator("op-b");
    ASSERT_NO_FATAL_FAILURE(StartKubelet(monitor_b + "," + monitor_a));
  }
  std::string File(const std::string& name) const { return dir_.File(name); }
  // The replica's /metrics; over https trusting `ca` when given (TLS on).
  std::string OperatorMetrics(const std::string& name, const std::string& ca = "") {
    auto m = ReadyFileField(dir_.File(name + ".ready"), "metrics");
    if (!m) return "";
    if (ca.empty()) return HttpGet(*m, "/metrics").value_or("");
    web::http::client::http_client_config config;
    config.set_ssl_context_callback(
        [ca](boost::asio::ssl::context& ctx) { ctx.load_verify_file(ca); });
    try {
      web::http::client::http_client c("https://" + *m, config);
      return c.request(web::http::methods::GET, "/metrics").get().extract_string().get();
    } catch (const std::exception& e) {
      return std::string("https failed: ") + e.what();
    }
  }

  // The kubelet; with a `monitor`, its own agent per node streams there
  // (without, a DaemonSet runs the agents).
  void StartKubelet(const std::string& monitor, const std::string& agent_tls_dir = "") {
    std::ofstream nodes(dir_.File("nodes.yaml"));
    for (int i = 0; i < nodes_; ++i) {
      nodes << "- name: " << NodeName(i) << "\n  labels: {" << node_labels_ << "zone: z" << i % 2
            << "}\n";
      WriteSpeed(NodeName(i), 1.0);
    }
    nodes.close();
    std::vector<std::string> argv = {
        "/usr/bin/python3", SourcePath("testing/kubelet/antdt_test_kubelet.py"),
        "--kubeconfig",     dir_.File("kubeconfig"),
        "--nodes",          dir_.File("nodes.yaml"),
        "--bin-dir",        std::string(std::getenv("ANTDT_BIN_DIR")),
        "--work-dir",       dir_.File("kubelet"),
        "--ip-base",        ip_base_,
        "--speed-dir",      dir_.File("speeds"),
        "--image-root",     SourcePath("."),
        "--ready-file",     dir_.File("kubelet.ready")};
    if (RealControlPlane()) {
      for (const std::string& a :
           {std::string("--node-credentials"), plane_dir_, std::string("--scheduler"),
            std::string("none"), std::string("--node-leases"),
            std::string("--provision-volumes")}) {
        argv.push_back(a);
      }
    }
    if (shared_plane_) {
      argv.push_back("--namespace");
      argv.push_back(ns_);
    }
    if (!monitor.empty()) {
      argv.push_back("--agent-monitor");
      argv.push_back(monitor);
    }
    if (!agent_tls_dir.empty()) {
      argv.push_back("--agent-tls-dir");
      argv.push_back(agent_tls_dir);
    }
    if (cpu_quotas_) argv.push_back("--cpu-quota-cgroups");
    kubelet_ = std::make_unique<Process>(argv, dir_.File("kubelet.log"));
    ASSERT_TRUE(WaitForReadyFile(dir_.File("kubelet.ready"), std::chrono::seconds(30)))
        << "kubelet did not start";
  }

  // The CRD, operator op-a and the kubelet (whose agents report to op-a).
  void Start() {
    ASSERT_NO_FATAL_FAILURE(ApplyCrd());
    const std::string monitor = StartOperator("op-a");
    ASSERT_NO_FATAL_FAILURE(StartKubelet(monitor));
  }

  // A CA, the server certificate and one per node (scripts/make-certs.sh) in
  // DIR/tls; returns that folder.
  std::string MakeCerts() {
    std::string cmd = SourcePath("scripts/make-certs.sh") + " " + dir_.File("tls");
    for (int i = 0; i < nodes_; ++i) absl::StrAppend(&cmd, " ", NodeName(i));
    EXPECT_EQ(std::system((cmd + " >/dev/null").c_str()), 0) << cmd;
    return dir_.File("tls");
  }

  // Before StartKubelet: each node's containers in a cgroup of its own that
  // WriteCpuQuota caps (where the kubelet can make one; CpuQuotaStatus says).
  void UseCpuQuotas() { cpu_quotas_ = true; }
  // Caps `node` to 1/factor of one core (1: uncapped).
  void WriteCpuQuota(const std::string& node, double factor) {
    WriteSpeedDir(node + ".cpu-quota", factor);
  }
  // "cgroup ROOT vN", or "emulated: WHY" where the kubelet could make no cgroup.
  std::string CpuQuotaStatus() {
    std::ifstream in(dir_.File("speeds/cpu-quota.status"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  void WriteSpeed(const std::string& node, double speed) { WriteSpeedDir(node + ".speed", speed); }

  // An example as a user applies it, its checkpoint path (shared storage) in
  // the test's directory.
  Json Example(const std::string& file) {
    Json job = kube::YamlToJson(YAML::LoadFile(SourcePath(file)));
    job["metadata"]["namespace"] = ns_;
    job["spec"]["checkpoint"]["path"] = dir_.File("checkpoints/" + Str(job, {"metadata", "name"}));
    MountCheckpointVolume(job);
    return job;
  }

  // The checkpoint path as a volume of the workers' template (a hostPath
  // here; an NFS or other shared claim on a cluster): the operator mounts the
  // same volume into the sharding service's pod, whose state then outlives
  // the pod. Without it that state is in the pod (an emptyDir).
  static void MountCheckpointVolume(Json& job) {
    const std::string path = Str(job, {"spec", "checkpoint", "path"});
    Json& pod = job["spec"]["workers"]["template"]["spec"];
    pod["volumes"].push_back(
        {{"name", "checkpoint"}, {"hostPath", {{"path", path}, {"type", "DirectoryOrCreate"}}}});
    pod["containers"][0]["volumeMounts"].push_back({{"name", "checkpoint"}, {"mountPath", path}});
  }

  // The quickstart job, smaller; `shared_volume`: its checkpoint path mounted
  // as a volume (MountCheckpointVolume; not where Pod Security forbids hostPath).
  Json ExampleJob(const std::string& name, int64_t records, int workers,
                  bool shared_volume = true) {
    Json job = kube::YamlToJson(YAML::LoadFile(SourcePath("examples/k8s/quickstart.yaml")));
    job["metadata"]["name"] = name;
    job["metadata"]["namespace"] = ns_;
    job["spec"]["dataset"]["records"] = records;
    job["spec"]["dataset"]["shardSize"] = 100;
    job["spec"]["dataset"]["epochs"] = 1;
    job["spec"]["workers"]["replicas"] = workers;
    job["spec"]["checkpoint"]["path"] = dir_.File("checkpoints/" + name);
    if (shared_volume) MountCheckpointVolume(job);
    return job;
  }

  void ApplyJob(const Json& job) {
    const std::string file = dir_.File(Str(job, {"metadata", "name"}) + ".json");
    std::ofstream(file) << job.dump(2);
    int rc = 0;
    const std::string out = Kubectl("apply -f " + file, &rc);
    ASSERT_EQ(rc, 0) << out;
  }

  // Applies the smaller quickstart job and waits until it runs and has
  // committed records; the job as then seen.
  Json ApplyRunningJob(const std::string& name, int64_t records, int workers) {
    ApplyJob(ExampleJob(name, records, workers));
    return WaitJob(
        name,
        [](const Json& j) {
          return Condition(j, "Running") == "True" &&
                 j["status"]["progress"].value("recordsCommitted", int64_t{0}) > 0;
        },
        std::chrono::seconds(120));
  }

  // The job, without its managed fields and kubectl's copy of the applied
  // spec: no test reads them, and a failure
  // message that dumps the job stays short enough to show its status.
  Json GetJob(const std::string& name, const std::string& ns = "") {
    auto j = api_->Get(kube::AntDTJobsResource(), ns.empty() ? ns_ : ns, name);
    if (!j.ok()) return Json();
    if (j->contains("metadata")) {
      Json& meta = (*j)["metadata"];
      meta.erase("managedFields");
      if (meta.contains("annotations")) {
        meta["annotations"].erase("kubectl.kubernetes.io/last-applied-configuration");
      }
    }
    return *j;
  }

  // Polls the job until `pred`; the last object seen.
  Json WaitJob(const std::string& name, const std::function<bool(const Json&)>& pred,
               std::chrono::seconds timeout, const std::string& ns = "") {
    Json last;
    WaitFor(
        [&] {
          last = GetJob(name, ns);
          return !last.is_null() && pred(last);
        },
        timeout);
    return last;
  }

  // The pod `name` in the cluster's namespace, or null.
  Json Pod(const std::string& name) {
    auto p = api_->Get(kube::PodsResource(), ns_, name);
    return p.ok() ? *p : Json();
  }

  std::vector<Json> Pods(const std::string& job) {
    kube::ListOptions o;
    o.label_selector = "antdt.io/job=" + job;
    auto l = api_->List(kube::PodsResource(), ns_, o);
    return l.ok() ? (*l)["items"].get<std::vector<Json>>() : std::vector<Json>{};
  }

  std::vector<Json> Events() {
    auto l = api_->List(kube::EventsResource(), ns_, {});
    return l.ok() ? (*l)["items"].get<std::vector<Json>>() : std::vector<Json>{};
  }

  // Whether an Event with `reason` is (or, within 10 s, comes) in the cluster's
  // namespace: the operator writes a job's Events after the status change they
  // follow, so a test that saw the status may be a moment ahead of them.
  bool WaitForEvent(const std::string& reason) {
    return WaitFor(
        [&] {
          const std::vector<Json> events = Events();
          return std::any_of(events.begin(), events.end(),
                             [&](const Json& e) { return e.value("reason", "") == reason; });
        },
        std::chrono::seconds(10));
  }

  void Fault(const Json& body) {
    web::http::client::http_client c(server_, ClientConfig());
    auto r =
        c.request(web::http::methods::POST, "/emulator/v1/faults", body.dump(), "application/json")
            .get();
    ASSERT_EQ(r.status_code(), 200) << body.dump();
  }

  // The emulator's control endpoint over its own CA when it serves https.
  web::http::client::http_client_config ClientConfig() const {
    web::http::client::http_client_config config;
    if (absl::StartsWith(server_, "https://")) {
      const std::string ca = dir_.File("cert.pem");
      config.set_ssl_context_callback(
          [ca](boost::asio::ssl::context& ctx) { ctx.load_verify_file(ca); });
    }
    return config;
  }

  // The emulator's own log of the requests it served (method, path, query,
  // user, userAgent, code).
  Json EmulatorRequests() {
    web::http::client::http_client c(server_, ClientConfig());
    auto r = c.request(web::http::methods::GET, "/emulator/v1/requests").get();
    return Json::parse(r.extract_string().get());
  }

  // The requests the API server served, as its authorizer saw them: the real
  // API server's audit log (testing/control-plane: the verb and objectRef it
  // decided on), or the emulator's log, parsed.
  std::vector<ServedRequest> Requests() {
    std::vector<ServedRequest> out;
    if (!RealControlPlane()) {
      for (const Json& r : EmulatorRequests()) {
        ServedRequest& served = out.emplace_back();
        served.user = Str(r, {"user"});
        served.code = r.value("code", 0);
        served.attributes = EmulatorRequestAttributes(r).value_or(RequestAttributes{});
      }
      return out;
    }
    std::ifstream in(plane_dir_ + "/audit.log");
    for (std::string line; std::getline(in, line);) {
      const Json e = Json::parse(line, nullptr, false);
      if (!e.is_object()) continue;
      // A watch is audited when it starts (and again when it ends).
      const bool watch = e.value("verb", "") == "watch";
      if (e.value("stage", "") != (watch ? "ResponseStarted" : "ResponseComplete")) continue;
      ServedRequest& served = out.emplace_back();
      served.user = Str(e, {"user", "username"});
      served.code = e.contains("responseStatus") ? e["responseStatus"].value("code", 0) : 0;
      if (!e.contains("objectRef")) continue;  // a non-resource path (/readyz, /version)
      const Json& ref = e["objectRef"];
      served.attributes = {e.value("verb", ""),        ref.value("apiGroup", ""),
                           ref.value("resource", ""),  ref.value("subresource", ""),
                           ref.value("namespace", ""), ref.value("name", "")};
    }
    return out;
  }

  // A binary of the real control plane's build (helm, kubectl), when RealControlPlane().
  std::string K8sBin(const std::string& name) const { return k8s_bin_dir_ + "/" + name; }

  // The job's own folder under its checkpoint.path: named by its UID (the
  // live job's; once deleted, the only one there).
  std::string StateDir(const std::string& job, const std::string& uid = "") {
    const std::string base = dir_.File("checkpoints/" + job);
    std::string id = uid.empty() ? Str(GetJob(job), {"metadata", "uid"}) : uid;
    if (id.empty() && fs::exists(base)) {
      for (const auto& e : fs::directory_iterator(base)) id = e.path().filename().string();
    }
    return base + "/" + id;
  }

  demo::Verification Verify(const std::string& job, int64_t records, const std::string& uid = "") {
    std::vector<std::string> journals;
    const std::string dir = StateDir(job, uid) + "/journals";
    if (fs::exists(dir)) {
      for (const auto& e : fs::directory_iterator(dir)) journals.push_back(e.path().string());
    }
    auto v = demo::VerifyJournals(journals, records, 1);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : demo::Verification{};
  }

  std::vector<Json> Services(const std::string& job) {
    kube::ListOptions o;
    o.label_selector = "antdt.io/job=" + job;
    auto l = api_->List(kube::ServicesResource(), ns_, o);
    return l.ok() ? (*l)["items"].get<std::vector<Json>>() : std::vector<Json>{};
  }

  // The directory the kubelet runs `pod`'s container in (its cwd).
  std::string Sandbox(const Json& pod) {
    return dir_.File(absl::StrCat("kubelet/pods/", ns_, "_", Str(pod, {"metadata", "name"}), "_",
                                  Str(pod, {"metadata", "uid"})));
  }

  // The argv and environment the kubelet started `pod` with (its sandbox's
  // cmdline.json), after $(VAR) expansion and cluster DNS.
  Json Cmdline(const Json& pod) {
    std::ifstream in(Sandbox(pod) + "/cmdline.json");
    return in ? Json::parse(in, nullptr, false) : Json();
  }

  // What `pod`'s container wrote to stdout and stderr.
  std::string PodLog(const Json& pod) {
    std::ifstream in(Sandbox(pod) + "/log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Each line of every pod log of this cluster that is not a structured event
  // (a process's last word before a non-zero exit: "antdt-trainer-worker:
  // commit: ..."), after the pod's sandbox name: what a failure message shows.
  std::string UnstructuredPodLogLines() {
    std::string out;
    std::error_code ec;
    for (const auto& sandbox : std::filesystem::directory_iterator(dir_.File("kubelet/pods"), ec)) {
      std::ifstream in(sandbox.path() / "log");
      for (std::string line; std::getline(in, line);) {
        if (!line.empty() && !absl::StartsWith(line, "ts=")) {
          absl::StrAppend(&out, sandbox.path().filename().string(), ": ", line, "\n");
        }
      }
    }
    return out;
  }

  // What a failure message shows when a job did not get where a test waited
  // for it, most telling first and short enough to survive a CI log's cut: the
  // job's status (not its managed fields), every pod, the kubelet's last lines,
  // the pods' last words and the last lines of each operator pod's log.
  std::string Diagnosis(const std::string& job) {
    const Json j = GetJob(job);
    std::string out =
        absl::StrCat("status of ", job, ": ", j.is_null() ? "(no such job)" : j["status"].dump(),
                     "\n", Kubectl("get pods -A -o wide"));
    const auto tail = [&out](const std::string& path, size_t lines) {
      std::ifstream in(path);
      std::deque<std::string> last;
      for (std::string line; std::getline(in, line);) {
        last.push_back(std::move(line));
        if (last.size() > lines) last.pop_front();
      }
      absl::StrAppend(&out, "-- last lines of ", path, ":\n");
      for (const std::string& l : last) absl::StrAppend(&out, l, "\n");
    };
    tail(dir_.File("kubelet.log"), 15);
    absl::StrAppend(&out, UnstructuredPodLogLines());
    std::error_code ec;
    for (const auto& sandbox : std::filesystem::directory_iterator(dir_.File("kubelet/pods"), ec)) {
      if (absl::StrContains(sandbox.path().filename().string(), "antdt-operator")) {
        tail((sandbox.path() / "log").string(), 10);
      }
    }
    return out;
  }

  // The pid of the process the kubelet started as the pod named `pod`'s
  // container (its event=container_started line), or 0 before it started.
  int ContainerPid(const std::string& pod) {
    std::ifstream in(dir_.File("kubelet.log"));
    const std::string key = "event=container_started pod=" + ns_ + "/" + pod + " pid=";
    int pid = 0;
    for (std::string line; std::getline(in, line);) {
      const size_t at = line.find(key);
      if (at != std::string::npos) pid = std::atoi(line.c_str() + at + key.size());
    }
    return pid;
  }

  kube::Api* api() { return api_.get(); }
  const std::string& dir() const { return dir_.path(); }
  int master_port() const { return master_port_; }
  // The namespace the cluster's jobs run in ("default" unless on a shared plane).
  const std::string& ns() const { return ns_; }
  // Node `i`'s name: node-I, or with the cluster's prefix on a shared plane.
  std::string NodeName(int i) const { return absl::StrCat(node_prefix_, i); }

 private:
  // A file of the kubelet's speed dir, replaced whole (the kubelet re-reads it).
  void WriteSpeedDir(const std::string& name, double value) {
    const absl::Status s =
        WriteFileAtomically(dir_.File("speeds/" + name), absl::StrCat(value, "\n"));
    EXPECT_TRUE(s.ok()) << name << ": " << s;
  }

  TempDir dir_;
  int nodes_;
  std::string ip_base_;
  int master_port_ = 0;
  std::string server_;
  std::unique_ptr<Process> emulator_;
  std::unique_ptr<Process> kubelet_;
  std::unique_ptr<Process> plane_;  // the real control plane's harness, when RealControlPlane()
  std::string k8s_bin_dir_;
  std::string plane_dir_;      // the real control plane's folder (its own or the shared one)
  bool shared_plane_ = false;  // a namespace and nodes of its own on the shared plane
  std::string ns_ = "default";
  std::string node_prefix_ = "node-";
  std::string node_labels_;  // extra labels of its nodes (YAML flow entries)
  bool cpu_quotas_ = false;  // the kubelet's --cpu-quota-cgroups
  std::map<std::string, std::unique_ptr<Process>> operators_;
  std::unique_ptr<kube::Client> api_;
};

// antdt-nd with a 4 s cool-down, restarts that save 0.2x their cost, and
// The AntDTJob's status.stragglers entry of `worker` and the Monitor's
// antdt_monitor_straggler_info of it on the leader's /metrics render one
// record: the same node, class (the per-sample class while compensated),
// compensated flag and cause, by name. Status and metrics are read a moment
// apart, so they are compared until they agree on a class (a transient
// straggler turns persistent as windows close), within 10 s.
template <typename Cluster>
void ExpectStatusAgreesWithMetrics(Cluster& cluster, const std::string& name,
                                   const std::string& worker) {
  std::string status_view, metrics_view;
  const bool agreed = WaitFor(
      [&] {
        const Json job = cluster.GetJob(name);
        status_view.clear();
        for (const Json& s : job["status"]["stragglers"]) {
          if (s.value("worker", "") != worker) continue;
          // The status spells a class the Kubernetes way ("Persistent").
          status_view =
              absl::StrCat("node=\"", s.value("node", ""), "\" class=\"",
                           absl::AsciiStrToLower(s.value("class", "")), "\" compensated=\"",
                           s.value("compensated", false) ? "true" : "false", "\" cause=\"",
                           s.value("cause", ""), "\"");
        }
        const std::vector<std::string> lines =
            SeriesLines(cluster.OperatorMetrics("op-a"), "antdt_monitor_straggler_info",
                        {"job=\"" + name + "\"", "worker=\"" + worker + "\""});
        metrics_view = lines.empty() ? "" : lines[0];
        if (status_view.empty() || metrics_view.empty()) return false;
        auto label = [&](const std::string& key) {
          const size_t at = metrics_view.find("," + key + "=\"");
          const size_t from = at == std::string::npos ? metrics_view.find("{" + key + "=\"") : at;
          if (from == std::string::npos) return std::string();
          const size_t start = metrics_view.find('"', from) + 1;
          return metrics_view.substr(start, metrics_view.find('"', start) - start);
        };
        const bool compensated = label("compensated") == "true";
        const std::string cls = compensated ? label("speed_class") : label("class");
        return status_view == absl::StrCat("node=\"", label("node"), "\" class=\"", cls,
                                           "\" compensated=\"", label("compensated"), "\" cause=\"",
                                           label("cause"), "\"");
      },
      std::chrono::seconds(10));
  EXPECT_TRUE(agreed) << "status: " << status_view << "\nmetrics: " << metrics_view;
  // The speed only was changed (no real cause on its node): nothing measured.
  EXPECT_NE(status_view.find("cause=\"unknown\""), std::string::npos) << status_view;
}

// 1 s Monitor windows: a short test job sees its stragglers acted on.
void UseNdPolicyWithShortWindows(Json& spec) {
  spec["spec"]["stragglerPolicy"] = {
      {"name", "antdt-nd"}, {"cooldown", "4s"}, {"minSavingRatio", 0.2}};
  spec["spec"]["monitor"] = {{"window", "1s"}};
}

bool Finished(const Json& job) {
  return Condition(job, "Succeeded") == "True" || Condition(job, "Failed") == "True";
}

// Waits for the job `name` to finish: it succeeded, and its workers' own
// journals show every one of its `records` trained on once.
void ExpectSucceededExactlyOnce(Cluster& cluster, const std::string& name, int64_t records,
                                Json* job) {
  *job = cluster.WaitJob(name, Finished, std::chrono::seconds(300));
  ASSERT_EQ(Condition(*job, "Succeeded"), "True") << job->dump(2);
  EXPECT_EQ((*job)["status"]["progress"].value("recordsCommitted", int64_t{0}), records);
  const demo::Verification v = cluster.Verify(name, records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
}

// Worker pods of a job that are not terminating, by worker id.
std::map<std::string, int> LiveWorkerPods(const std::vector<Json>& pods) {
  std::map<std::string, int> live;
  for (const Json& p : pods) {
    if (Str(p, {"metadata", "labels", "antdt.io/role"}) != "worker") continue;
    if (p["metadata"].contains("deletionTimestamp")) continue;
    const std::string phase = Str(p, {"status", "phase"});
    if (phase == "Succeeded" || phase == "Failed") continue;
    ++live[Str(p, {"metadata", "labels", "antdt.io/worker-id"})];
  }
  return live;
}

TEST(OperatorE2E, JobGoesCreatedRunningSucceededExactlyOnce) {
  Cluster cluster(5);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string monitor = cluster.StartOperator("op-a");
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  const int64_t records = 6000;
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("train", records, 3)));

  // Conditions in order, as a user polling `kubectl get adt` sees them.
  std::vector<std::string> seen;
  Json job = cluster.WaitJob(
      "train",
      [&](const Json& j) {
        for (const char* type : {"Created", "Running", "Succeeded"}) {
          if (Condition(j, type) == "True" &&
              std::find(seen.begin(), seen.end(), type) == seen.end()) {
            seen.push_back(type);
          }
        }
        return Finished(j);
      },
      std::chrono::seconds(240));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_EQ(seen.front(), "Created");
  EXPECT_NE(std::find(seen.begin(), seen.end(), "Running"), seen.end()) << absl::StrJoin(seen, ",");
  EXPECT_EQ(seen.back(), "Succeeded");
  EXPECT_EQ(job["status"].value("observedGeneration", 0), job["metadata"].value("generation", -1));
  EXPECT_EQ(job["status"]["progress"].value("percent", 0), 100);
  EXPECT_EQ(job["status"]["progress"].value("recordsCommitted", int64_t{0}), records);

  const demo::Verification v = cluster.Verify("train", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();

  // Every pod the operator made is owned by the job.
  for (const Json& p : cluster.Pods("train")) {
    ASSERT_TRUE(p["metadata"].contains("ownerReferences")) << p.dump();
    EXPECT_EQ(p["metadata"]["ownerReferences"][0].value("uid", ""), Str(job, {"metadata", "uid"}));
  }
  // `kubectl logs train-worker-0`, as Kubeflow users type it: the worker's
  // stable pod name finds its (current) pod's output.
  for (const Json& p : cluster.Pods("train")) {
    if (Str(p, {"metadata", "name"}) != "train-worker-0") continue;
    int rc = 0;
    const std::string logs = cluster.Kubectl("logs train-worker-0", &rc);
    EXPECT_EQ(rc, 0) << logs;
    const std::string expected = cluster.PodLog(p);
    EXPECT_FALSE(expected.empty());
    EXPECT_EQ(logs, expected);
    const std::string last = cluster.Kubectl("logs train-worker-0 --tail=1", &rc);
    EXPECT_EQ(rc, 0) << last;
    EXPECT_EQ(std::count(last.begin(), last.end(), '\n'), 1) << last;
    EXPECT_TRUE(absl::EndsWith(expected, last)) << last;
  }
  // `kubectl get adt` shows the printer columns.
  const std::string table = cluster.Kubectl("get adt");
  EXPECT_NE(table.find("READY"), std::string::npos) << table;
  EXPECT_NE(table.find("WORKERS"), std::string::npos) << table;
  EXPECT_NE(table.find("STATE"), std::string::npos) << table;
  EXPECT_NE(table.find("Succeeded"), std::string::npos) << table;
  EXPECT_EQ(Str(job, {"status", "state"}), "Succeeded");
  EXPECT_NE(table.find("train"), std::string::npos) << table;
  // Reconcile metrics are exposed.
  const std::string metrics = cluster.OperatorMetrics("op-a");
  EXPECT_NE(metrics.find("controller_runtime_reconcile_total"), std::string::npos);
  EXPECT_NE(metrics.find("leader_election_master_status{name=\"antdt-operator\"} 1"),
            std::string::npos);

  // Delete it and apply it again: a new job (a new UID) under the old name
  // trains every record again, in a folder of its own; the first run's state
  // is left as it was.
  const std::string first_uid = Str(job, {"metadata", "uid"});
  const std::string first_dir = cluster.StateDir("train", first_uid);
  cluster.Kubectl("delete adt train");
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob("train").is_null(); }, std::chrono::seconds(30)));
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("train", records, 3)));
  job = cluster.WaitJob(
      "train", [&](const Json& j) { return Finished(j); }, std::chrono::seconds(240));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  const std::string second_uid = Str(job, {"metadata", "uid"});
  ASSERT_NE(second_uid, first_uid);
  EXPECT_EQ(job["status"]["progress"].value("recordsCommitted", int64_t{0}), records);
  const demo::Verification again = cluster.Verify("train", records, second_uid);
  EXPECT_TRUE(again.exactly_once()) << again.Summary();
  EXPECT_TRUE(cluster.Verify("train", records, first_uid).exactly_once()) << first_dir;
  const std::string events = cluster.Kubectl("get events -o json");
  EXPECT_NE(events.find("this job's state under " + cluster.StateDir("train", second_uid)),
            std::string::npos)
      << events;
}

// Least privilege, the other way round: each rule of the roles bound to
// `user` in the rendered chart, removed alone, refuses at least one of the
// requests `user` made (replayed through the API server's RBAC rules), so a
// run without it would have failed. Returns the rules that refuse nothing.

// With one permission taken from the operator's role (create pods), a new
// job's pods are refused, and the operator says which permission it lacks
// where a user looks: a FailedCreate Warning Event on the job carrying the
// API server's 403, and one api_forbidden line in its log (`kubectl logs`).
// Each rule of the operator's roles taken away alone, decided by the real RBAC
// authorizer: a ServiceAccount of its own (antdt-system/rbac-probe-N) bound to
// copies of the chart's roles with that one rule left out, and a
// SubjectAccessReview for every request the operator's ServiceAccount was
// granted this run. A rule whose removal refuses none of them is needless. Probe
// 0 leaves nothing out and must be allowed everything (the copies are faithful).
std::vector<std::string> RulesTheRealAuthorizerFindsNeedless(
    Cluster& cluster, const std::string& rendered, const std::vector<ServedRequest>& requests) {
  const std::string operator_user = "system:serviceaccount:antdt-system:antdt-operator";
  std::vector<Json> roles, bindings;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(rendered)) {
    const Json o = kube::YamlToJson(doc);
    const std::string kind = o.is_object() ? Str(o, {"kind"}) : "";
    if (kind == "Role" || kind == "ClusterRole") roles.push_back(o);
    if (kind != "RoleBinding" && kind != "ClusterRoleBinding") continue;
    for (const Json& subject : o.value("subjects", Json::array())) {
      if (subject.value("name", "") == "antdt-operator") bindings.push_back(o);
    }
  }
  std::set<std::string> seen;
  std::vector<Json> reviews;  // resourceAttributes of every distinct granted request
  for (const ServedRequest& r : requests) {
    if (r.user != operator_user || r.code == 403) continue;
    const RequestAttributes& a = r.attributes;
    if (a.verb.empty()) continue;
    const Json attrs = {{"verb", a.verb},
                        {"group", a.api_group},
                        {"resource", a.resource},
                        {"subresource", a.subresource},
                        {"namespace", a.namespace_},
                        {"name", a.name}};
    if (seen.insert(attrs.dump()).second) reviews.push_back(attrs);
  }
  EXPECT_FALSE(reviews.empty()) << "no audited request of " << operator_user;
  const kube::ResourceRef sar{"authorization.k8s.io", "v1", "subjectaccessreviews",
                              "SubjectAccessReview", false};
  const auto refused = [&](const std::string& sa) {
    size_t n = 0;
    for (const Json& attrs : reviews) {
      const Json review = {{"apiVersion", "authorization.k8s.io/v1"},
                           {"kind", "SubjectAccessReview"},
                           {"spec",
                            {{"user", "system:serviceaccount:antdt-system:" + sa},
                             {"groups",
                              {"system:serviceaccounts", "system:serviceaccounts:antdt-system",
                               "system:authenticated"}},
                             {"resourceAttributes", attrs}}}};
      auto got = cluster.api()->Create(sar, "", review);
      EXPECT_TRUE(got.ok()) << got.status();
      if (got.ok() && !(*got)["status"].value("allowed", false)) ++n;
    }
    return n;
  };
  // The probe's copies: every role (one rule left out of roles[leave_role]) and
  // every binding of the operator, bound to the probe's ServiceAccount.
  const auto make_probe = [&](const std::string& sa, size_t leave_role, size_t leave_rule) {
    const std::string suffix = "-" + sa;
    std::string out;
    int rc = 0;
    out = cluster.Kubectl("-n antdt-system create serviceaccount " + sa, &rc);
    EXPECT_EQ(rc, 0) << out;
    Json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", Json::array()}};
    for (size_t i = 0; i < roles.size(); ++i) {
      Json copy = roles[i];
      copy["metadata"] = {{"name", Str(roles[i], {"metadata", "name"}) + suffix}};
      if (roles[i]["metadata"].contains("namespace")) {
        copy["metadata"]["namespace"] = roles[i]["metadata"]["namespace"];
      }
      if (i == leave_role) copy["rules"].erase(leave_rule);
      list["items"].push_back(copy);
    }
    for (const Json& b : bindings) {
      Json copy = b;
      copy["metadata"] = {{"name", Str(b, {"metadata", "name"}) + suffix}};
      if (b["metadata"].contains("namespace"))
        copy["metadata"]["namespace"] = b["metadata"]["namespace"];
      copy["roleRef"]["name"] = Str(b, {"roleRef", "name"}) + suffix;
      copy["subjects"] =
          Json::array({{{"kind", "ServiceAccount"}, {"name", sa}, {"namespace", "antdt-system"}}});
      list["items"].push_back(copy);
    }
    std::ofstream(cluster.dir() + "/" + sa + ".json") << list.dump();
    out = cluster.Kubectl("apply -f " + cluster.dir() + "/" + sa + ".json", &rc);
    EXPECT_EQ(rc, 0) << out;
    // The authorizer's caches catch up within moments: the same answer twice running.
    size_t last = reviews.size() + 1, now = refused(sa);
    for (int i = 0; i < 50 && now != last; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      last = now;
      now = refused(sa);
    }
    return now;
  };
  std::vector<std::string> needless;
  const size_t baseline = make_probe("rbac-probe-0", roles.size(), 0);
  EXPECT_EQ(baseline, 0u) << "the copies of the roles do not grant what the operator was granted";
  int probe = 1;
  for (size_t r = 0; r < roles.size(); ++r) {
    for (size_t i = 0; i < roles[r]["rules"].size(); ++i) {
      if (make_probe("rbac-probe-" + std::to_string(probe++), r, i) == 0) {
        needless.push_back(Str(roles[r], {"metadata", "name"}) + " " + roles[r]["rules"][i].dump());
      }
    }
  }
  std::cout << "real authorizer: " << reviews.size() << " distinct requests reviewed for each of "
            << probe - 1 << " rules taken away\n";
  return needless;
}

// helm upgrade changes the operator's Deployment and it rolls out; helm
// uninstall removes what the release made (the CRD stays, as Helm keeps crds/).
// The ClusterRole was edited by hand (kubectl apply, taking `create pods` away):
// Helm 4's server-side apply refuses to take its rules back without
// --force-conflicts, and then restores them.
void ExpectHelmUpgradeAndUninstall(Cluster& cluster, const std::string& helm,
                                   const std::string& chart, const std::string& sets) {
  std::string out;
  const std::string upgrade = helm + "upgrade antdt " + chart + " --namespace antdt-system" + sets +
                              " --set operator.monitorWindow=2s";
  ASSERT_NE(RunCommand(upgrade + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("conflict with \"kubectl-client-side-apply\""), std::string::npos) << out;
  EXPECT_NE(out.find("antdt-operator-jobs"), std::string::npos) << out;
  ASSERT_EQ(RunCommand(upgrade + " --force-conflicts 2>&1", &out), 0) << out;
  int rc = 0;
  out = cluster.Kubectl("get clusterrole antdt-operator-jobs -o json", &rc);
  ASSERT_EQ(rc, 0) << out;
  bool creates_pods = false;
  const Json role = Json::parse(out);
  for (const Json& rule : role["rules"]) {
    if (rule["resources"] == Json::array({"pods"})) {
      for (const Json& v : rule["verbs"]) creates_pods = creates_pods || v == "create";
    }
  }
  EXPECT_TRUE(creates_pods) << "the upgrade did not restore create pods: " << out;
  out = cluster.Kubectl("-n antdt-system get deployment antdt-operator -o json", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("--monitor-window=2s"), std::string::npos) << out;
  out = cluster.Kubectl("-n antdt-system rollout status deployment/antdt-operator --timeout=120s",
                        &rc);
  EXPECT_EQ(rc, 0) << out << cluster.Kubectl("get pods -A -o wide");
  ASSERT_EQ(RunCommand(helm + "history antdt --namespace antdt-system 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("Upgrade complete"), std::string::npos) << out;
  ASSERT_EQ(RunCommand(helm + "uninstall antdt --namespace antdt-system --wait 2>&1", &out), 0)
      << out;
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string left = cluster.Kubectl(
            "get deployment,daemonset,serviceaccount -A -l app.kubernetes.io/instance=antdt -o "
            "name");
        return left.empty();
      },
      std::chrono::seconds(60)))
      << cluster.Kubectl("get all -A -l app.kubernetes.io/instance=antdt");
  out = cluster.Kubectl("get clusterroles -l app.kubernetes.io/instance=antdt -o name", &rc);
  EXPECT_EQ(out, "") << out;
  out = cluster.Kubectl("get crd antdtjobs.antdt.io -o name", &rc);
  EXPECT_EQ(rc, 0) << out;
}

void ExpectAMissingPermissionIsReported(Cluster& cluster, const std::string& rendered) {
  Json role;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(rendered)) {
    const Json o = kube::YamlToJson(doc);
    if (o.is_object() && Str(o, {"metadata", "name"}) == "antdt-operator-jobs" &&
        Str(o, {"kind"}) == "ClusterRole") {
      role = o;
    }
  }
  ASSERT_TRUE(role.is_object()) << "no ClusterRole antdt-operator-jobs in " << rendered;
  bool removed = false;
  for (Json& rule : role["rules"]) {
    if (rule["resources"] != Json::array({"pods"})) continue;
    Json verbs = Json::array();
    for (const Json& v : rule["verbs"]) {
      if (v != "create") verbs.push_back(v);
    }
    removed = verbs.size() < rule["verbs"].size();
    rule["verbs"] = verbs;
  }
  ASSERT_TRUE(removed) << role.dump();
  std::ofstream(cluster.dir() + "/role.json") << role.dump();
  int rc = 0;
  std::string out = cluster.Kubectl("apply -f " + cluster.dir() + "/role.json", &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("refused", 800, 2, false)));
  std::string message;
  WaitFor(
      [&] {
        for (const Json& e : cluster.Events()) {
          if (e.value("reason", "") == "FailedCreate" &&
              Str(e, {"involvedObject", "name"}) == "refused") {
            message = e.value("message", "");
          }
        }
        return !message.empty();
      },
      std::chrono::seconds(60));
  EXPECT_NE(message.find("cannot create resource \"pods\""), std::string::npos)
      << "FailedCreate: " << message << cluster.Kubectl("get events");
  EXPECT_NE(message.find("system:serviceaccount:antdt-system:antdt-operator"), std::string::npos)
      << message;
  out = cluster.Kubectl("-n antdt-system logs -l app.kubernetes.io/component=operator --tail=-1",
                        &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("api_forbidden verb=create resource=pods"), std::string::npos) << out;
}

// The node the running worker `worker` of `job` is on, once there is one.
std::string RunningWorkerNode(Cluster& cluster, const std::string& job, const std::string& worker) {
  for (const Json& p : cluster.Pods(job)) {
    if (Str(p, {"metadata", "labels", "antdt.io/worker-id"}) == worker &&
        Str(p, {"status", "phase"}) == "Running") {
      return Str(p, {"spec", "nodeName"});
    }
  }
  return "";
}

// The effect of `node`'s taint antdt.io/slow-node (empty: none).
std::string SlowNodeTaint(Cluster& cluster, const std::string& node) {
  auto n = cluster.api()->Get(kube::NodesResource(), "", node);
  if (!n.ok()) return "";
  for (const Json& t : kube::At(*n, {"spec", "taints"})) {
    if (t.value("key", "") == "antdt.io/slow-node") return t.value("effect", "");
  }
  return "";
}

// `node`'s condition AntDTSlowNode as the API server holds it (empty: none).
Json SlowNodeCondition(Cluster& cluster, const std::string& node) {
  auto n = cluster.api()->Get(kube::NodesResource(), "", node);
  if (!n.ok()) return Json::object();
  for (const Json& c : kube::At(*n, {"status", "conditions"})) {
    if (c.value("type", "") == "AntDTSlowNode") return c;
  }
  return Json::object();
}

// The chart as a platform team installs it: namespaces under Pod Security
// (restricted, the agents' privileged), helm lint, template (the roles) and
// install with `extra_sets`, the test kubelet, and both rollouts done.
struct ChartRelease {
  std::string helm;      // the helm command line, with the cluster's kubeconfig
  std::string chart;     // the chart's folder
  std::string rendered;  // helm template's output
  std::string sets;      // the --set flags it was installed with
};

void InstallChart(Cluster& cluster, const std::string& extra_sets, ChartRelease* release) {
  release->helm = cluster.K8sBin("helm") + " --kubeconfig " + cluster.File("kubeconfig") + " ";
  release->chart = SourcePath("deploy/helm/antdt");
  const std::string& helm = release->helm;
  const std::string& chart = release->chart;
  int rc = 0;
  for (const auto& [ns, level] : std::vector<std::pair<std::string, std::string>>{
           {"antdt-system", "restricted"}, {"antdt-agents", "privileged"}}) {
    std::string out = cluster.Kubectl("create namespace " + ns, &rc);
    ASSERT_EQ(rc, 0) << out;
    out = cluster.Kubectl(
        absl::StrCat("label namespace ", ns, " pod-security.kubernetes.io/enforce=", level), &rc);
    ASSERT_EQ(rc, 0) << out;
  }
  std::string out =
      cluster.Kubectl("label namespace default pod-security.kubernetes.io/enforce=restricted", &rc);
  ASSERT_EQ(rc, 0) << out;

  // helm lint, helm template (the roles, for the least-privilege check), helm install.
  release->rendered = cluster.dir() + "/antdt.yaml";
  release->sets = absl::StrCat(" --set agent.namespace=antdt-agents",
                               " --set operator.monitorWindow=1s --set operator.masterPort=",
                               cluster.master_port(), " ", extra_sets, " ");
  const std::string& sets = release->sets;
  ASSERT_EQ(RunCommand(helm + "lint " + chart + sets + " 2>&1", &out), 0) << out;
  ASSERT_EQ(RunCommand(absl::StrCat(helm, "template antdt ", chart,
                                    " --namespace antdt-system --include-crds --skip-tests", sets,
                                    " > ", release->rendered),
                       &out),
            0)
      << out;
  ASSERT_EQ(
      RunCommand(helm + "install antdt " + chart + " --namespace antdt-system" + sets + " 2>&1",
                 &out),
      0)
      << out;
  std::cout << "helm install: " << out << "\n";
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(""));  // the agents come from the DaemonSet
  out = cluster.Kubectl("-n antdt-system rollout status deployment/antdt-operator --timeout=120s",
                        &rc);
  ASSERT_EQ(rc, 0) << out << cluster.Kubectl("get pods -A -o wide");
  out = cluster.Kubectl("-n antdt-agents rollout status daemonset/antdt-agent --timeout=120s", &rc);
  ASSERT_EQ(rc, 0) << out << cluster.Kubectl("get pods -A -o wide");
}

// The chart installed as a platform team installs it, on a cluster that
// authorizes by RBAC and enforces Pod Security "restricted" everywhere but
// the agents' namespace: the operator runs from its Deployment under its
// ServiceAccount, the agents from the DaemonSet, both as pods of the test
// kubelet; a job with a straggler node then runs to Succeeded, exactly once,
// with the straggler acted on; and every request the operator made was one
// its RBAC grants.
// On the real control plane (ANTDT_E2E_CONTROL_PLANE=real) with the real helm:
// lint, template (for the roles), install, test, upgrade and uninstall; the
// requests from the API server's audit log, a removed rule refused by its RBAC
// authorizer.
TEST(OperatorE2E, TheChartInstallsOnARestrictedRbacClusterAndRunsAJob) {
  if (!RealControlPlane()) GTEST_SKIP() << "runs on the real control plane (operator_e2e_real)";
  Cluster cluster(5, /*rbac=*/true, Plane::kOwn);
  ChartRelease release;
  ASSERT_NO_FATAL_FAILURE(InstallChart(cluster, "", &release));
  const std::string& helm = release.helm;
  const std::string& chart = release.chart;
  const std::string& rendered = release.rendered;
  const std::string& sets = release.sets;
  std::string out;

  // A job with a straggler: worker-1's node turns 4x slower once it runs.
  const int64_t records = 16000;
  // Pod Security "restricted" forbids a hostPath: the sharding state stays in its pod.
  Json spec = cluster.ExampleJob("chart", records, 4, /*shared_volume=*/false);
  UseNdPolicyWithShortWindows(spec);
  spec["spec"]["runPolicy"] = {{"ttlSecondsAfterFinished", 3}};  // then the operator deletes it
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  std::string victim;
  Json job = cluster.WaitJob(
      "chart",
      [&](const Json& j) {
        for (const Json& p : cluster.Pods("chart")) {
          if (Str(p, {"metadata", "labels", "antdt.io/worker-id"}) == "worker-1" &&
              Str(p, {"status", "phase"}) == "Running") {
            victim = Str(p, {"spec", "nodeName"});
          }
        }
        return Condition(j, "Running") == "True" && !victim.empty();
      },
      std::chrono::seconds(120));
  ASSERT_FALSE(victim.empty()) << cluster.Diagnosis("chart");
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the Monitor's warm-up
  cluster.WriteSpeed(victim, 0.25);
  job = cluster.WaitJob(
      "chart", [](const Json& j) { return Finished(j); }, std::chrono::seconds(300));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_FALSE(job["status"].value("lastActions", Json::array()).empty())
      << "the straggler was not acted on: " << job["status"].dump(2);
  const std::string uid = Str(job, {"metadata", "uid"});
  const demo::Verification v = cluster.Verify("chart", records, uid);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
  // Past its TTL the operator deletes the finished job.
  EXPECT_TRUE(WaitFor([&] { return cluster.GetJob("chart").is_null(); }, std::chrono::seconds(60)));

  // helm test: the chart's test pod finds the Monitor, a ready operator and an agent.
  EXPECT_EQ(RunCommand(helm + "test antdt --namespace antdt-system --timeout 120s 2>&1", &out), 0)
      << out << cluster.Kubectl("-n antdt-system get pods -o wide");

  // Least privilege, measured: what the operator's ServiceAccount asked for,
  // against what its roles grant.
  std::set<std::pair<std::string, std::string>> used;
  int refused = 0;
  for (const ServedRequest& r : cluster.Requests()) {
    if (r.user != "system:serviceaccount:antdt-system:antdt-operator") continue;
    if (r.code == 403) ++refused;
    if (!r.attributes.verb.empty()) used.insert({r.attributes.verb, r.attributes.Resource()});
  }
  EXPECT_EQ(refused, 0);
  std::set<std::pair<std::string, std::string>> granted;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(rendered)) {
    const Json o = kube::YamlToJson(doc);
    if (!o.is_object() || (Str(o, {"kind"}) != "ClusterRole" && Str(o, {"kind"}) != "Role")) {
      continue;
    }
    for (const Json& rule : o["rules"]) {
      for (const Json& g : rule["apiGroups"]) {
        for (const Json& res : rule["resources"]) {
          for (const Json& verb : rule["verbs"]) {
            granted.insert(
                {verb.get<std::string>(), g.get<std::string>() + "/" + res.get<std::string>()});
          }
        }
      }
    }
  }
  std::vector<std::string> not_granted, unused;
  for (const auto& u : used) {
    if (!granted.count(u)) not_granted.push_back(u.first + " " + u.second);
  }
  for (const auto& g : granted) {
    if (!used.count(g)) unused.push_back(g.first + " " + g.second);
  }
  EXPECT_TRUE(not_granted.empty()) << absl::StrJoin(not_granted, ", ");
  // Everything granted was used, but for what this run cannot make happen: a
  // repeated Event (patched, not created again), a quiet API server (the
  // readiness check reads the replica's own pod) and a cache behind the
  // operator's own status write while Events are pending (the job is read).
  std::vector<std::string> unexplained;
  for (const std::string& u : unused) {
    if (u != "patch /events" && u != "get /pods" && u != "get antdt.io/antdtjobs") {
      unexplained.push_back(u);
    }
  }
  EXPECT_TRUE(unexplained.empty()) << "granted, never used: " << absl::StrJoin(unexplained, ", ");
  std::cout << "operator RBAC: " << used.size() << " (verb, resource) pairs used of "
            << granted.size()
            << " granted; granted, unused this run: " << absl::StrJoin(unused, ", ") << "\n";
  const std::vector<std::string> needless =
      RulesTheRealAuthorizerFindsNeedless(cluster, rendered, cluster.Requests());
  EXPECT_TRUE(needless.empty()) << "rules this run did without: " << absl::StrJoin(needless, "; ");
  ASSERT_NO_FATAL_FAILURE(ExpectAMissingPermissionIsReported(cluster, rendered));
  ASSERT_NO_FATAL_FAILURE(ExpectHelmUpgradeAndUninstall(cluster, helm, chart, sets));
}

// Node memory in Act, with the taint, on a cluster whose platform team took the
// node grants out of the chart's roles: the operator keeps the memory, says
// once (a Warning on the job that taught it, naming nodes/status) what it may
// not do, writes no Node and does not retry in a storm, and the job goes on to
// complete exactly once.
TEST(OperatorE2E, WithoutTheNodeGrantsOneWarningSaysWhichAndTheJobCompletesOnce) {
  if (!RealControlPlane()) GTEST_SKIP() << "runs on the real control plane (operator_e2e_real)";
  Cluster cluster(4, /*rbac=*/true, Plane::kOwn);
  ChartRelease release;
  ASSERT_NO_FATAL_FAILURE(InstallChart(
      cluster, "--set operator.nodeMemory.mode=Act --set operator.nodeMemory.taint=true",
      &release));
  int rc = 0;
  std::string out = cluster.Kubectl("get clusterrole antdt-operator-nodes -o json", &rc);
  ASSERT_EQ(rc, 0) << out;
  Json role = Json::parse(out);
  const std::string granted = role["rules"].dump();
  ASSERT_NE(granted.find("nodes/status"), std::string::npos)
      << "the chart did not grant: " << granted;
  // Only what the Monitor needs stays: the Nodes' labels and conditions.
  role["rules"] = Json::parse(R"([{"apiGroups": [""], "resources": ["nodes"],
                                   "verbs": ["list", "watch"]}])");
  role["metadata"].erase("resourceVersion");
  role["metadata"].erase("managedFields");
  std::ofstream(cluster.dir() + "/nodes-role.json") << role.dump();
  out = cluster.Kubectl("replace -f " + cluster.dir() + "/nodes-role.json", &rc);
  ASSERT_EQ(rc, 0) << out;

  // A job with a straggler: worker-1's node turns 4x slower once it runs, and
  // the memory records it (an incident of one job: its annotation is due).
  const int64_t records = 16000;
  Json spec = cluster.ExampleJob("memory", records, 4, /*shared_volume=*/false);
  UseNdPolicyWithShortWindows(spec);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  std::string victim;
  Json job = cluster.WaitJob(
      "memory",
      [&](const Json& j) {
        victim = Condition(j, "Running") == "True"
                     ? RunningWorkerNode(cluster, "memory", "worker-1")
                     : "";
        return !victim.empty();
      },
      std::chrono::seconds(120));
  ASSERT_FALSE(victim.empty()) << cluster.Diagnosis("memory");
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the Monitor's warm-up
  cluster.WriteSpeed(victim, 0.25);
  job = cluster.WaitJob(
      "memory", [](const Json& j) { return Finished(j); }, std::chrono::seconds(300));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << cluster.Diagnosis("memory");
  EXPECT_FALSE(job["status"].value("lastActions", Json::array()).empty())
      << "the straggler was not acted on: " << cluster.Diagnosis("memory");
  const demo::Verification v = cluster.Verify("memory", records, Str(job, {"metadata", "uid"}));
  EXPECT_TRUE(v.exactly_once()) << v.Summary();

  // One Warning, on the job, naming the permission.
  std::vector<Json> warnings;
  EXPECT_TRUE(WaitFor(
      [&] {
        warnings.clear();
        for (const Json& e : cluster.Events()) {
          if (e.value("reason", "") == "NodeMemoryForbidden") warnings.push_back(e);
        }
        return !warnings.empty();
      },
      std::chrono::seconds(30)))
      << cluster.Kubectl("get events") << cluster.Diagnosis("memory");
  ASSERT_EQ(warnings.size(), 1u) << Json(warnings).dump(2);
  EXPECT_EQ(warnings[0].value("type", ""), "Warning");
  EXPECT_EQ(warnings[0].value("count", 1), 1) << warnings[0].dump(2);
  EXPECT_EQ(Str(warnings[0], {"involvedObject", "name"}), "memory");
  EXPECT_NE(warnings[0].value("message", "").find("nodes/status"), std::string::npos)
      << warnings[0].dump(2);
  out = cluster.Kubectl("-n antdt-system logs -l app.kubernetes.io/component=operator --tail=-1",
                        &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("node_write_forbidden"), std::string::npos) << out;
  EXPECT_EQ(out.find("node_condition"), std::string::npos) << out;
  // Refused once, then left alone: no retry storm on the Nodes.
  int refused = 0;
  for (const ServedRequest& r : cluster.Requests()) {
    if (r.user == "system:serviceaccount:antdt-system:antdt-operator" && r.code == 403 &&
        r.attributes.resource == "nodes") {
      ++refused;
    }
  }
  EXPECT_GE(refused, 1);
  EXPECT_LE(refused, 2) << "the operator retried a refused Node write " << refused << " times";
  // No Node written: no memory annotation, no condition, no taint.
  for (int i = 0; i < 4; ++i) {
    const std::string node = cluster.NodeName(i);
    EXPECT_TRUE(SlowNodeCondition(cluster, node).empty()) << node;
    out = cluster.Kubectl("get node " + node + " -o json", &rc);
    ASSERT_EQ(rc, 0) << out;
    const Json n = Json::parse(out);
    EXPECT_EQ(Str(n, {"metadata", "annotations", "antdt.io/node-memory"}), "") << node;
    EXPECT_EQ(kube::At(n, {"spec", "taints"}).dump().find("antdt.io/slow-node"), std::string::npos)
        << node;
  }
  // Nothing crashed: the operator's pods never restarted.
  out = cluster.Kubectl(
      "-n antdt-system get pods -l app.kubernetes.io/component=operator -o "
      "jsonpath={.items[*].status.containerStatuses[*].restartCount}",
      &rc);
  ASSERT_EQ(rc, 0) << out;
  for (absl::string_view count : absl::StrSplit(out, ' ', absl::SkipEmpty())) {
    EXPECT_EQ(count, "0") << out;
  }
}

// Jobs are namespace/name: two jobs named `coll` in two namespaces at once
// are two jobs to the Monitor and in every series, and both train every
// record exactly once, each in its own folder.
TEST(OperatorE2E, SameNameInTwoNamespacesStayApart) {
  // An operator that watches every namespace: a plane of its own.
  Cluster cluster(6, /*rbac=*/false, Plane::kOwn);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string monitor = cluster.StartOperator("op-a");
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  const int64_t records = 6000;
  const std::vector<std::string> namespaces = {"team-a", "team-b"};
  for (const std::string& ns : namespaces) {
    // A real API server makes no namespace on first use (the emulator does).
    int rc = 0;
    const std::string out = cluster.Kubectl("create namespace " + ns, &rc);
    ASSERT_EQ(rc, 0) << out;
    Json spec = cluster.ExampleJob("coll", records, 3);
    spec["metadata"]["namespace"] = ns;
    ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  }
  std::map<std::string, std::string> uids;
  std::string metrics;
  for (const std::string& ns : namespaces) {
    const Json job = cluster.WaitJob(
        "coll", [&](const Json& j) { return Finished(j); }, std::chrono::seconds(240), ns);
    ASSERT_EQ(Condition(job, "Succeeded"), "True") << ns << "\n" << job.dump(2);
    uids[ns] = Str(job, {"metadata", "uid"});
    const demo::Verification v = cluster.Verify("coll", records, uids[ns]);
    EXPECT_TRUE(v.exactly_once()) << ns << "\n" << v.Summary();
  }
  EXPECT_NE(uids["team-a"], uids["team-b"]);
  metrics = cluster.OperatorMetrics("op-a");
  for (const std::string& ns : namespaces) {
    const size_t members =
        SeriesLines(metrics, "antdt_monitor_straggler_score",
                    {"job=\"coll\"", "namespace=\"" + ns + "\"", "role=\"worker\""})
            .size();
    EXPECT_EQ(members, 3u) << ns << ": the Monitor sees each job's own three workers\n" << metrics;
    EXPECT_NE(metrics.find("antdt_job_records_committed{job=\"coll\",namespace=\"" + ns + "\"} " +
                           std::to_string(records)),
              std::string::npos)
        << metrics;
  }
}

// Worker, parameter-server and sharding pods of a job that are not
// terminating and not finished.
std::vector<std::string> ActivePods(const std::vector<Json>& pods) {
  std::vector<std::string> names;
  for (const Json& p : pods) {
    if (p["metadata"].contains("deletionTimestamp")) continue;
    const std::string phase = Str(p, {"status", "phase"});
    if (phase == "Succeeded" || phase == "Failed") continue;
    names.push_back(Str(p, {"metadata", "name"}));
  }
  return names;
}

bool HasEvent(const std::vector<Json>& events, const std::string& reason) {
  return std::any_of(events.begin(), events.end(),
                     [&](const Json& e) { return e.value("reason", "") == reason; });
}

// What a running job can and cannot change, through `kubectl patch`: fields it
// cannot (the dataset, the model, the number of parameter servers, the checkpoint path)
// are refused by the CRD's transition rules with a 422 naming the field, and
// nothing changes; a new straggler policy is acted on (an Event); suspending
// deletes every pod and resuming finishes the job with every record committed
// exactly once.
TEST(OperatorE2E, RunningJobRefusesImmutableChangesAndSuspendsAndResumes) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const int64_t records = 16000;
  Json job;
  ASSERT_NO_FATAL_FAILURE(job = cluster.ApplyRunningJob("pause", records, 3));
  ASSERT_EQ(Condition(job, "Running"), "True") << job.dump(2);
  const int64_t generation = job["metadata"].value("generation", int64_t{0});

  const std::vector<std::pair<std::string, std::string>> immutable = {
      {R"({"spec":{"dataset":{"records":1000}}})", "spec.dataset"},
      {R"({"spec":{"model":{"learningRate":0.5}}})", "spec.model"},
      {R"({"spec":{"parameterServers":{"replicas":2}}})", "spec.parameterServers.replicas"},
      {R"({"spec":{"checkpoint":{"path":"/elsewhere"}}})", "spec.checkpoint"}};
  for (const auto& [patch, field] : immutable) {
    int rc = 0;
    const std::string out = cluster.Kubectl("patch adt pause --type=merge -p '" + patch + "'", &rc);
    EXPECT_NE(rc, 0) << patch << "\n" << out;
    EXPECT_NE(out.find(field), std::string::npos) << out;
    EXPECT_NE(out.find("is immutable"), std::string::npos) << out;
  }
  job = cluster.GetJob("pause");
  EXPECT_EQ(job["metadata"].value("generation", int64_t{0}), generation) << "nothing changed";
  EXPECT_EQ(job["spec"]["dataset"].value("records", int64_t{0}), records);

  // A new policy is acted on, and said.
  int rc = 0;
  std::string out = cluster.Kubectl(
      R"(patch adt pause --type=merge -p '{"spec":{"stragglerPolicy":{"cooldown":"45s"}}}')", &rc);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(WaitFor([&] { return HasEvent(cluster.Events(), "PolicyChanged"); },
                      std::chrono::seconds(20)));

  // Suspend: every pod goes, none comes back while suspended.
  out = cluster.Kubectl(R"(patch adt pause --type=merge -p '{"spec":{"suspend":true}}')", &rc);
  ASSERT_EQ(rc, 0) << out;
  job = cluster.WaitJob(
      "pause",
      [&](const Json& j) {
        return Str(j, {"status", "state"}) == "Suspended" && cluster.Pods("pause").empty();
      },
      std::chrono::seconds(60));
  ASSERT_EQ(Str(job, {"status", "state"}), "Suspended") << job.dump(2);
  ASSERT_EQ(absl::StrJoin(ActivePods(cluster.Pods("pause")), ","), "");
  ASSERT_NE(Condition(job, "Succeeded"), "True") << "suspended too late";
  const int64_t committed = job["status"]["progress"].value("recordsCommitted", int64_t{0});
  EXPECT_LT(committed, records);
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    EXPECT_EQ(absl::StrJoin(ActivePods(cluster.Pods("pause")), ","), "");
  }
  EXPECT_EQ(cluster.GetJob("pause")["status"]["progress"].value("recordsCommitted", int64_t{0}),
            committed);
  EXPECT_NE(cluster.Kubectl("get adt pause").find("Suspended"), std::string::npos);
  EXPECT_TRUE(cluster.WaitForEvent("Suspended"));
  std::cerr << "suspended at " << committed << " of " << records << " records\n";

  // Resume: the job finishes from its sharding state.
  out = cluster.Kubectl(R"(patch adt pause --type=merge -p '{"spec":{"suspend":false}}')", &rc);
  ASSERT_EQ(rc, 0) << out;
  job = cluster.WaitJob(
      "pause", [](const Json& j) { return Finished(j); }, std::chrono::seconds(240));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_EQ(Condition(job, "Suspended"), "False");
  EXPECT_EQ(job["status"]["progress"].value("recordsCommitted", int64_t{0}), records);
  EXPECT_EQ(job["status"]["workers"].value("restarts", -1), 0) << "a suspension is no restart";
  const demo::Verification v = cluster.Verify("pause", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
  EXPECT_TRUE(cluster.WaitForEvent("Resumed"));
}

// The job's workers that are not terminating and not finished, by name.
std::vector<std::string> LiveWorkers(const std::vector<Json>& pods) {
  std::vector<Json> workers;
  for (const Json& p : pods) {
    if (Str(p, {"metadata", "labels", "antdt.io/role"}) == "worker") workers.push_back(p);
  }
  std::vector<std::string> names = ActivePods(workers);
  std::sort(names.begin(), names.end());
  return names;
}

int64_t BatchSum(const Json& job) {
  int64_t sum = 0;
  for (const Json& w : job["status"]["workerInstances"]) {
    sum += w.value("localBatchSize", int64_t{0});
  }
  return sum;
}

// `kubectl scale` and `kubectl patch` of a running job's workers, 3 -> 1 -> 3: at each
// step the status's workers match the live pods, the removed workers' pods go
// and their shards are released, the one left is told the whole global batch
// (an ADJUST_BS it applies) and the parameter server its members; scaled up
// again, worker-1 and worker-2 come back as their next incarnations. The job
// finishes with every record committed exactly once and no restart counted.
TEST(OperatorE2E, ScalingARunningJobDownAndUpKeepsTheGlobalBatchAndCommitsOnce) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const int64_t records = 24000;
  Json job;
  ASSERT_NO_FATAL_FAILURE(job = cluster.ApplyRunningJob("scale", records, 3));
  ASSERT_EQ(Condition(job, "Running"), "True") << job.dump(2);
  const int64_t global = job["spec"]["model"].value("globalBatchSize", int64_t{256});
  EXPECT_EQ(BatchSum(job), global);

  // Down with `kubectl scale` (the CRD's scale subresource), up with `kubectl patch`.
  auto scale_to = [&](int n) {
    int rc = 0;
    const std::string out = cluster.Kubectl(
        n == 1 ? "scale adt scale --replicas=1"
               : absl::StrCat(R"(patch adt scale --type=merge -p '{"spec":{"workers":{"replicas":)",
                              n, "}}}'"),
        &rc);
    ASSERT_EQ(rc, 0) << out;
  };
  // Settled at n workers: the status says n, n worker pods run, none other is
  // left, every removed worker is retired (its shards released).
  auto settled = [&](int n) {
    return [&cluster, n](const Json& j) {
      const std::vector<std::string> live = LiveWorkers(cluster.Pods("scale"));
      int workers = 0;
      for (const Json& p : cluster.Pods("scale")) {
        workers += Str(p, {"metadata", "labels", "antdt.io/role"}) == "worker";
      }
      bool retired = true;
      for (const Json& w : j["status"].value("removedWorkers", Json::array())) {
        retired = retired && w.value("retired", false);
      }
      return j["status"]["workers"].value("desired", 0) == n &&
             j["status"]["workers"].value("active", 0) == n && Condition(j, "Running") == "True" &&
             static_cast<int>(live.size()) == n && workers == n && retired;
    };
  };

  ASSERT_NO_FATAL_FAILURE(scale_to(1));
  job = cluster.WaitJob("scale", settled(1), std::chrono::seconds(90));
  ASSERT_TRUE(settled(1)(job)) << job.dump(2);
  ASSERT_NE(Condition(job, "Succeeded"), "True") << "finished before it was scaled down";
  EXPECT_EQ(absl::StrJoin(LiveWorkers(cluster.Pods("scale")), ","), "scale-worker-0");
  EXPECT_EQ(Str(job, {"status", "workers", "summary"}), "1/1");
  EXPECT_EQ(BatchSum(job), global);
  EXPECT_EQ(job["status"]["removedWorkers"].size(), 2u);
  EXPECT_EQ(Condition(job, "Mitigating"), "False");
  EXPECT_TRUE(cluster.WaitForEvent("Scaled"));
  // worker-0 runs the whole global batch: the directive reached it.
  const Json worker0 = cluster.Pod("scale-worker-0");
  const std::string applied = absl::StrCat("event=directive_applied worker=worker-0");
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string log = cluster.PodLog(worker0);
        return log.find(applied) != std::string::npos &&
               log.find(absl::StrCat("local_batch=", global)) != std::string::npos;
      },
      std::chrono::seconds(30)))
      << cluster.PodLog(worker0);
  // The parameter server was told its members.
  const Json ps = cluster.Pod("scale-ps-0");
  EXPECT_NE(cluster.PodLog(ps).find("event=resized"), std::string::npos) << cluster.PodLog(ps);
  const int64_t at_one = job["status"]["progress"].value("recordsCommitted", int64_t{0});
  std::cerr << "scaled to 1 at " << at_one << " of " << records << " records\n";

  ASSERT_NO_FATAL_FAILURE(scale_to(3));
  job = cluster.WaitJob("scale", settled(3), std::chrono::seconds(90));
  ASSERT_TRUE(settled(3)(job)) << job.dump(2);
  ASSERT_NE(Condition(job, "Succeeded"), "True") << "finished before it was scaled up";
  EXPECT_EQ(absl::StrJoin(LiveWorkers(cluster.Pods("scale")), ","),
            "scale-worker-0,scale-worker-1,scale-worker-2");
  EXPECT_EQ(Str(cluster.Pod("scale-worker-1"), {"metadata", "labels", "antdt.io/incarnation"}),
            "1");
  EXPECT_EQ(BatchSum(job), global);
  EXPECT_FALSE(job["status"].contains("removedWorkers")) << job["status"].dump(2);

  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "scale", records, &job));
  EXPECT_EQ(job["status"]["workers"].value("restarts", -1), 0) << "scaling is no restart";
  EXPECT_EQ(BatchSum(job), global);
}

// Pods orphaned by `kubectl delete --cascade=orphan` hold the names a job
// applied again needs: the job says so (an OrphanedChildren Event naming them, a
// FailedCreate and ReplicaFailure saying the name is not its own) instead of
// waiting silently, neither counts nor adopts them, and runs once they are
// deleted, training every record exactly once in its own folder.
TEST(OperatorE2E, OrphanedPodsAreReportedNotCountedAndTheJobRunsOnceTheyGo) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const int64_t records = 4000;
  Json job;
  ASSERT_NO_FATAL_FAILURE(job = cluster.ApplyRunningJob("orph", records, 2));
  ASSERT_EQ(Condition(job, "Running"), "True") << job.dump(2);
  const std::string first_uid = Str(job, {"metadata", "uid"});
  int rc = 0;
  std::string out = cluster.Kubectl("delete adt orph --cascade=orphan", &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_TRUE(WaitFor([&] { return cluster.GetJob("orph").is_null(); }, std::chrono::seconds(30)));
  ASSERT_FALSE(cluster.Pods("orph").empty()) << "the orphans stay";

  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("orph", records, 2)));
  job = cluster.WaitJob(
      "orph",
      [&](const Json& j) {
        const Json* c = reconciler::FindCondition(j["status"], reconciler::kReplicaFailure);
        return c != nullptr && (*c)["status"] == "True";
      },
      std::chrono::seconds(30));
  const Json* failure = reconciler::FindCondition(job["status"], reconciler::kReplicaFailure);
  ASSERT_NE(failure, nullptr) << job.dump(2);
  EXPECT_NE((*failure)["message"].get<std::string>().find("it is not this job's"),
            std::string::npos)
      << (*failure)["message"];
  std::string orphaned;
  for (const Json& e : cluster.Events()) {
    if (e.value("reason", "") == "OrphanedChildren" &&
        Str(e, {"involvedObject", "uid"}) == Str(job, {"metadata", "uid"})) {
      orphaned = e.value("message", "");
    }
  }
  EXPECT_NE(orphaned.find("pod/orph-sharding"), std::string::npos) << orphaned;
  EXPECT_NE(orphaned.find("pod/orph-worker-0"), std::string::npos) << orphaned;
  EXPECT_NE(orphaned.find("service/orph-workers"), std::string::npos) << orphaned;
  // Not counted: the new job's workers are none of the orphans.
  EXPECT_EQ(job["status"]["workers"].value("active", -1), 0) << job["status"].dump(2);

  out = cluster.Kubectl("delete pods,services -l antdt.io/job=orph --wait=false", &rc);
  ASSERT_EQ(rc, 0) << out;
  job = cluster.WaitJob(
      "orph", [](const Json& j) { return Finished(j); }, std::chrono::seconds(240));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_NE(Str(job, {"metadata", "uid"}), first_uid);
  EXPECT_EQ(job["status"]["progress"].value("recordsCommitted", int64_t{0}), records);
  const demo::Verification v = cluster.Verify("orph", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
  for (const Json& p : cluster.Pods("orph")) {
    EXPECT_EQ(Str(p["metadata"]["ownerReferences"][0], {"uid"}), Str(job, {"metadata", "uid"}));
  }
}

// Volcano's PodGroup CRD as a cluster with Volcano has it (its schema left open).
constexpr char kVolcanoPodGroupCrd[] = R"(apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: podgroups.scheduling.volcano.sh
spec:
  group: scheduling.volcano.sh
  scope: Namespaced
  names: {plural: podgroups, singular: podgroup, kind: PodGroup, shortNames: [pg]}
  versions:
    - name: v1beta1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
)";

// An operator run with --gang-scheduler volcano gives a job a PodGroup (its
// queue, min members: the parameter server and the workers, owned by the job)
// over the real API path, and its servers and workers join it and wait for
// Volcano (which the test cluster does not run), while the sharding service,
// outside the gang, runs.
TEST(OperatorE2E, GangScheduledJobGetsAPodGroupItsMembersJoin) {
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string crd = cluster.dir() + "/volcano-podgroup-crd.yaml";
  std::ofstream(crd) << kVolcanoPodGroupCrd;
  int rc = 0;
  std::string out = cluster.Kubectl("apply -f " + crd, &rc);
  ASSERT_EQ(rc, 0) << out;
  out = cluster.Kubectl(
      "wait --for=condition=established --timeout=20s crd/podgroups.scheduling.volcano.sh", &rc);
  ASSERT_EQ(rc, 0) << out;
  const std::string monitor = cluster.StartOperator("op-a", {"--gang-scheduler", "volcano"});
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  Json spec = cluster.ExampleJob("gang", 2000, 2);
  spec["spec"]["runPolicy"]["schedulingPolicy"] = {{"queue", "research"}};
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));

  Json group;
  ASSERT_TRUE(WaitFor(
      [&] {
        int code = 0;
        const std::string json = cluster.Kubectl("get podgroups gang -o json", &code);
        if (code != 0) return false;
        group = Json::parse(json, nullptr, false);
        return !group.is_discarded();
      },
      std::chrono::seconds(60)))
      << "no PodGroup";
  const Json job = cluster.GetJob("gang");
  EXPECT_EQ(group["spec"].value("minMember", 0), 3);  // 1 parameter server + 2 workers
  EXPECT_EQ(group["spec"].value("queue", ""), "research");
  EXPECT_EQ(Str(group["metadata"]["ownerReferences"][0], {"uid"}), Str(job, {"metadata", "uid"}));

  std::vector<Json> members;
  ASSERT_TRUE(WaitFor(
      [&] {
        members.clear();
        for (const Json& p : cluster.Pods("gang")) {
          if (Str(p, {"metadata", "labels", "antdt.io/role"}) != "sharding") members.push_back(p);
        }
        return members.size() == 3;
      },
      std::chrono::seconds(60)));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (const Json& p : cluster.Pods("gang")) {
    SCOPED_TRACE(Str(p, {"metadata", "name"}));
    if (Str(p, {"metadata", "labels", "antdt.io/role"}) == "sharding") {
      EXPECT_EQ(Str(p, {"status", "phase"}), "Running");  // outside the gang
      EXPECT_NE(Str(p, {"spec", "schedulerName"}), "volcano");
      continue;
    }
    EXPECT_EQ(Str(p, {"spec", "schedulerName"}), "volcano");
    EXPECT_EQ(Str(p, {"metadata", "annotations", "scheduling.k8s.io/group-name"}), "gang");
    EXPECT_EQ(Str(p, {"spec", "nodeName"}), "") << "left to Volcano";
  }
}

TEST(OperatorE2E, PersistentStragglerIsRestartedOnAnotherNode) {
  Cluster cluster(6);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string monitor = cluster.StartOperator("op-a");
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  const int64_t records = 24000;
  Json spec = cluster.ExampleJob("slow", records, 4);
  UseNdPolicyWithShortWindows(spec);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));

  // Once the job runs, the node of worker-1 turns 4x slower.
  std::string victim_node;
  Json job = cluster.WaitJob(
      "slow",
      [&](const Json& j) {
        if (Condition(j, "Running") != "True") return false;
        for (const Json& p : cluster.Pods("slow")) {
          if (Str(p, {"metadata", "labels", "antdt.io/worker-id"}) == "worker-1" &&
              Str(p, {"status", "phase"}) == "Running") {
            victim_node = Str(p, {"spec", "nodeName"});
          }
        }
        return !victim_node.empty();
      },
      std::chrono::seconds(120));
  ASSERT_FALSE(victim_node.empty()) << job.dump(2);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the Monitor's warm-up
  cluster.WriteSpeed(victim_node, 0.25);

  bool straggler_condition = false;
  job = cluster.WaitJob(
      "slow",
      [&](const Json& j) {
        if (Condition(j, "StragglersDetected") == "True" || Condition(j, "Mitigating") == "True") {
          straggler_condition = true;
        }
        return Finished(j);
      },
      std::chrono::seconds(300));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_TRUE(straggler_condition);

  // The restart: recorded in status, with an Event that names the node.
  bool restarted = false;
  for (const Json& a : job["status"]["lastActions"]) {
    if (a.value("action", "") == "KILL_RESTART" && a.value("worker", "") == "worker-1") {
      restarted = true;
      EXPECT_EQ(a.value("fromNode", ""), victim_node);
      EXPECT_NE(a.value("toNode", ""), victim_node);
    }
  }
  EXPECT_TRUE(restarted) << job["status"].dump(2);
  bool event = false;
  for (const Json& e : cluster.Events()) {
    if (e.value("reason", "") == "StragglerRestarted" &&
        e.value("message", "").find(victim_node) != std::string::npos) {
      event = true;
    }
  }
  EXPECT_TRUE(event);
  // The new incarnation ran elsewhere.
  for (const Json& p : cluster.Pods("slow")) {
    if (Str(p, {"metadata", "labels", "antdt.io/worker-id"}) == "worker-1" &&
        Str(p, {"metadata", "labels", "antdt.io/incarnation"}) != "0") {
      EXPECT_NE(Str(p, {"spec", "nodeName"}), victim_node);
    }
  }
  const demo::Verification v = cluster.Verify("slow", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();

  // The job's series on the operator's /metrics, with its namespace; gone
  // once the job is deleted.
  std::string metrics = cluster.OperatorMetrics("op-a");
  const std::string ns_label = "namespace=\"" + cluster.ns() + "\"";
  EXPECT_NE(metrics.find("antdt_controller_actions_total{action=\"KILL_RESTART\",job=\"slow\"," +
                         ns_label),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("antdt_job_records_committed{job=\"slow\"," + ns_label + "}"),
            std::string::npos)
      << metrics;
  // The Monitor's series of the job carry its namespace too.
  const std::vector<std::string> monitor_series =
      SeriesLines(metrics, "antdt_monitor_straggler_score", {"job=\"slow\""});
  for (const std::string& line : monitor_series) {
    EXPECT_TRUE(absl::StrContains(line, ns_label)) << line;
  }
  EXPECT_FALSE(monitor_series.empty()) << metrics;
  cluster.Kubectl("delete adt slow");
  EXPECT_TRUE(WaitFor(
      [&] {
        metrics = cluster.OperatorMetrics("op-a");
        return !metrics.empty() && metrics.find("job=\"slow\"") == std::string::npos;
      },
      std::chrono::seconds(30)))
      << metrics;
}

TEST(OperatorE2E, SlowParameterServerPodIsMovedToAnotherNodeWhileTheJobTrains) {
  Cluster cluster(10);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string monitor = cluster.StartOperator("op-a");
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  const int64_t records = 36000;
  Json spec = cluster.ExampleJob("psmove", records, 3);
  // Three servers, each spending 20 ms of emulated time per step (divided by
  // its node's speed), checkpointing every 20 steps.
  spec["spec"]["parameterServers"] = Json::parse(R"({"replicas": 3, "template": {"spec":
      {"containers": [{"name": "ps", "env": [{"name": "ANTDT_SERVER_US_PER_STEP",
                                              "value": "20000"}]}]}}})");
  spec["spec"]["checkpoint"]["everySteps"] = 20;
  UseNdPolicyWithShortWindows(spec);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));

  // Once the job trains, the node of ps-1 turns 3x slower (after the
  // Monitor's warm-up windows of the servers: a server slow from its first
  // window would read as slow hardware, which a move does not change).
  std::string victim_node;
  Json job = cluster.WaitJob(
      "psmove",
      [&](const Json& j) {
        if (Condition(j, "Running") != "True" ||
            j["status"]["progress"].value("recordsCommitted", int64_t{0}) < 2000) {
          return false;
        }
        const Json ps = cluster.Pod("psmove-ps-1");
        if (!ps.is_null() && Str(ps, {"status", "phase"}) == "Running") {
          victim_node = Str(ps, {"spec", "nodeName"});
        }
        return !victim_node.empty();
      },
      std::chrono::seconds(120));
  ASSERT_FALSE(victim_node.empty()) << job.dump(2);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the Monitor's warm-up
  cluster.WriteSpeed(victim_node, 1.0 / 3);

  // The move: the next incarnation's pod runs elsewhere while the old one
  // still serves (it hands over its state), then the old pod goes while the
  // job is still training.
  std::string new_node;
  bool old_gone_while_training = false;
  job = cluster.WaitJob(
      "psmove",
      [&](const Json& j) {
        const Json next = cluster.Pod("psmove-ps-1-1");
        if (!next.is_null() && Str(next, {"status", "phase"}) == "Running") {
          new_node = Str(next, {"spec", "nodeName"});
          if (cluster.Pod("psmove-ps-1").is_null() && !Finished(j)) {
            old_gone_while_training = true;
          }
        }
        return Finished(j);
      },
      std::chrono::seconds(300));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_FALSE(new_node.empty()) << "no pod psmove-ps-1-1 was seen running";
  EXPECT_NE(new_node, victim_node);
  EXPECT_TRUE(old_gone_while_training);
  bool moved = false;
  for (const Json& a : job["status"]["lastActions"]) {
    if (a.value("action", "") == "KILL_RESTART" && a.value("worker", "") == "ps-1") {
      moved = true;
      EXPECT_EQ(a.value("fromNode", ""), victim_node);
      EXPECT_EQ(a.value("rule", ""), "antdt-nd:ps-restart");
    }
  }
  EXPECT_TRUE(moved) << job["status"].dump(2);
  ASSERT_TRUE(job["status"]["serverInstances"].is_array()) << job["status"].dump(2);
  EXPECT_EQ(job["status"]["serverInstances"][0].value("id", ""), "ps-1");
  bool event = false;
  for (const Json& e : cluster.Events()) {
    if (e.value("reason", "") == "ParameterServerMoved" &&
        absl::StrContains(e.value("message", ""), victim_node)) {
      event = true;
    }
  }
  EXPECT_TRUE(event);
  // Every worker followed the new server without restarting.
  EXPECT_EQ(job["status"]["workers"].value("restarts", -1), 0) << job["status"].dump(2);
  const demo::Verification v = cluster.Verify("psmove", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
}

TEST(OperatorE2E, KilledMidReconcileConvergesWithoutDuplicatePods) {
  Cluster cluster(5);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  std::string monitor = cluster.StartOperator("op-a");
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  const int64_t records = 6000;
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("crash", records, 3)));
  // kill -9 as soon as the operator has started creating children.
  ASSERT_TRUE(WaitFor([&] { return !cluster.Pods("crash").empty(); }, std::chrono::seconds(60)));
  cluster.Operator("op-a")->Signal(SIGKILL);
  cluster.Operator("op-a")->Wait(std::chrono::seconds(5));
  // The same replica comes back (its lease is still its own).
  monitor = cluster.StartOperator("op-a");
  std::map<std::string, int> most_live;
  Json job = cluster.WaitJob(
      "crash",
      [&](const Json& j) {
        for (const auto& [w, n] : LiveWorkerPods(cluster.Pods("crash"))) {
          most_live[w] = std::max(most_live[w], n);
        }
        return Finished(j);
      },
      std::chrono::seconds(240));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  for (const auto& [w, n] : most_live) EXPECT_LE(n, 1) << w << " ran twice at once";
  // Exactly one pod was created per member: sharding service, parameter
  // server, 3 workers. A second create of a name would be a 409, and a pod
  // made under a new name after the restart a sixth 201.
  int pod_creates = 0;
  for (const Json& r : cluster.EmulatorRequests()) {
    const std::string path = r.value("path", "");
    if (r.value("method", "") == "POST" && r.value("code", 0) == 201 && path.size() >= 5 &&
        path.compare(path.size() - 5, 5, "/pods") == 0) {
      ++pod_creates;
    }
  }
  EXPECT_EQ(pod_creates, 5);
  const demo::Verification v = cluster.Verify("crash", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
}

TEST(OperatorE2E, ConvergesThroughExpiredWatchesConflictsAndThrottling) {
  Cluster cluster(5);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string monitor = cluster.StartOperator("op-a");
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor));
  const int64_t records = 6000;
  // Before the job exists: the operator's next status writes conflict, and it
  // is throttled for a while.
  cluster.Fault({{"inject",
                  {{"code", 409},
                   {"count", 3},
                   {"verbs", {"PUT"}},
                   {"pathContains", "/status"},
                   {"userAgentContains", "antdt-operator"}}}});
  cluster.Fault({{"inject",
                  {{"code", 429},
                   {"count", 5},
                   {"retryAfterSeconds", 1},
                   {"userAgentContains", "antdt-operator"}}}});
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("faulty", records, 3)));
  ASSERT_TRUE(WaitFor([&] { return !cluster.Pods("faulty").empty(); }, std::chrono::seconds(60)));
  // Watches expire (410) and break while the job runs.
  cluster.Fault({{"expireWatches", true}});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  cluster.Fault({{"dropWatches", true}});
  Json job = cluster.WaitJob("faulty", Finished, std::chrono::seconds(240));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_EQ(job["status"]["progress"].value("recordsCommitted", int64_t{0}), records);
  const demo::Verification v = cluster.Verify("faulty", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
  // The operator relisted after the 410 (a LIST of antdtjobs after the first).
  int job_lists = 0;
  for (const Json& r : cluster.EmulatorRequests()) {
    const std::string q = r.value("query", "");
    if (r.value("method", "") == "GET" &&
        r.value("path", "").find("antdtjobs") != std::string::npos &&
        q.find("watch") == std::string::npos &&
        r.value("userAgent", "").find("antdt-operator") != std::string::npos &&
        r.value("path", "").find("/antdtjobs/") == std::string::npos) {
      ++job_lists;
    }
  }
  EXPECT_GE(job_lists, 2);
}

// The cluster remembers a slow node across two jobs and an operator failover
// (node_controller.h): a node slowed through both jobs gets the condition
// AntDTSlowNode with the cause and the evidence, and (--node-taint) the
// PreferNoSchedule taint; the second job's restarted worker is placed
// elsewhere by the scheduler, its decision record names the node avoided; the
// condition and the taint clear as the memory decays; and a healthy node never
// gets either.
TEST(OperatorE2E, ASlowNodeIsRememberedAcrossJobsAndAFailoverAndPublishedOnTheNode) {
  // Five nodes: jobs of four workers, and a node left spare for a restart.
  Cluster cluster(5);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  // A three-minute half-life: two jobs a minute or two apart (a loaded machine) are
  // both recent, and the mark decays within the test.
  const std::vector<std::string> memory = {"--node-memory", "Act", "--node-memory-half-life", "3m",
                                           "--node-taint",  "true"};
  const std::string monitor_a = cluster.StartOperator("op-a", memory);
  ASSERT_EQ(Str(cluster.WaitForLeader("op-a"), {"spec", "holderIdentity"}), "op-a");
  const std::string monitor_b = cluster.StartOperator("op-b", memory);
  cluster.UseCpuQuotas();
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor_b + "," + monitor_a));
  // The slow node is slow for real: a CPU quota on its cgroup, a fortieth of a
  // core, where each worker computes a tenth of its device time (a host
  // feeding an accelerator, 13 ms of a 128 ms step) and sleeps the rest. Four workers
  // then ask for under half of this machine's two cores, so a healthy node is
  // not slowed by its neighbours, and the capped one runs several times
  // slower. Where the kubelet can make no cgroup (a bare chroot) the node is
  // slowed through its speed file instead, the cause then unknown.
  const std::string quota_status = cluster.CpuQuotaStatus();
  const bool real_quota = absl::StartsWith(quota_status, "cgroup");
  std::printf("CPU quotas: %s\n", quota_status.c_str());
  auto slow_down = [&](const std::string& node, bool slow) {
    if (real_quota) {
      cluster.WriteCpuQuota(node, slow ? 40 : 1);
    } else {
      cluster.WriteSpeed(node, slow ? 0.25 : 1.0);
    }
  };
  // Long enough for a slowdown to be seen and acted on in each job.
  const int64_t kRecords = 48000;
  // Workers spread one per node where they can (a preferred anti-affinity), so
  // that both jobs run one on the slow node.
  auto spread = [&](const std::string& name) {
    Json spec = cluster.ExampleJob(name, kRecords, 4);
    UseNdPolicyWithShortWindows(spec);
    Json& args = spec["spec"]["workers"]["template"]["spec"]["containers"][0]["args"];
    for (const char* a : {"--device-work", "cpu", "--device-cpu-share", "0.1"}) args.push_back(a);
    spec["spec"]["workers"]["template"]["spec"]["affinity"]["podAntiAffinity"] = Json::parse(
        R"({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
             "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
               "labelSelector": {"matchLabels": {"antdt.io/job": ")" +
        name + R"(", "antdt.io/role": "worker"}}}}]})");
    return spec;
  };

  // Job one: the node of its worker-1 is capped, and stays so.
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spread("first")));
  std::string victim;
  ASSERT_TRUE(WaitFor(
      [&] {
        victim = Condition(cluster.GetJob("first"), "Running") == "True"
                     ? RunningWorkerNode(cluster, "first", "worker-1")
                     : "";
        return !victim.empty();
      },
      std::chrono::seconds(120)));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the Monitor's warm-up
  slow_down(victim, true);
  Json first;
  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "first", kRecords, &first));
  // One job is an incident: remembered (on the Node), not yet marked.
  EXPECT_TRUE(SlowNodeCondition(cluster, victim).empty());

  // The leader fails over: op-b restores the memory from the Nodes.
  cluster.Operator("op-a")->Signal(SIGKILL);
  cluster.Operator("op-a")->Wait(std::chrono::seconds(5));
  ASSERT_EQ(Str(cluster.WaitForLeader("op-b"), {"spec", "holderIdentity"}), "op-b");

  // Job two runs a worker on the same node: two jobs now say it is slow. One
  // other node is cordoned while its four workers are placed (one on each of
  // the other four, the slow one among them) and uncordoned once they are:
  // the spare that antdt-nd restarts onto.
  std::string spare;
  for (int i = 0; i < 5 && spare.empty(); ++i) {
    if (cluster.NodeName(i) != victim) spare = cluster.NodeName(i);
  }
  int kubectl_rc = -1;
  const std::string cordoned = cluster.Kubectl("cordon " + spare, &kubectl_rc);
  ASSERT_EQ(kubectl_rc, 0) << cordoned;
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spread("second")));
  std::string on_victim;  // job two's worker first placed on the slow node
  ASSERT_TRUE(WaitFor(
      [&] {
        int placed = 0;
        for (const Json& p : cluster.Pods("second")) {
          if (Str(p, {"metadata", "labels", "antdt.io/role"}) != "worker") continue;
          const std::string node = Str(p, {"spec", "nodeName"});
          placed += !node.empty();
          if (node == victim) on_victim = Str(p, {"metadata", "labels", "antdt.io/worker-id"});
        }
        return placed == 4;
      },
      std::chrono::seconds(60)));
  const std::string uncordoned = cluster.Kubectl("uncordon " + spare, &kubectl_rc);
  ASSERT_EQ(kubectl_rc, 0) << uncordoned;
  Json cond;
  ASSERT_TRUE(WaitFor(
      [&] {
        cond = SlowNodeCondition(cluster, victim);
        return cond.value("status", "") == "True";
      },
      std::chrono::seconds(180)))
      << "no AntDTSlowNode on " << victim << "; op-b's log:\n"
      << [&] {
           std::ifstream in(cluster.File("op-b.log"));
           return std::string(std::istreambuf_iterator<char>(in), {});
         }();
  // The cause the victim's agent measured: its cgroup throttled.
  if (real_quota) {
    EXPECT_EQ(cond.value("reason", ""), "CPUThrottling") << cond.dump();
  } else {
    EXPECT_NE(cond.value("reason", ""), "");
  }
  const std::string message = cond.value("message", "");
  EXPECT_NE(message.find("slower than its peers in 2 recent jobs"), std::string::npos) << message;
  for (int i = 0; i < 5; ++i) {
    if (cluster.NodeName(i) != victim) {
      EXPECT_TRUE(SlowNodeCondition(cluster, cluster.NodeName(i)).empty()) << cluster.NodeName(i);
    }
  }
  EXPECT_NE(cluster.Kubectl("describe node " + victim).find("AntDTSlowNode"), std::string::npos);
  // With --node-taint: the marked node carries the PreferNoSchedule taint.
  EXPECT_TRUE(WaitFor([&] { return SlowNodeTaint(cluster, victim) == "PreferNoSchedule"; },
                      std::chrono::seconds(30)))
      << cluster.Kubectl("get node " + victim + " -o jsonpath={.spec.taints}");
  EXPECT_NE(cluster.Kubectl("get events -n default --field-selector involvedObject.name=" + victim)
                .find("AntDTSlowNode"),
            std::string::npos);

  // Its worker on the slow node was restarted off it, and the scheduler put
  // it elsewhere: sized down first as slower hardware (slow from its first
  // window), then, once the node was marked, moved (antdt-nd by expected
  // duration: a chronically slow node's slowdown lasts the rest of the job).
  // The restarts off the node are read from the job's record as they happen
  // (it keeps the newest 20 actions, and resizes follow).
  ASSERT_FALSE(on_victim.empty()) << "no worker of job two was placed on " << victim;
  std::map<std::string, Json> restarts;  // KILL_RESTARTs off the slow node, by time and worker
  std::string moved_to;
  WaitFor(
      [&] {
        const Json job = cluster.GetJob("second");
        for (const Json& a : kube::At(job, {"status", "lastActions"})) {
          if (a.value("action", "") == "KILL_RESTART" && a.value("fromNode", "") == victim) {
            restarts[a.value("time", "") + " " + a.value("worker", "")] = a;
          }
        }
        for (const Json& p : cluster.Pods("second")) {
          if (Str(p, {"metadata", "labels", "antdt.io/worker-id"}) == on_victim &&
              Str(p, {"metadata", "labels", "antdt.io/incarnation"}) != "0") {
            moved_to = Str(p, {"spec", "nodeName"});
          }
        }
        return (!moved_to.empty() && !restarts.empty()) || Finished(job);
      },
      std::chrono::seconds(240));
  Json second;
  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "second", kRecords, &second));
  EXPECT_FALSE(moved_to.empty()) << on_victim << " of job two was never restarted off " << victim
                                 << " (marked at " << cond.value("lastTransitionTime", "")
                                 << "): " << second["status"].dump(2);
  EXPECT_NE(moved_to, victim);
  std::printf("job two: %s restarted off %s onto %s (spare %s); the node marked at %s\n",
              on_victim.c_str(), victim.c_str(), moved_to.c_str(), spare.c_str(),
              cond.value("lastTransitionTime", "").c_str());
  // Once the node was marked, the restart's record names it. (A restart
  // decided before the mark, in the same job whose records then marked it,
  // avoided no marked node: the two times are to the second, so only one in a
  // later second must name it.)
  const std::string marked_at = cond.value("lastTransitionTime", "");
  EXPECT_FALSE(restarts.empty()) << "no KILL_RESTART off " << victim << " in job two's record";
  for (const auto& [key, a] : restarts) {
    std::printf("  KILL_RESTART of %s at %s: avoidedNodes %s, %s\n", a.value("worker", "").c_str(),
                a.value("time", "").c_str(), a.value("avoidedNodes", Json::array()).dump().c_str(),
                a.value("reason", "").c_str());
    if (a.value("time", "") > marked_at) {
      EXPECT_EQ(a["avoidedNodes"], Json::array({victim})) << a.dump() << " marked at " << marked_at;
    }
    const std::string worker = a.value("worker", "");
    for (const Json& p : cluster.Pods("second")) {
      if (Str(p, {"metadata", "labels", "antdt.io/worker-id"}) == worker &&
          Str(p, {"metadata", "labels", "antdt.io/incarnation"}) != "0") {
        EXPECT_NE(Str(p, {"spec", "nodeName"}), victim);
      }
    }
  }
  slow_down(victim, false);

  // A new job while the node is marked: its three workers carry the preferred
  // affinity away from it, and the scheduler places none there.
  Json third = spread("third");
  third["spec"]["workers"]["replicas"] = 3;
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(third));
  std::set<std::string> placed;
  ASSERT_TRUE(WaitFor(
      [&] {
        placed.clear();
        for (const Json& p : cluster.Pods("third")) {
          if (Str(p, {"metadata", "labels", "antdt.io/role"}) != "worker") continue;
          const std::string node = Str(p, {"spec", "nodeName"});
          if (node.empty()) return false;
          placed.insert(node);
          const std::string affinity =
              kube::At(p, {"spec", "affinity", "nodeAffinity",
                           "preferredDuringSchedulingIgnoredDuringExecution"})
                  .dump();
          EXPECT_NE(affinity.find("\"NotIn\",\"values\":[\"" + victim + "\"]"), std::string::npos)
              << affinity;
        }
        return placed.size() == 3;
      },
      std::chrono::seconds(60)));
  EXPECT_EQ(placed.count(victim), 0u) << "a worker of the third job was placed on " << victim;

  // The memory decays: the condition turns False, saying why.
  ASSERT_TRUE(
      WaitFor([&] { return SlowNodeCondition(cluster, victim).value("status", "") == "False"; },
              std::chrono::seconds(200)));
  EXPECT_EQ(SlowNodeCondition(cluster, victim).value("reason", ""), "MemoryDecayed");
  EXPECT_TRUE(
      WaitFor([&] { return SlowNodeTaint(cluster, victim).empty(); }, std::chrono::seconds(30)))
      << "the taint outlived the mark: "
      << cluster.Kubectl("get node " + victim + " -o jsonpath={.spec.taints}");
  EXPECT_NE(cluster.OperatorMetrics("op-b").find("antdt_node_slow_score{node=\"" + victim + "\"}"),
            std::string::npos);
  // No healthy node was ever marked: no condition now, no Event of one then.
  for (int i = 0; i < 5; ++i) {
    const std::string node = cluster.NodeName(i);
    if (node == victim) continue;
    EXPECT_TRUE(SlowNodeCondition(cluster, node).empty()) << node;
    EXPECT_EQ(SlowNodeTaint(cluster, node), "") << node;
    EXPECT_EQ(cluster.Kubectl("get events -n default --field-selector involvedObject.name=" + node)
                  .find("AntDTSlowNode"),
              std::string::npos)
        << node;
  }
}

TEST(OperatorE2E, StandbyTakesOverWhenTheLeaderIsKilled) {
  Cluster cluster(5);
  ASSERT_NO_FATAL_FAILURE(cluster.StartTwoReplicas());
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(cluster.ExampleJob("ha", 24000, 2)));
  ASSERT_TRUE(WaitFor(
      [&] {
        const Json j = cluster.GetJob("ha");
        return Condition(j, "Running") == "True" &&
               j["status"]["progress"].value("recordsCommitted", int64_t{0}) > 0;
      },
      std::chrono::seconds(120)));
  // Only the leader acts: the standby reports itself as not leading, and has
  // taken no agent's stream.
  const std::string standby = cluster.OperatorMetrics("op-b");
  EXPECT_NE(standby.find("leader_election_master_status{name=\"antdt-operator\"} 0"),
            std::string::npos);
  EXPECT_EQ(MetricValue(standby, "antdt_monitor_agent_streams_total"), 0) << standby;

  const auto killed_at = std::chrono::steady_clock::now();
  cluster.Operator("op-a")->Signal(SIGKILL);
  cluster.Operator("op-a")->Wait(std::chrono::seconds(5));
  const Json lease = cluster.WaitForLeader("op-b");
  ASSERT_EQ(Str(lease, {"spec", "holderIdentity"}), "op-b");
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  // Within the lease (4 s) plus a retry period and scheduling slack; reported,
  // not asserted tightly (shared machines).
  std::printf("standby took over after %.1f s (lease 4 s)\n", took);
  EXPECT_LT(took, 4.0 + 10.0);
  EXPECT_GE(lease["spec"].value("leaseTransitions", 0), 1);
  // The agents reach the new leader (the next address they know), which sends
  // each running worker its committed local batch: a second time, the first
  // having come from op-a when the worker started.
  EXPECT_TRUE(WaitFor(
      [&] {
        return MetricValue(cluster.OperatorMetrics("op-b"), "antdt_monitor_agent_streams_total") >
               0;
      },
      std::chrono::seconds(30)));
  const std::string resync = "reason=\"the committed local batch";
  std::string logs;
  const bool resynced = WaitFor(
      [&] {
        logs.clear();
        int workers = 0, got = 0;
        for (const Json& p : cluster.Pods("ha")) {
          if (Str(p, {"metadata", "labels", "antdt.io/role"}) != "worker") continue;
          if (Str(p, {"status", "phase"}) != "Running") continue;
          ++workers;
          const std::string log = cluster.PodLog(p);
          size_t count = 0;
          for (size_t at = log.find(resync); at != std::string::npos;
               at = log.find(resync, at + 1)) {
            ++count;
          }
          got += count >= 2;
          logs += log.substr(log.size() > 1500 ? log.size() - 1500 : 0);
        }
        return workers > 0 && got == workers;
      },
      std::chrono::seconds(60));
  const Json now = cluster.GetJob("ha");
  if (!Finished(now)) {
    EXPECT_TRUE(resynced) << logs;
  }
  std::printf("resynced after the takeover: %s\n", resynced ? "yes" : "no (finished first)");
  // The new leader drives the job to the end.
  Json job = cluster.WaitJob("ha", Finished, std::chrono::seconds(240));
  EXPECT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
}

// The acting leader is SIGKILLed while a straggler is being handled: its
// node turned slow, the Monitor named it, no decision taken yet. The standby
// takes over, re-detects it and acts within two Monitor windows of taking
// over (the figure is printed); the straggler is restarted once for the one
// decision, and the job finishes exactly once.
TEST(OperatorE2E, ANewLeaderActsOnAStragglerTheOldOneWasHandling) {
  Cluster cluster(5);
  ASSERT_NO_FATAL_FAILURE(cluster.StartTwoReplicas());
  const int64_t records = 40000;
  Json spec = cluster.ExampleJob("failover", records, 3);
  UseNdPolicyWithShortWindows(spec);
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  std::string victim_node;
  Json job = cluster.WaitJob(
      "failover",
      [&](const Json& j) {
        if (Condition(j, "Running") != "True") return false;
        const Json pod = cluster.Pod("failover-worker-1");
        if (Str(pod, {"status", "phase"}) == "Running")
          victim_node = Str(pod, {"spec", "nodeName"});
        return !victim_node.empty();
      },
      std::chrono::seconds(120));
  ASSERT_FALSE(victim_node.empty()) << job.dump(2);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // past the Monitor's warm-up
  cluster.WriteSpeed(victim_node, 0.25);

  // op-a names the straggler: it is being handled. Kill op-a now.
  job = cluster.WaitJob(
      "failover",
      [](const Json& j) {
        for (const Json& s : j["status"]["stragglers"]) {
          if (s.value("worker", "") == "worker-1") return true;
        }
        return Finished(j);
      },
      std::chrono::seconds(120));
  ASSERT_FALSE(Finished(job)) << "finished before the straggler was named";
  ExpectStatusAgreesWithMetrics(cluster, "failover", "worker-1");
  job = cluster.GetJob("failover");
  const size_t actions_before = job["status"]["lastActions"].size();
  cluster.Operator("op-a")->Signal(SIGKILL);
  cluster.Operator("op-a")->Wait(std::chrono::seconds(5));
  ASSERT_EQ(Str(cluster.WaitForLeader("op-b"), {"spec", "holderIdentity"}), "op-b");
  const auto took_over = std::chrono::steady_clock::now();

  // op-b's first decision for worker-1, timed from the takeover.
  Json action;
  ASSERT_TRUE(WaitFor(
      [&] {
        job = cluster.GetJob("failover");
        const Json& actions = job["status"]["lastActions"];
        for (size_t i = actions_before; i < actions.size(); ++i) {
          if (actions[i].value("worker", "") == "worker-1") {
            action = actions[i];
            return true;
          }
        }
        return Finished(job);
      },
      std::chrono::seconds(120)));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - took_over).count();
  ASSERT_FALSE(action.is_null()) << job["status"].dump(2);
  std::printf("new leader acted %.2f s after taking over (%.1f Monitor windows of 1 s): %s %s\n",
              seconds, seconds / 1.0, action.value("action", "").c_str(),
              action.value("rule", "").c_str());
  // Agents that kept their growing backoff through the election (it reaches
  // MonitorLinkOptions::max_backoff_ms, 5 s, in the lease's 15 s) would reach
  // the new leader up to 5 s late, and it would act up to 7 s after taking
  // over; these retry a refusing standby every 200 ms, and the new leader acts
  // within two windows (0.5 to 1 s here with the agents' buffered reports, 3.1 s
  // once in CI on a loaded machine). The bound leaves a loaded machine its
  // slack and still catches most such delays.
  EXPECT_LT(seconds, 5.0) << action.dump();

  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "failover", records, &job));
  // One incarnation per decision to restart: no decision carried out twice.
  int restart_decisions = 0;
  for (const Json& a : job["status"]["lastActions"]) {
    restart_decisions +=
        a.value("action", "") == "KILL_RESTART" && a.value("worker", "") == "worker-1";
  }
  for (const Json& w : job["status"]["workerInstances"]) {
    if (w.value("id", "") == "worker-1") {
      EXPECT_EQ(w.value("incarnation", 0), restart_decisions) << job["status"].dump(2);
    }
  }
}

// The value of containers[0].env `name` in a pod as the operator rendered it.
std::string EnvOf(const Json& pod, const std::string& name) {
  for (const Json& e : pod["spec"]["containers"][0]["env"]) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return "<unset>";
}

// Why this machine cannot run the PyTorch example, or "" when it can.
std::string PytorchMissing() {
  if (!fs::exists(SourcePath("examples/pytorch/train.py"))) {
    return "examples/pytorch/train.py is missing (the PyTorch trainer)";
  }
  const std::string sdk = BinPath("../python/antdt/torch/__init__.py");
  if (!fs::exists(sdk)) return sdk + " is missing: build target antdt_python";
  std::string out;
  if (RunCommand("/usr/bin/python3 -c 'import torch'", &out) != 0) {
    return "/usr/bin/python3 cannot import torch (Debian's python3-torch): " + out;
  }
  return "";
}

// The job's worker pods by worker id, each its latest incarnation.
std::map<std::string, Json> LatestWorkerPods(const std::vector<Json>& pods) {
  std::map<std::string, Json> latest;
  const auto incarnation = [](const Json& p) {
    return std::stoi("0" + Str(p, {"metadata", "labels", "antdt.io/incarnation"}));
  };
  for (const Json& p : pods) {
    if (Str(p, {"metadata", "labels", "antdt.io/role"}) != "worker") continue;
    Json& slot = latest[Str(p, {"metadata", "labels", "antdt.io/worker-id"})];
    if (slot.is_null() || incarnation(p) > incarnation(slot)) slot = p;
  }
  return latest;
}

// examples/k8s/pytorch.yaml as a user applies it: 2 ranks of PyTorch DDP over
// the rendezvous the operator gives (worker-0's stable DNS name), no
// parameter servers, every record committed exactly once.
TEST(OperatorE2E, PytorchJobWithoutParameterServersCommitsEveryRecordOnce) {
  const std::string missing = PytorchMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const Json spec = cluster.Example("examples/k8s/pytorch.yaml");
  const std::string name = Str(spec, {"metadata", "name"});
  const int64_t records = spec["spec"]["dataset"]["records"].get<int64_t>();
  const int workers = spec["spec"]["workers"]["replicas"].get<int>();
  ASSERT_FALSE(spec["spec"].contains("parameterServers"));
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));

  Json job;
  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, name, records, &job));
  EXPECT_EQ(job["status"]["parameterServers"].value("desired", -1), 0);

  // No parameter server; the workers' headless Service on MASTER_PORT.
  std::set<std::string> services;
  for (const Json& svc : cluster.Services(name)) services.insert(Str(svc, {"metadata", "name"}));
  EXPECT_EQ(services, (std::set<std::string>{name + "-sharding", name + "-workers"}));
  for (const Json& p : cluster.Pods(name)) {
    EXPECT_NE(Str(p, {"metadata", "labels", "antdt.io/role"}), "ps")
        << Str(p, {"metadata", "name"});
  }
  std::map<std::string, Json> worker_pods = LatestWorkerPods(cluster.Pods(name));
  ASSERT_EQ(worker_pods.size(), static_cast<size_t>(workers));

  // The rendezvous, as Kubeflow's PyTorchJob gives it; MASTER_ADDR resolved to
  // worker-0's pod.
  const std::string master =
      absl::StrCat(name, "-worker-0.", name, "-workers.", cluster.ns(), ".svc");
  const std::string master_ip = Str(worker_pods["worker-0"], {"status", "podIP"});
  for (int i = 0; i < workers; ++i) {
    const Json& pod = worker_pods[absl::StrCat("worker-", i)];
    SCOPED_TRACE(Str(pod, {"metadata", "name"}));
    EXPECT_EQ(Str(pod, {"spec", "hostname"}), absl::StrCat(name, "-worker-", i));
    EXPECT_EQ(Str(pod, {"spec", "subdomain"}), name + "-workers");
    EXPECT_EQ(EnvOf(pod, "MASTER_ADDR"), master);
    EXPECT_EQ(EnvOf(pod, "MASTER_PORT"), std::to_string(cluster.master_port()));
    EXPECT_EQ(EnvOf(pod, "RANK"), std::to_string(i));
    EXPECT_EQ(EnvOf(pod, "WORLD_SIZE"), std::to_string(workers));
    EXPECT_EQ(EnvOf(pod, "LOCAL_RANK"), "0");
    const Json started = cluster.Cmdline(pod);
    ASSERT_TRUE(started.is_object()) << "no cmdline.json";
    EXPECT_EQ(started["env"].value("MASTER_ADDR", ""), master_ip);
    EXPECT_EQ(started["env"].value("ANTDT_JOURNAL", ""),
              absl::StrCat(cluster.StateDir(name), "/journals/worker-", i, ".journal"));
  }

  // Rank 0 logged the loss.
  const std::string loss_log = cluster.StateDir(name) + "/loss/worker-0.jsonl";
  EXPECT_GT(fs::exists(loss_log) ? fs::file_size(loss_log) : 0, 0u) << loss_log;
}

size_t LineCount(const std::string& file) {
  std::ifstream in(file);
  return std::count(std::istreambuf_iterator<char>(in), {}, '\n');
}

// The PyTorch example with 3 ranks and more data; a rank's container is
// SIGKILLed mid-epoch (a crash, an OOM kill): the operator starts its next
// incarnation, the survivors form the process group again with it and keep
// their processes, and still every record is committed exactly once.
TEST(OperatorE2E, PytorchRankSigkilledMidEpochRegroupsAndCommitsOnce) {
  const std::string missing = PytorchMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  Json spec = cluster.Example("examples/k8s/pytorch.yaml");
  const std::string name = Str(spec, {"metadata", "name"});
  const int64_t records = 24576;  // 384 steps of 64: time to kill a rank in the middle
  spec["spec"]["dataset"]["records"] = records;
  spec["spec"]["workers"]["replicas"] = 3;
  spec["spec"]["stragglerPolicy"] = {{"name", "none"}};  // the one restart is the kill's
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));

  // Once rank 0 has taken 20 steps, worker-1's container process is killed.
  // Not worker-0's: the test kubelet resolves MASTER_ADDR once, when a
  // container starts, so the survivors would not find a worker-0 restarted
  // with a new IP (a real cluster's DNS answers at each connect).
  const std::string victim = name + "-worker-1";  // incarnation 0 here
  const std::string loss_log = cluster.StateDir(name) + "/loss/worker-0.jsonl";
  Json pod;
  int pid = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = cluster.api()->Get(kube::PodsResource(), cluster.ns(), victim);
        if (p.ok()) pod = *p;
        pid = cluster.ContainerPid(victim);
        return p.ok() && pid > 0 && LineCount(loss_log) >= 20;
      },
      std::chrono::seconds(180)))
      << "pid " << pid << ", " << LineCount(loss_log) << " steps";
  // That pid is the container (its cwd the pod's sandbox), not a reused one.
  ASSERT_TRUE(fs::equivalent(absl::StrCat("/proc/", pid, "/cwd"), cluster.Sandbox(pod)));
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  Json job;
  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, name, records, &job));
  // The failure, as `kubectl get events` shows it.
  bool event = false;
  for (const Json& e : cluster.Events()) {
    event =
        event || (e.value("reason", "") == "WorkerFailed" &&
                  e.value("message", "").find("restarting as incarnation 1") != std::string::npos);
  }
  EXPECT_TRUE(event);
  // worker-1's next incarnation finished the job with the others' first: they
  // formed the group again with it once (their final Summary), it never had to.
  std::map<std::string, Json> worker_pods = LatestWorkerPods(cluster.Pods(name));
  ASSERT_EQ(worker_pods.size(), 3u);
  EXPECT_EQ(Str(worker_pods["worker-1"], {"metadata", "name"}), name + "-worker-1");  // stable
  for (const auto& [id, p] : worker_pods) {
    SCOPED_TRACE(Str(p, {"metadata", "name"}));
    const bool restarted = id == "worker-1";
    EXPECT_EQ(Str(p, {"metadata", "labels", "antdt.io/incarnation"}), restarted ? "1" : "0");
    EXPECT_EQ(Str(p, {"status", "phase"}), "Succeeded");
    const std::string log = cluster.PodLog(p);
    EXPECT_NE(log.find(restarted ? "regroups=0," : "regroups=1,"), std::string::npos)
        << log.substr(log.size() > 2000 ? log.size() - 2000 : 0);
  }
}

}  // namespace
// A PyTorch DDP job (no parameter servers) scaled from 2 ranks to 3 once rank
// 0 has taken 20 steps: both ranks begin their next incarnation with
// WORLD_SIZE=3 (not counted as restarts), worker-2 joins them, the group forms
// once, and the job finishes with every record committed exactly once.
TEST(OperatorE2E, PytorchJobScaledUpRestartsItsRanksWithTheNewWorldSize) {
  const std::string missing = PytorchMissing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  Json spec = cluster.Example("examples/k8s/pytorch.yaml");
  const std::string name = Str(spec, {"metadata", "name"});
  const int64_t records = 24576;
  spec["spec"]["dataset"]["records"] = records;
  spec["spec"]["stragglerPolicy"] = {{"name", "none"}};
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  const std::string loss_log = cluster.StateDir(name) + "/loss/worker-0.jsonl";
  ASSERT_TRUE(WaitFor([&] { return LineCount(loss_log) >= 20; }, std::chrono::seconds(180)))
      << LineCount(loss_log) << " steps";
  int rc = 0;
  const std::string out = cluster.Kubectl("scale adt " + name + " --replicas=3", &rc);
  ASSERT_EQ(rc, 0) << out;

  Json job;
  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, name, records, &job));
  EXPECT_EQ(job["status"]["workers"].value("restarts", -1), 0) << "scaling is no restart";
  EXPECT_EQ(BatchSum(job), spec["spec"]["model"].value("globalBatchSize", int64_t{0}));
  EXPECT_TRUE(cluster.WaitForEvent("Scaled"));
  std::map<std::string, Json> worker_pods = LatestWorkerPods(cluster.Pods(name));
  ASSERT_EQ(worker_pods.size(), 3u);
  for (const auto& [id, p] : worker_pods) {
    SCOPED_TRACE(Str(p, {"metadata", "name"}));
    EXPECT_EQ(Str(p, {"metadata", "labels", "antdt.io/incarnation"}), id == "worker-2" ? "0" : "1");
    EXPECT_EQ(EnvOf(p, "WORLD_SIZE"), "3");
    EXPECT_EQ(Str(p, {"status", "phase"}), "Succeeded");
  }
}

// Per-job credentials on the emulated cluster: the operator keeps its key in a
// Secret of its namespace and gives the job a Secret of its own (owned by it);
// the sharding service and the workers read it as ANTDT_TOKEN (no value in any
// pod spec). Calls to the job's sharding service without it are refused
// UNAUTHENTICATED, with another token PERMISSION_DENIED; with it they pass, and
// the job trains every record exactly once.
TEST(OperatorE2E, EachJobsShardingServiceRefusesCallsWithoutItsCredential) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const int64_t records = 8000;
  Json job;
  ASSERT_NO_FATAL_FAILURE(job = cluster.ApplyRunningJob("auth", records, 2));
  const std::string uid = Str(job, {"metadata", "uid"});
  auto key = cluster.api()->Get(kube::SecretsResource(), cluster.ns(), "antdt-operator-key");
  ASSERT_TRUE(key.ok()) << key.status();
  auto secret = cluster.api()->Get(kube::SecretsResource(), cluster.ns(), "auth-token-" + uid);
  ASSERT_TRUE(secret.ok()) << secret.status();
  EXPECT_EQ((*secret)["metadata"]["ownerReferences"][0].value("uid", ""), uid);
  std::string token;
  ASSERT_TRUE(absl::Base64Unescape(Str(*secret, {"data", "token"}), &token));
  ASSERT_GE(token.size(), 32u);

  std::string sharding_ip, ps_ip;
  for (const Json& p : cluster.Pods("auth")) {
    EXPECT_EQ(p.dump().find(token), std::string::npos) << "a token in the spec of " << p.dump();
    const std::string role = Str(p, {"metadata", "labels", "antdt.io/role"});
    if (role == "sharding") sharding_ip = Str(p, {"status", "podIP"});
    if (role == "ps") ps_ip = Str(p, {"status", "podIP"});
    if (role == "sharding" || role == "worker" || role == "ps") {
      EXPECT_EQ(cluster.Cmdline(p)["env"].value("ANTDT_TOKEN", ""), token)
          << Str(p, {"metadata", "name"});
    }
  }
  ASSERT_FALSE(sharding_ip.empty());
  auto stub = v1::ShardingService::NewStub(
      grpc::CreateChannel(sharding_ip + ":50051", grpc::InsecureChannelCredentials()));
  auto progress = [&](const std::string& credential) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!credential.empty()) ctx.AddMetadata("authorization", "Bearer " + credential);
    v1::GetProgressRequest req;
    req.mutable_dataset()->set_job("auth");
    req.mutable_dataset()->set_name("train");
    v1::GetProgressResponse resp;
    return stub->GetProgress(&ctx, req, &resp);
  };
  EXPECT_EQ(progress("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(progress(std::string(token.size(), 'x')).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const grpc::Status owner = progress(token);
  EXPECT_TRUE(owner.ok()) << owner.error_message();
  {
    grpc::ClientContext ctx;
    v1::ReleaseWorkerRequest req;
    req.mutable_dataset()->set_job("auth");
    req.set_worker_id("worker-0");
    req.set_incarnation(-1);
    v1::ReleaseWorkerResponse resp;
    EXPECT_EQ(stub->ReleaseWorker(&ctx, req, &resp).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }

  // The parameter server refuses a call without the job's credential too: a
  // pod of another job cannot push gradients into this job's model.
  ASSERT_FALSE(ps_ip.empty());
  {
    auto ps = v1::ParameterServer::NewStub(
        grpc::CreateChannel(ps_ip + ":50052", grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::PushGradientRequest req;
    req.set_worker_id("worker-0");
    v1::PushGradientResponse resp;
    EXPECT_EQ(ps->PushGradient(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }

  // A forged slow step report for worker-0, sent to its node's agent without
  // the job's credential, or with another: the agent (told the job's
  // credential digest by the Monitor) refuses it and hands out no directive.
  const std::string agent_address =
      cluster.Cmdline(cluster.Pod("auth-worker-0"))["env"].value("ANTDT_AGENT_ADDR", "");
  ASSERT_FALSE(agent_address.empty());
  auto agent =
      v1::Agent::NewStub(grpc::CreateChannel(agent_address, grpc::InsecureChannelCredentials()));
  for (const std::string& credential : {std::string(), std::string(token.size(), 'x')}) {
    grpc::ClientContext ctx;
    if (!credential.empty()) ctx.AddMetadata("authorization", "Bearer " + credential);
    v1::ReportStepRequest req;
    v1::StepReport* step = req.mutable_step();
    step->set_job("auth");
    step->set_namespace_(cluster.ns());
    step->set_worker_id("worker-0");
    step->set_role("worker");
    step->set_step(1'000'000);
    step->set_samples(1);
    step->set_bpt_seconds(60);
    v1::ReportStepResponse resp;
    EXPECT_EQ(agent->ReportStep(&ctx, req, &resp).error_code(),
              credential.empty() ? grpc::StatusCode::UNAUTHENTICATED
                                 : grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(resp.directives_size(), 0);
  }

  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "auth", records, &job));
}

// The sharding service's pod is deleted mid-epoch (an eviction, a node
// drain): the operator creates it again, the service recovers the job's state
// from spec.checkpoint.path, the workers ride out the restart, and the job
// finishes with every record committed exactly once.
TEST(OperatorE2E, ShardingPodDeletedMidEpochRecoversAndCommitsOnce) {
  Cluster cluster(4);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const int64_t records = 16000;
  Json job;
  ASSERT_NO_FATAL_FAILURE(job = cluster.ApplyRunningJob("evict", records, 3));
  const std::string uid = Str(cluster.Pod("evict-sharding"), {"metadata", "uid"});
  ASSERT_FALSE(uid.empty());
  int rc = 0;
  const std::string out = cluster.Kubectl("delete pod evict-sharding --wait=false", &rc);
  ASSERT_EQ(rc, 0) << out;
  const int64_t at =
      cluster.GetJob("evict")["status"]["progress"].value("recordsCommitted", int64_t{0});
  std::cerr << "sharding pod deleted at " << at << " of " << records << " records\n";
  // A new pod of the same name (another UID) serves the job again.
  ASSERT_TRUE(WaitFor(
      [&] {
        const Json p = cluster.Pod("evict-sharding");
        return Str(p, {"metadata", "uid"}) != uid && Str(p, {"status", "phase"}) == "Running";
      },
      std::chrono::seconds(60)));
  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "evict", records, &job));
  EXPECT_LT(at, records) << "deleted too late to show anything";
  EXPECT_EQ(job["status"]["workers"].value("failed", -1), 0) << "the workers rode it out:\n"
                                                             << cluster.UnstructuredPodLogLines();
}

// With ephemeral storage the sharding service's state lives in its pod:
// deleted mid-epoch, it comes back empty. The job fails, saying so and what
// keeps the state (Failed, ShardingStateLost, an Event), instead of training
// committed records a second time or failing its workers one by one.
TEST(OperatorE2E, ShardingStateLostWithEphemeralStorageFailsTheJobSayingWhy) {
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  Json spec = cluster.ExampleJob("nockpt", 40000, 2);
  spec["spec"].erase("checkpoint");
  spec["spec"]["shardingService"]["storage"] = {{"ephemeral", true}};
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  Json job = cluster.WaitJob(
      "nockpt",
      [](const Json& j) {
        return Condition(j, "Running") == "True" &&
               j["status"]["progress"].value("recordsCommitted", int64_t{0}) > 0;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(Condition(job, "Running"), "True") << job.dump(2);
  int rc = 0;
  const std::string out = cluster.Kubectl("delete pod nockpt-sharding --wait=false", &rc);
  ASSERT_EQ(rc, 0) << out;
  job = cluster.WaitJob(
      "nockpt", [](const Json& j) { return Finished(j); }, std::chrono::seconds(120));
  ASSERT_EQ(Condition(job, "Failed"), "True") << job.dump(2);
  const Json* failed = reconciler::FindCondition(job["status"], "Failed");
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(Str(*failed, {"reason"}), "ShardingStateLost");
  EXPECT_NE(Str(*failed, {"message"}).find("ephemeral"), std::string::npos);
  EXPECT_TRUE(cluster.WaitForEvent("ShardingStateLost"));
  EXPECT_NE(cluster.Kubectl("get adt nockpt").find("Failed"), std::string::npos);
}

// No volume holds the job's checkpoint path: the operator gives the sharding
// service a claim of the job's own (a PersistentVolumeClaim it owns), so the
// service's pod deleted mid-epoch comes back with its state, and the job
// finishes with every record committed once.
TEST(OperatorE2E, ShardingStateOnTheJobsClaimOutlivesItsPod) {
  Cluster cluster(3);
  ASSERT_NO_FATAL_FAILURE(cluster.Start());
  const int64_t records = 16000;
  // No volume of the workers' template holds the checkpoint path.
  Json spec = cluster.ExampleJob("claim", records, 2, /*shared_volume=*/false);
  spec["spec"]["shardingService"]["storage"] = {{"size", "2Gi"}};
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyJob(spec));
  Json job = cluster.WaitJob(
      "claim",
      [](const Json& j) {
        return Condition(j, "Running") == "True" &&
               j["status"]["progress"].value("recordsCommitted", int64_t{0}) > 0;
      },
      std::chrono::seconds(120));
  ASSERT_EQ(Condition(job, "Running"), "True") << job.dump(2);
  const std::string uid = Str(job, {"metadata", "uid"});
  const std::string claim_name = "claim-sharding-state-" + uid;
  int rc = 0;
  const std::string claim = cluster.Kubectl("get pvc " + claim_name + " -o json", &rc);
  ASSERT_EQ(rc, 0) << claim;
  const Json pvc = Json::parse(claim);
  EXPECT_EQ(Str(pvc, {"spec", "resources", "requests", "storage"}), "2Gi");
  EXPECT_EQ(pvc["metadata"]["ownerReferences"][0].value("uid", ""), uid);
  const Json pod = cluster.Pod("claim-sharding");
  EXPECT_EQ(Str(pod["spec"]["volumes"][0], {"persistentVolumeClaim", "claimName"}), claim_name);

  const std::string out = cluster.Kubectl("delete pod claim-sharding --wait=false", &rc);
  ASSERT_EQ(rc, 0) << out;
  const int64_t at =
      cluster.GetJob("claim")["status"]["progress"].value("recordsCommitted", int64_t{0});
  std::cerr << "sharding pod deleted at " << at << " of " << records << " records\n";
  job = cluster.WaitJob("claim", Finished, std::chrono::seconds(300));
  ASSERT_EQ(Condition(job, "Succeeded"), "True") << job.dump(2);
  EXPECT_LT(at, records) << "deleted too late to show anything";
  EXPECT_EQ(job["status"]["progress"].value("recordsCommitted", int64_t{0}), records);
  // Exactly once, by the workers' own journals (on the node: the test
  // kubelet runs the trainer's container as a process of this machine).
  const demo::Verification v = cluster.Verify("claim", records);
  EXPECT_TRUE(v.exactly_once()) << v.Summary();
}

namespace {

// A channel over TLS trusting DIR/ca.crt, checking the name antdt.internal;
// with `identity` (server, node-node-0...) it presents DIR/<identity>.crt.
std::shared_ptr<grpc::Channel> TlsChannel(const std::string& address, const std::string& dir,
                                          const std::string& identity = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = ReadFile(dir + "/ca.crt").value_or("");
  if (!identity.empty()) {
    o.pem_cert_chain = ReadFile(dir + "/" + identity + ".crt").value_or("");
    o.pem_private_key = ReadFile(dir + "/" + identity + ".key").value_or("");
  }
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("antdt.internal");
  return grpc::CreateCustomChannel(address, grpc::SslCredentials(o), args);
}

// An agent's stream to the Monitor whose hello claims `node`: how it ended.
grpc::Status ClaimNode(const std::shared_ptr<grpc::Channel>& channel, const std::string& node) {
  auto stub = v1::Monitor::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub->Stream(&ctx);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node(node);
  stream->Write(hello);
  stream->WritesDone();
  v1::MonitorMessage message;
  while (stream->Read(&message)) {
  }
  return stream->Finish();
}

// GetProgress of the job `job`'s dataset over `channel`, with no credential.
grpc::StatusCode Progress(const std::shared_ptr<grpc::Channel>& channel, const std::string& job) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetProgressRequest req;
  req.mutable_dataset()->set_job(job);
  req.mutable_dataset()->set_name("train");
  v1::GetProgressResponse resp;
  return v1::ShardingService::NewStub(channel)->GetProgress(&ctx, req, &resp).error_code();
}

// TLS on every endpoint of a job and of the control plane: the operator, the
// agents (mutual TLS with node certificates), the sharding service, the
// parameter servers and the workers. The job trains to the end exactly once;
// plaintext clients get nothing; a node stream is taken only from the agent
// whose certificate names that node.
TEST(OperatorE2E, TlsEverywhereTheJobTrainsAndOnlyANodesAgentSpeaksForIt) {
  Cluster cluster(2);
  const std::string tls = cluster.MakeCerts();
  int rc = 0;
  std::string out = cluster.Kubectl("create secret generic antdt-tls --from-file=tls.crt=" + tls +
                                        "/server.crt --from-file=tls.key=" + tls +
                                        "/server.key --from-file=ca.crt=" + tls + "/ca.crt",
                                    &rc);
  ASSERT_EQ(rc, 0) << out;
  ASSERT_NO_FATAL_FAILURE(cluster.ApplyCrd());
  const std::string monitor = cluster.StartOperator(
      "op-a",
      {"--tls-cert", tls + "/server.crt", "--tls-key", tls + "/server.key", "--tls-ca",
       tls + "/ca.crt", "--tls-server-name", "antdt.internal", "--pod-tls-secret", "antdt-tls"});
  ASSERT_FALSE(monitor.empty());
  ASSERT_NO_FATAL_FAILURE(cluster.StartKubelet(monitor, tls));

  const int64_t records = 6000;
  Json job;
  ASSERT_NO_FATAL_FAILURE(job = cluster.ApplyRunningJob("tls", records, 2));
  std::string sharding_ip, ps_ip;
  for (const Json& p : cluster.Pods("tls")) {
    const std::string role = Str(p, {"metadata", "labels", "antdt.io/role"});
    if (role == "sharding") sharding_ip = Str(p, {"status", "podIP"});
    if (role == "ps") ps_ip = Str(p, {"status", "podIP"});
    const Json env = cluster.Cmdline(p)["env"];
    EXPECT_EQ(env.value("ANTDT_TLS_SERVER_NAME", ""), "antdt.internal") << role;
    // The mounted Secret's file, where the container reads it.
    std::ifstream cert(env.value("ANTDT_TLS_CERT", "/nonexistent"));
    EXPECT_TRUE(cert.good()) << role << ": " << env.dump();
  }
  ASSERT_FALSE(sharding_ip.empty());
  ASSERT_FALSE(ps_ip.empty());

  // Plaintext gets nothing from the sharding service, a parameter server or
  // the Monitor; TLS with the cluster's CA is answered (refused for want of
  // the job's credential: the next gate).
  for (const std::string& address : {sharding_ip + ":50051", ps_ip + ":50052", monitor}) {
    EXPECT_EQ(Progress(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), "tls"),
              grpc::StatusCode::UNAVAILABLE)
        << address;
  }
  EXPECT_EQ(Progress(TlsChannel(sharding_ip + ":50051", tls), "tls"),
            grpc::StatusCode::UNAUTHENTICATED);

  // Node streams: without a client certificate, with the server's (it names
  // no node) and with node-1's claiming node-0 are refused; node-0's own
  // certificate is taken (its running agent's stream stays).
  const std::string node0 = cluster.NodeName(0);
  EXPECT_EQ(ClaimNode(TlsChannel(monitor, tls), node0).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(ClaimNode(TlsChannel(monitor, tls, "server"), node0).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ClaimNode(TlsChannel(monitor, tls, "node-" + cluster.NodeName(1)), node0).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  const grpc::Status own = ClaimNode(TlsChannel(monitor, tls, "node-" + node0), node0);
  EXPECT_TRUE(own.ok()) << own.error_message();
  // Metrics over HTTPS only.
  EXPECT_EQ(cluster.OperatorMetrics("op-a"), "");
  const std::string metrics = cluster.OperatorMetrics("op-a", tls + "/ca.crt");
  EXPECT_NE(metrics.find("antdt_monitor_agent_streams_refused_total{reason=\"no_certificate\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("antdt_monitor_agent_streams_refused_total{reason=\"certificate\"} 2"),
            std::string::npos);

  ASSERT_NO_FATAL_FAILURE(ExpectSucceededExactlyOnce(cluster, "tls", records, &job));
  // Both nodes' agents streamed (over mutual TLS), and no key was logged.
  const std::string after = cluster.OperatorMetrics("op-a", tls + "/ca.crt");
  EXPECT_EQ(after.find("antdt_monitor_agent_streams_total 0"), std::string::npos) << after;
  std::ifstream log_in(cluster.File("op-a.log"));
  const std::string log((std::istreambuf_iterator<char>(log_in)), {});
  EXPECT_EQ(log.find("PRIVATE KEY"), std::string::npos);
}

}  // namespace

}  // namespace antdt
