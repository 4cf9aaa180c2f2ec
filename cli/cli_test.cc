// The `antdt` command line as a user meets it: --help and -h on every command,
// --version, and bad command lines (an unknown flag, a bad number, a missing
// or unreadable manifest, an unknown policy) answered with exit 2 and an
// error naming the flag and the nearest valid name, before any job starts;
// and where `antdt run` writes its report (a small job, run to its end).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/testing/testing.h"
#include "nlohmann/json.hpp"

namespace antdt {
namespace {

struct Outcome {
  int exit_code = -1;  // -1: killed or still running after 20 s
  std::string out;
  std::string err;
};

// `antdt ARGS...` as a process, its stdout and stderr apart; in `cwd` when
// given (else the test's, the build tree), for `timeout`.
Outcome Antdt(const std::vector<std::string>& args, const std::string& cwd = "",
              std::chrono::seconds timeout = std::chrono::seconds(20)) {
  testing::TempDir dir;
  const std::string cd = cwd.empty() ? "" : "cd '" + cwd + "' && ";
  std::vector<std::string> argv = {"/bin/sh", "-c", cd + "exec \"$@\" 2>'" + dir.File("err") + "'",
                                   "sh", testing::BinPath("antdt")};
  argv.insert(argv.end(), args.begin(), args.end());
  Outcome o;
  {
    testing::Process p(argv, dir.File("out"));
    std::optional<int> status = p.Wait(timeout);
    if (status && WIFEXITED(*status)) o.exit_code = WEXITSTATUS(*status);
  }
  o.out = ReadFile(dir.File("out")).value_or("");
  o.err = ReadFile(dir.File("err")).value_or("");
  return o;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Cli, HelpOnEveryCommandExitsZeroAndListsItsFlags) {
  const struct {
    std::vector<std::string> command;
    std::vector<std::string> mentions;
  } cases[] = {
      {{}, {"run", "bench", "demo", "monitor", "sim", "--version"}},
      {{"run"},
       {"JOB.yaml", "--report", "antdt-report", "--no-report", "--work-dir", "--policy",
        "--scenario", "--no-slowdown", "--quiet", "--prometheus", "plain"}},
      {{"bench"}, {"stragglers"}},
      {{"bench", "stragglers"},
       {"--job", "--scenario", "--policies", "--out", "--prometheus",
        "antdt-nd,none,backup-workers,lb-bsp"}},
      {{"demo"},
       {"--workers", "--records", "--shard-size", "--epochs", "--worker-kills", "--service-kills",
        "--record-us", "--seed", "--work-dir", "antdt-demo"}},
      {{"monitor"},
       {"--listen", "--ready-file", "--metrics-listen", "--config", "--state-dir", "--tick",
        "127.0.0.1:7071", "200ms"}},
      {{"sim"},
       {"--job", "--scenario", "--policies", "--seeds", "--jitter", "--out",
        "antdt-nd,none,antdt-dd,lb-bsp"}},
  };
  for (const auto& c : cases) {
    for (const char* help : {"--help", "-h"}) {
      std::vector<std::string> args = c.command;
      args.push_back(help);
      const Outcome o = Antdt(args);
      const std::string name = "antdt " + ::testing::PrintToString(args);
      EXPECT_EQ(o.exit_code, 0) << name << "\n" << o.out << o.err;
      EXPECT_EQ(o.err, "") << name;
      for (const std::string& m : c.mentions) EXPECT_TRUE(Has(o.out, m)) << name << ": " << m;
    }
  }
}

TEST(Cli, HelpAsACommandShowsTheHelp) {
  const Outcome o = Antdt({"help"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(Has(o.out, "monitor")) << o.out;
}

TEST(Cli, VersionPrintsTheProjectVersion) {
  const Outcome o = Antdt({"--version"});
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(o.out, "antdt " ANTDT_VERSION "\n");
}

TEST(Cli, NoCommandShowsTheHelpAndExitsTwo) {
  const Outcome o = Antdt({});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "run")) << o.err;
  EXPECT_TRUE(Has(o.err, "monitor")) << o.err;
}

TEST(Cli, BadCommandLinesExitTwoNamingTheFlag) {
  const struct {
    std::vector<std::string> args;
    std::string names;
  } cases[] = {
      {{"run", "job.yaml", "--bogus"}, "--bogus"},
      {{"--bogus"}, "--bogus"},
      {{"frobnicate"}, "frobnicate"},
      {{"run"}, "JOB.yaml"},
      {{"run", "job.yaml", "--report"}, "--report"},
      {{"bench"}, "antdt bench"},
      {{"bench", "stragglers", "--job", "job.yaml"}, "--out"},
      {{"demo", "--workers", "0"}, "--workers: must be an integer >= 1, got \"0\""},
      {{"demo", "--record-us", "-1"}, "--record-us: must be an integer >= 0, got \"-1\""},
      {{"demo", "--epochs", "two"}, "--epochs"},
      {{"monitor", "--tick", "5"}, "--tick"},
      {{"sim", "--job", "job.yaml"}, "--out"},
      {{"sim", "--job", "job.yaml", "--out", "o", "--seeds", "0"}, "--seeds"},
      {{"sim", "--job", "job.yaml", "--out", "o", "--jitter", "2"}, "--jitter"},
  };
  for (const auto& c : cases) {
    const Outcome o = Antdt(c.args);
    const std::string name = "antdt " + ::testing::PrintToString(c.args);
    EXPECT_EQ(o.exit_code, 2) << name << "\n" << o.err;
    EXPECT_TRUE(Has(o.err, c.names)) << name << ": " << o.err;
  }
}

// An unknown flag or command names the nearest known one of that command;
// it is named before a required flag it may have been meant as.
TEST(Cli, AnUnknownFlagOrCommandSuggestsTheNearestName) {
  const struct {
    std::vector<std::string> args;
    std::string says;
  } cases[] = {
      {{"run", "job.yaml", "--polcy", "none"},
       "antdt run: --polcy: unknown flag; did you mean \"--policy\"?\n"},
      {{"run", "job.yaml", "--no_slowdown"},
       "antdt run: --no_slowdown: unknown flag; did you mean \"--no-slowdown\"?\n"},
      {{"run", "job.yaml", "--work-dri=w"},
       "antdt run: --work-dri: unknown flag; did you mean \"--work-dir\"?\n"},
      {{"sim", "--jobs", "job.yaml", "--out", "o"},
       "antdt sim: --jobs: unknown flag; did you mean \"--job\"?\n"},
      {{"demo", "--worker", "3"},
       "antdt demo: --worker: unknown flag; did you mean \"--workers\"?"},
      {{"monitor", "--tik", "1s"}, "antdt monitor: --tik: unknown flag; did you mean \"--tick\"?"},
      {{"bench", "stragglers", "--polices", "none", "--job", "j", "--out", "o"},
       "antdt bench stragglers: --polices: unknown flag; did you mean \"--policies\"?"},
      {{"--verison"}, "antdt: --verison: unknown flag; did you mean \"--version\"?"},
      {{"rnu", "job.yaml"},
       "antdt: rnu: unknown command; did you mean \"run\"? (one of run, bench, demo, monitor, "
       "sim)"},
      {{"bench", "straglers"},
       "antdt bench: straglers: unknown command; did you mean \"stragglers\"?"},
      {{"run", "job.yaml", "--bogus"}, "antdt run: --bogus: unknown flag\n"},
  };
  for (const auto& c : cases) {
    const Outcome o = Antdt(c.args);
    const std::string name = "antdt " + ::testing::PrintToString(c.args);
    EXPECT_EQ(o.exit_code, 2) << name << "\n" << o.err;
    EXPECT_TRUE(Has(o.err, c.says)) << name << ": " << o.err;
    EXPECT_TRUE(Has(o.err, "--help: every flag")) << name << ": " << o.err;
  }
}

TEST(Cli, ReportAndNoReportExcludeEachOther) {
  const Outcome o = Antdt({"run", "job.yaml", "--report", "r", "--no-report"});
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_TRUE(Has(o.err, "--no-report")) << o.err;
}

TEST(Cli, AMissingManifestSaysWhy) {
  const Outcome o = Antdt({"run", "/nonexistent/job.yaml"});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err,
                  "antdt run: /nonexistent/job.yaml: cannot read the manifest: No such file or "
                  "directory"))
      << o.err;
}

