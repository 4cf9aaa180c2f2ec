// The Kubernetes API as the operator sees it: the REST verbs over JSON
// objects (nlohmann::json), errors carrying the API server's Status (code and
// reason), and one watch stream at a time per call. `Client` (client.h)
// implements it over cpprestsdk against a real API server (or the emulator in
// testing/kube-emulator); `FakeApi` (fake_api.h) implements it in memory for
// unit tests of the informer, the work queue and leader election.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/kubernetes/client/object.h"

namespace antdt::kube {

// A resource kind as the REST paths name it.
struct ResourceRef {
  std::string group;    // "" for the core group
  std::string version;  // "v1", "v1alpha1"
  std::string plural;   // "pods"
  std::string kind;     // "Pod"
  bool namespaced = true;

  // "/api/v1" or "/apis/<group>/<version>".
  std::string GroupVersionPath() const;
  // The collection path: ".../namespaces/<ns>/<plural>", or ".../<plural>"
  // when `ns` is empty (all namespaces, or a cluster-scoped kind).
  std::string CollectionPath(const std::string& ns) const;
  // CollectionPath(ns) + "/" + name, + "/" + subresource when given.
  std::string ObjectPath(const std::string& ns, const std::string& name,
                         const std::string& subresource = "") const;
  // "<apiVersion>" as objects carry it: "v1", "antdt.io/v1alpha1".
  std::string ApiVersion() const;
};

// The kinds the operator uses.
const ResourceRef& PodsResource();
const ResourceRef& ServicesResource();
const ResourceRef& SecretsResource();
const ResourceRef& PersistentVolumeClaimsResource();
const ResourceRef& EventsResource();
const ResourceRef& LeasesResource();     // coordination.k8s.io/v1
const ResourceRef& NodesResource();      // cluster-scoped
const ResourceRef& AntDTJobsResource();  // antdt.io/v1alpha1 antdtjobs
const ResourceRef& CrdsResource();       // apiextensions.k8s.io/v1, cluster-scoped

// Errors. A failed call returns an absl::Status whose payload
// "antdt.io/k8s-status" holds the API server's Status object (JSON text) when
// there was one; the helpers below read its HTTP code and reason. The absl
// code follows the HTTP code: 400/422 InvalidArgument, 401 Unauthenticated,
// 403 PermissionDenied, 404 NotFound, 409 AlreadyExists (reason AlreadyExists)
// or Aborted (reason Conflict), 410 OutOfRange, 429 ResourceExhausted, 5xx and
// transport errors Unavailable, 504 DeadlineExceeded.
// Call the Is* helpers qualified (kube::IsNotFound(s)): absl::IsNotFound and
// absl::IsAlreadyExists are found by argument-dependent lookup too, so an
// unqualified call is ambiguous.
absl::Status ApiError(int http_code, const Json& status_object);  // builds one
int HttpCode(const absl::Status& s);                              // 0 when the status carries none
std::string Reason(const absl::Status& s);                        // "" when none
std::optional<Json> StatusObject(const absl::Status& s);
int RetryAfterSeconds(const absl::Status& s);   // details.retryAfterSeconds, or 0
bool IsNotFound(const absl::Status& s);         // 404
bool IsAlreadyExists(const absl::Status& s);    // 409 AlreadyExists
bool IsConflict(const absl::Status& s);         // 409 Conflict (stale resourceVersion)
bool IsExpired(const absl::Status& s);          // 410, reason Expired or Gone
bool IsInvalid(const absl::Status& s);          // 422
bool IsTooManyRequests(const absl::Status& s);  // 429

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // "" consistent read, "0" any
  int64_t limit = 500;           // pages of this many; the client follows `continue`
  // "" (server default), "NotOlderThan" or "Exact"; sent only with a
  // resource_version. An Exact read of a compacted version is HTTP 410.
  std::string resource_version_match;
};

struct WatchOptions {
  std::string resource_version;  // watch events after this RV
  std::string label_selector;
  std::string field_selector;
  int64_t timeout_seconds = 300;  // the server ends the stream after this
  bool allow_bookmarks = true;
};

struct WatchEvent {
  std::string type;  // ADDED | MODIFIED | DELETED | BOOKMARK | ERROR
  Json object;       // the object, or for ERROR a Status
};

// Cancels a blocking Watch from another thread.
class Cancel {
 public:
  virtual ~Cancel() = default;
  void Trigger() {
    cancelled_ = true;
    OnTrigger();
  }
  bool cancelled() const { return cancelled_; }

 protected:
  virtual void OnTrigger() {}

 private:
  std::atomic<bool> cancelled_{false};
};

enum class PatchType { kMerge, kJson };  // application/merge-patch+json, json-patch+json

struct DeleteOptions {
  std::string propagation_policy;  // "" (server default), Background, Foreground, Orphan
  std::string precondition_uid;
  std::string precondition_resource_version;
  std::optional<int64_t> grace_period_seconds;
};

class Api {
 public:
  virtual ~Api() = default;

  virtual absl::StatusOr<Json> Get(const ResourceRef& r, const std::string& ns,
                                   const std::string& name) = 0;
  // The whole list (pages followed): a *List object with `items` and
  // `metadata.resourceVersion`.
  virtual absl::StatusOr<Json> List(const ResourceRef& r, const std::string& ns,
                                    const ListOptions& options) = 0;
  virtual absl::StatusOr<Json> Create(const ResourceRef& r, const std::string& ns,
                                      const Json& object) = 0;
  // PUT of the whole object; it must carry metadata.resourceVersion.
  virtual absl::StatusOr<Json> Update(const ResourceRef& r, const std::string& ns,
                                      const Json& object) = 0;
  // PUT to the /status subresource.
  virtual absl::StatusOr<Json> UpdateStatus(const ResourceRef& r, const std::string& ns,
                                            const Json& object) = 0;
  virtual absl::StatusOr<Json> Patch(const ResourceRef& r, const std::string& ns,
                                     const std::string& name, const Json& patch,
                                     PatchType type = PatchType::kMerge,
                                     const std::string& subresource = "") = 0;
  virtual absl::Status Delete(const ResourceRef& r, const std::string& ns, const std::string& name,
                              const DeleteOptions& options = {}) = 0;
  // Opens a watch and calls `on_event` for each event, in order, on the
  // calling thread. Returns OK when the server ends the stream (timeout) or
  // `on_event` returns false; the error when the request fails (e.g. 410 as
  // an HTTP status) or the connection breaks; Cancelled when `cancel` fired.
  // An ERROR event is passed to on_event like any other.
  virtual absl::Status Watch(const ResourceRef& r, const std::string& ns,
                             const WatchOptions& options,
                             const std::function<bool(const WatchEvent&)>& on_event,
                             Cancel* cancel) = 0;
  // A Cancel that also aborts this implementation's blocked reads.
  virtual std::unique_ptr<Cancel> NewCancel() { return std::make_unique<Cancel>(); }
};

}  // namespace antdt::kube
