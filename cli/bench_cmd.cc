// `antdt bench stragglers`: the job once with no slowdown, then once per
// policy (or plain, the baseline without AntDT), with a table, a JCT chart
// and a loss chart of the runs.
#include <CLI/CLI.hpp>
#include <algorithm>
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
#include "api/vocab/vocab.h"
#include "backends/local/runner.h"
#include "backends/local/svg_chart.h"
#include "cli/bench_causes.h"
#include "cli/commands.h"
#include "cli/local_job.h"
#include "cli/results.h"
#include "common/config.h"
#include "common/server.h"
#include "common/spelling.h"
#include "common/status.h"

namespace antdt::cli {
namespace {

namespace fs = std::filesystem;

struct BenchRun {
  std::string name;
  vocab::Policy policy = vocab::Policy::kNone;
  bool ideal = false;  // no slowdown
  bool plain = false;  // ANTDT_MODE=plain
};

// The ideal run, then one per name of --policies; an error naming the flag.
absl::StatusOr<std::vector<BenchRun>> Runs(const std::string& policies, const manifest::Job& job) {
  std::vector<BenchRun> runs = {{"no-slowdown", vocab::Policy::kNone, true, false}};
  const std::vector<std::string> names = absl::StrSplit(policies, ',', absl::SkipEmpty());
  for (const std::string& p : names) {
    if (p == "plain") {
      if (absl::Status s = local::PlainAllowed(job); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--policies: ", s.message()));
      }
      runs.push_back({p, vocab::Policy::kNone, false, true});
      continue;
    }
    const std::optional<vocab::Policy> policy = vocab::ParsePolicy(p);
    if (!policy || *policy == vocab::Policy::kCustom) {  // custom needs the job's rules
      std::vector<std::string> known;
      for (vocab::Policy q : vocab::AllPolicies()) {
        if (q != vocab::Policy::kCustom) known.push_back(vocab::Name(q));
      }
      known.push_back("plain");
      return absl::InvalidArgumentError(absl::StrCat("--policies: unknown policy \"", p, "\"",
                                                     DidYouMean(p, known), " (one of ",
                                                     absl::StrJoin(known, ", "), ")"));
    }
    runs.push_back({p, *policy, false, false});
  }
  return runs;
}

// The actions a user reads: not the batch changes that only keep the global batch.
int Listed(const local::RunResult& r) {
  return static_cast<int>(
      std::count_if(r.actions.begin(), r.actions.end(),
                    [](const policy::Decision& d) { return !policy::IsRebalance(d); }));
}

std::string ExactlyOnce(const local::RunResult& r) {
  if (!r.journals_checked) return "not checked (plain)";
  return r.verification.exactly_once() ? "yes" : "no";
}

std::string BenchResultsJson(const std::string& scenario,
                             const std::vector<local::RunResult>& results) {
  std::vector<ResultRow> rows;
  for (const local::RunResult& r : results) {
    ResultRow& row = rows.emplace_back();
    row.policy = r.policy;
    row.jct_seconds = r.jct_seconds;
    row.records_committed = r.records_committed;
    if (r.journals_checked) row.exactly_once = r.verification.exactly_once();
    row.first_loss = r.first_loss;
    row.final_loss = r.final_loss;
    if (r.held_out_log_loss >= 0) {
      row.held_out_log_loss = r.held_out_log_loss;
      row.held_out_accuracy = r.held_out_accuracy;
    }
    row.steps = r.steps;
    row.extra["leases_shortened"] = r.leases_shortened < 0
                                        ? nlohmann::ordered_json(nullptr)
                                        : nlohmann::ordered_json(r.leases_shortened);
    row.estimated_saved_seconds = r.estimated_saved_seconds;
    row.estimated_lost_seconds = r.estimated_lost_seconds;
    if (r.none_jct_seconds >= 0) row.saved_vs_none_seconds = r.none_jct_seconds - r.jct_seconds;
    row.actions.assign(r.actions.begin(), r.actions.end());
  }
  return ResultsJson(scenario, rows);
}

std::string ResultsTable(const std::vector<local::RunResult>& results) {
  const double ideal = results.front().jct_seconds;
  std::string table =
      "| policy | JCT (s) | ratio to no-slowdown | saved vs none (s) | saved, Controller's "
      "estimate (s) | lost to stragglers, estimate (s) | actions | records committed "
      "| exactly once | first loss | final loss | held-out log-loss | held-out accuracy |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const local::RunResult& r : results) {
    const bool held_out = r.held_out_log_loss >= 0;
    absl::StrAppendFormat(
        &table, "| %s | %.1f | %.2f | %s | %.1f | %.1f | %d | %d | %s | %.4f | %.4f | %s | %s |\n",
        r.policy, r.jct_seconds, r.jct_seconds / ideal,
        r.none_jct_seconds >= 0 ? absl::StrFormat("%.1f", r.none_jct_seconds - r.jct_seconds) : "-",
        r.estimated_saved_seconds, r.estimated_lost_seconds, Listed(r), r.records_committed,
        ExactlyOnce(r), r.first_loss, r.final_loss,
        held_out ? absl::StrFormat("%.4f", r.held_out_log_loss) : "-",
        held_out ? absl::StrFormat("%.4f", r.held_out_accuracy) : "-");
  }
  return table;
}

// A bar per run: its JCT as a ratio to the ideal run's.
std::string RatioChartSvg(const std::vector<local::RunResult>& results) {
  const double ideal = results.front().jct_seconds;
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
        y + 14, local::HtmlEscape(results[i].policy), y, 400 * ratio / max_ratio,
        results[i].policy == vocab::Name(vocab::Policy::kAntdtNd) ? "#2ca02c" : "#888",
        135 + 400 * ratio / max_ratio, y + 14, ratio, results[i].jct_seconds);
  }
  return svg + "</svg>\n";
}

