#include "testing/kube-fake/fake_api.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "backends/kubernetes/client/selectors.h"
#include "backends/kubernetes/runtime/internal/util.h"
#include "common/status.h"

namespace antdt::kube {
namespace {

Json StatusJson(int code, const std::string& reason, const std::string& message,
                const Json& details = Json::object()) {
  return Json{{"kind", "Status"},    {"apiVersion", "v1"}, {"metadata", Json::object()},
              {"status", "Failure"}, {"message", message}, {"reason", reason},
              {"details", details},  {"code", code}};
}

absl::Status Err(int code, const std::string& reason, const std::string& message) {
  return ApiError(code, StatusJson(code, reason, message));
}

std::string Resource(const ResourceRef& r) {
  return r.group.empty() ? r.plural : r.plural + "." + r.group;
}

absl::Status NotFound(const ResourceRef& r, const std::string& name) {
  return Err(404, "NotFound", absl::StrCat(Resource(r), " \"", name, "\" not found"));
}

absl::Status Conflict(const ResourceRef& r, const std::string& name) {
  return Err(409, "Conflict",
             absl::StrCat("Operation cannot be fulfilled on ", Resource(r), " \"", name,
                          "\": the object has been modified; please apply your changes to the "
                          "latest version and try again"));
}

std::string StoreKey(const std::string& ns, const std::string& name) {
  return ns.empty() ? name : ns + "/" + name;
}

// Everything but metadata and status, to decide whether generation moves.
Json SpecPart(const Json& object) {
  Json out = object;
  out.erase("metadata");
  out.erase("status");
  return out;
}

std::set<std::string> Finalizers(const Json& object) {
  std::set<std::string> out;
  const Json& meta = object.value("metadata", Json::object());
  if (meta.contains("finalizers") && meta["finalizers"].is_array()) {
    for (const Json& f : meta["finalizers"]) {
      if (f.is_string()) out.insert(f.get<std::string>());
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<bool> MatchesSelectors(const Json& object, const std::string& label_selector,
                                      const std::string& field_selector) {
  absl::StatusOr<LabelSelector> labels = ParseLabelSelector(label_selector);
  if (!labels.ok()) return labels.status();
  absl::StatusOr<FieldSelector> fields = ParseFieldSelector(field_selector);
  if (!fields.ok()) return fields.status();
  return labels->Matches(At(object, {"metadata", "labels"})) && fields->Matches(object);
}

class FakeApi::FakeCancel : public Cancel {
 public:
  explicit FakeCancel(FakeApi* api) : api_(api) {}

 protected:
  void OnTrigger() override {
    absl::MutexLock lock(&api_->mu_);
    api_->cv_.SignalAll();
  }

 private:
  FakeApi* api_;
};

FakeApi::FakeApi(FakeApiOptions options)
    : options_(options), clock_(options.clock ? options.clock : &RealClock::Get()) {}

FakeApi::~FakeApi() = default;

std::string FakeApi::KindId(const ResourceRef& r) { return r.group + "/" + r.plural; }

int64_t FakeApi::Now() const { return clock_->NowMillis(); }

void FakeApi::EnableStatusSubresource(const ResourceRef& r) {
  absl::MutexLock lock(&mu_);
  status_kinds_.insert(KindId(r));
}

absl::Status FakeApi::CheckFault(const std::string& verb) {
  ++requests_[verb];
  auto it = faults_.find(verb);
  if (it == faults_.end() || it->second.empty()) return absl::OkStatus();
  Fault& fault = it->second.front();
  absl::Status status = fault.status;
  if (--fault.count <= 0) it->second.pop_front();
  return status;
}

std::map<std::string, Json>& FakeApi::Objects(const ResourceRef& r) { return objects_[KindId(r)]; }

void FakeApi::Record(const ResourceRef& r, const std::string& type, const Json& object,
                     const Json& old) {
  history_.push_back(HistoryEntry{KindId(r), rv_, type, object, old});
  while (history_.size() > std::max<size_t>(options_.history_size, 1)) {
    compacted_rv_ = history_.front().rv;
    history_.pop_front();
  }
  cv_.SignalAll();
}

absl::StatusOr<Json> FakeApi::Get(const ResourceRef& r, const std::string& ns,
                                  const std::string& name) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("get"));
  auto& objects = Objects(r);
  auto it = objects.find(StoreKey(r.namespaced ? ns : "", name));
  if (it == objects.end()) return NotFound(r, name);
  return it->second;
}

absl::StatusOr<Json> FakeApi::List(const ResourceRef& r, const std::string& ns,
                                   const ListOptions& options) {
  absl::MutexLock lock(&mu_);
  list_rvs_.push_back(options.resource_version);
  RETURN_IF_ERROR(CheckFault("list"));
  Json items = Json::array();
  for (const auto& [key, object] : Objects(r)) {
    if (r.namespaced && !ns.empty() && object["metadata"].value("namespace", "") != ns) continue;
    absl::StatusOr<bool> match =
        MatchesSelectors(object, options.label_selector, options.field_selector);
    if (!match.ok()) return Err(400, "BadRequest", std::string(match.status().message()));
    if (*match) items.push_back(object);
  }
  return Json{{"kind", r.kind + "List"},
              {"apiVersion", r.ApiVersion()},
              {"metadata", {{"resourceVersion", std::to_string(rv_)}}},
              {"items", std::move(items)}};
}

absl::StatusOr<Json> FakeApi::Create(const ResourceRef& r, const std::string& ns,
                                     const Json& object) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("create"));
  if (!object.is_object()) return Err(400, "BadRequest", "the body must be an object");
  Json obj = object;
  Json& meta = obj["metadata"];
  if (!meta.is_object()) meta = Json::object();
  if (r.namespaced) {
    if (ns.empty()) return Err(400, "BadRequest", "a namespace is required");
    if (meta.contains("namespace") && meta["namespace"] != ns) {
      return Err(400, "BadRequest",
                 "the namespace of the provided object does not match the namespace sent on the "
                 "request");
    }
    meta["namespace"] = ns;
  } else {
    meta.erase("namespace");
  }
  std::string name = meta.value("name", "");
  if (name.empty()) {
    std::string prefix = meta.value("generateName", "");
    if (prefix.empty()) {
      return Err(422, "Invalid", "metadata.name: Required value: name or generateName is required");
    }
    static const char kChars[] = "bcdfghjklmnpqrstvwxz2456789";
    do {
      name = prefix;
      for (int i = 0; i < 5; ++i) {
        name += kChars[static_cast<size_t>(internal::RandomUnit() * (sizeof(kChars) - 1))];
      }
    } while (Objects(r).count(StoreKey(r.namespaced ? ns : "", name)));
    meta["name"] = name;
  }
  auto& objects = Objects(r);
  std::string key = StoreKey(r.namespaced ? ns : "", name);
  if (objects.count(key)) {
    return Err(409, "AlreadyExists", absl::StrCat(Resource(r), " \"", name, "\" already exists"));
  }
  if (!obj.contains("apiVersion")) obj["apiVersion"] = r.ApiVersion();
  if (!obj.contains("kind")) obj["kind"] = r.kind;
  if (status_kinds_.count(KindId(r))) obj.erase("status");
  meta["uid"] = internal::RandomUuid();
  meta["resourceVersion"] = std::to_string(++rv_);
  meta["generation"] = 1;
  meta["creationTimestamp"] = FormatTime(Now());
  meta.erase("deletionTimestamp");
  meta.erase("deletionGracePeriodSeconds");
  objects[key] = obj;
  Record(r, "ADDED", obj, Json());
  return obj;
}

absl::StatusOr<Json> FakeApi::Write(const ResourceRef& r, const std::string& ns, Json candidate,
                                    bool status_only) {
  if (!candidate.is_object() || !candidate.contains("metadata") ||
      !candidate["metadata"].is_object()) {
    return Err(400, "BadRequest", "the body must be an object with metadata");
  }
  const std::string name = candidate["metadata"].value("name", "");
  auto& objects = Objects(r);
  const std::string key = StoreKey(r.namespaced ? ns : "", name);
  auto it = objects.find(key);
  if (it == objects.end()) return NotFound(r, name);
  const Json current = it->second;
  const std::string want_rv = candidate["metadata"].value("resourceVersion", "");
  if (want_rv.empty()) {
    return Err(422, "Invalid",
               "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update");
  }
  if (want_rv != current["metadata"].value("resourceVersion", "")) return Conflict(r, name);

  Json next;
  const bool has_status_subresource = status_kinds_.count(KindId(r)) > 0;
  if (status_only && has_status_subresource) {
    next = current;
    if (candidate.contains("status")) {
      next["status"] = candidate["status"];
    } else {
      next.erase("status");
    }
    // The kube-apiserver's node and pod status strategies keep the labels and
    // annotations a status write changes (a custom resource's do not).
    if (r.group.empty()) {
      for (const char* field : {"labels", "annotations"}) {
        if (candidate["metadata"].contains(field)) {
          next["metadata"][field] = candidate["metadata"][field];
        } else {
          next["metadata"].erase(field);
        }
      }
    }
  } else {
    next = std::move(candidate);
    if (has_status_subresource) {
      if (current.contains("status")) {
        next["status"] = current["status"];
      } else {
        next.erase("status");
      }
    }
    // Server-owned and immutable metadata.
    Json& meta = next["metadata"];
    const Json& old_meta = current["metadata"];
    for (const char* field : {"uid", "creationTimestamp", "namespace", "deletionTimestamp",
                              "deletionGracePeriodSeconds", "generation"}) {
      if (old_meta.contains(field)) {
        meta[field] = old_meta[field];
      } else {
        meta.erase(field);
      }
    }
    if (old_meta.contains("deletionTimestamp")) {
      std::set<std::string> before = Finalizers(current);
      for (const std::string& f : Finalizers(next)) {
        if (!before.count(f)) {
          return Err(422, "Invalid",
                     "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                     "object is being deleted");
        }
      }
    }
    if (SpecPart(next) != SpecPart(current)) {
      meta["generation"] = old_meta.value("generation", int64_t{0}) + 1;
    }
  }
  if (!next.contains("apiVersion")) next["apiVersion"] = current["apiVersion"];
  if (!next.contains("kind")) next["kind"] = current["kind"];
  if (next == current) return current;  // no-op: no new RV, no event

  ++rv_;
  next["metadata"]["resourceVersion"] = std::to_string(rv_);
  if (next["metadata"].contains("deletionTimestamp") && Finalizers(next).empty()) {
    Json last = current;
    last["metadata"]["resourceVersion"] = std::to_string(rv_);
    objects.erase(it);
    Record(r, "DELETED", last, Json());
    return next;
  }
  it->second = next;
  Record(r, "MODIFIED", next, current);
  return next;
}

absl::StatusOr<Json> FakeApi::Update(const ResourceRef& r, const std::string& ns,
                                     const Json& object) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("update"));
  return Write(r, ns, object, /*status_only=*/false);
}

