// results.json, as `antdt bench stragglers` (real runs) and `antdt sim`
// (simulated ones) write it: one writer, so that a reader (the calibration
// benchmark, docs/study/make-chart.py, a user's notebook) reads either.
//
//   {"scenario": ..., <header extras: "simulated", "seeds">,
//    "results": [{"policy", "jct_seconds", "ratio_to_no_slowdown",
//                 "records_committed", "exactly_once", "exactly_once_checked",
//                 "first_loss", "final_loss", "held_out_log_loss",
//                 "held_out_accuracy", "steps", "estimated_saved_seconds",
//                 "estimated_lost_seconds", "saved_vs_none_seconds",
//                 <row extras>, "actions": [{"at_seconds", "action", "worker"}]}]}
//
// A figure a run did not measure is null, never a made-up 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/vocab/vocab.h"
#include "core/policy/policy.h"
#include "nlohmann/json.hpp"

namespace antdt::cli {

// One policy's row; the first row is the one the ratios are to (no-slowdown).
struct ResultRow {
  std::string policy;
  double jct_seconds = 0;
  int64_t records_committed = 0;
  std::optional<bool> exactly_once;  // nullopt: not checked
  std::optional<double> first_loss, final_loss;
  std::optional<double> held_out_log_loss, held_out_accuracy;
  int64_t steps = 0;
  double estimated_saved_seconds = 0, estimated_lost_seconds = 0;
  std::optional<double> saved_vs_none_seconds;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // before "actions"
  policy::History actions;  // at_seconds, action and worker each
};

// The mean of `values` and the half width of its 95% confidence interval
// (Student's t; 0 with fewer than two values).
struct MeanCi {
  double mean = 0;
  double half_width = 0;
};
MeanCi MeanAndCi(const std::vector<double>& values);

// The document, two-space indented with a final newline. `header`: keys
// after "scenario" (an object).
std::string ResultsJson(const std::string& scenario, const std::vector<ResultRow>& rows,
                        const nlohmann::ordered_json& header = nlohmann::ordered_json::object());

}  // namespace antdt::cli
