// `antdt monitor`: the Monitor on its own, for a local setup or tests (the
// operator and the local runner embed the same service).
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "common/config.h"
#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "operator/monitor_service/monitor_service.h"

namespace antdt::cli {

int MonitorCommand(int argc, char** argv) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "antdt monitor: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  auto flags = ParseFlags(
      argc, argv, {"listen", "ready-file", "metrics-listen", "config", "state-dir", "tick"});
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

  auto registry = std::make_shared<prometheus::Registry>();
  auto serving = Serving::Start({listen, "", flags->Get("metrics-listen"), registry, {&service}});
  if (!serving.ok()) return fail(serving.status());
  auto collector = service.Collector();  // the exposer holds it weakly
  if (prometheus::Exposer* exposer = (*serving)->exposer()) {
    exposer->RegisterCollectable(collector, "/metrics");
  }
  service.Start(*tick);
  if (auto s = (*serving)->WriteReady(flags->Get("ready-file")); !s.ok()) return fail(s);
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

}  // namespace antdt::cli
