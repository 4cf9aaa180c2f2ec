#include "services/sharding/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>

#include "common/clock.h"
#include "common/testing/testing.h"
#include "services/sharding/ledger.h"

namespace antdt::sharding {
namespace {

v1::DatasetRef Ref() {
  v1::DatasetRef ref;
  ref.set_job("j");
  ref.set_name("d");
  return ref;
}

// Dataset j/d: 1000 records in shards of 100.
v1::CreateDatasetRequest CreateRequest(int epochs) {
  v1::CreateDatasetRequest create;
  create.mutable_spec()->set_job("j");
  create.mutable_spec()->set_name("d");
  create.mutable_spec()->set_record_count(1000);
  create.mutable_spec()->set_shard_size(100);
  create.mutable_spec()->set_epochs(epochs);
  return create;
}

std::unique_ptr<Ledger> OpenLedger(Store* store, const Clock* clock) {
  auto l = Ledger::Open(store, clock, LedgerOptions{});
  EXPECT_TRUE(l.ok()) << l.status();
  return std::move(*l);
}

TEST(SqliteStore, StateSurvivesReopen) {
  antdt::testing::TempDir dir;
  FakeClock clock;
  uint64_t held = 0;
  int64_t held_index = -1;
  {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    ASSERT_TRUE(store.ok()) << store.status();
    auto ledger = OpenLedger(store->get(), &clock);
    ASSERT_TRUE(ledger->CreateDataset(CreateRequest(2)).ok());
    v1::AcquireShardRequest acq;
    *acq.mutable_dataset() = Ref();
    acq.set_worker_id("w");
    for (int i = 0; i < 3; ++i) {
      auto r = ledger->AcquireShard(acq);
      v1::CompleteShardRequest c;
      *c.mutable_dataset() = Ref();
      c.set_token(r->lease().token());
      ASSERT_TRUE(ledger->CompleteShard(c).ok());
    }
    auto r = ledger->AcquireShard(acq);
    held = r->lease().token();
    held_index = r->shard().index();
    v1::ReportProgressRequest p;
    *p.mutable_dataset() = Ref();
    p.set_token(held);
    p.set_records_done(42);
    ASSERT_TRUE(ledger->ReportProgress(p).ok());
    v1::CheckpointRequest ck;
    *ck.mutable_dataset() = Ref();
    ck.set_step(9);
    ASSERT_TRUE(ledger->Checkpoint(ck).ok());
  }
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
  ASSERT_TRUE(store.ok());
  auto ledger = OpenLedger(store->get(), &clock);
  v1::GetProgressRequest gp;
  *gp.mutable_dataset() = Ref();
  auto p = ledger->GetProgress(gp);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->records_committed_epoch(), 342);
  EXPECT_EQ(p->shards_done(), 3);
  EXPECT_EQ(p->shards_doing(), 1);
  v1::CompleteShardRequest c;
  *c.mutable_dataset() = Ref();
  c.set_token(held);
  ASSERT_TRUE(ledger->CompleteShard(c).ok());
  v1::RestoreRequest rs;
  *rs.mutable_dataset() = Ref();
  rs.set_step(9);
  auto restored = ledger->Restore(rs);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->records_committed(), 342);
  v1::AcquireShardRequest acq;
  *acq.mutable_dataset() = Ref();
  acq.set_worker_id("w2");
  auto next = ledger->AcquireShard(acq);
  EXPECT_EQ(next->shard().index(), held_index);
  EXPECT_EQ(next->shard().committed(), 42);
  EXPECT_GT(next->lease().token(), held);
}

