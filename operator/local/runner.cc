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
#include "common/status.h"
#include "operator/bridge/bridge.h"
#include "operator/controller/policy.h"
#include "operator/monitor_service/monitor_service.h"

namespace antdt::local {
namespace {

using SteadyClock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::string Tail(const std::string& path, size_t bytes = 1500) {
  std::ifstream in(path);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return all.size() > bytes ? all.substr(all.size() - bytes) : all;
}

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
  if (!address) return absl::UnavailableError(name + " did not start: " + Tail(s.log));
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

struct Worker {
  std::string id;
  std::string node;
  int64_t incarnation = 0;
  int64_t local_batch = 0;
  int64_t last_restart_ms = -1;  // never
  int64_t directive_version = 0;
  int failures = 0;
  bool done = false;
  std::unique_ptr<Process> proc;
};

const char* ClassName(v1::StragglerClass c) {
  switch (c) {
    case v1::HEALTHY:
      return "healthy";
    case v1::LEADER:
      return "leader";
    case v1::DETERMINISTIC:
      return "deterministic";
    case v1::TRANSIENT:
      return "transient";
    case v1::PERSISTENT:
      return "persistent";
    default:
      return "-";
  }
}

class Runner {
 public:
  Runner(const manifest::Job& job, const manifest::Scenario& scenario, const RunOptions& o)
      : job_(job), scenario_(scenario), o_(o) {}

  absl::StatusOr<RunResult> Run();

 private:
  void Event(const std::string& line) {
    LogEvent("runner",
             {{"job", job_.name}, {"t", static_cast<double>(NowMs()) / 1000.0}, {"message", line}});
    if (o_.on_event) o_.on_event(line);
  }
  int64_t NowMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start_)
        .count();
  }
  int64_t WallMs() const { return RealClock::Get().NowMillis(); }
  absl::Status StartAgents();
  absl::Status StartParameterServers();
  void SpawnWorker(Worker& w);
  void WriteSpeeds();
  void LeaveParameterServers(const std::string& worker);
  absl::Status Control();
  absl::Status Execute(const controller::Decision& d);
  void Teardown();

  const manifest::Job& job_;
  manifest::Scenario scenario_;
  const RunOptions& o_;
  std::string dir_;
  std::string policy_name_;
  SteadyClock::time_point start_;

  Server sharding_;
  std::unique_ptr<client::ShardingClient> driver_;
  std::unique_ptr<monitor::MonitorServiceImpl> monitor_;
  std::unique_ptr<grpc::Server> monitor_server_;
  std::string monitor_address_;
  std::map<std::string, Server> agents_;  // by node
  std::vector<Server> ps_;
  std::vector<Worker> workers_;
  std::map<std::string, int64_t> excluded_until_;  // node -> steady ms
  std::map<std::string, std::string> speeds_written_;
  std::vector<controller::Decision> history_;
  int64_t control_every_ms_ = 1000;
  RunResult result_;
};

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
      policy_name_ == "backup-workers" ? job_.straggler_policy.backup_workers : 0;
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

void Runner::SpawnWorker(Worker& w) {
  std::vector<std::string> ps;
  for (const Server& s : ps_) ps.push_back(s.address);
  w.proc = std::make_unique<Process>(
      std::vector<std::string>{o_.bin_dir + "/antdt-trainer-worker",
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
                               "250ms"},
      dir_ + "/" + w.id + ".log");
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
    const std::string speed = absl::StrFormat("%.4f", scenario_.SpeedAt(n.name, NowMs()));
    if (speeds_written_[n.name] == speed) continue;
    if (WriteFileAtomically(dir_ + "/nodes/" + n.name + ".speed", speed + "\n").ok()) {
      speeds_written_[n.name] = speed;
    }
  }
}

