// The simulator against the real thing, as figures: `antdt bench stragglers`
// (real processes: sharding service, Monitor, agents, parameter servers and
// demo trainers on 127.0.0.1) and `antdt sim --seeds 3` (the same Monitor,
// control loop and ledger code in simulated time) on the same example jobs,
// one after the other. For each policy it prints both job completion times,
// their difference, and the same comparison of each policy's ratio to the
// no-slowdown run of its own backend (which cancels how fast this machine
// happens to be while the real run ran). A benchmark, not a test: the real
// run's time moves several percent between runs on a shared machine
// (docs/simulator.md has the figures of several runs).
//
// usage: antdt-bench-calibration [--out DIR] [--only CASE]
// (CASE: paper-mix, paper-mix-tail, heterogeneous). paper-mix-tail is
// paper-mix in shards of 5,000 records (25,000 per worker): under `none` its
// 4x persistent straggler holds a large lease at the epoch's end, which the
// guided layout and the early lease end decide (the tail); each run's leases
// ended early are its results.json's leases_shortened (the sharding service's
// GetProgress in the real run, the ledger's in the simulated one).
// Binaries from $ANTDT_BIN_DIR (default build/bin), examples from
// $ANTDT_SOURCE_DIR (default .). Writes DIR/calibration.json; exit 1 when a
// run failed or committed a record other than exactly once.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/process.h"
#include "common/testing/testing.h"

