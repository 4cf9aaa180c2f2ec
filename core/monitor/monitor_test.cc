#include "core/monitor/monitor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "api/vocab/vocab.h"
#include "core/monitor/causes.h"

namespace antdt::monitor {
namespace {

using v1::StragglerClass;

constexpr int64_t kWindowMs = 10'000;
constexpr int64_t kT0 = 1'700'000'000'000;  // a window boundary
constexpr double kBaseBpt = 0.5;
constexpr char kJob[] = "team/ctr";

std::string WorkerId(int i) { return absl::StrCat("w-", i < 10 ? "0" : "", i); }
std::string NodeName(int i) { return absl::StrCat("node-", i); }

bool IsStraggler(StragglerClass c) {
  return c == v1::TRANSIENT || c == v1::PERSISTENT || c == v1::DETERMINISTIC;
}

// BPT of worker `worker` at time `t` (in windows since kT0, fractional), as a
// multiple of the base BPT.
using Factor = std::function<double(int worker, double t)>;
// Edits a report before it is ingested (step split, ps latency, ...).
using Customize = std::function<void(int worker, double t, v1::StepReport&)>;

Factor Only(int target, std::function<double(double t)> f) {
  return [target, f](int worker, double t) { return worker == target ? f(t) : 1.0; };
}

// Generates a job's step reports window by window, with uniform multiplicative
// jitter of +-`jitter` per report from a fixed-seed generator, and closes each
// window as the service would (at its end plus the allowed lateness).
class Sim {
 public:
  struct Options {
    int workers = 16;
    double jitter = 0.10;
    int reports_per_window = 10;
    uint64_t seed = 42;
    std::string role = "worker";
    std::string id_prefix;  // "" -> w-NN
    MonitorConfig config;
  };

  explicit Sim(Options options)
      : options_(std::move(options)),
        monitor_(*Monitor::Create(options_.config)),
        rng_(options_.seed) {}

  Monitor& monitor() { return monitor_; }
  int window() const { return window_; }
  std::string Id(int i) const {
    return options_.id_prefix.empty() ? WorkerId(i) : absl::StrCat(options_.id_prefix, i);
  }
  static int64_t WindowStart(int n) { return kT0 + n * kWindowMs; }
  int64_t CloseTime(int n) const {
    return WindowStart(n + 1) + options_.config.allowed_lateness_ms;
  }

  // Uniform in [-1, 1), the same on every platform.
  double Unit() { return static_cast<double>(rng_() >> 11) * 0x1.0p-52 - 1.0; }

  v1::StepReport Report(int worker, double t, double factor) {
    v1::StepReport r;
    r.set_job(kJob);
    r.set_worker_id(Id(worker));
    r.set_role(options_.role);
    r.set_node(NodeName(worker));
    r.set_step(step_++);
    r.set_samples(64);
    r.set_bpt_seconds(kBaseBpt * factor * (1 + options_.jitter * Unit()));
    r.set_compute_seconds(r.bpt_seconds());
    r.set_time_unix_ms(kT0 + static_cast<int64_t>(t * kWindowMs));
    return r;
  }

  // Ingests the next window's reports (`skip` workers send none), closes it.
  v1::GetJobHealthResponse Step(const Factor& factor, const Customize& customize = nullptr,
                                const std::set<int>& skip = {}) {
    const int n = window_++;
    for (int i = 0; i < options_.workers; ++i) {
      if (skip.count(i) > 0) continue;
      for (int k = 0; k < options_.reports_per_window; ++k) {
        const double t = n + (k + 0.5) / options_.reports_per_window;
        v1::StepReport r = Report(i, t, factor(i, t));
        if (customize) customize(i, t, r);
        monitor_.Ingest(r);
      }
    }
    monitor_.CloseWindows(CloseTime(n));
    return monitor_.Health(kJob, CloseTime(n));
  }

