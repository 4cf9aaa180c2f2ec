#include "backends/local/runner.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
#include "backends/local/cgroup.h"
#include "backends/local/interference.h"
#include "backends/local/loss_log.h"
#include "backends/local/progress.h"
#include "backends/local/prometheus.h"
#include "backends/local/runner_internal.h"
#include "backends/local/servers.h"
#include "backends/local/worker_command.h"
#include "backends/local/workers.h"
#include "backends/metrics/job_metrics.h"
#include "client/sharding_client.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/process.h"
#include "common/serve.h"
#include "common/status.h"
#include "common/tls.h"
#include "core/jobconfig/jobconfig.h"
#include "core/loop/control_loop.h"
#include "core/policy/policy.h"
#include "services/monitor/monitor_service.h"

namespace antdt::local::internal {

namespace {

// The run's credential: a random token in a file only this user reads, given
// to the sharding service and (as ANTDT_TOKEN_FILE) to every worker.
absl::StatusOr<std::string> WriteRunToken(const std::string& dir) {
  const std::string path = dir + "/token";
  const std::string token = RandomToken();
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", path));
  const bool written = write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  close(fd);
  if (!written) return absl::InternalError(absl::StrCat("cannot write ", path));
  return token;
}

}  // namespace

absl::Status Runner::StartShardingService() {
  ASSIGN_OR_RETURN(token_, WriteRunToken(dir_));
  site_.token_file = dir_ + "/token";
  ASSIGN_OR_RETURN(
      sharding_,
      StartServer({o_.bin_dir + "/antdt-sharding-service", "--listen", "127.0.0.1:0", "--state-dir",
                   dir_ + "/sharding", "--lease-ttl", "10s", "--sync", "normal", "--metrics-listen",
                   "127.0.0.1:0", "--namespace", job_.namespace_, "--token-file", site_.token_file,
                   "--job", job_.name},
                  dir_, "sharding-service"));
  client::ShardingClientOptions copts;
  copts.token = token_;
  copts.job = job_.name;
  copts.dataset = "train";
  copts.worker_id = "antdt-run";
  driver_ = std::make_unique<client::ShardingClient>(
      client::CreateShardingChannel(sharding_.address), copts);
  return driver_->CreateDataset(jobconfig::DatasetSpecFor(job_)).status();
}

absl::Status Runner::StartMonitor() {
  const monitor::MonitorConfig mc = jobconfig::MonitorConfigFor(job_.monitor);
  ASSIGN_OR_RETURN(monitor::Monitor m, monitor::Monitor::Create(mc));
  monitor_ = std::make_unique<monitor::MonitorServiceImpl>(std::move(m), &RealClock::Get());
  // Only the run's workers' reports count (they carry its credential).
  monitor_->hub().SetStepGate([digest = TokenDigest(token_)](const v1::StepReport& step) {
    return DigestsMatch(step.credential_digest(), digest);
  });
  // The agents refuse the job's reports without it.
  monitor_->hub().SetJobCredential(job_.namespace_, job_.name, TokenDigest(token_));
  // The runner's /metrics: the Monitor's series and the job's own.
  ASSIGN_OR_RETURN(monitor_server_,
                   Serving::Start({"127.0.0.1:0", "", "127.0.0.1:0", registry_, {monitor_.get()}}));
  monitor_address_ = monitor_server_->address();
  monitor_collector_ = metrics::WithNamespace(monitor_->Collector(), job_.namespace_);
  if (auto* exposer = monitor_server_->exposer()) {
    exposer->RegisterCollectable(monitor_collector_, "/metrics");
  }
  monitor_->Start(100);
  return absl::OkStatus();
}

absl::Status Runner::StartAgents() {
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    std::vector<std::string> argv = {
        o_.bin_dir + "/antdt-agent", "--node", n.name, "--listen", "127.0.0.1:0", "--monitor",
        monitor_address_, "--interval", "1s", "--metrics-listen", "127.0.0.1:0",
        // A worker restarted elsewhere leaves no
        // series behind for long.
        "--worker-idle-after", absl::StrCat(WorkerIdleAfterMs(job_), "ms")};
    std::vector<std::string> labels;
    for (const auto& [k, v] : n.labels) labels.push_back(k + "=" + v);
    labels.push_back(absl::StrCat("antdt.io/device-speed=", n.speed < 1 ? n.speed : 1.0));
    argv.insert(argv.end(), {"--labels", absl::StrJoin(labels, ",")});
    if (const CpuCgroup* group = cgroups_ ? cgroups_->Of(n.name) : nullptr) {
      argv.insert(argv.end(), {"--cgroup-root", cgroup_root_, "--cgroups", group->name()});
    }
    // Its processes, as Interference lists them (every node shares this host).
    argv.insert(argv.end(), {"--node-pids-file", dir_ + "/nodes/" + n.name + ".pids"});
    std::map<std::string, std::string> env;
    if (scenario_.Uses(n.name, manifest::SlowdownVia::kGpuThrottle)) {
      // The test NVML library reports its GPU throttled while this file says so.
      argv.insert(argv.end(), {"--nvml-library", o_.bin_dir + "/libantdt-test-nvml.so"});
      env["ANTDT_TEST_NVML_STATE"] = dir_ + "/nodes/" + n.name + ".nvml";
    }
    ASSIGN_OR_RETURN(agents_[n.name], StartServer(argv, dir_, "agent-" + n.name, env));
  }
  return absl::OkStatus();
}

