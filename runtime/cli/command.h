// The runtime binary's subcommands. Each cli/*.cc file registers its commands from a static
// initializer (the files are compiled into the executable itself, so none is dropped by the linker).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace infergate::runtime::cli {

// Configures the subcommand's options on `sub` and returns the action to run when it is chosen;
// the action's return value is the process exit code.
using Setup = std::function<std::function<int()>(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string description;
  Setup setup;
};

// Adds a command; returns true so that it can initialise a static.
bool register_command(Command command);
// Every registered command, sorted by name.
std::vector<Command> commands();

}  // namespace infergate::runtime::cli
