#include "services/sharding/ledger.h"

#include <malloc.h>

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/sharding_state.pb.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::sharding {
namespace {

constexpr int32_t kLeaseEpochsKept = 8;

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t s = a;
  uint64_t x = SplitMix64(s) ^ (b * 0x9E3779B97F4A7C15ULL);
  s = x;
  x = SplitMix64(s) ^ (c * 0xC2B2AE3D27D4EB4FULL);
  s = x;
  return SplitMix64(s);
}

// ceil(records / shard_size), without the overflow of records + shard_size - 1.
int64_t ShardCount(int64_t records, int64_t shard_size) {
  return records / shard_size + (records % shard_size != 0);
}

std::string Key(const std::string& job, const std::string& name) {
  return absl::StrCat(job, "/", name);
}

}  // namespace

std::vector<int64_t> Permutation(int64_t n, uint64_t seed) {
  std::vector<int64_t> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  uint64_t state = seed;
  for (int64_t i = n - 1; i > 0; --i) {
    int64_t j = static_cast<int64_t>(SplitMix64(state) % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

struct ShardSlot {
  ShardState state = ShardState::kTodo;
  int64_t committed = 0;
  uint64_t token = 0;
};

struct ActiveLease {
  LeaseRow row;
  int64_t deadline_ms = 0;
};

// Leases ended recently, the newest kept: stale-token answers without a store
// read, including for leases whose end is not durable yet. Older ones are read
// from the store.
class RecentLeases {
 public:
  static constexpr size_t kCapacity = 65'536;
  void Put(const LeaseRow& row) {
    auto [it, fresh] = rows_.insert_or_assign(row.token, row);
    if (fresh) order_.push_back(row.token);
    while (order_.size() > kCapacity) {
      rows_.erase(order_.front());
      order_.pop_front();
    }
  }
  std::optional<LeaseRow> Find(uint64_t token) const {
    auto it = rows_.find(token);
    if (it == rows_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::unordered_map<uint64_t, LeaseRow> rows_;
  std::deque<uint64_t> order_;
};

struct WorkerStats {
  int64_t incarnation = -1;  // newest seen; older ones are refused
  int64_t records_committed = 0;
  std::deque<std::pair<int64_t, int64_t>> samples;  // (time ms, cumulative)
};

struct Ledger::Dataset {
  DatasetRow row;
  v1::DatasetSpec spec;
  int64_t records = 0;
  int64_t shard_count = 0;
  std::vector<int64_t> file_starts;  // first global record id of each file
  std::vector<ShardSlot> shards;     // of the current epoch
  std::deque<int64_t> todo;          // shard indices, front first
  int64_t done = 0;
  int64_t doing = 0;
  std::unordered_map<uint64_t, ActiveLease> leases;  // active
  // The earliest an active lease can fall due: a lower bound (a renewal only
  // moves a deadline later), so ExpireDue scans the leases only once it has
  // passed, not on every call (thousands of workers make thousands of leases).
  int64_t next_due_ms = 0;
  // Active leases by worker and request id: an AcquireShard retried finds its
  // lease without a scan.
  std::unordered_map<std::string, uint64_t> by_request;
  RecentLeases ended;  // ended in this process
  std::unordered_map<std::string, WorkerStats> workers;
  // A whole-dataset operation (Restore, Checkpoint) is reading or rebuilding
  // the shard state outside the mutex: every call on the dataset is refused
  // (UNAVAILABLE, retry) and nothing else writes it. What it is doing ("being
  // restored from a checkpoint"), or null.
  const char* busy = nullptr;

  static std::string RequestKey(const std::string& worker, const std::string& request_id) {
    return worker + '\n' + request_id;  // names hold no control character
  }
  void PutLease(const ActiveLease& lease) {
    leases[lease.row.token] = lease;
    next_due_ms = std::min(next_due_ms, lease.deadline_ms);
    if (!lease.row.request_id.empty()) {
      by_request[RequestKey(lease.row.worker, lease.row.request_id)] = lease.row.token;
    }
  }
  void EraseLease(std::unordered_map<uint64_t, ActiveLease>::iterator it) {
    if (!it->second.row.request_id.empty()) {
      auto r = by_request.find(RequestKey(it->second.row.worker, it->second.row.request_id));
      if (r != by_request.end() && r->second == it->first) by_request.erase(r);
    }
    leases.erase(it);
  }
  void ClearLeases() {
    leases.clear();
    by_request.clear();
  }
  // Moves every active lease's deadline `ms` later: time its holders spent
  // held off by the service is not counted against them.
  void DelayLeases(int64_t ms) {
    for (auto& [token, lease] : leases) lease.deadline_ms += ms;
    if (next_due_ms < std::numeric_limits<int64_t>::max() - ms) next_due_ms += ms;
  }

  bool finished() const { return row.epoch >= spec.epochs(); }
  int64_t ShardBegin(int64_t index) const { return index * spec.shard_size(); }
  int64_t ShardSize(int64_t index) const {
    return std::min(spec.shard_size(), records - ShardBegin(index));
  }
  int64_t CommittedInEpoch() const {
    int64_t sum = 0;
    for (const ShardSlot& s : shards) sum += s.committed;
    return sum;
  }
  int64_t CommittedTotal() const {
    if (finished()) return records * spec.epochs();
    return records * row.epoch + CommittedInEpoch();
  }
  std::vector<int64_t> EpochOrder() const {
    if (!spec.shuffle()) return Identity();
    return Permutation(shard_count, MixSeed(spec.seed(), static_cast<uint64_t>(row.epoch)));
  }
  std::vector<int64_t> Identity() const {
    std::vector<int64_t> p(shard_count);
    for (int64_t i = 0; i < shard_count; ++i) p[i] = i;
    return p;
  }
  // Rebuilds the queue from the shard slots: partly done shards first.
  void RebuildTodo() {
    todo.clear();
    std::vector<int64_t> partial;
    for (int64_t index : EpochOrder()) {
      const ShardSlot& s = shards[index];
      if (s.state != ShardState::kTodo) continue;
      if (s.committed > 0) {
        partial.push_back(index);
      } else {
        todo.push_back(index);
      }
    }
    todo.insert(todo.begin(), partial.begin(), partial.end());
  }
  void StartEpoch() {
    shards.assign(finished() ? 0 : shard_count, ShardSlot{});
    done = 0;
    doing = 0;
    if (!finished()) RebuildTodo();
  }
  void RecordCommit(const std::string& worker, int64_t delta, int64_t now, int64_t window,
                    std::vector<Mutation>& batch) {
    if (delta <= 0) return;
    WorkerStats& w = workers[worker];
    w.records_committed += delta;
    batch.push_back(WorkerRow{row.id, worker, w.records_committed});
    w.samples.emplace_back(now, w.records_committed);
    while (w.samples.size() > 2 && w.samples.front().first < now - window) {
      w.samples.pop_front();
    }
    while (w.samples.size() > 256) w.samples.pop_front();
  }
};

Ledger::Ledger(Store* store, const Clock* clock, LedgerOptions options)
    : store_(store), clock_(clock), options_(options) {}

Ledger::~Ledger() = default;

namespace {

// `field` names the value in the request (`spec.name`, `worker_id`).
absl::Status ValidateName(const std::string& value, const std::string& field,
                          size_t max_bytes = kMaxNameBytes) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value.size(), " bytes, more than the limit of ", max_bytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must not contain control characters (byte 0x",
                       absl::Hex(c, absl::kZeroPad2), " at offset ", i, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateJob(const std::string& job, const std::string& field) {
  RETURN_IF_ERROR(ValidateName(job, field));
  if (job.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not contain '/'"));
  }
  return absl::OkStatus();
}

// A dataset named in a call; an empty name is allowed where it means "every
// dataset of the job".
absl::Status ValidateRef(const v1::DatasetRef& ref, bool name_optional = false) {
  RETURN_IF_ERROR(ValidateJob(ref.job(), "dataset.job"));
  if (name_optional && ref.name().empty()) return absl::OkStatus();
  return ValidateName(ref.name(), "dataset.name");
}

// The dataset's records: the sum of its files' (checked), or record_count.
absl::StatusOr<int64_t> RecordsOf(const v1::DatasetSpec& spec) {
  if (spec.files_size() == 0) {
    if (spec.record_count() <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.record_count: must be > 0 (or give spec.files), got ", spec.record_count()));
    }
    return spec.record_count();
  }
  int64_t sum = 0;
  for (int i = 0; i < spec.files_size(); ++i) {
    const v1::DataFile& f = spec.files(i);
    const std::string field = absl::StrCat("spec.files[", i, "]");
    RETURN_IF_ERROR(ValidateName(f.path(), field + ".path", kMaxPathBytes));
    if (f.records() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".records: must be > 0, got ", f.records()));
    }
    if (__builtin_add_overflow(sum, f.records(), &sum)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".records: the sum of spec.files[].records passes 2^63-1 at this file"));
    }
  }
  if (spec.record_count() != 0 && spec.record_count() != sum) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.record_count: ", spec.record_count(),
                     " differs from the sum of spec.files[].records (", sum, ")"));
  }
  return sum;
}

