#include "backends/kubernetes/runtime/informer.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backends/kubernetes/runtime/internal/util.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::kube {
namespace {

constexpr int64_t kShortWatchMs = 1000;      // a watch shorter than this with no events is an error
constexpr int kMaxInternalErrorRetries = 3;  // 5xx from a watch, before relisting

bool IsTooLargeResourceVersion(const absl::Status& s) {
  if (HttpCode(s) != 504) return false;
  std::optional<Json> status = StatusObject(s);
  if (!status || !status->contains("details")) return false;
  const Json& details = (*status)["details"];
  if (!details.contains("causes") || !details["causes"].is_array()) return false;
  for (const Json& cause : details["causes"]) {
    if (cause.value("type", "") == "ResourceVersionTooLarge") return true;
  }
  return false;
}

// A failure to reach the server (no HTTP status): retried on the same RV.
bool IsTransportError(const absl::Status& s) {
  return HttpCode(s) == 0 && (s.code() == absl::StatusCode::kUnavailable ||
                              s.code() == absl::StatusCode::kDeadlineExceeded ||
                              s.code() == absl::StatusCode::kCancelled);
}

}  // namespace

Informer::Informer(Api* api, ResourceRef resource, std::string ns, ListOptions selectors,
                   InformerOptions options)
    : api_(api),
      resource_(std::move(resource)),
      ns_(std::move(ns)),
      selectors_(std::move(selectors)),
      options_(std::move(options)),
      clock_(options_.clock ? options_.clock : &RealClock::Get()),
      name_(options_.name.empty() ? resource_.plural : options_.name) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandler(Handlers handlers) {
  absl::MutexLock lock(&mu_);
  if (started_) {
    LogEvent("informer_handler_after_start_ignored", {{"informer", name_}});
    return;
  }
  handlers_.push_back(std::move(handlers));
}

void Informer::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (started_ || stopping_) return;
    started_ = true;
  }
  reflector_ = std::thread([this] { ReflectorLoop(); });
  dispatcher_ = std::thread([this] { DispatchLoop(); });
}

void Informer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    if (cancel_) cancel_->Trigger();
    cv_.SignalAll();
  }
  if (reflector_.joinable()) reflector_.join();
  if (dispatcher_.joinable()) dispatcher_.join();
}

bool Informer::stopping() const {
  absl::MutexLock lock(&mu_);
  return stopping_;
}

bool Informer::HasSynced() const {
  absl::MutexLock lock(&mu_);
  return synced_;
}

bool Informer::WaitForSync(int64_t timeout_ms) const {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return synced_ || stopping_; };
  internal::WaitUntil(mu_, cv_, &RealClock::Get(), RealClock::Get().NowMillis() + timeout_ms, done);
  return synced_;
}

std::optional<Json> Informer::Get(const std::string& key) const {
  absl::MutexLock lock(&mu_);
  auto it = store_.find(key);
  if (it == store_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::List() const { return List("", {}); }

std::vector<Json> Informer::List(const std::string& ns,
                                 const std::map<std::string, std::string>& labels) const {
  absl::MutexLock lock(&mu_);
  std::vector<Json> out;
  for (const auto& [key, object] : store_) {
    const Json meta = object.value("metadata", Json::object());
    if (!ns.empty() && meta.value("namespace", "") != ns) continue;
    const Json object_labels = meta.value("labels", Json::object());
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = object_labels.find(k);
      if (it == object_labels.end() || *it != v) {
        match = false;
        break;
      }
    }
    if (match) out.push_back(object);
  }
  return out;
}

std::string Informer::LastSyncResourceVersion() const {
  absl::MutexLock lock(&mu_);
  return last_sync_rv_;
}

Informer::Stats Informer::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool Informer::SleepMs(int64_t ms) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; };
  internal::WaitUntil(mu_, cv_, clock_, clock_->NowMillis() + ms, done);
  return !stopping_;
}

bool Informer::Backoff() {
  const int64_t now = clock_->NowMillis();
  if (backoff_next_ms_ == 0 || now - last_backoff_at_ms_ > options_.backoff_reset_ms) {
    backoff_next_ms_ = options_.backoff_initial_ms;
  }
  last_backoff_at_ms_ = now;
  int64_t delay = backoff_next_ms_;
  if (options_.backoff_jitter > 0) {
    delay += static_cast<int64_t>(options_.backoff_jitter * internal::RandomUnit() *
                                  static_cast<double>(delay));
  }
  backoff_next_ms_ =
      std::min<int64_t>(options_.backoff_cap_ms,
                        static_cast<int64_t>(std::ceil(static_cast<double>(backoff_next_ms_) *
                                                       options_.backoff_factor)));
  return SleepMs(delay);
}

