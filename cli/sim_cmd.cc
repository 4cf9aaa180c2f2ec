// `antdt sim`: the job simulated under each policy (and once with no
// slowdown) over several seeds, through the real Monitor, control loop and
// sharding ledger (backends/sim): job completion time per policy with a 95%
// confidence interval, the actions taken, and what the control plane had to
// sustain. results.json has the shape of `antdt bench stragglers`'s.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "api/manifest/manifest.h"
#include "api/vocab/vocab.h"
#include "backends/local/svg_chart.h"
#include "backends/sim/scenario_file.h"
#include "backends/sim/simulator.h"
#include "cli/commands.h"
#include "cli/fleet_cmd.h"
#include "cli/results.h"
#include "common/config.h"
#include "common/spelling.h"
#include "common/status.h"
#ifdef ANTDT_MIMALLOC
#include <mimalloc.h>
#endif

namespace antdt::cli {
namespace {

namespace fs = std::filesystem;

struct SimFlags {
  std::string fleet;
  std::string job;
  std::string scenario;
  std::string policies = "antdt-nd,none,antdt-dd,lb-bsp";
  int seeds = 5;
  double jitter = 0.05;
  std::string out;
};

// One policy over every seed.
struct PolicyRuns {
  std::string name;
  std::vector<sim::SimResult> runs;
  double mean = 0;
  double half_width = 0;  // of the 95% confidence interval of the mean JCT
  // Over every seed (Summarize):
  bool exactly_once = true;
  double saved = 0, lost = 0;  // means of the loop's estimates
  double wall = 0;             // sums
  int64_t reports = 0, calls = 0;
  int64_t cut_steps = 0, cut_samples = 0;  // the step deadline's cuts
  int restarts = 0;
  double capacity_bound = 0;  // mean over seeds (SimResult::capacity_bound_seconds)
};

// The share of the straggler slowdown a policy took away:
// (JCT_none - JCT_policy) / (JCT_none - JCT_no-slowdown); none when the run
// has no `none` or no slowdown.
std::optional<double> Mitigated(double policy, double none, double ideal) {
  if (none < 0 || none - ideal <= 1e-9) return std::nullopt;
  return (none - policy) / (none - ideal);
}

void Summarize(PolicyRuns& p) {
  std::vector<double> jcts;
  for (const auto& r : p.runs) jcts.push_back(r.jct_seconds);
  const MeanCi ci = MeanAndCi(jcts);
  p.mean = ci.mean;
  p.half_width = ci.half_width;
  const double n = static_cast<double>(p.runs.size());
  for (const sim::SimResult& r : p.runs) {
    p.exactly_once = p.exactly_once && r.exactly_once();
    p.saved += r.estimated_saved_seconds / n;
    p.lost += r.estimated_lost_seconds / n;
    p.wall += r.wall_seconds;
    p.reports += r.step_reports;
    p.calls += r.ledger_calls;
    p.restarts += r.restarts;
    p.cut_steps += r.cut_steps;
    p.cut_samples += r.cut_samples;
    p.capacity_bound += r.capacity_bound_seconds / n;
  }
}

absl::StatusOr<std::vector<std::pair<std::string, sim::SimOptions>>> Plans(const SimFlags& f) {
  std::vector<std::pair<std::string, sim::SimOptions>> plans;
  sim::SimOptions ideal;
  ideal.no_slowdown = true;
  plans.push_back({"no-slowdown", ideal});
  const std::vector<std::string> names = absl::StrSplit(f.policies, ',', absl::SkipEmpty());
  for (const std::string& name : names) {
    const std::optional<vocab::Policy> p = vocab::ParsePolicy(name);
    if (!p || *p == vocab::Policy::kCustom) {
      std::vector<std::string> simulated;
      for (vocab::Policy q : vocab::AllPolicies()) {
        if (q != vocab::Policy::kCustom && q != vocab::Policy::kBackupWorkers) {
          simulated.push_back(vocab::Name(q));
        }
      }
      return absl::InvalidArgumentError(absl::StrCat("--policies: unknown policy \"", name, "\"",
                                                     DidYouMean(name, simulated), " (one of ",
                                                     absl::StrJoin(simulated, ", "), ")"));
    }
    if (*p == vocab::Policy::kBackupWorkers) {
      return absl::InvalidArgumentError(
          "--policies: backup-workers: the simulator does not model backup workers");
    }
    sim::SimOptions o;
    o.policy = *p;
    plans.push_back({name, o});
  }
  return plans;
}

double NoneMean(const std::vector<PolicyRuns>& all) {
  for (const PolicyRuns& p : all) {
    if (p.name == vocab::Name(vocab::Policy::kNone)) return p.mean;
  }
  return -1;
}

// The capacity bound of the runs with the slowdowns (the policies'; the
// no-slowdown run's is its own JCT's bound).
double CapacityBound(const std::vector<PolicyRuns>& all) {
  return all.size() > 1 ? all[1].capacity_bound : all.front().capacity_bound;
}

// The allocator the simulator's own wall time was measured with: the
// simulator allocates and frees a few million small objects a run at 10,000
// workers, and `antdt` links mimalloc where the build found it
// (cli/CMakeLists.txt), not under the sanitizers.
std::string Allocator() {
#ifdef ANTDT_MIMALLOC
  const int v = mi_version();  // e.g. 209 for 2.0.9
  return absl::StrCat("mimalloc ", v / 100, ".", v / 10 % 10, ".", v % 10,
                      mi_option_is_enabled(mi_option_large_os_pages) ? ", large OS pages" : "");
#else
  return "glibc malloc";
#endif
}

std::string SimResultsJson(const std::string& scenario, const std::vector<PolicyRuns>& all) {
  const double none = NoneMean(all);
  const double ideal = all.front().mean;
  const double bound = CapacityBound(all);
  std::vector<ResultRow> rows;
  for (const PolicyRuns& p : all) {
    const sim::SimResult& first = p.runs.front();
    ResultRow& row = rows.emplace_back();
    row.policy = p.name;
    row.jct_seconds = p.mean;
    row.records_committed = first.records_committed;
    row.exactly_once = p.exactly_once;
    row.steps = first.steps;
    row.estimated_saved_seconds = p.saved;
    row.estimated_lost_seconds = p.lost;
    if (none >= 0) row.saved_vs_none_seconds = none - p.mean;
    nlohmann::ordered_json by_seed = nlohmann::ordered_json::array();
    for (const sim::SimResult& r : p.runs) by_seed.push_back(r.jct_seconds);
    row.extra = {{"jct_ci95_seconds", {p.mean - p.half_width, p.mean + p.half_width}},
                 {"jct_seconds_by_seed", std::move(by_seed)},
                 {"ratio_to_no_slowdown", p.mean / ideal},
                 {"capacity_bound_seconds", p.capacity_bound},
                 {"ratio_to_capacity_bound", bound > 0 ? nlohmann::ordered_json(p.mean / bound)
                                                       : nlohmann::ordered_json(nullptr)},
                 {"slowdown_mitigated", nlohmann::ordered_json(nullptr)},
                 {"restarts", p.restarts},
                 {"steps_cut_at_deadline", p.cut_steps},
                 {"samples_moved_by_cuts", p.cut_samples},
                 {"leases_shortened", first.leases_shortened},
                 {"skipped_seed_1", first.skipped},
                 {"step_reports", p.reports},
                 {"ledger_calls", p.calls},
                 {"wall_seconds", p.wall}};
    if (auto m = Mitigated(p.mean, none, ideal); m && p.name != all.front().name) {
      row.extra["slowdown_mitigated"] = *m;
    }
    row.actions = first.actions;
  }
  return ResultsJson(scenario, rows,
                     {{"simulated", true},
                      {"seeds", all.front().runs.size()},
                      {"capacity_bound_seconds", bound},
                      {"capacity_bound_ratio_to_no_slowdown", bound / ideal},
                      {"allocator", Allocator()}});
}

std::string ResultsTable(const std::vector<PolicyRuns>& all) {
  const double ideal = all.front().mean;
  const double bound = CapacityBound(all);
  const double none = NoneMean(all);
  std::string table = absl::StrFormat(
      "capacity bound under the slowdowns: %.1f s (%.2fx no-slowdown)\n\n"
      "| policy | JCT (s), mean of seeds | 95%% CI (s) | ratio to no-slowdown | ratio to capacity "
      "bound | slowdown mitigated | actions (seed 1) | restarts (all seeds) | exactly once | wall "
      "(s) | step reports per wall second |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n",
      bound, bound / ideal);
  for (const PolicyRuns& p : all) {
    const std::optional<double> m = Mitigated(p.mean, none, ideal);
    const std::string mitigated =
        m && p.name != all.front().name ? absl::StrFormat("%.0f%%", 100 * *m) : "-";
    absl::StrAppendFormat(
        &table, "| %s | %.1f | %.1f-%.1f | %.2f | %.2f | %s | %d | %d | %s | %.2f | %.0f |\n",
        p.name, p.mean, p.mean - p.half_width, p.mean + p.half_width, p.mean / ideal,
        bound > 0 ? p.mean / bound : 0.0, mitigated,
        static_cast<int>(p.runs.front().actions.size()), p.restarts, p.exactly_once ? "yes" : "no",
        p.wall, p.wall > 0 ? static_cast<double>(p.reports) / p.wall : 0.0);
  }
  return table;
}

// A bar per policy (mean JCT over the no-slowdown run's), with its 95% CI.
std::string ChartSvg(const std::vector<PolicyRuns>& all) {
  const double ideal = all.front().mean;
  double max_ratio = 1;
  for (const PolicyRuns& p : all) max_ratio = std::max(max_ratio, (p.mean + p.half_width) / ideal);
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"680\" height=\"%d\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n",
      40 + 30 * static_cast<int>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) {
    const PolicyRuns& p = all[i];
    const double y = 20 + 30.0 * static_cast<double>(i);
    const double scale = 400 / max_ratio;
    const double w = scale * p.mean / ideal;
    const double lo = 130 + scale * (p.mean - p.half_width) / ideal;
    const double hi = 130 + scale * (p.mean + p.half_width) / ideal;
    absl::StrAppendFormat(
        &svg,
        "<text x=\"4\" y=\"%.0f\">%s</text><rect x=\"130\" y=\"%.0f\" width=\"%.1f\" "
        "height=\"20\" fill=\"%s\"/><line x1=\"%.1f\" x2=\"%.1f\" y1=\"%.0f\" y2=\"%.0f\" "
        "stroke=\"black\"/><text x=\"%.1f\" y=\"%.0f\">%.2fx (%.1f s &#177; %.1f)</text>\n",
        y + 14, local::HtmlEscape(p.name), y, w,
        p.name == vocab::Name(vocab::Policy::kAntdtNd) ? "#2ca02c" : "#888", lo, hi, y + 10, y + 10,
        hi + 6, y + 14, p.mean / ideal, p.mean, p.half_width);
  }
  return svg + "</svg>\n";
}

absl::StatusOr<std::pair<manifest::Job, manifest::Scenario>> Load(const SimFlags& f) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(f.job));
  absl::StatusOr<manifest::Job> job = manifest::ParseJob(text);
  if (!job.ok())
    return absl::InvalidArgumentError(absl::StrCat(f.job, ": ", job.status().message()));
  std::string path = f.scenario;
  if (path.empty()) {
    if (job->local.scenario.empty()) {
      return absl::InvalidArgumentError(
          "--scenario: required when the job names no spec.local.scenario");
    }
    path = (fs::path(f.job).parent_path() / job->local.scenario).string();
  }
  ASSIGN_OR_RETURN(std::string scenario_text, ReadFile(path));
  absl::StatusOr<manifest::Scenario> scenario = sim::ParseSimScenario(scenario_text);
  if (!scenario.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", scenario.status().message()));
  }
  return std::make_pair(*std::move(job), *std::move(scenario));
}

