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

class ChaosTest : public ::testing::TestWithParam<bool> {};

TEST_P(ChaosTest, EveryRecordOfEveryEpochCommittedExactlyOnce) {
  antdt::testing::TempDir dir;
  demo::DemoOptions o;
  o.bin_dir = std::getenv("ANTDT_BIN_DIR") ? std::getenv("ANTDT_BIN_DIR") : "build/bin";
  o.work_dir = dir.path();
  o.workers = 4;
  o.records = 6'000;
  o.shard_size = 64;  // the last shard is partial
  o.epochs = 3;
  o.shuffle = GetParam();
  o.record_us = 500;
  o.commit_every = 7;
  o.worker_kills = 5;
  o.service_kills = 3;
  o.lease_ttl = "2s";
  o.seed = Seed();
  o.timeout_ms = 400'000;
  RecordProperty("seed", std::to_string(o.seed));
  std::printf("chaos seed %llu (rerun with ANTDT_CHAOS_SEED)\n",
              static_cast<unsigned long long>(o.seed));
  o.on_event = [](const std::string& s) { std::printf("%s\n", s.c_str()); };
  auto result = demo::RunDemo(o);
  ASSERT_TRUE(result.ok()) << result.status();
  std::printf("%s", result->verification.Summary().c_str());
  EXPECT_EQ(result->worker_kills, 5);
  EXPECT_EQ(result->service_kills, 3);
  ASSERT_EQ(result->verification.committed_per_epoch.size(), 3u);
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(result->verification.missing_per_epoch[e], 0) << "epoch " << e;
    EXPECT_EQ(result->verification.duplicated_per_epoch[e], 0) << "epoch " << e;
    EXPECT_EQ(result->verification.committed_per_epoch[e], 6'000) << "epoch " << e;
  }
  EXPECT_TRUE(result->progress.finished());
}

INSTANTIATE_TEST_SUITE_P(Order, ChaosTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Shuffled" : "Sequential"; });

}  // namespace
}  // namespace antdt
