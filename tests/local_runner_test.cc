// `antdt run` end to end: a short job with a persistent straggler is run on
// this machine; the straggler is restarted on the spare node, every record is
// committed exactly once, and the report names the action and why.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/testing/testing.h"
#include "tests/example_job.h"
#include "workload/trainer/ps_checkpoint.h"

namespace antdt {
namespace {

using antdt::testing::BinPath;
using antdt::testing::Process;
using antdt::testing::TempDir;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

constexpr const char* kJob = R"(apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: e2e
spec:
  dataset:
    records: 96000
    shardSize: 400
    epochs: 1
    shuffle: true
    seed: 3
  model:
    features: 16
    learningRate: 0.2
    globalBatchSize: 256
  workers:
    replicas: 4
  parameterServers:
    replicas: 1
  stragglerPolicy:
    name: antdt-nd
    cooldown: 4s
    maxActions: 6
    minSavingRatio: 0.1
  monitor:
    window: 1s
    persistentWindows: 3
  local:
    scenario: scenario.yaml
    deviceTimePerSample: 1ms
)";

constexpr const char* kScenario = R"(name: e2e
nodes:
  - name: node-0
  - name: node-1
  - name: node-2
  - name: node-3
  - name: spare-0
    spare: true
slowdowns:
  - node: node-2
    kind: persistent
    factor: 4
    start: 3s
)";

TEST(LocalRunner, RestartsAPersistentStragglerOnTheSpareNodeWithNoRecordLostOrDoubled) {
  TempDir dir;
  Write(dir.File("job.yaml"), kJob);
  Write(dir.File("scenario.yaml"), kScenario);
  Process run({BinPath("antdt"), "run", dir.File("job.yaml"), "--report", dir.File("report"),
               "--work-dir", dir.File("work"), "--quiet"},
              dir.File("run.log"));
  auto status = run.Wait(std::chrono::seconds(280));
  ASSERT_TRUE(status) << "antdt run did not finish:\n" << Read(dir.File("run.log"));
  const std::string out = Read(dir.File("run.log"));
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
  EXPECT_NE(out.find("RESULT: every record committed exactly once"), std::string::npos) << out;
  const std::string report = Read(dir.File("report/report.json"));
  EXPECT_NE(report.find("\"exactly_once\": true"), std::string::npos) << report;
  EXPECT_NE(report.find("\"records_committed\": 96000"), std::string::npos) << report;
  // The straggler on node-2 (worker-2) was restarted, and the report says why.
  const size_t kill = report.find("\"action\": \"KILL_RESTART\", \"worker\": \"worker-2\"");
  ASSERT_NE(kill, std::string::npos) << report;
  const std::string entry = report.substr(kill, report.find('}', kill) - kill);
  EXPECT_NE(entry.find("to_node=spare-0"), std::string::npos) << entry;
  EXPECT_NE(entry.find("from_node=node-2"), std::string::npos) << entry;
  // Why: the rule, and the evidence that it is about 4x slower than its peers
  // and that the restart saves more than it costs.
  EXPECT_NE(entry.find("\"rule\": \"antdt-nd:"), std::string::npos) << entry;
  const size_t slow = entry.find("capacity_slowdown=");
  ASSERT_NE(slow, std::string::npos) << entry;
  EXPECT_GT(std::stod(entry.substr(slow + 18)), 2.5) << entry;
  EXPECT_NE(entry.find("saved_seconds="), std::string::npos) << entry;
  EXPECT_NE(entry.find("cost_seconds="), std::string::npos) << entry;
  // Before any policy could act, the step deadline (stepDeadline 1.25, the
  // default) cut the straggler's slow steps: it trained part of its batch and
  // took the rest into its next step, and nothing was lost or doubled (above).
  const std::string straggler = Read(dir.File("work/worker-2.log"));
  EXPECT_NE(straggler.find("event=step_cut worker=worker-2"), std::string::npos) << straggler;
  const std::string html = Read(dir.File("report/report.html"));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("KILL_RESTART"), std::string::npos);
  // Nothing is left running: every process the runner started was stopped
  // ("wor[k]" so that the shell running pgrep does not match itself).
  EXPECT_NE(std::system(("pgrep -f '" + dir.path() + "/wor[k]' > /dev/null").c_str()), 0);
}

