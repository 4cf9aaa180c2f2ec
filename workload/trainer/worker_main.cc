// antdt-trainer-worker: one worker of the demo trainer. Takes records from
// shards of the sharding service, forms local batches (a batch may span
// shards), computes the logistic-loss gradient on the synthetic examples of
// those records, sleeps the emulated device time, pushes the gradient slices
// to every parameter server in parallel and gets the new parameters, then
// commits the batch's records under the journal protocol of
// workload/demo/journal.h. Steps go to the node agent when --agent is given;
// an AdjustBatch directive changes the local batch size. With --eval-out, at
// the end of the data it pulls the final parameters and writes their held-out
// log-loss and accuracy there (the local runner gives it to worker-0 only).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "api/vocab/vocab.h"
#include "client/sharding_client.h"
#include "client/step_reporter.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/status.h"
#include "workload/demo/journal.h"
#include "workload/trainer/model.h"

namespace antdt {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kUsage = R"(usage: antdt-trainer-worker [flags]
  --sharding ADDRESS            the sharding service
  --job J --dataset D           the dataset to train on
  --namespace NS                the job's namespace, on the agent's series
                                [$ANTDT_NAMESPACE]
  --worker-id W                 this worker's name
  --incarnation I               higher after each restart              [0]
  --journal PATH                the journal of acknowledged commits
  --ps ADDR1,ADDR2,...          parameter servers; PS k owns the k-th
                                contiguous slice of the features
  --features N                  model size
  --agent ADDRESS               node agent to report steps to          [off]
  --local-batch B               records per step (AdjustBatch changes it) [32]
  --device-us-per-sample U      emulated device time per sample at speed 1 [0]
  --device-work sleep|cpu       spend the device time asleep, or computing
                                on this thread (that much thread CPU time, so
                                CPU contention and quotas stretch it) [sleep]
  --device-cpu-share S          with --device-work cpu: compute this share of
                                each micro-batch's device time and sleep the
                                rest, as a host feeds an accelerator (0, 1] [1]
  --speed-file PATH             the node's relative speed, re-read each step [1]
  --micro-batches N             train a step in N parts and, between two,
                                stop if the step's deadline has passed
                                (antdt-ps --step-deadline): the rest of
                                the batch goes into the next step     [1]
  --commit-every-steps K        commit the records every K steps       [1]
  --log-every-steps N           one log line per N steps               [50]
  --seed S                      the synthetic dataset                  [1]
  --eval-out PATH               at the end, the final model's held-out
                                log-loss and accuracy as JSON to PATH  [off]
  --eval-records N              the held-out set's size                [4096]
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "antdt-trainer-worker: %s\n", message.c_str());
  return 2;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A lease whose remaining records [acked, taken) went into batches and are not
// yet committed.
struct OpenLease {
  client::ShardLease lease;
  int64_t taken = 0;
  int64_t acked = 0;
  bool done = false;  // completed or lost
  bool exhausted() const { return taken == lease.remaining(); }
};

// One AcquireShard call that does not wait: a shard, or nullopt when none is
// free right now (or on any error: the caller then trains a short batch and
// comes back through the SDK's retrying Acquire; a lease whose answer was lost
// goes back to the queue when it expires).
std::optional<client::ShardLease> TryAcquire(v1::ShardingService::Stub& stub,
                                             const client::ShardingClientOptions& o,
                                             bool* end_of_data = nullptr) {
  v1::AcquireShardRequest req;
  req.mutable_dataset()->set_job(o.job);
  req.mutable_dataset()->set_name(o.dataset);
  req.set_worker_id(o.worker_id);
  req.set_incarnation(o.incarnation);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(o.call_timeout_ms));
  AddCredential(ctx, o.token);
  v1::AcquireShardResponse resp;
  const bool ok = stub.AcquireShard(&ctx, req, &resp).ok();
  if (end_of_data != nullptr) {
    *end_of_data = ok && resp.result() == v1::AcquireShardResponse::END_OF_DATA;
  }
  if (!ok || resp.result() != v1::AcquireShardResponse::SHARD) return std::nullopt;
  client::ShardLease lease;
  lease.shard = resp.shard();
  lease.token = resp.lease().token();
  lease.committed = resp.shard().committed();
  return lease;
}

