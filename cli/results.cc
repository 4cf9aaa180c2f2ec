#include "cli/results.h"

#include <cmath>
#include <iterator>
#include <utility>

namespace antdt::cli {
namespace {

template <typename T>
nlohmann::ordered_json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

// Student's t at 97.5% for n - 1 degrees of freedom (1.96 beyond 30).
double T975(size_t n) {
  static const double kT[] = {0,     12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365,
                              2.306, 2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
                              2.120, 2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069,
                              2.064, 2.060,  2.056, 2.052, 2.048, 2.045, 2.042};
  return n >= 2 && n - 1 < std::size(kT) ? kT[n - 1] : 1.96;
}

}  // namespace

MeanCi MeanAndCi(const std::vector<double>& values) {
  MeanCi out;
  if (values.empty()) return out;
  const double n = static_cast<double>(values.size());
  for (double v : values) out.mean += v / n;
  double ss = 0;
  for (double v : values) ss += (v - out.mean) * (v - out.mean);
  out.half_width =
      values.size() < 2 ? 0 : T975(values.size()) * std::sqrt(ss / (n - 1)) / std::sqrt(n);
  return out;
}

std::string ResultsJson(const std::string& scenario, const std::vector<ResultRow>& rows,
                        const nlohmann::ordered_json& header) {
  nlohmann::ordered_json out = {{"scenario", scenario}};
  for (const auto& [key, value] : header.items()) out[key] = value;
  out["results"] = nlohmann::ordered_json::array();
  const double ideal = rows.empty() ? 0 : rows.front().jct_seconds;
  for (const ResultRow& r : rows) {
    nlohmann::ordered_json actions = nlohmann::ordered_json::array();
    for (const policy::Decision& d : r.actions) {
      actions.push_back({{"at_seconds", policy::AtSeconds(d)},
                         {"action", policy::ActionName(d.action)},
                         {"worker", policy::ActionTarget(d.action)}});
    }
    nlohmann::ordered_json row = {
        {"policy", r.policy},
        {"jct_seconds", r.jct_seconds},
        {"ratio_to_no_slowdown", ideal > 0 ? nlohmann::ordered_json(r.jct_seconds / ideal)
                                           : nlohmann::ordered_json(nullptr)},
        {"records_committed", r.records_committed},
        {"exactly_once", OrNull(r.exactly_once)},
        {"exactly_once_checked", r.exactly_once.has_value()},
        {"first_loss", OrNull(r.first_loss)},
        {"final_loss", OrNull(r.final_loss)},
        {"held_out_log_loss", OrNull(r.held_out_log_loss)},
        {"held_out_accuracy", OrNull(r.held_out_accuracy)},
        {"steps", r.steps},
        {"estimated_saved_seconds", r.estimated_saved_seconds},
        {"estimated_lost_seconds", r.estimated_lost_seconds},
        {"saved_vs_none_seconds", OrNull(r.saved_vs_none_seconds)}};
    for (const auto& [key, value] : r.extra.items()) row[key] = value;
    row["actions"] = std::move(actions);
    out["results"].push_back(std::move(row));
  }
  return out.dump(2) + "\n";
}

}  // namespace antdt::cli