TEST(Cli, AnUnknownPolicyStopsBeforeTheJobStarts) {
  testing::TempDir dir;
  const Outcome o = Antdt({"run", testing::SourcePath("examples/jobs/quickstart.yaml"), "--policy",
                           "foo", "--work-dir", dir.File("work")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "--policy: must be one of")) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("work")));
}

// A bad --mode is said as the help spells its values; an unreadable scenario
// names where its path came from (the flag, or the manifest's field with its
// value) and the path as resolved. Nothing starts.
TEST(Cli, ABadModeOrScenarioIsSaidAsTheUserWroteIt) {
  testing::TempDir dir;
  const std::string job = testing::SourcePath("examples/jobs/quickstart.yaml");
  Outcome o = Antdt({"run", job, "--mode", "acts", "--work-dir", dir.File("work")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "antdt run: --mode: must be act or recommend, got \"acts\"\n")) << o.err;
  o = Antdt({"run", job, "--scenario", "/nonexistent/s.yaml", "--work-dir", dir.File("work")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "--scenario: cannot read /nonexistent/s.yaml: No such file or directory"))
      << o.err;
  std::string manifest = ReadFile(job).value();
  const size_t at = manifest.find("scenario: ");
  ASSERT_NE(at, std::string::npos) << "the quickstart names its scenario";
  manifest.replace(at, manifest.find('\n', at) - at, "scenario: missing.yaml");
  std::ofstream(dir.File("job.yaml")) << manifest;
  o = Antdt({"run", dir.File("job.yaml"), "--work-dir", dir.File("work")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, dir.File("job.yaml") +
                             ": spec.local.scenario (\"missing.yaml\"): cannot "
                             "read " +
                             dir.File("missing.yaml")))
      << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("work")));
}

