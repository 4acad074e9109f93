// deepinfer: DeepSeek-V4.1 inference engine and API server.
//   deepinfer <command> [options]     (deepinfer help lists the commands)
#include <cstdio>
#include <cstring>
#include <string>

#include "command.h"

namespace {

void PrintUsage() {
  std::fprintf(stderr, "usage: deepinfer <command> [options]\n\ncommands:\n");
  for (const auto& command : deepinfer::cli::Commands()) {
    std::fprintf(stderr, "  %-18s %s\n", command.name.c_str(), command.help.c_str());
  }
  std::fprintf(stderr, "\nRun 'deepinfer <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "help") == 0 || std::strcmp(argv[1], "--help") == 0 ||
      std::strcmp(argv[1], "-h") == 0) {
    PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& command : deepinfer::cli::Commands()) {
    if (command.name == argv[1]) {
      std::string program = std::string("deepinfer ") + argv[1];
      argv[1] = program.data();
      return command.run(argc - 1, argv + 1);
    }
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n", argv[1]);
  PrintUsage();
  return 2;
}
