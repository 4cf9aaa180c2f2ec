#include "backends/kubernetes/operator/observation.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "api/vocab/labels.h"
#include "api/vocab/vocab.h"

namespace antdt::kube_operator {

using kube::Json;

namespace {

std::string NodeOf(const Json& pod) { return kube::StringAt(pod, {"spec", "nodeName"}); }

// The records of a status list (status.workerInstances, status.serverInstances).
const Json& ListAt(const Json& job, const char* field) {
  static const Json kEmpty = Json::array();
  const Json& list = kube::At(job, {"status", field});
  return list.is_array() ? list : kEmpty;
}

std::vector<policy::WorkerState> ServerMembers(const Json& job, const std::vector<Json>& pods) {
  std::map<int32_t, int64_t> desired;
  for (const Json& entry : ListAt(job, "serverInstances")) {
    const reconciler::ServerInstance si = reconciler::ServerInstanceFromJson(entry);
    const std::optional<vocab::MemberId> id = vocab::ParseMemberId(si.id);
    if (id && id->role == vocab::Role::kParameterServer) desired[si.index] = si.incarnation;
  }
  std::map<int32_t, policy::WorkerState> servers;
  for (const Json& p : pods) {
    int32_t k = -1;
    if (kube::Label(p, vocab::kLabelRole) != "ps" || kube::Terminating(p) ||
        !absl::SimpleAtoi(kube::Label(p, vocab::kLabelReplicaIndex), &k)) {
      continue;
    }
    policy::WorkerState& ws = servers[k];
    ws.id = vocab::MemberName(vocab::Role::kParameterServer, k);
    ws.role = vocab::Role::kParameterServer;
    ws.incarnation = static_cast<int32_t>(desired[k]);
    const std::string incarnation = kube::Label(p, vocab::kLabelIncarnation);
    if ((incarnation.empty() ? "0" : incarnation) == std::to_string(desired[k])) {
      ws.alive = kube::PodPhase(p) == "Running";
      ws.node = NodeOf(p);
    }
  }
  std::vector<policy::WorkerState> out;
  for (auto& [k, ws] : servers) out.push_back(std::move(ws));
  return out;
}

}  // namespace

std::vector<policy::WorkerState> LoopMembers(const Json& job, const std::vector<Json>& pods) {
  std::vector<policy::WorkerState> members;
  for (const Json& entry : ListAt(job, "workerInstances")) {
    const reconciler::WorkerInstance inst = reconciler::WorkerInstanceFromJson(entry);
    policy::WorkerState& ws = members.emplace_back();
    ws.id = inst.id;
    ws.role = vocab::Role::kWorker;
    ws.local_batch_size = inst.local_batch_size;
    ws.accumulation_steps = inst.accumulation_steps;
    ws.incarnation = static_cast<int32_t>(inst.incarnation);
    ws.alive = false;  // until its desired pod is seen running
    for (const Json& p : pods) {
      if (kube::Label(p, vocab::kLabelWorkerId) == ws.id && !kube::Terminating(p) &&
          kube::StringAt(p, {"metadata", "name"}) == inst.pod &&
          kube::Label(p, vocab::kLabelIncarnation) == std::to_string(inst.incarnation) &&
          kube::PodPhase(p) == "Running") {
        ws.alive = true;
        ws.node = NodeOf(p);
      }
    }
  }
  for (policy::WorkerState& ps : ServerMembers(job, pods)) members.push_back(std::move(ps));
  return members;
}

std::vector<policy::NodeState> LoopNodes(const std::vector<Json>& pods,
                                         const std::vector<Json>& nodes,
                                         const std::vector<std::string>& marked) {
  std::map<std::string, bool> busy;
  for (const Json& p : pods) {
    const bool member =
        !kube::Label(p, vocab::kLabelWorkerId).empty() || kube::Label(p, vocab::kLabelRole) == "ps";
    if (!member || kube::Terminating(p)) continue;
    const std::string phase = kube::PodPhase(p);
    if (!NodeOf(p).empty() && (phase == "Running" || phase == "Pending")) busy[NodeOf(p)] = true;
  }
  std::vector<policy::NodeState> out;
  for (const Json& n : nodes) {
    policy::NodeState& ns = out.emplace_back();
    ns.name = kube::StringAt(n, {"metadata", "name"});
    ns.spare = !busy[ns.name] && kube::At(n, {"spec", "unschedulable"}) != Json(true);
    ns.chronic = std::find(marked.begin(), marked.end(), ns.name) != marked.end();
  }
  return out;
}

loop::Observation LoopObservation(const reconciler::Snapshot& snapshot,
                                  const std::vector<Json>& nodes,
                                  const v1::GetJobHealthResponse* health,
                                  std::vector<loop::ServerServing> serving) {
  loop::Observation now;
  now.now_ms = snapshot.now_ms;
  if (health != nullptr) now.health = *health;
  now.members = LoopMembers(snapshot.job, snapshot.pods);
  if (now.health) {
    now.nodes = LoopNodes(snapshot.pods, nodes, reconciler::AvoidedNodes(snapshot));
    now.remaining_seconds = snapshot.progress ? snapshot.progress->eta_seconds : -1;
  }
  now.servers_serving = std::move(serving);
  return now;
}

}  // namespace antdt::kube_operator
