#include "operator/monitor_service/monitor_service.h"

#include <yaml-cpp/yaml.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/log.h"
#include "common/status.h"
#include "prometheus/metric_family.h"

namespace antdt::monitor {

absl::StatusOr<MonitorConfig> ParseMonitorConfig(const std::string& yaml) {
  MonitorConfig c;
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("monitor: not valid YAML: ", e.what()));
  }
  if (root.IsNull()) return c;
  if (!root.IsMap()) return absl::InvalidArgumentError("monitor: must be a mapping");
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const std::string field = "monitor." + key;
    if (!kv.second.IsScalar()) return absl::InvalidArgumentError(field + ": must be a scalar");
    const std::string v = kv.second.as<std::string>();
    auto number = [&](double& out) -> absl::Status {
      if (!absl::SimpleAtod(v, &out)) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": must be a number, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    auto integer = [&](int& out) -> absl::Status {
      if (!absl::SimpleAtoi(v, &out)) {
        return absl::InvalidArgumentError(absl::StrCat(field, ": must be an integer, got \"", v, "\""));
      }
      return absl::OkStatus();
    };
    if (key == "window") {
      ASSIGN_OR_RETURN(c.window_ms, ParseDurationMs(v, field));
    } else if (key == "allowed_lateness") {
      ASSIGN_OR_RETURN(c.allowed_lateness_ms, ParseDurationMs(v, field));
    } else if (key == "straggler_threshold") {
      RETURN_IF_ERROR(number(c.straggler_threshold));
    } else if (key == "recover_threshold") {
      RETURN_IF_ERROR(number(c.recover_threshold));
    } else if (key == "leader_threshold") {
      RETURN_IF_ERROR(number(c.leader_threshold));
    } else if (key == "persistent_windows") {
      RETURN_IF_ERROR(integer(c.persistent_windows));
    } else if (key == "warmup_windows") {
      RETURN_IF_ERROR(integer(c.warmup_windows));
    } else if (key == "min_peers") {
      RETURN_IF_ERROR(integer(c.min_peers));
    } else if (key == "job_slowdown_ratio") {
      RETURN_IF_ERROR(number(c.job_slowdown_ratio));
    } else {
      return absl::InvalidArgumentError(field + ": unknown field");
    }
  }
  RETURN_IF_ERROR(c.Validate());
  return c;
}

MonitorServiceImpl::MonitorServiceImpl(Monitor monitor, const Clock* clock)
    : clock_(clock), monitor_(std::move(monitor)) {}

MonitorServiceImpl::~MonitorServiceImpl() { Stop(); }

grpc::Status MonitorServiceImpl::Stream(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<v1::MonitorMessage, v1::AgentMessage>* stream) {
  auto session = std::make_shared<Session>();
  session->stream = stream;
  stream->SendInitialMetadata();  // tells the agent it reached a Monitor
  v1::AgentMessage msg;
  bool registered = false;
  while (stream->Read(&msg)) {
    std::lock_guard<std::mutex> lock(mu_);
    switch (msg.body_case()) {
      case v1::AgentMessage::kHello:
        session->node = msg.hello().node();
        if (!msg.hello().labels().empty()) {
          monitor_.SetNodeLabels(session->node, {msg.hello().labels().begin(),
                                                 msg.hello().labels().end()});
        }
        if (!registered) {
          sessions_[session.get()] = session;
          registered = true;
          ++streams_opened_;
          LogEvent("agent_connected", {{"node", session->node}, {"peer", ctx->peer()}});
        }
        break;
      case v1::AgentMessage::kNodeSample:
        monitor_.Ingest(msg.node_sample());
        break;
      case v1::AgentMessage::kStep:
        monitor_.Ingest(msg.step());
        break;
      case v1::AgentMessage::kSteps:
        for (const v1::StepReport& step : msg.steps().steps()) monitor_.Ingest(step);
        break;
      case v1::AgentMessage::kDropped:
        dropped_[session->node] = msg.dropped();
        break;
      default:
        break;
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_.erase(session.get());
  }
  {
    // Wait out a write in flight before the stream goes away.
    std::lock_guard<std::mutex> lock(session->write_mu);
    session->stream = nullptr;
  }
  if (registered) LogEvent("agent_disconnected", {{"node", session->node}});
  return grpc::Status::OK;
}

grpc::Status MonitorServiceImpl::GetJobHealth(grpc::ServerContext*,
                                              const v1::GetJobHealthRequest* req,
                                              v1::GetJobHealthResponse* resp) {
  if (req->job().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "job: must not be empty");
  }
  std::lock_guard<std::mutex> lock(mu_);
  const std::vector<std::string> jobs = monitor_.Jobs();
  if (std::find(jobs.begin(), jobs.end(), req->job()) == jobs.end()) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("job: no reports seen for job ", req->job()));
  }
  *resp = monitor_.Health(req->job(), clock_->NowMillis());
  return grpc::Status::OK;
}

