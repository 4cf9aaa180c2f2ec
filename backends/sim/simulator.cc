#include "backends/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <unordered_map>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "api/vocab/labels.h"
#include "backends/sim/commit_counts.h"
#include "client/sharding_client.h"
#include "common/clock.h"
#include "common/job_key.h"
#include "common/status.h"
#include "common/step_deadline.h"
#include "core/jobconfig/jobconfig.h"
#include "core/loop/control_loop.h"
#include "core/monitor/monitor.h"
#include "services/sharding/ledger.h"
#include "services/sharding/store.h"

namespace antdt::sim {
namespace {

// Reports carry Unix milliseconds; a window boundary, so that window n of the
// simulation is window n of the Monitor.
constexpr char kDataset[] = "train";

// A shard lease a worker reads from.
struct OpenLease {
  uint64_t token = 0;
  v1::Shard shard;
  int64_t taken = 0;      // records handed to steps so far
  int64_t committed = 0;  // of those, committed

  int64_t size() const {
    return shard.record_ids_size() > 0 ? shard.record_ids_size() : shard.end() - shard.start();
  }
  int64_t RecordAt(int64_t i) const {
    return shard.record_ids_size() > 0 ? shard.record_ids(static_cast<int>(i)) : shard.start() + i;
  }
  // The service ended the lease at `lease_end` (counted from the shard's
  // first record) when that is before where it ended.
  void EndAt(int64_t lease_end) {
    const int64_t n = lease_end - shard.committed();
    if (lease_end > 0 && n < size() && n >= committed) client::EndShardAt(shard, lease_end);
  }
};

struct SimWorker {
  std::string id;
  std::string node;
  const manifest::NodeSpec* node_spec = nullptr;
  int64_t batch = 0;
  int64_t pending_batch = 0;  // an ADJUST_BS not yet applied
  // Of the last ADJUST_BS: micro-batches, which cost no time in the model.
  int32_t accumulation_steps = 1;
  int32_t incarnation = 0;
  bool alive = true;
  double back_at = 0;  // while !alive: when the new incarnation starts
  int64_t last_restart_ms = -1;
  std::deque<OpenLease> leases;
  // This step: records taken per lease (front first) and the compute time.
  std::vector<int64_t> took;
  int64_t samples = 0;
  int64_t batch_samples = 0;  // the step's batch before its deadline cut it; 0: not cut
  double compute = 0;
};

// A node's speed over time: its own speed over the factors of the emulated
// slowdowns active then (manifest::Scenario::SpeedAt, indexed by node).
class Speeds {
 public:
  Speeds(const manifest::Scenario& scenario, bool no_slowdown) {
    for (const manifest::NodeSpec& n : scenario.nodes) nodes_[n.name].speed = n.speed;
    if (no_slowdown) return;
    for (const manifest::Slowdown& s : scenario.slowdowns) {
      if (s.via == manifest::SlowdownVia::kEmulated) nodes_[s.node].slowdowns.push_back(&s);
    }
  }
  double At(const std::string& node, int64_t t_ms) const {
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return 1.0;
    double speed = it->second.speed;
    for (const manifest::Slowdown* s : it->second.slowdowns) {
      if (s->ActiveAt(t_ms)) speed /= s->factor;
    }
    return speed;
  }

 private:
  struct Node {
    double speed = 1.0;
    std::vector<const manifest::Slowdown*> slowdowns;
  };
  std::unordered_map<std::string, Node> nodes_;
};

class Sim final : public loop::Backend {
 public:
  Sim(const manifest::Job& job, const manifest::Scenario& scenario, const SimOptions& o)
      : job_(job), scenario_(scenario), o_(o), speeds_(scenario, o.no_slowdown), rng_(o.seed) {}

  absl::StatusOr<SimResult> Run();
  // SimResult::capacity_bound_seconds, from the workers' first placement.
  double CapacityBound() const;

  // What the control loop sees now (the Monitor's view, the nodes and the ETA
  // only when a turn is due: a view of 10,000 workers is not free).
  loop::Observation Observe();

  // ---- loop::Backend
  absl::Status RestartElsewhere(const policy::WorkerState& member,
                                const policy::KillRestart& restart) override;
  bool SendDirective(const std::string& node, const v1::Directive& directive) override;
  void LeaveParameterServers(const std::string& /*worker*/) override {}
  absl::Status ReleaseShards(const std::string& worker, int32_t incarnation) override;
  void RecordAction(const policy::Decision& d, loop::Outcome outcome) override;
  void RecordSkipped(const std::string& /*line*/, policy::SkipReason reason) override {
    ++result_.skipped[policy::SkipReasonName(reason)];
  }

