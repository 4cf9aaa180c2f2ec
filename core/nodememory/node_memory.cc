#include "core/nodememory/node_memory.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"

namespace antdt::nodememory {
namespace {

absl::Status Invalid(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
}

bool FiniteAtLeast(double v, double low) { return std::isfinite(v) && v >= low; }

// The episode's confidence from the slow windows that measured it: one window
// 0.5, three 0.75, more surer still.
double Confidence(int32_t windows) {
  const double n = std::max(1, windows);
  return n / (n + 1);
}

double DurationSeconds(const v1::NodeEpisode& e) {
  return static_cast<double>(std::max<int64_t>(0, e.end_unix_ms() - e.start_unix_ms())) / 1000.0;
}

// How much the episode says the node is slow: its confidence x how much slower
// it was, less 1 (a 4x slowdown says more than a 1.3x one; capped at 5x).
double SlowOf(const v1::NodeEpisode& e) {
  return e.confidence() * std::clamp(e.slowdown() - 1.0, 0.0, 4.0);
}

absl::Status ValidateRecord(const v1::StragglerRecord& r) {
  if (r.node().empty()) return Invalid("record.node", "must not be empty");
  if (r.first_seen_unix_ms() <= 0) {
    return Invalid("record.first_seen_unix_ms",
                   absl::StrCat("must be > 0, got ", r.first_seen_unix_ms()));
  }
  if (r.last_seen_unix_ms() < r.first_seen_unix_ms()) {
    return Invalid("record.last_seen_unix_ms",
                   absl::StrCat("must not be before first_seen_unix_ms (", r.first_seen_unix_ms(),
                                "), got ", r.last_seen_unix_ms()));
  }
  if (!FiniteAtLeast(r.max_sample_score(), 0) || !FiniteAtLeast(r.max_score(), 0)) {
    return Invalid("record.max_sample_score",
                   "max_sample_score and max_score must be finite numbers >= 0");
  }
  if (r.windows() < 0) {
    return Invalid("record.windows", absl::StrCat("must be >= 0, got ", r.windows()));
  }
  return absl::OkStatus();
}

absl::Status ValidateHistory(const v1::NodeHistory& h, size_t i) {
  const std::string at = absl::StrCat("nodes[", i, "]");
  if (h.node().empty()) return Invalid(at + ".node", "must not be empty");
  for (double v : {h.folded_slow(), h.folded_weight(), h.folded_seconds()}) {
    if (!FiniteAtLeast(v, 0)) {
      return Invalid(at + ".folded",
                     "folded_slow, folded_weight and folded_seconds must be "
                     "finite numbers >= 0");
    }
  }
  for (int k = 0; k < h.episodes_size(); ++k) {
    const v1::NodeEpisode& e = h.episodes(k);
    if (e.end_unix_ms() < e.start_unix_ms() || !FiniteAtLeast(e.slowdown(), 0) ||
        !(e.confidence() >= 0 && e.confidence() <= 1)) {
      return Invalid(absl::StrCat(at, ".episodes[", k, "]"),
                     "needs end >= start, slowdown >= 0 and confidence in [0, 1]");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Options::Validate() const {
  if (half_life_ms <= 0) return Invalid("half_life_ms", "must be > 0");
  if (max_episodes_per_node < 1) return Invalid("max_episodes_per_node", "must be >= 1");
  if (max_nodes < 1) return Invalid("max_nodes", "must be >= 1");
  if (!FiniteAtLeast(prior_duration_seconds, 0)) {
    return Invalid("prior_duration_seconds", "must be a finite number >= 0");
  }
  if (!(std::isfinite(prior_weight) && prior_weight > 0)) {
    return Invalid("prior_weight", "must be a finite number > 0");
  }
  if (!(std::isfinite(chronic_slow) && chronic_slow > 0)) {
    return Invalid("chronic_slow", "must be a finite number > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<NodeMemory> NodeMemory::Create(Options options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return NodeMemory(options);
}

absl::StatusOr<NodeMemory> NodeMemory::FromState(const v1::NodeMemoryState& state,
                                                 Options options) {
  absl::StatusOr<NodeMemory> memory = Create(options);
  if (!memory.ok()) return memory.status();
  for (int i = 0; i < state.nodes_size(); ++i) {
    const v1::NodeHistory& h = state.nodes(i);
    if (absl::Status s = ValidateHistory(h, static_cast<size_t>(i)); !s.ok()) return s;
    if (memory->nodes_.count(h.node()) > 0) {
      return Invalid(absl::StrCat("nodes[", i, "].node"), "\"" + h.node() + "\" appears twice");
    }
    v1::NodeHistory& kept = memory->nodes_[h.node()];
    kept = h;
    // A state kept under larger bounds: its oldest episodes and nodes fold or go.
    while (kept.episodes_size() > options.max_episodes_per_node) {
      memory->Fold(kept, kept.episodes(0));
      kept.mutable_episodes()->DeleteSubrange(0, 1);
    }
    memory->by_update_.insert({kept.updated_unix_ms(), kept.node()});
  }
  memory->Forget();
  return memory;
}

double NodeMemory::Decay(int64_t age_ms) const {
  if (age_ms <= 0) return 1;
  return std::exp2(-static_cast<double>(age_ms) / static_cast<double>(options_.half_life_ms));
}

// An episode no longer kept goes into the node's decayed sums.
void NodeMemory::Fold(v1::NodeHistory& h, const v1::NodeEpisode& e) const {
  const int64_t at = std::max(h.folded_unix_ms(), e.end_unix_ms());
  const double old = Decay(at - h.folded_unix_ms());
  const double fresh = Decay(at - e.end_unix_ms());
  h.set_folded_slow(h.folded_slow() * old + SlowOf(e) * fresh);
  h.set_folded_weight(h.folded_weight() * old + e.confidence() * fresh);
  h.set_folded_seconds(h.folded_seconds() * old + e.confidence() * fresh * DurationSeconds(e));
  h.set_folded_unix_ms(at);
}

void NodeMemory::Touch(v1::NodeHistory& h, int64_t now_unix_ms) {
  by_update_.erase({h.updated_unix_ms(), h.node()});  // none for a new node
  h.set_updated_unix_ms(std::max(h.updated_unix_ms(), now_unix_ms));
  by_update_.insert({h.updated_unix_ms(), h.node()});
}

// Over max_nodes: the nodes recorded least recently go.
void NodeMemory::Forget() {
  while (nodes_.size() > static_cast<size_t>(options_.max_nodes) && !by_update_.empty()) {
    const std::string node = by_update_.begin()->second;
    by_update_.erase(by_update_.begin());
    nodes_.erase(node);
  }
}

absl::Status NodeMemory::Record(const v1::StragglerRecord& r, int64_t now_unix_ms) {
  if (absl::Status s = ValidateRecord(r); !s.ok()) return s;
  const std::string job = r.namespace_().empty() ? r.job() : r.namespace_() + "/" + r.job();
  v1::NodeEpisode e;
  e.set_job(job);
  e.set_worker_id(r.worker_id());
  e.set_class_(r.class_());
  e.set_cause(r.cause());
  e.set_slowdown(std::max(r.max_sample_score(), r.max_score()));
  e.set_start_unix_ms(r.first_seen_unix_ms());
  e.set_end_unix_ms(r.last_seen_unix_ms());
  e.set_active(r.active());
  e.set_confidence(Confidence(r.windows()));

  auto [it, inserted] = nodes_.try_emplace(r.node());
  v1::NodeHistory& h = it->second;
  if (inserted) h.set_node(r.node());  // Touch files it in the index
  // The same episode again (the Monitor re-sends a record while it goes on).
  v1::NodeEpisode* same = nullptr;
  for (v1::NodeEpisode& kept : *h.mutable_episodes()) {
    if (kept.job() == e.job() && kept.worker_id() == e.worker_id() &&
        kept.start_unix_ms() == e.start_unix_ms()) {
      same = &kept;
    }
  }
  if (same != nullptr) {
    *same = e;
  } else {
    if (h.episodes_size() >= options_.max_episodes_per_node) {
      Fold(h, h.episodes(0));
      h.mutable_episodes()->DeleteSubrange(0, 1);
    }
    *h.add_episodes() = e;
    h.set_episodes_total(h.episodes_total() + 1);
  }
  Touch(h, now_unix_ms);
  Forget();
  return absl::OkStatus();
}

Estimate NodeMemory::For(const std::string& node, int64_t now_unix_ms) const {
  Estimate out;
  double weight = 0, seconds = 0;
  auto it = nodes_.find(node);
  if (it != nodes_.end()) {
    const v1::NodeHistory& h = it->second;
    const double folded = Decay(now_unix_ms - h.folded_unix_ms());
    out.slow = h.folded_slow() * folded;
    weight = h.folded_weight() * folded;
    seconds = h.folded_seconds() * folded;
    std::set<std::string> jobs, recent;
    for (const v1::NodeEpisode& e : h.episodes()) {
      // An episode still going on is as fresh as now.
      const double w = Decay(e.active() ? 0 : now_unix_ms - e.end_unix_ms());
      out.slow += SlowOf(e) * w;
      weight += e.confidence() * w;
      seconds += e.confidence() * w * DurationSeconds(e);
      jobs.insert(e.job());
      if (w >= 0.5) recent.insert(e.job());
      out.max_slowdown = std::max(out.max_slowdown, e.slowdown());
      if (out.since_unix_ms == 0 || e.start_unix_ms() < out.since_unix_ms) {
        out.since_unix_ms = e.start_unix_ms();
      }
    }
    out.episodes = h.episodes_size();
    out.jobs = static_cast<int32_t>(jobs.size());
    out.recent_jobs = static_cast<int32_t>(recent.size());
  }
  out.expected_duration_seconds =
      (seconds + options_.prior_weight * options_.prior_duration_seconds) /
      (weight + options_.prior_weight);
  out.avoid = 1 - std::exp(-out.slow);
  out.chronic = out.slow >= options_.chronic_slow && out.recent_jobs >= 2;
  return out;
}

const v1::NodeHistory* NodeMemory::Find(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

v1::Cause NodeMemory::MainCause(const std::string& node, int64_t now_unix_ms) const {
  std::map<v1::Cause, double> weight;
  if (const v1::NodeHistory* h = Find(node)) {
    for (const v1::NodeEpisode& e : h->episodes()) {
      if (e.cause() == v1::CAUSE_UNSPECIFIED || e.cause() == v1::CAUSE_UNKNOWN) continue;
      weight[e.cause()] += SlowOf(e) * Decay(e.active() ? 0 : now_unix_ms - e.end_unix_ms());
    }
  }
  v1::Cause best = v1::CAUSE_UNKNOWN;
  double most = 0;
  for (const auto& [cause, w] : weight) {
    if (w > most) {
      best = cause;
      most = w;
    }
  }
  return best;
}

v1::NodeMemoryState NodeMemory::State() const {
  v1::NodeMemoryState state;
  for (const auto& [node, h] : nodes_) *state.add_nodes() = h;
  return state;
}

size_t NodeMemory::ApproxBytes() const {
  size_t bytes = 0;
  for (const auto& [node, h] : nodes_) {
    // The map's node and the index's entry, then the history's own heap.
    bytes += sizeof(std::pair<const std::string, v1::NodeHistory>) + 4 * sizeof(void*) +
             node.capacity() + h.SpaceUsedLong() + sizeof(std::pair<int64_t, std::string>) +
             4 * sizeof(void*) + node.capacity();
  }
  return bytes;
}

}  // namespace antdt::nodememory
