// The job controller's writes: a pass's changes applied (status first, then
// creates, deletes and the writes to AntDT's own servers), and what the API
// server refused, as Events and a condition.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "api/vocab/labels.h"
#include "api/vocab/vocab.h"
#include "backends/kubernetes/operator/job_controller.h"
#include "backends/kubernetes/operator/job_controller_internal.h"
#include "backends/metrics/job_metrics.h"
#include "client/sharding_client.h"
#include "common/credential.h"
#include "common/job_key.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/loop/control_loop.h"

namespace antdt::kube_operator {

std::vector<JobController::ServerPod> JobController::ServerPods(const std::vector<Json>& pods,
                                                                int port) {
  std::vector<ServerPod> out;
  for (const Json& p : pods) {
    if (kube::Label(p, vocab::kLabelRole) != "ps" || PodIp(p).empty() || kube::Terminating(p))
      continue;
    out.push_back({NameOf(p), absl::StrCat(PodIp(p), ":", port)});
  }
  return out;
}

void JobController::ForEachParameterServer(
    const std::vector<ServerPod>& servers, const std::string& token,
    const std::function<grpc::Status(v1::ParameterServer::Stub&, grpc::ClientContext&)>& call) {
  for (const ServerPod& server : servers) {
    auto stub = v1::ParameterServer::NewStub(antdt::CreateChannel(server.address));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(options_.rpc_timeout_ms));
    AddCredential(ctx, token);
    const grpc::Status s = call(*stub, ctx);
    if (!s.ok()) {
      LogEvent("operator", {{"event", "parameter_server_call_failed"},
                            {"pod", server.name},
                            {"code", static_cast<int>(s.error_code())},
                            {"error", s.error_message()}});
    }
  }
}

void JobController::LeaveParameterServers(const std::string& worker,
                                          const std::vector<ServerPod>& servers,
                                          const std::string& token) {
  ForEachParameterServer(servers, token,
                         [&](v1::ParameterServer::Stub& stub, grpc::ClientContext& ctx) {
                           v1::LeaveRequest req;
                           req.set_worker_id(worker);
                           v1::LeaveResponse resp;
                           return stub.Leave(&ctx, req, &resp);
                         });
}

void JobController::ResizeParameterServers(const Json& job, const reconciler::Write& w,
                                           const std::vector<Json>& pods, JobRuntime* rt) {
  ForEachParameterServer(ServerPods(pods, options_.settings.ps_port),
                         rt == nullptr ? "" : rt->token,
                         [&](v1::ParameterServer::Stub& stub, grpc::ClientContext& ctx) {
                           v1::ResizeRequest req;
                           req.set_workers(w.workers);
                           for (const std::string& id : w.removed) req.add_removed(id);
                           for (const std::string& id : w.added) req.add_added(id);
                           v1::ResizeResponse resp;
                           return stub.Resize(&ctx, req, &resp);
                         });
  LogEvent("operator", {{"event", "parameter_servers_resized"},
                        {"job", kube::KeyOf(job)},
                        {"workers", w.workers},
                        {"removed", absl::StrJoin(w.removed, ",")},
                        {"added", absl::StrJoin(w.added, ",")}});
}

void JobController::AddReconcilerEffects(const reconciler::Changes& changes,
                                         const std::vector<Json>& pods, loop::ControlLoop& loop,
                                         loop::Ready* ready) {
  std::vector<loop::Delivery> batches;
  for (const reconciler::Write& w : changes.writes) {
    switch (w.kind) {
      case reconciler::Write::Kind::kAdjustBatch: {
        // To the incarnation that runs now (counted for it: not re-delivered).
        int64_t incarnation = -1;
        for (const Json& p : pods) {
          int64_t i = 0;
          if (kube::Label(p, vocab::kLabelWorkerId) == w.worker && !kube::Terminating(p) &&
              absl::SimpleAtoi(kube::Label(p, vocab::kLabelIncarnation), &i)) {
            incarnation = i;
          }
        }
        batches.push_back(
            {w.node,
             loop.BatchDirective(w.worker, w.local_batch_size, w.accumulation_steps, w.reason),
             static_cast<int32_t>(incarnation)});
        break;
      }
      case reconciler::Write::Kind::kLeaveParameterServers:
        ready->departures.push_back({w.worker, 0, /*leave_servers=*/true, false});
        break;
      case reconciler::Write::Kind::kReleaseShards:
        ready->departures.push_back(
            {w.worker, static_cast<int32_t>(w.incarnation), false, /*release_shards=*/true});
        break;
      default:
        break;
    }
  }
  // Before the loop's own: a re-delivery of the batch a scale replaced is
  // then passed over.
  ready->deliveries.insert(ready->deliveries.begin(), batches.begin(), batches.end());
}