 private:
  std::optional<v1::GetJobHealthResponse> Health() const {
    v1::GetJobHealthResponse h = monitor_->Health(key_, UnixNow());
    if (h.workers_size() == 0) return std::nullopt;
    return h;
  }
  std::vector<policy::WorkerState> Members() const;
  std::vector<policy::NodeState> Nodes() const;
  double RemainingSeconds() const;
  int64_t UnixNow() const {
    return o_.start_unix_ms + static_cast<int64_t>(std::llround(t_ * 1000));
  }
  void SetTime(double t) {
    t_ = t;
    loop_clock_.Set(static_cast<int64_t>(std::llround(t_ * 1000)));
    unix_clock_.Set(UnixNow());
  }
  absl::Status Start();
  absl::Status Gather(SimWorker& w);
  absl::Status Commit(SimWorker& w);
  double CutAtDeadline();
  void Report(const SimWorker& w);
  SimWorker* WorkerOn(const std::string& node);
  SimWorker* WorkerNamed(const std::string& id);
  v1::DatasetRef Ref() const {
    v1::DatasetRef ref;
    ref.set_job(job_.name);
    ref.set_name(kDataset);
    return ref;
  }

  const manifest::Job& job_;
  const manifest::Scenario& scenario_;
  const SimOptions o_;
  const Speeds speeds_;
  std::mt19937_64 rng_;
  double t_ = 0;  // simulated seconds since the job started
  FakeClock loop_clock_{0};
  FakeClock unix_clock_{o_.start_unix_ms};
  std::string key_;  // the Monitor's job key

  sharding::MemoryStore store_;
  std::unique_ptr<sharding::Ledger> ledger_;
  std::optional<monitor::Monitor> monitor_;
  std::unique_ptr<loop::ControlLoop> loop_;
  std::vector<SimWorker> workers_;
  std::unordered_map<std::string, size_t> by_id_, by_node_;  // into workers_
  std::vector<size_t> id_order_;    // workers_ by id, as the loop's members are sorted
  bool ended_ = false;              // the ledger answered END_OF_DATA
  double step_deadline_ = 0;        // jobconfig::StepDeadline; 0: steps are never cut
  std::optional<DeadlineFit> fit_;  // the deadline fitted to the job's steps (step_deadline.h)
  double stall_until_ = 0;          // a job without parameter servers: the group re-forms
  CommitCounts commits_;            // per (epoch, record)
  SimResult result_;
};

absl::Status Sim::Start() {
  key_ = JobKey(job_.namespace_, job_.name);
  step_deadline_ = jobconfig::StepDeadline(job_, o_.policy, job_.straggler_policy.mode);
  if (step_deadline_ > 0 && job_.straggler_policy.step_deadline_fitted)
    fit_.emplace(DeadlineFit::kFloor, step_deadline_);
  ASSIGN_OR_RETURN(ledger_, sharding::Ledger::Open(&store_, &unix_clock_, {}));
  v1::CreateDatasetRequest create;
  *create.mutable_spec() = jobconfig::DatasetSpecFor(job_);
  create.mutable_spec()->set_job(job_.name);
  create.mutable_spec()->set_name(kDataset);
  RETURN_IF_ERROR(ledger_->CreateDataset(create).status());
  result_.records = job_.dataset.records * job_.dataset.epochs;
  commits_.Reset(static_cast<size_t>(result_.records));

  // The simulator never asks for a member's history (the service's
  // GetHistory does): one point a member, not 64 (at 10,000 workers, 40 MB
  // of peak RSS written on every window's close and read by nothing).
  monitor::MonitorConfig monitor_config = jobconfig::MonitorConfigFor(job_.monitor);
  monitor_config.history_windows = 1;
  ASSIGN_OR_RETURN(monitor::Monitor m, monitor::Monitor::Create(std::move(monitor_config)));
  monitor_.emplace(std::move(m));
  for (const manifest::NodeSpec& n : scenario_.nodes) monitor_->SetNodeLabels(n.name, n.labels);

  std::vector<const manifest::NodeSpec*> placement;
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    if (!n.spare && n.role == vocab::Role::kWorker) placement.push_back(&n);
  }
  if (static_cast<int32_t>(placement.size()) < job_.workers.replicas) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.workers.replicas: ", job_.workers.replicas, " workers, but the scenario has ",
        placement.size(), " worker nodes that are not spares"));
  }
  workers_.reserve(static_cast<size_t>(job_.workers.replicas));
  for (int32_t i = 0; i < job_.workers.replicas; ++i) {
    SimWorker w;
    w.id = vocab::MemberName(vocab::Role::kWorker, i);
    w.node = placement[static_cast<size_t>(i)]->name;
    w.batch = jobconfig::InitialLocalBatch(job_, i);
    by_id_[w.id] = workers_.size();
    by_node_[w.node] = workers_.size();
    workers_.push_back(std::move(w));
  }
  id_order_.resize(workers_.size());
  for (size_t i = 0; i < id_order_.size(); ++i) id_order_[i] = i;
  std::sort(id_order_.begin(), id_order_.end(),
            [&](size_t a, size_t b) { return workers_[a].id < workers_[b].id; });

  loop::LoopOptions lo;
  lo.job = job_.name;
  lo.namespace_ = job_.namespace_;
  lo.interval_ms = jobconfig::ControlIntervalMs(job_.monitor);
  lo.policy = jobconfig::PolicySpecFor(job_, o_.policy, lo.interval_ms);
  lo.global_batch_size = job_.model.global_batch_size;
  lo.window_ms = job_.monitor.window_ms;
  lo.regroup_seconds = jobconfig::RegroupSeconds(job_);
  lo.node_memory = o_.node_memory;
  loop_ = std::make_unique<loop::ControlLoop>(lo, this, &loop_clock_);
  // The first decision one interval in.
  (void)loop_->TakeTurn(loop_clock_.NowMillis(), monitor_->WindowsClosed(key_));
  return absl::OkStatus();
}

