// The local runner's worker processes: started through a Launcher, watched,
// restarted in place after a failure (up to runPolicy.backoffLimit) and
// elsewhere when the Controller decides a KILL_RESTART. Processes and time come
// from outside (a Launcher, a Clock), so the lifecycle is unit-tested with
// fakes; the runner hands it real processes and its job clock.
//
// Thread-safety: none; the runner's thread owns it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock.h"
#include "core/policy/policy.h"

namespace antdt::local {

// A started child process.
class Child {
 public:
  virtual ~Child() = default;
  // Its process id; -1 when it has none (a fake).
  virtual int pid() const { return -1; }
  virtual void Signal(int sig) = 0;
  // The wait status once it exited, nullopt while it runs after `timeout`.
  virtual std::optional<int> Wait(std::chrono::milliseconds timeout) = 0;
};

// How one incarnation of a worker is started.
struct WorkerLaunch {
  std::vector<std::string> argv;           // argv[0]: a path to the executable
  std::map<std::string, std::string> env;  // set over the runner's own environment
  std::string cwd;                         // working directory; empty: the runner's
};

// Starts child processes: launch.argv[0] with launch.argv, output appended
// to `log_path`.
class Launcher {
 public:
  virtual ~Launcher() = default;
  virtual std::unique_ptr<Child> Launch(const WorkerLaunch& launch,
                                        const std::string& log_path) = 0;
};

// Real processes (common/process.h); killed with SIGKILL when dropped running.
// A working directory is entered through `env -C DIR` (coreutils), which then
// execs the command in the same process.
std::unique_ptr<Launcher> NewProcessLauncher();

struct WorkerSlot {
  std::string id;
  int32_t rank = 0;  // its place among the workers (0 for the first started), never changed
  std::string node;
  int32_t incarnation = 0;
  int64_t local_batch = 0;
  int32_t accumulation_steps = 1;  // of the last ADJUST_BS sent
  int64_t last_restart_ms = -1;    // -1 never
  int failures = 0;
  bool done = false;
  std::unique_ptr<Child> child;
};

struct WorkerSetOptions {
  std::string log_dir;  // <log_dir>/<id>.log
  int backoff_limit = 3;
  // How a worker's current incarnation is started on its node.
  std::function<absl::StatusOr<WorkerLaunch>(const WorkerSlot&)> launch;
  // Called with each incarnation's process id right after it started (may be
  // empty); an error stops the run.
  std::function<absl::Status(const WorkerSlot&, int pid)> on_spawn;
  // A stopped incarnation is retired: the servers told it left, its shards
  // released (loop::Backend::Retire).
  std::function<absl::Status(const std::string& worker, int32_t incarnation)> retire;
  // One line per lifecycle event.
  std::function<void(const std::string&)> on_event;
};

class WorkerSet {
 public:
  WorkerSet(WorkerSetOptions options, Launcher* launcher, const Clock* clock);

  // Starts worker `id` (incarnation 0, the next rank) on `node` with
  // `local_batch`; an error when it cannot be launched.
  absl::Status Start(const std::string& id, const std::string& node, int64_t local_batch);

  // Reaps exited workers: exit 0 is done; a failure is retired and started
  // again in place as the next incarnation, until a worker has failed more
  // than backoff_limit times (then an error naming it and its log's tail).
  // True once every worker is done.
  absl::StatusOr<bool> Poll();

  // KILL_RESTART: stops `id` (SIGKILL, it commits nothing more), retires it,
  // and starts its next incarnation on `to_node`. Ignored for a done worker.
  absl::Status RestartElsewhere(const std::string& id, const std::string& to_node);

  // The slot of `id`; nullptr when there is none.
  WorkerSlot* Find(const std::string& id);
  const std::vector<std::unique_ptr<WorkerSlot>>& slots() const { return slots_; }

  // Members as the Controller sees them (alive while not done).
  std::vector<policy::WorkerState> Members() const;
  // Nodes a worker runs on now.
  std::map<std::string, bool> BusyNodes() const;

  // SIGKILLs every worker still running.
  void KillAll();

 private:
  absl::Status Spawn(WorkerSlot& w);

  const WorkerSetOptions options_;
  Launcher* const launcher_;
  const Clock* const clock_;
  std::vector<std::unique_ptr<WorkerSlot>> slots_;
};

}  // namespace antdt::local