int Simulate(const SimFlags& f) {
#ifdef ANTDT_MIMALLOC
  // 2 MiB pages (transparent huge pages where the kernel grants them): the
  // simulator's state at 10,000 workers is hundreds of MB touched at random,
  // and fewer TLB misses and page faults cut its time (docs/simulator.md).
  // MIMALLOC_LARGE_OS_PAGES=0 in the environment turns it off.
  mi_option_set_enabled_default(mi_option_large_os_pages, true);
#endif
  if (!f.fleet.empty()) {
    if (!f.job.empty() || !f.scenario.empty()) {
      std::fprintf(stderr,
                   "antdt sim: --fleet: the fleet file names its job; no --job or "
                   "--scenario with it\n");
      return 2;
    }
    return SimulateFleet(f.fleet, f.seeds, f.out);
  }
  if (f.job.empty()) {
    std::fprintf(stderr, "antdt sim: --job: required (or --fleet)\n");
    return 2;
  }
  auto loaded = Load(f);
  auto plans = loaded.ok() ? Plans(f) : loaded.status();
  if (!plans.ok()) {
    std::fprintf(stderr, "antdt sim: %s\n", std::string(plans.status().message()).c_str());
    return 2;
  }
  const auto& [job, scenario] = *loaded;
  std::vector<PolicyRuns> all;
  for (const auto& [name, options] : *plans) {
    PolicyRuns p;
    p.name = name;
    for (int seed = 1; seed <= f.seeds; ++seed) {
      sim::SimOptions o = options;
      o.seed = static_cast<uint64_t>(seed);
      o.jitter = f.jitter;
      absl::StatusOr<sim::SimResult> r = sim::Simulate(job, scenario, o);
      if (!r.ok()) {
        std::fprintf(stderr, "antdt sim: %s, seed %d: %s\n", name.c_str(), seed,
                     std::string(r.status().message()).c_str());
        return 1;
      }
      p.runs.push_back(*std::move(r));
    }
    Summarize(p);
    std::printf("%s: %.1f s (95%% CI %.1f-%.1f) over %d seeds, %.2f s of wall time\n", name.c_str(),
                p.mean, p.mean - p.half_width, p.mean + p.half_width, f.seeds,
                p.runs.front().wall_seconds);
    std::fflush(stdout);
    all.push_back(std::move(p));
  }
  fs::create_directories(f.out);
  for (const auto& [file, text] : std::vector<std::pair<std::string, std::string>>{
           {"results.json", SimResultsJson(scenario.name, all)},
           {"results.md", ResultsTable(all)},
           {"chart.svg", ChartSvg(all)}}) {
    if (absl::Status s = WriteFileAtomically(f.out + "/" + file, text); !s.ok()) {
      std::fprintf(stderr, "antdt sim: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::printf("\n%s\nresults: %s/results.json, results.md, chart.svg (wall times with %s)\n",
              ResultsTable(all).c_str(), f.out.c_str(), Allocator().c_str());
  return 0;
}

}  // namespace

Command AddSimCommand(CLI::App* parent) {
  CLI::App* app = parent->add_subcommand(
      "sim", "simulate the job under each policy: thousands of workers, the real control plane");
  app->footer(
      "Each policy runs once per seed, and once with no slowdown, through the real Monitor,\n"
      "control loop and sharding ledger on a simulated clock. Writes results.json (the shape\n"
      "of `antdt bench stragglers`, with 95% confidence intervals), results.md and chart.svg.\n"
      "A scenario may draw its stragglers for many nodes (generate:, see docs/simulator.md).\n"
      "--fleet FILE: a pool of nodes and arriving jobs instead (docs/node-memory.md).");
  auto f = std::make_shared<SimFlags>();
  app->add_option("--job", f->job, "the AntDTJob manifest (required unless --fleet)")
      ->type_name("JOB.yaml");
  app->add_option("--fleet", f->fleet,
                  "a fleet instead: jobs arriving on a pool of shared nodes, some chronically "
                  "slow, run without node memory, with it and with an oracle")
      ->type_name("FILE");
  app->add_option("--scenario", f->scenario,
                  "the scenario instead of spec.local.scenario (nodes and slowdowns, or generate:)")
      ->type_name("FILE");
  app->add_option("--policies", f->policies,
                  absl::StrCat("the policies to compare, comma-separated: any of\n",
                               vocab::PolicyNames(), " except custom and backup-workers"))
      ->type_name("P1,P2,...")
      ->capture_default_str();
  app->add_option("--seeds", f->seeds, "runs per policy, seeds 1..N")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app->add_option("--jitter", f->jitter, "per-step compute noise, uniform +-JITTER")
      ->check(CLI::Range(0.0, 0.9))
      ->capture_default_str();
  app->add_option("--out", f->out, "where the results go")->type_name("DIR")->required();
  return {app, [f] { return Simulate(*f); }};
}

}  // namespace antdt::cli
