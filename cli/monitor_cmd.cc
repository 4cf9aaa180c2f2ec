// `antdt monitor`: the Monitor on its own, for a local setup or tests (the
// operator and the local runner embed the same service).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <cstdio>

#include "common/config.h"
#include "common/log.h"
#include "common/server.h"
#include "operator/monitor_service/monitor_service.h"

namespace antdt::cli {

int MonitorCommand(int argc, char** argv) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "antdt monitor: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  auto flags = ParseFlags(argc, argv,
                          {"listen", "ready-file", "metrics-listen", "config", "state-dir", "tick"});
  if (!flags.ok()) return fail(flags.status());
  const std::string listen = flags->Get("listen", "127.0.0.1:7071");
  if (auto s = ValidateHostPort(listen, "--listen"); !s.ok()) return fail(s);
  auto loaded = LoadConfig<monitor::MonitorConfig>(
      *flags, monitor::ParseMonitorConfig,
      [](monitor::MonitorConfig c, const ParsedFlags&) -> absl::StatusOr<monitor::MonitorConfig> {
        return c;  // the Monitor's thresholds come from the file alone
      });
  if (!loaded.ok()) return fail(loaded.status());
  const monitor::MonitorConfig config = *loaded;
  auto tick = ParseDurationMs(flags->Get("tick", "200ms"), "--tick");
  if (!tick.ok()) return fail(tick.status());
  auto created = monitor::Monitor::Create(config);
  if (!created.ok()) return fail(created.status());
  monitor::MonitorServiceImpl service(std::move(*created), &RealClock::Get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return fail(absl::InvalidArgumentError("--listen: cannot listen on " + listen));
  const std::string address = BoundAddress(listen, port);
  auto registry = std::make_shared<prometheus::Registry>();
  MetricsEndpoint metrics;
  auto collector = service.Collector();  // the exposer holds it weakly
  if (flags->Has("metrics-listen")) {
    auto ep = StartMetrics(flags->Get("metrics-listen"), registry);
    if (!ep.ok()) return fail(ep.status());
    metrics = std::move(*ep);
    metrics.exposer->RegisterCollectable(collector, "/metrics");
  }
  service.Start(*tick);
  if (flags->Has("ready-file")) {
    if (auto s = WriteReadyFile(flags->Get("ready-file"), address, metrics.address); !s.ok()) {
      return fail(s);
    }
  }
  LogEvent("serving", {{"component", "monitor"},
                       {"listen", address},
                       {"metrics", metrics.address},
                       {"window_ms", config.window_ms},
                       {"persistent_windows", config.persistent_windows}});
  int sig = WaitForTerminationSignal();
  LogEvent("shutting_down", {{"signal", sig}});
  service.Stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  metrics.exposer.reset();
  LogEvent("stopped");
  return 0;
}

}  // namespace antdt::cli
