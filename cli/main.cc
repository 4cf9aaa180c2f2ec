// antdt: the command line. `antdt demo` runs the sharding demo job on this
// machine; more commands (run, bench) come with the local runner.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/strings/numbers.h"
#include "common/config.h"
#include "common/server.h"
#include "examples/demo/demo_run.h"

namespace antdt::cli {
int MonitorCommand(int argc, char** argv);
int RunCommand(int argc, char** argv);
int BenchCommand(int argc, char** argv);
}  // namespace antdt::cli

namespace {

constexpr const char* kUsage = R"(usage: antdt COMMAND [flags]

commands:
  run     run an AntDTJob on this machine: sharding service, one agent per
          emulated node, Monitor and Controller, parameter servers and workers.
          Workers run the built-in demo trainer, or the command of the
          manifest's worker template with the ANTDT_* and PyTorch rendezvous
          variables (docs/local-runner.md).
          antdt run JOB.yaml [--report DIR] [--work-dir DIR] [--policy NAME]
                             [--scenario FILE] [--no-slowdown]
          --policy plain: the job without AntDT (a worker command only).
  bench   antdt bench stragglers --job JOB.yaml [--scenario FILE]
                --policies antdt-nd,none,plain,backup-workers,lb-bsp --out DIR
          runs the job under each policy and once with no slowdown; plain is
          the job without AntDT (torch's DistributedSampler, no journal).
          Writes results.json, results.md, chart.svg (JCT) and loss.svg.
  demo    run the sharding demo: worker processes consume a dataset through
          the sharding service while one is SIGKILLed mid-epoch and restarted;
          prints whether every record was committed exactly once.
          flags: --workers N [4] --records N [20000] --shard-size N [100]
                 --epochs N [2] --worker-kills N [1] --service-kills N [0]
                 --record-us N [200] --seed N [1] --work-dir DIR [./antdt-demo]
  monitor the Monitor service on its own: agents stream to it, GetJobHealth
          answers per-worker straggler scores, classes and causes.
          flags: --listen HOST:PORT [127.0.0.1:7071] --ready-file PATH
                 --metrics-listen HOST:PORT --config FILE (window, thresholds)
                 --tick DURATION [200ms]
)";

std::string SelfDir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : p.parent_path().string();
}

int Demo(int argc, char** argv) {
  auto flags = antdt::ParseFlags(argc, argv,
                                 {"workers", "records", "shard-size", "epochs", "worker-kills",
                                  "service-kills", "record-us", "seed", "work-dir"});
  if (!flags.ok()) {
    std::fprintf(stderr, "antdt demo: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  antdt::demo::DemoOptions o;
  o.bin_dir = SelfDir();
  o.work_dir = flags->Get("work-dir", "antdt-demo");
  struct IntFlag {
    const char* name;
    int64_t min;
    std::function<void(int64_t)> set;
  };
  std::vector<IntFlag> ints = {
      {"workers", 1, [&](int64_t v) { o.workers = static_cast<int>(v); }},
      {"records", 1, [&](int64_t v) { o.records = v; }},
      {"shard-size", 1, [&](int64_t v) { o.shard_size = v; }},
      {"epochs", 1, [&](int64_t v) { o.epochs = static_cast<int32_t>(v); }},
      {"worker-kills", 0, [&](int64_t v) { o.worker_kills = static_cast<int>(v); }},
      {"service-kills", 0, [&](int64_t v) { o.service_kills = static_cast<int>(v); }},
      {"record-us", 0, [&](int64_t v) { o.record_us = v; }},
      {"seed", 0, [&](int64_t v) { o.seed = static_cast<uint64_t>(v); }},
  };
  for (const IntFlag& f : ints) {
    if (!flags->Has(f.name)) continue;
    int64_t v = 0;
    if (!absl::SimpleAtoi(flags->Get(f.name), &v) || v < f.min) {
      std::fprintf(stderr, "antdt demo: --%s: must be an integer >= %lld, got \"%s\"\n", f.name,
                   static_cast<long long>(f.min), flags->Get(f.name).c_str());
      return 2;
    }
    f.set(v);
  }
  const bool tty = isatty(STDOUT_FILENO);
  o.on_status = [tty](const std::string& line) {
    if (tty) std::printf("\r\033[K%s", line.c_str());
    std::fflush(stdout);
  };
  o.on_event = [tty](const std::string& line) {
    std::printf(tty ? "\r\033[K%s\n" : "%s\n", line.c_str());
    std::fflush(stdout);
  };
  auto result = antdt::demo::RunDemo(o);
  if (!result.ok()) {
    std::fprintf(stderr, "\nantdt demo: %s\n", std::string(result.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", tty ? "\r\033[K" : "");
  std::printf("demo finished in %.1f s: %d worker kill(s), %d service kill(s), %lld requeues\n",
              result->seconds, result->worker_kills, result->service_kills,
              static_cast<long long>(result->progress.requeues()));
  std::printf("checked from the workers' journals of acknowledged commits:\n%s",
              result->verification.Summary().c_str());
  std::printf("logs, journals and state: %s\n", o.work_dir.c_str());
  return result->verification.exactly_once() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const std::string cmd = argv[1];
  if (cmd == "demo") return Demo(argc - 1, argv + 1);
  if (cmd == "run" || cmd == "bench") {
    antdt::BlockTerminationSignals();
    return cmd == "run" ? antdt::cli::RunCommand(argc - 1, argv + 1)
                        : antdt::cli::BenchCommand(argc - 1, argv + 1);
  }
  if (cmd == "monitor") {
    antdt::BlockTerminationSignals();
    return antdt::cli::MonitorCommand(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "antdt: unknown command \"%s\"\n%s", cmd.c_str(), kUsage);
  return 2;
}
