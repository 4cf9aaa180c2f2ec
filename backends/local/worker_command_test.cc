#include "backends/local/worker_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

#include "common/testing/testing.h"

namespace antdt::local {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;

void Executable(const std::string& path) {
  std::ofstream(path) << "#!/bin/sh\n";
  chmod(path.c_str(), 0755);
}

TEST(FindExecutable, BinDirFirstThenPathAndASlashRelativeToTheWorkingDirectory) {
  testing::TempDir dir;
  for (const char* d : {"bin", "p1", "p2", "cwd"}) mkdir(dir.File(d).c_str(), 0755);
  Executable(dir.File("bin/tool"));
  Executable(dir.File("p1/tool"));
  Executable(dir.File("p2/other"));
  Executable(dir.File("cwd/run.sh"));
  std::ofstream(dir.File("p1/data")) << "not executable";
  const std::string path = dir.File("p1") + ":" + dir.File("p2");
  EXPECT_EQ(FindExecutable("tool", dir.File("bin"), "/", path), dir.File("bin/tool"));
  EXPECT_EQ(FindExecutable("other", dir.File("bin"), "/", path), dir.File("p2/other"));
  EXPECT_EQ(FindExecutable("data", dir.File("bin"), "/", path), std::nullopt);
  EXPECT_EQ(FindExecutable("missing", dir.File("bin"), "/", path), std::nullopt);
  EXPECT_EQ(FindExecutable("./run.sh", dir.File("bin"), dir.File("cwd"), path), "./run.sh");
  EXPECT_EQ(FindExecutable("./run.sh", dir.File("bin"), dir.File("bin"), path), std::nullopt);
  EXPECT_EQ(FindExecutable(dir.File("p1/tool"), "", "/", ""), dir.File("p1/tool"));
}

manifest::Job CommandJob() {
  manifest::Job job;
  job.name = "mlp";
  job.workers.replicas = 2;
  job.dataset = {1000, 100, 1, false, 3};
  job.workers.container.command = {"sh", "-c"};
  job.workers.container.args = {"echo $(GREETING) $(RANK) $(ANTDT_LOCAL_BATCH)"};
  job.workers.container.env = {{"GREETING", "hello-$(ANTDT_WORKER_ID)", false}};
  return job;
}

WorkerSite Site() {
  WorkerSite site;
  site.bin_dir = "/nonexistent-bin";
  site.work_dir = "/w";
  site.manifest_dir = "/m";
  site.sharding_addr = "127.0.0.1:1";
  site.checkpoint_path = "/w/checkpoint";
  site.mode = "antdt";
  site.master_port = 29501;
  site.python_path = "/b/python:/old";
  site.path_env = "/bin:/usr/bin";
  return site;
}

TEST(LaunchFor, WorkerCommandWithItsEnvironmentInTheManifestDirectory) {
  WorkerSlot slot;
  slot.id = "worker-1";
  slot.rank = 1;
  slot.node = "spare-0";
  slot.incarnation = 3;
  slot.local_batch = 48;
  absl::StatusOr<WorkerLaunch> launch = LaunchFor(CommandJob(), Site(), slot, "127.0.0.1:7");
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_THAT(launch->argv,
              ElementsAre(::testing::EndsWith("/sh"), "-c", "echo hello-worker-1 1 48"));
  EXPECT_EQ(launch->cwd, "/m");
  EXPECT_THAT(launch->env, Contains(Pair("GREETING", "hello-worker-1")));
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_INCARNATION", "3")));
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_AGENT_ADDR", "127.0.0.1:7")));
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_JOURNAL", "/w/worker-1.journal")));
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_LOSS_LOG", "/w/worker-1.loss.jsonl")));
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_NODE_SPEED_FILE", "/w/nodes/spare-0.speed")));
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_PS_ADDRS", "")));
  EXPECT_THAT(launch->env, Contains(Pair("MASTER_ADDR", "127.0.0.1")));
  EXPECT_THAT(launch->env, Contains(Pair("MASTER_PORT", "29501")));
  EXPECT_THAT(launch->env, Contains(Pair("PYTHONPATH", "/b/python:/old")));
}

TEST(LaunchFor, TheDemoTrainerWithoutACommand) {
  manifest::Job job = CommandJob();
  job.workers.container = {};
  WorkerSlot slot;
  slot.id = "worker-0";
  slot.node = "node-0";
  slot.local_batch = 64;
  absl::StatusOr<WorkerLaunch> launch = LaunchFor(job, Site(), slot, "127.0.0.1:7");
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_EQ(launch->argv[0], "/nonexistent-bin/antdt-trainer-worker");
  EXPECT_THAT(launch->argv, Contains("/w/nodes/node-0.speed"));
  EXPECT_EQ(launch->cwd, "");
  EXPECT_THAT(launch->env, Contains(Pair("ANTDT_WORKER_ID", "worker-0")));
}

TEST(LaunchFor, OnlyWorker0OfTheDemoTrainerEvaluatesHeldOutData) {
  manifest::Job job = CommandJob();
  job.workers.container = {};
  WorkerSlot slot;
  slot.id = "worker-0";
  slot.rank = 0;
  slot.incarnation = 2;  // a restarted worker-0 still evaluates
  slot.node = "spare-0";
  absl::StatusOr<WorkerLaunch> launch = LaunchFor(job, Site(), slot, "127.0.0.1:7");
  ASSERT_TRUE(launch.ok()) << launch.status();
  const std::vector<std::string>& argv = launch->argv;
  auto flag = std::find(argv.begin(), argv.end(), "--eval-out");
  ASSERT_NE(flag, argv.end());
  ASSERT_NE(flag + 1, argv.end());
  EXPECT_EQ(*(flag + 1), "/w/worker-0.loss.jsonl.eval.json");
  EXPECT_EQ(*(flag + 1), HeldOutPath("/w", "worker-0"));
  slot.id = "worker-1";
  slot.rank = 1;
  launch = LaunchFor(job, Site(), slot, "127.0.0.1:7");
  ASSERT_TRUE(launch.ok()) << launch.status();
  EXPECT_THAT(launch->argv, Not(Contains("--eval-out")));
}

TEST(CheckWorkerCommand, ErrorsNameTheField) {
  manifest::Job job = CommandJob();
  EXPECT_TRUE(CheckWorkerCommand(job, Site()).ok());
  job.workers.container.command = {"no-such-trainer"};
  absl::Status s = CheckWorkerCommand(job, Site());
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("spec.workers.template.spec.containers[0].command[0]: \"no-such-trainer\" "
                        "is not an executable in /nonexistent-bin or on PATH"));
  job.workers.container.command = {"./train.sh"};
  EXPECT_THAT(std::string(CheckWorkerCommand(job, Site()).message()),
              HasSubstr("(relative to /m)"));
  job.workers.container.command = {"$(PYTHON)"};  // known only at launch
  EXPECT_TRUE(CheckWorkerCommand(job, Site()).ok());
  job.workers.container.env.push_back({"POD_IP", "", true});
  EXPECT_THAT(std::string(CheckWorkerCommand(job, Site()).message()),
              HasSubstr("spec.workers.template.spec.containers[0].env[1].valueFrom"));
}