// --mode recommend: the same job decides as it would, carries nothing out,
// and says what it would have done, with a predicted saving, beside what the
// job lost; its metrics count the recommendations.
TEST(LocalRunner, RecommendModeCarriesNothingOutAndSaysWhatItWouldHaveDone) {
  TempDir dir;
  // A third of the records: left 4x slow, worker-2 holds the whole job back.
  std::string job = kJob;
  job.replace(job.find("records: 96000"), 14, "records: 32000");
  Write(dir.File("job.yaml"), job);
  Write(dir.File("scenario.yaml"), kScenario);
  Process run({BinPath("antdt"), "run", dir.File("job.yaml"), "--mode", "recommend", "--report",
               dir.File("report"), "--work-dir", dir.File("work"), "--quiet"},
              dir.File("run.log"));
  auto status = run.Wait(std::chrono::seconds(280));
  ASSERT_TRUE(status) << "antdt run did not finish:\n" << Read(dir.File("run.log"));
  const std::string out = Read(dir.File("run.log"));
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
  EXPECT_NE(out.find("RESULT: every record committed exactly once"), std::string::npos) << out;
  const nlohmann::json report = nlohmann::json::parse(Read(dir.File("report/report.json")));
  EXPECT_EQ(report["mode"], "Recommend");
  EXPECT_TRUE(report["actions"].empty()) << report["actions"].dump(1);
  const nlohmann::json& recs = report["recommendations"];
  const auto restart = std::find_if(recs.begin(), recs.end(), [](const nlohmann::json& r) {
    return r["action"] == "KILL_RESTART" && r["worker"] == "worker-2";
  });
  ASSERT_NE(restart, recs.end()) << recs.dump(1);
  // Recommended as antdt-nd acts: saving more than minSavingRatio (0.1) x cost.
  EXPECT_GT((*restart)["predicted_saving_seconds"].get<double>(),
            0.1 * (*restart)["cost_seconds"].get<double>());
  EXPECT_GT((*restart)["cost_seconds"].get<double>(), 0);
  EXPECT_NE((*restart)["rule"].get<std::string>().find("antdt-nd:"), std::string::npos);
  const nlohmann::json& summary = report["recommendation_summary"];
  EXPECT_GT(summary["predicted_saving_seconds"].get<double>(), 0);
  EXPECT_GT(summary["lost_to_stragglers_seconds"].get<double>(), 0) << "worker-2 was 4x slow";
  EXPECT_NE(out.find("recommended, not carried out (mode Recommend):"), std::string::npos) << out;
}

