// antdt-bench-agent-monitor, section 1 (bench/agent_monitor_bench.cc says what each figure is).
#include "bench/agent_monitor_common.h"

namespace agent_monitor_bench {

// ---- 1. Agent overhead -------------------------------------------------------

// utime + stime of a process, in seconds.
std::optional<double> CpuSeconds(pid_t pid, const std::string& stat_path) {
  std::ifstream in(stat_path.empty() ? "/proc/" + std::to_string(pid) + "/stat" : stat_path);
  std::string line;
  if (!std::getline(in, line)) return std::nullopt;
  const size_t paren = line.rfind(')');  // comm may hold spaces
  if (paren == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(paren + 2));
  std::string field;
  long long utime = 0, stime = 0;
  // After comm: state is field 3; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// A "VmRSS:" style line of /proc/PID/status, in MB.
double StatusMb(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    double kb = 0;
    std::istringstream(line.substr(key.size() + 1)) >> kb;
    return kb / 1024;
  }
  return -1;
}

// Per thread of a process: name, CPU seconds and context switches, by thread id.
struct ThreadStat {
  std::string name;
  double cpu_seconds = 0;
  int64_t switches = 0;  // voluntary + involuntary
};
std::map<std::string, ThreadStat> Threads(pid_t pid) {
  std::map<std::string, ThreadStat> out;
  std::error_code ec;
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string tid = entry.path().filename();
    ThreadStat t;
    std::ifstream comm(entry.path() / "comm");
    std::getline(comm, t.name);
    if (auto cpu = CpuSeconds(std::stoi(tid), entry.path() / "stat")) t.cpu_seconds = *cpu;
    std::ifstream status(entry.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.find("ctxt_switches:") == std::string::npos) continue;
      t.switches += std::stoll(line.substr(line.find(':') + 1));
    }
    out[tid] = t;
  }
  return out;
}

struct AgentFigures {
  bool ok = false;
  double wall = 0;
  double cpu_seconds = 0;
  double cpu_percent = 0;
  double rss_mb = 0;
  double hwm_mb = 0;
  int64_t reports = 0;   // ReportStep calls that succeeded during the measurement
  int64_t failures = 0;  // and those that failed
  double monitor_got = 0;
  std::vector<double> latency_ms;
  int64_t switches = 0;                       // context switches of the agent's threads
  std::map<std::string, double> cpu_by_name;  // CPU seconds by thread name
};

// Runs a fresh agent streaming to `monitor` for `seconds` while `workers`
// threads report a step every 100 ms each.
AgentFigures MeasureAgent(const Server& monitor, int workers, double seconds) {
  AgentFigures f;
  const std::string name = "agent-" + std::to_string(workers);
  auto agent = StartServer(name, {g_bin_dir + "/antdt-agent", "--node", name, "--listen",
                                  "127.0.0.1:0", "--monitor", monitor.address, "--interval", "1s"});
  if (!agent) return f;
  if (!antdt::WaitFor(
          [&] { return Metric(agent->metrics, "antdt_agent_monitor_connected").value_or(0) == 1; },
          std::chrono::seconds(15))) {
    std::fprintf(stderr, "%s never connected to the Monitor; see %s\n", name.c_str(),
                 agent->log.c_str());
    return f;
  }
  const double monitor_before = Metric(monitor.metrics, kStepReports).value_or(0);

  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  Clock::time_point start, end;
  std::vector<std::vector<double>> lat(workers);
  std::vector<int64_t> ok(workers, 0), failed(workers, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      antdt::client::StepReporterOptions options;
      options.agent_address = agent->address;
      options.job = "bench";
      options.worker_id = absl::StrCat("w", w);
      antdt::client::StepReporter reporter(options);
      std::mt19937_64 rng(static_cast<uint64_t>(w) + 1);
      std::uniform_real_distribution<double> jitter(-0.1, 0.1);
      int64_t step = 0;
      auto timing = [&] {
        antdt::client::StepTiming t;
        t.step = step++;
        t.samples = 64;
        t.bpt_seconds = 0.1 * (1 + jitter(rng));
        t.data_wait_seconds = 0.005;
        t.compute_seconds = t.bpt_seconds * 0.8;
        t.communication_seconds = t.bpt_seconds * 0.2 - 0.005;
        return t;
      };
      (void)reporter.Report(timing());  // connects; not measured
      ++ready;
      while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      // Spread the workers over the 100 ms step, as independent trainers are.
      auto next = start + std::chrono::microseconds(100'000 * w / workers);
      while (next < end) {
        std::this_thread::sleep_until(next);
        next += std::chrono::milliseconds(100);
        auto t = Clock::now();
        if (reporter.Report(timing()).ok()) {
          lat[w].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t).count());
          ++ok[w];
        } else {
          ++failed[w];
        }
      }
    });
  }
  while (ready < workers) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const pid_t pid = agent->proc->pid();
  const double cpu0 = CpuSeconds(pid).value_or(0);
  const auto threads0 = Threads(pid);
  start = Clock::now();
  end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  go = true;
  std::this_thread::sleep_until(end);
  const double cpu1 = CpuSeconds(pid).value_or(0);
  for (const auto& [tid, t] : Threads(pid)) {
    auto it = threads0.find(tid);
    const bool known = it != threads0.end();
    f.cpu_by_name[t.name] += t.cpu_seconds - (known ? it->second.cpu_seconds : 0);
    f.switches += t.switches - (known ? it->second.switches : 0);
  }
  f.wall = Seconds(Clock::now() - start);
  f.rss_mb = StatusMb(pid, "VmRSS");
  f.hwm_mb = StatusMb(pid, "VmHWM");
  for (auto& t : threads) t.join();
  f.cpu_seconds = cpu1 - cpu0;
  f.cpu_percent = 100 * f.cpu_seconds / f.wall;
  for (int w = 0; w < workers; ++w) {
    f.reports += ok[w];
    f.failures += failed[w];
    f.latency_ms.insert(f.latency_ms.end(), lat[w].begin(), lat[w].end());
  }
  // What reached the Monitor (the agent forwards within milliseconds).
  antdt::WaitFor(
      [&] {
        f.monitor_got = Metric(monitor.metrics, kStepReports).value_or(0) - monitor_before;
        return f.monitor_got >= static_cast<double>(f.reports);
      },
      std::chrono::seconds(5));
  f.ok = true;
  return f;
}

