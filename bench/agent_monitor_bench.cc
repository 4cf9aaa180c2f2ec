// antdt-bench-agent-monitor: figures for the node agent and the Monitor, each
// beside a baseline measured in the same run.
//  1. Agent overhead: the real antdt-agent (--interval 1s, streaming to a real
//     `antdt monitor`) with 16 workers reporting 10 steps/s each through
//     client::StepReporter: its CPU (% of one core) and resident memory, beside
//     the same agent with no worker; and the workers' ReportStep latency.
//  2. Monitor ingest: monitor::Monitor in process, Ingest + CloseWindows over
//     pre-generated StepReports of one 256-worker job on one thread, beside a
//     protobuf CopyFrom of each report; then reports/s taken in by a real
//     `antdt monitor` on one core (taskset -c 0) over one agent stream: the
//     agent's batched sender (Outbox + MonitorLink) beside one report per
//     stream message (the path before batching), in the same run.
//  2b. The credential gate's cost: the same reports through a MonitorHub (the
//     operator's ingest path) on one thread, without a step gate and with the
//     credential gate (each report's digest compared with the job's).
//  3. Detection quality (computed, not timed), default MonitorConfig: windows
//     from a persistent 2x straggler's onset to PERSISTENT, beside K; false
//     positives of a healthy run with +-10% jitter.
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

