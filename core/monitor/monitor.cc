#include "core/monitor/monitor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/vocab/labels.h"
#include "api/vocab/vocab.h"
#include "common/job_key.h"
#include "core/monitor/causes.h"

namespace antdt::monitor {

int64_t internal::Job::WindowOf(int64_t t) const {
  if (step_ms <= 0 || t < switch_index * first_ms) return t / first_ms;
  return switch_index + (t - switch_index * first_ms) / step_ms;
}

int64_t internal::Job::StartOf(int64_t window) const {
  if (step_ms <= 0 || window <= switch_index) return window * first_ms;
  return switch_index * first_ms + (window - switch_index) * step_ms;
}
namespace {

using v1::StragglerClass;
using vocab::IsStraggler;
using vocab::Median;

constexpr char kWorkerRole[] = "worker";
constexpr char kPsRole[] = "ps";

absl::Status Bad(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("monitor.", field, ": ", message));
}

// Written so that NaN fails too.
absl::Status InRange(double value, double lo, double hi, const std::string& field) {
  if (!(value >= lo && value <= hi)) {
    return Bad(field, absl::StrCat("must be in [", lo, ", ", hi, "], got ", value));
  }
  return absl::OkStatus();
}

// Coefficient of variation (population standard deviation / mean).
double Cv(const std::vector<double>& values) {
  double mean = 0;
  for (double v : values) mean += v;
  mean /= static_cast<double>(values.size());
  if (!(mean > 0)) return INFINITY;
  double var = 0;
  for (double v : values) var += (v - mean) * (v - mean);
  var /= static_cast<double>(values.size());
  return std::sqrt(var) / mean;
}

double NonNegative(double v) { return std::isfinite(v) && v > 0 ? v : 0; }

// What a step cost: a step its deadline cut (StepReport.batch_samples above
// samples) counts as the whole batch it was to train, at the pace it trained
// the part it did, so a straggler the deadline keeps from holding up its
// peers is still seen as slow as it is.
struct StepCost {
  double bpt = 0;
  double samples = 0;
};
StepCost CostOf(const v1::StepReport& r) {
  if (r.samples() > 0 && r.batch_samples() > r.samples()) {
    const double whole = static_cast<double>(r.batch_samples());
    return {r.bpt_seconds() * whole / static_cast<double>(r.samples()), whole};
  }
  return {r.bpt_seconds(), static_cast<double>(std::max<int64_t>(r.samples(), 0))};
}

using Accums = absl::btree_map<std::string, internal::Accum>;  // member id -> window sums
using Members = std::map<std::string, internal::Member>;
using Evidence = google::protobuf::Map<std::string, double>;

// One member's view of one window.
struct Observation {
  bool has_own = false;               // its own reports
  const std::string* role = nullptr;  // its member's role, with its own reports
  double bpt = 0;
  double median = 0;
  double own_score = 0;
  bool own_classify = false;
  double samples_per_second = 0;
  double sample_seconds = 0;  // seconds per sample; 0 when it reported none
  double sample_score = 0;    // sample_seconds / the role's median; 0 when none
  bool sample_classify = false;
  double data_wait_share = 0;
  double communication_share = 0;
  double cpu_wait_share = 0;
  bool has_latency = false;  // a parameter server, through workers' latency
  double latency = 0;
  double latency_median = 0;
  double latency_score = 0;
  bool latency_classify = false;
};

// The score step's result for one window.
struct WindowScores {
  std::map<std::string, Observation> observations;  // by member id
  std::map<std::string, double> role_median;
  std::map<std::string, double> role_low;           // the role's 10th percentile of BPT
  std::map<std::string, internal::RoleView> roles;  // of the roles with their own reports
  std::map<std::string, std::vector<double>> server_latencies;
  std::map<std::string, std::vector<double>> role_sample_seconds;  // server -> one mean per worker
};

// A member's window score: the larger over the sources with enough peers to
// classify, else its only source's (not classified); BPT and median from its
// own reports when it has them, else from the workers' latency to it.
struct MemberScore {
  double score = 0;
  bool classify = false;
  double bpt = 0;
  double median = 0;
};

// Moves the window's sums out of the job's pending windows.
Accums TakeWindow(internal::Job& job, int64_t window) {
  Accums accums;
  if (auto it = job.pending.find(window); it != job.pending.end()) {
    accums = std::move(it->second);
    job.pending.erase(it);
  }
  return accums;
}

// Score, own reports: window BPT per member, median per role. A member that
// reported takes the report's role and node, even with too few reports.
WindowScores ScoreOwnReports(const MonitorConfig& config, const Accums& accums, Members& members) {
  WindowScores scores;
  std::map<std::string, std::vector<double>> role_bpts;
  // Both sorted by id: each member found from the last one found.
  auto cursor = members.begin();
  for (const auto& [id, a] : accums) {
    while (cursor != members.end() && cursor->first < id) ++cursor;
    if (cursor == members.end() || cursor->first != id) cursor = members.try_emplace(cursor, id);
    internal::Member& m = cursor->second;
    m.role = a.role;
    if (!a.node.empty() && !m.node.empty() && a.node != m.node) {
      // Restarted on another node (KILL_RESTART): what it was is of the node
      // it left. It is judged afresh here; its open record ends there.
      const int64_t record = m.record_id;
      m = internal::Member{};
      m.role = a.role;
      m.record_id = record;
      m.settling = true;
    }
    if (!a.node.empty()) m.node = a.node;
    if (a.pid > 0 && m.pid > 0 && a.pid != m.pid) m.settling = true;  // a new process
    if (a.pid > 0) m.pid = a.pid;
    if (a.count < config.min_reports_per_window) continue;
    Observation& o = scores.observations.try_emplace(scores.observations.end(), id)->second;
    o.has_own = true;
    o.role = &m.role;
    o.bpt = a.bpt / static_cast<double>(a.count);
    o.samples_per_second = a.samples / a.bpt;
    o.data_wait_share = a.data_wait / a.bpt;
    o.communication_share = a.communication / a.bpt;
    o.cpu_wait_share = a.cpu_wait / a.bpt;
    if (a.samples > 0) {
      o.sample_seconds = a.bpt / a.samples;
      scores.role_sample_seconds[a.role].push_back(o.sample_seconds);
    }
    role_bpts[a.role].push_back(o.bpt);
    for (const auto& [server, sum] : a.ps_latency) {
      scores.server_latencies[server].push_back(sum.first / static_cast<double>(sum.second));
    }
  }
  for (auto& [role, bpts] : role_bpts) {
    internal::RoleView& view = scores.roles[role];
    view.median_bpt = scores.role_median[role] = Median(bpts);
    view.members = static_cast<int>(bpts.size());
    const auto low = bpts.begin() + static_cast<std::ptrdiff_t>(bpts.size() / 10);
    std::nth_element(bpts.begin(), low, bpts.end());
    scores.role_low[role] = *low;
  }
  for (const auto& [role, per_sample] : scores.role_sample_seconds) {  // once per role
    scores.roles[role].median_sample_seconds = Median(per_sample);
  }
  for (auto& [id, o] : scores.observations) {
    const std::string& role = *o.role;
    o.median = scores.role_median[role];
    o.own_score = o.bpt / o.median;
    o.own_classify = static_cast<int>(role_bpts[role].size()) >= config.min_peers;
    const std::vector<double>& per_sample = scores.role_sample_seconds[role];
    if (o.sample_seconds > 0) {
      o.sample_score = o.sample_seconds / scores.roles[role].median_sample_seconds;
      o.sample_classify = static_cast<int>(per_sample.size()) >= config.min_peers;
    }
  }
  return scores;
}

// Score, parameter servers through the workers' latency: median over workers
// per server, against the median over servers.
void ScoreServerLatency(const MonitorConfig& config, Members& members, WindowScores& scores) {
  std::map<std::string, double> server_latency;
  std::vector<double> latencies;
  for (const auto& [server, values] : scores.server_latencies) {
    latencies.push_back(server_latency[server] = Median(values));
  }
  const double latency_median = Median(latencies);
  const bool latency_classify = static_cast<int>(latencies.size()) >= config.min_peers;
  for (const auto& [server, latency] : server_latency) {
    internal::Member& m = members[server];
    if (m.role.empty()) m.role = kPsRole;
    Observation& o = scores.observations[server];
    o.has_latency = true;
    o.latency = latency;
    o.latency_median = latency_median;
    o.latency_score = latency_median > 0 ? latency / latency_median : 1;
    o.latency_classify = latency_classify;
  }
}

// Whole-job slowdown: the worker median against its warm-up baseline, and
// (nearly) every worker slowed with it: the 10th percentile of the workers'
// BPT past the same bar. A slow majority is not a slow job: its fast
// minority are leaders, and they get the work.
void UpdateJobSlowdown(const MonitorConfig& config, const WindowScores& scores,
                       internal::Job& job) {
  auto it = scores.role_median.find(kWorkerRole);
  if (it == scores.role_median.end()) return;
  if (static_cast<int>(job.warmup_medians.size()) < config.warmup_windows) {
    job.warmup_medians.push_back(it->second);
    if (static_cast<int>(job.warmup_medians.size()) == config.warmup_windows) {
      job.baseline_median = Median(job.warmup_medians);
    }
  }
  const double bar = config.job_slowdown_ratio * job.baseline_median;
  auto low = scores.role_low.find(kWorkerRole);
  job.job_slowdown = job.baseline_median > 0 && it->second > bar && low != scores.role_low.end() &&
                     low->second > bar;
}

MemberScore Combine(const Observation& o) {
  MemberScore s;
  if (o.has_own && o.own_classify) {
    s.score = o.own_score;
    s.classify = true;
  }
  if (o.has_latency && o.latency_classify) {
    s.score = s.classify ? std::max(s.score, o.latency_score) : o.latency_score;
    s.classify = true;
  }
  if (!s.classify) s.score = o.has_own ? o.own_score : o.latency_score;
  s.bpt = o.has_own ? o.bpt : o.latency;
  s.median = o.has_own ? o.median : o.latency_median;
  return s;
}

// Windows in steps: once a window with worker reports closes, the job's
// windows from the first one not yet open on are steps_per_window x the
// workers' median batch processing time in it.
void MeasureSteps(const MonitorConfig& config, const std::map<std::string, double>& role_median,
                  int64_t window, internal::Job& job) {
  if (config.steps_per_window <= 0 || job.step_ms > 0) return;
  auto it = role_median.find(kWorkerRole);
  if (it == role_median.end()) it = role_median.begin();
  if (it == role_median.end() || !(it->second > 0)) return;
  // Reports of the current window must fit among the open ones while the
  // previous windows wait for their lateness (as Validate asks of window_ms).
  const int64_t floor_ms =
      std::max(config.min_window_ms, (config.allowed_lateness_ms + config.max_open_windows - 3) /
                                         std::max(1, config.max_open_windows - 2));
  const double want = config.steps_per_window * it->second * 1000.0;
  job.step_ms = std::clamp(static_cast<int64_t>(std::llround(std::min(want, 1e15))), floor_ms,
                           std::max(floor_ms, config.max_window_ms));
  const int64_t last_open = job.pending.empty() ? window : job.pending.rbegin()->first;
  job.switch_index = std::max(window, last_open) + 1;
}

// The member's first warmup_windows windows: its baseline BPT, and whether it
// was a steady straggler from the start.
void UpdateWarmup(const MonitorConfig& config, const MemberScore& s, internal::Member& m) {
  if (static_cast<int>(m.warmup_bpt.size()) >= config.warmup_windows) return;
  m.warmup_bpt.push_back(s.bpt);
  m.warmup_scores.push_back(s.score);
  if (static_cast<int>(m.warmup_bpt.size()) < config.warmup_windows) return;
  m.baseline_bpt = Median(m.warmup_bpt);
  m.profile_deterministic =
      std::all_of(m.warmup_scores.begin(), m.warmup_scores.end(),
                  [&](double score) { return score >= config.straggler_threshold; }) &&
      Cv(m.warmup_scores) < config.deterministic_cv;
}

// Record: the member's class, its last window (kept for Health) and history.
void Record(const MonitorConfig& config, const Observation& o, const MemberScore& s,
            StragglerClass cls, int64_t start_ms, internal::Member& m) {
  if (!m.closed || cls != m.straggler_class) m.since_ms = start_ms;
  m.straggler_class = cls;
  m.closed = true;
  const double baseline = m.baseline_bpt > 0 ? m.baseline_bpt : Median(m.warmup_bpt);
  m.last = WindowPoint{start_ms,
                       s.bpt,
                       s.median,
                       s.score,
                       baseline > 0 ? s.bpt / baseline : 1,
                       o.samples_per_second,
                       cls,
                       o.sample_score,
                       m.speed_class};
  m.has_split = o.has_own;
  m.data_wait_share = o.data_wait_share;
  m.communication_share = o.communication_share;
  m.cpu_wait_share = o.cpu_wait_share;
  m.has_latency = o.has_latency;
  m.latency = o.latency;
  m.latency_median = o.latency_median;
  m.latency_score = o.latency_score;
  m.history.push_back(m.last);
  while (static_cast<int>(m.history.size()) > config.history_windows) m.history.pop_front();
}

}  // namespace

