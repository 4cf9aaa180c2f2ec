#include "backends/kubernetes/operator/node_controller.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::kube_operator {

using kube::Json;

namespace {

constexpr char kController[] = "antdtnode";

// The index of the entry of `list` whose `key` is `value` (a Node's condition
// by type, its taint by key), or -1.
int IndexOf(const Json& list, const char* key, const std::string& value) {
  if (!list.is_array()) return -1;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].value(key, "") == value) return static_cast<int>(i);
  }
  return -1;
}

// "/metadata/annotations/antdt.io~1node-memory": a key as a JSON pointer token.
std::string PointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

// The evidence of a marked node, as the condition's message says it: what
// changes only with a new record (not the weight, which decays every second),
// so that a marked node costs a write per new episode, not per look.
std::string Evidence(const nodememory::Estimate& e) {
  return absl::StrFormat(
      "up to %.2fx slower than its peers in %d recent job%s (%d episode%s "
      "kept) since %s",
      e.max_slowdown, e.recent_jobs, e.recent_jobs == 1 ? "" : "s", e.episodes,
      e.episodes == 1 ? "" : "s", kube::FormatTime(e.since_unix_ms));
}

}  // namespace

std::unique_ptr<kube::Informer> NewNodesInformer(kube::Api* api) {
  kube::InformerOptions io;
  io.name = "nodes";
  return std::make_unique<kube::Informer>(api, kube::NodesResource(), "", kube::ListOptions{}, io);
}

std::unique_ptr<kube::WorkQueue> NewControllerQueue(const std::string& name,
                                                    prometheus::Registry* registry) {
  kube::WorkQueueOptions qo;
  qo.name = name;
  qo.registry = registry;
  return std::make_unique<kube::WorkQueue>(qo);
}

NodeController::NodeController(kube::Api* api, NodeControllerOptions options,
                               prometheus::Registry* registry)
    : api_(api),
      options_(std::move(options)),
      memory_(*nodememory::NodeMemory::Create(options_.memory)) {
  nodes_ = NewNodesInformer(api_);
  queue_ = NewControllerQueue(kController, registry);
  recorder_ = std::make_unique<kube::EventRecorder>(api_, "antdt-operator", options_.identity);
  kube::Handlers handlers;
  // A node the memory knows is looked at when it changes (a condition removed
  // by hand comes back); one it does not is left alone.
  auto enqueue = [this](const Json& n) {
    const std::string name = kube::StringAt(n, {"metadata", "name"});
    std::lock_guard<std::mutex> lock(mu_);
    if (memory_.Find(name) != nullptr) queue_->Add(name);
  };
  handlers.on_add = enqueue;
  handlers.on_update = [enqueue](const Json&, const Json& n) { enqueue(n); };
  nodes_->AddHandler(handlers);
  if (registry != nullptr) {
    slow_score_ = &prometheus::BuildGauge()
                       .Name("antdt_node_slow_score")
                       .Help(
                           "How strongly AntDT's node memory says new work should avoid the "
                           "node: 1 - exp(-slow weight), in [0, 1)")
                       .Register(*registry);
    episodes_ = &prometheus::BuildGauge()
                     .Name("antdt_node_slow_episodes")
                     .Help("Straggler episodes AntDT's node memory keeps for the node")
                     .Register(*registry);
  }
}

NodeController::~NodeController() { Stop(); }

bool NodeController::Start(int64_t sync_timeout_ms) {
  nodes_->Start();
  const bool synced = nodes_->WaitForSync(sync_timeout_ms);
  Restore();
  worker_ = std::thread([this] { Worker(); });
  return synced;
}

void NodeController::Stop() {
  if (stopping_.exchange(true)) return;
  queue_->ShutDown();
  if (worker_.joinable()) worker_.join();
  nodes_->Stop();
  recorder_->Shutdown();
}

bool NodeController::HasSynced() const { return nodes_->HasSynced(); }

