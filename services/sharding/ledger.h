// The shard ledger: the state machine of the sharding service.
//
// TODO -> DOING (lease: fencing token, deadline) -> DONE per shard and epoch.
// A lease that expires, or whose worker is released or restarted, returns the
// shard's unfinished remainder to the front of the queue; a later report under
// its token is refused, so no record of an epoch is committed twice and none
// is lost. Every change is appended to the Store and each call returns only
// once that change (and all before it) is durable, except AcquireShard: a
// lease is answered before it is durable, and fenced if the process dies
// first (see IssueToken); records are only ever committed durably.
//
// Thread-safe: one mutex guards the state; durability waits, building a new
// dataset's shards, a checkpoint's snapshot and a restored dataset's state
// happen outside it (the dataset is marked busy meanwhile and its calls
// answer UNAVAILABLE). Lease
// clocks stop while the service holds its callers off: when the mutex was
// held for longer than kStallMs, every active lease gets that time back.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "antdt/v1/sharding.pb.h"
#include "common/clock.h"
#include "services/sharding/store.h"

namespace antdt::sharding {

// What one request may ask for. Each bound is checked at the edge of the call
// that carries it, and a refused call changes nothing (docs/sharding.md,
// "Limits").
//
// Names (job, dataset name, worker id, request id): 1 to 253 bytes, like a
// Kubernetes object name, with no control character (a NUL would cut the name
// short in the store, and two names would become one).
inline constexpr size_t kMaxNameBytes = 253;
// A file path: PATH_MAX on Linux.
inline constexpr size_t kMaxPathBytes = 4096;
inline constexpr int64_t kMaxShardsPerDataset = 50'000'000;
// A shuffled shard's record ids are listed in every AcquireShard answer, at
// most 10 bytes each: 100,000 of them take at most 1 MB, a quarter of gRPC's
// default 4 MiB limit on a message a client accepts.
inline constexpr int64_t kMaxShuffledShardSize = 100'000;
// The same bound on the file slices of an unshuffled shard.
inline constexpr int64_t kMaxAnswerBytes = 1'000'000;
// A hold of the ledger's mutex this long (ms) is a stall: the leases' clocks
// are moved on by it, so no lease expires because its holder was kept waiting.
inline constexpr int64_t kStallMs = 100;

struct LedgerOptions {
  int64_t lease_ttl_ms = 30'000;
  int64_t wait_retry_ms = 200;  // retry-after when every shard left is leased
  int64_t rate_window_ms = 30'000;
  // Totals over every dataset of the service; CreateDataset beyond them is
  // RESOURCE_EXHAUSTED. A shard takes about 32 bytes of memory (its slot, its
  // place in the queue): 100M shards are about 3.2 GB.
  int64_t max_datasets = 10'000;
  int64_t max_total_shards = 100'000'000;
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
  int64_t leases_shortened = 0;  // guided leasing: ended before their shard's end
};

// An answer, and the store batch that must be durable before it is given (0:
// none). The Deferred calls return it for a server that answers without a
// thread waiting (Store::OnDurable); the plain calls wait themselves.
template <typename Resp>
struct Deferred {
  Deferred(absl::Status status) : result(std::move(status)) {}  // NOLINT: RETURN_IF_ERROR
  Deferred(absl::StatusOr<Resp> r, uint64_t seq) : result(std::move(r)), durable_seq(seq) {}
  absl::StatusOr<Resp> result;
  uint64_t durable_seq = 0;
};

class Ledger {
 public:
  // Rebuilds state from `store` (a restart resumes where it stopped; leases
  // alive at the crash get a fresh deadline).
  static absl::StatusOr<std::unique_ptr<Ledger>> Open(Store* store, const Clock* clock,
                                                      LedgerOptions options);

