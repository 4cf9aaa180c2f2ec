// Time from an injected clock, so the ledger and policies are tested with a
// fake one. Thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace antdt {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds on this clock's timeline: since the Unix epoch for
  // RealClock (and the operator's control loop); since the job started for
  // the local runner's and the simulator's job clocks. What reads one clock
  // compares its readings with each other only (Decision::at_ms with
  // Observed::now_ms), never with another clock's.
  virtual int64_t NowMillis() const = 0;
};

class RealClock final : public Clock {
 public:
  int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  static RealClock& Get() {
    static RealClock clock;
    return clock;
  }
};

// A clock that moves only when told to.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ms = 1'700'000'000'000) : now_(start_ms) {}
  int64_t NowMillis() const override { return now_.load(); }
  void Advance(int64_t ms) { now_ += ms; }
  void Set(int64_t ms) { now_ = ms; }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace antdt
