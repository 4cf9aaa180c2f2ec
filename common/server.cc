#include "common/server.h"

#include <signal.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/tls.h"

namespace antdt {
namespace {

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace

void BlockTerminationSignals() {
  sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int WaitForTerminationSignal() {
  sigset_t set = TerminationSignals();
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

std::string BoundAddress(const std::string& listen, int port) {
  size_t colon = listen.rfind(':');
  return absl::StrCat(listen.substr(0, colon), ":", port);
}

absl::StatusOr<MetricsEndpoint> StartMetrics(
    const std::string& listen, const std::shared_ptr<prometheus::Registry>& registry) {
  MetricsEndpoint ep;
  // With TLS on, the HTTP server serves loopback only and a TlsFront the address.
  const bool tls = TlsServing();
  auto server = MetricsServer::Start(tls ? "127.0.0.1:0" : listen, "metrics_listen");
  if (!server.ok()) return server.status();
  ep.exposer = *std::move(server);
  ep.exposer->RegisterCollectable(registry, "/metrics");
  ep.health = std::make_shared<prometheus::Registry>();
  ep.exposer->RegisterCollectable(ep.health, "/healthz");
  const int bound = ep.exposer->port();
  if (!tls) {
    ep.address = BoundAddress(listen, bound);
    return ep;
  }
  auto front = TlsFront::Start(listen, bound, "metrics_listen");
  if (!front.ok()) return front.status();
  ep.tls = *std::move(front);
  ep.address = BoundAddress(listen, ep.tls->port());
  return ep;
}

absl::Status WriteReadyFile(const std::string& path, const std::string& address,
                            const std::string& metrics_address) {
  std::string content = address + "\n";
  if (!metrics_address.empty()) content += "metrics=" + metrics_address + "\n";
  return WriteFileAtomically(path, content);
}

PeriodicThread::PeriodicThread(std::chrono::milliseconds interval, std::function<void()> tick)
    : thread_([this, interval, tick = std::move(tick)] {
        std::unique_lock<std::mutex> lock(mu_);
        while (!stopping_) {
          lock.unlock();
          tick();
          lock.lock();
          cv_.wait_for(lock, interval, [this] { return stopping_; });
        }
      }) {}

void PeriodicThread::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace antdt
