#include "backends/kubernetes/runtime/workqueue.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backends/kubernetes/runtime/internal/util.h"

namespace antdt::kube {

struct WorkQueue::Metrics {
  prometheus::Gauge* depth;
  prometheus::Counter* adds;
  prometheus::Counter* retries;
  prometheus::Histogram* queue_duration;
  prometheus::Histogram* work_duration;
};

namespace {

// controller-runtime: prometheus.ExponentialBuckets(10e-9, 10, 12).
prometheus::Histogram::BucketBoundaries DurationBuckets() {
  prometheus::Histogram::BucketBoundaries out;
  double b = 10e-9;
  for (int i = 0; i < 12; ++i, b *= 10) out.push_back(b);
  return out;
}

}  // namespace

WorkQueue::WorkQueue(WorkQueueOptions options)
    : options_(std::move(options)), clock_(options_.clock ? options_.clock : &RealClock::Get()) {
  tokens_ = static_cast<double>(std::max<int64_t>(options_.burst, 1));
  tokens_at_ms_ = clock_->NowMillis();
  if (options_.registry != nullptr) {
    prometheus::Registry& r = *options_.registry;
    const prometheus::Labels labels{{"name", options_.name}};
    metrics_ = std::make_unique<Metrics>();
    metrics_->depth = &prometheus::BuildGauge()
                           .Name("workqueue_depth")
                           .Help("Current depth of workqueue")
                           .Register(r)
                           .Add(labels);
    metrics_->adds = &prometheus::BuildCounter()
                          .Name("workqueue_adds_total")
                          .Help("Total number of adds handled by workqueue")
                          .Register(r)
                          .Add(labels);
    metrics_->retries = &prometheus::BuildCounter()
                             .Name("workqueue_retries_total")
                             .Help("Total number of retries handled by workqueue")
                             .Register(r)
                             .Add(labels);
    metrics_->queue_duration =
        &prometheus::BuildHistogram()
             .Name("workqueue_queue_duration_seconds")
             .Help("How long in seconds an item stays in workqueue before being requested")
             .Register(r)
             .Add(labels, DurationBuckets());
    metrics_->work_duration =
        &prometheus::BuildHistogram()
             .Name("workqueue_work_duration_seconds")
             .Help("How long in seconds processing an item from workqueue takes")
             .Register(r)
             .Add(labels, DurationBuckets());
  }
}

WorkQueue::~WorkQueue() { ShutDown(); }

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mu_);
  AddLocked(key);
}

void WorkQueue::AddLocked(const std::string& key) {
  if (shutting_down_) return;
  if (dirty_.count(key)) return;
  dirty_.insert(key);
  enqueued_at_[key] = clock_->NowMillis();
  if (metrics_) metrics_->adds->Increment();
  if (processing_.count(key)) return;  // queued again at Done
  queue_.push_back(key);
  if (metrics_) metrics_->depth->Set(static_cast<double>(queue_.size()));
  cv_.Signal();
}

void WorkQueue::AddAfter(const std::string& key, int64_t delay_ms) {
  absl::MutexLock lock(&mu_);
  if (shutting_down_) return;
  if (delay_ms <= 0) {
    AddLocked(key);
    return;
  }
  const int64_t ready_at = clock_->NowMillis() + delay_ms;
  auto it = delayed_at_.find(key);
  if (it != delayed_at_.end() && it->second <= ready_at) return;
  delayed_at_[key] = ready_at;
  delayed_.push(DelayedKey{ready_at, seq_++, key});
  cv_.SignalAll();  // a waiting Get may need to wake earlier
}

void WorkQueue::ReleaseDueLocked() {
  const int64_t now = clock_->NowMillis();
  while (!delayed_.empty() && delayed_.top().ready_at_ms <= now) {
    DelayedKey d = delayed_.top();
    delayed_.pop();
    auto it = delayed_at_.find(d.key);
    if (it == delayed_at_.end() || it->second != d.ready_at_ms) continue;  // stale
    delayed_at_.erase(it);
    AddLocked(d.key);
  }
}

