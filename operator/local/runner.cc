#include "operator/local/runner.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "client/sharding_client.h"
#include "common/config.h"
#include "common/log.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/status.h"
#include "operator/bridge/bridge.h"
#include "operator/control/control_loop.h"
#include "operator/controller/policy.h"
#include "operator/local/workers.h"
#include "operator/monitor_service/monitor_service.h"

namespace antdt::local {
namespace {

using SteadyClock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Server {
  std::unique_ptr<Process> proc;
  std::string address;
  std::string log;
};

absl::StatusOr<Server> StartServer(std::vector<std::string> argv, const std::string& dir,
                                   const std::string& name) {
  Server s;
  const std::string ready = dir + "/" + name + ".ready";
  fs::remove(ready);
  argv.insert(argv.end(), {"--ready-file", ready});
  s.log = dir + "/" + name + ".log";
  s.proc = std::make_unique<Process>(argv, s.log);
  auto address = WaitForReadyFile(ready, std::chrono::seconds(30));
  if (!address) return absl::UnavailableError(name + " did not start: " + Tail(s.log, 1500));
  s.address = *address;
  return s;
}

void Stop(Server& s) {
  if (!s.proc) return;
  s.proc->Signal(SIGTERM);
  if (!s.proc->Wait(std::chrono::seconds(5))) {
    s.proc->Signal(SIGKILL);
    s.proc->Wait(std::chrono::seconds(5));
  }
}

// Milliseconds since the job started: the runner's time for the policy, the
// scenario and the report.
class JobClock final : public Clock {
 public:
  JobClock() : start_(SteadyClock::now()) {}
  int64_t NowMillis() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start_)
        .count();
  }

 private:
  const SteadyClock::time_point start_;
};

// The local backend of the control loop: the job's processes on this machine.
class Runner final : public control::Backend {
 public:
  Runner(const manifest::Job& job, const manifest::Scenario& scenario, const RunOptions& o)
      : job_(job), scenario_(scenario), o_(o) {}

  absl::StatusOr<RunResult> Run();

  // ---- control::Backend
  std::optional<v1::GetJobHealthResponse> Health() override;
  std::vector<controller::WorkerState> Members() override { return workers_->Members(); }
  std::vector<controller::NodeState> Nodes() override;
  double RemainingSeconds() override {
    auto progress = driver_->Progress();
    return progress.ok() ? progress->eta_seconds() : -1;
  }
  absl::Status RestartElsewhere(const controller::WorkerState& member,
                                const controller::KillRestart& restart) override {
    // The source node's exclusion is the decision's (exclude_node_until_ms),
    // which the policy reads from the loop's history.
    return workers_->RestartElsewhere(member.id, restart.to_node);
  }
  bool SendDirective(const std::string& node, const v1::Directive& directive) override;
  void LeaveParameterServers(const std::string& worker) override;
  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override {
    client::ShardingClientOptions copts = driver_->options();
    copts.worker_id = worker;
    copts.incarnation = incarnation;
    return client::ReleaseWorker(sharding_.address, copts);
  }
  void RecordAction(const controller::Decision& d) override;

 private:
  void Event(const std::string& line) {
    LogEvent("runner", {{"job", job_.name},
                        {"t", static_cast<double>(clock_.NowMillis()) / 1000.0},
                        {"message", line}});
    if (o_.on_event) o_.on_event(line);
  }
  // Run, in three steps.
  absl::Status StartJob();
  absl::Status Loop();
  absl::Status Collect();

  absl::Status StartShardingService();
  absl::Status StartMonitor();
  absl::Status StartAgents();
  absl::Status StartParameterServers();
  void StartWorkers(const std::vector<const manifest::NodeSpec*>& placement);
  std::vector<std::string> WorkerArgv(const WorkerSlot& w);
  void WriteSpeeds();
  absl::Status Control();
  void ShowProgress();
  void Teardown();

  const manifest::Job& job_;
  manifest::Scenario scenario_;
  const RunOptions& o_;
  std::string dir_;
  vocab::Policy policy_ = vocab::Policy::kNone;
  JobClock clock_;

