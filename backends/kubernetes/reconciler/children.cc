#include "backends/kubernetes/reconciler/reconciler.h"

// Step 4 of a pass: the children to create and delete (scaling, removed
// workers, parameter servers, workers, suspension, cleanup).
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
#include "absl/time/time.h"
#include "backends/kubernetes/client/object.h"
#include "backends/kubernetes/reconciler/pod_defaults.h"
#include "backends/kubernetes/reconciler/reconciler_internal.h"
#include "common/credential.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/jobconfig/worker_env.h"

namespace antdt::reconciler {

// ---- Step 4: the children to create and delete ----

// The batches of a scale, for its Event: "worker-0=128, worker-1=128".
std::string BatchesText(const std::vector<WorkerInstance>& instances) {
  std::vector<std::string> parts;
  for (const WorkerInstance& w : instances) {
    parts.push_back(absl::StrCat(w.id, "=", w.local_batch_size));
  }
  return absl::StrJoin(parts, ", ");
}

// A scale in this pass (LoadInstances found spec.workers.replicas changed):
// the global batch split evenly over the workers there are now. With
// parameter servers each remaining worker that runs is told its new batch
// and the servers their new members, before any new worker starts; a
// collective job's running ranks begin their next incarnation (their
// WORLD_SIZE changed). Neither is a restart. A suspended job only records it.
void Rescale(const Pass& pass, Records& r, Changes& changes) {
  if (r.scaled_from < 0 || r.Finished()) return;
  const bool collective = pass.p == 0;
  const bool acting = !r.suspended;
  int32_t regrouped = 0;
  for (WorkerInstance& w : r.instances) {
    const int32_t batch = static_cast<int32_t>(jobconfig::InitialLocalBatch(pass.spec, w.index));
    const bool added = std::find(r.added.begin(), r.added.end(), w.id) != r.added.end();
    const Json* pod = pass.children.Worker(w);
    const bool runs = pod != nullptr && !kube::Terminating(*pod) && !Finished(*pod);
    if (acting && !added && runs && collective) {
      NextIncarnation(w);
      ++w.resumes;
      w.resumed = true;
      ++regrouped;
    } else if (acting && !added && runs && batch != w.local_batch_size) {
      Write adjust;
      adjust.kind = Write::Kind::kAdjustBatch;
      adjust.worker = w.id;
      adjust.node = GetString(Get(*pod, "spec"), "nodeName");
      adjust.local_batch_size = batch;
      adjust.accumulation_steps = w.accumulation_steps;
      adjust.reason = absl::StrCat("scaled to ", pass.n, " workers: the global batch ",
                                   pass.spec.model.global_batch_size, " split evenly");
      AddWrite(changes, std::move(adjust));
    }
    w.local_batch_size = batch;
  }
  if (acting && !collective) {
    AddWrite(changes,
             Resize(pass.n, r.newly_removed, r.added,
                    absl::StrCat("scaled from ", r.scaled_from, " to ", pass.n, " workers")));
  }
  std::string message =
      absl::StrCat("spec.workers.replicas changed from ", r.scaled_from, " to ", pass.n);
  if (!r.newly_removed.empty()) {
    absl::StrAppend(&message, "; removed ", absl::StrJoin(r.newly_removed, ", "),
                    " (pods deleted; their shards go back to the queue once the pods are gone)");
  }
  if (!r.added.empty()) absl::StrAppend(&message, "; added ", absl::StrJoin(r.added, ", "));
  absl::StrAppend(&message, "; local batches ", BatchesText(r.instances), " (global batch ",
                  pass.spec.model.global_batch_size, " kept)");
  if (regrouped > 0) {
    absl::StrAppend(&message, "; ", Plural(regrouped, "running rank", "running ranks"),
                    " restart with WORLD_SIZE=", pass.n, " (not counted as restarts)");
  }
  if (r.suspended) absl::StrAppend(&message, "; the job is suspended: applied when it resumes");
  changes.events.push_back({"Normal", "Scaled", message});
}

// The removed workers: their pods deleted, and once gone their shards
// released (their incarnation fenced on the sharding service) and the
// parameter servers told again that they are no members (the same Resize as
// the scale's: harmless twice, and a second chance when an operator stopped
// before the first).
void PlanRemoved(const Pass& pass, Records& r, Changes& changes) {
  std::vector<std::string> gone;
  for (WorkerInstance& w : r.removed) {
    if (w.retired) continue;
    const std::vector<const Json*>& pods = pass.children.PodsOfWorker(w.id);
    for (const Json* pod : pods) {
      if (kube::Terminating(*pod)) continue;
      AddWrite(
          changes,
          Delete(*pod, -1, absl::StrCat(w.id, " was removed: spec.workers.replicas is ", pass.n)));
    }
    if (!pods.empty()) continue;
    Write release;
    release.kind = Write::Kind::kReleaseShards;
    release.worker = w.id;
    release.incarnation = w.incarnation;
    release.reason = absl::StrCat(w.id, " was removed and its pod is gone");
    AddWrite(changes, std::move(release));
    w.retired = true;
    gone.push_back(w.id);
  }
  if (pass.p > 0 && !gone.empty()) {
    AddWrite(changes, Resize(pass.n, gone, {}, "removed workers' pods are gone"));
  }
}

// A server pod is created when missing; one that failed (evicted, say) is
// deleted, and created again once it is gone.
void EnsureServer(const Pass& pass, const std::string& name, const std::function<Json()>& render,
                  Changes& changes) {
  const Json* pod = pass.children.Pod(name);
  if (pod == nullptr) {
    AddWrite(changes, Create("pods", render(), "missing"));
  } else if (!kube::Terminating(*pod) && kube::PodPhase(*pod) == "Failed") {
    AddWrite(changes,
             Delete(*pod, -1,
                    absl::StrCat("failed (", FailureText(*pod), "); created again once gone")));
  }
}

// Parameter server `si`'s desired pod; while it is being moved, its earlier
// incarnation hands over to it and is deleted once followed.
void EnsureParameterServer(const Pass& pass, const ServerInstance& si, Changes& changes) {
  const std::string desired = PsPodName(pass.job, si.index, si.incarnation);
  std::string take_over;
  for (const Json* pod : pass.children.PodsOfServer(si.index)) {
    if (Name(*pod) == desired || kube::Terminating(*pod)) continue;
    if (pass.o.servers_followed.count(si.id) > 0 || Finished(*pod)) {
      AddWrite(changes,
               Delete(*pod, -1,
                      absl::StrCat(si.id, " moved to ", desired, " and every worker follows")));
    } else if (IsRunning(pod) && !PodIp(*pod).empty()) {
      take_over = absl::StrCat(PodIp(*pod), ":", pass.s.ps_port);
    }
  }
  EnsureServer(
      pass, desired,
      [&] {
        return RenderParameterServerPod(pass.o.job, pass.spec, si.index, pass.s, si, take_over);
      },
      changes);
}

// True when some worker still has a pod of an earlier incarnation.
bool AnySuperseded(const Pass& pass, const Records& r) {
  for (const WorkerInstance& w : r.instances) {
    const Json* desired = pass.children.Worker(w);
    for (const Json* pod : pass.children.PodsOfWorker(w.id)) {
      if (pod != desired) return true;
    }
  }
  return false;
}

// A worker's other pods are deleted at once; its desired pod is created once
// they are gone (and, with `hold`, not yet), after a restarted worker left the
// parameter servers.
void EnsureWorker(const Pass& pass, const WorkerInstance& w, bool hold, Changes& changes) {
  bool others = false;
  const Json* desired = pass.children.Worker(w);
  for (const Json* pod : pass.children.PodsOfWorker(w.id)) {
    if (pod == desired) continue;
    others = true;
    if (!kube::Terminating(*pod)) {
      AddWrite(changes, Delete(*pod, 0, absl::StrCat("superseded by incarnation ", w.incarnation)));
    }
  }
  if (others || desired != nullptr || hold) return;
  if (w.incarnation > 0 && pass.p > 0) {
    Write leave;
    leave.kind = Write::Kind::kLeaveParameterServers;
    leave.worker = w.id;
    leave.reason = absl::StrCat("incarnation ", w.incarnation - 1, " is gone");
    AddWrite(changes, std::move(leave));
  }
  AddWrite(changes,
           Create("pods", RenderWorkerPod(pass.o.job, pass.spec, w, pass.s, pass.avoided),
                  w.incarnation > 0 ? absl::StrCat("incarnation ", w.incarnation) : "missing"));
}

// A running job: the services and the sharding pod, then, once the sharding
// service holds the dataset, the parameter servers and the workers.
void PlanChildren(const Pass& pass, const Records& r, Changes& changes) {
  for (Json& svc : RenderServices(pass.o.job, pass.spec, pass.s)) {
    if (!pass.children.HasService(Name(svc))) {
      AddWrite(changes, Create("services", std::move(svc), "missing"));
    }
  }
  // The sharding service's claim before its pod.
  if (ShardingStateOnClaim(pass.o.job, pass.spec) && !pass.o.sharding_claim_exists) {
    AddWrite(changes, Create("persistentvolumeclaims",
                             RenderShardingClaim(pass.o.job, pass.spec, pass.s), "missing"));
  }
  // The job's credential before the pods that read it.
  if (pass.s.job_credentials && !pass.o.token_secret_exists && !pass.o.job_token.empty()) {
    AddWrite(changes,
             Create("secrets", RenderTokenSecret(pass.o.job, pass.spec, pass.o.job_token, pass.s),
                    "missing"));
  }
  EnsureServer(
      pass, ShardingName(pass.job),
      [&] { return RenderShardingPod(pass.o.job, pass.spec, pass.s); }, changes);
  if (!r.dataset_created) return;
  if (Get(pass.old_status, "datasetCreated") != true) {
    // Said once, when the status first records it: a job of an old name
    // starts from nothing, in its own folder.
    const std::string dir = JobStateDir(pass.spec);
    changes.events.push_back(
        {"Normal", "DatasetCreated",
         absl::StrCat(pass.spec.dataset.records, " records x ", pass.spec.dataset.epochs,
                      " epochs to train, from the start",
                      dir.empty() ? std::string(" (no checkpoint.path: state in the pods)")
                                  : absl::StrCat("; this job's state under ", dir))});
  }
  // The gang's PodGroup before its members (the parameter servers, workers).
  if (!pass.s.gang_scheduler.empty() && !pass.o.pod_group_exists) {
    AddWrite(changes,
             Create("podgroups", RenderPodGroup(pass.o.job, pass.spec, pass.s), "missing"));
  }
  for (const ServerInstance& si : r.servers) EnsureParameterServer(pass, si, changes);
  // A collective job's group forms once: while an earlier incarnation of some
  // rank is still there (a scale restarts them all), no new rank starts, so
  // none meets the old group at its rendezvous.
  const bool hold = pass.p == 0 && AnySuperseded(pass, r);
  for (const WorkerInstance& w : r.instances) EnsureWorker(pass, w, hold, changes);
}

// A suspended job holds no pods: each unfinished worker's pod goes (the
// worker resumes as its next incarnation: a new process, whose sharding
// leases and journal pick up where the last one committed), the parameter
// servers' go, and the sharding service's unless its state would go with it
// (ephemeral storage).
void PlanSuspend(const Pass& pass, Records& r, Changes& changes) {
  std::set<std::string> kept;
  if (!ShardingStateIsDurable(pass.o.job, pass.spec)) kept.insert(ShardingName(pass.job));
  for (WorkerInstance& w : r.instances) {
    const Json* pod = pass.children.Worker(w);
    if (IsSucceeded(pod)) kept.insert(w.pod);
    if (pod == nullptr || kube::Terminating(*pod) || Finished(*pod)) continue;
    NextIncarnation(w);
    ++w.resumes;
    w.resumed = true;
  }
  for (const Json* pod : ByName(pass.o.pods)) {
    if (kube::Terminating(*pod) || kept.count(Name(*pod)) > 0) continue;
    AddWrite(changes, Delete(*pod, -1, "the job is suspended (spec.suspend)"));
  }
}

}  // namespace antdt::reconciler
