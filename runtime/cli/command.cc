// The subcommand registry.
#include "cli/command.h"

#include <algorithm>
#include <mutex>

namespace infergate::runtime::cli {
namespace {

std::vector<Command>& registry() {
  static std::vector<Command> r;
  return r;
}

}  // namespace

bool register_command(Command command) {
  registry().push_back(std::move(command));
  return true;
}

std::vector<Command> commands() {
  std::vector<Command> out = registry();
  std::sort(out.begin(), out.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  return out;
}

}  // namespace infergate::runtime::cli
