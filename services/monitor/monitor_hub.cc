#include "services/monitor/monitor_hub.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "api/vocab/vocab.h"
#include "common/job_key.h"
#include "common/log.h"
#include "prometheus/metric_family.h"

namespace antdt::monitor {

struct MonitorHub::AgentStream {
  AgentStream(std::string peer_address, Writer writer,
              std::optional<std::vector<std::string>> names)
      : peer(std::move(peer_address)),
        certificate_names(std::move(names)),
        write(std::move(writer)) {}

  const std::string peer;
  // The client certificate's names when streams must be certified: the
  // stream speaks only for a node they name.
  const std::optional<std::vector<std::string>> certificate_names;
  std::string node;         // guarded by the hub's mu_: as the last hello said
  bool registered = false;  // guarded by the hub's mu_: a hello came
  std::mutex write_mu;
  Writer write;  // guarded by write_mu; empty once closed
};

MonitorHub::MonitorHub(Monitor monitor, const Clock* clock)
    : clock_(clock), monitor_(std::move(monitor)) {}

MonitorHub::~MonitorHub() { Stop(); }

bool CertificateNamesNode(const std::vector<std::string>& names, const std::string& node) {
  if (node.empty()) return false;
  return std::any_of(names.begin(), names.end(), [&node](const std::string& name) {
    return name == absl::StrCat(kNodeCertificatePrefix, node);
  });
}

std::shared_ptr<MonitorHub::AgentStream> MonitorHub::OpenStream(
    std::string peer, Writer write, std::optional<std::vector<std::string>> certificate_names) {
  auto stream = std::make_shared<AgentStream>(std::move(peer), std::move(write),
                                              std::move(certificate_names));
  std::lock_guard<std::mutex> lock(mu_);
  streams_[stream.get()] = stream;
  return stream;
}

void MonitorHub::RefuseStream(const std::string& peer, const std::string& node,
                              const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++refused_streams_[reason];
  LogEvent("agent_stream_refused", {{"node", node}, {"peer", peer}, {"reason", reason}});
}

bool MonitorHub::Receive(AgentStream& stream, const v1::AgentMessage& message) {
  if (stream.certificate_names.has_value() && message.has_hello() &&
      !CertificateNamesNode(*stream.certificate_names, message.hello().node())) {
    RefuseStream(stream.peer, message.hello().node(), "certificate");
    return false;
  }
  std::unique_lock<std::mutex> lock(mu_);
  const bool certified = stream.certificate_names.has_value();
  if (certified && !SpeaksForItsNode(stream, message)) {
    foreign_reports_ += message.has_steps() ? message.steps().steps_size() : 1;
    return true;
  }
  if (message.has_hello() && !stream.registered && !job_digests_.empty()) {
    // A new agent learns the jobs' credentials first (none known: it keeps
    // what an earlier Monitor told it, until this one knows its jobs).
    const v1::MonitorMessage credentials = CredentialsMessage();
    lock.unlock();
    Write(stream, credentials);
    lock.lock();
  }
  switch (message.body_case()) {
    case v1::AgentMessage::kHello:
      stream.node = message.hello().node();
      if (!message.hello().labels().empty()) {
        monitor_.SetNodeLabels(stream.node,
                               {message.hello().labels().begin(), message.hello().labels().end()});
      }
      if (!stream.registered) {
        stream.registered = true;
        ++streams_opened_;
        LogEvent("agent_connected", {{"node", stream.node}, {"peer", stream.peer}});
      }
      break;
    case v1::AgentMessage::kNodeSample:
      monitor_.Ingest(message.node_sample());
      break;
    case v1::AgentMessage::kStep:
      IngestStep(message.step());
      break;
    case v1::AgentMessage::kSteps:
      // Each report of a batch is judged alone, as if it came by itself.
      for (const v1::StepReport& step : message.steps().steps()) {
        if (certified && step.node() != stream.node) {
          ++foreign_reports_;
          continue;
        }
        IngestStep(step);
      }
      break;
    case v1::AgentMessage::kDropped:
      dropped_[stream.node] = message.dropped();
      break;
    default:
      break;
  }
  return true;
}

bool MonitorHub::SpeaksForItsNode(const AgentStream& stream,
                                  const v1::AgentMessage& message) const {
  if (message.has_hello()) return true;
  if (!stream.registered) return false;  // nothing before the hello named the node
  switch (message.body_case()) {
    case v1::AgentMessage::kNodeSample:
      return message.node_sample().node() == stream.node;
    case v1::AgentMessage::kStep:
      return message.step().node() == stream.node;
    default:  // a batch's reports are checked one by one (Receive)
      return true;
  }
}

void MonitorHub::IngestStep(const v1::StepReport& step) {
  if (gate_ && !gate_(step)) {
    ++refused_steps_;
    const std::string key = JobKey(step.namespace_(), step.job());
    if (refused_jobs_.insert(key).second) {
      LogEvent("step_report_refused",
               {{"job", key},
                {"worker", step.worker_id()},
                {"node", step.node()},
                {"credential", step.credential_digest().empty() ? "missing" : "not the job's"}});
    }
    return;
  }
  monitor_.Ingest(step);
}

void MonitorHub::SetStepGate(StepGate gate) {
  std::lock_guard<std::mutex> lock(mu_);
  gate_ = std::move(gate);
}

void MonitorHub::CloseStream(AgentStream& stream) {
  bool registered = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams_.erase(&stream);
    registered = stream.registered;
  }
  {
    // Wait out a write in flight before the stream goes away.
    std::lock_guard<std::mutex> lock(stream.write_mu);
    stream.write = nullptr;
  }
  if (registered) LogEvent("agent_disconnected", {{"node", stream.node}});
}

