// antdt-operator: reconciles AntDTJobs on a Kubernetes cluster, hosts the
// Monitor that the node agents stream to, and runs each job's straggler
// policy. Several replicas may run; a Lease elects the one that acts.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "backends/kubernetes/client/client.h"
#include "backends/kubernetes/client/config.h"
#include "backends/kubernetes/operator/config.h"
#include "backends/kubernetes/operator/job_controller.h"
#include "backends/kubernetes/operator/node_controller.h"
#include "backends/kubernetes/operator/readiness.h"
#include "backends/kubernetes/runtime/leader_election.h"
#include "backends/metrics/job_metrics.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "services/monitor/monitor_service.h"

namespace {

constexpr const char* kUsage = R"(usage: antdt-operator [flags]
  --kubeconfig FILE           cluster credentials [in-cluster, $KUBECONFIG, ~/.kube/config]
  --namespace NS              watch only this namespace                [all]
  --listen HOST:PORT          the Monitor's gRPC endpoint for agents   [0.0.0.0:9401]
  --metrics-listen HOST:PORT  /metrics and /healthz                     [off]
  --ready-file PATH           written with the bound addresses once serving
  --config FILE               YAML with the same keys (dashes or underscores); flags win
  --leader-elect true|false   elect one acting replica on a Lease      [true]
  --leader-election-namespace NS                                       [the kubeconfig's]
  --leader-election-id NAME   the Lease's name                         [antdt-operator]
  --lease-duration D --renew-deadline D --retry-period D               [15s 10s 2s]
  --identity ID               this replica in the Lease                [hostname_pid]
  --image IMAGE               image of the pods the operator renders   [antdt/antdt:0.1.0]
  --sharding-port N --ps-port N --agent-port N                         [50051 50052 9400]
  --master-port N             the workers' MASTER_PORT (rendezvous)    [29500]
  --gang-scheduler NAME       volcano | scheduler-plugins: a PodGroup per
                              job (min members: servers + workers)     [none]
  --job-credentials true|false
                              a Secret <job>-token per job; its sharding
                              service refuses calls without it          [true]
  --token-key-secret NAME     the Secret (leader-election namespace) holding
                              the key job tokens derive from; created on
                              first start                 [antdt-operator-key]
  --pod-tls-secret NAME       TLS for the jobs' pods: each mounts this Secret
                              of its namespace (tls.crt, tls.key, ca.crt) at
                              /etc/antdt/tls and serves and dials with it;
                              --tls-server-name is the name they verify [off]
  --monitor-window D          the Monitor's window for every job       [10s]
  --monitor-window-steps N    windows of N steps of each job, --monitor-window
                              the first ones' length (0: in time)        [0]
  --node-memory Act|Recommend the cluster's memory of slow nodes, across
                              jobs: Recommend keeps and reports it (the gauge
                              antdt_node_slow_score); Act also publishes it on
                              each Node (condition AntDTSlowNode, annotation
                              antdt.io/node-memory; needs nodes/status patch)
                              and steers new and restarted pods away by a
                              preferred node affinity          [Recommend]
  --node-taint true|false     with Act: a PreferNoSchedule taint
                              antdt.io/slow-node while marked (needs nodes
                              patch)                                 [false]
  --node-memory-half-life D   an episode's weight halves every D        [6h]
  --pod-name NAME --pod-namespace NS
                              this replica's pod: the acting replica labels it
                              antdt.io/leader=true (the Monitor's Service)  [none]
Readiness: gRPC health service "antdt.operator" on --listen (a Kubernetes gRPC
probe): SERVING while the API server answers and, on the acting replica, once
its informers have synced. /healthz (liveness) answers while the process runs.
With leader election a standby's Monitor refuses agent streams (UNAVAILABLE)
until it leads; the leader sends each running worker its committed local
batch once (a directive lost or left undelivered by a dead leader arrives).
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "antdt-operator: %s\n", message.c_str());
  return 2;
}

std::string DefaultIdentity() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "_", getpid());
}

// The configuration from flags and --config, the identity defaulted.
std::optional<antdt::kube_operator::OperatorConfig> LoadOperatorConfig(
    const antdt::ParsedFlags& flags, std::string* error) {
  using namespace antdt;
  auto loaded = LoadConfig<kube_operator::OperatorConfig>(flags, kube_operator::ParseOperatorConfig,
                                                          kube_operator::ApplyOperatorFlags);
  if (!loaded.ok()) {
    *error = std::string(loaded.status().message());
    return std::nullopt;
  }
  if (loaded->identity.empty()) loaded->identity = DefaultIdentity();
  return *loaded;
}