namespace antdt {
namespace {

using antdt::testing::BinPath;

struct Case {
  std::string label;         // --only LABEL; its files under DIR/LABEL
  std::string name;          // examples/jobs/NAME.yaml
  std::string records_line;  // replaced by `records`
  int64_t records = 0;
  std::string policies;
  std::string from, to;  // a further line replaced, if any
};

// At 200,000 records for paper-mix: at 100,000 the two restarts and three
// re-sizings are a quarter of the job.
const std::vector<Case> kCases = {
    {"paper-mix", "paper-mix", "records: 400000", 200'000, "antdt-nd,lb-bsp,none", "", ""},
    {"paper-mix-tail", "paper-mix", "records: 400000", 200'000, "antdt-nd,none", "shardSize: 250",
     "shardSize: 5000"},
    {"heterogeneous", "heterogeneous", "records: 200000", 100'000, "antdt-dd", "", ""},
};

// Leases each run's sharding service ended early (results.json's
// leases_shortened, from its GetProgress), per policy: "antdt-nd 10, none 0".
std::string LeasesShortened(const std::string& out) {
  const nlohmann::json parsed = nlohmann::json::parse(ReadFile(out + "/results.json").value_or(""),
                                                      nullptr, /*allow_exceptions=*/false);
  std::string said;
  if (parsed.is_discarded() || !parsed.contains("results")) return "unknown";
  for (const nlohmann::json& r : parsed["results"]) {
    const nlohmann::json n = r.value("leases_shortened", nlohmann::json());
    absl::StrAppend(&said, said.empty() ? "" : ", ", r.value("policy", "?"), " ",
                    n.is_number() ? std::to_string(n.get<int64_t>()) : std::string("-"));
  }
  return said;
}

// Runs `argv` and returns results.json's JCT by policy; empty on a failure
// (said on stderr), also when a run was not exactly once.
std::map<std::string, double> JctByPolicy(const std::vector<std::string>& argv,
                                          const std::string& out) {
  const std::string log = out + ".log";
  Process p(argv, log);
  const std::optional<int> status = p.Wait(std::chrono::seconds(900));
  if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    std::fprintf(stderr, "%s failed:\n%s\n", argv[1].c_str(), Tail(log, 4000).c_str());
    return {};
  }
  const std::string text = ReadFile(out + "/results.json").value_or("");
  const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.contains("results")) {
    std::fprintf(stderr, "%s/results.json: missing or not JSON\n", out.c_str());
    return {};
  }
  std::map<std::string, double> jct;
  for (const nlohmann::json& r : parsed["results"]) {
    if (r.value("exactly_once", false) != true) {
      std::fprintf(stderr, "%s: %s was not exactly once\n", out.c_str(),
                   r.value("policy", "?").c_str());
      return {};
    }
    jct[r["policy"].get<std::string>()] = r["jct_seconds"].get<double>();
  }
  return jct;
}

// One case: both backends, the table, its rows into `rows`. False on a failure.
bool RunCase(const Case& c, const std::string& top, nlohmann::json* rows) {
  const std::string dir = top + "/" + c.label;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const absl::StatusOr<std::string> written =
      testing::WriteExampleJob(dir, c.name, c.records_line, c.records);
  if (!written.ok()) {
    std::fprintf(stderr, "%s\n", std::string(written.status().message()).c_str());
    return false;
  }
  const std::string& job = *written;
  if (!c.from.empty()) {
    const std::string text = ReadFile(job).value_or("");
    if (text.find(c.from) == std::string::npos ||
        !WriteFileAtomically(job, absl::StrReplaceAll(text, {{c.from, c.to}})).ok()) {
      std::fprintf(stderr, "%s: no line \"%s\" to replace\n", job.c_str(), c.from.c_str());
      return false;
    }
  }
  const std::string run_out = dir + "/run";
  const std::string sim_out = dir + "/sim";
  const auto run = JctByPolicy({BinPath("antdt"), "bench", "stragglers", "--job", job, "--policies",
                                c.policies, "--out", run_out},
                               run_out);
  const auto sim = JctByPolicy({BinPath("antdt"), "sim", "--job", job, "--policies", c.policies,
                                "--seeds", "3", "--out", sim_out},
                               sim_out);
  if (run.empty() || sim.empty() || !run.count("no-slowdown") || !sim.count("no-slowdown")) {
    return false;
  }
  const double run_ideal = run.at("no-slowdown"), sim_ideal = sim.at("no-slowdown");
  std::printf(
      "| %s, %lld records | run (s) | sim (s) | difference | run ratio | sim ratio | "
      "difference |\n|---|---|---|---|---|---|---|\n",
      c.label.c_str(), static_cast<long long>(c.records));
  for (const auto& [policy, real] : run) {
    auto it = sim.find(policy);
    if (it == sim.end()) {
      std::fprintf(stderr, "%s: %s was not simulated\n", c.name.c_str(), policy.c_str());
      return false;
    }
    const double diff = (it->second - real) / real;
    const double run_ratio = real / run_ideal, sim_ratio = it->second / sim_ideal;
    const double ratio_diff = (sim_ratio - run_ratio) / run_ratio;
    std::printf("| %s | %.1f | %.1f | %+.1f%% | %.3f | %.3f | %+.1f%% |\n", policy.c_str(), real,
                it->second, diff * 100, run_ratio, sim_ratio, ratio_diff * 100);
    rows->push_back({{"job", c.label},
                     {"records", c.records},
                     {"policy", policy},
                     {"run_jct_seconds", real},
                     {"sim_jct_seconds", it->second},
                     {"jct_difference", diff},
                     {"run_ratio_to_no_slowdown", run_ratio},
                     {"sim_ratio_to_no_slowdown", sim_ratio},
                     {"ratio_difference", ratio_diff}});
  }
  std::printf("\nleases ended early: real runs %s; simulated (seed 1) %s\n\n",
              LeasesShortened(run_out).c_str(), LeasesShortened(sim_out).c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace
}  // namespace antdt

int main(int argc, char** argv) {
  using namespace antdt;
  std::string out, only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--out" || arg == "--only") && i + 1 < argc) {
      (arg == "--out" ? out : only) = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: antdt-bench-calibration [--out DIR] [--only CASE]\n"
                   "unknown argument: %s\n",
                   arg.c_str());
      return 2;
    }
  }
  std::optional<testing::TempDir> temp;
  if (out.empty()) {
    temp.emplace();
    out = temp->path();
  } else if (std::error_code ec; !std::filesystem::create_directories(out, ec) && ec) {
    std::fprintf(stderr, "--out %s: cannot create it\n", out.c_str());
    return 2;
  }
  nlohmann::json rows = nlohmann::json::array();
  bool ok = true, ran = false;
  for (const Case& c : kCases) {
    if (!only.empty() && c.label != only) continue;
    ran = true;
    ok = RunCase(c, out, &rows) && ok;
  }
  if (!ran) {
    std::fprintf(stderr, "--only %s: no such case (paper-mix, paper-mix-tail, heterogeneous)\n",
                 only.c_str());
    return 2;
  }
  const nlohmann::json doc = {{"benchmark", "calibration"}, {"seeds", 3}, {"rows", rows}};
  if (!WriteFileAtomically(out + "/calibration.json", doc.dump(2) + "\n").ok()) ok = false;
  std::printf("figures: %s/calibration.json\n", out.c_str());
  return ok ? 0 : 1;
}
