// What every AntDT server shares: termination signals, the Prometheus
// endpoint (/metrics and /healthz), and the ready file.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace antdt {

// Call first in main, before any thread starts: SIGTERM, SIGINT and SIGHUP are
// then delivered only to WaitForTerminationSignal().
void BlockTerminationSignals();
int WaitForTerminationSignal();

struct MetricsEndpoint {
  std::unique_ptr<prometheus::Exposer> exposer;
  std::shared_ptr<prometheus::Registry> health;  // empty registry served at /healthz
  std::string address;                           // bound HOST:PORT
};

// Serves `registry` at http://listen/metrics (port 0 picks one).
absl::StatusOr<MetricsEndpoint> StartMetrics(const std::string& listen,
                                             const std::shared_ptr<prometheus::Registry>& registry);

// "HOST:PORT" with the bound port substituted for the requested one.
std::string BoundAddress(const std::string& listen, int port);

// Ready file: first line the gRPC address, then key=value lines.
absl::Status WriteReadyFile(const std::string& path, const std::string& address,
                            const std::string& metrics_address);

}  // namespace antdt
