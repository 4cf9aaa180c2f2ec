#include "services/sharding/sqlite_store.h"

#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "antdt/v1/sharding_state.pb.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::sharding {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS datasets(
  id INTEGER PRIMARY KEY, job TEXT NOT NULL, name TEXT NOT NULL,
  spec BLOB NOT NULL, epoch INTEGER NOT NULL,
  requeues INTEGER NOT NULL DEFAULT 0, expirations INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS shards(
  dataset_id INTEGER NOT NULL, idx INTEGER NOT NULL, state INTEGER NOT NULL,
  committed INTEGER NOT NULL, token INTEGER NOT NULL,
  PRIMARY KEY(dataset_id, idx)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS leases(
  token INTEGER PRIMARY KEY, dataset_id INTEGER NOT NULL, epoch INTEGER NOT NULL,
  idx INTEGER NOT NULL, worker TEXT NOT NULL, incarnation INTEGER NOT NULL,
  begin_rec INTEGER NOT NULL, committed INTEGER NOT NULL, state INTEGER NOT NULL,
  request_id TEXT NOT NULL DEFAULT '', end_rec INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS leases_active ON leases(state) WHERE state = 0;
CREATE INDEX IF NOT EXISTS leases_epoch ON leases(dataset_id, epoch);
CREATE TABLE IF NOT EXISTS checkpoints(
  dataset_id INTEGER NOT NULL, step INTEGER NOT NULL, blob BLOB NOT NULL,
  PRIMARY KEY(dataset_id, step));
CREATE TABLE IF NOT EXISTS workers(
  dataset_id INTEGER NOT NULL, worker TEXT NOT NULL, records_committed INTEGER NOT NULL,
  PRIMARY KEY(dataset_id, worker)) WITHOUT ROWID;
)sql";

absl::Status SqlError(sqlite3* db, const std::string& what) {
  return absl::InternalError(absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

absl::Status Exec(sqlite3* db, const char* sql);

// A store written before guided leasing has no leases.end_rec: it is added,
// 0 (the shard's end) in every row.
absl::Status AddLeaseEndColumn(sqlite3* db) {
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info('leases') WHERE name = 'end_rec'", -1,
                         &s, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite: table_info: ", sqlite3_errmsg(db)));
  }
  const int rc = sqlite3_step(s);
  sqlite3_finalize(s);
  if (rc == SQLITE_ROW) return absl::OkStatus();
  if (rc != SQLITE_DONE) {
    return absl::InternalError(absl::StrCat("sqlite: table_info: ", sqlite3_errmsg(db)));
  }
  return Exec(db, "ALTER TABLE leases ADD COLUMN end_rec INTEGER NOT NULL DEFAULT 0");
}

absl::Status Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return absl::InternalError(absl::StrCat("sqlite: ", msg));
  }
  return absl::OkStatus();
}

sqlite3_stmt* Prepare(sqlite3* db, const char* sql) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) != SQLITE_OK) {
    LogEvent("fatal", {{"what", "sqlite prepare"}, {"error", sqlite3_errmsg(db)}, {"sql", sql}});
    std::abort();
  }
  return stmt;
}

// Text with its length, so that a byte the ledger let through is never a
// terminator here.
void BindText(sqlite3_stmt* s, int column, const std::string& text) {
  sqlite3_bind_text(s, column, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

std::string ColumnText(sqlite3_stmt* s, int column) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, column));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(s, column)));
}

LeaseRow ReadLeaseRow(sqlite3_stmt* s) {
  LeaseRow row;
  row.token = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
  row.dataset_id = sqlite3_column_int64(s, 1);
  row.epoch = sqlite3_column_int(s, 2);
  row.index = sqlite3_column_int64(s, 3);
  row.worker = ColumnText(s, 4);
  row.incarnation = sqlite3_column_int64(s, 5);
  row.begin = sqlite3_column_int64(s, 6);
  row.committed = sqlite3_column_int64(s, 7);
  row.state = static_cast<LeaseState>(sqlite3_column_int(s, 8));
  row.request_id = ColumnText(s, 9);
  row.end = sqlite3_column_int64(s, 10);
  return row;
}

