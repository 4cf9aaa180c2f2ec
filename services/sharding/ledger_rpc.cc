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
#include "services/sharding/ledger.h"
#include "services/sharding/ledger_internal.h"

namespace antdt::sharding {

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
      for (uint64_t token : ds.LeasesOf(req.worker_id())) {
        if (ds.leases.at(token).row.incarnation < req.incarnation()) old.push_back(token);
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
      FillShard(ds, lease.row.index, ds.shards[lease.row.index].committed, ds.EndOf(lease.row),
                resp.mutable_shard());
      resp.mutable_lease()->set_token(lease.row.token);
      resp.mutable_lease()->set_deadline_unix_ms(lease.deadline_ms);
    } else if (ds.finished()) {
      resp.set_result(v1::AcquireShardResponse::END_OF_DATA);
    } else if (ds.todo.empty()) {
      resp.set_result(v1::AcquireShardResponse::WAIT);
      int64_t retry = options_.wait_retry_ms;
      resp.set_retry_after_ms(retry);
    } else {
      // A slow worker asking again at once (CompleteShard with next) would
      // take the rest of the shard it was just found too slow for, piece by
      // piece, and a faster worker never would: it takes the next shard in
      // line instead, while there is one.
      auto pick = ds.todo.begin();
      if (int64_t& left = worker.left_rest_of; left >= 0) {
        if (*pick == left && ds.todo.size() > 1) ++pick;
        left = -1;
      }
      const int64_t index = *pick;
      ds.todo.erase(pick);
      ShardSlot& slot = ds.shards[index];
      const int64_t end = ds.LeaseEnd(index, slot.committed, req.worker_id());
      ds.unleased -= ds.ShardSize(index) - slot.committed;
      issued = IssueToken(batch);
      const uint64_t token = issued.token;
      slot.state = ShardState::kDoing;
      slot.token = token;
      ++ds.doing;
      ActiveLease lease;
      lease.row = LeaseRow{token,
                           ds.row.id,
                           ds.row.epoch,
                           index,
                           req.worker_id(),
                           req.incarnation(),
                           slot.committed,
                           slot.committed,
                           LeaseState::kActive,
                           req.request_id(),
                           end};
      lease.deadline_ms = clock_->NowMillis() + options_.lease_ttl_ms;
      ds.PutLease(lease);
      batch.push_back(lease.row);
      batch.push_back(ops.RowOf(ds, index));
      resp.set_result(v1::AcquireShardResponse::SHARD);
      FillShard(ds, index, slot.committed, end, resp.mutable_shard());
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
      const int64_t end = ds.EndOf(lease.row);
      if (req.records_done() > end) {
        seq = AppendIfAny(batch);  // what ExpireDue changed is stored whatever this call answers
        if (end == size) {
          return {absl::InvalidArgumentError(absl::StrCat("records_done: ", req.records_done(),
                                                          " exceeds the shard's size ", size)),
                  seq};
        }
        return {absl::InvalidArgumentError(
                    absl::StrCat("records_done: ", req.records_done(), " passes the end of lease ",
                                 lease.row.token, " at ", end, " of the shard's ", size,
                                 " records (guided leasing: the rest is leased apart)")),
                seq};
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
      // A much slower worker's lease ends early once what is left of the
      // epoch is about its share (the guided layout's rule at lease time,
      // now, by its rate now): the shard's rest goes to a faster worker when
      // it completes, not to the epoch's end. Only for a caller that takes
      // nothing past records_done and follows the answer's end.
      int64_t lease_end = end;
      if (req.follow_shorter_end()) {
        const int64_t shorter = ds.LeaseEnd(lease.row.index, slot.committed, lease.row.worker);
        if (shorter > slot.committed && shorter < end) {
          lease.row.end = lease_end = shorter;
          batch.push_back(lease.row);
          LogEvent("lease_shortened", {{"dataset", Key(ds.row.job, ds.row.name)},
                                       {"shard", lease.row.index},
                                       {"token", lease.row.token},
                                       {"worker", lease.row.worker},
                                       {"from", end},
                                       {"to", shorter}});
        }
      }
      lease.deadline_ms = clock_->NowMillis() + options_.lease_ttl_ms;
      resp.mutable_lease()->set_token(lease.row.token);
      resp.mutable_lease()->set_deadline_unix_ms(lease.deadline_ms);
      resp.set_committed(slot.committed);
      resp.set_lease_end(lease_end);
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
      const int64_t end = ds.EndOf(it->second.row);
      const int64_t delta = end - slot.committed;
      ds.RecordCommit(it->second.row.worker, delta, clock_->NowMillis(), options_.rate_window_ms,
                      batch);
      slot.committed = end;
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
      for (uint64_t token : ds.LeasesOf(req.worker_id())) {
        const int64_t incarnation = ds.leases.at(token).row.incarnation;
        if (req.incarnation() == -1 || incarnation <= req.incarnation()) tokens.push_back(token);
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
  restored.layout = ds.layout;
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
    ds.unleased = staged.restored.unleased;
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
    resp.set_leases_shortened(ds.leases_shortened);
    // Records over the window up to now (idle time counts); 0 when idle longer.
    auto rate_of = [&](const WorkerStats& w) {
      if (w.samples.empty() || now - w.samples.back().first > options_.rate_window_ms) return 0.0;
      const auto& first = w.samples.front();
      const int64_t span = std::max<int64_t>(now - first.first, 1000);
      return static_cast<double>(w.samples.back().second - first.second) * 1000.0 /
             static_cast<double>(span);
    };
    double total_rate = 0;
    if (req.omit_workers()) {
      for (const auto& [name, w] : ds.workers) total_rate += rate_of(w);
    } else {
      std::unordered_map<std::string_view, int> in_flight;
      for (const auto& [token, lease] : ds.leases) ++in_flight[lease.row.worker];
      std::vector<const std::pair<const std::string, WorkerStats>*> workers;
      workers.reserve(ds.workers.size());
      for (const auto& entry : ds.workers) workers.push_back(&entry);
      std::sort(workers.begin(), workers.end(),
                [](const auto* a, const auto* b) { return a->first < b->first; });
      for (const auto* entry : workers) {
        const auto& [name, w] = *entry;
        v1::WorkerProgress* wp = resp.add_workers();
        wp->set_worker_id(name);
        wp->set_records_committed(w.records_committed);
        const auto flying = in_flight.find(name);
        wp->set_shards_in_flight(flying == in_flight.end() ? 0 : flying->second);
        wp->set_records_per_second(rate_of(w));
        total_rate += wp->records_per_second();
      }
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
    s.leases_shortened = ds->leases_shortened;
    out.push_back(s);
  }
  return out;
}

}  // namespace antdt::sharding