TEST(Cli, AMisspeltPolicySuggestsTheNearestOne) {
  testing::TempDir dir;
  const std::string job = testing::SourcePath("examples/jobs/quickstart.yaml");
  Outcome o = Antdt({"run", job, "--policy", "antdt-ndd", "--work-dir", dir.File("work")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err,
                  "antdt run: --policy: must be one of antdt-nd, antdt-dd, custom, none, "
                  "backup-workers, lb-bsp, got \"antdt-ndd\"; did you mean \"antdt-nd\"?\n"))
      << o.err;
  o = Antdt({"run", job, "--policy", "plian", "--work-dir", dir.File("work")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "got \"plian\"; did you mean \"plain\"?\n")) << o.err;
  o = Antdt({"run", job, "--policy", "fastest", "--work-dir", dir.File("work")});
  EXPECT_TRUE(Has(o.err, "got \"fastest\" (or plain)\n")) << o.err;
  o = Antdt({"sim", "--job", job, "--policies", "none,lb-bps", "--out", dir.File("sim")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err,
                  "antdt sim: --policies: unknown policy \"lb-bps\"; did you mean \"lb-bsp\"? "
                  "(one of antdt-nd, antdt-dd, none, lb-bsp)"))
      << o.err;
  o = Antdt({"bench", "stragglers", "--job", job, "--policies", "antdt-nd,non", "--out",
             dir.File("bench")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "--policies: unknown policy \"non\"; did you mean \"none\"?")) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("work")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("sim")));
  EXPECT_FALSE(std::filesystem::exists(dir.File("bench")));
}

// A small job of the demo trainer, two workers and no scenario.
constexpr char kSmallJob[] = R"(apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata: {name: small}
spec:
  dataset: {records: 2000, shardSize: 200}
  workers: {replicas: 2}
  local: {deviceTimePerSample: 50us}
)";

