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

// Feature slice [begin, begin + size) of parameter server `index` out of
// `count`: contiguous, in order, the first features % count one larger.
struct Slice {
  int64_t begin = 0;
  int64_t size = 0;
};
Slice PsSlice(int64_t features, int index, int count);

}  // namespace antdt::trainer
