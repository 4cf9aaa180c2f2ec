#include "backends/local/interference.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/process.h"
#include "common/status.h"

namespace antdt::local {
namespace {

namespace fs = std::filesystem;
using manifest::SlowdownVia;

// Every thread of `pid` on `cpu`, or on every CPU when cpu < 0. A process
// that has exited is skipped.
void Pin(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);  // NOLINT(google-runtime-int): sysconf's type
  for (long c = 0; c < cpus; ++c) {                 // NOLINT(google-runtime-int)
    if (cpu < 0 || c == cpu) CPU_SET(static_cast<int>(c), &set);
  }
  std::error_code ec;
  for (const auto& task : fs::directory_iterator(absl::StrCat("/proc/", pid, "/task"), ec)) {
    int tid = 0;
    if (absl::SimpleAtoi(task.path().filename().string(), &tid)) {
      (void)sched_setaffinity(tid, sizeof(set), &set);
    }
  }
}

bool WriteAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
    if (w <= 0) return false;
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

// ---- DelayRelay -------------------------------------------------------------

struct DelayRelay::State {
  int listen_fd = -1;
  sockaddr_in upstream{};
  std::atomic<int64_t> delay_us{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<int> fds;  // every connection's, closed at the end
  std::vector<std::thread> threads;

  // Copies from `from` to `to`, each chunk held for the delay, until either
  // side closes or the relay stops.
  void Pump(int from, int to) {
    char buf[64 * 1024];
    while (!stop) {
      pollfd p{from, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const ssize_t n = recv(from, buf, sizeof buf, 0);
      if (n <= 0) break;
      if (const int64_t d = delay_us.load(); d > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(d));
      }
      if (!WriteAll(to, buf, static_cast<size_t>(n))) break;
    }
    shutdown(to, SHUT_WR);
  }

  void Accept() {
    while (!stop) {
      pollfd p{listen_fd, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      const int client = accept(listen_fd, nullptr, nullptr);
      if (client < 0) continue;
      const int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (up < 0 || connect(up, reinterpret_cast<const sockaddr*>(&upstream), sizeof upstream)) {
        close(client);
        if (up >= 0) close(up);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu);
      fds.insert(fds.end(), {client, up});
      threads.emplace_back([this, client, up] { Pump(client, up); });
      threads.emplace_back([this, client, up] { Pump(up, client); });
    }
  }
};

absl::StatusOr<std::unique_ptr<DelayRelay>> DelayRelay::Start(const std::string& upstream) {
  auto state = std::make_shared<State>();
  const size_t colon = upstream.rfind(':');
  int port = 0;
  state->upstream.sin_family = AF_INET;
  if (colon == std::string::npos || !absl::SimpleAtoi(upstream.substr(colon + 1), &port) ||
      inet_pton(AF_INET, upstream.substr(0, colon).c_str(), &state->upstream.sin_addr) != 1) {
    return absl::InvalidArgumentError("slow-data relay: upstream must be IPv4:PORT, got " +
                                      upstream);
  }
  state->upstream.sin_port = htons(static_cast<uint16_t>(port));
  state->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof local;
  if (state->listen_fd < 0 ||
      bind(state->listen_fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      listen(state->listen_fd, 16) != 0 ||
      getsockname(state->listen_fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    if (state->listen_fd >= 0) close(state->listen_fd);
    return absl::UnavailableError("slow-data relay: cannot listen on 127.0.0.1");
  }
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(local.sin_port));
  {
    std::lock_guard<std::mutex> lock(state->mu);
    state->threads.emplace_back([s = state.get()] { s->Accept(); });
  }
  return std::unique_ptr<DelayRelay>(new DelayRelay(std::move(state), address));
}

DelayRelay::DelayRelay(std::shared_ptr<State> state, std::string address)
    : state_(std::move(state)), address_(std::move(address)) {}

DelayRelay::~DelayRelay() {
  state_->stop = true;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    threads.swap(state_->threads);
  }
  // The acceptor first (it may add pumps), then the pumps, woken from any
  // blocking send by shutting their sockets down.
  for (std::thread& t : threads) t.join();
  std::lock_guard<std::mutex> lock(state_->mu);
  for (int fd : state_->fds) shutdown(fd, SHUT_RDWR);
  for (std::thread& t : state_->threads) t.join();
  for (int fd : state_->fds) close(fd);
  close(state_->listen_fd);
}

void DelayRelay::SetDelayUs(int64_t us) { state_->delay_us = std::max<int64_t>(us, 0); }

// ---- Interference -----------------------------------------------------------

struct Interference::Node {
  bool contention = false;
  std::vector<std::unique_ptr<Process>> spinners;
  std::vector<pid_t> workers;
  bool pinned = false;
  std::unique_ptr<DelayRelay> relay;
  std::string nvml_file;
  std::string nvml_state;    // last written
  std::string pids_written;  // last written
};

Interference::Interference(InterferenceOptions options) : o_(std::move(options)) {
  cpu_ = static_cast<int>(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1)) - 1;  // NOLINT
}

Interference::~Interference() = default;

absl::StatusOr<std::unique_ptr<Interference>> Interference::Create(
    const manifest::Scenario& scenario, InterferenceOptions options) {
  std::unique_ptr<Interference> in(new Interference(std::move(options)));
  for (const manifest::NodeSpec& n : scenario.nodes) {
    auto node = std::make_unique<Node>();
    node->contention = scenario.Uses(n.name, SlowdownVia::kCpuContention);
    if (scenario.Uses(n.name, SlowdownVia::kSlowData)) {
      ASSIGN_OR_RETURN(node->relay, DelayRelay::Start(in->o_.sharding_address));
    }
    RETURN_IF_ERROR(WriteFileAtomically(in->PidsFile(n.name), ""));
    if (scenario.Uses(n.name, SlowdownVia::kGpuThrottle)) {
      node->nvml_file = in->o_.work_dir + "/nodes/" + n.name + ".nvml";
      RETURN_IF_ERROR(WriteFileAtomically(node->nvml_file, "ok\n"));
    }
    in->nodes_[n.name] = std::move(node);
  }
  return in;
}

std::string Interference::ShardingAddressFor(const std::string& node) const {
  auto it = nodes_.find(node);
  return it != nodes_.end() && it->second->relay ? it->second->relay->address() : "";
}

std::string Interference::NvmlStateFile(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? "" : it->second->nvml_file;
}

void Interference::OnSpawn(const std::string& node, pid_t pid) {
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  it->second->workers.push_back(pid);
  if (it->second->pinned) Pin(pid, cpu_);
  WritePids(node, *it->second);
}

std::string Interference::PidsFile(const std::string& node) const {
  return o_.work_dir + "/nodes/" + node + ".pids";
}

// The node's processes, as its agent reads them: its live workers and spinners.
void Interference::WritePids(const std::string& name, Node& node) {
  std::vector<pid_t> live;
  for (pid_t pid : node.workers) {
    if (kill(pid, 0) == 0) live.push_back(pid);
  }
  node.workers = live;
  for (const auto& spinner : node.spinners) live.push_back(spinner->pid());
  std::string text;
  for (pid_t pid : live) absl::StrAppend(&text, pid, "\n");
  if (text != node.pids_written && WriteFileAtomically(PidsFile(name), text).ok()) {
    node.pids_written = text;
  }
}

absl::Status Interference::ApplyContention(Node& node, double factor) {
  const size_t want = factor > 1 ? static_cast<size_t>(std::max(1.0, std::round(factor - 1))) : 0;
  while (node.spinners.size() < want) {
    auto spinner = std::make_unique<Process>(
        // In a session of its own: another job's process, which the
        // scheduler weighs as its own group (autogroup), not as one more
        // thread of this job.
        std::vector<std::string>{"/usr/bin/setsid", "/bin/sh", "-c", "while :; do :; done"},
        "/dev/null");
    Pin(spinner->pid(), cpu_);
    node.spinners.push_back(std::move(spinner));
  }
  while (node.spinners.size() > want) node.spinners.pop_back();  // SIGKILLed and reaped
  // The live workers follow the spinners' CPU, or go back to every CPU.
  if (want > 0 || node.pinned) {
    for (pid_t pid : node.workers) Pin(pid, want > 0 ? cpu_ : -1);
  }
  node.pinned = want > 0;
  return absl::OkStatus();
}

absl::Status Interference::Apply(const manifest::Scenario& scenario, int64_t t_ms) {
  for (auto& [name, node] : nodes_) {
    if (node->contention) {
      RETURN_IF_ERROR(
          ApplyContention(*node, scenario.FactorVia(name, SlowdownVia::kCpuContention, t_ms)));
    }
    WritePids(name, *node);
    if (node->relay) {
      const double factor = scenario.FactorVia(name, SlowdownVia::kSlowData, t_ms);
      node->relay->SetDelayUs(
          static_cast<int64_t>((factor - 1) * static_cast<double>(o_.step_device_us) / 2));
    }
    if (!node->nvml_file.empty()) {
      const bool active = scenario.FactorVia(name, SlowdownVia::kGpuThrottle, t_ms) > 1;
      const std::string state = active ? "throttle\n" : "ok\n";
      if (state != node->nvml_state && WriteFileAtomically(node->nvml_file, state).ok()) {
        node->nvml_state = state;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace antdt::local