void NodeController::Restore() {
  v1::NodeMemoryState state;
  for (const Json& n : nodes_->List()) {
    const std::string kept = kube::StringAt(n, {"metadata", "annotations", kNodeMemoryAnnotation});
    if (kept.empty()) continue;
    const std::string name = kube::StringAt(n, {"metadata", "name"});
    v1::NodeHistory h;
    const auto parsed = google::protobuf::util::JsonStringToMessage(kept, &h);
    if (!parsed.ok() || h.node() != name) {
      // Bad input loses nothing else: this node starts with no memory.
      LogEvent("operator", {{"event", "node_memory_unreadable"},
                            {"node", name},
                            {"annotation", kNodeMemoryAnnotation},
                            {"error", parsed.ok() ? "it names node \"" + h.node() + "\""
                                                  : std::string(parsed.message())}});
      continue;
    }
    *state.add_nodes() = std::move(h);
  }
  absl::StatusOr<nodememory::NodeMemory> restored =
      nodememory::NodeMemory::FromState(state, options_.memory);
  if (!restored.ok()) {
    LogEvent("operator", {{"event", "node_memory_unreadable"},
                          {"annotation", kNodeMemoryAnnotation},
                          {"error", restored.status().ToString()}});
    return;
  }
  const int64_t now = options_.clock->NowMillis();
  std::lock_guard<std::mutex> lock(mu_);
  memory_ = *std::move(restored);
  for (const v1::NodeHistory& h : state.nodes()) {
    persisted_total_[h.node()] = h.episodes_total();
    if (memory_.For(h.node(), now).chronic) marked_.insert(h.node());
    queue_->Add(h.node());
  }
  LogEvent("operator", {{"event", "node_memory_restored"}, {"nodes", state.nodes_size()}});
}

void NodeController::Record(const Json& job, const v1::GetJobHealthResponse& health) {
  if (health.stragglers().empty()) return;  // most syncs of most jobs
  const int64_t now = options_.clock->NowMillis();
  const Json ref = {{"apiVersion", kube::StringAt(job, {"apiVersion"})},
                    {"kind", kube::StringAt(job, {"kind"})},
                    {"metadata",
                     {{"name", kube::StringAt(job, {"metadata", "name"})},
                      {"namespace", kube::StringAt(job, {"metadata", "namespace"})},
                      {"uid", kube::StringAt(job, {"metadata", "uid"})}}}};
  std::lock_guard<std::mutex> lock(mu_);
  for (v1::StragglerRecord r : health.stragglers()) {
    if (r.node().empty()) continue;
    // Fresh as its latest slow window, not as now: the Monitor re-sends a
    // record while it goes on (its end moves), and the last one a job sends
    // before it finishes or its worker moves may still say active. Kept
    // active, that episode would never decay.
    r.set_active(false);
    const v1::NodeHistory* before = memory_.Find(r.node());
    const int32_t total = before ? before->episodes_total() : 0;
    const int64_t updated = before ? before->updated_unix_ms() : 0;
    if (!memory_.Record(r, std::max(now, r.last_seen_unix_ms())).ok()) continue;
    const v1::NodeHistory* after = memory_.Find(r.node());
    if (after != nullptr &&
        (after->episodes_total() != total || after->updated_unix_ms() != updated)) {
      marked_by_[r.node()] = ref;
      queue_->Add(r.node());
    }
  }
}

std::vector<std::string> NodeController::Marked() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {marked_.begin(), marked_.end()};
}

nodememory::Estimate NodeController::For(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  return memory_.For(node, options_.clock->NowMillis());
}

void NodeController::Worker() {
  std::string node;
  while (queue_->Get(&node)) {
    absl::Status s = Sync(node);
    if (!s.ok()) {
      LogEvent("operator",
               {{"event", "node_sync_failed"}, {"node", node}, {"error", s.ToString()}});
      queue_->AddRateLimited(node);
    } else {
      queue_->Forget(node);
      std::lock_guard<std::mutex> lock(mu_);
      if (memory_.Find(node) != nullptr) queue_->AddAfter(node, options_.resync_ms);
    }
    queue_->Done(node);
  }
}

void NodeController::SetGauges(const std::string& node, const nodememory::Estimate& e) {
  if (slow_score_ == nullptr) return;
  const std::map<std::string, std::string> labels = {{"node", node}};
  if (e.episodes == 0 && e.slow == 0) {
    if (slow_score_->Has(labels)) slow_score_->Remove(&slow_score_->Add(labels));
    if (episodes_->Has(labels)) episodes_->Remove(&episodes_->Add(labels));
    return;
  }
  slow_score_->Add(labels).Set(e.avoid);
  episodes_->Add(labels).Set(e.episodes);
}

