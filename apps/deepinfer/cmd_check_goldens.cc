// deepinfer check-goldens [--backend cpu|cuda[:N]] DIR...: runs the V4.1 golden cases
// (shared/goldens/v41 format) on a backend (default: the CPU reference) and compares logits,
// greedy tokens and Engram hash ids. Ends with "N passed, M failed"; exit 1 on any failure.
// deepinfer-cmd-requires: model backend_factory
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/factory.h"
#include "command.h"
#include "model/golden_check.h"

namespace {

using deepinfer::model::GoldenCaseResult;

void PrintCase(const std::string& case_dir, const GoldenCaseResult& result, bool verbose) {
  double max_abs = 0.0, max_rel = 0.0;
  for (const auto& check : result.checks) {
    max_abs = std::max(max_abs, check.max_abs);
    max_rel = std::max(max_rel, check.max_rel);
    if (verbose || !check.passed) {
      std::printf("  %s %s %s: %s\n", check.passed ? "ok  " : "FAIL", result.case_name.c_str(),
                  check.name.c_str(), check.summary.c_str());
    }
  }
  std::printf("%s %s (%zu checks, logits max_abs %.3g max_rel %.3g)\n",
              result.passed() ? "PASS" : "FAIL", case_dir.c_str(), result.checks.size(), max_abs,
              max_rel);
}

int RunCheckGoldens(int argc, char** argv) {
  CLI::App app{"Check the model against golden logits (shared/goldens/v41 layout)"};
  std::vector<std::string> dirs;
  bool verbose = false;
  std::string backend_name = "cpu";
  app.add_option("dirs", dirs, "case directories, or folders holding case directories")->required();
  app.add_flag("-v,--verbose", verbose, "print every check, not only failures and a summary");
  app.add_option("--backend", backend_name, "compute backend: cpu, cuda or cuda:N")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto backend = deepinfer::backend::CreateBackend(backend_name);
  if (!backend.ok()) {
    std::printf("backend: %s\n", backend.status().ToString().c_str());
    return 2;
  }
  int passed = 0, failed = 0;
  for (const std::string& dir : dirs) {
    const auto cases = deepinfer::model::FindGoldenCases(dir);
    if (cases.empty()) {
      std::printf("%s: no golden cases found\n", dir.c_str());
      ++failed;
      continue;
    }
    for (const auto& case_dir : cases) {
      auto result = deepinfer::model::RunGoldenCase(case_dir, backend->get());
      if (!result.ok()) {
        std::printf("FAIL %s: %s\n", case_dir.string().c_str(), result.status().ToString().c_str());
        ++failed;
        continue;
      }
      PrintCase(case_dir.string(), *result, verbose);
      (result->passed() ? passed : failed)++;
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND_NAMED(
    check_goldens, "check-goldens",
    "check the model against golden logits (shared/goldens/v41 layout)", RunCheckGoldens);