// Fills the worker's batch from its leases, acquiring as they run out.
absl::Status Sim::Gather(SimWorker& w) {
  w.took.assign(w.leases.size(), 0);
  int64_t want = w.batch;
  size_t i = 0;
  while (want > 0) {
    if (i == w.leases.size()) {
      v1::AcquireShardRequest req;
      *req.mutable_dataset() = Ref();
      req.set_worker_id(w.id);
      req.set_incarnation(w.incarnation);
      ++result_.ledger_calls;
      ASSIGN_OR_RETURN(v1::AcquireShardResponse r, ledger_->AcquireShard(req));
      if (r.result() == v1::AcquireShardResponse::END_OF_DATA) ended_ = true;
      if (r.result() != v1::AcquireShardResponse::SHARD) break;  // a short batch
      OpenLease lease;
      lease.token = r.lease().token();
      lease.shard = std::move(*r.mutable_shard());
      w.leases.push_back(std::move(lease));
      w.took.push_back(0);
    }
    OpenLease& l = w.leases[i];
    const int64_t n = std::min(want, l.size() - l.taken);
    l.taken += n;
    w.took[i] += n;
    want -= n;
    if (l.taken == l.size()) ++i;
  }
  return absl::OkStatus();
}

// The step's records, committed: progress on a lease still open, the shard
// completed when it is done.
absl::Status Sim::Commit(SimWorker& w) {
  for (size_t i = 0; i < w.took.size() && i < w.leases.size(); ++i) {
    OpenLease& l = w.leases[i];
    if (w.took[i] == 0) continue;
    const int64_t epoch_base = static_cast<int64_t>(l.shard.epoch()) * job_.dataset.records;
    for (int64_t k = l.committed; k < l.committed + w.took[i]; ++k) {
      commits_.Add(static_cast<size_t>(epoch_base + l.RecordAt(k)));
    }
    l.committed += w.took[i];
    ++result_.ledger_calls;
    if (l.committed == l.size()) {
      v1::CompleteShardRequest req;
      *req.mutable_dataset() = Ref();
      req.set_token(l.token);
      RETURN_IF_ERROR(ledger_->CompleteShard(req).status());
    } else {
      v1::ReportProgressRequest req;
      *req.mutable_dataset() = Ref();
      req.set_token(l.token);
      req.set_records_done(l.shard.committed() + l.committed);
      req.set_follow_shorter_end(true);  // every record taken is committed by now
      ASSIGN_OR_RETURN(v1::ReportProgressResponse r, ledger_->ReportProgress(req));
      l.EndAt(r.lease_end());
    }
  }
  while (!w.leases.empty() && w.leases.front().committed == w.leases.front().size()) {
    w.leases.pop_front();
  }
  w.took.clear();
  return absl::OkStatus();
}