absl::Status Runner::Execute(const controller::Decision& d) {
  ActionRecord rec;
  rec.at_seconds = static_cast<double>(NowMs()) / 1000.0;
  rec.description = controller::Describe(d);
  rec.rule = d.rule;
  rec.reason = d.reason;
  if (const auto* a = std::get_if<controller::AdjustBatchSize>(&d.action)) {
    rec.action = "ADJUST_BS";
    rec.worker = a->worker;
    for (Worker& w : workers_) {
      if (w.id != a->worker || w.done) continue;
      v1::Directive directive;
      directive.set_job(job_.name);
      directive.set_worker_id(w.id);
      directive.set_version(++w.directive_version);
      directive.mutable_adjust_batch()->set_local_batch_size(a->local_batch_size);
      directive.mutable_adjust_batch()->set_accumulation_steps(a->accumulation_steps);
      directive.set_reason(d.reason);
      w.local_batch = a->local_batch_size;
      if (!monitor_->SendDirective(w.node, directive)) {
        Event("directive for " + w.id + " not delivered: agent of " + w.node + " not connected");
      }
    }
  } else if (const auto* k = std::get_if<controller::KillRestart>(&d.action)) {
    rec.action = "KILL_RESTART";
    rec.worker = k->worker;
    for (Worker& w : workers_) {
      if (w.id != k->worker || w.done) continue;
      w.proc->Signal(SIGKILL);
      w.proc->Wait(std::chrono::seconds(10));
      LeaveParameterServers(w.id);
      // Its in-flight shards go back to the queue now, not at lease expiry.
      client::ShardingClientOptions copts;
      copts.job = job_.name;
      copts.dataset = "train";
      copts.worker_id = w.id;
      copts.incarnation = w.incarnation;
      client::ShardingClient releaser(client::CreateShardingChannel(sharding_.address), copts);
      RETURN_IF_ERROR(releaser.Release());
      excluded_until_[w.node] = NowMs() + job_.straggler_policy.cooldown_ms;
      w.node = k->to_node;
      ++w.incarnation;
      w.last_restart_ms = NowMs();
      SpawnWorker(w);
    }
  } else if (const auto* b = std::get_if<controller::UseBackupWorkers>(&d.action)) {
    rec.action = "BACKUP_WORKERS";
    rec.description = absl::StrCat("backups=", b->backups, " (set on the parameter servers)");
  }
  rec.subject = d.subject;
  // One line per decision about a worker; batch changes that only keep the
  // global batch constant are summed up by Control().
  if (!(rec.action == "ADJUST_BS" && d.subject.empty())) {
    Event(absl::StrFormat("%.1fs %s %s: %s", rec.at_seconds, rec.action, rec.worker, d.reason));
  }
  result_.actions.push_back(rec);
  history_.push_back(d);
  return absl::OkStatus();
}

absl::Status Runner::Control() {
  v1::GetJobHealthRequest req;
  req.set_job(job_.name);
  v1::GetJobHealthResponse health;
  grpc::ServerContext ctx;
  if (!monitor_->GetJobHealth(&ctx, &req, &health).ok()) return absl::OkStatus();  // no reports yet
  const double t = static_cast<double>(NowMs()) / 1000.0;
  for (const v1::WorkerHealth& h : health.workers()) {
    result_.timeline.push_back(
        {t, h.worker_id(), h.samples_per_second(), h.score(), ClassName(h.class_())});
  }
  controller::Observed obs;
  obs.now_ms = NowMs();
  obs.job = job_.name;
  obs.health = health;
  std::map<std::string, bool> busy;
  for (const Worker& w : workers_) {
    controller::WorkerState ws;
    ws.id = w.id;
    ws.role = "worker";
    ws.node = w.node;
    ws.local_batch_size = w.local_batch;
    ws.accumulation_steps = 1;
    ws.incarnation = static_cast<int32_t>(w.incarnation);
    ws.alive = !w.done;
    ws.last_restart_ms = w.last_restart_ms;
    obs.workers.push_back(ws);
    if (!w.done) busy[w.node] = true;
  }
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    controller::NodeState ns;
    ns.name = n.name;
    ns.spare = n.spare && !busy[n.name];
    auto ex = excluded_until_.find(n.name);
    ns.excluded_until_ms = ex == excluded_until_.end() ? 0 : ex->second;
    obs.nodes.push_back(ns);
  }
  obs.global_batch_size = job_.model.global_batch_size;
  auto progress = driver_->Progress();
  obs.remaining_seconds = progress.ok() ? progress->eta_seconds() : -1;
  // A restart costs a process start, a parameter pull, and the Monitor's
  // windows to see the worker again.
  obs.restart_cost_seconds = 1.0 + static_cast<double>(job_.monitor.window_ms) / 1000.0;
  obs.history = history_;
  const controller::PolicySpec spec = bridge::PolicySpecFor(job_, policy_name_, control_every_ms_);
  controller::Plan plan = controller::Decide(obs, spec);
  std::vector<std::string> rebalanced;
  for (const controller::Decision& d : plan.decisions) {
    RETURN_IF_ERROR(Execute(d));
    if (const auto* a = std::get_if<controller::AdjustBatchSize>(&d.action);
        a && d.subject.empty()) {
      rebalanced.push_back(absl::StrCat(a->worker, "->", a->local_batch_size));
    }
  }
  if (!rebalanced.empty()) {
    Event(absl::StrCat("    global batch kept: ", absl::StrJoin(rebalanced, " ")));
  }
  return absl::OkStatus();
}