void Informer::ReflectorLoop() {
  bool first = true;
  while (!stopping()) {
    // As client-go's BackoffUntil: every relist waits a backoff period.
    if (!first && !Backoff()) break;
    first = false;
    absl::Status status = ListAndWatch();
    if (!status.ok() && !stopping()) {
      LogEvent("informer_list_watch_failed",
               {{"informer", name_}, {"error", std::string(status.message())}});
    }
  }
}

absl::Status Informer::ListAndWatch() {
  RETURN_IF_ERROR(DoList());
  ASSIGN_OR_RETURN(WatchEnd end, WatchLoop());
  (void)end;
  return absl::OkStatus();
}

absl::Status Informer::DoList() {
  auto relist_rv = [this] {
    absl::MutexLock lock(&mu_);
    if (last_sync_rv_unavailable_) return std::string();
    return last_sync_rv_.empty() ? std::string("0") : last_sync_rv_;
  };
  ListOptions options = selectors_;
  options.resource_version = relist_rv();
  absl::StatusOr<Json> list = api_->List(resource_, ns_, options);
  if (!list.ok() && (IsExpired(list.status()) || IsTooLargeResourceVersion(list.status()))) {
    {
      absl::MutexLock lock(&mu_);
      last_sync_rv_unavailable_ = true;
    }
    options.resource_version = relist_rv();
    list = api_->List(resource_, ns_, options);
  }
  if (!list.ok()) return list.status();
  const Json& items =
      list->contains("items") && (*list)["items"].is_array() ? (*list)["items"] : Json::array();
  std::string rv;
  if (list->contains("metadata") && (*list)["metadata"].is_object()) {
    rv = (*list)["metadata"].value("resourceVersion", "");
  }
  Replace(items, rv);
  return absl::OkStatus();
}

void Informer::Replace(const Json& items, const std::string& rv) {
  absl::MutexLock lock(&mu_);
  std::map<std::string, Json> next;
  for (Json item : items) {
    if (!item.contains("apiVersion")) item["apiVersion"] = resource_.ApiVersion();
    if (!item.contains("kind")) item["kind"] = resource_.kind;
    std::string key = KeyOf(item);
    auto old = store_.find(key);
    if (old == store_.end()) {
      Enqueue(Notification{Notification::kAdd, Json(), item});
    } else if (ResourceVersionOf(old->second) != ResourceVersionOf(item)) {
      Enqueue(Notification{Notification::kUpdate, old->second, item});
    }
    next.emplace(std::move(key), std::move(item));
  }
  for (const auto& [key, object] : store_) {
    if (!next.count(key)) {
      Enqueue(Notification{Notification::kDelete, object, object, /*final_state_unknown=*/true});
    }
  }
  store_ = std::move(next);
  last_sync_rv_ = rv;
  last_sync_rv_unavailable_ = false;
  ++stats_.lists;
  if (stats_.lists > 1) ++stats_.relists;
  if (sync_mark_ < 0) {
    sync_mark_ = queued_total_;
    if (delivered_total_ >= sync_mark_) synced_ = true;
  }
  cv_.SignalAll();
}

void Informer::Enqueue(Notification n) {
  queue_.push_back(std::move(n));
  ++queued_total_;
  cv_.SignalAll();
}

void Informer::Apply(const WatchEvent& event) {
  absl::MutexLock lock(&mu_);
  ++stats_.events;
  std::string rv = ResourceVersionOf(event.object);
  if (!rv.empty()) last_sync_rv_ = rv;
  if (event.type == "BOOKMARK") return;
  Json object = event.object;
  if (!object.contains("apiVersion")) object["apiVersion"] = resource_.ApiVersion();
  if (!object.contains("kind")) object["kind"] = resource_.kind;
  std::string key = KeyOf(object);
  auto it = store_.find(key);
  if (event.type == "ADDED" || event.type == "MODIFIED") {
    if (it == store_.end()) {
      Enqueue(Notification{Notification::kAdd, Json(), object});
      store_.emplace(std::move(key), std::move(object));
    } else {
      Enqueue(Notification{Notification::kUpdate, it->second, object});
      it->second = std::move(object);
    }
  } else if (event.type == "DELETED") {
    if (it != store_.end()) store_.erase(it);
    Enqueue(Notification{Notification::kDelete, object, object, false});
  }
}