constexpr const char* kLeaseColumns =
    "token, dataset_id, epoch, idx, worker, incarnation, begin_rec, committed, state, request_id, "
    "end_rec";

// A mutation as the commit log holds it.
void Encode(const Mutation& m, v1::LogMutation* out) {
  if (const auto* d = std::get_if<DatasetRow>(&m)) {
    auto* r = out->mutable_dataset();
    r->set_id(d->id);
    r->set_job(d->job);
    r->set_name(d->name);
    r->set_spec(d->spec);
    r->set_epoch(d->epoch);
    r->set_requeues(d->requeues);
    r->set_expirations(d->expirations);
  } else if (const auto* sh = std::get_if<ShardRow>(&m)) {
    auto* r = out->mutable_shard();
    r->set_dataset_id(sh->dataset_id);
    r->set_index(sh->index);
    r->set_state(static_cast<int>(sh->state));
    r->set_committed(sh->committed);
    r->set_token(sh->token);
  } else if (const auto* l = std::get_if<LeaseRow>(&m)) {
    auto* r = out->mutable_lease();
    r->set_token(l->token);
    r->set_dataset_id(l->dataset_id);
    r->set_epoch(l->epoch);
    r->set_index(l->index);
    r->set_worker(l->worker);
    r->set_incarnation(l->incarnation);
    r->set_begin(l->begin);
    r->set_committed(l->committed);
    r->set_state(static_cast<int>(l->state));
    r->set_request_id(l->request_id);
    r->set_end(l->end);
  } else if (const auto* ds = std::get_if<DeleteShards>(&m)) {
    out->mutable_delete_shards()->set_dataset_id(ds->dataset_id);
  } else if (const auto* dl = std::get_if<DeleteLeasesBefore>(&m)) {
    out->mutable_delete_leases_before()->set_dataset_id(dl->dataset_id);
    out->mutable_delete_leases_before()->set_epoch(dl->epoch);
  } else if (const auto* c = std::get_if<CheckpointRow>(&m)) {
    out->mutable_checkpoint()->set_dataset_id(c->dataset_id);
    out->mutable_checkpoint()->set_step(c->step);
    out->mutable_checkpoint()->set_blob(c->blob);
  } else if (const auto* n = std::get_if<NextToken>(&m)) {
    out->set_next_token(n->value);
  } else if (const auto* w = std::get_if<WorkerRow>(&m)) {
    out->mutable_worker()->set_dataset_id(w->dataset_id);
    out->mutable_worker()->set_worker(w->worker);
    out->mutable_worker()->set_records_committed(w->records_committed);
  }
}

std::optional<Mutation> Decode(const v1::LogMutation& m) {
  switch (m.row_case()) {
    case v1::LogMutation::kDataset: {
      const auto& r = m.dataset();
      return DatasetRow{r.id(),    r.job(),      r.name(),       r.spec(),
                        r.epoch(), r.requeues(), r.expirations()};
    }
    case v1::LogMutation::kShard: {
      const auto& r = m.shard();
      return ShardRow{r.dataset_id(), r.index(), static_cast<ShardState>(r.state()), r.committed(),
                      r.token()};
    }
    case v1::LogMutation::kLease: {
      const auto& r = m.lease();
      return LeaseRow{r.token(),      r.dataset_id(), r.epoch(),
                      r.index(),      r.worker(),     r.incarnation(),
                      r.begin(),      r.committed(),  static_cast<LeaseState>(r.state()),
                      r.request_id(), r.end()};
    }
    case v1::LogMutation::kDeleteShards:
      return DeleteShards{m.delete_shards().dataset_id()};
    case v1::LogMutation::kDeleteLeasesBefore:
      return DeleteLeasesBefore{m.delete_leases_before().dataset_id(),
                                m.delete_leases_before().epoch()};
    case v1::LogMutation::kCheckpoint:
      return CheckpointRow{m.checkpoint().dataset_id(), m.checkpoint().step(),
                           m.checkpoint().blob()};
    case v1::LogMutation::kNextToken:
      return NextToken{m.next_token()};
    case v1::LogMutation::kWorker:
      return WorkerRow{m.worker().dataset_id(), m.worker().worker(),
                       m.worker().records_committed()};
    case v1::LogMutation::ROW_NOT_SET:
      break;
  }
  return std::nullopt;
}