// Worker-0's loss against time, one line per run that has a loss log.
std::string LossChartSvg(const std::vector<local::RunResult>& results) {
  local::LineChart chart;
  chart.x_label = "time since the job started (s)";
  chart.y_label = "training loss (worker-0's loss log)";
  chart.y_from_zero = false;
  for (const local::RunResult& r : results) {
    if (!r.loss_curve.empty()) chart.series.push_back({r.policy, r.loss_curve});
  }
  if (chart.series.empty()) {
    chart.y_label += ": none (the demo trainer reports its loss to the parameter server only)";
  }
  return local::LineChartSvg(chart);
}

// Every run but none's against the job under policy none, when it ran: the
// reports, written as each run ended, again with the comparison.
void CompareWithNone(const std::string& out, const std::vector<BenchRun>& runs,
                     std::vector<local::RunResult>& results) {
  const std::string none(vocab::Name(vocab::Policy::kNone));
  const auto it = std::find_if(results.begin(), results.end(),
                               [&](const local::RunResult& r) { return r.policy == none; });
  if (it == results.end()) return;
  const double jct = it->jct_seconds;
  for (size_t i = 0; i < results.size(); ++i) {
    if (results[i].policy == none) continue;
    results[i].none_jct_seconds = jct;
    (void)local::WriteReport(results[i], out + "/runs/" + runs[i].name + "/report");
  }
}

absl::Status WriteResults(const std::string& out, const std::string& scenario,
                          const std::vector<local::RunResult>& results) {
  RETURN_IF_ERROR(WriteFileAtomically(out + "/results.json", BenchResultsJson(scenario, results)));
  RETURN_IF_ERROR(WriteFileAtomically(out + "/results.md", ResultsTable(results)));
  RETURN_IF_ERROR(WriteFileAtomically(out + "/chart.svg", RatioChartSvg(results)));
  return WriteFileAtomically(out + "/loss.svg", LossChartSvg(results));
}

struct BenchFlags {
  std::string job;
  std::string scenario;
  std::string policies = "antdt-nd,none,backup-workers,lb-bsp";
  std::string out;
  bool prometheus = false;
};

int Stragglers(const BenchFlags& f) {
  BlockTerminationSignals();
  auto loaded = LoadLocalJob(f.job, f.scenario);
  if (!loaded.ok()) {
    std::fprintf(stderr, "antdt bench: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  auto runs = Runs(f.policies, loaded->job);
  if (!runs.ok()) {
    std::fprintf(stderr, "antdt bench: %s\n", std::string(runs.status().message()).c_str());
    return 2;
  }
  const std::string& out = f.out;
  fs::create_directories(out);
  WatchSignals();
  std::vector<local::RunResult> results;
  for (const BenchRun& run : *runs) {
    local::RunOptions o = RunOptionsFor(*loaded, out + "/runs/" + run.name, true);
    o.no_slowdown = run.ideal;
    o.policy_override = run.policy;
    o.plain = run.plain;
    o.prometheus = f.prometheus;
    std::printf("== %s ==\n", run.name.c_str());
    std::fflush(stdout);
    auto r = local::RunJob(loaded->job, loaded->scenario, o);
    if (!r.ok()) {
      std::fprintf(stderr, "antdt bench: %s: %s\n", run.name.c_str(),
                   std::string(r.status().message()).c_str());
      return 1;
    }
    (void)local::WriteReport(*r, out + "/runs/" + run.name + "/report");
    std::printf("%s: %.1f s, %d actions, loss %.4f -> %.4f, exactly once: %s\n", run.name.c_str(),
                r->jct_seconds, Listed(*r), r->first_loss, r->final_loss, ExactlyOnce(*r).c_str());
    results.push_back(*std::move(r));
  }
  CompareWithNone(out, *runs, results);
  if (absl::Status s = WriteResults(out, loaded->scenario.name, results); !s.ok()) {
    std::fprintf(stderr, "antdt bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("\n%s\nresults: %s/results.json, results.md, chart.svg, loss.svg\n",
              ResultsTable(results).c_str(), out.c_str());
  return 0;
}

}  // namespace

Command AddBenchCommand(CLI::App* parent) {
  CLI::App* bench = parent->add_subcommand("bench", "benchmarks of the local runner");
  bench->require_subcommand(1);
  CLI::App* app = bench->add_subcommand(
      "stragglers", "the job under each policy and once with no slowdown, side by side");
  app->footer(
      "Writes results.json, results.md, chart.svg (JCT) and loss.svg into --out, each run's\n"
      "logs and report under OUT/runs/.");
  auto f = std::make_shared<BenchFlags>();
  app->add_option("--job", f->job, "the AntDTJob manifest")->type_name("JOB.yaml")->required();
  app->add_option("--scenario", f->scenario,
                  "the straggler scenario instead of spec.local.scenario")
      ->type_name("FILE");
  app->add_option(
         "--policies", f->policies,
         absl::StrCat("the policies to compare, comma-separated: any of\n", vocab::PolicyNames(),
                      " except custom,\nand plain: the job without AntDT (torch's "
                      "DistributedSampler, no journal)"))
      ->type_name("P1,P2,...")
      ->capture_default_str();
  app->add_option("--out", f->out, "where the results go")->type_name("DIR")->required();
  app->add_flag("--prometheus", f->prometheus,
                "start Debian's prometheus scraping every process of the job; prints its URL");
  auto [causes, run_causes] = AddBenchCausesCommand(bench);
  return {bench, [f, causes = causes, run_causes = run_causes] {
            return causes->parsed() ? run_causes() : Stragglers(*f);
          }};
}

}  // namespace antdt::cli