absl::StatusOr<Json> JobController::Commit(const Json& job, const reconciler::Changes& changes,
                                           JobRuntime* rt,
                                           const std::vector<reconciler::Event>& gathered) {
  Json current = job;  // the job as last written, for ReplicaFailure
  if (changes.status) {
    Json updated = job;
    updated["status"] = *changes.status;
    auto r = api_->UpdateStatus(kube::AntDTJobsResource(),
                                kube::StringAt(job, {"metadata", "namespace"}), updated);
    if (!r.ok()) return r.status();  // a conflict: requeued, nothing else done
    current = *r;
  }
  // The decisions are committed: their Events now, before any write can fail.
  RecordCommittedEvents(changes, changes.status.has_value(), &current);
  RecordGatheredEvents(current, gathered, rt);
  return current;
}

absl::Status JobController::WriteObjects(const Json& job, const Json& current,
                                         const reconciler::Changes& changes,
                                         const std::vector<Json>& pods,
                                         const std::set<std::string>& foreign, JobRuntime* rt) {
  const std::string ns = kube::StringAt(job, {"metadata", "namespace"});
  const std::string key = kube::KeyOf(job);
  for (const reconciler::Write& w : changes.writes) {
    const kube::ResourceRef ref = RefOf(w);
    switch (w.kind) {
      case reconciler::Write::Kind::kCreate: {
        auto r = api_->Create(ref, ns, w.object);
        if (!r.ok() && kube::IsAlreadyExists(r.status()) && foreign.count(NameOf(w.object)) > 0) {
          // The name is taken by an object that is not this job's: said, not waited on silently.
          const absl::Status taken = absl::AlreadyExistsError(absl::StrCat(
              r.status().message(), ": it is not this job's (no controller: left by `kubectl ",
              "delete --cascade=orphan`?, or an earlier job's being deleted); delete it so that "
              "the job can create its own"));
          ReportFailedCreate(current, w, taken);
          return taken;
        }
        if (!r.ok() && !kube::IsAlreadyExists(r.status())) {
          ReportFailedCreate(current, w, r.status());
          return r.status();
        }
        if (r.ok()) {
          LogEvent("operator", {{"event", "created"},
                                {"job", key},
                                {"resource", w.resource},
                                {"name", NameOf(w.object)},
                                {"reason", w.reason}});
        }
        break;
      }
      case reconciler::Write::Kind::kDelete: {
        kube::DeleteOptions d;
        d.precondition_uid = w.uid;
        if (w.grace_period_seconds >= 0) d.grace_period_seconds = w.grace_period_seconds;
        absl::Status s = api_->Delete(ref, ns, w.name, d);
        if (!s.ok() && !kube::IsNotFound(s) && !kube::IsConflict(s)) return s;
        LogEvent("operator", {{"event", "deleted"},
                              {"job", key},
                              {"resource", w.resource},
                              {"name", w.name},
                              {"reason", w.reason}});
        break;
      }
      case reconciler::Write::Kind::kResizeParameterServers:
        ResizeParameterServers(job, w, pods, rt);
        break;
      case reconciler::Write::Kind::kLeaveParameterServers:
      case reconciler::Write::Kind::kAdjustBatch:
      case reconciler::Write::Kind::kReleaseShards:
        break;  // the loop's: carried out by its Apply (AddReconcilerEffects)
      case reconciler::Write::Kind::kDeleteJob: {
        kube::DeleteOptions d;
        d.propagation_policy = "Background";
        d.precondition_uid = kube::StringAt(job, {"metadata", "uid"});
        absl::Status s = api_->Delete(kube::AntDTJobsResource(), ns, NameOf(job), d);
        if (!s.ok() && !kube::IsNotFound(s)) return s;
        break;
      }
    }
  }
  return absl::OkStatus();
}