std::string EncodeBatch(const std::vector<Mutation>& batch) {
  v1::LogBatch out;
  out.mutable_mutations()->Reserve(static_cast<int>(batch.size()));
  for (const Mutation& m : batch) Encode(m, out.add_mutations());
  return out.SerializeAsString();
}

absl::StatusOr<std::vector<Mutation>> DecodeBatch(const CommitLog::Record& record) {
  v1::LogBatch in;
  std::vector<Mutation> out;
  if (in.ParseFromString(record.payload)) {
    out.reserve(static_cast<size_t>(in.mutations_size()));
    for (const v1::LogMutation& m : in.mutations()) {
      std::optional<Mutation> row = Decode(m);
      if (!row) break;
      out.push_back(std::move(*row));
    }
    if (out.size() == static_cast<size_t>(in.mutations_size())) return out;
  }
  return absl::DataLossError(
      absl::StrCat("commit log: record ", record.seq, " holds no batch this service can read"));
}

}  // namespace

struct SqliteStore::Statements {
  sqlite3_stmt* begin;
  sqlite3_stmt* commit;
  sqlite3_stmt* put_dataset;
  sqlite3_stmt* put_shard;
  sqlite3_stmt* put_lease;
  sqlite3_stmt* delete_shards;
  sqlite3_stmt* delete_leases;
  sqlite3_stmt* put_checkpoint;
  sqlite3_stmt* put_meta;
  sqlite3_stmt* put_worker;
  sqlite3_stmt* put_applied;
  std::vector<sqlite3_stmt*> all() const {
    return {begin,         commit,         put_dataset, put_shard,  put_lease,  delete_shards,
            delete_leases, put_checkpoint, put_meta,    put_worker, put_applied};
  }
};

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& dir, Sync sync) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dir: cannot create ", dir, ": ", ec.message()));
  }
  const std::string path = dir + "/sharding.db";
  std::unique_ptr<SqliteStore> store(new SqliteStore());
  if (sqlite3_open_v2(path.c_str(), &store->writer_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return absl::InvalidArgumentError(
        absl::StrCat("state_dir: cannot open ", path, ": ", sqlite3_errmsg(store->writer_)));
  }
  sqlite3_busy_timeout(store->writer_, 5000);
  RETURN_IF_ERROR(Exec(store->writer_, "PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(Exec(store->writer_, sync == Sync::kFull ? "PRAGMA synchronous=FULL"
                                                           : "PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(Exec(store->writer_, kSchema));
  RETURN_IF_ERROR(AddLeaseEndColumn(store->writer_));
  if (sqlite3_open_v2(path.c_str(), &store->reader_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return SqlError(store->reader_, "open reader");
  }
  sqlite3_busy_timeout(store->reader_, 5000);
  sqlite3* db = store->writer_;
  store->stmts_ = std::make_unique<Statements>(Statements{
      Prepare(db, "BEGIN IMMEDIATE"),
      Prepare(db, "COMMIT"),
      Prepare(db,
              "INSERT OR REPLACE INTO datasets(id, job, name, spec, epoch, requeues, expirations) "
              "VALUES(?,?,?,?,?,?,?)"),
      Prepare(db,
              "INSERT OR REPLACE INTO shards(dataset_id, idx, state, committed, token) "
              "VALUES(?,?,?,?,?)"),
      Prepare(db, absl::StrCat("INSERT OR REPLACE INTO leases(", kLeaseColumns,
                               ") VALUES(?,?,?,?,?,?,?,?,?,?,?)")
                      .c_str()),
      Prepare(db, "DELETE FROM shards WHERE dataset_id = ?"),
      Prepare(db, "DELETE FROM leases WHERE dataset_id = ? AND epoch < ?"),
      Prepare(db, "INSERT OR REPLACE INTO checkpoints(dataset_id, step, blob) VALUES(?,?,?)"),
      Prepare(db, "INSERT OR REPLACE INTO meta(key, value) VALUES('next_token', ?)"),
      Prepare(db,
              "INSERT OR REPLACE INTO workers(dataset_id, worker, records_committed) "
              "VALUES(?,?,?)"),
      Prepare(db, "INSERT OR REPLACE INTO meta(key, value) VALUES('applied_log_seq', ?)"),
  });
  RETURN_IF_ERROR(store->Replay(dir, sync));
  // The applier's transactions need not reach the disk: the log holds them
  // until a synced one does (before the log starts again from its start).
  store->full_ = sync == Sync::kFull;
  RETURN_IF_ERROR(Exec(db, "PRAGMA synchronous=NORMAL"));
  store->writer_thread_ = std::thread([s = store.get()] { s->WriterLoop(); });
  store->applier_thread_ = std::thread([s = store.get()] { s->ApplierLoop(); });
  return store;
}

absl::Status SqliteStore::Replay(const std::string& dir, Sync sync) {
  uint64_t applied = 0;
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(writer_, "SELECT value FROM meta WHERE key = 'applied_log_seq'", -1, &s,
                         nullptr) != SQLITE_OK) {
    return SqlError(writer_, "prepare replay");
  }
  if (sqlite3_step(s) == SQLITE_ROW) applied = static_cast<uint64_t>(sqlite3_column_int64(s, 0));
  sqlite3_finalize(s);
  auto log = CommitLog::Open(dir + "/sharding.log", kLogCapacity, sync == Sync::kFull);
  if (!log.ok())
    return absl::InvalidArgumentError(absl::StrCat("state_dir: ", log.status().message()));
  log_ = std::move(*log);
  auto records = log_->ReadAfter(applied);
  if (!records.ok())
    return absl::DataLossError(absl::StrCat("state_dir: ", records.status().message()));
  std::deque<std::pair<uint64_t, std::vector<Mutation>>> batches;
  for (const CommitLog::Record& r : *records) {
    auto batch = DecodeBatch(r);
    if (!batch.ok())
      return absl::DataLossError(absl::StrCat("state_dir: ", batch.status().message()));
    batches.emplace_back(r.seq, std::move(*batch));
  }
  const size_t replayed = batches.size();
  // Even with nothing to replay: what a killed process's unsynced transactions
  // left in the page cache goes to disk before the log is overwritten.
  if (batches.empty()) batches.emplace_back(applied, std::vector<Mutation>());
  {
    std::lock_guard<std::mutex> db(db_mu_);
    ApplyToDb(batches, /*synced=*/false);  // in the connection's mode: FULL with --sync full
  }
  applied = batches.back().first;
  if (replayed > 0) {
    LogEvent("commit_log_replayed",
             {{"records", std::to_string(replayed)}, {"last", std::to_string(applied)}});
  }
  log_seq_ = applied_log_seq_ = synced_log_seq_ = applied;
  log_->Rewind();  // the database holds every record in the log, on disk
  return absl::OkStatus();
}

SqliteStore::~SqliteStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  pending_cv_.notify_all();
  if (writer_thread_.joinable()) writer_thread_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_applier_ = true;  // after the writer's last commit: it may need the applier
  }
  applier_cv_.notify_all();
  if (applier_thread_.joinable()) applier_thread_.join();
  std::multimap<uint64_t, std::function<void(absl::Status)>> left;
  {
    std::lock_guard<std::mutex> lock(mu_);
    WakeWaiters(UINT64_MAX);  // anyone left sees the store stopping
    left.swap(callbacks_);
  }
  for (auto& [seq, fn] : left) fn(absl::UnavailableError("store is shutting down"));
  if (stmts_) {
    for (sqlite3_stmt* s : stmts_->all()) sqlite3_finalize(s);
  }
  sqlite3_close(reader_);
  sqlite3_close(writer_);
}