// Every /metrics of the job listed for Prometheus's file-based discovery and,
// with RunOptions::prometheus, Debian's prometheus scraping them.
absl::Status Runner::StartPrometheus() {
  std::vector<ScrapeTarget> targets;
  targets.push_back({monitor_server_->metrics_address(), {{"component", "runner"}}});
  targets.push_back({sharding_.metrics, {{"component", "sharding-service"}}});
  for (const auto& [node, a] : agents_) {
    targets.push_back({a.metrics, {{"component", "agent"}, {"node", node}}});
  }
  const std::string dir = dir_ + "/prometheus";
  fs::create_directories(dir);
  RETURN_IF_ERROR(WriteScrapeTargets(dir + "/targets.json", targets));
  RETURN_IF_ERROR(WriteFileAtomically(
      dir + "/prometheus.yml",
      LocalPrometheusConfig(dir + "/targets.json", ShippedRulesFile(o_.bin_dir))));
  if (!o_.prometheus) return absl::OkStatus();
  const char* path = std::getenv("PATH");
  const std::optional<std::string> binary =
      FindExecutable("prometheus", "/nonexistent", dir, path == nullptr ? "" : path);
  if (!binary) {
    return absl::FailedPreconditionError(
        "--prometheus: no prometheus on the PATH (Debian's package prometheus)");
  }
  ASSIGN_OR_RETURN(const int port, PickFreePort());
  const std::string address = absl::StrCat("127.0.0.1:", port);
  prometheus_ = std::make_unique<Process>(
      std::vector<std::string>{*binary, "--config.file=" + dir + "/prometheus.yml",
                               "--storage.tsdb.path=" + dir + "/data",
                               "--web.listen-address=" + address, "--log.level=warn"},
      dir_ + "/prometheus.log");
  const bool ready = WaitFor(
      [&] {
        std::optional<std::string> body = HttpGet(address, "/-/ready");
        return body && body->find("Ready") != std::string::npos;
      },
      std::chrono::seconds(30));
  if (!ready) {
    return absl::UnavailableError("prometheus did not start: " +
                                  Tail(dir_ + "/prometheus.log", 1500));
  }
  // Every target scraped once before the workers start (Prometheus hands new
  // targets to its scrapers every 5 s): nothing of the job goes unseen.
  const bool scraped = WaitFor(
      [&] {
        std::optional<std::string> body = HttpGet(address, ScrapedTargetsPath());
        return body && ScrapedTargets(*body) >= static_cast<int>(targets.size());
      },
      std::chrono::seconds(20));
  if (!scraped) Event("prometheus has not scraped every target yet: the job starts anyway");
  Event(absl::StrCat("prometheus on http://", address, " scraping ", targets.size(), " targets (",
                     dir, "/prometheus.yml)"));
  return absl::OkStatus();
}