absl::Status NodeController::Sync(const std::string& node) {
  const int64_t now = options_.clock->NowMillis();
  nodememory::Estimate e;
  std::string reason;
  MemoryWrite memory;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e = memory_.For(node, now);
    if (e.chronic) {
      marked_.insert(node);
    } else {
      marked_.erase(node);
    }
    reason = vocab::CauseReason(memory_.MainCause(node, now));
    const v1::NodeHistory* h = memory_.Find(node);
    if (h != nullptr && options_.mode == vocab::Mode::kAct) {  // only Act writes it
      google::protobuf::util::JsonPrintOptions po;
      po.preserve_proto_field_names = true;
      (void)google::protobuf::util::MessageToJsonString(*h, &memory.json, po);
      memory.episodes_total = h->episodes_total();
      auto at = persisted_at_.find(node);
      memory.due = persisted_total_[node] != h->episodes_total() ||
                   (at == persisted_at_.end() || now - at->second >= options_.persist_interval_ms);
    }
  }
  SetGauges(node, e);
  if (options_.mode != vocab::Mode::kAct) return absl::OkStatus();
  std::optional<Json> current = nodes_->Get(node);
  if (!current) return absl::OkStatus();  // gone: its memory goes with the next restore
  const std::string message = Evidence(e);
  RETURN_IF_ERROR(Publish(*current, e, reason, message, memory));
  if (options_.taint) RETURN_IF_ERROR(Taint(*current, e.chronic));
  return absl::OkStatus();
}

absl::Status NodeController::Publish(Json& current, const nodememory::Estimate& e,
                                     const std::string& reason, const std::string& message,
                                     const MemoryWrite& memory) {
  const std::string node = kube::StringAt(current, {"metadata", "name"});
  const int64_t now = options_.clock->NowMillis();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto paused = forbidden_until_.find("nodes/status");
    if (paused != forbidden_until_.end() && now < paused->second) return absl::OkStatus();
  }
  const int at = IndexOf(kube::At(current, {"status", "conditions"}), "type", kSlowNodeCondition);
  const Json* had = at >= 0 ? &kube::At(current, {"status", "conditions"})[at] : nullptr;
  const std::string had_status = had ? had->value("status", "") : "";
  Json ops = Json::array();
  // The condition: True while marked; False once a marked node's memory decayed;
  // none for a node never marked.
  std::optional<Json> condition;
  if (e.chronic) {
    condition = Json{
        {"type", kSlowNodeCondition}, {"status", "True"}, {"reason", reason}, {"message", message}};
  } else if (had_status == "True") {
    condition = Json{{"type", kSlowNodeCondition},
                     {"status", "False"},
                     {"reason", "MemoryDecayed"},
                     {"message", absl::StrFormat("its slowdowns' weight decayed to %.2f", e.slow)}};
  }
  const bool changed = condition && (had_status != (*condition)["status"] ||
                                     had->value("reason", "") != (*condition)["reason"] ||
                                     had->value("message", "") != (*condition)["message"]);
  if (changed) {
    const std::string stamp = kube::FormatTime(now);
    (*condition)["lastHeartbeatTime"] = stamp;
    (*condition)["lastTransitionTime"] = had && had_status == (*condition)["status"]
                                             ? had->value("lastTransitionTime", stamp)
                                             : stamp;
    if (had != nullptr) {
      const std::string path = absl::StrCat("/status/conditions/", at);
      ops.push_back({{"op", "test"}, {"path", path + "/type"}, {"value", kSlowNodeCondition}});
      ops.push_back({{"op", "replace"}, {"path", path}, {"value", *condition}});
    } else if (kube::At(current, {"status", "conditions"}).is_array()) {
      ops.push_back({{"op", "add"}, {"path", "/status/conditions/-"}, {"value", *condition}});
    } else if (!kube::At(current, {"status"}).is_object()) {
      ops.push_back({{"op", "add"},
                     {"path", "/status"},
                     {"value", {{"conditions", Json::array({*condition})}}}});
    } else {
      ops.push_back(
          {{"op", "add"}, {"path", "/status/conditions"}, {"value", Json::array({*condition})}});
    }
  }
  const bool memory_changed =
      memory.due && !memory.json.empty() &&
      kube::StringAt(current, {"metadata", "annotations", kNodeMemoryAnnotation}) != memory.json;
  if (memory_changed) {
    if (!kube::At(current, {"metadata", "annotations"}).is_object()) {
      ops.push_back({{"op", "add"}, {"path", "/metadata/annotations"}, {"value", Json::object()}});
    }
    ops.push_back({{"op", "add"},
                   {"path", "/metadata/annotations/" + PointerToken(kNodeMemoryAnnotation)},
                   {"value", memory.json}});
  }
  if (ops.empty()) return absl::OkStatus();
  // On the Node as the informer showed it: a write the informer has not shown
  // yet fails the test (422) and the node is looked at again, never added twice.
  ops.insert(ops.begin(), Json{{"op", "test"},
                               {"path", "/metadata/resourceVersion"},
                               {"value", kube::ResourceVersionOf(current)}});
  absl::StatusOr<Json> written =
      api_->Patch(kube::NodesResource(), "", node, ops, kube::PatchType::kJson, "status");
  if (!written.ok()) {
    if (kube::HttpCode(written.status()) == 403) {
      Forbidden(node, "nodes/status", written.status());
      return absl::OkStatus();
    }
    return written.status();
  }
  const Json before = std::exchange(current, *std::move(written));  // the taint's base
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (memory_changed) {
      persisted_at_[node] = now;
      // What was written, not what the memory holds now: a record that came
      // in since Sync read it is still to be written (its node is queued again).
      persisted_total_[node] = memory.episodes_total;
    }
  }
  if (changed && had_status != (*condition)["status"]) {
    const bool slow = (*condition)["status"] == "True";
    recorder_->Record(before, "Normal", slow ? "AntDTSlowNode" : "AntDTNodeRecovered",
                      slow ? absl::StrCat("AntDT marks the node slow (", reason, "): ", message)
                           : absl::StrCat("AntDT no longer marks the node slow: ",
                                          (*condition)["message"].get<std::string>()));
    LogEvent("operator", {{"event", "node_condition"},
                          {"node", node},
                          {"status", (*condition)["status"].get<std::string>()},
                          {"reason", (*condition)["reason"].get<std::string>()}});
  }
  return absl::OkStatus();
}

