#include "backends/kubernetes/runtime/leader_election.h"

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <algorithm>
#include <utility>

#include "backends/kubernetes/runtime/internal/util.h"
#include "common/log.h"
#include "common/status.h"

namespace antdt::kube {

absl::Status ValidateLeaderElectionConfig(const LeaderElectionConfig& c) {
  if (c.lease_namespace.empty()) {
    return absl::InvalidArgumentError("lease_namespace: must not be empty");
  }
  if (c.lease_name.empty()) return absl::InvalidArgumentError("lease_name: must not be empty");
  if (c.identity.empty()) return absl::InvalidArgumentError("identity: must not be empty");
  if (c.lease_duration_ms < 1) {
    return absl::InvalidArgumentError("lease_duration_ms: must be positive");
  }
  if (c.renew_deadline_ms < 1) {
    return absl::InvalidArgumentError("renew_deadline_ms: must be positive");
  }
  if (c.retry_period_ms < 1) {
    return absl::InvalidArgumentError("retry_period_ms: must be positive");
  }
  if (c.jitter < 0) return absl::InvalidArgumentError("jitter: must not be negative");
  if (c.lease_duration_ms <= c.renew_deadline_ms) {
    return absl::InvalidArgumentError("lease_duration_ms: must be greater than renew_deadline_ms");
  }
  if (static_cast<double>(c.renew_deadline_ms) <=
      c.jitter * static_cast<double>(c.retry_period_ms)) {
    return absl::InvalidArgumentError(
        "renew_deadline_ms: must be greater than jitter * retry_period_ms");
  }
  return absl::OkStatus();
}

Json LeaderElector::Record::ToSpec() const {
  Json spec{{"holderIdentity", holder},
            {"leaseDurationSeconds", lease_duration_s},
            {"leaseTransitions", transitions}};
  if (!acquire_time.empty()) spec["acquireTime"] = acquire_time;
  if (!renew_time.empty()) spec["renewTime"] = renew_time;
  return spec;
}

LeaderElector::Record LeaderElector::Record::FromSpec(const Json& spec) {
  Record r;
  if (!spec.is_object()) return r;
  auto str = [&](const char* k) {
    auto it = spec.find(k);
    return it != spec.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* k) {
    auto it = spec.find(k);
    return it != spec.end() && it->is_number() ? it->get<int64_t>() : int64_t{0};
  };
  r.holder = str("holderIdentity");
  r.lease_duration_s = num("leaseDurationSeconds");
  r.acquire_time = str("acquireTime");
  r.renew_time = str("renewTime");
  r.transitions = num("leaseTransitions");
  return r;
}

LeaderElector::LeaderElector(Api* api, LeaderElectionConfig config)
    : api_(api),
      config_(std::move(config)),
      clock_(config_.clock ? config_.clock : &RealClock::Get()) {
  if (config_.registry != nullptr) {
    master_status_ = &prometheus::BuildGauge()
                          .Name("leader_election_master_status")
                          .Help(
                              "Gauge of if the reporting system is master of the relevant lease, "
                              "0 indicates backup, 1 indicates master.")
                          .Register(*config_.registry)
                          .Add({{"name", config_.lease_name}});
  }
}

LeaderElector::~LeaderElector() = default;

void LeaderElector::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
  cv_.SignalAll();
}

bool LeaderElector::stopped() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

bool LeaderElector::IsLeader() const {
  absl::MutexLock lock(&mu_);
  return leading_;
}

std::string LeaderElector::CurrentHolder() const {
  absl::MutexLock lock(&mu_);
  return observed_.holder;
}

void LeaderElector::SetLeading(bool leading) {
  {
    absl::MutexLock lock(&mu_);
    leading_ = leading;
  }
  if (master_status_ != nullptr) master_status_->Set(leading ? 1 : 0);
}

void LeaderElector::SetObserved(const Record& record) {
  absl::MutexLock lock(&mu_);
  observed_ = record;
  observed_at_ms_ = clock_->NowMillis();
}

bool LeaderElector::ObservedIsMe() const {
  absl::MutexLock lock(&mu_);
  return observed_.holder == config_.identity;
}

bool LeaderElector::LeaseValid(int64_t now) const {
  absl::MutexLock lock(&mu_);
  return observed_at_ms_ + observed_.lease_duration_s * 1000 > now;
}

bool LeaderElector::Sleep(int64_t ms) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_; };
  internal::WaitUntil(mu_, cv_, clock_, clock_->NowMillis() + ms, done);
  return !stop_;
}

absl::Status LeaderElector::UpdateLease(const Record& record) {
  if (!lease_) return absl::FailedPreconditionError("no lease read yet");
  Json object = *lease_;
  object["spec"] = record.ToSpec();
  absl::StatusOr<Json> updated = api_->Update(LeasesResource(), config_.lease_namespace, object);
  if (!updated.ok()) return updated.status();
  lease_ = *std::move(updated);
  return absl::OkStatus();
}

