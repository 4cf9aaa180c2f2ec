#include "backends/metrics/job_metrics.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "core/policy/policy.h"
#include "prometheus/metric_family.h"

namespace antdt::metrics {

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
                   .Help("Straggler actions the Controller carried out (or tried), by action, "
                         "rule and outcome (done, not_delivered, failed).")
                   .Register(registry)),
      saved_(prometheus::BuildCounter()
                 .Name("antdt_controller_estimated_saved_seconds_total")
                 .Help("Job seconds the Controller's actions saved against no action, as it "
                       "estimates them from the Monitor's per-sample speeds (time_ledger.h); "
                       "the intervals in which they cost time are counted apart.")
                 .Register(registry)),
      cost_(prometheus::BuildCounter()
                .Name("antdt_controller_estimated_cost_seconds_total")
                .Help("Job seconds the Controller's actions cost against no action (intervals "
                      "in which the job ran slower than it would have untouched).")
                .Register(registry)),
      skipped_(prometheus::BuildCounter()
                   .Name("antdt_controller_skipped_total")
                   .Help("Actions a policy would have taken but did not, by reason (cooldown, "
                         "budget, cost_above_saving, no_spare_node, ...).")
                   .Register(registry)),
      budget_(prometheus::BuildGauge()
                  .Name("antdt_controller_action_budget")
                  .Help("Actions the straggler policy may take in all (maxActions).")
                  .Register(registry)),
      budget_used_(prometheus::BuildGauge()
                       .Name("antdt_controller_action_budget_used")
                       .Help("Of the action budget (antdt_controller_action_budget), what the "
                             "policy has used: each restart one, each ADJUST_BS round one "
                             "however many batches it changes.")
                       .Register(registry)),
      rebalances_(prometheus::BuildCounter()
                      .Name("antdt_controller_rebalances_total")
                      .Help("Batch changes that only keep the global batch constant around "
                            "another member's action (or in a round of antdt-dd or lb-bsp), by "
                            "rule and outcome; not counted in antdt_controller_actions_total.")
                      .Register(registry)),
      job_lost_(prometheus::BuildCounter()
                    .Name("antdt_job_straggler_lost_seconds_total")
                    .Help("Job seconds lost to stragglers against every worker at the peers' "
                          "median pace (an estimate from the Monitor's per-sample speeds).")
                    .Register(registry)),
      worker_lost_(prometheus::BuildCounter()
                       .Name("antdt_worker_straggler_lost_seconds_total")
                       .Help("Seconds of a worker's capacity lost against its peers' median "
                             "pace (per sample, so a compensated straggler counts).")
                       .Register(registry)),
      recommendations_(prometheus::BuildCounter()
                           .Name("antdt_controller_recommendations_total")
                           .Help("Decisions recommended and not carried out (stragglerPolicy "
                                 "mode Recommend), by action and rule.")
                           .Register(registry)),
      recommended_saving_(prometheus::BuildCounter()
                              .Name("antdt_controller_recommended_saving_seconds_total")
                              .Help("Job seconds the recommended decisions were predicted to "
                                    "save when each was decided (mode Recommend).")
                              .Register(registry)) {
  std::lock_guard<std::mutex> lock(mu_);
  saved_.Add(Job());  // 0 until the first action: a series to compare with
  cost_.Add(Job());
  for (policy::SkipReason reason : policy::kSkipReasons) {  // 0 until one is skipped
    prometheus::Labels labels = Job();
    labels["reason"] = policy::SkipReasonName(reason);
    skips_made_.push_back(&skipped_.Add(labels));
  }
  job_lost_.Add(Job());  // 0 until the first straggler
  GaugeOf(budget_).Set(static_cast<double>(action_budget));
  GaugeOf(budget_used_).Set(0);
}

JobMetrics::~JobMetrics() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto [family, gauge] : gauges_) family->Remove(gauge);
  for (prometheus::Counter* c : actions_made_) actions_.Remove(c);
  for (prometheus::Counter* c : rebalances_made_) rebalances_.Remove(c);
  saved_.Remove(&saved_.Add(Job()));
  cost_.Remove(&cost_.Add(Job()));
  for (prometheus::Counter* c : skips_made_) skipped_.Remove(c);
  job_lost_.Remove(&job_lost_.Add(Job()));
  for (prometheus::Counter* c : workers_lost_) worker_lost_.Remove(c);
  for (prometheus::Counter* c : recommendations_made_) recommendations_.Remove(c);
  recommended_saving_.Remove(&recommended_saving_.Add(Job()));
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

void JobMetrics::Skipped(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::Labels labels = Job();
  labels["reason"] = reason;
  prometheus::Counter& c = skipped_.Add(labels);
  c.Increment();
  Track(skips_made_, c);
}

