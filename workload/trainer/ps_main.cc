// antdt-ps: the demo trainer's synchronous parameter server, holding one
// slice of a logistic-regression model (see ps.h for the step semantics).
//
// Checkpoints (--checkpoint-dir): every --checkpoint-every-steps steps, and at
// the step a ScheduleCheckpoint call names, the server writes its state under
// the directory (ps_checkpoint.h); the one given --sharding first records the
// sharding service's Checkpoint of the same step, so that model and data
// position restore together. Moving: a server started with --take-over ADDR
// asks the server there for its state at a step boundary (Handoff), and the
// old one sends every later push here; --restore-step N starts from this
// server's checkpoint of step N instead. RestoreCheckpoint puts a running
// server back to one of its checkpoints (a job-wide restore).
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/sharding.grpc.pb.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "client/step_reporter.h"
#include "common/config.h"
#include "common/credential.h"
#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "common/status.h"
#include "common/tls.h"
#include "workload/trainer/ps.h"
#include "workload/trainer/ps_checkpoint.h"

namespace {

constexpr const char* kUsage = R"(usage: antdt-ps --features N --workers N [flags]
  --listen HOST:PORT          gRPC address (port 0 picks one)       [127.0.0.1:0]
  --ready-file PATH           written with the bound address once serving
  --id NAME                   this server's name in logs            [ps-0]
  --features N                the size of the slice it owns
  --workers N                 world size
  --backup B                  a step completes with the first N-B gradients [0]
  --learning-rate R           SGD step size                          [0.5]
  --step-timeout DURATION     a step completes with what it has this long
                              after its first gradient               [5s]
  --step-deadline X           a worker still training at X times the time half
                              the step's gradients took pushes what it has
                              (0: no deadline; else in (1, 10])      [0]
  --step-deadline-floor F     fit the deadline to the steps: between F and
                              --step-deadline by how evenly the gradients
                              arrive (0: --step-deadline always)     [0]
  --emulated-us-per-step N    extra server time per step at speed 1 (slow-PS
                              scenario)             [$ANTDT_SERVER_US_PER_STEP or 0]
  --speed-file PATH           the node's relative speed, re-read at most every
                              200 ms; the emulated time is divided by it
                                                    [$ANTDT_NODE_SPEED_FILE or 1]
  --log-every-steps N         one log line per N steps               [50]
  --checkpoint-dir DIR        where checkpoints go                   [off]
  --checkpoint-every-steps N  a checkpoint every N steps (0: only on demand) [0]
  --keep-checkpoints N        checkpoints kept                       [3]
  --sharding ADDRESS          record the sharding service's Checkpoint of each
                              checkpoint's step first (one server of a job)
  --job J --dataset D         the dataset whose position is checkpointed
  --token-file PATH           the job's credential: every call must carry it,
                              and the server sends it (to the sharding
                              service, the server taken over)
                                                     [$ANTDT_TOKEN(_FILE)]
  --take-over HOST:PORT       start from the state of the server there,
                              taken at a step boundary; it then sends its
                              pushes here. When it cannot: --restore-step's
                              checkpoint if given, else exit 1
  --restore-step N|latest     start from this server's checkpoint of step N,
                              or its newest one (latest: none is a fresh start,
                              for a container restarted in place)
  --advertise HOST:PORT       the address workers reach this server at (given
                              to the server taken over)       [the bound one]
  --agent ADDRESS             the node agent to report each step's server time
                              to (role ps; needs --job)              [off]
  --namespace NS              the job's namespace, on those reports
                                                        [$ANTDT_NAMESPACE]
)";

constexpr char kMovedToMetadata[] = "antdt-moved-to";

int Fail(const std::string& message) {
  std::fprintf(stderr, "antdt-ps: %s\n", message.c_str());
  return 2;
}

// The node's relative speed from a file holding one number, re-read at most
// every 200 ms; 1 without a file, the last good value while it is rewritten.
class NodeSpeed {
 public:
  explicit NodeSpeed(std::string path) : path_(std::move(path)) {}
  double Get() {
    if (path_.empty()) return 1;
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    std::lock_guard<std::mutex> lock(mu_);
    if (now - read_at_ms_ >= 200) {
      read_at_ms_ = now;
      std::ifstream in(path_);
      double v = 0;
      if (in >> v && v > 0) speed_ = v;
    }
    return speed_;
  }