  absl::StatusOr<v1::CreateDatasetResponse> CreateDataset(const v1::CreateDatasetRequest& req);
  absl::StatusOr<v1::AcquireShardResponse> AcquireShard(const v1::AcquireShardRequest& req) {
    return Await(AcquireShardDeferred(req));
  }
  absl::StatusOr<v1::ReportProgressResponse> ReportProgress(const v1::ReportProgressRequest& req) {
    return Await(ReportProgressDeferred(req));
  }
  absl::StatusOr<v1::CompleteShardResponse> CompleteShard(const v1::CompleteShardRequest& req) {
    return Await(CompleteShardDeferred(req));
  }
  // The calls of every step, for a server that does not hold a thread while
  // the group commit runs.
  Deferred<v1::AcquireShardResponse> AcquireShardDeferred(const v1::AcquireShardRequest& req);
  Deferred<v1::ReportProgressResponse> ReportProgressDeferred(const v1::ReportProgressRequest& req);
  Deferred<v1::CompleteShardResponse> CompleteShardDeferred(const v1::CompleteShardRequest& req);
  Store* store() const { return store_; }
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
  template <typename Resp>
  absl::StatusOr<Resp> Await(Deferred<Resp> d) const {
    if (d.durable_seq != 0) {
      if (absl::Status s = store_->WaitDurable(d.durable_seq); !s.ok()) return s;
    }
    return std::move(d.result);
  }
  absl::Status Recover();
  // AcquireShard, the request checked.
  Deferred<v1::AcquireShardResponse> AcquireChecked(const v1::AcquireShardRequest& req);
  // CompleteShard, the request checked; `next` (when set) is checked against
  // the completed lease before anything changes.
  Deferred<v1::CompleteShardResponse> CompleteOnly(const v1::CompleteShardRequest& req,
                                                   const v1::AcquireShardRequest* next);
  // With mu_ held: OK when `next` may follow the completion of a shard of
  // `completed` held by `worker` (the same job, a dataset that exists, the
  // same worker); else the refusal, naming the field.
  absl::Status CheckNext(const v1::AcquireShardRequest& next, const Dataset& completed,
                         const std::string& worker) const;
  // Marks the dataset `ref` names busy with `doing` (see Dataset::busy), or
  // the refusal ANTDT_FIND_DATASET gives.
  absl::StatusOr<Dataset*> MarkBusy(const v1::DatasetRef& ref, const char* doing);
  // With mu_ held: appends `batch` when it holds anything; the sequence to
  // wait for either way.
  uint64_t AppendIfAny(std::vector<Mutation>& batch);
  // Restore's work on a dataset marked busy, without mu_: reads the
  // checkpoint and builds the restored shard state beside the current one.
  struct StagedRestore;
  absl::Status StageRestore(const Dataset& ds, int64_t step, StagedRestore& staged) const;
  // Holds mu_; at its end a hold longer than kStallMs moves every active
  // lease's deadline on by it (the lease clocks stop while callers wait).
  class HeldLock {
   public:
    explicit HeldLock(Ledger& ledger);
    ~HeldLock();
    HeldLock(const HeldLock&) = delete;
    HeldLock& operator=(const HeldLock&) = delete;

   private:
    Ledger& ledger_;
    std::unique_lock<std::mutex> lock_;
    int64_t start_ms_;
  };
  // RESOURCE_EXHAUSTED when one more dataset of `shards` shards passes a
  // service total. With mu_ held.
  absl::Status CheckTotals(int64_t shards) const;
  absl::Status UnknownToken(const Dataset& ds, uint64_t token) const;
  // An ended lease of `ds` (recent ones from memory, older from the store);
  // FAILED_PRECONDITION or NOT_FOUND when there is no row for the token.
  absl::StatusOr<std::optional<LeaseRow>> EndedLease(const Dataset& ds, uint64_t token) const;

  Store* const store_;
  const Clock* const clock_;
  const LedgerOptions options_;

  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Dataset>> datasets_;  // "job/name"
  // Datasets being built outside mu_ by CreateDataset: a second create of the
  // same key waits on building_done_; their shards count in the totals.
  std::set<std::string> building_;
  std::condition_variable building_done_;
  int64_t total_shards_ = 0;  // of datasets_ and building_
  int64_t next_dataset_id_ = 1;
  uint64_t next_token_ = 1;
  // Tokens are issued from ranges reserved ahead in the store (NextToken is
  // the end of the last range), so an AcquireShard answers without waiting
  // for its lease to reach the disk. A lease lost with the process is fenced
  // after the restart: its token lies below the stored range end and has no
  // row, so every call under it is refused (FAILED_PRECONDITION) and no token
  // is issued twice. An answer waits only for the reservation its token came
  // from, which was appended long before unless the range ran out.
  struct IssuedToken {
    uint64_t token = 0;
    uint64_t wait_seq = 0;   // the batch that reserved it; 0: durable already
    bool own_batch = false;  // reserved by the batch being built
    bool reserved = false;   // the batch being built carries the next range
  };
  // With mu_ held; appends a reservation to `batch` when the range runs low.
  IssuedToken IssueToken(std::vector<Mutation>& batch);
  // With mu_ held, after the batch of an IssueToken() was appended as `seq`.
  void NoteAppended(uint64_t seq, const IssuedToken& issued);
  uint64_t recovered_bound_ = 1;  // tokens below it were reserved before this process
  uint64_t token_bound_ = 1;      // end of the ranges reserved (appended)
  // Reservations still needed, (range end, batch), oldest first.
  std::deque<std::pair<uint64_t, uint64_t>> reservations_;
};

// Deterministic permutation of [0, n) for a seed (Fisher-Yates over
// splitmix64), the same on every platform.
std::vector<int64_t> Permutation(int64_t n, uint64_t seed);

}  // namespace antdt::sharding