 private:
  Options options_;
  Monitor monitor_;
  std::mt19937_64 rng_;
  int window_ = 0;
  int64_t step_ = 0;
};

const v1::WorkerHealth* Find(const v1::GetJobHealthResponse& response, const std::string& id) {
  for (const auto& w : response.workers()) {
    if (w.worker_id() == id) return &w;
  }
  return nullptr;
}

std::string Name(StragglerClass c) { return v1::StragglerClass_Name(c); }

// ---- Configuration ----------------------------------------------------------

TEST(MonitorConfigTest, DefaultsAreValid) {
  EXPECT_TRUE(MonitorConfig{}.Validate().ok());
  EXPECT_TRUE(Monitor::Create(MonitorConfig{}).ok());
}

TEST(MonitorConfigTest, ErrorsNameTheField) {
  struct Case {
    std::function<void(MonitorConfig&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](MonitorConfig& c) { c.window_ms = 0; }, "monitor.window: must be > 0"},
      {[](MonitorConfig& c) { c.allowed_lateness_ms = -1; }, "monitor.allowed_lateness:"},
      {[](MonitorConfig& c) { c.straggler_threshold = 1.0; }, "monitor.straggler_threshold:"},
      {[](MonitorConfig& c) { c.straggler_threshold = NAN; }, "monitor.straggler_threshold:"},
      {[](MonitorConfig& c) { c.recover_threshold = 1.4; }, "monitor.recover_threshold:"},
      {[](MonitorConfig& c) { c.recover_threshold = 0.9; }, "monitor.recover_threshold:"},
      {[](MonitorConfig& c) { c.leader_threshold = 1.0; }, "monitor.leader_threshold:"},
      {[](MonitorConfig& c) { c.leader_exit_threshold = 0.7; }, "monitor.leader_exit_threshold:"},
      {[](MonitorConfig& c) { c.persistent_windows = 0; }, "monitor.persistent_windows:"},
      {[](MonitorConfig& c) { c.warmup_windows = 1; }, "monitor.warmup_windows:"},
      {[](MonitorConfig& c) { c.deterministic_cv = 0; }, "monitor.deterministic_cv:"},
      {[](MonitorConfig& c) { c.job_slowdown_ratio = 0.5; }, "monitor.job_slowdown_ratio:"},
      {[](MonitorConfig& c) { c.min_reports_per_window = 0; }, "monitor.min_reports_per_window:"},
      {[](MonitorConfig& c) { c.min_peers = 1; }, "monitor.min_peers:"},
      {[](MonitorConfig& c) { c.history_windows = 0; }, "monitor.history_windows:"},
      {[](MonitorConfig& c) { c.forget_after_windows = 0; }, "monitor.forget_after_windows:"},
      {[](MonitorConfig& c) { c.max_open_windows = 1; }, "monitor.max_open_windows:"},
      {[](MonitorConfig& c) { c.allowed_lateness_ms = 70'000; }, "monitor.allowed_lateness:"},
      {[](MonitorConfig& c) { c.node_sample_max_age_ms = 0; }, "monitor.node_sample_max_age:"},
      {[](MonitorConfig& c) { c.causes.cgroup_throttled_fraction = 1.5; },
       "monitor.causes.cgroup_throttled_fraction:"},
      {[](MonitorConfig& c) { c.causes.cpu_some_avg10 = -1; }, "monitor.causes.cpu_some_avg10:"},
      {[](MonitorConfig& c) { c.causes.cpu_utilization = 2; }, "monitor.causes.cpu_utilization:"},
      {[](MonitorConfig& c) { c.causes.memory_some_avg10 = 101; },
       "monitor.causes.memory_some_avg10:"},
      {[](MonitorConfig& c) { c.causes.memory_available_fraction = NAN; },
       "monitor.causes.memory_available_fraction:"},
      {[](MonitorConfig& c) { c.causes.io_some_avg10 = 200; }, "monitor.causes.io_some_avg10:"},
      {[](MonitorConfig& c) { c.causes.step_share = 1.5; }, "monitor.causes.step_share:"},
  };
  for (const Case& c : cases) {
    MonitorConfig config;
    c.mutate(config);
    const absl::Status status = config.Validate();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_EQ(std::string(status.message()).rfind(c.field, 0), 0u)
        << "want prefix " << c.field << ", got " << status.message();
    EXPECT_FALSE(Monitor::Create(config).ok()) << c.field;
  }
}

// ---- Straggler kinds --------------------------------------------------------

struct KindCase {
  std::string name;
  Factor factor;  // worker 3 is the one that differs
  int windows;
  // (first window, class) segments for worker 3; every other worker HEALTHY.
  std::vector<std::pair<int, StragglerClass>> expect;
  std::map<std::string, std::map<std::string, std::string>> labels;  // node -> labels
};

StragglerClass Expected(const KindCase& c, int window) {
  StragglerClass want = v1::HEALTHY;
  for (const auto& [from, cls] : c.expect) {
    if (from <= window) want = cls;
  }
  return want;
}

TEST(MonitorKindsTest, ClassifiesEachKind) {
  std::map<std::string, std::map<std::string, std::string>> hardware;
  for (int i = 0; i < 16; ++i) hardware[NodeName(i)]["antdt.io/hardware"] = "A100";
  hardware[NodeName(3)]["antdt.io/hardware"] = "V100";

  const std::vector<KindCase> cases = {
      {"deterministic 1.5x from the start (warm-up profile)",
       Only(3, [](double) { return 1.5; }),
       30,
       {{0, v1::TRANSIENT}, {1, v1::DETERMINISTIC}},
       {}},
      {"deterministic 1.5x, node labelled device-speed 0.6",
       Only(3, [](double) { return 1.5; }),
       30,
       {{0, v1::DETERMINISTIC}},
       {{NodeName(3), {{"antdt.io/device-speed", "0.6"}}}}},
      {"deterministic 1.5x, hardware differs from the majority",
       Only(3, [](double) { return 1.5; }),
       30,
       {{0, v1::DETERMINISTIC}},
       hardware},
      {"slow from the start but unstable is not deterministic",
       Only(3, [](double t) { return static_cast<int>(t) % 2 == 0 ? 1.5 : 2.2; }),
       30,
       {{0, v1::TRANSIENT}, {2, v1::PERSISTENT}},
       {}},
      {"transient 3x for 2 windows, then recovery",
       Only(3, [](double t) { return t >= 5 && t < 7 ? 3.0 : 1.0; }),
       30,
       {{5, v1::TRANSIENT}, {7, v1::HEALTHY}},
       {}},
      {"persistent 4x from window 5",
       Only(3, [](double t) { return t >= 5 ? 4.0 : 1.0; }),
       30,
       {{5, v1::TRANSIENT}, {7, v1::PERSISTENT}},
       {}},
      {"leader 0.6x", Only(3, [](double) { return 0.6; }), 30, {{0, v1::LEADER}}, {}},
  };
  for (const KindCase& c : cases) {
    SCOPED_TRACE(c.name);
    Sim sim({});
    for (const auto& [node, labels] : c.labels) sim.monitor().SetNodeLabels(node, labels);
    StragglerClass previous = v1::STRAGGLER_CLASS_UNSPECIFIED;
    int64_t since = 0;
    for (int n = 0; n < c.windows; ++n) {
      const v1::GetJobHealthResponse health = sim.Step(c.factor);
      ASSERT_EQ(health.workers_size(), 16);
      EXPECT_FALSE(health.job_slowdown());
      for (const auto& w : health.workers()) {
        const StragglerClass want = w.worker_id() == WorkerId(3) ? Expected(c, n) : v1::HEALTHY;
        ASSERT_EQ(Name(w.class_()), Name(want))
            << "window " << n << " worker " << w.worker_id() << " score " << w.score();
      }
      const v1::WorkerHealth& w3 = *Find(health, WorkerId(3));
      if (w3.class_() != previous) since = Sim::WindowStart(n);
      previous = w3.class_();
      EXPECT_EQ(w3.since_unix_ms(), since) << "window " << n;
    }
  }
}

TEST(MonitorKindsTest, PersistentReportsScoresAndCounts) {
  Sim sim({});
  const Factor factor = Only(3, [](double t) { return t >= 5 ? 4.0 : 1.0; });
  v1::GetJobHealthResponse health;
  for (int n = 0; n <= 7; ++n) health = sim.Step(factor);
  const v1::WorkerHealth& w = *Find(health, WorkerId(3));
  EXPECT_EQ(Name(w.class_()), "PERSISTENT");
  EXPECT_EQ(w.windows_slow(), 3);
  EXPECT_EQ(w.since_unix_ms(), Sim::WindowStart(7));
  EXPECT_NEAR(w.score(), 4.0, 0.2);
  EXPECT_NEAR(w.self_score(), 4.0, 0.2);  // against its own warm-up baseline
  EXPECT_NEAR(w.median_bpt_seconds(), kBaseBpt, 0.02);
  EXPECT_NEAR(w.bpt_seconds(), 4 * kBaseBpt, 0.1);
  EXPECT_NEAR(w.samples_per_second(), 64 / (4 * kBaseBpt), 2);
  EXPECT_EQ(w.role(), "worker");
  EXPECT_EQ(w.node(), NodeName(3));
  EXPECT_EQ(health.window(), 8);
  EXPECT_EQ(health.time_unix_ms(), sim.CloseTime(7));
  const v1::WorkerHealth& healthy = *Find(health, WorkerId(4));
  EXPECT_EQ(healthy.cause(), v1::CAUSE_UNSPECIFIED);
  EXPECT_TRUE(healthy.evidence().empty());
  // Sorted by worker id.
  for (int i = 1; i < health.workers_size(); ++i) {
    EXPECT_LT(health.workers(i - 1).worker_id(), health.workers(i).worker_id());
  }
}

// A worker that turns 3x slower per sample after the warm-up (window 2), whose
// batch is cut to a third from window 3 on (ADJUST_BS): its BPT is the median's
// again, so `class` says HEALTHY, but per-sample speed keeps it a straggler,
// PERSISTENT after K slow windows, shown as compensated and still given a cause.
TEST(MonitorSpeedTest, CompensatedStragglerIsStillSlowPerSample) {
  Sim sim({});
  const auto batch = [](int worker, double t) { return worker == 3 && t >= 3 ? 21 : 64; };
  const auto slow = [](double t) { return t >= 2 ? 3.0 : 1.0; };
  const Factor factor = [&](int worker, double t) {
    // BPT follows the batch: its per-sample slowdown times its share of 64.
    return worker == 3 ? slow(t) * batch(worker, t) / 64.0 : 1.0;
  };
  const Customize samples = [&](int worker, double t, v1::StepReport& r) {
    r.set_samples(batch(worker, t));
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n <= 2; ++n) health = sim.Step(factor, samples);
  const v1::WorkerHealth* w = Find(health, WorkerId(3));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(Name(w->class_()), "TRANSIENT");
  EXPECT_EQ(Name(w->speed_class()), "TRANSIENT");
  EXPECT_FALSE(w->compensated());  // its BPT says it too
  EXPECT_NEAR(w->sample_score(), 3.0, 0.2);
  for (int n = 3; n <= 7; ++n) health = sim.Step(factor, samples);
  w = Find(health, WorkerId(3));
  EXPECT_EQ(Name(w->class_()), "HEALTHY");
  EXPECT_NEAR(w->score(), 21.0 * 3 / 64, 0.1);
  EXPECT_NEAR(w->sample_score(), 3.0, 0.2);
  EXPECT_EQ(Name(w->speed_class()), "PERSISTENT");
  EXPECT_EQ(w->speed_windows_slow(), 6);
  EXPECT_TRUE(w->compensated());
  EXPECT_EQ(w->cause(), v1::CAUSE_UNKNOWN);  // no node sample: a cause all the same
  // The others: median speed, neither slow nor compensated.
  const v1::WorkerHealth& other = *Find(health, WorkerId(4));
  EXPECT_NEAR(other.sample_score(), 1.0, 0.1);
  EXPECT_EQ(Name(other.speed_class()), "HEALTHY");
  EXPECT_FALSE(other.compensated());
  // Its node recovers: per-sample speed below the recover threshold ends it.
  const Factor recovered = [&](int worker, double t) {
    return worker == 3 ? 1.0 * batch(worker, t) / 64.0 : 1.0;
  };
  health = sim.Step(recovered, samples);
  w = Find(health, WorkerId(3));
  EXPECT_EQ(Name(w->speed_class()), "HEALTHY");
  EXPECT_FALSE(w->compensated());
  EXPECT_EQ(w->cause(), v1::CAUSE_UNSPECIFIED);
}

// A compensated straggler waits at every barrier for its peers (its batch is
// smaller), and that wait is in its step's communication time: the share that
// stands out is its compensation, not a slow network, so no NETWORK (paper-mix
// named it network for an emulated slowdown).
TEST(MonitorCauseTest, ACompensatedStragglersBarrierWaitIsNoNetworkCause) {
  Sim sim({});
  const auto batch = [](int worker, double t) { return worker == 3 && t >= 3 ? 21 : 64; };
  const Factor factor = [&](int worker, double t) {
    return worker == 3 ? (t >= 2 ? 3.0 : 1.0) * batch(worker, t) / 64.0 : 1.0;
  };
  const Customize waits = [&](int worker, double t, v1::StepReport& r) {
    r.set_samples(batch(worker, t));
    // Everyone waits a little at the barrier; the compensated one most.
    const double share = worker == 3 && t >= 3 ? 1.9 : 0.1;
    r.set_communication_seconds(r.bpt_seconds() * share);
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n <= 7; ++n) health = sim.Step(factor, waits);
  const v1::WorkerHealth* w = Find(health, WorkerId(3));
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->compensated());
  EXPECT_EQ(w->cause(), v1::CAUSE_UNKNOWN) << v1::Cause_Name(w->cause());
  for (const v1::StragglerRecord& r : health.stragglers()) {
    EXPECT_NE(r.cause(), v1::NETWORK) << r.ShortDebugString();
  }
}

// A worker that reports no samples (a parameter server, a trainer without
// them) has no per-sample score and keeps a HEALTHY speed class.
TEST(MonitorSpeedTest, NoSamplesNoSampleScore) {
  Sim sim({});
  const Customize none = [](int, double, v1::StepReport& r) { r.set_samples(0); };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 6; ++n) {
    health = sim.Step(Only(3, [](double t) { return t >= 2 ? 4.0 : 1.0; }), none);
  }
  const v1::WorkerHealth& w = *Find(health, WorkerId(3));
  EXPECT_EQ(Name(w.class_()), "PERSISTENT");
  EXPECT_EQ(w.sample_score(), 0);
  EXPECT_EQ(Name(w.speed_class()), "HEALTHY");
  EXPECT_FALSE(w.compensated());
}

// A deterministic straggler by its warm-up profile stays DETERMINISTIC per
// sample after ADJUST_BS hides it from its BPT.
TEST(MonitorSpeedTest, DeterministicProfileSurvivesCompensation) {
  Sim sim({});
  const auto batch = [](int worker, double t) { return worker == 3 && t >= 3 ? 32 : 64; };
  const Factor factor = [&](int worker, double t) {
    return worker == 3 ? 2.0 * batch(worker, t) / 64.0 : 1.0;
  };
  const Customize samples = [&](int worker, double t, v1::StepReport& r) {
    r.set_samples(batch(worker, t));
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 6; ++n) health = sim.Step(factor, samples);
  const v1::WorkerHealth& w = *Find(health, WorkerId(3));
  EXPECT_EQ(Name(w.class_()), "HEALTHY");
  EXPECT_EQ(Name(w.speed_class()), "DETERMINISTIC");
  EXPECT_TRUE(w.compensated());
}

// ---- False positives and detection latency ----------------------------------

struct NoiseResult {
  int flagged_windows = 0;  // windows in which anyone is a straggler
  int leader_windows = 0;
  double max_score = 0;
  double min_score = 1e9;
};

NoiseResult RunNoise(double jitter, int reports_per_window, int windows) {
  Sim::Options options;
  options.workers = 32;
  options.jitter = jitter;
  options.reports_per_window = reports_per_window;
  options.seed = 20240415;
  Sim sim(options);
  NoiseResult result;
  const Factor flat = [](int, double) { return 1.0; };
  for (int n = 0; n < windows; ++n) {
    const v1::GetJobHealthResponse health = sim.Step(flat);
    bool flagged = false, leader = false;
    for (const auto& w : health.workers()) {
      flagged = flagged || IsStraggler(w.class_());
      leader = leader || w.class_() == v1::LEADER;
      result.max_score = std::max(result.max_score, w.score());
      result.min_score = std::min(result.min_score, w.score());
    }
    result.flagged_windows += flagged;
    result.leader_windows += leader;
    EXPECT_FALSE(health.job_slowdown());
  }
  return result;
}

// Default thresholds, 32 workers, 1,000 windows, one report per window (so each
// window BPT carries the whole jitter: the harshest case). Bounded jitter +-j
// gives at worst a score of (1 + j) / (1 - j) and at best (1 - j) / (1 + j): at
// +-10% that is 1.222 < straggler_threshold 1.3 and 0.818 > leader_threshold
// 0.8, so no seed can flag anyone; stragglers stay impossible up to +-13%
// (1.13 / 0.87 = 1.299). Measured: the figures printed below.
TEST(MonitorNoiseTest, NoStragglersOrLeadersFromJitterAlone) {
  for (const double jitter : {0.10, 0.13}) {
    const NoiseResult r = RunNoise(jitter, 1, 1000);
    std::printf(
        "[figure] jitter=+-%.0f%% workers=32 windows=1000 flagged_windows=%d "
        "leader_windows=%d max_score=%.3f min_score=%.3f\n",
        jitter * 100, r.flagged_windows, r.leader_windows, r.max_score, r.min_score);
    EXPECT_EQ(r.flagged_windows, 0) << "jitter " << jitter;
    EXPECT_LT(r.max_score, (1 + jitter) / (1 - jitter));
    if (jitter <= 0.10) {
      EXPECT_EQ(r.leader_windows, 0) << "jitter " << jitter;
    }
  }
  // Where false positives begin (printed, not asserted).
  for (const double jitter : {0.15, 0.20, 0.25}) {
    const NoiseResult r = RunNoise(jitter, 1, 1000);
    std::printf(
        "[figure] jitter=+-%.0f%% workers=32 windows=1000 flagged_windows=%d "
        "leader_windows=%d max_score=%.3f min_score=%.3f\n",
        jitter * 100, r.flagged_windows, r.leader_windows, r.max_score, r.min_score);
  }
}

// With 10 reports per window (a 10 s window of 0.5 s steps has 20) the window
// mean averages the jitter out: far from either threshold.
TEST(MonitorNoiseTest, AveragedReportsStayFarFromThresholds) {
  const NoiseResult r = RunNoise(0.10, 10, 1000);
  std::printf(
      "[figure] jitter=+-10%% 10 reports/window: flagged_windows=%d max_score=%.3f "
      "min_score=%.3f\n",
      r.flagged_windows, r.max_score, r.min_score);
  EXPECT_EQ(r.flagged_windows, 0);
  EXPECT_EQ(r.leader_windows, 0);
  EXPECT_LT(r.max_score, 1.15);
}

// A persistent 2x straggler among 32 workers with +-10% jitter is PERSISTENT by
// the 3rd window after it starts (K = 3, the default).
TEST(MonitorLatencyTest, PersistentWithinKWindows) {
  const MonitorConfig defaults;
  ASSERT_EQ(defaults.persistent_windows, 3);
  int worst = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Sim::Options options;
    options.workers = 32;
    options.reports_per_window = 1;
    options.seed = seed;
    Sim sim(options);
    const int target = static_cast<int>(seed) % 32;
    const int onset = 10;
    const Factor factor = Only(target, [](double t) { return t >= 10 ? 2.0 : 1.0; });
    int detected = -1, first_slow = -1;
    for (int n = 0; n < onset + 10 && detected < 0; ++n) {
      const v1::GetJobHealthResponse health = sim.Step(factor);
      const StragglerClass c = Find(health, WorkerId(target))->class_();
      if (first_slow < 0 && IsStraggler(c)) first_slow = n;
      if (c == v1::PERSISTENT) detected = n;
    }
    ASSERT_EQ(first_slow, onset) << "seed " << seed;  // flagged in its first window
    const int latency = detected - onset + 1;         // windows from onset to decision
    EXPECT_LE(latency, 3) << "seed " << seed;
    worst = std::max(worst, latency);
  }
  std::printf(
      "[figure] persistent 2x among 32, +-10%%: TRANSIENT after 1 window, "
      "PERSISTENT after at most %d windows (20 seeds)\n",
      worst);