// The paper's mix under antdt-nd: the terminal and report.json tell of the
// same stragglers, each with one class and one cause; an action about a
// straggler names no cause its records do not; and a straggler restarted on a
// spare node is not reported a straggler there for what it was on the old one
// (it was: PERSISTENT on spare-0, cause network, from its first window).
TEST(LocalRunner, PaperMixTerminalAndReportTellOfTheSameStragglers) {
  TempDir dir;
  const std::string job = testing::SmallJob(dir, "paper-mix", "records: 400000", 100'000);
  Process run({BinPath("antdt"), "run", job, "--report", dir.File("report"), "--work-dir",
               dir.File("work"), "--quiet"},
              dir.File("run.log"));
  auto status = run.Wait(std::chrono::seconds(280));
  ASSERT_TRUE(status) << "antdt run did not finish:\n" << Read(dir.File("run.log"));
  const std::string out = Read(dir.File("run.log"));
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
  const nlohmann::json report =
      nlohmann::json::parse(Read(dir.File("report/report.json")), nullptr, false);
  ASSERT_FALSE(report.is_discarded()) << Read(dir.File("report/report.json"));
  const nlohmann::json& records = report["stragglers"];
  ASSERT_TRUE(records.is_array() && !records.empty()) << out;
  EXPECT_NE(out.find(absl::StrFormat("stragglers: %d, as the Monitor recorded them:\n",
                                     static_cast<int>(records.size()))),
            std::string::npos)
      << out;
  std::map<std::string, std::set<std::string>> causes;  // worker -> its records' causes
  for (const nlohmann::json& r : records) {
    const std::string worker = r["worker"], node = r["node"], cls = r["class"], cause = r["cause"];
    causes[worker].insert(cause);
    std::string upper = cls;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    const std::string head = absl::StrFormat("\n  %s on %s %s: slow from %.1f s", worker, node,
                                             upper, r["first_seen_seconds"].get<double>());
    const size_t at = out.find(head);
    ASSERT_NE(at, std::string::npos) << head << " not on the terminal:\n" << out;
    const std::string line = out.substr(at + 1, out.find('\n', at + 1) - at - 1);
    EXPECT_NE(line.find("; cause " + cause), std::string::npos) << line;
    EXPECT_EQ(node.rfind("spare-", 0), std::string::npos)
        << worker << " reported a straggler on the healthy spare it was restarted on: " << line;
  }
  // The scenario's: node-1's older hardware, node-5's persistent 4x.
  ASSERT_TRUE(causes.count("worker-1")) << out;
  EXPECT_TRUE(causes["worker-1"].count("hardware")) << out;
  EXPECT_TRUE(causes.count("worker-5")) << out;
  for (const nlohmann::json& a : report["actions"]) {
    const std::string subject = a.value("subject", ""), cause = a.value("cause", "");
    if (subject.empty() || cause.empty() || cause == "unknown") continue;
    EXPECT_TRUE(causes[subject].count(cause))
        << a.dump() << ": a cause none of " << subject << "'s records names";
  }
}

// Three parameter servers, the second on a node 3x slower from 2 s on, and
// checkpoints every 20 steps.
constexpr const char* kPsJob = R"(apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: ps-e2e
spec:
  dataset:
    records: 40000
    shardSize: 256
    epochs: 1
  model:
    features: 24
    learningRate: 0.2
    globalBatchSize: 192
  workers:
    replicas: 3
  parameterServers:
    replicas: 3
  checkpoint:
    path: /checkpoints/ps-e2e
    everySteps: 20
  stragglerPolicy:
    name: antdt-nd
    cooldown: 4s
    minSavingRatio: 0.5
  monitor:
    window: 1s
  local:
    scenario: scenario.yaml
    deviceTimePerSample: 1ms
    serverTimePerStep: 20ms
)";

constexpr const char* kPsScenario = R"(name: ps-e2e
nodes:
  - name: node-0
  - name: node-1
  - name: node-2
  - name: ps-node-0
    role: ps
  - name: ps-node-1
    role: ps
  - name: ps-node-2
    role: ps
  - name: spare-0
    spare: true
slowdowns:
  - node: ps-node-1
    kind: persistent
    factor: 3
    start: 3s
)";

// The held-out log-loss in a run's report.json.
double HeldOutLogLoss(const std::string& report) {
  const size_t at = report.find("\"held_out_log_loss\": ");
  return at == std::string::npos ? -1 : std::stod(report.substr(at + 21));
}