absl::StatusOr<StoreSnapshot> SqliteStore::Load() {
  CatchUp();
  std::lock_guard<std::mutex> lock(reader_mu_);
  StoreSnapshot snap;
  sqlite3* db = reader_;
  sqlite3_stmt* s = nullptr;
  auto run = [&](const std::string& sql, auto&& on_row) -> absl::Status {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
      return SqlError(db, "prepare load");
    }
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) on_row(s);
    sqlite3_finalize(s);
    if (rc != SQLITE_DONE) return SqlError(db, "load");
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(run("BEGIN", [](sqlite3_stmt*) {}));
  RETURN_IF_ERROR(run("SELECT value FROM meta WHERE key = 'next_token'", [&](sqlite3_stmt* r) {
    snap.next_token = static_cast<uint64_t>(sqlite3_column_int64(r, 0));
  }));
  RETURN_IF_ERROR(run("SELECT id, job, name, spec, epoch, requeues, expirations FROM datasets",
                      [&](sqlite3_stmt* r) {
                        DatasetRow row;
                        row.id = sqlite3_column_int64(r, 0);
                        row.job = ColumnText(r, 1);
                        row.name = ColumnText(r, 2);
                        row.spec.assign(static_cast<const char*>(sqlite3_column_blob(r, 3)),
                                        static_cast<size_t>(sqlite3_column_bytes(r, 3)));
                        row.epoch = sqlite3_column_int(r, 4);
                        row.requeues = sqlite3_column_int64(r, 5);
                        row.expirations = sqlite3_column_int64(r, 6);
                        snap.datasets.push_back(std::move(row));
                      }));
  RETURN_IF_ERROR(
      run("SELECT dataset_id, idx, state, committed, token FROM shards", [&](sqlite3_stmt* r) {
        snap.shards.push_back(ShardRow{sqlite3_column_int64(r, 0), sqlite3_column_int64(r, 1),
                                       static_cast<ShardState>(sqlite3_column_int(r, 2)),
                                       sqlite3_column_int64(r, 3),
                                       static_cast<uint64_t>(sqlite3_column_int64(r, 4))});
      }));
  RETURN_IF_ERROR(run(absl::StrCat("SELECT ", kLeaseColumns, " FROM leases WHERE state = 0"),
                      [&](sqlite3_stmt* r) { snap.active_leases.push_back(ReadLeaseRow(r)); }));
  RETURN_IF_ERROR(
      run("SELECT dataset_id, worker, records_committed FROM workers", [&](sqlite3_stmt* r) {
        snap.workers.push_back(
            WorkerRow{sqlite3_column_int64(r, 0), ColumnText(r, 1), sqlite3_column_int64(r, 2)});
      }));
  RETURN_IF_ERROR(run("COMMIT", [](sqlite3_stmt*) {}));
  return snap;
}