// Commits what batches took from each open lease (CompleteShard once a lease
// is exhausted, else ReportProgress), journaling around each call exactly as
// antdt-demo-worker does; forgets the leases completed or lost.
absl::Status Commit(client::ShardingClient& client, demo::Journal& journal,
                    std::vector<OpenLease>& open, int64_t* committed) {
  for (OpenLease& o : open) {
    if (o.taken == o.acked && !o.exhausted()) continue;
    std::vector<int64_t> ids;
    for (int64_t j = o.acked; j < o.taken; ++j) ids.push_back(o.lease.RecordAt(j));
    const bool last = o.exhausted();
    const int64_t done = o.lease.shard.committed() + o.taken;
    journal.Pending(last ? 'C' : 'R', o.lease.token, done, o.lease.epoch(), ids);
    absl::Status s = last ? client.Complete(o.lease) : client.ReportProgress(o.lease, done);
    if (s.ok()) {
      journal.Acked(o.lease.token, done);
      *committed += o.taken - o.acked;
      o.acked = o.taken;
      o.done = last;
    } else if (s.code() == absl::StatusCode::kFailedPrecondition) {
      journal.Refused(o.lease.token, done);  // the lease is gone; its remainder went back
      o.done = true;
    } else {
      return s;
    }
  }
  open.erase(std::remove_if(open.begin(), open.end(), [](const OpenLease& o) { return o.done; }),
             open.end());
  return absl::OkStatus();
}

// Computes on this thread until it has used `us` microseconds of its own CPU
// time: the wall time that takes grows with CPU contention and quotas, as a
// real step's compute does.
void BurnThreadCpu(double us) {
  auto cpu_us = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
  };
  const double until = cpu_us() + us;
  volatile double x = 1;
  while (cpu_us() < until) {
    for (int i = 0; i < 2000; ++i) x = x * 1.0000001 + 1e-9;
  }
}

// The node's relative speed from a file holding one number; `fallback` when
// it is missing or not a number > 0 (the runner may be rewriting it).
double ReadSpeed(const std::string& path, double fallback) {
  std::ifstream in(path);
  double speed = 0;
  if (in >> speed && speed > 0) return speed;
  return fallback;
}

// The parameter servers, each owning a contiguous slice of the parameters.
// A server that moved answers FAILED_PRECONDITION naming its new address in
// the trailing metadata `antdt-moved-to`; the call goes there (and so does
// every later one). A MoveParameterServer directive does the same between
// steps (Redirect). A push the server did not take because its state was
// replaced since (a restore: a newer generation, another step) is pushed
// again at the step it answered.
class ParameterServers {
 public:
  // Every call carries the job's credential `token` (none when empty).
  ParameterServers(const std::vector<std::string>& addresses, int64_t features,
                   std::string worker_id, std::string token)
      : worker_id_(std::move(worker_id)),
        token_(std::move(token)),
        params_(static_cast<size_t>(features), 0.0f) {
    const int count = static_cast<int>(addresses.size());
    for (int k = 0; k < count; ++k) {
      Server& ps = servers_.emplace_back();
      ps.slice = trainer::PsSlice(features, k, count);
      Connect(ps, addresses[static_cast<size_t>(k)]);
    }
  }

  // Tells every server this worker is done, so steps stop waiting for it.
  void Leave() {
    for (Server& ps : servers_) {
      v1::LeaveRequest req;
      req.set_worker_id(worker_id_);
      v1::LeaveResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
      AddCredential(ctx, token_);
      (void)ps.stub->Leave(&ctx, req, &resp);
    }
  }

  absl::Status Pull() {
    for (Server& ps : servers_) {
      v1::PullRequest req;
      req.set_worker_id(worker_id_);
      v1::PullResponse resp;
      RETURN_IF_ERROR(FollowingMoves(
          ps, [&](grpc::ClientContext* ctx) { return ps.stub->Pull(ctx, req, &resp); }));
      RETURN_IF_ERROR(Take(ps, resp.step(), resp.parameters()));
      ps.generation = resp.generation();
    }
    return absl::OkStatus();
  }

