// `antdt bench causes`: does the Monitor name the cause of a straggler right?
// Each case runs a small job on the local runner with one real slowdown on
// node-2 from 5 s on (policy none, so nothing hides it) or none at all (a
// healthy control), and scores the Monitor's straggler records: every slow
// window of node-2's worker after the start is a vote for the cause named in
// it; any record of another worker, or before the start, is a healthy worker
// flagged. An injected case whose worker was never recorded is missed.
#include "cli/bench_causes.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/vocab/vocab.h"
#include "backends/local/cgroup.h"
#include "backends/local/runner.h"
#include "cli/local_job.h"
#include "common/config.h"
#include "common/server.h"
#include "common/spelling.h"

namespace antdt::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kNode[] = "node-2";
constexpr int64_t kStartMs = 5'000;

struct CauseCase {
  std::string name;
  std::string via;  // "" for a healthy control
  double factor = 1;
  v1::Cause expected = v1::CAUSE_UNSPECIFIED;
};

std::vector<CauseCase> AllCases() {
  return {
      {"healthy-1", "", 1, v1::CAUSE_UNSPECIFIED},
      {"cpu-contention", "cpu-contention", 3, v1::CPU_CONTENTION},
      {"cpu-quota", "cpu-quota", 6, v1::CPU_THROTTLING},  // a sixth of one core
      {"slow-data", "slow-data", 3, v1::DATA_LOADING},
      {"gpu-throttle", "gpu-throttle", 2.5, v1::GPU_THROTTLING},
      {"healthy-2", "", 1, v1::CAUSE_UNSPECIFIED},
  };
}

// Causes the Monitor can name that no case injects, and why.
json NotInjected() {
  return {
      {"memory_pressure",
       "not injected: these machines have no swap, so a memory cgroup limit below a worker's "
       "working set kills it (OOM) instead of stalling it; the signal (PSI memory) is unit-tested"},
      {"io_pressure",
       "not injected: the demo trainer does no disk I/O on its step's path, and every emulated "
       "node shares one disk, so I/O contention cannot single one node out here"},
      {"network",
       "not injected separately: delay on the path to the data service is the slow-data case "
       "(named data_loading, as a slow source is); the step's barrier wait is not network time, "
       "and packet drops need a real interface (loopback is ignored)"},
      {"hardware", "named from node labels (antdt.io/hardware), not measured: see paper-mix"},
  };
}

std::string JobYaml(double records) {
  return absl::StrFormat(R"(apiVersion: antdt.io/v1alpha1
kind: AntDTJob
metadata:
  name: causes
spec:
  dataset:
    records: %.0f
    shardSize: 64
    epochs: 1
  workers:
    replicas: 4
  parameterServers:
    replicas: 1
  model:
    globalBatchSize: 256
  stragglerPolicy:
    name: none
  monitor:
    window: 1s
    allowedLateness: 200ms
  local:
    scenario: scenario.yaml
    deviceTimePerSample: 300us
    deviceWork: cpu
)",
                         records);
}

std::string ScenarioYaml(const CauseCase& c) {
  std::string yaml =
      "name: causes\nnodes:\n  - name: node-0\n  - name: node-1\n  - name: node-2\n"
      "  - name: node-3\n";
  if (!c.via.empty()) {
    absl::StrAppendFormat(&yaml,
                          "slowdowns:\n  - node: %s\n    kind: persistent\n    factor: %g\n"
                          "    start: %dms\n    via: %s\n",
                          kNode, c.factor, kStartMs, c.via);
  }
  return yaml;
}

struct Score {
  std::map<std::string, int> named;  // cause label -> node-2's slow windows after the start
  int flagged = 0;                   // records of healthy workers (or before the start)
  double detected_seconds = -1;      // node-2's first record after the start
};

Score ScoreRun(const local::RunResult& r, const CauseCase& c) {
  Score s;
  for (const v1::StragglerRecord& rec : r.stragglers) {
    const bool injected = !c.via.empty() && rec.node() == kNode &&
                          local::JobSeconds(r, rec.last_seen_unix_ms()) * 1000 > kStartMs;
    if (!injected) {
      ++s.flagged;
      continue;
    }
    for (const auto& [cause, n] : rec.cause_windows()) s.named[cause] += n;
    const double detected = local::JobSeconds(r, rec.detected_unix_ms());
    if (s.detected_seconds < 0 || detected < s.detected_seconds) s.detected_seconds = detected;
  }
  return s;
}

struct CausesFlags {
  std::string out;
  std::string cases;  // comma-separated names; "" all
  double records = 60'000;
};

