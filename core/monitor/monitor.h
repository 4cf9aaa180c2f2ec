// The Monitor's pure core: per-worker and per-parameter-server windows of batch
// processing time (BPT), peer-relative straggler and leader classification with
// hysteresis, and cause attribution from node samples.
//
// Inputs are the agents' messages (StepReport, NodeSample, node labels); time
// comes only from them and from the `now_ms` arguments. No I/O, no threads, no
// clock reads. MonitorHub (services/monitor) wraps one behind a mutex.
//
// Windows. Window n covers [n * window_ms, (n + 1) * window_ms) of Unix time,
// by the report's time_unix_ms. With steps_per_window > 0 (windows in steps)
// window_ms is only the length of a job's first windows: when the first window
// with worker reports closes, the job's windows become steps_per_window times
// the workers' median batch processing time in it (at least min_window_ms and
// the lateness over max_open_windows - 2, at most max_window_ms), from the
// first window after every one already open on; the windows before keep their
// bounds. So a straggler is seen within about steps_per_window steps plus the
// lateness, at any step length. Health's window_ms says the length in force. CloseWindows(now)
// closes, per job, every window whose end + allowed_lateness_ms <= now, in order, even when it got
// no report. A report for a closed window is dropped (counted late); one more than max_open_windows
// ahead of the oldest open window is dropped (counted early).
//
// Scoring, per job and role ("worker" or "" -> "worker", "ps", any other role is
// its own peer group), over the members with >= min_reports_per_window reports:
//   bpt        = sum(bpt_seconds) / count
//   score      = bpt / median(bpt of the role's members in this window)  (self
//                included, so the median member scores 1)
//   self_score = bpt / median(the member's first warmup_windows window BPTs)
// Parameter servers are scored from their own reports (role "ps") and from the
// ps_latency_seconds the workers report: per server, the median over workers of
// each worker's mean latency, divided by the median of that over servers. A
// server's score is the larger of the two when both exist. A role with fewer
// than min_peers members in a window is scored but not classified (HEALTHY).
//
// Per-sample speed: sample_seconds = sum(bpt_seconds) / sum(samples), and
// sample_score = sample_seconds / median(sample_seconds of the role's members
// with samples). BPT compares batches, which ADJUST_BS and AntDT-DD make
// unequal on purpose; per-sample speed compares machines. It is classified as
// the score is (below, same thresholds, its own hysteresis and slow-window
// count) into WorkerHealth.speed_class; a member slow per sample but not by
// BPT is `compensated` (its smaller batch hides it) and still gets a cause.
// The policies act on `class`; speed_class is what a user is shown beside it.
//
// Classification, per member, from its window score:
//   slow       score >= straggler_threshold, or, while already a straggler,
//              score >= recover_threshold (hysteresis: no flapping in between).
//   DETERMINISTIC  slow, and either (a) slow in each of its first warmup_windows
//              windows with a coefficient of variation of the score < deterministic_cv
//              (decided when the warm-up ends, so its first window reads TRANSIENT;
//              forgotten once it recovers), or (b) its node is labelled
//              antdt.io/device-speed < 1 or has an antdt.io/hardware value that
//              differs from the most common one among its role's nodes.
//   TRANSIENT  slow for fewer than persistent_windows (K) consecutive windows.
//   PERSISTENT slow from the K-th consecutive slow window on.
//   LEADER     not slow and score < leader_threshold (left at >= leader_exit_threshold).
//   HEALTHY    otherwise.
// since_unix_ms is the start of the window in which the current class began;
// windows_slow counts consecutive slow windows.
// A window with no report leaves the class and windows_slow as they were
// (evidence "windows_missing" counts them); after forget_after_windows such
// windows the member is forgotten, and a job with no member left is dropped.
//
// Job slowdown: the worker median exceeds job_slowdown_ratio x the job's
// baseline median (the median of its first warmup_windows worker medians), and
// so does the workers' 10th percentile: (nearly) every worker slowed. A slow
// majority is not a slow job; its fast minority score as leaders.
// Restarts: a member's first window after it moved to another node or started
// another process (a new pid) is scored but not classified.
// Scores are relative to the current median, so a slowdown shared by everyone
// (scores near 1) flags nobody; a worker slow relative to its slowed peers is
// still a straggler.
//
// Cause attribution, when a window closes, for each member slow in it (by
// BPT or per sample): its signals (its node's latest NodeSample, ignored when
// older than node_sample_max_age_ms, and its own step split in the window)
// against its peers' in the same window; see causes.h for the signals, their
// order and the peer rule. Each signal's value is in the evidence, whichever
// fired, with its peers' median, plus node_sample_age_seconds, and for
// parameter servers ps_latency_seconds, ps_latency_median_seconds and
// ps_latency_score when workers reported them.
//
// Straggler records (GetJobHealthResponse.stragglers): one per episode of a
// member, from the first window it is slow (by BPT, or per sample while
// compensated) to the last; a window in which it is neither ends it, and so
// does a move to another node (a restarted worker starts a new one). Its cause
// is the one named in most of its slow windows (the first named wins a tie),
// CAUSE_UNKNOWN while none was; WorkerHealth's cause and evidence are its open
// record's. At most max_records per job are kept, the oldest dropped first.
//
// Memory is bounded: history_windows points per member, members forgotten as
// above, max_open_windows pending windows per job, one sample per node (dropped
// after 10 x node_sample_max_age_ms without a newer one).
//
// Thread-compatible: const methods may run concurrently; anything else needs
// external synchronization (MonitorHub holds one mutex).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "antdt/v1/monitor.pb.h"