 private:
  const std::string path_;
  std::mutex mu_;
  int64_t read_at_ms_ = -1'000'000;
  double speed_ = 1;
};

// The server's own time for each step (the completing push: aggregation and
// the emulated server time) to its node's agent, as a step report of role
// "ps": the Monitor scores a server by it directly, not only through the
// workers' round trips, which also hold their wait for the slowest worker.
class ServerSteps {
 public:
  explicit ServerSteps(std::optional<antdt::client::StepReporterOptions> options) {
    if (options) reporter_.emplace(*options);
  }
  void Report(int64_t step, double seconds) {
    if (!reporter_) return;
    antdt::client::StepTiming t;
    t.step = step;
    t.bpt_seconds = seconds;
    t.compute_seconds = seconds;
    std::lock_guard<std::mutex> lock(mu_);
    (void)reporter_->Report(t);  // a failure is counted by the reporter, never fatal
  }
  // Sends what is buffered (at the end).
  void Flush() {
    if (!reporter_) return;
    std::lock_guard<std::mutex> lock(mu_);
    (void)reporter_->Flush();
  }

 private:
  std::mutex mu_;
  std::optional<antdt::client::StepReporter> reporter_;
};

// A pushed or pulled call to a server that moved: FAILED_PRECONDITION with
// the new address in the trailing metadata, for the worker to follow.
grpc::Status Moved(grpc::ServerContext* ctx, const std::string& to) {
  ctx->AddTrailingMetadata(kMovedToMetadata, to);
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "moved: this server is now at " + to);
}

// Writes checkpoints: the sharding service's first (when given), then this
// server's file.
class CheckpointWriter {
 public:
  struct Options {
    std::string dir, id, sharding, job, dataset, token;
    int keep = 3;
  };
  explicit CheckpointWriter(Options o) : o_(std::move(o)) {
    if (!o_.sharding.empty()) {
      sharding_ = antdt::v1::ShardingService::NewStub(antdt::CreateChannel(o_.sharding));
    }
  }

  void Write(const antdt::trainer::PsState& state) {
    const auto t0 = std::chrono::steady_clock::now();
    int64_t records = -1;
    if (sharding_) {
      antdt::v1::CheckpointRequest req;
      req.mutable_dataset()->set_job(o_.job);
      req.mutable_dataset()->set_name(o_.dataset);
      req.set_step(state.step);
      antdt::v1::CheckpointResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      antdt::AddCredential(ctx, o_.token);
      const grpc::Status s = sharding_->Checkpoint(&ctx, req, &resp);
      if (!s.ok()) {  // no file either: a checkpoint is both or neither
        antdt::LogEvent(
            "checkpoint_failed",
            {{"ps", o_.id}, {"step", state.step}, {"error", "sharding: " + s.error_message()}});
        return;
      }
      records = resp.records_committed();
    }
    if (absl::Status s = antdt::trainer::WriteCheckpoint(o_.dir, o_.id, state, o_.keep); !s.ok()) {
      antdt::LogEvent("checkpoint_failed",
                      {{"ps", o_.id}, {"step", state.step}, {"error", std::string(s.message())}});
      return;
    }
    antdt::LogEvent(
        "checkpoint",
        {{"ps", o_.id},
         {"step", state.step},
         {"records_committed", records},
         {"ms", std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                    .count()}});
  }

 private:
  const Options o_;
  std::unique_ptr<antdt::v1::ShardingService::Stub> sharding_;
};

class ParameterServerImpl final : public antdt::v1::ParameterServer::Service {
 public:
  ParameterServerImpl(antdt::trainer::ParameterShard& shard, std::string id, int64_t emulated_us,
                      int64_t log_every, NodeSpeed& speed, std::string checkpoint_dir,
                      const std::string& token, ServerSteps& steps)
      : steps_(steps),
        check_(token),
        shard_(shard),
        id_(std::move(id)),
        emulated_us_(emulated_us),
        log_every_(log_every),
        speed_(speed),
        checkpoint_dir_(std::move(checkpoint_dir)) {}