// GetProgress's per-worker records, after a SIGKILL of the process that served
// them (they were kept in memory only, and reset at every restart).
TEST(SqliteStore, WorkerRecordsSurviveAKill) {
  antdt::testing::TempDir dir;
  FakeClock clock;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    if (!store.ok()) _exit(1);
    auto ledger = OpenLedger(store->get(), &clock);
    if (!ledger->CreateDataset(CreateRequest(1)).ok()) _exit(1);
    v1::AcquireShardRequest acq;
    *acq.mutable_dataset() = Ref();
    acq.set_worker_id("a");
    auto a = ledger->AcquireShard(acq);
    v1::CompleteShardRequest c;
    *c.mutable_dataset() = Ref();
    c.set_token(a->lease().token());
    if (!ledger->CompleteShard(c).ok()) _exit(1);
    acq.set_worker_id("b");
    auto b = ledger->AcquireShard(acq);
    v1::ReportProgressRequest p;
    *p.mutable_dataset() = Ref();
    p.set_token(b->lease().token());
    p.set_records_done(42);
    if (!ledger->ReportProgress(p).ok()) _exit(1);
    kill(getpid(), SIGKILL);  // every answer above was durable
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child failed with status " << status;
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
  ASSERT_TRUE(store.ok());
  auto ledger = OpenLedger(store->get(), &clock);
  v1::GetProgressRequest gp;
  *gp.mutable_dataset() = Ref();
  auto p = ledger->GetProgress(gp);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->workers_size(), 2);
  EXPECT_EQ(p->workers(0).worker_id(), "a");
  EXPECT_EQ(p->workers(0).records_committed(), 100);
  EXPECT_EQ(p->workers(1).worker_id(), "b");
  EXPECT_EQ(p->workers(1).records_committed(), 42);
}

// Batches that fill the commit log several times over (it starts again from
// its start once the database holds it on disk), one bigger than the whole log
// (written straight to the database), and small ones after; then SIGKILL with
// the last ones only in the log. Every batch is there after the reopen.
TEST(SqliteStore, EveryDurableBatchSurvivesAKillAcrossLogRewinds) {
  antdt::testing::TempDir dir;
  auto blob = [](int64_t step) {
    const size_t size = step == 10 ? (20u << 20) : step < 20 ? (3u << 20) : 100u;
    return std::string(size, static_cast<char>('a' + step % 26));
  };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kFull);
    if (!store.ok()) _exit(1);
    for (int64_t step = 1; step <= 25; ++step) {
      const uint64_t seq = (*store)->Append({CheckpointRow{1, step, blob(step)}});
      if (!(*store)->WaitDurable(seq).ok()) _exit(1);
    }
    kill(getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child failed with status " << status;
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kFull);
  ASSERT_TRUE(store.ok()) << store.status();
  for (int64_t step = 1; step <= 25; ++step) {
    auto got = (*store)->ReadCheckpoint(1, step);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(got->has_value()) << "step " << step;
    EXPECT_TRUE(**got == blob(step)) << "step " << step;
  }
}

// A log whose records the database never held (its database deleted, say)
// is refused, naming the state directory, rather than read as a fresh start.
TEST(SqliteStore, ALogAheadOfItsDatabaseIsRefused) {
  antdt::testing::TempDir dir;
  {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    ASSERT_TRUE(store.ok());
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE((*store)->WaitDurable((*store)->Append({NextToken{100u + i}})).ok());
    }
  }
  {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    ASSERT_TRUE(store.ok());  // a clean close: nothing to replay
    ASSERT_TRUE((*store)->WaitDurable((*store)->Append({NextToken{200}})).ok());
    ASSERT_TRUE((*store)->WaitDurable((*store)->Append({NextToken{201}})).ok());
    auto snap = (*store)->Load();
    ASSERT_TRUE(snap.ok());
    EXPECT_EQ(snap->next_token, 201u);
  }
  std::filesystem::remove(dir.File("sharding.db"));
  std::filesystem::remove(dir.File("sharding.db-wal"));
  std::filesystem::remove(dir.File("sharding.db-shm"));
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(store.status().message().find("state_dir"), std::string::npos) << store.status();
}