absl::Status MonitorConfig::Validate() const {
  if (!(window_ms > 0)) return Bad("window", "must be > 0");
  if (allowed_lateness_ms < 0) return Bad("allowed_lateness", "must be >= 0");
  if (!(straggler_threshold > 1)) return Bad("straggler_threshold", "must be > 1");
  if (!(recover_threshold >= 1 && recover_threshold <= straggler_threshold)) {
    return Bad("recover_threshold", "must be in [1, straggler_threshold]");
  }
  if (!(leader_threshold > 0 && leader_threshold < 1)) {
    return Bad("leader_threshold", "must be in (0, 1)");
  }
  if (!(leader_exit_threshold >= leader_threshold && leader_exit_threshold <= 1)) {
    return Bad("leader_exit_threshold", "must be in [leader_threshold, 1]");
  }
  if (persistent_windows < 1) return Bad("persistent_windows", "must be >= 1");
  if (warmup_windows < 2) return Bad("warmup_windows", "must be >= 2");
  if (!(deterministic_cv > 0)) return Bad("deterministic_cv", "must be > 0");
  if (!(job_slowdown_ratio > 1)) return Bad("job_slowdown_ratio", "must be > 1");
  if (min_reports_per_window < 1) return Bad("min_reports_per_window", "must be >= 1");
  if (min_peers < 2) return Bad("min_peers", "must be >= 2");
  if (history_windows < 1) return Bad("history_windows", "must be >= 1");
  if (forget_after_windows < 1) return Bad("forget_after_windows", "must be >= 1");
  if (max_open_windows < 2) return Bad("max_open_windows", "must be >= 2");
  // Reports of the current window must fit among the open ones while the
  // previous windows wait for their lateness.
  if (allowed_lateness_ms > (max_open_windows - 2) * window_ms) {
    return Bad("allowed_lateness", "must be <= (max_open_windows - 2) x window");
  }
  if (steps_per_window < 0) return Bad("window_steps", "must be >= 0");
  if (steps_per_window > 1000) return Bad("window_steps", "must be <= 1000");
  if (!(min_window_ms > 0)) return Bad("min_window", "must be > 0");
  if (!(onset_threshold > 1)) return Bad("onset_threshold", "must be > 1");
  if (max_window_ms < min_window_ms) return Bad("max_window", "must be >= min_window");
  if (!(node_sample_max_age_ms > 0)) return Bad("node_sample_max_age", "must be > 0");
  if (max_records < 1) return Bad("max_records", "must be >= 1");
  if (!(causes.peer_ratio >= 1 && causes.peer_ratio <= 100)) {
    return Bad("causes.peer_ratio", "must be in [1, 100]");
  }
  const CauseThresholds& c = causes;
  for (const auto& [value, hi, field] : {
           std::tuple<double, double, const char*>{c.cgroup_throttled_fraction, 1,
                                                   "causes.cgroup_throttled_fraction"},
           {c.cpu_some_avg10, 100, "causes.cpu_some_avg10"},
           {c.cpu_utilization, 1, "causes.cpu_utilization"},
           {c.memory_some_avg10, 100, "causes.memory_some_avg10"},
           {c.memory_available_fraction, 1, "causes.memory_available_fraction"},
           {c.io_some_avg10, 100, "causes.io_some_avg10"},
           {c.step_share, 1, "causes.step_share"},
           {c.cpu_wait_share, 1, "causes.cpu_wait_share"},
           {c.neighbour_cpu_cores, 4096, "causes.neighbour_cpu_cores"},
       }) {
    absl::Status status = InRange(value, 0, hi, field);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<Monitor> Monitor::Create(MonitorConfig config) {
  absl::Status status = config.Validate();
  if (!status.ok()) return status;
  return Monitor(std::move(config));
}

void Monitor::Ingest(const v1::StepReport& report) {
  const double bpt = report.bpt_seconds();
  if (report.job().empty() || report.worker_id().empty() || report.time_unix_ms() <= 0 ||
      !(std::isfinite(bpt) && bpt > 0)) {
    ++stats_.rejected;
    return;
  }
  auto [it, inserted] = jobs_.try_emplace(JobKey(report.namespace_(), report.job()));
  Job& job = it->second;
  if (inserted) job.first_ms = config_.window_ms;
  const int64_t window = job.WindowOf(report.time_unix_ms());
  if (inserted) {
    job.next_window = window;
    job.ns = report.namespace_();
    job.name = report.job();
  }
  if (job.closed_any && window < job.next_window) {
    ++stats_.late_reports;
    return;
  }
  // Before the first close, an earlier report moves the job's first window back.
  const int64_t lo = job.closed_any ? job.next_window : std::min(job.next_window, window);
  const int64_t hi = job.pending.empty() ? window : std::max(window, job.pending.rbegin()->first);
  if (hi - lo >= config_.max_open_windows) {
    ++stats_.early_reports;
    if (inserted) jobs_.erase(it);
    return;
  }
  job.next_window = lo;

  internal::Accum& a = job.pending[window][report.worker_id()];
  a.role = report.role().empty() ? kWorkerRole : report.role();
  if (!report.node().empty()) a.node = report.node();
  if (report.pid() > 0) a.pid = report.pid();
  ++a.count;
  const StepCost cost = CostOf(report);
  a.bpt += cost.bpt;
  a.samples += cost.samples;
  a.data_wait += NonNegative(report.data_wait_seconds());
  a.communication += NonNegative(report.communication_seconds());
  a.cpu_wait += NonNegative(report.cpu_wait_seconds());
  for (const auto& [server, latency] : report.ps_latency_seconds()) {
    if (server.empty() || !std::isfinite(latency) || latency < 0) continue;
    auto& sum = a.ps_latency[server];
    sum.first += latency;
    ++sum.second;
  }
  ++stats_.step_reports;
  if (config_.steps_per_window > 0) Onset(job, report, a.role, cost.bpt, cost.samples);
}

void Monitor::Onset(Job& job, const v1::StepReport& report, const std::string& role, double bpt,
                    double samples) {
  auto mit = job.member_index.find(report.worker_id());
  auto vit = job.roles.find(role);
  if (mit == job.member_index.end() || vit == job.roles.end() || report.samples() <= 0) return;
  Member& m = *mit->second;
  const internal::RoleView& view = vit->second;
  if (!m.closed || m.settling || IsStraggler(m.straggler_class) ||
      view.members < config_.min_peers || !(view.median_bpt > 0) ||
      !(view.median_sample_seconds > 0)) {
    return;
  }
  // A move or a new process is judged at its window, afresh.
  if ((!report.node().empty() && report.node() != m.node) ||
      (report.pid() > 0 && m.pid > 0 && report.pid() != m.pid)) {
    return;
  }
  const double score = bpt / view.median_bpt;
  const double sample_score = bpt / samples / view.median_sample_seconds;
  const double bar = std::max(config_.straggler_threshold, config_.onset_threshold);
  if (score < bar || sample_score < bar) return;
  m.straggler_class = v1::TRANSIENT;
  m.since_ms = report.time_unix_ms();
  m.onset_ms = report.time_unix_ms();
  m.last.score = score;
  m.last.bpt_seconds = bpt;
  m.last.median_bpt_seconds = view.median_bpt;
  m.last.samples_per_second = samples / bpt;
  m.last.sample_score = sample_score;
  m.last.straggler_class = v1::TRANSIENT;
  ++job.onsets;
  ++stats_.onsets;
}

void Monitor::Ingest(const v1::NodeSample& sample) {
  if (sample.node().empty() || sample.time_unix_ms() <= 0) {
    ++stats_.rejected;
    return;
  }
  NodeSeen& node = nodes_[sample.node()];
  if (sample.time_unix_ms() < node.sample.time_unix_ms()) return;  // an older one
  node.sample = sample;
  if (!sample.labels().empty()) {
    std::map<std::string, std::string> labels(sample.labels().begin(), sample.labels().end());
    if (labels != node.labels) {
      node.labels = std::move(labels);
      ++labels_version_;
    }
  }
  ++stats_.node_samples;
}

void Monitor::SetNodeLabels(const std::string& node, std::map<std::string, std::string> labels) {
  nodes_[node].labels = std::move(labels);
  ++labels_version_;
}

void Monitor::CloseWindows(int64_t now_ms) {
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Job& job = it->second;
    // Bounded: once every member is forgotten and nothing is pending, the job ends.
    while (job.StartOf(job.next_window + 1) + config_.allowed_lateness_ms <= now_ms &&
           !(job.members.empty() && job.pending.empty())) {
      CloseWindow(job, job.next_window, now_ms);
      ++job.next_window;
      job.closed_any = true;
      ++job.windows_closed;
      ++stats_.windows_closed;
    }
    if (job.members.empty() && job.pending.empty()) {
      it = jobs_.erase(it);
    } else {
      ++it;
    }
  }
  const int64_t node_forget_ms = 10 * config_.node_sample_max_age_ms;
  for (auto it = nodes_.begin(); it != nodes_.end();) {
    const int64_t t = it->second.sample.time_unix_ms();
    if (t > 0 && now_ms - t > node_forget_ms) {
      if (!it->second.labels.empty()) ++labels_version_;
      nodes_.erase(it++);  // abseil's erase returns nothing; the others stay valid
    } else {
      ++it;
    }
  }
}

// Score every member that reported in the window, classify each scored one,
// record its window; forget the members silent for too long.
void Monitor::CloseWindow(Job& job, int64_t window, int64_t now_ms) {
  WindowScores scores = ScoreOwnReports(config_, TakeWindow(job, window), job.members);
  ScoreServerLatency(config_, job.members, scores);
  UpdateJobSlowdown(config_, scores, job);
  MeasureSteps(config_, scores.role_median, window, job);
  for (const auto& [role, view] : scores.roles) job.roles[role] = view;
  const Majorities majorities = HardwareMajorities(job);
  const int64_t start_ms = job.StartOf(window);
  const int64_t end_ms = job.StartOf(window + 1);
  Scored observed;  // members scored in this window
  // Both sorted by id: one walk, not a lookup per member.
  auto oit = scores.observations.begin();
  for (auto it = job.members.begin(); it != job.members.end();) {
    Member& m = it->second;
    while (oit != scores.observations.end() && oit->first < it->first) ++oit;
    if (oit == scores.observations.end() || oit->first != it->first) {
      if (++m.windows_missing >= config_.forget_after_windows) {
        EndRecord(job, m);
        it = job.members.erase(it);
        ++stats_.members_forgotten;
      } else {
        ++it;
      }
      continue;
    }
    m.windows_missing = 0;
    if (m.onset_ms >= end_ms) {  // an older window than its onset: the onset stands
      ++it;
      continue;
    }
    m.onset_ms = -1;
    const MemberScore s = Combine(oit->second);
    UpdateWarmup(config_, s, m);
    const bool settled = !std::exchange(m.settling, false);
    const StragglerClass cls = Classify(m, s.score, s.classify && settled, majorities);
    ClassifySpeed(m, oit->second.sample_score, oit->second.sample_classify && settled, majorities);
    Record(config_, oit->second, s, cls, start_ms, m);
    if (oit->second.has_own || oit->second.has_latency) observed.emplace_back(&it->first, &m);
    ++it;
  }
  UpdateRecords(job, observed, start_ms, now_ms, majorities);
  job.member_index.clear();
  job.member_index.reserve(job.members.size());
  for (auto& [id, m] : job.members) job.member_index.emplace(id, &m);
}

namespace {

// What one window's score says of a member whose class was `previous`: slow
// (entering at straggler_threshold, leaving below recover_threshold) or not,
// and if not, a leader (entering below leader_threshold, leaving at
// leader_exit_threshold). Counts consecutive slow windows in `windows_slow`.
// `classify` false (too few peers): neither.
struct Verdict {
  bool slow = false;
  bool leader = false;
};

Verdict Judge(const MonitorConfig& c, StragglerClass previous, double score, bool classify,
              int& windows_slow) {
  Verdict v;
  v.slow =
      classify && score >= (IsStraggler(previous) ? c.recover_threshold : c.straggler_threshold);
  windows_slow = v.slow ? windows_slow + 1 : 0;
  v.leader = !v.slow && classify &&
             score < (previous == v1::LEADER ? c.leader_exit_threshold : c.leader_threshold);
  return v;
}

// The class of a member judged by Judge.
StragglerClass ClassOf(const MonitorConfig& c, const Verdict& v, bool deterministic,
                       int windows_slow) {
  if (!v.slow) return v.leader ? v1::LEADER : v1::HEALTHY;
  if (deterministic) return v1::DETERMINISTIC;
  return windows_slow >= c.persistent_windows ? v1::PERSISTENT : v1::TRANSIENT;
}

}  // namespace

StragglerClass Monitor::Classify(Member& m, double score, bool classify,
                                 const Majorities& majorities) const {
  const Verdict v = Judge(config_, m.straggler_class, score, classify, m.windows_slow);
  if (!v.slow) m.profile_deterministic = false;
  const bool deterministic =
      v.slow && (m.profile_deterministic || LabelDeterministic(m, majorities, nullptr));
  return ClassOf(config_, v, deterministic, m.windows_slow);
}

// The same rules on the per-sample score, with the member's own hysteresis
// and slow-window count; deterministic as its BPT class is, or by its node's
// labels. A window without samples leaves the speed class as it was.
void Monitor::ClassifySpeed(Member& m, double sample_score, bool classify,
                            const Majorities& majorities) const {
  if (!(sample_score > 0)) return;
  const Verdict v = Judge(config_, m.speed_class, sample_score, classify, m.speed_windows_slow);
  // Deterministic from the start (its warm-up profile) until it recovers; the
  // BPT class forgets this once a smaller batch hides the slowness.
  m.speed_deterministic = v.slow && (m.speed_deterministic || m.profile_deterministic);
  const bool deterministic =
      v.slow && (m.straggler_class == v1::DETERMINISTIC || m.speed_deterministic ||
                 LabelDeterministic(m, majorities, nullptr));
  m.speed_class = ClassOf(config_, v, deterministic, m.speed_windows_slow);
}

Monitor::Majorities Monitor::HardwareMajorities(Job& job) const {
  // The same labels and the same members on the same nodes: the same answer
  // (a window of 10,000 members looked up every node's labels).
  size_t placement = job.members.size();
  for (const auto& [id, m] : job.members) {
    placement = (placement * 1'000'003) ^ std::hash<std::string>{}(m.node) ^
                (std::hash<std::string>{}(m.role) << 1);
  }
  if (job.majorities_labels == labels_version_ && job.majorities_placement == placement) {
    return job.majorities;
  }
  job.majorities = ComputeMajorities(job);
  job.majorities_labels = labels_version_;
  job.majorities_placement = placement;
  return job.majorities;
}

Monitor::Majorities Monitor::ComputeMajorities(const Job& job) const {
  // role -> node -> hardware, each node counted once per role.
  std::map<std::string, std::map<std::string, std::string>> hardware;
  for (const auto& [id, m] : job.members) {
    if (m.node.empty()) continue;
    auto nit = nodes_.find(m.node);
    if (nit == nodes_.end()) continue;
    auto lit = nit->second.labels.find(vocab::kLabelHardware);
    if (lit != nit->second.labels.end()) hardware[m.role][m.node] = lit->second;
  }
  Majorities majorities;
  for (const auto& [role, per_node] : hardware) {
    std::map<std::string, int> counts;
    for (const auto& [node, value] : per_node) ++counts[value];
    int best = 0;
    bool unique = false;
    std::string best_value;
    for (const auto& [value, count] : counts) {
      if (count > best) {
        best = count;
        best_value = value;
        unique = true;
      } else if (count == best) {
        unique = false;
      }
    }
    if (unique) majorities[role] = best_value;  // a tie has no majority
  }
  return majorities;
}

bool Monitor::LabelDeterministic(const Member& member, const Majorities& majorities,
                                 google::protobuf::Map<std::string, double>* evidence) const {
  if (member.node.empty()) return false;
  auto nit = nodes_.find(member.node);
  if (nit == nodes_.end()) return false;
  const std::map<std::string, std::string>& labels = nit->second.labels;
  bool slower = false;
  if (auto it = labels.find(vocab::kLabelDeviceSpeed); it != labels.end()) {
    double speed = 0;
    if (absl::SimpleAtod(it->second, &speed) && std::isfinite(speed)) {
      if (evidence != nullptr) (*evidence)["device_speed"] = speed;
      slower = slower || speed < 1;
    }
  }
  if (auto it = labels.find(vocab::kLabelHardware); it != labels.end()) {
    auto mit = majorities.find(member.role);
    const bool minority = mit != majorities.end() && it->second != mit->second;
    if (evidence != nullptr) (*evidence)["hardware_minority"] = minority ? 1 : 0;
    slower = slower || minority;
  }
  return slower;
}

std::map<std::string, double> Monitor::MemberSignals(const Member& member, int64_t now_ms) const {
  std::map<std::string, double> values;
  ForEachSignal(member, now_ms, [&](std::string_view key, double value) {
    values.insert_or_assign(std::string(key), value);
  });
  return values;
}

void Monitor::ForEachSignal(const Member& member, int64_t now_ms,
                            absl::FunctionRef<void(std::string_view, double)> f) const {
  if (auto nit = nodes_.find(member.node);
      !member.node.empty() && nit != nodes_.end() && nit->second.sample.time_unix_ms() > 0) {
    const int64_t age_ms = now_ms - nit->second.sample.time_unix_ms();
    if (age_ms <= config_.node_sample_max_age_ms) ForEachNodeSignal(nit->second.sample, f);
  }
  if (member.has_split) {
    f("communication_share", member.communication_share);
    f("data_wait_share", member.data_wait_share);
    f("cpu_wait_share", member.cpu_wait_share);
  }
}

namespace {

// The cause named in most windows of the record (the first named wins a tie).
v1::Cause RecordCause(const internal::RecordState& r) {
  v1::Cause best = v1::CAUSE_UNKNOWN;
  int count = 0;
  for (const auto& [cause, n] : r.named) {
    if (n > count) {
      best = cause;
      count = n;
    }
  }
  return best;
}

// The record `id` of the job; nullptr when dropped or none (-1).
template <typename JobT>
auto FindRecord(JobT& job, int64_t id) -> decltype(&job.records.front()) {
  if (id < 0 || job.records.empty() || id < job.records.front().id) return nullptr;
  const auto offset = static_cast<size_t>(id - job.records.front().id);
  return offset < job.records.size() ? &job.records[offset] : nullptr;
}

// Slower per sample than its peers while its smaller batch keeps its batch
// time among theirs.
bool Compensated(const internal::Member& m) {
  return IsStraggler(m.speed_class) && !IsStraggler(m.straggler_class);
}

// One more slow window of the member in its record, with this window's cause.
void AddWindow(internal::RecordState& r, const internal::Member& m, v1::Cause cause,
               std::map<std::string, double> evidence, int64_t end_ms) {
  v1::StragglerRecord& rec = r.record;
  const bool compensated = Compensated(m);
  rec.set_class_(compensated ? m.speed_class : m.straggler_class);
  rec.set_compensated(compensated);
  rec.set_last_seen_unix_ms(end_ms);
  rec.set_active(true);
  rec.set_windows(rec.windows() + 1);
  rec.set_max_score(std::max(rec.max_score(), m.last.score));
  rec.set_max_sample_score(std::max(rec.max_sample_score(), m.last.sample_score));
  ++(*rec.mutable_cause_windows())[vocab::CauseLabel(cause)];
  if (cause != v1::CAUSE_UNKNOWN) {
    auto it = std::find_if(r.named.begin(), r.named.end(),
                           [cause](const auto& p) { return p.first == cause; });
    if (it == r.named.end()) {
      r.named.emplace_back(cause, 1);
    } else {
      ++it->second;
    }
    r.evidence[cause] = evidence;
  }
  r.latest_evidence = std::move(evidence);
  const v1::Cause named = RecordCause(r);
  rec.set_cause(named);
  const auto& shown = named == v1::CAUSE_UNKNOWN ? r.latest_evidence : r.evidence[named];
  rec.mutable_evidence()->clear();
  rec.mutable_evidence()->insert(shown.begin(), shown.end());
}

}  // namespace

void Monitor::EndRecord(Job& job, Member& member) {
  if (internal::RecordState* r = FindRecord(job, member.record_id)) r->record.set_active(false);
  member.record_id = -1;
}

void Monitor::UpdateRecords(Job& job, const Scored& observed, int64_t start_ms, int64_t now_ms,
                            const Majorities& majorities) {
  // Members no longer slow end their records; the others are this window's
  // stragglers. A window without any gathers no signals.
  Scored slow;
  for (const auto& [id, member] : observed) {
    if (IsStraggler(member->straggler_class) || IsStraggler(member->speed_class)) {
      slow.emplace_back(id, member);
    } else {
      EndRecord(job, *member);
    }
  }
  if (slow.empty()) return;
  // The signals of each straggler's role, gathered once, value by value: a
  // straggler's peers are its role's members but itself.
  std::map<std::string, PeerSignals> by_role;
  for (const auto& [id, member] : slow) by_role.try_emplace(member->role);
  for (const auto& [id, member] : observed) {
    auto rit = by_role.find(member->role);
    if (rit == by_role.end()) continue;
    PeerSignals& peers = rit->second;
    ForEachSignal(*member, now_ms,
                  [&](std::string_view key, double value) { peers.Add(key, value); });
  }
  for (const auto& [id_ptr, member] : slow) {
    Member& m = *member;
    const std::string& id = *id_ptr;
    const SignalValues values = MemberSignals(m, now_ms);
    google::protobuf::Map<std::string, double> labels;
    const bool hardware =
        LabelDeterministic(m, majorities, &labels) &&
        (m.straggler_class == v1::DETERMINISTIC || m.speed_class == v1::DETERMINISTIC);
    // A compensated straggler's smaller batch leaves it waiting at every
    // barrier, which its step's communication time includes: a share of it
    // that stands out says it was compensated, not that its network is slow.
    std::map<std::string, double> stripped;
    const std::map<std::string, double>* own = &values;
    if (Compensated(m) && values.count("communication_share") > 0) {
      stripped = values;
      stripped.erase("communication_share");
      own = &stripped;
    }
    Attribution a = AttributeCause(*own, by_role[m.role], &values, hardware, config_.causes);
    a.evidence.insert(labels.begin(), labels.end());
    if (auto nit = nodes_.find(m.node); nit != nodes_.end() && nit->second.sample.time_unix_ms()) {
      a.evidence["node_sample_age_seconds"] =
          static_cast<double>(now_ms - nit->second.sample.time_unix_ms()) / 1000;
    }
    if (m.has_latency) {
      a.evidence["ps_latency_seconds"] = m.latency;
      a.evidence["ps_latency_median_seconds"] = m.latency_median;
      a.evidence["ps_latency_score"] = m.latency_score;
    }
    internal::RecordState* r = FindRecord(job, m.record_id);
    if (r != nullptr && r->record.node() != m.node) {
      EndRecord(job, m);  // moved to another node: a new episode
      r = nullptr;
    }
    if (r == nullptr) {
      while (static_cast<int>(job.records.size()) >= config_.max_records) job.records.pop_front();
      internal::RecordState& fresh = job.records.emplace_back();
      fresh.id = job.next_record_id++;
      v1::StragglerRecord& rec = fresh.record;
      rec.set_job(job.name);
      rec.set_namespace_(job.ns);
      rec.set_worker_id(id);
      rec.set_node(m.node);
      rec.set_role(m.role);
      rec.set_first_seen_unix_ms(start_ms);
      rec.set_detected_unix_ms(now_ms);
      m.record_id = fresh.id;
      r = &fresh;
    }
    AddWindow(*r, m, a.cause, std::move(a.evidence), job.StartOf(job.WindowOf(start_ms) + 1));
  }
}

int64_t Monitor::WindowsClosed(const std::string& job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? 0 : it->second.windows_closed + it->second.onsets;
}

v1::GetJobHealthResponse Monitor::Health(const std::string& job_name, int64_t now_ms) const {
  v1::GetJobHealthResponse response;
  response.set_job(job_name);
  response.set_time_unix_ms(now_ms);
  auto jit = jobs_.find(job_name);
  if (jit == jobs_.end()) return response;
  const Job& job = jit->second;
  response.set_window(job.windows_closed);
  response.set_window_ms(job.step_ms > 0 ? job.step_ms : job.first_ms);
  response.set_allowed_lateness_ms(config_.allowed_lateness_ms);
  response.set_job_slowdown(job.job_slowdown);
  for (const internal::RecordState& r : job.records) *response.add_stragglers() = r.record;
  for (const auto& [id, m] : job.members) {  // std::map: sorted by id
    if (!m.closed) continue;
    v1::WorkerHealth& h = *response.add_workers();
    h.set_job(job.name);
    h.set_namespace_(job.ns);
    h.set_worker_id(id);
    h.set_role(m.role);
    h.set_node(m.node);
    h.set_score(m.last.score);
    h.set_self_score(m.last.self_score);
    h.set_class_(m.straggler_class);
    h.set_since_unix_ms(m.since_ms);
    h.set_windows_slow(m.windows_slow);
    h.set_bpt_seconds(m.last.bpt_seconds);
    h.set_median_bpt_seconds(m.last.median_bpt_seconds);
    h.set_samples_per_second(m.last.samples_per_second);
    h.set_sample_score(m.last.sample_score);
    h.set_speed_class(m.speed_class);
    h.set_speed_windows_slow(m.speed_windows_slow);
    h.set_compensated(Compensated(m));
    if (IsStraggler(m.straggler_class) || h.compensated()) {
      const internal::RecordState* r = FindRecord(job, m.record_id);
      h.set_cause(r != nullptr ? r->record.cause() : v1::CAUSE_UNKNOWN);
      if (r != nullptr) *h.mutable_evidence() = r->record.evidence();
    }
    if (m.windows_missing > 0) (*h.mutable_evidence())["windows_missing"] = m.windows_missing;
  }
  return response;
}

std::vector<std::string> Monitor::Jobs() const {
  std::vector<std::string> names;
  names.reserve(jobs_.size());
  for (const auto& [name, job] : jobs_) names.push_back(name);
  return names;
}

void Monitor::Forget(const std::string& job) { jobs_.erase(job); }

std::vector<WindowPoint> Monitor::History(const std::string& job,
                                          const std::string& worker_id) const {
  auto jit = jobs_.find(job);
  if (jit == jobs_.end()) return {};
  auto mit = jit->second.members.find(worker_id);
  if (mit == jit->second.members.end()) return {};
  return {mit->second.history.begin(), mit->second.history.end()};
}

}  // namespace antdt::monitor
