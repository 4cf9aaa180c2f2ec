// What every AntDT server shares: termination signals, the Prometheus
// endpoint (/metrics and /healthz), the ready file, and a periodic thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/metrics_server.h"
#include "common/tls_front.h"
#include "prometheus/registry.h"

namespace antdt {

// Call first in main, before any thread starts: SIGTERM, SIGINT and SIGHUP are
// then delivered only to WaitForTerminationSignal().
void BlockTerminationSignals();
int WaitForTerminationSignal();

struct MetricsEndpoint {
  std::unique_ptr<MetricsServer> exposer;
  std::unique_ptr<TlsFront> tls;                 // with TLS on: HTTPS here, the exposer on loopback
  std::shared_ptr<prometheus::Registry> health;  // empty registry served at /healthz
  std::string address;                           // bound HOST:PORT
};

// Serves `registry` at http://listen/metrics (port 0 picks one); with TLS on
// (common/tls.h) at https://listen/metrics only, through a TlsFront.
absl::StatusOr<MetricsEndpoint> StartMetrics(const std::string& listen,
                                             const std::shared_ptr<prometheus::Registry>& registry);

// "HOST:PORT" with the bound port substituted for the requested one.
std::string BoundAddress(const std::string& listen, int port);

// Ready file: first line the gRPC address, then key=value lines.
absl::Status WriteReadyFile(const std::string& path, const std::string& address,
                            const std::string& metrics_address);

// Runs `tick` on its own thread at once and then every `interval`, until Stop()
// or destruction. Owning the thread means a main that returns early cannot
// leave a joinable std::thread behind (which calls std::terminate).
// Construct, Stop and destroy from one thread.
class PeriodicThread {
 public:
  PeriodicThread(std::chrono::milliseconds interval, std::function<void()> tick);
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Waits for a running tick to finish; no tick starts after. Idempotent.
  void Stop();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace antdt