  // Onset in the middle of a window (10 reports per window): the first partial
  // window may or may not be slow, so at most K + 1 windows of wall time.
  double worst_wall = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    Sim::Options options;
    options.workers = 32;
    options.seed = seed;
    Sim sim(options);
    const double onset = 10 + static_cast<double>(seed) / 21;
    const Factor factor = Only(7, [onset](double t) { return t >= onset ? 2.0 : 1.0; });
    double detected = -1;
    for (int n = 0; n < 20 && detected < 0; ++n) {
      if (Find(sim.Step(factor), WorkerId(7))->class_() == v1::PERSISTENT) detected = n + 1;
    }
    ASSERT_GT(detected, 0) << "seed " << seed;
    EXPECT_LE(detected - onset, 4.0) << "seed " << seed;  // window end of decision - onset
    worst_wall = std::max(worst_wall, detected - onset);
  }
  std::printf("[figure] onset mid-window: PERSISTENT at most %.2f windows after onset\n",
              worst_wall);
}

TEST(MonitorLatencyTest, PersistentWindowsIsConfigurable) {
  for (const int k : {1, 3, 5}) {
    Sim::Options options;
    options.config.persistent_windows = k;
    Sim sim(options);
    const Factor factor = Only(3, [](double t) { return t >= 5 ? 2.0 : 1.0; });
    int detected = -1;
    for (int n = 0; n < 15 && detected < 0; ++n) {
      if (Find(sim.Step(factor), WorkerId(3))->class_() == v1::PERSISTENT) detected = n;
    }
    EXPECT_EQ(detected, 5 + k - 1) << "K=" << k;
  }
}

// ---- Hysteresis ---------------------------------------------------------------

TEST(MonitorHysteresisTest, RecoversOnlyBelowRecoverThreshold) {
  Sim sim({});
  // 1.5x for 2 windows, then 1.22x (between the thresholds), then 1.05x.
  const Factor factor = Only(3, [](double t) {
    if (t < 5) return 1.0;
    if (t < 7) return 1.5;
    if (t < 15) return 1.22;
    return 1.05;
  });
  for (int n = 0; n < 20; ++n) {
    const StragglerClass c = Find(sim.Step(factor), WorkerId(3))->class_();
    const StragglerClass want = n < 5    ? v1::HEALTHY
                                : n < 7  ? v1::TRANSIENT
                                : n < 15 ? v1::PERSISTENT
                                         : v1::HEALTHY;
    EXPECT_EQ(Name(c), Name(want)) << "window " << n;
  }
}

TEST(MonitorHysteresisTest, BetweenThresholdsNeverEnters) {
  Sim sim({});
  const Factor factor = Only(3, [](double t) { return t >= 5 ? 1.2 : 1.0; });
  for (int n = 0; n < 40; ++n) {
    EXPECT_EQ(Name(Find(sim.Step(factor), WorkerId(3))->class_()), "HEALTHY") << n;
  }
}

// A worker at 1.35x with +-10% jitter per window crosses 1.3 back and forth;
// with hysteresis it enters once and stays; without it, it flaps.
int ClassChanges(double recover_threshold) {
  Sim::Options options;
  options.workers = 32;
  options.reports_per_window = 1;
  options.config.recover_threshold = recover_threshold;
  Sim sim(options);
  const Factor factor = Only(3, [](double t) { return t >= 5 && t < 205 ? 1.35 : 1.0; });
  int changes = 0;
  StragglerClass previous = v1::HEALTHY;
  for (int n = 0; n < 205; ++n) {
    const StragglerClass c = Find(sim.Step(factor), WorkerId(3))->class_();
    changes += c != previous;
    previous = c;
  }
  return changes;
}

