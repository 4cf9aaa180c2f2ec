#include "services/agent/core/agent.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/credential.h"
#include "common/job_key.h"
#include "common/log.h"
#include "common/status.h"
#include "common/tls.h"
#include "prometheus/metric_family.h"

namespace antdt::agent {
namespace {

// Interfaces worth a series: not loopback, and none of the per-pod or
// per-container links a container runtime or CNI makes (one per pod: they
// would make every pod a label value).
bool ExportedInterface(const std::string& name) {
  static const char* const kVirtual[] = {"lo",      "veth", "cali",  "cni",   "docker",   "br-",
                                         "flannel", "tunl", "vxlan", "virbr", "kube-ipvs"};
  for (const char* prefix : kVirtual) {
    if (name.rfind(prefix, 0) == 0) return false;
  }
  return true;
}

const prometheus::Histogram::BucketBoundaries kStepBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

}  // namespace

// ---- NodeView ---------------------------------------------------------------

void NodeView::SetSample(const v1::NodeSample& sample) {
  std::lock_guard<std::mutex> lock(mu_);
  sample_ = sample;
}

void NodeView::SetHealth(const v1::HealthUpdate& update) {
  std::lock_guard<std::mutex> lock(mu_);
  health_.clear();
  for (const v1::WorkerHealth& w : update.workers()) {
    health_[{JobKey(w.namespace_(), w.job()), w.worker_id()}] = w;
  }
}

void NodeView::Forget(const std::string& job, const std::string& worker) {
  std::lock_guard<std::mutex> lock(mu_);
  health_.erase({job, worker});
}

v1::NodeSample NodeView::sample() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sample_;
}

std::vector<v1::WorkerHealth> NodeView::health() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<v1::WorkerHealth> out;
  for (const auto& [key, w] : health_) out.push_back(w);
  return out;
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

class Families {
 public:
  MetricFamily& Get(const std::string& name, const std::string& help) {
    auto it = index_.find(name);
    if (it != index_.end()) return families_[it->second];
    index_[name] = families_.size();
    families_.push_back(MetricFamily{name, help, MetricType::Gauge, {}});
    return families_.back();
  }
  void Add(const std::string& name, const std::string& help, Labels labels, double value) {
    ClientMetric m;
    m.label = std::move(labels);
    m.gauge.value = value;
    Get(name, help).metric.push_back(std::move(m));
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  std::map<std::string, size_t> index_;
  std::vector<MetricFamily> families_;
};

class NodeCollector final : public prometheus::Collectable {
 public:
  NodeCollector(const NodeView* view, NamespaceOf namespace_of)
      : view_(view), namespace_of_(std::move(namespace_of)) {}

