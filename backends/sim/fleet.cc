#include "backends/sim/fleet.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <random>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/sim/simulator.h"
#include "backends/sim/yaml_fields.h"
#include "common/status.h"
#include "core/nodememory/node_memory.h"

namespace antdt::sim {
namespace {

constexpr int64_t kFleetStartUnixMs = 1'700'000'000'000;

absl::Status Invalid(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

absl::Status ParsePool(const YAML::Node& pool, FleetSpec* f) {
  if (!pool.IsMap()) return Invalid("pool", "must be a mapping");
  RETURN_IF_ERROR(Unknown(pool, "pool.", {"nodes", "slowNodes", "slowFactor"}));
  if (pool["nodes"]) {
    ASSIGN_OR_RETURN(double n, Number(pool["nodes"], "pool.nodes", 1, 100'000));
    f->nodes = static_cast<int32_t>(n);
  }
  if (pool["slowNodes"]) {
    ASSIGN_OR_RETURN(double n, Number(pool["slowNodes"], "pool.slowNodes", 0, 100'000));
    f->slow_nodes = static_cast<int32_t>(n);
  }
  if (pool["slowFactor"]) {
    RETURN_IF_ERROR(Range(pool["slowFactor"], "pool.slowFactor", 1, 1000, &f->slow_factor_min,
                          &f->slow_factor_max));
  }
  return absl::OkStatus();
}

absl::Status ParseJobs(const YAML::Node& jobs, FleetSpec* f) {
  if (!jobs.IsMap()) return Invalid("jobs", "must be a mapping");
  RETURN_IF_ERROR(
      Unknown(jobs, "jobs.",
              {"count", "arrivalEvery", "workers", "spares", "restart", "transientChance",
               "transientFactor", "transientStart", "transientDuration"}));
  if (jobs["count"]) {
    ASSIGN_OR_RETURN(double n, Number(jobs["count"], "jobs.count", 1, 10'000));
    f->jobs = static_cast<int32_t>(n);
  }
  if (jobs["arrivalEvery"]) {
    int64_t unused = 0;
    RETURN_IF_ERROR(
        DurationRange(jobs["arrivalEvery"], "jobs.arrivalEvery", &f->arrival_every_ms, &unused));
    if (f->arrival_every_ms <= 0 || unused != f->arrival_every_ms) {
      return Invalid("jobs.arrivalEvery", "must be one duration > 0 (the mean time between jobs)");
    }
  }
  if (jobs["workers"]) {
    double lo = 0, hi = 0;
    RETURN_IF_ERROR(Range(jobs["workers"], "jobs.workers", 1, 100'000, &lo, &hi));
    f->workers_min = static_cast<int32_t>(lo);
    f->workers_max = static_cast<int32_t>(hi);
  }
  if (jobs["spares"]) {
    ASSIGN_OR_RETURN(double n, Number(jobs["spares"], "jobs.spares", 0, 100'000));
    f->spares = static_cast<int32_t>(n);
  }
  if (jobs["restart"]) {
    int64_t unused = 0;
    RETURN_IF_ERROR(DurationRange(jobs["restart"], "jobs.restart", &f->restart_ms, &unused));
    if (f->restart_ms < 0 || unused != f->restart_ms) {
      return Invalid("jobs.restart", "must be one duration >= 0");
    }
  }
  if (jobs["transientChance"]) {
    ASSIGN_OR_RETURN(f->transient_chance,
                     Number(jobs["transientChance"], "jobs.transientChance", 0, 1));
  }
  if (jobs["transientFactor"]) {
    RETURN_IF_ERROR(Range(jobs["transientFactor"], "jobs.transientFactor", 1, 1000,
                          &f->transient_factor_min, &f->transient_factor_max));
  }
  if (jobs["transientStart"]) {
    RETURN_IF_ERROR(DurationRange(jobs["transientStart"], "jobs.transientStart",
                                  &f->transient_start_min_ms, &f->transient_start_max_ms));
  }
  if (jobs["transientDuration"]) {
    RETURN_IF_ERROR(DurationRange(jobs["transientDuration"], "jobs.transientDuration",
                                  &f->transient_duration_min_ms, &f->transient_duration_max_ms));
  }
  return absl::OkStatus();
}

// One job as drawn for a seed: the same in every mode.
struct Drawn {
  double arrival = 0;  // s
  int32_t workers = 0;
  bool transient = false;
  int32_t transient_worker = 0;
  double transient_factor = 1;
  int64_t transient_start_ms = 0, transient_duration_ms = 0;
};

struct Draws {
  std::vector<double> node_factor;  // per pool node: 1, or how much slower
  std::vector<Drawn> jobs;
};

Draws Draw(const FleetSpec& f, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](double a, double b) {
    return a == b ? a : std::uniform_real_distribution<double>(a, b)(rng);
  };
  auto uniform_ms = [&](int64_t a, int64_t b) {
    return a == b ? a : std::uniform_int_distribution<int64_t>(a, b)(rng);
  };
  Draws d;
  d.node_factor.assign(static_cast<size_t>(f.nodes), 1.0);
  std::vector<int32_t> order(static_cast<size_t>(f.nodes));
  for (int32_t i = 0; i < f.nodes; ++i) order[static_cast<size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), rng);
  for (int32_t i = 0; i < f.slow_nodes; ++i) {
    d.node_factor[static_cast<size_t>(order[static_cast<size_t>(i)])] =
        uniform(f.slow_factor_min, f.slow_factor_max);
  }
  std::exponential_distribution<double> gap(1000.0 / static_cast<double>(f.arrival_every_ms));
  double t = 0;
  for (int32_t i = 0; i < f.jobs; ++i) {
    Drawn j;
    if (i > 0) t += gap(rng);
    j.arrival = t;
    j.workers = std::uniform_int_distribution<int32_t>(f.workers_min, f.workers_max)(rng);
    j.transient = std::bernoulli_distribution(f.transient_chance)(rng);
    j.transient_worker = std::uniform_int_distribution<int32_t>(0, j.workers - 1)(rng);
    j.transient_factor = uniform(f.transient_factor_min, f.transient_factor_max);
    j.transient_start_ms = uniform_ms(f.transient_start_min_ms, f.transient_start_max_ms);
    j.transient_duration_ms = uniform_ms(f.transient_duration_min_ms, f.transient_duration_max_ms);
    d.jobs.push_back(j);
  }
  return d;
}

std::string NodeName(int32_t i) { return absl::StrFormat("node-%03d", i); }

// A memory that knows the slow nodes already: three jobs each saw every one
// slow for ten minutes, just before the fleet starts.
nodememory::NodeMemory OracleMemory(const Draws& d) {
  nodememory::NodeMemory m = *nodememory::NodeMemory::Create();
  for (size_t n = 0; n < d.node_factor.size(); ++n) {
    if (d.node_factor[n] <= 1) continue;
    for (int j = 0; j < 3; ++j) {
      v1::StragglerRecord r;
      r.set_job(absl::StrCat("oracle-", j));
      r.set_worker_id("worker-0");
      r.set_node(NodeName(static_cast<int32_t>(n)));
      r.set_class_(v1::PERSISTENT);
      r.set_first_seen_unix_ms(kFleetStartUnixMs - 600'000);
      r.set_last_seen_unix_ms(kFleetStartUnixMs);
      r.set_windows(100);
      r.set_max_score(d.node_factor[n]);
      (void)m.Record(r, kFleetStartUnixMs);
    }
  }
  return m;
}

class Fleet {
 public:
  Fleet(const FleetSpec& spec, const manifest::Job& job, FleetMode mode, uint64_t seed)
      : spec_(spec), job_(job), mode_(mode), seed_(seed), draws_(Draw(spec, seed)) {
    if (mode == FleetMode::kWith) memory_.emplace(*nodememory::NodeMemory::Create());
    if (mode == FleetMode::kOracle) memory_.emplace(OracleMemory(draws_));
  }

  absl::StatusOr<FleetResult> Run();

 private:
  struct Running {
    double finish = 0;
    size_t job = 0;
    std::vector<int32_t> nodes;
    std::vector<v1::StragglerRecord> records;
  };

  // The free nodes for job `i` at `t`: workers first, then its spares.
  std::vector<int32_t> Place(size_t i, double t);
  absl::Status Start(size_t i, double t);
  void Finish(Running& r);
  int32_t Need(size_t i) const { return draws_.jobs[i].workers + spec_.spares; }

  const FleetSpec& spec_;
  const manifest::Job& job_;
  const FleetMode mode_;
  const uint64_t seed_;
  const Draws draws_;
  std::optional<nodememory::NodeMemory> memory_;  // with node memory, and the oracle's
  std::vector<bool> busy_;
  int32_t free_ = 0;
  std::vector<Running> running_;
  FleetResult result_;
};

std::vector<int32_t> Fleet::Place(size_t i, double t) {
  std::mt19937_64 rng(seed_ * 1'000'003 + i);
  std::vector<std::tuple<bool, double, uint64_t, int32_t>> free;  // chronic, avoid, draw, node
  const int64_t now = kFleetStartUnixMs + std::llround(t * 1000);
  for (int32_t n = 0; n < spec_.nodes; ++n) {
    if (busy_[static_cast<size_t>(n)]) continue;
    bool chronic = false;
    double avoid = 0;
    if (memory_) {
      const nodememory::Estimate e = memory_->For(NodeName(n), now);
      chronic = e.chronic;
      avoid = e.avoid;
    }
    free.emplace_back(chronic, avoid, rng(), n);
  }
  std::sort(free.begin(), free.end());
  // The workers on the least avoided nodes; the spares, idle until a
  // restart, on the most avoided ones.
  const size_t workers = static_cast<size_t>(draws_.jobs[i].workers);
  const size_t spares = static_cast<size_t>(spec_.spares);
  std::vector<int32_t> out;
  for (size_t k = 0; k < workers; ++k) out.push_back(std::get<3>(free[k]));
  for (size_t k = 0; k < spares; ++k) out.push_back(std::get<3>(free[free.size() - 1 - k]));
  return out;
}

absl::Status Fleet::Start(size_t i, double t) {
  const Drawn& d = draws_.jobs[i];
  manifest::Job job = job_;
  job.name = absl::StrFormat("%s-%03d", job_.name, i);
  const int32_t replicas = std::max(1, job_.workers.replicas);
  job.workers.replicas = d.workers;
  job.dataset.records = std::max<int64_t>(1, job_.dataset.records / replicas) * d.workers;
  job.model.global_batch_size =
      std::max<int64_t>(d.workers, job_.model.global_batch_size / replicas * d.workers);
  const std::vector<int32_t> nodes = Place(i, t);
  manifest::Scenario scenario;
  scenario.name = job.name;
  int on_slow = 0;
  for (size_t k = 0; k < nodes.size(); ++k) {
    manifest::NodeSpec n;
    n.name = NodeName(nodes[k]);
    n.spare = k >= static_cast<size_t>(d.workers);
    const double factor = draws_.node_factor[static_cast<size_t>(nodes[k])];
    if (mode_ != FleetMode::kIdeal && factor > 1) {
      manifest::Slowdown s;
      s.node = n.name;
      s.kind = v1::DETERMINISTIC;  // slow for as long as the job is there
      s.factor = factor;
      scenario.slowdowns.push_back(s);
      if (!n.spare) ++on_slow;
    }
    scenario.nodes.push_back(std::move(n));
  }
  if (mode_ != FleetMode::kIdeal && d.transient) {
    manifest::Slowdown s;
    s.node = NodeName(nodes[static_cast<size_t>(d.transient_worker)]);
    s.kind = v1::TRANSIENT;
    s.factor = d.transient_factor;
    s.start_ms = d.transient_start_ms;
    s.duration_ms = d.transient_duration_ms;
    scenario.slowdowns.push_back(s);
  }
  SimOptions o;
  o.policy = job.straggler_policy.name;
  o.no_slowdown = mode_ == FleetMode::kIdeal;
  o.seed = seed_ * 100'003 + i;
  o.start_unix_ms = kFleetStartUnixMs + std::llround(t * 1000);
  o.relaunch_seconds = static_cast<double>(spec_.restart_ms) / 1000.0;
  // Each job reads the fleet's memory as it was when it started (a copy: the
  // jobs running beside it have not ended, so nothing of theirs is in it).
  std::optional<nodememory::NodeMemory> seen = memory_;
  o.node_memory = seen ? &*seen : nullptr;
  absl::StatusOr<SimResult> r = Simulate(job, scenario, o);
  if (!r.ok()) {
    return absl::Status(r.status().code(),
                        absl::StrCat("job ", i, " (", d.workers, " workers, started at ",
                                     absl::StrFormat("%.1f", t), " s): ", r.status().message()));
  }
  FleetJob& fj = result_.jobs[i];
  fj.start_seconds = t;
  fj.restarts = r->restarts;
  fj.on_slow_nodes = on_slow;
  fj.exactly_once = r->exactly_once();
  for (int32_t n : nodes) busy_[static_cast<size_t>(n)] = true;
  free_ -= Need(i);
  running_.push_back({t + r->jct_seconds, i, nodes, std::move(r->stragglers)});
  return absl::OkStatus();
}

void Fleet::Finish(Running& r) {
  for (int32_t n : r.nodes) busy_[static_cast<size_t>(n)] = false;
  free_ += Need(r.job);
  FleetJob& fj = result_.jobs[r.job];
  fj.jct_seconds = r.finish - fj.arrival_seconds;
  result_.makespan_seconds = std::max(result_.makespan_seconds, r.finish);
  // What the job saw, into the fleet's memory once it has ended.
  if (mode_ == FleetMode::kWith) {
    for (const v1::StragglerRecord& rec : r.records) {
      (void)memory_->Record(rec, std::max(rec.last_seen_unix_ms(), rec.first_seen_unix_ms()));
    }
  }
}

absl::StatusOr<FleetResult> Fleet::Run() {
  const auto wall = std::chrono::steady_clock::now();
  result_.mode = mode_;
  result_.seed = seed_;
  busy_.assign(static_cast<size_t>(spec_.nodes), false);
  free_ = spec_.nodes;
  const size_t n = draws_.jobs.size();
  result_.jobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    result_.jobs[i].workers = draws_.jobs[i].workers;
    result_.jobs[i].arrival_seconds = draws_.jobs[i].arrival;
  }
  std::deque<size_t> queue;  // first come, first served
  size_t next = 0;
  while (next < n || !queue.empty() || !running_.empty()) {
    auto first =
        std::min_element(running_.begin(), running_.end(), [](const Running& a, const Running& b) {
          return std::tie(a.finish, a.job) < std::tie(b.finish, b.job);
        });
    const double arrive = next < n ? draws_.jobs[next].arrival : HUGE_VAL;
    double t = 0;
    if (first != running_.end() && first->finish <= arrive) {
      t = first->finish;
      Finish(*first);
      running_.erase(first);
    } else if (next < n) {
      t = arrive;
      queue.push_back(next++);
    } else {
      return absl::InternalError("a queued job can never start: no job runs to free its nodes");
    }
    while (!queue.empty() && free_ >= Need(queue.front())) {
      RETURN_IF_ERROR(Start(queue.front(), t));
      queue.pop_front();
    }
  }
  for (const FleetJob& j : result_.jobs) {
    result_.total_jct_seconds += j.jct_seconds;
    result_.restarts += j.restarts;
    result_.placed_on_slow_nodes += j.on_slow_nodes;
    result_.exactly_once = result_.exactly_once && j.exactly_once;
  }
  result_.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return std::move(result_);
}

}  // namespace

absl::StatusOr<FleetSpec> ParseFleet(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("fleet: not YAML: ", e.what()));
  }
  if (!root.IsMap()) return absl::InvalidArgumentError("fleet: must be a mapping");
  FleetSpec f;
  try {
    RETURN_IF_ERROR(Unknown(root, "", {"name", "job", "pool", "jobs"}));
    if (root["name"]) f.name = root["name"].as<std::string>();
    if (!root["job"] || !root["job"].IsScalar() || root["job"].as<std::string>().empty()) {
      return Invalid("job", "required: the AntDTJob manifest each job runs");
    }
    f.job = root["job"].as<std::string>();
    if (root["pool"]) RETURN_IF_ERROR(ParsePool(root["pool"], &f));
    if (root["jobs"]) RETURN_IF_ERROR(ParseJobs(root["jobs"], &f));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("fleet: ", e.what()));
  }
  if (f.slow_nodes > f.nodes) {
    return Invalid("pool.slowNodes",
                   absl::StrCat("must be at most pool.nodes (", f.nodes, "), got ", f.slow_nodes));
  }
  if (f.workers_max + f.spares > f.nodes) {
    return Invalid("jobs.workers",
                   absl::StrCat("the largest job (", f.workers_max, " workers and ", f.spares,
                                " spares) is larger than the pool (pool.nodes ", f.nodes, ")"));
  }
  return f;
}

const char* Name(FleetMode mode) {
  switch (mode) {
    case FleetMode::kWithout:
      return "without_node_memory";
    case FleetMode::kWith:
      return "with_node_memory";
    case FleetMode::kOracle:
      return "oracle";
    case FleetMode::kIdeal:
      return "ideal";
  }
  return "?";
}

absl::StatusOr<FleetResult> RunFleet(const FleetSpec& spec, const manifest::Job& job,
                                     FleetMode mode, uint64_t seed) {
  Fleet fleet(spec, job, mode, seed);
  return fleet.Run();
}

std::vector<double> Slowdowns(const FleetResult& run, const FleetResult& ideal) {
  std::vector<double> out;
  for (size_t i = 0; i < run.jobs.size() && i < ideal.jobs.size(); ++i) {
    const double base = ideal.jobs[i].jct_seconds;
    out.push_back(base > 0 ? run.jobs[i].jct_seconds / base : 1);
  }
  return out;
}

}  // namespace antdt::sim
