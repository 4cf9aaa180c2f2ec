#include "examples/trainer/ps.h"

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
  return options;
}

ParameterShard::ParameterShard(PsOptions options)
    : options_(options),
      workers_(options.workers),
      params_(static_cast<size_t>(options.features), 0.0f),
      grad_sum_(static_cast<size_t>(options.features), 0.0) {}

absl::StatusOr<PushResult> ParameterShard::Push(const std::string& worker, int64_t step,
                                                int64_t samples, absl::Span<const float> gradient,
                                                double loss_sum) {
  if (samples < 0) return absl::InvalidArgumentError("samples: must be >= 0");
  if (static_cast<int64_t>(gradient.size()) != options_.features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gradient: has ", gradient.size(), " values, this server owns ", options_.features));
  }
  std::unique_lock<std::mutex> lock(mu_);
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
    if (contributors_.size() == 1) first_at_ = std::chrono::steady_clock::now();
    for (size_t j = 0; j < gradient.size(); ++j) grad_sum_[j] += gradient[j];
    step_samples_ += samples;
    step_loss_ += loss_sum;
    if (static_cast<int>(contributors_.size()) >= needed()) {
      CompleteStep();
      return Current(true, true);
    }
  }
  const auto deadline = first_at_ + options_.step_timeout;
  while (step_ == step && !shutdown_) {
    if (std::chrono::steady_clock::now() >= deadline) {
      CompleteStep();
      return Current(accepted, true);
    }
    cv_.wait_until(lock, deadline);
  }
  return Current(accepted, false);
}

void ParameterShard::CompleteStep() {
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
  cv_.notify_all();
}

PushResult ParameterShard::Current(bool accepted, bool completed) const {
  PushResult r;
  r.step = step_;
  r.parameters = params_;
  r.mean_loss = mean_loss_;
  r.contributions = contributions_;
  r.accepted = accepted;
  r.completed = completed;
  return r;
}

int ParameterShard::Leave(const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  if (contributors_.count(worker) == 0 && !shutdown_) departed_.insert(worker);
  if (!contributors_.empty() && static_cast<int>(contributors_.size()) >= needed()) CompleteStep();
  return needed();
}

absl::StatusOr<int> ParameterShard::Resize(int workers, absl::Span<const std::string> removed,
                                           absl::Span<const std::string> added) {
  if (workers <= options_.backup || workers > kMaxWorkers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "workers: must be in (backup = ", options_.backup, ", ", kMaxWorkers, "], got ", workers));
  }
  std::lock_guard<std::mutex> lock(mu_);
  workers_ = workers;
  for (const std::string& w : removed) departed_.erase(w);
  for (const std::string& w : added) {
    if (contributors_.count(w) == 0) departed_.insert(w);
  }
  if (!contributors_.empty() && static_cast<int>(contributors_.size()) >= needed()) CompleteStep();
  return needed();
}

PushResult ParameterShard::Pull() const {
  std::lock_guard<std::mutex> lock(mu_);
  return Current(false, false);
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
  return s;
}

void ParameterShard::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  cv_.notify_all();
}

}  // namespace antdt::trainer
