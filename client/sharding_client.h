// The worker-side C++ SDK of the sharding service.
//
//   ShardingClient client(channel, {.job = "j", .dataset = "train",
//                                   .worker_id = "worker-0", .incarnation = 0});
//   auto shard = client.Acquire();                   // nullopt: end of data
//   while (shard.ok() && *shard) {
//     for (int64_t i = 0; i < (*shard)->remaining(); ++i) Train((*shard)->RecordAt(i));
//     shard = client.CompleteAndAcquire(**shard);    // one call per shard
//   }
//
// Every call retries UNAVAILABLE, DEADLINE_EXCEEDED and CANCELLED (a service
// stopping gracefully cancels the calls it has not started) with exponential
// backoff while the service restarts, within `retry_budget_ms`, with the
// job's credential (ShardingClientOptions::token). A restarted
// worker passes a higher incarnation: the service hands it back its unfinished
// shard from after the last committed record. Not thread-safe: one client per
// worker thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "antdt/v1/sharding.grpc.pb.h"

namespace antdt::client {

struct ShardingClientOptions {
  std::string job;
  std::string dataset;
  std::string worker_id;
  int64_t incarnation = 0;
  int64_t retry_budget_ms = 60'000;  // keep retrying a call this long
  int64_t call_timeout_ms = 5'000;
  // The job's credential, sent with every call (common/credential.h). Empty:
  // $ANTDT_TOKEN, else the file $ANTDT_TOKEN_FILE names, else none.
  std::string token;
  // ReportProgress says the caller takes no record of a lease beyond what it
  // commits and follows a shorter end (ReportProgressRequest.follow_shorter_end):
  // the lease's remaining() may then shrink after a ReportProgress, and
  // records past it must not be taken. Off: leases end where acquired.
  bool follow_shorter_leases = false;
};

// `shard` (as AcquireShard answered it) ends at `end`, counted from the
// shard's first record and at least shard.committed(): `end`, `record_ids`
// and `lease_end` stop there (a ReportProgressResponse.lease_end).
void EndShardAt(v1::Shard& shard, int64_t end);

// An acquired shard under its lease.
struct ShardLease {
  v1::Shard shard;
  uint64_t token = 0;
  int64_t committed = 0;  // records of the shard committed, from its start

  int32_t epoch() const { return shard.epoch(); }
  // The shard's records (from its first) at which this lease ends: its size,
  // or fewer for a much slower worker near an epoch's end (the guided layout).
  int64_t lease_end() const { return shard.lease_end() > 0 ? shard.lease_end() : shard.size(); }
  // Records still to do under this lease when acquired (fewer once the
  // service ended it early: see ShardingClientOptions::follow_shorter_leases).
  int64_t remaining() const { return lease_end() - shard.committed(); }
  // The service ended the lease at `end` (counted as lease_end()): when that
  // is before lease_end(), lease_end(), remaining() and the record ids stop
  // there. File slices are left as acquired.
  void EndAt(int64_t end);
  // The global record id of the i-th record still to do (0 <= i < remaining()).
  int64_t RecordAt(int64_t i) const {
    return shard.record_ids_size() > 0 ? shard.record_ids(static_cast<int>(i)) : shard.start() + i;
  }
};

class ShardingClient {
 public:
  ShardingClient(std::shared_ptr<grpc::Channel> channel, ShardingClientOptions options);

  absl::StatusOr<v1::CreateDatasetResponse> CreateDataset(const v1::DatasetSpec& spec);
  // A shard, or nullopt at the end of the data; waits out WAIT answers.
  absl::StatusOr<std::optional<ShardLease>> Acquire();
  // Commits the first `records_done` records of the shard (counted from the
  // shard's first record, so it starts at shard.committed()). On success
  // lease.committed is updated.
  absl::Status ReportProgress(ShardLease& lease, int64_t records_done);
  absl::Status Complete(ShardLease& lease);
  // Complete(), and the next shard (or nullopt at the end of the data) in the
  // same call; waits out WAIT answers like Acquire(). On success
  // lease.committed is updated; a lost lease (FAILED_PRECONDITION) acquires
  // nothing.
  absl::StatusOr<std::optional<ShardLease>> CompleteAndAcquire(ShardLease& lease);
  absl::Status Release();
  absl::StatusOr<v1::GetProgressResponse> Progress();

  // Consumes every record until the end of the data: `process` is called per
  // record; every `commit_every` records progress is reported, and
  // `on_commit(epoch, first, count)` is called once the service acknowledged
  // records [first, first+count) of the lease's remaining list.
  using ProcessFn = std::function<void(const ShardLease&, int64_t record_id)>;
  using CommitFn = std::function<void(const ShardLease&, int64_t from, int64_t to)>;
  absl::Status ConsumeAll(int64_t commit_every, const ProcessFn& process,
                          const CommitFn& on_commit);

  const ShardingClientOptions& options() const { return options_; }

 private:
  v1::DatasetRef Ref() const;
  // CompleteShard, with `next` when not null.
  absl::StatusOr<v1::CompleteShardResponse> CompleteCall(ShardLease& lease,
                                                         const v1::AcquireShardRequest* next);
  // An AcquireShard request of this worker under a fresh request id.
  v1::AcquireShardRequest AcquireRequest() const;
  // The shard `req` gets, starting from `answered` when the service already
  // answered it (inside CompleteShard); asks again after WAIT.
  absl::StatusOr<std::optional<ShardLease>> AcquireWith(const v1::AcquireShardRequest& req,
                                                        const v1::AcquireShardResponse* answered);
  template <typename Req, typename Resp, typename Call>
  absl::Status CallWithRetry(const Req& req, Resp* resp, Call call);

  std::unique_ptr<v1::ShardingService::Stub> stub_;
  ShardingClientOptions options_;
};

// A channel to the sharding service that reconnects quickly after a restart
// (gRPC's default reconnect backoff grows to minutes; a lease is seconds).
std::shared_ptr<grpc::Channel> CreateShardingChannel(const std::string& address);

// Releases what `options.worker_id` holds under `options.incarnation` on the
// service at `address`: its unfinished shards go back to the queue now rather
// than at lease expiry (a controller that stopped the worker for good).
absl::Status ReleaseWorker(const std::string& address, const ShardingClientOptions& options);

// Whether a status is worth retrying (the service is restarting or busy).
// CANCELLED is: these clients never cancel a call themselves, so it is the
// server's, which cancels the calls it had not started when it stops
// (SIGTERM: a pod deleted, a node drained).
bool IsRetryable(const absl::Status& status);

}  // namespace antdt::client
