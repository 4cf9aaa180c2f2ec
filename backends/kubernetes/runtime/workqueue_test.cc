#include "backends/kubernetes/runtime/workqueue.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "testing/kube-fake/test_util.h"

namespace antdt::kube {
namespace {

WorkQueueOptions Opts(FakeClock* clock, double qps = 0) {
  WorkQueueOptions o;
  o.name = "test";
  o.clock = clock;
  o.qps = qps;
  return o;
}

std::string MustGet(WorkQueue& q) {
  std::string key;
  EXPECT_TRUE(q.GetWithTimeout(&key, 10000));
  return key;
}

TEST(WorkQueueTest, AddDeduplicatesWaitingKeys) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));
  q.Add("a");
  q.Add("b");
  q.Add("a");
  EXPECT_EQ(q.Len(), 2);
  EXPECT_EQ(MustGet(q), "a");
  EXPECT_EQ(MustGet(q), "b");
  EXPECT_EQ(q.Len(), 0);
}

TEST(WorkQueueTest, AddWhileProcessingIsQueuedAtDone) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));
  q.Add("a");
  EXPECT_EQ(MustGet(q), "a");
  q.Add("a");
  q.Add("a");
  EXPECT_EQ(q.Len(), 0);  // not handed to a second worker
  std::string key;
  EXPECT_FALSE(q.GetWithTimeout(&key, 10));
  q.Done("a");
  EXPECT_EQ(q.Len(), 1);
  EXPECT_EQ(MustGet(q), "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0);
}

TEST(WorkQueueTest, NeverTwoWorkersOnOneKeyAndNoAddLost) {
  WorkQueueOptions o;
  o.qps = 0;
  WorkQueue q(o);
  constexpr int kKeys = 4;
  constexpr int kWorkers = 8;
  constexpr int kAdds = 20000;
  std::atomic<int> active[kKeys] = {};
  std::atomic<int> generation[kKeys] = {};
  std::atomic<int> seen[kKeys] = {};
  std::atomic<bool> overlap{false};
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      std::string key;
      while (q.Get(&key)) {
        int k = key[0] - 'a';
        if (active[k].fetch_add(1) != 0) overlap = true;
        // Everything added before this Get is seen by this pass.
        int g = generation[k].load();
        int prev = seen[k].load();
        while (prev < g && !seen[k].compare_exchange_weak(prev, g)) {
        }
        std::this_thread::yield();
        active[k].fetch_sub(1);
        q.Done(key);
      }
    });
  }
  for (int i = 0; i < kAdds; ++i) {
    int k = i % kKeys;
    generation[k].fetch_add(1);
    q.Add(std::string(1, static_cast<char>('a' + k)));
  }
  // Drain: wait until every key's last generation was seen, then shut down.
  EXPECT_TRUE(testing::Eventually([&] {
    for (int k = 0; k < kKeys; ++k) {
      if (seen[k].load() != generation[k].load()) return false;
    }
    return true;
  }));
  q.ShutDown();
  for (auto& t : workers) t.join();
  EXPECT_FALSE(overlap.load());
  for (int k = 0; k < kKeys; ++k) EXPECT_EQ(seen[k].load(), kAdds / kKeys);
}

TEST(WorkQueueTest, RateLimitedDelaysGrowAndForgetResets) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));  // token bucket off
  q.AddRateLimited("a");      // 5 ms
  EXPECT_EQ(q.Len(), 0);
  EXPECT_EQ(q.NumDelayed(), 1);
  clock.Advance(4);
  EXPECT_EQ(q.Len(), 0);
  clock.Advance(1);
  EXPECT_EQ(q.Len(), 1);
  EXPECT_EQ(MustGet(q), "a");
  q.Done("a");
  q.AddRateLimited("a");  // 10 ms
  clock.Advance(9);
  EXPECT_EQ(q.Len(), 0);
  clock.Advance(1);
  EXPECT_EQ(q.Len(), 1);
  EXPECT_EQ(q.NumRequeues("a"), 2);
  EXPECT_EQ(q.PeekRateLimitDelayMs("a"), 20);
  q.Forget("a");
  EXPECT_EQ(q.NumRequeues("a"), 0);
  EXPECT_EQ(q.PeekRateLimitDelayMs("a"), 5);
}

TEST(WorkQueueTest, PerItemDelayIsCapped) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));
  for (int i = 0; i < 40; ++i) q.AddRateLimited("a");
  EXPECT_EQ(q.PeekRateLimitDelayMs("a"), 1000 * 1000);
}

