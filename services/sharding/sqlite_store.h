// The sharding service's durable store. Append() queues a batch, and
// WaitDurable() returns once a group commit holding it is durable: one record
// in the commit log (services/sharding/commit_log.h), one write and one
// fdatasync. The first waiter while no commit is under way commits everything
// queued itself (the next group's leader is the first waiter left when it
// ends); a writer thread commits batches no one waits for once the queue grows
// long. An applier thread moves the logged batches into the SQLite database
// (WAL mode), many commits to a transaction, every second; the database records
// the last log record it holds, so opening replays only the records after it.
// Reads (Load, ReadLease, ReadCheckpoint) first let the database catch up with
// the log. A failed write aborts the process: the in-memory state may be ahead
// of the disk, and a restart recovers from it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "services/sharding/commit_log.h"
#include "services/sharding/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace antdt::sharding {

class SqliteStore final : public Store {
 public:
  enum class Sync { kFull, kNormal };
  // Opens (creating if needed) `dir`/sharding.db and `dir`/sharding.log, and
  // replays the log's records the database does not hold.
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
  // The records of log_ after the database's last, into the database.
  absl::Status Replay(const std::string& dir, Sync sync);
  void WriterLoop();
  void ApplierLoop();
  // With db_mu_ held: one transaction of `batches` (in order), which records
  // the last one's sequence number as the last log record the database holds;
  // `synced`: on disk when it returns (else as the connection's mode says).
  void ApplyToDb(const std::deque<std::pair<uint64_t, std::vector<Mutation>>>& batches,
                 bool synced);
  void Apply(const Mutation& m);
  void Step(sqlite3_stmt* s, const char* what);

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
  // With mu_ held, released for the disk: `batch` as the next log record (or
  // straight into the database when it is bigger than the log).
  void Write(std::unique_lock<std::mutex>& lock, std::vector<Mutation> batch);
  // With mu_ held, released while waiting: until the database holds log
  // record `seq` (`synced`: on disk).
  void WaitApplied(std::unique_lock<std::mutex>& lock, uint64_t seq, bool synced = false);
  // With mu_ held, released for the database: applies unapplied_ (none: only
  // syncs), synced when sync_next_apply_ asks for it.
  void ApplyQueued(std::unique_lock<std::mutex>& lock);
  // Until the database holds every logged record (before a read).
  void CatchUp();
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

  static constexpr size_t kLogCapacity = 16 << 20;
  static constexpr std::chrono::milliseconds kApplyEvery{1000};
  static constexpr size_t kApplyBatches = 4096;  // queued batches that wake the applier
  std::unique_ptr<CommitLog> log_;               // written by the one committing (committing_)
  std::mutex db_mu_;                             // writer_ and stmts_
  uint64_t log_seq_ = 0;                         // the last record written (or applied directly)
  uint64_t applied_log_seq_ = 0;                 // the database holds every record up to it
  uint64_t synced_log_seq_ = 0;                  // ... on disk
  bool full_ = true;              // --sync full: the log and the synced applies fsync
  bool sync_next_apply_ = false;  // someone waits for a synced apply
  std::deque<std::pair<uint64_t, std::vector<Mutation>>> unapplied_;  // logged, oldest first
  bool applying_ = false;      // an ApplyQueued() is under way
  bool apply_now_ = false;     // someone waits for the applier
  bool stop_applier_ = false;  // set once the writer thread has stopped
  bool applier_exited_ = false;
  std::condition_variable applier_cv_;
  std::condition_variable applied_cv_;
  std::thread applier_thread_;
};

}  // namespace antdt::sharding
