// Chaos: worker processes consume 3 epochs while workers and the service
// itself are SIGKILLed and restarted at random points. Exactly-once is checked
// from the workers' journals of acknowledged commits, not from the service.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

#include "common/testing/testing.h"
#include "workload/demo/demo_run.h"

namespace antdt {
namespace {

uint64_t Seed() {
  if (const char* s = std::getenv("ANTDT_CHAOS_SEED")) return std::strtoull(s, nullptr, 10);
  return static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count() %
                               1'000'000);
}

// 4 workers, 6,000 records a epoch for 3 epochs, 5 worker and 3 service
// SIGKILLs at random points (the seed printed, ANTDT_CHAOS_SEED to rerun).
demo::DemoOptions ChaosOptions(const std::string& work_dir) {
  demo::DemoOptions o;
  o.bin_dir = std::getenv("ANTDT_BIN_DIR") ? std::getenv("ANTDT_BIN_DIR") : "build/bin";
  o.work_dir = work_dir;
  o.workers = 4;
  o.records = 6'000;
  o.shard_size = 64;  // the last shard is partial
  o.epochs = 3;
  o.record_us = 500;
  o.commit_every = 7;
  o.worker_kills = 5;
  o.service_kills = 3;
  o.lease_ttl = "2s";
  o.seed = Seed();
  o.timeout_ms = 400'000;
  std::printf("chaos seed %llu (rerun with ANTDT_CHAOS_SEED)\n",
              static_cast<unsigned long long>(o.seed));
  ::testing::Test::RecordProperty("seed", std::to_string(o.seed));
  return o;
}

// Every kill happened and every record of every epoch was committed once.
void ExpectExactlyOnceThroughTheKills(const demo::DemoResult& result) {
  std::printf("%s", result.verification.Summary().c_str());
  EXPECT_EQ(result.worker_kills, 5);
  EXPECT_EQ(result.service_kills, 3);
  ASSERT_EQ(result.verification.committed_per_epoch.size(), 3u);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(result.verification.missing_per_epoch[e], 0) << "epoch " << e;
    EXPECT_EQ(result.verification.duplicated_per_epoch[e], 0) << "epoch " << e;
    EXPECT_EQ(result.verification.committed_per_epoch[e], 6'000) << "epoch " << e;
  }
  EXPECT_TRUE(result.progress.finished());
}

class ChaosTest : public ::testing::TestWithParam<bool> {};

TEST_P(ChaosTest, EveryRecordOfEveryEpochCommittedExactlyOnce) {
  antdt::testing::TempDir dir;
  demo::DemoOptions o = ChaosOptions(dir.path());
  o.shuffle = GetParam();
  o.on_event = [](const std::string& s) { std::printf("%s\n", s.c_str()); };
  auto result = demo::RunDemo(o);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectExactlyOnceThroughTheKills(*result);
}

INSTANTIATE_TEST_SUITE_P(Order, ChaosTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Shuffled" : "Sequential"; });

// A straggler among the workers (worker-0, ten times slower): the guided
// layout ends its leases early and the rest goes to the others, while workers
// and the service are SIGKILLed. The cut ends are fences that survive the
// service's restarts; every record of every epoch is committed exactly once.
TEST(ChaosSlowWorkerTest, ItsCutLeasesHoldThroughTheKills) {
  antdt::testing::TempDir dir;
  demo::DemoOptions o = ChaosOptions(dir.path());
  o.shuffle = true;
  o.shard_size = 200;  // a shard the slow worker holds long enough to be seen slow in
  o.slow_record_us = 5'000;
  auto result = demo::RunDemo(o);
  ASSERT_TRUE(result.ok()) << result.status();
  std::printf("leases shortened: %lld\n", static_cast<long long>(result->leases_shortened));
  EXPECT_GE(result->leases_shortened, 1) << "the slow worker's leases were never cut";
  ExpectExactlyOnceThroughTheKills(*result);
}

}  // namespace
}  // namespace antdt