  grpc::Status PushGradient(grpc::ServerContext* ctx, const antdt::v1::PushGradientRequest* req,
                            antdt::v1::PushGradientResponse* resp) override {
    const auto t0 = std::chrono::steady_clock::now();
    if (grpc::Status refused = Refused(ctx, "PushGradient"); !refused.ok()) return refused;
    auto r = shard_.Push(req->worker_id(), req->step(), req->samples(),
                         absl::MakeConstSpan(req->gradient().data(), req->gradient().size()),
                         req->loss_sum());
    if (!r.ok()) return antdt::ToGrpcStatus(r.status());
    if (!r->moved_to.empty()) return Moved(ctx, r->moved_to);
    if (r->completed && (r->step == 1 || r->step % log_every_ == 0)) {
      const antdt::trainer::PsStats s = shard_.Stats();
      antdt::LogEvent("step", {{"ps", id_},
                               {"step", r->step},
                               {"mean_loss", r->mean_loss},
                               {"contributions", r->contributions},
                               {"samples", s.samples},
                               {"dropped", s.dropped},
                               {"deadline_factor", s.deadline_factor},
                               {"deadlines_passed", s.deadlines_passed}});
    }
    // Every answer of a step waits the emulated time, in parallel: the step
    // takes that much longer on the server.
    if (emulated_us_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(
          static_cast<double>(emulated_us_) / speed_.Get()));
    }
    if (r->completed) {
      steps_.Report(r->step - 1,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    resp->set_step(r->step);
    resp->mutable_parameters()->Add(r->parameters.begin(), r->parameters.end());
    resp->set_mean_loss(r->mean_loss);
    resp->set_contributions(r->contributions);
    resp->set_accepted(r->accepted);
    resp->set_generation(r->generation);
    resp->set_half_seconds(r->half_seconds);
    return grpc::Status::OK;
  }

  grpc::Status Pull(grpc::ServerContext* ctx, const antdt::v1::PullRequest*,
                    antdt::v1::PullResponse* resp) override {
    if (grpc::Status refused = Refused(ctx, "Pull"); !refused.ok()) return refused;
    const antdt::trainer::PushResult r = shard_.Pull();
    if (!r.moved_to.empty()) return Moved(ctx, r.moved_to);
    resp->set_step(r.step);
    resp->set_generation(r.generation);
    resp->mutable_parameters()->Add(r.parameters.begin(), r.parameters.end());
    return grpc::Status::OK;
  }

  grpc::Status StepDeadline(grpc::ServerContext* ctx, const antdt::v1::StepDeadlineRequest* req,
                            antdt::v1::StepDeadlineResponse* resp) override {
    if (grpc::Status refused = Refused(ctx, "StepDeadline"); !refused.ok()) return refused;
    resp->set_passed(shard_.DeadlinePassed(req->step()));
    return grpc::Status::OK;
  }

  grpc::Status Leave(grpc::ServerContext* ctx, const antdt::v1::LeaveRequest* req,
                     antdt::v1::LeaveResponse* resp) override {
    if (grpc::Status refused = Refused(ctx, "Leave"); !refused.ok()) return refused;
    if (req->worker_id().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: must not be empty");
    }
    resp->set_members(shard_.Leave(req->worker_id()));
    return grpc::Status::OK;
  }

  grpc::Status Resize(grpc::ServerContext* ctx, const antdt::v1::ResizeRequest* req,
                      antdt::v1::ResizeResponse* resp) override {
    if (grpc::Status refused = Refused(ctx, "Resize"); !refused.ok()) return refused;
    for (const auto* ids : {&req->removed(), &req->added()}) {
      for (const std::string& w : *ids) {
        if (w.empty() || w.size() > 253) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                              "removed, added: worker ids must have 1 to 253 characters");
        }
      }
    }
    const std::vector<std::string> removed(req->removed().begin(), req->removed().end());
    const std::vector<std::string> added(req->added().begin(), req->added().end());
    absl::StatusOr<int> members = shard_.Resize(req->workers(), removed, added);
    if (!members.ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          std::string(members.status().message()));
    }
    antdt::LogEvent("resized", {{"ps", id_},
                                {"workers", req->workers()},
                                {"removed", absl::StrJoin(removed, ",")},
                                {"added", absl::StrJoin(added, ",")},
                                {"members", *members}});
    resp->set_members(*members);
    return grpc::Status::OK;
  }

  grpc::Status Stats(grpc::ServerContext* ctx, const antdt::v1::StatsRequest*,
                     antdt::v1::ParameterServerStats* resp) override {
    if (grpc::Status refused = Refused(ctx, "Stats"); !refused.ok()) return refused;
    const antdt::trainer::PsStats s = shard_.Stats();
    resp->set_step(s.step);
    resp->set_mean_loss(s.mean_loss);
    resp->set_samples(s.samples);
    resp->set_first_mean_loss(s.first_mean_loss);
    resp->set_dropped_gradients(s.dropped);
    resp->set_generation(s.generation);
    resp->set_loaded_step(s.loaded_step);
    resp->set_deadlines_passed(s.deadlines_passed);
    resp->set_deadline_factor(s.deadline_factor);
    return grpc::Status::OK;
  }

  grpc::Status Handoff(grpc::ServerContext* ctx, const antdt::v1::HandoffRequest* req,
                       antdt::v1::ParameterServerState* resp) override {
    if (grpc::Status refused = Refused(ctx, "Handoff"); !refused.ok()) return refused;
    if (!antdt::ValidateHostPort(req->moved_to(), "moved_to").ok()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "moved_to: must be HOST:PORT");
    }
    if (req->timeout_ms() <= 0 || req->timeout_ms() > 600'000) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "timeout_ms: must be in (0, 600000]");
    }
    absl::StatusOr<antdt::trainer::PsState> state =
        shard_.Freeze(req->moved_to(), std::chrono::milliseconds(req->timeout_ms()));
    if (!state.ok()) return antdt::ToGrpcStatus(state.status());
    *resp = antdt::trainer::ToProto(*state, id_);
    antdt::LogEvent("handed_off", {{"ps", id_}, {"step", state->step}, {"to", req->moved_to()}});
    return grpc::Status::OK;
  }

  grpc::Status ScheduleCheckpoint(grpc::ServerContext* ctx,
                                  const antdt::v1::ScheduleCheckpointRequest* req,
                                  antdt::v1::ScheduleCheckpointResponse* resp) override {
    if (grpc::Status refused = Refused(ctx, "ScheduleCheckpoint"); !refused.ok()) return refused;
    if (checkpoint_dir_.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this server has no --checkpoint-dir");
    }
    if (req->step() < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "step: must be >= 0");
    }
    resp->set_step(shard_.ScheduleCheckpoint(req->step()));
    return grpc::Status::OK;
  }

  grpc::Status RestoreCheckpoint(grpc::ServerContext* ctx,
                                 const antdt::v1::RestoreCheckpointRequest* req,
                                 antdt::v1::ParameterServerState* resp) override {
    if (grpc::Status refused = Refused(ctx, "RestoreCheckpoint"); !refused.ok()) return refused;
    if (checkpoint_dir_.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this server has no --checkpoint-dir");
    }
    absl::StatusOr<antdt::trainer::PsState> state =
        antdt::trainer::ReadCheckpoint(checkpoint_dir_, id_, req->step());
    if (!state.ok()) return antdt::ToGrpcStatus(state.status());
    if (absl::Status s = shard_.Load(*state); !s.ok()) return antdt::ToGrpcStatus(s);
    *resp = antdt::trainer::ToProto(*state, id_);
    antdt::LogEvent("restored", {{"ps", id_}, {"step", state->step}, {"from", "checkpoint"}});
    return grpc::Status::OK;
  }

 private:
  // The job's credential on every call (none without a token); a refusal is
  // logged with the method, never the token.
  grpc::Status Refused(const grpc::ServerContext* ctx, const char* method) const {
    grpc::Status s = check_.Check(*ctx);
    if (!s.ok()) {
      antdt::LogEvent("auth_refused", {{"ps", id_},
                                       {"method", method},
                                       {"code", static_cast<int>(s.error_code())},
                                       {"peer", ctx->peer()}});
    }
    return s;
  }

  ServerSteps& steps_;
  const antdt::TokenCheck check_;
  antdt::trainer::ParameterShard& shard_;
  const std::string id_;
  const int64_t emulated_us_;
  const int64_t log_every_;
  NodeSpeed& speed_;
  const std::string checkpoint_dir_;
};

