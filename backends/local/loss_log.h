// A worker's loss log (ANTDT_LOSS_LOG): JSON lines, one per optimizer step,
// appended by every incarnation:
//   {"time_unix": 1764500000.1, "step": 12, "loss": 0.69, "samples": 256}
// The runner reads worker-0's for the loss of a job without parameter
// servers, and keeps the whole curve for the benchmark's chart.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace antdt::local {

inline constexpr int kFinalLossSteps = 10;

struct LossCurve {
  double first_loss = -1;  // of the first line; -1: no line
  // The sample-weighted mean of the last kFinalLossSteps lines: the last
  // step alone is often a small partial batch, too noisy to compare runs by.
  double final_loss = -1;
  int64_t steps = 0;  // the highest step seen
  // (seconds since the job started, loss), in the log's order.
  std::vector<std::pair<double, double>> points;
};

// The curve in `text`, times relative to `start_unix`. Lines that are not a
// JSON object with a numeric loss (a line cut off when the job stopped) are
// skipped; time_unix, step and samples (weight 1 when absent) are optional.
LossCurve ParseLossLog(const std::string& text, double start_unix);

// The curve in the file at `path`; nullopt when there is no such file.
std::optional<LossCurve> ReadLossLog(const std::string& path, double start_unix);

// The final model on held-out data, as a trainer may write it beside its loss
// log (`<ANTDT_LOSS_LOG>.eval.json`, examples/pytorch/train.py):
//   {"log_loss": 0.41, "accuracy": 0.83, "records": 4096}
struct HeldOut {
  double log_loss = -1;
  double accuracy = -1;
};
// nullopt when there is no such file or it is not such an object.
std::optional<HeldOut> ReadHeldOut(const std::string& path);

}  // namespace antdt::local