  std::vector<MetricFamily> Collect() const override {
    Families f;
    const v1::NodeSample s = view_->sample();
    if (s.time_unix_ms() > 0) {
      const Labels node = {{"node", s.node()}};
      if (s.has_cpu()) {
        f.Add("antdt_node_cpu_utilization_ratio", "Busy share of all CPUs over the last interval.",
              node, s.cpu().utilization());
        f.Add("antdt_node_cpu_iowait_ratio", "I/O-wait share of CPU time.", node, s.cpu().iowait());
        f.Add("antdt_node_cpu_steal_ratio", "Share of CPU time stolen by the hypervisor.", node,
              s.cpu().steal());
      }
      if (s.has_memory()) {
        f.Add("antdt_node_memory_total_bytes", "Memory of the node.", node,
              static_cast<double>(s.memory().total_bytes()));
        f.Add("antdt_node_memory_available_bytes", "Memory available for new work.", node,
              static_cast<double>(s.memory().available_bytes()));
        f.Add("antdt_node_swap_used_bytes", "Swap in use.", node,
              static_cast<double>(s.memory().swap_used_bytes()));
      }
      for (const v1::NetInterfaceSample& n : s.net()) {
        if (!ExportedInterface(n.name())) continue;
        Labels l = {{"node", s.node()}, {"interface", n.name()}};
        f.Add("antdt_node_network_receive_bytes_per_second", "Bytes received per second.", l,
              n.rx_bytes_per_second());
        f.Add("antdt_node_network_transmit_bytes_per_second", "Bytes sent per second.", l,
              n.tx_bytes_per_second());
        f.Add("antdt_node_network_drops_per_second", "Packets dropped per second (rx + tx).", l,
              n.rx_drops_per_second() + n.tx_drops_per_second());
        f.Add("antdt_node_network_errors_per_second", "Interface errors per second (rx + tx).", l,
              n.errors_per_second());
      }
      if (s.has_pressure()) {
        const v1::PressureSample& p = s.pressure();
        auto psi = [&](const char* resource, const char* kind, double pct) {
          f.Add("antdt_node_pressure_stall_ratio",
                "Share of the last 10 s some (or all) tasks stalled on a resource (PSI avg10).",
                {{"node", s.node()}, {"resource", resource}, {"kind", kind}}, pct / 100.0);
        };
        psi("cpu", "some", p.cpu_some_avg10());
        psi("memory", "some", p.memory_some_avg10());
        psi("memory", "full", p.memory_full_avg10());
        psi("io", "some", p.io_some_avg10());
        psi("io", "full", p.io_full_avg10());
      }
      for (const v1::CgroupSample& c : s.cgroups()) {
        Labels l = {{"node", s.node()}, {"cgroup", c.path()}};
        f.Add("antdt_cgroup_cpu_usage_cores", "CPU used by the cgroup, in cores.", l,
              c.cpu_usage_cores());
        f.Add("antdt_cgroup_cpu_throttled_ratio", "Share of CFS periods the cgroup was throttled.",
              l, c.throttled_fraction());
        f.Add("antdt_cgroup_memory_current_bytes", "Memory charged to the cgroup.", l,
              static_cast<double>(c.memory_current_bytes()));
        f.Add("antdt_cgroup_cpu_pressure_stall_ratio", "cpu.pressure some avg10 of the cgroup.", l,
              c.cpu_pressure_some_avg10() / 100.0);
      }
      for (const v1::GpuSample& g : s.gpus()) {
        Labels l = {{"node", s.node()}, {"gpu", std::to_string(g.index())}, {"model", g.name()}};
        f.Add("antdt_gpu_utilization_ratio", "GPU busy share.", l, g.utilization());
        f.Add("antdt_gpu_memory_used_bytes", "GPU memory in use.", l,
              static_cast<double>(g.memory_used_bytes()));
        f.Add("antdt_gpu_memory_total_bytes", "GPU memory.", l,
              static_cast<double>(g.memory_total_bytes()));
        f.Add("antdt_gpu_sm_clock_hertz", "Current SM clock.", l, g.sm_clock_mhz() * 1e6);
        f.Add("antdt_gpu_power_watts", "Power draw.", l, g.power_watts());
        f.Add("antdt_gpu_temperature_celsius", "GPU temperature.", l, g.temperature_celsius());
        f.Add("antdt_gpu_thermal_throttling", "1 while thermal slowdown is active.", l,
              g.thermal_throttling() ? 1 : 0);
        f.Add("antdt_gpu_power_throttling", "1 while power capping or braking is active.", l,
              g.power_throttling() ? 1 : 0);
        f.Add("antdt_gpu_ecc_uncorrected_errors", "Uncorrected ECC errors (aggregate).", l,
              static_cast<double>(g.ecc_uncorrected_errors()));
      }
      f.Add("antdt_node_sample_errors", "Collectors that failed in the latest sample.", node,
            s.errors_size());
    }
    for (const v1::WorkerHealth& w : view_->health()) {
      Labels l = {{"job", w.job()}, {"worker", w.worker_id()}, {"role", w.role()}};
      std::string ns = w.namespace_();
      if (ns.empty() && namespace_of_) ns = namespace_of_(w.job(), w.worker_id());
      if (!ns.empty()) l.push_back({"namespace", std::move(ns)});
      f.Add("antdt_worker_straggler_score",
            "Window batch time over the peers' median (1 = median; 2 = twice as slow).", l,
            w.score());
      f.Add("antdt_worker_straggler_class",
            "Straggler class: 1 healthy, 2 leader, 3 deterministic, 4 transient, 5 persistent.", l,
            static_cast<double>(w.class_()));
      f.Add("antdt_worker_straggler_cause",
            "Likely cause (antdt.v1.Cause): 1 unknown, 2 CPU contention, 3 CPU throttling, 4 "
            "memory, 5 network, 6 GPU throttling, 7 I/O, 8 hardware, 9 data loading; 0 none.",
            l, static_cast<double>(w.cause()));
      f.Add("antdt_worker_slow_windows", "Consecutive windows the worker was slow.", l,
            w.windows_slow());
    }
    return f.Take();
  }