  // Pushes each server its slice of `g` in parallel and takes the new
  // parameters; `latency` gets each server's round trip under "ps-K".
  absl::Status Push(const trainer::GradientSum& g, int64_t samples,
                    std::map<std::string, double>* latency) {
    std::vector<absl::Status> status(servers_.size());
    std::vector<double> seconds(servers_.size());
    std::vector<std::thread> threads;
    for (size_t k = 0; k < servers_.size(); ++k) {
      threads.emplace_back([&, k] {
        const auto t0 = Clock::now();
        status[k] = PushOne(servers_[k], g, samples, k == 0);
        seconds[k] = Seconds(Clock::now() - t0);
      });
    }
    for (std::thread& t : threads) t.join();
    for (size_t k = 0; k < servers_.size(); ++k) {
      RETURN_IF_ERROR(status[k]);
      (*latency)[vocab::MemberName(vocab::Role::kParameterServer, static_cast<int32_t>(k))] =
          seconds[k];
    }
    return absl::OkStatus();
  }

  // Sends the calls for server "ps-K" to `address` from now on.
  absl::Status Redirect(const std::string& ps_id, const std::string& address) {
    const std::optional<vocab::MemberId> id = vocab::ParseMemberId(ps_id);
    const int k = id && id->role == vocab::Role::kParameterServer ? id->index : -1;
    if (k < 0 || k >= static_cast<int>(servers_.size())) {
      return absl::InvalidArgumentError("ps_id: no parameter server " + ps_id);
    }
    if (servers_[static_cast<size_t>(k)].address != address) {
      Connect(servers_[static_cast<size_t>(k)], address);
    }
    return absl::OkStatus();
  }

  const std::vector<float>& params() const { return params_; }
  int64_t step() const { return servers_.front().step; }
  // Whether the step in progress is past its deadline (the first server's
  // StepDeadline); false when that cannot be told within a second.
  bool DeadlinePassed() {
    Server& ps = servers_.front();
    v1::StepDeadlineRequest req;
    req.set_worker_id(worker_id_);
    req.set_step(ps.step);
    v1::StepDeadlineResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    AddCredential(ctx, token_);
    return ps.stub->StepDeadline(&ctx, req, &resp).ok() && resp.passed();
  }
  double mean_loss() const { return mean_loss_; }  // PS 0's, of its last finished step
  // PS 0's PushGradientResponse.half_seconds: a step of this worker's that
  // has run this long asks whether its deadline has passed.
  double half_seconds() const { return half_seconds_; }

 private:
  struct Server {
    std::unique_ptr<v1::ParameterServer::Stub> stub;
    std::string address;
    trainer::Slice slice;
    int64_t step = 0;
    int64_t generation = 0;  // of the server's state, as last answered
  };

  void Connect(Server& ps, const std::string& address) {
    if (!ps.address.empty()) {
      LogEvent("ps_moved", {{"worker", worker_id_}, {"from", ps.address}, {"to", address}});
    }
    ps.address = address;
    // A server restored on its address is back within a second or two: the
    // SDK's channel for a service that restarts retries at least every second
    // (gRPC's default backoff grows to two minutes).
    ps.stub = v1::ParameterServer::NewStub(client::CreateShardingChannel(address));
  }

  absl::Status PushOne(Server& ps, const trainer::GradientSum& g, int64_t samples, bool first) {
    v1::PushGradientRequest req;
    req.set_worker_id(worker_id_);
    req.set_samples(samples);
    req.set_loss_sum(g.loss);
    req.mutable_gradient()->Add(g.gradient.begin() + ps.slice.begin,
                                g.gradient.begin() + ps.slice.begin + ps.slice.size);
    for (int attempt = 0;; ++attempt) {
      req.set_step(ps.step);
      v1::PushGradientResponse resp;
      RETURN_IF_ERROR(FollowingMoves(
          ps, [&](grpc::ClientContext* ctx) { return ps.stub->PushGradient(ctx, req, &resp); }));
      RETURN_IF_ERROR(Take(ps, resp.step(), resp.parameters()));
      const bool replaced = resp.generation() != ps.generation;
      ps.generation = resp.generation();
      if (first) {
        mean_loss_ = resp.mean_loss();
        half_seconds_ = resp.half_seconds();
      }
      if (resp.accepted() || !replaced || attempt >= 2) return absl::OkStatus();
      LogEvent("push_again", {{"worker", worker_id_}, {"ps", ps.address}, {"step", ps.step}});
    }
  }