TEST(LocalRunner, MovesASlowParameterServerLiveAndLearnsWhatTheRunWithoutSlowdownLearns) {
  TempDir dir;
  Write(dir.File("job.yaml"), kPsJob);
  Write(dir.File("scenario.yaml"), kPsScenario);
  std::map<std::string, std::string> out, report;
  for (const std::string run : {"antdt-nd", "ideal"}) {
    std::vector<std::string> argv = {
        BinPath("antdt"), "run",        dir.File("job.yaml"),    "--report",
        dir.File(run),    "--work-dir", dir.File(run + "-work"), "--quiet"};
    if (run == "ideal") argv.push_back("--no-slowdown");
    Process p(argv, dir.File(run + ".log"));
    auto status = p.Wait(std::chrono::seconds(200));
    ASSERT_TRUE(status) << run << " did not finish:\n" << Read(dir.File(run + ".log"));
    out[run] = Read(dir.File(run + ".log"));
    ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out[run];
    EXPECT_NE(out[run].find("RESULT: every record committed exactly once"), std::string::npos)
        << out[run];
    report[run] = Read(dir.File(run + "/report.json"));
    EXPECT_NE(report[run].find("\"records_committed\": 40000"), std::string::npos) << report[run];
  }
  // ps-1 was moved off its slow node to the spare one, its state handed over
  // at a step boundary, and the old server stopped once the workers followed.
  const std::string& nd = out["antdt-nd"];
  const size_t kill = report["antdt-nd"].find("\"action\": \"KILL_RESTART\", \"worker\": \"ps-1\"");
  ASSERT_NE(kill, std::string::npos) << report["antdt-nd"];
  const std::string entry =
      report["antdt-nd"].substr(kill, report["antdt-nd"].find('}', kill) - kill);
  EXPECT_NE(entry.find("\"rule\": \"antdt-nd:ps-restart\""), std::string::npos) << entry;
  EXPECT_NE(entry.find("to_node=spare-0"), std::string::npos) << entry;
  EXPECT_NE(entry.find("from_node=ps-node-1"), std::string::npos) << entry;
  EXPECT_NE(nd.find("ps-1 moved to spare-0"), std::string::npos) << nd;
  EXPECT_NE(nd.find("live, handed over at step"), std::string::npos) << nd;
  EXPECT_NE(nd.find("ps-1: the server it moved from"), std::string::npos) << nd;
  EXPECT_EQ(report["ideal"].find("KILL_RESTART"), std::string::npos) << report["ideal"];
  // The move lost no update: the final model is as good as the one trained
  // without any slowdown (the runs differ only in timing: batches are formed
  // from whatever shards each worker got, so the figures are close, not equal).
  const double moved = HeldOutLogLoss(report["antdt-nd"]);
  const double ideal = HeldOutLogLoss(report["ideal"]);
  ASSERT_GT(moved, 0) << report["antdt-nd"];
  ASSERT_GT(ideal, 0) << report["ideal"];
  EXPECT_NEAR(moved, ideal, 0.03) << "held-out log-loss after the move " << moved
                                  << ", without slowdown " << ideal;
}

TEST(LocalRunner, AKilledParameterServerIsRestoredFromTheCheckpointAndEveryRecordCountsOnce) {
  TempDir dir;
  Write(dir.File("job.yaml"), kPsJob);
  Write(dir.File("scenario.yaml"), kPsScenario);
  Process run({BinPath("antdt"), "run", dir.File("job.yaml"), "--report", dir.File("report"),
               "--work-dir", dir.File("work"), "--policy", "none", "--no-slowdown", "--quiet"},
              dir.File("run.log"));
  // Once every server has a checkpoint and the workers have committed a few
  // steps past it (the next checkpoint is 20 steps away), ps-2 is SIGKILLed:
  // the restore then undoes commits.
  const std::string checkpoints = dir.File("work/checkpoint/ps");
  ASSERT_TRUE(antdt::testing::WaitFor(
      [&] {
        return trainer::LatestCommonCheckpoint(checkpoints, {"ps-0", "ps-1", "ps-2"}).has_value();
      },
      std::chrono::seconds(120)))
      << Read(dir.File("run.log"));
  auto acked = [&] {
    int n = 0;
    for (int w = 0; w < 3; ++w) {
      std::istringstream in(Read(dir.File("work/worker-" + std::to_string(w) + ".journal")));
      for (std::string line; std::getline(in, line);) n += line.rfind("A ", 0) == 0;
    }
    return n;
  };
  const int at_checkpoint = acked();
  ASSERT_TRUE(antdt::testing::WaitFor([&] { return acked() >= at_checkpoint + 6; },
                                      std::chrono::seconds(60)));
  // Its process id: the one whose command line names its ready file.
  const std::string pids = dir.File("ps-2.pid");
  ASSERT_EQ(std::system(("pgrep -f '" + dir.path() + "/work/ps-2.read[y]' > " + pids).c_str()), 0);
  const std::string pid = Read(pids);
  ASSERT_FALSE(pid.empty());
  ASSERT_EQ(kill(std::stoi(pid), SIGKILL), 0);
  auto status = run.Wait(std::chrono::seconds(200));
  ASSERT_TRUE(status) << "antdt run did not finish:\n" << Read(dir.File("run.log"));
  const std::string out = Read(dir.File("run.log"));
  ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
  EXPECT_NE(out.find("ps-2 restored on ps-node-2 from the checkpoint of step"), std::string::npos)
      << out;
  EXPECT_NE(out.find("RESULT: every record committed exactly once"), std::string::npos) << out;
  EXPECT_NE(out.find("commits undone by restores"), std::string::npos) << out;
  const std::string report = Read(dir.File("report/report.json"));
  EXPECT_NE(report.find("\"records_committed\": 40000"), std::string::npos) << report;
  EXPECT_NE(report.find("\"rule\": \"ps-restore\""), std::string::npos) << report;
}