absl::Status Runner::StartParameterServers(const std::vector<std::string>& nodes) {
  ServerSetOptions so;
  so.bin_dir = o_.bin_dir;
  so.dir = dir_;
  so.workers = job_.workers.replicas;
  // Backup workers (a baseline) are set on the servers as they start; the
  // policy's decision (backup-workers:start, in its budget) records it.
  so.backup = policy_ == vocab::Policy::kBackupWorkers ? job_.straggler_policy.backup_workers : 0;
  so.step_deadline = jobconfig::StepDeadline(job_, policy_, mode_);
  so.step_deadline_floor = jobconfig::StepDeadlineFloor(job_, policy_, mode_);
  so.learning_rate = job_.model.learning_rate;
  for (int32_t k = 0; k < static_cast<int32_t>(nodes.size()); ++k) {
    so.features.push_back(jobconfig::ParameterServerFeatures(job_, k));
  }
  so.server_time_us = job_.local.server_time_per_step_us;
  if (job_.checkpoint.every_steps > 0) {
    // In the run's own directory, not spec.checkpoint.path (a cluster's
    // volume): a run never restores another run's servers.
    so.checkpoint_dir = dir_ + "/checkpoint/ps";
    so.checkpoint_every_steps = job_.checkpoint.every_steps;
  }
  so.sharding = sharding_.address;
  so.job = job_.name;
  so.dataset = "train";
  so.token_file = site_.token_file;
  so.token = token_;
  so.speed_file = [this](const std::string& node) { return dir_ + "/nodes/" + node + ".speed"; };
  so.agent_address = [this](const std::string& node) {
    auto it = agents_.find(node);
    return it == agents_.end() ? std::string() : it->second.address;
  };
  so.namespace_ = job_.namespace_;
  so.on_event = [this](const std::string& line) { Event(line); };
  servers_ = std::make_unique<ServerSet>(std::move(so));
  return servers_->Start(nodes);
}

// KILL_RESTART of a parameter server: moved to `to_node` (servers.h); the loop
// then points every worker at it between two steps (those that pushed to the
// old one in between were sent on by it).
absl::Status Runner::MoveParameterServer(const policy::WorkerState& server,
                                         const std::string& to_node) {
  const std::string& id = server.id;
  const std::optional<vocab::MemberId> member = vocab::ParseMemberId(id);
  if (!member || member->role != vocab::Role::kParameterServer) {
    return absl::InvalidArgumentError("KILL_RESTART of " + id + ": not a parameter server");
  }
  ASSIGN_OR_RETURN(ServerSet::MoveResult r, servers_->Move(id, to_node, clock_.NowMillis()));
  const size_t k = static_cast<size_t>(member->index);
  site_.ps_addrs[k] = r.address;  // restarted workers start with it
  Event(absl::StrFormat("%s moved to %s (%s) %s step %d in %.2f s", id, to_node, r.address,
                        r.live ? "live, handed over at" : "restored from the checkpoint of", r.step,
                        r.seconds));
  moved_servers_[id] = {id, server.incarnation + 1, r.address, to_node};
  return absl::OkStatus();
}

// Old servers stopped once followed; a server that died restored from the
// last checkpoint (an action in the report).
absl::Status Runner::PollParameterServers() {
  ASSIGN_OR_RETURN(std::vector<ServerSet::MoveResult> restored, servers_->Poll(clock_.NowMillis()));
  for (const ServerSet::MoveResult& r : restored) {
    policy::Decision rec;
    rec.at_ms = clock_.NowMillis();
    rec.action = policy::KillRestart{r.id, "", "", 0};
    rec.rule = kPsRestoreRule;
    rec.evidence = {{"restored_step", static_cast<double>(r.step)}, {"seconds", r.seconds}};
    rec.reason = absl::StrFormat(
        "%s exited: restored from the checkpoint of step %d, every server and the data "
        "position back to it",
        r.id, r.step);
    Event(ActionLine(rec));
    result_.actions.push_back(rec);
  }
  return absl::OkStatus();
}

