#include "workload/trainer/ps.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace antdt::trainer {

absl::StatusOr<PsOptions> ParameterShard::Validate(PsOptions options) {
  if (options.features <= 0) return absl::InvalidArgumentError("features: must be > 0");
  if (options.workers <= 0) return absl::InvalidArgumentError("workers: must be > 0");
  if (options.backup < 0 || options.backup >= options.workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("backup: must be in [0, workers), got ", options.backup));
  }
  if (!(options.learning_rate > 0)) return absl::InvalidArgumentError("learning-rate: must be > 0");
  if (options.step_timeout.count() <= 0) {
    return absl::InvalidArgumentError("step-timeout: must be > 0");
  }
  if (options.step_deadline != 0 && !(options.step_deadline > 1 && options.step_deadline <= 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step-deadline: must be 0 (none) or in (1, 10], got ", options.step_deadline));
  }
  if (options.step_deadline_floor != 0 &&
      !(options.step_deadline_floor > 1 && options.step_deadline_floor <= options.step_deadline)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step-deadline-floor: must be 0 (the deadline fixed) or in (1, step-deadline ",
                     options.step_deadline, "], got ", options.step_deadline_floor));
  }
  return options;
}

ParameterShard::ParameterShard(PsOptions options)
    : options_(options),
      workers_(options.workers),
      params_(static_cast<size_t>(options.features), 0.0f),
      grad_sum_(static_cast<size_t>(options.features), 0.0),
      started_at_(std::chrono::steady_clock::now()) {
  if (options.step_deadline > 0 && options.step_deadline_floor > 0) {
    fit_.emplace(options.step_deadline_floor, options.step_deadline);
  }
}

absl::StatusOr<PushResult> ParameterShard::Push(const std::string& worker, int64_t step,
                                                int64_t samples, absl::Span<const float> gradient,
                                                double loss_sum) {
  if (samples < 0) return absl::InvalidArgumentError("samples: must be >= 0");
  if (static_cast<int64_t>(gradient.size()) != options_.features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient: has ", gradient.size(), " values, this server owns ", options_.features));
  }
  std::unique_lock<std::mutex> lock(mu_);
  // A server taking over holds pushes until it has its state; a server being
  // moved holds the first push of a new step until it has stopped.
  cv_.wait(lock, [&] {
    return shutdown_ || (!awaiting_state_ && !(freezing_ && contributors_.empty()));
  });
  if (!moved_to_.empty()) {
    PushResult moved;
    moved.moved_to = moved_to_;
    return moved;
  }
  if (shutdown_) return Current(false, false);
  if (step != step_) {  // its step finished without it (or a server restart)
    ++dropped_;
    return Current(false, false);
  }
  departed_.erase(worker);  // a push rejoins a worker that left
  const bool accepted = contributors_.insert(worker).second;
  if (!accepted) {
    ++dropped_;  // a retried call, or a restarted worker: wait for the step
  } else {
    const auto now = std::chrono::steady_clock::now();
    if (contributors_.size() == 1) first_at_ = now;
    if (samples > 0) {
      ++trained_;
      if (fit_) arrivals_.push_back(std::chrono::duration<double>(now - started_at_).count());
    }
    if (options_.step_deadline > 0 && !half_ && trained_ >= (needed() + 1) / 2) {
      half_ = now - started_at_;
    }
    for (size_t j = 0; j < gradient.size(); ++j) grad_sum_[j] += gradient[j];
    step_samples_ += samples;
    step_loss_ += loss_sum;
    if (static_cast<int>(contributors_.size()) >= needed()) {
      CompleteStep();
      WriteCapturedCheckpoint(lock);
      return Current(true, true);
    }
  }
  const auto deadline = first_at_ + options_.step_timeout;
  const int64_t generation = generation_;
  // Until the step completes, and its checkpoint, if any, is written.
  while (!shutdown_ && generation == generation_ && (step_ == step || writing_)) {
    if (step_ != step) {
      cv_.wait(lock);
    } else if (std::chrono::steady_clock::now() >= deadline) {
      CompleteStep();
      WriteCapturedCheckpoint(lock);
      return Current(accepted, true);
    } else {
      cv_.wait_until(lock, deadline);
    }
  }
  // A Load replaced the step this gradient was part of: not averaged in (the
  // worker pushes it again at the step answered).
  return Current(accepted && generation == generation_, false);
}

