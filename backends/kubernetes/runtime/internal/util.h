// Helpers shared by the runtime's classes: waits measured on an injected
// Clock (so tests drive time with FakeClock) and randomness.
#pragma once

#include <cstdint>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/clock.h"

namespace antdt::kube::internal {

// Waits on `cv` (with `mu` held) until `done()` is true or `clock` reaches
// `deadline_ms`. A RealClock is waited on directly; any other clock (a
// FakeClock moved by a test) is polled every few milliseconds of real time.
// Returns done().
template <typename Done>
bool WaitUntil(absl::Mutex& mu, absl::CondVar& cv, const Clock* clock, int64_t deadline_ms,
               Done done) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
  const bool real = dynamic_cast<const RealClock*>(clock) != nullptr;
  while (!done()) {
    int64_t left = deadline_ms - clock->NowMillis();
    if (left <= 0) return false;
    if (!real && left > 5) left = 5;
    cv.WaitWithTimeout(&mu, absl::Milliseconds(left));
  }
  return true;
}

// A uniformly distributed double in [0, 1), thread-safe.
double RandomUnit();
// A random UUID v4.
std::string RandomUuid();

}  // namespace antdt::kube::internal
