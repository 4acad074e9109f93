// deepinfer recipe-check: runs the recipe conformance vectors (corpus + goldens) and prints
// one line per failing case and a final "N passed, M failed" line. Exit 1 on any failure.
// deepinfer-cmd-requires: recipe
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "command.h"
#include "recipe/conformance.h"

namespace {

int RunRecipeCheck(int argc, char** argv) {
  CLI::App app("Run the recipe conformance cases against their goldens", "deepinfer recipe-check");
  std::string corpus;
  std::string goldens;
  deepinfer::recipe::ConformanceOptions options;
  app.add_option("--corpus", corpus, "corpus.jsonl (one case per line)")->required();
  app.add_option("--goldens", goldens, "goldens .jsonl (reference results, joined by name)")
      ->required();
  app.add_option("--tokenizers", options.tokenizers_dir,
                 "folder with deepseek-v4.1/tokenizer.json and deepseek-v4/tokenizer.json "
                 "(default: the shipped tokenizers)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error) == 0 ? 0 : 2;
  }
  auto report = deepinfer::recipe::RunConformance(corpus, goldens, options);
  if (!report.ok()) {
    std::fprintf(stderr, "recipe-check: %s\n", report.status().ToString().c_str());
    return 2;
  }
  for (const auto& outcome : report->cases) {
    if (!outcome.passed) {
      std::printf("FAIL %s: %s\n", outcome.name.c_str(), outcome.difference.c_str());
    }
  }
  std::printf("%d passed, %d failed\n", report->passed, report->failed);
  return report->failed == 0 ? 0 : 1;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND_NAMED(recipe_check, "recipe-check",
                                 "run recipe conformance cases against goldens", RunRecipeCheck);
