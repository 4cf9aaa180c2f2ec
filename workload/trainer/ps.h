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
// The step deadline (options.step_deadline > 0): once half the gradients a
// step needs have arrived with samples (an idle worker's empty push at an
// epoch's end does not count), the step's deadline is its start (the last step's
// completion) plus step_deadline x the time that half took. A worker still
// training asks DeadlinePassed between micro-batches; past the deadline it
// pushes the gradient of what it has trained and takes the rest of its batch
// into its next step (worker_main.cc), so a straggler holds its peers up by
// step_deadline x the median time at most. With step_deadline_floor, the
// multiple is fitted to the steps: between the floor and step_deadline, by the
// spread of the times the last steps' gradients arrived in (DeadlineFit).
//
// Checkpoints: with a hook set (SetCheckpointHook), the completion of every
// step s that is a multiple of `every_steps` (or the step ScheduleCheckpoint
// names) hands the hook the state *before* that step's gradients are applied
// (s steps applied), and no push of step s is answered until the hook
// returns. So a hook that also checkpoints the sharding service (the first
// server's does) records exactly the records whose gradients are in that
// state: a worker commits a batch only after every server answered its step,
// and it pushes step s only after committing step s-1.
//
// Moving (Freeze): at the next step boundary (no gradient of a step pending)
// the server stops; every later push is answered with `moved_to`, and the
// state goes to the server taking over, which Loads it. A server started to
// take over (AwaitState) holds every push and pull until it has its state.
//
// Thread-safe: Push blocks its caller until the step completes.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/step_deadline.h"

namespace antdt::trainer {

// The most workers a server takes (--workers, Resize).
inline constexpr int kMaxWorkers = 100'000;

struct PsOptions {
  int64_t features = 0;  // the size of this server's slice
  int workers = 1;       // world size
  int backup = 0;        // a step needs workers - backup gradients
  double learning_rate = 0.5;
  std::chrono::milliseconds step_timeout{5000};
  double step_deadline = 0;  // 0: none; else > 1, a multiple of the median time (above)
  // > 0: the deadline fitted to the steps (common/step_deadline.h), between
  // this and step_deadline by the spread of the times the gradients arrived in;
  // 0: step_deadline always.
  double step_deadline_floor = 0;
};

struct PushResult {
  int64_t step = 0;  // the step the parameters are for
  std::vector<float> parameters;
  double mean_loss = 0;       // of the last finished step
  int32_t contributions = 0;  // gradients averaged in the last finished step
  bool accepted = false;      // this gradient was averaged in
  bool completed = false;     // this call finished the step
  std::string moved_to;       // set: this server moved there; nothing was done
  int64_t generation = 0;     // Loads so far
  // With a step deadline: how long the first half of the last finished step's
  // gradients took from its start (0: unknown).
  double half_seconds = 0;
};

// A server's whole state (a checkpoint, or what a move hands over). The
// optimizer is plain SGD: no state beyond the parameters and the step.
struct PsState {
  int64_t step = 0;  // steps applied to `parameters`
  std::vector<float> parameters;
  int64_t samples = 0;
  double mean_loss = 0;
  double first_mean_loss = 0;
};

struct PsStats {
  int64_t step = 0;
  double mean_loss = 0;          // of the last finished step
  double first_mean_loss = 0;    // of the first finished step
  int64_t samples = 0;           // averaged in, over all steps
  int64_t dropped = 0;           // gradients not averaged in
  int32_t pending = 0;           // gradients waiting in the current step
  int64_t generation = 0;        // Loads so far
  int64_t loaded_step = 0;       // the step of the last Load
  int64_t deadlines_passed = 0;  // steps whose deadline DeadlinePassed answered true
  double deadline_factor = 0;    // the deadline's multiple of the half time now (0: none)
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
  // Whether `step` is the step in progress and its deadline (above) has
  // passed: a worker still training it stops and pushes what it has.
  bool DeadlinePassed(int64_t step);
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