uint64_t SqliteStore::Append(std::vector<Mutation> batch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_.empty()) first_pending_ = std::chrono::steady_clock::now();
  for (Mutation& m : batch) pending_.push_back(std::move(m));
  ++appended_seq_;
  // The writer commits once someone waits (WaitDurable), or the queue is
  // long or old: batches no one waits for (new leases) ride on the next
  // commit instead of paying an fsync of their own.
  if (pending_.size() >= kLazyMutations) pending_cv_.notify_one();
  return appended_seq_;
}

uint64_t SqliteStore::LastSeq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return appended_seq_;
}

uint64_t SqliteStore::Commits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commits_;
}

absl::Status SqliteStore::WaitDurable(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  while (durable_seq_ < seq) {
    if (!committing_ && !stop_) {
      // No commit under way: this thread commits what is queued itself, with
      // no hand-off to the writer thread and back.
      CommitPending(lock);
      continue;
    }
    if (stop_ && !committing_) break;
    // Each waiter sleeps on its own condition and is woken once its batch is
    // on disk, or to commit the next group itself (no herd at every commit).
    Waiter waiter;
    waiters_.emplace(seq, &waiter);
    waiter.cv.wait(lock, [&] { return waiter.done; });
  }
  if (durable_seq_ < seq) return absl::UnavailableError("store is shutting down");
  return absl::OkStatus();
}

void SqliteStore::WakeWaiters(uint64_t upto) {
  for (auto it = waiters_.begin(); it != waiters_.end() && it->first <= upto;) {
    it->second->done = true;
    it->second->cv.notify_one();
    it = waiters_.erase(it);
  }
  // The first still waiting commits the next group.
  if (!waiters_.empty()) {
    waiters_.begin()->second->done = true;
    waiters_.begin()->second->cv.notify_one();
    waiters_.erase(waiters_.begin());
  }
}

