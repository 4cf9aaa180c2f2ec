#include "backends/kubernetes/runtime/internal/util.h"

#include <mutex>
#include <random>

#include "absl/strings/str_format.h"

namespace antdt::kube::internal {
namespace {

std::mt19937_64& Engine() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}
std::mutex& EngineMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

double RandomUnit() {
  std::lock_guard<std::mutex> lock(EngineMutex());
  return std::uniform_real_distribution<double>(0.0, 1.0)(Engine());
}

std::string RandomUuid() {
  uint64_t hi, lo;
  {
    std::lock_guard<std::mutex> lock(EngineMutex());
    hi = Engine()();
    lo = Engine()();
  }
  hi = (hi & ~0xF000ULL) | 0x4000ULL;              // version 4
  lo = (lo & ~(0xC0ULL << 56)) | (0x80ULL << 56);  // variant 10
  return absl::StrFormat("%08x-%04x-%04x-%04x-%012x", hi >> 32, (hi >> 16) & 0xFFFF, hi & 0xFFFF,
                         lo >> 48, lo & 0xFFFFFFFFFFFFULL);
}

}  // namespace antdt::kube::internal
