// antdt-agent: one per node. Samples the node (CPU, memory, network, PSI,
// cgroups, GPUs through NVML), takes the workers' step reports on a local
// endpoint, streams both to the Monitor, hands the Monitor's directives to the
// workers, and exports everything as Prometheus metrics.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "agent/collectors/collectors.h"
#include "agent/core/agent.h"
#include "agent/core/config.h"
#include "agent/nvml/nvml_source.h"
#include "common/log.h"
#include "common/server.h"

namespace {

constexpr const char* kUsage = R"(usage: antdt-agent [flags]
  --node NAME                 node name                              [host name]
  --listen HOST:PORT          TCP endpoint for step reports           [127.0.0.1:0]
  --socket PATH               unix socket for step reports too
  --monitor HOST:PORT         the Monitor to stream to                [none]
  --metrics-listen HOST:PORT  Prometheus /metrics and /healthz        [off]
  --ready-file PATH           written once serving: address, then socket=, metrics=
  --state-dir DIR             accepted for uniformity; unused
  --config FILE               YAML with the same keys (node, listen, socket, monitor,
                              metrics_listen, ready_file, proc_root, cgroup_root,
                              cgroups, labels, nvml_library, interval, buffer)
  --proc-root DIR             the host's /proc (in a pod: a mount)    [/proc]
  --cgroup-root DIR           the host's cgroup v2 root              [/sys/fs/cgroup]
  --cgroups A,B               cgroups of training pods, relative to the root
  --labels K=V,K=V            node labels (e.g. antdt.io/hardware=a100)
  --nvml-library PATH         NVML to load                            [libnvidia-ml.so.1]
  --interval DURATION         sampling interval                       [1s]
  --buffer N                  messages kept while the Monitor is away [10000]
  --once                      print two samples' worth as text and exit
)";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "antdt-agent: %s\n", std::string(status.message()).c_str());
  return 2;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  using namespace antdt::agent;
  BlockTerminationSignals();
  auto flags = ParseFlags(
      argc, argv,
      {"node", "listen", "socket", "monitor", "metrics-listen", "ready-file", "state-dir", "config",
       "proc-root", "cgroup-root", "cgroups", "labels", "nvml-library", "interval", "buffer"},
      {"once", "help"});
  if (!flags.ok()) {
    std::fputs(kUsage, stderr);
    return Fail(flags.status());
  }
  if (flags->Has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto loaded = LoadConfig<AgentConfig>(*flags, ParseAgentConfig, ApplyAgentFlags);
  if (!loaded.ok()) return Fail(loaded.status());
  AgentConfig config = *loaded;
  if (config.node.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    config.node = host;
  }

  // On a hybrid cgroup v1/v2 host the v2 tree is mounted at .../unified.
  if (!flags->Has("cgroup-root") &&
      !std::filesystem::exists(config.cgroup_root + "/cgroup.controllers") &&
      std::filesystem::exists(config.cgroup_root + "/unified/cgroup.controllers")) {
    config.cgroup_root += "/unified";
  }
  RealFileSource files(config.proc_root, config.cgroup_root);
  Sampler sampler(files);
  std::unique_ptr<GpuSource> gpus = NvmlGpuSource::Open(config.nvml_library);

  auto sample_node = [&] {
    v1::NodeSample s = sampler.Sample(NowSeconds(), config.cgroups);
    s.set_node(config.node);
    for (const auto& [k, v] : config.labels) (*s.mutable_labels())[k] = v;
    if (gpus) {
      auto g = gpus->Sample();
      if (g.ok()) {
        for (auto& gpu : *g) *s.add_gpus() = std::move(gpu);
      } else {
        s.add_errors("gpu: " + std::string(g.status().message()));
      }
    }
    return s;
  };

  if (flags->Has("once")) {
    sample_node();
    std::this_thread::sleep_for(std::chrono::milliseconds(config.interval_ms));
    v1::NodeSample s = sample_node();
    std::printf("%s\n", s.DebugString().c_str());
    return 0;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  Outbox outbox(static_cast<size_t>(config.buffer));
  DirectiveTable directives;
  NodeView view;
  AgentServiceImpl service(config.node, &outbox, &directives, *registry);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.listen, grpc::InsecureServerCredentials(), &port);
  if (!config.socket.empty()) {
    std::error_code ec;
    std::filesystem::remove(config.socket, ec);
    builder.AddListeningPort("unix:" + config.socket, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    return Fail(
        absl::InvalidArgumentError("listen: cannot listen on " + config.listen +
                                   (config.socket.empty() ? "" : " or socket " + config.socket)));
  }
  const std::string address = BoundAddress(config.listen, port);

  MetricsEndpoint metrics;
  auto node_collector = MakeNodeCollector(&view);
  if (!config.metrics_listen.empty()) {
    auto ep = StartMetrics(config.metrics_listen, registry);
    if (!ep.ok()) return Fail(ep.status());
    metrics = std::move(*ep);
    metrics.exposer->RegisterCollectable(node_collector, "/metrics");
  }
  auto& dropped = prometheus::BuildGauge()
                      .Name("antdt_agent_dropped_messages")
                      .Help("Messages dropped while the Monitor was unreachable, since start.")
                      .Register(*registry);
  auto& dropped_samples = dropped.Add({{"kind", "node_sample"}});
  auto& dropped_steps = dropped.Add({{"kind", "step_report"}});
  auto& buffered = prometheus::BuildGauge()
                       .Name("antdt_agent_buffered_messages")
                       .Help("Messages waiting to be sent to the Monitor.")
                       .Register(*registry)
                       .Add({});

  std::unique_ptr<MonitorLink> link;
  if (!config.monitor.empty()) {
    MonitorLinkOptions lo;
    lo.address = config.monitor;
    lo.node = config.node;
    lo.labels = config.labels;
    link = std::make_unique<MonitorLink>(lo, &outbox, &directives, &view, *registry);
    link->Start();
  }

  PeriodicThread sampler_thread(std::chrono::milliseconds(config.interval_ms), [&] {
    v1::NodeSample s = sample_node();
    view.SetSample(s);
    if (link) {
      v1::AgentMessage m;
      *m.mutable_node_sample() = std::move(s);
      outbox.Push(std::move(m));
    }
    dropped_samples.Set(static_cast<double>(outbox.dropped_node_samples()));
    dropped_steps.Set(static_cast<double>(outbox.dropped_step_reports()));
    buffered.Set(static_cast<double>(outbox.size()));
  });

  if (!config.ready_file.empty()) {
    std::string content = address + "\n";
    if (!config.socket.empty()) content += "socket=unix:" + config.socket + "\n";
    if (!metrics.address.empty()) content += "metrics=" + metrics.address + "\n";
    if (auto s = WriteFileAtomically(config.ready_file, content); !s.ok()) return Fail(s);
  }
  LogEvent("serving", {{"node", config.node},
                       {"listen", address},
                       {"socket", config.socket},
                       {"metrics", metrics.address},
                       {"monitor", config.monitor},
                       {"gpus", gpus ? gpus->Describe() : "none"},
                       {"interval_ms", config.interval_ms}});

  int sig = WaitForTerminationSignal();
  LogEvent("shutting_down", {{"signal", sig}});
  sampler_thread.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  link.reset();
  outbox.Close();
  metrics.exposer.reset();
  if (!config.socket.empty()) {
    std::error_code ec;
    std::filesystem::remove(config.socket, ec);
  }
  LogEvent("stopped");
  return 0;
}