bool MonitorHub::Write(AgentStream& stream, const v1::MonitorMessage& message) {
  std::lock_guard<std::mutex> lock(stream.write_mu);
  return stream.write && stream.write(message);
}

v1::MonitorMessage MonitorHub::CredentialsMessage() const {
  v1::MonitorMessage message;
  v1::JobCredentials* credentials = message.mutable_job_credentials();
  for (const auto& [key, digest] : job_digests_) {
    v1::JobDigest* d = credentials->add_jobs();
    d->set_namespace_(key.first);
    d->set_job(key.second);
    d->set_digest(digest);
  }
  return message;
}

void MonitorHub::SetJobCredential(const std::string& ns, const std::string& job,
                                  const std::string& digest) {
  std::vector<std::shared_ptr<AgentStream>> targets;
  v1::MonitorMessage message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = job_digests_.find({ns, job});
    if (digest.empty() ? it == job_digests_.end()
                       : it != job_digests_.end() && it->second == digest) {
      return;  // no change
    }
    if (digest.empty()) {
      job_digests_.erase(it);
    } else {
      job_digests_[{ns, job}] = digest;
    }
    message = CredentialsMessage();
    for (const auto& [ptr, s] : streams_) {
      if (s->registered) targets.push_back(s);
    }
  }
  for (const auto& s : targets) Write(*s, message);
}

bool MonitorHub::SendDirective(const std::string& node, const v1::Directive& directive) {
  std::vector<std::shared_ptr<AgentStream>> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [ptr, s] : streams_) {
      if (s->registered && s->node == node) targets.push_back(s);
    }
  }
  v1::MonitorMessage message;
  *message.mutable_directive() = directive;
  bool sent = false;
  for (const auto& s : targets) sent = Write(*s, message) || sent;
  return sent;
}

void MonitorHub::ForgetJob(const std::string& job_key) {
  std::lock_guard<std::mutex> lock(mu_);
  monitor_.Forget(job_key);
}

absl::StatusOr<v1::GetJobHealthResponse> MonitorHub::Health(const std::string& ns,
                                                            const std::string& name) const {
  if (name.empty()) return absl::InvalidArgumentError("job: must not be empty");
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> jobs = monitor_.Jobs();
  for (const std::string& key : {JobKey(ns, name), name}) {
    if (std::find(jobs.begin(), jobs.end(), key) != jobs.end()) {
      return monitor_.Health(key, clock_->NowMillis());
    }
  }
  return absl::NotFoundError(absl::StrCat("job: no reports seen for job ", JobKey(ns, name)));
}

int64_t MonitorHub::WindowsClosed(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::max(monitor_.WindowsClosed(JobKey(ns, name)), monitor_.WindowsClosed(name));
}

void MonitorHub::Tick() {
  std::vector<std::pair<std::shared_ptr<AgentStream>, v1::MonitorMessage>> outbox;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_->NowMillis();
    monitor_.CloseWindows(now);
    if (monitor_.Stats().windows_closed == windows_seen_) return;
    windows_seen_ = monitor_.Stats().windows_closed;
    std::map<std::string, v1::HealthUpdate> by_node;
    for (const std::string& job : monitor_.Jobs()) {
      v1::GetJobHealthResponse health = monitor_.Health(job, now);
      for (const v1::WorkerHealth& w : health.workers()) *by_node[w.node()].add_workers() = w;
    }
    for (const auto& [ptr, s] : streams_) {
      auto it = s->registered ? by_node.find(s->node) : by_node.end();
      if (it == by_node.end()) continue;
      v1::MonitorMessage message;
      *message.mutable_health() = it->second;
      outbox.emplace_back(s, std::move(message));
    }
  }
  for (const auto& [stream, message] : outbox) Write(*stream, message);
}

