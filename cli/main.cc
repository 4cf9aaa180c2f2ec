// antdt: the command line. The subcommands (run, bench stragglers, demo,
// monitor, sim) declare their flags with CLI11 in their *_cmd.cc; here the app,
// --version and the exit codes: 0 after --help or --version, 2 with the help
// when no command is given, 2 with an error naming the flag and the command's
// usage for a bad command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

constexpr const char* kDescription =
    "AntDT: straggler control for distributed training. `antdt run JOB.yaml` runs an AntDTJob "
    "on this machine; `antdt COMMAND --help` tells each command's flags.";

// The deepest subcommand the arguments reached (the app itself when none).
const CLI::App* Reached(const CLI::App* app) {
  const std::vector<CLI::App*> subs = app->get_subcommands();
  return subs.empty() ? app : Reached(subs.front());
}

// "antdt bench stragglers"
std::string FullName(const CLI::App* app) {
  const CLI::App* parent = app->get_parent();
  return parent == nullptr ? app->get_name() : FullName(parent) + " " + app->get_name();
}

// A bad command line: "antdt run: <what, naming the flag>" and the usage.
int Fail(const CLI::App& app, const std::string& message) {
  const CLI::App* cmd = Reached(&app);
  const std::string name = FullName(cmd);
  std::string usage = CLI::Formatter().make_usage(cmd, name);
  while (!usage.empty() && usage.back() == '\n') usage.pop_back();
  std::fprintf(stderr, "%s: %s\n%s (%s --help: every flag)\n", name.c_str(), message.c_str(),
               usage.c_str(), name.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(kDescription, "antdt");
  app.set_version_flag("--version", "antdt " ANTDT_VERSION, "print antdt's version and exit");
  const std::vector<antdt::cli::Command> commands = {
      antdt::cli::AddRunCommand(&app), antdt::cli::AddBenchCommand(&app),
      antdt::cli::AddDemoCommand(&app), antdt::cli::AddMonitorCommand(&app),
      antdt::cli::AddSimCommand(&app)};
  if (argc == 2 && std::string(argv[1]) == "help") {  // `antdt help`, as before CLI11
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return Fail(app, e.what());
  }
  for (const antdt::cli::Command& c : commands) {
    if (c.app->parsed()) return c.run();
  }
  std::fputs(app.help().c_str(), stderr);  // no command
  return 2;
}