namespace {

using antdt::Process;
using Clock = std::chrono::steady_clock;
namespace v1 = antdt::v1;

std::string g_bin_dir;
std::string g_work_dir;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

double Percentile(std::vector<double> v, double q) {
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

std::optional<Server> StartServer(const std::string& name, std::vector<std::string> argv,
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

std::optional<Server> StartMonitor(const std::string& name,
                                   const std::map<std::string, std::string>& env = {}) {
  return StartServer(name, {g_bin_dir + "/antdt", "monitor", "--listen", "127.0.0.1:0"}, env);
}

// The value of `series` ("name{labels}") in a Prometheus text exposition.
// With `ca_file`, over HTTPS (a server with TLS on).
std::optional<double> Metric(const std::string& address, const std::string& series,
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

// ---- 1. Agent overhead -------------------------------------------------------

// utime + stime of a process, in seconds.
std::optional<double> CpuSeconds(pid_t pid, const std::string& stat_path = "") {
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

// ---- 2. Monitor ingest -------------------------------------------------------

constexpr int kIngestWorkers = 256;
constexpr int64_t kT0 = 1'700'000'000'000;  // a round 10 s boundary

// Step reports of one job: 256 workers on 32 nodes, one 100 ms step each per
// round, spread over the round; worker 17 runs at 2x.
std::vector<v1::StepReport> MakeReports(int64_t n) {
  std::vector<v1::StepReport> out(static_cast<size_t>(n));
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(-0.1, 0.1);
  for (int64_t i = 0; i < n; ++i) {
    const int w = static_cast<int>(i % kIngestWorkers);
    const int64_t round = i / kIngestWorkers;
    v1::StepReport& r = out[static_cast<size_t>(i)];
    r.set_job("ctr-training");
    r.set_worker_id(absl::StrCat("worker-", w));
    r.set_role("worker");
    r.set_node(absl::StrCat("node-", w / 8));
    r.set_pid(1000 + w);
    r.set_step(round);
    r.set_samples(512);
    const double bpt = 0.1 * (w == 17 ? 2.0 : 1.0) * (1 + jitter(rng));
    r.set_bpt_seconds(bpt);
    r.set_data_wait_seconds(0.004);
    r.set_compute_seconds(bpt * 0.75);
    r.set_communication_seconds(bpt * 0.25 - 0.004);
    r.set_time_unix_ms(kT0 + round * 100 + w * 100 / kIngestWorkers);
  }
  return out;
}

struct IngestFigures {
  double copy_per_second = 0;
  double ingest_per_second = 0;
};

IngestFigures InProcessIngest(int64_t n) {
  auto t0 = Clock::now();
  const std::vector<v1::StepReport> reports = MakeReports(n);
  std::printf(
      "\n== Monitor ingest, in process, one thread: %lld step reports of one job (%d workers, "
      "10 s windows over %.0f s; generated in %.1f s) ==\n",
      static_cast<long long>(n), kIngestWorkers,
      static_cast<double>(reports.back().time_unix_ms() - kT0) / 1000, Seconds(Clock::now() - t0));

  // Baseline: copying each report into a reused message.
  v1::StepReport scratch;
  double sink = 0;
  t0 = Clock::now();
  for (const v1::StepReport& r : reports) {
    scratch.CopyFrom(r);
    sink += scratch.bpt_seconds();
  }
  const double copy_s = Seconds(Clock::now() - t0);

  auto monitor = *antdt::monitor::Monitor::Create(antdt::monitor::MonitorConfig{});
  Clock::duration closing{};
  int64_t closed_seen = 0, health_calls = 0;
  // Closes windows at `now` and, when one closed, reads the job's health as the
  // service's tick does.
  auto close = [&](int64_t now) {
    const auto c0 = Clock::now();
    monitor.CloseWindows(now);
    if (monitor.Stats().windows_closed != closed_seen) {
      closed_seen = monitor.Stats().windows_closed;
      for (const std::string& job : monitor.Jobs()) {
        sink += static_cast<double>(monitor.Health(job, now).workers_size());
        ++health_calls;
      }
    }
    closing += Clock::now() - c0;
  };
  t0 = Clock::now();
  for (size_t i = 0; i < reports.size(); ++i) {
    monitor.Ingest(reports[i]);
    if ((i + 1) % 10'000 == 0) close(reports[i].time_unix_ms());
  }
  close(reports.back().time_unix_ms() + 20'000);  // the last windows
  const double ingest_s = Seconds(Clock::now() - t0);
  const auto& st = monitor.Stats();

  IngestFigures f;
  f.copy_per_second = static_cast<double>(n) / copy_s;
  f.ingest_per_second = static_cast<double>(n) / ingest_s;
  std::printf("%-52s %12.0f reports/s  (%.3f s)\n", "StepReport CopyFrom (baseline)",
              f.copy_per_second, copy_s);
  std::printf("%-52s %12.0f reports/s  (%.3f s, %.2f us/report)\n",
              "Monitor Ingest + CloseWindows every 10,000 + Health", f.ingest_per_second, ingest_s,
              1e6 * ingest_s / static_cast<double>(n));
  std::printf("%-52s %12.1f%%\n", "  of which CloseWindows + Health",
              100 * Seconds(closing) / ingest_s);
  std::printf("%-52s %12.2fx the copy's time\n", "ratio", copy_s > 0 ? ingest_s / copy_s : 0);
  std::printf("%-52s %12s reports/s on one core\n", "aim", ">= 20000");
  std::printf(
      "accepted %lld, late %lld, early %lld, rejected %lld; %lld windows closed, "
      "%lld Health calls (checksum %.0f)\n",
      static_cast<long long>(st.step_reports), static_cast<long long>(st.late_reports),
      static_cast<long long>(st.early_reports), static_cast<long long>(st.rejected),
      static_cast<long long>(st.windows_closed), static_cast<long long>(health_calls), sink);
  std::fflush(stdout);
  return f;
}

// 2b: reports/s through a hub's Receive without and with the credential gate,
// alternating, `rounds` times each over `n` reports (within the Monitor's open
// windows: no window closes, so every report is taken in).
void GateCost(int64_t n, int rounds) {
  std::vector<v1::StepReport> reports = MakeReports(n);
  const std::string digest = antdt::TokenDigest("bench-job-token");
  for (v1::StepReport& r : reports) r.set_credential_digest(digest);
  double seconds[2] = {0, 0};
  int64_t accepted[2] = {0, 0};
  for (int i = 0; i < 2 * rounds; ++i) {
    const int gated = i % 2;
    antdt::monitor::MonitorHub hub(
        *antdt::monitor::Monitor::Create(antdt::monitor::MonitorConfig{}),
        &antdt::RealClock::Get());
    if (gated == 1) {
      hub.SetStepGate([&digest](const v1::StepReport& step) {
        return antdt::DigestsMatch(step.credential_digest(), digest);
      });
    }
    auto stream = hub.OpenStream("bench", [](const v1::MonitorMessage&) { return true; });
    v1::AgentMessage message;
    message.mutable_hello()->set_node("node-0");
    hub.Receive(*stream, message);
    const auto t0 = Clock::now();
    for (const v1::StepReport& r : reports) {
      *message.mutable_step() = r;
      hub.Receive(*stream, message);
    }
    seconds[gated] += Seconds(Clock::now() - t0);
    hub.CloseStream(*stream);
    const std::string text = prometheus::TextSerializer().Serialize(hub.Collector()->Collect());
    const std::string key = "antdt_monitor_reports_total{kind=\"step\"} ";
    const size_t at = text.find(key);
    int64_t taken = 0;
    if (at != std::string::npos) {
      (void)absl::SimpleAtoi(text.substr(at + key.size(), text.find('\n', at) - at - key.size()),
                             &taken);
    }
    accepted[gated] += taken;
  }
  const double rate[2] = {static_cast<double>(n) * rounds / seconds[0],
                          static_cast<double>(n) * rounds / seconds[1]};
  std::printf(
      "\n== The credential gate: %d x %lld step reports through MonitorHub::Receive, one thread, "
      "alternating ==\n",
      rounds, static_cast<long long>(n));
  std::printf("%-52s %12.0f reports/s  (%lld taken in)\n", "no gate (baseline)", rate[0],
              static_cast<long long>(accepted[0]));
  std::printf("%-52s %12.0f reports/s  (%lld taken in)\n", "credential gate (digest compared)",
              rate[1], static_cast<long long>(accepted[1]));
  std::printf("%-52s %12.2f\n", "rate ratio", rate[0] > 0 ? rate[1] / rate[0] : 0);
  std::fflush(stdout);
}

// Certificates for the TLS figures (scripts/make-certs.sh, next to the build,
// with a node certificate for bench-node); "" when the script is not there.
std::string MakeCerts() {
  const std::string script = g_bin_dir + "/../../scripts/make-certs.sh";
  const std::string dir = g_work_dir + "/tls";
  if (!std::filesystem::exists(script) ||
      std::system((script + " " + dir + " bench-node >/dev/null").c_str()) != 0) {
    return "";
  }
  return dir;
}

// How the stream's reports are sent.
enum class Sender {
  kSingle,  // one report per stream message: what the agent sent before batching
  kBatch,   // StepBatch messages of kBatchReports, written by the bench itself
  kAgent,   // the agent's own sender: an Outbox fed one report at a time, drained
            // by a MonitorLink (batches of up to Outbox::Batching::max_reports)
};
constexpr int kBatchReports = 512;
constexpr char kTaskset[] = "/usr/bin/taskset";  // util-linux

struct StreamFigures {
  double accepted_per_second = 0;
  int64_t sent = 0;
  double accepted = 0;
  double monitor_cpu = 0;  // the Monitor's CPU seconds over the measurement / its wall time
  int64_t dropped = 0;     // by the agent's Outbox (kAgent)
  std::string status = "OK";
};

// Pins the calling thread, and the threads it starts from now on, to `cpu`
// (no-op with fewer CPUs).
void PinTo(int cpu) {
  if (static_cast<int>(std::thread::hardware_concurrency()) <= cpu) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);
}

// The i-th report of the stream's 256 workers, stamped now.
void FillReport(int64_t i, v1::StepReport& r) {
  const int w = static_cast<int>(i % kIngestWorkers);
  r.set_job("ctr-training");
  r.set_worker_id(absl::StrCat("worker-", w));
  r.set_role("worker");
  r.set_node("bench-node");
  r.set_pid(1000 + w);
  r.set_step(i / kIngestWorkers);
  r.set_samples(512);
  r.set_bpt_seconds(0.1 * (1 + 0.01 * (w % 10)));
  r.set_data_wait_seconds(0.004);
  r.set_compute_seconds(0.075);
  r.set_communication_seconds(0.021);
  r.set_time_unix_ms(NowUnixMs());
}

// Streams step reports to a real `antdt monitor` (pinned to CPU 0 with
// taskset, so it has one core; the bench's own threads run on CPU 1) over one
// Monitor stream, as an agent does, for `seconds` after a 0.5 s warm-up; the
// rate is the Monitor's own count of step reports taken in over that time.
// With `tls_dir` over mutual TLS (the Monitor's server certificate, the client
// bench-node's).
std::optional<StreamFigures> StreamIngest(double seconds, Sender sender,
                                          const std::string& tls_dir) {
  std::map<std::string, std::string> env;
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  grpc::ChannelArguments args;
  if (!tls_dir.empty()) {
    env = {{"ANTDT_TLS_CERT", tls_dir + "/server.crt"},
           {"ANTDT_TLS_KEY", tls_dir + "/server.key"},
           {"ANTDT_TLS_CA", tls_dir + "/ca.crt"}};
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = *antdt::ReadFile(tls_dir + "/ca.crt");
    o.pem_cert_chain = *antdt::ReadFile(tls_dir + "/node-bench-node.crt");
    o.pem_private_key = *antdt::ReadFile(tls_dir + "/node-bench-node.key");
    credentials = grpc::SslCredentials(o);
    args.SetSslTargetNameOverride("antdt.internal");
  }
  const std::string name = tls_dir.empty() ? "ingest-monitor" : "ingest-monitor-tls";
  auto server = StartServer(
      name, {kTaskset, "-c", "0", g_bin_dir + "/antdt", "monitor", "--listen", "127.0.0.1:0"}, env);
  if (!server) return std::nullopt;
  const std::string ca = tls_dir.empty() ? "" : tls_dir + "/ca.crt";
  StreamFigures f;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> sent{0};
  std::thread client;
  // The agent's sender, for kAgent.
  prometheus::Registry registry;
  antdt::agent::Outbox outbox(10'000);
  antdt::agent::DirectiveTable directives;
  antdt::agent::NodeView view;
  std::unique_ptr<antdt::agent::MonitorLink> link;
  // The bench's own stream, for kSingle and kBatch.
  auto stub = v1::Monitor::NewStub(grpc::CreateCustomChannel(server->address, credentials, args));
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::MonitorMessage>> stream;
  std::thread reader;
  if (sender == Sender::kAgent) {
    antdt::agent::MonitorLinkOptions options;
    options.address = server->address;
    options.node = "bench-node";
    link =
        std::make_unique<antdt::agent::MonitorLink>(options, &outbox, &directives, &view, registry);
    link->Start();
    if (!antdt::WaitFor([&] { return link->connected(); }, std::chrono::seconds(15))) {
      std::fprintf(stderr, "the agent's link never connected; see %s\n", server->log.c_str());
      return std::nullopt;
    }
    // One report per message, as AgentServiceImpl::ReportStep queues a call's
    // report; held back while 8,000 wait, so the Outbox (10,000) drops none.
    client = std::thread([&] {
      int64_t i = 0;
      while (!stop) {
        if (outbox.size() >= 8'000) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          continue;
        }
        v1::AgentMessage m;
        FillReport(i++, *m.mutable_step());
        outbox.Push(std::move(m));
        sent.fetch_add(1, std::memory_order_relaxed);
      }
    });
  } else {
    stream = stub->Stream(&ctx);
    stream->WaitForInitialMetadata();
    v1::AgentMessage hello;
    hello.mutable_hello()->set_node("bench-node");
    stream->Write(hello);
    reader = std::thread([&] {
      v1::MonitorMessage m;
      while (stream->Read(&m)) {
      }
    });
    client = std::thread([&] {
      const int per_message = sender == Sender::kSingle ? 1 : kBatchReports;
      v1::AgentMessage m;
      int64_t i = 0;
      while (!stop) {
        if (sender == Sender::kSingle) {
          FillReport(i++, *m.mutable_step());
        } else {
          auto* steps = m.mutable_steps()->mutable_steps();
          while (steps->size() < per_message) steps->Add();
          for (v1::StepReport& r : *steps) FillReport(i++, r);
        }
        if (!stream->Write(m)) break;
        sent.fetch_add(per_message, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // warm-up
  const double before = Metric(server->metrics, kStepReports, ca).value_or(0);
  const double cpu_before = CpuSeconds(server->proc->pid()).value_or(0);
  const int64_t sent_before = sent;
  const auto start = Clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double after = Metric(server->metrics, kStepReports, ca).value_or(0);
  const double cpu_after = CpuSeconds(server->proc->pid()).value_or(0);
  const double elapsed = Seconds(Clock::now() - start);
  f.sent = sent - sent_before;
  stop = true;
  client.join();
  if (stream) {
    stream->WritesDone();
    reader.join();  // the Monitor ends the stream once it has read everything
    const grpc::Status status = stream->Finish();
    if (!status.ok()) f.status = status.error_message();
  }
  link.reset();
  f.dropped = outbox.dropped_step_reports();
  f.accepted = after - before;
  f.accepted_per_second = f.accepted / elapsed;
  f.monitor_cpu = (cpu_after - cpu_before) / elapsed;
  return f;
}

// The stream's ingest: the agent's batched sender beside single-report
// messages (the path before batching) in the same run, plaintext and over
// mutual TLS, beside in-process.
bool GrpcIngest(double seconds, const IngestFigures& in_process) {
  PinTo(1);  // the bench's threads from here on; the Monitor has CPU 0
  const std::optional<StreamFigures> single = StreamIngest(seconds, Sender::kSingle, "");
  const std::optional<StreamFigures> agent = StreamIngest(seconds, Sender::kAgent, "");
  const std::optional<StreamFigures> batch = StreamIngest(seconds, Sender::kBatch, "");
  if (!single || !agent || !batch) return false;
  const std::string tls_dir = MakeCerts();
  std::optional<StreamFigures> tls_single, tls_batch;
  if (!tls_dir.empty()) {
    tls_single = StreamIngest(seconds, Sender::kSingle, tls_dir);
    tls_batch = StreamIngest(seconds, Sender::kBatch, tls_dir);
  }
  std::printf(
      "\n== Monitor ingest through gRPC: one agent stream to antdt monitor on one core (taskset "
      "-c 0; the sender on CPU 1 of %u), %.0f s each ==\n",
      std::thread::hardware_concurrency(), seconds);
  std::printf("%-52s %12.0f reports/s\n", "in process, above (reference)",
              in_process.ingest_per_second);
  auto row = [](const char* what, const StreamFigures& f) {
    std::printf(
        "%-52s %12.0f reports/s  (Monitor CPU %.0f%% of its core; %lld sent, %.0f taken in, "
        "%lld dropped, stream %s)\n",
        what, f.accepted_per_second, 100 * f.monitor_cpu, static_cast<long long>(f.sent),
        f.accepted, static_cast<long long>(f.dropped), f.status.c_str());
  };
  row("one report per message (before batching; baseline)", *single);
  row("the agent's sender: Outbox + MonitorLink, batched", *agent);
  row(absl::StrCat("StepBatch of ", kBatchReports, " per message, from the bench").c_str(), *batch);
  std::printf("%-52s %12.2fx\n", "ratio agent's batched / one per message",
              agent->accepted_per_second / single->accepted_per_second);
  std::printf("%-52s %12s reports/s on one core\n", "aim", ">= 500000");
  if (tls_single && tls_batch) {
    row("mutual TLS, one report per message", *tls_single);
    row(absl::StrCat("mutual TLS, StepBatch of ", kBatchReports).c_str(), *tls_batch);
    std::printf("%-52s %12.2fx\n", "ratio TLS batched / plaintext batched",
                tls_batch->accepted_per_second / batch->accepted_per_second);
  } else {
    std::printf("(no TLS figure: scripts/make-certs.sh not found next to the build)\n");
  }
  std::fflush(stdout);
  return true;
}

// ---- 3. Detection quality ----------------------------------------------------

struct Sim {
  antdt::monitor::Monitor monitor = *antdt::monitor::Monitor::Create({});
  std::mt19937_64 rng;
  int window = 0;
  explicit Sim(uint64_t seed) : rng(seed) {}

  // One report per worker per window (each window BPT carries the whole
  // jitter: the harshest case); closes the window when the service would.
  v1::GetJobHealthResponse Step(int workers, double jitter, int slow, double factor) {
    std::uniform_real_distribution<double> unit(-1, 1);
    const int64_t window_ms = monitor.Config().window_ms;
    const int64_t start = kT0 + window * window_ms;
    for (int w = 0; w < workers; ++w) {
      v1::StepReport r;
      r.set_job("j");
      r.set_worker_id(absl::StrCat("w", w));
      r.set_role("worker");
      r.set_node(absl::StrCat("node-", w));
      r.set_samples(64);
      r.set_bpt_seconds(0.1 * (w == slow ? factor : 1.0) * (1 + jitter * unit(rng)));
      r.set_time_unix_ms(start + window_ms / 2);
      monitor.Ingest(r);
    }
    ++window;
    const int64_t close = start + window_ms + monitor.Config().allowed_lateness_ms;
    monitor.CloseWindows(close);
    return monitor.Health("j", close);
  }
};

bool IsStraggler(v1::StragglerClass c) {
  return c == v1::TRANSIENT || c == v1::PERSISTENT || c == v1::DETERMINISTIC;
}

struct Healthy {
  int flagged_windows = 0;
  double max_score = 0;
};

Healthy HealthyRun(double jitter, int windows) {
  Sim sim(20240415);
  Healthy h;
  for (int n = 0; n < windows; ++n) {
    bool flagged = false;
    const v1::GetJobHealthResponse health = sim.Step(32, jitter, -1, 1);
    for (const auto& w : health.workers()) {
      flagged = flagged || IsStraggler(w.class_());
      h.max_score = std::max(h.max_score, w.score());
    }
    h.flagged_windows += flagged;
  }
  return h;
}

void Detection() {
  const antdt::monitor::MonitorConfig config;
  const int k = config.persistent_windows;
  std::printf(
      "\n== Detection quality, default MonitorConfig (window %lld s, K=%d, threshold %.2f), "
      "32 workers, +-10%% uniform jitter, one report per worker per window ==\n",
      static_cast<long long>(config.window_ms / 1000), k, config.straggler_threshold);
  const int onset = 20;
  std::vector<int> latencies, first_flags;
  int undetected = 0, others_flagged = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Sim sim(seed);
    const int target = static_cast<int>(seed % 32);
    const std::string id = absl::StrCat("w", target);
    int persistent = -1, flagged = -1;
    for (int n = 0; n < onset + 20 && persistent < 0; ++n) {
      const v1::GetJobHealthResponse health = sim.Step(32, 0.10, n >= onset ? target : -1, 2.0);
      for (const auto& w : health.workers()) {
        if (w.worker_id() != id) {
          others_flagged += IsStraggler(w.class_());
          continue;
        }
        if (flagged < 0 && IsStraggler(w.class_())) flagged = n;
        if (w.class_() == v1::PERSISTENT) persistent = n;
      }
    }
    if (persistent < 0) {
      ++undetected;
      continue;
    }
    latencies.push_back(persistent - onset + 1);
    first_flags.push_back(flagged - onset + 1);
  }
  std::sort(latencies.begin(), latencies.end());
  std::sort(first_flags.begin(), first_flags.end());
  auto mmm = [](const std::vector<int>& v) {
    if (v.empty()) return std::string("none");
    return absl::StrCat(v.front(), " / ", v[v.size() / 2], " / ", v.back());
  };
  std::printf(
      "persistent 2x straggler from window %d, 20 seeds (windows to detect, "
      "min / median / max):\n",
      onset);
  std::printf("  %-48s %s\n", "first flagged (TRANSIENT)", mmm(first_flags).c_str());
  std::printf("  %-48s %s  (undetected: %d; other workers flagged: %d)\n", "PERSISTENT",
              mmm(latencies).c_str(), undetected, others_flagged);
  std::printf("  %-48s %d  (K consecutive slow windows by definition)\n", "floor (baseline)", k);
  if (!latencies.empty()) {
    std::printf("  %-48s %.2fx  (aim: <= 3 windows)\n", "median ratio to the floor",
                static_cast<double>(latencies[latencies.size() / 2]) / k);
  }
  const Healthy ten = HealthyRun(0.10, 1000);
  const Healthy twenty = HealthyRun(0.20, 1000);
  std::printf(
      "healthy run, 32 workers x 1,000 windows (windows with anyone TRANSIENT, "
      "PERSISTENT or DETERMINISTIC):\n");
  std::printf("  %-48s %d  (aim: 0; max score %.3f = %.2fx threshold %.2f)\n", "+-10% jitter",
              ten.flagged_windows, ten.max_score, ten.max_score / config.straggler_threshold,
              config.straggler_threshold);
  std::printf("  %-48s %d  (max score %.3f)\n", "+-20% jitter (reference: where they begin)",
              twenty.flagged_windows, twenty.max_score);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = antdt::ParseFlags(argc, argv, {"seconds", "reports", "work-dir", "bin-dir"},
                                 {"skip-agent", "skip-ingest", "skip-detection"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  std::error_code ec;
  g_bin_dir =
      flags->Get("bin-dir", std::filesystem::read_symlink("/proc/self/exe", ec).parent_path());
  g_work_dir = flags->Get("work-dir", "/tmp/antdt-bench-agent-monitor");
  std::filesystem::create_directories(g_work_dir);
  double seconds = 30;
  int64_t reports = 2'000'000;
  if (!absl::SimpleAtod(flags->Get("seconds", "30"), &seconds) || !(seconds > 0)) {
    std::fprintf(stderr, "--seconds: must be a positive number\n");
    return 2;
  }
  if (!absl::SimpleAtoi(flags->Get("reports", "2000000"), &reports) || reports < 10'000) {
    std::fprintf(stderr, "--reports: must be an integer >= 10000\n");
    return 2;
  }
  std::printf("machine: %u cores; the bench, agent and Monitor share them\n",
              std::thread::hardware_concurrency());
  std::fflush(stdout);
  if (!flags->Has("skip-agent") && !AgentOverhead(seconds)) return 1;
  if (!flags->Has("skip-ingest")) {
    const IngestFigures f = InProcessIngest(reports);
    GateCost(200'000, 5);
    if (!GrpcIngest(std::min(seconds, 5.0), f)) return 1;
  }
  if (!flags->Has("skip-detection")) Detection();
  return 0;
}
