// The core of the demo's synchronous parameter server: one slice of the
// model's parameters and the aggregation of each step's gradients. No gRPC;
// antdt-ps (ps_main.cc) only translates messages.
//
// A step completes with the first `workers - backup` gradients pushed for it,
// or with what it has once `step_timeout` has passed since its first gradient
// (a killed worker never deadlocks the job). The sample-weighted mean gradient
// (sum of gradients / sum of samples) is applied. A gradient for another step
// (older: its step completed without it) is dropped and answered with the
// current parameters; so is a second one from the same worker in a step.
//
// Thread-safe: Push blocks its caller until the step completes.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace antdt::trainer {

// The most workers a server takes (--workers, Resize).
inline constexpr int kMaxWorkers = 100'000;

struct PsOptions {
  int64_t features = 0;  // the size of this server's slice
  int workers = 1;       // world size
  int backup = 0;        // a step needs workers - backup gradients
  double learning_rate = 0.5;
  std::chrono::milliseconds step_timeout{5000};
};

struct PushResult {
  int64_t step = 0;  // the step the parameters are for
  std::vector<float> parameters;
  double mean_loss = 0;       // of the last finished step
  int32_t contributions = 0;  // gradients averaged in the last finished step
  bool accepted = false;      // this gradient was averaged in
  bool completed = false;     // this call finished the step
};

struct PsStats {
  int64_t step = 0;
  double mean_loss = 0;        // of the last finished step
  double first_mean_loss = 0;  // of the first finished step
  int64_t samples = 0;         // averaged in, over all steps
  int64_t dropped = 0;         // gradients not averaged in
  int32_t pending = 0;         // gradients waiting in the current step
};

class ParameterShard {
 public:
  // Parameters start at zero.
  static absl::StatusOr<PsOptions> Validate(PsOptions options);
  explicit ParameterShard(PsOptions options);

  // `gradient` and `loss_sum` are summed over `samples` examples.
  absl::StatusOr<PushResult> Push(const std::string& worker, int64_t step, int64_t samples,
                                  absl::Span<const float> gradient, double loss_sum);
  // The current step and parameters.
  PushResult Pull() const;
  // The worker left: steps stop waiting for it (a step it was the last one
  // missing from completes now). Returns how many gradients a step now needs.
  int Leave(const std::string& worker);
  // The job was scaled to `workers` (its operator says so): `removed` are no
  // longer members (steps neither wait for them nor count them as left);
  // `added` are members from their first push (steps do not wait for them
  // before). A step the change leaves complete completes now. Returns how
  // many gradients a step now needs; an error, changing nothing, when
  // `workers` is not above the backup count.
  absl::StatusOr<int> Resize(int workers, absl::Span<const std::string> removed,
                             absl::Span<const std::string> added);
  PsStats Stats() const;
  // Wakes every blocked Push, which then answers the current parameters.
  void Shutdown();

 private:
  int needed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::max(1, workers_ - options_.backup - static_cast<int>(departed_.size()));
  }
  void CompleteStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PushResult Current(bool accepted, bool completed) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PsOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int workers_ ABSL_GUARDED_BY(mu_);  // world size: options_.workers, then Resize's
  std::vector<float> params_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  // The step in progress.
  std::vector<double> grad_sum_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> contributors_ ABSL_GUARDED_BY(mu_);
  int64_t step_samples_ ABSL_GUARDED_BY(mu_) = 0;
  double step_loss_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point first_at_ ABSL_GUARDED_BY(mu_);
  // Finished steps.
  double mean_loss_ ABSL_GUARDED_BY(mu_) = 0;
  double first_mean_loss_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t contributions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> departed_ ABSL_GUARDED_BY(mu_);  // left; steps do not wait for them
};

}  // namespace antdt::trainer