// Bytes of the file slices in the largest AcquireShard answer of an
// unshuffled dataset: a shard lists one slice per file it overlaps.
int64_t MaxSliceBytes(const v1::DatasetSpec& spec) {
  constexpr int64_t kSliceOverhead = 32;  // tags, lengths, offset and count varints
  int64_t largest = 0;
  int64_t shard = -1;  // the shard whose slices `bytes` counts
  int64_t bytes = 0;
  int64_t start = 0;
  for (const v1::DataFile& f : spec.files()) {
    const int64_t slice = kSliceOverhead + static_cast<int64_t>(f.path().size());
    const int64_t first = start / spec.shard_size();
    const int64_t last = (start + f.records() - 1) / spec.shard_size();
    if (first != shard) bytes = 0;
    bytes += slice;
    largest = std::max(largest, bytes);
    if (last != first) bytes = slice;  // the file's last shard starts with it
    shard = last;
    start += f.records();
  }
  return largest;
}

// Sizes: shard count, records x epochs, and what one answer carries.
absl::Status ValidateSizes(const v1::DatasetSpec& spec, int64_t records) {
  if (spec.shard_size() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.shard_size: must be > 0, got ", spec.shard_size()));
  }
  if (spec.epochs() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.epochs: must be > 0, got ", spec.epochs()));
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(records, static_cast<int64_t>(spec.epochs()), &total)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.epochs: ", records, " records x ",
                                                   spec.epochs(), " epochs passes 2^63-1"));
  }
  const int64_t shards = ShardCount(records, spec.shard_size());
  if (shards > kMaxShardsPerDataset) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.shard_size: ", spec.shard_size(), " gives ", shards,
                     " shards, more than the limit ", kMaxShardsPerDataset));
  }
  const int64_t largest_shard = std::min(spec.shard_size(), records);
  if (spec.shuffle() && largest_shard > kMaxShuffledShardSize) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "spec.shard_size: shuffled shards of ", largest_shard, " records, more than the limit ",
        kMaxShuffledShardSize, " (each AcquireShard answer lists a shuffled shard's record ids)"));
  }
  if (!spec.shuffle() && MaxSliceBytes(spec) > kMaxAnswerBytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("spec.files: a shard's file slices take ", MaxSliceBytes(spec),
                     " bytes in an AcquireShard answer, more than the limit ", kMaxAnswerBytes,
                     " (a smaller spec.shard_size covers fewer files)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSpec(const v1::DatasetSpec& spec, int64_t* records) {
  RETURN_IF_ERROR(ValidateJob(spec.job(), "spec.job"));
  RETURN_IF_ERROR(ValidateName(spec.name(), "spec.name"));
  ASSIGN_OR_RETURN(*records, RecordsOf(spec));
  return ValidateSizes(spec, *records);
}

std::string DescribeDifferences(const v1::DatasetSpec& a, const v1::DatasetSpec& b) {
  std::vector<std::string> diffs;
  auto add = [&](const char* field, const auto& x, const auto& y) {
    if (x != y) diffs.push_back(absl::StrCat(field, " ", x, " (existing) vs ", y, " (requested)"));
  };
  add("record_count", a.record_count(), b.record_count());
  add("shard_size", a.shard_size(), b.shard_size());
  add("epochs", a.epochs(), b.epochs());
  add("shuffle", a.shuffle(), b.shuffle());
  add("seed", a.seed(), b.seed());
  if (a.files_size() != b.files_size()) {
    add("files (count)", a.files_size(), b.files_size());
  } else {
    for (int i = 0; i < a.files_size(); ++i) {
      if (a.files(i).path() != b.files(i).path() || a.files(i).records() != b.files(i).records()) {
        diffs.push_back(absl::StrCat("files[", i, "] differ"));
      }
    }
  }
  return absl::StrJoin(diffs, ", ");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Ledger>> Ledger::Open(Store* store, const Clock* clock,
                                                     LedgerOptions options) {
  std::unique_ptr<Ledger> ledger(new Ledger(store, clock, options));
  RETURN_IF_ERROR(ledger->Recover());
  return ledger;
}

namespace {

void InitDataset(Ledger::Dataset& ds);

}  // namespace

absl::Status Ledger::Recover() {
  ASSIGN_OR_RETURN(StoreSnapshot snap, store_->Load());
  std::lock_guard<std::mutex> lock(mu_);
  next_token_ = snap.next_token;
  std::unordered_map<int64_t, Dataset*> by_id;
  for (const DatasetRow& row : snap.datasets) {
    auto ds = std::make_unique<Dataset>();
    ds->row = row;
    if (!ds->spec.ParseFromString(row.spec)) {
      return absl::DataLossError(
          absl::StrCat("dataset ", row.job, "/", row.name, ": stored spec does not parse"));
    }
    InitDataset(*ds);
    ds->shards.assign(ds->finished() ? 0 : ds->shard_count, ShardSlot{});
    next_dataset_id_ = std::max(next_dataset_id_, row.id + 1);
    total_shards_ += ds->shard_count;
    by_id[row.id] = ds.get();
    datasets_[Key(row.job, row.name)] = std::move(ds);
  }
  for (const ShardRow& row : snap.shards) {
    auto it = by_id.find(row.dataset_id);
    if (it == by_id.end() || row.index < 0 ||
        row.index >= static_cast<int64_t>(it->second->shards.size())) {
      continue;  // a row of an epoch already finished
    }
    ShardSlot& slot = it->second->shards[row.index];
    slot.state = row.state;
    slot.committed = row.committed;
    slot.token = row.token;
  }
  for (const WorkerRow& row : snap.workers) {
    auto it = by_id.find(row.dataset_id);
    if (it != by_id.end())
      it->second->workers[row.worker].records_committed = row.records_committed;
  }
  const int64_t now = clock_->NowMillis();
  for (const LeaseRow& row : snap.active_leases) {
    auto it = by_id.find(row.dataset_id);
    if (it == by_id.end()) continue;
    Dataset& ds = *it->second;
    if (row.epoch != ds.row.epoch || row.index >= static_cast<int64_t>(ds.shards.size())) continue;
    ShardSlot& slot = ds.shards[row.index];
    if (slot.state != ShardState::kDoing || slot.token != row.token) continue;
    ActiveLease lease{row, now + options_.lease_ttl_ms};
    lease.row.committed = slot.committed;
    ds.PutLease(lease);
    WorkerStats& w = ds.workers[row.worker];
    w.incarnation = std::max(w.incarnation, row.incarnation);
    next_token_ = std::max(next_token_, row.token + 1);
  }
  recovered_bound_ = token_bound_ = next_token_;
  for (auto& [key, ds] : datasets_) {
    // A DOING slot whose lease row was not found goes back to the queue.
    for (ShardSlot& slot : ds->shards) {
      if (slot.state == ShardState::kDoing && ds->leases.count(slot.token) == 0) {
        slot.state = ShardState::kTodo;
        slot.token = 0;
      }
      if (slot.state == ShardState::kDone) ++ds->done;
      if (slot.state == ShardState::kDoing) ++ds->doing;
    }
    if (!ds->finished()) ds->RebuildTodo();
    LogEvent("dataset_recovered", {{"dataset", key},
                                   {"epoch", ds->row.epoch},
                                   {"shards_done", ds->done},
                                   {"shards_doing", ds->doing},
                                   {"shards_todo", static_cast<int64_t>(ds->todo.size())}});
  }
  return absl::OkStatus();
}

namespace {

void InitDataset(Ledger::Dataset& ds) {
  int64_t records = 0;
  ds.file_starts.clear();
  for (const v1::DataFile& f : ds.spec.files()) {
    ds.file_starts.push_back(records);
    records += f.records();
  }
  if (ds.spec.files_size() == 0) records = ds.spec.record_count();
  ds.records = records;
  ds.shard_count = ShardCount(records, ds.spec.shard_size());
}

// Internal helpers that run with the ledger's mutex held.
struct Ops {
  const Clock* clock;
  const LedgerOptions& options;
  std::vector<Mutation>& batch;

  int64_t Now() const { return clock->NowMillis(); }

  ShardRow RowOf(const Ledger::Dataset& ds, int64_t index) const {
    const ShardSlot& s = ds.shards[index];
    return ShardRow{ds.row.id, index, s.state, s.committed, s.token};
  }

  void AdvanceEpochIfDone(Ledger::Dataset& ds) {
    if (ds.finished() || ds.done < ds.shard_count) return;
    ds.row.epoch += 1;
    batch.push_back(DeleteShards{ds.row.id});
    batch.push_back(ds.row);
    // Lease rows answer a late retry of a commit (a worker that was cut off
    // while its lease expired and the job moved on) with what the lease
    // committed; they are kept for kLeaseEpochsKept epochs.
    if (ds.row.epoch > kLeaseEpochsKept) {
      batch.push_back(DeleteLeasesBefore{ds.row.id, ds.row.epoch - kLeaseEpochsKept});
    }
    ds.StartEpoch();
    LogEvent(ds.finished() ? "dataset_finished" : "epoch_started",
             {{"dataset", Key(ds.row.job, ds.row.name)}, {"epoch", ds.row.epoch}});
  }

  // Ends an active lease; the unfinished remainder goes to the front of the queue.
  void EndLease(Ledger::Dataset& ds, uint64_t token, LeaseState state) {
    auto it = ds.leases.find(token);
    if (it == ds.leases.end()) return;
    LeaseRow row = it->second.row;
    ds.EraseLease(it);
    row.state = state;
    ShardSlot& slot = ds.shards[row.index];
    row.committed = slot.committed;
    ds.ended.Put(row);
    batch.push_back(row);
    --ds.doing;
    slot.token = 0;
    if (slot.committed >= ds.ShardSize(row.index)) {
      slot.state = ShardState::kDone;
      ++ds.done;
      batch.push_back(RowOf(ds, row.index));
      AdvanceEpochIfDone(ds);
      return;
    }
    slot.state = ShardState::kTodo;
    ds.todo.push_front(row.index);
    ++ds.row.requeues;
    if (state == LeaseState::kExpired) ++ds.row.expirations;
    batch.push_back(RowOf(ds, row.index));
    batch.push_back(ds.row);
    LogEvent("shard_requeued", {{"dataset", Key(ds.row.job, ds.row.name)},
                                {"epoch", ds.row.epoch},
                                {"shard", row.index},
                                {"token", row.token},
                                {"worker", row.worker},
                                {"reason", LeaseStateName(state)},
                                {"remaining", ds.ShardSize(row.index) - slot.committed}});
  }

  int ExpireDue(Ledger::Dataset& ds) {
    const int64_t now = Now();
    if (now < ds.next_due_ms) return 0;
    std::vector<uint64_t> due;
    ds.next_due_ms = std::numeric_limits<int64_t>::max();
    for (const auto& [token, lease] : ds.leases) {
      if (lease.deadline_ms <= now) {
        due.push_back(token);
      } else {
        ds.next_due_ms = std::min(ds.next_due_ms, lease.deadline_ms);
      }
    }
    std::sort(due.begin(), due.end());
    for (uint64_t token : due) EndLease(ds, token, LeaseState::kExpired);
    return static_cast<int>(due.size());
  }
};

// The ids of records [from, to) of shard `index` in `epoch`, in the order the
// shard hands them out.
void AppendRecordIds(const Ledger::Dataset& ds, int32_t epoch, int64_t index, int64_t from,
                     int64_t to, v1::RolledBack* out) {
  const int64_t begin = ds.ShardBegin(index);
  if (!ds.spec.shuffle()) {
    for (int64_t i = from; i < to; ++i) out->add_record_ids(begin + i);
    return;
  }
  const std::vector<int64_t> perm = Permutation(
      ds.ShardSize(index),
      MixSeed(ds.spec.seed(), static_cast<uint64_t>(epoch), static_cast<uint64_t>(index) + 1));
  for (int64_t i = from; i < to; ++i) out->add_record_ids(begin + perm[i]);
}

// The commits a restore to `snap` undoes: in the snapshot's epoch what was
// committed beyond it, and everything committed in later epochs.
void RolledBackCommits(const Ledger::Dataset& ds, const v1::ShardStateSnapshot& snap,
                       v1::RestoreResponse* resp) {
  // (index, committed) of the snapshot, sorted: one pass beside the shards,
  // nothing allocated per shard (a map filled per shard took gigabytes and
  // seconds at 5e7 shards).
  std::vector<std::pair<int64_t, int64_t>> at_snap;
  at_snap.reserve(static_cast<size_t>(snap.index_size()));
  for (int i = 0; i < snap.index_size(); ++i)
    at_snap.emplace_back(snap.index(i), snap.committed(i));
  if (!std::is_sorted(at_snap.begin(), at_snap.end())) std::sort(at_snap.begin(), at_snap.end());
  const int32_t now = ds.row.epoch;
  for (int32_t e = snap.epoch(); e <= now && e < ds.spec.epochs(); ++e) {
    v1::RolledBack rb;
    rb.set_epoch(e);
    auto next = at_snap.begin();
    for (int64_t index = 0; index < ds.shard_count; ++index) {
      const int64_t size = ds.ShardSize(index);
      while (next != at_snap.end() && next->first < index) ++next;
      const int64_t saved = next != at_snap.end() && next->first == index ? next->second : 0;
      const int64_t from = e == snap.epoch() ? std::clamp<int64_t>(saved, 0, size) : 0;
      const int64_t to = e < now ? size
                                 : std::min(index < static_cast<int64_t>(ds.shards.size())
                                                ? ds.shards[index].committed
                                                : 0,
                                            size);
      if (to > from) AppendRecordIds(ds, e, index, from, to, &rb);
    }
    if (rb.record_ids_size() > 0) *resp->add_rolled_back() = std::move(rb);
  }
}

void FillShard(const Ledger::Dataset& ds, int64_t index, int64_t committed, v1::Shard* out) {
  const int64_t begin = ds.ShardBegin(index);
  const int64_t size = ds.ShardSize(index);
  out->set_epoch(ds.row.epoch);
  out->set_index(index);
  out->set_size(size);
  out->set_committed(committed);
  out->set_start(begin + committed);
  out->set_end(begin + size);
  if (ds.spec.shuffle()) {
    std::vector<int64_t> perm =
        Permutation(size, MixSeed(ds.spec.seed(), static_cast<uint64_t>(ds.row.epoch),
                                  static_cast<uint64_t>(index) + 1));
    for (int64_t i = committed; i < size; ++i) out->add_record_ids(begin + perm[i]);
    return;
  }
  // File slices covering [begin + committed, begin + size).
  int64_t pos = begin + committed;
  const int64_t end = begin + size;
  if (ds.file_starts.empty()) return;
  auto it = std::upper_bound(ds.file_starts.begin(), ds.file_starts.end(), pos);
  size_t file = static_cast<size_t>(it - ds.file_starts.begin()) - 1;
  while (pos < end && file < ds.file_starts.size()) {
    const int64_t file_start = ds.file_starts[file];
    const int64_t file_end = file_start + ds.spec.files(static_cast<int>(file)).records();
    const int64_t stop = std::min(end, file_end);
    v1::FileSlice* slice = out->add_slices();
    slice->set_path(ds.spec.files(static_cast<int>(file)).path());
    slice->set_offset(pos - file_start);
    slice->set_count(stop - pos);
    pos = stop;
    ++file;
  }
}

}  // namespace

// A token with no lease row: either never issued (NOT_FOUND), or issued and
// its row pruned with an epoch older than the previous one, or issued on
// another dataset: the caller's lease is gone either way.
absl::StatusOr<std::optional<LeaseRow>> Ledger::EndedLease(const Dataset& ds,
                                                           uint64_t token) const {
  std::optional<LeaseRow> row = ds.ended.Find(token);
  if (!row) {
    ASSIGN_OR_RETURN(row, store_->ReadLease(token));
    if (row && row->dataset_id != ds.row.id) row.reset();
  }
  if (!row) return UnknownToken(ds, token);
  return row;
}

namespace {

// A call under a lease that ended: refused, with what it committed.
absl::Status NoLongerHeld(const LeaseRow& ended) {
  return absl::FailedPreconditionError(absl::StrCat(
      "token: lease ", ended.token, " is no longer held (", LeaseStateName(ended.state), "); ",
      ended.committed, " records of the shard were committed under it"));
}

}  // namespace

absl::Status Ledger::UnknownToken(const Dataset& ds, uint64_t token) const {
  if (token < next_token_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "token: lease ", token, " is no longer held on dataset ", Key(ds.row.job, ds.row.name),
        " (it belongs to another dataset, the service restarted before the lease was stored, "
        "or it ended more than ",
        kLeaseEpochsKept, " epochs ago and what it committed is no longer known)"));
  }
  return absl::NotFoundError(absl::StrCat("token: no lease ", token, " was ever issued"));
}