absl::StatusOr<Json> FakeApi::UpdateStatus(const ResourceRef& r, const std::string& ns,
                                           const Json& object) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("update_status"));
  return Write(r, ns, object, /*status_only=*/true);
}

absl::StatusOr<Json> FakeApi::Patch(const ResourceRef& r, const std::string& ns,
                                    const std::string& name, const Json& patch, PatchType type,
                                    const std::string& subresource) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("patch"));
  if (!subresource.empty() && subresource != "status") {
    return Err(404, "NotFound", "unknown subresource " + subresource);
  }
  auto& objects = Objects(r);
  auto it = objects.find(StoreKey(r.namespaced ? ns : "", name));
  if (it == objects.end()) return NotFound(r, name);
  const Json& current = it->second;
  Json patched;
  try {
    if (type == PatchType::kMerge) {
      patched = current;
      patched.merge_patch(patch);
    } else {
      patched = current.patch(patch);
    }
  } catch (const std::exception& e) {
    return Err(422, "Invalid", std::string("the patch cannot be applied: ") + e.what());
  }
  if (!patched.is_object() || !patched["metadata"].is_object()) {
    return Err(422, "Invalid", "the patched object has no metadata");
  }
  // A resourceVersion in the patch is a precondition; otherwise the patch
  // applies to the latest object.
  if (patched["metadata"].value("resourceVersion", "").empty()) {
    patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"];
  }
  patched["metadata"]["name"] = name;
  return Write(r, ns, std::move(patched), subresource == "status");
}

