// `antdt run JOB.yaml` and `antdt bench stragglers`: the local runner.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/server.h"
#include "operator/local/runner.h"
#include "operator/vocab/vocab.h"

namespace antdt::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_interrupted{false};

std::string SelfDir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

// Ctrl-C / SIGTERM: the runner sees the flag, stops every child and returns.
void WatchSignals() {
  std::thread([] {
    WaitForTerminationSignal();
    g_interrupted = true;
  }).detach();
}

absl::StatusOr<std::pair<manifest::Job, manifest::Scenario>> Load(
    const std::string& path, const std::string& scenario_flag) {
  auto text = ReadFile(path);
  if (!text.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": cannot read the manifest"));
  auto job = manifest::ParseJob(*text);
  if (!job.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", job.status().message()));
  }
  std::string scenario_path = scenario_flag;
  if (scenario_path.empty() && !job->local.scenario.empty()) {
    scenario_path = (fs::path(path).parent_path() / job->local.scenario).string();
  }
  manifest::Scenario scenario;
  if (!scenario_path.empty()) {
    auto stext = ReadFile(scenario_path);
    if (!stext.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.local.scenario: cannot read ", scenario_path));
    }
    auto parsed = manifest::ParseScenario(*stext);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(scenario_path, ": ", parsed.status().message()));
    }
    scenario = *parsed;
  } else {
    // No scenario: one node per worker at full speed, and one spare.
    scenario.name = "uniform";
    for (int i = 0; i < job->workers.replicas; ++i) {
      scenario.nodes.push_back({absl::StrCat("node-", i), 1.0, false, {}});
    }
    scenario.nodes.push_back({"spare-0", 1.0, true, {}});
  }
  return std::make_pair(*job, scenario);
}