  Server sharding_;
  std::unique_ptr<client::ShardingClient> driver_;
  std::unique_ptr<monitor::MonitorServiceImpl> monitor_;
  std::unique_ptr<Serving> monitor_server_;
  std::string monitor_address_;
  std::map<std::string, Server> agents_;  // by node
  std::vector<Server> ps_;
  std::unique_ptr<Launcher> launcher_ = NewProcessLauncher();
  std::unique_ptr<WorkerSet> workers_;
  std::unique_ptr<control::ControlLoop> loop_;
  std::map<std::string, std::string> speeds_written_;
  std::vector<std::string> rebalanced_;  // batch changes of the current plan
  RunResult result_;
};

absl::Status Runner::StartShardingService() {
  ASSIGN_OR_RETURN(sharding_, StartServer({o_.bin_dir + "/antdt-sharding-service", "--listen",
                                           "127.0.0.1:0", "--state-dir", dir_ + "/sharding",
                                           "--lease-ttl", "10s", "--sync", "normal"},
                                          dir_, "sharding-service"));
  client::ShardingClientOptions copts;
  copts.job = job_.name;
  copts.dataset = "train";
  copts.worker_id = "antdt-run";
  driver_ = std::make_unique<client::ShardingClient>(
      client::CreateShardingChannel(sharding_.address), copts);
  return driver_->CreateDataset(bridge::DatasetSpecFor(job_)).status();
}

absl::Status Runner::StartMonitor() {
  const monitor::MonitorConfig mc = bridge::MonitorConfigFor(job_.monitor);
  ASSIGN_OR_RETURN(monitor::Monitor m, monitor::Monitor::Create(mc));
  monitor_ = std::make_unique<monitor::MonitorServiceImpl>(std::move(m), &RealClock::Get());
  ASSIGN_OR_RETURN(monitor_server_,
                   Serving::Start({"127.0.0.1:0", "", "", nullptr, {monitor_.get()}}));
  monitor_address_ = monitor_server_->address();
  monitor_->Start(100);
  return absl::OkStatus();
}

absl::Status Runner::StartAgents() {
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    std::vector<std::string> argv = {o_.bin_dir + "/antdt-agent",
                                     "--node",
                                     n.name,
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--monitor",
                                     monitor_address_,
                                     "--interval",
                                     "1s"};
    std::vector<std::string> labels;
    for (const auto& [k, v] : n.labels) labels.push_back(k + "=" + v);
    labels.push_back(absl::StrCat("antdt.io/device-speed=", n.speed < 1 ? n.speed : 1.0));
    argv.insert(argv.end(), {"--labels", absl::StrJoin(labels, ",")});
    ASSIGN_OR_RETURN(agents_[n.name], StartServer(argv, dir_, "agent-" + n.name));
  }
  return absl::OkStatus();
}

absl::Status Runner::StartParameterServers() {
  const int32_t p = bridge::ParameterServerCount(job_);
  const int32_t backup =
      policy_ == vocab::Policy::kBackupWorkers ? job_.straggler_policy.backup_workers : 0;
  for (int32_t k = 0; k < p; ++k) {
    const int32_t slice = bridge::ParameterServerFeatures(job_, k);
    std::vector<std::string> argv = {o_.bin_dir + "/antdt-ps",
                                     "--listen",
                                     "127.0.0.1:0",
                                     "--id",
                                     absl::StrCat("ps-", k),
                                     "--features",
                                     std::to_string(slice),
                                     "--workers",
                                     std::to_string(job_.workers.replicas),
                                     "--backup",
                                     std::to_string(backup),
                                     "--learning-rate",
                                     absl::StrCat(job_.model.learning_rate),
                                     "--step-timeout",
                                     "30s"};
    ASSIGN_OR_RETURN(Server s, StartServer(argv, dir_, absl::StrCat("ps-", k)));
    ps_.push_back(std::move(s));
  }
  return absl::OkStatus();
}

std::vector<std::string> Runner::WorkerArgv(const WorkerSlot& w) {
  std::vector<std::string> ps;
  for (const Server& s : ps_) ps.push_back(s.address);
  return {o_.bin_dir + "/antdt-trainer-worker",
          "--sharding",
          sharding_.address,
          "--job",
          job_.name,
          "--dataset",
          "train",
          "--worker-id",
          w.id,
          "--incarnation",
          std::to_string(w.incarnation),
          "--journal",
          dir_ + "/" + w.id + ".journal",
          "--ps",
          absl::StrJoin(ps, ","),
          "--features",
          std::to_string(job_.model.features),
          "--agent",
          agents_[w.node].address,
          "--local-batch",
          std::to_string(w.local_batch),
          "--device-us-per-sample",
          std::to_string(job_.local.device_time_per_sample_us),
          "--speed-file",
          dir_ + "/nodes/" + w.node + ".speed",
          "--report-interval",
          "250ms"};
}

