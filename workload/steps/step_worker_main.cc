// antdt-step-worker: emulates a training worker's steps and reports each one
// to the node agent through the SDK's StepReporter. A slowdown factor from a
// given time makes it a straggler on purpose; directives are applied and logged.
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>

#include "absl/strings/numbers.h"
#include "client/step_reporter.h"
#include "common/config.h"
#include "common/log.h"

int main(int argc, char** argv) {
  using namespace antdt;
  auto flags = ParseFlags(argc, argv,
                          {"agent", "job", "worker-id", "role", "bpt", "jitter", "slow-factor",
                           "slow-after", "steps", "samples", "seed"});
  auto fail = [](const std::string& m) {
    std::fprintf(stderr, "antdt-step-worker: %s\n", m.c_str());
    return 2;
  };
  if (!flags.ok()) return fail(std::string(flags.status().message()));
  for (const char* required : {"agent", "job", "worker-id"}) {
    if (!flags->Has(required)) return fail(std::string("--") + required + ": required");
  }
  double bpt = 0.05, jitter = 0.1, slow = 1.0, slow_after_s = 0;
  int64_t steps = 1'000'000, samples = 64, seed = 1;
  auto num = [&](const char* name, double& out) {
    return !flags->Has(name) || absl::SimpleAtod(flags->Get(name), &out);
  };
  auto integer = [&](const char* name, int64_t& out) {
    return !flags->Has(name) || absl::SimpleAtoi(flags->Get(name), &out);
  };
  if (!num("bpt", bpt) || bpt <= 0) return fail("--bpt: must be a number of seconds > 0");
  if (!num("jitter", jitter) || jitter < 0 || jitter >= 1)
    return fail("--jitter: must be in [0, 1)");
  if (!num("slow-factor", slow) || slow <= 0) return fail("--slow-factor: must be > 0");
  if (!num("slow-after", slow_after_s) || slow_after_s < 0)
    return fail("--slow-after: must be >= 0 seconds");
  if (!integer("steps", steps) || steps <= 0) return fail("--steps: must be > 0");
  if (!integer("samples", samples) || samples <= 0) return fail("--samples: must be > 0");
  if (!integer("seed", seed)) return fail("--seed: must be an integer");

  client::StepReporterOptions o;
  o.agent_address = flags->Get("agent");
  o.job = flags->Get("job");
  o.worker_id = flags->Get("worker-id");
  o.role = flags->Get("role", "worker");
  client::StepReporter reporter(o);
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::uniform_real_distribution<double> noise(1 - jitter, 1 + jitter);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < steps; ++step) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double factor = elapsed >= slow_after_s ? slow : 1.0;
    const double dt = bpt * factor * noise(rng) * static_cast<double>(samples) / 64.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(dt));
    client::StepTiming t;
    t.step = step;
    t.samples = samples;
    t.bpt_seconds = dt;
    t.compute_seconds = dt;
    (void)reporter.Report(t);
    if (auto d = reporter.TakeDirective(); d && d->has_adjust_batch()) {
      samples = d->adjust_batch().local_batch_size();
      LogEvent("directive_applied",
               {{"worker", o.worker_id}, {"version", d->version()}, {"local_batch_size", samples}});
    }
  }
  return 0;
}