namespace antdt::monitor {

// Thresholds of cause attribution; field names match the evidence keys.
struct CauseThresholds {
  double cgroup_throttled_fraction = 0.2;
  double cpu_some_avg10 = 20;  // percent
  double cpu_utilization = 0.95;
  double memory_some_avg10 = 10;  // percent
  double memory_available_fraction = 0.05;
  double io_some_avg10 = 20;          // percent
  double step_share = 0.5;            // communication or data wait share of BPT that dominates
  double cpu_wait_share = 0.2;        // run-queue wait share of the training thread's step time
  double neighbour_cpu_cores = 0.25;  // cores the node's processes outside the job used
  // A signal names its cause only when it is also this many times its
  // peers' median (causes.h).
  double peer_ratio = 1.5;
};

// Defaults, and why:
// - straggler_threshold 1.3 and leader_threshold 0.8: jitter bounded by +-j per
//   window keeps every score within [(1 - j) / (1 + j), (1 + j) / (1 - j)], which
//   is [0.818, 1.222] at +-10%, so +-10% noise cannot flag anyone whatever the
//   draw (stragglers stay impossible up to +-13%). Measured over 32 workers x
//   1,000 windows with one report per window: scores 0.865..1.155; the first
//   false positives appear at +-20% (7 of 1,000 windows). monitor_test prints these.
// - recover_threshold 1.15: inside a healthy worker's noise band, so a straggler
//   wandering between 1.15 and 1.3 stays flagged instead of flapping (1.35x +-10%
//   over 200 windows: 2 class changes, 117 without hysteresis).
// - persistent_windows 3: the 3-5 windows usually suggested; a steady straggler is
//   PERSISTENT 3 windows (30 s) after it starts, while 1-2 window blips stay TRANSIENT.
// - warmup_windows 2 and deterministic_cv 0.1: a CV needs two windows, and a stable
//   ratio means a CV under ~10%.
// - job_slowdown_ratio 1.3: the same bar as for one worker.
// - min_peers 3: with two members the median is their mean, and both would read
//   as a straggler and a leader.
struct MonitorConfig {
  int64_t window_ms = 10'000;
  // 0: windows of window_ms. > 0: windows of this many steps (see the file
  // comment), window_ms being the first windows' length.
  int steps_per_window = 0;
  int64_t min_window_ms = 100;
  int64_t max_window_ms = 600'000;
  // With windows in steps: one step of a member this many times slower than
  // its role's last window, by batch time and per sample (and at least
  // straggler_threshold), flags it TRANSIENT at once (an onset; see above).
  double onset_threshold = 1.5;
  int64_t allowed_lateness_ms = 2'000;  // a window closes this long after its end
  double straggler_threshold = 1.3;     // window BPT / peer median that makes a member slow
  double recover_threshold = 1.15;      // hysteresis: a straggler leaves below this
  double leader_threshold = 0.8;        // a member becomes LEADER below this
  double leader_exit_threshold = 0.9;   // and leaves LEADER at or above this
  int persistent_windows = 3;           // K
  int warmup_windows = 2;               // windows used to decide DETERMINISTIC and baselines
  double deterministic_cv = 0.1;
  double job_slowdown_ratio = 1.3;
  int min_reports_per_window = 1;  // fewer reports in a window count as missing
  int min_peers = 3;               // fewer members of a role in a window: no classification
  int history_windows = 64;        // points kept per member
  int forget_after_windows = 30;   // consecutive windows without a report
  int max_open_windows = 8;        // pending windows per job
  int64_t node_sample_max_age_ms = 60'000;
  int max_records = 256;  // straggler records kept per job
  CauseThresholds causes;