void Runner::StartWorkers(const std::vector<const manifest::NodeSpec*>& placement) {
  WorkerSetOptions wo;
  wo.log_dir = dir_;
  wo.backoff_limit = job_.run_policy.backoff_limit;
  wo.argv = [this](const WorkerSlot& w) { return WorkerArgv(w); };
  wo.retire = [this](const std::string& worker, int32_t incarnation) {
    return Retire(worker, incarnation);
  };
  wo.on_event = [this](const std::string& line) { Event(line); };
  workers_ = std::make_unique<WorkerSet>(std::move(wo), launcher_.get(), &clock_);
  for (int32_t i = 0; i < job_.workers.replicas; ++i) {
    workers_->Start(absl::StrCat("worker-", i), placement[i]->name,
                    bridge::InitialLocalBatch(job_, i));
  }
}

void Runner::LeaveParameterServers(const std::string& worker) {
  for (const Server& s : ps_) {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(s.address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::LeaveRequest req;
    req.set_worker_id(worker);
    v1::LeaveResponse resp;
    (void)stub->Leave(&ctx, req, &resp);
  }
}

void Runner::WriteSpeeds() {
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    const std::string speed =
        absl::StrFormat("%.4f", scenario_.SpeedAt(n.name, clock_.NowMillis()));
    if (speeds_written_[n.name] == speed) continue;
    if (WriteFileAtomically(dir_ + "/nodes/" + n.name + ".speed", speed + "\n").ok()) {
      speeds_written_[n.name] = speed;
    }
  }
}

std::optional<v1::GetJobHealthResponse> Runner::Health() {
  absl::StatusOr<v1::GetJobHealthResponse> health = monitor_->hub().Health(job_.name);
  if (!health.ok()) return std::nullopt;  // NOT_FOUND: no reports yet
  const double t = static_cast<double>(clock_.NowMillis()) / 1000.0;
  for (const v1::WorkerHealth& h : health->workers()) {
    result_.timeline.push_back({t, h.worker_id(), h.samples_per_second(), h.score(), h.class_()});
  }
  return *std::move(health);
}

std::vector<controller::NodeState> Runner::Nodes() {
  const std::map<std::string, bool> busy = workers_->BusyNodes();
  std::vector<controller::NodeState> nodes;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    controller::NodeState ns;
    ns.name = n.name;
    ns.spare = n.spare && !busy.count(n.name);
    nodes.push_back(ns);
  }
  return nodes;
}

bool Runner::SendDirective(const std::string& node, const v1::Directive& directive) {
  WorkerSlot* w = workers_->Find(directive.worker_id());
  if (w == nullptr || w->done) return false;
  w->local_batch = directive.adjust_batch().local_batch_size();
  if (monitor_->hub().SendDirective(node, directive)) return true;
  Event("directive for " + w->id + " not delivered: agent of " + node + " not connected");
  return false;
}

void Runner::RecordAction(const controller::Decision& d) {
  ActionRecord rec;
  rec.at_seconds = static_cast<double>(clock_.NowMillis()) / 1000.0;
  rec.action = controller::KindOf(d.action);
  rec.worker = controller::ActionTarget(d.action);
  rec.description = controller::Describe(d);
  rec.rule = d.rule;
  rec.reason = d.reason;
  rec.subject = d.subject;
  if (const auto* b = std::get_if<controller::UseBackupWorkers>(&d.action)) {
    rec.description = absl::StrCat("backups=", b->backups, " (set on the parameter servers)");
  }
  const auto* a = std::get_if<controller::AdjustBatchSize>(&d.action);
  if (a != nullptr && d.subject.empty()) {
    // Batch changes that only keep the global batch constant are summed up in
    // one line per plan by Control().
    rebalanced_.push_back(absl::StrCat(a->worker, "->", a->local_batch_size));
  } else {
    Event(absl::StrFormat("%.1fs %s %s: %s", rec.at_seconds, vocab::Name(rec.action), rec.worker,
                          d.reason));
  }
  result_.actions.push_back(rec);
}

absl::Status Runner::Control() {
  rebalanced_.clear();
  RETURN_IF_ERROR(loop_->RunOnce().status());
  if (!rebalanced_.empty()) {
    Event(absl::StrCat("    global batch kept: ", absl::StrJoin(rebalanced_, " ")));
  }
  return absl::OkStatus();
}

