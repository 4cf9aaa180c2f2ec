#include "backends/kubernetes/reconciler/reconciler.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "backends/kubernetes/client/object.h"
#include "backends/kubernetes/reconciler/pod_defaults.h"
#include "backends/kubernetes/reconciler/reconciler_internal.h"
#include "common/credential.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/jobconfig/worker_env.h"

namespace antdt::reconciler {

// ---- Public helpers ----

std::string ShardingName(const std::string& job) { return job + "-sharding"; }
std::string PsServiceName(const std::string& job) { return job + "-ps"; }
std::string PsPodName(const std::string& job, int32_t k, int64_t incarnation) {
  return incarnation == 0 ? absl::StrCat(job, "-ps-", k)
                          : absl::StrCat(job, "-ps-", k, "-", incarnation);
}
std::string WorkersServiceName(const std::string& job) { return job + "-workers"; }
std::string WorkerHostname(const std::string& job, int32_t index) {
  return absl::StrCat(job, "-worker-", index);
}
std::string WorkerPodName(const std::string& job, int32_t index) {
  return WorkerHostname(job, index);
}
std::string TokenSecretName(const std::string& job, const std::string& uid) {
  return uid.empty() ? job + "-token" : absl::StrCat(job, "-token-", uid);
}

Json ToJson(const WorkerInstance& w) {
  Json j = {
      {"id", w.id},   {"incarnation", w.incarnation},         {"node", w.node},
      {"pod", w.pod}, {"localBatchSize", w.local_batch_size}, {"excludedNodes", w.excluded_nodes}};
  if (w.accumulation_steps > 1) j["accumulationSteps"] = w.accumulation_steps;
  if (w.resumes > 0) {
    j["resumes"] = w.resumes;
    j["resumed"] = w.resumed;
  }
  if (w.retired) j["retired"] = true;
  return j;
}

namespace {

// A decision's evidence as its status record and its Event say it: none for a
// rebalance, whose figures are its subject's decision's.
std::string RecordedEvidence(const policy::Decision& d) {
  return policy::IsRebalance(d) ? "" : policy::EvidenceLine(d.evidence);
}

}  // namespace

Json DecisionRecord(const policy::Decision& d, int64_t now_ms) {
  Json j = {{"time", kube::FormatTime(d.at_ms != 0 ? d.at_ms : now_ms)},
            {"action", policy::ActionName(d.action)},
            {"worker", policy::ActionTarget(d.action)}};
  if (const auto* k = std::get_if<policy::KillRestart>(&d.action)) {
    j["fromNode"] = k->from_node;
    j["toNode"] = k->to_node;
  } else if (const auto* a = std::get_if<policy::AdjustBatchSize>(&d.action)) {
    j["localBatchSize"] = a->local_batch_size;
    if (a->accumulation_steps > 1) j["accumulationSteps"] = a->accumulation_steps;
  }
  j["rule"] = d.rule;
  if (!d.subject.empty()) j["subject"] = d.subject;
  j["reason"] = d.reason;
  j["evidence"] = RecordedEvidence(d);
  return j;
}

std::optional<policy::Decision> DecisionFromRecord(const Json& entry, const manifest::Job& spec) {
  const std::optional<vocab::ActionKind> kind = vocab::ParseActionKind(GetString(entry, "action"));
  if (!kind) return std::nullopt;
  policy::Decision d;
  d.at_ms = kube::ParseTime(GetString(entry, "time")).value_or(0);
  d.policy = spec.straggler_policy.name;
  d.rule = GetString(entry, "rule");
  d.reason = GetString(entry, "reason");
  for (absl::string_view pair : absl::StrSplit(GetString(entry, "evidence"), ' ')) {
    const size_t eq = pair.find('=');
    double value = 0;
    if (eq != absl::string_view::npos && absl::SimpleAtod(pair.substr(eq + 1), &value)) {
      d.evidence[std::string(pair.substr(0, eq))] = value;
    }
  }
  const std::string worker = GetString(entry, "worker");
  switch (*kind) {
    case vocab::ActionKind::kKillRestart:
      d.action =
          policy::KillRestart{worker, GetString(entry, "fromNode"), GetString(entry, "toNode"),
                              d.at_ms + spec.straggler_policy.cooldown_ms};
      d.subject = worker;
      break;
    case vocab::ActionKind::kAdjustBatchSize:
      d.action = policy::AdjustBatchSize{
          worker, GetInt(entry, "localBatchSize", 0),
          static_cast<int32_t>(std::max<int64_t>(1, GetInt(entry, "accumulationSteps", 1)))};
      if (!d.evidence.empty()) d.subject = worker;
      break;
    case vocab::ActionKind::kBackupWorkers:
      d.action = policy::UseBackupWorkers{spec.straggler_policy.backup_workers};
      break;
  }
  if (entry.contains("subject")) d.subject = GetString(entry, "subject");
  return d;
}

Json ToJson(const ServerInstance& s) {
  return {{"id", s.id},
          {"incarnation", s.incarnation},
          {"node", s.node},
          {"excludedNodes", s.excluded_nodes}};
}

ServerInstance ServerInstanceFromJson(const Json& j) {
  ServerInstance s;
  s.id = GetString(j, "id");
  const std::optional<vocab::MemberId> id = vocab::ParseMemberId(s.id);
  if (id && id->role == vocab::Role::kParameterServer) s.index = id->index;
  s.incarnation = GetInt(j, "incarnation", 0);
  s.node = GetString(j, "node");
  const Json& excluded = Get(j, "excludedNodes");
  if (excluded.is_array()) {
    for (const Json& e : excluded) {
      if (e.is_string()) s.excluded_nodes.push_back(e.get<std::string>());
    }
  }
  return s;
}

WorkerInstance WorkerInstanceFromJson(const Json& j) {
  WorkerInstance w;
  w.id = GetString(j, "id");
  const std::optional<vocab::MemberId> id = vocab::ParseMemberId(w.id);
  if (id && id->role == vocab::Role::kWorker) w.index = id->index;
  w.incarnation = GetInt(j, "incarnation", 0);
  w.node = GetString(j, "node");
  w.pod = GetString(j, "pod");
  w.local_batch_size = static_cast<int32_t>(GetInt(j, "localBatchSize", 0));
  w.accumulation_steps =
      std::max<int32_t>(1, static_cast<int32_t>(GetInt(j, "accumulationSteps", 1)));
  w.resumes = GetInt(j, "resumes", 0);
  w.resumed = Get(j, "resumed") == true;
  w.retired = Get(j, "retired") == true;
  const Json& excluded = Get(j, "excludedNodes");
  if (excluded.is_array()) {
    for (const Json& e : excluded) {
      if (e.is_string()) w.excluded_nodes.push_back(e.get<std::string>());
    }
  }
  return w;
}

// ---- Step 1: the records of the previous status ----

// The worker records of a status list, by index.
std::map<int32_t, WorkerInstance> RecordsOf(const Json& list) {
  std::map<int32_t, WorkerInstance> by_index;
  if (!list.is_array()) return by_index;
  for (const Json& j : list) {
    WorkerInstance w = WorkerInstanceFromJson(j);
    if (!w.id.empty()) by_index[w.index] = std::move(w);
  }
  return by_index;
}

void NextIncarnation(WorkerInstance& w);

// Each worker's record from the previous status, or a fresh one; its desired
// pod named after its incarnation. On a job that has recorded its workers and
// has not finished, spec.workers.replicas may have changed: records beyond it
// move to the removed, and a worker added again continues from its removed
// record as its next incarnation (the sharding service refuses an older one).
void LoadInstances(const Pass& pass, Records& r) {
  std::map<int32_t, WorkerInstance> recorded = RecordsOf(Get(pass.old_status, "workerInstances"));
  std::map<int32_t, WorkerInstance> removed = RecordsOf(Get(pass.old_status, "removedWorkers"));
  if (r.Finished() && !recorded.empty()) {  // as it finished
    for (auto& [index, w] : recorded) r.instances.push_back(std::move(w));
    for (auto& [index, w] : removed) r.removed.push_back(std::move(w));
    return;
  }
  for (int32_t i = 0; i < pass.n; ++i) {
    WorkerInstance w;
    if (auto it = recorded.find(i); it != recorded.end()) {
      w = it->second;
    } else if (auto gone = removed.find(i); gone != removed.end()) {
      w = gone->second;
      removed.erase(gone);
      NextIncarnation(w);
      ++w.resumes;
      w.resumed = true;
      w.retired = false;
      r.added.push_back(w.id);
    } else {
      w.id = vocab::MemberName(vocab::Role::kWorker, i);
      w.local_batch_size = static_cast<int32_t>(jobconfig::InitialLocalBatch(pass.spec, i));
      if (!recorded.empty()) r.added.push_back(w.id);
    }
    w.index = i;
    w.pod = WorkerPodName(pass.job, i);
    r.instances.push_back(std::move(w));
  }
  for (auto& [index, w] : recorded) {
    if (index < pass.n) continue;
    r.newly_removed.push_back(w.id);
    removed[index] = std::move(w);
  }
  for (auto& [index, w] : removed) r.removed.push_back(std::move(w));
  if (!r.added.empty() || !r.newly_removed.empty()) {
    r.scaled_from = static_cast<int32_t>(recorded.size());
  }
}

Records LoadRecords(const Pass& pass) {
  const Json& old = pass.old_status;
  Records r;
  r.last_actions = Get(old, "lastActions").is_array() ? Get(old, "lastActions") : Json::array();
  r.failures = GetInt(Get(old, "workers"), "failed", 0);
  r.dataset_created = pass.o.dataset_ready || Get(old, "datasetCreated") == true;
  if (!GetString(old, "completionTime").empty()) {
    r.completion = kube::ParseTime(GetString(old, "completionTime"));
  }
  const Json* old_failed = FindCondition(old, "Failed");
  r.was_succeeded = ConditionTrue(old, "Succeeded");
  r.succeeded = r.was_succeeded;
  r.failed = old_failed != nullptr && GetString(*old_failed, "status") == "True" &&
             GetString(*old_failed, "reason") != "InvalidSpec";
  if (r.failed) {
    r.failed_reason = GetString(*old_failed, "reason");
    r.failed_message = GetString(*old_failed, "message");
  }
  r.suspended = pass.spec.suspend && !r.Finished();
  r.resuming = !pass.spec.suspend && ConditionTrue(old, "Suspended");
  LoadInstances(pass, r);
  for (int32_t k = 0; k < pass.p; ++k) {
    ServerInstance& si = r.servers.emplace_back();
    si.id = vocab::MemberName(vocab::Role::kParameterServer, k);
    si.index = k;
  }
  const Json& moved = Get(old, "serverInstances");
  for (const Json& j : moved.is_array() ? moved : Json::array()) {
    ServerInstance si = ServerInstanceFromJson(j);
    if (si.index >= 0 && si.index < pass.p && si.id == r.servers[si.index].id) {
      r.servers[si.index] = std::move(si);
    }
  }
  return r;
}

// ---- Step 2: the Controller's decisions ----

WorkerInstance* FindInstance(std::vector<WorkerInstance>& instances, const std::string& id) {
  for (WorkerInstance& w : instances) {
    if (w.id == id) return &w;
  }
  return nullptr;
}

// A restart: the worker's next incarnation (its pod of the same name, once the
// previous one is gone), on any node unless the caller chooses one; not a
// resume unless the caller says so.
void NextIncarnation(WorkerInstance& w) {
  ++w.incarnation;
  w.node.clear();
  w.resumed = false;
}

std::string EvidenceText(const policy::Decision& d) {
  const std::string line = RecordedEvidence(d);
  return line.empty() ? "" : "; evidence: " + line;
}

// KILL_RESTART: the worker's next incarnation, never again on the node it left.
Event KillRestart(const policy::Decision& d, const policy::KillRestart& a, WorkerInstance& w) {
  const std::string old_pod = w.pod;
  NextIncarnation(w);
  if (!a.from_node.empty() && std::find(w.excluded_nodes.begin(), w.excluded_nodes.end(),
                                        a.from_node) == w.excluded_nodes.end()) {
    w.excluded_nodes.push_back(a.from_node);
  }
  w.node = a.to_node;
  return {
      "Warning", "StragglerRestarted",
      absl::StrCat("restarted ", w.id, " (pod ", old_pod, ") from node ",
                   a.from_node.empty() ? "?" : a.from_node, " to ",
                   a.to_node.empty() ? "any other node" : "node " + a.to_node, " as incarnation ",
                   w.incarnation, ": rule ", d.rule, "; ", d.reason, EvidenceText(d))};
}

// ADJUST_BS: the worker's new local batch, and an Event when about a straggler.
void AdjustBatch(const policy::Decision& d, const policy::AdjustBatchSize& a,
                 const std::vector<Straggler>& stragglers, WorkerInstance& w,
                 std::vector<Event>& events) {
  if (a.local_batch_size > 0) {
    w.local_batch_size = a.local_batch_size;
    w.accumulation_steps = std::max(1, a.accumulation_steps);
  }
  if (!NamesStraggler(d, stragglers)) return;
  events.push_back({"Normal", "BatchSizeAdjusted",
                    absl::StrCat(w.id, " local batch set to ", a.local_batch_size, ": rule ",
                                 d.rule, "; ", d.reason, EvidenceText(d))});
}

// status.lastActions keeps the newest kMaxLastActions.
void TrimLastActions(Json& last_actions) {
  if (last_actions.size() <= kMaxLastActions) return;
  last_actions.erase(
      last_actions.begin(),
      last_actions.begin() + static_cast<std::ptrdiff_t>(last_actions.size() - kMaxLastActions));
}

// KILL_RESTART of a parameter server: its next incarnation on another node
// (see reconciler.h).
Event MoveServer(const policy::Decision& d, const policy::KillRestart& a, ServerInstance& si,
                 const std::string& job) {
  const std::string old_pod = PsPodName(job, si.index, si.incarnation);
  ++si.incarnation;
  if (!a.from_node.empty() && std::find(si.excluded_nodes.begin(), si.excluded_nodes.end(),
                                        a.from_node) == si.excluded_nodes.end()) {
    si.excluded_nodes.push_back(a.from_node);
  }
  si.node = a.to_node;
  return {"Warning", "ParameterServerMoved",
          absl::StrCat("moving ", si.id, " (pod ", old_pod, ") from node ",
                       a.from_node.empty() ? "?" : a.from_node, " to ",
                       a.to_node.empty() ? "any other node" : "node " + a.to_node, " as pod ",
                       PsPodName(job, si.index, si.incarnation),
                       ", its state handed over at a step boundary: rule ", d.rule, "; ", d.reason,
                       EvidenceText(d))};
}

void ApplyActions(const Pass& pass, Records& r, Changes& changes) {
  for (const policy::Decision& d : pass.o.actions) {
    const std::string& target = policy::ActionTarget(d.action);
    const vocab::ActionKind kind = policy::KindOf(d.action);
    const std::optional<vocab::MemberId> member = vocab::ParseMemberId(target);
    const auto* restart = std::get_if<policy::KillRestart>(&d.action);
    if (restart != nullptr && member && member->role == vocab::Role::kParameterServer) {
      auto si = std::find_if(r.servers.begin(), r.servers.end(),
                             [&](const ServerInstance& x) { return x.id == target; });
      if (si != r.servers.end()) {
        changes.events.push_back(MoveServer(d, *restart, *si, pass.job));
        r.last_actions.push_back(DecisionRecord(d, pass.now));
        continue;
      }
    }
    if (kind == vocab::ActionKind::kBackupWorkers) {
      // The parameter servers were started with the backups (spec): recorded.
      changes.events.push_back(
          {"Normal", "BackupWorkers",
           absl::StrCat("each step takes the first workers to push, ",
                        pass.spec.straggler_policy.backup_workers,
                        " of them backups (spec.stragglerPolicy.backupWorkers): "
                        "rule ",
                        d.rule, "; ", d.reason)});
      r.last_actions.push_back(DecisionRecord(d, pass.now));
      continue;
    }
    WorkerInstance* w = FindInstance(r.instances, target);
    if (w == nullptr) {
      changes.events.push_back({"Warning", "ActionIgnored",
                                absl::StrCat(vocab::Name(kind), " for ", target,
                                             ": not a member of the job (status.workerInstances, "
                                             "status.serverInstances)")});
      continue;
    }
    if (restart != nullptr) {
      changes.events.push_back(KillRestart(d, *restart, *w));
    } else if (const auto* adjust = std::get_if<policy::AdjustBatchSize>(&d.action)) {
      AdjustBatch(d, *adjust, pass.o.stragglers, *w, changes.events);
    }
    r.last_actions.push_back(DecisionRecord(d, pass.now));
    // The nodes its new pod prefers not to run on (the node memory's marks).
    if (restart != nullptr && !pass.avoided.empty()) {
      r.last_actions.back()["avoidedNodes"] = pass.avoided;
    }
  }
  TrimLastActions(r.last_actions);
}

// ---- Step 3: failures and success ----

// Why a failed pod was disrupted (evicted by the kubelet or the eviction API,
// preempted by a higher priority), "" when it failed by itself: the pod's
// DisruptionTarget condition (Kubernetes 1.26+) or its status.reason.
std::string DisruptionOf(const Json& pod) {
  const Json& st = Get(pod, "status");
  const Json& conditions = Get(st, "conditions");
  if (conditions.is_array()) {
    for (const Json& c : conditions) {
      if (GetString(c, "type") == "DisruptionTarget" && GetString(c, "status") == "True") {
        return GetString(c, "reason").empty() ? "DisruptionTarget" : GetString(c, "reason");
      }
    }
  }
  const std::string reason = GetString(st, "reason");
  return reason == "Evicted" || reason == "Preempting" || reason == "Shutdown" ? reason : "";
}

// A disrupted worker restarts as its next incarnation, not counted against
// the backoff limit (as a Job's podFailurePolicy Ignore on DisruptionTarget).
void RestartDisrupted(const std::string& disruption, const std::string& what, WorkerInstance& w,
                      Changes& changes) {
  NextIncarnation(w);
  changes.events.push_back(
      {"Warning", "WorkerDisrupted",
       absl::StrCat(what, "; disrupted (", disruption, "), restarting as incarnation ",
                    w.incarnation, ", not counted against spec.runPolicy.backoffLimit")});
}

// A worker whose desired pod failed is restarted in place (its next
// incarnation, on any node) until the failures exceed the backoff limit.
void ApplyFailures(const Pass& pass, Records& r, Changes& changes) {
  const int32_t limit = pass.spec.run_policy.backoff_limit;
  for (WorkerInstance& w : r.instances) {
    const Json* pod = pass.children.Worker(w);
    if (pod == nullptr || kube::Terminating(*pod) || kube::PodPhase(*pod) != "Failed") continue;
    const std::string node = GetString(Get(*pod, "spec"), "nodeName");
    const std::string what =
        absl::StrCat(w.id, " failed (pod ", w.pod, node.empty() ? "" : " on node " + node, ": ",
                     FailureText(*pod), ")");
    const std::string disruption = DisruptionOf(*pod);
    if (!disruption.empty()) {
      RestartDisrupted(disruption, what, w, changes);
      continue;
    }
    ++r.failures;
    if (r.failures > limit) {
      r.failed = true;
      r.failed_reason = "BackoffLimitExceeded";
      r.failed_message = absl::StrCat(what, "; ", r.failures, " worker failures exceed ",
                                      "spec.runPolicy.backoffLimit ", limit);
      changes.events.push_back({"Warning", "BackoffLimitExceeded", r.failed_message});
      return;
    }
    NextIncarnation(w);
    changes.events.push_back(
        {"Warning", "WorkerFailed",
         absl::StrCat(what, "; restarting as incarnation ", w.incarnation, " (failure ", r.failures,
                      " of backoffLimit ", limit, ")")});
  }
}

// Success: every worker's desired pod succeeded.
void CheckSuccess(const Pass& pass, Records& r, Changes& changes) {
  bool all = pass.n > 0;
  for (const WorkerInstance& w : r.instances) all = all && IsSucceeded(pass.children.Worker(w));
  if (!all) return;
  r.succeeded = true;
  const std::optional<Progress>& progress = pass.o.progress;
  changes.events.push_back(
      {"Normal", "JobSucceeded",
       absl::StrCat(
           "all ", Plural(pass.n, "worker", "workers"), " succeeded",
           progress ? absl::StrCat("; ", progress->records_committed, " records committed") : "")});
}

// When the job started (status.startTime), or now; a resumed job starts
// again, as a Kubernetes Job does, so its deadline counts from the resume.
int64_t StartMs(const Pass& pass, const Records& r) {
  const std::string start = GetString(pass.old_status, "startTime");
  if (start.empty() || r.resuming) return pass.now;
  return kube::ParseTime(start).value_or(pass.now);
}

// spec.runPolicy.activeDeadlineSeconds: the job fails once it has run that
// long (never while suspended).
void CheckDeadline(const Pass& pass, Records& r, Changes& changes) {
  const int64_t deadline = pass.spec.run_policy.active_deadline_seconds;
  if (deadline < 0 || r.suspended || r.Finished()) return;
  if (pass.now - StartMs(pass, r) < deadline * 1000) return;
  r.failed = true;
  r.failed_reason = "DeadlineExceeded";
  r.failed_message = absl::StrCat("the job ran longer than spec.runPolicy.activeDeadlineSeconds (",
                                  deadline, "s) since ", GetString(pass.old_status, "startTime"));
  changes.events.push_back({"Warning", "DeadlineExceeded", r.failed_message});
}

// The sharding service answered without the job's dataset: its state is gone
// (in the pod without spec.checkpoint.path, or a wiped volume). Creating the
// dataset again would train committed records a second time; the job fails,
// saying why and what keeps the state.
void CheckShardingState(const Pass& pass, Records& r, Changes& changes) {
  if (!pass.o.dataset_lost || !r.dataset_created) return;
  r.failed = true;
  r.failed_reason = "ShardingStateLost";
  r.failed_message = absl::StrCat(
      "the sharding service (pod ", ShardingName(pass.job),
      ") came back without the job's dataset, so which records were committed is lost; ",
      !ShardingStateIsDurable(pass.o.job, pass.spec)
          ? "its state was in the pod (spec.shardingService.storage.ephemeral, and no volume "
            "holds spec.checkpoint.path): drop ephemeral, or mount a shared volume at "
            "spec.checkpoint.path, for state that outlives the pod"
      : ShardingStateOnClaim(pass.o.job, pass.spec)
          ? absl::StrCat("its claim ", ShardingClaimName(pass.spec), " holds no state")
          : absl::StrCat("its state under ", JobStateDir(pass.spec), "/sharding is gone"),
      "; create the job again to train from the start");
  changes.events.push_back({"Warning", "ShardingStateLost", r.failed_message});
}

// Steps 2 and 3, for a job not finished before this pass. A suspended job
// carries out no decision (it has no workers to act on).
void DecideActions(const Pass& pass, Records& r, Changes& changes) {
  CheckShardingState(pass, r, changes);
  if (r.failed) {
    r.completion = (pass.now / 1000) * 1000;
    return;
  }
  if (!r.suspended) ApplyActions(pass, r, changes);
  ApplyFailures(pass, r, changes);
  if (!r.failed) CheckSuccess(pass, r, changes);
  if (!r.failed && !r.succeeded) CheckDeadline(pass, r, changes);
  if (r.Finished()) r.completion = (pass.now / 1000) * 1000;
}

// Where each worker's desired pod runs.
void RecordNodes(const Pass& pass, Records& r) {
  for (WorkerInstance& w : r.instances) {
    const Json* pod = pass.children.Worker(w);
    if (pod == nullptr) continue;
    const std::string node = GetString(Get(*pod, "spec"), "nodeName");
    if (!node.empty()) w.node = node;
  }
}

// ---- Step 7: when to look again ----

// Soon while the job runs; once it finished, when
// spec.runPolicy.ttlSecondsAfterFinished has passed, and then the job is deleted.
void PlanRequeue(const Pass& pass, const Records& r, Changes& changes) {
  if (!r.Finished()) {
    changes.requeue_after_ms = kRunningRequeueMs;
    return;
  }
  const int64_t ttl = pass.spec.run_policy.ttl_seconds_after_finished;
  if (ttl < 0 || !r.completion) return;
  const int64_t deadline = *r.completion + ttl * 1000;
  if (pass.now < deadline) {
    changes.requeue_after_ms = deadline - pass.now;
    return;
  }
  Write w;
  w.kind = Write::Kind::kDeleteJob;
  w.name = pass.job;
  w.uid = Uid(pass.o.job);
  w.reason =
      absl::StrCat("spec.runPolicy.ttlSecondsAfterFinished (", ttl, "s) passed since completion");
  AddWrite(changes, std::move(w));
}

const std::vector<std::string>& AvoidedNodes(const Snapshot& o) {
  static const std::vector<std::string> kNone;
  if (!o.spec.ok() || o.spec->straggler_policy.mode != vocab::Mode::kAct ||
      o.spec->straggler_policy.avoid_slow_nodes == vocab::AvoidSlowNodes::kIgnore) {
    return kNone;
  }
  return o.avoided_nodes;
}

Changes Reconcile(const Snapshot& o, const Settings& s) {
  const Json& meta = Get(o.job, "metadata");
  // Being deleted: the garbage collector removes the children.
  if (!Get(meta, "deletionTimestamp").is_null()) return Changes{};
  if (!o.spec.ok()) return InvalidSpecPlan(o, Get(o.job, "status"), GetInt(meta, "generation", 0));

  const Pass pass(o, s);
  Changes changes;
  Records r = LoadRecords(pass);
  if (!r.Finished()) DecideActions(pass, r, changes);
  RecordNodes(pass, r);
  Rescale(pass, r, changes);
  if (r.Finished()) {
    PlanCleanup(pass, r, changes);
  } else if (r.suspended) {
    if (!ConditionTrue(pass.old_status, "Suspended")) {
      changes.events.push_back(
          {"Normal", "Suspended", "spec.suspend is set: deleting the job's pods"});
    }
    PlanSuspend(pass, r, changes);
  } else {
    if (r.resuming) {
      changes.events.push_back(
          {"Normal", "Resumed", "spec.suspend was cleared: creating the job's pods again"});
    }
    PlanRemoved(pass, r, changes);
    PlanChildren(pass, r, changes);
  }
  Json status = NewStatus(pass, r);
  ClearReplicaFailure(pass, changes, status);
  CommitEvents(pass, changes, status);
  if (status != pass.old_status) changes.status = std::move(status);
  PlanRequeue(pass, r, changes);
  return changes;
}

bool IsReady(const Json* pod) {
  if (!IsRunning(pod)) return false;
  const Json& conditions = Get(Get(*pod, "status"), "conditions");
  if (!conditions.is_array()) return true;
  for (const Json& c : conditions) {
    if (GetString(c, "type") == "Ready") return GetString(c, "status") == "True";
  }
  return true;
}

std::string FailureText(const Json& pod) {
  const Json& st = Get(pod, "status");
  const Json& statuses = Get(st, "containerStatuses");
  if (statuses.is_array() && !statuses.empty()) {
    const Json& t = Get(Get(statuses[0], "state"), "terminated");
    if (t.is_object()) {
      std::string out = absl::StrCat("exit code ", GetInt(t, "exitCode", -1));
      if (!GetString(t, "reason").empty()) absl::StrAppend(&out, " (", GetString(t, "reason"), ")");
      return out;
    }
  }
  std::string out = GetString(st, "reason");
  if (!GetString(st, "message").empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ": ", GetString(st, "message"));
  }
  return out.empty() ? "phase Failed" : out;
}

