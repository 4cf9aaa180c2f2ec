#include <algorithm>

#include "services/sharding/store.h"

namespace antdt::sharding {

const char* LeaseStateName(LeaseState state) {
  switch (state) {
    case LeaseState::kActive:
      return "active";
    case LeaseState::kCompleted:
      return "completed";
    case LeaseState::kExpired:
      return "expired";
    case LeaseState::kReleased:
      return "released";
    case LeaseState::kFenced:
      return "fenced by a restore";
  }
  return "unknown";
}

absl::StatusOr<StoreSnapshot> MemoryStore::Load() {
  std::lock_guard<std::mutex> lock(mu_);
  StoreSnapshot snap;
  for (const auto& [id, row] : datasets_) snap.datasets.push_back(row);
  for (const auto& [key, row] : shards_) snap.shards.push_back(row);
  for (const auto& [token, row] : leases_) {
    if (row.state == LeaseState::kActive) snap.active_leases.push_back(row);
  }
  std::sort(snap.active_leases.begin(), snap.active_leases.end(),
            [](const LeaseRow& a, const LeaseRow& b) { return a.token < b.token; });
  for (const auto& [key, row] : workers_) snap.workers.push_back(row);
  snap.next_token = next_token_;
  return snap;
}

uint64_t MemoryStore::Append(std::vector<Mutation> batch) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Mutation& m : batch) {
    if (auto* d = std::get_if<DatasetRow>(&m)) {
      datasets_[d->id] = std::move(*d);
    } else if (auto* s = std::get_if<ShardRow>(&m)) {
      shards_[{s->dataset_id, s->index}] = *s;
    } else if (auto* l = std::get_if<LeaseRow>(&m)) {
      leases_[l->token] = std::move(*l);
    } else if (auto* ds = std::get_if<DeleteShards>(&m)) {
      shards_.erase(shards_.lower_bound({ds->dataset_id, INT64_MIN}),
                    shards_.upper_bound({ds->dataset_id, INT64_MAX}));
    } else if (auto* dl = std::get_if<DeleteLeasesBefore>(&m)) {
      absl::erase_if(leases_, [&](const auto& kv) {
        return kv.second.dataset_id == dl->dataset_id && kv.second.epoch < dl->epoch;
      });
    } else if (auto* c = std::get_if<CheckpointRow>(&m)) {
      checkpoints_[{c->dataset_id, c->step}] = std::move(c->blob);
    } else if (auto* n = std::get_if<NextToken>(&m)) {
      next_token_ = n->value;
    } else if (auto* w = std::get_if<WorkerRow>(&m)) {
      auto it = workers_.find({w->dataset_id, w->worker});
      if (it == workers_.end()) {
        workers_.emplace(std::make_pair(w->dataset_id, w->worker), std::move(*w));
      } else {
        it->second.records_committed = w->records_committed;
      }
    }
  }
  return ++seq_;
}

uint64_t MemoryStore::LastSeq() const {
  std::lock_guard<std::mutex> lock(mu_);
  return seq_;
}

absl::StatusOr<std::optional<LeaseRow>> MemoryStore::ReadLease(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(token);
  if (it == leases_.end()) return std::optional<LeaseRow>();
  return std::optional<LeaseRow>(it->second);
}

absl::StatusOr<std::optional<std::string>> MemoryStore::ReadCheckpoint(int64_t dataset_id,
                                                                       int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = checkpoints_.find({dataset_id, step});
  if (it == checkpoints_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

size_t MemoryStore::ShardRowCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shards_.size();
}

}  // namespace antdt::sharding