  // Makes `call` on `ps`, following the server as it moves (8 moves at most).
  template <typename Call>
  absl::Status FollowingMoves(Server& ps, Call call) {
    for (int moves = 0;; ++moves) {
      std::string moved_to;
      absl::Status s = WithRetry([&](grpc::ClientContext* ctx) {
        AddCredential(*ctx, token_);
        grpc::Status st = call(ctx);
        if (st.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
          const auto& trailers = ctx->GetServerTrailingMetadata();
          if (auto it = trailers.find("antdt-moved-to"); it != trailers.end()) {
            moved_to.assign(it->second.data(), it->second.size());
          }
        }
        return st;
      });
      if (moved_to.empty() || moves >= 8) return s;
      Connect(ps, moved_to);
    }
  }

  absl::Status Take(Server& ps, int64_t step,
                    const google::protobuf::RepeatedField<float>& values) {
    if (values.size() != ps.slice.size) {
      return absl::FailedPreconditionError(
          absl::StrCat("a parameter server answered ", values.size(), " parameters, its slice has ",
                       ps.slice.size, " (check --features and the order of --ps)"));
    }
    std::copy(values.begin(), values.end(), params_.begin() + ps.slice.begin);
    ps.step = step;
    return absl::OkStatus();
  }

  // Retries a call the server may answer once it is back (a minute at most).
  template <typename Call>
  static absl::Status WithRetry(Call call) {
    const auto give_up = Clock::now() + std::chrono::minutes(1);
    int64_t backoff_ms = 50;
    for (;;) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      absl::Status s = FromGrpcStatus(call(&ctx));
      if (s.ok() || !client::IsRetryable(s) || Clock::now() > give_up) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
      backoff_ms = std::min<int64_t>(backoff_ms * 2, 2000);
    }
  }

  const std::string worker_id_;
  const std::string token_;
  std::vector<Server> servers_;
  std::vector<float> params_;  // slices are written by separate threads
  double mean_loss_ = 0;
  double half_seconds_ = 0;
};

struct WorkerConfig {
  std::string sharding, journal, speed_file, eval_out;
  client::ShardingClientOptions options;
  std::vector<std::string> ps_addresses;
  int64_t features = 0, batch = 32, commit_every = 1, log_every = 50, eval_records = 4096;
  int64_t micro_batches = 1;
  uint64_t seed = 1;
  double device_us = 0;
  bool device_cpu = false;      // --device-work cpu
  double device_cpu_share = 1;  // --device-cpu-share: the rest of the device time asleep
  std::optional<client::StepReporterOptions> reporter;
};

