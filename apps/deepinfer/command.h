// Subcommand registry of the `deepinfer` CLI.
//
// A subcommand file (apps/deepinfer/cmd_<name>.cc) defines
//   int RunFoo(int argc, char** argv);   // argv[0] is "deepinfer foo"
//   DEEPINFER_REGISTER_COMMAND(foo, "one-line help", RunFoo);
// and is picked up by the build automatically. Exit codes: 0 success, 1 a check failed,
// 2 usage or input error.
#pragma once

#include <string>
#include <vector>

namespace deepinfer::cli {

using CommandFn = int (*)(int argc, char** argv);

struct Command {
  std::string name;
  std::string help;
  CommandFn run;
};

// Sorted by name.
std::vector<Command>& Commands();

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* help, CommandFn run);
};

}  // namespace deepinfer::cli

#define DEEPINFER_REGISTER_COMMAND(name, help, fn) \
  static ::deepinfer::cli::CommandRegistrar deepinfer_cmd_registrar_##name(#name, help, fn)

// For command names that are not C++ identifiers ("check-goldens"): `id` names the registrar.
#define DEEPINFER_REGISTER_COMMAND_NAMED(id, name, help, fn) \
  static ::deepinfer::cli::CommandRegistrar deepinfer_cmd_registrar_##id(name, help, fn)
