// A rate-limited, delaying work queue of string keys: client-go's workqueue.
//
// - Add(key) while the key waits is a no-op; while a worker processes it the
//   key is marked dirty and queued again at Done(key). So a key is never
//   processed by two workers at once, and no Add is lost.
// - AddAfter(key, delay) queues it once the injected clock reaches now+delay;
//   AddRateLimited(key) waits max(per-item base*2^failures capped, a token
//   bucket shared by all keys); Forget(key) resets the key's failures.
// - Delayed keys are released by Get() and Len() (a blocked Get polls the
//   clock), so a test moves a FakeClock and calls Get; no background thread.
// - ShutDown(): Get() hands out what is queued, then returns false. Keys
//   still delayed are dropped; Add after ShutDown is ignored.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace prometheus {
class Registry;
class Gauge;
class Counter;
class Histogram;
}  // namespace prometheus

namespace antdt::kube {

struct WorkQueueOptions {
  // The `name` label of the metrics.
  std::string name = "default";
  // Per item: base_delay_ms * 2^failures, capped at max_delay_ms.
  int64_t base_delay_ms = 5;
  int64_t max_delay_ms = 1000 * 1000;
  // Overall: a token bucket of `qps` refill and `burst` capacity. qps <= 0
  // disables it.
  double qps = 10;
  int64_t burst = 100;
  // Delays, rate limiting and the duration metrics; RealClock when null.
  Clock* clock = nullptr;
  // When set, workqueue_* families with label name=<name> are registered
  // (depth, adds_total, retries_total, queue_duration_seconds,
  // work_duration_seconds). Must outlive the queue.
  prometheus::Registry* registry = nullptr;
};

class WorkQueue {
 public:
  explicit WorkQueue(WorkQueueOptions options = {});
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& key);
  // delay_ms <= 0 is Add. An earlier pending AddAfter of the same key wins.
  void AddAfter(const std::string& key, int64_t delay_ms);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;
  // The delay the next AddRateLimited(key) would use, without using it
  // (for tests and logs).
  int64_t PeekRateLimitDelayMs(const std::string& key) const;

  // Blocks until a key is ready and marks it processing; false once the
  // queue is shut down and drained.
  bool Get(std::string* key);
  // Like Get, but gives up after `timeout_ms` of real time (false).
  bool GetWithTimeout(std::string* key, int64_t timeout_ms);
  void Done(const std::string& key);
  void ShutDown();
  bool ShuttingDown() const;
  // Keys ready to be handed out (not the delayed or processing ones).
  int Len() const;
  // Keys waiting for their delay.
  int NumDelayed() const;

 private:
  struct DelayedKey {
    int64_t ready_at_ms;
    int64_t seq;
    std::string key;
    bool operator>(const DelayedKey& o) const {
      return ready_at_ms != o.ready_at_ms ? ready_at_ms > o.ready_at_ms : seq > o.seq;
    }
  };
  struct Metrics;

  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseDueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t RateLimitDelayLocked(const std::string& key, bool consume) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool GetUntil(std::string* key, int64_t real_deadline_ms);

  const WorkQueueOptions options_;
  Clock* const clock_;
  std::unique_ptr<Metrics> metrics_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  std::priority_queue<DelayedKey, std::vector<DelayedKey>, std::greater<DelayedKey>> delayed_
      ABSL_GUARDED_BY(mu_);
  // The earliest pending ready time of each delayed key (entries of
  // delayed_ that disagree are stale and skipped).
  std::map<std::string, int64_t> delayed_at_ ABSL_GUARDED_BY(mu_);
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int64_t> enqueued_at_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> started_at_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mu_);
  // Token bucket; tokens go negative for reservations made ahead.
  mutable double tokens_ ABSL_GUARDED_BY(mu_);
  mutable int64_t tokens_at_ms_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace antdt::kube
