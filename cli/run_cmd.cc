// `antdt run JOB.yaml`: the local runner.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/vocab/vocab.h"
#include "backends/local/runner.h"
#include "cli/commands.h"
#include "cli/local_job.h"
#include "common/server.h"
#include "common/spelling.h"

namespace antdt::cli {
namespace {

constexpr const char* kPlain = "plain";

// --policy NAME: a policy, or plain (the benchmark's baseline, for a worker
// command only). False (after saying why) when it is neither.
bool ApplyPolicyFlag(const std::string& name, const manifest::Job& job, local::RunOptions* o) {
  if (name.empty()) return true;
  if (name == kPlain) {
    if (absl::Status s = local::PlainAllowed(job); !s.ok()) {
      std::fprintf(stderr, "antdt run: --policy %s\n", std::string(s.message()).c_str());
      return false;
    }
    o->plain = true;
    return true;
  }
  auto policy = vocab::ParseOneOf("--policy", name, vocab::AllPolicies());
  if (!policy.ok()) {
    // "antdt-ndd" gets `; did you mean "antdt-nd"?` from ParseOneOf, "plian" gets it here.
    std::vector<std::string> policies;
    for (vocab::Policy p : vocab::AllPolicies()) policies.push_back(vocab::Name(p));
    std::string plain;
    if (!NearestName(name, policies)) {
      plain = DidYouMean(name, {kPlain});
      if (plain.empty()) plain = " (or plain)";
    }
    std::fprintf(stderr, "antdt run: %s%s\n", std::string(policy.status().message()).c_str(),
                 plain.c_str());
    return false;
  }
  o->policy_override = *policy;
  return true;
}

constexpr const char* kDefaultReportDir = "antdt-report";

struct RunFlags {
  std::string manifest;
  std::string report = kDefaultReportDir;
  bool no_report = false;
  std::string work_dir;
  std::string policy;
  std::string mode;
  std::string scenario;
  bool no_slowdown = false;
  bool quiet = false;
  bool prometheus = false;
};

int Run(const RunFlags& f) {
  BlockTerminationSignals();
  auto loaded = LoadLocalJob(f.manifest, f.scenario);
  if (!loaded.ok()) {
    std::fprintf(stderr, "antdt run: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  local::RunOptions o = RunOptionsFor(
      *loaded, f.work_dir.empty() ? "antdt-run/" + loaded->job.name : f.work_dir, f.quiet);
  if (!ApplyPolicyFlag(f.policy, loaded->job, &o)) return 2;
  if (!f.mode.empty()) {
    // --mode recommend (or Recommend, as spec.stragglerPolicy.mode spells it).
    std::string mode = f.mode;
    if (!mode.empty())
      mode[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(mode[0])));
    auto parsed = vocab::ParseOneOf("--mode", mode, vocab::AllModes());
    if (!parsed.ok()) {
      // Said as the help spells the values.
      std::fprintf(stderr, "antdt run: --mode: must be act or recommend, got \"%s\"\n",
                   f.mode.c_str());
      return 2;
    }
    o.mode_override = *parsed;
  }
  o.no_slowdown = f.no_slowdown;
  o.prometheus = f.prometheus;
  WatchSignals();
  auto result = local::RunJob(loaded->job, loaded->scenario, o);
  if (o.on_status) {
    // The progress line cleared before anything else is said (stderr is not
    // buffered: Ctrl-C's message was glued to the bar's line).
    std::printf("\r\033[K");
    std::fflush(stdout);
  }
  if (!result.ok()) {
    std::fprintf(stderr, "antdt run: %s\n", std::string(result.status().message()).c_str());
    return result.status().code() == absl::StatusCode::kCancelled ? 130 : 1;
  }
  // The summary's lines (the actions with their sentences) fit a terminal too.
  const std::string summary = local::ReportText(*result);
  for (absl::string_view line : absl::StrSplit(absl::StripSuffix(summary, "\n"), '\n')) {
    PrintEvent(std::string(line), isatty(STDOUT_FILENO));
  }
  if (!f.no_report) {
    if (auto s = local::WriteReport(*result, f.report); !s.ok()) {
      std::fprintf(stderr, "antdt run: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    // The last line: where the report went.
    std::printf("report: %s/report.html and report.json\n", f.report.c_str());
  }
  return !result->journals_checked || result->verification.exactly_once() ? 0 : 1;
}

}  // namespace

Command AddRunCommand(CLI::App* parent) {
  CLI::App* app =
      parent->add_subcommand("run", "run an AntDTJob on this machine (docs/local-runner.md)");
  app->footer(
      "Runs the sharding service, one agent per emulated node, the Monitor and the Controller,\n"
      "the parameter servers and the workers. Workers run the built-in demo trainer, or the\n"
      "command of the manifest's worker template with the ANTDT_* and PyTorch rendezvous\n"
      "variables. Ctrl-C or SIGTERM stops every child.");
  auto f = std::make_shared<RunFlags>();
  app->add_option("JOB.yaml", f->manifest, "the AntDTJob manifest")->required();
  CLI::Option* report =
      app->add_option("--report", f->report, "write report.html and report.json into DIR")
          ->type_name("DIR")
          ->capture_default_str();
  app->add_flag("--no-report", f->no_report, "write no report");
  app->add_option("--work-dir", f->work_dir,
                  "state, logs and journals of the run [antdt-run/<job name>]")
      ->type_name("DIR");
  app->add_option("--policy", f->policy,
                  absl::StrCat("the straggler policy instead of the manifest's: one of\n",
                               vocab::PolicyNames(),
                               ",\nor plain: the job without AntDT (a worker command only)"))
      ->type_name("NAME|plain");
  app->add_option("--mode", f->mode,
                  "act (the default) or recommend: decide as usual but carry nothing out;\n"
                  "the report lists each recommendation with its predicted saving")
      ->type_name("act|recommend");
  app->add_option("--scenario", f->scenario,
                  "the straggler scenario instead of spec.local.scenario")
      ->type_name("FILE");
  app->add_flag("--no-slowdown", f->no_slowdown,
                "the scenario's nodes without their slowdowns (the ideal run)");
  app->add_flag("--quiet", f->quiet, "no progress bar, only the events");
  app->add_flag("--prometheus", f->prometheus,
                "start Debian's prometheus scraping every process of the job; prints its URL");
  return {app, [f, report] {
            if (f->no_report && report->count() > 0) {
              std::fprintf(stderr, "antdt run: --no-report: not with --report\n");
              return 2;
            }
            return Run(*f);
          }};
}

}  // namespace antdt::cli
