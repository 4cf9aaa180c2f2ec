// The HTTP server of every AntDT process's Prometheus endpoint: /metrics,
// /healthz and any path a collectable is registered at, over Boost.Beast.
//
// Event-driven, so idle or slow clients cost a socket each, not a thread: a
// kubelet probe or a scrape is answered beside hundreds of connections that
// send nothing or send a byte a second (CivetWeb, which prometheus-cpp's
// Exposer is built on, gives each connection one of a few threads until its
// request is read: 40 idle connections delayed /healthz 9.8 s). A request must
// arrive whole within 2 s of the connection (or of the previous answer on a
// kept-alive one) and its header within 8 KiB; a client that does neither is
// dropped. At most 1,024 connections are held; beyond, new ones are closed at
// once. GET and HEAD only.
//
// Thread-safety: RegisterCollectable from any thread; Collect runs on the
// server's threads (two, so one slow collection does not hold /healthz).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace antdt {

class MetricsServer {
 public:
  // Listens on `listen` (HOST:PORT or [V6]:PORT, port 0 picks one).
  // InvalidArgument naming `field` when it cannot.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& listen,
                                                              const std::string& field);
  ~MetricsServer();  // stops accepting, closes every connection, joins
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Serves what `collectable` collects at `path`, in Prometheus' text format,
  // beside what is registered there already; held weakly (gone: skipped).
  void RegisterCollectable(const std::weak_ptr<prometheus::Collectable>& collectable,
                           const std::string& path = "/metrics");

  int port() const;

  struct Impl;

 private:
  explicit MetricsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace antdt
