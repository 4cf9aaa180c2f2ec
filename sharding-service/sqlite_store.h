// SQLite in WAL mode with group commit: Append() queues a batch, and
// WaitDurable() returns once a transaction holding it is on disk. The first
// waiter while no commit is under way commits everything queued itself (the
// next group's leader is the first waiter left when it ends); a writer thread
// commits batches no one waits for once the queue grows long or old. A failed commit aborts the
// process: the in-memory state may be ahead of the disk, and a restart recovers from it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sharding-service/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace antdt::sharding {

class SqliteStore final : public Store {
 public:
  enum class Sync { kFull, kNormal };
  // Opens (creating if needed) `dir`/sharding.db.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& dir, Sync sync);
  ~SqliteStore() override;

  absl::StatusOr<StoreSnapshot> Load() override;
  uint64_t Append(std::vector<Mutation> batch) override;
  uint64_t LastSeq() const override;
  absl::Status WaitDurable(uint64_t seq) override;
  // Commits on the calling thread when no commit is under way (as
  // WaitDurable's leader does), else leaves `done` to whoever commits next.
  void OnDurable(uint64_t seq, std::function<void(absl::Status)> done) override;
  absl::StatusOr<std::optional<LeaseRow>> ReadLease(uint64_t token) override;
  absl::StatusOr<std::optional<std::string>> ReadCheckpoint(int64_t dataset_id,
                                                            int64_t step) override;

  // Commits (transactions) so far, and batches in them, for metrics.
  uint64_t Commits() const;

 private:
  SqliteStore() = default;
  void WriterLoop();
  void Apply(const Mutation& m);

  sqlite3* writer_ = nullptr;
  sqlite3* reader_ = nullptr;
  std::mutex reader_mu_;
  struct Statements;
  std::unique_ptr<Statements> stmts_;

  mutable std::mutex mu_;
  std::condition_variable pending_cv_;
  struct Waiter {
    std::condition_variable cv;
    bool done = false;
  };
  // With mu_ held: wakes the waiters of batches up to `upto`, and the next
  // waiter to commit the following group.
  void WakeWaiters(uint64_t upto);
  // Commits everything queued, with mu_ released during the writes.
  void CommitPending(std::unique_lock<std::mutex>& lock);
  bool committing_ = false;                   // a CommitPending() is under way
  bool writer_awaits_commit_ = false;         // WriterLoop waits for that commit's end
  std::multimap<uint64_t, Waiter*> waiters_;  // by the sequence number awaited
  std::multimap<uint64_t, std::function<void(absl::Status)>> callbacks_;  // OnDurable's
  // Batches no one waits for ride on the next commit, or are committed
  // kLazyDelay after a commit left them queued, or once kLazyMutations are.
  static constexpr std::chrono::milliseconds kLazyDelay{20};
  static constexpr size_t kLazyMutations = 20'000;
  std::vector<Mutation> pending_;
  std::chrono::steady_clock::time_point first_pending_;  // of pending_'s oldest
  uint64_t appended_seq_ = 0;
  uint64_t durable_seq_ = 0;
  uint64_t commits_ = 0;
  bool stop_ = false;
  std::thread writer_thread_;
};

}  // namespace antdt::sharding