absl::Status FakeApi::Delete(const ResourceRef& r, const std::string& ns, const std::string& name,
                             const DeleteOptions& options) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("delete"));
  auto& objects = Objects(r);
  auto it = objects.find(StoreKey(r.namespaced ? ns : "", name));
  if (it == objects.end()) return NotFound(r, name);
  Json& object = it->second;
  Json& meta = object["metadata"];
  if ((!options.precondition_uid.empty() && options.precondition_uid != meta.value("uid", "")) ||
      (!options.precondition_resource_version.empty() &&
       options.precondition_resource_version != meta.value("resourceVersion", ""))) {
    return Conflict(r, name);
  }
  if (!Finalizers(object).empty()) {
    if (meta.contains("deletionTimestamp")) return absl::OkStatus();  // idempotent
    Json old = object;
    meta["deletionTimestamp"] = FormatTime(Now());
    meta["deletionGracePeriodSeconds"] = 0;
    meta["generation"] = meta.value("generation", int64_t{0}) + 1;
    meta["resourceVersion"] = std::to_string(++rv_);
    Record(r, "MODIFIED", object, old);
    return absl::OkStatus();
  }
  Json last = object;
  last["metadata"]["resourceVersion"] = std::to_string(++rv_);
  objects.erase(it);
  Record(r, "DELETED", last, Json());
  return absl::OkStatus();
}

