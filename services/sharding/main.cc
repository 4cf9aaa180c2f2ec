// antdt-sharding-service: the stateful dynamic data sharding service.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>

#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "services/sharding/config.h"
#include "services/sharding/ledger.h"
#include "services/sharding/service.h"
#include "services/sharding/sqlite_store.h"

namespace {

constexpr const char* kUsage = R"(usage: antdt-sharding-service [flags]
  --listen HOST:PORT          gRPC address (port 0 picks one)       [127.0.0.1:7070]
  --metrics-listen HOST:PORT  Prometheus /metrics and /healthz      [off]
  --state-dir DIR             where the SQLite state lives          [antdt-state]
  --ready-file PATH           written with the bound address once serving
  --token-file PATH           the job's credential: every call must carry it
                              [$ANTDT_TOKEN, else $ANTDT_TOKEN_FILE]
  --auth token|none           token: refuse to start without a credential;
                              none: serve every call unchecked (a warning
                              at start)                              [token]
  --job NAME                  serve only this job's datasets: a call naming
                              another job is refused                 [any job]
  --namespace NS              the served job's Kubernetes namespace: a
                              `namespace` label on its series        [none]
  --config FILE               YAML with the same keys (listen, metrics_listen,
                              state_dir, ready_file, namespace, lease_ttl, sync,
                              max_datasets, max_total_shards, token_file, auth,
                              job); flags win
  --lease-ttl DURATION        lease length, renewed by every report [30s]
  --sync full|normal          full: fsync each group commit; normal: survive
                              a process kill, not a power loss      [full]
  --max-datasets N            datasets the service holds, in all    [10000]
  --max-total-shards N        shards of all datasets together       [100000000]
                              (about 32 bytes of memory each)
)";

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "antdt-sharding-service: %s\n", std::string(status.message()).c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  using namespace antdt::sharding;
  BlockTerminationSignals();
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandLine(
      argc, argv, "antdt-sharding-service", kUsage,
      {"listen", "metrics-listen", "state-dir", "ready-file", "config", "namespace", "lease-ttl",
       "sync", "max-datasets", "max-total-shards", "token-file", "auth", "job"},
      &exit_code);
  if (!flags) return exit_code;
  auto loaded = LoadConfig<ServiceConfig>(*flags, ParseServiceConfig, ApplyServiceFlags);
  if (!loaded.ok()) return Fail(loaded.status());
  const ServiceConfig config = *loaded;
  absl::StatusOr<std::string> token = config.token_file.empty()
                                          ? TokenFromEnvironment()
                                          : ReadTokenFile(config.token_file, "token_file");
  if (!token.ok()) return Fail(token.status());
  if (config.auth_none && !token->empty()) {
    return Fail(absl::InvalidArgumentError(
        "auth: \"none\" with a credential configured (token_file, $ANTDT_TOKEN or "
        "$ANTDT_TOKEN_FILE): give one or the other"));
  }
  if (!config.auth_none && token->empty()) {
    return Fail(absl::InvalidArgumentError(
        "token_file: no credential: give --token-file, $ANTDT_TOKEN or $ANTDT_TOKEN_FILE, or "
        "--auth none to serve every call unchecked"));
  }
  if (config.auth_none) {
    LogEvent("auth_disabled", {{"warning",
                                "--auth none: every call is served without a "
                                "credential; anyone who can connect can change "
                                "the job's data"}});
  }

  auto store = SqliteStore::Open(
      config.state_dir, config.sync_full ? SqliteStore::Sync::kFull : SqliteStore::Sync::kNormal);
  if (!store.ok()) return Fail(store.status());
  auto t0 = std::chrono::steady_clock::now();
  LedgerOptions options;
  options.lease_ttl_ms = config.lease_ttl_ms;
  options.max_datasets = config.max_datasets;
  options.max_total_shards = config.max_total_shards;
  auto ledger = Ledger::Open(store->get(), &RealClock::Get(), options);
  if (!ledger.ok()) return Fail(ledger.status());
  const double recovery_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto registry = std::make_shared<prometheus::Registry>();
  const bool auth = !token->empty();
  ShardingServiceImpl service(ledger->get(), *registry, TokenCheck(std::move(*token)), config.job);
  auto collector = MakeLedgerCollector(ledger->get(), config.namespace_);

  ServeOptions so;
  so.listen = config.listen;
  so.metrics_listen = config.metrics_listen;
  so.registry = registry;
  so.services = {&service};
  // Handlers block until their change is durable: keep enough pollers that
  // threads are not created and torn down on every burst.
  so.min_pollers = 4;
  so.max_pollers = 64;
  auto serving = Serving::Start(so);
  if (!serving.ok()) return Fail(serving.status());
  if (auto* exposer = (*serving)->exposer()) {
    exposer->RegisterCollectable(collector, "/metrics");
  }

  // Lease reaper: expired leases go back to the queue even when nobody calls.
  PeriodicThread reaper(std::chrono::milliseconds(250), [&] {
    auto expired = (*ledger)->ExpireLeases();
    if (!expired.ok())
      LogEvent("reaper_error", {{"error", std::string(expired.status().message())}});
  });

  if (auto s = (*serving)->WriteReady(config.ready_file); !s.ok()) return Fail(s);
  LogEvent("serving", {{"listen", (*serving)->address()},
                       {"metrics", (*serving)->metrics_address()},
                       {"state_dir", config.state_dir},
                       {"recovery_seconds", recovery_s},
                       {"lease_ttl_ms", config.lease_ttl_ms},
                       {"max_datasets", config.max_datasets},
                       {"max_total_shards", config.max_total_shards},
                       {"sync", config.sync_full ? "full" : "normal"},
                       {"auth", auth ? "token" : "off"},
                       {"job", config.job.empty() ? "any" : config.job}});

  int sig = (*serving)->WaitForSignal();
  LogEvent("shutting_down", {{"signal", sig}});
  reaper.Stop();
  (*serving)->Shutdown(std::chrono::seconds(5));
  ledger->reset();
  store->reset();  // flushes the last group commit
  LogEvent("stopped");
  return 0;
}
