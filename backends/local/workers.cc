#include "backends/local/workers.h"

#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/process.h"
#include "common/status.h"

namespace antdt::local {
namespace {

// `env -C DIR -- ARGV...`: ARGV in DIR, in the same process.
std::vector<std::string> InDirectory(const WorkerLaunch& launch) {
  if (launch.cwd.empty()) return launch.argv;
  std::vector<std::string> argv = {"/usr/bin/env", "-C", launch.cwd, "--"};
  argv.insert(argv.end(), launch.argv.begin(), launch.argv.end());
  return argv;
}

class ProcessChild final : public Child {
 public:
  ProcessChild(const WorkerLaunch& launch, const std::string& log)
      : proc_(InDirectory(launch), log, launch.env) {}
  int pid() const override { return proc_.pid(); }
  void Signal(int sig) override { proc_.Signal(sig); }
  std::optional<int> Wait(std::chrono::milliseconds timeout) override {
    return proc_.Wait(timeout);
  }

 private:
  Process proc_;
};

class ProcessLauncher final : public Launcher {
 public:
  std::unique_ptr<Child> Launch(const WorkerLaunch& launch, const std::string& log_path) override {
    return std::make_unique<ProcessChild>(launch, log_path);
  }
};

}  // namespace

std::unique_ptr<Launcher> NewProcessLauncher() { return std::make_unique<ProcessLauncher>(); }

WorkerSet::WorkerSet(WorkerSetOptions options, Launcher* launcher, const Clock* clock)
    : options_(std::move(options)), launcher_(launcher), clock_(clock) {}

absl::Status WorkerSet::Spawn(WorkerSlot& w) {
  ASSIGN_OR_RETURN(const WorkerLaunch launch, options_.launch(w));
  w.child = launcher_->Launch(launch, options_.log_dir + "/" + w.id + ".log");
  if (!options_.on_spawn) return absl::OkStatus();
  return options_.on_spawn(w, w.child->pid());
}

absl::Status WorkerSet::Start(const std::string& id, const std::string& node, int64_t local_batch) {
  auto w = std::make_unique<WorkerSlot>();
  w->id = id;
  w->rank = static_cast<int32_t>(slots_.size());
  w->node = node;
  w->local_batch = local_batch;
  RETURN_IF_ERROR(Spawn(*w));
  slots_.push_back(std::move(w));
  return absl::OkStatus();
}

WorkerSlot* WorkerSet::Find(const std::string& id) {
  for (auto& w : slots_) {
    if (w->id == id) return w.get();
  }
  return nullptr;
}

absl::StatusOr<bool> WorkerSet::Poll() {
  bool all_done = true;
  for (auto& slot : slots_) {
    WorkerSlot& w = *slot;
    if (w.done) continue;
    std::optional<int> status = w.child->Wait(std::chrono::milliseconds(0));
    if (status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) {
      w.done = true;
      continue;
    }
    all_done = false;
    if (!status) continue;
    if (++w.failures > options_.backoff_limit) {
      return absl::InternalError(absl::StrCat(
          w.id, " failed ", w.failures,
          " times (runPolicy.backoffLimit): ", Tail(options_.log_dir + "/" + w.id + ".log", 1500)));
    }
    if (options_.on_event) {
      options_.on_event(absl::StrCat(w.id, " exited (status ", *status, "); restarting"));
    }
    // The sharding service may be unreachable for a moment: the new incarnation
    // takes its shards back on its own, so a failed release is only logged.
    if (absl::Status s = options_.retire(w.id, w.incarnation); !s.ok() && options_.on_event) {
      options_.on_event(absl::StrCat(w.id, ": release of incarnation ", w.incarnation,
                                     " failed: ", s.ToString()));
    }
    ++w.incarnation;
    RETURN_IF_ERROR(Spawn(w));
  }
  return all_done;
}

absl::Status WorkerSet::RestartElsewhere(const std::string& id, const std::string& to_node) {
  WorkerSlot* w = Find(id);
  if (w == nullptr) return absl::NotFoundError("no worker " + id);
  if (w->done) return absl::OkStatus();
  w->child->Signal(SIGKILL);
  w->child->Wait(std::chrono::seconds(10));
  RETURN_IF_ERROR(options_.retire(w->id, w->incarnation));
  w->node = to_node;
  ++w->incarnation;
  w->last_restart_ms = clock_->NowMillis();
  return Spawn(*w);
}

std::vector<policy::WorkerState> WorkerSet::Members() const {
  std::vector<policy::WorkerState> members;
  for (const auto& w : slots_) {
    policy::WorkerState ws;
    ws.id = w->id;
    ws.role = vocab::Role::kWorker;
    ws.node = w->node;
    ws.local_batch_size = w->local_batch;
    ws.accumulation_steps = w->accumulation_steps;
    ws.incarnation = w->incarnation;
    ws.alive = !w->done;
    ws.last_restart_ms = w->last_restart_ms;
    members.push_back(ws);
  }
  return members;
}

std::map<std::string, bool> WorkerSet::BusyNodes() const {
  std::map<std::string, bool> busy;
  for (const auto& w : slots_) {
    if (!w->done) busy[w->node] = true;
  }
  return busy;
}

void WorkerSet::KillAll() {
  for (auto& w : slots_) {
    if (w->child && !w->child->Wait(std::chrono::milliseconds(0))) {
      w->child->Signal(SIGKILL);
      w->child->Wait(std::chrono::seconds(5));
    }
  }
}

}  // namespace antdt::local
