#include "operator/runtime/internal/util.h"

#include <ctime>
#include <mutex>
#include <random>

#include "absl/strings/str_format.h"

namespace antdt::kube::internal {
namespace {

std::string Format(int64_t unix_ms, bool micro) {
  std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  int64_t ms = unix_ms % 1000;
  if (ms < 0) {
    ms += 1000;
    --seconds;
  }
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  std::string out = absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900,
                                    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
  if (micro) out += absl::StrFormat(".%06d", ms * 1000);
  return out + "Z";
}

std::mt19937_64& Engine() {
  static std::mt19937_64 engine{std::random_device{}()};
  return engine;
}
std::mutex& EngineMutex() {
  static std::mutex mu;
  return mu;
}

}  // namespace

std::string FormatTime(int64_t unix_ms) { return Format(unix_ms, false); }
std::string FormatMicroTime(int64_t unix_ms) { return Format(unix_ms, true); }

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