namespace {

absl::Status Busy(const std::string& job, const std::string& name, const char* doing) {
  return absl::UnavailableError(
      absl::StrCat("dataset: ", name, " in job ", job, " is ", doing, "; retry"));
}

constexpr char kRestoring[] = "being restored from a checkpoint";
constexpr char kCheckpointing[] = "being checkpointed";

}  // namespace

#define ANTDT_FIND_DATASET(ref, ds_var)                                                 \
  auto ds_it = datasets_.find(Key((ref).job(), (ref).name()));                          \
  if (ds_it == datasets_.end())                                                         \
    return absl::NotFoundError(                                                         \
        absl::StrCat("dataset: no dataset ", (ref).name(), " in job ", (ref).job()));   \
  if (ds_it->second->busy) return Busy((ref).job(), (ref).name(), ds_it->second->busy); \
  Dataset& ds_var = *ds_it->second

Ledger::HeldLock::HeldLock(Ledger& ledger)
    : ledger_(ledger), lock_(ledger.mu_), start_ms_(ledger.clock_->NowMillis()) {}

Ledger::HeldLock::~HeldLock() {
  const int64_t held = ledger_.clock_->NowMillis() - start_ms_;
  if (held < kStallMs) return;
  int64_t leases = 0;
  for (auto& [key, ds] : ledger_.datasets_) {
    if (ds->busy) continue;  // its own clock is moved on when it ends
    ds->DelayLeases(held);
    leases += static_cast<int64_t>(ds->leases.size());
  }
  LogEvent("lease_clocks_paused", {{"held_ms", held}, {"leases", leases}});
}