std::unique_ptr<Cancel> FakeApi::NewCancel() { return std::make_unique<FakeCancel>(this); }

absl::Status FakeApi::Watch(const ResourceRef& r, const std::string& ns,
                            const WatchOptions& options,
                            const std::function<bool(const WatchEvent&)>& on_event,
                            Cancel* cancel) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::seconds(std::max<int64_t>(options.timeout_seconds, 1));
  const std::string kind_id = KindId(r);
  auto matches = [&](const Json& object) {
    if (object.is_null()) return false;
    if (r.namespaced && !ns.empty() && object["metadata"].value("namespace", "") != ns) {
      return false;
    }
    absl::StatusOr<bool> m =
        MatchesSelectors(object, options.label_selector, options.field_selector);
    return m.ok() && *m;
  };
  auto expired = [&](int64_t rv, int64_t head) {
    return WatchEvent{"ERROR",
                      StatusJson(410, "Expired",
                                 absl::StrCat("too old resource version: ", rv, " (", head, ")"))};
  };

  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckFault("watch"));
  if (!MatchesSelectors(Json::object(), options.label_selector, options.field_selector).ok()) {
    return Err(400, "BadRequest", "invalid selector");
  }
  ++open_watches_;
  cv_.SignalAll();
  struct Closer {
    FakeApi* api;
    ~Closer() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      --api->open_watches_;
      api->cv_.SignalAll();
    }
  } closer{this};

  const int64_t expire_epoch = expire_epoch_, drop_epoch = drop_epoch_, end_epoch = end_epoch_;
  int64_t bookmark_epoch = bookmark_epoch_;
  std::deque<WatchEvent> pending;
  std::optional<absl::Status> terminal;
  int64_t position;
  if (options.resource_version.empty() || options.resource_version == "0") {
    for (const auto& [key, object] : Objects(r)) {
      if (matches(object)) pending.push_back(WatchEvent{"ADDED", object});
    }
    position = rv_;
  } else if (!absl::SimpleAtoi(options.resource_version, &position)) {
    return Err(400, "BadRequest", "invalid resourceVersion " + options.resource_version);
  }

  while (true) {
    if (cancel != nullptr && cancel->cancelled()) return absl::CancelledError("watch cancelled");
    if (!terminal) {
      if (position < compacted_rv_) {
        pending.push_back(expired(position, rv_));
        terminal = absl::OkStatus();
      } else {
        auto from = std::upper_bound(history_.begin(), history_.end(), position,
                                     [](int64_t rv, const HistoryEntry& e) { return rv < e.rv; });
        for (auto e = from; e != history_.end(); ++e) {
          position = e->rv;
          if (e->kind_id != kind_id) continue;
          if (e->type == "MODIFIED") {
            bool was = matches(e->old), is = matches(e->object);
            if (was && is) pending.push_back(WatchEvent{"MODIFIED", e->object});
            if (!was && is) pending.push_back(WatchEvent{"ADDED", e->object});
            if (was && !is) pending.push_back(WatchEvent{"DELETED", e->object});
          } else if (matches(e->object)) {
            pending.push_back(WatchEvent{e->type, e->object});
          }
        }
        if (position < rv_) position = rv_;
      }
    }
    if (!terminal) {
      if (expire_epoch_ != expire_epoch) {
        pending.push_back(expired(position, rv_));
        terminal = absl::OkStatus();
      } else if (drop_epoch_ != drop_epoch) {
        terminal = absl::UnavailableError("watch connection dropped (fake)");
      } else if (end_epoch_ != end_epoch || std::chrono::steady_clock::now() >= deadline) {
        terminal = absl::OkStatus();
      } else if (bookmark_epoch_ != bookmark_epoch) {
        bookmark_epoch = bookmark_epoch_;
        if (options.allow_bookmarks) {
          pending.push_back(WatchEvent{
              "BOOKMARK", Json{{"kind", r.kind},
                               {"apiVersion", r.ApiVersion()},
                               {"metadata", {{"resourceVersion", std::to_string(position)}}}}});
        }
      }
    }
    if (pending.empty()) {
      if (terminal) return *terminal;
      auto left = deadline - std::chrono::steady_clock::now();
      auto slice =
          std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(50));
      if (slice.count() > 0) cv_.WaitWithTimeout(&mu_, absl::FromChrono(slice));
      continue;
    }
    std::deque<WatchEvent> batch;
    batch.swap(pending);
    mu_.Unlock();
    bool keep_going = true;
    for (const WatchEvent& event : batch) {
      if (cancel != nullptr && cancel->cancelled()) break;
      if (!on_event(event)) {
        keep_going = false;
        break;
      }
    }
    mu_.Lock();
    if (!keep_going) return absl::OkStatus();
  }
}