TEST(WorkQueueTest, TokenBucketLimitsAllKeys) {
  FakeClock clock;
  WorkQueueOptions o = Opts(&clock, /*qps=*/10);
  o.burst = 2;
  o.base_delay_ms = 0;
  WorkQueue q(o);
  q.AddRateLimited("a");
  q.AddRateLimited("b");
  q.AddRateLimited("c");  // bucket empty: 100 ms
  q.AddRateLimited("d");  // 200 ms
  EXPECT_EQ(q.Len(), 2);
  clock.Advance(100);
  EXPECT_EQ(q.Len(), 3);
  clock.Advance(100);
  EXPECT_EQ(q.Len(), 4);
}

TEST(WorkQueueTest, DefaultRateLimiterIsMaxOfBoth) {
  FakeClock clock;
  WorkQueueOptions o;
  o.clock = &clock;
  WorkQueue q(o);
  EXPECT_EQ(q.PeekRateLimitDelayMs("a"), 5);
  for (int i = 0; i < 100; ++i) q.AddRateLimited("k" + std::to_string(i));  // burst spent
  EXPECT_EQ(q.PeekRateLimitDelayMs("a"), 100);  // the bucket's 1/10 s dominates
}

TEST(WorkQueueTest, AddAfterReleasesInReadyOrder) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));
  q.AddAfter("a", 200);
  q.AddAfter("b", 100);
  q.AddAfter("c", 100);
  q.AddAfter("d", 500);
  q.AddAfter("d", 50);   // the earlier one wins
  q.AddAfter("b", 300);  // a later one does not delay it
  EXPECT_EQ(q.Len(), 0);
  clock.Advance(300);
  EXPECT_EQ(MustGet(q), "d");
  EXPECT_EQ(MustGet(q), "b");
  EXPECT_EQ(MustGet(q), "c");
  EXPECT_EQ(MustGet(q), "a");
  EXPECT_EQ(q.NumDelayed(), 0);
  q.AddAfter("now", 0);
  EXPECT_EQ(q.Len(), 1);
}

TEST(WorkQueueTest, BlockedGetWakesWhenTheClockReachesADelayedKey) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));
  std::string got;
  std::thread t([&] { q.Get(&got); });
  q.AddAfter("a", 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  clock.Advance(1000);
  t.join();
  EXPECT_EQ(got, "a");
}

TEST(WorkQueueTest, ShutDownDrainsThenStops) {
  FakeClock clock;
  WorkQueue q(Opts(&clock));
  std::string key;
  std::thread blocked([&] { EXPECT_FALSE(q.Get(&key)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  q.ShutDown();
  blocked.join();

  WorkQueue q2(Opts(&clock));
  q2.Add("a");
  q2.AddAfter("later", 10);
  q2.ShutDown();
  EXPECT_TRUE(q2.ShuttingDown());
  q2.Add("b");  // ignored
  EXPECT_EQ(MustGet(q2), "a");
  EXPECT_FALSE(q2.Get(&key));
  EXPECT_EQ(q2.NumDelayed(), 0);
}

double Value(prometheus::Registry& registry, const std::string& name) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& m : family.metric) {
      for (const auto& l : m.label) {
        if (l.name == "name" && l.value == "test") {
          if (family.type == prometheus::MetricType::Counter) return m.counter.value;
          if (family.type == prometheus::MetricType::Gauge) return m.gauge.value;
          if (family.type == prometheus::MetricType::Histogram) {
            return static_cast<double>(m.histogram.sample_count);
          }
        }
      }
    }
  }
  return -1;
}

TEST(WorkQueueTest, Metrics) {
  FakeClock clock;
  prometheus::Registry registry;
  WorkQueueOptions o = Opts(&clock);
  o.registry = &registry;
  WorkQueue q(o);
  q.Add("a");
  q.Add("a");
  q.Add("b");
  EXPECT_EQ(Value(registry, "workqueue_adds_total"), 2);
  EXPECT_EQ(Value(registry, "workqueue_depth"), 2);
  std::string key = MustGet(q);
  q.Done(key);
  q.AddRateLimited("c");
  EXPECT_EQ(Value(registry, "workqueue_depth"), 1);
  EXPECT_EQ(Value(registry, "workqueue_retries_total"), 1);
  EXPECT_EQ(Value(registry, "workqueue_queue_duration_seconds"), 1);
  EXPECT_EQ(Value(registry, "workqueue_work_duration_seconds"), 1);
}

}  // namespace
}  // namespace antdt::kube