void Runner::ShowProgress() {
  if (!o_.on_status) return;
  auto p = driver_->Progress();
  if (!p.ok()) return;
  int stragglers = 0;
  if (!result_.timeline.empty()) {
    const double last = result_.timeline.back().at_seconds;
    for (auto it = result_.timeline.rbegin();
         it != result_.timeline.rend() && it->at_seconds == last; ++it) {
      if (vocab::IsStraggler(it->klass)) ++stragglers;
    }
  }
  const int64_t total = job_.dataset.records * job_.dataset.epochs;
  const double frac =
      static_cast<double>(p->records_committed_total()) / static_cast<double>(total);
  const int width = 24;
  const int filled = static_cast<int>(frac * width);
  o_.on_status(absl::StrFormat(
      "[%s%s] %3.0f%%  epoch %d/%d  %d/%d records  %.0f rec/s  stragglers %d  actions %d",
      std::string(filled, '#'), std::string(width - filled, '.'), frac * 100,
      std::min(p->epoch() + 1, p->epochs()), p->epochs(), p->records_committed_total(), total,
      p->records_per_second(), stragglers, static_cast<int>(result_.actions.size())));
}

void Runner::Teardown() {
  if (workers_) workers_->KillAll();
  for (Server& s : ps_) Stop(s);
  for (auto& [node, a] : agents_) Stop(a);
  if (monitor_) monitor_->Stop();
  if (monitor_server_) monitor_server_->Shutdown(std::chrono::seconds(1));
  Stop(sharding_);
}

// Start: the sharding service and its dataset, the Monitor, agents, parameter
// servers and workers, and the control loop over them.
absl::Status Runner::StartJob() {
  control::LoopOptions lo;
  lo.job = job_.name;
  lo.interval_ms = bridge::ControlIntervalMs(job_.monitor);
  lo.policy = bridge::PolicySpecFor(job_, policy_, lo.interval_ms);
  lo.global_batch_size = job_.model.global_batch_size;
  lo.window_ms = job_.monitor.window_ms;
  loop_ = std::make_unique<control::ControlLoop>(lo, this, &clock_);
  // The first decision one interval after the job started (its clock), when
  // the Monitor has a window.
  (void)loop_->TakeTurn();
  std::vector<const manifest::NodeSpec*> placement;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    if (!n.spare) placement.push_back(&n);
  }
  if (static_cast<int32_t>(placement.size()) < job_.workers.replicas) {
    return absl::InvalidArgumentError(absl::StrCat("spec.workers.replicas: ", job_.workers.replicas,
                                                   " workers but the scenario has ",
                                                   placement.size(), " non-spare nodes"));
  }
  RETURN_IF_ERROR(StartShardingService());
  RETURN_IF_ERROR(StartMonitor());
  Event("sharding service on " + sharding_.address + ", monitor on " + monitor_address_);
  WriteSpeeds();
  RETURN_IF_ERROR(StartAgents());
  RETURN_IF_ERROR(StartParameterServers());
  StartWorkers(placement);
  Event(absl::StrFormat("%d workers, %d parameter servers, %d nodes; policy %s",
                        job_.workers.replicas, static_cast<int>(ps_.size()),
                        static_cast<int>(scenario_.nodes.size()), result_.policy));

  if (policy_ == vocab::Policy::kBackupWorkers) {
    controller::Plan plan;
    controller::Decision& d = plan.decisions.emplace_back();
    d.action = controller::UseBackupWorkers{job_.straggler_policy.backup_workers};
    d.policy = policy_;
    d.rule = "backup-workers";
    d.reason = "baseline: each step takes the first N-b gradients";
    RETURN_IF_ERROR(loop_->Execute(plan));
  }
  return absl::OkStatus();
}