// The flags as a WorkerConfig; InvalidArgument naming the flag.
absl::StatusOr<WorkerConfig> ParseWorkerConfig(const ParsedFlags& flags) {
  auto bad = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  for (const char* required :
       {"sharding", "job", "dataset", "worker-id", "journal", "ps", "features"}) {
    if (!flags.Has(required)) return bad(std::string("--") + required + ": required");
  }
  WorkerConfig c;
  int64_t incarnation = 0;
  if (!absl::SimpleAtoi(flags.Get("incarnation", "0"), &incarnation) || incarnation < 0) {
    return bad("--incarnation: must be an integer >= 0");
  }
  c.ps_addresses = absl::StrSplit(flags.Get("ps"), ',', absl::SkipEmpty());
  if (c.ps_addresses.empty()) return bad("--ps: must list at least one address");
  if (!absl::SimpleAtoi(flags.Get("features"), &c.features) ||
      c.features < static_cast<int64_t>(c.ps_addresses.size())) {
    return bad("--features: must be an integer >= the number of parameter servers");
  }
  if (!absl::SimpleAtoi(flags.Get("local-batch", "32"), &c.batch) || c.batch <= 0) {
    return bad("--local-batch: must be an integer > 0");
  }
  if (!absl::SimpleAtod(flags.Get("device-us-per-sample", "0"), &c.device_us) || c.device_us < 0) {
    return bad("--device-us-per-sample: must be a number >= 0");
  }
  const std::string work = flags.Get("device-work", "sleep");
  if (work != "sleep" && work != "cpu") {
    return bad("--device-work: must be sleep or cpu, got \"" + work + "\"");
  }
  c.device_cpu = work == "cpu";
  if (flags.Has("device-cpu-share")) {
    if (!c.device_cpu) return bad("--device-cpu-share: needs --device-work cpu");
    if (!absl::SimpleAtod(flags.Get("device-cpu-share"), &c.device_cpu_share) ||
        !(c.device_cpu_share > 0 && c.device_cpu_share <= 1)) {
      return bad("--device-cpu-share: must be a number in (0, 1]");
    }
  }
  if (!absl::SimpleAtoi(flags.Get("micro-batches", "1"), &c.micro_batches) ||
      c.micro_batches <= 0 || c.micro_batches > 1024) {
    return bad("--micro-batches: must be an integer in [1, 1024]");
  }
  if (!absl::SimpleAtoi(flags.Get("commit-every-steps", "1"), &c.commit_every) ||
      c.commit_every <= 0) {
    return bad("--commit-every-steps: must be an integer > 0");
  }
  if (!absl::SimpleAtoi(flags.Get("log-every-steps", "50"), &c.log_every) || c.log_every <= 0) {
    return bad("--log-every-steps: must be an integer > 0");
  }
  if (!absl::SimpleAtoi(flags.Get("seed", "1"), &c.seed)) return bad("--seed: must be an integer");
  if (!absl::SimpleAtoi(flags.Get("eval-records", "4096"), &c.eval_records) ||
      c.eval_records <= 0) {
    return bad("--eval-records: must be an integer > 0");
  }
  c.eval_out = flags.Get("eval-out");
  c.speed_file = flags.Get("speed-file");
  c.sharding = flags.Get("sharding");
  c.journal = flags.Get("journal");
  c.options.job = flags.Get("job");
  c.options.dataset = flags.Get("dataset");
  c.options.worker_id = flags.Get("worker-id");
  c.options.incarnation = incarnation;
  c.options.retry_budget_ms = 120'000;
  // Each step's records are committed before the next step takes any, and
  // every take reads the lease's remaining() afresh: a slow worker's lease may
  // end early near an epoch's end (the guided layout).
  c.options.follow_shorter_leases = true;
  if (flags.Has("agent")) {
    client::StepReporterOptions o;
    o.agent_address = flags.Get("agent");
    o.job = c.options.job;
    const char* env_namespace = std::getenv("ANTDT_NAMESPACE");
    o.namespace_ = flags.Get("namespace", env_namespace != nullptr ? env_namespace : "");
    o.worker_id = c.options.worker_id;
    if (flags.Has("report-interval")) {
      ASSIGN_OR_RETURN(o.flush_interval_ms,
                       ParseDurationMs(flags.Get("report-interval"), "--report-interval"));
    }
    c.reporter = o;
  }
  return c;
}

// The worker's steps until the end of the data: gather a batch (from one or
// more leases), train it, push it, commit, report, apply directives.
class TrainingLoop {
 public:
  TrainingLoop(WorkerConfig& config, client::ShardingClient& sharding,
               v1::ShardingService::Stub& stub, demo::Journal& journal, ParameterServers& ps,
               client::StepReporter* reporter)
      : c_(config),
        sharding_(sharding),
        stub_(stub),
        journal_(journal),
        ps_(ps),
        reporter_(reporter) {}

  absl::Status Run() {
    for (;;) {
      const auto t0 = Clock::now();
      const double wait0 = client::ThreadCpuWaitSeconds();
      std::vector<int64_t> records;
      bool end = false, idle = false;
      RETURN_IF_ERROR(Gather(&records, &end, &idle));
      if (records.empty() && !idle) return absl::OkStatus();  // the end, everything committed
      if (records.empty()) {
        RETURN_IF_ERROR(PushNothing());
      } else {
        RETURN_IF_ERROR(Train(records, t0, wait0));
      }
    }
  }

