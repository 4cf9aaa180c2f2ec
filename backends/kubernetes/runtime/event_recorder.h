// Records core/v1 Events about objects, like client-go's record.EventRecorder,
// simplified:
// - an Event is named "<object name>.<unixnano in hex>" and lives in the
//   object's namespace ("default" for cluster-scoped objects);
// - a repeat of the same (object uid, type, reason, message) is a merge PATCH
//   of count and lastTimestamp on the Event already written (an LRU of
//   `cache_size` entries remembers them); when that Event is gone, a new one
//   is created;
// - asynchronous: Record() only queues (bounded; dropped when full) and a
//   background thread writes. Failures are never fatal: API errors are
//   logged and dropped, transport errors retried a few times.
// Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "backends/kubernetes/client/api.h"
#include "common/clock.h"

namespace antdt::kube {

struct EventRecorderOptions {
  size_t queue_size = 1000;
  size_t cache_size = 4096;
  // Tries of one write when the server cannot be reached, and the wait
  // between them (on `clock`).
  int transport_tries = 3;
  int64_t retry_delay_ms = 1000;
  Clock* clock = nullptr;  // timestamps, names and retry waits; RealClock when null
};

class EventRecorder {
 public:
  struct Stats {
    int64_t recorded = 0;  // accepted by Record
    int64_t dropped = 0;   // queue full or shut down
    int64_t created = 0;
    int64_t patched = 0;
    int64_t failed = 0;  // given up
  };

  EventRecorder(Api* api, std::string component, std::string instance,
                EventRecorderOptions options = {});
  ~EventRecorder();  // Shutdown()
  EventRecorder(const EventRecorder&) = delete;
  EventRecorder& operator=(const EventRecorder&) = delete;

  // `type` is "Normal" or "Warning"; `reason` CamelCase.
  void Record(const Json& involved_object, const std::string& type, const std::string& reason,
              const std::string& message);
  // Blocks (real time) until everything queued so far is written or given
  // up; false on timeout.
  bool Flush(int64_t timeout_ms);
  // Writes what is queued, then stops the thread. Later Records are dropped.
  void Shutdown();
  Stats stats() const;

 private:
  struct Pending {
    Json object;
    std::string type, reason, message;
    int64_t at_ms;
  };
  struct Seen {
    std::string ns, name;
    int64_t count;
    std::string first_timestamp;
  };

  void Loop();
  void Write(const Pending& p);
  // Runs `call` until it succeeds or fails with a non-transport error.
  template <typename Call>
  auto WithRetries(Call call) -> decltype(call());

  Api* const api_;
  const std::string component_;
  const std::string instance_;
  const EventRecorderOptions options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  Stats stats_ ABSL_GUARDED_BY(mu_);
  // Writer thread only: the last name's timestamp and an LRU of the events
  // written.
  int64_t last_name_ns_ = 0;
  std::list<std::string> lru_;
  std::map<std::string, std::pair<Seen, std::list<std::string>::iterator>> seen_;
  std::thread thread_;
};

}  // namespace antdt::kube
