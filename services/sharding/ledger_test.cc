#include "services/sharding/ledger.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"

namespace antdt::sharding {
namespace {

using v1::AcquireShardResponse;

// A store whose batches reach `durable` only when someone waits for them:
// Crash() loses the rest, as a killed process loses what was not on disk.
class LossyStore final : public Store {
 public:
  explicit LossyStore(MemoryStore* durable) : durable_(durable) {}
  absl::StatusOr<StoreSnapshot> Load() override { return durable_->Load(); }
  uint64_t Append(std::vector<Mutation> batch) override {
    pending_.emplace_back(++seq_, std::move(batch));
    return seq_;
  }
  uint64_t LastSeq() const override { return seq_; }
  absl::Status WaitDurable(uint64_t seq) override {
    if (!pending_.empty() && pending_.front().first <= seq) ++flushes_;
    while (!pending_.empty() && pending_.front().first <= seq) {
      durable_->Append(std::move(pending_.front().second));
      pending_.pop_front();
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<LeaseRow>> ReadLease(uint64_t token) override {
    return durable_->ReadLease(token);
  }
  absl::StatusOr<std::optional<std::string>> ReadCheckpoint(int64_t dataset_id,
                                                            int64_t step) override {
    return durable_->ReadCheckpoint(dataset_id, step);
  }
  size_t Pending() const { return pending_.size(); }
  int Flushes() const { return flushes_; }  // waits that had to write something
  void Crash() { pending_.clear(); }

 private:
  MemoryStore* const durable_;
  uint64_t seq_ = 0;
  int flushes_ = 0;
  std::deque<std::pair<uint64_t, std::vector<Mutation>>> pending_;
};

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override { Reopen(); }

  static LedgerOptions Options() {
    LedgerOptions options;
    options.lease_ttl_ms = 10'000;
    return options;
  }

  // Rebuilds the ledger over the same store: what a restart does.
  void Reopen(const LedgerOptions& options = Options()) {
    ledger_.reset();
    auto l = Ledger::Open(lossy_ ? static_cast<Store*>(lossy_.get()) : &store_, &clock_, options);
    ASSERT_TRUE(l.ok()) << l.status();
    ledger_ = std::move(*l);
  }

  v1::DatasetSpec Spec(int64_t records, int64_t shard_size, int epochs = 1, bool shuffle = false) {
    v1::DatasetSpec spec;
    spec.set_job(job_);
    spec.set_name("train");
    spec.set_record_count(records);
    spec.set_shard_size(shard_size);
    spec.set_epochs(epochs);
    spec.set_shuffle(shuffle);
    spec.set_seed(42);
    return spec;
  }

  absl::StatusOr<v1::CreateDatasetResponse> CreateResult(const v1::DatasetSpec& spec) {
    v1::CreateDatasetRequest req;
    *req.mutable_spec() = spec;
    return ledger_->CreateDataset(req);
  }

  void Create(const v1::DatasetSpec& spec) {
    auto r = CreateResult(spec);
    ASSERT_TRUE(r.ok()) << r.status();
  }

  // `call` must be refused with `code` naming `field`, and change nothing: no
  // store write, and the dataset Ref() answers GetProgress as before.
  void ExpectRefused(const std::function<absl::Status()>& call, absl::StatusCode code,
                     const std::string& field) {
    const uint64_t seq = store_.LastSeq();
    const std::string before = Progress().SerializeAsString();
    const absl::Status s = call();
    EXPECT_EQ(s.code(), code) << field << ": " << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
    EXPECT_EQ(store_.LastSeq(), seq) << field;
    EXPECT_EQ(Progress().SerializeAsString(), before) << field;
  }

  v1::DatasetRef Ref() {
    v1::DatasetRef ref;
    ref.set_job(job_);
    ref.set_name("train");
    return ref;
  }

  AcquireShardResponse Acquire(const std::string& worker, int64_t incarnation = 0) {
    v1::AcquireShardRequest req;
    *req.mutable_dataset() = Ref();
    req.set_worker_id(worker);
    req.set_incarnation(incarnation);
    auto r = ledger_->AcquireShard(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : AcquireShardResponse();
  }

  absl::StatusOr<v1::ReportProgressResponse> Report(uint64_t token, int64_t done,
                                                    bool follow = false) {
    v1::ReportProgressRequest req;
    *req.mutable_dataset() = Ref();
    req.set_token(token);
    req.set_records_done(done);
    req.set_follow_shorter_end(follow);
    return ledger_->ReportProgress(req);
  }

  // Releases what `worker` (incarnation and older) holds of every dataset of job1.
  absl::StatusOr<v1::ReleaseWorkerResponse> Release(const std::string& worker,
                                                    int64_t incarnation) {
    v1::ReleaseWorkerRequest req;
    req.mutable_dataset()->set_job("job1");
    req.set_worker_id(worker);
    req.set_incarnation(incarnation);
    return ledger_->ReleaseWorker(req);
  }

  absl::StatusOr<v1::CompleteShardResponse> Complete(uint64_t token) {
    v1::CompleteShardRequest req;
    *req.mutable_dataset() = Ref();
    req.set_token(token);
    return ledger_->CompleteShard(req);
  }

  v1::GetProgressResponse Progress() {
    v1::GetProgressRequest req;
    *req.mutable_dataset() = Ref();
    auto r = ledger_->GetProgress(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }

  // A guided run: 4,000 records in shards of up to 100 (min_shard_records
  // 10, 4 workers); "a", "b" and "c" commit 40 records a second, "d" 4, one
  // second at a time, each acquiring when its lease is done. Counts the
  // leases that ended before their shard's end, by worker speed; with
  // `stop_at_slow_cap`, stops at the first such lease of "d" and returns it,
  // still held (the others' leases stay open).
  void CheckGuidedLayout(bool shuffle);  // below its tests
  struct GuidedRun {
    std::map<int64_t, int> committed;  // record -> times
    int slow_caps = 0, fast_caps = 0;
    std::optional<AcquireShardResponse> capped;
  };
  GuidedRun RunRates(bool stop_at_slow_cap) {
    v1::DatasetSpec spec = Spec(4'000, 100);
    spec.set_min_shard_records(10);
    spec.set_workers(4);
    Create(spec);
    GuidedRun run;
    struct Held {
      AcquireShardResponse lease;
      int64_t done = 0;  // records of the shard committed
    };
    std::map<std::string, std::optional<Held>> held = {{"a", {}}, {"b", {}}, {"c", {}}, {"d", {}}};
    for (int second = 0; second < 10'000; ++second) {
      bool any = false;
      for (auto& [worker, h] : held) {
        if (!h) {
          auto r = Acquire(worker);
          if (r.result() != AcquireShardResponse::SHARD) continue;
          if (r.shard().lease_end() < r.shard().size()) {
            ++(worker == "d" ? run.slow_caps : run.fast_caps);
            if (worker == "d" && stop_at_slow_cap) {
              run.capped = r;
              return run;
            }
          }
          h = Held{r, r.shard().committed()};
        }
        any = true;
        const v1::Shard& s = h->lease.shard();
        const int64_t to = std::min(s.lease_end(), h->done + (worker == "d" ? 4 : 40));
        auto reported = Report(h->lease.lease().token(), to);
        EXPECT_TRUE(reported.ok()) << reported.status();
        for (int64_t k = h->done; k < to; ++k) ++run.committed[s.start() + k - s.committed()];
        h->done = to;
        if (to == s.lease_end()) {
          EXPECT_TRUE(Complete(h->lease.lease().token()).ok());
          h.reset();
        }
      }
      if (!any) break;
      clock_.Advance(1'000);
    }
    return run;
  }

  // A guided run as RunRates's, where "d" commits 40 records a second like
  // the others until second 20 and 2 from then on: it slows down holding a
  // whole shard. Its reports follow shorter ends when `follow`.
  struct SlowdownRun {
    std::map<int64_t, int> committed;         // record -> times
    int cuts = 0;                             // progress answers that ended d's lease early
    int64_t seconds = 0;                      // until the last record was committed
    std::optional<AcquireShardResponse> cut;  // d's first cut lease, still held, when stopping
    int64_t cut_end = 0;
  };
  SlowdownRun RunSlowdown(bool follow, bool stop_at_cut = false) {
    v1::DatasetSpec spec = Spec(4'000, 100);
    spec.set_min_shard_records(10);
    spec.set_workers(4);
    Create(spec);
    SlowdownRun run;
    struct Held {
      AcquireShardResponse lease;
      int64_t done = 0;  // records of the shard committed
      int64_t end = 0;   // where the lease ends
    };
    std::map<std::string, std::optional<Held>> held = {{"a", {}}, {"b", {}}, {"c", {}}, {"d", {}}};
    for (int second = 0; second < 10'000; ++second) {
      bool any = false;
      for (auto& [worker, h] : held) {
        if (!h) {
          auto r = Acquire(worker);
          if (r.result() != AcquireShardResponse::SHARD) continue;
          h = Held{r, r.shard().committed(), r.shard().lease_end()};
        }
        any = true;
        const v1::Shard& s = h->lease.shard();
        const int64_t to = std::min(h->end, h->done + (worker == "d" && second >= 20 ? 2 : 40));
        for (int64_t k = h->done; k < to; ++k) ++run.committed[s.start() + k - s.committed()];
        h->done = to;
        if (to == h->end) {
          EXPECT_TRUE(Complete(h->lease.lease().token()).ok());
          h.reset();
          continue;
        }
        auto reported = Report(h->lease.lease().token(), to, follow);
        EXPECT_TRUE(reported.ok()) << reported.status();
        if (!reported.ok()) return run;
        EXPECT_GE(reported->lease_end(), to) << "never before what was committed";
        if (reported->lease_end() < h->end) {
          EXPECT_EQ(worker, "d") << "only the slow worker's lease is cut";
          ++run.cuts;
          h->end = reported->lease_end();
          if (stop_at_cut) {
            run.cut = h->lease;
            run.cut_end = h->end;
            return run;
          }
        }
      }
      if (!any) break;
      run.seconds = second + 1;
      clock_.Advance(1'000);
    }
    return run;
  }

  static std::vector<int64_t> Records(const v1::Shard& s) {
    if (s.record_ids_size() > 0) return {s.record_ids().begin(), s.record_ids().end()};
    std::vector<int64_t> out;
    for (int64_t r = s.start(); r < s.end(); ++r) out.push_back(r);
    return out;
  }

  std::string job_ = "job1";  // Ref()'s and Spec()'s
  FakeClock clock_;
  MemoryStore store_;
  std::unique_ptr<LossyStore> lossy_;  // when set, the ledger writes through it to store_
  std::unique_ptr<Ledger> ledger_;
};

// An AcquireShard answers before its lease is durable; if the service dies
// first, the lease is fenced after the restart: calls under its token are
// refused, the shard goes to another worker under a new token, and every
// record is still committed exactly once.
TEST_F(LedgerTest, ALeaseLostBeforeItWasDurableIsFencedAfterARestart) {
  lossy_ = std::make_unique<LossyStore>(&store_);
  Reopen();
  Create(Spec(30, 10));
  auto kept = Acquire("a");
  ASSERT_TRUE(Report(kept.lease().token(), 4).ok());  // durable: commits wait
  auto lost = Acquire("b");
  EXPECT_GT(lossy_->Pending(), 0u) << "the acquire did not wait for the disk";
  lossy_->Crash();
  Reopen();
  auto refused = Report(lost.lease().token(), 3);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("restarted before the lease was stored"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(Complete(lost.lease().token()).status().code(), absl::StatusCode::kFailedPrecondition);
  // The lease that committed survived; the lost one's shard is handed out again.
  ASSERT_TRUE(Report(kept.lease().token(), 10).ok());
  std::map<int64_t, int> committed;  // record -> times
  for (int64_t r = kept.shard().start(); r < 4; ++r) ++committed[r];
  auto rest = Report(kept.lease().token(), 10);
  ASSERT_TRUE(rest.ok());
  for (int64_t r = 4; r < 10; ++r) ++committed[r];
  ASSERT_TRUE(Complete(kept.lease().token()).ok());
  for (;;) {
    auto next = Acquire("c");
    if (next.result() != AcquireShardResponse::SHARD) break;
    EXPECT_GT(next.lease().token(), lost.lease().token()) << "a token was issued twice";
    ASSERT_TRUE(Complete(next.lease().token()).ok());
    for (int64_t r = next.shard().start(); r < next.shard().end(); ++r) ++committed[r];
  }
  EXPECT_EQ(committed.size(), 30u);
  for (const auto& [record, times] : committed) EXPECT_EQ(times, 1) << "record " << record;
  EXPECT_TRUE(Progress().finished());
}

// Tokens come from ranges reserved ahead: thousands of acquires, none
// waited for, then a crash; no token issued before it is issued again.
TEST_F(LedgerTest, TokensIssuedBeforeACrashAreNeverIssuedAgain) {
  lossy_ = std::make_unique<LossyStore>(&store_);
  Reopen();
  Create(Spec(20'000, 1));
  uint64_t highest = 0;
  for (int i = 0; i < 10'000; ++i) {
    auto a = Acquire(absl::StrCat("w", i % 64));
    ASSERT_EQ(a.result(), AcquireShardResponse::SHARD);
    highest = std::max<uint64_t>(highest, a.lease().token());
  }
  // Only the range reservations were waited for (one per 2,048 tokens), not
  // each lease, and leases issued since the last were lost.
  EXPECT_LE(lossy_->Flushes(), 6);
  EXPECT_GT(lossy_->Pending(), 0u);
  lossy_->Crash();
  Reopen();
  const int64_t survived = Progress().shards_doing();
  EXPECT_LT(survived, 10'000);
  auto after = Acquire("x");
  ASSERT_EQ(after.result(), AcquireShardResponse::SHARD);
  EXPECT_GT(after.lease().token(), highest);
  EXPECT_EQ(Progress().shards_doing(), survived + 1);
}

TEST_F(LedgerTest, HandsOutEveryShardOnceThenEndOfData) {
  Create(Spec(95, 10));
  std::set<int64_t> seen;
  for (int i = 0; i < 10; ++i) {
    auto r = Acquire("w" + std::to_string(i % 3));
    ASSERT_EQ(r.result(), AcquireShardResponse::SHARD);
    for (int64_t rec : Records(r.shard())) EXPECT_TRUE(seen.insert(rec).second) << rec;
    ASSERT_TRUE(Complete(r.lease().token()).ok());
  }
  EXPECT_EQ(seen.size(), 95u);
  EXPECT_EQ(Acquire("w0").result(), AcquireShardResponse::END_OF_DATA);
  auto p = Progress();
  EXPECT_TRUE(p.finished());
  EXPECT_EQ(p.records_committed_total(), 95);
}

TEST_F(LedgerTest, WaitsWhileTheLastShardsAreLeased) {
  Create(Spec(20, 10));
  auto a = Acquire("a");
  auto b = Acquire("b");
  auto c = Acquire("c");
  EXPECT_EQ(c.result(), AcquireShardResponse::WAIT);
  EXPECT_GT(c.retry_after_ms(), 0);
  ASSERT_TRUE(Complete(a.lease().token()).ok());
  ASSERT_TRUE(Complete(b.lease().token()).ok());
  EXPECT_EQ(Acquire("c").result(), AcquireShardResponse::END_OF_DATA);
}

TEST_F(LedgerTest, ExpiredLeaseRequeuesTheRemainderAndFencesTheToken) {
  Create(Spec(100, 10));
  auto a = Acquire("a");
  ASSERT_TRUE(Report(a.lease().token(), 4).ok());
  clock_.Advance(10'001);
  // The next acquire, by anyone, gets the remainder first: records 4..9.
  auto b = Acquire("b");
  ASSERT_EQ(b.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(b.shard().index(), a.shard().index());
  EXPECT_EQ(b.shard().committed(), 4);
  EXPECT_EQ(b.shard().start(), a.shard().start() + 4);
  EXPECT_EQ(b.shard().end(), a.shard().end());
  // The old holder is refused beyond what it committed, idempotent up to it.
  auto stale = Report(a.lease().token(), 6);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("expired"), std::string::npos);
  EXPECT_TRUE(Report(a.lease().token(), 4).ok());
  EXPECT_EQ(Complete(a.lease().token()).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Complete(b.lease().token()).ok());
  auto p = Progress();
  EXPECT_EQ(p.records_committed_epoch(), 10);
  EXPECT_EQ(p.lease_expirations(), 1);
  EXPECT_EQ(p.requeues(), 1);
}

TEST_F(LedgerTest, ProgressExtendsTheLease) {
  Create(Spec(100, 10));
  auto a = Acquire("a");
  for (int i = 1; i <= 5; ++i) {
    clock_.Advance(6'000);
    ASSERT_TRUE(Report(a.lease().token(), i).ok()) << i;
  }
  ASSERT_TRUE(Complete(a.lease().token()).ok());
}

TEST_F(LedgerTest, CompleteIsIdempotentForTheSameLease) {
  Create(Spec(100, 10));
  auto a = Acquire("a");
  ASSERT_TRUE(Complete(a.lease().token()).ok());
  auto again = Complete(a.lease().token());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_completed());
  EXPECT_EQ(Progress().records_committed_epoch(), 10);
  EXPECT_EQ(Complete(999).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LedgerTest, LeaseHistoryIsPrunedAfterEightEpochs) {
  Create(Spec(10, 10, /*epochs=*/12));
  auto old = Acquire("w");
  ASSERT_TRUE(Complete(old.lease().token()).ok());
  for (int i = 0; i < 9; ++i) ASSERT_TRUE(Complete(Acquire("w").lease().token()).ok());
  EXPECT_EQ(Progress().epoch(), 10);
  Reopen();  // the answer now has to come from the store
  auto r = Complete(old.lease().token());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_NE(r.status().message().find("no longer known"), std::string::npos) << r.status();
  EXPECT_EQ(Complete(999'999).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LedgerTest, ALateRetryEpochsLaterStillGetsTheTruth) {
  // A worker commits 4 records; the answer is lost, its lease expires, and the
  // others finish three epochs before its retry arrives (after a restart, so
  // the answer comes from the store). The commit happened: the retry is OK.
  Create(Spec(20, 10, /*epochs=*/4));
  auto old = Acquire("slow");
  ASSERT_TRUE(Report(old.lease().token(), 4).ok());
  clock_.Advance(10'001);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(Complete(Acquire("fast").lease().token()).ok());
  EXPECT_EQ(Progress().epoch(), 3);
  Reopen();
  EXPECT_TRUE(Report(old.lease().token(), 4).ok());
  auto beyond = Report(old.lease().token(), 5);
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kFailedPrecondition) << beyond.status();
  EXPECT_EQ(Complete(old.lease().token()).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LedgerTest, ProgressBeyondShardSizeIsRefusedAndChangesNothing) {
  Create(Spec(100, 10));
  auto a = Acquire("a");
  auto r = Report(a.lease().token(), 11);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("records_done"), std::string::npos);
  EXPECT_EQ(Progress().records_committed_epoch(), 0);
}

// The guided layout (min_shard_records and workers > 0): shards of
// shard_size first, then smaller ones, largest first, down to about
// min_shard_records; every record is committed exactly once in each epoch,
// shuffled or not, and the layout is the same after a restart.
TEST_F(LedgerTest, TheGuidedLayoutShrinksShardsTowardTheEpochsEnd) { CheckGuidedLayout(false); }
TEST_F(LedgerTest, TheGuidedLayoutShrinksShuffledShardsToo) { CheckGuidedLayout(true); }

void LedgerTest::CheckGuidedLayout(bool shuffle) {
  {
    v1::DatasetSpec spec = Spec(1'000, 100, 2, shuffle);
    spec.set_min_shard_records(5);
    spec.set_workers(4);
    auto created = CreateResult(spec);
    ASSERT_TRUE(created.ok()) << created.status();
    EXPECT_GT(created->shard_count(), 10);
    Reopen();
    std::map<std::pair<int, int64_t>, int> committed;  // (epoch, record) -> times
    std::vector<int64_t> sizes[2];                     // shard sizes in the order handed out
    for (int i = 0;; ++i) {
      auto r = Acquire(absl::StrCat("w", i % 4));
      if (r.result() == AcquireShardResponse::END_OF_DATA) break;
      ASSERT_EQ(r.result(), AcquireShardResponse::SHARD);
      const v1::Shard& s = r.shard();
      EXPECT_EQ(s.lease_end(), s.size()) << "no worker's rate is known: whole shards";
      sizes[s.epoch()].push_back(s.size());
      for (int64_t rec : Records(s)) ++committed[{s.epoch(), rec}];
      ASSERT_TRUE(Complete(r.lease().token()).ok());
    }
    ASSERT_EQ(committed.size(), 2'000u);
    for (const auto& [key, times] : committed) {
      EXPECT_EQ(times, 1) << "epoch " << key.first << " record " << key.second;
    }
    for (int e = 0; e < 2; ++e) {
      ASSERT_EQ(static_cast<int64_t>(sizes[e].size()), created->shard_count());
      EXPECT_EQ(sizes[e].front(), 100) << "epoch " << e;
      EXPECT_LT(sizes[e].back(), 10) << "epoch " << e << ": the last shards are the smallest";
      EXPECT_GE(*std::min_element(sizes[e].begin(), sizes[e].end()), 5);
      // Largest first; the last one may take up to min_shard_records - 1 more.
      EXPECT_TRUE(std::is_sorted(sizes[e].rbegin() + 1, sizes[e].rend())) << "epoch " << e;
    }
    EXPECT_TRUE(Progress().finished());
    EXPECT_EQ(Progress().records_committed_total(), 2'000);
  }
}

// A much slower worker is given only its share of what is left, by the
// rates: "d" commits a tenth of what "a", "b" and "c" do, and near the
// epoch's end its leases stop short of their shards' ends, the rest going
// to the next worker; the fast workers always get whole remainders. Every
// record once, no requeue.
TEST_F(LedgerTest, ASlowWorkerLeasesOnlyItsShareOfTheEnd) {
  GuidedRun run = RunRates(/*stop_at_slow_cap=*/false);
  EXPECT_GT(run.slow_caps, 0) << "the slow worker's leases were never cut";
  EXPECT_EQ(run.fast_caps, 0);
  ASSERT_EQ(run.committed.size(), 4'000u);
  for (const auto& [record, times] : run.committed) EXPECT_EQ(times, 1) << "record " << record;
  auto p = Progress();
  EXPECT_TRUE(p.finished());
  EXPECT_EQ(p.records_committed_total(), 4'000);
  EXPECT_EQ(p.leases_shortened(), run.slow_caps);
  EXPECT_EQ(p.requeues(), 0) << "a completed short lease is not a requeue";
}

// A short lease's end is where its holder must stop: progress past it is
// refused naming records_done and changes nothing; completing it commits up
// to its end; the shard's rest goes to the next worker from there, and a
// stale call on the old range is refused. The end survives a restart.
TEST_F(LedgerTest, AShortLeaseEndsWhereItSaysThroughARestart) {
  GuidedRun run = RunRates(/*stop_at_slow_cap=*/true);
  ASSERT_TRUE(run.capped.has_value());
  const AcquireShardResponse& a = *run.capped;
  const uint64_t token = a.lease().token();
  const int64_t end = a.shard().lease_end();
  ASSERT_TRUE(Report(token, a.shard().committed() + 1).ok());
  Reopen();  // the service restarts: the lease and its end are kept
  ExpectRefused([&] { return Report(token, end + 1).status(); }, absl::StatusCode::kInvalidArgument,
                "records_done");
  auto refused = Report(token, end + 1);
  EXPECT_NE(refused.status().message().find("passes the end of lease"), std::string::npos)
      << refused.status();
  ASSERT_TRUE(Report(token, end).ok());
  ASSERT_TRUE(Complete(token).ok());
  auto rest = Acquire("c");
  ASSERT_EQ(rest.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(rest.shard().index(), a.shard().index());
  EXPECT_EQ(rest.shard().committed(), end);
  EXPECT_EQ(rest.shard().start(), a.shard().end());
  // The old holder's token is spent: idempotent up to its end, refused past it.
  EXPECT_TRUE(Report(token, end).ok());
  EXPECT_EQ(Report(token, end + 1).status().code(), absl::StatusCode::kFailedPrecondition);
  auto again = Complete(token);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->already_completed());
}

// The holder of a short lease dies mid-range: its lease expires and the
// unfinished part, from its last committed record to the shard's end, is
// leased again; nothing it committed is handed out twice.
TEST_F(LedgerTest, AShortLeasesHolderLostMidRangeLosesNoRecord) {
  GuidedRun run = RunRates(/*stop_at_slow_cap=*/true);
  ASSERT_TRUE(run.capped.has_value());
  const AcquireShardResponse& a = *run.capped;
  const int64_t from = a.shard().committed();
  ASSERT_TRUE(Report(a.lease().token(), from + 3).ok());
  const int64_t before = Progress().records_committed_epoch();
  clock_.Advance(10'001);  // the holder is gone
  auto b = Acquire("b");
  ASSERT_EQ(b.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(b.shard().index(), a.shard().index());
  EXPECT_EQ(b.shard().committed(), from + 3);
  EXPECT_EQ(Report(a.lease().token(), from + 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Complete(a.lease().token()).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Progress().records_committed_epoch(), before);
  // Everything left, to the end: 4,000 records exactly.
  ASSERT_TRUE(Complete(b.lease().token()).ok());
  for (;;) {
    auto r = Acquire("c");
    if (r.result() != AcquireShardResponse::SHARD) break;
    ASSERT_TRUE(Complete(r.lease().token()).ok());
  }
  auto p = Progress();
  EXPECT_TRUE(p.finished());
  EXPECT_EQ(p.records_committed_total(), 4'000);
}

// A worker that slows down holding a whole shard: near the epoch's end, its
// ReportProgress (following shorter ends) ends its lease early, past what it
// committed, and the shard's rest goes to the fast workers once it completes
// there. Every record once, and the epoch ends sooner than when it does not
// follow (its lease then stays whole to the end).
TEST_F(LedgerTest, ASlowHoldersLeaseEndsEarlyWhenItFollows) {
  const SlowdownRun cut = RunSlowdown(/*follow=*/true);
  EXPECT_GT(cut.cuts, 0);
  ASSERT_EQ(cut.committed.size(), 4'000u);
  for (const auto& [record, times] : cut.committed) ASSERT_EQ(times, 1) << "record " << record;
  EXPECT_TRUE(Progress().finished());
  job_ = "job2";  // the same run, another dataset
  const SlowdownRun whole = RunSlowdown(/*follow=*/false);
  EXPECT_EQ(whole.cuts, 0);
  ASSERT_EQ(whole.committed.size(), 4'000u);
  for (const auto& [record, times] : whole.committed) ASSERT_EQ(times, 1) << "record " << record;
  std::printf("epoch end with the slow holder's lease cut: %lld s, whole: %lld s\n",
              static_cast<long long>(cut.seconds), static_cast<long long>(whole.seconds));
  EXPECT_LT(cut.seconds, whole.seconds);
}

// The cut end is a fence: progress past it is refused naming records_done
// and changes nothing, through a restart of the service; completing commits
// up to it, and the rest goes to the next worker from there.
TEST_F(LedgerTest, ACutLeaseEndsWhereTheAnswerSaidThroughARestart) {
  SlowdownRun run = RunSlowdown(/*follow=*/true, /*stop_at_cut=*/true);
  ASSERT_TRUE(run.cut.has_value());
  const uint64_t token = run.cut->lease().token();
  const int64_t end = run.cut_end;
  const int64_t before = Progress().records_committed_epoch();
  Reopen();  // the service restarts: the lease and its new end are kept
  ExpectRefused([&] { return Report(token, end + 1, true).status(); },
                absl::StatusCode::kInvalidArgument, "records_done");
  EXPECT_EQ(Progress().records_committed_epoch(), before);
  ASSERT_TRUE(Report(token, end, true).ok());
  ASSERT_TRUE(Complete(token).ok());
  auto rest = Acquire("a");
  ASSERT_EQ(rest.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(rest.shard().index(), run.cut->shard().index());
  EXPECT_EQ(rest.shard().committed(), end);
}

// The slow holder of a cut lease asks again as soon as it completes it (a
// CompleteShard with next): it gets the next shard in line, not the rest it
// was just found too slow for, which waits at the front for another worker.
TEST_F(LedgerTest, TheRestOfACutLeaseGoesToAnotherWorkerNotBackToItsSlowHolder) {
  SlowdownRun run = RunSlowdown(/*follow=*/true, /*stop_at_cut=*/true);
  ASSERT_TRUE(run.cut.has_value());
  const int64_t cut_shard = run.cut->shard().index();
  ASSERT_TRUE(Report(run.cut->lease().token(), run.cut_end, true).ok());
  ASSERT_TRUE(Complete(run.cut->lease().token()).ok());
  auto again = Acquire("d");
  ASSERT_EQ(again.result(), AcquireShardResponse::SHARD);
  EXPECT_NE(again.shard().index(), cut_shard);
  auto other = Acquire("a");
  ASSERT_EQ(other.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(other.shard().index(), cut_shard);
  EXPECT_EQ(other.shard().committed(), run.cut_end);
}

// The holder of a cut lease dies before its new end: its lease expires and
// everything it did not commit, to the shard's end, is leased again; it can
// commit nothing more.
TEST_F(LedgerTest, ACutLeasesHolderLostBeforeItsEndLosesNoRecord) {
  SlowdownRun run = RunSlowdown(/*follow=*/true, /*stop_at_cut=*/true);
  ASSERT_TRUE(run.cut.has_value());
  const uint64_t token = run.cut->lease().token();
  const int64_t committed = Progress().records_committed_epoch();
  clock_.Advance(10'001);  // the holder is gone
  auto b = Acquire("b");
  ASSERT_EQ(b.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(b.shard().index(), run.cut->shard().index());
  EXPECT_LT(b.shard().committed(), run.cut_end) << "from its last committed record";
  EXPECT_EQ(Report(token, run.cut_end, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Progress().records_committed_epoch(), committed);
}

TEST_F(LedgerTest, RestartedWorkerResumesAfterItsLastCommittedRecord) {
  Create(Spec(100, 10));
  auto a = Acquire("w", 0);
  ASSERT_TRUE(Report(a.lease().token(), 7).ok());
  auto again = Acquire("w", 1);  // the worker restarted
  ASSERT_EQ(again.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(again.shard().index(), a.shard().index());
  EXPECT_EQ(again.shard().start(), a.shard().start() + 7);
  EXPECT_EQ(again.shard().committed(), 7);
  // The old incarnation is fenced.
  EXPECT_EQ(Report(a.lease().token(), 8).status().code(), absl::StatusCode::kFailedPrecondition);
  v1::AcquireShardRequest old;
  *old.mutable_dataset() = Ref();
  old.set_worker_id("w");
  old.set_incarnation(0);
  EXPECT_EQ(ledger_->AcquireShard(old).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LedgerTest, ARetriedAcquireGetsTheSameLease) {
  Create(Spec(100, 10));
  v1::AcquireShardRequest req;
  *req.mutable_dataset() = Ref();
  req.set_worker_id("w");
  req.set_request_id("r1");
  auto first = ledger_->AcquireShard(req);
  ASSERT_TRUE(first.ok());
  Reopen();  // the service crashed after committing, before answering
  auto retry = ledger_->AcquireShard(req);
  ASSERT_TRUE(retry.ok());
  EXPECT_EQ(retry->lease().token(), first->lease().token());
  EXPECT_EQ(retry->shard().index(), first->shard().index());
  req.set_request_id("r2");
  auto second = ledger_->AcquireShard(req);
  EXPECT_NE(second->shard().index(), first->shard().index());
  EXPECT_EQ(Progress().shards_doing(), 2);
}

// CompleteShard with `next`: one call completes a shard and leases the next,
// until END_OF_DATA; every record committed once.
TEST_F(LedgerTest, CompleteWithNextLeasesTheNextShardInTheSameCall) {
  Create(Spec(30, 10));
  auto lease = Acquire("w");
  std::set<int64_t> indexes{lease.shard().index()};
  v1::CompleteShardRequest req;
  *req.mutable_dataset() = Ref();
  req.mutable_next()->set_worker_id("w");  // next.dataset left empty: this call's
  for (int i = 0; i < 3; ++i) {
    req.set_token(lease.lease().token());
    req.mutable_next()->set_request_id(absl::StrCat("n", i));
    auto done = ledger_->CompleteShard(req);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_FALSE(done->already_completed());
    ASSERT_TRUE(done->has_next());
    lease = done->next();
    if (i < 2) {
      ASSERT_EQ(lease.result(), AcquireShardResponse::SHARD);
      EXPECT_TRUE(indexes.insert(lease.shard().index()).second);
    } else {
      EXPECT_EQ(lease.result(), AcquireShardResponse::END_OF_DATA);
    }
  }
  EXPECT_EQ(Progress().records_committed_total(), 30);
  EXPECT_TRUE(Progress().finished());
}

// A retry of a lost answer: the shard is already completed, and the same
// next lease comes back, not a second shard.
TEST_F(LedgerTest, ARetriedCompleteWithNextGetsTheSameNextLease) {
  Create(Spec(100, 10));
  auto a = Acquire("w");
  v1::CompleteShardRequest req;
  *req.mutable_dataset() = Ref();
  req.set_token(a.lease().token());
  req.mutable_next()->set_worker_id("w");
  req.mutable_next()->set_request_id("r1");
  auto first = ledger_->CompleteShard(req);
  ASSERT_TRUE(first.ok()) << first.status();
  Reopen();  // the service crashed after committing, before answering
  auto retry = ledger_->CompleteShard(req);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->already_completed());
  EXPECT_EQ(retry->next().lease().token(), first->next().lease().token());
  EXPECT_EQ(retry->next().shard().index(), first->next().shard().index());
  EXPECT_EQ(Progress().shards_doing(), 1);
  EXPECT_EQ(Progress().records_committed_epoch(), 10);
}

// A bad `next` refuses the whole call, naming the field: the shard is not
// completed. A lost lease acquires nothing.
TEST_F(LedgerTest, ABadNextRefusesTheCallAndCompletesNothing) {
  Create(Spec(100, 10));
  auto a = Acquire("w");
  v1::CompleteShardRequest req;
  *req.mutable_dataset() = Ref();
  req.set_token(a.lease().token());
  req.mutable_next()->set_worker_id(std::string("bad\0id", 6));
  ExpectRefused([&] { return ledger_->CompleteShard(req).status(); },
                absl::StatusCode::kInvalidArgument, "next.worker_id");
  req.mutable_next()->set_worker_id("w");
  req.mutable_next()->set_incarnation(-1);
  ExpectRefused([&] { return ledger_->CompleteShard(req).status(); },
                absl::StatusCode::kInvalidArgument, "next.incarnation");
  req.mutable_next()->set_incarnation(0);
  req.mutable_next()->mutable_dataset()->set_job("other/job");
  ExpectRefused([&] { return ledger_->CompleteShard(req).status(); },
                absl::StatusCode::kInvalidArgument, "next.dataset.job");
  // Checked whole before anything changes: a dataset that exists, of the
  // completed shard's job, and the worker that held the shard.
  req.mutable_next()->mutable_dataset()->set_job("job1");
  req.mutable_next()->mutable_dataset()->set_name("no-such");
  ExpectRefused([&] { return ledger_->CompleteShard(req).status(); }, absl::StatusCode::kNotFound,
                "next.dataset");
  Create([&] {
    v1::DatasetSpec other = Spec(10, 10);
    other.set_job("job2");
    return other;
  }());
  req.mutable_next()->mutable_dataset()->set_job("job2");
  req.mutable_next()->mutable_dataset()->set_name("train");
  ExpectRefused([&] { return ledger_->CompleteShard(req).status(); },
                absl::StatusCode::kInvalidArgument, "next.dataset.job");
  req.mutable_next()->clear_dataset();
  req.mutable_next()->set_worker_id("someone-else");
  ExpectRefused([&] { return ledger_->CompleteShard(req).status(); },
                absl::StatusCode::kPermissionDenied, "next.worker_id");
  req.mutable_next()->set_worker_id("w");
  EXPECT_EQ(Progress().shards_doing(), 1);
  EXPECT_EQ(Progress().records_committed_epoch(), 0);

  clock_.Advance(10'001);  // the lease expires
  req.mutable_next()->clear_dataset();
  auto lost = ledger_->CompleteShard(req);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kFailedPrecondition) << lost.status();
  EXPECT_EQ(Progress().shards_doing(), 0);
}

// The shard is completed even when the acquire cannot be made (a newer
// incarnation of the worker named in `next`): `next` is left unset.
TEST_F(LedgerTest, ACompleteWhoseNextCannotAcquireStillCommits) {
  Create(Spec(100, 10));
  auto a = Acquire("a", 1);
  v1::CompleteShardRequest req;
  *req.mutable_dataset() = Ref();
  req.set_token(a.lease().token());
  req.mutable_next()->set_worker_id("a");
  req.mutable_next()->set_incarnation(0);  // older than the worker's: refused
  auto done = ledger_->CompleteShard(req);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(done->has_next());
  EXPECT_EQ(Progress().records_committed_epoch(), 10);
}

TEST_F(LedgerTest, ReleaseWorkerRequeuesAtOnce) {
  Create(Spec(100, 10));
  auto a1 = Acquire("a");
  auto a2 = Acquire("a");
  ASSERT_TRUE(Report(a1.lease().token(), 3).ok());
  auto r = Release("a", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->released_shards(), 2);
  EXPECT_EQ(r->requeued_records(), 17);
  std::set<int64_t> indices;
  for (int i = 0; i < 2; ++i) indices.insert(Acquire("b").shard().index());
  EXPECT_EQ(indices, (std::set<int64_t>{a1.shard().index(), a2.shard().index()}));
  EXPECT_EQ(Progress().requeues(), 2);
}

// The leases a worker holds are found by its name (not by a pass over every
// lease): those read back from the store after the service restarted too, and
// only that worker's, never a namesake prefix's.
TEST_F(LedgerTest, AfterAServiceRestartAWorkersRecoveredLeasesAreItsOwnToReleaseOrResume) {
  Create(Spec(100, 10));
  auto w = Acquire("w", 0);
  auto w1 = Acquire("w1", 0);
  auto w2 = Acquire("w", 0);
  ASSERT_TRUE(Report(w.lease().token(), 4).ok());
  ASSERT_TRUE(Report(w1.lease().token(), 6).ok());
  Reopen();
  auto again = Acquire("w", 1);  // the worker restarted: its oldest lease resumes first
  ASSERT_EQ(again.result(), AcquireShardResponse::SHARD);
  EXPECT_EQ(again.shard().index(), w.shard().index());
  EXPECT_EQ(again.shard().start(), w.shard().start() + 4);
  EXPECT_EQ(Report(w.lease().token(), 5).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Report(w2.lease().token(), 1).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(Report(w1.lease().token(), 7).ok()) << "another worker's lease is untouched";
  auto r = Release("w1", 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->released_shards(), 1);
  EXPECT_EQ(r->requeued_records(), 3);
  EXPECT_TRUE(Report(again.lease().token(), 5).ok()) << "w's new lease is not w1's";
}

TEST_F(LedgerTest, EpochsAdvanceAndEachRecordIsCommittedOncePerEpoch) {
  Create(Spec(57, 8, /*epochs=*/3, /*shuffle=*/true));
  std::map<int, std::multiset<int64_t>> by_epoch;
  int turn = 0;
  for (;;) {
    auto r = Acquire("w" + std::to_string(turn++ % 4));
    if (r.result() == AcquireShardResponse::END_OF_DATA) break;
    ASSERT_EQ(r.result(), AcquireShardResponse::SHARD);
    // Every third shard: commit half, let it expire; the rest is redone.
    auto recs = Records(r.shard());
    if (turn % 3 == 0 && recs.size() > 1) {
      int64_t half = r.shard().committed() + static_cast<int64_t>(recs.size()) / 2;
      ASSERT_TRUE(Report(r.lease().token(), half).ok());
      for (size_t i = 0; i < recs.size() / 2; ++i) by_epoch[r.shard().epoch()].insert(recs[i]);
      clock_.Advance(10'001);
      continue;
    }
    ASSERT_TRUE(Complete(r.lease().token()).ok());
    for (int64_t rec : recs) by_epoch[r.shard().epoch()].insert(rec);
  }
  ASSERT_EQ(by_epoch.size(), 3u);
  for (const auto& [epoch, recs] : by_epoch) {
    EXPECT_EQ(recs.size(), 57u) << "epoch " << epoch;
    for (int64_t i = 0; i < 57; ++i) EXPECT_EQ(recs.count(i), 1u) << "epoch " << epoch;
  }
  EXPECT_EQ(Progress().records_committed_total(), 57 * 3);
}

TEST_F(LedgerTest, ShufflingIsDeterministicAndDiffersByEpoch) {
  int calls = 0;
  auto order = [&](uint64_t seed) {
    auto spec = Spec(100, 10, 2, true);
    spec.set_seed(seed);
    spec.set_name("s" + std::to_string(calls++));
    v1::CreateDatasetRequest req;
    *req.mutable_spec() = spec;
    EXPECT_TRUE(ledger_->CreateDataset(req).ok());
    std::vector<std::vector<int64_t>> out;
    for (;;) {
      v1::AcquireShardRequest a;
      a.mutable_dataset()->set_job("job1");
      a.mutable_dataset()->set_name(spec.name());
      a.set_worker_id("w");
      auto r = ledger_->AcquireShard(a);
      if (r->result() != AcquireShardResponse::SHARD) break;
      out.push_back(Records(r->shard()));
      v1::CompleteShardRequest c;
      *c.mutable_dataset() = a.dataset();
      c.set_token(r->lease().token());
      EXPECT_TRUE(ledger_->CompleteShard(c).ok());
    }
    return out;
  };
  auto x = order(7);
  ASSERT_EQ(x.size(), 20u);
  EXPECT_EQ(x, order(7));
  EXPECT_NE(x, order(8));
  std::vector<std::vector<int64_t>> e0(x.begin(), x.begin() + 10), e1(x.begin() + 10, x.end());
  EXPECT_NE(e0, e1);
  // Not the identity order, and records inside a shard are shuffled too.
  std::vector<int64_t> flat;
  for (auto& s : e0) flat.insert(flat.end(), s.begin(), s.end());
  std::vector<int64_t> sorted = flat;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(flat, sorted);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
}

TEST_F(LedgerTest, RestartKeepsCommittedStateAndLeases) {
  Create(Spec(100, 10, 2));
  auto a = Acquire("a");
  ASSERT_TRUE(Report(a.lease().token(), 5).ok());
  auto b = Acquire("b");
  ASSERT_TRUE(Complete(b.lease().token()).ok());
  Reopen();
  auto p = Progress();
  EXPECT_EQ(p.records_committed_epoch(), 15);
  EXPECT_EQ(p.shards_doing(), 1);
  EXPECT_EQ(p.shards_done(), 1);
  // The live lease survived the restart and can finish its shard.
  ASSERT_TRUE(Report(a.lease().token(), 8).ok());
  ASSERT_TRUE(Complete(a.lease().token()).ok());
  // Stale answers still come from the store after the restart.
  auto again = Complete(b.lease().token());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->already_completed());
  // New tokens never reuse old ones.
  auto c = Acquire("c");
  EXPECT_GT(c.lease().token(), b.lease().token());
}

TEST_F(LedgerTest, LeasesAliveAtACrashGetAFreshDeadline) {
  Create(Spec(100, 10));
  auto a = Acquire("a");
  clock_.Advance(9'000);
  Reopen();
  clock_.Advance(9'000);  // 18 s after acquire, 9 s after restart
  EXPECT_TRUE(Report(a.lease().token(), 2).ok());
}

TEST_F(LedgerTest, CheckpointAndRestore) {
  Create(Spec(100, 10, 2));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Complete(Acquire("a").lease().token()).ok());
  auto partial = Acquire("a");
  ASSERT_TRUE(Report(partial.lease().token(), 4).ok());
  v1::CheckpointRequest ck;
  *ck.mutable_dataset() = Ref();
  ck.set_step(100);
  auto saved = ledger_->Checkpoint(ck);
  ASSERT_TRUE(saved.ok()) << saved.status();
  EXPECT_EQ(saved->records_committed(), 34);
  // Training goes on, then rolls back to step 100.
  ASSERT_TRUE(Complete(partial.lease().token()).ok());
  auto later = Acquire("b");
  ASSERT_TRUE(Complete(later.lease().token()).ok());
  auto held = Acquire("b");
  v1::RestoreRequest rs;
  *rs.mutable_dataset() = Ref();
  rs.set_step(100);
  auto restored = ledger_->Restore(rs);
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->records_committed(), 34);
  EXPECT_EQ(restored->fenced_leases(), 1);
  // It names the commits it undid: the partial shard past record 4, and all
  // of the shard completed after the checkpoint.
  auto ids = [](const v1::Shard& shard, int64_t from) {
    std::vector<int64_t> out;
    for (int64_t i = from; i < shard.size() - shard.committed(); ++i) {
      out.push_back(shard.record_ids_size() > 0 ? shard.record_ids(static_cast<int>(i))
                                                : shard.start() + i);
    }
    return out;
  };
  std::vector<int64_t> undone = ids(partial.shard(), 4);
  for (int64_t id : ids(later.shard(), 0)) undone.push_back(id);
  ASSERT_EQ(restored->rolled_back_size(), 1);
  EXPECT_EQ(restored->rolled_back(0).epoch(), 0);
  std::vector<int64_t> got(restored->rolled_back(0).record_ids().begin(),
                           restored->rolled_back(0).record_ids().end());
  std::sort(undone.begin(), undone.end());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, undone);
  EXPECT_EQ(Report(held.lease().token(), 1).status().code(), absl::StatusCode::kFailedPrecondition);
  auto p = Progress();
  EXPECT_EQ(p.records_committed_epoch(), 34);
  EXPECT_EQ(p.shards_done(), 3);
  // The partly done shard comes first, from record 4.
  auto next = Acquire("c");
  EXPECT_EQ(next.shard().index(), partial.shard().index());
  EXPECT_EQ(next.shard().committed(), 4);
  rs.set_step(7);
  EXPECT_EQ(ledger_->Restore(rs).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LedgerTest, CreateIsIdempotentAndNamesDifferences) {
  Create(Spec(100, 10));
  v1::CreateDatasetRequest req;
  *req.mutable_spec() = Spec(100, 10);
  auto same = ledger_->CreateDataset(req);
  ASSERT_TRUE(same.ok());
  EXPECT_FALSE(same->created());
  req.mutable_spec()->set_shard_size(20);
  auto other = ledger_->CreateDataset(req);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(other.status().message().find("shard_size"), std::string::npos);
}

TEST_F(LedgerTest, BadArgumentsNameTheFieldAndChangeNothing) {
  struct Case {
    std::function<void(v1::DatasetSpec&)> mutate;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](v1::DatasetSpec& s) { s.set_job(""); }, "spec.job"},
      {[](v1::DatasetSpec& s) { s.set_name(""); }, "spec.name"},
      {[](v1::DatasetSpec& s) { s.set_record_count(0); }, "spec.record_count"},
      {[](v1::DatasetSpec& s) { s.set_record_count(-5); }, "spec.record_count"},
      {[](v1::DatasetSpec& s) { s.set_shard_size(0); }, "spec.shard_size"},
      {[](v1::DatasetSpec& s) { s.set_shard_size(-1); }, "spec.shard_size"},
      {[](v1::DatasetSpec& s) { s.set_epochs(0); }, "spec.epochs"},
      {[](v1::DatasetSpec& s) {
         s.set_record_count(0);
         auto* f = s.add_files();
         f->set_path("");
         f->set_records(3);
       },
       "spec.files[0].path"},
      {[](v1::DatasetSpec& s) {
         s.set_record_count(0);
         auto* f = s.add_files();
         f->set_path("a");
         f->set_records(-3);
       },
       "spec.files[0].records"},
      {[](v1::DatasetSpec& s) {
         s.set_shard_size(1);
         s.set_record_count(1'000'000'000'000);
       },
       "spec.shard_size"},
  };
  for (const Case& c : cases) {
    v1::CreateDatasetRequest req;
    *req.mutable_spec() = Spec(100, 10);
    c.mutate(*req.mutable_spec());
    auto r = ledger_->CreateDataset(req);
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(r.status().message().find(c.field), std::string::npos) << r.status();
  }
  EXPECT_EQ(store_.LastSeq(), 0u);

  v1::AcquireShardRequest acq;
  acq.mutable_dataset()->set_job("job1");
  acq.mutable_dataset()->set_name("nope");
  acq.set_worker_id("w");
  auto nf = ledger_->AcquireShard(acq);
  EXPECT_EQ(nf.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(nf.status().message().find("dataset"), std::string::npos);
  acq.set_worker_id("");
  EXPECT_EQ(ledger_->AcquireShard(acq).status().code(), absl::StatusCode::kInvalidArgument);
  Create(Spec(100, 10));
  *acq.mutable_dataset() = Ref();
  acq.set_worker_id("w");
  acq.set_incarnation(-1);
  auto neg = ledger_->AcquireShard(acq);
  EXPECT_EQ(neg.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(neg.status().message().find("incarnation"), std::string::npos);
  EXPECT_EQ(Report(0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Report(5, -1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Progress().shards_todo(), 10);
}

TEST_F(LedgerTest, FilesMapToSlices) {
  v1::DatasetSpec spec = Spec(0, 10);
  spec.set_record_count(0);
  auto* f1 = spec.add_files();
  f1->set_path("a.rec");
  f1->set_records(15);
  auto* f2 = spec.add_files();
  f2->set_path("b.rec");
  f2->set_records(7);
  Create(spec);
  Acquire("w");
  auto second = Acquire("w");
  ASSERT_EQ(second.shard().slices_size(), 2);
  EXPECT_EQ(second.shard().slices(0).path(), "a.rec");
  EXPECT_EQ(second.shard().slices(0).offset(), 10);
  EXPECT_EQ(second.shard().slices(0).count(), 5);
  EXPECT_EQ(second.shard().slices(1).path(), "b.rec");
  EXPECT_EQ(second.shard().slices(1).offset(), 0);
  EXPECT_EQ(second.shard().slices(1).count(), 5);
  auto third = Acquire("w");
  EXPECT_EQ(third.shard().size(), 2);
}

TEST_F(LedgerTest, PerWorkerRateAndEta) {
  Create(Spec(1000, 10));
  for (int i = 0; i < 10; ++i) {
    auto r = Acquire("fast");
    clock_.Advance(500);
    ASSERT_TRUE(Complete(r.lease().token()).ok());
  }
  auto p = Progress();
  ASSERT_EQ(p.workers_size(), 1);
  EXPECT_EQ(p.workers(0).records_committed(), 100);
  EXPECT_NEAR(p.workers(0).records_per_second(), 20.0, 3.0);
  EXPECT_NEAR(p.eta_seconds(), 900 / p.records_per_second(), 1e-6);
}

// omit_workers: the same totals and ETA, counted over every worker, without
// the per-worker list.
TEST_F(LedgerTest, ProgressWithoutWorkersKeepsTheTotals) {
  Create(Spec(1000, 10));
  for (int i = 0; i < 6; ++i) {
    auto fast = Acquire("fast");
    auto slow = Acquire("slow");
    clock_.Advance(500);
    ASSERT_TRUE(Complete(fast.lease().token()).ok());
    if (i % 2 == 0) {
      ASSERT_TRUE(Complete(slow.lease().token()).ok());
    }
  }
  const v1::GetProgressResponse full = Progress();
  v1::GetProgressRequest req;
  *req.mutable_dataset() = Ref();
  req.set_omit_workers(true);
  auto summary = ledger_->GetProgress(req);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(full.workers_size(), 2);
  EXPECT_EQ(summary->workers_size(), 0);
  EXPECT_GT(full.records_per_second(), 0);
  EXPECT_DOUBLE_EQ(summary->records_per_second(), full.records_per_second());
  EXPECT_DOUBLE_EQ(summary->eta_seconds(), full.eta_seconds());
  EXPECT_EQ(summary->records_committed_total(), full.records_committed_total());
  EXPECT_EQ(summary->shards_doing(), full.shards_doing());
}

TEST_F(LedgerTest, BadNamesAreRefusedAtTheEdgeAndChangeNothing) {
  Create(Spec(100, 10));
  const uint64_t held = Acquire("w").lease().token();
  const std::string nul("a\0b", 3);
  const std::string too_long(kMaxNameBytes + 1, 'x');
  struct Case {
    std::function<void(v1::DatasetSpec&)> mutate;
    std::string field;
  };
  const std::vector<Case> specs = {
      {[&](v1::DatasetSpec& s) { s.set_name(nul); }, "spec.name"},
      {[&](v1::DatasetSpec& s) { s.set_name("tab\there"); }, "spec.name"},
      {[&](v1::DatasetSpec& s) { s.set_name(too_long); }, "spec.name"},
      {[&](v1::DatasetSpec& s) { s.set_job(nul); }, "spec.job"},
      {[&](v1::DatasetSpec& s) { s.set_job("del\x7f"); }, "spec.job"},
      {[&](v1::DatasetSpec& s) {
         s.set_record_count(0);
         s.add_files()->set_path("a\nb");
         s.mutable_files(0)->set_records(5);
       },
       "spec.files[0].path"},
      {[&](v1::DatasetSpec& s) {
         s.set_record_count(0);
         s.add_files()->set_path(std::string(kMaxPathBytes + 1, 'p'));
         s.mutable_files(0)->set_records(5);
       },
       "spec.files[0].path"},
  };
  for (const Case& c : specs) {
    v1::DatasetSpec spec = Spec(100, 10);
    spec.set_name("other");
    c.mutate(spec);
    ExpectRefused([&] { return CreateResult(spec).status(); }, absl::StatusCode::kInvalidArgument,
                  c.field);
  }
  const auto invalid = absl::StatusCode::kInvalidArgument;
  v1::DatasetRef bad_name = Ref();
  bad_name.set_name(nul);
  v1::DatasetRef bad_job = Ref();
  bad_job.set_job(nul);
  v1::AcquireShardRequest acq;
  *acq.mutable_dataset() = Ref();
  acq.set_worker_id(std::string("w\0x", 3));
  ExpectRefused([&] { return ledger_->AcquireShard(acq).status(); }, invalid, "worker_id");
  acq.set_worker_id(too_long);
  ExpectRefused([&] { return ledger_->AcquireShard(acq).status(); }, invalid, "worker_id");
  acq.set_worker_id("w2");
  acq.set_request_id("r\x01");
  ExpectRefused([&] { return ledger_->AcquireShard(acq).status(); }, invalid, "request_id");
  acq.set_request_id("");
  *acq.mutable_dataset() = bad_job;
  ExpectRefused([&] { return ledger_->AcquireShard(acq).status(); }, invalid, "dataset.job");
  v1::ReleaseWorkerRequest rel;
  *rel.mutable_dataset() = Ref();
  rel.set_worker_id(std::string("w\0", 2));
  rel.set_incarnation(-1);
  ExpectRefused([&] { return ledger_->ReleaseWorker(rel).status(); }, invalid, "worker_id");
  rel.set_worker_id("w");
  rel.set_incarnation(INT64_MAX);  // + 1 would overflow
  ExpectRefused([&] { return ledger_->ReleaseWorker(rel).status(); }, invalid, "incarnation");
  rel.set_incarnation(0);
  rel.mutable_dataset()->set_name("\x1b[31m");
  ExpectRefused([&] { return ledger_->ReleaseWorker(rel).status(); }, invalid, "dataset.name");
  v1::ReportProgressRequest rep;
  *rep.mutable_dataset() = bad_name;
  rep.set_token(held);
  rep.set_records_done(3);
  ExpectRefused([&] { return ledger_->ReportProgress(rep).status(); }, invalid, "dataset.name");
  v1::CompleteShardRequest com;
  *com.mutable_dataset() = bad_name;
  com.set_token(held);
  ExpectRefused([&] { return ledger_->CompleteShard(com).status(); }, invalid, "dataset.name");
  v1::CheckpointRequest ckpt;
  *ckpt.mutable_dataset() = bad_job;
  ExpectRefused([&] { return ledger_->Checkpoint(ckpt).status(); }, invalid, "dataset.job");
  v1::RestoreRequest restore;
  *restore.mutable_dataset() = bad_name;
  ExpectRefused([&] { return ledger_->Restore(restore).status(); }, invalid, "dataset.name");
  v1::GetProgressRequest progress;
  *progress.mutable_dataset() = bad_name;
  ExpectRefused([&] { return ledger_->GetProgress(progress).status(); }, invalid, "dataset.name");
  // At the limit is fine, and the lease held before is intact.
  v1::DatasetSpec longest = Spec(100, 10);
  longest.set_name(std::string(kMaxNameBytes, 'n'));
  EXPECT_TRUE(CreateResult(longest).ok());
  EXPECT_TRUE(Complete(held).ok());
}

TEST_F(LedgerTest, SizeArithmeticIsCheckedAndChangesNothing) {
  Create(Spec(100, 10));
  auto files = [](std::vector<int64_t> records) {
    v1::DatasetSpec spec;
    spec.set_job("job1");
    spec.set_name("big");
    spec.set_shard_size(int64_t{1} << 62);
    spec.set_epochs(1);
    for (int64_t r : records) {
      v1::DataFile* f = spec.add_files();
      f->set_path("f");
      f->set_records(r);
    }
    return spec;
  };
  const int64_t quarter = int64_t{1} << 62;
  // Four files of 2^62 records summed to 0 and made a dataset that waits forever.
  const v1::DatasetSpec wraps_to_zero = files({quarter, quarter, quarter, quarter});
  const v1::DatasetSpec wraps_negative = files({INT64_MAX, 1});
  v1::DatasetSpec epochs = Spec(quarter, quarter, 2);
  epochs.set_name("big");
  epochs.set_record_count(INT64_MAX / 2 + 1);
  epochs.set_shard_size(INT64_MAX);
  const auto invalid = absl::StatusCode::kInvalidArgument;
  ExpectRefused([&] { return CreateResult(wraps_to_zero).status(); }, invalid,
                "spec.files[1].records");
  ExpectRefused([&] { return CreateResult(wraps_negative).status(); }, invalid,
                "spec.files[1].records");
  ExpectRefused([&] { return CreateResult(epochs).status(); }, invalid, "spec.epochs");
  // The largest sizes that fit are served.
  epochs.set_epochs(1);
  epochs.set_record_count(INT64_MAX);
  auto r = CreateResult(epochs);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->shard_count(), 1);
}

TEST_F(LedgerTest, AnswersAreBoundedAtCreation) {
  Create(Spec(100, 10));
  v1::DatasetSpec shuffled = Spec(100'000'000, 10'000'000, 1, /*shuffle=*/true);
  shuffled.set_name("shuffled");
  ExpectRefused([&] { return CreateResult(shuffled).status(); },
                absl::StatusCode::kResourceExhausted, "limit 100000");
  // Files whose slices in one shard's answer take more than kMaxAnswerBytes.
  v1::DatasetSpec many = Spec(0, 100'000);
  many.set_name("many-files");
  many.set_record_count(0);
  for (int i = 0; i < 40'000; ++i) {
    v1::DataFile* f = many.add_files();
    f->set_path(absl::StrCat(std::string(60, 'p'), i));
    f->set_records(1);
  }
  ExpectRefused([&] { return CreateResult(many).status(); }, absl::StatusCode::kResourceExhausted,
                "spec.files");
  // At the limits: the largest answers fit well under gRPC's 4 MiB.
  many.set_shard_size(10'000);
  Create(many);
  shuffled.set_record_count(2 * kMaxShuffledShardSize);
  shuffled.set_shard_size(kMaxShuffledShardSize);
  Create(shuffled);
  for (const char* name : {"many-files", "shuffled"}) {
    v1::AcquireShardRequest acq;
    acq.mutable_dataset()->set_job("job1");
    acq.mutable_dataset()->set_name(name);
    acq.set_worker_id("w");
    auto answer = ledger_->AcquireShard(acq);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->result(), AcquireShardResponse::SHARD);
    EXPECT_LE(answer->ByteSizeLong(), static_cast<size_t>(kMaxAnswerBytes)) << name;
  }
  // A shard_size past the records is one shard of them all, as before.
  v1::DatasetSpec small = Spec(1000, 1'000'000'000, 1, /*shuffle=*/true);
  small.set_name("small");
  Create(small);
}

TEST_F(LedgerTest, ServiceTotalsAreBoundedAndSurviveARestart) {
  LedgerOptions options = Options();
  options.max_datasets = 3;
  options.max_total_shards = 25;
  Reopen(options);
  Create(Spec(100, 10));  // 10 shards
  auto named = [&](const char* name, int64_t records) {
    v1::DatasetSpec spec = Spec(records, 10);
    spec.set_name(name);
    return spec;
  };
  Create(named("b", 100));
  const auto exhausted = absl::StatusCode::kResourceExhausted;
  ExpectRefused([&] { return CreateResult(named("c", 100)).status(); }, exhausted,
                "max_total_shards (25)");
  Create(named("c", 50));
  ExpectRefused([&] { return CreateResult(named("d", 10)).status(); }, exhausted,
                "max_datasets (3)");
  auto again = CreateResult(Spec(100, 10));  // an existing dataset is no new one
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->created());
  Reopen(options);
  ExpectRefused([&] { return CreateResult(named("d", 10)).status(); }, exhausted,
                "max_datasets (3)");
  options.max_datasets = 4;
  Reopen(options);
  ExpectRefused([&] { return CreateResult(named("d", 10)).status(); }, exhausted,
                "max_total_shards (25)");
}

TEST_F(LedgerTest, ConcurrentCreatesOfOneNameMakeOneDataset) {
  // Large enough that building it takes a while outside the mutex.
  const v1::DatasetSpec spec = Spec(2'000'000, 1, 1, /*shuffle=*/true);
  std::vector<absl::StatusOr<v1::CreateDatasetResponse>> results(6);
  std::vector<std::thread> threads;
  for (auto& r : results) {
    threads.emplace_back([&] { r = CreateResult(spec); });
  }
  v1::DatasetSpec other = spec;
  other.set_shard_size(2);
  absl::StatusOr<v1::CreateDatasetResponse> conflicting;
  threads.emplace_back([&] { conflicting = CreateResult(other); });
  for (std::thread& t : threads) t.join();
  int created = 0;
  for (const auto& r : results) {
    if (!r.ok()) {
      // The conflicting spec won the race: every other create names the difference.
      EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists) << r.status();
      continue;
    }
    created += r->created();
  }
  if (conflicting.ok()) {
    EXPECT_EQ(created, 0);
  } else {
    EXPECT_EQ(conflicting.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(created, 1);
  }
  EXPECT_EQ(Progress().shards_todo(), conflicting.ok() ? 1'000'000 : 2'000'000);
}

TEST_F(LedgerTest, WorkerRecordsSurviveARestart) {
  Create(Spec(100, 10));
  auto a = Acquire("a");
  ASSERT_TRUE(Report(a.lease().token(), 4).ok());
  ASSERT_TRUE(Complete(a.lease().token()).ok());
  auto b = Acquire("b");
  ASSERT_TRUE(Report(b.lease().token(), 3).ok());
  Reopen();
  auto p = Progress();
  ASSERT_EQ(p.workers_size(), 2);
  EXPECT_EQ(p.workers(0).worker_id(), "a");
  EXPECT_EQ(p.workers(0).records_committed(), 10);
  EXPECT_EQ(p.workers(1).worker_id(), "b");
  EXPECT_EQ(p.workers(1).records_committed(), 3);
  ASSERT_TRUE(Complete(b.lease().token()).ok());
  EXPECT_EQ(Progress().workers(1).records_committed(), 10);
}

// A seeded fuzzer over every RPC's request: random bytes parsed as the
// request, and valid requests with fields replaced by random values (names
// with control characters, huge and negative numbers, tokens near real ones,
// a `next` of any shape). Nothing crashes, and every refusal changes nothing:
// no store write, the dataset's progress as before.
TEST_F(LedgerTest, RandomRequestsToEveryRpcCrashNothingAndRefusalsChangeNothing) {
  Create(Spec(500, 7, 3, /*shuffle=*/true));
  std::mt19937_64 rng(20261203);
  auto pick = [&](uint64_t n) { return rng() % n; };
  auto bytes = [&](size_t max) {
    std::string out(pick(max + 1), '\0');
    for (char& c : out) c = static_cast<char>(pick(256));
    return out;
  };
  auto name = [&]() -> std::string {
    switch (pick(6)) {
      case 0:
        return "";
      case 1:
        return bytes(300);
      case 2:
        return "job1";
      case 3:
        return "train";
      case 4:
        return absl::StrCat("w", pick(3));
      default:
        return std::string(254, 'n');
    }
  };
  auto number = [&]() -> int64_t {
    switch (pick(5)) {
      case 0:
        return -static_cast<int64_t>(pick(1000));
      case 1:
        return static_cast<int64_t>(rng());
      case 2:
        return std::numeric_limits<int64_t>::max();
      default:
        return static_cast<int64_t>(pick(20));
    }
  };
  std::vector<uint64_t> tokens{0, 1};
  auto token = [&]() -> uint64_t {
    return pick(3) == 0 ? rng() : tokens[pick(tokens.size())] + pick(2);
  };
  auto ref = [&](v1::DatasetRef& r) {
    r = Ref();
    if (pick(3) == 0) r.set_job(name());
    if (pick(3) == 0) r.set_name(name());
  };
  int refused = 0, served = 0;
  for (int i = 0; i < 20'000; ++i) {
    ASSERT_TRUE(ledger_->ExpireLeases().ok());  // what time did is stored first
    const uint64_t seq = store_.LastSeq();
    const std::string before = Progress().SerializeAsString();
    absl::Status status;
    const bool raw = pick(4) == 0;  // the request from random bytes
    switch (pick(8)) {
      case 0: {
        v1::CreateDatasetRequest req;
        if (raw) {
          (void)req.ParseFromString(bytes(64));
        } else {
          *req.mutable_spec() = Spec(static_cast<int64_t>(pick(2000)), number(), 1 + pick(3));
          if (pick(2)) req.mutable_spec()->set_name(name());
          if (pick(4) == 0) req.mutable_spec()->add_files()->set_records(number());
        }
        status = ledger_->CreateDataset(req).status();
        break;
      }
      case 1: {
        v1::AcquireShardRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(64));
        else {
          ref(*req.mutable_dataset());
          req.set_worker_id(name());
          req.set_incarnation(pick(3) == 0 ? number() : 0);
          if (pick(2)) req.set_request_id(name());
        }
        auto r = ledger_->AcquireShard(req);
        if (r.ok() && r->has_lease()) tokens.push_back(r->lease().token());
        status = r.status();
        break;
      }
      case 2: {
        v1::ReportProgressRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(64));
        else {
          ref(*req.mutable_dataset());
          req.set_token(token());
          req.set_records_done(number());
        }
        status = ledger_->ReportProgress(req).status();
        break;
      }
      case 3: {
        v1::CompleteShardRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(96));
        else {
          ref(*req.mutable_dataset());
          req.set_token(token());
          if (pick(2)) {
            v1::AcquireShardRequest* next = req.mutable_next();
            if (pick(2)) ref(*next->mutable_dataset());
            next->set_worker_id(name());
            next->set_incarnation(pick(3) == 0 ? number() : 0);
            if (pick(2)) next->set_request_id(name());
          }
        }
        auto r = ledger_->CompleteShard(req);
        if (r.ok() && r->next().has_lease()) tokens.push_back(r->next().lease().token());
        status = r.status();
        break;
      }
      case 4: {
        v1::ReleaseWorkerRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(64));
        else {
          ref(*req.mutable_dataset());
          if (pick(2)) req.mutable_dataset()->clear_name();
          req.set_worker_id(name());
          req.set_incarnation(pick(2) ? -1 : number());
        }
        status = ledger_->ReleaseWorker(req).status();
        break;
      }
      case 5: {
        v1::CheckpointRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(32));
        else {
          ref(*req.mutable_dataset());
          req.set_step(pick(2) ? static_cast<int64_t>(pick(3)) : number());
        }
        status = ledger_->Checkpoint(req).status();
        break;
      }
      case 6: {
        v1::RestoreRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(32));
        else {
          ref(*req.mutable_dataset());
          req.set_step(pick(2) ? static_cast<int64_t>(pick(3)) : number());
        }
        status = ledger_->Restore(req).status();
        break;
      }
      default: {
        v1::GetProgressRequest req;
        if (raw)
          (void)req.ParseFromString(bytes(32));
        else
          ref(*req.mutable_dataset());
        status = ledger_->GetProgress(req).status();
        break;
      }
    }
    if (status.ok()) {
      ++served;
      continue;
    }
    ++refused;
    ASSERT_FALSE(status.message().empty()) << i;
    ASSERT_EQ(store_.LastSeq(), seq) << i << ": a refusal wrote: " << status;
    ASSERT_EQ(Progress().SerializeAsString(), before) << i << ": a refusal changed: " << status;
    if (pick(500) == 0) clock_.Advance(3'000);  // leases expire now and then
  }
  EXPECT_GT(served, 1000);
  EXPECT_GT(refused, 1000);
}

// A MemoryStore whose ReadCheckpoint or Append can be held at a gate, to
// see what the ledger does while one of its calls is inside the store.
class GatedStore final : public Store {
 public:
  absl::StatusOr<StoreSnapshot> Load() override { return inner_.Load(); }
  uint64_t Append(std::vector<Mutation> batch) override {
    Pass(hold_append_);
    return inner_.Append(std::move(batch));
  }
  uint64_t LastSeq() const override { return inner_.LastSeq(); }
  absl::Status WaitDurable(uint64_t seq) override { return inner_.WaitDurable(seq); }
  absl::StatusOr<std::optional<LeaseRow>> ReadLease(uint64_t token) override {
    return inner_.ReadLease(token);
  }
  absl::StatusOr<std::optional<std::string>> ReadCheckpoint(int64_t dataset_id,
                                                            int64_t step) override {
    Pass(hold_read_);
    return inner_.ReadCheckpoint(dataset_id, step);
  }
  // The next Append or ReadCheckpoint waits at the gate until Open().
  void HoldAppend() { hold_append_ = true; }
  void HoldReadCheckpoint() { hold_read_ = true; }
  void WaitUntilHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    hold_append_ = hold_read_ = false;
    open_ = true;
    cv_.notify_all();
  }

 private:
  void Pass(std::atomic<bool>& hold) {
    if (!hold.exchange(false)) return;
    std::unique_lock<std::mutex> lock(mu_);
    waiting_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  MemoryStore inner_;
  std::atomic<bool> hold_append_{false}, hold_read_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool waiting_ = false, open_ = false;
};

class LedgerBusyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LedgerOptions options;
    options.lease_ttl_ms = 10'000;
    auto l = Ledger::Open(&store_, &clock_, options);
    ASSERT_TRUE(l.ok()) << l.status();
    ledger_ = std::move(*l);
    for (const char* name : {"big", "small"}) {
      v1::CreateDatasetRequest req;
      req.mutable_spec()->set_job("job1");
      req.mutable_spec()->set_name(name);
      req.mutable_spec()->set_record_count(1000);
      req.mutable_spec()->set_shard_size(10);
      req.mutable_spec()->set_epochs(1);
      ASSERT_TRUE(ledger_->CreateDataset(req).ok());
    }
  }
  static v1::DatasetRef Ref(const std::string& name) {
    v1::DatasetRef ref;
    ref.set_job("job1");
    ref.set_name(name);
    return ref;
  }
  uint64_t Lease(const std::string& name, const std::string& worker) {
    v1::AcquireShardRequest req;
    *req.mutable_dataset() = Ref(name);
    req.set_worker_id(worker);
    auto r = ledger_->AcquireShard(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->lease().token() : 0;
  }
  absl::Status Renew(const std::string& name, uint64_t token, int64_t done) {
    v1::ReportProgressRequest req;
    *req.mutable_dataset() = Ref(name);
    req.set_token(token);
    req.set_records_done(done);
    return ledger_->ReportProgress(req).status();
  }
  // `call` on another thread; whether it returned within 10 s (the ledger
  // was not holding it off), and its status.
  static absl::Status Within10s(std::function<absl::Status()> call) {
    auto f = std::async(std::launch::async, std::move(call));
    if (f.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      ADD_FAILURE() << "held off";
      f.wait();
    }
    return f.get();
  }

  FakeClock clock_;
  GatedStore store_;
  std::unique_ptr<Ledger> ledger_;
};

// A Restore holds the ledger only to mark the dataset and to swap its rebuilt
// state in: while it reads the checkpoint, other datasets' leases are renewed
// and the reaper runs; the dataset being restored answers UNAVAILABLE (retry).
TEST_F(LedgerBusyTest, ARestoreHoldsUpNoOtherDataset) {
  const uint64_t big = Lease("big", "a");
  ASSERT_TRUE(Renew("big", big, 4).ok());
  v1::CheckpointRequest checkpoint;
  *checkpoint.mutable_dataset() = Ref("big");
  checkpoint.set_step(1);
  ASSERT_TRUE(ledger_->Checkpoint(checkpoint).ok());
  ASSERT_TRUE(Renew("big", big, 8).ok());
  const uint64_t small = Lease("small", "b");

  store_.HoldReadCheckpoint();
  v1::RestoreRequest restore;
  *restore.mutable_dataset() = Ref("big");
  restore.set_step(1);
  auto restored = std::async(std::launch::async, [&] { return ledger_->Restore(restore); });
  store_.WaitUntilHeld();
  EXPECT_TRUE(Within10s([&] { return Renew("small", small, 5); }).ok());
  EXPECT_TRUE(Within10s([&] { return ledger_->ExpireLeases().status(); }).ok());
  const absl::Status busy = Within10s([&] { return Renew("big", big, 9); });
  EXPECT_EQ(busy.code(), absl::StatusCode::kUnavailable) << busy;
  EXPECT_NE(busy.message().find("being restored"), std::string::npos) << busy;
  v1::RestoreRequest again = restore;
  EXPECT_EQ(Within10s([&] { return ledger_->Restore(again).status(); }).code(),
            absl::StatusCode::kUnavailable);
  store_.Open();
  auto r = restored.get();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->fenced_leases(), 1);
  EXPECT_EQ(r->records_committed(), 4);
  ASSERT_EQ(r->rolled_back_size(), 1);
  EXPECT_EQ(r->rolled_back(0).record_ids_size(), 4);  // records 4..7 of the shard
  // The restored dataset serves again; its old lease is fenced.
  EXPECT_EQ(Renew("big", big, 9).code(), absl::StatusCode::kFailedPrecondition);
  v1::GetProgressRequest progress;
  *progress.mutable_dataset() = Ref("big");
  auto p = ledger_->GetProgress(progress);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->records_committed_total(), 4);
  EXPECT_EQ(p->shards_doing(), 0);
  EXPECT_TRUE(Renew("small", small, 6).ok());
}

// While the ledger is held (here: a Checkpoint inside a store write that
// takes a minute), lease clocks stop: the leases are not expired for time
// their holders spent waiting on the service.
TEST_F(LedgerBusyTest, LeasesDoNotExpireWhileTheServiceHoldsTheirHoldersOff) {
  const uint64_t small = Lease("small", "b");
  store_.HoldAppend();
  v1::CheckpointRequest checkpoint;
  *checkpoint.mutable_dataset() = Ref("big");
  checkpoint.set_step(1);
  auto saved = std::async(std::launch::async, [&] { return ledger_->Checkpoint(checkpoint); });
  store_.WaitUntilHeld();
  clock_.Advance(60'000);  // six lease lengths, all inside the hold
  store_.Open();
  ASSERT_TRUE(saved.get().ok());
  auto expired = ledger_->ExpireLeases();
  ASSERT_TRUE(expired.ok());
  EXPECT_EQ(*expired, 0);
  EXPECT_TRUE(Renew("small", small, 1).ok());
  // Time the service did not hold anyone off still counts.
  clock_.Advance(10'001);
  EXPECT_EQ(*ledger_->ExpireLeases(), 1);
}

}  // namespace
}  // namespace antdt::sharding