// Kubernetes API requests counted and timed into `registry`.
antdt::kube::ClientOptions ApiClientOptions(const std::string& identity,
                                            prometheus::Registry& registry,
                                            antdt::kube_operator::Readiness* readiness) {
  auto& requests = prometheus::BuildCounter()
                       .Name("antdt_operator_api_requests_total")
                       .Help("Kubernetes API requests by verb, resource and HTTP code")
                       .Register(registry);
  auto& seconds = prometheus::BuildHistogram()
                      .Name("antdt_operator_api_request_duration_seconds")
                      .Help("Kubernetes API request latency (watches: until headers)")
                      .Register(registry);
  antdt::kube::ClientOptions options;
  options.user_agent = "antdt-operator/" + identity;
  options.on_request = [&requests, &seconds, readiness](const std::string& verb,
                                                        const std::string& resource, int code,
                                                        double s) {
    readiness->OnResponse(code);
    requests.Add({{"verb", verb}, {"resource", resource}, {"code", std::to_string(code)}})
        .Increment();
    seconds
        .Add({{"verb", verb}, {"resource", resource}},
             prometheus::Histogram::BucketBoundaries{0.005, 0.025, 0.1, 0.25, 1, 2.5, 10})
        .Observe(s);
  };
  return options;
}

antdt::kube_operator::JobControllerOptions ControllerOptions(
    const antdt::kube_operator::OperatorConfig& config) {
  antdt::kube_operator::JobControllerOptions jo;
  jo.watch_namespace = config.watch_namespace;
  jo.identity = config.identity;
  jo.settings.image = config.image;
  jo.settings.sharding_port = config.sharding_port;
  jo.settings.ps_port = config.ps_port;
  jo.settings.agent_port = config.agent_port;
  jo.settings.master_port = config.master_port;
  jo.settings.gang_scheduler = config.gang_scheduler;
  jo.settings.job_credentials = config.job_credentials;
  jo.settings.pod_tls_secret = config.pod_tls_secret;
  jo.settings.tls_server_name = antdt::ProcessTls().server_name;
  return jo;
}

