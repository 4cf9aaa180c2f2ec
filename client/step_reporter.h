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

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "antdt/v1/agent.grpc.pb.h"

namespace antdt::client {

struct StepReporterOptions {
  std::string agent_address;  // "unix:/path/agent.sock" or "127.0.0.1:PORT"
  std::string job;
  std::string worker_id;
  std::string role = "worker";
  int64_t timeout_ms = 200;
};

struct StepTiming {
  int64_t step = 0;
  int64_t samples = 0;
  double bpt_seconds = 0;
  double data_wait_seconds = 0;
  double compute_seconds = 0;
  double communication_seconds = 0;
  std::map<std::string, double> ps_latency_seconds;
};

class StepReporter {
 public:
  explicit StepReporter(StepReporterOptions options);

  absl::Status Report(const StepTiming& timing);
  // The newest directive not yet taken, if any; taking it marks it applied.
  std::optional<v1::Directive> TakeDirective();

  int64_t failures() const { return failures_; }
  int64_t applied_version() const { return applied_version_; }

 private:
  StepReporterOptions options_;
  std::unique_ptr<v1::Agent::Stub> stub_;
  int64_t applied_version_ = 0;
  std::optional<v1::Directive> pending_;
  int64_t failures_ = 0;
};

}  // namespace antdt::client
