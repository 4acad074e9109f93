#include "command.h"

#include <algorithm>

namespace deepinfer::cli {

std::vector<Command>& Commands() {
  static std::vector<Command> commands;
  return commands;
}

CommandRegistrar::CommandRegistrar(const char* name, const char* help, CommandFn run) {
  auto& commands = Commands();
  commands.push_back(Command{name, help, run});
  std::sort(commands.begin(), commands.end(),
            [](const Command& a, const Command& b) { return a.name < b.name; });
}

}  // namespace deepinfer::cli