// The state of the server at `from`, taken at its next step boundary; it
// sends its later pushes to `self`.
absl::StatusOr<antdt::trainer::PsState> TakeOver(const std::string& from, const std::string& self,
                                                 const std::string& token) {
  auto stub = antdt::v1::ParameterServer::NewStub(antdt::CreateChannel(from));
  antdt::v1::HandoffRequest req;
  req.set_moved_to(self);
  req.set_timeout_ms(60'000);
  antdt::v1::ParameterServerState resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(75));
  antdt::AddCredential(ctx, token);
  const grpc::Status s = stub->Handoff(&ctx, req, &resp);
  if (!s.ok()) return antdt::FromGrpcStatus(s);
  return antdt::trainer::FromProto(resp);
}

absl::StatusOr<CheckpointWriter::Options> CheckpointOptions(const antdt::ParsedFlags& flags,
                                                            const std::string& id) {
  CheckpointWriter::Options o;
  o.dir = flags.Get("checkpoint-dir");
  o.id = id;
  int64_t keep = 3;
  if (!absl::SimpleAtoi(flags.Get("keep-checkpoints", "3"), &keep) || keep < 1 || keep > 1000) {
    return absl::InvalidArgumentError("--keep-checkpoints: must be an integer in [1, 1000]");
  }
  o.keep = static_cast<int>(keep);
  if (flags.Has("token-file")) {
    ASSIGN_OR_RETURN(o.token, antdt::ReadTokenFile(flags.Get("token-file"), "--token-file"));
  } else {
    ASSIGN_OR_RETURN(o.token, antdt::TokenFromEnvironment());
  }
  o.sharding = flags.Get("sharding");
  if (o.sharding.empty()) return o;
  if (o.dir.empty()) return absl::InvalidArgumentError("--sharding: needs --checkpoint-dir");
  o.job = flags.Get("job");
  o.dataset = flags.Get("dataset");
  if (o.job.empty() || o.dataset.empty()) {
    return absl::InvalidArgumentError("--job, --dataset: required with --sharding");
  }
  return o;
}

