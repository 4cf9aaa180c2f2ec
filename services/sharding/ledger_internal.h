// The ledger's state and the helpers its files share: a dataset's shards,
// leases and workers (Ledger::Dataset), validation, the mutations of one
// transition (Ops). Internal to services/sharding/: ledger.cc (open,
// recover, datasets) and ledger_rpc.cc (one method per RPC).
#pragma once

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/sharding_state.pb.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::sharding {

inline constexpr int32_t kLeaseEpochsKept = 8;

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

inline uint64_t MixSeed(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t s = a;
  uint64_t x = SplitMix64(s) ^ (b * 0x9E3779B97F4A7C15ULL);
  s = x;
  x = SplitMix64(s) ^ (c * 0xC2B2AE3D27D4EB4FULL);
  s = x;
  return SplitMix64(s);
}

// ceil(records / shard_size), without the overflow of records + shard_size - 1.
inline int64_t ShardCount(int64_t records, int64_t shard_size) {
  return records / shard_size + (records % shard_size != 0);
}

// The guided layout (DatasetSpec.min_shard_records and workers): `full`
// shards of shard_size, then smaller ones starting at `tail` (which ends with
// the record count). No tail: every shard of shard_size, the last one short.
struct ShardLayout {
  int64_t full = 0;
  std::vector<int64_t> tail;
  int64_t count() const {
    return tail.empty() ? full : full + static_cast<int64_t>(tail.size()) - 1;
  }
};

// The layout of `records` under `spec`; stops counting past `max_shards`
// (then count() > max_shards and the tail is cut short).
inline ShardLayout LayoutOf(const v1::DatasetSpec& spec, int64_t records, int64_t max_shards) {
  ShardLayout out;
  const int64_t size_max = spec.shard_size();
  if (spec.min_shard_records() <= 0 || spec.workers() <= 0 || size_max <= 0) {
    out.full = records / size_max + (records % size_max != 0);
    return out;
  }
  const int64_t floor = std::min(spec.min_shard_records(), size_max);
  const int64_t parts = 2 * static_cast<int64_t>(spec.workers());
  // Shards of shard_size while ceil(left / parts) >= shard_size.
  int64_t full = 0;
  if (records / parts >= size_max) full = (records - parts * (size_max - 1)) / size_max;
  full = std::clamp<int64_t>(full, 0, records / size_max);
  out.full = full;
  int64_t pos = full * size_max;
  while (pos < records && out.count() <= max_shards) {
    out.tail.push_back(pos);
    const int64_t left = records - pos;
    int64_t size = std::clamp(left / parts + (left % parts != 0), floor, size_max);
    if (left - size < floor) size = std::min(left, size_max);
    pos += size;
  }
  out.tail.push_back(records);
  return out;
}

inline std::string Key(const std::string& job, const std::string& name) {
  return absl::StrCat(job, "/", name);
}

inline std::vector<int64_t> Permutation(int64_t n, uint64_t seed) {
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
  // The shard whose guided lease it completed before the shard's end (found
  // much slower than its peers): the rest, at the front of the queue, is for
  // another worker first (in this process; -1: none).
  int64_t left_rest_of = -1;
};

struct Ledger::Dataset {
  DatasetRow row;
  v1::DatasetSpec spec;
  int64_t records = 0;
  int64_t shard_count = 0;
  ShardLayout layout;                // where each shard begins
  std::vector<int64_t> file_starts;  // first global record id of each file
  std::vector<ShardSlot> shards;     // of the current epoch
  std::deque<int64_t> todo;          // shard indices, front first
  // Records of the shards in `todo` not yet committed: the epoch's records
  // not leased, which guided leasing divides among the workers.
  int64_t unleased = 0;
  int64_t leases_shortened = 0;  // ended before their shard's end, in this process
  // Cumulative records committed on the dataset (time ms, records) over the
  // last rate window: the job's rate, beside each worker's.
  std::deque<std::pair<int64_t, int64_t>> rate_samples;
  int64_t committed_ever = 0;  // in this process, for rate_samples
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
  int64_t ShardBegin(int64_t index) const {
    if (index < layout.full || layout.tail.empty()) return index * spec.shard_size();
    return layout.tail[static_cast<size_t>(index - layout.full)];
  }
  int64_t ShardSize(int64_t index) const {
    if (index < layout.full || layout.tail.empty()) {
      return std::min(spec.shard_size(), records - ShardBegin(index));
    }
    const auto k = static_cast<size_t>(index - layout.full);
    return layout.tail[k + 1] - layout.tail[k];
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
  // The guided layout's shards of shard_size in shuffled order (every shard
  // without the layout), then its smaller shards, largest first.
  std::vector<int64_t> EpochOrder() const {
    if (!spec.shuffle()) return Identity();
    const int64_t permuted = layout.tail.empty() ? shard_count : layout.full;
    std::vector<int64_t> order =
        Permutation(permuted, MixSeed(spec.seed(), static_cast<uint64_t>(row.epoch)));
    for (int64_t i = permuted; i < shard_count; ++i) order.push_back(i);
    return order;
  }
  // Records per second over `samples` (time ms, cumulative); 0: unknown.
  static double RateOf(const std::deque<std::pair<int64_t, int64_t>>& samples) {
    if (samples.size() < 2 || samples.back().first <= samples.front().first) return 0;
    return static_cast<double>(samples.back().second - samples.front().second) * 1000 /
           static_cast<double>(samples.back().first - samples.front().first);
  }
  // Where `worker`'s lease of shard `index` from `committed` on ends. Under
  // the guided layout a worker much slower than its peers (under 3/4 of the
  // mean rate) takes its share of what is left by the rates, as weighted
  // factoring does: rate / job rate x unleased / 2 records, at least
  // min_shard_records, when that leaves at least min_shard_records of the
  // shard for the next worker; everyone else, and any worker whose rate is
  // not known yet, the shard's whole remainder.
  int64_t LeaseEnd(int64_t index, int64_t committed, const std::string& worker) const {
    const int64_t size = ShardSize(index);
    if (layout.tail.empty()) return size;
    const int64_t floor = std::min(spec.min_shard_records(), spec.shard_size());
    auto w = workers.find(worker);
    const double job_rate = RateOf(rate_samples);
    if (w == workers.end() || job_rate <= 0 || workers.empty()) return size;
    const double rate = RateOf(w->second.samples);
    const double mean = job_rate / static_cast<double>(workers.size());
    if (rate <= 0 || rate >= 0.75 * mean) return size;
    const auto cover = std::max(
        floor,
        static_cast<int64_t>(std::ceil(rate / job_rate * static_cast<double>(unleased) / 2)));
    return size - committed - cover < floor ? size : committed + cover;
  }
  // The end of an active or ended lease (rows from before guided leasing: the shard's size).
  int64_t EndOf(const LeaseRow& lease) const {
    return lease.end > 0 ? std::min(lease.end, ShardSize(lease.index)) : ShardSize(lease.index);
  }
  std::vector<int64_t> Identity() const {
    std::vector<int64_t> p(shard_count);
    for (int64_t i = 0; i < shard_count; ++i) p[i] = i;
    return p;
  }
  // Rebuilds the queue from the shard slots: partly done shards first.
  void RebuildTodo() {
    todo.clear();
    unleased = 0;
    std::vector<int64_t> partial;
    for (int64_t index : EpochOrder()) {
      const ShardSlot& s = shards[index];
      if (s.state != ShardState::kTodo) continue;
      unleased += ShardSize(index) - s.committed;
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
    unleased = 0;
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
    committed_ever += delta;
    if (!rate_samples.empty() && rate_samples.back().first == now) {
      rate_samples.back().second = committed_ever;
    } else {
      rate_samples.emplace_back(now, committed_ever);
    }
    while (rate_samples.size() > 2 && rate_samples.front().first < now - window) {
      rate_samples.pop_front();
    }
    while (rate_samples.size() > 4096) rate_samples.pop_front();
  }
};

// `field` names the value in the request (`spec.name`, `worker_id`).
inline absl::Status ValidateName(const std::string& value, const std::string& field,
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

inline absl::Status ValidateJob(const std::string& job, const std::string& field) {
  RETURN_IF_ERROR(ValidateName(job, field));
  if (job.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not contain '/'"));
  }
  return absl::OkStatus();
}

// A dataset named in a call; an empty name is allowed where it means "every
// dataset of the job".
inline absl::Status ValidateRef(const v1::DatasetRef& ref, bool name_optional = false) {
  RETURN_IF_ERROR(ValidateJob(ref.job(), "dataset.job"));
  if (name_optional && ref.name().empty()) return absl::OkStatus();
  return ValidateName(ref.name(), "dataset.name");
}

// The dataset's records: the sum of its files' (checked), or record_count.
inline absl::StatusOr<int64_t> RecordsOf(const v1::DatasetSpec& spec) {
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
inline int64_t MaxSliceBytes(const v1::DatasetSpec& spec) {
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
inline absl::Status ValidateSizes(const v1::DatasetSpec& spec, int64_t records) {
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
  if (spec.min_shard_records() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.min_shard_records: must be >= 0 (0: no guided layout), got ",
                     spec.min_shard_records()));
  }
  if (spec.workers() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.workers: must be >= 0, got ", spec.workers()));
  }
  const int64_t shards = LayoutOf(spec, records, kMaxShardsPerDataset).count();
  if (shards > kMaxShardsPerDataset) {
    const bool guided = spec.min_shard_records() > 0 && spec.workers() > 0;
    return absl::InvalidArgumentError(absl::StrCat(
        guided ? "spec.min_shard_records: the guided layout of " : "spec.shard_size: ",
        guided ? absl::StrCat(spec.workers(), " workers") : absl::StrCat(spec.shard_size()),
        " gives more than ", kMaxShardsPerDataset, " shards, the limit"));
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

inline absl::Status ValidateSpec(const v1::DatasetSpec& spec, int64_t* records) {
  RETURN_IF_ERROR(ValidateJob(spec.job(), "spec.job"));
  RETURN_IF_ERROR(ValidateName(spec.name(), "spec.name"));
  ASSIGN_OR_RETURN(*records, RecordsOf(spec));
  return ValidateSizes(spec, *records);
}

inline std::string DescribeDifferences(const v1::DatasetSpec& a, const v1::DatasetSpec& b) {
  std::vector<std::string> diffs;
  auto add = [&](const char* field, const auto& x, const auto& y) {
    if (x != y) diffs.push_back(absl::StrCat(field, " ", x, " (existing) vs ", y, " (requested)"));
  };
  add("record_count", a.record_count(), b.record_count());
  add("shard_size", a.shard_size(), b.shard_size());
  add("epochs", a.epochs(), b.epochs());
  add("shuffle", a.shuffle(), b.shuffle());
  add("seed", a.seed(), b.seed());
  add("min_shard_records", a.min_shard_records(), b.min_shard_records());
  add("workers", a.workers(), b.workers());
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

inline void InitDataset(Ledger::Dataset& ds);

inline void InitDataset(Ledger::Dataset& ds) {
  int64_t records = 0;
  ds.file_starts.clear();
  for (const v1::DataFile& f : ds.spec.files()) {
    ds.file_starts.push_back(records);
    records += f.records();
  }
  if (ds.spec.files_size() == 0) records = ds.spec.record_count();
  ds.records = records;
  ds.layout = LayoutOf(ds.spec, records, kMaxShardsPerDataset);
  ds.shard_count = ds.layout.count();
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
    ds.unleased += ds.ShardSize(row.index) - slot.committed;
    if (state == LeaseState::kCompleted) {
      // A guided lease done up to its end: the shard's rest is next in line,
      // for another worker than this slow one (AcquireShard).
      ++ds.leases_shortened;
      if (auto w = ds.workers.find(row.worker); w != ds.workers.end()) {
        w->second.left_rest_of = row.index;
      }
      batch.push_back(RowOf(ds, row.index));
      return;
    }
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
inline void AppendRecordIds(const Ledger::Dataset& ds, int32_t epoch, int64_t index, int64_t from,
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
inline void RolledBackCommits(const Ledger::Dataset& ds, const v1::ShardStateSnapshot& snap,
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

// The lease's records of shard `index`: from `committed` to `lease_end`.
inline void FillShard(const Ledger::Dataset& ds, int64_t index, int64_t committed,
                      int64_t lease_end, v1::Shard* out) {
  const int64_t begin = ds.ShardBegin(index);
  const int64_t size = ds.ShardSize(index);
  out->set_epoch(ds.row.epoch);
  out->set_index(index);
  out->set_size(size);
  out->set_committed(committed);
  out->set_lease_end(lease_end);
  out->set_start(begin + committed);
  out->set_end(begin + lease_end);
  if (ds.spec.shuffle()) {
    std::vector<int64_t> perm =
        Permutation(size, MixSeed(ds.spec.seed(), static_cast<uint64_t>(ds.row.epoch),
                                  static_cast<uint64_t>(index) + 1));
    for (int64_t i = committed; i < lease_end; ++i) out->add_record_ids(begin + perm[i]);
    return;
  }
  // File slices covering [begin + committed, begin + lease_end).
  int64_t pos = begin + committed;
  const int64_t end = begin + lease_end;
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

// A call under a lease that ended: refused, with what it committed.
inline absl::Status NoLongerHeld(const LeaseRow& ended) {
  return absl::FailedPreconditionError(absl::StrCat(
      "token: lease ", ended.token, " is no longer held (", LeaseStateName(ended.state), "); ",
      ended.committed, " records of the shard were committed under it"));
}

inline absl::Status Busy(const std::string& job, const std::string& name, const char* doing) {
  return absl::UnavailableError(
      absl::StrCat("dataset: ", name, " in job ", job, " is ", doing, "; retry"));
}

inline constexpr char kRestoring[] = "being restored from a checkpoint";
inline constexpr char kCheckpointing[] = "being checkpointed";

#define ANTDT_FIND_DATASET(ref, ds_var)                                                 \
  auto ds_it = datasets_.find(Key((ref).job(), (ref).name()));                          \
  if (ds_it == datasets_.end())                                                         \
    return absl::NotFoundError(                                                         \
        absl::StrCat("dataset: no dataset ", (ref).name(), " in job ", (ref).job()));   \
  if (ds_it->second->busy) return Busy((ref).job(), (ref).name(), ds_it->second->busy); \
  Dataset& ds_var = *ds_it->second

}  // namespace antdt::sharding
