// antdt-ps: the demo trainer's synchronous parameter server, holding one
// slice of a logistic-regression model (see ps.h for the step semantics).
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "common/config.h"
#include "common/log.h"
#include "common/serve.h"
#include "common/server.h"
#include "common/status.h"
#include "examples/trainer/ps.h"

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
  --emulated-us-per-step N    extra server time per step (slow-PS scenario) [0]
  --log-every-steps N         one log line per N steps               [50]
)";

int Fail(const std::string& message) {
  std::fprintf(stderr, "antdt-ps: %s\n", message.c_str());
  return 2;
}

class ParameterServerImpl final : public antdt::v1::ParameterServer::Service {
 public:
  ParameterServerImpl(antdt::trainer::ParameterShard& shard, std::string id, int64_t emulated_us,
                      int64_t log_every)
      : shard_(shard), id_(std::move(id)), emulated_us_(emulated_us), log_every_(log_every) {}

  grpc::Status PushGradient(grpc::ServerContext*, const antdt::v1::PushGradientRequest* req,
                            antdt::v1::PushGradientResponse* resp) override {
    auto r = shard_.Push(req->worker_id(), req->step(), req->samples(),
                         absl::MakeConstSpan(req->gradient().data(), req->gradient().size()),
                         req->loss_sum());
    if (!r.ok()) return antdt::ToGrpcStatus(r.status());
    if (r->completed && (r->step == 1 || r->step % log_every_ == 0)) {
      const antdt::trainer::PsStats s = shard_.Stats();
      antdt::LogEvent("step", {{"ps", id_},
                               {"step", r->step},
                               {"mean_loss", r->mean_loss},
                               {"contributions", r->contributions},
                               {"samples", s.samples},
                               {"dropped", s.dropped}});
    }
    // Every answer of a step waits the emulated time, in parallel: the step
    // takes that much longer on the server.
    if (emulated_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(emulated_us_));
    resp->set_step(r->step);
    resp->mutable_parameters()->Add(r->parameters.begin(), r->parameters.end());
    resp->set_mean_loss(r->mean_loss);
    resp->set_contributions(r->contributions);
    return grpc::Status::OK;
  }

  grpc::Status Pull(grpc::ServerContext*, const antdt::v1::PullRequest*,
                    antdt::v1::PullResponse* resp) override {
    const antdt::trainer::PushResult r = shard_.Pull();
    resp->set_step(r.step);
    resp->mutable_parameters()->Add(r.parameters.begin(), r.parameters.end());
    return grpc::Status::OK;
  }

  grpc::Status Leave(grpc::ServerContext*, const antdt::v1::LeaveRequest* req,
                     antdt::v1::LeaveResponse* resp) override {
    if (req->worker_id().empty()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "worker_id: must not be empty");
    }
    resp->set_members(shard_.Leave(req->worker_id()));
    return grpc::Status::OK;
  }

  grpc::Status Resize(grpc::ServerContext*, const antdt::v1::ResizeRequest* req,
                      antdt::v1::ResizeResponse* resp) override {
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

  grpc::Status Stats(grpc::ServerContext*, const antdt::v1::StatsRequest*,
                     antdt::v1::ParameterServerStats* resp) override {
    const antdt::trainer::PsStats s = shard_.Stats();
    resp->set_step(s.step);
    resp->set_mean_loss(s.mean_loss);
    resp->set_samples(s.samples);
    resp->set_first_mean_loss(s.first_mean_loss);
    resp->set_dropped_gradients(s.dropped);
    return grpc::Status::OK;
  }

 private:
  antdt::trainer::ParameterShard& shard_;
  const std::string id_;
  const int64_t emulated_us_;
  const int64_t log_every_;
};

}  // namespace

int main(int argc, char** argv) {
  using namespace antdt;
  BlockTerminationSignals();
  int exit_code = 0;
  const std::optional<ParsedFlags> flags =
      ParseCommandLine(argc, argv, "antdt-ps", kUsage,
                       {"listen", "ready-file", "id", "features", "workers", "backup",
                        "learning-rate", "step-timeout", "emulated-us-per-step", "log-every-steps"},
                       &exit_code);
  if (!flags) return exit_code;
  for (const char* required : {"features", "workers"}) {
    if (!flags->Has(required)) return Fail(std::string("--") + required + ": required");
  }
  const std::string listen = flags->Get("listen", "127.0.0.1:0");
  if (auto s = ValidateHostPort(listen, "--listen"); !s.ok()) return Fail(std::string(s.message()));
  trainer::PsOptions options;
  int64_t workers = 0, backup = 0, emulated_us = 0, log_every = 50;
  if (!absl::SimpleAtoi(flags->Get("features"), &options.features)) {
    return Fail("--features: must be an integer > 0");
  }
  if (!absl::SimpleAtoi(flags->Get("workers"), &workers) || workers > trainer::kMaxWorkers) {
    return Fail("--workers: must be an integer > 0");
  }
  if (!absl::SimpleAtoi(flags->Get("backup", "0"), &backup) || backup > trainer::kMaxWorkers) {
    return Fail("--backup: must be an integer in [0, workers)");
  }
  options.workers = static_cast<int>(workers);
  options.backup = static_cast<int>(backup);
  if (!absl::SimpleAtod(flags->Get("learning-rate", "0.5"), &options.learning_rate)) {
    return Fail("--learning-rate: must be a number > 0");
  }
  auto timeout_ms = ParseDurationMs(flags->Get("step-timeout", "5s"), "--step-timeout");
  if (!timeout_ms.ok()) return Fail(std::string(timeout_ms.status().message()));
  options.step_timeout = std::chrono::milliseconds(*timeout_ms);
  if (!absl::SimpleAtoi(flags->Get("emulated-us-per-step", "0"), &emulated_us) || emulated_us < 0) {
    return Fail("--emulated-us-per-step: must be an integer >= 0");
  }
  if (!absl::SimpleAtoi(flags->Get("log-every-steps", "50"), &log_every) || log_every <= 0) {
    return Fail("--log-every-steps: must be an integer > 0");
  }
  auto valid = trainer::ParameterShard::Validate(options);
  if (!valid.ok()) return Fail("--" + std::string(valid.status().message()));
  const std::string id = flags->Get("id", "ps-0");

  trainer::ParameterShard shard(*valid);
  ParameterServerImpl service(shard, id, emulated_us, log_every);
  auto serving = Serving::Start({listen, "", "", nullptr, {&service}});
  if (!serving.ok()) return Fail("--" + std::string(serving.status().message()));
  if (auto s = (*serving)->WriteReady(flags->Get("ready-file")); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  LogEvent("serving", {{"ps", id},
                       {"listen", (*serving)->address()},
                       {"features", options.features},
                       {"workers", options.workers},
                       {"backup", options.backup},
                       {"learning_rate", options.learning_rate},
                       {"step_timeout_ms", *timeout_ms}});

  const int sig = (*serving)->WaitForSignal();
  shard.Shutdown();  // blocked pushes answer now
  (*serving)->Shutdown(std::chrono::seconds(2));
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
