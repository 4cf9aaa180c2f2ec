// antdt-bench-monitor-scale: what one Monitor window costs at 1,000 and
// 10,000 members, in process, one thread.
//
// A job of N workers on N nodes (one node sample each, with CPU, pressure and
// memory), 8% of them slowed 2-3x from the third window on: each window, one
// step report per worker per second, then CloseWindows. Printed per size:
// - ingest: the window's step reports and node samples, per member (the
//   baseline: linear in the members by construction);
// - close: CloseWindows (scoring, classes, straggler records with causes),
//   per member, and its ratio to ingest;
// - attribution alone, both ways over the same window's signals: each
//   straggler's peers listed and scanned (what the Monitor did before: a
//   pass over its role per straggler, O(stragglers x members)) against the
//   role's values sorted once (PeerSignals: O(members log members)).
// And the growth from 1,000 to 10,000 members of each (10x members; linear
// work grows about 10x).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/monitor/causes.h"
#include "core/monitor/monitor.h"

namespace {

namespace v1 = antdt::v1;
using antdt::monitor::AttributeCause;
using antdt::monitor::CauseThresholds;
using antdt::monitor::Monitor;
using antdt::monitor::MonitorConfig;
using antdt::monitor::PeerSignals;
using antdt::monitor::SignalValues;
using Clock = std::chrono::steady_clock;

constexpr int64_t kT0 = 1'700'000'000'000;
constexpr int64_t kWindowMs = 5'000;
constexpr int kWindows = 8;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct Figures {
  int members = 0;
  int stragglers = 0;                 // in the last window's health
  double ingest_s = 0, close_s = 0;   // per window, mean over the slowed windows
  double listed_s = 0, sorted_s = 0;  // attribution alone, one window
};

bool Slowed(int w) { return w % 25 == 3 || w % 25 == 11; }  // 8%

v1::NodeSample Sample(int w, int64_t t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  v1::NodeSample s;
  s.set_node(absl::StrCat("node-", w));
  s.set_time_unix_ms(t);
  s.mutable_cpu()->set_utilization(0.6 + 0.3 * u(rng));
  s.mutable_pressure()->set_cpu_some_avg10(5 * u(rng));
  s.mutable_pressure()->set_memory_some_avg10(u(rng));
  s.mutable_pressure()->set_io_some_avg10(u(rng));
  s.mutable_memory()->set_total_bytes(64LL << 30);
  s.mutable_memory()->set_available_bytes((32LL << 30) + static_cast<int64_t>(u(rng) * 1e9));
  s.set_neighbour_cpu_cores(Slowed(w) ? 3 + u(rng) : 0.1 * u(rng));
  return s;
}

Figures Run(int n) {
  Figures f;
  f.members = n;
  MonitorConfig config;
  config.window_ms = kWindowMs;
  Monitor monitor = *Monitor::Create(config);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(-0.05, 0.05);
  double ingest = 0, close = 0;
  int measured = 0;
  for (int window = 0; window < kWindows; ++window) {
    const int64_t start = kT0 + window * kWindowMs;
    std::vector<v1::StepReport> reports;
    std::vector<v1::NodeSample> samples;
    reports.reserve(static_cast<size_t>(n) * 5);
    for (int step = 0; step < 5; ++step) {
      for (int w = 0; w < n; ++w) {
        v1::StepReport& r = reports.emplace_back();
        r.set_job("scale");
        r.set_worker_id(absl::StrCat("worker-", w));
        r.set_role("worker");
        r.set_node(absl::StrCat("node-", w));
        r.set_step(window * 5 + step);
        r.set_samples(32);
        const double slow = window >= 2 && Slowed(w) ? 2.0 + (w % 3) * 0.5 : 1.0;
        const double bpt = 0.64 * slow * (1 + jitter(rng));
        r.set_bpt_seconds(bpt);
        r.set_data_wait_seconds(0.004);
        r.set_compute_seconds(bpt * 0.9);
        r.set_communication_seconds(bpt * 0.1 - 0.004);
        r.set_time_unix_ms(start + step * 1000 + w % 1000);
      }
    }
    for (int w = 0; w < n; ++w) samples.push_back(Sample(w, start + 4'500, rng));
    auto t0 = Clock::now();
    for (const v1::StepReport& r : reports) monitor.Ingest(r);
    for (const v1::NodeSample& s : samples) monitor.Ingest(s);
    auto t1 = Clock::now();
    monitor.CloseWindows(start + kWindowMs + 1);
    auto t2 = Clock::now();
    if (window >= 3) {
      ingest += Seconds(t1 - t0);
      close += Seconds(t2 - t1);
      ++measured;
    }
  }
  f.ingest_s = ingest / measured;
  f.close_s = close / measured;
  const v1::GetJobHealthResponse health = monitor.Health("scale", kT0 + kWindows * kWindowMs);
  for (const auto& r : health.stragglers()) {
    f.stragglers += r.active() ? 1 : 0;
  }

  // Attribution alone over one window's signals, both ways.
  std::vector<SignalValues> values(static_cast<size_t>(n));
  for (int w = 0; w < n; ++w) {
    values[static_cast<size_t>(w)] = antdt::monitor::NodeSignalValues(Sample(w, kT0, rng));
    values[static_cast<size_t>(w)]["communication_share"] = 0.1 + 0.01 * jitter(rng);
    values[static_cast<size_t>(w)]["data_wait_share"] = 0.006;
    values[static_cast<size_t>(w)]["cpu_wait_share"] = 0.02 + 0.01 * jitter(rng);
  }
  const CauseThresholds th;
  int agree = 0, slowed = 0;
  auto t0 = Clock::now();
  std::vector<v1::Cause> listed;
  for (int w = 0; w < n; ++w) {
    if (!Slowed(w)) continue;
    std::vector<const SignalValues*> peers;
    for (int p = 0; p < n; ++p) {
      if (p != w) peers.push_back(&values[static_cast<size_t>(p)]);
    }
    listed.push_back(AttributeCause(values[static_cast<size_t>(w)], peers, false, th).cause);
  }
  auto t1 = Clock::now();
  PeerSignals role;
  for (const SignalValues& v : values) role.Add(v);
  for (int w = 0; w < n; ++w) {
    if (!Slowed(w)) continue;
    const SignalValues& own = values[static_cast<size_t>(w)];
    agree +=
        AttributeCause(own, role, &own, false, th).cause == listed[static_cast<size_t>(slowed)];
    ++slowed;
  }
  auto t2 = Clock::now();
  f.listed_s = Seconds(t1 - t0);
  f.sorted_s = Seconds(t2 - t1);
  if (agree != slowed)
    std::printf("  ! the two attributions disagree on %d of %d\n", slowed - agree, slowed);
  return f;
}

}  // namespace

int main() {
  std::printf(
      "antdt-bench-monitor-scale: one job, %d windows of %lld ms, 5 step reports per "
      "worker per window, one node sample per worker; 8%% of the workers slowed 2-3x\n\n",
      kWindows, static_cast<long long>(kWindowMs));
  std::printf(
      "| members | stragglers recorded | ingest per window (ms) | close per window (ms) | "
      "close / ingest | attribution, peers listed (ms) | attribution, sorted once (ms) | "
      "listed / sorted |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<Figures> all;
  for (int n : {1'000, 10'000}) {
    const Figures f = Run(n);
    all.push_back(f);
    std::printf("| %d | %d | %.1f | %.1f | %.2f | %.1f | %.2f | %.0fx |\n", f.members, f.stragglers,
                f.ingest_s * 1e3, f.close_s * 1e3, f.close_s / f.ingest_s, f.listed_s * 1e3,
                f.sorted_s * 1e3, f.listed_s / f.sorted_s);
  }
  const Figures& a = all[0];
  const Figures& b = all[1];
  std::printf(
      "\ngrowth from %d to %d members (10x): ingest %.1fx, close %.1fx, attribution "
      "listed %.1fx, sorted once %.1fx\n",
      a.members, b.members, b.ingest_s / a.ingest_s, b.close_s / a.close_s, b.listed_s / a.listed_s,
      b.sorted_s / a.sorted_s);
  return 0;
}
