#include "backends/local/worker_command.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/credential.h"
#include "common/status.h"
#include "core/jobconfig/jobconfig.h"
#include "core/jobconfig/worker_env.h"

namespace antdt::local {
namespace {

namespace fs = std::filesystem;

constexpr char kContainerPath[] = "spec.workers.template.spec.containers[0]";

std::string Getenv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

bool IsExecutableFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::string JournalPath(const std::string& work_dir, const std::string& id) {
  return work_dir + "/" + id + ".journal";
}

std::string LossLogPath(const std::string& work_dir, const std::string& id) {
  return work_dir + "/" + id + ".loss.jsonl";
}

std::string HeldOutPath(const std::string& work_dir, const std::string& id) {
  return LossLogPath(work_dir, id) + ".eval.json";
}

namespace {

// The worker environment of `slot` (jobconfig::WorkerEnv) plus PYTHONPATH.
jobconfig::EnvList BaseEnv(const manifest::Job& job, const WorkerSite& site, const WorkerSlot& slot,
                           const std::string& agent_addr) {
  jobconfig::WorkerPlacement p;
  p.sharding_addr = site.sharding_addr;
  p.ps_addrs = site.ps_addrs;
  p.agent_addr = agent_addr;
  p.checkpoint_path = site.checkpoint_path;
  p.rank = slot.rank;
  p.incarnation = slot.incarnation;
  p.local_batch = slot.local_batch;
  p.journal = JournalPath(site.work_dir, slot.id);
  p.loss_log = LossLogPath(site.work_dir, slot.id);
  p.mode = site.mode;
  p.node_speed_file = site.work_dir + "/nodes/" + slot.node + ".speed";
  p.master_addr = "127.0.0.1";
  p.master_port = site.master_port;
  jobconfig::EnvList env = jobconfig::WorkerEnv(job, p);
  if (!site.token_file.empty()) env.emplace_back(kEnvTokenFile, site.token_file);
  if (!site.python_path.empty()) env.emplace_back("PYTHONPATH", site.python_path);
  return env;
}

// The built-in demo trainer's flags (the worker environment is set too).
std::vector<std::string> DemoTrainerArgv(const manifest::Job& job, const WorkerSite& site,
                                         const WorkerSlot& w, const std::string& agent_addr) {
  return {site.bin_dir + "/" + jobconfig::kDemoTrainer,
          "--sharding",
          site.sharding_addr,
          "--job",
          job.name,
          "--dataset",
          "train",
          "--worker-id",
          w.id,
          "--incarnation",
          std::to_string(w.incarnation),
          "--journal",
          JournalPath(site.work_dir, w.id),
          "--ps",
          absl::StrJoin(site.ps_addrs, ","),
          "--features",
          std::to_string(job.model.features),
          "--agent",
          agent_addr,
          "--local-batch",
          std::to_string(w.local_batch),
          "--device-us-per-sample",
          std::to_string(site.device_time_per_sample_us),
          "--device-work",
          site.device_work_cpu ? "cpu" : "sleep",
          "--speed-file",
          site.work_dir + "/nodes/" + w.node + ".speed",
          "--report-interval",
          "250ms",
          "--micro-batches",
          std::to_string(site.micro_batches)};
}

}  // namespace

WorkerSite SiteFor(const manifest::Job& job, const std::string& bin_dir,
                   const std::string& work_dir, const std::string& manifest_dir, bool plain) {
  WorkerSite site;
  site.bin_dir = bin_dir;
  site.work_dir = work_dir;
  site.manifest_dir = manifest_dir;
  site.checkpoint_path =
      job.checkpoint.path.empty() ? work_dir + "/checkpoint" : job.checkpoint.path;
  site.mode = plain ? jobconfig::kModePlain : jobconfig::kModeAntdt;
  site.path_env = Getenv("PATH");
  site.device_time_per_sample_us = job.local.device_time_per_sample_us;
  site.device_work_cpu = job.local.device_work_cpu;
  std::error_code ec;
  const fs::path python = fs::weakly_canonical(fs::path(bin_dir) / ".." / "python", ec);
  if (!ec && fs::is_directory(python, ec)) {
    const std::string before = Getenv("PYTHONPATH");
    site.python_path = before.empty() ? python.string() : python.string() + ":" + before;
  }
  return site;
}

std::optional<std::string> FindExecutable(const std::string& name, const std::string& bin_dir,
                                          const std::string& cwd, const std::string& path_env) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) {
    const fs::path p = fs::path(name).is_absolute() ? fs::path(name) : fs::path(cwd) / name;
    return IsExecutableFile(p) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::vector<std::string> dirs = {bin_dir};
  for (absl::string_view d : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
    dirs.emplace_back(d);
  }
  for (const std::string& dir : dirs) {
    const fs::path p = fs::path(dir) / name;
    if (IsExecutableFile(p)) return p.string();
  }
  return std::nullopt;
}

absl::Status CheckWorkerCommand(const manifest::Job& job, const WorkerSite& site) {
  if (!jobconfig::HasWorkerCommand(job)) return absl::OkStatus();
  RETURN_IF_ERROR(jobconfig::ContainerEnv({}, job.workers.container, kContainerPath).status());
  const std::string& first = job.workers.container.command[0];
  if (first.find("$(") != std::string::npos) return absl::OkStatus();  // known at launch
  if (!FindExecutable(first, site.bin_dir, site.manifest_dir, site.path_env)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kContainerPath, ".command[0]: \"", first, "\" is not an executable ",
        first.find('/') == std::string::npos ? "in " + site.bin_dir + " or on PATH"
                                             : "(relative to " + site.manifest_dir + ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkerLaunch> LaunchFor(const manifest::Job& job, const WorkerSite& site,
                                       const WorkerSlot& slot, const std::string& agent_addr) {
  const jobconfig::EnvList base = BaseEnv(job, site, slot, agent_addr);
  WorkerLaunch launch;
  if (!jobconfig::HasWorkerCommand(job)) {
    launch.argv = DemoTrainerArgv(job, site, slot, agent_addr);
    if (slot.rank == 0) {  // every incarnation of worker-0 evaluates the final model
      launch.argv.insert(launch.argv.end(), {"--eval-out", HeldOutPath(site.work_dir, slot.id)});
    }
    launch.env = {base.begin(), base.end()};
    return launch;
  }
  ASSIGN_OR_RETURN(const jobconfig::EnvList env,
                   jobconfig::ContainerEnv(base, job.workers.container, kContainerPath));
  launch.argv = jobconfig::ContainerArgv(job.workers.container, env);
  launch.env = {env.begin(), env.end()};
  launch.cwd = site.manifest_dir;
  // Not found: left as written, the exec fails and the worker's log says so.
  if (auto path = FindExecutable(launch.argv[0], site.bin_dir, site.manifest_dir, site.path_env)) {
    launch.argv[0] = *path;
  }
  return launch;
}

std::pair<int, int> EphemeralPortRange(const std::string& path) {
  std::ifstream in(path);
  int lo = 0;
  int hi = 0;
  if (!(in >> lo >> hi) || lo < 1 || hi > 65535 || lo > hi) return {32768, 60999};
  return {lo, hi};
}

namespace {

// Binds 127.0.0.1:port (0: the kernel picks) and releases it; the port bound.
absl::StatusOr<int> BindAndRelease(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  close(fd);
  if (!ok) {
    return absl::UnavailableError(absl::StrCat("bind 127.0.0.1:", port, ": ", std::strerror(err)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace

absl::StatusOr<int> PickFreePort(const std::string& range_path) {
  // Below the ephemeral range: between this pick and the rank that binds it
  // later, no outgoing connection or port-0 listener (gloo's, gRPC's) of any
  // process can be given the port by the kernel.
  const int lo = EphemeralPortRange(range_path).first;
  const int first = std::max(1024, lo - 8192);
  if (first < lo) {
    std::mt19937 rng(std::random_device{}());
    std::uniform_int_distribution<int> pick(first, lo - 1);
    for (int attempt = 0; attempt < 64; ++attempt) {
      if (absl::StatusOr<int> port = BindAndRelease(pick(rng)); port.ok()) return port;
    }
  }
  return BindAndRelease(0);
}

}  // namespace antdt::local
