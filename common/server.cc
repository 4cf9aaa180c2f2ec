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
  std::string host = listen.substr(0, listen.rfind(':'));
  std::string port = listen.substr(listen.rfind(':') + 1);
  // With TLS on, CivetWeb serves loopback only and a TlsFront the address.
  const bool tls = TlsServing();
  const std::string civet_listen = tls ? "127.0.0.1:0" : listen;
  try {
    // CivetWeb takes "HOST:PORT" for IPv4 and "[::1]:PORT" for IPv6 as is.
    // A connection holds one of its threads until its request is read: with
    // the defaults (2 threads here, CivetWeb's 30 s request timeout) two idle
    // or half-sent connections kept /metrics and /healthz from answering for
    // 30 s. Scrapes are small; a slow client is dropped after 2 s.
    ep.exposer = std::make_unique<prometheus::Exposer>(
        std::vector<std::string>{"listening_ports", civet_listen, "num_threads", "8",
                                 "request_timeout_ms", "2000", "keep_alive_timeout_ms", "500"});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: cannot listen on ", listen, ": ", e.what()));
  }
  ep.exposer->RegisterCollectable(registry, "/metrics");
  ep.health = std::make_shared<prometheus::Registry>();
  ep.exposer->RegisterCollectable(ep.health, "/healthz");
  auto ports = ep.exposer->GetListeningPorts();
  const int bound = ports.empty() ? 0 : ports.front();
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
