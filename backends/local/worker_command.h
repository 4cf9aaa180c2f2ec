// How the local runner starts a worker: the built-in demo trainer with its
// flags, or the command of the manifest's worker template run as the test
// kubelet runs it (jobconfig/worker_env.h: the worker environment, containers[0]
// env and command expanded over it; the image is ignored), in the manifest's
// directory.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"
#include "backends/local/workers.h"

namespace antdt::local {

// What the runner knows of the run that a worker's launch needs.
struct WorkerSite {
  std::string bin_dir;       // the AntDT binaries; a command's first word is looked up here first
  std::string work_dir;      // journals, loss logs, speed files
  std::string manifest_dir;  // a command's working directory
  std::string sharding_addr;
  std::string token_file;  // the run's credential: ANTDT_TOKEN_FILE ("" none)
  std::vector<std::string> ps_addrs;
  std::string checkpoint_path;            // ANTDT_CHECKPOINT_PATH
  std::string mode;                       // jobconfig::kModeAntdt or kModePlain
  int master_port = 0;                    // MASTER_PORT, the same for every incarnation
  std::string python_path;                // PYTHONPATH, empty: left as the runner's
  std::string path_env;                   // the PATH a command's first word is looked up in
  int64_t device_time_per_sample_us = 0;  // the demo trainer's emulated compute
  bool device_work_cpu = false;           // spec.local.deviceWork: cpu
  // The demo trainer's --micro-batches: more than 1 when its steps have a
  // deadline (jobconfig::StepDeadline) to stop at between two.
  int32_t micro_batches = 1;
};

// Where worker `id` of a run in `work_dir` keeps its journal of commits (the
// exactly-once check reads it) and its loss log (the runner reads worker-0's).
std::string JournalPath(const std::string& work_dir, const std::string& id);
std::string LossLogPath(const std::string& work_dir, const std::string& id);
// <LossLogPath>.eval.json: the final model's held-out evaluation, written by
// worker-0 (the demo trainer's --eval-out; examples/pytorch/train.py).
std::string HeldOutPath(const std::string& work_dir, const std::string& id);

// The site's fields that follow from the job and options alone (not the
// servers' addresses): ANTDT_CHECKPOINT_PATH is <work_dir>/checkpoint unless
// spec.checkpoint.path is set; PYTHONPATH starts with <bin_dir>/../python
// when that directory exists; PATH and PYTHONPATH from the runner's
// environment.
WorkerSite SiteFor(const manifest::Job& job, const std::string& bin_dir,
                   const std::string& work_dir, const std::string& manifest_dir, bool plain);

// Checks the worker command once, before anything starts: its first word
// found (when it has no $(VAR)), no env valueFrom. Errors name the field.
absl::Status CheckWorkerCommand(const manifest::Job& job, const WorkerSite& site);

// The launch of `slot`'s current incarnation on its node, whose agent is at
// `agent_addr`.
absl::StatusOr<WorkerLaunch> LaunchFor(const manifest::Job& job, const WorkerSite& site,
                                       const WorkerSlot& slot, const std::string& agent_addr);

// `name` as the runner executes it: with a slash, as given (relative to
// `cwd`); without, <bin_dir>/name, else the first directory of `path_env`
// (colon-separated) that has an executable of that name. nullopt: none.
std::optional<std::string> FindExecutable(const std::string& name, const std::string& bin_dir,
                                          const std::string& cwd, const std::string& path_env);

// The kernel's ephemeral port range, [lo, hi], from `path`
// (/proc/sys/net/ipv4/ip_local_port_range); Linux's default when unreadable.
std::pair<int, int> EphemeralPortRange(const std::string& path);

// A TCP port free on 127.0.0.1 now, for a listener a child binds later (the
// workers' MASTER_PORT): chosen at random below the ephemeral range, so that
// no socket the kernel numbers itself takes it in the meantime; a port-0 pick
// when there is no room below the range.
absl::StatusOr<int> PickFreePort(
    const std::string& range_path = "/proc/sys/net/ipv4/ip_local_port_range");

}  // namespace antdt::local
