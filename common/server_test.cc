#include "common/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/process.h"

namespace antdt {
namespace {

using std::chrono::milliseconds;

TEST(PeriodicThread, TicksEveryIntervalUntilStopped) {
  std::atomic<int> ticks{0};
  PeriodicThread thread(milliseconds(5), [&] { ++ticks; });
  ASSERT_TRUE(WaitFor([&] { return ticks >= 3; }, milliseconds(5000)));
  thread.Stop();
  const int stopped_at = ticks;
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(ticks, stopped_at);
  thread.Stop();  // idempotent
}

TEST(PeriodicThread, DestructionDoesNotWaitForTheNextTick) {
  std::atomic<int> ticks{0};
  const auto start = std::chrono::steady_clock::now();
  {
    PeriodicThread thread(std::chrono::hours(1), [&] { ++ticks; });
    ASSERT_TRUE(WaitFor([&] { return ticks == 1; }, milliseconds(5000)));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(ticks, 1);
}

}  // namespace
}  // namespace antdt
