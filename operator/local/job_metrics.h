// What a local job exposes on the runner's /metrics beside the Monitor's
// series: the job's progress and the Controller's actions, with the
// `namespace` and `job` labels every per-job series carries.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace antdt::local {

class JobMetrics {
 public:
  // `action_budget`: the actions the policy may take in all (maxActions).
  JobMetrics(std::string ns, std::string job, int64_t action_budget);

  // The series, for an exposer (it holds them weakly).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Records committed of `total` (every epoch), the recent pace and the
  // sharding service's estimate of the seconds left (< 0: none yet).
  void Progress(int64_t committed, int64_t total, double records_per_second, double eta_seconds);
  // An action carried out: its kind and rule, and the seconds the Controller
  // expected it to save (0: no estimate).
  void Action(const std::string& kind, const std::string& rule, double saved_seconds);

 private:
  prometheus::Labels Job() const { return {{"namespace", ns_}, {"job", job_}}; }

  const std::string ns_;
  const std::string job_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  prometheus::Family<prometheus::Gauge>& committed_;
  prometheus::Family<prometheus::Gauge>& records_;
  prometheus::Family<prometheus::Gauge>& pace_;
  prometheus::Family<prometheus::Gauge>& eta_;
  prometheus::Family<prometheus::Counter>& actions_;
  prometheus::Family<prometheus::Counter>& saved_;
  prometheus::Family<prometheus::Gauge>& budget_;
  std::mutex mu_;
};

// `inner`'s series, each with a `namespace` label added where it has a `job`
// label and no namespace (the Monitor keys jobs by name alone).
std::shared_ptr<prometheus::Collectable> WithNamespace(
    std::shared_ptr<prometheus::Collectable> inner, std::string ns);

}  // namespace antdt::local
