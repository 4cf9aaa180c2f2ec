// The demo trainer's model: logistic regression (no bias) over a synthetic
// click-through dataset generated from record ids, so any worker can
// regenerate any record and reruns are reproducible. Pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace antdt::trainer {

struct Example {
  std::vector<float> x;  // features, each in [-1, 1]
  float y = 0;           // label, 0 or 1
};

// The fraction of labels flipped against the true model.
inline constexpr double kLabelNoise = 0.05;

// The example of `record_id`: x from a hash of (seed, record id) in [-1, 1];
// y = 1 when w_true . x > 0, w_true fixed by the seed, then flipped with
// probability kLabelNoise.
Example SyntheticExample(int64_t record_id, int64_t features, uint64_t seed);

struct GradientSum {
  std::vector<float> gradient;  // d(loss)/d(params), summed over the examples
  double loss = 0;              // logistic loss, summed over the examples
};

// The logistic loss of sigmoid(params . x) against y and its gradient, both
// summed (not averaged) over `examples`. Each example has params.size() features.
GradientSum Gradient(const std::vector<float>& params, const std::vector<Example>& examples);

// The final model on held-out data: the mean logistic loss and the fraction of
// examples whose prediction (sigmoid(params . x) >= 0.5) matches the label.
struct Evaluation {
  double log_loss = 0;
  double accuracy = 0;
  int64_t records = 0;
};
// Over `examples` (not empty, each with params.size() features).
Evaluation Evaluate(const std::vector<float>& params, const std::vector<Example>& examples);

// The held-out set: `count` examples of the same generator and seed (so the
// same true model) as the training records, with ids from kHeldOutFirstId on,
// far above any dataset's ids, so never a training record.
inline constexpr int64_t kHeldOutFirstId = int64_t{1} << 62;
std::vector<Example> HeldOutExamples(int64_t count, int64_t features, uint64_t seed);

// Feature slice [begin, begin + size) of parameter server `index` out of
// `count`: contiguous, in order, the first features % count one larger.
struct Slice {
  int64_t begin = 0;
  int64_t size = 0;
};
Slice PsSlice(int64_t features, int index, int count);

}  // namespace antdt::trainer