TEST(SiteFor, CheckpointPathAndMode) {
  manifest::Job job = CommandJob();
  WorkerSite site = SiteFor(job, "/nonexistent-bin", "/w", "/m", /*plain=*/true);
  EXPECT_EQ(site.checkpoint_path, "/w/checkpoint");
  EXPECT_EQ(site.mode, "plain");
  EXPECT_EQ(site.python_path, "");  // no /nonexistent-bin/../python
  job.checkpoint.path = "/ckpt";
  EXPECT_EQ(SiteFor(job, "/b", "/w", "/m", false).checkpoint_path, "/ckpt");
  EXPECT_EQ(SiteFor(job, "/b", "/w", "/m", false).mode, "antdt");
}

TEST(PickFreePort, APortThatCanBeBound) {
  absl::StatusOr<int> port = PickFreePort();
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  EXPECT_LT(*port, 65536);
}

TEST(PickFreePort, BelowTheEphemeralRange) {
  const std::string range = ::testing::TempDir() + "/ip_local_port_range";
  { std::ofstream(range) << "40000\t60999\n"; }
  EXPECT_EQ(EphemeralPortRange(range), std::make_pair(40000, 60999));
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<int> port = PickFreePort(range);
    ASSERT_TRUE(port.ok()) << port.status();
    EXPECT_GE(*port, 40000 - 8192);
    EXPECT_LT(*port, 40000);
  }
}

TEST(PickFreePort, AnUnreadableRangeIsLinuxsDefault) {
  EXPECT_EQ(EphemeralPortRange("/nonexistent/ip_local_port_range"), std::make_pair(32768, 60999));
  const std::string range = ::testing::TempDir() + "/bad_port_range";
  { std::ofstream(range) << "60999 1024\n"; }
  EXPECT_EQ(EphemeralPortRange(range), std::make_pair(32768, 60999));
}

}  // namespace
}  // namespace antdt::local