void ParameterShard::CompleteStep() {
  // The state before this step's gradients: what the records committed so
  // far trained (see ps.h).
  if (checkpoint_hook_ && step_ > 0 &&
      ((checkpoint_every_ > 0 && step_ % checkpoint_every_ == 0) || step_ == checkpoint_at_)) {
    captured_ = StateLocked();
  }
  if (step_samples_ > 0) {
    const double scale = options_.learning_rate / static_cast<double>(step_samples_);
    for (size_t j = 0; j < params_.size(); ++j) {
      params_[j] -= static_cast<float>(scale * grad_sum_[j]);
    }
    mean_loss_ = step_loss_ / static_cast<double>(step_samples_);
  }
  if (step_ == 0) first_mean_loss_ = mean_loss_;
  contributions_ = static_cast<int32_t>(contributors_.size());
  samples_ += step_samples_;
  grad_sum_.assign(grad_sum_.size(), 0.0);
  contributors_.clear();
  step_samples_ = 0;
  step_loss_ = 0;
  ++step_;
  NewStep();
  cv_.notify_all();
}

void ParameterShard::NewStep() {
  last_half_seconds_ = half_ ? std::chrono::duration<double>(*half_).count() : 0.0;
  if (fit_) fit_->AddStep(arrivals_);
  arrivals_.clear();
  half_.reset();
  trained_ = 0;
  started_at_ = std::chrono::steady_clock::now();
  deadline_told_ = false;
}

bool ParameterShard::DeadlinePassed(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (step != step_ || !half_) return false;
  const auto deadline =
      started_at_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                        *half_ * (fit_ ? fit_->Factor() : options_.step_deadline));
  if (std::chrono::steady_clock::now() < deadline) return false;
  if (!std::exchange(deadline_told_, true)) ++deadlines_passed_;
  return true;
}

PushResult ParameterShard::Current(bool accepted, bool completed) const {
  PushResult r;
  r.step = step_;
  r.parameters = params_;
  r.mean_loss = mean_loss_;
  r.contributions = contributions_;
  r.accepted = accepted;
  r.completed = completed;
  r.generation = generation_;
  r.half_seconds = last_half_seconds_;
  return r;
}

void ParameterShard::WriteCapturedCheckpoint(std::unique_lock<std::mutex>& lock) {
  if (!captured_) return;
  const PsState state = std::move(*captured_);
  captured_.reset();
  writing_ = true;
  lock.unlock();
  checkpoint_hook_(state);
  lock.lock();
  writing_ = false;
  cv_.notify_all();
}

int ParameterShard::Leave(const std::string& worker) {
  std::unique_lock<std::mutex> lock(mu_);
  if (contributors_.count(worker) == 0 && !shutdown_) departed_.insert(worker);
  if (!contributors_.empty() && static_cast<int>(contributors_.size()) >= needed()) {
    CompleteStep();
    WriteCapturedCheckpoint(lock);
  }
  return needed();
}

absl::StatusOr<int> ParameterShard::Resize(int workers, absl::Span<const std::string> removed,
                                           absl::Span<const std::string> added) {
  if (workers <= options_.backup || workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workers: must be in (backup = ", options_.backup, ", ", kMaxWorkers, "], got ", workers));
  }
  std::unique_lock<std::mutex> lock(mu_);
  workers_ = workers;
  for (const std::string& w : removed) departed_.erase(w);
  for (const std::string& w : added) {
    if (contributors_.count(w) == 0) departed_.insert(w);
  }
  if (!contributors_.empty() && static_cast<int>(contributors_.size()) >= needed()) {
    CompleteStep();
    WriteCapturedCheckpoint(lock);
  }
  return needed();
}