// Loop: until every worker is done, the scenario's speeds, the workers'
// exits and failures, the control loop, the progress bar.
absl::Status Runner::Loop() {
  for (;;) {
    if (o_.interrupted != nullptr && o_.interrupted->load()) {
      return absl::CancelledError("interrupted: every process stopped");
    }
    if (clock_.NowMillis() > o_.timeout_ms) {
      return absl::DeadlineExceededError("the job did not finish in time");
    }
    WriteSpeeds();
    ASSIGN_OR_RETURN(const bool all_done, workers_->Poll());
    if (all_done) return absl::OkStatus();
    RETURN_IF_ERROR(Control());
    ShowProgress();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// Collect: the job's figures, then every process stopped and the journals
// checked for exactly-once.
absl::Status Runner::Collect() {
  result_.jct_seconds = static_cast<double>(clock_.NowMillis()) / 1000.0;
  if (auto p = driver_->Progress(); p.ok())
    result_.records_committed = p->records_committed_total();
  if (!ps_.empty()) {
    auto stub = v1::ParameterServer::NewStub(
        grpc::CreateChannel(ps_[0].address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext ctx;
    v1::StatsRequest req;
    v1::ParameterServerStats stats;
    if (stub->Stats(&ctx, req, &stats).ok()) {
      result_.first_loss = stats.first_mean_loss();
      result_.final_loss = stats.mean_loss();
      result_.steps = stats.step();
    }
  }
  Teardown();
  std::vector<std::string> journals;
  for (const auto& w : workers_->slots()) journals.push_back(dir_ + "/" + w->id + ".journal");
  ASSIGN_OR_RETURN(result_.verification,
                   demo::VerifyJournals(journals, job_.dataset.records, job_.dataset.epochs));
  return absl::OkStatus();
}

absl::StatusOr<RunResult> Runner::Run() {
  policy_ = o_.policy_override.value_or(job_.straggler_policy.name);
  if (o_.no_slowdown) scenario_.slowdowns.clear();
  dir_ = o_.work_dir;
  fs::remove_all(dir_);
  fs::create_directories(dir_ + "/nodes");
  SetLogFile(dir_ + "/antdt-run.log");  // the terminal is the progress bar's
  result_.job = job_.name;
  result_.policy = o_.no_slowdown ? "no-slowdown" : vocab::Name(policy_);
  absl::Status s = StartJob();
  if (s.ok()) s = Loop();
  if (!s.ok()) {
    Teardown();
    return s;
  }
  RETURN_IF_ERROR(Collect());
  return result_;
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

}  // namespace

absl::StatusOr<RunResult> RunJob(const manifest::Job& job, const manifest::Scenario& scenario,
                                 const RunOptions& options) {
  Runner runner(job, scenario, options);
  return runner.Run();
}

std::string ReportText(const RunResult& r) {
  std::string out = absl::StrFormat(
      "job %s under policy %s: %.1f s, %d records committed, %d steps, loss %.4f -> %.4f\n", r.job,
      r.policy, r.jct_seconds, r.records_committed, r.steps, r.first_loss, r.final_loss);
  if (r.actions.empty()) {
    absl::StrAppend(&out, "actions: none\n");
  } else {
    absl::StrAppend(&out,
                    "actions (batch changes that only keep the global batch are in the report):\n");
    for (const ActionRecord& a : r.actions) {
      if (a.action == vocab::ActionKind::kAdjustBatchSize && a.subject.empty()) continue;
      absl::StrAppendFormat(&out, "  %6.1fs %-14s %-10s %s\n", a.at_seconds, vocab::Name(a.action),
                            a.worker, a.reason);
    }
  }
  absl::StrAppend(&out, r.verification.Summary());
  return out;
}

absl::Status WriteReport(const RunResult& r, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError("--report: cannot create " + dir);
  std::string json = absl::StrFormat(
      "{\n  \"job\": \"%s\",\n  \"policy\": \"%s\",\n  \"jct_seconds\": %.3f,\n"
      "  \"records_committed\": %d,\n  \"exactly_once\": %s,\n  \"steps\": %d,\n"
      "  \"first_loss\": %.6f,\n  \"final_loss\": %.6f,\n  \"actions\": [",
      JsonEscape(r.job), JsonEscape(r.policy), r.jct_seconds, r.records_committed,
      r.verification.exactly_once() ? "true" : "false", r.steps, r.first_loss, r.final_loss);
  for (size_t i = 0; i < r.actions.size(); ++i) {
    const ActionRecord& a = r.actions[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"at_seconds\": %.3f, \"action\": \"%s\", \"worker\": \"%s\", "
                          "\"rule\": \"%s\", \"reason\": \"%s\", \"description\": \"%s\"}",
                          i ? "," : "", a.at_seconds, vocab::Name(a.action), JsonEscape(a.worker),
                          JsonEscape(a.rule), JsonEscape(a.reason), JsonEscape(a.description));
  }
  absl::StrAppend(&json, r.actions.empty() ? "],\n" : "\n  ],\n", "  \"timeline\": [");
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    const ThroughputPoint& p = r.timeline[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"t\": %.2f, \"worker\": \"%s\", \"samples_per_second\": %.2f, "
                          "\"score\": %.3f, \"class\": \"%s\"}",
                          i ? "," : "", p.at_seconds, JsonEscape(p.worker), p.samples_per_second,
                          p.score, vocab::Name(p.klass));
  }
  absl::StrAppend(&json, r.timeline.empty() ? "]\n}\n" : "\n  ]\n}\n");
  RETURN_IF_ERROR(WriteFileAtomically(dir + "/report.json", json));

  // SVG: one polyline per worker, samples/s over time; actions as marks.
  const double w = 900, h = 360, left = 60, bottom = 40, top = 20, right = 160;
  double tmax = std::max(1.0, r.jct_seconds), ymax = 1;
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  for (const ThroughputPoint& p : r.timeline) {
    series[p.worker].emplace_back(p.at_seconds, p.samples_per_second);
    ymax = std::max(ymax, p.samples_per_second);
  }
  auto X = [&](double t) { return left + (w - left - right) * t / tmax; };
  auto Y = [&](double v) { return h - bottom - (h - bottom - top) * v / (ymax * 1.1); };
  static const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                  "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
      "font-family=\"sans-serif\" font-size=\"11\">\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n"
      "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\"/>\n"
      "<text x=\"%.0f\" y=\"%.0f\">time (s), 0 to %.0f</text>\n"
      "<text x=\"4\" y=\"%.0f\">samples/s (max %.0f)</text>\n",
      w, h, left, h - bottom, w - right, h - bottom, left, top, left, h - bottom, left, h - 10,
      tmax, top - 6, ymax);
  int ci = 0;
  for (const auto& [worker, pts] : series) {
    std::string points;
    for (const auto& [t, v] : pts) absl::StrAppendFormat(&points, "%.1f,%.1f ", X(t), Y(v));
    const char* color = kColors[ci % 10];
    absl::StrAppendFormat(&svg,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "points=\"%s\"/>\n<text x=\"%.0f\" y=\"%.0f\" fill=\"%s\">%s</text>\n",
                          color, points, w - right + 10, top + 14.0 * ci + 10, color,
                          HtmlEscape(worker));
    ++ci;
  }
  for (const ActionRecord& a : r.actions) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#000\" "
                          "stroke-dasharray=\"4 3\"/><text x=\"%.1f\" y=\"%.0f\">%s %s</text>\n",
                          X(a.at_seconds), top, X(a.at_seconds), h - bottom, X(a.at_seconds) + 3,
                          top + 10, vocab::Name(a.action), HtmlEscape(a.worker));
  }
  svg += "</svg>\n";
  std::string html = absl::StrCat(
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>AntDT report: ", HtmlEscape(r.job),
      "</title><style>body{font-family:sans-serif;margin:2em}"
      "td,th{padding:2px 8px;text-align:left}pre{background:#f4f4f4;padding:8px}</style></head>"
      "<body><h1>AntDT job ",
      HtmlEscape(r.job), "</h1>",
      absl::StrFormat("<p>policy <b>%s</b>: %.1f s, %d records committed, %s, %d steps, loss "
                      "%.4f &rarr; %.4f</p>",
                      HtmlEscape(r.policy), r.jct_seconds, r.records_committed,
                      r.verification.exactly_once() ? "every record exactly once"
                                                    : "<b>records lost or committed twice</b>",
                      r.steps, r.first_loss, r.final_loss),
      "<h2>Throughput of each worker</h2>", svg,
      "<h2>Actions</h2><table><tr><th>at</th>"
      "<th>action</th><th>worker</th><th>why</th></tr>");
  for (const ActionRecord& a : r.actions) {
    absl::StrAppendFormat(&html, "<tr><td>%.1f s</td><td>%s</td><td>%s</td><td>%s</td></tr>",
                          a.at_seconds, vocab::Name(a.action), HtmlEscape(a.worker),
                          HtmlEscape(a.description));
  }
  absl::StrAppend(&html, "</table><h2>Exactly-once check</h2><pre>",
                  HtmlEscape(r.verification.Summary()), "</pre></body></html>\n");
  return WriteFileAtomically(dir + "/report.html", html);
}

}  // namespace antdt::local
