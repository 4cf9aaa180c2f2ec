// Reports each training step to the node's agent and picks up the directives
// the Controller sent for this worker (e.g. a new local batch size).
//
//   StepReporter reporter({.agent_address = getenv("ANTDT_AGENT_ADDRESS"),
//                          .job = "ctr", .worker_id = "worker-3"});
//   reporter.Report({.step = s, .samples = 512, .bpt_seconds = dt});
//   if (auto d = reporter.TakeDirective()) ApplyBatchSize(d->adjust_batch());
//
// A report never stalls training for long: it has a short deadline and a
// failure is counted, not raised. Not thread-safe: one per worker thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "antdt/v1/agent.grpc.pb.h"

namespace antdt::client {

// The worker's pod UID, which the operator sets from the downward API.
inline constexpr char kEnvPodUid[] = "ANTDT_POD_UID";

struct StepReporterOptions {
  std::string agent_address;  // "unix:/path/agent.sock" or "127.0.0.1:PORT"
  std::string job;
  std::string namespace_;  // the job's Kubernetes namespace ("" unknown)
  std::string worker_id;
  std::string role = "worker";
  // The job's credential, sent with every report (the Monitor ingests a
  // job's reports only with it). Empty: $ANTDT_TOKEN, else $ANTDT_TOKEN_FILE.
  std::string token;
  int64_t timeout_ms = 200;
  // Steps are sent in batches, at most one call per interval (0: every
  // step). The Monitor works on windows of seconds, and one call a second
  // keeps the agent's cost per worker small.
  int64_t flush_interval_ms = 1000;
  size_t max_buffered_steps = 10'000;  // the oldest are dropped beyond this
};

struct StepTiming {
  int64_t step = 0;
  int64_t samples = 0;
  // The batch the step was to train, when its deadline cut it short
  // (StepReport.batch_samples); 0 otherwise.
  int64_t batch_samples = 0;
  // The worker's own processing time for the step (data, compute), without
  // the wait for slower peers at a synchronisation barrier: in synchronous
  // training that wait makes every worker's wall-clock step time the same.
  double bpt_seconds = 0;
  double data_wait_seconds = 0;
  double compute_seconds = 0;
  double communication_seconds = 0;
  // The step's wait for a CPU while runnable (StepReport.cpu_wait_seconds);
  // CpuWaitClock measures it.
  double cpu_wait_seconds = 0;
  std::map<std::string, double> ps_latency_seconds;
};

// The calling thread's run-queue wait so far (/proc/thread-self/schedstat's
// second field, nanoseconds), in seconds; 0 where the kernel has no
// schedstat. Read it at a step's start and end on the thread that does the
// step's work: the difference is StepTiming.cpu_wait_seconds.
double ThreadCpuWaitSeconds();

class StepReporter {
 public:
  explicit StepReporter(StepReporterOptions options);

  // Buffers the step and sends the buffer when the flush interval has passed;
  // the status is that of the send, OK when only buffered.
  absl::Status Report(const StepTiming& timing);
  // Sends what is buffered now (e.g. before the worker exits).
  absl::Status Flush();
  // A directive not yet taken, if any, the oldest first (the newest of each
  // kind is kept: a batch change and a parameter server's move both arrive);
  // taking it marks it applied.
  std::optional<v1::Directive> TakeDirective();

  ~StepReporter();
  int64_t failures() const { return failures_; }
  int64_t dropped() const { return dropped_; }
  int64_t applied_version() const { return applied_version_; }

 private:
  StepReporterOptions options_;
  std::string pod_uid_;  // $ANTDT_POD_UID
  std::unique_ptr<v1::Agent::Stub> stub_;
  int64_t applied_version_ = 0;
  // Not taken yet: the newest of each kind (Directive::action_case), taken
  // oldest first.
  std::map<int, v1::Directive> pending_;
  int64_t NewestKnown() const;
  int64_t failures_ = 0;
  int64_t dropped_ = 0;
  std::vector<v1::StepReport> buffer_;
  std::chrono::steady_clock::time_point last_flush_ = std::chrono::steady_clock::now();
};

}  // namespace antdt::client