absl::Status NodeController::Taint(const Json& current, bool want) {
  const std::string node = kube::StringAt(current, {"metadata", "name"});
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto paused = forbidden_until_.find("nodes");
    if (paused != forbidden_until_.end() && options_.clock->NowMillis() < paused->second) {
      return absl::OkStatus();
    }
  }
  const int at = IndexOf(kube::At(current, {"spec", "taints"}), "key", kSlowNodeTaint);
  Json ops = Json::array();
  if (want && at < 0) {
    const Json taint = {{"key", kSlowNodeTaint}, {"value", "true"}, {"effect", "PreferNoSchedule"}};
    if (kube::At(current, {"spec", "taints"}).is_array()) {
      ops.push_back({{"op", "add"}, {"path", "/spec/taints/-"}, {"value", taint}});
    } else if (!kube::At(current, {"spec"}).is_object()) {
      ops.push_back(
          {{"op", "add"}, {"path", "/spec"}, {"value", {{"taints", Json::array({taint})}}}});
    } else {
      ops.push_back({{"op", "add"}, {"path", "/spec/taints"}, {"value", Json::array({taint})}});
    }
  } else if (!want && at >= 0) {
    const std::string path = absl::StrCat("/spec/taints/", at);
    ops.push_back({{"op", "test"}, {"path", path + "/key"}, {"value", kSlowNodeTaint}});
    ops.push_back({{"op", "remove"}, {"path", path}});
  }
  if (ops.empty()) return absl::OkStatus();
  ops.insert(ops.begin(), Json{{"op", "test"},
                               {"path", "/metadata/resourceVersion"},
                               {"value", kube::ResourceVersionOf(current)}});
  absl::StatusOr<Json> written =
      api_->Patch(kube::NodesResource(), "", node, ops, kube::PatchType::kJson);
  if (!written.ok()) {
    if (kube::HttpCode(written.status()) == 403) {
      Forbidden(node, "nodes", written.status());
      return absl::OkStatus();
    }
    return written.status();
  }
  LogEvent("operator", {{"event", want ? "node_tainted" : "node_untainted"},
                        {"node", node},
                        {"taint", kSlowNodeTaint}});
  return absl::OkStatus();
}

void NodeController::Forbidden(const std::string& node, const std::string& permission,
                               const absl::Status& error) {
  Json job;
  bool warn = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    forbidden_until_[permission] = options_.clock->NowMillis() + options_.forbidden_retry_ms;
    warn = !warned_[permission];
    warned_[permission] = true;
    auto it = marked_by_.find(node);
    if (it != marked_by_.end()) job = it->second;
  }
  LogEvent("operator", {{"event", "node_write_forbidden"},
                        {"node", node},
                        {"permission", "patch " + permission},
                        {"error", error.ToString()}});
  if (!warn || job.is_null()) return;
  recorder_->Record(
      job, "Warning", "NodeMemoryForbidden",
      absl::StrCat("AntDT's node memory holds this job's slowdowns on node ", node,
                   " but cannot publish them on the Node: the operator may not patch ", permission,
                   " (grant it with the chart's nodeMemory settings); the memory is kept and "
                   "the job goes on"));
}

}  // namespace antdt::kube_operator
