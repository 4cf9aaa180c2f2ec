// `antdt demo`: the sharding demo. Worker processes consume a dataset through
// the sharding service while one is SIGKILLed mid-epoch and restarted; prints
// whether every record was committed exactly once.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/local_job.h"
#include "workload/demo/demo_run.h"

namespace antdt::cli {
namespace {

// An integer >= `min`; otherwise CLI11's error names the flag:
// `--workers: must be an integer >= 1, got "0"`. (No description: the help
// says the minimum.)
CLI::Validator AtLeast(int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        int64_t v = 0;
        if (absl::SimpleAtoi(text, &v) && v >= min) return "";
        return absl::StrCat("must be an integer >= ", min, ", got \"", text, "\"");
      },
      "");
}

int Demo(demo::DemoOptions o) {
  o.bin_dir = BinDir();
  const bool tty = isatty(STDOUT_FILENO);
  o.on_status = [tty](const std::string& line) {
    if (tty) std::printf("\r\033[K%s", line.c_str());
    std::fflush(stdout);
  };
  o.on_event = [tty](const std::string& line) { PrintEvent(line, tty); };
  auto result = demo::RunDemo(o);
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

Command AddDemoCommand(CLI::App* parent) {
  CLI::App* app = parent->add_subcommand(
      "demo", "the sharding demo: workers SIGKILLed mid-epoch, every record exactly once");
  app->footer(
      "Worker processes consume a dataset through the sharding service while workers (and,\n"
      "with --service-kills, the service) are SIGKILLed and restarted; prints whether every\n"
      "record was committed exactly once.");
  auto o = std::make_shared<demo::DemoOptions>();
  o->work_dir = "antdt-demo";
  auto number = [&](const char* name, auto* field, int64_t min, const char* help) {
    app->add_option(name, *field, absl::StrCat(help, " (>= ", min, ")"))
        ->type_name("N")
        ->check(AtLeast(min))
        ->capture_default_str();
  };
  number("--workers", &o->workers, 1, "worker processes");
  number("--records", &o->records, 1, "records in the dataset");
  number("--shard-size", &o->shard_size, 1, "records per shard");
  number("--epochs", &o->epochs, 1, "epochs over the dataset");
  number("--worker-kills", &o->worker_kills, 0, "workers SIGKILLed and restarted");
  number("--service-kills", &o->service_kills, 0, "sharding service SIGKILLs and restarts");
  number("--record-us", &o->record_us, 0, "emulated work per record, microseconds");
  number("--seed", &o->seed, 0, "seed of the shuffle and of the kills' timing");
  app->add_option("--work-dir", o->work_dir, "state, journals and logs")
      ->type_name("DIR")
      ->capture_default_str();
  return {app, [o] { return Demo(*o); }};
}

}  // namespace antdt::cli
