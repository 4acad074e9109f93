// deepinfer inspect --model DIR|ID: architecture summary, parameter counts by part, bytes by
// dtype, and validation of every expected checkpoint tensor (model.md §4.2).
// Exit codes: 0 all expected tensors valid, 1 missing/extra/mismatched tensors, 2 usage or
// input error (unreadable config, malformed checkpoint, model not found).
// deepinfer-cmd-requires: io
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "command.h"
#include "io/inspect.h"
#include "io/model_resolve.h"

namespace {

int RunInspect(int argc, char** argv) {
  CLI::App app{"Summarise and validate a DeepSeek-V4.1 model directory", argv[0]};
  std::string model;
  int max_listed = 50;
  bool skip_scale_scan = false;
  app.add_option("--model", model,
                 "model directory or Hugging Face id (default: DEEPINFER_HF_MODEL_DIR or the "
                 "HF cache entry of deepseek-ai/DeepSeek-V4.1-Flash-1017)");
  app.add_option("--max-listed", max_listed, "list at most this many tensors per problem kind")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--skip-scale-scan", skip_scale_scan,
               "do not read every F8_E8M0 scale to reject NaN (255) bytes");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const auto dir = deepinfer::io::ResolveModelDir(model, deepinfer::io::ResolveEnv::FromProcess());
  if (!dir.ok()) {
    std::fprintf(stderr, "deepinfer inspect: %s\n", dir.status().ToString().c_str());
    return 2;
  }
  deepinfer::io::InspectOptions options;
  options.scan_scales = !skip_scale_scan;
  const auto report = deepinfer::io::InspectModel(*dir, options);
  if (!report.ok()) {
    std::fprintf(stderr, "deepinfer inspect: %s\n", report.status().ToString().c_str());
    return 2;
  }
  std::fputs(deepinfer::io::FormatInspectReport(*report, max_listed).c_str(), stdout);
  return report->valid() ? 0 : 1;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND(inspect, "summarise and validate a model directory", RunInspect);