void Runner::Teardown() {
  for (Worker& w : workers_) {
    if (w.proc && w.proc->Running()) {
      w.proc->Signal(SIGKILL);
      w.proc->Wait(std::chrono::seconds(5));
    }
  }
  for (Server& s : ps_) Stop(s);
  for (auto& [node, a] : agents_) Stop(a);
  if (monitor_) monitor_->Stop();
  if (monitor_server_)
    monitor_server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  Stop(sharding_);
}

absl::StatusOr<RunResult> Runner::Run() {
  policy_name_ = o_.policy_override.empty() ? job_.straggler_policy.name : o_.policy_override;
  control_every_ms_ = bridge::ControlIntervalMs(job_.monitor);
  if (o_.no_slowdown) scenario_.slowdowns.clear();
  dir_ = o_.work_dir;
  fs::remove_all(dir_);
  fs::create_directories(dir_ + "/nodes");
  SetLogFile(dir_ + "/antdt-run.log");  // the terminal is the progress bar's
  result_.job = job_.name;
  result_.policy = o_.no_slowdown ? "no-slowdown" : policy_name_;
  start_ = SteadyClock::now();

  std::vector<const manifest::NodeSpec*> placement;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    if (!n.spare) placement.push_back(&n);
  }
  if (static_cast<int32_t>(placement.size()) < job_.workers.replicas) {
    return absl::InvalidArgumentError(absl::StrCat("spec.workers.replicas: ", job_.workers.replicas,
                                                   " workers but the scenario has ",
                                                   placement.size(), " non-spare nodes"));
  }

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
  const v1::DatasetSpec ds = bridge::DatasetSpecFor(job_);
  RETURN_IF_ERROR(driver_->CreateDataset(ds).status());

  const monitor::MonitorConfig mc = bridge::MonitorConfigFor(job_.monitor);
  ASSIGN_OR_RETURN(monitor::Monitor m, monitor::Monitor::Create(mc));
  monitor_ = std::make_unique<monitor::MonitorServiceImpl>(std::move(m), &RealClock::Get());
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(monitor_.get());
  monitor_server_ = builder.BuildAndStart();
  if (!monitor_server_) return absl::InternalError("monitor: cannot listen on 127.0.0.1");
  monitor_address_ = absl::StrCat("127.0.0.1:", port);
  monitor_->Start(100);
  Event("sharding service on " + sharding_.address + ", monitor on " + monitor_address_);

  WriteSpeeds();
  RETURN_IF_ERROR(StartAgents());
  RETURN_IF_ERROR(StartParameterServers());
  const int32_t n = job_.workers.replicas;
  workers_.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    Worker& w = workers_[i];
    w.id = absl::StrCat("worker-", i);
    w.node = placement[i]->name;
    w.local_batch = bridge::InitialLocalBatch(job_, i);
    SpawnWorker(w);
  }
  Event(absl::StrFormat("%d workers, %d parameter servers, %d nodes; policy %s", n,
                        static_cast<int>(ps_.size()), static_cast<int>(scenario_.nodes.size()),
                        result_.policy));
  if (policy_name_ == "backup-workers") {
    controller::Decision d;
    d.action = controller::UseBackupWorkers{job_.straggler_policy.backup_workers};
    d.policy = policy_name_;
    d.rule = "backup-workers";
    d.reason = "baseline: each step takes the first N-b gradients";
    RETURN_IF_ERROR(Execute(d));
  }

  const int64_t control_every = control_every_ms_;
  int64_t next_control = control_every;
  const int64_t total = job_.dataset.records * job_.dataset.epochs;
  for (;;) {
    if (o_.interrupted != nullptr && *o_.interrupted) {
      Teardown();
      return absl::CancelledError("interrupted: every process stopped");
    }
    if (NowMs() > o_.timeout_ms) {
      Teardown();
      return absl::DeadlineExceededError("the job did not finish in time");
    }
    WriteSpeeds();
    bool all_done = true;
    for (Worker& w : workers_) {
      if (w.done) continue;
      if (auto status = w.proc->Wait(std::chrono::milliseconds(0))) {
        if (WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
          w.done = true;
          continue;
        }
        if (++w.failures > job_.run_policy.backoff_limit) {
          std::string log = Tail(dir_ + "/" + w.id + ".log");
          Teardown();
          return absl::InternalError(
              absl::StrCat(w.id, " failed ", w.failures, " times (runPolicy.backoffLimit): ", log));
        }
        Event(absl::StrCat(w.id, " exited (status ", *status, "); restarting"));
        LeaveParameterServers(w.id);
        ++w.incarnation;
        SpawnWorker(w);
      }
      all_done = false;
    }
    if (all_done) break;
    if (NowMs() >= next_control) {
      next_control = NowMs() + control_every;
      if (absl::Status s = Control(); !s.ok()) {
        Teardown();
        return s;
      }
    }
    if (o_.on_status) {
      auto p = driver_->Progress();
      int stragglers = 0;
      if (!result_.timeline.empty()) {
        const double last = result_.timeline.back().at_seconds;
        for (auto it = result_.timeline.rbegin();
             it != result_.timeline.rend() && it->at_seconds == last; ++it) {
          if (it->klass == "transient" || it->klass == "persistent" || it->klass == "deterministic")
            ++stragglers;
        }
      }
      if (p.ok()) {
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
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  result_.jct_seconds = static_cast<double>(NowMs()) / 1000.0;
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
  for (const Worker& w : workers_) journals.push_back(dir_ + "/" + w.id + ".journal");
  ASSIGN_OR_RETURN(result_.verification,
                   demo::VerifyJournals(journals, job_.dataset.records, job_.dataset.epochs));
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
      if (a.action == "ADJUST_BS" && a.subject.empty()) continue;
      absl::StrAppendFormat(&out, "  %6.1fs %-14s %-10s %s\n", a.at_seconds, a.action, a.worker,
                            a.reason);
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
                          i ? "," : "", a.at_seconds, a.action, JsonEscape(a.worker),
                          JsonEscape(a.rule), JsonEscape(a.reason), JsonEscape(a.description));
  }
  absl::StrAppend(&json, r.actions.empty() ? "],\n" : "\n  ],\n", "  \"timeline\": [");
  for (size_t i = 0; i < r.timeline.size(); ++i) {
    const ThroughputPoint& p = r.timeline[i];
    absl::StrAppendFormat(&json,
                          "%s\n    {\"t\": %.2f, \"worker\": \"%s\", \"samples_per_second\": %.2f, "
                          "\"score\": %.3f, \"class\": \"%s\"}",
                          i ? "," : "", p.at_seconds, JsonEscape(p.worker), p.samples_per_second,
                          p.score, p.klass);
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
                          top + 10, a.action, HtmlEscape(a.worker));
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
                          a.at_seconds, a.action, HtmlEscape(a.worker), HtmlEscape(a.description));
  }
  absl::StrAppend(&html, "</table><h2>Exactly-once check</h2><pre>",
                  HtmlEscape(r.verification.Summary()), "</pre></body></html>\n");
  return WriteFileAtomically(dir + "/report.html", html);
}

}  // namespace antdt::local
