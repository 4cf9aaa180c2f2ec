// antdt-bench-agent-monitor: figures for the node agent and the Monitor, each
// beside a baseline measured in the same run.
//  1. Agent overhead: the real antdt-agent (--interval 1s, streaming to a real
//     `antdt monitor`) with 16 workers reporting 10 steps/s each through
//     client::StepReporter: its CPU (% of one core) and resident memory, beside
//     the same agent with no worker; and the workers' ReportStep latency.
//  2. Monitor ingest: monitor::Monitor in process, Ingest + CloseWindows over
//     pre-generated StepReports of one 256-worker job on one thread, beside a
//     protobuf CopyFrom of each report; then reports/s taken in by a real
//     `antdt monitor` on one core (taskset -c 0) over one agent stream: the
//     agent's batched sender (Outbox + MonitorLink) beside one report per
//     stream message (the path before batching), in the same run.
//  2b. The credential gate's cost: the same reports through a MonitorHub (the
//     operator's ingest path) on one thread, without a step gate and with the
//     credential gate (each report's digest compared with the job's).
//  3. Detection quality (computed, not timed), default MonitorConfig: windows
//     from a persistent 2x straggler's onset to PERSISTENT, beside K; false
//     positives of a healthy run with +-10% jitter.
#include "bench/agent_monitor_common.h"

namespace amb = agent_monitor_bench;

int main(int argc, char** argv) {
  auto flags = antdt::ParseFlags(argc, argv, {"seconds", "reports", "work-dir", "bin-dir"},
                                 {"skip-agent", "skip-ingest", "skip-detection"});
  if (!flags.ok()) {
    std::fprintf(stderr, "%s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  std::error_code ec;
  amb::g_bin_dir =
      flags->Get("bin-dir", std::filesystem::read_symlink("/proc/self/exe", ec).parent_path());
  amb::g_work_dir = flags->Get("work-dir", "/tmp/antdt-bench-agent-monitor");
  std::filesystem::create_directories(amb::g_work_dir);
  double seconds = 30;
  int64_t reports = 2'000'000;
  if (!absl::SimpleAtod(flags->Get("seconds", "30"), &seconds) || !(seconds > 0)) {
    std::fprintf(stderr, "--seconds: must be a positive number\n");
    return 2;
  }
  if (!absl::SimpleAtoi(flags->Get("reports", "2000000"), &reports) || reports < 10'000) {
    std::fprintf(stderr, "--reports: must be an integer >= 10000\n");
    return 2;
  }
  std::printf("machine: %u cores; the bench, agent and Monitor share them\n",
              std::thread::hardware_concurrency());
  std::fflush(stdout);
  if (!flags->Has("skip-agent") && !amb::AgentOverhead(seconds)) return 1;
  if (!flags->Has("skip-ingest")) {
    const amb::IngestFigures f = amb::InProcessIngest(reports);
    amb::GateCost(200'000, 5);
    if (!amb::GrpcIngest(std::min(seconds, 5.0), f)) return 1;
  }
  if (!flags->Has("skip-detection")) amb::Detection();
  return 0;
}
