// What the sections of antdt-bench-agent-monitor share: the binaries' and
// work folders, a started server, percentiles; and each section's entry.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "antdt/v1/monitor.grpc.pb.h"
#include "client/step_reporter.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/process.h"
#include "core/monitor/monitor.h"
#include "prometheus/text_serializer.h"
#include "services/agent/core/agent.h"
#include "services/monitor/monitor_hub.h"

namespace agent_monitor_bench {

using antdt::Process;
using Clock = std::chrono::steady_clock;
namespace v1 = antdt::v1;

inline std::string g_bin_dir;
inline std::string g_work_dir;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

inline int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// A child started from the binary's directory; stopped with SIGTERM, then
// SIGKILL if it is still there after 10 s.
struct Server {
  std::unique_ptr<Process> proc;
  std::string address;
  std::string metrics;
  std::string log;

  Server() = default;
  Server(Server&&) = default;
  Server& operator=(Server&&) = default;
  ~Server() { Stop(); }
  void Stop() {
    if (!proc) return;
    proc->Signal(SIGTERM);
    if (!proc->Wait(std::chrono::seconds(10))) {
      std::fprintf(stderr, "%s ignored SIGTERM for 10 s; killing it\n", log.c_str());
      proc->Signal(SIGKILL);
      proc->Wait(std::chrono::seconds(10));
    }
    proc.reset();
  }
};

inline std::optional<Server> StartServer(const std::string& name, std::vector<std::string> argv,
                                         const std::map<std::string, std::string>& env = {}) {
  const std::string ready = g_work_dir + "/" + name + ".ready";
  std::filesystem::remove(ready);
  argv.insert(argv.end(), {"--ready-file", ready, "--metrics-listen", "127.0.0.1:0"});
  Server s;
  s.log = g_work_dir + "/" + name + ".log";
  s.proc = std::make_unique<Process>(argv, s.log, env);
  auto address = antdt::WaitForReadyFile(ready, std::chrono::seconds(30));
  if (!address) {
    std::fprintf(stderr, "%s did not start; see %s\n", name.c_str(), s.log.c_str());
    return std::nullopt;
  }
  s.address = *address;
  s.metrics = antdt::ReadyFileField(ready, "metrics").value_or("");
  return s;
}

inline std::optional<Server> StartMonitor(const std::string& name,
                                          const std::map<std::string, std::string>& env = {}) {
  return StartServer(name, {g_bin_dir + "/antdt", "monitor", "--listen", "127.0.0.1:0"}, env);
}

// The value of `series` ("name{labels}") in a Prometheus text exposition.
// With `ca_file`, over HTTPS (a server with TLS on).
inline std::optional<double> Metric(const std::string& address, const std::string& series,
                                    const std::string& ca_file = "") {
  auto text = ca_file.empty() ? antdt::HttpGet(address, "/metrics")
                              : antdt::HttpsGet(address, "/metrics", ca_file, "localhost");
  if (!text) return std::nullopt;
  const std::string body = "\n" + *text;
  const size_t pos = body.rfind("\n" + series + " ");
  if (pos == std::string::npos) return std::nullopt;
  const size_t start = pos + series.size() + 2;
  double v = 0;
  if (!absl::SimpleAtod(body.substr(start, body.find('\n', start) - start), &v)) {
    return std::nullopt;
  }
  return v;
}

const char kStepReports[] = "antdt_monitor_reports_total{kind=\"step\"}";

struct IngestFigures {
  double copy_per_second = 0;
  double ingest_per_second = 0;
};

// Report times start here: a round 10 s boundary.
inline constexpr int64_t kT0 = 1'700'000'000'000;

// CPU seconds of `pid` (or of the /proc stat file `stat_path`), nullopt when gone.
std::optional<double> CpuSeconds(pid_t pid, const std::string& stat_path = "");

// 1. agent_overhead.cc: the agent's CPU and memory with 16 workers against none.
bool AgentOverhead(double seconds);
// 2. monitor_ingest.cc: reports per second into the Monitor, in process and over streams.
IngestFigures InProcessIngest(int64_t n);
void GateCost(int64_t n, int rounds);
bool GrpcIngest(double seconds, const IngestFigures& in_process);
// 3. detection.cc: how soon a straggler is named, and how often a healthy worker is.
void Detection();

}  // namespace agent_monitor_bench
