// A job's own series, beside the Monitor's: its progress and the Controller's
// actions, with the `namespace` and `job` labels every per-job series carries.
// The local runner and the operator both keep one per job; the series go when
// it is destroyed (the job ended, or was deleted).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "antdt/v1/monitor.pb.h"
#include "core/loop/time_ledger.h"
#include "core/policy/policy.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace antdt::metrics {

class JobMetrics {
 public:
  // Series in `registry` (shared by every job of a process; it must outlive
  // this). `action_budget`: the actions the policy may take in all (maxActions).
  JobMetrics(prometheus::Registry& registry, std::string ns, std::string job,
             int64_t action_budget);
  ~JobMetrics();  // removes this job's series
  JobMetrics(const JobMetrics&) = delete;
  JobMetrics& operator=(const JobMetrics&) = delete;

  // Records committed of `total` (every epoch), the recent pace and the
  // sharding service's estimate of the seconds left (< 0: none yet).
  void Progress(int64_t committed, int64_t total, double records_per_second, double eta_seconds);
  // An action carried out, or tried: its kind, rule and outcome ("done",
  // "not_delivered", "failed").
  void Action(const std::string& kind, const std::string& rule, const std::string& outcome);
  // A batch change that only keeps the global batch constant
  // (policy::IsRebalance): antdt_controller_rebalances_total, by rule and
  // outcome, apart from the actions.
  void Rebalance(const std::string& rule, const std::string& outcome);
  // The series of every decision in `possible` (policy::PossibleDecisions)
  // at 0, outcome "done" (and, with `recommend`, the recommendations'), so
  // that the first decision of each counts in rate() and increase().
  // Idempotent: a policy changed on a running job adds its own.
  void Expect(const std::vector<policy::PossibleDecision>& possible, bool recommend);
  // A decision carried out or tried: a Rebalance when it is one, else an Action.
  void Decided(const policy::Decision& decision, const std::string& outcome);
  // The action budget used so far, as the policy counts it against maxActions
  // (policy::BudgetUsed): antdt_controller_action_budget_used.
  void BudgetUsed(int64_t used);
  // A decision recommended, not carried out (mode Recommend):
  // antdt_controller_recommendations_total by action and rule, and its
  // predicted saving in antdt_controller_recommended_saving_seconds_total.
  void Recommended(const policy::Decision& decision, double predicted_saving_seconds);
  // An action a policy passed over, and why (policy::SkipReasonName).
  void Skipped(const std::string& reason);
  // The time ledger's increments for one view (time_ledger.h): time lost to
  // stragglers, per job and per worker, and saved (or, when negative, cost)
  // by the actions.
  void Time(const loop::TimeDelta& delta);

 private:
  prometheus::Labels Job() const { return {{"namespace", ns_}, {"job", job_}}; }
  prometheus::Gauge& GaugeOf(prometheus::Family<prometheus::Gauge>& family);
  // Adds `c` to `made` (the series this job removes when it ends), once.
  static void Track(std::vector<prometheus::Counter*>& made, prometheus::Counter& c);

  const std::string ns_;
  const std::string job_;
  prometheus::Family<prometheus::Gauge>& committed_;
  prometheus::Family<prometheus::Gauge>& records_;
  prometheus::Family<prometheus::Gauge>& pace_;
  prometheus::Family<prometheus::Gauge>& eta_;
  prometheus::Family<prometheus::Counter>& actions_;
  prometheus::Family<prometheus::Counter>& saved_;
  prometheus::Family<prometheus::Counter>& cost_;
  prometheus::Family<prometheus::Counter>& skipped_;
  prometheus::Family<prometheus::Gauge>& budget_;
  prometheus::Family<prometheus::Gauge>& budget_used_;
  prometheus::Family<prometheus::Counter>& rebalances_;
  prometheus::Family<prometheus::Counter>& job_lost_;
  prometheus::Family<prometheus::Counter>& worker_lost_;
  prometheus::Family<prometheus::Counter>& recommendations_;
  prometheus::Family<prometheus::Counter>& recommended_saving_;
  std::vector<prometheus::Counter*> workers_lost_;  // guarded by mu_
  std::mutex mu_;
  std::vector<std::pair<prometheus::Family<prometheus::Gauge>*, prometheus::Gauge*>> gauges_;
  std::vector<prometheus::Counter*> actions_made_;          // guarded by mu_
  std::vector<prometheus::Counter*> recommendations_made_;  // guarded by mu_
  std::vector<prometheus::Counter*> rebalances_made_;       // guarded by mu_
  std::vector<prometheus::Counter*> skips_made_;            // guarded by mu_
};

// `inner`'s series, each with a `namespace` label added where it has a `job`
// label and no namespace (the Monitor keys jobs by name alone).
std::shared_ptr<prometheus::Collectable> WithNamespace(
    std::shared_ptr<prometheus::Collectable> inner, std::string ns);
// The same with the namespace looked up per job name (the operator's jobs);
// nullopt leaves a series without one (a job unknown, or one name in two
// namespaces, which the Monitor cannot tell apart).
using NamespaceOf = std::function<std::optional<std::string>(const std::string& job)>;
std::shared_ptr<prometheus::Collectable> WithNamespaces(
    std::shared_ptr<prometheus::Collectable> inner, NamespaceOf namespace_of);

}  // namespace antdt::metrics