void JobController::ReportOrphans(const Json& /*job*/, const std::vector<Json>& pods,
                                  const std::vector<Json>& services, JobRuntime* rt,
                                  std::vector<reconciler::Event>* events) {
  std::vector<std::string> orphans;
  for (const Json& p : pods) {
    if (!HasController(p)) orphans.push_back("pod/" + NameOf(p));
  }
  for (const Json& s : services) {
    if (!HasController(s)) orphans.push_back("service/" + NameOf(s));
  }
  std::sort(orphans.begin(), orphans.end());
  const std::string names = absl::StrJoin(orphans, ", ");
  rt->orphans_seen = names;
  if (names == rt->reported_orphans || orphans.empty()) return;
  events->push_back(
      {"Warning", "OrphanedChildren",
       absl::StrCat(orphans.size(), orphans.size() == 1 ? " object carries" : " objects carry",
                    " this job's label antdt.io/job but no controller (left by `kubectl delete ",
                    "--cascade=orphan` of an earlier job?): ", names,
                    ". The job neither counts nor adopts them (they hold an earlier run's state); "
                    "delete them when done with them")});
}

void JobController::RecordGatheredEvents(const Json& job,
                                         const std::vector<reconciler::Event>& events,
                                         JobRuntime* rt) {
  for (const reconciler::Event& e : events) recorder_->Record(job, e.type, e.reason, e.message);
  if (rt == nullptr) return;
  rt->reported_orphans = rt->orphans_seen;
  rt->policy_changed.reset();
}

void JobController::RecordCommittedEvents(const reconciler::Changes& changes, bool status_written,
                                          Json* current) {
  if (changes.events.empty()) return;
  if (!status_written) {
    // The status is as this pass found it, pendingEvents and all: left by an
    // operator that stopped before writing them, or written by this one a
    // moment ago and cleared since, the cache not yet showing it. Only the job
    // as stored now tells them apart (a cache behind: the next pass sees it).
    auto stored = api_->Get(kube::AntDTJobsResource(),
                            kube::StringAt(*current, {"metadata", "namespace"}), NameOf(*current));
    if (!stored.ok() || kube::StringAt(*stored, {"metadata", "resourceVersion"}) !=
                            kube::StringAt(*current, {"metadata", "resourceVersion"})) {
      return;
    }
  }
  for (const reconciler::Event& e : changes.events) {
    recorder_->Record(*current, e.type, e.reason, e.message);
  }
  if (!kube::At(*current, {"status", "pendingEvents"}).is_array()) return;
  Json cleared = *current;
  cleared["status"].erase("pendingEvents");
  auto r = api_->UpdateStatus(kube::AntDTJobsResource(),
                              kube::StringAt(*current, {"metadata", "namespace"}), cleared);
  if (!r.ok()) {
    // Left pending: the next pass writes them again (counted on the same Events).
    LogEvent("operator", {{"event", "pending_events_not_cleared"},
                          {"job", kube::KeyOf(*current)},
                          {"error", r.status().ToString()}});
    return;
  }
  *current = *r;
}

void JobController::ReportFailedCreate(const Json& job, const reconciler::Write& w,
                                       const absl::Status& error) {
  // Not the API server refusing, but not reaching it: retried, not reported.
  if (error.code() == absl::StatusCode::kUnavailable ||
      error.code() == absl::StatusCode::kDeadlineExceeded) {
    return;
  }
  const std::string message = absl::StrCat("Error creating ",
                                           w.resource == "services"    ? "service "
                                           : w.resource == "podgroups" ? "PodGroup "
                                                                       : "pod ",
                                           NameOf(w.object), ": ", error.message());
  LogEvent("operator", {{"event", "create_failed"},
                        {"job", kube::KeyOf(job)},
                        {"resource", w.resource},
                        {"name", NameOf(w.object)},
                        {"error", error.ToString()}});
  recorder_->Record(job, "Warning", "FailedCreate", message);
  absl::Status s = SetReplicaFailure(job, "FailedCreate", message);
  if (!s.ok() && !kube::IsConflict(s)) {
    LogEvent(
        "operator",
        {{"event", "status_update_failed"}, {"job", kube::KeyOf(job)}, {"error", s.ToString()}});
  }
}

