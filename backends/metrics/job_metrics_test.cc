#include "backends/metrics/job_metrics.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "prometheus/metric_family.h"

namespace antdt::metrics {
namespace {

using ::testing::HasSubstr;

// name{labels} -> value, every series of `families`.
std::map<std::string, double> Series(const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, double> out;
  for (const prometheus::MetricFamily& f : families) {
    for (const prometheus::ClientMetric& m : f.metric) {
      std::string key = f.name + "{";
      for (const auto& l : m.label) key += l.name + "=" + l.value + ",";
      key += "}";
      out[key] = f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return out;
}

TEST(JobMetrics, EverySeriesCarriesNamespaceAndJob) {
  prometheus::Registry registry;
  JobMetrics m(registry, "team-a", "resnet", 10);
  m.Progress(250, 1000, 50, 15);
  m.Action("KILL_RESTART", "antdt-nd:persistent-restart", "done");
  m.Action("ADJUST_BS", "antdt-nd:rebalance", "not_delivered");
  m.Time({1.0, 42.5, {{"worker-1", 1.0}}});
  m.Skipped("budget");
  const auto series = Series(registry.Collect());
  EXPECT_EQ(series.at("antdt_job_records_committed{job=resnet,namespace=team-a,}"), 250);
  EXPECT_EQ(series.at("antdt_job_records{job=resnet,namespace=team-a,}"), 1000);
  EXPECT_EQ(series.at("antdt_job_eta_seconds{job=resnet,namespace=team-a,}"), 15);
  EXPECT_EQ(series.at("antdt_controller_action_budget{job=resnet,namespace=team-a,}"), 10);
  EXPECT_EQ(
      series.at("antdt_controller_estimated_saved_seconds_total{job=resnet,namespace=team-a,}"),
      42.5);
  EXPECT_EQ(series.at("antdt_controller_actions_total{action=KILL_RESTART,job=resnet,namespace="
                      "team-a,outcome=done,rule=antdt-nd:persistent-restart,}"),
            1);
  EXPECT_EQ(series.at("antdt_controller_actions_total{action=ADJUST_BS,job=resnet,namespace="
                      "team-a,outcome=not_delivered,rule=antdt-nd:rebalance,}"),
            1);
  // Every skip reason has a series from the start (0), so rates and panels have data.
  EXPECT_EQ(
      series.at(
          "antdt_controller_skipped_total{job=resnet,namespace=team-a,reason=no_spare_node,}"),
      0);
  EXPECT_EQ(series.at("antdt_controller_skipped_total{job=resnet,namespace=team-a,reason=budget,}"),
            1);
  for (const auto& [key, value] : series) {
    EXPECT_THAT(key, HasSubstr("namespace=team-a")) << key;
    EXPECT_THAT(key, HasSubstr("job=resnet")) << key;
  }
}

// paper-mix's count: 8 actions and 25 batch changes that keep the global
// batch, 8 of the budget used. Actions and rebalances are counted apart; the
// budget used is the policy's count, not a sum of the counters.
TEST(JobMetrics, RebalancesAreNotActionsAndTheBudgetUsedIsThePolicys) {
  prometheus::Registry registry;
  JobMetrics m(registry, "default", "paper-mix", 10);
  EXPECT_EQ(Series(registry.Collect())
                .at("antdt_controller_action_budget_used{job=paper-mix,namespace=default,}"),
            0);  // a series from the start
  policy::Decision adjust;
  adjust.action = policy::AdjustBatchSize{"worker-3", 32, 1};
  adjust.rule = "antdt-nd:transient-adjust";
  adjust.subject = "worker-3";
  policy::Decision rebalance;
  rebalance.action = policy::AdjustBatchSize{"worker-1", 70, 1};
  rebalance.rule = "antdt-nd:rebalance";
  for (int i = 0; i < 8; ++i) m.Decided(adjust, "done");
  for (int i = 0; i < 25; ++i) m.Decided(rebalance, "done");
  m.BudgetUsed(8);
  const auto series = Series(registry.Collect());
  EXPECT_EQ(series.at("antdt_controller_actions_total{action=ADJUST_BS,job=paper-mix,namespace="
                      "default,outcome=done,rule=antdt-nd:transient-adjust,}"),
            8);
  EXPECT_EQ(series.at("antdt_controller_rebalances_total{job=paper-mix,namespace=default,"
                      "outcome=done,rule=antdt-nd:rebalance,}"),
            25);
  EXPECT_EQ(series.count("antdt_controller_actions_total{action=ADJUST_BS,job=paper-mix,"
                         "namespace=default,outcome=done,rule=antdt-nd:rebalance,}"),
            0u);
  EXPECT_EQ(series.at("antdt_controller_action_budget_used{job=paper-mix,namespace=default,}"), 8);
  EXPECT_EQ(series.at("antdt_controller_action_budget{job=paper-mix,namespace=default,}"), 10);
}

// Every series a job's policy may count exists at 0 before its first
// decision: a counter born at 1 loses that increment in rate() and increase()
// (the actions-per-minute panels showed 7 of paper-mix's 13 actions).
TEST(JobMetrics, EveryDecisionsSeriesExistsAtZeroBeforeTheFirst) {
  prometheus::Registry registry;
  JobMetrics m(registry, "default", "paper-mix", 10);
  policy::PolicySpec nd;
  nd.name = vocab::Policy::kAntdtNd;
  m.Expect(policy::PossibleDecisions(nd), /*recommend=*/false);
  m.Expect(policy::PossibleDecisions(nd), /*recommend=*/false);  // idempotent
  auto series = Series(registry.Collect());
  const std::string restart =
      "antdt_controller_actions_total{action=KILL_RESTART,job=paper-mix,namespace=default,"
      "outcome=done,rule=antdt-nd:persistent-restart,}";
  const std::string adjust =
      "antdt_controller_actions_total{action=ADJUST_BS,job=paper-mix,namespace=default,"
      "outcome=done,rule=antdt-nd:transient-adjust,}";
  const std::string rebalance =
      "antdt_controller_rebalances_total{job=paper-mix,namespace=default,outcome=done,"
      "rule=antdt-nd:rebalance,}";
  EXPECT_EQ(series.at(restart), 0);
  EXPECT_EQ(series.at(adjust), 0);
  EXPECT_EQ(series.at(rebalance), 0);
  EXPECT_EQ(series.count("antdt_controller_actions_total{action=ADJUST_BS,job=paper-mix,"
                         "namespace=default,outcome=done,rule=antdt-nd:rebalance,}"),
            0u)
      << "a rebalance is no action";
  policy::Decision d;
  d.action = policy::AdjustBatchSize{"worker-3", 32, 1};
  d.rule = "antdt-nd:transient-adjust";
  d.subject = "worker-3";
  m.Decided(d, "done");
  series = Series(registry.Collect());
  EXPECT_EQ(series.at(adjust), 1) << "the same series, from 0 to 1";
  // A custom policy's own rules; mode Recommend counts recommendations.
  policy::PolicySpec custom;
  custom.name = vocab::Policy::kCustom;
  policy::Rule slow;
  slow.name = "slow";
  slow.action = vocab::ActionKind::kKillRestart;
  custom.rules = {slow};
  prometheus::Registry other;
  JobMetrics r(other, "default", "rec", 10);
  r.Expect(policy::PossibleDecisions(custom), /*recommend=*/true);
  series = Series(other.Collect());
  EXPECT_EQ(series.at("antdt_controller_recommendations_total{action=KILL_RESTART,job=rec,"
                      "namespace=default,rule=slow,}"),
            0);
}

TEST(JobMetrics, NoEtaBeforeThereIsAPace) {
  prometheus::Registry registry;
  JobMetrics m(registry, "default", "j", 3);
  m.Progress(0, 1000, 0, -1);
  EXPECT_EQ(Series(registry.Collect()).count("antdt_job_eta_seconds{job=j,namespace=default,}"),
            0u);
}

// Jobs of one process share the registry; a job's series go with it.
TEST(JobMetrics, AJobsSeriesGoWhenItEnds) {
  prometheus::Registry registry;
  auto a = std::make_unique<JobMetrics>(registry, "ns-a", "train", 10);
  JobMetrics b(registry, "ns-b", "train", 10);  // the same name in another namespace
  a->Progress(10, 100, 1, 90);
  a->Action("KILL_RESTART", "r", "done");
  a->Rebalance("antdt-nd:rebalance", "done");
  a->BudgetUsed(1);
  a->Time({1.0, -1.0, {{"worker-0", 1.0}}});
  a->Skipped("cooldown");
  b.Progress(20, 100, 1, 80);
  const std::string b_committed = "antdt_job_records_committed{job=train,namespace=ns-b,}";
  EXPECT_EQ(Series(registry.Collect()).at(b_committed), 20);
  EXPECT_EQ(
      Series(registry.Collect()).count("antdt_controller_action_budget{job=train,namespace=ns-a,}"),
      1u);
  a.reset();
  for (const auto& [key, value] : Series(registry.Collect())) {
    EXPECT_EQ(key.find("namespace=ns-a"), std::string::npos) << key;
  }
  EXPECT_EQ(Series(registry.Collect()).at(b_committed), 20);
}

// The ledger's increments as counters: saved and cost apart (counters never
// go down), time lost per job and per worker, skipped actions by reason.
TEST(JobMetrics, TimeLostSavedCostAndSkips) {
  prometheus::Registry registry;
  JobMetrics m(registry, "ns", "j", 10);
  m.Time({2.0, 3.0, {{"worker-1", 1.5}}});
  m.Time({1.0, -0.5, {{"worker-1", 0.5}, {"worker-2", 0.25}}});
  m.Skipped("cooldown");
  m.Skipped("cooldown");
  m.Skipped("cost_above_saving");
  auto series = Series(registry.Collect());
  EXPECT_DOUBLE_EQ(series.at("antdt_job_straggler_lost_seconds_total{job=j,namespace=ns,}"), 3.0);
  EXPECT_DOUBLE_EQ(series.at("antdt_controller_estimated_saved_seconds_total{job=j,namespace=ns,}"),
                   3.0);
  EXPECT_DOUBLE_EQ(series.at("antdt_controller_estimated_cost_seconds_total{job=j,namespace=ns,}"),
                   0.5);
  EXPECT_DOUBLE_EQ(
      series.at("antdt_worker_straggler_lost_seconds_total{job=j,namespace=ns,worker=worker-1,}"),
      2.0);
  EXPECT_DOUBLE_EQ(
      series.at("antdt_worker_straggler_lost_seconds_total{job=j,namespace=ns,worker=worker-2,}"),
      0.25);
  EXPECT_EQ(series.at("antdt_controller_skipped_total{job=j,namespace=ns,reason=cooldown,}"), 2);
  EXPECT_EQ(
      series.at("antdt_controller_skipped_total{job=j,namespace=ns,reason=cost_above_saving,}"), 1);
}

class Fixed final : public prometheus::Collectable {
 public:
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily f{"x", "h", prometheus::MetricType::Gauge, {}};
    prometheus::ClientMetric with_job;
    with_job.label = {{"job", "j"}, {"worker", "w"}};
    prometheus::ClientMetric with_ns;
    with_ns.label = {{"job", "j"}, {"namespace", "kept"}};
    prometheus::ClientMetric node;
    node.label = {{"node", "n"}};
    f.metric = {with_job, with_ns, node};
    return {f};
  }
};

TEST(WithNamespaces, LooksTheNamespaceUpPerJob) {
  auto wrapped = WithNamespaces(std::make_shared<Fixed>(),
                                [](const std::string& job) -> std::optional<std::string> {
                                  if (job == "j") return "team-c";
                                  return std::nullopt;
                                });
  auto series = Series(wrapped->Collect());
  EXPECT_EQ(series.count("x{job=j,worker=w,namespace=team-c,}"), 1u);
  EXPECT_EQ(series.count("x{job=j,namespace=kept,}"), 1u);
  auto unknown = WithNamespaces(std::make_shared<Fixed>(),
                                [](const std::string&) { return std::optional<std::string>(); });
  series = Series(unknown->Collect());
  EXPECT_EQ(series.count("x{job=j,worker=w,}"), 1u);  // not known: left without
}

TEST(WithNamespace, AddsTheNamespaceToJobSeriesOnly) {
  auto wrapped = WithNamespace(std::make_shared<Fixed>(), "team-b");
  const auto series = Series(wrapped->Collect());
  EXPECT_EQ(series.count("x{job=j,worker=w,namespace=team-b,}"), 1u);
  EXPECT_EQ(series.count("x{job=j,namespace=kept,}"), 1u);  // its own wins
  EXPECT_EQ(series.count("x{node=n,}"), 1u);                // no job: no namespace
}

}  // namespace
}  // namespace antdt::metrics
