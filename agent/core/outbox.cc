#include "agent/core/outbox.h"

#include <algorithm>
#include <chrono>

#include "common/credential.h"
#include "common/job_key.h"

namespace antdt::agent {

void Outbox::Push(v1::AgentMessage message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    while (queue_.size() >= capacity_ && !queue_.empty()) {
      if (queue_.front().has_step()) {
        ++dropped_steps_;
      } else if (queue_.front().has_steps()) {
        dropped_steps_ += queue_.front().steps().steps_size();
      } else if (queue_.front().has_node_sample()) {
        ++dropped_samples_;
      }
      queue_.pop_front();
    }
    queue_.push_back(std::move(message));
  }
  cv_.notify_one();
}

std::optional<v1::AgentMessage> Outbox::Peek(int64_t timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
               [&] { return closed_ || !queue_.empty(); });
  if (closed_ || queue_.empty()) return std::nullopt;
  return queue_.front();
}

void Outbox::Pop() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!queue_.empty()) queue_.pop_front();
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