// The worker command checked, the port of PyTorch's rendezvous picked, the
// cgroups of the cpu-quota slowdowns created: before anything starts.
absl::Status Runner::PrepareWorkers() {
  site_ = SiteFor(job_, o_.bin_dir, dir_, o_.manifest_dir, o_.plain);
  if (jobconfig::StepDeadline(job_, policy_, mode_) > 0) {
    site_.micro_batches = jobconfig::kDeadlineMicroBatches;
  }
  RETURN_IF_ERROR(CheckWorkerCommand(job_, site_));
  ASSIGN_OR_RETURN(site_.master_port, PickFreePort());
  const std::string prefix = absl::StrCat("antdt-", getpid());
  absl::StatusOr<NodeCgroups> groups = NodeCgroups::Create(scenario_, cgroup_root_, prefix);
  if (!groups.ok()) {
    // No cgroup to cap (not root, or no cpu controller here, as in a bare
    // chroot): the quota is emulated (the speed file) and said so; its cause,
    // with no throttling to measure, reads unknown.
    Event(absl::StrCat(groups.status().message(),
                       "; emulated instead (the speed file): its cause will read unknown"));
    for (manifest::Slowdown& slowdown : scenario_.slowdowns) {
      if (slowdown.via == manifest::SlowdownVia::kCpuQuota) {
        slowdown.via = manifest::SlowdownVia::kEmulated;
      }
    }
    groups = NodeCgroups::Create(scenario_, cgroup_root_, prefix);
  }
  ASSIGN_OR_RETURN(cgroups_, std::move(groups));
  return absl::OkStatus();
}

absl::Status Runner::StartWorkers(const std::vector<const manifest::NodeSpec*>& placement) {
  site_.sharding_addr = sharding_.address;
  site_.ps_addrs = servers_->addresses();
  InterferenceOptions io;
  io.work_dir = dir_;
  io.sharding_address = sharding_.address;
  io.step_device_us = job_.local.device_time_per_sample_us * job_.model.global_batch_size /
                      std::max(job_.workers.replicas, 1);
  ASSIGN_OR_RETURN(interference_, Interference::Create(scenario_, io));
  WorkerSetOptions wo;
  wo.log_dir = dir_;
  wo.backoff_limit = job_.run_policy.backoff_limit;
  wo.launch = [this](const WorkerSlot& w) {
    WorkerSite site = site_;
    if (std::string relay = interference_->ShardingAddressFor(w.node); !relay.empty()) {
      site.sharding_addr = relay;  // a slow-data node reads through its relay
    }
    return LaunchFor(job_, site, w, agents_[w.node].address);
  };
  wo.on_spawn = [this](const WorkerSlot& w, int pid) {
    interference_->OnSpawn(w.node, pid);
    CpuCgroup* group = cgroups_->Of(w.node);
    return group == nullptr ? absl::OkStatus() : group->AddProcess(pid);
  };
  wo.retire = [this](const std::string& worker, int32_t incarnation) {
    return Retire(worker, incarnation);
  };
  wo.on_event = [this](const std::string& line) { Event(line); };
  workers_ = std::make_unique<WorkerSet>(std::move(wo), launcher_.get(), &clock_);
  for (int32_t i = 0; i < job_.workers.replicas; ++i) {
    RETURN_IF_ERROR(workers_->Start(vocab::MemberName(vocab::Role::kWorker, i), placement[i]->name,
                                    jobconfig::InitialLocalBatch(job_, i)));
  }
  return absl::OkStatus();
}

void Runner::LeaveParameterServers(const std::string& worker) {
  for (const std::string& address : servers_->addresses()) {
    auto stub = v1::ParameterServer::NewStub(antdt::CreateChannel(address));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    AddCredential(ctx, token_);
    v1::LeaveRequest req;
    req.set_worker_id(worker);
    v1::LeaveResponse resp;
    (void)stub->Leave(&ctx, req, &resp);
  }
}

// The scenario now: each node's speed file and its cgroup's CPU quota.
absl::Status Runner::ApplyScenario() {
  const int64_t now = clock_.NowMillis();
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    const std::string speed = absl::StrFormat("%.4f", scenario_.SpeedAt(n.name, now));
    if (speeds_written_[n.name] == speed) continue;
    if (WriteFileAtomically(dir_ + "/nodes/" + n.name + ".speed", speed + "\n").ok()) {
      speeds_written_[n.name] = speed;
    }
  }
  if (interference_) RETURN_IF_ERROR(interference_->Apply(scenario_, now));
  return cgroups_ ? cgroups_->Apply(scenario_, now) : absl::OkStatus();
}

loop::LoopOptions Runner::LoopOptionsOf() const {
  loop::LoopOptions lo;
  lo.job = job_.name;
  lo.namespace_ = job_.namespace_;
  lo.interval_ms = jobconfig::ControlIntervalMs(job_.monitor);
  lo.policy = jobconfig::PolicySpecFor(job_, policy_, lo.interval_ms);
  lo.global_batch_size = job_.model.global_batch_size;
  lo.window_ms = job_.monitor.window_ms;
  lo.regroup_seconds = jobconfig::RegroupSeconds(job_);
  lo.mode = mode_;
  return lo;
}