absl::StatusOr<Ledger::Dataset*> Ledger::MarkBusy(const v1::DatasetRef& ref, const char* doing) {
  HeldLock lock(*this);
  ANTDT_FIND_DATASET(ref, ds);
  ds.busy = doing;
  return &ds;
}

uint64_t Ledger::AppendIfAny(std::vector<Mutation>& batch) {
  return batch.empty() ? store_->LastSeq() : store_->Append(std::move(batch));
}

absl::Status Ledger::CheckTotals(int64_t shards) const {
  const int64_t datasets = static_cast<int64_t>(datasets_.size() + building_.size());
  if (datasets >= options_.max_datasets) {
    return absl::ResourceExhaustedError(absl::StrCat("spec: the service holds ", datasets,
                                                     " datasets, the limit max_datasets (",
                                                     options_.max_datasets, ")"));
  }
  if (shards > options_.max_total_shards - total_shards_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("spec: the dataset's ", shards, " shards would bring the service's total to ",
                     total_shards_ + shards, ", more than the limit max_total_shards (",
                     options_.max_total_shards, ")"));
  }
  return absl::OkStatus();
}

// Reserves the key and the shards under the mutex, builds the dataset's shard
// state (up to kMaxShardsPerDataset slots and the epoch's order) without it,
// then publishes it: other calls are not held up by a large dataset.
absl::StatusOr<v1::CreateDatasetResponse> Ledger::CreateDataset(
    const v1::CreateDatasetRequest& req) {
  int64_t records = 0;
  RETURN_IF_ERROR(ValidateSpec(req.spec(), &records));
  const std::string key = Key(req.spec().job(), req.spec().name());
  auto ds = std::make_unique<Dataset>();
  ds->spec = req.spec();
  ds->row.job = req.spec().job();
  ds->row.name = req.spec().name();
  ds->spec.SerializeToString(&ds->row.spec);
  InitDataset(*ds);
  v1::CreateDatasetResponse resp;
  {
    std::unique_lock<std::mutex> lock(mu_);
    building_done_.wait(lock, [&] { return building_.count(key) == 0; });
    auto it = datasets_.find(key);
    if (it != datasets_.end()) {
      std::string diff = DescribeDifferences(it->second->spec, req.spec());
      if (!diff.empty()) {
        return absl::AlreadyExistsError(
            absl::StrCat("dataset ", key, " exists with other parameters: ", diff));
      }
      resp.set_created(false);
      resp.set_shard_count(it->second->shard_count);
      resp.set_record_count(it->second->records);
      const uint64_t seq = store_->LastSeq();
      lock.unlock();
      RETURN_IF_ERROR(store_->WaitDurable(seq));
      return resp;
    }
    RETURN_IF_ERROR(CheckTotals(ds->shard_count));
    building_.insert(key);
    total_shards_ += ds->shard_count;
    ds->row.id = next_dataset_id_++;
  }
  ds->StartEpoch();
  resp.set_created(true);
  resp.set_shard_count(ds->shard_count);
  resp.set_record_count(ds->records);
  uint64_t seq = 0;
  {
    HeldLock lock(*this);
    seq = store_->Append({ds->row});
    LogEvent("dataset_created", {{"dataset", key},
                                 {"records", ds->records},
                                 {"shards", ds->shard_count},
                                 {"epochs", ds->spec.epochs()}});
    datasets_[key] = std::move(ds);
    building_.erase(key);
  }
  building_done_.notify_all();
  RETURN_IF_ERROR(store_->WaitDurable(seq));
  return resp;
}

