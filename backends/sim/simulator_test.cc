#include "backends/sim/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backends/sim/commit_counts.h"
#include "backends/sim/scenario_file.h"
#include "common/config.h"
#include "common/testing/testing.h"

namespace antdt::sim {
namespace {

using ::testing::HasSubstr;

// The paper's mix (examples/jobs/paper-mix.yaml) at a tenth of its records.
manifest::Job PaperMixJob(int64_t records = 40'000) {
  auto job = manifest::ParseJob(R"(
apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata: {name: paper-mix}
spec:
  dataset: {records: 40000, shardSize: 250, epochs: 1}
  model: {features: 16, learningRate: 0.2, globalBatchSize: 512}
  workers: {replicas: 8}
  parameterServers: {replicas: 2}
  stragglerPolicy: {name: antdt-nd, cooldown: 4s, minSavingRatio: 0.5}
  monitor: {window: 1s}
  local: {deviceTimePerSample: 1ms}
)");
  EXPECT_TRUE(job.ok()) << job.status();
  job->dataset.records = records;
  return *job;
}

manifest::Scenario PaperMixScenario() {
  auto text = ReadFile(antdt::testing::SourcePath("examples/scenarios/paper-mix.yaml"));
  EXPECT_TRUE(text.ok()) << text.status();
  auto s = manifest::ParseScenario(text.ok() ? *text : "");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

SimResult SimulateOrFail(const manifest::Job& job, const manifest::Scenario& scenario,
                         vocab::Policy policy, bool no_slowdown = false, uint64_t seed = 1) {
  SimOptions o;
  o.policy = policy;
  o.no_slowdown = no_slowdown;
  o.seed = seed;
  auto r = Simulate(job, scenario, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

// The exactly-once check's counts: a record committed twice is a duplicate,
// one never committed is missing, across the 64-record words.
TEST(SimulatorTest, CommitCountsSeeDuplicatesAndMissingRecords) {
  CommitCounts counts;
  counts.Reset(130);
  for (size_t at = 0; at < 130; ++at) {
    if (at != 64 && at != 129) counts.Add(at);
  }
  counts.Add(63);
  counts.Add(63);
  counts.Add(128);
  counts.Add(130);  // past the run's records: not counted
  EXPECT_EQ(counts.Committed(), 128);
  EXPECT_EQ(counts.Missing(), 2);
  EXPECT_EQ(counts.Duplicates(), 3);
  counts.Reset(10);
  EXPECT_EQ(counts.Committed(), 0);
  EXPECT_EQ(counts.Missing(), 10);
  EXPECT_EQ(counts.Duplicates(), 0);
}

TEST(SimulatorTest, EveryRecordIsCommittedOnceUnderEveryPolicy) {
  const manifest::Job job = PaperMixJob();
  const manifest::Scenario scenario = PaperMixScenario();
  for (vocab::Policy p : {vocab::Policy::kNone, vocab::Policy::kAntdtNd, vocab::Policy::kAntdtDd,
                          vocab::Policy::kLbBsp}) {
    const SimResult r = SimulateOrFail(job, scenario, p);
    EXPECT_EQ(r.records, 40'000) << vocab::Name(p);
    EXPECT_EQ(r.records_committed, 40'000) << vocab::Name(p);
    EXPECT_TRUE(r.exactly_once()) << vocab::Name(p) << ": " << r.duplicates << " duplicates, "
                                  << r.missing << " missing";
    EXPECT_GT(r.steps, 0);
    EXPECT_GT(r.step_reports, r.steps);
  }
}

// The policies act on the same stragglers the real job has, and it shows:
// antdt-nd restarts the persistent straggler (node-5) and adjusts batches,
// and ends well before no action; nothing beats the run without slowdowns.
TEST(SimulatorTest, AntdtNdActsOnThePaperMixAndBeatsNoAction) {
  const manifest::Job job = PaperMixJob(200'000);
  const manifest::Scenario scenario = PaperMixScenario();
  const SimResult ideal = SimulateOrFail(job, scenario, vocab::Policy::kNone, /*no_slowdown=*/true);
  const SimResult none = SimulateOrFail(job, scenario, vocab::Policy::kNone);
  const SimResult nd = SimulateOrFail(job, scenario, vocab::Policy::kAntdtNd);
  EXPECT_TRUE(none.actions.empty());
  EXPECT_LT(ideal.jct_seconds, nd.jct_seconds);
  EXPECT_LT(nd.jct_seconds, none.jct_seconds * 0.8)
      << "antdt-nd " << nd.jct_seconds << " s, none " << none.jct_seconds << " s";
  const bool restarted =
      std::any_of(nd.actions.begin(), nd.actions.end(), [](const policy::Decision& a) {
        return std::holds_alternative<policy::KillRestart>(a.action) &&
               policy::ActionTarget(a.action) == "worker-5";
      });
  EXPECT_TRUE(restarted) << nd.actions.size() << " actions";
  EXPECT_GE(nd.restarts, 1);
  EXPECT_TRUE(nd.exactly_once());
}

// The step deadline (spec.stragglerPolicy.stepDeadline) under antdt-nd: a
// straggler's step ends at 1.25x its peers' and the rest of its batch goes
// into its next step, every record still committed exactly once; the job
// ends sooner than with the deadline off, and `none` never cuts a step.
TEST(SimulatorTest, TheStepDeadlineCutsStragglersStepsAndLosesNoRecord) {
  manifest::Job job = PaperMixJob(200'000);
  const manifest::Scenario scenario = PaperMixScenario();
  const SimResult cut = SimulateOrFail(job, scenario, vocab::Policy::kAntdtNd);
  const SimResult none = SimulateOrFail(job, scenario, vocab::Policy::kNone);
  job.straggler_policy.step_deadline = 0;
  const SimResult whole = SimulateOrFail(job, scenario, vocab::Policy::kAntdtNd);
  EXPECT_GT(cut.cut_steps, 0);
  EXPECT_GT(cut.cut_samples, cut.cut_steps) << "each cut moves the rest of a batch";
  EXPECT_EQ(none.cut_steps, 0);
  EXPECT_EQ(whole.cut_steps, 0);
  for (const SimResult* r : {&cut, &none, &whole}) {
    EXPECT_EQ(r->records_committed, 200'000) << r->policy;
    EXPECT_TRUE(r->exactly_once())
        << r->policy << ": " << r->duplicates << " duplicates, " << r->missing << " missing";
  }
  EXPECT_LT(cut.jct_seconds, whole.jct_seconds)
      << "with the deadline " << cut.jct_seconds << " s, without " << whole.jct_seconds << " s";
}

TEST(SimulatorTest, ASeedGivesTheSameRunAndAnotherSeedAnother) {
  const manifest::Job job = PaperMixJob();
  const manifest::Scenario scenario = PaperMixScenario();
  const SimResult a = SimulateOrFail(job, scenario, vocab::Policy::kAntdtNd, false, 7);
  const SimResult b = SimulateOrFail(job, scenario, vocab::Policy::kAntdtNd, false, 7);
  const SimResult c = SimulateOrFail(job, scenario, vocab::Policy::kAntdtNd, false, 8);
  EXPECT_EQ(a.jct_seconds, b.jct_seconds);
  EXPECT_EQ(a.actions.size(), b.actions.size());
  EXPECT_NE(a.jct_seconds, c.jct_seconds);
}

TEST(SimulatorTest, TooFewNodesNamesTheField) {
  manifest::Job job = PaperMixJob();
  job.workers.replicas = 40;
  auto r = Simulate(job, PaperMixScenario(), {});
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("spec.workers.replicas"));
}

TEST(SimulatorTest, GeneratedScenariosDrawTheMixAndRunAtScale) {
  auto scenario = ParseSimScenario(R"(
name: mix-400
generate:
  workers: 400
  spares: 8
  seed: 3
  deterministic: {fraction: 0.05, factor: 1.5}
  transient: {fraction: 0.1, factor: [2, 4], start: [0s, 5s], duration: [2s, 4s]}
  persistent: {fraction: 0.02, factor: [3, 5], start: [1s, 3s]}
  leader: {fraction: 0.05, speed: 1.5}
)");
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  EXPECT_EQ(scenario->nodes.size(), 408u);
  int transient = 0, persistent = 0, deterministic = 0;
  for (const manifest::Slowdown& s : scenario->slowdowns) {
    transient += s.kind == v1::TRANSIENT;
    persistent += s.kind == v1::PERSISTENT;
    deterministic += s.kind == v1::DETERMINISTIC;
    if (s.kind == v1::PERSISTENT) {
      EXPECT_GE(s.start_ms, 1000);
    }
  }
  EXPECT_NEAR(transient, 40, 15);
  EXPECT_NEAR(persistent, 8, 6);
  EXPECT_NEAR(deterministic, 20, 10);

  manifest::Job job = PaperMixJob(400 * 64 * 20);
  job.workers.replicas = 400;
  job.parameter_servers.replicas = 0;  // AllReduce: a restart stalls the group
  job.model.global_batch_size = 400 * 64;
  const SimResult r = SimulateOrFail(job, *scenario, vocab::Policy::kAntdtNd);
  EXPECT_TRUE(r.exactly_once()) << r.duplicates << " duplicates, " << r.missing << " missing";
  EXPECT_EQ(r.records_committed, 400 * 64 * 20);
}

// The capacity bound: every step's global batch spread over the nodes by
// their speed, plus the communication time. Four workers, one at half
// speed: 100 steps of 64 samples at 1 ms over 3.5 workers' worth, 3 ms each
// to communicate; no run of a policy beats it.
TEST(SimulatorTest, TheCapacityBoundIsTheWorkOverTheNodesSpeeds) {
  manifest::Job job = PaperMixJob(6'400);
  job.workers.replicas = 4;
  job.parameter_servers.replicas = 0;
  job.model.global_batch_size = 64;
  manifest::Scenario scenario;
  scenario.name = "one-slow";
  for (int i = 0; i < 4; ++i) {
    manifest::NodeSpec n;
    n.name = "node-" + std::to_string(i);
    n.speed = i == 3 ? 0.5 : 1.0;
    scenario.nodes.push_back(n);
  }
  const double bound = 100 * (64 * 0.001 / 3.5 + 0.003);
  for (vocab::Policy p : {vocab::Policy::kNone, vocab::Policy::kAntdtNd}) {
    const SimResult r = SimulateOrFail(job, scenario, p);
    EXPECT_NEAR(r.capacity_bound_seconds, bound, 1e-9) << vocab::Name(p);
    EXPECT_GE(r.jct_seconds, bound) << vocab::Name(p);
  }
}

TEST(SimulatorTest, BadGeneratedScenariosNameTheField) {
  auto bad = [](const std::string& yaml) {
    auto s = ParseSimScenario(yaml);
    return s.ok() ? std::string("accepted") : std::string(s.status().message());
  };
  EXPECT_THAT(bad("generate: {spares: 2}"), HasSubstr("generate.workers: required"));
  EXPECT_THAT(bad("generate: {workers: 0}"), HasSubstr("generate.workers: must be in"));
  EXPECT_THAT(bad("generate: {workers: 4, transient: {fraction: 2}}"),
              HasSubstr("generate.transient.fraction"));
  EXPECT_THAT(bad("generate: {workers: 4, transient: {fraction: 0.1, factor: [4, 2]}}"),
              HasSubstr("generate.transient.factor: max below min"));
  EXPECT_THAT(bad("generate: {workers: 4, leader: {fraction: 0.6}, persistent: {fraction: 0.6}}"),
              HasSubstr("more than 1"));
  EXPECT_THAT(bad("generate: {workers: 4, colour: red}"), HasSubstr("generate.colour: unknown"));
  EXPECT_THAT(bad("generate: {workers: 4, transient: {fraction: 0.1, start: soon}}"),
              HasSubstr("generate.transient.start"));
}

// Half of 1,000 workers 4x slower from 2 s on is not a slowed job: the
// Monitor's worker median rises past its baseline but its fast half does not,
// so antdt-nd acts within steps of the slowdown and the fast half takes the
// work: well under no action's time. (Once the batches are balanced every
// worker's step is 1.6x its first ones: that is a whole-job slowdown, rightly
// left alone.)
TEST(SimulatorTest, HalfTheWorkersSlowedIsNotAJobSlowdown) {
  auto job = manifest::ParseJob(R"(
apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata: {name: half-slow}
spec:
  dataset: {records: 960000, shardSize: 1000, epochs: 1}
  model: {globalBatchSize: 32000}
  workers: {replicas: 1000}
  parameterServers: {replicas: 10}
  stragglerPolicy: {name: antdt-nd, minSavingRatio: 0.5}
  local: {deviceTimePerSample: 20ms}
)");
  ASSERT_TRUE(job.ok()) << job.status();
  auto scenario = ParseSimScenario(R"(
generate:
  workers: 1000
  spares: 0
  seed: 3
  persistent: {fraction: 0.5, factor: [4, 4], start: [2s, 2s]}
)");
  ASSERT_TRUE(scenario.ok()) << scenario.status();
  const SimResult none = SimulateOrFail(*job, *scenario, vocab::Policy::kNone);
  const SimResult nd = SimulateOrFail(*job, *scenario, vocab::Policy::kAntdtNd);
  EXPECT_TRUE(nd.exactly_once());
  double first_subject = -1;  // the first batch change about a slowed worker
  for (const policy::Decision& a : nd.actions) {
    if (!a.subject.empty() && std::holds_alternative<policy::AdjustBatchSize>(a.action)) {
      first_subject = policy::AtSeconds(a);
      break;
    }
  }
  EXPECT_GT(first_subject, 2.0);
  EXPECT_LT(first_subject, 2.0 + 4 * 2.56) << "within a few of the slowed steps";
  std::printf("half of 1,000 workers 4x slower: none %.1f s, antdt-nd %.1f s\n", none.jct_seconds,
              nd.jct_seconds);
  EXPECT_LT(nd.jct_seconds, 0.6 * none.jct_seconds);
}

}  // namespace
}  // namespace antdt::sim