// The step's deadline: a worker still training at step_deadline_ x the
// median worker's compute trains the samples it has by then (one at least)
// and hands the rest back to its leases, untaken, for its next step. Returns
// the step's slowest compute after the cut.
double Sim::CutAtDeadline() {
  std::vector<double> computes;
  for (const SimWorker& w : workers_) {
    if (w.alive && w.samples > 0) computes.push_back(w.compute);
  }
  if (computes.empty()) return 0;
  auto mid = computes.begin() + static_cast<std::ptrdiff_t>(computes.size() / 2);
  std::nth_element(computes.begin(), mid, computes.end());
  const double factor = fit_ ? fit_->Factor() : step_deadline_;
  const double deadline = step_deadline_ > 0 ? *mid * factor : 0;
  if (fit_) fit_->AddStep(computes);  // this step's spread, for the next steps' deadlines
  double slowest = 0;
  for (SimWorker& w : workers_) {
    w.batch_samples = 0;
    if (!w.alive || w.samples == 0) continue;
    if (deadline > 0 && w.compute > deadline) {
      const int64_t done = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(w.samples) * deadline / w.compute));
      int64_t back = w.samples - done;
      ++result_.cut_steps;
      result_.cut_samples += back;
      for (size_t i = w.took.size(); i-- > 0 && back > 0;) {  // the last taken go back
        const int64_t n = std::min(back, w.took[i]);
        w.took[i] -= n;
        w.leases[i].taken -= n;
        back -= n;
      }
      w.compute *= static_cast<double>(done) / static_cast<double>(w.samples);
      w.batch_samples = w.samples;
      w.samples = done;
    }
    slowest = std::max(slowest, w.compute);
  }
  return slowest;
}

void Sim::Report(const SimWorker& w) {
  v1::StepReport r;
  r.set_job(job_.name);
  r.set_namespace_(job_.namespace_);
  r.set_worker_id(w.id);
  r.set_role("worker");
  r.set_node(w.node);
  r.set_step(result_.steps);
  r.set_samples(w.samples);
  r.set_batch_samples(w.batch_samples);
  r.set_bpt_seconds(std::max(w.compute, 1e-6));
  r.set_compute_seconds(w.compute);
  r.set_communication_seconds(o_.communication_seconds);
  r.set_time_unix_ms(UnixNow());
  monitor_->Ingest(r);
  ++result_.step_reports;
}

double Sim::CapacityBound() const {
  const double per_sample = static_cast<double>(job_.local.device_time_per_sample_us) / 1e6;
  int64_t global = 0;
  for (const SimWorker& w : workers_) global += w.batch;
  if (global <= 0) return 0;
  const int64_t steps = result_.records / global + (result_.records % global != 0);
  double t = 0;
  for (int64_t s = 0; s < steps; ++s) {
    double capacity = 0;  // samples per second at per_sample seconds each
    for (const SimWorker& w : workers_) {
      capacity += speeds_.At(w.node, static_cast<int64_t>(t * 1000)) / per_sample;
    }
    const int64_t samples = std::min(global, result_.records - s * global);
    t += static_cast<double>(samples) / capacity + o_.communication_seconds;
  }
  return t;
}

