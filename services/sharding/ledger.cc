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
#include "services/sharding/ledger_internal.h"

namespace antdt::sharding {

Ledger::Ledger(Store* store, const Clock* clock, LedgerOptions options)
    : store_(store), clock_(clock), options_(options) {}

Ledger::~Ledger() = default;

absl::StatusOr<std::unique_ptr<Ledger>> Ledger::Open(Store* store, const Clock* clock,
                                                     LedgerOptions options) {
  std::unique_ptr<Ledger> ledger(new Ledger(store, clock, options));
  RETURN_IF_ERROR(ledger->Recover());
  return ledger;
}

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

void FillShard(const Ledger::Dataset& ds, int64_t index, int64_t committed, int64_t lease_end,
               v1::Shard* out) {
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

void Ledger::Dataset::DelayLeases(int64_t ms) {
  for (auto& [token, lease] : leases) lease.deadline_ms += ms;
  if (next_due_ms < std::numeric_limits<int64_t>::max() - ms) next_due_ms += ms;
}

void Ledger::Dataset::RebuildTodo() {
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

void Ledger::Dataset::StartEpoch() {
  shards.assign(finished() ? 0 : shard_count, ShardSlot{});
  done = 0;
  doing = 0;
  unleased = 0;
  if (!finished()) RebuildTodo();
}

void Ops::AdvanceEpochIfDone(Ledger::Dataset& ds) {
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

void Ops::EndLease(Ledger::Dataset& ds, uint64_t token, LeaseState state) {
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

int Ops::ExpireDue(Ledger::Dataset& ds) {
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

}  // namespace antdt::sharding
