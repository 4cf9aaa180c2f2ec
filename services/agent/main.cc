// antdt-agent: one per node. Samples the node (CPU, memory, network, PSI,
// cgroups, GPUs through NVML), takes the workers' step reports on a local
// endpoint, streams both to the Monitor, hands the Monitor's directives to the
// workers, and exports everything as Prometheus metrics.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <set>
#include <thread>

#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "common/tls.h"
#include "prometheus/gauge.h"
#include "services/agent/collectors/collectors.h"
#include "services/agent/core/agent.h"
#include "services/agent/core/config.h"
#include "services/agent/nvml/nvml_source.h"

namespace {

constexpr const char* kUsage = R"(usage: antdt-agent [flags]
  --node NAME                 node name                              [host name]
  --listen HOST:PORT          TCP endpoint for step reports           [127.0.0.1:0]
  --socket PATH               unix socket for step reports too
  --monitor HOST:PORT[,...]   the Monitor to stream to; several (the
                              operator's replicas) are tried in turn    [none]
  --metrics-listen HOST:PORT  Prometheus /metrics and /healthz        [off]
  --ready-file PATH           written once serving: address, then socket=, metrics=
  --state-dir DIR             accepted for uniformity; unused
  --config FILE               YAML with the same keys (node, listen, socket, monitor,
                              metrics_listen, ready_file, proc_root, cgroup_root,
                              cgroups, labels, nvml_library, interval, buffer,
                              worker_idle_after, node_pids_file)
  --proc-root DIR             the host's /proc (in a pod: a mount)    [/proc]
  --cgroup-root DIR           the host's cgroup v2 root, or a cgroup v1 cpu
                              hierarchy (/sys/fs/cgroup/cpu)         [/sys/fs/cgroup]
  --cgroups A,B               cgroups of training pods, relative to the root;
                              none: the reporting workers' own, found by their
                              pod UID ($ANTDT_POD_UID) or pid
  --labels K=V,K=V            node labels (e.g. antdt.io/hardware=a100)
  --nvml-library PATH         NVML to load                            [libnvidia-ml.so.1]
  --node-pids-file PATH       the node's processes, one pid per line, where
                              nodes share a host: the CPU of those not the
                              job's workers is reported as neighbours' [off]
  --interval DURATION         sampling interval                       [1s]
  --buffer N                  messages kept while the Monitor is away [10000]
  --worker-idle-after DURATION  a worker silent this long left the node:
                              its antdt_worker_* series are removed   [2m]
                              (at once when its process, reported by pid
                              without a pod UID, has ended)
  --once                      print two samples' worth as text and exit
)";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "antdt-agent: %s\n", std::string(status.message()).c_str());
  return 2;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The configuration from flags and --config: the node defaults to the host
// name; on a hybrid cgroup v1/v2 host the v2 tree is found at .../unified.
absl::StatusOr<antdt::agent::AgentConfig> LoadAgentConfig(const antdt::ParsedFlags& flags) {
  using namespace antdt::agent;
  auto loaded = antdt::LoadConfig<AgentConfig>(flags, ParseAgentConfig, ApplyAgentFlags);
  if (!loaded.ok()) return loaded.status();
  AgentConfig config = *loaded;
  if (config.node.empty()) {
    char host[256] = {0};
    gethostname(host, sizeof(host) - 1);
    config.node = host;
  }
  if (!flags.Has("cgroup-root") &&
      !std::filesystem::exists(config.cgroup_root + "/cgroup.controllers") &&
      std::filesystem::exists(config.cgroup_root + "/unified/cgroup.controllers")) {
    config.cgroup_root += "/unified";
  }
  return config;
}

// One sample of the node: /proc, cgroups and GPUs, with its name and labels.
class NodeSampling {
 public:
  explicit NodeSampling(const antdt::agent::AgentConfig& config)
      : config_(config),
        files_(config.proc_root, config.cgroup_root),
        sampler_(files_),
        finder_(files_),
        gpus_(antdt::agent::NvmlGpuSource::Open(config.nvml_library)) {}

  // `processes`: the reporting workers' (pod UID, pid), whose cgroups are
  // sampled when --cgroups names none.
  antdt::v1::NodeSample Sample(const std::vector<std::pair<std::string, int64_t>>& processes = {}) {
    antdt::v1::NodeSample s = sampler_.Sample(
        NowSeconds(), config_.cgroups.empty() ? finder_.Find(processes) : config_.cgroups);
    s.set_node(config_.node);
    for (const auto& [k, v] : config_.labels) (*s.mutable_labels())[k] = v;
    if (!config_.node_pids_file.empty()) {
      std::set<int64_t> job;
      for (const auto& p : processes) job.insert(p.second);
      if (auto cores = neighbours_.Sample(config_.node_pids_file, job, NowSeconds())) {
        s.set_neighbour_cpu_cores(*cores);
      }
    }
    if (gpus_) {
      auto g = gpus_->Sample();
      if (g.ok()) {
        for (auto& gpu : *g) *s.add_gpus() = std::move(gpu);
      } else {
        s.add_errors("gpu: " + std::string(g.status().message()));
      }
    }
    return s;
  }
  std::string DescribeGpus() const { return gpus_ ? gpus_->Describe() : "none"; }
  std::optional<bool> ProcessRunning(int64_t pid) {
    return antdt::agent::ProcessRunning(files_, pid);
  }

