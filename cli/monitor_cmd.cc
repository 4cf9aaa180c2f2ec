// `antdt monitor`: the Monitor on its own, for a local setup or tests (the
// operator and the local runner embed the same service).
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "common/config.h"
#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "common/tls.h"
#include "services/monitor/monitor_service.h"

namespace antdt::cli {
namespace {

struct MonitorFlags {
  std::string listen = "127.0.0.1:7071";
  std::string ready_file;
  std::string metrics_listen;
  std::string config;
  std::string state_dir;  // accepted for uniformity; unused
  std::string tick = "200ms";
};

int Monitor(const MonitorFlags& f) {
  BlockTerminationSignals();
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "antdt monitor: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  if (auto s = ValidateHostPort(f.listen, "--listen"); !s.ok()) return fail(s);
  ParsedFlags config_flag;  // LoadConfig's view: --config alone
  if (!f.config.empty()) config_flag.values["config"] = f.config;
  auto loaded = LoadConfig<monitor::MonitorConfig>(
      config_flag, monitor::ParseMonitorConfig,
      [](monitor::MonitorConfig c, const ParsedFlags&) -> absl::StatusOr<monitor::MonitorConfig> {
        return c;  // the Monitor's thresholds come from the file alone
      });
  if (!loaded.ok()) return fail(loaded.status());
  const monitor::MonitorConfig config = *loaded;
  auto tick = ParseDurationMs(f.tick, "--tick");
  if (!tick.ok()) return fail(tick.status());
  auto created = monitor::Monitor::Create(config);
  if (!created.ok()) return fail(created.status());
  monitor::MonitorServiceImpl service(std::move(*created), &RealClock::Get());
  // TLS from $ANTDT_TLS_* (common/tls.h); with a CA, node streams need the
  // node's certificate, as the operator's Monitor does.
  service.RequireNodeCertificates(TlsVerifiesClients());

  auto registry = std::make_shared<prometheus::Registry>();
  auto serving = Serving::Start({f.listen, "", f.metrics_listen, registry, {&service}});
  if (!serving.ok()) return fail(serving.status());
  auto collector = service.Collector();  // the exposer holds it weakly
  if (auto* exposer = (*serving)->exposer()) {
    exposer->RegisterCollectable(collector, "/metrics");
  }
  service.Start(*tick);
  if (auto s = (*serving)->WriteReady(f.ready_file); !s.ok()) return fail(s);
  LogEvent("serving", {{"component", "monitor"},
                       {"listen", (*serving)->address()},
                       {"metrics", (*serving)->metrics_address()},
                       {"window_ms", config.window_ms},
                       {"persistent_windows", config.persistent_windows}});
  int sig = (*serving)->WaitForSignal();
  LogEvent("shutting_down", {{"signal", sig}});
  service.Stop();
  (*serving)->Shutdown(std::chrono::seconds(2));
  LogEvent("stopped");
  return 0;
}

}  // namespace

Command AddMonitorCommand(CLI::App* parent) {
  CLI::App* app = parent->add_subcommand("monitor", "the Monitor service on its own");
  app->footer(
      "Agents stream their reports to it; GetJobHealth answers per-worker straggler scores, "
      "classes and causes.");
  auto f = std::make_shared<MonitorFlags>();
  app->add_option("--listen", f->listen, "the gRPC address")
      ->type_name("HOST:PORT")
      ->capture_default_str();
  app->add_option("--ready-file", f->ready_file, "written with the address once serving")
      ->type_name("PATH");
  app->add_option("--metrics-listen", f->metrics_listen, "serve Prometheus /metrics there")
      ->type_name("HOST:PORT");
  app->add_option("--config", f->config, "YAML: the window and the thresholds")->type_name("FILE");
  app->add_option("--state-dir", f->state_dir, "accepted for uniformity; unused")->type_name("DIR");
  app->add_option("--tick", f->tick, "how often the Monitor scores the workers")
      ->type_name("DURATION")
      ->capture_default_str();
  return {app, [f] { return Monitor(*f); }};
}

}  // namespace antdt::cli
