// `antdt sim --fleet FILE`: a pool of shared nodes and jobs arriving over time
// (backends/sim/fleet.h), run without node memory, with it, with an oracle
// that knows the slow nodes, and with no slow node (the ideal each job's
// slowdown is against), over several seeds: total JCT, mean and p95 job
// slowdown and restarts per way, each with a 95% confidence interval over
// the seeds, in results.json and results.md.
#include "cli/fleet_cmd.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/manifest/manifest.h"
#include "backends/sim/fleet.h"
#include "cli/results.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::cli {
namespace {

namespace fs = std::filesystem;

constexpr sim::FleetMode kCompared[] = {sim::FleetMode::kWithout, sim::FleetMode::kWith,
                                        sim::FleetMode::kOracle};

// The p-th quantile by nearest rank.
double Quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// One way over every seed.
struct Way {
  sim::FleetMode mode = sim::FleetMode::kWithout;
  std::vector<double> total, mean_slowdown, p95_slowdown, restarts, on_slow;
  bool exactly_once = true;
  double wall = 0;
};

nlohmann::ordered_json Figure(const std::vector<double>& per_seed) {
  const MeanCi ci = MeanAndCi(per_seed);
  return {{"mean", ci.mean}, {"ci95_half_width", ci.half_width}, {"per_seed", per_seed}};
}

std::string Markdown(const std::string& name, int seeds, const std::vector<Way>& ways) {
  std::string md = absl::StrFormat(
      "# Fleet %s: %d seeds\n\n"
      "| way | total JCT (s) | vs without | mean job slowdown | p95 job slowdown | restarts | "
      "workers placed on slow nodes |\n|---|---|---|---|---|---|---|\n",
      name, seeds);
  const double without = MeanAndCi(ways.front().total).mean;
  for (const Way& w : ways) {
    const MeanCi total = MeanAndCi(w.total);
    absl::StrAppendFormat(&md, "| %s | %.0f +- %.0f | %.3fx | %.3f | %.3f | %.1f | %.1f |\n",
                          sim::Name(w.mode), total.mean, total.half_width,
                          without > 0 ? total.mean / without : 0, MeanAndCi(w.mean_slowdown).mean,
                          MeanAndCi(w.p95_slowdown).mean, MeanAndCi(w.restarts).mean,
                          MeanAndCi(w.on_slow).mean);
  }
  return md;
}

}  // namespace

int SimulateFleet(const std::string& path, int seeds, const std::string& out) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "antdt sim: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return fail(text.status());
  absl::StatusOr<sim::FleetSpec> spec = sim::ParseFleet(*text);
  if (!spec.ok())
    return fail(absl::InvalidArgumentError(absl::StrCat(path, ": ", spec.status().message())));
  const std::string job_path = (fs::path(path).parent_path() / spec->job).string();
  absl::StatusOr<std::string> job_text = ReadFile(job_path);
  if (!job_text.ok()) {
    return fail(
        absl::InvalidArgumentError(absl::StrCat(path, ": job: ", job_text.status().message())));
  }
  absl::StatusOr<manifest::Job> job = manifest::ParseJob(*job_text);
  if (!job.ok()) {
    return fail(absl::InvalidArgumentError(absl::StrCat(job_path, ": ", job.status().message())));
  }

  // Hundreds of simulated jobs: their ledgers' events go to a file, not the terminal.
  fs::create_directories(out);
  if (!SetLogFile(out + "/ledger.log")) {
    return fail(
        absl::InvalidArgumentError(absl::StrCat("--out: cannot write ", out, "/ledger.log")));
  }
  std::vector<Way> ways;
  for (sim::FleetMode m : kCompared) {
    Way& w = ways.emplace_back();
    w.mode = m;
  }
  for (int seed = 1; seed <= seeds; ++seed) {
    absl::StatusOr<sim::FleetResult> ideal =
        sim::RunFleet(*spec, *job, sim::FleetMode::kIdeal, static_cast<uint64_t>(seed));
    if (!ideal.ok()) return fail(ideal.status());
    for (Way& w : ways) {
      absl::StatusOr<sim::FleetResult> r =
          sim::RunFleet(*spec, *job, w.mode, static_cast<uint64_t>(seed));
      if (!r.ok()) {
        std::fprintf(stderr, "antdt sim: %s, seed %d: %s\n", sim::Name(w.mode), seed,
                     std::string(r.status().message()).c_str());
        return 1;
      }
      const std::vector<double> slow = sim::Slowdowns(*r, *ideal);
      double mean = 0;
      for (double s : slow) mean += s / static_cast<double>(slow.size());
      w.total.push_back(r->total_jct_seconds);
      w.mean_slowdown.push_back(mean);
      w.p95_slowdown.push_back(Quantile(slow, 0.95));
      w.restarts.push_back(r->restarts);
      w.on_slow.push_back(r->placed_on_slow_nodes);
      w.exactly_once = w.exactly_once && r->exactly_once;
      w.wall += r->wall_seconds;
    }
    std::printf("seed %d: total JCT without %.0f s, with %.0f s, oracle %.0f s (ideal %.0f s)\n",
                seed, ways[0].total.back(), ways[1].total.back(), ways[2].total.back(),
                ideal->total_jct_seconds);
    std::fflush(stdout);
  }

  nlohmann::ordered_json doc = {{"fleet", spec->name}, {"simulated", true}, {"seeds", seeds}};
  const double without = MeanAndCi(ways[0].total).mean;
  for (const Way& w : ways) {
    doc[sim::Name(w.mode)] = {
        {"total_jct_seconds", Figure(w.total)},
        {"total_jct_vs_without", without > 0 ? MeanAndCi(w.total).mean / without : 0},
        {"mean_job_slowdown", Figure(w.mean_slowdown)},
        {"p95_job_slowdown", Figure(w.p95_slowdown)},
        {"restarts", Figure(w.restarts)},
        {"workers_placed_on_slow_nodes", Figure(w.on_slow)},
        {"exactly_once", w.exactly_once},
        {"wall_seconds", w.wall}};
  }
  const std::string md = Markdown(spec->name, seeds, ways);
  fs::create_directories(out);
  for (const auto& [file, body] : std::vector<std::pair<std::string, std::string>>{
           {"results.json", doc.dump(2) + "\n"}, {"results.md", md}}) {
    if (absl::Status s = WriteFileAtomically(out + "/" + file, body); !s.ok()) {
      std::fprintf(stderr, "antdt sim: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::printf("\n%s\nresults: %s/results.json, results.md (the jobs' ledger events: ledger.log)\n",
              md.c_str(), out.c_str());
  for (const Way& w : ways) {
    if (!w.exactly_once) {
      std::fprintf(stderr, "antdt sim: %s: a job lost or repeated records\n", sim::Name(w.mode));
      return 1;
    }
  }
  return 0;
}

}  // namespace antdt::cli
