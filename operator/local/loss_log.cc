#include "operator/local/loss_log.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/config.h"

namespace antdt::local {

LossCurve ParseLossLog(const std::string& text, double start_unix) {
  LossCurve curve;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("loss") || !j["loss"].is_number()) continue;
    const double loss = j["loss"].get<double>();
    const double t = j.contains("time_unix") && j["time_unix"].is_number()
                         ? j["time_unix"].get<double>() - start_unix
                         : 0;
    if (j.contains("step") && j["step"].is_number_integer()) {
      curve.steps = std::max(curve.steps, j["step"].get<int64_t>());
    }
    if (curve.points.empty()) curve.first_loss = loss;
    curve.final_loss = loss;
    curve.points.emplace_back(t, loss);
  }
  return curve;
}

std::optional<LossCurve> ReadLossLog(const std::string& path, double start_unix) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  return ParseLossLog(*text, start_unix);
}

}  // namespace antdt::local
