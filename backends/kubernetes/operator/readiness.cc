#include "backends/kubernetes/operator/readiness.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace antdt::kube_operator {

Readiness::Readiness(int64_t stale_after_ms, const Clock* clock)
    : stale_after_ms_(stale_after_ms), clock_(clock) {}

void Readiness::OnResponse(int http_code) {
  if (http_code > 0 && http_code < 500) last_answer_ms_ = clock_->NowMillis();
}

void Readiness::SetActing(std::function<bool()> synced) {
  std::lock_guard<std::mutex> lock(mu_);
  synced_ = std::move(synced);
}

bool Readiness::Quiet() const {
  const int64_t last = last_answer_ms_.load();
  return last < 0 || clock_->NowMillis() - last > stale_after_ms_ / 2;
}

absl::Status Readiness::Check() const {
  const int64_t last = last_answer_ms_.load();
  if (last < 0) return absl::UnavailableError("the API server has not answered yet");
  const int64_t silent = clock_->NowMillis() - last;
  if (silent > stale_after_ms_) {
    return absl::UnavailableError(
        absl::StrCat("the API server has not answered for ", silent / 1000, " s"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (synced_ && !synced_()) return absl::UnavailableError("the informers have not synced");
  return absl::OkStatus();
}

absl::Status MarkLeader(kube::Api* api, const std::string& ns, const std::string& pod,
                        bool leading) {
  if (pod.empty()) return absl::OkStatus();
  const kube::Json value = leading ? kube::Json("true") : kube::Json(nullptr);
  const kube::Json patch = {{"metadata", {{"labels", {{vocab::kLabelLeader, value}}}}}};
  absl::StatusOr<kube::Json> patched =
      api->Patch(kube::PodsResource(), ns, pod, patch, kube::PatchType::kMerge);
  return patched.status();
}

}  // namespace antdt::kube_operator