// --agent: where and as what the server reports its steps; none without it.
std::optional<antdt::client::StepReporterOptions> ReporterOptions(const antdt::ParsedFlags& flags,
                                                                  const std::string& id,
                                                                  const std::string& token) {
  if (!flags.Has("agent")) return std::nullopt;
  antdt::client::StepReporterOptions o;
  o.agent_address = flags.Get("agent");
  o.job = flags.Get("job");
  const char* ns = std::getenv("ANTDT_NAMESPACE");
  o.namespace_ = flags.Get("namespace", ns != nullptr ? ns : "");
  o.worker_id = id;
  o.role = "ps";
  o.token = token;
  o.flush_interval_ms = 250;
  return o;
}

// Checkpoints' interval and where a server starts from, from its flags.
struct StartFlags {
  int64_t every = 0;          // --checkpoint-every-steps
  int64_t restore_step = -1;  // -1: none (or latest with no checkpoint yet)
  std::string take_over;
};

absl::StatusOr<StartFlags> ParseStartFlags(const antdt::ParsedFlags& flags,
                                           const std::string& checkpoint_dir,
                                           const std::string& id) {
  StartFlags f;
  if (!absl::SimpleAtoi(flags.Get("checkpoint-every-steps", "0"), &f.every) || f.every < 0) {
    return absl::InvalidArgumentError("--checkpoint-every-steps: must be an integer >= 0");
  }
  const bool latest = flags.Get("restore-step") == "latest";
  if (flags.Has("restore-step") && !latest &&
      (!absl::SimpleAtoi(flags.Get("restore-step"), &f.restore_step) || f.restore_step < 0)) {
    return absl::InvalidArgumentError("--restore-step: must be an integer >= 0 or latest");
  }
  if (flags.Has("restore-step") && checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--restore-step: needs --checkpoint-dir");
  }
  if (latest) {
    const std::vector<int64_t> steps = antdt::trainer::CheckpointSteps(checkpoint_dir, id);
    if (!steps.empty()) f.restore_step = steps.back();
  }
  f.take_over = flags.Get("take-over");
  if (!f.take_over.empty()) RETURN_IF_ERROR(antdt::ValidateHostPort(f.take_over, "--take-over"));
  return f;
}