PushResult ParameterShard::Pull() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return shutdown_ || !awaiting_state_; });
  PushResult r = Current(false, false);
  r.moved_to = moved_to_;
  return r;
}

void ParameterShard::SetCheckpointHook(int64_t every_steps,
                                       std::function<void(const PsState&)> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  checkpoint_every_ = std::max<int64_t>(0, every_steps);
  checkpoint_hook_ = std::move(hook);
}

int64_t ParameterShard::ScheduleCheckpoint(int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  // The step being completed next is step_: its completion captures step_.
  checkpoint_at_ = std::max(step, step_ + 1);
  return checkpoint_at_;
}

absl::StatusOr<PsState> ParameterShard::Freeze(const std::string& moved_to,
                                               std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  // The same server asking again (it restarted before it had the state).
  if (!moved_to_.empty() && moved_to_ == moved_to) return StateLocked();
  if (!moved_to_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("already moved to ", moved_to_));
  }
  if (freezing_) return absl::FailedPreconditionError("already being moved");
  freezing_ = true;
  const bool boundary = cv_.wait_for(
      lock, timeout, [&] { return shutdown_ || (contributors_.empty() && !writing_); });
  freezing_ = false;
  if (!boundary || shutdown_) {
    cv_.notify_all();
    return absl::DeadlineExceededError(absl::StrCat("no step boundary within ", timeout.count(),
                                                    " ms: ", contributors_.size(),
                                                    " gradients of step ", step_, " pending"));
  }
  moved_to_ = moved_to;
  cv_.notify_all();
  return StateLocked();
}

void ParameterShard::AwaitState() {
  std::lock_guard<std::mutex> lock(mu_);
  awaiting_state_ = true;
}

absl::Status ParameterShard::Load(const PsState& state) {
  if (static_cast<int64_t>(state.parameters.size()) != options_.features) {
    return absl::InvalidArgumentError(absl::StrCat("parameters: has ", state.parameters.size(),
                                                   " values, this server owns ",
                                                   options_.features));
  }
  if (state.step < 0) return absl::InvalidArgumentError("step: must be >= 0");
  std::lock_guard<std::mutex> lock(mu_);
  params_ = state.parameters;
  step_ = state.step;
  samples_ = state.samples;
  mean_loss_ = state.mean_loss;
  first_mean_loss_ = state.first_mean_loss;
  grad_sum_.assign(grad_sum_.size(), 0.0);
  contributors_.clear();
  step_samples_ = 0;
  step_loss_ = 0;
  NewStep();
  moved_to_.clear();
  awaiting_state_ = false;
  ++generation_;
  loaded_step_ = state.step;
  cv_.notify_all();
  return absl::OkStatus();
}

PsState ParameterShard::State() const {
  std::lock_guard<std::mutex> lock(mu_);
  return StateLocked();
}

PsState ParameterShard::StateLocked() const {
  PsState s;
  s.step = step_;
  s.parameters = params_;
  s.samples = samples_;
  s.mean_loss = mean_loss_;
  s.first_mean_loss = first_mean_loss_;
  return s;
}

PsStats ParameterShard::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PsStats s;
  s.step = step_;
  s.mean_loss = mean_loss_;
  s.first_mean_loss = first_mean_loss_;
  s.samples = samples_;
  s.dropped = dropped_;
  s.pending = static_cast<int32_t>(contributors_.size());
  s.generation = generation_;
  s.loaded_step = loaded_step_;
  s.deadlines_passed = deadlines_passed_;
  s.deadline_factor = fit_ ? fit_->Factor() : options_.step_deadline;
  return s;
}

void ParameterShard::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

}  // namespace antdt::trainer
