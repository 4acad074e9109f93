// deepinfer make-demo-model DIR [--seed N] [--medium] [--tokenizer FILE]: writes a small
// random-weight DeepSeek-V4.1 checkpoint in the native format (see docs/demo-model.md). Its
// output is random text. Without DIR (--cache) it fills the cache entry that the CLI uses
// when no model is given and prints its path.
// Exit codes: 0 written, 2 usage or I/O error.
// deepinfer-cmd-requires: model
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <string>

#include "base/clock.h"
#include "command.h"
#include "model/demo_model.h"

namespace {

int RunMakeDemoModel(int argc, char** argv) {
  CLI::App app{"Write a small random-weight DeepSeek-V4.1 checkpoint (its output is random text)",
               argv[0]};
  std::string dir;
  uint64_t seed = 0;
  bool medium = false;
  bool cache = false;
  std::string tokenizer;
  app.add_option("DIR", dir, "output directory (created; must not exist or be empty)");
  app.add_option("--seed", seed, "random seed (same seed -> identical files)");
  app.add_flag("--medium", medium, "hidden size 1024 instead of 256 (for benchmarks)");
  app.add_flag("--cache", cache,
               "generate the default demo model into the cache (if missing) and print its path");
  app.add_option("--tokenizer", tokenizer,
                 "the V4.1 tokenizer.json to ship (default: the one shipped with deepinfer)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (cache) {
    const auto path = deepinfer::model::EnsureDemoModel();
    if (!path.ok()) {
      std::fprintf(stderr, "deepinfer make-demo-model: %s\n", path.status().ToString().c_str());
      return 2;
    }
    std::printf("%s\n", path->c_str());
    return 0;
  }
  if (dir.empty()) {
    std::fprintf(stderr, "deepinfer make-demo-model: give DIR (or --cache)\n");
    return 2;
  }
  deepinfer::model::DemoModelOptions options;
  options.seed = seed;
  options.tokenizer_json = tokenizer;
  if (medium) options.size = deepinfer::model::DemoModelSize::Medium();
  deepinfer::base::Stopwatch watch;
  const deepinfer::base::Status status = deepinfer::model::WriteDemoModel(dir, options);
  if (!status.ok()) {
    std::fprintf(stderr, "deepinfer make-demo-model: %s\n", status.ToString().c_str());
    return 2;
  }
  std::printf("wrote a random-weight DeepSeek-V4.1 demo model (seed %llu) to %s in %.1f s\n",
              static_cast<unsigned long long>(seed), dir.c_str(), watch.ElapsedSeconds());
  return 0;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND_NAMED(make_demo_model, "make-demo-model",
                                 "write a small random-weight V4.1 checkpoint (random text output)",
                                 RunMakeDemoModel);