// The state a server starts from: the server it takes over (when it cannot,
// its own checkpoint of `restore_step`, if one is given), or its own
// checkpoint of `restore_step`; nothing for a fresh server.
absl::Status StartingState(antdt::trainer::ParameterShard& shard,
                           const CheckpointWriter::Options& o, const std::string& take_over,
                           int64_t restore_step, const std::string& self) {
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<antdt::trainer::PsState> state;
  std::string from = "checkpoint";
  if (!take_over.empty()) {
    state = TakeOver(take_over, self, o.token);
    if (state.ok()) {
      from = take_over;
    } else if (restore_step < 0) {
      return absl::Status(state.status().code(), "--take-over " + take_over + ": " +
                                                     std::string(state.status().message()));
    } else {
      antdt::LogEvent("take_over_failed", {{"ps", o.id},
                                           {"from", take_over},
                                           {"error", std::string(state.status().message())},
                                           {"restore_step", restore_step}});
    }
  }
  if (!state.ok() && restore_step >= 0) {
    state = antdt::trainer::ReadCheckpoint(o.dir, o.id, restore_step);
    if (!state.ok()) {
      return absl::Status(state.status().code(),
                          "--restore-step: " + std::string(state.status().message()));
    }
  }
  if (!state.ok()) return absl::OkStatus();  // a fresh server
  RETURN_IF_ERROR(shard.Load(*state));
  antdt::LogEvent(
      "restored",
      {{"ps", o.id},
       {"step", state->step},
       {"from", from},
       {"ms",
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count()}});
  return absl::OkStatus();
}

}  // namespace

// The aggregation's flags (--features, --workers, --backup, --learning-rate,
// --step-timeout, --step-deadline) as checked PsOptions; InvalidArgument
// naming the flag.
absl::StatusOr<antdt::trainer::PsOptions> ParseShardOptions(const antdt::ParsedFlags& flags) {
  using antdt::trainer::kMaxWorkers;
  auto bad = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  antdt::trainer::PsOptions options;
  int64_t workers = 0, backup = 0;
  if (!absl::SimpleAtoi(flags.Get("features"), &options.features)) {
    return bad("--features: must be an integer > 0");
  }
  if (!absl::SimpleAtoi(flags.Get("workers"), &workers) || workers > kMaxWorkers) {
    return bad("--workers: must be an integer > 0");
  }
  if (!absl::SimpleAtoi(flags.Get("backup", "0"), &backup) || backup > kMaxWorkers) {
    return bad("--backup: must be an integer in [0, workers)");
  }
  options.workers = static_cast<int>(workers);
  options.backup = static_cast<int>(backup);
  if (!absl::SimpleAtod(flags.Get("learning-rate", "0.5"), &options.learning_rate)) {
    return bad("--learning-rate: must be a number > 0");
  }
  absl::StatusOr<int64_t> timeout_ms =
      antdt::ParseDurationMs(flags.Get("step-timeout", "5s"), "--step-timeout");
  if (!timeout_ms.ok()) return timeout_ms.status();
  options.step_timeout = std::chrono::milliseconds(*timeout_ms);
  if (!absl::SimpleAtod(flags.Get("step-deadline", "0"), &options.step_deadline)) {
    return bad("--step-deadline: must be 0 (none) or a number in (1, 10]");
  }
  if (!absl::SimpleAtod(flags.Get("step-deadline-floor", "0"), &options.step_deadline_floor)) {
    return bad("--step-deadline-floor: must be 0 or a number in (1, --step-deadline]");
  }
  absl::StatusOr<antdt::trainer::PsOptions> valid =
      antdt::trainer::ParameterShard::Validate(options);
  if (!valid.ok()) return bad("--" + std::string(valid.status().message()));
  return valid;
}

