// The Node controller of `antdt-operator`, beside the AntDTJob controller: a
// cluster that remembers slow nodes across jobs. Every job's straggler records
// (the Monitor's, handed over by the job controller on each sync) fold into one
// node memory (core/nodememory); a work queue of node names, fed by its own
// informer on Nodes and by those records, publishes what the memory says where
// Kubernetes users look:
//   - the Node condition AntDTSlowNode: True while the memory marks the node
//     chronically slow (NodeMemory's Estimate::chronic: slow in two jobs or
//     more within one half-life, and slow enough); reason = the cause most of
//     its episodes named (CPUThrottling, ...); message = the evidence (how much
//     slower, in how many jobs, since when). False once the memory decays; a
//     node never marked never gets the condition;
//   - the node's memory itself, as the annotation antdt.io/node-memory (its
//     NodeHistory in JSON), written with the condition through nodes/status:
//     the memory outlives the operator (a new leader restores it from the
//     Nodes at start), is bounded by the Node (deleted with it) and costs one
//     small write per changed node per persist interval;
//   - with `taint`, a PreferNoSchedule taint antdt.io/slow-node while marked
//     (removed when the memory decays);
//   - a Normal Event on the Node when its condition changes; the gauges
//     antdt_node_slow_score{node} and antdt_node_slow_episodes{node}.
// Under mode kRecommend the memory is kept and reported (gauges, log) and
// nothing is written to a Node. Without the RBAC grant (nodes/status patch, or
// nodes patch for the taint) the controller logs and records one Warning
// naming the missing permission on the job whose records marked the node,
// keeps the memory, and tries again only after `forbidden_retry_ms`.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "antdt/v1/monitor.pb.h"
#include "api/vocab/vocab.h"
#include "backends/kubernetes/client/api.h"
#include "backends/kubernetes/runtime/event_recorder.h"
#include "backends/kubernetes/runtime/informer.h"
#include "backends/kubernetes/runtime/workqueue.h"
#include "common/clock.h"
#include "core/nodememory/node_memory.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace antdt::kube_operator {

inline constexpr char kSlowNodeCondition[] = "AntDTSlowNode";
inline constexpr char kNodeMemoryAnnotation[] = "antdt.io/node-memory";
inline constexpr char kSlowNodeTaint[] = "antdt.io/slow-node";

// The cluster's Nodes, all of them (both controllers watch them), and a
// controller's rate-limited work queue `name` (its depth and latency in
// `registry`, which may be null).
std::unique_ptr<kube::Informer> NewNodesInformer(kube::Api* api);
std::unique_ptr<kube::WorkQueue> NewControllerQueue(const std::string& name,
                                                    prometheus::Registry* registry);

struct NodeControllerOptions {
  // kAct: the condition, the memory annotation (and the taint) are written;
  // kRecommend: kept and reported only.
  vocab::Mode mode = vocab::Mode::kRecommend;
  bool taint = false;  // with kAct: PreferNoSchedule while the node is marked
  nodememory::Options memory;
  int64_t resync_ms = 30'000;            // a remembered node is looked at again (decay)
  int64_t persist_interval_ms = 30'000;  // at most one memory write per node
  int64_t forbidden_retry_ms = 600'000;  // after a 403, writes wait this long
  std::string identity;                  // this replica, for Events
  const Clock* clock = &RealClock::Get();
};

class NodeController {
 public:
  // `api` is borrowed; `registry` may be null (no gauges).
  NodeController(kube::Api* api, NodeControllerOptions options, prometheus::Registry* registry);
  ~NodeController();
  NodeController(const NodeController&) = delete;
  NodeController& operator=(const NodeController&) = delete;

  // Starts the informer, restores the memory from the Nodes' annotations once
  // it synced, then the worker; false when the sync timed out (restored from
  // what was listed by then: nothing).
  bool Start(int64_t sync_timeout_ms);
  void Stop();
  bool HasSynced() const;
  vocab::Mode mode() const { return options_.mode; }

  // Folds `health`'s straggler records in (they are of the AntDTJob `job`);
  // the nodes whose memory changed are looked at soon. Thread-safe.
  void Record(const kube::Json& job, const v1::GetJobHealthResponse& health);
  // The nodes the memory marked when each was last looked at (on a change,
  // and every resync_ms), sorted: what the job controller's every sync reads,
  // without evaluating every remembered node. Thread-safe.
  std::vector<std::string> Marked() const;
  // The informer on the cluster's Nodes (the job controller lists them too:
  // one cache of the Nodes, not two). Started and stopped by this controller.
  kube::Informer* nodes() const { return nodes_.get(); }
  // What the memory says of `node` now. Thread-safe.
  nodememory::Estimate For(const std::string& node) const;

  // One sync of `node` now, on the calling thread (tests).
  absl::Status SyncForTest(const std::string& node) { return Sync(node); }
  // Restores the memory from the informer's Nodes (Start does; tests).
  void RestoreForTest() { Restore(); }

 private:
  absl::Status Sync(const std::string& node);
  void Worker();
  void Restore();
  // The node's memory as Sync read it, to write as the annotation.
  struct MemoryWrite {
    std::string json;            // its NodeHistory; "" when none (or not Act)
    int64_t episodes_total = 0;  // that history's, not the memory's by the time it is written
    bool due = false;            // changed since the last write, or the interval passed
  };
  // The write of the node's condition and memory (nodes/status) as the memory
  // says now (`reason`/`message` of the condition); `current` becomes the
  // Node as written.
  absl::Status Publish(kube::Json& current, const nodememory::Estimate& e,
                       const std::string& reason, const std::string& message,
                       const MemoryWrite& memory);
  // The taint (nodes) on `current` while `want`, removed once not.
  absl::Status Taint(const kube::Json& current, bool want);
  // A 403: logged, one Warning on the job that marked `node`, writes paused.
  void Forbidden(const std::string& node, const std::string& permission, const absl::Status& error);
  void SetGauges(const std::string& node, const nodememory::Estimate& e);

  kube::Api* const api_;
  const NodeControllerOptions options_;
  std::unique_ptr<kube::Informer> nodes_;
  std::unique_ptr<kube::WorkQueue> queue_;
  std::unique_ptr<kube::EventRecorder> recorder_;
  std::thread worker_;
  std::atomic<bool> stopping_{false};

  mutable std::mutex mu_;
  nodememory::NodeMemory memory_;
  std::set<std::string> marked_;                    // as each node was last looked at
  std::map<std::string, kube::Json> marked_by_;     // node -> the job of its latest record
  std::map<std::string, int64_t> persisted_at_;     // node -> when its memory was last written
  std::map<std::string, int32_t> persisted_total_;  // node -> episodes_total then
  std::map<std::string, int64_t> forbidden_until_;  // permission -> writes paused until
  std::map<std::string, bool> warned_;              // permission -> its Warning recorded

  prometheus::Family<prometheus::Gauge>* slow_score_ = nullptr;
  prometheus::Family<prometheus::Gauge>* episodes_ = nullptr;
};

}  // namespace antdt::kube_operator