bool LeaderElector::TryAcquireOrRenew() {
  const int64_t now = clock_->NowMillis();
  Record desired;
  desired.holder = config_.identity;
  desired.lease_duration_s = (config_.lease_duration_ms + 999) / 1000;
  desired.acquire_time = FormatMicroTime(now);
  desired.renew_time = desired.acquire_time;

  // 1. Fast path: we hold a lease that is valid by our own observation.
  if (ObservedIsMe() && LeaseValid(now)) {
    Record old;
    {
      absl::MutexLock lock(&mu_);
      old = observed_;
    }
    desired.acquire_time = old.acquire_time;
    desired.transitions = old.transitions;
    absl::Status s = UpdateLease(desired);
    if (s.ok()) {
      SetObserved(desired);
      return true;
    }
    LogEvent("leader_election_renew_failed",
             {{"lease", config_.lease_name}, {"error", std::string(s.message())}});
  }

  // 2. Read the lease, or create it.
  absl::StatusOr<Json> got =
      api_->Get(LeasesResource(), config_.lease_namespace, config_.lease_name);
  if (!got.ok()) {
    if (!kube::IsNotFound(got.status())) {
      LogEvent("leader_election_get_failed",
               {{"lease", config_.lease_name}, {"error", std::string(got.status().message())}});
      return false;
    }
    Json lease{{"apiVersion", "coordination.k8s.io/v1"},
               {"kind", "Lease"},
               {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
               {"spec", desired.ToSpec()}};
    absl::StatusOr<Json> created = api_->Create(LeasesResource(), config_.lease_namespace, lease);
    if (!created.ok()) {
      LogEvent("leader_election_create_failed",
               {{"lease", config_.lease_name}, {"error", std::string(created.status().message())}});
      return false;
    }
    lease_ = *std::move(created);
    SetObserved(desired);
    return true;
  }
  lease_ = *got;
  const Json spec = got->contains("spec") ? (*got)["spec"] : Json::object();
  const Record old = Record::FromSpec(spec);
  const std::string raw = spec.dump();
  if (raw != observed_raw_) {
    SetObserved(old);  // the record changed: observed now, on our clock
    observed_raw_ = raw;
  }
  if (!old.holder.empty() && LeaseValid(now) && !ObservedIsMe()) return false;  // held

  // 3. Take it (or renew through the slow path).
  if (ObservedIsMe()) {
    desired.acquire_time = old.acquire_time;
    desired.transitions = old.transitions;
  } else {
    desired.transitions = old.transitions + 1;
  }
  absl::Status s = UpdateLease(desired);
  if (!s.ok()) {
    // 409: another candidate wrote first.
    LogEvent("leader_election_update_failed",
             {{"lease", config_.lease_name}, {"error", std::string(s.message())}});
    return false;
  }
  SetObserved(desired);
  return true;
}

void LeaderElector::Release() {
  if (!ObservedIsMe()) return;
  for (int attempt = 0; attempt < 5; ++attempt) {
    const int64_t now = clock_->NowMillis();
    Record r;
    {
      absl::MutexLock lock(&mu_);
      r.transitions = observed_.transitions;
    }
    r.holder = "";
    r.lease_duration_s = 1;
    r.acquire_time = FormatMicroTime(now);
    r.renew_time = r.acquire_time;
    absl::Status s = UpdateLease(r);
    if (s.ok()) {
      SetObserved(r);
      LogEvent("leader_election_released", {{"lease", config_.lease_name}});
      return;
    }
    if (!IsConflict(s)) {
      LogEvent("leader_election_release_failed",
               {{"lease", config_.lease_name}, {"error", std::string(s.message())}});
      return;
    }
    absl::StatusOr<Json> got =
        api_->Get(LeasesResource(), config_.lease_namespace, config_.lease_name);
    if (!got.ok()) return;
    lease_ = *got;
    Record current = Record::FromSpec(got->value("spec", Json::object()));
    if (current.holder != config_.identity) return;  // not ours any more
  }
}

absl::Status LeaderElector::Run(std::function<void()> on_started_leading,
                                std::function<void()> on_stopped_leading) {
  RETURN_IF_ERROR(ValidateLeaderElectionConfig(config_));
  const std::string lease = config_.lease_namespace + "/" + config_.lease_name;
  LogEvent("leader_election_campaign", {{"lease", lease}, {"identity", config_.identity}});

  // Acquire: every retry period, jittered.
  while (true) {
    if (stopped()) return absl::OkStatus();
    if (TryAcquireOrRenew()) break;
    const int64_t period = config_.retry_period_ms +
                           static_cast<int64_t>(config_.jitter * internal::RandomUnit() *
                                                static_cast<double>(config_.retry_period_ms));
    if (!Sleep(period)) return absl::OkStatus();
  }
  SetLeading(true);
  LogEvent("leader_election_acquired", {{"lease", lease}, {"identity", config_.identity}});
  if (on_started_leading) on_started_leading();

  // Renew: every retry period; lost when no renewal succeeds within the
  // renew deadline.
  bool lost = false;
  while (!stopped()) {
    const int64_t deadline = clock_->NowMillis() + config_.renew_deadline_ms;
    bool renewed = false;
    while (!stopped()) {
      if (TryAcquireOrRenew()) {
        renewed = true;
        break;
      }
      if (!Sleep(config_.retry_period_ms)) break;
      if (clock_->NowMillis() >= deadline) break;
    }
    if (stopped()) break;
    if (!renewed) {
      lost = true;
      break;
    }
    if (!Sleep(config_.retry_period_ms)) break;
  }
  if (lost) {
    SetLeading(false);
    LogEvent("leader_election_lost", {{"lease", lease}, {"identity", config_.identity}});
    if (on_stopped_leading) on_stopped_leading();
    return absl::AbortedError("leader election lost");
  }
  if (config_.release_on_cancel) Release();
  SetLeading(false);
  LogEvent("leader_election_stopped", {{"lease", lease}, {"identity", config_.identity}});
  if (on_stopped_leading) on_stopped_leading();
  return absl::OkStatus();
}

}  // namespace antdt::kube