  int64_t steps() const { return steps_; }
  int64_t samples() const { return samples_total_; }
  int64_t committed() const { return committed_; }
  int64_t steps_cut() const { return steps_cut_; }

 private:
  absl::Status Commit() {
    absl::Status s = antdt::Commit(sharding_, journal_, open_, &committed_);
    return s.ok() ? s : absl::Status(s.code(), "commit: " + std::string(s.message()));
  }

  // Fills `records` up to the local batch. With nothing taken yet and no shard
  // free: *idle (every shard left is leased: this worker joins the step with
  // no samples instead of holding up the barrier) or *end (the end of the data).
  absl::Status Gather(std::vector<int64_t>* records, bool* end, bool* idle) {
    while (static_cast<int64_t>(records->size()) < c_.batch) {
      // The first lease with records left: a step cut at its deadline gave
      // some back (GiveBack), perhaps to a lease before the last.
      auto left = std::find_if(open_.begin(), open_.end(),
                               [](const OpenLease& o) { return !o.exhausted(); });
      if (left == open_.end()) {
        std::optional<client::ShardLease> next;
        if (records->empty()) {
          // Commit first, so that our own unfinished leases never keep the
          // dataset from ending; then one call that does not wait.
          RETURN_IF_ERROR(Commit());
          next = TryAcquire(stub_, sharding_.options(), end);
          if (*end) return absl::OkStatus();
          if (!next) {
            *idle = true;
            return absl::OkStatus();
          }
        } else {
          next = TryAcquire(stub_, sharding_.options());
          if (!next) return absl::OkStatus();  // nothing free now: a short batch
        }
        open_.push_back({std::move(*next)});
        continue;
      }
      OpenLease& o = *left;
      const int64_t n =
          std::min(c_.batch - static_cast<int64_t>(records->size()), o.lease.remaining() - o.taken);
      for (int64_t i = 0; i < n; ++i) records->push_back(o.lease.RecordAt(o.taken + i));
      o.taken += n;
    }
    return absl::OkStatus();
  }

  // Nothing to do right now: an empty contribution keeps the step going.
  absl::Status PushNothing() {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::map<std::string, double> latency;
    trainer::GradientSum empty;
    empty.gradient.assign(static_cast<size_t>(c_.features), 0.0f);
    absl::Status s = ps_.Push(empty, 0, &latency);
    return s.ok() ? s : absl::Status(s.code(), "push: " + std::string(s.message()));
  }

