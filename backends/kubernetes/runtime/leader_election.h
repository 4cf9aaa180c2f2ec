// Leader election on a coordination.k8s.io/v1 Lease: client-go's
// leaderelection (tryAcquireOrRenew, acquire, renew, release).
//
// A candidate tries to acquire every retry period (jittered); the leader
// renews every retry period and loses leadership when no renewal succeeds
// within the renew deadline. Another holder's lease is judged valid for
// leaseDurationSeconds after this process LAST SAW THE RECORD CHANGE (local
// clock), never by comparing renewTime with the local clock.
//
// Thread-safety: Run blocks the calling thread; Stop, IsLeader and
// CurrentHolder may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "backends/kubernetes/client/api.h"
#include "common/clock.h"

namespace prometheus {
class Registry;
class Gauge;
}  // namespace prometheus

namespace antdt::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  // Unique per process, e.g. hostname + "_" + uuid.
  std::string identity;
  int64_t lease_duration_ms = 15000;
  int64_t renew_deadline_ms = 10000;
  int64_t retry_period_ms = 2000;
  double jitter = 1.2;
  // Stop() hands the lease back (holder "", leaseDurationSeconds 1) so that
  // another candidate acquires at once.
  bool release_on_cancel = true;
  // RealClock when null.
  Clock* clock = nullptr;
  // When set, leader_election_master_status{name=<lease_name>} is 1 while
  // leading. Must outlive the elector.
  prometheus::Registry* registry = nullptr;
};

// OK, or InvalidArgument naming the field:
// lease_duration_ms > renew_deadline_ms > jitter * retry_period_ms, all > 0,
// jitter >= 1, names and identity non-empty.
absl::Status ValidateLeaderElectionConfig(const LeaderElectionConfig& config);

class LeaderElector {
 public:
  LeaderElector(Api* api, LeaderElectionConfig config);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Campaigns until elected, calls `on_started_leading` (on this thread; it
  // must start the work and return), then renews. Returns:
  // - OK after Stop() (the lease released when configured, then
  //   `on_stopped_leading` called if it was leading);
  // - Aborted "leader election lost" when a renewal did not succeed within
  //   the renew deadline (`on_stopped_leading` called first): the caller
  //   must stop acting as leader, normally by exiting non-zero;
  // - InvalidArgument for a bad config.
  absl::Status Run(std::function<void()> on_started_leading,
                   std::function<void()> on_stopped_leading);
  void Stop();
  // True between on_started_leading and losing or giving up the lease.
  bool IsLeader() const;
  // The holder in the last observed record ("" when none).
  std::string CurrentHolder() const;

 private:
  struct Record {
    std::string holder;
    int64_t lease_duration_s = 0;
    std::string acquire_time;
    std::string renew_time;
    int64_t transitions = 0;
    Json ToSpec() const;
    static Record FromSpec(const Json& spec);
  };

  bool TryAcquireOrRenew();
  // Writes `record` onto the last seen Lease object (PUT with its RV).
  absl::Status UpdateLease(const Record& record);
  void SetObserved(const Record& record) ABSL_LOCKS_EXCLUDED(mu_);
  bool ObservedIsMe() const;
  bool LeaseValid(int64_t now) const;
  void Release();
  // Sleeps on the clock; false when stopped meanwhile.
  bool Sleep(int64_t ms);
  bool stopped() const;
  void SetLeading(bool leading);

  Api* const api_;
  const LeaderElectionConfig config_;
  Clock* const clock_;
  prometheus::Gauge* master_status_ = nullptr;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_) = false;
  Record observed_ ABSL_GUARDED_BY(mu_);
  int64_t observed_at_ms_ ABSL_GUARDED_BY(mu_) = 0;
  // Run's thread only.
  std::string observed_raw_;   // the last record read, as JSON text
  std::optional<Json> lease_;  // the last Lease object read or written
};

}  // namespace antdt::kube
