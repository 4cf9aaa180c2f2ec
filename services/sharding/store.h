// Durable state of the sharding service, as rows. The ledger appends ordered
// batches of mutations; a batch is acknowledged to clients only after
// WaitDurable() of its sequence number. Implementations: SqliteStore (WAL,
// group commit) and MemoryStore (tests). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace antdt::sharding {

enum class ShardState : int { kTodo = 0, kDoing = 1, kDone = 2 };
enum class LeaseState : int {
  kActive = 0,
  kCompleted = 1,
  kExpired = 2,
  kReleased = 3,
  kFenced = 4,  // ended by Restore
};
const char* LeaseStateName(LeaseState state);

struct DatasetRow {
  int64_t id = 0;
  std::string job;
  std::string name;
  std::string spec;  // serialised antdt.v1.DatasetSpec
  int32_t epoch = 0;
  int64_t requeues = 0;     // remainders sent back to the queue, ever
  int64_t expirations = 0;  // leases that passed their deadline, ever
};

// A shard of a dataset's current epoch that is not "to do, nothing committed".
struct ShardRow {
  int64_t dataset_id = 0;
  int64_t index = 0;
  ShardState state = ShardState::kTodo;
  int64_t committed = 0;
  uint64_t token = 0;
};

struct LeaseRow {
  uint64_t token = 0;
  int64_t dataset_id = 0;
  int32_t epoch = 0;
  int64_t index = 0;
  std::string worker;
  int64_t incarnation = 0;
  int64_t begin = 0;      // shard's committed records when the lease began
  int64_t committed = 0;  // shard's committed records under this lease
  LeaseState state = LeaseState::kActive;
  std::string request_id;  // of the AcquireShard call that created it
  // The shard's records at which the lease ends (the guided layout's cap for
  // a slow worker); 0: the shard's size.
  int64_t end = 0;
};

struct DeleteShards {  // the epoch advanced or a checkpoint was restored
  int64_t dataset_id = 0;
};
struct DeleteLeasesBefore {  // leases of epochs older than `epoch`
  int64_t dataset_id = 0;
  int32_t epoch = 0;
};
struct CheckpointRow {
  int64_t dataset_id = 0;
  int64_t step = 0;
  std::string blob;  // serialised antdt.v1.ShardStateSnapshot
};
struct NextToken {
  uint64_t value = 0;
};
// Records a worker committed on a dataset over all epochs (GetProgress).
struct WorkerRow {
  int64_t dataset_id = 0;
  std::string worker;
  int64_t records_committed = 0;
};

using Mutation = std::variant<DatasetRow, ShardRow, LeaseRow, DeleteShards, DeleteLeasesBefore,
                              CheckpointRow, NextToken, WorkerRow>;

struct StoreSnapshot {
  std::vector<DatasetRow> datasets;
  std::vector<ShardRow> shards;
  std::vector<LeaseRow> active_leases;
  std::vector<WorkerRow> workers;
  uint64_t next_token = 1;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::StatusOr<StoreSnapshot> Load() = 0;
  // Queues a batch after every batch appended before it; returns its sequence
  // number. Callers serialise Append() calls to fix the order.
  virtual uint64_t Append(std::vector<Mutation> batch) = 0;
  // The sequence number of the last batch appended.
  virtual uint64_t LastSeq() const = 0;
  // Blocks until every batch up to `seq` is durable.
  virtual absl::Status WaitDurable(uint64_t seq) = 0;
  // Calls `done` once every batch up to `seq` is durable (or the store cannot
  // make it so), on this thread or one that commits; it must not block.
  virtual void OnDurable(uint64_t seq, std::function<void(absl::Status)> done) {
    done(WaitDurable(seq));
  }
  // An ended lease, for idempotent answers on stale tokens.
  virtual absl::StatusOr<std::optional<LeaseRow>> ReadLease(uint64_t token) = 0;
  virtual absl::StatusOr<std::optional<std::string>> ReadCheckpoint(int64_t dataset_id,
                                                                    int64_t step) = 0;
};

// Keeps rows in memory, durable at once; survives a Ledger being rebuilt over
// it, which is how tests emulate a restart.
class MemoryStore final : public Store {
 public:
  absl::StatusOr<StoreSnapshot> Load() override;
  uint64_t Append(std::vector<Mutation> batch) override;
  uint64_t LastSeq() const override;
  absl::Status WaitDurable(uint64_t) override { return absl::OkStatus(); }
  absl::StatusOr<std::optional<LeaseRow>> ReadLease(uint64_t token) override;
  absl::StatusOr<std::optional<std::string>> ReadCheckpoint(int64_t dataset_id,
                                                            int64_t step) override;
  size_t ShardRowCount() const;

 private:
  mutable std::mutex mu_;
  uint64_t seq_ = 0;
  uint64_t next_token_ = 1;
  std::map<int64_t, DatasetRow> datasets_;
  // A B-tree (ranges erased by dataset) and a hash (by token; Load sorts the
  // active ones): the simulator writes a shard and a lease on every commit.
  // The leases' hash holds nodes: an epoch's leases (tens of thousands at
  // 10,000 workers) stay where they are as it grows, not moved row by row
  // into a table twice the size.
  absl::btree_map<std::pair<int64_t, int64_t>, ShardRow> shards_;
  absl::node_hash_map<uint64_t, LeaseRow> leases_;
  std::map<std::pair<int64_t, int64_t>, std::string> checkpoints_;
  // Hashed: the simulator updates one on every commit of 10,000 workers.
  absl::flat_hash_map<std::pair<int64_t, std::string>, WorkerRow> workers_;
};

}  // namespace antdt::sharding
