// Helpers for the runtime's unit tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "backends/kubernetes/client/api.h"
#include "common/clock.h"

namespace antdt::kube::testing {

// Polls `pred` until true or `timeout_ms` of real time passed.
inline bool Eventually(const std::function<bool()>& pred, int64_t timeout_ms = 10000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

// Moves `clock` forward by `step_ms` every few real milliseconds until `pred`
// holds; false when `max_ms` of fake time passed first.
inline bool AdvanceUntil(FakeClock& clock, const std::function<bool()>& pred, int64_t step_ms = 100,
                         int64_t max_ms = 120000, int real_pause_ms = 5) {
  for (int64_t moved = 0; moved <= max_ms; moved += step_ms) {
    if (Eventually(pred, real_pause_ms)) return true;
    clock.Advance(step_ms);
  }
  return pred();
}

inline Json Pod(const std::string& ns, const std::string& name,
                const Json& labels = Json::object()) {
  return Json{{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
              {"spec", {{"containers", Json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
}

inline absl::Status HttpError(int code, const std::string& reason) {
  return ApiError(code, Json{{"kind", "Status"},
                             {"apiVersion", "v1"},
                             {"status", "Failure"},
                             {"reason", reason},
                             {"message", reason},
                             {"code", code}});
}

}  // namespace antdt::kube::testing