void MonitorServiceImpl::Tick() {
  std::map<std::string, v1::HealthUpdate> by_node;
  std::vector<std::shared_ptr<Session>> sessions;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t now = clock_->NowMillis();
    monitor_.CloseWindows(now);
    if (monitor_.Stats().windows_closed == windows_seen_) return;
    windows_seen_ = monitor_.Stats().windows_closed;
    for (const std::string& job : monitor_.Jobs()) {
      v1::GetJobHealthResponse health = monitor_.Health(job, now);
      for (const v1::WorkerHealth& w : health.workers()) *by_node[w.node()].add_workers() = w;
    }
    for (const auto& [ptr, s] : sessions_) sessions.push_back(s);
  }
  for (const auto& s : sessions) {
    auto it = by_node.find(s->node);
    if (it == by_node.end()) continue;
    v1::MonitorMessage msg;
    *msg.mutable_health() = it->second;
    std::lock_guard<std::mutex> lock(s->write_mu);
    if (s->stream != nullptr) s->stream->Write(msg);
  }
}

bool MonitorServiceImpl::SendDirective(const std::string& node, const v1::Directive& directive) {
  std::vector<std::shared_ptr<Session>> targets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [ptr, s] : sessions_) {
      if (s->node == node) targets.push_back(s);
    }
  }
  bool sent = false;
  v1::MonitorMessage msg;
  *msg.mutable_directive() = directive;
  for (const auto& s : targets) {
    std::lock_guard<std::mutex> lock(s->write_mu);
    if (s->stream != nullptr && s->stream->Write(msg)) sent = true;
  }
  return sent;
}

void MonitorServiceImpl::Start(int64_t tick_ms) {
  ticker_ = std::thread([this, tick_ms] {
    std::unique_lock<std::mutex> lock(tick_mu_);
    while (!tick_cv_.wait_for(lock, std::chrono::milliseconds(tick_ms), [&] { return stopping_; })) {
      lock.unlock();
      Tick();
      lock.lock();
    }
  });
}

