// infergate-runtime: parses the command line and runs the chosen subcommand (see cli/).
#include <CLI/CLI.hpp>
#include <map>
#include <string>

#include "cli/command.h"
#include "infergate/common/log.h"

int main(int argc, char** argv) {
  namespace log = infergate::log;
  CLI::App app{"infergate-runtime: the bundled inference runtime"};
  app.require_subcommand(1);
  std::string log_level = "info", log_format = "text";
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"debug", "info", "warn", "error"}));
  app.add_option("--log-format", log_format, "text or json")->check(CLI::IsMember({"text", "json"}));
  std::map<CLI::App*, std::function<int()>> actions;
  for (const auto& command : infergate::runtime::cli::commands()) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    actions[sub] = command.setup(*sub);
  }
  // A command line we cannot parse is a usage error: exit 2, whatever CLI11's own code for it (scripts
  // and the eval Job's contract rely on 2); --help and --version exit 0.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  log::Level level;
  log::Format format;
  if (log::parse_level(log_level, &level)) log::set_level(level);
  if (log::parse_format(log_format, &format)) log::set_format(format);
  for (auto& [sub, action] : actions) {
    if (sub->parsed()) return action();
  }
  return 2;
}