void Runner::StartLoop(const loop::LoopOptions& lo) {
  loop_ = std::make_unique<loop::ControlLoop>(lo, this, &clock_);
  // The first decision one interval after the job started (its clock), when
  // the Monitor has a window.
  (void)loop_->TakeTurn(clock_.NowMillis(), WindowsClosed());
}

// Worker i on the i-th worker node that is not a spare.
absl::StatusOr<std::vector<const manifest::NodeSpec*>> Runner::Placement() const {
  std::vector<const manifest::NodeSpec*> placement;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    if (!n.spare && n.role == vocab::Role::kWorker) placement.push_back(&n);
  }
  if (static_cast<int32_t>(placement.size()) < job_.workers.replicas) {
    return absl::InvalidArgumentError(absl::StrCat("spec.workers.replicas: ", job_.workers.replicas,
                                                   " workers but the scenario has ",
                                                   placement.size(), " non-spare nodes"));
  }
  return placement;
}

// Server k on the k-th ps node that is not a spare; on no node (never slowed,
// never moved) when the scenario has no ps nodes.
absl::StatusOr<std::vector<std::string>> Runner::ServerPlacement() const {
  const int32_t count = jobconfig::ParameterServerCount(job_);
  std::vector<std::string> nodes;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    if (!n.spare && n.role == vocab::Role::kParameterServer) nodes.push_back(n.name);
  }
  if (nodes.empty()) return std::vector<std::string>(static_cast<size_t>(count));
  if (static_cast<int32_t>(nodes.size()) < count) {
    return absl::InvalidArgumentError(absl::StrCat("spec.parameterServers.replicas: ", count,
                                                   " servers but the scenario has ", nodes.size(),
                                                   " non-spare ps nodes"));
  }
  nodes.resize(static_cast<size_t>(count));
  return nodes;
}