namespace {

// `prefix` names the request's place in a bigger one ("next.").
absl::Status ValidateAcquire(const v1::AcquireShardRequest& req, const std::string& prefix = "") {
  if (absl::Status s = ValidateRef(req.dataset()); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, s.message()));
  }
  RETURN_IF_ERROR(ValidateName(req.worker_id(), prefix + "worker_id"));
  if (!req.request_id().empty()) {
    RETURN_IF_ERROR(ValidateName(req.request_id(), prefix + "request_id"));
  }
  if (req.incarnation() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "incarnation: must be >= 0, got ", req.incarnation()));
  }
  return absl::OkStatus();
}

}  // namespace

Deferred<v1::AcquireShardResponse> Ledger::AcquireShardDeferred(
    const v1::AcquireShardRequest& req) {
  RETURN_IF_ERROR(ValidateAcquire(req));
  return AcquireChecked(req);
}

Deferred<v1::AcquireShardResponse> Ledger::AcquireChecked(const v1::AcquireShardRequest& req) {
  v1::AcquireShardResponse resp;
  uint64_t seq = 0;
  IssuedToken issued;
  {
    HeldLock lock(*this);
    ANTDT_FIND_DATASET(req.dataset(), ds);
    std::vector<Mutation> batch;
    Ops ops{clock_, options_, batch};
    ops.ExpireDue(ds);
    WorkerStats& worker = ds.workers[req.worker_id()];
    if (req.incarnation() < worker.incarnation) {
      AppendIfAny(batch);  // what ExpireDue changed is stored whatever this call answers
      return absl::FailedPreconditionError(absl::StrCat(
          "incarnation: ", req.incarnation(), " of worker ", req.worker_id(), " is older than ",
          worker.incarnation, " (a restarted worker's old process)"));
    }
    if (req.incarnation() > worker.incarnation) {
      // The worker restarted: what its older incarnations held goes back now,
      // to the front of the queue, so the new one resumes it.
      std::vector<uint64_t> old;
      for (const auto& [token, lease] : ds.leases) {
        if (lease.row.worker == req.worker_id() && lease.row.incarnation < req.incarnation()) {
          old.push_back(token);
        }
      }
      std::sort(old.begin(), old.end(), std::greater<>());
      for (uint64_t token : old) ops.EndLease(ds, token, LeaseState::kReleased);
      worker.incarnation = req.incarnation();
    }
    const ActiveLease* retried = nullptr;
    if (!req.request_id().empty()) {
      auto r = ds.by_request.find(Ledger::Dataset::RequestKey(req.worker_id(), req.request_id()));
      auto l = r == ds.by_request.end() ? ds.leases.end() : ds.leases.find(r->second);
      if (l != ds.leases.end() && l->second.row.incarnation == req.incarnation()) {
        retried = &l->second;
      }
    }
    if (retried != nullptr) {
      // The answer to this call was lost: the same lease again, renewed.
      ActiveLease& lease = ds.leases[retried->row.token];
      lease.deadline_ms = clock_->NowMillis() + options_.lease_ttl_ms;
      resp.set_result(v1::AcquireShardResponse::SHARD);
      FillShard(ds, lease.row.index, ds.shards[lease.row.index].committed, resp.mutable_shard());
      resp.mutable_lease()->set_token(lease.row.token);
      resp.mutable_lease()->set_deadline_unix_ms(lease.deadline_ms);
    } else if (ds.finished()) {
      resp.set_result(v1::AcquireShardResponse::END_OF_DATA);
    } else if (ds.todo.empty()) {
      resp.set_result(v1::AcquireShardResponse::WAIT);
      int64_t retry = options_.wait_retry_ms;
      resp.set_retry_after_ms(retry);
    } else {
      const int64_t index = ds.todo.front();
      ds.todo.pop_front();
      ShardSlot& slot = ds.shards[index];
      issued = IssueToken(batch);
      const uint64_t token = issued.token;
      slot.state = ShardState::kDoing;
      slot.token = token;
      ++ds.doing;
      ActiveLease lease;
      lease.row = LeaseRow{token,           ds.row.id,       ds.row.epoch,
                           index,           req.worker_id(), req.incarnation(),
                           slot.committed,  slot.committed,  LeaseState::kActive,
                           req.request_id()};
      lease.deadline_ms = clock_->NowMillis() + options_.lease_ttl_ms;
      ds.PutLease(lease);
      batch.push_back(lease.row);
      batch.push_back(ops.RowOf(ds, index));
      resp.set_result(v1::AcquireShardResponse::SHARD);
      FillShard(ds, index, slot.committed, resp.mutable_shard());
      resp.mutable_lease()->set_token(token);
      resp.mutable_lease()->set_deadline_unix_ms(lease.deadline_ms);
    }
    seq = AppendIfAny(batch);
    NoteAppended(seq, issued);
  }
  // A new lease need not be durable (IssueToken); what ended the epoch must
  // be before a worker is told there is no more data.
  if (resp.result() == v1::AcquireShardResponse::END_OF_DATA || issued.own_batch) {
    return {resp, seq};
  }
  return {resp, issued.wait_seq};
}