 private:
  const antdt::agent::AgentConfig& config_;
  antdt::agent::RealFileSource files_;
  antdt::agent::Sampler sampler_;
  antdt::agent::CgroupFinder finder_;
  std::unique_ptr<antdt::agent::GpuSource> gpus_;
  antdt::agent::NeighbourCpu neighbours_;
};

// The outbox's state, set at every sample: what it dropped (counters) and
// holds (a gauge).
struct OutboxGauges {
  explicit OutboxGauges(prometheus::Registry& registry)
      : dropped(prometheus::BuildCounter()
                    .Name("antdt_agent_dropped_messages_total")
                    .Help("Messages dropped while the Monitor was unreachable.")
                    .Register(registry)),
        dropped_samples(dropped.Add({{"kind", "node_sample"}})),
        dropped_steps(dropped.Add({{"kind", "step_report"}})),
        buffered(prometheus::BuildGauge()
                     .Name("antdt_agent_buffered_messages")
                     .Help("Messages waiting to be sent to the Monitor.")
                     .Register(registry)
                     .Add({})) {}
  void Set(const antdt::agent::Outbox& outbox) {
    // The outbox counts since start; the counters move by what is new.
    auto catch_up = [](prometheus::Counter& c, int64_t total) {
      if (static_cast<double>(total) > c.Value())
        c.Increment(static_cast<double>(total) - c.Value());
    };
    catch_up(dropped_samples, outbox.dropped_node_samples());
    catch_up(dropped_steps, outbox.dropped_step_reports());
    buffered.Set(static_cast<double>(outbox.size()));
  }
  prometheus::Family<prometheus::Counter>& dropped;
  prometheus::Counter& dropped_samples;
  prometheus::Counter& dropped_steps;
  prometheus::Gauge& buffered;
};

// Samples every interval, streams samples and step reports to the Monitor,
// serves the step endpoint and metrics, until a termination signal.
int Serve(const antdt::agent::AgentConfig& config, NodeSampling& sampling) {
  using namespace antdt;
  using namespace antdt::agent;
  auto registry = std::make_shared<prometheus::Registry>();
  Outbox outbox(static_cast<size_t>(config.buffer));
  DirectiveTable directives;
  NodeView view;
  AgentServiceImpl service(config.node, &outbox, &directives, *registry);
  auto serving =
      Serving::Start({config.listen, config.socket, config.metrics_listen, registry, {&service}});
  if (!serving.ok()) return Fail(serving.status());
  auto node_collector = MakeNodeCollector(  // the exposer holds it weakly
      &view, [&service](const std::string& job, const std::string& worker) {
        return service.NamespaceOf(job, worker);
      });
  if (auto* exposer = (*serving)->exposer()) {
    exposer->RegisterCollectable(node_collector, "/metrics");
  }
  OutboxGauges gauges(*registry);
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
    std::vector<std::pair<std::string, int64_t>> processes;
    for (const auto& p : service.Processes()) processes.emplace_back(p.pod_uid, p.pid);
    v1::NodeSample s = sampling.Sample(processes);
    view.SetSample(s);
    if (link) {
      v1::AgentMessage m;
      *m.mutable_node_sample() = std::move(s);
      outbox.Push(std::move(m));
    }
    gauges.Set(outbox);
    for (const auto& [job, worker] :
         service.ForgetIdle(std::chrono::milliseconds(config.worker_idle_after_ms),
                            [&sampling](int64_t pid) { return sampling.ProcessRunning(pid); })) {
      view.Forget(job, worker);
      LogEvent("worker_left", {{"job", job}, {"worker", worker}});
    }
  });
  std::vector<std::pair<std::string, std::string>> fields;
  if (!config.socket.empty()) fields.emplace_back("socket", "unix:" + config.socket);
  if (auto s = (*serving)->WriteReady(config.ready_file, fields); !s.ok()) return Fail(s);
  LogEvent("serving", {{"node", config.node},
                       {"listen", (*serving)->address()},
                       {"socket", config.socket},
                       {"metrics", (*serving)->metrics_address()},
                       {"monitor", config.monitor},
                       {"gpus", sampling.DescribeGpus()},
                       {"interval_ms", config.interval_ms}});

  int sig = (*serving)->WaitForSignal();
  LogEvent("shutting_down", {{"signal", sig}});
  sampler_thread.Stop();
  (*serving)->Shutdown(std::chrono::seconds(2));
  link.reset();
  outbox.Close();
  if (!config.socket.empty()) {
    std::error_code ec;
    std::filesystem::remove(config.socket, ec);
  }
  LogEvent("stopped");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  BlockTerminationSignals();
  auto flags =
      ParseFlags(argc, argv, {"node",           "listen",      "socket",    "monitor",
                              "metrics-listen", "ready-file",  "state-dir", "config",
                              "proc-root",      "cgroup-root", "cgroups",   "labels",
                              "nvml-library",   "interval",    "buffer",    "worker-idle-after",
                              "tls-cert",       "tls-key",     "tls-ca",    "tls-server-name",
                              "node-pids-file"},
                 {"once", "help"});
  if (!flags.ok()) {
    std::fputs(kUsage, stderr);
    return Fail(flags.status());
  }
  if (flags->Has("help")) {
    std::fputs(kUsage, stdout);
    std::fputs(kTlsFlagsUsage, stdout);
    return 0;
  }
  if (absl::Status tls = ConfigureTlsFromFlags(*flags); !tls.ok()) return Fail(tls);
  absl::StatusOr<agent::AgentConfig> config = LoadAgentConfig(*flags);
  if (!config.ok()) return Fail(config.status());
  NodeSampling sampling(*config);
  if (flags->Has("once")) {
    sampling.Sample();
    std::this_thread::sleep_for(std::chrono::milliseconds(config->interval_ms));
    std::printf("%s\n", sampling.Sample().DebugString().c_str());
    return 0;
  }
  return Serve(*config, sampling);
}