  // The step's device time, micro-batch by micro-batch; between two, it stops
  // once the step's deadline has passed. Returns the samples trained (the
  // first micro-batch at least).
  int64_t RunDevice(int64_t batch, Clock::time_point t0) {
    if (!c_.speed_file.empty()) speed_ = ReadSpeed(c_.speed_file, speed_);
    // Asked only once this step has run as long as the first half of the last
    // step's gradients took (unknown before a step has finished): a worker on
    // time never asks.
    const double half = ps_.half_seconds();
    auto late = [&] { return half > 0 && Seconds(Clock::now() - t0) >= half; };
    const int64_t parts = std::min(c_.micro_batches, batch);
    int64_t done = 0;
    for (int64_t k = 1; k <= parts; ++k) {
      const int64_t upto = batch * k / parts;
      const double device_us = c_.device_us * static_cast<double>(upto - done) / speed_;
      const double cpu_us = c_.device_cpu ? device_us * c_.device_cpu_share : 0;
      if (cpu_us > 0) BurnThreadCpu(cpu_us);
      if (device_us > cpu_us) {
        std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(device_us - cpu_us));
      }
      done = upto;
      if (done < batch && late() && ps_.DeadlinePassed()) break;
    }
    return done;
  }

  // The last `n` records taken go back to their leases, untrained: the next
  // step takes them first.
  void GiveBack(int64_t n) {
    for (auto it = open_.rbegin(); it != open_.rend() && n > 0; ++it) {
      const int64_t m = std::min(n, it->taken - it->acked);
      it->taken -= m;
      n -= m;
    }
  }

  absl::Status Train(std::vector<int64_t> records, Clock::time_point t0, double wait0) {
    const auto t_data = Clock::now();
    const auto batch = static_cast<int64_t>(records.size());
    const int64_t trained = RunDevice(batch, t0);
    if (trained < batch) {
      GiveBack(batch - trained);
      records.resize(static_cast<size_t>(trained));
      ++steps_cut_;
      LogEvent("step_cut", {{"worker", c_.options.worker_id},
                            {"step", ps_.step()},
                            {"trained", trained},
                            {"batch", batch}});
    }
    std::vector<trainer::Example> examples;
    examples.reserve(records.size());
    for (int64_t id : records) {
      examples.push_back(trainer::SyntheticExample(id, c_.features, c_.seed));
    }
    const trainer::GradientSum g = trainer::Gradient(ps_.params(), examples);
    const auto t_compute = Clock::now();

    client::StepTiming timing;
    timing.step = ps_.step();
    if (trained < batch) timing.batch_samples = batch;
    const auto samples = static_cast<int64_t>(records.size());
    if (absl::Status s = ps_.Push(g, samples, &timing.ps_latency_seconds); !s.ok()) {
      return absl::Status(s.code(), "push: " + std::string(s.message()));
    }
    const auto t_push = Clock::now();
    ++steps_;
    samples_total_ += samples;
    if (steps_ % c_.commit_every == 0) RETURN_IF_ERROR(Commit());
    const auto t_end = Clock::now();

    timing.samples = samples;
    // The worker's own time for the step: data, compute and commit, not the
    // wait at the parameter servers' barrier, which in synchronous training is
    // every worker's wait for the slowest and would make everyone look alike.
    timing.bpt_seconds = Seconds(t_compute - t0) + Seconds(t_end - t_push);
    // Time on the data service: taking records and committing them.
    timing.data_wait_seconds = Seconds(t_data - t0) + Seconds(t_end - t_push);
    timing.cpu_wait_seconds = std::max(0.0, client::ThreadCpuWaitSeconds() - wait0);
    timing.compute_seconds = Seconds(t_compute - t_data);
    timing.communication_seconds = Seconds(t_push - t_compute);
    ReportAndApplyDirective(timing);
    if (steps_ % c_.log_every == 0) {
      LogEvent("step", {{"worker", c_.options.worker_id},
                        {"step", ps_.step()},
                        {"mean_loss", ps_.mean_loss()},
                        {"batch_loss", g.loss / static_cast<double>(samples)},
                        {"samples", samples},
                        {"speed", speed_},
                        {"bpt_seconds", timing.bpt_seconds},
                        {"communication_seconds", timing.communication_seconds}});
    }
    return absl::OkStatus();
  }

  void ReportAndApplyDirective(const client::StepTiming& timing) {
    if (reporter_ == nullptr) return;
    (void)reporter_->Report(timing);  // a failure is counted by the reporter, never fatal
    std::optional<v1::Directive> d = reporter_->TakeDirective();
    if (d && d->has_move_parameter_server()) {
      const v1::MoveParameterServer& m = d->move_parameter_server();
      absl::Status s = ps_.Redirect(m.ps_id(), m.address());
      LogEvent("directive_applied", {{"worker", c_.options.worker_id},
                                     {"version", d->version()},
                                     {"ps", m.ps_id()},
                                     {"address", m.address()},
                                     {"error", std::string(s.message())},
                                     {"reason", d->reason()}});
    } else if (d && d->has_adjust_batch() && d->adjust_batch().local_batch_size() > 0) {
      c_.batch = d->adjust_batch().local_batch_size();
      LogEvent("directive_applied", {{"worker", c_.options.worker_id},
                                     {"version", d->version()},
                                     {"local_batch", c_.batch},
                                     {"reason", d->reason()}});
    }
  }

  WorkerConfig& c_;
  client::ShardingClient& sharding_;
  v1::ShardingService::Stub& stub_;
  demo::Journal& journal_;
  ParameterServers& ps_;
  client::StepReporter* const reporter_;
  std::vector<OpenLease> open_;
  int64_t committed_ = 0, steps_ = 0, samples_total_ = 0, steps_cut_ = 0;
  double speed_ = 1;
};

