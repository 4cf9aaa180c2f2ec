#include "core/jobconfig/jobconfig.h"

#include <algorithm>

#include "common/step_deadline.h"
#include "core/loop/control_loop.h"

namespace antdt::jobconfig {

policy::PolicySpec PolicySpecFor(const manifest::Job& job, vocab::Policy policy,
                                 int64_t interval_ms) {
  policy::PolicySpec spec;
  spec.name = policy;
  spec.cooldown_ms = job.straggler_policy.cooldown_ms;
  spec.derive_cooldown = job.straggler_policy.cooldown_derived;
  spec.max_actions = job.straggler_policy.max_actions;
  spec.min_saving_ratio = job.straggler_policy.min_saving_ratio;
  spec.backup_workers = job.straggler_policy.backup_workers;
  spec.by_expected_duration = job.straggler_policy.decide_by == vocab::DecideBy::kExpectedDuration;
  spec.step_deadline = StepDeadline(job, policy, job.straggler_policy.mode);
  spec.interval_ms = interval_ms;
  const monitor::MonitorConfig mc = MonitorConfigFor(job.monitor);
  spec.settle_ms = 2 * mc.window_ms + mc.allowed_lateness_ms;
  for (const manifest::Rule& r : job.straggler_policy.rules) {
    policy::Rule cr;
    cr.signal = r.signal;
    cr.threshold = r.threshold;
    cr.straggler_class = r.straggler_class;
    cr.windows = r.windows;
    cr.action = r.action;
    if (r.cooldown_ms > 0) cr.cooldown_ms = r.cooldown_ms;
    if (r.budget > 0) cr.budget = r.budget;
    spec.rules.push_back(cr);
  }
  return spec;
}

monitor::MonitorConfig MonitorConfigFor(const manifest::MonitorSpec& spec) {
  monitor::MonitorConfig mc;
  mc.window_ms = spec.window_ms;
  mc.steps_per_window = spec.window_steps;
  mc.allowed_lateness_ms = spec.allowed_lateness_ms >= 0
                               ? spec.allowed_lateness_ms
                               : std::max<int64_t>(500, spec.window_ms / 4);
  mc.straggler_threshold = spec.straggler_threshold;
  mc.recover_threshold = spec.recover_threshold;
  mc.persistent_windows = spec.persistent_windows;
  mc.warmup_windows = spec.warmup_windows;
  return mc;
}

v1::DatasetSpec DatasetSpecFor(const manifest::Job& job) {
  v1::DatasetSpec ds;
  ds.set_job(job.name);
  ds.set_name("train");
  ds.set_record_count(job.dataset.records);
  ds.set_shard_size(job.dataset.shard_size);
  ds.set_epochs(job.dataset.epochs);
  ds.set_shuffle(job.dataset.shuffle);
  ds.set_seed(job.dataset.seed);
  // The guided layout down to one worker's share of the global batch: the
  // last shards of an epoch are about a step of work each.
  if (job.dataset.guided_leasing) {
    ds.set_min_shard_records(std::max<int64_t>(1, InitialLocalBatch(job, 0)));
    ds.set_workers(std::max(1, job.workers.replicas));
  }
  return ds;
}

int64_t ControlIntervalMs(const manifest::MonitorSpec& spec) {
  // Windows in steps close every two steps and each close (or onset) takes
  // a turn of its own: the interval is only the fallback between them.
  if (spec.window_steps > 0) return std::max<int64_t>(spec.window_ms, 2'000);
  return std::max<int64_t>(spec.window_ms / 2, 500);
}

int64_t InitialLocalBatch(const manifest::Job& job, int32_t i) {
  const int64_t n = job.workers.replicas;
  const int64_t g = job.model.global_batch_size;
  if (n <= 0) return 0;
  return g / n + (i < g % n ? 1 : 0);
}

bool HasWorkerCommand(const manifest::Job& job) { return !job.workers.container.command.empty(); }

bool RunsDemoTrainer(const manifest::Job& job) {
  if (!HasWorkerCommand(job)) return true;
  const std::string& first = job.workers.container.command[0];
  const size_t slash = first.rfind('/');
  return (slash == std::string::npos ? first : first.substr(slash + 1)) == kDemoTrainer;
}

int32_t ParameterServerCount(const manifest::Job& job) {
  if (!RunsDemoTrainer(job)) return job.parameter_servers.replicas;
  return std::max(1, job.parameter_servers.replicas);
}

int32_t ParameterServerFeatures(const manifest::Job& job, int32_t k) {
  const int32_t p = ParameterServerCount(job);
  if (p <= 0) return 0;
  const int32_t f = job.model.features;
  return f / p + (k < f % p ? 1 : 0);
}

double RegroupSeconds(const manifest::Job& job) {
  return ParameterServerCount(job) == 0 ? loop::kDefaultRegroupSeconds : 0;
}

double StepDeadline(const manifest::Job& job, vocab::Policy policy, vocab::Mode mode) {
  if (mode != vocab::Mode::kAct) return 0;
  switch (policy) {
    case vocab::Policy::kAntdtNd:
    case vocab::Policy::kAntdtDd:
    case vocab::Policy::kCustom:
      return job.straggler_policy.step_deadline;
    case vocab::Policy::kNone:
    case vocab::Policy::kBackupWorkers:
    case vocab::Policy::kLbBsp:
      return 0;
  }
  return 0;
}

double StepDeadlineFloor(const manifest::Job& job, vocab::Policy policy, vocab::Mode mode) {
  const bool fitted =
      job.straggler_policy.step_deadline_fitted && StepDeadline(job, policy, mode) > 0;
  return fitted ? DeadlineFit::kFloor : 0;
}

}  // namespace antdt::jobconfig