 private:
  const NodeView* view_;
  const NamespaceOf namespace_of_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MakeNodeCollector(const NodeView* view,
                                                           NamespaceOf namespace_of) {
  return std::make_shared<NodeCollector>(view, std::move(namespace_of));
}

// ---- AgentServiceImpl ---------------------------------------------------------

absl::Status ValidateStep(const v1::StepReport& step) {
  if (step.job().empty()) return absl::InvalidArgumentError("step.job: must not be empty");
  if (step.worker_id().empty()) {
    return absl::InvalidArgumentError("step.worker_id: must not be empty");
  }
  if (step.role() != "worker" && step.role() != "ps") {
    return absl::InvalidArgumentError(
        absl::StrCat("step.role: must be \"worker\" or \"ps\", got \"", step.role(), "\""));
  }
  auto bad = [](double v) { return !std::isfinite(v) || v < 0; };
  if (bad(step.bpt_seconds())) {
    return absl::InvalidArgumentError(
        absl::StrCat("step.bpt_seconds: must be a finite number >= 0, got ", step.bpt_seconds()));
  }
  if (step.samples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step.samples: must be >= 0, got ", step.samples()));
  }
  if (step.step() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("step.step: must be >= 0, got ", step.step()));
  }
  if (step.batch_samples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("step.batch_samples: must be >= 0, got ", step.batch_samples()));
  }
  for (double v :
       {step.data_wait_seconds(), step.compute_seconds(), step.communication_seconds()}) {
    if (bad(v)) {
      return absl::InvalidArgumentError(
          "step: data_wait_seconds, compute_seconds and communication_seconds must be finite "
          "and >= 0");
    }
  }
  for (const auto& [ps, latency] : step.ps_latency_seconds()) {
    if (bad(latency)) {
      return absl::InvalidArgumentError(
          absl::StrCat("step.ps_latency_seconds[", ps, "]: must be finite and >= 0"));
    }
  }
  return absl::OkStatus();
}

AgentServiceImpl::AgentServiceImpl(std::string node, Outbox* outbox,
                                   const DirectiveTable* directives, prometheus::Registry& registry)
    : node_(std::move(node)),
      outbox_(outbox),
      directives_(directives),
      step_seconds_(prometheus::BuildHistogram()
                        .Name("antdt_worker_step_seconds")
                        .Help("Batch processing time of each step, as the worker reported it.")
                        .Register(registry)),
      steps_(prometheus::BuildCounter()
                 .Name("antdt_worker_steps_total")
                 .Help("Steps reported by the worker.")
                 .Register(registry)),
      samples_(prometheus::BuildCounter()
                   .Name("antdt_worker_samples_total")
                   .Help("Samples the worker processed.")
                   .Register(registry)),
      steps_cut_(prometheus::BuildCounter()
                     .Name("antdt_worker_steps_cut_total")
                     .Help("Steps the step deadline cut short: the worker trained part of its "
                           "batch and took the rest into a later step.")
                     .Register(registry)),
      samples_per_second_(prometheus::BuildGauge()
                              .Name("antdt_worker_samples_per_second")
                              .Help("Recent throughput of the worker (EWMA of samples / BPT).")
                              .Register(registry)),
      refused_(prometheus::BuildCounter()
                   .Name("antdt_agent_step_reports_refused_total")
                   .Help("Step reports refused for want of their job's credential (reason: "
                         "missing, mismatch).")
                   .Register(registry)) {}

