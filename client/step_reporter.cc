#include "client/step_reporter.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/credential.h"
#include "common/status.h"
#include "common/tls.h"

namespace antdt::client {

StepReporter::StepReporter(StepReporterOptions options) : options_(std::move(options)) {
  // The pod's UID (the operator sets it from the downward API): the agent
  // finds this worker's cgroup by it.
  if (const char* uid = std::getenv(kEnvPodUid)) pod_uid_ = uid;
  if (options_.token.empty()) {
    // Unreadable: reports go without it, and the Monitor counts them refused.
    options_.token = TokenFromEnvironment().value_or("");
  }
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  stub_ = v1::Agent::NewStub(antdt::CreateChannel(options_.agent_address, args));
}

StepReporter::~StepReporter() { (void)Flush(); }

absl::Status StepReporter::Report(const StepTiming& t) {
  buffer_.emplace_back();
  v1::StepReport* s = &buffer_.back();
  s->set_job(options_.job);
  s->set_namespace_(options_.namespace_);
  s->set_worker_id(options_.worker_id);
  s->set_role(options_.role);
  s->set_step(t.step);
  s->set_samples(t.samples);
  s->set_batch_samples(t.batch_samples);
  s->set_bpt_seconds(t.bpt_seconds);
  s->set_data_wait_seconds(t.data_wait_seconds);
  s->set_cpu_wait_seconds(t.cpu_wait_seconds);
  s->set_compute_seconds(t.compute_seconds);
  s->set_communication_seconds(t.communication_seconds);
  s->set_pid(static_cast<int32_t>(getpid()));
  s->set_pod_uid(pod_uid_);
  s->set_time_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count());
  for (const auto& [ps, latency] : t.ps_latency_seconds)
    (*s->mutable_ps_latency_seconds())[ps] = latency;
  if (buffer_.size() > options_.max_buffered_steps) {
    buffer_.erase(buffer_.begin());
    ++dropped_;
  }
  if (std::chrono::steady_clock::now() - last_flush_ <
      std::chrono::milliseconds(options_.flush_interval_ms)) {
    return absl::OkStatus();
  }
  return Flush();
}

absl::Status StepReporter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  last_flush_ = std::chrono::steady_clock::now();
  v1::ReportStepRequest req;
  for (v1::StepReport& s : buffer_) *req.add_steps() = std::move(s);
  buffer_.clear();
  req.set_applied_directive_version(NewestKnown());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(options_.timeout_ms));
  AddCredential(ctx, options_.token);
  v1::ReportStepResponse resp;
  absl::Status status = FromGrpcStatus(stub_->ReportStep(&ctx, req, &resp));
  if (!status.ok()) {
    ++failures_;
    dropped_ += req.steps_size();
    return status;
  }
  for (const v1::Directive& d : resp.directives()) {
    if (d.version() <= applied_version_) continue;
    auto it = pending_.find(static_cast<int>(d.action_case()));
    if (it == pending_.end() || d.version() > it->second.version()) {
      pending_[static_cast<int>(d.action_case())] = d;
    }
  }
  return absl::OkStatus();
}

int64_t StepReporter::NewestKnown() const {
  int64_t known = applied_version_;
  for (const auto& [kind, d] : pending_) known = std::max(known, d.version());
  return known;
}

std::optional<v1::Directive> StepReporter::TakeDirective() {
  if (pending_.empty()) return std::nullopt;
  auto oldest = std::min_element(
      pending_.begin(), pending_.end(),
      [](const auto& a, const auto& b) { return a.second.version() < b.second.version(); });
  v1::Directive out = std::move(oldest->second);
  pending_.erase(oldest);
  applied_version_ = std::max(applied_version_, out.version());
  return out;
}

}  // namespace antdt::client

namespace antdt::client {

double ThreadCpuWaitSeconds() {
  std::FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
  if (f == nullptr) return 0;
  unsigned long long run_ns = 0, wait_ns = 0;  // NOLINT(google-runtime-int): fscanf's type
  const int n = std::fscanf(f, "%llu %llu", &run_ns, &wait_ns);
  std::fclose(f);
  return n == 2 ? static_cast<double>(wait_ns) / 1e9 : 0;
}

}  // namespace antdt::client