TEST(MonitorHysteresisTest, NoFlapping) {
  const int with = ClassChanges(1.15);
  const int without = ClassChanges(1.3);
  std::printf(
      "[figure] 1.35x +-10%% over 200 windows: class changes %d with hysteresis, "
      "%d without\n",
      with, without);
  EXPECT_LE(with, 2);  // HEALTHY -> TRANSIENT -> PERSISTENT
  EXPECT_GT(without, 10);
}

TEST(MonitorHysteresisTest, LeaderHysteresis) {
  Sim sim({});
  const Factor factor = Only(3, [](double t) {
    if (t < 5) return 0.7;
    if (t < 10) return 0.84;  // between leader_threshold and leader_exit_threshold
    return 0.97;
  });
  for (int n = 0; n < 15; ++n) {
    const StragglerClass want = n < 10 ? v1::LEADER : v1::HEALTHY;
    EXPECT_EQ(Name(Find(sim.Step(factor), WorkerId(3))->class_()), Name(want)) << n;
  }
}

// ---- Whole-job slowdown -------------------------------------------------------

TEST(MonitorJobSlowdownTest, EveryoneSlowerIsNotAStraggler) {
  Sim sim({});
  const Factor factor = [](int, double t) { return t >= 5 && t < 15 ? 2.0 : 1.0; };
  for (int n = 0; n < 20; ++n) {
    const v1::GetJobHealthResponse health = sim.Step(factor);
    EXPECT_EQ(health.job_slowdown(), n >= 5 && n < 15) << "window " << n;
    for (const auto& w : health.workers()) {
      EXPECT_EQ(Name(w.class_()), "HEALTHY") << "window " << n << " " << w.worker_id();
      EXPECT_NEAR(w.score(), 1.0, 0.1);
      if (n >= 5 && n < 15) {
        EXPECT_NEAR(w.self_score(), 2.0, 0.2);
      }
    }
  }
}

TEST(MonitorJobSlowdownTest, StragglerAmongSlowedPeersIsStillFlagged) {
  Sim sim({});
  const Factor factor = [](int worker, double t) {
    if (t < 5) return 1.0;
    return worker == 3 ? 4.0 : 2.0;
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 8; ++n) health = sim.Step(factor);
  EXPECT_TRUE(health.job_slowdown());
  EXPECT_EQ(Name(Find(health, WorkerId(3))->class_()), "PERSISTENT");
  EXPECT_NEAR(Find(health, WorkerId(3))->score(), 2.0, 0.1);
}

TEST(MonitorJobSlowdownTest, ASlowMajorityIsNotAJobSlowdown) {
  // Two of three workers 4x slower from window 3: the fast one is the leader
  // that should take their work, not a job that slowed as a whole.
  Sim::Options options;
  options.workers = 3;
  Sim sim(options);
  const Factor factor = [](int worker, double t) { return t >= 3 && worker > 0 ? 4.0 : 1.0; };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 6; ++n) {
    health = sim.Step(factor);
    EXPECT_FALSE(health.job_slowdown()) << "window " << n;
  }
  EXPECT_EQ(Name(Find(health, WorkerId(0))->class_()), "LEADER");
}

// ---- Windows in steps ------------------------------------------------------------