absl::Status JobController::SetReplicaFailure(const Json& job, const std::string& reason,
                                              const std::string& message) {
  Json updated = job;
  if (!reconciler::SetCondition(updated["status"]["conditions"], reconciler::kReplicaFailure,
                                "True", reason, message,
                                kube::At(job, {"metadata", "generation"}).is_number_integer()
                                    ? kube::At(job, {"metadata", "generation"}).get<int64_t>()
                                    : 0,
                                options_.clock->NowMillis())) {
    return absl::OkStatus();
  }
  return api_
      ->UpdateStatus(kube::AntDTJobsResource(), kube::StringAt(job, {"metadata", "namespace"}),
                     updated)
      .status();
}

// ---- The operator as the loop's backend (job_controller_internal.h) ----

absl::Status JobController::LoopBackend::RestartElsewhere(const policy::WorkerState&,
                                                          const policy::KillRestart&) {
  return absl::OkStatus();  // committed by this pass's reconciler (see above)
}

bool JobController::LoopBackend::SendDirective(const std::string& node,
                                               const v1::Directive& directive) {
  if (controller_->monitor_ == nullptr) return false;
  if (controller_->monitor_->hub().SendDirective(node, directive)) return true;
  LogEvent("operator", {{"event", "directive_not_delivered"},
                        {"job", kube::KeyOf(rt_->job)},
                        {"worker", directive.worker_id()},
                        {"node", node}});
  return false;
}

void JobController::LoopBackend::LeaveParameterServers(const std::string& worker) {
  controller_->LeaveParameterServers(worker, rt_->server_pods, rt_->token);
}

absl::Status JobController::LoopBackend::ReleaseShards(const std::string& worker,
                                                       int32_t incarnation) {
  absl::Status s = absl::UnavailableError("no sharding service yet");
  if (!rt_->sharding_address.empty() && rt_->driver != nullptr) {
    client::ShardingClientOptions co = rt_->driver->options();
    co.worker_id = worker;
    co.incarnation = incarnation;
    s = client::ReleaseWorker(rt_->sharding_address, co);
  }
  LogEvent("operator", {{"event", s.ok() ? "shards_released" : "shards_not_released"},
                        {"job", kube::KeyOf(rt_->job)},
                        {"worker", worker},
                        {"incarnation", incarnation},
                        {"error", std::string(s.message())}});
  return s;
}

void JobController::LoopBackend::RecordAction(const policy::Decision& d, loop::Outcome outcome) {
  if (controller_->actions_total_ != nullptr && outcome == loop::Outcome::kDone) {
    controller_->actions_total_->Add({{"action", policy::ActionName(d.action)}}).Increment();
  }
  if (rt_->metrics) {
    rt_->metrics->Decided(d, loop::OutcomeName(outcome));
  }
}

void JobController::LoopBackend::RecordTime(const loop::TimeDelta& delta) {
  if (rt_->metrics) rt_->metrics->Time(delta);
}

void JobController::LoopBackend::RecordSkipped(const std::string& /*line*/,
                                               policy::SkipReason reason) {
  if (rt_->metrics) rt_->metrics->Skipped(policy::SkipReasonName(reason));
}

void JobController::LoopBackend::RecordRecommendation(const loop::Recommendation& r) {
  if (rt_->metrics) rt_->metrics->Recommended(r.decision, r.predicted_saving_seconds);
  if (policy::IsRebalance(r.decision)) return;  // only keeps the global batch around another
  const std::string& target = policy::ActionTarget(r.decision.action);
  controller_->recorder_->Record(
      rt_->job, "Normal", "Recommendation",
      absl::StrFormat("recommended, not carried out (stragglerPolicy.mode Recommend): %s %s, "
                      "rule %s; saves ~%.1f s, costs %.1f s: %s",
                      policy::ActionName(r.decision.action), target.empty() ? "job" : target,
                      r.decision.rule, r.predicted_saving_seconds, r.cost_seconds,
                      r.decision.reason));
}

void JobController::LoopBackend::RecordBudgetUsed(int used) {
  if (rt_->metrics) rt_->metrics->BudgetUsed(used);
}

}  // namespace antdt::kube_operator