// The end of the data: every shard is committed, and a worker commits a batch
// only once the step that took its gradient has completed, so no gradient is
// left to apply and the parameters the servers hold now are the final model.
// Pulls them and writes their held-out evaluation to c.eval_out.
absl::Status WriteHeldOut(ParameterServers& ps, const WorkerConfig& c) {
  RETURN_IF_ERROR(ps.Pull());
  const trainer::Evaluation e =
      trainer::Evaluate(ps.params(), trainer::HeldOutExamples(c.eval_records, c.features, c.seed));
  RETURN_IF_ERROR(WriteFileAtomically(
      c.eval_out, absl::StrFormat("{\"log_loss\": %.6f, \"accuracy\": %.6f, \"records\": %d, "
                                  "\"step\": %d}\n",
                                  e.log_loss, e.accuracy, e.records, ps.step())));
  LogEvent("held_out", {{"worker", c.options.worker_id},
                        {"step", ps.step()},
                        {"log_loss", e.log_loss},
                        {"accuracy", e.accuracy},
                        {"records", e.records}});
  return absl::OkStatus();
}

}  // namespace
}  // namespace antdt

int main(int argc, char** argv) {
  using namespace antdt;
  int exit_code = 0;
  const std::optional<ParsedFlags> flags =
      ParseCommandLine(argc, argv, "antdt-trainer-worker", kUsage,
                       {"sharding",
                        "job",
                        "dataset",
                        "worker-id",
                        "incarnation",
                        "journal",
                        "ps",
                        "features",
                        "agent",
                        "local-batch",
                        "device-us-per-sample",
                        "device-work",
                        "device-cpu-share",
                        "speed-file",
                        "commit-every-steps",
                        "micro-batches",
                        "log-every-steps",
                        "seed",
                        "report-interval",
                        "eval-out",
                        "eval-records",
                        "namespace"},
                       &exit_code);
  if (!flags) return exit_code;
  absl::StatusOr<WorkerConfig> config = ParseWorkerConfig(*flags);
  if (!config.ok()) return Fail(std::string(config.status().message()));
  const client::ShardingClientOptions& options = config->options;
  auto channel = client::CreateShardingChannel(config->sharding);
  client::ShardingClient sharding(channel, options);
  auto sharding_stub = v1::ShardingService::NewStub(channel);
  std::optional<client::StepReporter> reporter;
  if (config->reporter) reporter.emplace(*config->reporter);

  auto journal = demo::Journal::OpenAndResolve(config->journal, sharding);
  if (!journal.ok()) return Fail(std::string(journal.status().message()));
  // The job's credential as the sharding client found it (flag or environment).
  ParameterServers ps(config->ps_addresses, config->features, options.worker_id,
                      sharding.options().token);
  if (auto s = ps.Pull(); !s.ok()) return Fail("pull: " + std::string(s.message()));
  LogEvent("worker_started", {{"worker", options.worker_id},
                              {"incarnation", options.incarnation},
                              {"step", ps.step()},
                              {"local_batch", config->batch}});

  TrainingLoop loop(*config, sharding, *sharding_stub, *journal, ps,
                    reporter ? &*reporter : nullptr);
  if (absl::Status s = loop.Run(); !s.ok()) return Fail(std::string(s.message()));
  ps.Leave();
  if (!config->eval_out.empty()) {
    if (absl::Status s = WriteHeldOut(ps, *config); !s.ok()) {
      return Fail("held-out evaluation: " + std::string(s.message()));
    }
  }
  LogEvent("worker_done", {{"worker", options.worker_id},
                           {"incarnation", options.incarnation},
                           {"steps", loop.steps()},
                           {"samples", loop.samples()},
                           {"records_committed", loop.committed()},
                           {"steps_cut", loop.steps_cut()},
                           {"step", ps.step()},
                           {"mean_loss", ps.mean_loss()}});
  return 0;
}