Ledger::IssuedToken Ledger::IssueToken(std::vector<Mutation>& batch) {
  // Reserve the next range when half of this one is used, so that its batch
  // is durable (committed with some commit's) by the time it is needed.
  constexpr uint64_t kRange = 4096;
  IssuedToken out;
  out.token = next_token_++;
  if (next_token_ + kRange / 2 > token_bound_) {
    token_bound_ = std::max(token_bound_, next_token_) + kRange;
    batch.push_back(NextToken{token_bound_});
    out.reserved = true;
  }
  if (out.token < recovered_bound_) return out;
  auto it = std::find_if(reservations_.begin(), reservations_.end(),
                         [&](const auto& r) { return r.first > out.token; });
  if (it == reservations_.end()) {
    out.own_batch = true;
  } else {
    out.wait_seq = it->second;
  }
  return out;
}

void Ledger::NoteAppended(uint64_t seq, const IssuedToken& issued) {
  if (issued.reserved) reservations_.emplace_back(token_bound_, seq);
  while (!reservations_.empty() && reservations_.front().first <= next_token_) {
    reservations_.pop_front();
  }
}

Deferred<v1::ReportProgressResponse> Ledger::ReportProgressDeferred(
    const v1::ReportProgressRequest& req) {
  RETURN_IF_ERROR(ValidateRef(req.dataset()));
  if (req.token() == 0) return absl::InvalidArgumentError("token: must not be 0");
  if (req.records_done() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("records_done: must be >= 0, got ", req.records_done()));
  }
  v1::ReportProgressResponse resp;
  uint64_t seq = 0;
  std::optional<LeaseRow> ended;
  {
    HeldLock lock(*this);
    ANTDT_FIND_DATASET(req.dataset(), ds);
    std::vector<Mutation> batch;
    Ops ops{clock_, options_, batch};
    ops.ExpireDue(ds);
    auto it = ds.leases.find(req.token());
    if (it != ds.leases.end()) {
      ActiveLease& lease = it->second;
      const int64_t size = ds.ShardSize(lease.row.index);
      if (req.records_done() > size) {
        return absl::InvalidArgumentError(
            absl::StrCat("records_done: ", req.records_done(), " exceeds the shard's size ", size));
      }
      ShardSlot& slot = ds.shards[lease.row.index];
      if (req.records_done() > slot.committed) {
        const int64_t delta = req.records_done() - slot.committed;
        slot.committed = req.records_done();
        lease.row.committed = slot.committed;
        batch.push_back(lease.row);
        batch.push_back(ops.RowOf(ds, lease.row.index));
        ds.RecordCommit(lease.row.worker, delta, clock_->NowMillis(), options_.rate_window_ms,
                        batch);
      }
      lease.deadline_ms = clock_->NowMillis() + options_.lease_ttl_ms;
      resp.mutable_lease()->set_token(lease.row.token);
      resp.mutable_lease()->set_deadline_unix_ms(lease.deadline_ms);
      resp.set_committed(slot.committed);
      seq = AppendIfAny(batch);
    } else {
      seq = AppendIfAny(batch);
      ASSIGN_OR_RETURN(ended, EndedLease(ds, req.token()));
    }
  }
  if (ended) {
    // Idempotent for what the lease committed before it ended; refused beyond.
    if (req.records_done() <= ended->committed) {
      resp.mutable_lease()->set_token(ended->token);
      resp.set_committed(ended->committed);
      return {resp, seq};
    }
    return {NoLongerHeld(*ended), seq};
  }
  return {resp, seq};
}

Deferred<v1::CompleteShardResponse> Ledger::CompleteShardDeferred(
    const v1::CompleteShardRequest& req) {
  RETURN_IF_ERROR(ValidateRef(req.dataset()));
  if (req.token() == 0) return absl::InvalidArgumentError("token: must not be 0");
  if (!req.has_next()) return CompleteOnly(req, nullptr);
  v1::AcquireShardRequest next = req.next();
  if (!next.has_dataset() || (next.dataset().job().empty() && next.dataset().name().empty())) {
    *next.mutable_dataset() = req.dataset();
  }
  RETURN_IF_ERROR(ValidateAcquire(next, "next."));
  Deferred<v1::CompleteShardResponse> done = CompleteOnly(req, &next);
  if (!done.result.ok()) return done;
  // The shard is complete: whatever the acquire answers, the call succeeds,
  // so the commit is never reported as failed.
  Deferred<v1::AcquireShardResponse> acquired = AcquireChecked(next);
  if (acquired.result.ok()) *done.result->mutable_next() = *std::move(acquired.result);
  done.durable_seq = std::max(done.durable_seq, acquired.durable_seq);
  return done;
}

absl::Status Ledger::CheckNext(const v1::AcquireShardRequest& next, const Dataset& completed,
                               const std::string& worker) const {
  if (next.dataset().job() != completed.row.job) {
    return absl::InvalidArgumentError(
        absl::StrCat("next.dataset.job: must be the job of the shard "
                     "completed (",
                     completed.row.job, "), got ", next.dataset().job()));
  }
  auto it = datasets_.find(Key(next.dataset().job(), next.dataset().name()));
  if (it == datasets_.end()) {
    return absl::NotFoundError(absl::StrCat("next.dataset: no dataset ", next.dataset().name(),
                                            " in job ", next.dataset().job()));
  }
  if (it->second->busy) return Busy(next.dataset().job(), next.dataset().name(), it->second->busy);
  if (next.worker_id() != worker) {
    return absl::PermissionDeniedError(
        absl::StrCat("next.worker_id: must be the worker whose shard is completed (", worker,
                     "), got ", next.worker_id()));
  }
  return absl::OkStatus();
}

Deferred<v1::CompleteShardResponse> Ledger::CompleteOnly(const v1::CompleteShardRequest& req,
                                                         const v1::AcquireShardRequest* next) {
  v1::CompleteShardResponse resp;
  uint64_t seq = 0;
  std::optional<LeaseRow> ended;
  {
    HeldLock lock(*this);
    ANTDT_FIND_DATASET(req.dataset(), ds);
    std::vector<Mutation> batch;
    Ops ops{clock_, options_, batch};
    ops.ExpireDue(ds);
    // What ExpireDue changed is stored whatever this call answers.
    auto refuse = [&](absl::Status refusal) -> Deferred<v1::CompleteShardResponse> {
      return {std::move(refusal), AppendIfAny(batch)};
    };
    auto it = ds.leases.find(req.token());
    if (it != ds.leases.end()) {
      if (next != nullptr) {
        if (absl::Status s = CheckNext(*next, ds, it->second.row.worker); !s.ok()) {
          return refuse(std::move(s));
        }
      }
      const int64_t index = it->second.row.index;
      ShardSlot& slot = ds.shards[index];
      const int64_t delta = ds.ShardSize(index) - slot.committed;
      ds.RecordCommit(it->second.row.worker, delta, clock_->NowMillis(), options_.rate_window_ms,
                      batch);
      slot.committed = ds.ShardSize(index);
      ops.EndLease(ds, req.token(), LeaseState::kCompleted);
      seq = store_->Append(std::move(batch));
    } else {
      seq = AppendIfAny(batch);
      ASSIGN_OR_RETURN(ended, EndedLease(ds, req.token()));
      if (next != nullptr && ended->state == LeaseState::kCompleted) {
        if (absl::Status s = CheckNext(*next, ds, ended->worker); !s.ok())
          return {std::move(s), seq};
      }
    }
  }
  if (ended) {
    if (ended->state == LeaseState::kCompleted) {
      resp.set_already_completed(true);
      return {resp, seq};
    }
    return {NoLongerHeld(*ended), seq};
  }
  return {resp, seq};
}