  // Checkpoints every `every_steps` steps (0: only scheduled ones) through
  // `hook`, called by the pusher that completed the step, outside the lock.
  // Set before the first push.
  void SetCheckpointHook(int64_t every_steps, std::function<void(const PsState&)> hook);
  // The next checkpoint at `step` (when later than the current step);
  // returns the step it will be at.
  int64_t ScheduleCheckpoint(int64_t step);
  // Stops at the next step boundary and returns the state then; later pushes
  // answer `moved_to`. DeadlineExceeded, nothing changed, when no boundary
  // comes within `timeout`; FailedPrecondition when already moved.
  absl::StatusOr<PsState> Freeze(const std::string& moved_to, std::chrono::milliseconds timeout);
  // Holds every push and pull until Load (a server taking over).
  void AwaitState();
  // Takes `state` (its size must be this server's slice): a step in progress
  // is dropped, blocked pushes answer the new state, a frozen server serves again.
  absl::Status Load(const PsState& state);
  PsState State() const;

 private:
  int needed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::max(1, workers_ - options_.backup - static_cast<int>(departed_.size()));
  }
  void CompleteStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NewStep() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);  // its start, no deadline yet
  // Runs the checkpoint CompleteStep captured, if any, with `lock` released,
  // holding back the answers of the step until it is written.
  void WriteCapturedCheckpoint(std::unique_lock<std::mutex>& lock)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PsState StateLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PushResult Current(bool accepted, bool completed) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PsOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int workers_ ABSL_GUARDED_BY(mu_);  // world size: options_.workers, then Resize's
  std::vector<float> params_ ABSL_GUARDED_BY(mu_);
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  // The step in progress.
  std::vector<double> grad_sum_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> contributors_ ABSL_GUARDED_BY(mu_);
  int64_t step_samples_ ABSL_GUARDED_BY(mu_) = 0;
  double step_loss_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point first_at_ ABSL_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point started_at_ ABSL_GUARDED_BY(mu_);  // the step's start
  // How long the first half of the step's gradients took, once they are in:
  // the deadline is started_at_ + step_deadline x that.
  std::optional<std::chrono::steady_clock::duration> half_ ABSL_GUARDED_BY(mu_);
  bool deadline_told_ ABSL_GUARDED_BY(mu_) = false;  // DeadlinePassed said so this step
  int trained_ ABSL_GUARDED_BY(mu_) = 0;             // gradients of this step with samples
  int64_t deadlines_passed_ ABSL_GUARDED_BY(mu_) = 0;
  double last_half_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // half_ of the last finished step
  // The step's arrivals with samples, seconds from its start: the fit's input.
  std::vector<double> arrivals_ ABSL_GUARDED_BY(mu_);
  std::optional<DeadlineFit> fit_ ABSL_GUARDED_BY(mu_);  // step_deadline_floor > 0
  // Finished steps.
  double mean_loss_ ABSL_GUARDED_BY(mu_) = 0;
  double first_mean_loss_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t contributions_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t samples_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::set<std::string> departed_ ABSL_GUARDED_BY(mu_);  // left; steps do not wait for them
  // Checkpoints and moves.
  int64_t checkpoint_every_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t checkpoint_at_ ABSL_GUARDED_BY(mu_) = -1;  // a scheduled one
  std::function<void(const PsState&)> checkpoint_hook_;
  std::optional<PsState> captured_ ABSL_GUARDED_BY(mu_);  // to write, by the completer
  bool writing_ ABSL_GUARDED_BY(mu_) = false;             // answers of the last step held back
  bool freezing_ ABSL_GUARDED_BY(mu_) = false;
  std::string moved_to_ ABSL_GUARDED_BY(mu_);  // set: frozen
  bool awaiting_state_ ABSL_GUARDED_BY(mu_) = false;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // Loads so far: a blocked push gives up
  int64_t loaded_step_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace antdt::trainer