// `antdt run JOB.yaml` writes its report into antdt-report/ of the working
// directory and says so last; --report DIR elsewhere; --no-report nowhere.
TEST(Cli, RunWritesTheReportByDefaultAndSaysWhere) {
  testing::TempDir dir;
  std::ofstream(dir.File("job.yaml")) << kSmallJob;
  std::filesystem::create_directories(dir.File("cwd"));
  Outcome o = Antdt({"run", dir.File("job.yaml"), "--work-dir", dir.File("work")}, dir.File("cwd"),
                    std::chrono::seconds(100));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_TRUE(Has(o.out, "RESULT: every record committed exactly once")) << o.out;
  EXPECT_TRUE(o.out.size() > 50 && o.out.substr(o.out.rfind('\n', o.out.size() - 2) + 1) ==
                                       "report: antdt-report/report.html and report.json\n")
      << o.out;
  EXPECT_TRUE(std::filesystem::exists(dir.File("cwd/antdt-report/report.html")));
  EXPECT_TRUE(std::filesystem::exists(dir.File("cwd/antdt-report/report.json")));

  o = Antdt({"run", dir.File("job.yaml"), "--work-dir", dir.File("work2"), "--report",
             dir.File("elsewhere")},
            dir.File("cwd"), std::chrono::seconds(100));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_TRUE(Has(o.out, "report: " + dir.File("elsewhere") + "/report.html and report.json\n"))
      << o.out;
  EXPECT_TRUE(std::filesystem::exists(dir.File("elsewhere/report.html")));

  std::filesystem::remove_all(dir.File("cwd/antdt-report"));
  o = Antdt({"run", dir.File("job.yaml"), "--work-dir", dir.File("work3"), "--no-report"},
            dir.File("cwd"), std::chrono::seconds(100));
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_FALSE(Has(o.out, "report:")) << o.out;
  EXPECT_FALSE(std::filesystem::exists(dir.File("cwd/antdt-report")));
}