// The key every job's credential is derived from: data.key of the Secret
// `name` in `ns`, created with a random key on the first start (a replica that
// loses that race reads the winner's). Retried while the API server does not
// answer, for a minute.
absl::StatusOr<std::string> LoadTokenKey(antdt::kube::Api* api, const std::string& ns,
                                         const std::string& name) {
  using namespace antdt;
  const std::string what = absl::StrCat("Secret ", ns, "/", name, " (the key of job credentials)");
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  for (;;) {
    auto got = api->Get(kube::SecretsResource(), ns, name);
    if (got.ok()) {
      std::string key;
      if (!absl::Base64Unescape(kube::StringAt(*got, {"data", "key"}), &key) || key.size() < 16) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": data.key must hold at least 16 bytes, base64-encoded"));
      }
      return key;
    }
    absl::Status error = got.status();
    if (kube::IsNotFound(error)) {
      const std::string key = RandomToken();
      const kube::Json secret = {
          {"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata",
           {{"name", name},
            {"namespace", ns},
            {"labels",
             {{"app.kubernetes.io/name", "antdt"}, {"app.kubernetes.io/component", "operator"}}}}},
          {"type", "Opaque"},
          {"data", {{"key", absl::Base64Escape(key)}}}};
      auto created = api->Create(kube::SecretsResource(), ns, secret);
      if (created.ok()) {
        LogEvent("operator", {{"event", "token_key_created"}, {"secret", ns + "/" + name}});
        return key;
      }
      if (kube::IsAlreadyExists(created.status())) continue;  // another replica's: read it
      error = created.status();
    }
    const bool retry = error.code() == absl::StatusCode::kUnavailable ||
                       error.code() == absl::StatusCode::kDeadlineExceeded;
    if (!retry || std::chrono::steady_clock::now() > give_up) {
      return absl::Status(error.code(),
                          absl::StrCat(what, ": ", error.message(),
                                       " (--job-credentials=false runs without credentials)"));
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// Runs the controller while this replica holds the Lease (or at once without
// leader election), until a termination signal. True when the lease was lost.
bool Act(antdt::kube_operator::JobController& controller,
         antdt::kube_operator::NodeController& nodes, antdt::monitor::MonitorServiceImpl& monitor,
         antdt::kube::Api* api, const antdt::kube_operator::OperatorConfig& config,
         prometheus::Registry* registry, antdt::Serving& serving,
         antdt::kube_operator::Readiness& readiness) {
  using namespace antdt;
  std::atomic<bool> lost{false};
  std::unique_ptr<kube::LeaderElector> elector;
  std::thread election;
  auto mark = [&](bool leading) {
    if (!config.leader_elect) return;
    absl::Status s = kube_operator::MarkLeader(api, config.pod_namespace, config.pod_name, leading);
    if (!s.ok()) {
      LogEvent("operator", {{"event", "leader_label_failed"},
                            {"pod", config.pod_namespace + "/" + config.pod_name},
                            {"leading", leading ? "true" : "false"},
                            {"error", s.ToString()}});
    }
  };
  auto start_controller = [&] {
    LogEvent("operator", {{"event", "leading"}, {"identity", config.identity}});
    readiness.SetActing([&controller] { return controller.HasSynced(); });
    // The node memory first, restored from the Nodes: every job's records
    // fold into it from the job controller's first sync on.
    if (!nodes.Start(30'000)) LogEvent("operator", {{"event", "node_cache_sync_timeout"}});
    if (!controller.Start(30'000)) {
      LogEvent("operator", {{"event", "cache_sync_timeout"}});
    }
    mark(true);  // agents reach this replica's Monitor from now on
    monitor.SetAcceptingAgents(true);
    LogEvent("operator", {{"event", "accepting_agents"}, {"identity", config.identity}});
  };
  mark(false);  // a restarted replica's pod may still carry the mark
  if (config.leader_elect) {
    kube::LeaderElectionConfig le;
    le.lease_namespace = config.leader_election_namespace;
    le.lease_name = config.leader_election_id;
    le.identity = config.identity;
    le.lease_duration_ms = config.lease_duration_ms;
    le.renew_deadline_ms = config.renew_deadline_ms;
    le.retry_period_ms = config.retry_period_ms;
    le.registry = registry;  // leader_election_master_status{name}
    elector = std::make_unique<kube::LeaderElector>(api, le);
    election = std::thread([&] {
      absl::Status s = elector->Run(start_controller, [&] {
        controller.Stop();  // a replica that lost the lease stops acting at once
        nodes.Stop();
        mark(false);
      });
      if (!s.ok()) {
        lost = true;
        LogEvent("operator", {{"event", "leader_election_lost"}, {"error", s.ToString()}});
        kill(getpid(), SIGTERM);
      }
    });
  } else {
    start_controller();
  }
  serving.WaitForSignal();
  LogEvent("operator", {{"event", "stopping"}, {"lost_lease", lost.load() ? "true" : "false"}});
  controller.Stop();
  nodes.Stop();
  if (elector) elector->Stop();
  if (election.joinable()) election.join();
  return lost.load();
}

// Every second: the replica's readiness into the gRPC health service
// ("antdt.operator", what the chart's readiness probe asks) and the gauge
// antdt_operator_ready; each change logged with its reason. When the API server
// has been quiet for half the window, asks it something cheap: this replica's
// own pod (a 404 or 403 is an answer too).
antdt::PeriodicThread ReadinessLoop(antdt::kube_operator::Readiness& readiness,
                                    antdt::kube::Api* api,
                                    const antdt::kube_operator::OperatorConfig& config,
                                    antdt::Serving& serving, prometheus::Registry& registry) {
  using namespace antdt;
  auto& gauge = prometheus::BuildGauge()
                    .Name("antdt_operator_ready")
                    .Help("1 while this replica is ready (API server answering, informers synced)")
                    .Register(registry)
                    .Add({});
  serving.SetServingStatus(kube_operator::kReadinessService, false);
  auto state = std::make_shared<int>(-1);  // last reported: -1 none, 0 unready, 1 ready
  return PeriodicThread(std::chrono::seconds(1), [&readiness, api, &config, &serving, &gauge,
                                                  state] {
    if (readiness.Quiet()) {
      const std::string ns = config.pod_name.empty() ? "" : config.pod_namespace;
      const std::string name = config.pod_name.empty() ? "antdt-readiness-probe" : config.pod_name;
      (void)api->Get(config.pod_name.empty() ? kube::NodesResource() : kube::PodsResource(), ns,
                     name);
    }
    const absl::Status s = readiness.Check();
    serving.SetServingStatus(kube_operator::kReadinessService, s.ok());
    gauge.Set(s.ok() ? 1 : 0);
    if (*state != (s.ok() ? 1 : 0)) {
      *state = s.ok() ? 1 : 0;
      LogEvent("operator", {{"event", s.ok() ? "ready" : "not_ready"},
                            {"reason", s.ok() ? "" : std::string(s.message())}});
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  BlockTerminationSignals();
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandLine(argc, argv, "antdt-operator", kUsage,
                                                            {"kubeconfig",
                                                             "namespace",
                                                             "listen",
                                                             "metrics-listen",
                                                             "ready-file",
                                                             "config",
                                                             "leader-elect",
                                                             "leader-election-namespace",
                                                             "leader-election-id",
                                                             "lease-duration",
                                                             "renew-deadline",
                                                             "retry-period",
                                                             "identity",
                                                             "image",
                                                             "sharding-port",
                                                             "ps-port",
                                                             "agent-port",
                                                             "master-port",
                                                             "monitor-window",
                                                             "monitor-window-steps",
                                                             "pod-name",
                                                             "pod-namespace",
                                                             "gang-scheduler",
                                                             "job-credentials",
                                                             "token-key-secret",
                                                             "pod-tls-secret",
                                                             "node-memory",
                                                             "node-taint",
                                                             "node-memory-half-life"},
                                                            &exit_code);
  if (!flags) return exit_code;
  std::string error;
  std::optional<kube_operator::OperatorConfig> config = LoadOperatorConfig(*flags, &error);
  if (!config) return Fail(error);
  auto cluster = kube::ResolveConfig(config->kubeconfig);
  if (!cluster.ok()) return Fail(std::string(cluster.status().message()));
  if (config->leader_election_namespace.empty()) {
    config->leader_election_namespace = cluster->namespace_;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  // Unready once the API server has been silent for three retry periods (10 s at least).
  kube_operator::Readiness readiness(std::max<int64_t>(10'000, 3 * config->retry_period_ms),
                                     &RealClock::Get());
  auto client =
      kube::Client::Create(*cluster, ApiClientOptions(config->identity, *registry, &readiness));
  if (!client.ok()) return Fail(std::string(client.status().message()));

  manifest::MonitorSpec monitor_spec;  // the manifest's defaults, this window
  monitor_spec.window_ms = config->monitor_window_ms;
  monitor_spec.window_steps = config->monitor_window_steps;
  auto mon = monitor::Monitor::Create(jobconfig::MonitorConfigFor(monitor_spec));
  if (!mon.ok()) return Fail(std::string(mon.status().message()));
  monitor::MonitorServiceImpl monitor_service(std::move(*mon), &RealClock::Get());
  // A standby takes no agent stream until it leads (Act).
  if (config->leader_elect) monitor_service.SetAcceptingAgents(false);
  // With TLS and a CA (common/tls.h), mutual TLS for node streams: an agent
  // speaks only for the node its certificate names.
  monitor_service.RequireNodeCertificates(TlsVerifiesClients());
  auto monitor_collector = monitor_service.Collector();  // the exposer holds it weakly

  auto serving =
      Serving::Start({config->listen, "", config->metrics_listen, registry, {&monitor_service}});
  if (!serving.ok()) return Fail(std::string(serving.status().message()));
  monitor_service.Start(100);
  kube_operator::JobControllerOptions controller_options = ControllerOptions(*config);
  if (config->job_credentials) {
    auto key =
        LoadTokenKey(client->get(), config->leader_election_namespace, config->token_key_secret);
    if (!key.ok()) return Fail(std::string(key.status().message()));
    controller_options.token_key = *std::move(key);
  }
  kube_operator::NodeControllerOptions node_options;
  node_options.mode = config->node_memory_act ? vocab::Mode::kAct : vocab::Mode::kRecommend;
  node_options.taint = config->node_taint;
  node_options.memory.half_life_ms = config->node_memory_half_life_ms;
  node_options.identity = config->identity;
  kube_operator::NodeController nodes(client->get(), node_options, registry.get());
  controller_options.node_controller = &nodes;
  kube_operator::JobController controller(client->get(), &monitor_service, controller_options,
                                          registry.get());
  // The Monitor's series with each job's namespace (the exposer holds it weakly).
  auto monitor_series = metrics::WithNamespaces(
      monitor_collector,
      [&controller](const std::string& job) { return controller.NamespaceOf(job); });
  if (auto* exposer = (*serving)->exposer()) {
    exposer->RegisterCollectable(monitor_series);
  }
  PeriodicThread readiness_loop =
      ReadinessLoop(readiness, client->get(), *config, **serving, *registry);
  if (absl::Status s = (*serving)->WriteReady(config->ready_file); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  LogEvent("operator", {{"event", "serving"},
                        {"monitor", (*serving)->address()},
                        {"metrics", (*serving)->metrics_address()},
                        {"identity", config->identity}});

  const bool lost = Act(controller, nodes, monitor_service, client->get(), *config, registry.get(),
                        **serving, readiness);
  readiness_loop.Stop();
  monitor_service.Stop();
  (*serving)->Shutdown(std::chrono::seconds(1));
  return lost ? 1 : 0;
}
