// `antdt run JOB.yaml`: the local runner.
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/local_job.h"
#include "common/config.h"
#include "operator/local/runner.h"
#include "operator/vocab/vocab.h"

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
    std::fprintf(stderr, "antdt run: %s (or plain)\n",
                 std::string(policy.status().message()).c_str());
    return false;
  }
  o->policy_override = *policy;
  return true;
}

}  // namespace

int RunCommand(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv, {"report", "work-dir", "policy", "scenario"},
                          {"no-slowdown", "quiet"});
  if (!flags.ok() || flags->positional.size() != 1) {
    std::fprintf(stderr,
                 "usage: antdt run JOB.yaml [--report DIR] [--work-dir DIR] "
                 "[--policy NAME|plain] [--scenario FILE] [--no-slowdown]\n%s\n",
                 flags.ok() ? "" : std::string(flags.status().message()).c_str());
    return 2;
  }
  auto loaded = LoadLocalJob(flags->positional[0], flags->Get("scenario"));
  if (!loaded.ok()) {
    std::fprintf(stderr, "antdt run: %s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  local::RunOptions o = RunOptionsFor(
      *loaded, flags->Get("work-dir", "antdt-run/" + loaded->job.name), flags->Has("quiet"));
  if (!ApplyPolicyFlag(flags->Get("policy"), loaded->job, &o)) return 2;
  o.no_slowdown = flags->Has("no-slowdown");
  WatchSignals();
  auto result = local::RunJob(loaded->job, loaded->scenario, o);
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
  return !result->journals_checked || result->verification.exactly_once() ? 0 : 1;
}

}  // namespace antdt::cli
