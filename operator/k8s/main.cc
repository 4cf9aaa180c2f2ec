// antdt-operator: reconciles AntDTJobs on a Kubernetes cluster, hosts the
// Monitor that the node agents stream to, and runs each job's straggler
// policy. Several replicas may run; a Lease elects the one that acts.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/log.h"
#include "common/server.h"
#include "operator/bridge/bridge.h"
#include "operator/k8s/config.h"
#include "operator/k8s/job_controller.h"
#include "operator/kube/client.h"
#include "operator/kube/config.h"
#include "operator/monitor_service/monitor_service.h"
#include "operator/runtime/leader_election.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"

namespace {

constexpr const char* kUsage = R"(usage: antdt-operator [flags]
  --kubeconfig FILE           cluster credentials [in-cluster, $KUBECONFIG, ~/.kube/config]
  --namespace NS              watch only this namespace                [all]
  --listen HOST:PORT          the Monitor's gRPC endpoint for agents   [0.0.0.0:9401]
  --metrics-listen HOST:PORT  /metrics, /healthz, /readyz              [off]
  --ready-file PATH           written with the bound addresses once serving
  --config FILE               YAML with the same keys (dashes or underscores); flags win
  --leader-elect true|false   elect one acting replica on a Lease      [true]
  --leader-election-namespace NS                                       [the kubeconfig's]
  --leader-election-id NAME   the Lease's name                         [antdt-operator]
  --lease-duration D --renew-deadline D --retry-period D               [15s 10s 2s]
  --identity ID               this replica in the Lease                [hostname_pid]
  --image IMAGE               image of the pods the operator renders   [antdt/antdt:0.1.0]
  --sharding-port N --ps-port N --agent-port N                         [50051 50052 9400]
  --monitor-window D          the Monitor's window for every job       [10s]
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

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  BlockTerminationSignals();
  int exit_code = 0;
  const std::optional<ParsedFlags> flags =
      ParseCommandLine(argc, argv, "antdt-operator", kUsage,
                       {"kubeconfig", "namespace", "listen", "metrics-listen", "ready-file",
                        "config", "leader-elect", "leader-election-namespace", "leader-election-id",
                        "lease-duration", "renew-deadline", "retry-period", "identity", "image",
                        "sharding-port", "ps-port", "agent-port", "monitor-window"},
                       &exit_code);
  if (!flags) return exit_code;
  auto loaded =
      LoadConfig<k8s::OperatorConfig>(*flags, k8s::ParseOperatorConfig, k8s::ApplyOperatorFlags);
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  k8s::OperatorConfig config = *loaded;
  if (config.identity.empty()) config.identity = DefaultIdentity();

  auto cluster = kube::ResolveConfig(config.kubeconfig);
  if (!cluster.ok()) return Fail(std::string(cluster.status().message()));
  if (config.leader_election_namespace.empty()) {
    config.leader_election_namespace = cluster->namespace_;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  auto& api_requests = prometheus::BuildCounter()
                           .Name("antdt_operator_api_requests_total")
                           .Help("Kubernetes API requests by verb, resource and HTTP code")
                           .Register(*registry);
  auto& api_seconds = prometheus::BuildHistogram()
                          .Name("antdt_operator_api_request_duration_seconds")
                          .Help("Kubernetes API request latency (watches: until headers)")
                          .Register(*registry);

  kube::ClientOptions client_options;
  client_options.user_agent = "antdt-operator/" + config.identity;
  client_options.on_request = [&](const std::string& verb, const std::string& resource, int code,
                                  double seconds) {
    api_requests.Add({{"verb", verb}, {"resource", resource}, {"code", std::to_string(code)}})
        .Increment();
    api_seconds
        .Add({{"verb", verb}, {"resource", resource}},
             prometheus::Histogram::BucketBoundaries{0.005, 0.025, 0.1, 0.25, 1, 2.5, 10})
        .Observe(seconds);
  };
  auto client = kube::Client::Create(*cluster, client_options);
  if (!client.ok()) return Fail(std::string(client.status().message()));

  manifest::MonitorSpec monitor_spec;  // the manifest's defaults, this window
  monitor_spec.window_ms = config.monitor_window_ms;
  auto mon = monitor::Monitor::Create(bridge::MonitorConfigFor(monitor_spec));
  if (!mon.ok()) return Fail(std::string(mon.status().message()));
  monitor::MonitorServiceImpl monitor_service(std::move(*mon), &RealClock::Get());
  auto monitor_collector = monitor_service.Collector();

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&monitor_service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return Fail("--listen: cannot listen on " + config.listen);
  monitor_service.Start(100);
  const std::string address = BoundAddress(config.listen, port);

  MetricsEndpoint metrics;
  auto readyz = std::make_shared<prometheus::Registry>();
  if (!config.metrics_listen.empty()) {
    auto started = StartMetrics(config.metrics_listen, registry);
    if (!started.ok()) return Fail(std::string(started.status().message()));
    metrics = std::move(*started);
    metrics.exposer->RegisterCollectable(monitor_collector);
  }

  k8s::JobControllerOptions jo;
  jo.watch_namespace = config.watch_namespace;
  jo.identity = config.identity;
  jo.settings.image = config.image;
  jo.settings.sharding_port = config.sharding_port;
  jo.settings.ps_port = config.ps_port;
  jo.settings.agent_port = config.agent_port;
  k8s::JobController controller(client->get(), &monitor_service, jo, registry.get());

  // The API server must answer before the replica calls itself ready.
  auto probe = (*client)->List(kube::NodesResource(), "", kube::ListOptions{});
  if (!probe.ok()) {
    LogEvent("operator", {{"event", "api_unreachable"}, {"error", probe.status().ToString()}});
  }
  if (metrics.exposer) metrics.exposer->RegisterCollectable(readyz, "/readyz");
  if (!config.ready_file.empty()) {
    absl::Status s = WriteReadyFile(config.ready_file, address, metrics.address);
    if (!s.ok()) return Fail(std::string(s.message()));
  }
  LogEvent("operator", {{"event", "serving"},
                        {"monitor", address},
                        {"metrics", metrics.address},
                        {"identity", config.identity}});

  std::atomic<bool> lost{false};
  std::unique_ptr<kube::LeaderElector> elector;
  std::thread election;
  auto start_controller = [&] {
    LogEvent("operator", {{"event", "leading"}, {"identity", config.identity}});
    if (!controller.Start(30'000)) {
      LogEvent("operator", {{"event", "cache_sync_timeout"}});
    }
  };
  if (config.leader_elect) {
    kube::LeaderElectionConfig le;
    le.lease_namespace = config.leader_election_namespace;
    le.lease_name = config.leader_election_id;
    le.identity = config.identity;
    le.lease_duration_ms = config.lease_duration_ms;
    le.renew_deadline_ms = config.renew_deadline_ms;
    le.retry_period_ms = config.retry_period_ms;
    le.registry = registry.get();  // leader_election_master_status{name}
    elector = std::make_unique<kube::LeaderElector>(client->get(), le);
    election = std::thread([&] {
      absl::Status s = elector->Run(start_controller, [&] {
        controller.Stop();  // a replica that lost the lease stops acting at once
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

  WaitForTerminationSignal();
  LogEvent("operator", {{"event", "stopping"}, {"lost_lease", lost.load() ? "true" : "false"}});
  controller.Stop();
  if (elector) elector->Stop();
  if (election.joinable()) election.join();
  monitor_service.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  return lost ? 1 : 0;
}
