// An informer: client-go's reflector (LIST, then WATCH from the list's
// resourceVersion, relist on 410 Gone and rewatch, as the Kubernetes API
// concepts page "Efficient detection of changes" says), a thread-safe cache of the objects, and
// event handlers.
//
// Threads: Start() runs two named threads: the reflector, which lists,
// watches and updates the cache, and the dispatcher ("the informer thread"),
// which calls the handlers, one notification at a time and in the order the
// cache changed, and re-delivers every object as an update (old == new) every
// `resync_ms`. The cache can run ahead of the handlers, never behind: a
// handler that reads Get()/List() sees at least the state it was told about.
// Get, List, HasSynced, WaitForSync, LastSyncResourceVersion and stats are
// thread-safe; AddHandler must be called before Start.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backends/kubernetes/client/api.h"
#include "common/clock.h"

namespace antdt::kube {

struct InformerOptions {
  // Each WATCH asks for a random timeoutSeconds in [min, max].
  int64_t min_watch_timeout_s = 300;
  int64_t max_watch_timeout_s = 600;
  // Backoff after failures: initial * factor^n, capped, times (1 + jitter *
  // rand[0,1)); back to initial after `backoff_reset_ms` without failures.
  int64_t backoff_initial_ms = 800;
  double backoff_factor = 2.0;
  int64_t backoff_cap_ms = 30'000;
  double backoff_jitter = 1.0;
  int64_t backoff_reset_ms = 120'000;
  // 0: never re-deliver.
  int64_t resync_ms = 0;
  // In logs; defaults to the resource's plural.
  std::string name;
  // Backoff, resync and the short-watch check; the RealClock when null.
  Clock* clock = nullptr;
};

struct Handlers {
  std::function<void(const Json&)> on_add;
  std::function<void(const Json& old, const Json& now)> on_update;
  // `final_state_unknown`: the object vanished while the watch was down and
  // a relist found it gone; `last` is the last state the cache had.
  std::function<void(const Json& last, bool final_state_unknown)> on_delete;
};

class Informer {
 public:
  struct Stats {
    int64_t lists = 0;                   // successful LISTs, the first included
    int64_t relists = 0;                 // successful LISTs after the first
    int64_t watches = 0;                 // WATCH requests made
    int64_t watch_restarts_timeout = 0;  // clean ends, rewatched at once
    int64_t watch_restarts_expired = 0;  // 410 (event or HTTP), relisted
    int64_t watch_restarts_error = 0;    // transport, 429, short or other errors
    int64_t events = 0;                  // watch events received, bookmarks included
  };

  // `ns` "" watches all namespaces (or a cluster-scoped kind); `selectors`
  // gives the label and field selectors of both LIST and WATCH.
  Informer(Api* api, ResourceRef resource, std::string ns, ListOptions selectors,
           InformerOptions options = {});
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void AddHandler(Handlers handlers);
  void Start();
  // Cancels the watch and joins the threads; handlers are not called after
  // it returns. Idempotent.
  void Stop();

  // True once the first LIST has been stored and delivered to the handlers.
  bool HasSynced() const;
  // Blocks (real time) until HasSynced(); false on timeout or Stop.
  bool WaitForSync(int64_t timeout_ms) const;

  // `key` is "namespace/name", or "name" for cluster-scoped kinds.
  std::optional<Json> Get(const std::string& key) const;
  std::vector<Json> List() const;
  // Objects in `ns` ("" any) whose labels include all of `labels`.
  std::vector<Json> List(const std::string& ns,
                         const std::map<std::string, std::string>& labels) const;
  std::string LastSyncResourceVersion() const;
  Stats stats() const;

 private:
  struct Notification {
    enum Kind { kAdd, kUpdate, kDelete } kind;
    Json old;
    Json now;
    bool final_state_unknown = false;
  };
  enum class WatchEnd { kRelist, kStopped };

  void ReflectorLoop();
  void DispatchLoop();
  // One LIST + WATCH cycle. OK when a relist is due without backoff;
  // an error when the caller should back off and relist.
  absl::Status ListAndWatch();
  absl::Status DoList();
  // Watches until a relist is needed (kRelist) or Stop (kStopped).
  absl::StatusOr<WatchEnd> WatchLoop();
  // Sleeps for the next backoff period; false when stopped meanwhile.
  bool Backoff();
  bool SleepMs(int64_t ms);
  void Replace(const Json& items, const std::string& rv);
  void Apply(const WatchEvent& event);
  void Enqueue(Notification n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool stopping() const;

  Api* const api_;
  const ResourceRef resource_;
  const std::string ns_;
  const ListOptions selectors_;
  const InformerOptions options_;
  Clock* const clock_;
  std::string name_;
  std::vector<Handlers> handlers_;

  mutable absl::Mutex mu_;
  mutable absl::CondVar cv_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool synced_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, Json> store_ ABSL_GUARDED_BY(mu_);
  std::deque<Notification> queue_ ABSL_GUARDED_BY(mu_);
  // Notifications queued and delivered so far; synced_ turns true once
  // delivered_total_ reaches sync_mark_, queued_total_ after the first list
  // (-1 until then).
  int64_t queued_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t delivered_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sync_mark_ ABSL_GUARDED_BY(mu_) = -1;
  std::string last_sync_rv_ ABSL_GUARDED_BY(mu_);
  bool last_sync_rv_unavailable_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Cancel> cancel_ ABSL_GUARDED_BY(mu_);
  // Backoff state (reflector thread only).
  int64_t backoff_next_ms_ = 0;
  int64_t last_backoff_at_ms_ = 0;

  std::thread reflector_;
  std::thread dispatcher_;
};

}  // namespace antdt::kube
