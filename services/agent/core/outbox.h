// What the agent has to send to the Monitor: a bounded FIFO that keeps the
// newest messages while the Monitor is unreachable and counts what it drops.
// The sender takes queued step reports as one batch (Take): one stream message
// carries many reports, which is what lets one Monitor core ingest hundreds of
// thousands a second (docs/benchmarks.md).
// Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "antdt/v1/monitor.pb.h"

namespace antdt::agent {

class Outbox {
 public:
  explicit Outbox(size_t capacity) : capacity_(capacity) {}

  // Queues a message; when full, the oldest message is dropped and counted.
  void Push(v1::AgentMessage message);
  // Waits up to `timeout_ms` for a message; does not remove it (Pop() does,
  // once the message was written), so a failed write loses nothing.
  std::optional<v1::AgentMessage> Peek(int64_t timeout_ms);
  void Pop();

  // How Take batches step reports.
  struct Batching {
    // Reports in one message at most (a queued message of more is taken
    // whole, alone). 512 reports of ~200 bytes: ~100 KB, far under gRPC's
    // 4 MB message limit.
    int max_reports = 512;
    // How long a step report may wait in the queue for others to join it:
    // the delay batching adds to a report at low rates (none once that many
    // are queued, or when a node sample is behind it). A detection window is
    // 10 s, so 5 ms is noise.
    int64_t linger_ms = 5;
  };
  // Waits up to `timeout_ms` for a message and removes what it returns: the
  // front message when it is not a step report; else the step reports queued
  // at the front (`step` or `steps` messages, in order, up to
  // batching.max_reports) as one message, `steps`, or `step` for a lone
  // report, after waiting until the first was queued batching.linger_ms ago
  // (or enough reports, or another message, are queued). PutBack() returns it
  // to the front when the write failed, so a failed write loses nothing.
  std::optional<v1::AgentMessage> Take(int64_t timeout_ms, const Batching& batching);
  // Puts a message Take returned back at the front (beyond capacity, the
  // oldest are dropped and counted, as by Push).
  void PutBack(v1::AgentMessage message);
  void Close();  // wakes waiters; Peek returns nullopt from then on

  size_t size() const;
  int64_t dropped_node_samples() const;
  int64_t dropped_step_reports() const;

 private:
  struct Entry {
    v1::AgentMessage message;
    std::chrono::steady_clock::time_point queued;
  };
  // Drops the oldest while more than `keep` are queued; counts what it drops.
  void TrimLocked(size_t keep);

  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> queue_;
  int64_t queued_steps_ = 0;   // step reports in queue_
  int64_t queued_others_ = 0;  // messages in queue_ that are not step reports
  int64_t dropped_samples_ = 0;
  int64_t dropped_steps_ = 0;
  bool closed_ = false;
};

// The newest directive of each kind (a batch change, a parameter server's
// move) per worker, as received from the Monitor; the SDK picks them up with
// its next step report, so a move never hides a batch change sent before it.
// Thread-safe.
class DirectiveTable {
 public:
  void Put(const v1::Directive& directive);
  // Directives are kept per job (JobKey(namespace, job)), worker and kind.
  // The directives of `worker` of job `job` in namespace `ns` newer than
  // `applied_version`, oldest first; for `ns` "" (a worker that reports no
  // namespace), that job's in any namespace.
  std::vector<v1::Directive> Newer(const std::string& ns, const std::string& job,
                                   const std::string& worker, int64_t applied_version) const;

  // The jobs' credentials as the Monitor last sent them (digests, all jobs).
  void SetJobCredentials(const v1::JobCredentials& credentials);
  // Whether a step report of job ns/job carrying a credential of `digest` ("":
  // none) may go on: yes for a job whose credential the Monitor did not send;
  // for a worker that reports no namespace, when some namespace's job of that
  // name has it.
  bool CredentialAccepted(const std::string& ns, const std::string& job,
                          const std::string& digest) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::string> job_digests_;  // (ns, job)
  // (job key, worker, Directive::action_case) -> the newest.
  std::map<std::tuple<std::string, std::string, int>, v1::Directive> latest_;
};

}  // namespace antdt::agent