absl::StatusOr<SimResult> Sim::Run() {
  const auto wall_start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(Start());
  result_.capacity_bound_seconds = CapacityBound();
  const double per_sample = static_cast<double>(job_.local.device_time_per_sample_us) / 1e6;
  std::uniform_real_distribution<double> jitter(1 - o_.jitter, 1 + o_.jitter);
  const bool collective = jobconfig::ParameterServerCount(job_) == 0;
  while (true) {
    if (t_ > o_.max_seconds) {
      return absl::DeadlineExceededError(
          absl::StrCat("the simulated job ran past ", o_.max_seconds, " s at step ", result_.steps,
                       "; ", result_.records_committed, " records committed"));
    }
    bool any = false;
    const bool stalled = collective && t_ < stall_until_;
    for (SimWorker& w : workers_) {
      if (!w.alive && t_ >= w.back_at) w.alive = true;
      if (!w.alive || stalled) continue;
      if (w.pending_batch > 0) w.batch = std::exchange(w.pending_batch, 0);
      RETURN_IF_ERROR(Gather(w));
      w.samples = 0;
      for (int64_t n : w.took) w.samples += n;
      const double speed = speeds_.At(w.node, static_cast<int64_t>(t_ * 1000));
      w.compute = static_cast<double>(w.samples) * per_sample / speed * jitter(rng_);
      any = any || w.samples > 0;
    }
    const double slowest = any ? CutAtDeadline() : 0;
    bool leases_open = false;
    for (const SimWorker& w : workers_) leases_open = leases_open || !w.leases.empty();
    if (ended_ && !any && !leases_open) break;
    // A step with nothing to compute (every record left is leased by a worker
    // that is restarting): wait as an idle worker does.
    SetTime(t_ + (any ? slowest + o_.communication_seconds : 0.1));
    if (any) {
      ++result_.steps;
      for (SimWorker& w : workers_) {
        if (!w.alive || w.samples == 0) continue;
        Report(w);
        RETURN_IF_ERROR(Commit(w));
        w.samples = 0;
      }
    }
    monitor_->CloseWindows(UnixNow());
    RETURN_IF_ERROR(loop_->Apply(loop_->Step(Observe())));
  }
  result_.jct_seconds = t_;
  result_.policy = o_.no_slowdown ? "no-slowdown" : vocab::Name(o_.policy);
  result_.seed = o_.seed;
  result_.records_committed = commits_.Committed();
  result_.missing = commits_.Missing();
  result_.duplicates = commits_.Duplicates();
  v1::GetProgressRequest progress;
  *progress.mutable_dataset() = Ref();
  progress.set_omit_workers(true);
  if (auto p = ledger_->GetProgress(progress); p.ok()) {
    result_.leases_shortened = p->leases_shortened();
  }
  const v1::GetJobHealthResponse last = monitor_->Health(key_, UnixNow());
  result_.stragglers.assign(last.stragglers().begin(), last.stragglers().end());
  result_.estimated_saved_seconds = loop_->time_ledger().saved_seconds();
  result_.estimated_lost_seconds = loop_->time_ledger().lost_seconds();
  result_.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return std::move(result_);
}

loop::Observation Sim::Observe() {
  loop::Observation now;
  now.now_ms = loop_clock_.NowMillis();
  now.windows_closed = monitor_->WindowsClosed(key_);
  // The members too only when a turn is due: the simulator re-delivers no
  // batches and moves no servers, so no other step reads them.
  if (!loop_->Due(now.now_ms, now.windows_closed)) return now;
  now.health = Health();
  now.members = Members();
  if (now.health) {
    now.nodes = Nodes();
    now.remaining_seconds = RemainingSeconds();
  }
  return now;
}