int main(int argc, char** argv) {
  using namespace antdt;
  BlockTerminationSignals();
  int exit_code = 0;
  const std::optional<ParsedFlags> flags = ParseCommandLine(argc, argv, "antdt-ps", kUsage,
                                                            {"listen",
                                                             "ready-file",
                                                             "id",
                                                             "features",
                                                             "workers",
                                                             "backup",
                                                             "learning-rate",
                                                             "step-timeout",
                                                             "step-deadline",
                                                             "step-deadline-floor",
                                                             "emulated-us-per-step",
                                                             "log-every-steps",
                                                             "speed-file",
                                                             "checkpoint-dir",
                                                             "checkpoint-every-steps",
                                                             "keep-checkpoints",
                                                             "sharding",
                                                             "job",
                                                             "dataset",
                                                             "token-file",
                                                             "take-over",
                                                             "restore-step",
                                                             "advertise",
                                                             "agent",
                                                             "namespace"},
                                                            &exit_code);
  if (!flags) return exit_code;
  for (const char* required : {"features", "workers"}) {
    if (!flags->Has(required)) return Fail(std::string("--") + required + ": required");
  }
  const std::string listen = flags->Get("listen", "127.0.0.1:0");
  if (auto s = ValidateHostPort(listen, "--listen"); !s.ok()) return Fail(std::string(s.message()));
  absl::StatusOr<trainer::PsOptions> options = ParseShardOptions(*flags);
  if (!options.ok()) return Fail(std::string(options.status().message()));
  int64_t emulated_us = 0, log_every = 50;
  const char* env_us = std::getenv("ANTDT_SERVER_US_PER_STEP");
  if (!absl::SimpleAtoi(flags->Get("emulated-us-per-step", env_us != nullptr ? env_us : "0"),
                        &emulated_us) ||
      emulated_us < 0) {
    return Fail("--emulated-us-per-step: must be an integer >= 0");
  }
  if (!absl::SimpleAtoi(flags->Get("log-every-steps", "50"), &log_every) || log_every <= 0) {
    return Fail("--log-every-steps: must be an integer > 0");
  }
  const std::string id = flags->Get("id", "ps-0");

  absl::StatusOr<CheckpointWriter::Options> checkpoints = CheckpointOptions(*flags, id);
  if (!checkpoints.ok()) return Fail(std::string(checkpoints.status().message()));
  if (flags->Has("agent") && flags->Get("job").empty()) return Fail("--agent: needs --job");
  absl::StatusOr<StartFlags> start = ParseStartFlags(*flags, checkpoints->dir, id);
  if (!start.ok()) return Fail(std::string(start.status().message()));
  const int64_t every = start->every, restore_step = start->restore_step;
  const std::string& take_over = start->take_over;

  trainer::ParameterShard shard(*options);
  CheckpointWriter writer(*checkpoints);
  if (!checkpoints->dir.empty()) {
    shard.SetCheckpointHook(every, [&writer](const trainer::PsState& st) { writer.Write(st); });
  }
  if (!take_over.empty() || restore_step >= 0) shard.AwaitState();
  const char* env_speed = std::getenv("ANTDT_NODE_SPEED_FILE");
  NodeSpeed speed(flags->Get("speed-file", env_speed != nullptr ? env_speed : ""));
  ServerSteps steps(ReporterOptions(*flags, id, checkpoints->token));
  ParameterServerImpl service(shard, id, emulated_us, log_every, speed, checkpoints->dir,
                              checkpoints->token, steps);
  auto serving = Serving::Start({listen, "", "", nullptr, {&service}});
  if (!serving.ok()) return Fail("--" + std::string(serving.status().message()));
  if (absl::Status s = StartingState(shard, *checkpoints, take_over, restore_step,
                                     flags->Get("advertise", (*serving)->address()));
      !s.ok()) {
    shard.Shutdown();
    (*serving)->Shutdown(std::chrono::seconds(1));
    return Fail(std::string(s.message()));
  }
  if (auto s = (*serving)->WriteReady(flags->Get("ready-file")); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  LogEvent("serving", {{"ps", id},
                       {"listen", (*serving)->address()},
                       {"features", options->features},
                       {"workers", options->workers},
                       {"backup", options->backup},
                       {"learning_rate", options->learning_rate},
                       {"step_timeout_ms", static_cast<int64_t>(options->step_timeout.count())},
                       {"step_deadline", options->step_deadline},
                       {"step_deadline_floor", options->step_deadline_floor}});

  const int sig = (*serving)->WaitForSignal();
  shard.Shutdown();  // blocked pushes answer now
  (*serving)->Shutdown(std::chrono::seconds(2));
  steps.Flush();
  const trainer::PsStats s = shard.Stats();
  LogEvent("stopped", {{"ps", id},
                       {"signal", sig},
                       {"step", s.step},
                       {"mean_loss", s.mean_loss},
                       {"first_mean_loss", s.first_mean_loss},
                       {"samples", s.samples},
                       {"dropped", s.dropped}});
  return 0;
}