std::string ToLower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<const Json*> ByName(const std::vector<Json>& pods) {
  std::vector<const Json*> sorted;
  for (const Json& pod : pods) sorted.push_back(&pod);
  std::sort(sorted.begin(), sorted.end(),
            [](const Json* a, const Json* b) { return Name(*a) < Name(*b); });
  return sorted;
}

Write Create(const std::string& resource, Json object, std::string reason) {
  Write w;
  w.kind = Write::Kind::kCreate;
  w.resource = resource;
  w.name = Name(object);
  w.object = std::move(object);
  w.reason = std::move(reason);
  return w;
}

Write Delete(const Json& pod, int64_t grace, std::string reason) {
  Write w;
  w.kind = Write::Kind::kDelete;
  w.resource = "pods";
  w.name = Name(pod);
  w.uid = Uid(pod);
  w.grace_period_seconds = grace;
  w.reason = std::move(reason);
  return w;
}

Write Resize(int32_t workers, std::vector<std::string> removed, std::vector<std::string> added,
             std::string reason) {
  Write w;
  w.kind = Write::Kind::kResizeParameterServers;
  w.workers = workers;
  w.removed = std::move(removed);
  w.added = std::move(added);
  w.reason = std::move(reason);
  return w;
}

std::string Plural(int64_t n, const std::string& one, const std::string& many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string JobStateDir(const manifest::Job& spec) {
  if (spec.checkpoint.path.empty()) return "";
  if (spec.uid.empty()) return spec.checkpoint.path;
  return absl::StrCat(spec.checkpoint.path, "/", spec.uid);
}

bool ShardingStateIsDurable(const Json& job, const manifest::Job& spec) {
  return !spec.sharding_storage.ephemeral || CheckpointVolume(job, spec).first != nullptr;
}

void PlanCleanup(const Pass& pass, const Records& r, Changes& changes) {
  for (const Json* pod : ByName(pass.o.pods)) {
    if (kube::Terminating(*pod) || Finished(*pod)) continue;
    AddWrite(changes, Delete(*pod, -1, r.succeeded ? "the job succeeded" : "the job failed"));
  }
}

bool NamesStraggler(const policy::Decision& d, const std::vector<Straggler>& stragglers) {
  if (absl::StrContains(ToLower(d.reason), "straggler")) return true;
  const std::string& target = policy::ActionTarget(d.action);
  for (const Straggler& s : stragglers) {
    if (vocab::IsStraggler(s.straggler_class) && s.worker == target) return true;
  }
  return false;
}

void ClearReplicaFailure(const Pass& pass, const Changes& changes, Json& status) {
  if (!ConditionTrue(pass.old_status, kReplicaFailure)) return;
  for (const Write& w : changes.writes) {
    if (w.kind == Write::Kind::kCreate) return;
  }
  SetCondition(status["conditions"], kReplicaFailure, "False", "Created",
               "every pod and Service the job needs exists", pass.generation, pass.now);
}

Children::Children(const Snapshot& o) {
  for (const Json& pod : o.pods) {
    pod_by_name_[Name(pod)] = &pod;
    const std::string worker = kube::Label(pod, vocab::kLabelWorkerId);
    if (kube::Label(pod, vocab::kLabelRole) == "worker" && !worker.empty()) {
      pods_of_worker_[worker].push_back(&pod);
    }
    int32_t k = -1;
    if (kube::Label(pod, vocab::kLabelRole) == "ps" &&
        absl::SimpleAtoi(kube::Label(pod, vocab::kLabelReplicaIndex), &k)) {
      pods_of_server_[k].push_back(&pod);
    }
  }
  for (const Json& svc : o.services) service_names_.insert(Name(svc));
}

}  // namespace antdt::reconciler
