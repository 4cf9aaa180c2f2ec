// `antdt run` of a job whose workers run a command of their own (the
// manifest's worker template): a stand-in trainer script
// (testdata/stand_in_worker.sh) beside the manifest, started with the worker
// environment, $(VAR) expanded, in the manifest's directory; it execs the demo
// trainer with flags built from ANTDT_*, so exactly-once is checked end to
// end. And the plain mode of a job without parameter servers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/testing/testing.h"

namespace antdt {
namespace {

using testing::BinPath;
using ::testing::HasSubstr;
using testing::Process;
using testing::SourcePath;
using testing::TempDir;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// NAME=value lines of an env.<worker>.<incarnation> file the script wrote.
std::map<std::string, std::string> EnvFile(const std::string& path) {
  std::map<std::string, std::string> env;
  std::istringstream lines(Read(path));
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

constexpr const char* kJob = R"yaml(apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: command
spec:
  dataset: {records: 60000, shardSize: 400, epochs: 1, shuffle: true, seed: 3}
  model: {features: 16, learningRate: 0.2, globalBatchSize: 240}
  workers:
    replicas: 3
    template:
      spec:
        containers:
          - name: trainer
            image: ignored-locally
            command: [sh]
            args: [stand_in_worker.sh, "$(TRAINER)", --device-us-per-sample, "$(DEVICE_US)"]
            env:
              - {name: TRAINER, value: "TRAINER_PATH"}
              - {name: DEVICE_US, value: "1000"}
              - {name: ANTDT_GREETING, value: "$(ANTDT_WORKER_ID)@$(ANTDT_INCARNATION) $$(RANK) $(NOPE)"}
  parameterServers: {replicas: 1}
  stragglerPolicy:
    name: custom
    cooldown: 4s
    minSavingRatio: 0.1
    rules: [{signal: class, class: persistent, action: KILL_RESTART}]
  monitor: {window: 1s, persistentWindows: 3}
  local: {scenario: scenario.yaml}
)yaml";

constexpr const char* kScenario = R"(name: command
nodes:
  - name: node-0
  - name: node-1
  - name: node-2
  - name: spare-0
    spare: true
slowdowns:
  - {node: node-1, kind: persistent, factor: 4, start: 8s}
)";

struct Ran {
  int exit_code = -1;  // -1: it did not finish in time, or was killed
  std::string out;     // its stdout and stderr
};

// Runs `argv` to its end (at most `timeout`), its output in `dir`/name.log.
Ran RunToEnd(const std::vector<std::string>& argv, const TempDir& dir, const std::string& name,
             std::chrono::seconds timeout) {
  Process run(argv, dir.File(name + ".log"));
  auto status = run.Wait(timeout);
  Ran ran;
  if (status && WIFEXITED(*status)) ran.exit_code = WEXITSTATUS(*status);
  ran.out = Read(dir.File(name + ".log"));
  return ran;
}

// The manifest, its scenario and the stand-in script in a fresh directory.
void WriteJobDir(const TempDir& dir, const std::string& job) {
  Write(dir.File("job.yaml"),
        absl::StrReplaceAll(job, {{"TRAINER_PATH", BinPath("antdt-trainer-worker")}}));
  Write(dir.File("scenario.yaml"), kScenario);
  std::filesystem::copy_file(SourcePath("backends/local/testdata/stand_in_worker.sh"),
                             dir.File("stand_in_worker.sh"));
}

TEST(CommandJob, RunsTheWorkerCommandWithItsEnvironmentAndEveryRecordOnce) {
  TempDir dir;
  WriteJobDir(dir, kJob);
  const Ran ran = RunToEnd({BinPath("antdt"), "run", dir.File("job.yaml"), "--report",
                            dir.File("report"), "--work-dir", dir.File("work"), "--quiet"},
                           dir, "run", std::chrono::seconds(280));
  const std::string& out = ran.out;
  ASSERT_EQ(ran.exit_code, 0) << out;
  EXPECT_THAT(out, HasSubstr("3 workers (worker command), 1 parameter server,"));
  EXPECT_THAT(out, HasSubstr("KILL_RESTART worker-1"));
  EXPECT_THAT(out, HasSubstr("RESULT: every record committed exactly once"));
  EXPECT_THAT(Read(dir.File("report/report.json")), HasSubstr("\"records_committed\": 60000"));

  // Started in the manifest's directory (the script wrote its files there),
  // with the worker environment and the container's env expanded over it.
  const auto env0 = EnvFile(dir.File("env.worker-0.0"));
  const auto env1 = EnvFile(dir.File("env.worker-1.0"));
  ASSERT_FALSE(env1.empty()) << out;
  EXPECT_EQ(env1.at("ANTDT_GREETING"), "worker-1@0 $(RANK) $(NOPE)");
  EXPECT_EQ(env1.at("ANTDT_JOB"), "command");
  EXPECT_EQ(env1.at("ANTDT_WORKERS"), "3");
  EXPECT_EQ(env1.at("ANTDT_RECORDS"), "60000");
  EXPECT_EQ(env1.at("ANTDT_SHUFFLE"), "true");
  EXPECT_EQ(env1.at("ANTDT_MODE"), "antdt");
  EXPECT_EQ(env1.at("ANTDT_LOCAL_BATCH"), "80");
  EXPECT_EQ(env1.at("ANTDT_CHECKPOINT_PATH"), dir.File("work") + "/checkpoint");
  EXPECT_EQ(env1.at("ANTDT_JOURNAL"), dir.File("work") + "/worker-1.journal");
  EXPECT_EQ(env1.at("ANTDT_NODE_SPEED_FILE"), dir.File("work") + "/nodes/node-1.speed");
  EXPECT_EQ(env1.at("ANTDT_PS_ADDRS").rfind("127.0.0.1:", 0), 0u);
  EXPECT_EQ(env1.at("RANK"), "1");
  EXPECT_EQ(env1.at("WORLD_SIZE"), "3");
  EXPECT_EQ(env1.at("LOCAL_RANK"), "0");
  EXPECT_EQ(env1.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(env1.at("MASTER_PORT"), env0.at("MASTER_PORT"));
  EXPECT_NE(env1.at("ANTDT_AGENT_ADDR"), env0.at("ANTDT_AGENT_ADDR"));
  // The straggler on node-1 was restarted on the spare (a persistent straggler
  // is restarted by the job's one rule, never given a smaller batch that could
  // hide it): its next incarnation
  // has the same rank and rendezvous, the spare's agent and speed file.
  const auto restarted = EnvFile(dir.File("env.worker-1.1"));
  ASSERT_FALSE(restarted.empty()) << out;
  EXPECT_EQ(restarted.at("ANTDT_INCARNATION"), "1");
  EXPECT_EQ(restarted.at("RANK"), "1");
  EXPECT_EQ(restarted.at("MASTER_PORT"), env0.at("MASTER_PORT"));
  EXPECT_EQ(restarted.at("ANTDT_NODE_SPEED_FILE"), dir.File("work") + "/nodes/spare-0.speed");
  EXPECT_NE(restarted.at("ANTDT_AGENT_ADDR"), env1.at("ANTDT_AGENT_ADDR"));
}

TEST(CommandJob, PlainWithoutParameterServersTakesTheLossFromWorkerZerosLog) {
  TempDir dir;
  std::string job = absl::StrReplaceAll(kJob, {{"  parameterServers: {replicas: 1}\n", ""}});
  WriteJobDir(dir, job);
  const Ran ran =
      RunToEnd({BinPath("antdt"), "run", dir.File("job.yaml"), "--policy", "plain", "--report",
                dir.File("report"), "--work-dir", dir.File("work"), "--quiet"},
               dir, "run", std::chrono::seconds(120));
  const std::string& out = ran.out;
  ASSERT_EQ(ran.exit_code, 0) << out;
  EXPECT_THAT(out, HasSubstr("3 workers (worker command), 0 parameter servers"));
  EXPECT_THAT(out, HasSubstr("policy plain"));
  EXPECT_THAT(out, HasSubstr("exactly-once: not checked (plain"));
  // The final loss is the sample-weighted mean of the last (up to) ten steps.
  EXPECT_THAT(out, HasSubstr("3 steps, loss 1.5000 -> 1.0000"));
  const std::string report = Read(dir.File("report/report.json"));
  EXPECT_THAT(report, HasSubstr("\"exactly_once\": null"));
  EXPECT_THAT(report, HasSubstr("\"exactly_once_checked\": false"));
  EXPECT_THAT(report, HasSubstr("\"loss_curve\": [["));
  const auto env2 = EnvFile(dir.File("env.worker-2.0"));
  ASSERT_FALSE(env2.empty()) << out;
  EXPECT_EQ(env2.at("ANTDT_MODE"), "plain");
  EXPECT_EQ(env2.at("ANTDT_PS_ADDRS"), "");
  EXPECT_EQ(env2.at("RANK"), "2");
}

TEST(CommandJob, PlainIsRefusedForTheDemoTrainerNamingTheFlag) {
  TempDir dir;
  Write(dir.File("demo.yaml"), R"(apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata: {name: demo}
spec:
  dataset: {records: 1000, shardSize: 100}
  workers: {replicas: 2}
)");
  Ran ran = RunToEnd({BinPath("antdt"), "run", dir.File("demo.yaml"), "--policy", "plain",
                      "--work-dir", dir.File("work")},
                     dir, "run", std::chrono::seconds(20));
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_THAT(ran.out, HasSubstr("antdt run: --policy plain needs a worker command "
                                 "(spec.workers.template.spec.containers[0].command)"));
  ran = RunToEnd({BinPath("antdt"), "bench", "stragglers", "--job", dir.File("demo.yaml"),
                  "--policies", "antdt-nd,plain", "--out", dir.File("bench")},
                 dir, "bench", std::chrono::seconds(20));
  EXPECT_EQ(ran.exit_code, 2) << ran.out;
  EXPECT_THAT(ran.out, HasSubstr("antdt bench: --policies: plain needs a worker command"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("work")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("bench/runs")));
}

TEST(CommandJob, AMissingCommandStopsBeforeAnythingStarts) {
  TempDir dir;
  WriteJobDir(dir, absl::StrReplaceAll(kJob, {{"command: [sh]", "command: [no-such-trainer]"}}));
  const Ran ran =
      RunToEnd({BinPath("antdt"), "run", dir.File("job.yaml"), "--work-dir", dir.File("work")}, dir,
               "run", std::chrono::seconds(20));
  EXPECT_EQ(ran.exit_code, 1) << ran.out;
  EXPECT_THAT(ran.out, HasSubstr("spec.workers.template.spec.containers[0].command[0]: "
                                 "\"no-such-trainer\" is not an executable in "));
  EXPECT_FALSE(std::filesystem::exists(dir.File("work/sharding-service.log")));
}

}  // namespace
}  // namespace antdt
