// antdt-bench-agent-monitor, section 3 (bench/agent_monitor_bench.cc says what each figure is).
#include "bench/agent_monitor_common.h"

namespace agent_monitor_bench {

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

}  // namespace agent_monitor_bench