void SqliteStore::OnDurable(uint64_t seq, std::function<void(absl::Status)> done) {
  std::unique_lock<std::mutex> lock(mu_);
  if (durable_seq_ >= seq || stop_) {
    const bool durable = durable_seq_ >= seq;
    lock.unlock();
    done(durable ? absl::OkStatus() : absl::UnavailableError("store is shutting down"));
    return;
  }
  callbacks_.emplace(seq, std::move(done));
  // Lead while calls are left waiting and no one else commits.
  while (!committing_ && !stop_ && !callbacks_.empty()) CommitPending(lock);
}

void SqliteStore::CommitPending(std::unique_lock<std::mutex>& lock) {
  committing_ = true;
  std::vector<Mutation> batch;
  batch.swap(pending_);
  const uint64_t upto = appended_seq_;
  if (!batch.empty()) Write(lock, std::move(batch));
  committing_ = false;
  durable_seq_ = upto;
  ++commits_;
  WakeWaiters(upto);
  // The writer commits for callbacks left, or what came in meanwhile, if no
  // one else does; with nothing left it sleeps on (a wake-up per commit would
  // cost a context switch on the answer's path).
  if (writer_awaits_commit_ || appended_seq_ > durable_seq_ || !callbacks_.empty()) {
    pending_cv_.notify_all();
  }
  std::vector<std::function<void(absl::Status)>> done;
  while (!callbacks_.empty() && callbacks_.begin()->first <= upto) {
    done.push_back(std::move(callbacks_.begin()->second));
    callbacks_.erase(callbacks_.begin());
  }
  if (done.empty()) return;
  lock.unlock();
  for (auto& fn : done) fn(absl::OkStatus());
  lock.lock();
}

void SqliteStore::Write(std::unique_lock<std::mutex>& lock, std::vector<Mutation> batch) {
  lock.unlock();  // calls go on appending meanwhile; committing_ keeps this the only writer
  const std::string payload = EncodeBatch(batch);
  lock.lock();
  const uint64_t seq = log_seq_ + 1;
  if (!log_->Fits(payload.size()) ||
      (log_->offset() > kLogCapacity / 2 && synced_log_seq_ == log_seq_)) {
    // The log starts again from its start once the database holds all of it
    // on disk.
    WaitApplied(lock, log_seq_, /*synced=*/true);
    log_->Rewind();
  }
  if (!log_->Fits(payload.size())) {
    // Bigger than the whole log: straight into the database, synced there.
    std::deque<std::pair<uint64_t, std::vector<Mutation>>> direct;
    direct.emplace_back(seq, std::move(batch));
    lock.unlock();
    {
      std::lock_guard<std::mutex> db(db_mu_);
      ApplyToDb(direct, /*synced=*/true);
    }
    lock.lock();
    log_seq_ = applied_log_seq_ = synced_log_seq_ = seq;
    applied_cv_.notify_all();
    return;
  }
  const bool below_half = log_->offset() <= kLogCapacity / 2;
  lock.unlock();
  if (absl::Status s = log_->Append(seq, payload); !s.ok()) {
    LogEvent("fatal", {{"what", "commit log write"}, {"error", std::string(s.message())}});
    std::abort();
  }
  lock.lock();
  log_seq_ = seq;
  unapplied_.emplace_back(seq, std::move(batch));
  // Woken early while the queue is long, and once when this record took the
  // log past half (so that little is left to apply when it must start over).
  if (unapplied_.size() >= kApplyBatches || (below_half && log_->offset() > kLogCapacity / 2)) {
    apply_now_ = true;
    applier_cv_.notify_one();
  }
}

void SqliteStore::WaitApplied(std::unique_lock<std::mutex>& lock, uint64_t seq, bool synced) {
  while ((synced ? synced_log_seq_ : applied_log_seq_) < seq) {
    if (synced) sync_next_apply_ = true;
    if (applier_exited_ && !applying_) {
      if (!synced && unapplied_.empty()) return;
      ApplyQueued(lock);  // the store is stopping: no one else will
      continue;
    }
    apply_now_ = true;
    applier_cv_.notify_one();
    applied_cv_.wait(lock);
  }
}

void SqliteStore::CatchUp() {
  std::unique_lock<std::mutex> lock(mu_);
  WaitApplied(lock, log_seq_);
}

