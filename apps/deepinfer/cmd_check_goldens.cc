// deepinfer check-goldens DIR...: runs the V4.1 golden cases (shared/goldens/v41 format)
// on the CPU reference backend and compares logits, greedy tokens and Engram hash ids.
// deepinfer-cmd-requires: model backend_cpu
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "command.h"
#include "model/golden_check.h"

namespace {

int RunCheckGoldens(int argc, char** argv) {
  CLI::App app{"Check the model against golden logits (shared/goldens/v41 layout)"};
  std::vector<std::string> dirs;
  bool verbose = false;
  app.add_option("dirs", dirs, "case directories, or folders holding case directories")->required();
  app.add_flag("-v,--verbose", verbose, "print every check, not only failures and a summary");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  deepinfer::backend::cpu::CpuBackend backend;
  int passed = 0, failed = 0;
  for (const std::string& dir : dirs) {
    const auto cases = deepinfer::model::FindGoldenCases(dir);
    if (cases.empty()) {
      std::printf("%s: no golden cases found\n", dir.c_str());
      ++failed;
      continue;
    }
    for (const auto& case_dir : cases) {
      auto result = deepinfer::model::RunGoldenCase(case_dir, &backend);
      if (!result.ok()) {
        std::printf("FAIL %s: %s\n", case_dir.string().c_str(), result.status().ToString().c_str());
        ++failed;
        continue;
      }
      for (const auto& check : result->checks) {
        if (verbose || !check.passed) {
          std::printf("  %s %s %s: %s\n", check.passed ? "ok  " : "FAIL", result->case_name.c_str(),
                      check.name.c_str(), check.summary.c_str());
        }
      }
      // Per-case summary: the worst logits error over all checks.
      std::printf("%s %s (%zu checks)\n", result->passed() ? "PASS" : "FAIL",
                  case_dir.string().c_str(), result->checks.size());
      (result->passed() ? passed : failed)++;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

// The command name has a hyphen, so register directly instead of through the macro.
static deepinfer::cli::CommandRegistrar check_goldens_registrar(
    "check-goldens", "check the model against golden logits (shared/goldens/v41 layout)",
    RunCheckGoldens);
