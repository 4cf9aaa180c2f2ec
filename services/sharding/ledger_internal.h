// The ledger's state and the helpers its files share: a dataset's shards,
// leases and workers (Ledger::Dataset), validation, the mutations of one
// transition (Ops). Internal to services/sharding/: ledger.cc (open,
// recover, datasets), ledger_rpc.cc (one method per RPC) and ledger_spec.cc
// (a dataset as specified: checks, layout, order).
#pragma once

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/sharding_state.pb.h"
#include "common/log.h"
#include "common/status.h"
#include "services/sharding/ledger.h"

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
ShardLayout LayoutOf(const v1::DatasetSpec& spec, int64_t records, int64_t max_shards);

inline std::string Key(const std::string& job, const std::string& name) {
  return absl::StrCat(job, "/", name);
}

std::vector<int64_t> Permutation(int64_t n, uint64_t seed);

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
  // Active leases' tokens by holder: a worker's first acquire and a release
  // find its leases without a pass over every worker's (10,000 workers
  // starting made 50 million comparisons).
  absl::flat_hash_map<std::string, std::vector<uint64_t>> leases_of;
  RecentLeases ended;  // ended in this process
  // Hashed with abseil's hash: looked up on every commit of 10,000 workers.
  absl::node_hash_map<std::string, WorkerStats> workers;
  // A whole-dataset operation (Restore, Checkpoint) is reading or rebuilding
  // the shard state outside the mutex: every call on the dataset is refused
  // (UNAVAILABLE, retry) and nothing else writes it. What it is doing ("being
  // restored from a checkpoint"), or null.
  const char* busy = nullptr;

  static std::string RequestKey(const std::string& worker, const std::string& request_id) {
    return worker + '\n' + request_id;  // names hold no control character
  }
  void PutLease(const ActiveLease& lease) {
    auto [it, inserted] = leases.insert_or_assign(lease.row.token, lease);
    if (inserted) leases_of[lease.row.worker].push_back(lease.row.token);
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
    if (auto h = leases_of.find(it->second.row.worker); h != leases_of.end()) {
      std::vector<uint64_t>& tokens = h->second;
      tokens.erase(std::remove(tokens.begin(), tokens.end(), it->first), tokens.end());
      if (tokens.empty()) leases_of.erase(h);
    }
    leases.erase(it);
  }
  void ClearLeases() {
    leases.clear();
    by_request.clear();
    leases_of.clear();
  }
  // The active leases of `worker` (tokens, in no order).
  const std::vector<uint64_t>& LeasesOf(const std::string& worker) const {
    static const std::vector<uint64_t> kNone;
    auto it = leases_of.find(worker);
    return it == leases_of.end() ? kNone : it->second;
  }
  // Moves every active lease's deadline `ms` later: time its holders spent
  // held off by the service is not counted against them.
  void DelayLeases(int64_t ms);

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
  void RebuildTodo();
  void StartEpoch();
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
absl::Status ValidateName(const std::string& value, const std::string& field,
                          size_t max_bytes = kMaxNameBytes);

absl::Status ValidateJob(const std::string& job, const std::string& field);

// A dataset named in a call; an empty name is allowed where it means "every
// dataset of the job".
absl::Status ValidateRef(const v1::DatasetRef& ref, bool name_optional = false);

// The dataset's records: the sum of its files' (checked), or record_count.
absl::StatusOr<int64_t> RecordsOf(const v1::DatasetSpec& spec);

// Bytes of the file slices in the largest AcquireShard answer of an
// unshuffled dataset: a shard lists one slice per file it overlaps.
int64_t MaxSliceBytes(const v1::DatasetSpec& spec);

// Sizes: shard count, records x epochs, and what one answer carries.
absl::Status ValidateSizes(const v1::DatasetSpec& spec, int64_t records);

absl::Status ValidateSpec(const v1::DatasetSpec& spec, int64_t* records);

std::string DescribeDifferences(const v1::DatasetSpec& a, const v1::DatasetSpec& b);

void InitDataset(Ledger::Dataset& ds);

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

  void AdvanceEpochIfDone(Ledger::Dataset& ds);

  // Ends an active lease; the unfinished remainder goes to the front of the queue.
  void EndLease(Ledger::Dataset& ds, uint64_t token, LeaseState state);

  int ExpireDue(Ledger::Dataset& ds);
};

// The ids of records [from, to) of shard `index` in `epoch`, in the order the
// shard hands them out.
void AppendRecordIds(const Ledger::Dataset& ds, int32_t epoch, int64_t index, int64_t from,
                     int64_t to, v1::RolledBack* out);

// The commits a restore to `snap` undoes: in the snapshot's epoch what was
// committed beyond it, and everything committed in later epochs.
void RolledBackCommits(const Ledger::Dataset& ds, const v1::ShardStateSnapshot& snap,
                       v1::RestoreResponse* resp);

// The lease's records of shard `index`: from `committed` to `lease_end`.
void FillShard(const Ledger::Dataset& ds, int64_t index, int64_t committed, int64_t lease_end,
               v1::Shard* out);

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
