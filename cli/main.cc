// antdt: the command line. The subcommands (run, bench stragglers, demo,
// monitor, sim) declare their flags with CLI11 in their *_cmd.cc; here the app,
// --version and the exit codes: 0 after --help or --version, 2 with the help
// when no command is given, 2 with an error naming the flag (and the nearest
// known one, for an unknown flag or command) and the command's usage for a bad
// command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/commands.h"
#include "common/spelling.h"

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

// The subcommands of `cmd`, by name.
std::vector<std::string> SubcommandNames(const CLI::App* cmd) {
  std::vector<std::string> names;
  for (const CLI::App* sub : cmd->get_subcommands([](const CLI::App*) { return true; })) {
    names.push_back(sub->get_name());
  }
  return names;
}

// What `cmd` did not take, one problem a line: each flag it does not know,
// with the nearest it does (`--polcy: unknown flag; did you mean "--policy"?`),
// and a word where a command was expected (`rnu: unknown command; did you
// mean "run"? (one of run, bench, ...)`). None when nothing is left over or
// only positional arguments CLI11 says enough about.
std::vector<std::string> Unexpected(const CLI::App* cmd) {
  std::vector<std::string> long_names;
  for (const CLI::Option* o : cmd->get_options()) {
    for (const std::string& n : o->get_lnames()) long_names.push_back(n);
  }
  const std::vector<std::string> commands = SubcommandNames(cmd);
  std::vector<std::string> out;
  for (const std::string& arg : cmd->remaining()) {
    if (arg.size() > 1 && arg[0] == '-') {
      const std::string flag = arg.substr(0, arg.find('='));
      const bool is_long = flag.rfind("--", 0) == 0;
      out.push_back(
          absl::StrCat(flag, ": unknown flag",
                       is_long ? antdt::DidYouMean(flag.substr(2), long_names, "--") : ""));
    } else if (!commands.empty()) {
      out.push_back(absl::StrCat(arg, ": unknown command", antdt::DidYouMean(arg, commands),
                                 " (one of ", absl::StrJoin(commands, ", "), ")"));
    }
  }
  return out;
}

// A bad command line: "antdt run: <what, naming the flag>" and the usage. An
// unknown flag or command is named first: it is often why a required one
// seems missing (`--jobs x` for `--job x`).
int Fail(const CLI::App& app, const std::string& error) {
  const CLI::App* cmd = Reached(&app);
  const std::string name = FullName(cmd);
  std::vector<std::string> problems = Unexpected(cmd);
  if (problems.empty()) problems.push_back(error);
  for (const std::string& p : problems) std::fprintf(stderr, "%s: %s\n", name.c_str(), p.c_str());
  std::string usage = CLI::Formatter().make_usage(cmd, name);
  while (!usage.empty() && usage.back() == '\n') usage.pop_back();
  std::fprintf(stderr, "%s (%s --help: every flag)\n", usage.c_str(), name.c_str());
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