bool AgentOverhead(double seconds) {
  const int kWorkers = 16;
  auto monitor = StartMonitor("agent-monitor");
  if (!monitor) return false;
  std::printf(
      "\n== Agent overhead: antdt-agent --interval 1s streaming to antdt monitor, %d workers x "
      "10 steps/s vs. no worker, %.0f s each ==\n",
      kWorkers, seconds);
  AgentFigures idle = MeasureAgent(*monitor, 0, seconds);
  if (!idle.ok) return false;
  AgentFigures busy = MeasureAgent(*monitor, kWorkers, seconds);
  if (!busy.ok) return false;
  auto ratio = [](double a, double b) {
    char buf[32] = "        n/a";
    if (b > 0) std::snprintf(buf, sizeof(buf), "%11.2fx", a / b);
    return std::string(buf);
  };
  std::printf("%-28s | %12s %9s %9s | %s\n", "", "CPU % core", "VmRSS MB", "VmHWM MB",
              "ctx switches/s");
  std::printf("%-28s | %12.3f %9.1f %9.1f | %.0f\n", "0 workers (baseline)", idle.cpu_percent,
              idle.rss_mb, idle.hwm_mb, static_cast<double>(idle.switches) / idle.wall);
  std::printf("%-28s | %12.3f %9.1f %9.1f | %.0f\n", "16 workers x 10 steps/s", busy.cpu_percent,
              busy.rss_mb, busy.hwm_mb, static_cast<double>(busy.switches) / busy.wall);
  std::printf("%-28s | %s %8.2fx %8.2fx |\n", "ratio to the baseline",
              ratio(busy.cpu_percent, idle.cpu_percent).c_str(), busy.rss_mb / idle.rss_mb,
              busy.hwm_mb / idle.hwm_mb);
  std::printf("%-28s | %12s %9s %9s |\n", "aim (16 workers)", "< 1", "< 30", "");
  std::printf(
      "step reports: %lld ok, %lld failed (%.0f/s); %.0f reached the Monitor "
      "(incl. %d connection warm-ups)\n",
      static_cast<long long>(busy.reports), static_cast<long long>(busy.failures),
      static_cast<double>(busy.reports) / busy.wall, busy.monitor_got, kWorkers);
  if (busy.reports > 0) {
    const double extra_cpu = busy.cpu_seconds - idle.cpu_seconds * busy.wall / idle.wall;
    const double extra_switches = static_cast<double>(busy.switches) -
                                  static_cast<double>(idle.switches) * busy.wall / idle.wall;
    std::printf(
        "per step report, above the baseline: %.1f us of agent CPU, %.1f context "
        "switches\n",
        1e6 * extra_cpu / static_cast<double>(busy.reports),
        extra_switches / static_cast<double>(busy.reports));
  }
  // Where the agent's CPU went, by thread name (as the kernel truncates it).
  std::vector<std::pair<double, std::string>> by_name;
  for (const auto& [name, cpu] : busy.cpu_by_name) {
    if (cpu > 0) by_name.emplace_back(cpu, name);
  }
  std::sort(by_name.rbegin(), by_name.rend());
  std::printf(
      "agent CPU by thread name, 16 workers (share of the total; ended threads not listed):");
  for (const auto& [cpu, name] : by_name) {
    std::printf(" %s %.0f%%", name.c_str(), 100 * cpu / std::max(busy.cpu_seconds, 1e-9));
  }
  std::printf("\n");
  std::printf(
      "ReportStep latency (StepReporter, TCP 127.0.0.1): p50 %.3f ms, p99 %.3f ms, "
      "max %.3f ms over %zu calls\n",
      Percentile(busy.latency_ms, 0.5), Percentile(busy.latency_ms, 0.99),
      Percentile(busy.latency_ms, 1.0), busy.latency_ms.size());
  std::fflush(stdout);
  return true;
}

}  // namespace agent_monitor_bench