void MonitorServiceImpl::Stop() {
  {
    std::lock_guard<std::mutex> lock(tick_mu_);
    stopping_ = true;
  }
  tick_cv_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

namespace {

class MonitorCollector final : public prometheus::Collectable {
 public:
  using Snapshot = std::function<void(MonitorStats&, std::vector<v1::GetJobHealthResponse>&,
                                      std::map<std::string, v1::AgentDropped>&, int64_t&)>;
  explicit MonitorCollector(Snapshot snapshot) : snapshot_(std::move(snapshot)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    MonitorStats stats;
    std::vector<v1::GetJobHealthResponse> jobs;
    std::map<std::string, v1::AgentDropped> dropped;
    int64_t streams = 0;
    snapshot_(stats, jobs, dropped, streams);
    auto counter = [](const std::string& name, const std::string& help,
                      std::vector<std::pair<std::vector<ClientMetric::Label>, double>> values) {
      MetricFamily f{name, help, MetricType::Counter, {}};
      for (auto& [labels, v] : values) {
        ClientMetric m;
        m.label = labels;
        m.counter.value = v;
        f.metric.push_back(m);
      }
      return f;
    };
    std::vector<MetricFamily> out;
    out.push_back(counter("antdt_monitor_reports_total", "Reports the Monitor took in, by kind.",
                          {{{{"kind", "step"}}, static_cast<double>(stats.step_reports)},
                           {{{"kind", "node_sample"}}, static_cast<double>(stats.node_samples)}}));
    out.push_back(counter("antdt_monitor_reports_dropped_total",
                          "Reports the Monitor refused, by reason.",
                          {{{{"reason", "malformed"}}, static_cast<double>(stats.rejected)},
                           {{{"reason", "late"}}, static_cast<double>(stats.late_reports)},
                           {{{"reason", "early"}}, static_cast<double>(stats.early_reports)}}));
    out.push_back(counter("antdt_monitor_windows_closed_total", "Windows closed, over all jobs.",
                          {{{}, static_cast<double>(stats.windows_closed)}}));
    out.push_back(counter("antdt_monitor_agent_streams_total", "Agent streams opened.",
                          {{{}, static_cast<double>(streams)}}));
    MetricFamily agent_dropped{"antdt_monitor_agent_dropped_messages",
                               "Messages agents dropped while disconnected, as they reported.",
                               MetricType::Gauge,
                               {}};
    for (const auto& [node, d] : dropped) {
      for (auto [kind, v] : {std::pair<const char*, int64_t>{"node_sample", d.node_samples()},
                             {"step_report", d.step_reports()}}) {
        ClientMetric m;
        m.label = {{"node", node}, {"kind", kind}};
        m.gauge.value = static_cast<double>(v);
        agent_dropped.metric.push_back(m);
      }
    }
    out.push_back(agent_dropped);
    MetricFamily score{"antdt_monitor_straggler_score",
                       "Window batch time over the role's median (1 = median).", MetricType::Gauge,
                       {}};
    MetricFamily cls{"antdt_monitor_straggler_class",
                     "1 healthy, 2 leader, 3 deterministic, 4 transient, 5 persistent.",
                     MetricType::Gauge, {}};
    MetricFamily cause{"antdt_monitor_straggler_cause",
                       "Likely cause (antdt.v1.Cause); 0 when not a straggler.", MetricType::Gauge,
                       {}};
    for (const v1::GetJobHealthResponse& job : jobs) {
      for (const v1::WorkerHealth& w : job.workers()) {
        std::vector<ClientMetric::Label> labels = {
            {"job", w.job()}, {"worker", w.worker_id()}, {"role", w.role()}, {"node", w.node()}};
        auto add = [&](MetricFamily& f, double v) {
          ClientMetric m;
          m.label = labels;
          m.gauge.value = v;
          f.metric.push_back(m);
        };
        add(score, w.score());
        add(cls, static_cast<double>(w.class_()));
        add(cause, static_cast<double>(w.cause()));
      }
    }
    out.push_back(score);
    out.push_back(cls);
    out.push_back(cause);
    return out;
  }

 private:
  Snapshot snapshot_;
};

}  // namespace

std::shared_ptr<prometheus::Collectable> MonitorServiceImpl::Collector() {
  return std::make_shared<MonitorCollector>(
      [this](MonitorStats& stats, std::vector<v1::GetJobHealthResponse>& jobs,
             std::map<std::string, v1::AgentDropped>& dropped, int64_t& streams) {
        std::lock_guard<std::mutex> lock(mu_);
        stats = monitor_.Stats();
        const int64_t now = clock_->NowMillis();
        for (const std::string& job : monitor_.Jobs()) jobs.push_back(monitor_.Health(job, now));
        dropped = dropped_;
        streams = streams_opened_;
      });
}

}  // namespace antdt::monitor