TEST(LocalRunner, CtrlCStopsEveryChild) {
  TempDir dir;
  Write(dir.File("job.yaml"), kJob);
  Write(dir.File("scenario.yaml"), kScenario);
  Process run(
      {BinPath("antdt"), "run", dir.File("job.yaml"), "--work-dir", dir.File("work"), "--quiet"},
      dir.File("run.log"));
  // Wait until the job is really running: workers have committed records.
  ASSERT_TRUE(antdt::testing::WaitFor(
      [&] {
        return std::filesystem::exists(dir.File("work/worker-3.journal")) &&
               std::filesystem::file_size(dir.File("work/worker-3.journal")) > 0;
      },
      std::chrono::seconds(60)))
      << Read(dir.File("run.log"));
  const std::string pattern = "pgrep -f '" + dir.path() + "/wor[k]' > /dev/null";
  ASSERT_EQ(std::system(pattern.c_str()), 0) << "no child process seen running";
  run.Signal(SIGINT);
  auto status = run.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 130);
  EXPECT_NE(Read(dir.File("run.log")).find("interrupted"), std::string::npos);
  EXPECT_NE(std::system(pattern.c_str()), 0) << "a child outlived antdt run";
}

TEST(LocalRunner, BadManifestsStopBeforeAnythingStarts) {
  struct Case {
    std::string from;
    std::string to;
    std::string path;
  } cases[] = {
      {"  workers:\n    replicas: 4", "  workers:\n    replcas: 4", "spec.workers.replcas"},
      {"  workers:\n    replicas: 4", "  workers:\n    replicas: -2", "spec.workers.replicas"},
      {"name: antdt-nd", "name: fastest", "spec.stragglerPolicy.name"},
      {"window: 1s", "window: 10", "spec.monitor.window"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    std::string job = kJob;
    job.replace(job.find(c.from), c.from.size(), c.to);
    Write(dir.File("job.yaml"), job);
    Write(dir.File("scenario.yaml"), kScenario);
    Process run({BinPath("antdt"), "run", dir.File("job.yaml"), "--work-dir", dir.File("work")},
                dir.File("run.log"));
    auto status = run.Wait(std::chrono::seconds(20));
    ASSERT_TRUE(status);
    EXPECT_EQ(WEXITSTATUS(*status), 2) << c.path;
    EXPECT_NE(Read(dir.File("run.log")).find(c.path), std::string::npos)
        << c.path << "\n"
        << Read(dir.File("run.log"));
    EXPECT_FALSE(std::filesystem::exists(dir.File("work"))) << "something started for " << c.path;
  }
}

TEST(LocalRunner, AnUnknownPolicyOverrideStopsBeforeAnythingStarts) {
  TempDir dir;
  Write(dir.File("job.yaml"), kJob);
  Write(dir.File("scenario.yaml"), kScenario);
  Process run({BinPath("antdt"), "run", dir.File("job.yaml"), "--policy", "antdt-ndd", "--work-dir",
               dir.File("work")},
              dir.File("run.log"));
  auto status = run.Wait(std::chrono::seconds(20));
  ASSERT_TRUE(status);
  EXPECT_EQ(WEXITSTATUS(*status), 2);
  EXPECT_NE(Read(dir.File("run.log"))
                .find("--policy: must be one of antdt-nd, antdt-dd, custom, none, "
                      "backup-workers, lb-bsp, got \"antdt-ndd\""),
            std::string::npos)
      << Read(dir.File("run.log"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("work")));
}

}  // namespace
}  // namespace antdt
