// How every AntDT server main serves: one gRPC server (health checking on;
// reflection only with --grpc-reflection) on --listen and optionally a unix socket, the Prometheus
// endpoint on --metrics-listen, the ready file, and an orderly stop on
// SIGTERM / SIGINT / SIGHUP.
//
//   BlockTerminationSignals();                 // first, before any thread
//   ASSIGN_OR_RETURN(auto serving, Serving::Start({.name = "antdt-agent", ...}));
//   serving->WriteReady(ready_file, {{"socket", path}});
//   serving->WaitForSignal();                  // blocks
//   ...stop the components that feed RPCs...
//   serving->Shutdown(std::chrono::seconds(2));  // also done by the destructor
//
// Thread-safety: Start, WriteReady, WaitForSignal and Shutdown from main's
// thread; the server's own threads are gRPC's.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/server.h"
#include "prometheus/registry.h"

namespace antdt {

struct ServeOptions {
  std::string listen;          // HOST:PORT, port 0 picks one
  std::string unix_socket;     // also listen on unix:PATH when set (stale file removed)
  std::string metrics_listen;  // "" for no metrics endpoint
  // Served at /metrics; a new empty registry when null.
  std::shared_ptr<prometheus::Registry> registry;
  std::vector<grpc::Service*> services;  // borrowed: must outlive the Serving
  // Sync server pollers; 0 keeps gRPC's default. A service whose handlers block
  // (on a durable write) keeps enough that threads are not made per burst.
  int min_pollers = 0;
  int max_pollers = 0;
};

class Serving {
 public:
  // Starts the gRPC server and the metrics endpoint. InvalidArgument naming
  // the flag (listen, metrics_listen) when an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Serving>> Start(const ServeOptions& options);
  ~Serving();

  // The bound gRPC address (HOST:PORT) and metrics address ("" when off).
  const std::string& address() const { return address_; }
  const std::string& metrics_address() const { return metrics_.address; }
  // For more collectables (at /metrics or other paths); null when off.
  MetricsServer* exposer() const { return metrics_.exposer.get(); }

  // The ready file: the address, metrics=..., then `fields` as key=value
  // lines. A no-op for an empty path.
  absl::Status WriteReady(const std::string& path,
                          const std::vector<std::pair<std::string, std::string>>& fields = {});

  // The gRPC health service's answer for `service` (grpc.health.v1; a
  // Kubernetes gRPC probe names it): SERVING or NOT_SERVING.
  void SetServingStatus(const std::string& service, bool serving);

  // Blocks until a termination signal; returns it.
  int WaitForSignal();

  // Stops accepting calls; in-flight calls get `grace` to finish; then the
  // metrics endpoint stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);

 private:
  Serving() = default;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  MetricsEndpoint metrics_;
};

}  // namespace antdt
