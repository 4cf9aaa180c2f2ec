// The control loop's input from one sync of the job controller, as data: a
// pure function of what the sync gathered (the job as stored, its pods, the
// cluster's nodes, the Monitor's view, the sharding service's progress, the
// moved parameter servers serving, the time), so that a test builds a sync's
// Observation with no API server, Monitor or clock.
#pragma once

#include <vector>

#include "antdt/v1/monitor.pb.h"
#include "backends/kubernetes/client/object.h"
#include "backends/kubernetes/reconciler/reconciler.h"
#include "core/loop/control_loop.h"

namespace antdt::kube_operator {

// The job's members: each worker of status.workerInstances (its desired
// incarnation, batch and accumulation steps; alive, with its node, while that
// incarnation's pod runs) and each parameter server with a pod (its desired
// incarnation from status.serverInstances, else 0; alive while that pod runs).
std::vector<policy::WorkerState> LoopMembers(const kube::Json& job,
                                             const std::vector<kube::Json>& pods);

// Every node of `nodes`, spare when no member of the job runs or waits there
// and it is not cordoned; chronic when the cluster's node memory marks it
// (`marked`: the node controller's marks as reconciler::AvoidedNodes gates
// them), so that antdt-nd weighs a slowdown there as lasting the rest of the
// job and restarts nothing onto it: the job's own memory knows only its own
// records, and a node is marked by two jobs'.
std::vector<policy::NodeState> LoopNodes(const std::vector<kube::Json>& pods,
                                         const std::vector<kube::Json>& nodes,
                                         const std::vector<std::string>& marked = {});

// The Observation of a sync: `snapshot` (job, pods, progress, now_ms), the
// cluster's `nodes`, the Monitor's view (`health`, null: nothing reported) and
// the moved servers serving. The nodes and the ETA only with a view (they are
// a decision's input only).
loop::Observation LoopObservation(const reconciler::Snapshot& snapshot,
                                  const std::vector<kube::Json>& nodes,
                                  const v1::GetJobHealthResponse* health,
                                  std::vector<loop::ServerServing> serving);

}  // namespace antdt::kube_operator