void FakeApi::ExpireWatches() {
  absl::MutexLock lock(&mu_);
  ++expire_epoch_;
  compacted_rv_ = rv_;
  history_.clear();
  cv_.SignalAll();
}

void FakeApi::DropWatches() {
  absl::MutexLock lock(&mu_);
  ++drop_epoch_;
  cv_.SignalAll();
}

void FakeApi::EndWatches() {
  absl::MutexLock lock(&mu_);
  ++end_epoch_;
  cv_.SignalAll();
}

void FakeApi::SendBookmarks() {
  absl::MutexLock lock(&mu_);
  ++bookmark_epoch_;
  cv_.SignalAll();
}

void FakeApi::FailNext(const std::string& verb, absl::Status status, int count) {
  absl::MutexLock lock(&mu_);
  if (count > 0) faults_[verb].push_back(Fault{std::move(status), count});
}

void FakeApi::Compact() {
  absl::MutexLock lock(&mu_);
  compacted_rv_ = rv_;
  history_.clear();
}

int64_t FakeApi::Requests(const std::string& verb) const {
  absl::MutexLock lock(&mu_);
  auto it = requests_.find(verb);
  return it == requests_.end() ? 0 : it->second;
}

std::vector<std::string> FakeApi::ListResourceVersions() const {
  absl::MutexLock lock(&mu_);
  return list_rvs_;
}

int FakeApi::OpenWatches() const {
  absl::MutexLock lock(&mu_);
  return open_watches_;
}

bool FakeApi::WaitForOpenWatches(int n, int64_t timeout_ms) const {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return open_watches_ >= n; };
  return internal::WaitUntil(mu_, cv_, &RealClock::Get(), RealClock::Get().NowMillis() + timeout_ms,
                             done);
}

std::string FakeApi::ResourceVersion() const {
  absl::MutexLock lock(&mu_);
  return std::to_string(rv_);
}

}  // namespace antdt::kube