grpc::Status AgentServiceImpl::ReportStep(grpc::ServerContext* context,
                                          const v1::ReportStepRequest* req,
                                          v1::ReportStepResponse* resp) {
  // The steps of this call: `step` (when set) then `steps`, all of one worker.
  std::vector<const v1::StepReport*> steps;
  if (req->has_step()) steps.push_back(&req->step());
  for (const v1::StepReport& s : req->steps()) steps.push_back(&s);
  if (steps.empty()) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "step: missing");
  for (size_t i = 0; i < steps.size(); ++i) {
    if (absl::Status s = ValidateStep(*steps[i]); !s.ok()) {
      if (steps[i] == &req->step()) return ToGrpcStatus(s);
      // A batch's bad step is named by its place: "steps[2].bpt_seconds: ...".
      const size_t in_batch = i - (req->has_step() ? 1 : 0);
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("steps[", in_batch, "]", absl::StripPrefix(s.message(), "step")));
    }
    if (steps[i]->job() != steps[0]->job() || steps[i]->worker_id() != steps[0]->worker_id() ||
        steps[i]->namespace_() != steps[0]->namespace_()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "steps: every step of one call must be of the same job and worker");
    }
  }
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  // The worker's credential goes on as its digest; never the worker's own claim.
  const std::string digest = context == nullptr ? "" : CredentialDigestOf(*context);
  // A job whose credential the Monitor sent: reports without it stop here
  // (not forwarded, not in the worker's series, no directives handed out).
  const v1::StepReport& claimed = *steps[0];
  if (!directives_->CredentialAccepted(claimed.namespace_(), claimed.job(), digest)) {
    const std::string reason = digest.empty() ? "missing" : "mismatch";
    refused_.Add({{"reason", reason}}).Increment();
    LogEvent("step_report_refused", {{"job", JobKey(claimed.namespace_(), claimed.job())},
                                     {"worker", claimed.worker_id()},
                                     {"reason", reason}});
    return digest.empty()
               ? grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                              "authorization: the job's credential is required")
               : grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                              "authorization: not the credential of job " + claimed.job());
  }
  v1::AgentMessage msg;
  for (const v1::StepReport* in : steps) {
    v1::StepReport* step =
        steps.size() == 1 ? msg.mutable_step() : msg.mutable_steps()->add_steps();
    *step = *in;
    step->set_node(node_);
    step->set_credential_digest(digest);
    if (step->time_unix_ms() == 0) step->set_time_unix_ms(now_ms);
    Account(*step);
  }
  const v1::StepReport& first = *steps[0];
  for (const v1::Directive& d : directives_->Newer(
           first.namespace_(), first.job(), first.worker_id(), req->applied_directive_version())) {
    *resp->add_directives() = d;
  }
  outbox_->Push(std::move(msg));
  return grpc::Status::OK;
}

void AgentServiceImpl::Account(const v1::StepReport& report) {
  const v1::StepReport* step = &report;
  std::map<std::string, std::string> labels = {
      {"job", step->job()}, {"worker", step->worker_id()}, {"role", step->role()}};
  if (!step->namespace_().empty()) labels["namespace"] = step->namespace_();
  std::lock_guard<std::mutex> lock(mu_);
  step_seconds_.Add(labels, kStepBuckets).Observe(step->bpt_seconds());
  steps_.Add(labels).Increment();
  samples_.Add(labels).Increment(static_cast<double>(step->samples()));
  prometheus::Counter& cut = steps_cut_.Add(labels);  // 0 until a step is cut
  if (step->batch_samples() > step->samples()) cut.Increment();
  const WorkerKey key{JobKey(step->namespace_(), step->job()), step->worker_id()};
  labels_[key][step->role()] = labels;
  last_report_[key] = std::chrono::steady_clock::now();
  WorkerProcess& process = processes_[key];
  if (process.pid != step->pid() || process.pod_uid != step->pod_uid()) seen_running_.erase(key);
  process = {step->pod_uid(), step->pid()};
  if (step->bpt_seconds() > 0) {
    const double inst = static_cast<double>(step->samples()) / step->bpt_seconds();
    auto [it, fresh] = rate_.emplace(key, inst);
    if (!fresh) it->second = 0.8 * it->second + 0.2 * inst;
    samples_per_second_.Add(labels).Set(it->second);
  }
}