// Start: the sharding service and its dataset, the Monitor, agents, parameter
// servers and workers, and the control loop over them.
absl::Status Runner::StartJob() {
  ASSIGN_OR_RETURN(const std::vector<const manifest::NodeSpec*> placement, Placement());
  RETURN_IF_ERROR(PrepareWorkers());
  RETURN_IF_ERROR(StartShardingService());
  RETURN_IF_ERROR(StartMonitor());
  Event("sharding service on " + sharding_.address + ", monitor on " + monitor_address_);
  RETURN_IF_ERROR(ApplyScenario());
  RETURN_IF_ERROR(StartAgents());
  // Every action's series exists, at 0, before Prometheus first scrapes (which
  // StartPrometheus waits for): the first action is an increase from 0.
  const loop::LoopOptions lo = LoopOptionsOf();
  metrics_.Expect(policy::PossibleDecisions(lo.policy), lo.mode == vocab::Mode::kRecommend);
  RETURN_IF_ERROR(StartPrometheus());
  // With --prometheus, the job's time starts once Prometheus has scraped every
  // process (its discovery alone takes 5-10 s): its first samples are the
  // job's first second, and the scenario's times are the workers'.
  if (prometheus_) clock_.Restart();
  StartLoop(lo);
  RETURN_IF_ERROR(ApplyScenario());
  ASSIGN_OR_RETURN(const std::vector<std::string> server_nodes, ServerPlacement());
  RETURN_IF_ERROR(StartParameterServers(server_nodes));
  RETURN_IF_ERROR(StartWorkers(placement));
  const int servers = static_cast<int>(servers_->size());
  Event(absl::StrFormat(
      "%d workers (%s), %d parameter server%s, %d nodes; policy %s", job_.workers.replicas,
      jobconfig::HasWorkerCommand(job_) ? "worker command" : "demo trainer", servers,
      servers == 1 ? "" : "s", static_cast<int>(scenario_.nodes.size()), result_.policy));
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
    RETURN_IF_ERROR(ApplyScenario());
    ASSIGN_OR_RETURN(const bool all_done, workers_->Poll());
    if (all_done) return absl::OkStatus();
    RETURN_IF_ERROR(PollParameterServers());
    RETURN_IF_ERROR(Control());
    ShowProgress();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

// The loss: from the first parameter server, else from worker-0's loss log;
// the held-out evaluation from worker-0's `<loss log>.eval.json` either way.
void Runner::CollectLoss() {
  const std::string log = LossLogPath(dir_, "worker-0");
  if (std::optional<HeldOut> h = ReadHeldOut(log + ".eval.json")) {
    result_.held_out_log_loss = h->log_loss;
    result_.held_out_accuracy = h->accuracy;
  }
  if (servers_->size() > 0) {
    auto stub = v1::ParameterServer::NewStub(antdt::CreateChannel(servers_->address(0)));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    AddCredential(ctx, token_);
    v1::StatsRequest req;
    v1::ParameterServerStats stats;
    if (stub->Stats(&ctx, req, &stats).ok()) {
      result_.first_loss = stats.first_mean_loss();
      result_.final_loss = stats.mean_loss();
      result_.steps = stats.step();
    }
    return;
  }
  std::optional<LossCurve> curve = ReadLossLog(log, clock_.start_unix());
  if (!curve) return;
  result_.first_loss = curve->first_loss;
  result_.final_loss = curve->final_loss;
  result_.steps = curve->steps;
  result_.loss_curve = std::move(curve->points);
}

// Collect: the job's figures, then every process stopped and the journals
// checked for exactly-once (not in plain mode, which writes none).
absl::Status Runner::Collect() {
  result_.jct_seconds = static_cast<double>(clock_.NowMillis()) / 1000.0;
  if (loop_) {
    result_.estimated_saved_seconds = loop_->time_ledger().saved_seconds();
    result_.estimated_lost_seconds = loop_->time_ledger().lost_seconds();
  }
  if (auto p = driver_->Progress(); p.ok()) {
    result_.records_committed = p->records_committed_total();
    if (!o_.plain) result_.leases_shortened = p->leases_shortened();
  }
  CollectLoss();
  Teardown();
  result_.journals_checked = !o_.plain;
  if (o_.plain) return absl::OkStatus();
  std::vector<std::string> journals;
  for (const auto& w : workers_->slots()) journals.push_back(JournalPath(dir_, w->id));
  if (fs::exists(servers_->restores_journal())) journals.push_back(servers_->restores_journal());
  ASSIGN_OR_RETURN(result_.verification,
                   demo::VerifyJournals(journals, job_.dataset.records, job_.dataset.epochs));
  return absl::OkStatus();
}

absl::StatusOr<RunResult> Runner::Run() {
  if (o_.plain) RETURN_IF_ERROR(PlainAllowed(job_));
  policy_ =
      o_.plain ? vocab::Policy::kNone : o_.policy_override.value_or(job_.straggler_policy.name);
  mode_ = o_.plain ? vocab::Mode::kAct : o_.mode_override.value_or(job_.straggler_policy.mode);
  result_.mode = mode_;
  if (o_.no_slowdown) scenario_.slowdowns.clear();
  // Absolute: a worker command runs in the manifest's directory, and its
  // journal, loss log and checkpoint paths point here.
  dir_ = fs::absolute(o_.work_dir).lexically_normal().string();
  fs::remove_all(dir_);
  fs::create_directories(dir_ + "/nodes");
  SetLogFile(dir_ + "/antdt-run.log");  // the terminal is the progress bar's
  result_.job = job_.name;
  result_.start_unix_ms = static_cast<int64_t>(clock_.start_unix() * 1000);
  result_.policy = o_.no_slowdown ? "no-slowdown" : o_.plain ? "plain" : vocab::Name(policy_);
  absl::Status s = StartJob();
  if (s.ok()) s = Loop();
  if (!s.ok()) {
    Teardown();
    return s;
  }
  RETURN_IF_ERROR(Collect());
  return result_;
}

}  // namespace antdt::local::internal

namespace antdt::local {

using internal::Runner;

absl::Status PlainAllowed(const manifest::Job& job) {
  if (!jobconfig::RunsDemoTrainer(job)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      "plain needs a worker command (spec.workers.template.spec.containers[0].command) whose "
      "trainer reads ANTDT_MODE; the demo trainer has no plain mode");
}

absl::StatusOr<RunResult> RunJob(const manifest::Job& job, const manifest::Scenario& scenario,
                                 const RunOptions& options) {
  Runner runner(job, scenario, options);
  return runner.Run();
}

}  // namespace antdt::local