absl::StatusOr<Informer::WatchEnd> Informer::WatchLoop() {
  int internal_errors = 0;
  while (true) {
    WatchOptions options;
    options.label_selector = selectors_.label_selector;
    options.field_selector = selectors_.field_selector;
    options.allow_bookmarks = true;
    const int64_t lo = std::max<int64_t>(1, options_.min_watch_timeout_s);
    const int64_t hi = std::max(lo, options_.max_watch_timeout_s);
    options.timeout_seconds = std::min(
        hi, lo + static_cast<int64_t>(internal::RandomUnit() * static_cast<double>(hi - lo + 1)));
    std::unique_ptr<Cancel> cancel = api_->NewCancel();
    Cancel* cancel_ptr = cancel.get();
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return WatchEnd::kStopped;
      options.resource_version = last_sync_rv_;
      cancel_ = std::move(cancel);
      ++stats_.watches;
    }
    const int64_t start = clock_->NowMillis();
    int64_t events = 0;
    bool expired = false;
    std::optional<absl::Status> error_event;
    absl::Status status = api_->Watch(
        resource_, ns_, options,
        [&](const WatchEvent& event) {
          if (event.type == "ERROR") {
            int code = event.object.is_object() ? event.object.value("code", 0) : 0;
            if (code == 410) {
              expired = true;
            } else {
              error_event = ApiError(code == 0 ? 500 : code, event.object);
            }
            return false;
          }
          ++events;
          Apply(event);
          return true;
        },
        cancel_ptr);
    {
      absl::MutexLock lock(&mu_);
      cancel_.reset();
      if (stopping_) return WatchEnd::kStopped;
    }
    if (expired || IsExpired(status)) {
      absl::MutexLock lock(&mu_);
      ++stats_.watch_restarts_expired;
      return WatchEnd::kRelist;
    }
    if (error_event) status = *error_event;
    if (status.ok()) {
      if (events == 0 && clock_->NowMillis() - start < kShortWatchMs) {
        status = absl::UnavailableError("very short watch: ended within 1s with no events");
      } else {
        absl::MutexLock lock(&mu_);
        ++stats_.watch_restarts_timeout;
        internal_errors = 0;
        continue;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      ++stats_.watch_restarts_error;
    }
    LogEvent("informer_watch_failed", {{"informer", name_},
                                       {"code", HttpCode(status)},
                                       {"error", std::string(status.message())}});
    const int code = HttpCode(status);
    if (IsTooManyRequests(status) || IsTransportError(status) ||
        (code >= 500 && ++internal_errors <= kMaxInternalErrorRetries)) {
      if (!Backoff()) return WatchEnd::kStopped;
      continue;  // rewatch from the same RV
    }
    return status;  // relist after backoff
  }
}

void Informer::DispatchLoop() {
  absl::MutexLock lock(&mu_);
  const bool resync = options_.resync_ms > 0;
  int64_t next_resync = resync ? clock_->NowMillis() + options_.resync_ms : 0;
  while (true) {
    auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !queue_.empty(); };
    if (resync) {
      internal::WaitUntil(mu_, cv_, clock_, next_resync, ready);
    } else {
      while (!ready()) cv_.Wait(&mu_);
    }
    if (stopping_) return;
    if (!queue_.empty()) {
      Notification n = std::move(queue_.front());
      queue_.pop_front();
      mu_.Unlock();
      for (const Handlers& h : handlers_) {
        switch (n.kind) {
          case Notification::kAdd:
            if (h.on_add) h.on_add(n.now);
            break;
          case Notification::kUpdate:
            if (h.on_update) h.on_update(n.old, n.now);
            break;
          case Notification::kDelete:
            if (h.on_delete) h.on_delete(n.old, n.final_state_unknown);
            break;
        }
      }
      mu_.Lock();
      ++delivered_total_;
      if (!synced_ && sync_mark_ >= 0 && delivered_total_ >= sync_mark_) {
        synced_ = true;
        cv_.SignalAll();
      }
      continue;
    }
    if (resync && clock_->NowMillis() >= next_resync) {
      next_resync = clock_->NowMillis() + options_.resync_ms;
      if (sync_mark_ >= 0) {
        for (const auto& [key, object] : store_) {
          Enqueue(Notification{Notification::kUpdate, object, object});
        }
      }
    }
  }
}

}  // namespace antdt::kube
