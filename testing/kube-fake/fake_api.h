// An in-memory API server behind the `Api` interface, for unit tests of the
// informer, the work queue, leader election and the event recorder.
//
// What it models (the Kubernetes API concepts: objects, versions, watches):
// - one global resourceVersion counter for all kinds; uid, generation
//   (bumped when anything outside metadata and status changes) and
//   creationTimestamp set by the server;
// - Create: 409 AlreadyExists, generateName; Update/UpdateStatus: the
//   resourceVersion is required (422) and must be current (409 Conflict);
//   no-op writes keep the RV and emit no event; Get/Patch/Delete of a missing
//   object: 404 NotFound;
// - merge and JSON patches; a patch carrying metadata.resourceVersion is a
//   precondition;
// - a /status subresource for kinds marked with EnableStatusSubresource: the
//   main resource ignores status changes, /status takes only status. For
//   other kinds UpdateStatus and Patch(..., "status") act like Update/Patch;
// - finalizers: Delete sets deletionTimestamp; the update removing the last
//   finalizer deletes the object (watchers see only DELETED);
// - label selectors (=, ==, !=, in, notin, k, !k) and field selectors (any dotted
//   path, = and !=; metadata.name, metadata.namespace, status.phase, ...);
// - a bounded history of events; Watch delivers the events after the RV,
//   synthetic ADDEDs for RV "" or "0", an ERROR 410 event when the RV is
//   older than the history, selector transitions as ADDED/DELETED, and ends
//   cleanly after timeoutSeconds (real time).
// Faults for tests: ExpireWatches, DropWatches, EndWatches, SendBookmarks,
// FailNext, Compact; counters of requests per verb.
//
// Thread-safe. Watch blocks the calling thread; cancel it with a Cancel from
// NewCancel() (a plain Cancel works too, noticed within 50 ms).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backends/kubernetes/client/api.h"
#include "common/clock.h"

namespace antdt::kube {

struct FakeApiOptions {
  // Events kept for watches that resume from an RV; older RVs get 410.
  size_t history_size = 1000;
  // creationTimestamp and deletionTimestamp; the RealClock when null.
  Clock* clock = nullptr;
};

class FakeApi : public Api {
 public:
  explicit FakeApi(FakeApiOptions options = {});
  ~FakeApi() override;
  FakeApi(const FakeApi&) = delete;
  FakeApi& operator=(const FakeApi&) = delete;

  // Gives kind `r` a /status subresource (CRDs with subresources.status).
  void EnableStatusSubresource(const ResourceRef& r);

  absl::StatusOr<Json> Get(const ResourceRef& r, const std::string& ns,
                           const std::string& name) override;
  absl::StatusOr<Json> List(const ResourceRef& r, const std::string& ns,
                            const ListOptions& options) override;
  absl::StatusOr<Json> Create(const ResourceRef& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> Update(const ResourceRef& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> UpdateStatus(const ResourceRef& r, const std::string& ns,
                                    const Json& object) override;
  absl::StatusOr<Json> Patch(const ResourceRef& r, const std::string& ns, const std::string& name,
                             const Json& patch, PatchType type = PatchType::kMerge,
                             const std::string& subresource = "") override;
  absl::Status Delete(const ResourceRef& r, const std::string& ns, const std::string& name,
                      const DeleteOptions& options = {}) override;
  absl::Status Watch(const ResourceRef& r, const std::string& ns, const WatchOptions& options,
                     const std::function<bool(const WatchEvent&)>& on_event,
                     Cancel* cancel) override;
  std::unique_ptr<Cancel> NewCancel() override;

  // --- Faults and inspection (tests) ---

  // Every open watch gets an ERROR event with code 410 and ends (OK), and the
  // history is compacted, so resuming from any older RV gives 410 too.
  void ExpireWatches();
  // Every open watch returns Unavailable, as when the connection breaks.
  void DropWatches();
  // Every open watch ends cleanly (OK), as at its timeoutSeconds.
  void EndWatches();
  // Open watches that allow bookmarks get a BOOKMARK at the current RV.
  void SendBookmarks();
  // The next `count` calls of `verb` fail with `status` without effect.
  // Verbs: get list create update update_status patch delete watch (for
  // watch, the request itself fails, like an HTTP error status).
  void FailNext(const std::string& verb, absl::Status status, int count = 1);
  // Forgets the event history: watches from any older RV get 410.
  void Compact();

  // Requests per verb so far, failed ones included.
  int64_t Requests(const std::string& verb) const;
  // The resourceVersion each List was called with, in order.
  std::vector<std::string> ListResourceVersions() const;
  int OpenWatches() const;
  // Blocks (real time) until at least `n` watches are open; false on timeout.
  bool WaitForOpenWatches(int n, int64_t timeout_ms) const;
  // The current global resourceVersion.
  std::string ResourceVersion() const;

 private:
  struct HistoryEntry {
    std::string kind_id;  // group/plural
    int64_t rv;
    std::string type;  // ADDED MODIFIED DELETED
    Json object;       // new state; for DELETED the last state
    Json old;          // for MODIFIED, the previous state
  };
  class FakeCancel;

  static std::string KindId(const ResourceRef& r);
  absl::Status CheckFault(const std::string& verb) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t Now() const;
  std::map<std::string, Json>& Objects(const ResourceRef& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Record(const ResourceRef& r, const std::string& type, const Json& object, const Json& old)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The update path shared by Update, UpdateStatus and Patch.
  absl::StatusOr<Json> Write(const ResourceRef& r, const std::string& ns, Json candidate,
                             bool status_only) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FakeApiOptions options_;
  Clock* const clock_;
  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  int64_t rv_ ABSL_GUARDED_BY(mu_) = 0;
  // The highest RV whose event is no longer in history_.
  int64_t compacted_rv_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::map<std::string, Json>> objects_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> status_kinds_ ABSL_GUARDED_BY(mu_);
  std::deque<HistoryEntry> history_ ABSL_GUARDED_BY(mu_);
  struct Fault {
    absl::Status status;
    int count;
  };
  std::map<std::string, std::deque<Fault>> faults_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> list_rvs_ ABSL_GUARDED_BY(mu_);
  int open_watches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expire_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t drop_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t end_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bookmark_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// Label and field selectors (backends/kubernetes/client/selectors.h, as the emulator
// evaluates them). Returns InvalidArgument for a selector that does not parse.
absl::StatusOr<bool> MatchesSelectors(const Json& object, const std::string& label_selector,
                                      const std::string& field_selector);

}  // namespace antdt::kube