local::RunOptions Options(const std::string& work_dir, bool quiet) {
  local::RunOptions o;
  o.bin_dir = SelfDir();
  o.work_dir = work_dir;
  o.interrupted = &g_interrupted;
  const bool tty = isatty(STDOUT_FILENO) && !quiet;
  if (tty) {
    o.on_status = [](const std::string& line) {
      std::printf("\r\033[K%s", line.c_str());
      std::fflush(stdout);
    };
  }
  o.on_event = [tty](const std::string& line) {
    std::printf(tty ? "\r\033[K%s\n" : "%s\n", line.c_str());
    std::fflush(stdout);
  };
  return o;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv, {"report", "work-dir", "policy", "scenario"},
                          {"no-slowdown", "quiet"});
  if (!flags.ok() || flags->positional.size() != 1) {
    std::fprintf(stderr,
                 "usage: antdt run JOB.yaml [--report DIR] [--work-dir DIR] "
                 "[--policy NAME] [--scenario FILE] [--no-slowdown]\n%s\n",
                 flags.ok() ? "" : std::string(flags.status().message()).c_str());
    return 2;
  }
  auto loaded = Load(flags->positional[0], flags->Get("scenario"));
  if (!loaded.ok()) {
    std::fprintf(stderr, "antdt run: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  const auto& [job, scenario] = *loaded;
  local::RunOptions o =
      Options(flags->Get("work-dir", "antdt-run/" + job.name), flags->Has("quiet"));
  if (const std::string name = flags->Get("policy"); !name.empty()) {
    auto policy = vocab::ParseOneOf("--policy", name, vocab::AllPolicies());
    if (!policy.ok()) {
      std::fprintf(stderr, "antdt run: %s\n", std::string(policy.status().message()).c_str());
      return 2;
    }
    o.policy_override = *policy;
  }
  o.no_slowdown = flags->Has("no-slowdown");
  WatchSignals();
  auto result = local::RunJob(job, scenario, o);
  if (o.on_status) std::printf("\r\033[K");
  if (!result.ok()) {
    std::fprintf(stderr, "antdt run: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kCancelled ? 130 : 1;
  }
  std::printf("%s", local::ReportText(*result).c_str());
  if (flags->Has("report")) {
    if (auto s = local::WriteReport(*result, flags->Get("report")); !s.ok()) {
      std::fprintf(stderr, "antdt run: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::printf("report: %s/report.html and report.json\n", flags->Get("report").c_str());
  }
  return result->verification.exactly_once() ? 0 : 1;
}

int BenchCommand(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "stragglers") {
    std::fprintf(stderr,
                 "usage: antdt bench stragglers --job JOB.yaml [--scenario FILE] "
                 "--policies antdt-nd,none,... --out DIR\n");
    return 2;
  }
  auto flags = ParseFlags(argc - 1, argv + 1, {"job", "scenario", "policies", "out"});
  if (!flags.ok() || !flags->Has("job") || !flags->Has("out")) {
    std::fprintf(stderr, "antdt bench stragglers: --job and --out are required%s%s\n",
                 flags.ok() ? "" : ": ",
                 flags.ok() ? "" : std::string(flags.status().message()).c_str());
    return 2;
  }
  auto loaded = Load(flags->Get("job"), flags->Get("scenario"));
  if (!loaded.ok()) {
    std::fprintf(stderr, "antdt bench: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  const auto& [job, scenario] = *loaded;
  // The ideal run (no slowdown, no policy), then one run per policy.
  struct BenchRun {
    std::string name;
    vocab::Policy policy;
    bool ideal;
  };
  std::vector<BenchRun> runs = {{"no-slowdown", vocab::Policy::kNone, true}};
  const std::vector<std::string> names = absl::StrSplit(
      flags->Get("policies", "antdt-nd,none,backup-workers,lb-bsp"), ',', absl::SkipEmpty());
  for (const std::string& p : names) {
    const std::optional<vocab::Policy> policy = vocab::ParsePolicy(p);
    if (!policy || *policy == vocab::Policy::kCustom) {  // custom needs the job's rules
      std::fprintf(stderr, "antdt bench: --policies: unknown policy \"%s\"\n", p.c_str());
      return 2;
    }
    runs.push_back({p, *policy, false});
  }
  const std::string out = flags->Get("out");
  fs::create_directories(out);
  WatchSignals();
  std::vector<local::RunResult> results;
  for (const auto& [name, policy, ideal] : runs) {
    local::RunOptions o = Options(out + "/runs/" + name, true);
    o.no_slowdown = ideal;
    o.policy_override = policy;
    std::printf("== %s ==\n", name.c_str());
    std::fflush(stdout);
    auto r = local::RunJob(job, scenario, o);
    if (!r.ok()) {
      std::fprintf(stderr, "antdt bench: %s: %s\n", name.c_str(),
                   std::string(r.status().message()).c_str());
      return 1;
    }
    (void)local::WriteReport(*r, out + "/runs/" + name + "/report");
    results.push_back(*r);
    std::printf("%s: %.1f s, %zu actions, exactly once: %s\n", name.c_str(), r->jct_seconds,
                r->actions.size(), r->verification.exactly_once() ? "yes" : "NO");
  }
  const double ideal = results.front().jct_seconds;
  std::string json = "{\n  \"scenario\": \"" + scenario.name + "\",\n  \"results\": [";
  std::string table = absl::StrFormat(
      "| policy | JCT (s) | ratio to no-slowdown | actions | records committed | exactly once "
      "|\n|---|---|---|---|---|---|\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const local::RunResult& r = results[i];
    std::string actions;
    for (size_t k = 0; k < r.actions.size(); ++k) {
      absl::StrAppendFormat(&actions,
                            "%s{\"at_seconds\": %.2f, \"action\": \"%s\", \"worker\": \"%s\"}",
                            k ? ", " : "", r.actions[k].at_seconds,
                            vocab::Name(r.actions[k].action), r.actions[k].worker);
    }
    absl::StrAppendFormat(&json,
                          "%s\n    {\"policy\": \"%s\", \"jct_seconds\": %.3f, "
                          "\"ratio_to_no_slowdown\": %.3f, \"records_committed\": %d, "
                          "\"exactly_once\": %s, \"actions\": [%s]}",
                          i ? "," : "", r.policy, r.jct_seconds, r.jct_seconds / ideal,
                          r.records_committed, r.verification.exactly_once() ? "true" : "false",
                          actions);
    absl::StrAppendFormat(&table, "| %s | %.1f | %.2f | %d | %d | %s |\n", r.policy, r.jct_seconds,
                          r.jct_seconds / ideal, static_cast<int>(r.actions.size()),
                          r.records_committed, r.verification.exactly_once() ? "yes" : "no");
  }
  json += "\n  ]\n}\n";
  // A bar chart of the ratios.
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"640\" height=\"" +
                    std::to_string(40 + 30 * results.size()) +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  double max_ratio = 1;
  for (const auto& r : results) max_ratio = std::max(max_ratio, r.jct_seconds / ideal);
  for (size_t i = 0; i < results.size(); ++i) {
    const double ratio = results[i].jct_seconds / ideal;
    const double y = 20 + 30.0 * static_cast<double>(i);
    absl::StrAppendFormat(
        &svg,
        "<text x=\"4\" y=\"%.0f\">%s</text><rect x=\"130\" y=\"%.0f\" "
        "width=\"%.1f\" height=\"20\" fill=\"%s\"/><text x=\"%.1f\" y=\"%.0f\">"
        "%.2fx (%.1f s)</text>\n",
        y + 14, results[i].policy, y, 400 * ratio / max_ratio,
        results[i].policy == vocab::Name(vocab::Policy::kAntdtNd) ? "#2ca02c" : "#888",
        135 + 400 * ratio / max_ratio, y + 14, ratio, results[i].jct_seconds);
  }
  svg += "</svg>\n";
  (void)WriteFileAtomically(out + "/results.json", json);
  (void)WriteFileAtomically(out + "/results.md", table);
  (void)WriteFileAtomically(out + "/chart.svg", svg);
  std::printf("\n%s\nresults: %s/results.json, results.md, chart.svg\n", table.c_str(),
              out.c_str());
  return 0;
}

}  // namespace antdt::cli
