#include "services/agent/core/outbox.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "common/credential.h"
#include "common/job_key.h"

namespace antdt::agent {

namespace {

bool IsStep(const v1::AgentMessage& m) { return m.has_step() || m.has_steps(); }

// Step reports in a message.
int64_t StepsIn(const v1::AgentMessage& m) {
  if (m.has_step()) return 1;
  if (m.has_steps()) return m.steps().steps_size();
  return 0;
}

// Moves the reports of `from` (a `step` or `steps` message) to the end of
// `to`, without copying them.
void MoveSteps(v1::AgentMessage& from, v1::StepBatch& to) {
  if (from.has_step()) {
    to.mutable_steps()->AddAllocated(from.release_step());
    return;
  }
  auto* steps = from.mutable_steps()->mutable_steps();
  std::vector<v1::StepReport*> taken(static_cast<size_t>(steps->size()));
  steps->ExtractSubrange(0, steps->size(), taken.data());
  for (v1::StepReport* step : taken) to.mutable_steps()->AddAllocated(step);
}

}  // namespace

void Outbox::TrimLocked(size_t keep) {
  while (queue_.size() > keep) {
    const v1::AgentMessage& oldest = queue_.front().message;
    const int64_t steps = StepsIn(oldest);
    if (IsStep(oldest)) {
      dropped_steps_ += steps;
      queued_steps_ -= steps;
    } else {
      dropped_samples_ += oldest.has_node_sample();
      --queued_others_;
    }
    queue_.pop_front();
  }
}

void Outbox::Push(v1::AgentMessage message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    TrimLocked(capacity_ > 0 ? capacity_ - 1 : 0);
    if (IsStep(message)) {
      queued_steps_ += StepsIn(message);
    } else {
      ++queued_others_;
    }
    queue_.push_back({std::move(message), std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
}

std::optional<v1::AgentMessage> Outbox::Peek(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return closed_ || !queue_.empty(); });
  if (closed_ || queue_.empty()) return std::nullopt;
  return queue_.front().message;
}

void Outbox::Pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return;
  if (IsStep(queue_.front().message)) {
    queued_steps_ -= StepsIn(queue_.front().message);
  } else {
    --queued_others_;
  }
  queue_.pop_front();
}

std::optional<v1::AgentMessage> Outbox::Take(int64_t timeout_ms, const Batching& batching) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return closed_ || !queue_.empty(); });
  if (closed_ || queue_.empty()) return std::nullopt;
  if (IsStep(queue_.front().message) && batching.linger_ms > 0) {
    // Let more reports join the first, for at most linger_ms after it came.
    const auto until = queue_.front().queued + std::chrono::milliseconds(batching.linger_ms);
    cv_.wait_until(lock, until, [&] {
      return closed_ || queued_steps_ >= batching.max_reports || queued_others_ > 0;
    });
    if (closed_ || queue_.empty()) return std::nullopt;
  }
  v1::AgentMessage out = std::move(queue_.front().message);
  queue_.pop_front();
  if (!IsStep(out)) {
    --queued_others_;
    return out;
  }
  int64_t taken = StepsIn(out);
  queued_steps_ -= taken;
  if (!queue_.empty() && IsStep(queue_.front().message) &&
      taken + StepsIn(queue_.front().message) <= batching.max_reports) {
    v1::AgentMessage batch;
    MoveSteps(out, *batch.mutable_steps());
    while (!queue_.empty() && IsStep(queue_.front().message) &&
           taken + StepsIn(queue_.front().message) <= batching.max_reports) {
      const int64_t steps = StepsIn(queue_.front().message);
      MoveSteps(queue_.front().message, *batch.mutable_steps());
      queue_.pop_front();
      taken += steps;
      queued_steps_ -= steps;
    }
    out = std::move(batch);
  }
  return out;
}

void Outbox::PutBack(v1::AgentMessage message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return;
  if (IsStep(message)) {
    queued_steps_ += StepsIn(message);
  } else {
    ++queued_others_;
  }
  // Queued long enough: sent next without lingering again.
  queue_.push_front({std::move(message), std::chrono::steady_clock::time_point::min()});
  TrimLocked(capacity_);
}

void Outbox::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

size_t Outbox::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

int64_t Outbox::dropped_node_samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_samples_;
}

int64_t Outbox::dropped_step_reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_steps_;
}

void DirectiveTable::Put(const v1::Directive& directive) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = latest_[{JobKey(directive.namespace_(), directive.job()), directive.worker_id(),
                        static_cast<int>(directive.action_case())}];
  if (directive.version() > slot.version()) slot = directive;
}

std::vector<v1::Directive> DirectiveTable::Newer(const std::string& ns, const std::string& job,
                                                 const std::string& worker,
                                                 int64_t applied_version) const {
  std::lock_guard<std::mutex> lock(mu_);
  // The newest of each kind, for the worker's job in its namespace; for a
  // worker that reports no namespace (an older SDK), in any namespace.
  std::map<int, const v1::Directive*> found;
  const std::string key = JobKey(ns, job);
  for (const auto& [k, d] : latest_) {
    const auto& [job_key, id, kind] = k;
    if (id != worker || d.version() <= applied_version) continue;
    if (job_key != key && !(ns.empty() && d.job() == job)) continue;
    const v1::Directive*& slot = found[kind];
    if (slot == nullptr || d.version() > slot->version()) slot = &d;
  }
  std::vector<v1::Directive> out;
  for (const auto& [kind, d] : found) out.push_back(*d);
  std::sort(out.begin(), out.end(), [](const v1::Directive& a, const v1::Directive& b) {
    return a.version() < b.version();
  });
  return out;
}

void DirectiveTable::SetJobCredentials(const v1::JobCredentials& credentials) {
  std::map<std::pair<std::string, std::string>, std::string> digests;
  for (const v1::JobDigest& d : credentials.jobs()) digests[{d.namespace_(), d.job()}] = d.digest();
  std::lock_guard<std::mutex> lock(mu_);
  job_digests_ = std::move(digests);
}

bool DirectiveTable::CredentialAccepted(const std::string& ns, const std::string& job,
                                        const std::string& digest) const {
  std::lock_guard<std::mutex> lock(mu_);
  bool known = false;
  for (const auto& [key, want] : job_digests_) {
    if (key.second != job || (!ns.empty() && key.first != ns)) continue;
    known = true;
    if (DigestsMatch(digest, want)) return true;
  }
  return !known;
}

}  // namespace antdt::agent
