#include "operator/control/job_metrics.h"

#include <algorithm>
#include <utility>

#include "prometheus/metric_family.h"

namespace antdt::control {

JobMetrics::JobMetrics(prometheus::Registry& registry, std::string ns, std::string job,
                       int64_t action_budget)
    : ns_(std::move(ns)),
      job_(std::move(job)),
      committed_(prometheus::BuildGauge()
                     .Name("antdt_job_records_committed")
                     .Help("Records committed, over every epoch.")
                     .Register(registry)),
      records_(prometheus::BuildGauge()
                   .Name("antdt_job_records")
                   .Help("Records the job commits in all: records times epochs.")
                   .Register(registry)),
      pace_(prometheus::BuildGauge()
                .Name("antdt_job_records_per_second")
                .Help("Records committed per second, recently.")
                .Register(registry)),
      eta_(prometheus::BuildGauge()
               .Name("antdt_job_eta_seconds")
               .Help("Seconds left at the recent pace (the sharding service's estimate).")
               .Register(registry)),
      actions_(prometheus::BuildCounter()
                   .Name("antdt_controller_actions_total")
                   .Help("Straggler actions the Controller carried out, by action and rule.")
                   .Register(registry)),
      saved_(prometheus::BuildCounter()
                 .Name("antdt_controller_estimated_saved_seconds_total")
                 .Help("Job seconds the Controller expected its actions to save.")
                 .Register(registry)),
      budget_(prometheus::BuildGauge()
                  .Name("antdt_controller_action_budget")
                  .Help("Actions the straggler policy may take in all (maxActions).")
                  .Register(registry)),
      job_lost_(prometheus::BuildCounter()
                    .Name("antdt_job_straggler_lost_seconds_total")
                    .Help("Job seconds lost to stragglers against the peers' median pace (an "
                          "estimate from the Monitor's scores).")
                    .Register(registry)),
      worker_lost_(prometheus::BuildCounter()
                       .Name("antdt_worker_straggler_lost_seconds_total")
                       .Help("Seconds a straggling worker lost against its peers' median pace.")
                       .Register(registry)) {
  std::lock_guard<std::mutex> lock(mu_);
  saved_.Add(Job());     // 0 until the first action: a series to compare with
  job_lost_.Add(Job());  // 0 until the first straggler
  GaugeOf(budget_).Set(static_cast<double>(action_budget));
}

JobMetrics::~JobMetrics() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto [family, gauge] : gauges_) family->Remove(gauge);
  for (prometheus::Counter* c : actions_made_) actions_.Remove(c);
  saved_.Remove(&saved_.Add(Job()));
  job_lost_.Remove(&job_lost_.Add(Job()));
  for (prometheus::Counter* c : workers_lost_) worker_lost_.Remove(c);
}

void JobMetrics::StragglerTime(int64_t now_ms, const v1::GetJobHealthResponse& health) {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t last = std::exchange(last_view_ms_, now_ms);
  if (last < 0 || now_ms <= last) return;
  const double dt = static_cast<double>(now_ms - last) / 1000.0;
  double slowest = 1;
  for (const v1::WorkerHealth& w : health.workers()) {
    const bool straggler = w.class_() == v1::DETERMINISTIC || w.class_() == v1::TRANSIENT ||
                           w.class_() == v1::PERSISTENT;
    if (w.role() == "ps" || !straggler || !(w.score() > 1)) continue;
    slowest = std::max(slowest, w.score());
    prometheus::Labels labels = Job();
    labels["worker"] = w.worker_id();
    prometheus::Counter& c = worker_lost_.Add(labels);
    c.Increment(dt * (1 - 1 / w.score()));
    if (std::find(workers_lost_.begin(), workers_lost_.end(), &c) == workers_lost_.end()) {
      workers_lost_.push_back(&c);
    }
  }
  job_lost_.Add(Job()).Increment(dt * (1 - 1 / slowest));
}

// The job's gauge of `family`, remembered for removal. Under mu_.
prometheus::Gauge& JobMetrics::GaugeOf(prometheus::Family<prometheus::Gauge>& family) {
  prometheus::Gauge& g = family.Add(Job());
  const auto known = std::find(gauges_.begin(), gauges_.end(), std::make_pair(&family, &g));
  if (known == gauges_.end()) gauges_.emplace_back(&family, &g);
  return g;
}

void JobMetrics::Progress(int64_t committed, int64_t total, double records_per_second,
                          double eta_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  GaugeOf(committed_).Set(static_cast<double>(committed));
  GaugeOf(records_).Set(static_cast<double>(total));
  GaugeOf(pace_).Set(records_per_second);
  if (eta_seconds >= 0) GaugeOf(eta_).Set(eta_seconds);
}

void JobMetrics::Action(const std::string& kind, const std::string& rule, double saved_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::Labels labels = Job();
  labels["action"] = kind;
  labels["rule"] = rule;
  prometheus::Counter& c = actions_.Add(labels);
  c.Increment();
  if (std::find(actions_made_.begin(), actions_made_.end(), &c) == actions_made_.end()) {
    actions_made_.push_back(&c);
  }
  if (saved_seconds > 0) saved_.Add(Job()).Increment(saved_seconds);
}

namespace {

class NamespaceAdder final : public prometheus::Collectable {
 public:
  NamespaceAdder(std::shared_ptr<prometheus::Collectable> inner, std::string ns)
      : inner_(std::move(inner)), ns_(std::move(ns)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families = inner_->Collect();
    for (prometheus::MetricFamily& f : families) {
      for (prometheus::ClientMetric& m : f.metric) {
        auto has = [&](const char* name) {
          return std::any_of(
              m.label.begin(), m.label.end(),
              [&](const prometheus::ClientMetric::Label& l) { return l.name == name; });
        };
        if (has("job") && !has("namespace")) m.label.push_back({"namespace", ns_});
      }
    }
    return families;
  }

 private:
  const std::shared_ptr<prometheus::Collectable> inner_;
  const std::string ns_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> WithNamespace(
    std::shared_ptr<prometheus::Collectable> inner, std::string ns) {
  return std::make_shared<NamespaceAdder>(std::move(inner), std::move(ns));
}

}  // namespace antdt::control