// `antdt sim` on the paper's mix: every policy's runs, with a confidence
// interval, in results.json (the benchmark's keys), results.md and chart.svg.
TEST(Cli, SimWritesEachPolicysRunsBesideTheNoSlowdownRun) {
  testing::TempDir dir;
  const Outcome o =
      Antdt({"sim", "--job", testing::SourcePath("examples/jobs/paper-mix.yaml"), "--seeds", "3",
             "--policies", "antdt-nd,none", "--out", dir.File("out")});
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  std::ifstream in(dir.File("out/results.json"));
  const nlohmann::json results = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(results.is_object()) << o.out;
  const nlohmann::json& runs = results["results"];
  ASSERT_EQ(runs.size(), 3u) << results.dump(2);
  EXPECT_EQ(runs[0]["policy"], "no-slowdown");
  for (const nlohmann::json& r : runs) {
    EXPECT_EQ(r["exactly_once"], true) << r.dump();
    EXPECT_EQ(r["records_committed"], 400000) << r.dump();
    EXPECT_EQ(r["jct_seconds_by_seed"].size(), 3u);
    const double jct = r["jct_seconds"];
    EXPECT_LE(r["jct_ci95_seconds"][0].get<double>(), jct);
    EXPECT_GE(r["jct_ci95_seconds"][1].get<double>(), jct);
    for (const char* key : {"ratio_to_no_slowdown", "steps", "estimated_saved_seconds", "actions",
                            "wall_seconds", "leases_shortened"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
  }
  EXPECT_LT(runs[1]["jct_seconds"].get<double>(), runs[2]["jct_seconds"].get<double>())
      << "antdt-nd is not faster than none: " << results.dump(2);
  EXPECT_FALSE(runs[1]["actions"].empty());
  EXPECT_TRUE(std::filesystem::exists(dir.File("out/results.md")));
  EXPECT_TRUE(std::filesystem::exists(dir.File("out/chart.svg")));
}

// `antdt sim --fleet`: the example fleet, three ways beside the ideal, every
// record of every job once; node memory keeps workers off the slow nodes.
TEST(Cli, SimFleetComparesNodeMemoryWithoutAndTheOracle) {
  testing::TempDir dir;
  const Outcome o = Antdt({"sim", "--fleet", testing::SourcePath("examples/sim/fleet.yaml"),
                           "--seeds", "2", "--out", dir.File("out")});
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_FALSE(Has(o.err, "event=")) << "the jobs' ledger events go to ledger.log";
  std::ifstream in(dir.File("out/results.json"));
  const nlohmann::json r = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(r.is_object()) << o.out;
  for (const char* way : {"without_node_memory", "with_node_memory", "oracle"}) {
    SCOPED_TRACE(way);
    ASSERT_TRUE(r.contains(way)) << r.dump(2);
    EXPECT_EQ(r[way]["exactly_once"], true);
    EXPECT_EQ(r[way]["total_jct_seconds"]["per_seed"].size(), 2u);
    for (const char* key : {"mean_job_slowdown", "p95_job_slowdown", "restarts"}) {
      EXPECT_TRUE(r[way].contains(key)) << key;
    }
    EXPECT_GE(r[way]["mean_job_slowdown"]["mean"].get<double>(), 1.0);
  }
  EXPECT_LT(r["with_node_memory"]["workers_placed_on_slow_nodes"]["mean"].get<double>(),
            r["without_node_memory"]["workers_placed_on_slow_nodes"]["mean"].get<double>());
  EXPECT_TRUE(std::filesystem::exists(dir.File("out/results.md")));
  EXPECT_TRUE(std::filesystem::exists(dir.File("out/ledger.log")));
}

TEST(Cli, SimFleetRefusesABadFleetNamingTheFieldAndRunsNothing) {
  testing::TempDir dir;
  std::ofstream(dir.File("big.yaml")) << "job: j.yaml\npool: {nodes: 8}\njobs: {workers: [2, 7]}\n";
  Outcome o = Antdt({"sim", "--fleet", dir.File("big.yaml"), "--out", dir.File("a")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err,
                  "big.yaml: jobs.workers: the largest job (7 workers and 2 spares) is "
                  "larger than the pool (pool.nodes 8)"))
      << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("a")));
  std::ofstream(dir.File("rate.yaml")) << "job: j.yaml\njobs: {arrivalEvery: -1s}\n";
  o = Antdt({"sim", "--fleet", dir.File("rate.yaml"), "--out", dir.File("b")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "rate.yaml: jobs.arrivalEvery")) << o.err;
  std::ofstream(dir.File("unknown.yaml")) << "job: j.yaml\npool: {slownodes: 3}\n";
  o = Antdt({"sim", "--fleet", dir.File("unknown.yaml"), "--out", dir.File("c")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "pool.slownodes: unknown field; did you mean \"slowNodes\"?")) << o.err;
  o = Antdt({"sim", "--fleet", dir.File("big.yaml"), "--job", "x.yaml", "--out", dir.File("d")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "--fleet: the fleet file names its job")) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("b")) || std::filesystem::exists(dir.File("c")) ||
               std::filesystem::exists(dir.File("d")));
}

TEST(Cli, SimRefusesWhatItCannotModelAndBadScenariosNamingTheField) {
  testing::TempDir dir;
  const std::string job = testing::SourcePath("examples/jobs/paper-mix.yaml");
  Outcome o = Antdt({"sim", "--job", job, "--policies", "backup-workers", "--out", dir.File("a")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "--policies: backup-workers: the simulator does not model")) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("a")));
  std::ofstream(dir.File("bad.yaml")) << "generate: {workers: 8, transient: {fraction: 1.5}}\n";
  o = Antdt({"sim", "--job", job, "--scenario", dir.File("bad.yaml"), "--out", dir.File("b")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err, "bad.yaml: generate.transient.fraction: must be in [0, 1]")) << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir.File("b")));
  std::ofstream(dir.File("near.yaml")) << "generate: {workers: 8, transient: {fracton: 0.1}}\n";
  o = Antdt({"sim", "--job", job, "--scenario", dir.File("near.yaml"), "--out", dir.File("c")});
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_TRUE(Has(o.err,
                  "near.yaml: generate.transient.fracton: unknown field; did you mean "
                  "\"fraction\"?"))
      << o.err;
}

}  // namespace
}  // namespace antdt
