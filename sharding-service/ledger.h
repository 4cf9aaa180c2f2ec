// The shard ledger: the state machine of the sharding service.
//
// TODO -> DOING (lease: fencing token, deadline) -> DONE per shard and epoch.
// A lease that expires, or whose worker is released or restarted, returns the
// shard's unfinished remainder to the front of the queue; a later report under
// its token is refused, so no record of an epoch is committed twice and none
// is lost. Every change is appended to the Store and each call returns only
// once that change (and all before it) is durable.
//
// Thread-safe: one mutex guards the state; durability waits happen outside it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "antdt/v1/sharding.pb.h"
#include "common/clock.h"
#include "sharding-service/store.h"

namespace antdt::sharding {

struct LedgerOptions {
  int64_t lease_ttl_ms = 30'000;
  int64_t wait_retry_ms = 200;  // retry-after when every shard left is leased
  int64_t rate_window_ms = 30'000;
};

// Counters over the life of this process, for metrics.
struct DatasetStats {
  std::string job;
  std::string name;
  int32_t epoch = 0;
  int64_t shards_todo = 0;
  int64_t shards_doing = 0;
  int64_t shards_done = 0;
  int64_t records_committed_total = 0;
  int64_t requeues = 0;
  int64_t lease_expirations = 0;
};

class Ledger {
 public:
  // Rebuilds state from `store` (a restart resumes where it stopped; leases
  // alive at the crash get a fresh deadline).
  static absl::StatusOr<std::unique_ptr<Ledger>> Open(Store* store, const Clock* clock,
                                                      LedgerOptions options);

  absl::StatusOr<v1::CreateDatasetResponse> CreateDataset(const v1::CreateDatasetRequest& req);
  absl::StatusOr<v1::AcquireShardResponse> AcquireShard(const v1::AcquireShardRequest& req);
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& req);
  absl::StatusOr<v1::CompleteShardResponse> CompleteShard(const v1::CompleteShardRequest& req);
  absl::StatusOr<v1::ReleaseWorkerResponse> ReleaseWorker(const v1::ReleaseWorkerRequest& req);
  absl::StatusOr<v1::CheckpointResponse> Checkpoint(const v1::CheckpointRequest& req);
  absl::StatusOr<v1::RestoreResponse> Restore(const v1::RestoreRequest& req);
  absl::StatusOr<v1::GetProgressResponse> GetProgress(const v1::GetProgressRequest& req);

  // Ends every lease past its deadline; returns how many. Called by a reaper
  // thread and at the start of each call on a dataset.
  absl::StatusOr<int> ExpireLeases();

  std::vector<DatasetStats> Stats() const;

  struct Dataset;
  ~Ledger();

 private:
  Ledger(Store* store, const Clock* clock, LedgerOptions options);
  absl::Status Recover();
  absl::Status UnknownToken(const Dataset& ds, uint64_t token) const;
  // An ended lease of `ds` (recent ones from memory, older from the store);
  // FAILED_PRECONDITION or NOT_FOUND when there is no row for the token.
  absl::StatusOr<std::optional<LeaseRow>> EndedLease(const Dataset& ds, uint64_t token) const;

  Store* const store_;
  const Clock* const clock_;
  const LedgerOptions options_;

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Dataset>> datasets_;  // "job/name"
  int64_t next_dataset_id_ = 1;
  uint64_t next_token_ = 1;
};

// Deterministic permutation of [0, n) for a seed (Fisher-Yates over
// splitmix64), the same on every platform.
std::vector<int64_t> Permutation(int64_t n, uint64_t seed);

}  // namespace antdt::sharding