absl::StatusOr<v1::ReleaseWorkerResponse> Ledger::ReleaseWorker(
    const v1::ReleaseWorkerRequest& req) {
  RETURN_IF_ERROR(ValidateRef(req.dataset(), /*name_optional=*/true));
  RETURN_IF_ERROR(ValidateName(req.worker_id(), "worker_id"));
  if (req.incarnation() < -1 || req.incarnation() == INT64_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("incarnation: must be >= -1 and < ", INT64_MAX, ", got ", req.incarnation()));
  }
  v1::ReleaseWorkerResponse resp;
  uint64_t seq = 0;
  {
    HeldLock lock(*this);
    std::vector<Dataset*> targets;
    if (req.dataset().name().empty()) {
      for (auto& [key, ds] : datasets_) {
        if (ds->row.job == req.dataset().job()) targets.push_back(ds.get());
      }
      if (targets.empty()) {
        return absl::NotFoundError(
            absl::StrCat("dataset.job: no datasets in job ", req.dataset().job()));
      }
    } else {
      ANTDT_FIND_DATASET(req.dataset(), ds);
      targets.push_back(&ds);
    }
    std::vector<Mutation> batch;
    Ops ops{clock_, options_, batch};
    // Ends the worker's leases of `ds`, newest first.
    auto release = [&](Dataset& ds) {
      std::vector<uint64_t> tokens;
      for (const auto& [token, lease] : ds.leases) {
        if (lease.row.worker == req.worker_id() &&
            (req.incarnation() == -1 || lease.row.incarnation <= req.incarnation())) {
          tokens.push_back(token);
        }
      }
      std::sort(tokens.begin(), tokens.end(), std::greater<>());
      for (uint64_t token : tokens) {
        const LeaseRow& row = ds.leases[token].row;
        resp.set_requeued_records(resp.requeued_records() + ds.ShardSize(row.index) -
                                  ds.shards[row.index].committed);
        ops.EndLease(ds, token, LeaseState::kReleased);
        resp.set_released_shards(resp.released_shards() + 1);
      }
    };
    for (Dataset* ds : targets) {
      // A busy dataset's shards are not to be written now (a restore fences
      // its leases anyway); the incarnation is still raised.
      if (!ds->busy) release(*ds);
      // The released incarnation may not take new shards (a zombie process).
      if (req.incarnation() >= 0) {
        WorkerStats& w = ds->workers[req.worker_id()];
        w.incarnation = std::max(w.incarnation, req.incarnation() + 1);
      }
    }
    seq = AppendIfAny(batch);
    LogEvent("worker_released", {{"job", req.dataset().job()},
                                 {"worker", req.worker_id()},
                                 {"incarnation", req.incarnation()},
                                 {"shards", resp.released_shards()}});
  }
  RETURN_IF_ERROR(store_->WaitDurable(seq));
  return resp;
}

// Marks the dataset busy under the mutex, reads its shard slots into the
// snapshot without it (50M slots take a while), then stores the snapshot;
// the dataset's leases get the time back.
absl::StatusOr<v1::CheckpointResponse> Ledger::Checkpoint(const v1::CheckpointRequest& req) {
  RETURN_IF_ERROR(ValidateRef(req.dataset()));
  if (req.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step: must be >= 0, got ", req.step()));
  }
  ASSIGN_OR_RETURN(Dataset * target, MarkBusy(req.dataset(), kCheckpointing));
  const int64_t start_ms = clock_->NowMillis();
  Dataset& ds = *target;  // datasets are never removed
  v1::ShardStateSnapshot snap;
  snap.set_epoch(ds.row.epoch);
  for (int64_t i = 0; i < static_cast<int64_t>(ds.shards.size()); ++i) {
    if (ds.shards[i].committed > 0) {
      snap.add_index(i);
      snap.add_committed(ds.shards[i].committed);
    }
  }
  CheckpointRow row{ds.row.id, req.step(), snap.SerializeAsString()};
  snap.Clear();
  v1::CheckpointResponse resp;
  resp.set_records_committed(ds.CommittedTotal());
  uint64_t seq = 0;
  {
    HeldLock lock(*this);
    ds.busy = nullptr;
    // Calls under these leases were refused meanwhile: the time is theirs.
    ds.DelayLeases(clock_->NowMillis() - start_ms);
    seq = store_->Append({std::move(row)});
    LogEvent("checkpoint_saved", {{"dataset", Key(ds.row.job, ds.row.name)},
                                  {"step", req.step()},
                                  {"epoch", ds.row.epoch},
                                  {"records_committed", resp.records_committed()}});
  }
  RETURN_IF_ERROR(store_->WaitDurable(seq));
  return resp;
}

// The restored state, built beside the dataset's current one.
struct Ledger::StagedRestore {
  v1::RestoreResponse resp;
  Dataset restored;            // its row's epoch, slots, queue and done count
  std::vector<Mutation> rows;  // the restored shards' rows
};

absl::Status Ledger::StageRestore(const Dataset& ds, int64_t step, StagedRestore& staged) const {
  // Flush so that the read sees every checkpoint written before.
  RETURN_IF_ERROR(store_->WaitDurable(store_->LastSeq()));
  ASSIGN_OR_RETURN(std::optional<std::string> blob, store_->ReadCheckpoint(ds.row.id, step));
  if (!blob) {
    return absl::NotFoundError(absl::StrCat("step: no checkpoint at step ", step, " for dataset ",
                                            Key(ds.row.job, ds.row.name)));
  }
  v1::ShardStateSnapshot snap;
  if (!snap.ParseFromString(*blob) || snap.index_size() != snap.committed_size()) {
    return absl::DataLossError(absl::StrCat("step: checkpoint at step ", step, " does not parse"));
  }
  blob.reset();
  RolledBackCommits(ds, snap, &staged.resp);
  // A Dataset of the restored epoch with the same spec, whose RebuildTodo
  // builds the queue (the live one is not touched).
  Dataset& restored = staged.restored;
  restored.row = ds.row;
  restored.row.epoch = snap.epoch();
  restored.spec = ds.spec;
  restored.records = ds.records;
  restored.shard_count = ds.shard_count;
  restored.shards.assign(restored.finished() ? 0 : ds.shard_count, ShardSlot{});
  for (int i = 0; i < snap.index_size(); ++i) {
    const int64_t index = snap.index(i);
    if (index < 0 || index >= static_cast<int64_t>(restored.shards.size())) continue;
    ShardSlot& slot = restored.shards[index];
    slot.committed = std::clamp<int64_t>(snap.committed(i), 0, ds.ShardSize(index));
    if (slot.committed == ds.ShardSize(index)) {
      slot.state = ShardState::kDone;
      ++restored.done;
    }
    staged.rows.push_back(ShardRow{ds.row.id, index, slot.state, slot.committed, 0});
  }
  if (!restored.finished()) restored.RebuildTodo();
  return absl::OkStatus();
}