std::vector<policy::WorkerState> Sim::Members() const {
  std::vector<policy::WorkerState> out;
  out.reserve(workers_.size());
  for (size_t i : id_order_) {
    const SimWorker& w = workers_[i];
    policy::WorkerState s;
    s.id = w.id;
    s.node = w.node;
    s.local_batch_size = w.pending_batch > 0 ? w.pending_batch : w.batch;
    s.accumulation_steps = w.accumulation_steps;
    s.incarnation = w.incarnation;
    s.alive = w.alive;
    s.last_restart_ms = w.last_restart_ms;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<policy::NodeState> Sim::Nodes() const {
  // The nodes running a worker, as views of its names (10,000 a turn at scale).
  absl::flat_hash_set<absl::string_view> busy;
  busy.reserve(workers_.size());
  for (const SimWorker& w : workers_) busy.insert(w.node);
  std::vector<policy::NodeState> nodes;
  nodes.reserve(scenario_.nodes.size());
  for (const manifest::NodeSpec& n : scenario_.nodes) {
    policy::NodeState ns;
    ns.name = n.name;
    ns.spare = n.spare && !busy.contains(n.name);
    nodes.push_back(std::move(ns));
  }
  return nodes;
}

double Sim::RemainingSeconds() const {
  v1::GetProgressRequest req;
  *req.mutable_dataset() = Ref();
  req.set_omit_workers(true);  // the totals: thousands of workers a turn
  absl::StatusOr<v1::GetProgressResponse> p = ledger_->GetProgress(req);
  return p.ok() ? p->eta_seconds() : -1;
}

absl::Status Sim::RestartElsewhere(const policy::WorkerState& member,
                                   const policy::KillRestart& restart) {
  SimWorker* w = WorkerNamed(member.id);
  if (w == nullptr) return absl::NotFoundError(absl::StrCat("no worker ", member.id));
  // Stopped now: what it took and did not commit goes back (Retire releases
  // its leases), and it starts again on the spare node after the relaunch.
  w->leases.clear();
  w->took.clear();
  w->alive = false;
  w->back_at = t_ + o_.relaunch_seconds;
  by_node_.erase(w->node);
  by_node_[restart.to_node] = static_cast<size_t>(w - workers_.data());
  w->node = restart.to_node;
  w->last_restart_ms = static_cast<int64_t>(std::llround(t_ * 1000));
  ++w->incarnation;
  ++result_.restarts;
  stall_until_ = std::max(stall_until_, w->back_at + jobconfig::RegroupSeconds(job_));
  return absl::OkStatus();
}

bool Sim::SendDirective(const std::string& node, const v1::Directive& directive) {
  SimWorker* w = WorkerNamed(directive.worker_id());
  if (w == nullptr) w = WorkerOn(node);
  if (w == nullptr) return false;
  // As the local runner does, a worker being restarted keeps the batch and
  // starts with it.
  if (directive.has_adjust_batch() && directive.adjust_batch().local_batch_size() > 0) {
    w->pending_batch = directive.adjust_batch().local_batch_size();
    w->accumulation_steps = std::max(1, directive.adjust_batch().accumulation_steps());
  }
  return w->alive;
}

absl::Status Sim::ReleaseShards(const std::string& worker, int32_t incarnation) {
  v1::ReleaseWorkerRequest req;
  *req.mutable_dataset() = Ref();
  req.set_worker_id(worker);
  req.set_incarnation(incarnation);
  ++result_.ledger_calls;
  return ledger_->ReleaseWorker(req).status();
}

void Sim::RecordAction(const policy::Decision& d, loop::Outcome /*outcome*/) {
  result_.actions.push_back(policy::WithoutReasons(d));
}

SimWorker* Sim::WorkerOn(const std::string& node) {
  auto it = by_node_.find(node);
  return it == by_node_.end() ? nullptr : &workers_[it->second];
}

SimWorker* Sim::WorkerNamed(const std::string& id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &workers_[it->second];
}

}  // namespace

absl::StatusOr<SimResult> Simulate(const manifest::Job& job, const manifest::Scenario& scenario,
                                   const SimOptions& options) {
  Sim sim(job, scenario, options);
  return sim.Run();
}

manifest::Scenario GenerateScenario(const std::string& name, int32_t workers, int32_t spares,
                                    const StragglerMix& mix, uint64_t seed) {
  manifest::Scenario s;
  s.name = name;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0, 1);
  auto between = [&](double lo, double hi) { return lo + (hi - lo) * unit(rng); };
  for (int32_t i = 0; i < workers + spares; ++i) {
    manifest::NodeSpec n;
    n.name = i < workers ? absl::StrCat("node-", i) : absl::StrCat("spare-", i - workers);
    n.spare = i >= workers;
    n.labels[vocab::kLabelHardware] = "h200";
    s.nodes.push_back(std::move(n));
  }
  for (int32_t i = 0; i < workers; ++i) {
    manifest::NodeSpec& n = s.nodes[static_cast<size_t>(i)];
    const double draw = unit(rng);
    double edge = mix.deterministic_fraction;
    manifest::Slowdown sd;
    sd.node = n.name;
    if (draw < edge) {
      n.labels[vocab::kLabelHardware] = "older-gpu";
      sd.kind = v1::DETERMINISTIC;
      sd.factor = mix.deterministic_factor;
      s.slowdowns.push_back(sd);
    } else if (draw < (edge += mix.transient_fraction)) {
      sd.kind = v1::TRANSIENT;
      sd.factor = between(mix.transient_factor_min, mix.transient_factor_max);
      sd.start_ms = static_cast<int64_t>(between(static_cast<double>(mix.transient_start_min_ms),
                                                 static_cast<double>(mix.transient_start_max_ms)));
      sd.duration_ms =
          static_cast<int64_t>(between(static_cast<double>(mix.transient_duration_min_ms),
                                       static_cast<double>(mix.transient_duration_max_ms)));
      s.slowdowns.push_back(sd);
    } else if (draw < (edge += mix.persistent_fraction)) {
      sd.kind = v1::PERSISTENT;
      sd.factor = between(mix.persistent_factor_min, mix.persistent_factor_max);
      sd.start_ms = static_cast<int64_t>(between(static_cast<double>(mix.persistent_start_min_ms),
                                                 static_cast<double>(mix.persistent_start_max_ms)));
      s.slowdowns.push_back(sd);
    } else if (draw < edge + mix.leader_fraction) {
      n.speed = mix.leader_speed;
    }
  }
  return s;
}

}  // namespace antdt::sim