std::string AgentServiceImpl::NamespaceOf(const std::string& job, const std::string& worker) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string found;
  for (const auto& [key, roles] : labels_) {  // keyed by JobKey(namespace, job)
    if (key.second != worker || SplitJobKey(key.first).second != job) continue;
    for (const auto& [role, labels] : roles) {
      auto ns = labels.find("namespace");
      if (ns == labels.end()) continue;
      if (!found.empty() && found != ns->second) return "";  // two namespaces: ambiguous
      found = ns->second;
    }
  }
  return found;
}

std::vector<AgentServiceImpl::WorkerProcess> AgentServiceImpl::Processes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<WorkerProcess> out;
  for (const auto& [key, process] : processes_) out.push_back(process);
  return out;
}

// Whether the process of the worker `key` was seen running and has ended now
// (false when `running` is unset or cannot tell, or a pod's). Under mu_.
bool AgentServiceImpl::ProcessEnded(const WorkerKey& key, const ProcessCheck& running) {
  auto p = processes_.find(key);
  if (!running || p == processes_.end() || !p->second.pod_uid.empty() || p->second.pid <= 0) {
    return false;
  }
  const std::optional<bool> runs = running(p->second.pid);
  if (runs == true) seen_running_.insert(key);
  return runs == false && seen_running_.count(key) > 0;
}

std::vector<std::pair<std::string, std::string>> AgentServiceImpl::ForgetIdle(
    std::chrono::milliseconds idle, const ProcessCheck& running) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<WorkerKey> forgotten;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = last_report_.begin(); it != last_report_.end();) {
    if (now - it->second < idle && !ProcessEnded(it->first, running)) {
      ++it;
      continue;
    }
    const WorkerKey key = it->first;
    for (const auto& [role, labels] : labels_[key]) {
      step_seconds_.Remove(&step_seconds_.Add(labels, kStepBuckets));
      steps_.Remove(&steps_.Add(labels));
      samples_.Remove(&samples_.Add(labels));
      steps_cut_.Remove(&steps_cut_.Add(labels));
      if (samples_per_second_.Has(labels)) {
        samples_per_second_.Remove(&samples_per_second_.Add(labels));
      }
    }
    labels_.erase(key);
    rate_.erase(key);
    processes_.erase(key);
    seen_running_.erase(key);
    it = last_report_.erase(it);
    forgotten.push_back(key);
  }
  return forgotten;
}

// ---- MonitorLink ----------------------------------------------------------------

MonitorLink::MonitorLink(MonitorLinkOptions options, Outbox* outbox, DirectiveTable* directives,
                         NodeView* view, prometheus::Registry& registry)
    : options_(std::move(options)),
      addresses_(absl::StrSplit(options_.address, ',', absl::SkipEmpty())),
      outbox_(outbox),
      directives_(directives),
      view_(view),
      connected_gauge_(prometheus::BuildGauge()
                           .Name("antdt_agent_monitor_connected")
                           .Help("1 while the stream to the Monitor is up.")
                           .Register(registry)
                           .Add({})),
      reconnects_(prometheus::BuildCounter()
                      .Name("antdt_agent_monitor_connects_total")
                      .Help("Streams opened to the Monitor.")
                      .Register(registry)
                      .Add({})) {}

MonitorLink::~MonitorLink() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (ctx_ != nullptr) ctx_->TryCancel();
  }
  if (thread_.joinable()) thread_.join();
}

void MonitorLink::Start() {
  thread_ = std::thread([this] { Run(); });
}

