#include <cstdio>

#include "command.h"

namespace {

int RunVersion(int /*argc*/, char** /*argv*/) {
  std::printf("deepinfer 0.1.0\n");
  return 0;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND(version, "print the version", RunVersion);
