// The local runner: the whole AntDT control plane with a process backend, so
// `antdt run job.yaml` runs a job on one machine. It starts the job's sharding
// service, one agent per emulated node, the Monitor (in process), the
// parameter servers and the workers; it plays the straggler scenario by
// rewriting each node's speed file; it runs the Controller's policy every half
// window and executes its plans (ADJUST_BS through the agents, KILL_RESTART by
// killing and respawning a worker on a spare node). The workers run the
// built-in demo trainer, or the command of the manifest's worker template
// (worker_command.h). A cpu-quota slowdown caps its node's workers through a
// cgroup (cgroup.h). At the end it checks the workers' journals for
// exactly-once and writes a report.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "antdt/v1/monitor.pb.h"
#include "api/manifest/manifest.h"
#include "api/vocab/vocab.h"
#include "core/loop/control_loop.h"
#include "core/policy/policy.h"
#include "workload/demo/journal.h"

namespace antdt::local {

struct RunOptions {
  std::string bin_dir;                           // where the AntDT binaries are
  std::string work_dir;                          // per-run state, logs, journals
  std::string manifest_dir;                      // a worker command's working directory
  std::optional<vocab::Policy> policy_override;  // set: run under this policy instead
  std::optional<vocab::Mode> mode_override;      // set: instead of spec.stragglerPolicy.mode
  bool no_slowdown = false;                      // drop the scenario's slowdowns (the ideal run)
  // The benchmark's baseline: policy none, ANTDT_MODE=plain (the trainer reads
  // with torch's DistributedSampler and journals nothing: no exactly-once
  // check). Only for a worker command (PlainAllowed).
  bool plain = false;
  int64_t timeout_ms = 900'000;
  // Every process of the job serves /metrics on 127.0.0.1 (port 0, the address
  // in its ready file), listed for Prometheus's file-based discovery in
  // <work_dir>/prometheus/targets.json; with `prometheus`, Debian's prometheus
  // is started on them too (the URL in an event).
  bool prometheus = false;
  std::function<void(const std::string&)> on_status;  // progress line, ~4 per second
  std::function<void(const std::string&)> on_event;   // one line per event
  const std::atomic<bool>* interrupted = nullptr;     // set by a signal handler: stop everything
};

// The cause and the decision's evidence in a few words, for a line beside the
// action: "cause CPU_CONTENTION, score 2.55, 1 slow window, saves ~3.4 s";
// empty when there is neither a cause nor a saving (the sentence has the score).
std::string EvidenceText(const policy::Decision& action);
// "8.6 s KILL_RESTART worker-5: <the decision's sentence>".
std::string ActionLine(const policy::Decision& action);
// An action's key=value line in the report: policy::Describe, or what a
// record that no policy decided carries (a parameter server restored).
std::string Description(const policy::Decision& action);

// The rule of a record no policy decided: a parameter server that exited,
// restored from its checkpoint (evidence restored_step, seconds).
inline constexpr char kPsRestoreRule[] = "ps-restore";

struct ThroughputPoint {
  double at_seconds = 0;
  std::string worker;
  double samples_per_second = 0;
  double score = 0;
  v1::StragglerClass straggler_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
  v1::Cause cause = v1::CAUSE_UNSPECIFIED;  // the Monitor's, with the class
  std::string role = "worker";              // or "ps": only workers have a throughput
  double sample_score = 0;                  // per-sample seconds over the median; 0: none
  v1::StragglerClass speed_class = v1::STRAGGLER_CLASS_UNSPECIFIED;
  bool compensated = false;  // slow per sample, not by BPT: its smaller batch compensates
};

struct RunResult {
  std::string job;
  std::string policy;  // its name, "no-slowdown" for the ideal run, "plain" for the baseline
  double jct_seconds = 0;
  int64_t records_committed = 0;
  // Leases the sharding service ended before their shard's end (guided
  // leasing at an epoch's tail, or a cut step's records given back): its
  // GetProgress at the end; -1 when there was none (plain).
  int64_t leases_shortened = -1;
  bool journals_checked = true;  // false: plain, `verification` is empty
  demo::Verification verification;
  // Carried out, each with the Monitor's cause for its subject then; a
  // parameter server restored from its checkpoint too (rule ps-restore).
  std::vector<policy::Decision> actions;
  vocab::Mode mode = vocab::Mode::kAct;
  // Mode Recommend: one per distinct decision (action, member, rule), in order.
  // Mode Recommend: each decision recommended, not carried out, once (its
  // first time, what it would have saved and cost then, how often decided).
  std::vector<loop::Recommendation> recommendations;
  std::vector<ThroughputPoint> timeline;
  // From the first parameter server, or, in a job without, worker-0's loss
  // log (loss_log.h), whose whole curve is kept: (seconds since the job
  // started, loss).
  double first_loss = -1;
  double final_loss = -1;
  // The final model on held-out data, when the trainer reports it (-1: not).
  double held_out_log_loss = -1;
  double held_out_accuracy = -1;
  int64_t steps = 0;
  std::vector<std::pair<double, double>> loss_curve;
  // The Controller's estimates (control/time_ledger.h): job seconds its
  // actions saved against no action (negative: they cost time), and job
  // seconds lost to stragglers against every worker at the median pace.
  double estimated_saved_seconds = 0;
  double estimated_lost_seconds = 0;
  // The same job under policy none, when a benchmark ran it (-1: not run).
  double none_jct_seconds = -1;
  // The Monitor's straggler records at the end (GetJobHealthResponse's
  // stragglers): the one account of each straggler that the terminal and the
  // report render; their times are Unix ms, the job started at start_unix_ms.
  std::vector<v1::StragglerRecord> stragglers;
  int64_t start_unix_ms = 0;
};

// Seconds since the job started of a record's Unix ms time.
double JobSeconds(const RunResult& result, int64_t unix_ms);
// The cause of `worker`'s straggler record that covers `at_seconds` (the one
// truth the actions show too); CAUSE_UNSPECIFIED when no record does.
v1::Cause RecordCauseAt(const RunResult& result, const std::string& worker, double at_seconds);
// "worker-5 on node-5 PERSISTENT: slow from 3.0 s, detected at 3.6 s, to the
// end; up to 4.00x slower per sample (batch time score up to 4.05),
// compensated by a smaller batch; cause cpu_contention (cpu_wait_share 0.55,
// peers 0.10)".
std::string StragglerLine(const RunResult& result, const v1::StragglerRecord& record);

// OK when `job` can run plain; otherwise why not (the demo trainer has no
// plain mode). The caller prefixes its flag.
absl::Status PlainAllowed(const manifest::Job& job);

absl::StatusOr<RunResult> RunJob(const manifest::Job& job, const manifest::Scenario& scenario,
                                 const RunOptions& options);

// report.json and a self-contained report.html (SVG timeline of each worker's
// throughput with the actions marked) into `dir`.
absl::Status WriteReport(const RunResult& result, const std::string& dir);
std::string ReportText(const RunResult& result);
// The exactly-once check's summary, or why there is none.
std::string VerificationText(const RunResult& result);

}  // namespace antdt::local
