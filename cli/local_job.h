// What `antdt run` and `antdt bench` share: the manifest and its scenario
// loaded, the runner's options, Ctrl-C; and where the AntDT binaries are.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "api/manifest/manifest.h"
#include "backends/local/runner.h"

namespace antdt::cli {

struct LocalJob {
  manifest::Job job;
  manifest::Scenario scenario;
  std::string manifest_dir;  // absolute: a worker command's working directory
};

// The directory of this executable, where the other AntDT binaries are ("."
// when /proc/self/exe cannot be read).
std::string BinDir();

// The manifest at `path` and its scenario (`scenario_flag`, else
// spec.local.scenario beside the manifest, else one node per worker and a
// spare); errors name the file and field, or why a file cannot be read.
absl::StatusOr<LocalJob> LoadLocalJob(const std::string& path, const std::string& scenario_flag);

// Options for a run of `job` in `work_dir`: progress on a terminal unless
// `quiet`, events on stdout, interrupted by WatchSignals().
local::RunOptions RunOptionsFor(const LocalJob& job, const std::string& work_dir, bool quiet);

// An event line on stdout: on a terminal (`tty`) over the progress line and
// wrapped to its width (local::WrapLine), else as it is, one line per event.
void PrintEvent(const std::string& line, bool tty);

// Ctrl-C / SIGTERM: the runner sees the flag, stops every child and returns.
void WatchSignals();

}  // namespace antdt::cli