// Marks the dataset busy under the mutex, builds the restored state
// without it (other datasets, and the reaper, go on meanwhile; this one's
// calls are refused with UNAVAILABLE), then swaps it in under the mutex.
absl::StatusOr<v1::RestoreResponse> Ledger::Restore(const v1::RestoreRequest& req) {
  RETURN_IF_ERROR(ValidateRef(req.dataset()));
  if (req.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step: must be >= 0, got ", req.step()));
  }
  ASSIGN_OR_RETURN(Dataset * target, MarkBusy(req.dataset(), kRestoring));
  Dataset& ds = *target;  // datasets are never removed
  StagedRestore staged;
  absl::Status built = StageRestore(ds, req.step(), staged);
  uint64_t seq = 0;
  {
    HeldLock lock(*this);
    ds.busy = nullptr;
    if (!built.ok()) return built;
    std::vector<Mutation> batch;
    // Fence every active lease: their holders must acquire again.
    for (auto& [token, lease] : ds.leases) {
      LeaseRow row = lease.row;
      row.state = LeaseState::kFenced;
      row.committed = ds.shards[row.index].committed;
      ds.ended.Put(row);
      batch.push_back(row);
    }
    staged.resp.set_fenced_leases(static_cast<int32_t>(ds.leases.size()));
    ds.ClearLeases();
    ds.row.epoch = staged.restored.row.epoch;
    ds.shards.swap(staged.restored.shards);  // the old state is freed below, unlocked
    ds.todo.swap(staged.restored.todo);
    ds.done = staged.restored.done;
    ds.doing = 0;
    batch.push_back(DeleteShards{ds.row.id});
    batch.push_back(ds.row);
    batch.insert(batch.end(), std::make_move_iterator(staged.rows.begin()),
                 std::make_move_iterator(staged.rows.end()));
    staged.resp.set_epoch(ds.row.epoch);
    staged.resp.set_records_committed(ds.CommittedTotal());
    seq = store_->Append(std::move(batch));
    LogEvent("checkpoint_restored", {{"dataset", Key(ds.row.job, ds.row.name)},
                                     {"step", req.step()},
                                     {"epoch", ds.row.epoch},
                                     {"fenced_leases", staged.resp.fenced_leases()}});
  }
  v1::RestoreResponse resp = std::move(staged.resp);
  // The replaced shard state goes back to the system, not to malloc's free
  // lists: the service's memory after a restore is what it was before.
  staged.restored = Dataset{};
  staged.rows = {};
  malloc_trim(0);
  RETURN_IF_ERROR(store_->WaitDurable(seq));
  return resp;
}

absl::StatusOr<v1::GetProgressResponse> Ledger::GetProgress(const v1::GetProgressRequest& req) {
  RETURN_IF_ERROR(ValidateRef(req.dataset()));
  v1::GetProgressResponse resp;
  uint64_t seq = 0;
  {
    HeldLock lock(*this);
    ANTDT_FIND_DATASET(req.dataset(), ds);
    std::vector<Mutation> batch;
    Ops ops{clock_, options_, batch};
    ops.ExpireDue(ds);
    seq = AppendIfAny(batch);
    const int64_t now = clock_->NowMillis();
    resp.set_epoch(ds.row.epoch);
    resp.set_epochs(ds.spec.epochs());
    resp.set_shard_count(ds.shard_count);
    resp.set_shards_todo(static_cast<int64_t>(ds.todo.size()));
    resp.set_shards_doing(ds.doing);
    resp.set_shards_done(ds.done);
    resp.set_records_per_epoch(ds.records);
    // One pass over the shards (hundreds of thousands), not one per figure.
    const int64_t committed_total = ds.CommittedTotal();
    resp.set_records_committed_epoch(ds.finished() ? 0
                                                   : committed_total - ds.records * ds.row.epoch);
    resp.set_records_committed_total(committed_total);
    resp.set_finished(ds.finished());
    resp.set_requeues(ds.row.requeues);
    resp.set_lease_expirations(ds.row.expirations);
    std::unordered_map<std::string_view, int> in_flight;
    for (const auto& [token, lease] : ds.leases) ++in_flight[lease.row.worker];
    std::vector<const std::pair<const std::string, WorkerStats>*> workers;
    workers.reserve(ds.workers.size());
    for (const auto& entry : ds.workers) workers.push_back(&entry);
    std::sort(workers.begin(), workers.end(),
              [](const auto* a, const auto* b) { return a->first < b->first; });
    double total_rate = 0;
    for (const auto* entry : workers) {
      const auto& [name, w] = *entry;
      v1::WorkerProgress* wp = resp.add_workers();
      wp->set_worker_id(name);
      wp->set_records_committed(w.records_committed);
      const auto flying = in_flight.find(name);
      wp->set_shards_in_flight(flying == in_flight.end() ? 0 : flying->second);
      double rate = 0;
      if (!w.samples.empty() && now - w.samples.back().first <= options_.rate_window_ms) {
        // Records over the window up to now (idle time counts).
        const auto& first = w.samples.front();
        const int64_t span = std::max<int64_t>(now - first.first, 1000);
        rate = static_cast<double>(w.samples.back().second - first.second) * 1000.0 /
               static_cast<double>(span);
      }
      wp->set_records_per_second(rate);
      total_rate += rate;
    }
    resp.set_records_per_second(total_rate);
    const int64_t remaining = ds.records * ds.spec.epochs() - committed_total;
    if (remaining == 0) {
      resp.set_eta_seconds(0);
    } else if (total_rate > 0) {
      resp.set_eta_seconds(static_cast<double>(remaining) / total_rate);
    } else {
      resp.set_eta_seconds(-1);
    }
  }
  RETURN_IF_ERROR(store_->WaitDurable(seq));
  return resp;
}

absl::StatusOr<int> Ledger::ExpireLeases() {
  int expired = 0;
  uint64_t seq = 0;
  {
    HeldLock lock(*this);
    std::vector<Mutation> batch;
    Ops ops{clock_, options_, batch};
    for (auto& [key, ds] : datasets_) {
      if (!ds->busy) expired += ops.ExpireDue(*ds);
    }
    if (batch.empty()) return 0;
    seq = store_->Append(std::move(batch));
  }
  RETURN_IF_ERROR(store_->WaitDurable(seq));
  return expired;
}

std::vector<DatasetStats> Ledger::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DatasetStats> out;
  for (const auto& [key, ds] : datasets_) {
    DatasetStats s;
    s.job = ds->row.job;
    s.name = ds->row.name;
    s.epoch = ds->row.epoch;
    s.shards_todo = static_cast<int64_t>(ds->todo.size());
    s.shards_doing = ds->doing;
    s.shards_done = ds->done;
    s.records_committed_total = ds->CommittedTotal();
    s.requeues = ds->row.requeues;
    s.lease_expirations = ds->row.expirations;
    out.push_back(s);
  }
  return out;
}

}  // namespace antdt::sharding
