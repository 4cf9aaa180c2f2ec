#include "backends/local/servers.h"

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "antdt/v1/sharding.grpc.pb.h"
#include "antdt/v1/trainer.grpc.pb.h"
#include "common/credential.h"
#include "common/status.h"
#include "common/tls.h"
#include "workload/demo/journal.h"
#include "workload/trainer/ps_checkpoint.h"

namespace antdt::local {
namespace fs = std::filesystem;
namespace {

std::unique_ptr<v1::ParameterServer::Stub> PsStub(const std::string& address) {
  return v1::ParameterServer::NewStub(antdt::CreateChannel(address));
}

absl::StatusOr<v1::ParameterServerStats> PsStats(const std::string& address,
                                                 const std::string& token) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  AddCredential(ctx, token);
  v1::ParameterServerStats stats;
  RETURN_IF_ERROR(FromGrpcStatus(PsStub(address)->Stats(&ctx, v1::StatsRequest(), &stats)));
  return stats;
}

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

absl::StatusOr<Server> StartServer(std::vector<std::string> argv, const std::string& dir,
                                   const std::string& name,
                                   const std::map<std::string, std::string>& env) {
  Server s;
  const std::string ready = dir + "/" + name + ".ready";
  fs::remove(ready);
  argv.insert(argv.end(), {"--ready-file", ready});
  s.log = dir + "/" + name + ".log";
  s.proc = std::make_unique<Process>(argv, s.log, env);
  auto address = WaitForReadyFile(ready, std::chrono::seconds(30));
  if (!address) return absl::UnavailableError(name + " did not start: " + Tail(s.log, 1500));
  s.address = *address;
  s.metrics = ReadyFileField(ready, "metrics").value_or("");
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

ServerSet::ServerSet(ServerSetOptions options) : o_(std::move(options)) {}

ServerSet::~ServerSet() { StopAll(); }

std::vector<std::string> ServerSet::Argv(size_t k, const std::string& node) const {
  std::vector<std::string> argv = {
      o_.bin_dir + "/antdt-ps",
      "--listen",
      "127.0.0.1:0",
      "--id",
      vocab::MemberName(vocab::Role::kParameterServer, static_cast<int32_t>(k)),
      "--features",
      std::to_string(o_.features[k]),
      "--workers",
      std::to_string(o_.workers),
      "--backup",
      std::to_string(o_.backup),
      "--learning-rate",
      absl::StrCat(o_.learning_rate),
      "--step-timeout",
      "30s"};
  if (o_.step_deadline > 0) {
    argv.insert(argv.end(), {"--step-deadline", absl::StrCat(o_.step_deadline)});
  }
  if (o_.step_deadline_floor > 0) {
    argv.insert(argv.end(), {"--step-deadline-floor", absl::StrCat(o_.step_deadline_floor)});
  }
  if (o_.server_time_us > 0) {
    argv.insert(argv.end(), {"--emulated-us-per-step", std::to_string(o_.server_time_us)});
  }
  if (const std::string speed = node.empty() ? "" : o_.speed_file(node); !speed.empty()) {
    argv.insert(argv.end(), {"--speed-file", speed});
  }
  // The run's credential: every call to a server carries it.
  if (!o_.token_file.empty()) argv.insert(argv.end(), {"--token-file", o_.token_file});
  // Its steps' server time to its node's agent (the Monitor sees a slow
  // server directly).
  const std::string agent = node.empty() || !o_.agent_address ? "" : o_.agent_address(node);
  if (!agent.empty()) argv.insert(argv.end(), {"--agent", agent, "--namespace", o_.namespace_});
  if (!agent.empty() || (!o_.checkpoint_dir.empty() && k == 0)) {
    argv.insert(argv.end(), {"--job", o_.job});
  }
  if (!o_.checkpoint_dir.empty()) {
    argv.insert(argv.end(), {"--checkpoint-dir", o_.checkpoint_dir, "--checkpoint-every-steps",
                             std::to_string(o_.checkpoint_every_steps)});
    if (k == 0) {
      argv.insert(argv.end(), {"--sharding", o_.sharding, "--dataset", o_.dataset});
    }
  }
  return argv;
}

absl::Status ServerSet::Start(const std::vector<std::string>& nodes) {
  for (size_t k = 0; k < nodes.size(); ++k) {
    Slot& s = servers_.emplace_back();
    s.id = vocab::MemberName(vocab::Role::kParameterServer, static_cast<int32_t>(k));
    s.node = nodes[k];
    ASSIGN_OR_RETURN(s.server, StartServer(Argv(k, s.node), o_.dir, s.id));
  }
  return absl::OkStatus();
}

std::vector<std::string> ServerSet::addresses() const {
  std::vector<std::string> out;
  for (const Slot& s : servers_) out.push_back(s.server.address);
  return out;
}

std::vector<policy::WorkerState> ServerSet::Members() const {
  std::vector<policy::WorkerState> members;
  for (const Slot& s : servers_) {
    policy::WorkerState m;
    m.id = s.id;
    m.role = vocab::Role::kParameterServer;
    m.node = s.node;
    m.incarnation = s.incarnation;
    m.alive = s.server.proc != nullptr;
    m.last_restart_ms = s.last_restart_ms;
    members.push_back(m);
  }
  return members;
}

std::map<std::string, bool> ServerSet::BusyNodes() const {
  std::map<std::string, bool> busy;
  for (const Slot& s : servers_) {
    if (!s.node.empty()) busy[s.node] = true;
  }
  return busy;
}

absl::StatusOr<ServerSet::MoveResult> ServerSet::Move(const std::string& id,
                                                      const std::string& to_node, int64_t now_ms) {
  size_t k = 0;
  while (k < servers_.size() && servers_[k].id != id) ++k;
  if (k == servers_.size()) return absl::NotFoundError("no parameter server " + id);
  Slot& slot = servers_[k];
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> argv = Argv(k, to_node);
  argv.insert(argv.end(), {"--take-over", slot.server.address});
  const std::string name = absl::StrCat(id, ".", slot.incarnation + 1);
  absl::StatusOr<Server> next = StartServer(argv, o_.dir, name);
  if (!next.ok()) {
    Event(absl::StrCat(id, ": no handover from ", slot.server.address, " (",
                       next.status().message(), "): restoring it from its last checkpoint"));
    return Restore(k, to_node, now_ms);
  }
  absl::StatusOr<v1::ParameterServerStats> stats = PsStats(next->address, o_.token);
  MoveResult r;
  r.id = id;
  r.address = next->address;
  r.live = true;
  r.step = stats.ok() ? stats->step() : 0;
  r.seconds = SecondsSince(t0);
  retiring_.push_back({std::move(slot.server), k, r.step,
                       std::chrono::steady_clock::now() + std::chrono::seconds(30)});
  slot.server = *std::move(next);
  slot.node = to_node;
  ++slot.incarnation;
  slot.last_restart_ms = now_ms;
  return r;
}

absl::StatusOr<ServerSet::MoveResult> ServerSet::Restore(size_t k, const std::string& node,
                                                         int64_t now_ms) {
  Slot& slot = servers_[k];
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> ids;
  for (const Slot& s : servers_) ids.push_back(s.id);
  const std::optional<int64_t> step = o_.checkpoint_dir.empty()
                                          ? std::nullopt
                                          : trainer::LatestCommonCheckpoint(o_.checkpoint_dir, ids);
  if (!step) {
    return absl::FailedPreconditionError(absl::StrCat(
        slot.id, " cannot be restored: no checkpoint of every server (spec.checkpoint.everySteps ",
        o_.checkpoint_every_steps == 0 ? "is not set" : "has not come round yet", ")"));
  }
  // The old process is gone for good, and its address is the new one's.
  const std::string address = slot.server.address;
  if (slot.server.proc) {
    slot.server.proc->Signal(SIGKILL);
    slot.server.proc->Wait(std::chrono::seconds(5));
  }
  std::vector<std::string> argv = Argv(k, node);
  argv[2] = address;  // --listen
  argv.insert(argv.end(), {"--restore-step", std::to_string(*step)});
  ASSIGN_OR_RETURN(slot.server,
                   StartServer(argv, o_.dir, absl::StrCat(slot.id, ".", slot.incarnation + 1)));
  for (size_t j = 0; j < servers_.size(); ++j) {
    if (j == k) continue;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    AddCredential(ctx, o_.token);
    v1::RestoreCheckpointRequest req;
    req.set_step(*step);
    v1::ParameterServerState state;
    RETURN_IF_ERROR(
        FromGrpcStatus(PsStub(servers_[j].server.address)->RestoreCheckpoint(&ctx, req, &state)));
  }
  // The data position last: a commit between the two is undone with the rest.
  auto sharding = v1::ShardingService::NewStub(antdt::CreateChannel(o_.sharding));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  AddCredential(ctx, o_.token);
  v1::RestoreRequest req;
  req.mutable_dataset()->set_job(o_.job);
  req.mutable_dataset()->set_name(o_.dataset);
  req.set_step(*step);
  v1::RestoreResponse resp;
  RETURN_IF_ERROR(FromGrpcStatus(sharding->Restore(&ctx, req, &resp)));
  ASSIGN_OR_RETURN(demo::Journal journal, demo::Journal::Open(restores_journal()));
  int64_t undone = 0;
  for (const v1::RolledBack& rb : resp.rolled_back()) {
    journal.RolledBack(rb.epoch(), {rb.record_ids().begin(), rb.record_ids().end()});
    undone += rb.record_ids_size();
  }
  slot.node = node;
  ++slot.incarnation;
  slot.last_restart_ms = now_ms;
  ++restores_;
  MoveResult r;
  r.id = slot.id;
  r.address = address;
  r.step = *step;
  r.seconds = SecondsSince(t0);
  Event(absl::StrFormat(
      "%s restored on %s from the checkpoint of step %d: every server back to it, %d commits "
      "after it undone and trained again, %d leases fenced",
      slot.id, node.empty() ? "this machine" : node, *step, undone, resp.fenced_leases()));
  return r;
}

absl::StatusOr<std::vector<ServerSet::MoveResult>> ServerSet::Poll(int64_t now_ms) {
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    absl::StatusOr<v1::ParameterServerStats> stats =
        PsStats(servers_[it->k].server.address, o_.token);
    if ((stats.ok() && stats->step() > it->step) ||
        std::chrono::steady_clock::now() > it->give_up) {
      Stop(it->server);
      Event(absl::StrCat(servers_[it->k].id, ": the server it moved from (", it->server.address,
                         ") stopped"));
      it = retiring_.erase(it);
    } else {
      ++it;
    }
  }
  std::vector<MoveResult> restored;
  for (size_t k = 0; k < servers_.size(); ++k) {
    Slot& s = servers_[k];
    if (!s.server.proc || s.server.proc->Running()) continue;
    Event(absl::StrCat(s.id, " exited (", Tail(s.server.log, 300), ")"));
    ASSIGN_OR_RETURN(MoveResult r, Restore(k, s.node, now_ms));
    restored.push_back(r);
  }
  return restored;
}

void ServerSet::StopAll() {
  for (Retiring& r : retiring_) Stop(r.server);
  retiring_.clear();
  for (Slot& s : servers_) Stop(s.server);
}

std::string ServerSet::restores_journal() const { return o_.dir + "/restores.journal"; }

}  // namespace antdt::local
