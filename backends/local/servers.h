// The parameter servers of a local run: started on their scenario nodes,
// checkpointing under <checkpoint path>/ps, moved to another node on a
// KILL_RESTART, restored from the last checkpoint when one dies.
//
// Moving ps-K (Move): a new antdt-ps on the target node takes the old one's
// state at a step boundary (--take-over); the old one sends every later push
// to it, and is stopped once the new one has completed a step (every worker
// has followed by then) or after 30 s. When the old one does not hand over
// (dead, or no step boundary within a minute), the move is a restore.
//
// Restoring (a server died, or a move could not hand over): S is the newest
// step every server has a checkpoint of. ps-K starts again on its node from
// its checkpoint of S, at the address it had (the workers' calls to it retry
// until it is back); every other server goes back to S (RestoreCheckpoint);
// then the sharding service (Restore), whose undone commits are journaled as
// U lines in restores_journal(), so the exactly-once check counts the
// records trained again once. A restore is refused without a checkpoint.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process.h"
#include "core/policy/policy.h"

namespace antdt::local {

// A server process of the run and where it listens.
struct Server {
  std::unique_ptr<Process> proc;
  std::string address;
  std::string metrics;  // HOST:PORT of its /metrics; empty: none
  std::string log;
};

// Starts `argv` (plus --ready-file) with its log at <dir>/<name>.log and
// waits for its ready file (30 s).
absl::StatusOr<Server> StartServer(std::vector<std::string> argv, const std::string& dir,
                                   const std::string& name,
                                   const std::map<std::string, std::string>& env = {});
// SIGTERM, then SIGKILL after 5 s.
void Stop(Server& s);

struct ServerSetOptions {
  std::string bin_dir;
  std::string dir;             // logs and ready files
  std::string checkpoint_dir;  // <checkpoint path>/ps
  int64_t checkpoint_every_steps = 0;
  int32_t workers = 1;
  int32_t backup = 0;
  double step_deadline = 0;        // antdt-ps --step-deadline (jobconfig::StepDeadline)
  double step_deadline_floor = 0;  // antdt-ps --step-deadline-floor (jobconfig::StepDeadlineFloor)
  double learning_rate = 0.5;
  std::vector<int32_t> features;  // each server's slice
  int64_t server_time_us = 0;     // emulated time per step at speed 1
  // The sharding service the first server checkpoints, with the run's credential.
  std::string sharding, job, dataset, token_file, token;
  // The speed file of a node ("" none), and the address of its agent ("" none:
  // the server reports no step times).
  std::function<std::string(const std::string& node)> speed_file;
  std::function<std::string(const std::string& node)> agent_address;
  std::string namespace_;
  std::function<void(const std::string&)> on_event;
};

class ServerSet {
 public:
  explicit ServerSet(ServerSetOptions options);
  ~ServerSet();

  // Server k on nodes[k] ("" none).
  absl::Status Start(const std::vector<std::string>& nodes);
  std::vector<std::string> addresses() const;
  std::string address(size_t k) const { return servers_[k].server.address; }
  size_t size() const { return servers_.size(); }
  // As control-loop members (role ps, their node and incarnation).
  std::vector<policy::WorkerState> Members() const;
  // Nodes a server runs on.
  std::map<std::string, bool> BusyNodes() const;

  struct MoveResult {
    std::string id;       // "ps-K"
    std::string address;  // where the server is now
    bool live = false;    // handed over at a step boundary (else restored)
    int64_t step = 0;     // the step it took over at, or restored to
    double seconds = 0;   // the move's own time
  };
  // Moves server `id` ("ps-K") to `to_node`.
  absl::StatusOr<MoveResult> Move(const std::string& id, const std::string& to_node,
                                  int64_t now_ms);
  // Stops old servers that have been followed; restores a server that died.
  // Returns the restores done.
  absl::StatusOr<std::vector<MoveResult>> Poll(int64_t now_ms);
  void StopAll();

  std::string restores_journal() const;
  // Restores so far (a server that died, or a move that could not hand over).
  int restores() const { return restores_; }

 private:
  struct Slot {
    std::string id, node;
    int32_t incarnation = 0;
    int64_t last_restart_ms = -1;
    Server server;
  };
  struct Retiring {
    Server server;
    size_t k = 0;
    int64_t step = 0;
    std::chrono::steady_clock::time_point give_up;
  };
  std::vector<std::string> Argv(size_t k, const std::string& node) const;
  absl::StatusOr<MoveResult> Restore(size_t k, const std::string& node, int64_t now_ms);
  void Event(const std::string& line) const {
    if (o_.on_event) o_.on_event(line);
  }

  const ServerSetOptions o_;
  std::vector<Slot> servers_;
  std::vector<Retiring> retiring_;
  int restores_ = 0;
};

}  // namespace antdt::local
