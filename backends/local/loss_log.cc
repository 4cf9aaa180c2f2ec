#include "backends/local/loss_log.h"

#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/config.h"

namespace antdt::local {

LossCurve ParseLossLog(const std::string& text, double start_unix) {
  LossCurve curve;
  std::deque<std::pair<double, double>> last;  // (loss, samples) of the last lines
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
    const double samples = j.contains("samples") && j["samples"].is_number()
                               ? std::max(j["samples"].get<double>(), 0.0)
                               : 1.0;
    if (curve.points.empty()) curve.first_loss = loss;
    last.emplace_back(loss, samples);
    if (last.size() > kFinalLossSteps) last.pop_front();
    curve.points.emplace_back(t, loss);
  }
  double sum = 0, weight = 0;
  for (const auto& [loss, samples] : last) {
    sum += loss * samples;
    weight += samples;
  }
  if (weight > 0) curve.final_loss = sum / weight;
  return curve;
}

std::optional<LossCurve> ReadLossLog(const std::string& path, double start_unix) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  return ParseLossLog(*text, start_unix);
}

std::optional<HeldOut> ReadHeldOut(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("log_loss") || !j["log_loss"].is_number()) {
    return std::nullopt;
  }
  HeldOut h;
  h.log_loss = j["log_loss"].get<double>();
  if (j.contains("accuracy") && j["accuracy"].is_number()) h.accuracy = j["accuracy"].get<double>();
  return h;
}

}  // namespace antdt::local
