// Node memory: what AntDT saw on each node across jobs, folded into an
// estimate with decay. A node's history outlives every job, so it lives here,
// apart from the Monitor (one job's windows) and the policies (one job's
// decisions). Pure: no I/O, no clock of its own (every call says when it is).
//
// Fed by the Monitor's StragglerRecords (Record): each record is an episode on
// its node (the same job, worker and start update the episode in place, as the
// Monitor re-sends a record while its episode goes on). It answers two
// questions (For):
//   - how long a slowdown that starts on this node is likely to last: the
//     decayed mean of its episodes' durations, blended with a prior;
//   - how strongly new or restarted work should avoid it: 1 - exp(-slow), where
//     slow sums each episode's confidence x (slowdown - 1), decayed by its age
//     with a half-life (a node seen slow once an hour ago counts less than one
//     seen slow in three jobs today).
//
// Bounded: at most max_episodes_per_node episodes are kept per node (older
// ones fold into decayed sums, so they still count), and at most max_nodes
// nodes (the one recorded least recently is forgotten). Serializable
// (v1::NodeMemoryState), so a backend can keep it.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "antdt/v1/monitor.pb.h"
#include "antdt/v1/node_memory.pb.h"

namespace antdt::nodememory {

struct Options {
  int64_t half_life_ms = 6LL * 3600 * 1000;  // an episode's weight halves every 6 h
  int32_t max_episodes_per_node = 16;
  int32_t max_nodes = 5000;
  // A slowdown on a node with no history lasts this long (s), and this much
  // evidence (in full-confidence episodes) weighs as much as the prior. 0: no
  // history says nothing, and mitigation by expected duration waits as long
  // as a slowdown has lasted (the break-even rule, policy/expected_duration.h).
  double prior_duration_seconds = 0;
  double prior_weight = 1;
  // A node is "chronically slow" when its slow weight is at least this (2: two
  // sure, fresh episodes twice as slow, or fewer and slower ones) and it was
  // slow in at least two jobs within one half-life: once is an incident, not
  // a node's nature.
  double chronic_slow = 2.0;

  absl::Status Validate() const;  // InvalidArgument naming the field
};

struct Estimate {
  double expected_duration_seconds = 0;  // of a slowdown that starts on the node now
  double slow = 0;                       // the decayed slow weight
  double avoid = 0;                      // 1 - exp(-slow): in [0, 1)
  bool chronic = false;                  // slow >= Options::chronic_slow, in 2 recent jobs or more
  int32_t episodes = 0;                  // kept
  int32_t jobs = 0;                      // distinct jobs among the kept episodes
  int32_t recent_jobs = 0;               // of those, jobs slow here within one half-life
  int64_t since_unix_ms = 0;             // the earliest kept episode's start (0: none)
  double max_slowdown = 0;               // among the kept episodes
};

class NodeMemory {
 public:
  static absl::StatusOr<NodeMemory> Create(Options options = {});
  // From a state State() returned (or a backend kept); InvalidArgument naming
  // the field when it is not one, nothing taken.
  static absl::StatusOr<NodeMemory> FromState(const v1::NodeMemoryState& state,
                                              Options options = {});

  // Folds a Monitor record in, as of `now_unix_ms`. InvalidArgument naming the
  // field (record.node, record.first_seen_unix_ms, ...), nothing changed, when
  // it is not a record of a slowdown.
  absl::Status Record(const v1::StragglerRecord& record, int64_t now_unix_ms);
  // What the memory says of `node` at `now_unix_ms` (a node never seen: the
  // prior duration, nothing to avoid).
  Estimate For(const std::string& node, int64_t now_unix_ms) const;

  // What is kept of `node` (null: nothing).
  const v1::NodeHistory* Find(const std::string& node) const;
  // The cause most of `node`'s kept episodes named, weighted by how much
  // slower each was and how fresh it is at `now_unix_ms` (CAUSE_UNKNOWN when
  // none named one).
  v1::Cause MainCause(const std::string& node, int64_t now_unix_ms) const;

  v1::NodeMemoryState State() const;
  size_t nodes() const { return nodes_.size(); }
  // The memory's own size: its histories and their index (an estimate of the
  // heap it holds, not counting the allocator's overhead).
  size_t ApproxBytes() const;
  const Options& options() const { return options_; }

 private:
  explicit NodeMemory(Options options) : options_(options) {}
  double Decay(int64_t age_ms) const;
  void Fold(v1::NodeHistory& h, const v1::NodeEpisode& e) const;
  void Touch(v1::NodeHistory& h, int64_t now_unix_ms);
  void Forget();

  Options options_;
  std::map<std::string, v1::NodeHistory> nodes_;
  std::set<std::pair<int64_t, std::string>> by_update_;  // (updated_unix_ms, node)
};

}  // namespace antdt::nodememory