int64_t WorkQueue::RateLimitDelayLocked(const std::string& key, bool consume) const {
  auto it = failures_.find(key);
  const int failures = it == failures_.end() ? 0 : it->second;
  int64_t per_item = options_.max_delay_ms;
  if (failures < 62) {
    double d = static_cast<double>(options_.base_delay_ms) * std::ldexp(1.0, failures);
    if (d < static_cast<double>(options_.max_delay_ms)) per_item = static_cast<int64_t>(d);
  }
  int64_t bucket = 0;
  if (options_.qps > 0) {
    const int64_t now = clock_->NowMillis();
    if (now > tokens_at_ms_) {
      tokens_ = std::min(static_cast<double>(std::max<int64_t>(options_.burst, 1)),
                         tokens_ + static_cast<double>(now - tokens_at_ms_) * options_.qps / 1000);
      tokens_at_ms_ = now;
    }
    double left = tokens_ - 1;
    if (consume) tokens_ = left;
    if (left < 0) bucket = static_cast<int64_t>(std::ceil(-left * 1000 / options_.qps));
  }
  return std::max(per_item, bucket);
}

void WorkQueue::AddRateLimited(const std::string& key) {
  int64_t delay;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return;
    delay = RateLimitDelayLocked(key, /*consume=*/true);
    ++failures_[key];
    if (metrics_) metrics_->retries->Increment();
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mu_);
  failures_.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

int64_t WorkQueue::PeekRateLimitDelayMs(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  return RateLimitDelayLocked(key, /*consume=*/false);
}

bool WorkQueue::Get(std::string* key) { return GetUntil(key, std::numeric_limits<int64_t>::max()); }

bool WorkQueue::GetWithTimeout(std::string* key, int64_t timeout_ms) {
  return GetUntil(key, RealClock::Get().NowMillis() + timeout_ms);
}

bool WorkQueue::GetUntil(std::string* key, int64_t real_deadline_ms) {
  const bool real_clock = dynamic_cast<const RealClock*>(clock_) != nullptr;
  absl::MutexLock lock(&mu_);
  while (true) {
    ReleaseDueLocked();
    if (!queue_.empty()) {
      *key = std::move(queue_.front());
      queue_.pop_front();
      const int64_t now = clock_->NowMillis();
      processing_.insert(*key);
      dirty_.erase(*key);
      started_at_[*key] = now;
      auto it = enqueued_at_.find(*key);
      if (it != enqueued_at_.end()) {
        if (metrics_) {
          metrics_->queue_duration->Observe(static_cast<double>(now - it->second) / 1000);
        }
        enqueued_at_.erase(it);
      }
      if (metrics_) metrics_->depth->Set(static_cast<double>(queue_.size()));
      return true;
    }
    if (shutting_down_) return false;
    const int64_t real_now = RealClock::Get().NowMillis();
    if (real_now >= real_deadline_ms) return false;
    int64_t wait_ms = real_deadline_ms - real_now;
    if (!delayed_.empty()) {
      int64_t until_ready = std::max<int64_t>(1, delayed_.top().ready_at_ms - clock_->NowMillis());
      if (!real_clock) until_ready = std::min<int64_t>(until_ready, 5);
      wait_ms = std::min(wait_ms, until_ready);
    }
    if (wait_ms > 24LL * 3600 * 1000) {
      cv_.Wait(&mu_);
    } else {
      cv_.WaitWithTimeout(&mu_, absl::Milliseconds(wait_ms));
    }
  }
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  if (!processing_.erase(key)) return;
  auto it = started_at_.find(key);
  if (it != started_at_.end()) {
    if (metrics_) {
      metrics_->work_duration->Observe(static_cast<double>(clock_->NowMillis() - it->second) /
                                       1000);
    }
    started_at_.erase(it);
  }
  if (dirty_.count(key)) {
    queue_.push_back(key);
    if (metrics_) metrics_->depth->Set(static_cast<double>(queue_.size()));
    cv_.Signal();
  }
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shutting_down_ = true;
  delayed_ = {};
  delayed_at_.clear();
  cv_.SignalAll();
}

bool WorkQueue::ShuttingDown() const {
  absl::MutexLock lock(&mu_);
  return shutting_down_;
}

int WorkQueue::Len() const {
  absl::MutexLock lock(&mu_);
  const_cast<WorkQueue*>(this)->ReleaseDueLocked();
  return static_cast<int>(queue_.size());
}

int WorkQueue::NumDelayed() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(delayed_at_.size());
}

}  // namespace antdt::kube
