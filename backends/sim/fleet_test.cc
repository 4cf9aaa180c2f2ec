#include "backends/sim/fleet.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::sim {
namespace {

using ::testing::HasSubstr;

// Four workers, 100 steps of 0.32 s: about 35 s a job.
manifest::Job SmallJob() {
  auto job = manifest::ParseJob(R"(
apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata: {name: small}
spec:
  dataset: {records: 6400, shardSize: 200, epochs: 1}
  model: {globalBatchSize: 64}
  workers: {replicas: 4}
  parameterServers: {replicas: 1}
  stragglerPolicy: {name: antdt-nd}
  local: {deviceTimePerSample: 20ms}
)");
  EXPECT_TRUE(job.ok()) << job.status();
  return *job;
}

constexpr char kSmallFleet[] = R"(
name: small
job: small.yaml
pool: {nodes: 16, slowNodes: 3, slowFactor: 4}
jobs: {count: 16, arrivalEvery: 12s, workers: [2, 6], spares: 2, transientChance: 0.3}
)";

TEST(FleetTest, BadInputIsRefusedNamingTheField) {
  struct Case {
    std::string yaml;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"job: j.yaml\npool: {nodez: 4}", "pool.nodez: unknown field"},
      {"job: j.yaml\nspeed: 2", "speed: unknown field"},
      {"pool: {nodes: 4}", "job: required"},
      {"job: j.yaml\njobs: {arrivalEvery: -5s}", "jobs.arrivalEvery"},
      {"job: j.yaml\njobs: {arrivalEvery: 0s}", "jobs.arrivalEvery: must be one duration > 0"},
      {"job: j.yaml\npool: {slowFactor: -2}", "pool.slowFactor: must be in [1, 1000]"},
      {"job: j.yaml\njobs: {transientChance: 1.5}", "jobs.transientChance: must be in [0, 1]"},
      {"job: j.yaml\njobs: {count: -1}", "jobs.count: must be in [1, 10000]"},
      {"job: j.yaml\npool: {nodes: 8, slowNodes: 9}", "pool.slowNodes: must be at most pool.nodes"},
      {"job: j.yaml\npool: {nodes: 8}\njobs: {workers: [2, 7], spares: 2}",
       "jobs.workers: the largest job (7 workers and 2 spares) is larger than the pool "
       "(pool.nodes 8)"},
      {"job: j.yaml\njobs: {workers: [6, 2]}", "jobs.workers: max below min"},
      {"[1, 2]", "fleet: must be a mapping"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<FleetSpec> f = ParseFleet(c.yaml);
    ASSERT_FALSE(f.ok()) << c.yaml;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(c.want)) << c.yaml;
  }
  absl::StatusOr<FleetSpec> ok = ParseFleet(kSmallFleet);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->nodes, 16);
  EXPECT_EQ(ok->workers_max, 6);
  EXPECT_EQ(ok->arrival_every_ms, 12'000);
}

// The example fleet file parses (the job it names is checked by the CLI).
TEST(FleetTest, TheExampleParses) {
  auto text = ReadFile(antdt::testing::SourcePath("examples/sim/fleet.yaml"));
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<FleetSpec> f = ParseFleet(*text);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->job, "fleet-job.yaml");
}

// The same arrivals, sizes and slow nodes run four ways: every record of
// every job once; the memory learns the slow nodes from the jobs before, so
// fewer workers land on them and the fleet finishes its jobs sooner; the
// oracle knows them from the start. The same seed runs the same fleet.
TEST(FleetTest, NodeMemoryKeepsLaterJobsOffTheSlowNodes) {
  absl::StatusOr<FleetSpec> spec = ParseFleet(kSmallFleet);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const manifest::Job job = SmallJob();
  std::vector<FleetResult> runs;
  for (FleetMode m :
       {FleetMode::kIdeal, FleetMode::kWithout, FleetMode::kWith, FleetMode::kOracle}) {
    absl::StatusOr<FleetResult> r = RunFleet(*spec, job, m, 3);
    ASSERT_TRUE(r.ok()) << Name(m) << ": " << r.status();
    EXPECT_TRUE(r->exactly_once) << Name(m);
    ASSERT_EQ(r->jobs.size(), 16u);
    for (const FleetJob& j : r->jobs) {
      EXPECT_GT(j.jct_seconds, 0) << Name(m);
      EXPECT_GE(j.start_seconds, j.arrival_seconds) << Name(m);
    }
    runs.push_back(*std::move(r));
  }
  const FleetResult &ideal = runs[0], &without = runs[1], &with = runs[2], &oracle = runs[3];
  EXPECT_EQ(ideal.placed_on_slow_nodes, 0);
  EXPECT_GT(without.placed_on_slow_nodes, with.placed_on_slow_nodes);
  EXPECT_GE(with.placed_on_slow_nodes, oracle.placed_on_slow_nodes);
  EXPECT_LT(with.total_jct_seconds, without.total_jct_seconds);
  EXPECT_LT(ideal.total_jct_seconds, without.total_jct_seconds);
  for (double s : Slowdowns(without, ideal)) EXPECT_GT(s, 0);

  absl::StatusOr<FleetResult> again = RunFleet(*spec, job, FleetMode::kWith, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_DOUBLE_EQ(again->total_jct_seconds, with.total_jct_seconds);
}

}  // namespace
}  // namespace antdt::sim
