#include "core/jobconfig/jobconfig.h"

#include <gtest/gtest.h>

#include "core/loop/control_loop.h"

namespace antdt::jobconfig {
namespace {

manifest::Job WithPs(int32_t replicas, bool command) {
  manifest::Job job;
  job.workers.replicas = 4;
  job.parameter_servers.replicas = replicas;
  job.model.features = 16;
  if (command) job.workers.container.command = {"python3"};
  return job;
}

TEST(ParameterServerCount, TheDemoTrainerNeedsOneAWorkerCommandMayHaveNone) {
  EXPECT_EQ(ParameterServerCount(WithPs(0, false)), 1);
  EXPECT_EQ(ParameterServerCount(WithPs(3, false)), 3);
  EXPECT_EQ(ParameterServerCount(WithPs(0, true)), 0);
  EXPECT_EQ(ParameterServerCount(WithPs(2, true)), 2);
  EXPECT_EQ(ParameterServerFeatures(WithPs(0, true), 0), 0);
  EXPECT_EQ(ParameterServerFeatures(WithPs(3, false), 0), 6);
  // args alone keep the image's entrypoint: still the demo trainer locally.
  manifest::Job args_only = WithPs(0, false);
  args_only.workers.container.args = {"--x"};
  EXPECT_FALSE(HasWorkerCommand(args_only));
  EXPECT_EQ(ParameterServerCount(args_only), 1);
  // The demo trainer named as the command (examples/k8s/quickstart.yaml) needs one too.
  for (const char* command : {"antdt-trainer-worker", "/opt/antdt/bin/antdt-trainer-worker"}) {
    manifest::Job demo = WithPs(0, true);
    demo.workers.container.command = {command, "--x"};
    EXPECT_TRUE(RunsDemoTrainer(demo)) << command;
    EXPECT_EQ(ParameterServerCount(demo), 1) << command;
  }
  EXPECT_FALSE(RunsDemoTrainer(WithPs(0, true)));
}

TEST(RegroupSeconds, OnlyForAJobWithoutParameterServers) {
  EXPECT_DOUBLE_EQ(RegroupSeconds(WithPs(0, true)), loop::kDefaultRegroupSeconds);
  EXPECT_DOUBLE_EQ(RegroupSeconds(WithPs(1, true)), 0);
  EXPECT_DOUBLE_EQ(RegroupSeconds(WithPs(0, false)), 0);
}

// The step deadline is AntDT's own: its policies keep the job's (1.25 by
// default), the baselines and Recommend mode none.
TEST(StepDeadline, OnlyAntdtPoliciesActingKeepIt) {
  manifest::Job job = WithPs(1, false);
  for (vocab::Policy p :
       {vocab::Policy::kAntdtNd, vocab::Policy::kAntdtDd, vocab::Policy::kCustom}) {
    EXPECT_DOUBLE_EQ(StepDeadline(job, p, vocab::Mode::kAct), 1.25) << vocab::Name(p);
    EXPECT_DOUBLE_EQ(StepDeadline(job, p, vocab::Mode::kRecommend), 0) << vocab::Name(p);
  }
  for (vocab::Policy p :
       {vocab::Policy::kNone, vocab::Policy::kLbBsp, vocab::Policy::kBackupWorkers}) {
    EXPECT_DOUBLE_EQ(StepDeadline(job, p, vocab::Mode::kAct), 0) << vocab::Name(p);
  }
  job.straggler_policy.step_deadline = 2;
  EXPECT_DOUBLE_EQ(StepDeadline(job, vocab::Policy::kAntdtNd, vocab::Mode::kAct), 2);
  job.straggler_policy.step_deadline = 0;
  EXPECT_DOUBLE_EQ(StepDeadline(job, vocab::Policy::kAntdtNd, vocab::Mode::kAct), 0);
}

// A lateness the job sets is the Monitor's and counts in the policy's settle
// time; absent, it is max(500ms, window / 4).
TEST(MonitorConfigFor, TheJobsLatenessOrTheDefault) {
  manifest::MonitorSpec spec;
  spec.window_ms = 4'000;
  EXPECT_EQ(MonitorConfigFor(spec).allowed_lateness_ms, 1'000);
  spec.window_ms = 300;
  EXPECT_EQ(MonitorConfigFor(spec).allowed_lateness_ms, 500);
  spec.allowed_lateness_ms = 0;
  EXPECT_EQ(MonitorConfigFor(spec).allowed_lateness_ms, 0);
  spec.allowed_lateness_ms = 100;
  EXPECT_EQ(MonitorConfigFor(spec).allowed_lateness_ms, 100);
  manifest::Job job;
  job.monitor = spec;
  EXPECT_EQ(PolicySpecFor(job, vocab::Policy::kAntdtNd, 500).settle_ms, 700);
}

}  // namespace
}  // namespace antdt::jobconfig
