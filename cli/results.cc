#include "cli/results.h"

#include <utility>

namespace antdt::cli {
namespace {

template <typename T>
nlohmann::ordered_json OrNull(const std::optional<T>& v) {
  return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
}

}  // namespace

std::string ResultsJson(const std::string& scenario, const std::vector<ResultRow>& rows,
                        const nlohmann::ordered_json& header) {
  nlohmann::ordered_json out = {{"scenario", scenario}};
  for (const auto& [key, value] : header.items()) out[key] = value;
  out["results"] = nlohmann::ordered_json::array();
  const double ideal = rows.empty() ? 0 : rows.front().jct_seconds;
  for (const ResultRow& r : rows) {
    nlohmann::ordered_json actions = nlohmann::ordered_json::array();
    for (const ResultAction& a : r.actions) {
      actions.push_back(
          {{"at_seconds", a.at_seconds}, {"action", vocab::Name(a.action)}, {"worker", a.worker}});
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