int RunCauses(const CausesFlags& f) {
  std::vector<CauseCase> cases = AllCases();
  if (!f.cases.empty()) {
    std::vector<std::string> names;
    for (const CauseCase& c : cases) names.push_back(c.name);
    std::vector<CauseCase> picked;
    for (absl::string_view name : absl::StrSplit(f.cases, ',', absl::SkipEmpty())) {
      auto it = std::find_if(cases.begin(), cases.end(),
                             [&](const CauseCase& c) { return c.name == name; });
      if (it == cases.end()) {
        std::fprintf(stderr, "antdt bench causes: --cases: unknown case \"%s\"%s (one of %s)\n",
                     std::string(name).c_str(), DidYouMean(std::string(name), names).c_str(),
                     absl::StrJoin(names, ", ").c_str());
        return 2;
      }
      picked.push_back(*it);
    }
    cases = picked;
  }
  BlockTerminationSignals();
  fs::create_directories(f.out);
  WatchSignals();
  json results = {{"cases", json::array()}, {"not_injected", NotInjected()}};
  std::map<std::string, std::map<std::string, int>> confusion;
  std::vector<std::string> injected;
  int correct = 0, total = 0, flagged = 0, healthy_runs = 0;
  std::vector<std::string> missed;  // injected, never recorded a straggler
  for (const CauseCase& c : cases) {
    if (c.via == "cpu-quota" && access(local::CpuCgroupRoot().c_str(), W_OK) != 0) {
      // The runner would emulate it: nothing to measure, so not a case here.
      const std::string why = "needs a writable " + local::CpuCgroupRoot() + " (root)";
      std::printf("%s: skipped: %s\n", c.name.c_str(), why.c_str());
      results["cases"].push_back({{"name", c.name}, {"via", c.via}, {"skipped", why}});
      continue;
    }
    const std::string dir = absl::StrCat(f.out, "/cases/", c.name);
    fs::create_directories(dir);
    if (!WriteFileAtomically(dir + "/job.yaml", JobYaml(f.records)).ok() ||
        !WriteFileAtomically(dir + "/scenario.yaml", ScenarioYaml(c)).ok()) {
      std::fprintf(stderr, "antdt bench causes: cannot write into %s\n", dir.c_str());
      return 1;
    }
    auto loaded = LoadLocalJob(dir + "/job.yaml", "");
    if (!loaded.ok()) {
      std::fprintf(stderr, "antdt bench causes: %s\n", loaded.status().ToString().c_str());
      return 1;
    }
    std::printf("== %s ==\n", c.name.c_str());
    std::fflush(stdout);
    auto r =
        local::RunJob(loaded->job, loaded->scenario, RunOptionsFor(*loaded, dir + "/run", true));
    json row = {{"name", c.name}, {"via", c.via}, {"node", c.via.empty() ? "" : kNode}};
    if (!r.ok()) {
      // A case that cannot run here is skipped, and says why.
      row["skipped"] = std::string(r.status().message());
      std::printf("%s: skipped: %s\n", c.name.c_str(), row["skipped"].get<std::string>().c_str());
      results["cases"].push_back(row);
      continue;
    }
    (void)local::WriteReport(*r, dir + "/report");
    const Score s = ScoreRun(*r, c);
    flagged += s.flagged;
    row["jct_seconds"] = r->jct_seconds;
    row["healthy_flagged"] = s.flagged;
    if (c.via.empty()) {
      ++healthy_runs;
    } else {
      const std::string want = vocab::CauseLabel(c.expected);
      injected.push_back(want);
      int windows = 0;
      for (const auto& [cause, n] : s.named) {
        windows += n;
        confusion[want][cause] += n;
      }
      const int right = s.named.count(want) ? s.named.at(want) : 0;
      if (windows == 0) missed.push_back(c.name);
      correct += right;
      total += windows;
      row.update({{"expected", want},
                  {"factor", c.factor},
                  {"slow_windows", windows},
                  {"named", s.named},
                  {"named_right", right},
                  {"detected_seconds", s.detected_seconds}});
    }
    std::printf("%s: %.1f s, %s\n", c.name.c_str(), r->jct_seconds, row.dump().c_str());
    results["cases"].push_back(row);
  }
  results["injected_causes"] = injected;
  results["confusion_matrix"] = confusion;
  results["slow_windows"] = total;
  results["accuracy"] = total > 0 ? static_cast<double>(correct) / total : 0.0;
  results["healthy_flagged"] = flagged;
  results["healthy_runs"] = healthy_runs;
  results["missed"] = missed;
  if (!WriteFileAtomically(f.out + "/results.json", results.dump(2) + "\n").ok()) {
    std::fprintf(stderr, "antdt bench causes: cannot write %s/results.json\n", f.out.c_str());
    return 1;
  }
  std::printf(
      "\n%d injected causes, accuracy %.3f (%d of %d slow windows named right), %d "
      "healthy flagged, %d missed%s\nresults: %s/results.json\n",
      static_cast<int>(injected.size()), results["accuracy"].get<double>(), correct, total, flagged,
      static_cast<int>(missed.size()),
      missed.empty() ? "" : (" (" + absl::StrJoin(missed, ", ") + ")").c_str(), f.out.c_str());
  return 0;
}

}  // namespace

std::pair<CLI::App*, std::function<int()>> AddBenchCausesCommand(CLI::App* bench) {
  CLI::App* app = bench->add_subcommand(
      "causes", "inject each cause the Monitor names, for real, and score what it says");
  app->footer(
      "Cases: healthy-1, cpu-contention, cpu-quota (root), slow-data, gpu-throttle (the test\n"
      "NVML library), healthy-2. Writes OUT/results.json (injected_causes, confusion_matrix,\n"
      "accuracy, healthy_flagged) and each case's job, logs and report under OUT/cases/.");
  auto f = std::make_shared<CausesFlags>();
  app->add_option("--out", f->out, "where the results go")->type_name("DIR")->required();
  app->add_option("--cases", f->cases, "the cases to run, comma-separated [all]")
      ->type_name("C1,C2,...");
  app->add_option("--records", f->records, "records per case's job")->capture_default_str();
  return {app, [f] { return RunCauses(*f); }};
}

}  // namespace antdt::cli