// Names are stored with their length: even a NUL the ledger would refuse
// comes back whole, so two names never become one.
TEST(SqliteStore, TextKeepsEveryByte) {
  antdt::testing::TempDir dir;
  const std::string job("j\0k", 3), name("a\0b", 3), worker("w\0x", 3);
  {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    ASSERT_TRUE(store.ok());
    DatasetRow d;
    d.id = 1;
    d.job = job;
    d.name = name;
    LeaseRow l;
    l.token = 7;
    l.dataset_id = 1;
    l.worker = worker;
    l.request_id = name;
    const uint64_t seq = (*store)->Append({d, l, WorkerRow{1, worker, 5}});
    ASSERT_TRUE((*store)->WaitDurable(seq).ok());
  }
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
  ASSERT_TRUE(store.ok());
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->datasets.size(), 1u);
  EXPECT_EQ(snap->datasets[0].job, job);
  EXPECT_EQ(snap->datasets[0].name, name);
  ASSERT_EQ(snap->active_leases.size(), 1u);
  EXPECT_EQ(snap->active_leases[0].worker, worker);
  EXPECT_EQ(snap->active_leases[0].request_id, name);
  ASSERT_EQ(snap->workers.size(), 1u);
  EXPECT_EQ(snap->workers[0].worker, worker);
}

// A lease's end (guided leasing) is stored with it; a store written before
// leases had an end gets the column on open, and its leases read as whole
// (end 0: the shard's end).
TEST(SqliteStore, LeaseEndsSurviveAndAnOlderStoreGainsTheColumn) {
  antdt::testing::TempDir dir;
  auto lease = [](uint64_t token, int64_t end) {
    LeaseRow l;
    l.token = token;
    l.dataset_id = 1;
    l.worker = "w";
    l.end = end;
    return l;
  };
  {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->WaitDurable((*store)->Append({lease(7, 0)})).ok());
  }
  {  // what a store of the previous release looks like
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(dir.File("sharding.db").c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE leases DROP COLUMN end_rec", nullptr, nullptr, &err),
              SQLITE_OK)
        << (err ? err : "");
    sqlite3_close(db);
  }
  {
    auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
    ASSERT_TRUE(store.ok()) << store.status();
    auto snap = (*store)->Load();
    ASSERT_TRUE(snap.ok()) << snap.status();
    ASSERT_EQ(snap->active_leases.size(), 1u);
    EXPECT_EQ(snap->active_leases[0].end, 0);
    ASSERT_TRUE((*store)->WaitDurable((*store)->Append({lease(8, 37)})).ok());
  }
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kNormal);
  ASSERT_TRUE(store.ok()) << store.status();
  auto row = (*store)->ReadLease(8);
  ASSERT_TRUE(row.ok()) << row.status();
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->end, 37);
}

TEST(SqliteStore, ConcurrentCallsShareCommits) {
  antdt::testing::TempDir dir;
  auto store = SqliteStore::Open(dir.path(), SqliteStore::Sync::kFull);
  ASSERT_TRUE(store.ok());
  auto ledger = OpenLedger(store->get(), &RealClock::Get());
  v1::CreateDatasetRequest create;
  create.mutable_spec()->set_job("j");
  create.mutable_spec()->set_name("d");
  create.mutable_spec()->set_record_count(8 * 200);
  create.mutable_spec()->set_shard_size(1);
  create.mutable_spec()->set_epochs(1);
  ASSERT_TRUE(ledger->CreateDataset(create).ok());
  std::atomic<int> ops{0};
  std::mutex mu;
  std::set<int64_t> seen;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      v1::AcquireShardRequest acq;
      *acq.mutable_dataset() = Ref();
      acq.set_worker_id("w" + std::to_string(t));
      for (;;) {
        auto r = ledger->AcquireShard(acq);
        ASSERT_TRUE(r.ok());
        if (r->result() == v1::AcquireShardResponse::END_OF_DATA) return;
        if (r->result() == v1::AcquireShardResponse::WAIT) continue;
        v1::CompleteShardRequest c;
        *c.mutable_dataset() = Ref();
        c.set_token(r->lease().token());
        ASSERT_TRUE(ledger->CompleteShard(c).ok());
        ops += 2;
        std::lock_guard<std::mutex> lock(mu);
        EXPECT_TRUE(seen.insert(r->shard().start()).second);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.size(), 1600u);
  // Group commit: fewer transactions than calls.
  EXPECT_LT((*store)->Commits(), static_cast<uint64_t>(ops.load()));
}

TEST(SqliteStore, UnwritableStateDirNamesTheField) {
  auto store = SqliteStore::Open("/proc/antdt-no-such-dir", SqliteStore::Sync::kFull);
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("state_dir"), std::string::npos);
}

}  // namespace
}  // namespace antdt::sharding
