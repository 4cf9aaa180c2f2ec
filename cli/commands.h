// The subcommands of `antdt`. Each Add*Command declares its subcommand (flags,
// defaults, checks, help) on the parent CLI11 app and returns what runs it
// once the command line has been parsed.
#pragma once

#include <functional>

namespace CLI {
class App;
}  // namespace CLI

namespace antdt::cli {

struct Command {
  CLI::App* app;             // the subcommand; app->parsed() when it was given
  std::function<int()> run;  // the command's exit code
};

Command AddRunCommand(CLI::App* parent);
Command AddBenchCommand(CLI::App* parent);  // `antdt bench stragglers`
Command AddDemoCommand(CLI::App* parent);
Command AddMonitorCommand(CLI::App* parent);
Command AddSimCommand(CLI::App* parent);  // `antdt sim`

}  // namespace antdt::cli