void MonitorHub::Start(int64_t tick_ms) {
  ticker_ = std::thread([this, tick_ms] {
    std::unique_lock<std::mutex> lock(tick_mu_);
    while (
        !tick_cv_.wait_for(lock, std::chrono::milliseconds(tick_ms), [&] { return stopping_; })) {
      lock.unlock();
      Tick();
      lock.lock();
    }
  });
}

void MonitorHub::Stop() {
  {
    std::lock_guard<std::mutex> lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

// What the metrics show, copied under the hub's lock.
struct MetricsInput {
  MonitorStats stats;
  std::vector<v1::GetJobHealthResponse> jobs;
  std::map<std::string, v1::AgentDropped> dropped;  // by node
  int64_t streams_opened = 0;
  int64_t refused_steps = 0;                       // refused by the step gate
  int64_t foreign_reports = 0;                     // for another node than the certified stream's
  std::map<std::string, int64_t> refused_streams;  // by reason
};

void Add(MetricFamily& family, Labels labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  if (family.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  family.metric.push_back(std::move(m));
}

MetricFamily Counter(const std::string& name, const std::string& help,
                     std::vector<std::pair<Labels, double>> values) {
  MetricFamily family{name, help, MetricType::Counter, {}};
  for (auto& [labels, value] : values) Add(family, std::move(labels), value);
  return family;
}

std::vector<MetricFamily> IngestFamilies(const MetricsInput& in) {
  const MonitorStats& stats = in.stats;
  MetricFamily refused{"antdt_monitor_agent_streams_refused_total",
                       "Agent streams refused, by reason: no client certificate, or one that "
                       "does not name the node the agent claimed.",
                       MetricType::Counter,
                       {}};
  for (const char* reason : {"no_certificate", "certificate"}) {
    auto it = in.refused_streams.find(reason);
    Add(refused, {{"reason", reason}},
        static_cast<double>(it == in.refused_streams.end() ? 0 : it->second));
  }
  return {
      Counter("antdt_monitor_reports_total", "Reports the Monitor took in, by kind.",
              {{{{"kind", "step"}}, static_cast<double>(stats.step_reports)},
               {{{"kind", "node_sample"}}, static_cast<double>(stats.node_samples)}}),
      Counter("antdt_monitor_reports_dropped_total", "Reports the Monitor refused, by reason.",
              {{{{"reason", "malformed"}}, static_cast<double>(stats.rejected)},
               {{{"reason", "late"}}, static_cast<double>(stats.late_reports)},
               {{{"reason", "early"}}, static_cast<double>(stats.early_reports)},
               {{{"reason", "credential"}}, static_cast<double>(in.refused_steps)},
               {{{"reason", "node_identity"}}, static_cast<double>(in.foreign_reports)}}),
      Counter("antdt_monitor_windows_closed_total", "Windows closed, over all jobs.",
              {{{}, static_cast<double>(stats.windows_closed)}}),
      Counter("antdt_monitor_agent_streams_total", "Agent streams opened.",
              {{{}, static_cast<double>(in.streams_opened)}}),
      refused,
  };
}

MetricFamily AgentDroppedFamily(const std::map<std::string, v1::AgentDropped>& dropped) {
  MetricFamily family{"antdt_monitor_agent_dropped_messages_total",
                      "Messages agents dropped while disconnected, as they reported.",
                      MetricType::Counter,
                      {}};
  for (const auto& [node, d] : dropped) {
    Add(family, {{"node", node}, {"kind", "node_sample"}}, static_cast<double>(d.node_samples()));
    Add(family, {{"node", node}, {"kind", "step_report"}}, static_cast<double>(d.step_reports()));
  }
  return family;
}

// The class a member straggles as now: its batch-time class when that is a
// straggler's, else its per-sample class when that is (a straggler a smaller
// batch compensates for is still one); nullopt when it is not a straggler.
std::optional<v1::StragglerClass> StragglingAs(const v1::WorkerHealth& w) {
  if (vocab::IsStraggler(w.class_())) return w.class_();
  if (vocab::IsStraggler(w.speed_class())) return w.speed_class();
  return std::nullopt;
}

MetricFamily Gauge(const std::string& name, const std::string& help) {
  return MetricFamily{name, help, MetricType::Gauge, {}};
}

}  // namespace

std::vector<MetricFamily> HealthFamilies(const std::vector<v1::GetJobHealthResponse>& jobs) {
  MetricFamily score = Gauge("antdt_monitor_straggler_score",
                             "Window batch time over the role's median (1 = median).");
  MetricFamily cls = Gauge("antdt_monitor_straggler_class",
                           "The class by batch time, which the policies act on: 1 healthy, 2 "
                           "leader, 3 deterministic, 4 transient, 5 persistent.");
  MetricFamily speed_cls = Gauge("antdt_monitor_straggler_speed_class",
                                 "The class by per-sample speed, numbered as "
                                 "antdt_monitor_straggler_class.");
  MetricFamily info =
      Gauge("antdt_monitor_straggler_info",
            "1 for each member, with its class, its class by per-sample speed, its likely cause by "
            "name (none when not a straggler) and whether a smaller batch compensates for it.");
  MetricFamily sample_score = Gauge("antdt_monitor_straggler_sample_score",
                                    "Window seconds per sample over the role's median (1 = "
                                    "median, 3 = three times slower per sample); 0 when it "
                                    "reported no samples.");
  MetricFamily compensated = Gauge("antdt_monitor_straggler_compensated",
                                   "1 when the member is slower per sample but not by batch "
                                   "time: its smaller batch compensates for it.");
  MetricFamily stragglers = Gauge(
      "antdt_monitor_stragglers",
      "Members straggling now, compensated ones included, by class (the per-sample class of a "
      "compensated one), likely cause and whether a smaller batch compensates for them; only "
      "the combinations with a straggler.");
  // (namespace, job, class, cause, compensated) -> members.
  std::map<std::vector<std::string>, int> counts;
  for (const v1::GetJobHealthResponse& job : jobs) {
    for (const v1::WorkerHealth& w : job.workers()) {
      Labels labels = {
          {"job", w.job()}, {"worker", w.worker_id()}, {"role", w.role()}, {"node", w.node()}};
      if (!w.namespace_().empty()) labels.push_back({"namespace", w.namespace_()});
      Add(score, labels, w.score());
      Add(cls, labels, static_cast<double>(w.class_()));
      Add(speed_cls, labels, static_cast<double>(w.speed_class()));
      Add(sample_score, labels, w.sample_score());
      Add(compensated, labels, w.compensated() ? 1 : 0);
      const std::optional<v1::StragglerClass> as = StragglingAs(w);
      const std::string cause = as ? vocab::CauseLabel(w.cause()) : vocab::kNoCauseLabel;
      const std::string comp = w.compensated() ? "true" : "false";
      Labels named = labels;
      named.push_back({"class", vocab::Name(w.class_())});
      named.push_back({"cause", cause});
      named.push_back({"speed_class", vocab::Name(w.speed_class())});
      named.push_back({"compensated", comp});
      Add(info, named, 1);
      if (as) ++counts[{w.namespace_(), w.job(), vocab::Name(*as), cause, comp}];
    }
  }
  for (const auto& [key, members] : counts) {
    Labels labels = {
        {"job", key[1]}, {"class", key[2]}, {"cause", key[3]}, {"compensated", key[4]}};
    if (!key[0].empty()) labels.push_back({"namespace", key[0]});
    Add(stragglers, labels, members);
  }
  return {score, cls, speed_cls, info, sample_score, compensated, stragglers};
}

namespace {

class MonitorCollector final : public prometheus::Collectable {
 public:
  explicit MonitorCollector(std::function<MetricsInput()> snapshot)
      : snapshot_(std::move(snapshot)) {}

  std::vector<MetricFamily> Collect() const override {
    const MetricsInput in = snapshot_();
    std::vector<MetricFamily> out = IngestFamilies(in);
    out.push_back(AgentDroppedFamily(in.dropped));
    for (MetricFamily& f : HealthFamilies(in.jobs)) out.push_back(std::move(f));
    return out;
  }

 private:
  std::function<MetricsInput()> snapshot_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MonitorHub::Collector() {
  return std::make_shared<MonitorCollector>([this] {
    MetricsInput in;
    std::lock_guard<std::mutex> lock(mu_);
    in.stats = monitor_.Stats();
    const int64_t now = clock_->NowMillis();
    for (const std::string& job : monitor_.Jobs()) in.jobs.push_back(monitor_.Health(job, now));
    in.dropped = dropped_;
    in.streams_opened = streams_opened_;
    in.refused_steps = refused_steps_;
    in.foreign_reports = foreign_reports_;
    in.refused_streams = refused_streams_;
    return in;
  });
}

}  // namespace antdt::monitor