void MonitorLink::Run() {
  int64_t backoff = options_.min_backoff_ms;
  size_t next = 0;
  // A standby refused since the last session, and fewer tries than there are
  // replicas have failed since: a leader is being elected among live
  // replicas, so every try comes soon, the dead replica's too.
  bool electing = false;
  size_t failures = 0;
  while (!stop_ && !addresses_.empty()) {
    const SessionEnd end = Session(addresses_[next]);
    // The next replica's, after any session that ended: the acting one may
    // be another now.
    next = (next + 1) % addresses_.size();
    if (stop_) break;
    failures = end == SessionEnd::kFailed ? failures + 1 : 0;
    if (end != SessionEnd::kFailed) {
      backoff = options_.min_backoff_ms;
      electing = end == SessionEnd::kStandby;
    } else if (failures >= addresses_.size()) {
      electing = false;  // a whole round unreachable: back off
    }
    if (end == SessionEnd::kFailed && !electing) {
      backoff = std::min(backoff * 2, options_.max_backoff_ms);
    }
    const int64_t wait = electing ? options_.standby_retry_ms : backoff;
    for (int64_t waited = 0; waited < wait && !stop_; waited += 20) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

MonitorLink::SessionEnd MonitorLink::Session(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto channel = antdt::CreateChannel(address, args);
  // Connected within 2 s, or failed: a replica that refuses connections
  // (killed) fails at once rather than holding the next try back.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  for (grpc_connectivity_state state = channel->GetState(true); state != GRPC_CHANNEL_READY;
       state = channel->GetState(true)) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN ||
        !channel->WaitForStateChange(state, deadline)) {
      return SessionEnd::kFailed;
    }
  }
  auto stub = v1::Monitor::NewStub(channel);
  grpc::ClientContext ctx;
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (stop_) return SessionEnd::kFailed;
    ctx_ = &ctx;
  }
  auto stream = stub->Stream(&ctx);
  v1::AgentMessage hello;
  hello.mutable_hello()->set_node(options_.node);
  for (const auto& [k, v] : options_.labels) (*hello.mutable_hello()->mutable_labels())[k] = v;
  // The Monitor answers with initial metadata at once: only then is the link up
  // (a Write alone may succeed into a buffer with nobody behind it).
  stream->WaitForInitialMetadata();
  bool ok = stream->Write(hello);
  if (ok) {
    v1::AgentMessage dropped;
    dropped.mutable_dropped()->set_node_samples(outbox_->dropped_node_samples());
    dropped.mutable_dropped()->set_step_reports(outbox_->dropped_step_reports());
    ok = stream->Write(dropped);
  }
  if (!ok) {
    // Refused at once: a standby's Monitor (UNAVAILABLE until it leads), or
    // the stream was not allowed (a certificate for another node).
    const grpc::Status status = stream->Finish();
    std::lock_guard<std::mutex> lock(ctx_mu_);
    ctx_ = nullptr;
    return status.error_code() == grpc::StatusCode::UNAVAILABLE ? SessionEnd::kStandby
                                                                : SessionEnd::kFailed;
  }
  connected_ = true;
  connected_gauge_.Set(1);
  reconnects_.Increment();
  LogEvent("monitor_connected", {{"monitor", address}, {"node", options_.node}});
  std::thread reader([&] {
    v1::MonitorMessage msg;
    while (stream->Read(&msg)) {
      if (msg.has_job_credentials()) directives_->SetJobCredentials(msg.job_credentials());
      if (msg.has_directive()) {
        directives_->Put(msg.directive());
        LogEvent("directive_received", {{"job", msg.directive().job()},
                                        {"worker", msg.directive().worker_id()},
                                        {"version", msg.directive().version()}});
      } else if (msg.has_health()) {
        view_->SetHealth(msg.health());
      }
    }
    ctx.TryCancel();  // the server ended the stream: stop the writer too
  });
  while (ok && !stop_) {
    std::optional<v1::AgentMessage> next = outbox_->Take(100, options_.batching);
    if (!next) continue;
    // More queued: let gRPC coalesce them into fewer frames and syscalls.
    grpc::WriteOptions options;
    if (outbox_->size() > 0) options.set_buffer_hint();
    if (!stream->Write(*next, options)) {
      outbox_->PutBack(*std::move(next));  // sent again on the next stream
      break;
    }
  }
  ctx.TryCancel();
  reader.join();
  grpc::Status status = stream->Finish();
  {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    ctx_ = nullptr;
  }
  LogEvent("monitor_disconnected", {{"monitor", address}, {"error", status.error_message()}});
  connected_ = false;
  connected_gauge_.Set(0);
  return SessionEnd::kStreamed;
}

}  // namespace antdt::agent