void SqliteStore::ApplyQueued(std::unique_lock<std::mutex>& lock) {
  applying_ = true;
  std::deque<std::pair<uint64_t, std::vector<Mutation>>> todo;
  todo.swap(unapplied_);
  // A synced transaction makes every one before it durable too (one WAL).
  const bool synced = sync_next_apply_ || !full_;
  sync_next_apply_ = false;
  const uint64_t upto = todo.empty() ? applied_log_seq_ : todo.back().first;
  lock.unlock();
  {
    std::lock_guard<std::mutex> db(db_mu_);
    if (todo.empty()) todo.emplace_back(upto, std::vector<Mutation>());
    ApplyToDb(todo, synced && full_);
  }
  lock.lock();
  applying_ = false;
  applied_log_seq_ = upto;
  if (synced) synced_log_seq_ = upto;
  applied_cv_.notify_all();
}

// Every kApplyEvery, or when someone waits: the logged batches into the
// database. Stops once the writer has stopped and nothing is left.
void SqliteStore::ApplierLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    applier_cv_.wait_for(lock, kApplyEvery, [&] { return stop_applier_ || apply_now_; });
    apply_now_ = false;
    if ((!unapplied_.empty() || sync_next_apply_) && !applying_) {
      ApplyQueued(lock);
      continue;
    }
    if (stop_applier_ && unapplied_.empty()) break;
  }
  applier_exited_ = true;
  applied_cv_.notify_all();
}

void SqliteStore::Step(sqlite3_stmt* s, const char* what) {
  if (sqlite3_step(s) != SQLITE_DONE) {
    LogEvent("fatal", {{"what", what}, {"error", sqlite3_errmsg(writer_)}});
    std::abort();
  }
  sqlite3_reset(s);
}

void SqliteStore::ApplyToDb(const std::deque<std::pair<uint64_t, std::vector<Mutation>>>& batches,
                            bool synced) {
  if (synced) Exec(writer_, "PRAGMA synchronous=FULL").IgnoreError();
  Step(stmts_->begin, "sqlite begin");
  for (const auto& [seq, batch] : batches) {
    for (const Mutation& m : batch) Apply(m);
  }
  sqlite3_bind_int64(stmts_->put_applied, 1, static_cast<int64_t>(batches.back().first));
  Step(stmts_->put_applied, "sqlite write");
  Step(stmts_->commit, "sqlite commit");
  if (synced) Exec(writer_, "PRAGMA synchronous=NORMAL").IgnoreError();
}