  // Names the bad field: "monitor.window: must be > 0".
  absl::Status Validate() const;
};

// One closed window of one member, for trends and tests.
struct WindowPoint {
  int64_t window_start_ms = 0;
  double bpt_seconds = 0;
  double median_bpt_seconds = 0;
  double score = 0;
  double self_score = 0;
  double samples_per_second = 0;
  v1::StragglerClass straggler_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
  double sample_score = 0;  // per-sample seconds / the role's median; 0: no samples
  v1::StragglerClass speed_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
};

// Counters over the life of the Monitor, for metrics.
struct MonitorStats {
  int64_t step_reports = 0;   // accepted
  int64_t node_samples = 0;   // accepted
  int64_t rejected = 0;       // malformed (no job/worker/node, bpt <= 0, time <= 0)
  int64_t late_reports = 0;   // for a window already closed
  int64_t early_reports = 0;  // beyond max_open_windows
  int64_t windows_closed = 0;
  int64_t members_forgotten = 0;
  int64_t onsets = 0;  // members flagged by one step, between windows
};

// State behind Monitor; not part of its API.
namespace internal {

struct Accum {
  std::string role;
  std::string node;
  int32_t pid = 0;  // the latest report's; 0 when it named none
  int64_t count = 0;
  double bpt = 0;
  double samples = 0;
  double data_wait = 0;
  double communication = 0;
  double cpu_wait = 0;
  std::map<std::string, std::pair<double, int64_t>> ps_latency;  // server -> (sum, count)
};

struct Member {
  std::string role;
  std::string node;
  int32_t pid = 0;
  // Its first window since it moved or its process changed (a restart):
  // scored, not classified (a fresh process's first steps are slow for
  // reasons of its own: start-up, cold caches).
  bool settling = false;
  // The time of the report that flagged it (an onset), until a window that
  // holds it closes: older windows closing after it do not undo it.
  int64_t onset_ms = -1;
  bool closed = false;  // has at least one scored window
  WindowPoint last;
  double data_wait_share = 0;
  double communication_share = 0;
  double cpu_wait_share = 0;
  bool has_split = false;    // the last window had its own reports (step split known)
  bool has_latency = false;  // parameter server seen through workers' latency
  double latency = 0;
  double latency_median = 0;
  double latency_score = 0;
  v1::StragglerClass straggler_class = v1::HEALTHY;
  int64_t since_ms = 0;
  int windows_slow = 0;
  // The class from the per-sample score (see ClassifySpeed).
  v1::StragglerClass speed_class = v1::HEALTHY;
  int speed_windows_slow = 0;
  bool speed_deterministic = false;
  int windows_missing = 0;
  std::vector<double> warmup_bpt;
  std::vector<double> warmup_scores;
  double baseline_bpt = 0;
  bool profile_deterministic = false;
  std::deque<WindowPoint> history;
  int64_t record_id = -1;  // its open straggler record; -1 when none
};

// A straggler record and how often each cause was named in it.
struct RecordState {
  int64_t id = 0;
  v1::StragglerRecord record;
  std::vector<std::pair<v1::Cause, int>> named;                 // in the order first named
  std::map<v1::Cause, std::map<std::string, double>> evidence;  // latest per cause
  std::map<std::string, double> latest_evidence;
};

// A role as its last closed window saw it (for onsets).
struct RoleView {
  double median_bpt = 0;
  double median_sample_seconds = 0;
  int members = 0;  // with their own reports
};

struct Job {
  Job() = default;
  // Moved (its maps' nodes, and so member_index, stay put), never copied.
  Job(Job&&) = default;
  Job& operator=(Job&&) = default;
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  std::string ns, name;  // as its reports say (ns "" when they name none)
  std::map<std::string, RoleView> roles;
  int64_t onsets = 0;
  // Monitor::HardwareMajorities's last answer (role -> most common hardware),
  // for these labels and this placement of the members.
  std::map<std::string, std::string> majorities;
  uint64_t majorities_labels = std::numeric_limits<uint64_t>::max();
  size_t majorities_placement = 0;
  int64_t next_window = 0;  // oldest window not closed
  // Window bounds: index i starts at i x first_ms up to switch_index, and at
  // switch_index x first_ms + (i - switch_index) x step_ms from there on.
  int64_t first_ms = 0;
  int64_t step_ms = 0;  // 0: not known yet (or windows in time)
  int64_t switch_index = std::numeric_limits<int64_t>::max();
  int64_t WindowOf(int64_t t) const;
  int64_t StartOf(int64_t window) const;
  bool closed_any = false;
  int64_t windows_closed = 0;
  // window -> member id -> sums; a B-tree: 10,000 members make 10,000
  // inserts a window, walked in id order at its close.
  std::map<int64_t, absl::btree_map<std::string, Accum>> pending;
  std::map<std::string, Member> members;
  // `members` hashed by id (views of its own keys), for the per-step onset
  // check: rebuilt as each window closes, the only time members come and go.
  absl::flat_hash_map<std::string_view, Member*> member_index;
  std::vector<double> warmup_medians;
  double baseline_median = 0;
  bool job_slowdown = false;
  std::deque<RecordState> records;  // oldest first, ids consecutive
  int64_t next_record_id = 0;
};

}  // namespace internal

class Monitor {
 public:
  static absl::StatusOr<Monitor> Create(MonitorConfig config);

