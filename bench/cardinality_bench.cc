// Series after many short jobs: the agent (a worker's series removed once it
// is idle), the operator's per-job series (metrics::JobMetrics, one per job
// runtime) and the Monitor's per-member series (a deleted job forgotten),
// each beside the same jobs without removal, in one run. Prints figures;
// asserts nothing.
//
//   antdt-bench-cardinality [--jobs 50] [--workers 4]
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/metrics/job_metrics.h"
#include "core/monitor/monitor.h"
#include "prometheus/registry.h"
#include "services/agent/core/agent.h"
#include "services/agent/core/outbox.h"

namespace {

using antdt::v1::GetJobHealthResponse;

size_t SeriesIn(prometheus::Registry& registry) {
  size_t n = 0;
  for (const auto& family : registry.Collect()) n += family.metric.size();
  return n;
}

struct Figures {
  size_t start = 0, peak = 0, end = 0, kept = 0;  // kept: the same jobs, nothing removed
};

void Print(const char* what, const Figures& f) {
  std::printf("%-38s %6zu %6zu %6zu %18zu\n", what, f.start, f.peak, f.end, f.kept);
}

antdt::v1::ReportStepRequest Step(const std::string& job, const std::string& worker) {
  antdt::v1::ReportStepRequest req;
  req.mutable_step()->set_job(job);
  req.mutable_step()->set_worker_id(worker);
  req.mutable_step()->set_role("worker");
  req.mutable_step()->set_bpt_seconds(0.1);
  req.mutable_step()->set_samples(32);
  return req;
}

// One agent takes the jobs' step reports; one forgets idle workers, the other not.
Figures Agent(int jobs, int workers) {
  using antdt::agent::AgentServiceImpl;
  antdt::agent::Outbox outbox(1'000'000);
  antdt::agent::DirectiveTable table;
  prometheus::Registry forgetting, keeping;
  AgentServiceImpl a("node-0", &outbox, &table, forgetting);
  AgentServiceImpl b("node-0", &outbox, &table, keeping);
  Figures f;
  f.start = SeriesIn(forgetting);
  for (int j = 0; j < jobs; ++j) {
    for (int step = 0; step < 5; ++step) {
      for (int w = 0; w < workers; ++w) {
        const auto req = Step(absl::StrCat("job-", j), absl::StrCat("worker-", w));
        grpc::ServerContext ctx;
        antdt::v1::ReportStepResponse resp;
        (void)a.ReportStep(&ctx, &req, &resp);
        (void)b.ReportStep(&ctx, &req, &resp);
      }
    }
    f.peak = std::max(f.peak, SeriesIn(forgetting));
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // the job ended
    a.ForgetIdle(std::chrono::milliseconds(1));
  }
  f.end = SeriesIn(forgetting);
  f.kept = SeriesIn(keeping);
  return f;
}

GetJobHealthResponse Health(const std::string& job, int workers) {
  GetJobHealthResponse h;
  for (int w = 0; w < workers; ++w) {
    auto* m = h.add_workers();
    m->set_job(job);
    m->set_worker_id(absl::StrCat("worker-", w));
    m->set_role("worker");
    m->set_score(w == 0 ? 2.0 : 1.0);
    m->set_class_(w == 0 ? antdt::v1::PERSISTENT : antdt::v1::HEALTHY);
    m->set_samples_per_second(w == 0 ? 50 : 100);
    m->set_bpt_seconds(w == 0 ? 2.0 : 1.0);
  }
  return h;
}

// The operator keeps a JobMetrics per job runtime: dropped with the runtime,
// or (the baseline) all kept.
Figures Operator(int jobs, int workers) {
  prometheus::Registry forgetting, keeping;
  std::vector<std::unique_ptr<antdt::metrics::JobMetrics>> kept;
  Figures f;
  f.start = SeriesIn(forgetting);
  for (int j = 0; j < jobs; ++j) {
    const std::string job = absl::StrCat("job-", j);
    for (prometheus::Registry* r : {&forgetting, &keeping}) {
      auto m = std::make_unique<antdt::metrics::JobMetrics>(*r, "default", job, 10);
      m->Progress(100, 1000, 50, 18);
      m->Action("KILL_RESTART", "antdt-nd:persistent-restart", "done");
      m->Skipped("cooldown");
      antdt::loop::TimeLedger ledger;
      m->Time(ledger.Observe(1'000, Health(job, workers)));
      m->Time(ledger.Observe(2'000, Health(job, workers)));
      if (r == &keeping) kept.push_back(std::move(m));
      if (r == &forgetting) f.peak = std::max(f.peak, SeriesIn(forgetting));
    }  // the forgetting side's runtime goes: the job was deleted
  }
  f.end = SeriesIn(forgetting);
  f.kept = SeriesIn(keeping);
  return f;
}

// The Monitor's per-member series (score, class, cause: three per member of
// every job it knows), with deleted jobs forgotten or kept. The Monitor also
// drops members silent for forget_after_windows windows on its own, so the
// baseline is bounded too, later.
Figures Monitor(int jobs, int workers) {
  auto forgetting = *antdt::monitor::Monitor::Create({});
  auto keeping = *antdt::monitor::Monitor::Create({});
  auto series = [](const antdt::monitor::Monitor& m) {
    size_t n = 0;
    for (const std::string& job : m.Jobs()) n += 3 * m.Health(job, 0).workers_size();
    return n;
  };
  Figures f;
  for (int j = 0; j < jobs; ++j) {
    const std::string job = absl::StrCat("job-", j);
    for (int window = 0; window < 3; ++window) {
      const int64_t start = 1'000'000 * (j + 1) + 10'000 * window;
      for (int w = 0; w < workers; ++w) {
        antdt::v1::StepReport r = Step(job, absl::StrCat("worker-", w)).step();
        r.set_time_unix_ms(start + 5'000);
        forgetting.Ingest(r);
        keeping.Ingest(r);
      }
      forgetting.CloseWindows(start + 12'000);
      keeping.CloseWindows(start + 12'000);
    }
    f.peak = std::max(f.peak, series(forgetting));
    forgetting.Forget(job);
  }
  f.end = series(forgetting);
  f.kept = series(keeping);
  return f;
}

int Flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (argv[i] == "--" + name) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const int jobs = Flag(argc, argv, "jobs", 50);
  const int workers = Flag(argc, argv, "workers", 4);
  std::printf("%d short jobs of %d workers, one after another\n", jobs, workers);
  std::printf("%-38s %6s %6s %6s %18s\n", "series", "start", "peak", "end", "end (no removal)");
  Print("agent (antdt_worker_*)", Agent(jobs, workers));
  Print("operator (antdt_job_*, controller)", Operator(jobs, workers));
  Print("Monitor (straggler score/class/cause)", Monitor(jobs, workers));
  return 0;
}
