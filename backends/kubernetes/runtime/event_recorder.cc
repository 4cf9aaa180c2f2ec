#include "backends/kubernetes/runtime/event_recorder.h"

#include <utility>

#include "absl/strings/str_format.h"
#include "backends/kubernetes/runtime/internal/util.h"
#include "common/log.h"

namespace antdt::kube {
namespace {

bool IsTransport(const absl::Status& s) {
  return HttpCode(s) == 0 && (s.code() == absl::StatusCode::kUnavailable ||
                              s.code() == absl::StatusCode::kDeadlineExceeded);
}

std::string Str(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

EventRecorder::EventRecorder(Api* api, std::string component, std::string instance,
                             EventRecorderOptions options)
    : api_(api),
      component_(std::move(component)),
      instance_(std::move(instance)),
      options_(options),
      clock_(options.clock ? options.clock : &RealClock::Get()) {
  thread_ = std::thread([this] { Loop(); });
}

EventRecorder::~EventRecorder() { Shutdown(); }

void EventRecorder::Record(const Json& involved_object, const std::string& type,
                           const std::string& reason, const std::string& message) {
  absl::MutexLock lock(&mu_);
  if (shutdown_ || queue_.size() >= options_.queue_size) {
    ++stats_.dropped;
    return;
  }
  ++stats_.recorded;
  queue_.push_back(Pending{involved_object, type, reason, message, clock_->NowMillis()});
  cv_.SignalAll();
}

bool EventRecorder::Flush(int64_t timeout_ms) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return queue_.empty() && !busy_; };
  return internal::WaitUntil(mu_, cv_, &RealClock::Get(), RealClock::Get().NowMillis() + timeout_ms,
                             done);
}

void EventRecorder::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
    cv_.SignalAll();
  }
  if (thread_.joinable()) thread_.join();
}

EventRecorder::Stats EventRecorder::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void EventRecorder::Loop() {
  absl::MutexLock lock(&mu_);
  while (true) {
    while (queue_.empty() && !shutdown_) cv_.Wait(&mu_);
    if (queue_.empty()) return;  // shut down and drained
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    mu_.Unlock();
    Write(p);
    mu_.Lock();
    busy_ = false;
    cv_.SignalAll();
  }
}

template <typename Call>
auto EventRecorder::WithRetries(Call call) -> decltype(call()) {
  for (int attempt = 1;; ++attempt) {
    auto result = call();
    absl::Status status;
    if constexpr (std::is_same_v<decltype(result), absl::Status>) {
      status = result;
    } else {
      status = result.status();
    }
    if (status.ok() || !IsTransport(status) || attempt >= options_.transport_tries) return result;
    absl::MutexLock lock(&mu_);
    internal::WaitUntil(mu_, cv_, clock_, clock_->NowMillis() + options_.retry_delay_ms,
                        [] { return false; });
  }
}

void EventRecorder::Write(const Pending& p) {
  const Json meta = p.object.value("metadata", Json::object());
  std::string uid = Str(meta, "uid");
  if (uid.empty()) uid = Str(p.object, "kind") + "/" + KeyOf(p.object);
  const std::string cache_key = uid + '\x1f' + p.type + '\x1f' + p.reason + '\x1f' + p.message;
  const std::string timestamp = FormatTime(p.at_ms);

  auto seen = seen_.find(cache_key);
  if (seen != seen_.end()) {
    Seen& s = seen->second.first;
    Json patch{{"count", s.count + 1}, {"lastTimestamp", timestamp}};
    absl::StatusOr<Json> patched = WithRetries(
        [&] { return api_->Patch(EventsResource(), s.ns, s.name, patch, PatchType::kMerge); });
    if (patched.ok()) {
      ++s.count;
      lru_.splice(lru_.begin(), lru_, seen->second.second);
      absl::MutexLock lock(&mu_);
      ++stats_.patched;
      return;
    }
    lru_.erase(seen->second.second);
    seen_.erase(seen);
    if (!kube::IsNotFound(patched.status())) {
      LogEvent("event_patch_failed",
               {{"reason", p.reason}, {"error", std::string(patched.status().message())}});
      absl::MutexLock lock(&mu_);
      ++stats_.failed;
      return;
    }
    // The Event is gone (expired): write a new one.
  }

  std::string ns = Str(meta, "namespace");
  if (ns.empty()) ns = "default";
  const std::string object_name = Str(meta, "name");
  int64_t name_ns = p.at_ms * 1'000'000;
  if (name_ns <= last_name_ns_) name_ns = last_name_ns_ + 1;
  last_name_ns_ = name_ns;
  const std::string name = absl::StrFormat("%s.%x", object_name, name_ns);
  Json involved{{"apiVersion", Str(p.object, "apiVersion")},
                {"kind", Str(p.object, "kind")},
                {"name", object_name},
                {"uid", Str(meta, "uid")},
                {"resourceVersion", Str(meta, "resourceVersion")}};
  if (!Str(meta, "namespace").empty()) involved["namespace"] = Str(meta, "namespace");
  Json event{{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata", {{"name", name}, {"namespace", ns}}},
             {"involvedObject", std::move(involved)},
             {"reason", p.reason},
             {"message", p.message},
             {"type", p.type},
             {"source", {{"component", component_}}},
             {"firstTimestamp", timestamp},
             {"lastTimestamp", timestamp},
             {"count", 1},
             {"reportingComponent", component_},
             {"reportingInstance", instance_}};
  absl::StatusOr<Json> created =
      WithRetries([&] { return api_->Create(EventsResource(), ns, event); });
  if (!created.ok()) {
    if (!kube::IsAlreadyExists(created.status())) {
      LogEvent("event_create_failed",
               {{"reason", p.reason}, {"error", std::string(created.status().message())}});
    }
    absl::MutexLock lock(&mu_);
    ++stats_.failed;
    return;
  }
  lru_.push_front(cache_key);
  seen_[cache_key] = {Seen{ns, name, 1, timestamp}, lru_.begin()};
  while (seen_.size() > options_.cache_size && !lru_.empty()) {
    seen_.erase(lru_.back());
    lru_.pop_back();
  }
  absl::MutexLock lock(&mu_);
  ++stats_.created;
}

}  // namespace antdt::kube