void JobMetrics::Time(const loop::TimeDelta& delta) {
  std::lock_guard<std::mutex> lock(mu_);
  job_lost_.Add(Job()).Increment(std::max(0.0, delta.lost_seconds));
  if (delta.saved_seconds > 0) saved_.Add(Job()).Increment(delta.saved_seconds);
  if (delta.saved_seconds < 0) cost_.Add(Job()).Increment(-delta.saved_seconds);
  for (const auto& [worker, seconds] : delta.worker_lost_seconds) {
    prometheus::Labels labels = Job();
    labels["worker"] = worker;
    prometheus::Counter& c = worker_lost_.Add(labels);
    c.Increment(std::max(0.0, seconds));
    if (std::find(workers_lost_.begin(), workers_lost_.end(), &c) == workers_lost_.end()) {
      workers_lost_.push_back(&c);
    }
  }
}

void JobMetrics::Action(const std::string& kind, const std::string& rule,
                        const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::Labels labels = Job();
  labels["action"] = kind;
  labels["rule"] = rule;
  labels["outcome"] = outcome;
  prometheus::Counter& c = actions_.Add(labels);
  c.Increment();
  Track(actions_made_, c);
}

void JobMetrics::Rebalance(const std::string& rule, const std::string& outcome) {
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::Labels labels = Job();
  labels["rule"] = rule;
  labels["outcome"] = outcome;
  prometheus::Counter& c = rebalances_.Add(labels);
  c.Increment();
  Track(rebalances_made_, c);
}

void JobMetrics::Track(std::vector<prometheus::Counter*>& made, prometheus::Counter& c) {
  if (std::find(made.begin(), made.end(), &c) == made.end()) made.push_back(&c);
}

void JobMetrics::Expect(const std::vector<policy::PossibleDecision>& possible, bool recommend) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const policy::PossibleDecision& p : possible) {
    prometheus::Labels labels = Job();
    labels["rule"] = p.rule;
    if (recommend) {
      prometheus::Labels r = labels;
      r["action"] = vocab::Name(p.action);
      Track(recommendations_made_, recommendations_.Add(r));
      continue;
    }
    labels["outcome"] = "done";
    if (p.rebalance) {
      Track(rebalances_made_, rebalances_.Add(labels));
    } else {
      labels["action"] = vocab::Name(p.action);
      Track(actions_made_, actions_.Add(labels));
    }
  }
}

void JobMetrics::Decided(const policy::Decision& decision, const std::string& outcome) {
  if (policy::IsRebalance(decision)) {
    Rebalance(decision.rule, outcome);
  } else {
    Action(policy::ActionName(decision.action), decision.rule, outcome);
  }
}

void JobMetrics::Recommended(const policy::Decision& decision, double predicted_saving_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prometheus::Labels labels = Job();
  labels["action"] = policy::ActionName(decision.action);
  labels["rule"] = decision.rule;
  prometheus::Counter& c = recommendations_.Add(labels);
  c.Increment();
  Track(recommendations_made_, c);
  recommended_saving_.Add(Job()).Increment(std::max(0.0, predicted_saving_seconds));
}

void JobMetrics::BudgetUsed(int64_t used) {
  std::lock_guard<std::mutex> lock(mu_);
  GaugeOf(budget_used_).Set(static_cast<double>(used));
}

namespace {

class NamespaceAdder final : public prometheus::Collectable {
 public:
  NamespaceAdder(std::shared_ptr<prometheus::Collectable> inner, NamespaceOf namespace_of)
      : inner_(std::move(inner)), namespace_of_(std::move(namespace_of)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families = inner_->Collect();
    for (prometheus::MetricFamily& f : families) {
      for (prometheus::ClientMetric& m : f.metric) {
        auto has = [&](const char* name) {
          return std::any_of(
              m.label.begin(), m.label.end(),
              [&](const prometheus::ClientMetric::Label& l) { return l.name == name; });
        };
        if (has("namespace")) continue;
        const auto job =
            std::find_if(m.label.begin(), m.label.end(),
                         [](const prometheus::ClientMetric::Label& l) { return l.name == "job"; });
        if (job == m.label.end()) continue;
        const std::optional<std::string> ns = namespace_of_(job->value);
        if (ns) m.label.push_back({"namespace", *ns});
      }
    }
    return families;
  }

 private:
  const std::shared_ptr<prometheus::Collectable> inner_;
  const NamespaceOf namespace_of_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> WithNamespace(
    std::shared_ptr<prometheus::Collectable> inner, std::string ns) {
  return std::make_shared<NamespaceAdder>(
      std::move(inner),
      [ns = std::move(ns)](const std::string&) -> std::optional<std::string> { return ns; });
}

std::shared_ptr<prometheus::Collectable> WithNamespaces(
    std::shared_ptr<prometheus::Collectable> inner, NamespaceOf namespace_of) {
  return std::make_shared<NamespaceAdder>(std::move(inner), std::move(namespace_of));
}

}  // namespace antdt::metrics