void SqliteStore::Apply(const Mutation& m) {
  const Statements& st = *stmts_;
  sqlite3_stmt* s = nullptr;
  if (const auto* d = std::get_if<DatasetRow>(&m)) {
    s = st.put_dataset;
    sqlite3_bind_int64(s, 1, d->id);
    BindText(s, 2, d->job);
    BindText(s, 3, d->name);
    sqlite3_bind_blob(s, 4, d->spec.data(), static_cast<int>(d->spec.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 5, d->epoch);
    sqlite3_bind_int64(s, 6, d->requeues);
    sqlite3_bind_int64(s, 7, d->expirations);
  } else if (const auto* sh = std::get_if<ShardRow>(&m)) {
    s = st.put_shard;
    sqlite3_bind_int64(s, 1, sh->dataset_id);
    sqlite3_bind_int64(s, 2, sh->index);
    sqlite3_bind_int(s, 3, static_cast<int>(sh->state));
    sqlite3_bind_int64(s, 4, sh->committed);
    sqlite3_bind_int64(s, 5, static_cast<int64_t>(sh->token));
  } else if (const auto* l = std::get_if<LeaseRow>(&m)) {
    s = st.put_lease;
    sqlite3_bind_int64(s, 1, static_cast<int64_t>(l->token));
    sqlite3_bind_int64(s, 2, l->dataset_id);
    sqlite3_bind_int(s, 3, l->epoch);
    sqlite3_bind_int64(s, 4, l->index);
    BindText(s, 5, l->worker);
    sqlite3_bind_int64(s, 6, l->incarnation);
    sqlite3_bind_int64(s, 7, l->begin);
    sqlite3_bind_int64(s, 8, l->committed);
    sqlite3_bind_int(s, 9, static_cast<int>(l->state));
    BindText(s, 10, l->request_id);
    sqlite3_bind_int64(s, 11, l->end);
  } else if (const auto* ds = std::get_if<DeleteShards>(&m)) {
    s = st.delete_shards;
    sqlite3_bind_int64(s, 1, ds->dataset_id);
  } else if (const auto* dl = std::get_if<DeleteLeasesBefore>(&m)) {
    s = st.delete_leases;
    sqlite3_bind_int64(s, 1, dl->dataset_id);
    sqlite3_bind_int(s, 2, dl->epoch);
  } else if (const auto* c = std::get_if<CheckpointRow>(&m)) {
    s = st.put_checkpoint;
    sqlite3_bind_int64(s, 1, c->dataset_id);
    sqlite3_bind_int64(s, 2, c->step);
    sqlite3_bind_blob(s, 3, c->blob.data(), static_cast<int>(c->blob.size()), SQLITE_TRANSIENT);
  } else if (const auto* n = std::get_if<NextToken>(&m)) {
    s = st.put_meta;
    sqlite3_bind_int64(s, 1, static_cast<int64_t>(n->value));
  } else if (const auto* w = std::get_if<WorkerRow>(&m)) {
    s = st.put_worker;
    sqlite3_bind_int64(s, 1, w->dataset_id);
    BindText(s, 2, w->worker);
    sqlite3_bind_int64(s, 3, w->records_committed);
  }
  if (sqlite3_step(s) != SQLITE_DONE) {
    LogEvent("fatal", {{"what", "sqlite write"}, {"error", sqlite3_errmsg(writer_)}});
    std::abort();
  }
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
}

// Batches no one waits for (new leases) ride on the next commit; this thread
// commits them itself once kLazyMutations are queued, kLazyDelay after a
// commit left them queued, and when the store stops.
void SqliteStore::WriterLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    pending_cv_.wait(lock, [&] { return stop_ || appended_seq_ > durable_seq_; });
    if (!stop_) {
      pending_cv_.wait_until(lock, first_pending_ + kLazyDelay, [&] {
        return stop_ || appended_seq_ == durable_seq_ || pending_.size() >= kLazyMutations ||
               !callbacks_.empty();
      });
    }
    if (committing_) {
      writer_awaits_commit_ = true;
      pending_cv_.wait(lock, [&] { return !committing_; });
      writer_awaits_commit_ = false;
      continue;
    }
    if (appended_seq_ > durable_seq_) {
      CommitPending(lock);
      continue;
    }
    if (stop_) return;
  }
}

absl::StatusOr<std::optional<LeaseRow>> SqliteStore::ReadLease(uint64_t token) {
  CatchUp();
  std::lock_guard<std::mutex> lock(reader_mu_);
  sqlite3_stmt* s = nullptr;
  const std::string sql = absl::StrCat("SELECT ", kLeaseColumns, " FROM leases WHERE token = ?");
  if (sqlite3_prepare_v2(reader_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK) {
    return SqlError(reader_, "prepare read lease");
  }
  sqlite3_bind_int64(s, 1, static_cast<int64_t>(token));
  std::optional<LeaseRow> out;
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) out = ReadLeaseRow(s);
  sqlite3_finalize(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqlError(reader_, "read lease");
  return out;
}

absl::StatusOr<std::optional<std::string>> SqliteStore::ReadCheckpoint(int64_t dataset_id,
                                                                       int64_t step) {
  CatchUp();
  std::lock_guard<std::mutex> lock(reader_mu_);
  sqlite3_stmt* s = nullptr;
  if (sqlite3_prepare_v2(reader_, "SELECT blob FROM checkpoints WHERE dataset_id = ? AND step = ?",
                         -1, &s, nullptr) != SQLITE_OK) {
    return SqlError(reader_, "prepare read checkpoint");
  }
  sqlite3_bind_int64(s, 1, dataset_id);
  sqlite3_bind_int64(s, 2, step);
  std::optional<std::string> out;
  int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) {
    out = std::string(static_cast<const char*>(sqlite3_column_blob(s, 0)),
                      static_cast<size_t>(sqlite3_column_bytes(s, 0)));
  }
  sqlite3_finalize(s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqlError(reader_, "read checkpoint");
  return out;
}

}  // namespace antdt::sharding