// Eight workers, a step every 100 ms; worker 3 four times slower from 2.0 s.
// Returns the health at `until_ms` after kT0, closing windows at every report.
v1::GetJobHealthResponse RunSteps(Monitor& monitor, int64_t until_ms) {
  for (int64_t t = 100; t <= until_ms; t += 100) {
    for (int i = 0; i < 8; ++i) {
      v1::StepReport r;
      r.set_job(kJob);
      r.set_worker_id(WorkerId(i));
      r.set_node(NodeName(i));
      r.set_samples(32);
      r.set_bpt_seconds(i == 3 && t > 2'000 ? 0.4 : 0.1);
      r.set_time_unix_ms(kT0 + t);
      monitor.Ingest(r);
    }
    monitor.CloseWindows(kT0 + t);
  }
  return monitor.Health(kJob, kT0 + until_ms);
}

TEST(MonitorWindowTest, WindowsInStepsSeeAStragglerWithinSteps) {
  MonitorConfig config;
  config.window_ms = 1'000;
  config.allowed_lateness_ms = 100;
  config.steps_per_window = 2;
  Monitor steps = *Monitor::Create(config);
  v1::GetJobHealthResponse health = RunSteps(steps, 1'000);
  EXPECT_EQ(health.window_ms(), 1'000) << "the first window is in time";
  health = RunSteps(steps, 1'500);
  EXPECT_EQ(health.window_ms(), 200) << "then two 100 ms steps";
  EXPECT_EQ(health.allowed_lateness_ms(), 100);
  // Fresh monitors for the onset: the straggler is flagged by 2.6 s (its slow
  // steps from 2.1 s: two steps of windows, the lateness and a step), and
  // nobody else is, ever.
  Monitor fresh = *Monitor::Create(config);
  health = RunSteps(fresh, 2'600);
  for (const auto& w : health.workers()) {
    EXPECT_EQ(IsStraggler(w.class_()), w.worker_id() == WorkerId(3))
        << w.worker_id() << " " << Name(w.class_());
  }
  const v1::WorkerHealth* slow = Find(health, WorkerId(3));
  ASSERT_NE(slow, nullptr);
  EXPECT_GE(slow->since_unix_ms(), kT0 + 2'000);
  // Windows in time (1 s) have not seen it yet.
  config.steps_per_window = 0;
  Monitor timed = *Monitor::Create(config);
  health = RunSteps(timed, 2'600);
  ASSERT_NE(Find(health, WorkerId(3)), nullptr);
  EXPECT_FALSE(IsStraggler(Find(health, WorkerId(3))->class_()));
}

// ---- Parameter servers ----------------------------------------------------------

TEST(MonitorPsTest, SlowServerThroughWorkersLatency) {
  Sim sim({});
  std::mt19937_64 rng(7);
  const Customize latency = [&rng](int, double t, v1::StepReport& r) {
    for (int s = 0; s < 4; ++s) {
      const double jitter = 1 + 0.1 * (static_cast<double>(rng() >> 11) * 0x1.0p-52 - 1);
      const double slow = s == 2 && t >= 3 ? 3.0 : 1.0;
      (*r.mutable_ps_latency_seconds())[absl::StrCat("ps-", s)] = 0.02 * slow * jitter;
    }
  };
  const Factor flat = [](int, double) { return 1.0; };
  for (int n = 0; n < 8; ++n) {
    const v1::GetJobHealthResponse health = sim.Step(flat, latency);
    ASSERT_EQ(health.workers_size(), 16 + 4);
    for (const auto& w : health.workers()) {
      StragglerClass want = v1::HEALTHY;
      if (w.worker_id() == "ps-2" && n >= 3) want = n < 5 ? v1::TRANSIENT : v1::PERSISTENT;
      EXPECT_EQ(Name(w.class_()), Name(want)) << "window " << n << " " << w.worker_id();
    }
    const v1::WorkerHealth& ps2 = *Find(health, "ps-2");
    EXPECT_EQ(ps2.role(), "ps");
    if (n >= 3) {
      EXPECT_NEAR(ps2.score(), 3.0, 0.2);
      EXPECT_NEAR(ps2.bpt_seconds(), 0.06, 0.005);
      EXPECT_NEAR(ps2.median_bpt_seconds(), 0.02, 0.002);
      EXPECT_NEAR(ps2.evidence().at("ps_latency_score"), 3.0, 0.2);
      EXPECT_NEAR(ps2.evidence().at("ps_latency_seconds"), 0.06, 0.005);
      EXPECT_EQ(ps2.cause(), v1::CAUSE_UNKNOWN);  // no node known
    }
  }
}

TEST(MonitorPsTest, SlowServerFromItsOwnReports) {
  // Workers at 0.5 s and servers at 0.01 s share the job; each role has its own median.
  Sim workers({});
  Sim::Options ps_options;
  ps_options.workers = 4;
  ps_options.role = "ps";
  ps_options.id_prefix = "ps-";
  ps_options.seed = 9;
  Sim servers(ps_options);
  const Factor slow_ps1 = Only(1, [](double t) { return t >= 3 ? 2.0 : 1.0; });
  Monitor& m = workers.monitor();
  for (int n = 0; n < 8; ++n) {
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 10; ++k) {
        const double t = n + (k + 0.5) / 10;
        v1::StepReport r = servers.Report(i, t, slow_ps1(i, t) * 0.02);
        r.set_node(absl::StrCat("ps-node-", i));
        m.Ingest(r);
      }
    }
    const v1::GetJobHealthResponse health = workers.Step([](int, double) { return 1.0; });
    for (const auto& w : health.workers()) {
      StragglerClass want = v1::HEALTHY;
      if (w.worker_id() == "ps-1" && n >= 3) want = n < 5 ? v1::TRANSIENT : v1::PERSISTENT;
      EXPECT_EQ(Name(w.class_()), Name(want)) << "window " << n << " " << w.worker_id();
    }
    EXPECT_EQ(Find(health, "ps-0")->role(), "ps");
    EXPECT_NEAR(Find(health, "ps-0")->median_bpt_seconds(), 0.01, 0.002);
    EXPECT_NEAR(Find(health, WorkerId(0))->median_bpt_seconds(), kBaseBpt, 0.02);
  }
}

// ---- Causes ---------------------------------------------------------------------

v1::NodeSample CleanSample(int64_t time_ms) {
  v1::NodeSample s;
  s.set_node(NodeName(0));
  s.set_time_unix_ms(time_ms);
  s.mutable_cpu()->set_utilization(0.5);
  s.mutable_cpu()->set_cpus(16);
  s.mutable_memory()->set_total_bytes(64LL << 30);
  s.mutable_memory()->set_available_bytes(32LL << 30);
  s.mutable_pressure()->set_cpu_some_avg10(2);
  s.mutable_pressure()->set_memory_some_avg10(0.5);
  s.mutable_pressure()->set_io_some_avg10(1);
  auto* lo = s.add_net();
  lo->set_name("lo");
  lo->set_rx_drops_per_second(100);  // loopback never counts
  auto* eth = s.add_net();
  eth->set_name("eth0");
  eth->set_rx_bytes_per_second(1e6);
  auto* cg = s.add_cgroups();
  cg->set_path("kubepods/pod-a");
  cg->set_throttled_fraction(0.05);
  return s;
}

struct CauseCase {
  std::string name;
  std::function<void(v1::NodeSample&)> edit;
  double data_wait_share = 0;
  double communication_share = 0;
  std::map<std::string, std::string> labels;  // of node-0
  v1::Cause want;
  std::string key;  // evidence key to check
  double value;
  int64_t sample_age_ms = 1'000;
};

TEST(MonitorCauseTest, EachCauseWithItsEvidence) {
  const auto none = [](v1::NodeSample&) {};
  const std::vector<CauseCase> cases = {
      {"clean sample", none, 0, 0, {}, v1::CAUSE_UNKNOWN, "cgroup_throttled_fraction", 0.05},
      {"cgroup throttling",
       [](v1::NodeSample& s) { s.mutable_cgroups(0)->set_throttled_fraction(0.4); },
       0,
       0,
       {},
       v1::CPU_THROTTLING,
       "cgroup_throttled_fraction",
       0.4},
      {"cpu pressure",
       [](v1::NodeSample& s) { s.mutable_pressure()->set_cpu_some_avg10(35); },
       0,
       0,
       {},
       v1::CPU_CONTENTION,
       "cpu_some_avg10",
       35},
      {"cpu saturated",
       [](v1::NodeSample& s) { s.mutable_cpu()->set_utilization(0.99); },
       0,
       0,
       {},
       v1::CPU_CONTENTION,
       "cpu_utilization",
       0.99},
      {"memory pressure",
       [](v1::NodeSample& s) { s.mutable_pressure()->set_memory_some_avg10(15); },
       0,
       0,
       {},
       v1::MEMORY_PRESSURE,
       "memory_some_avg10",
       15},
      {"memory nearly exhausted",
       [](v1::NodeSample& s) { s.mutable_memory()->set_available_bytes((64LL << 30) / 50); },
       0,
       0,
       {},
       v1::MEMORY_PRESSURE,
       "memory_available_fraction",
       0.02},
      {"network drops",
       [](v1::NodeSample& s) { s.mutable_net(1)->set_tx_drops_per_second(5); },
       0,
       0,
       {},
       v1::NETWORK,
       "net_drops_per_second",
       5},
      {"network errors",
       [](v1::NodeSample& s) { s.mutable_net(1)->set_errors_per_second(2); },
       0,
       0,
       {},
       v1::NETWORK,
       "net_errors_per_second",
       2},
      {"communication dominates the step",
       none,
       0,
       0.7,
       {},
       v1::NETWORK,
       "communication_share",
       0.7},
      {"gpu thermal",
       [](v1::NodeSample& s) {
         s.add_gpus()->set_index(0);
         s.add_gpus()->set_thermal_throttling(true);
       },
       0,
       0,
       {},
       v1::GPU_THROTTLING,
       "gpu_thermal_throttling",
       1},
      {"gpu power",
       [](v1::NodeSample& s) { s.add_gpus()->set_power_throttling(true); },
       0,
       0,
       {},
       v1::GPU_THROTTLING,
       "gpu_power_throttling",
       1},
      {"io pressure",
       [](v1::NodeSample& s) { s.mutable_pressure()->set_io_some_avg10(30); },
       0,
       0,
       {},
       v1::IO_PRESSURE,
       "io_some_avg10",
       30},
      {"data loading", none, 0.6, 0, {}, v1::DATA_LOADING, "data_wait_share", 0.6},
      {"slower device label",
       none,
       0,
       0,
       {{"antdt.io/device-speed", "0.5"}},
       v1::HARDWARE,
       "device_speed",
       0.5},
      {"hardware minority",
       none,
       0,
       0,
       {{"antdt.io/hardware", "V100"}},
       v1::HARDWARE,
       "hardware_minority",
       1},
      {"throttling outranks contention",
       [](v1::NodeSample& s) {
         s.mutable_cgroups(0)->set_throttled_fraction(0.5);
         s.mutable_cpu()->set_utilization(0.99);
       },
       0,
       0,
       {},
       v1::CPU_THROTTLING,
       "cpu_utilization",
       0.99},
      {"memory outranks io",
       [](v1::NodeSample& s) {
         s.mutable_pressure()->set_memory_some_avg10(40);
         s.mutable_pressure()->set_io_some_avg10(40);
       },
       0,
       0,
       {},
       v1::MEMORY_PRESSURE,
       "io_some_avg10",
       40},
      {"io pressure outranks data loading",
       [](v1::NodeSample& s) { s.mutable_pressure()->set_io_some_avg10(30); },
       0.8,
       0,
       {},
       v1::IO_PRESSURE,
       "data_wait_share",
       0.8},
      {"stale sample is ignored",
       [](v1::NodeSample& s) { s.mutable_cgroups(0)->set_throttled_fraction(0.9); },
       0,
       0,
       {},
       v1::CAUSE_UNKNOWN,
       "node_sample_age_seconds",
       300,
       300'000},
  };
  for (const CauseCase& c : cases) {
    SCOPED_TRACE(c.name);
    Sim::Options options;
    options.workers = 8;
    Sim sim(options);
    for (int i = 1; i < 8; ++i) {
      sim.monitor().SetNodeLabels(NodeName(i), {{"antdt.io/hardware", "A100"}});
    }
    if (!c.labels.empty()) sim.monitor().SetNodeLabels(NodeName(0), c.labels);
    const Factor factor = Only(0, [](double t) { return t >= 1 ? 2.0 : 1.0; });
    const Customize split = [&c](int worker, double, v1::StepReport& r) {
      if (worker != 0) return;
      r.set_data_wait_seconds(r.bpt_seconds() * c.data_wait_share);
      r.set_communication_seconds(r.bpt_seconds() * c.communication_share);
      r.set_compute_seconds(r.bpt_seconds() - r.data_wait_seconds() - r.communication_seconds());
    };
    // The cause is named when a window closes, from the sample seen by then:
    // this one, from before the first window on.
    const int64_t now = sim.CloseTime(4);
    v1::NodeSample sample = CleanSample(now - c.sample_age_ms);
    c.edit(sample);
    sim.monitor().Ingest(sample);
    v1::GetJobHealthResponse health;
    for (int n = 0; n < 5; ++n) health = sim.Step(factor, split);
    const v1::WorkerHealth& w = *Find(health, WorkerId(0));
    ASSERT_TRUE(IsStraggler(w.class_())) << Name(w.class_());
    EXPECT_EQ(v1::Cause_Name(w.cause()), v1::Cause_Name(c.want));
    ASSERT_EQ(w.evidence().count(c.key), 1u) << c.key;
    EXPECT_NEAR(w.evidence().at(c.key), c.value, 1e-3) << c.key;
    // Every value checked is there, whichever cause fired.
    std::vector<std::string> keys = {"communication_share", "data_wait_share", "cpu_wait_share",
                                     "node_sample_age_seconds"};
    if (c.sample_age_ms < 60'000) {
      for (const char* k : {"cgroup_throttled_fraction", "cpu_some_avg10", "cpu_utilization",
                            "memory_some_avg10", "memory_available_fraction", "io_some_avg10",
                            "net_drops_per_second", "net_errors_per_second"}) {
        keys.push_back(k);
      }
    }
    for (const std::string& k : keys) EXPECT_EQ(w.evidence().count(k), 1u) << k;
    const bool hardware_label = c.labels.count("antdt.io/hardware") > 0;
    EXPECT_EQ(w.evidence().count("hardware_minority"), hardware_label ? 1u : 0u);
    // The one record of the straggler says the same.
    ASSERT_EQ(health.stragglers_size(), 1);
    const v1::StragglerRecord& rec = health.stragglers(0);
    EXPECT_EQ(rec.worker_id(), WorkerId(0));
    EXPECT_EQ(rec.node(), NodeName(0));
    EXPECT_TRUE(rec.active());
    EXPECT_EQ(rec.cause(), w.cause());
    EXPECT_EQ(rec.evidence().size(), w.evidence().size());
  }
}

// A signal every node shows explains nobody's slowness: node-0's CPU pressure
// names CPU_CONTENTION only while its peers' nodes are calm.
TEST(MonitorCauseTest, ASignalEveryPeerShowsNamesNothing) {
  for (const double peer_pressure : {35.0, 2.0}) {
    SCOPED_TRACE(peer_pressure);
    Sim::Options options;
    options.workers = 8;
    Sim sim(options);
    const Factor factor = Only(0, [](double t) { return t >= 1 ? 2.0 : 1.0; });
    for (int n = 0; n < 4; ++n) sim.Step(factor);
    const int64_t now = sim.CloseTime(4);
    for (int i = 0; i < 8; ++i) {
      v1::NodeSample sample = CleanSample(now - 1'000);
      sample.set_node(NodeName(i));
      sample.mutable_pressure()->set_cpu_some_avg10(i == 0 ? 35 : peer_pressure);
      sim.monitor().Ingest(sample);
    }
    const v1::GetJobHealthResponse health = sim.Step(factor);
    const v1::WorkerHealth& w = *Find(health, WorkerId(0));
    ASSERT_TRUE(IsStraggler(w.class_()));
    EXPECT_EQ(v1::Cause_Name(w.cause()), peer_pressure > 20 ? "CAUSE_UNKNOWN" : "CPU_CONTENTION");
    EXPECT_NEAR(w.evidence().at("cpu_some_avg10_peer_median"), peer_pressure, 1e-9);
  }
}

// The training thread's wait for a CPU, from its own step reports, names CPU
// contention when it stands out from its peers'.
TEST(MonitorCauseTest, CpuWaitShareNamesContention) {
  Sim::Options options;
  options.workers = 8;
  Sim sim(options);
  const Factor factor = Only(0, [](double t) { return t >= 1 ? 2.0 : 1.0; });
  const Customize wait = [](int worker, double, v1::StepReport& r) {
    r.set_compute_seconds(r.bpt_seconds());
    r.set_cpu_wait_seconds(r.bpt_seconds() * (worker == 0 ? 0.55 : 0.1));
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 5; ++n) health = sim.Step(factor, wait);
  const v1::WorkerHealth& w = *Find(health, WorkerId(0));
  EXPECT_EQ(v1::Cause_Name(w.cause()), "CPU_CONTENTION");
  EXPECT_NEAR(w.evidence().at("cpu_wait_share"), 0.55, 1e-6);
  EXPECT_NEAR(w.evidence().at("cpu_wait_share_peer_median"), 0.1, 1e-6);
}

// One record per episode: first seen, detected, last seen, the cause named
// in most windows; it ends when the member recovers, and a later slowdown
// opens a new one.
TEST(MonitorRecordTest, OneRecordPerEpisode) {
  Sim::Options options;
  options.workers = 8;
  Sim sim(options);
  const Factor slow = Only(2, [](double t) { return t >= 2 && t < 6 ? 3.0 : 1.0; });
  const Customize data = [](int worker, double t, v1::StepReport& r) {
    if (worker == 2 && t >= 3) r.set_data_wait_seconds(r.bpt_seconds() * 0.8);
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 8; ++n) health = sim.Step(slow, data);
  ASSERT_EQ(health.stragglers_size(), 1);
  const v1::StragglerRecord& rec = health.stragglers(0);
  EXPECT_EQ(rec.worker_id(), WorkerId(2));
  EXPECT_FALSE(rec.active());
  EXPECT_EQ(rec.windows(), 4);
  EXPECT_EQ(rec.first_seen_unix_ms(), Sim::WindowStart(2));
  EXPECT_EQ(rec.detected_unix_ms(), sim.CloseTime(2));
  EXPECT_EQ(rec.last_seen_unix_ms(), Sim::WindowStart(6));
  // Data wait in 3 of its 4 slow windows: DATA_LOADING, with its evidence.
  EXPECT_EQ(v1::Cause_Name(rec.cause()), "DATA_LOADING");
  EXPECT_EQ(rec.cause_windows().at("data_loading"), 3);
  EXPECT_EQ(rec.cause_windows().at("unknown"), 1);
  EXPECT_NEAR(rec.evidence().at("data_wait_share"), 0.8, 1e-6);
  EXPECT_NEAR(rec.max_score(), 3.0, 0.3);
  // The worker is healthy now and has no cause.
  EXPECT_EQ(Find(health, WorkerId(2))->cause(), v1::CAUSE_UNSPECIFIED);
  // Slow again: a second record.
  const Factor again = Only(2, [](double) { return 3.0; });
  health = sim.Step(again);
  ASSERT_EQ(health.stragglers_size(), 2);
  EXPECT_TRUE(health.stragglers(1).active());
  EXPECT_EQ(health.stragglers(1).windows(), 1);
  EXPECT_EQ(v1::Cause_Name(health.stragglers(1).cause()), "CAUSE_UNKNOWN");
}

// A persistent straggler restarted on another node (KILL_RESTART) is judged
// afresh there: its first windows there, a little slow as a new process is
// (1.22x, between the recover and the straggler thresholds), make it no
// straggler; its record on the old node ended, no new one. It was reported
// PERSISTENT on the new node, with a cause, for what it was on the old one.
TEST(MonitorRecordTest, ARestartOnAnotherNodeStartsAfresh) {
  Sim::Options options;
  options.workers = 8;
  Sim sim(options);
  const Factor slow = Only(2, [](double t) { return t >= 2 && t < 7 ? 3.0 : 1.22; });
  bool moved = false;
  const Customize move = [&moved](int worker, double, v1::StepReport& r) {
    if (worker == 2 && moved) r.set_node("spare-0");
  };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 7; ++n) health = sim.Step(slow, move);
  ASSERT_NE(Find(health, WorkerId(2)), nullptr);
  ASSERT_EQ(Name(Find(health, WorkerId(2))->class_()), "PERSISTENT");
  ASSERT_EQ(health.stragglers_size(), 1);
  moved = true;  // from window 7: on spare-0
  health = sim.Step(slow, move);
  health = sim.Step(slow, move);
  const v1::WorkerHealth* w = Find(health, WorkerId(2));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->node(), "spare-0");
  EXPECT_EQ(Name(w->class_()), "HEALTHY");
  EXPECT_EQ(w->windows_slow(), 0);
  ASSERT_EQ(health.stragglers_size(), 1) << "no record on spare-0";
  EXPECT_EQ(health.stragglers(0).node(), NodeName(2));
  EXPECT_FALSE(health.stragglers(0).active());
}

TEST(MonitorWindowTest, OneSlowStepIsAnOnsetBeforeItsWindowCloses) {
  MonitorConfig config;
  config.window_ms = 1'000;
  config.allowed_lateness_ms = 100;
  config.steps_per_window = 2;
  for (const int steps : {2, 0}) {
    config.steps_per_window = steps;
    Monitor monitor = *Monitor::Create(config);
    RunSteps(monitor, 2'000);  // everyone at 0.1 s a step so far
    const int64_t changes = monitor.WindowsClosed(kJob);
    auto report = [&](int worker, double bpt) {
      v1::StepReport r;
      r.set_job(kJob);
      r.set_worker_id(WorkerId(worker));
      r.set_node(NodeName(worker));
      r.set_samples(32);
      r.set_bpt_seconds(bpt);
      r.set_time_unix_ms(kT0 + 2'010);
      monitor.Ingest(r);
    };
    report(5, 0.12);  // jitter: nothing
    report(3, 0.4);   // four times its peers' last window
    const v1::GetJobHealthResponse health = monitor.Health(kJob, kT0 + 2'010);
    const v1::WorkerHealth* slow = Find(health, WorkerId(3));
    ASSERT_NE(slow, nullptr);
    if (steps == 0) {
      EXPECT_EQ(Name(slow->class_()), "HEALTHY") << "windows in time wait for their close";
      EXPECT_EQ(monitor.WindowsClosed(kJob), changes);
      continue;
    }
    EXPECT_EQ(Name(slow->class_()), "TRANSIENT");
    EXPECT_NEAR(slow->score(), 4.0, 0.01);
    EXPECT_NEAR(slow->samples_per_second() * slow->median_bpt_seconds(), 8.0, 0.01)
        << "a quarter of its 32 samples in its peers' step time";
    EXPECT_EQ(Name(Find(health, WorkerId(5))->class_()), "HEALTHY");
    EXPECT_EQ(monitor.WindowsClosed(kJob), changes + 1) << "a change the loop takes a turn for";
    EXPECT_EQ(health.stragglers_size(), 0) << "records are made when windows close";
  }
}

// A step its deadline cut (batch_samples above samples) is judged by what its
// whole batch would have taken: a straggler the deadline keeps at 1.25x its
// peers' step is seen as the 4x straggler it is, at its onset and in its
// windows, with its real pace in samples per second.
TEST(MonitorWindowTest, AStepCutAtItsDeadlineIsJudgedByItsWholeBatch) {
  MonitorConfig config;
  config.window_ms = 1'000;
  config.allowed_lateness_ms = 100;
  config.steps_per_window = 2;
  Monitor monitor = *Monitor::Create(config);
  RunSteps(monitor, 2'000);  // everyone at 0.1 s a step for 32 samples
  auto cut = [](int64_t t_ms) {
    v1::StepReport r;
    r.set_job(kJob);
    r.set_worker_id(WorkerId(3));
    r.set_node(NodeName(3));
    r.set_samples(10);  // of 32: at 4x slower, 10 samples by 1.25x its peers' 0.1 s
    r.set_batch_samples(32);
    r.set_bpt_seconds(0.125);
    r.set_time_unix_ms(kT0 + t_ms);
    return r;
  };
  monitor.Ingest(cut(2'010));
  v1::GetJobHealthResponse health = monitor.Health(kJob, kT0 + 2'010);
  const v1::WorkerHealth* slow = Find(health, WorkerId(3));
  ASSERT_NE(slow, nullptr);
  EXPECT_EQ(Name(slow->class_()), "TRANSIENT") << "an onset from one cut step";
  EXPECT_NEAR(slow->score(), 4.0, 0.01);
  EXPECT_NEAR(slow->samples_per_second(), 80.0, 0.01) << "10 samples in 0.125 s";

  // The same step reported without batch_samples is only 1.25x: no onset.
  Monitor plain = *Monitor::Create(config);
  RunSteps(plain, 2'000);
  v1::StepReport r = cut(2'010);
  r.clear_batch_samples();
  plain.Ingest(r);
  EXPECT_EQ(Name(Find(plain.Health(kJob, kT0 + 2'010), WorkerId(3))->class_()), "HEALTHY");

  // Windows of cut steps: still a straggler, scored at 4x.
  for (int64_t t = 2'100; t <= 4'000; t += 100) {
    for (int i = 0; i < 8; ++i) {
      v1::StepReport step = i == 3 ? cut(t) : v1::StepReport();
      if (i != 3) {
        step.set_job(kJob);
        step.set_worker_id(WorkerId(i));
        step.set_node(NodeName(i));
        step.set_samples(32);
        step.set_bpt_seconds(0.1);
        step.set_time_unix_ms(kT0 + t);
      }
      monitor.Ingest(step);
    }
    monitor.CloseWindows(kT0 + t);
  }
  health = monitor.Health(kJob, kT0 + 4'000);
  slow = Find(health, WorkerId(3));
  ASSERT_NE(slow, nullptr);
  EXPECT_TRUE(IsStraggler(slow->class_())) << Name(slow->class_());
  EXPECT_NEAR(slow->score(), 4.0, 0.05);
}

TEST(MonitorRecordTest, ARestartedProcessFirstWindowIsNotJudged) {
  // worker 2's process is restarted in window 5 (a new pid): its first
  // window is slow for start-up's sake, then it runs at its peers' speed.
  Sim::Options options;
  options.workers = 8;
  Sim sim(options);
  const Factor slow = Only(2, [](double t) { return t >= 5 && t < 6 ? 3.0 : 1.0; });
  const Customize pid = [](int worker, double t, v1::StepReport& r) {
    r.set_pid(worker == 2 && t >= 5 ? 2000 : 1000 + worker);
  };
  for (int n = 0; n < 8; ++n) {
    const v1::GetJobHealthResponse health = sim.Step(slow, pid);
    EXPECT_EQ(Name(Find(health, WorkerId(2))->class_()), "HEALTHY") << "window " << n;
    EXPECT_EQ(health.stragglers_size(), 0) << "window " << n;
  }
  // The same slow window from the same process is a straggler's.
  Sim same(options);
  const Customize one_pid = [](int worker, double, v1::StepReport& r) { r.set_pid(1000 + worker); };
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 6; ++n) health = same.Step(slow, one_pid);
  EXPECT_EQ(Name(Find(health, WorkerId(2))->class_()), "TRANSIENT");
}

TEST(MonitorCauseTest, DeterministicByProfileHasNoHardwareCause) {
  Sim sim({});
  const Factor factor = Only(3, [](double) { return 1.5; });
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 5; ++n) health = sim.Step(factor);
  const v1::WorkerHealth& w = *Find(health, WorkerId(3));
  EXPECT_EQ(Name(w.class_()), "DETERMINISTIC");
  EXPECT_EQ(v1::Cause_Name(w.cause()), "CAUSE_UNKNOWN");  // no label, no node sample
  EXPECT_EQ(w.evidence().count("node_sample_age_seconds"), 0u);
}

// ---- Windows, missing members, bounded memory ------------------------------------

TEST(MonitorWindowTest, MissingWorkerKeepsItsStateThenIsForgotten) {
  Sim sim({});
  const Factor factor = Only(5, [](double t) { return t >= 2 ? 3.0 : 1.0; });
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 6; ++n) health = sim.Step(factor);
  EXPECT_EQ(Name(Find(health, WorkerId(5))->class_()), "PERSISTENT");
  for (int n = 6; n < 9; ++n) health = sim.Step(factor, nullptr, {5});
  const v1::WorkerHealth* w = Find(health, WorkerId(5));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(Name(w->class_()), "PERSISTENT");
  EXPECT_EQ(w->windows_slow(), 4);
  EXPECT_EQ(w->evidence().at("windows_missing"), 3);
  health = sim.Step(factor);  // back
  EXPECT_EQ(Find(health, WorkerId(5))->windows_slow(), 5);
  EXPECT_EQ(Find(health, WorkerId(5))->evidence().count("windows_missing"), 0u);

  // Gone after forget_after_windows (30) windows without a report.
  for (int k = 1; k <= 30; ++k) {
    health = sim.Step(factor, nullptr, {5});
    EXPECT_EQ(Find(health, WorkerId(5)) != nullptr, k < 30) << k;
  }
  EXPECT_EQ(sim.monitor().Stats().members_forgotten, 1);
  EXPECT_EQ(health.workers_size(), 15);
}

TEST(MonitorWindowTest, HistoryIsBounded) {
  Sim sim({});
  const Factor flat = [](int, double) { return 1.0; };
  for (int n = 0; n < 100; ++n) sim.Step(flat);
  const std::vector<WindowPoint> history = sim.monitor().History(kJob, WorkerId(0));
  ASSERT_EQ(history.size(), 64u);
  EXPECT_EQ(history.front().window_start_ms, Sim::WindowStart(36));
  EXPECT_EQ(history.back().window_start_ms, Sim::WindowStart(99));
  EXPECT_NEAR(history.back().bpt_seconds, kBaseBpt, 0.05);
  EXPECT_EQ(history.back().straggler_class, v1::HEALTHY);
  EXPECT_TRUE(sim.monitor().History(kJob, "nobody").empty());
  EXPECT_TRUE(sim.monitor().History("nojob", WorkerId(0)).empty());
}

TEST(MonitorWindowTest, IdleJobIsDroppedAndCloseIsBounded) {
  Sim sim({});
  const Factor flat = [](int, double) { return 1.0; };
  for (int n = 0; n < 3; ++n) sim.Step(flat);
  EXPECT_EQ(sim.monitor().Jobs(), std::vector<std::string>{kJob});
  sim.monitor().CloseWindows(kT0 + 365LL * 24 * 3600 * 1000);  // a year later
  EXPECT_TRUE(sim.monitor().Jobs().empty());
  EXPECT_EQ(sim.monitor().Health(kJob, kT0).workers_size(), 0);
  EXPECT_LE(sim.monitor().Stats().windows_closed, 3 + 30);
}

TEST(MonitorWindowTest, LateEarlyAndMalformedReports) {
  Sim sim({});
  const Factor flat = [](int, double) { return 1.0; };
  for (int n = 0; n < 3; ++n) sim.Step(flat);
  Monitor& m = sim.monitor();
  const MonitorStats before = m.Stats();
  m.Ingest(sim.Report(0, 2.5, 1.0));  // window 2 is closed
  EXPECT_EQ(m.Stats().late_reports, before.late_reports + 1);
  m.Ingest(sim.Report(0, 3 + 8.5, 1.0));  // 8 windows past the oldest open one
  EXPECT_EQ(m.Stats().early_reports, before.early_reports + 1);
  m.Ingest(sim.Report(0, 3 + 7.5, 1.0));  // just inside
  EXPECT_EQ(m.Stats().step_reports, before.step_reports + 1);
  v1::StepReport bad = sim.Report(0, 3.5, 1.0);
  bad.set_bpt_seconds(0);
  m.Ingest(bad);
  bad = sim.Report(0, 3.5, 1.0);
  bad.clear_job();
  m.Ingest(bad);
  bad = sim.Report(0, 3.5, 1.0);
  bad.set_bpt_seconds(NAN);
  m.Ingest(bad);
  EXPECT_EQ(m.Stats().rejected, before.rejected + 3);

  // A report still in flight when its window ends is counted within the lateness.
  Sim::Options options;
  Sim late(options);
  for (int i = 0; i < 16; ++i) late.monitor().Ingest(late.Report(i, 0.5, i == 3 ? 3.0 : 1.0));
  late.monitor().CloseWindows(Sim::WindowStart(1) + 1'000);  // not yet
  EXPECT_EQ(late.monitor().Health(kJob, 0).workers_size(), 0);
  late.monitor().CloseWindows(Sim::WindowStart(1) + 2'000);
  const v1::GetJobHealthResponse health = late.monitor().Health(kJob, 0);
  EXPECT_EQ(health.window(), 1);
  EXPECT_EQ(Name(Find(health, WorkerId(3))->class_()), "TRANSIENT");
}

TEST(MonitorWindowTest, JobsAreIndependent) {
  Monitor m = *Monitor::Create({});
  std::mt19937_64 rng(3);
  for (int n = 0; n < 5; ++n) {
    for (const char* job : {"b/job", "a/job"}) {
      for (int i = 0; i < 8; ++i) {
        v1::StepReport r;
        r.set_job(job);
        r.set_worker_id(WorkerId(i));
        r.set_samples(32);
        const bool slow = std::string(job) == "b/job" && i == 2 && n >= 1;
        r.set_bpt_seconds((slow ? 3.0 : 1.0) * (1 + 0.05 * static_cast<double>(rng() % 100) / 100));
        r.set_time_unix_ms(Sim::WindowStart(n) + 5'000);
        m.Ingest(r);
      }
    }
    m.CloseWindows(Sim::WindowStart(n + 1) + 2'000);
  }
  EXPECT_EQ(m.Jobs(), (std::vector<std::string>{"a/job", "b/job"}));
  const v1::GetJobHealthResponse a = m.Health("a/job", 0), b = m.Health("b/job", 0);
  EXPECT_EQ(Name(Find(a, WorkerId(2))->class_()), "HEALTHY");
  EXPECT_EQ(Name(Find(b, WorkerId(2))->class_()), "PERSISTENT");
  EXPECT_EQ(Find(b, WorkerId(2))->role(), "worker");  // empty role is a worker
  EXPECT_EQ(m.Health("c/job", 5).workers_size(), 0);
  EXPECT_EQ(m.Health("c/job", 5).job(), "c/job");
  // A job that ended is forgotten whole; the other keeps its members.
  m.Forget("b/job");
  EXPECT_EQ(m.Jobs(), (std::vector<std::string>{"a/job"}));
  EXPECT_EQ(m.Health("b/job", 0).workers_size(), 0);
  EXPECT_EQ(m.Health("a/job", 0).workers_size(), 8);
}

// Jobs are namespace/name: the same job and worker names in two namespaces
// are two jobs, one slow and one not.
TEST(MonitorWindowTest, SameNameInTwoNamespacesAreTwoJobs) {
  Monitor m = *Monitor::Create(MonitorConfig{});
  for (int n = 0; n < 4; ++n) {
    for (const char* ns : {"team-a", "team-b"}) {
      for (int w = 0; w < 4; ++w) {
        v1::StepReport r;
        r.set_job("train");
        r.set_namespace_(ns);
        r.set_worker_id(WorkerId(w));
        r.set_node(NodeName(w));
        r.set_samples(64);
        const bool slow = std::string(ns) == "team-a" && w == 3;
        r.set_bpt_seconds(kBaseBpt * (slow ? 3 : 1));
        r.set_time_unix_ms(kT0 + n * kWindowMs + 100);
        m.Ingest(r);
      }
    }
    m.CloseWindows(kT0 + (n + 1) * kWindowMs + MonitorConfig{}.allowed_lateness_ms);
  }
  EXPECT_EQ(m.Jobs(), (std::vector<std::string>{"team-a/train", "team-b/train"}));
  const v1::GetJobHealthResponse a = m.Health("team-a/train", kT0);
  const v1::GetJobHealthResponse b = m.Health("team-b/train", kT0);
  ASSERT_EQ(a.workers_size(), 4);
  ASSERT_EQ(b.workers_size(), 4);
  EXPECT_TRUE(IsStraggler(Find(a, WorkerId(3))->class_()));
  for (const v1::WorkerHealth& w : b.workers())
    EXPECT_FALSE(IsStraggler(w.class_())) << w.worker_id();
  EXPECT_EQ(a.workers(0).job(), "train");
  EXPECT_EQ(a.workers(0).namespace_(), "team-a");
  EXPECT_EQ(b.workers(0).namespace_(), "team-b");
  EXPECT_EQ(m.Health("train", kT0).workers_size(), 0);  // no job of that bare name
}

TEST(MonitorWindowTest, TooFewPeersAreNotClassified) {
  Sim::Options options;
  options.workers = 2;
  Sim sim(options);
  const Factor factor = Only(1, [](double) { return 3.0; });
  for (int n = 0; n < 5; ++n) {
    const v1::GetJobHealthResponse health = sim.Step(factor);
    EXPECT_EQ(Name(Find(health, WorkerId(1))->class_()), "HEALTHY");
    EXPECT_EQ(Name(Find(health, WorkerId(0))->class_()), "HEALTHY");
    EXPECT_NEAR(Find(health, WorkerId(1))->score(), 1.5, 0.1);  // 3 / median(1, 3)
  }
}

TEST(MonitorWindowTest, MinReportsPerWindow) {
  Sim::Options options;
  options.config.min_reports_per_window = 3;
  Sim sim(options);
  const Factor flat = [](int, double) { return 1.0; };
  sim.Step(flat);
  // Worker 4 sends only 2 reports in window 1: counted as missing.
  Monitor& m = sim.monitor();
  for (int i = 0; i < 16; ++i) {
    const int reports = i == 4 ? 2 : 10;
    for (int k = 0; k < reports; ++k) m.Ingest(sim.Report(i, 1 + (k + 0.5) / 10, 1.0));
  }
  m.CloseWindows(sim.CloseTime(1));
  EXPECT_EQ(Find(m.Health(kJob, 0), WorkerId(4))->evidence().at("windows_missing"), 1);
}

TEST(MonitorNodeTest, NewestSampleWinsAndLabelsFromSamples) {
  Sim::Options options;
  options.workers = 8;
  Sim sim(options);
  const Factor factor = Only(0, [](double) { return 2.0; });
  const int64_t now = sim.CloseTime(3);
  v1::NodeSample newer = CleanSample(now - 1'000);
  newer.mutable_cgroups(0)->set_throttled_fraction(0.5);
  v1::NodeSample older = CleanSample(now - 5'000);
  sim.monitor().Ingest(newer);
  sim.monitor().Ingest(older);  // ignored
  v1::GetJobHealthResponse health;
  for (int n = 0; n < 4; ++n) health = sim.Step(factor);
  EXPECT_EQ(v1::Cause_Name(Find(health, WorkerId(0))->cause()), "CPU_THROTTLING");

  v1::NodeSample labelled = CleanSample(now);
  (*labelled.mutable_labels())["antdt.io/device-speed"] = "0.5";
  sim.monitor().Ingest(labelled);
  health = sim.Step(factor);
  EXPECT_EQ(Name(Find(health, WorkerId(0))->class_()), "DETERMINISTIC");
  // The record's cause is the one named in most of its windows: still
  // CPU_THROTTLING (4 windows to 1), HARDWARE once it is named more often.
  EXPECT_EQ(v1::Cause_Name(Find(health, WorkerId(0))->cause()), "CPU_THROTTLING");
  for (int n = 0; n < 4; ++n) health = sim.Step(factor);
  EXPECT_EQ(v1::Cause_Name(Find(health, WorkerId(0))->cause()), "HARDWARE");
  EXPECT_EQ(Find(health, WorkerId(0))->evidence().at("device_speed"), 0.5);

  v1::NodeSample nameless = CleanSample(now);
  nameless.clear_node();
  const int64_t rejected = sim.monitor().Stats().rejected;
  sim.monitor().Ingest(nameless);
  EXPECT_EQ(sim.monitor().Stats().rejected, rejected + 1);
}

// A straggler's peer median, looked up in its role's sorted values with its
// own left out, is the median of the others' values computed directly: odd
// and even counts, ties, a member that did not report the signal, a lone
// member (no peers: none).
TEST(PeerSignals, MedianWithoutOneIsTheOthersMedian) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<int> small(0, 5);  // ties are common
  for (int round = 0; round < 300; ++round) {
    const int n = 1 + round % 9;
    std::vector<SignalValues> members(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      members[static_cast<size_t>(i)]["cpu_utilization"] = small(rng) / 5.0;
      if (i % 3 != 1) members[static_cast<size_t>(i)]["io_some_avg10"] = small(rng) * 7.0;
    }
    PeerSignals peers;
    for (const SignalValues& m : members) peers.Add(m);
    for (int self = 0; self < n; ++self) {
      for (const std::string key : {"cpu_utilization", "io_some_avg10"}) {
        std::vector<double> others;
        for (int i = 0; i < n; ++i) {
          const auto& m = members[static_cast<size_t>(i)];
          if (i != self && m.count(key)) others.push_back(m.at(key));
        }
        const auto& own = members[static_cast<size_t>(self)];
        const double* excluded = own.count(key) ? &own.at(key) : nullptr;
        const std::optional<double> got = peers.MedianWithout(key, excluded);
        if (others.empty()) {
          EXPECT_FALSE(got.has_value()) << "n " << n << " self " << self << " " << key;
        } else {
          ASSERT_TRUE(got.has_value()) << "n " << n << " self " << self << " " << key;
          EXPECT_DOUBLE_EQ(*got, vocab::Median(others)) << "n " << n << " self " << self;
        }
      }
    }
  }
}

// Both forms of AttributeCause agree: peers listed, or the role's values with
// the straggler's own left out.
TEST(PeerSignals, AttributionMatchesListedPeers) {
  std::vector<SignalValues> members = {{{"cpu_utilization", 0.99}, {"neighbour_cpu_cores", 3.0}},
                                       {{"cpu_utilization", 0.5}, {"neighbour_cpu_cores", 0.1}},
                                       {{"cpu_utilization", 0.6}, {"neighbour_cpu_cores", 0.2}},
                                       {{"cpu_utilization", 0.55}}};
  PeerSignals role;
  for (const SignalValues& m : members) role.Add(m);
  std::vector<const SignalValues*> others = {&members[1], &members[2], &members[3]};
  const Attribution listed = AttributeCause(members[0], others, false, CauseThresholds{});
  const Attribution sorted =
      AttributeCause(members[0], role, &members[0], false, CauseThresholds{});
  EXPECT_EQ(listed.cause, v1::CPU_CONTENTION);
  EXPECT_EQ(sorted.cause, listed.cause);
  EXPECT_EQ(sorted.evidence, listed.evidence);
}

}  // namespace
}  // namespace antdt::monitor
