// When an operator replica is ready (its Kubernetes readiness probe, a gRPC
// health check of service "antdt.operator"): the API server has answered
// recently, and the acting replica's informers have synced. A standby is ready
// while the API server answers, so that rollouts proceed; the Monitor's Service
// picks the acting replica by its pod label, not by readiness.
//
//   Readiness ready(10'000, &RealClock::Get());
//   client options: on_request = [&](..., int code, ...) { ready.OnResponse(code); };
//   ready.SetActing(&controller);            // once it leads
//   absl::Status s = ready.Check();          // OK, or Unavailable with the reason
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "api/vocab/labels.h"
#include "backends/kubernetes/client/api.h"
#include "common/clock.h"

namespace antdt::kube_operator {

class Readiness {
 public:
  // Unready once the API server has not answered for `stale_after_ms`.
  Readiness(int64_t stale_after_ms, const Clock* clock);

  // An API request's outcome: an HTTP code below 500 is the server answering
  // (403 and 404 included); 0 (no connection) and 5xx are not.
  void OnResponse(int http_code);
  // The acting replica's informers: `synced` reports whether they have all
  // listed once. Unset (a standby): only the API server counts.
  void SetActing(std::function<bool()> synced);

  absl::Status Check() const;
  // True when the API server has not answered for half the window (or ever):
  // time to ask it something.
  bool Quiet() const;

 private:
  const int64_t stale_after_ms_;
  const Clock* clock_;
  std::atomic<int64_t> last_answer_ms_{-1};
  mutable std::mutex mu_;
  std::function<bool()> synced_;  // guarded by mu_
};

// The gRPC health service whose status is the replica's readiness.
inline constexpr char kReadinessService[] = "antdt.operator";

// Marks the pod `ns`/`pod` as the acting replica's (vocab::kLabelLeader
// "true": the chart's Monitor Service selects it, so agents reach the acting
// replica's Monitor only) or removes the mark, by a merge patch of its labels. A no-op without a
// pod name (the operator run outside a pod).
absl::Status MarkLeader(kube::Api* api, const std::string& ns, const std::string& pod,
                        bool leading);

}  // namespace antdt::kube_operator
