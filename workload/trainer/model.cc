#include "workload/trainer/model.h"

#include <algorithm>
#include <cmath>

namespace antdt::trainer {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform number in [-1, 1] determined by (a, b, c).
double Uniform(uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(a) ^ b) ^ c);
  return static_cast<double>(h >> 11) / static_cast<double>((1ULL << 53) - 1) * 2.0 - 1.0;
}

constexpr uint64_t kTrueWeights = 0x7472756577ULL;  // streams of the hash, kept apart
constexpr uint64_t kFeatures = 0x66656174ULL;
constexpr uint64_t kNoise = 0x6e6f6973ULL;

// The margin params . x.
double Margin(const std::vector<float>& params, const Example& e) {
  double z = 0;
  for (size_t j = 0; j < params.size(); ++j) z += static_cast<double>(params[j]) * e.x[j];
  return z;
}

// log(1 + e^z) - y z, written so that neither branch overflows.
double LogisticLoss(double z, float y) {
  return (z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z))) - y * z;
}

}  // namespace

Example SyntheticExample(int64_t record_id, int64_t features, uint64_t seed) {
  Example e;
  e.x.resize(static_cast<size_t>(features));
  const uint64_t id = static_cast<uint64_t>(record_id);
  double margin = 0;
  for (int64_t j = 0; j < features; ++j) {
    const double x = Uniform(seed ^ kFeatures, id, static_cast<uint64_t>(j));
    e.x[static_cast<size_t>(j)] = static_cast<float>(x);
    margin += Uniform(seed ^ kTrueWeights, 0, static_cast<uint64_t>(j)) * x;
  }
  const bool flip = (Uniform(seed ^ kNoise, id, 0) + 1) / 2 < kLabelNoise;
  e.y = (margin > 0) != flip ? 1.0f : 0.0f;
  return e;
}

GradientSum Gradient(const std::vector<float>& params, const std::vector<Example>& examples) {
  GradientSum out;
  std::vector<double> grad(params.size(), 0.0);
  for (const Example& e : examples) {
    const double z = Margin(params, e);
    out.loss += LogisticLoss(z, e.y);
    const double p = 1 / (1 + std::exp(-z));
    for (size_t j = 0; j < params.size(); ++j) grad[j] += (p - e.y) * e.x[j];
  }
  out.gradient.assign(grad.begin(), grad.end());
  return out;
}

Evaluation Evaluate(const std::vector<float>& params, const std::vector<Example>& examples) {
  Evaluation out;
  double loss = 0;
  int64_t correct = 0;
  for (const Example& e : examples) {
    const double z = Margin(params, e);
    loss += LogisticLoss(z, e.y);
    correct += (z >= 0) == (e.y == 1.0f);
  }
  out.records = static_cast<int64_t>(examples.size());
  const auto n = static_cast<double>(std::max<int64_t>(out.records, 1));
  out.log_loss = loss / n;
  out.accuracy = static_cast<double>(correct) / n;
  return out;
}

std::vector<Example> HeldOutExamples(int64_t count, int64_t features, uint64_t seed) {
  std::vector<Example> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(count, 0)));
  for (int64_t i = 0; i < count; ++i) {
    out.push_back(SyntheticExample(kHeldOutFirstId + i, features, seed));
  }
  return out;
}

Slice PsSlice(int64_t features, int index, int count) {
  const int64_t base = features / count;
  const int64_t extra = features % count;
  Slice s;
  s.begin = index * base + std::min<int64_t>(index, extra);
  s.size = base + (index < extra ? 1 : 0);
  return s;
}

}  // namespace antdt::trainer