  void Ingest(const v1::StepReport& report);
  // Keeps the newest sample per node; non-empty labels in it replace the node's labels.
  void Ingest(const v1::NodeSample& sample);
  void SetNodeLabels(const std::string& node, std::map<std::string, std::string> labels);

  // Closes every elapsed window of every job (see the file comment).
  void CloseWindows(int64_t now_ms);

  // Jobs are keyed by JobKey(report.namespace, report.job): "namespace/name",
  // or the bare name from workers that report no namespace; Health, Forget
  // and History take that key; each member's health carries the job's name
  // and namespace apart.
  // Members with at least one closed window, sorted by worker id. An unknown
  // job answers an empty response.
  v1::GetJobHealthResponse Health(const std::string& job, int64_t now_ms) const;
  // Changes of `job`'s view so far: windows closed (Health's `window`) and
  // onsets; 0 for an unknown job.
  int64_t WindowsClosed(const std::string& job) const;
  std::vector<std::string> Jobs() const;  // sorted
  // Drops everything about `job` (it ended, or was deleted): its members,
  // windows and history; a later report starts it again.
  void Forget(const std::string& job);
  // The member's last history_windows windows with a report, oldest first.
  std::vector<WindowPoint> History(const std::string& job, const std::string& worker_id) const;
  const MonitorStats& Stats() const { return stats_; }
  const MonitorConfig& Config() const { return config_; }

 private:
  using Job = internal::Job;
  using Member = internal::Member;

  explicit Monitor(MonitorConfig config) : config_(std::move(config)) {}
  using Majorities = std::map<std::string, std::string>;  // role -> most common hardware

  void CloseWindow(Job& job, int64_t window, int64_t now_ms);
  // Flags a member TRANSIENT from one step report (see Onsets above).
  // `bpt` and `samples` are the step's cost as Ingest counted it (a cut step:
  // its whole batch).
  void Onset(Job& job, const v1::StepReport& report, const std::string& role, double bpt,
             double samples);
  // Names the cause of every member slow in the window just closed and
  // updates its straggler record; ends the records of members no longer slow.
  // `observed`: the members scored in the window, by id, in id order.
  using Scored = std::vector<std::pair<const std::string*, Member*>>;
  void UpdateRecords(Job& job, const Scored& observed, int64_t start_ms, int64_t now_ms,
                     const Majorities& majorities);
  // Marks the member's open record ended.
  static void EndRecord(Job& job, Member& member);
  // The member's signal values in the window just closed.
  std::map<std::string, double> MemberSignals(const Member& member, int64_t now_ms) const;
  // The same values handed to `f` one by one, in no map (every member of a
  // straggler's role, each window).
  void ForEachSignal(const Member& member, int64_t now_ms,
                     absl::FunctionRef<void(std::string_view, double)> f) const;
  // The member's class for a window with `score` (`classify` false: too few
  // peers, so neither slow nor a leader); counts its consecutive slow windows.
  v1::StragglerClass Classify(Member& member, double score, bool classify,
                              const Majorities& majorities) const;
  // The member's speed class for a window with per-sample score `sample_score`
  // (0: no samples, class kept); same thresholds as Classify.
  void ClassifySpeed(Member& member, double sample_score, bool classify,
                     const Majorities& majorities) const;
  // Cached in the job until the labels or where its members run change.
  Majorities HardwareMajorities(Job& job) const;
  Majorities ComputeMajorities(const Job& job) const;
  // Whether the member's node labels mark it as a slower device; records the
  // label values checked in `evidence` when given.
  bool LabelDeterministic(const Member& member, const Majorities& majorities,
                          google::protobuf::Map<std::string, double>* evidence) const;

  // What the Monitor knows of one node: its newest sample and its labels.
  struct NodeSeen {
    v1::NodeSample sample;  // newest; time_unix_ms == 0 when none yet
    std::map<std::string, std::string> labels;
  };

  MonitorConfig config_;
  uint64_t labels_version_ = 0;  // advanced whenever a node's labels change
  std::map<std::string, Job> jobs_;
  // Hashed: looked up for every member of every window (10,000 at scale);
  // never walked in order.
  absl::node_hash_map<std::string, NodeSeen> nodes_;
  MonitorStats stats_;
};

}  // namespace antdt::monitor
