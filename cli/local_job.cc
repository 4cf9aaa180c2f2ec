#include "cli/local_job.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "backends/local/progress.h"
#include "common/config.h"
#include "common/server.h"

namespace antdt::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<bool> g_interrupted{false};

// Why `path` cannot be read, in the system's words ("No such file or
// directory"); ReadFile says only that it cannot.
std::string WhyUnreadable(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  return "read failed";
}

// `named_by`: where the path came from ("--scenario", or the manifest's
// spec.local.scenario), said with the path as resolved.
absl::StatusOr<manifest::Scenario> LoadScenario(const std::string& path,
                                                const std::string& named_by) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(named_by, ": cannot read ", path, ": ", WhyUnreadable(path)));
  }
  auto parsed = manifest::ParseScenario(*text);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.status().message()));
  }
  return *parsed;
}

}  // namespace

std::string BinDir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

absl::StatusOr<LocalJob> LoadLocalJob(const std::string& path, const std::string& scenario_flag) {
  auto text = ReadFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read the manifest: ", WhyUnreadable(path)));
  }
  auto job = manifest::ParseJob(*text);
  if (!job.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", job.status().message()));
  }
  LocalJob local;
  local.job = *std::move(job);
  std::error_code ec;
  local.manifest_dir = fs::absolute(path, ec).parent_path().lexically_normal().string();
  std::string scenario_path = scenario_flag;
  if (scenario_path.empty() && !local.job.local.scenario.empty()) {
    scenario_path = (fs::path(path).parent_path() / local.job.local.scenario).string();
  }
  if (!scenario_path.empty()) {
    auto scenario = LoadScenario(
        scenario_path, scenario_flag.empty() ? absl::StrCat(path, ": spec.local.scenario (\"",
                                                            local.job.local.scenario, "\")")
                                             : std::string("--scenario"));
    if (!scenario.ok()) return scenario.status();
    local.scenario = *std::move(scenario);
    return local;
  }
  // No scenario: one node per worker at full speed, and one spare.
  local.scenario.name = "uniform";
  for (int i = 0; i < local.job.workers.replicas; ++i) {
    local.scenario.nodes.push_back(
        {absl::StrCat("node-", i), 1.0, false, vocab::Role::kWorker, {}});
  }
  local.scenario.nodes.push_back({"spare-0", 1.0, true, vocab::Role::kWorker, {}});
  return local;
}

local::RunOptions RunOptionsFor(const LocalJob& job, const std::string& work_dir, bool quiet) {
  local::RunOptions o;
  o.bin_dir = BinDir();
  o.work_dir = work_dir;
  o.manifest_dir = job.manifest_dir;
  o.interrupted = &g_interrupted;
  const bool tty = isatty(STDOUT_FILENO) && !quiet;
  if (tty) {
    o.on_status = [](const std::string& line) {
      std::printf("\r\033[K%s", line.c_str());
      std::fflush(stdout);
    };
  }
  o.on_event = [tty](const std::string& line) { PrintEvent(line, tty); };
  return o;
}

void PrintEvent(const std::string& line, bool tty) {
  if (!tty) {
    std::printf("%s\n", line.c_str());  // a log or a pipe: one line per event
  } else {
    // Over the progress line, within the terminal's width less one column (as
    // the progress line: a full line wraps in some terminals).
    for (const std::string& piece :
         local::WrapLine(line, local::TerminalColumns(STDOUT_FILENO) - 1)) {
      std::printf("\r\033[K%s\n", piece.c_str());
    }
  }
  std::fflush(stdout);
}

void WatchSignals() {
  std::thread([] {
    WaitForTerminationSignal();
    g_interrupted = true;
  }).detach();
}

}  // namespace antdt::cli
