// What the agent has to send to the Monitor: a bounded FIFO that keeps the
// newest messages while the Monitor is unreachable and counts what it drops.
// Thread-safe.
#pragma once

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
  void Close();  // wakes waiters; Peek returns nullopt from then on

  size_t size() const;
  int64_t dropped_node_samples() const;
  int64_t dropped_step_reports() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<v1::AgentMessage> queue_;
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
