// make_bench_model: writes the GPU benchmark's random-weight checkpoint (bench_model_spec.h).
//
//   make_bench_model --out DIR [--layers-preset flash4] [--scale real|tiny] [--seed N]
//                    [--threads N] [--tokenizer PATH] [--verify]
//
// Prints one summary line (bytes per storage class, total, seconds). Exit 0 on success (and a
// passing --verify), 1 on a generation error, 2 on bad arguments.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "bench/gpu/bench_model_spec.h"

int main(int argc, char** argv) {
  using namespace deepinfer;
  CLI::App app{"Writes a random-weight DeepSeek-V4.1-Flash-shaped checkpoint for GPU benchmarks"};
  std::string out;
  std::string scale_text = "real";
  bench::BenchModelOptions options;
  app.add_option("--out", out, "output directory (created; must not exist or be empty)")
      ->required();
  app.add_option("--layers-preset", options.preset, "layer schedule (flash4)");
  app.add_option("--scale", scale_text, "real (release sizes, ~32 GB) | tiny (tests)");
  app.add_option("--seed", options.seed, "random seed");
  app.add_option("--threads", options.threads, "worker threads (0 = all cores)");
  bool verify = false;
  app.add_flag(
      "--verify", verify,
      "afterwards, check the files (config, tensor names/dtypes/shapes, Engram constants)");
  app.add_option("--tokenizer", options.tokenizer_json,
                 "V4.1 tokenizer.json (default: the bundled one)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const base::StatusOr<bench::BenchScale> scale = bench::ParseBenchScale(scale_text);
  if (!scale.ok()) {
    std::fprintf(stderr, "make_bench_model: %s\n", scale.status().ToString().c_str());
    return 2;
  }
  options.scale = *scale;
  const base::StatusOr<bench::BenchModelSummary> summary = bench::WriteBenchModel(out, options);
  if (!summary.ok()) {
    std::fprintf(stderr, "make_bench_model: %s\n", summary.status().ToString().c_str());
    return 1;
  }
  std::printf("%s\n", summary->ToString().c_str());
  if (verify) {
    const base::StatusOr<int64_t> checked = bench::VerifyBenchModel(out);
    if (!checked.ok()) {
      std::fprintf(stderr, "make_bench_model: verify: %s\n", checked.status().ToString().c_str());
      return 1;
    }
    std::printf("make_bench_model: verify ok (%lld tensors)\n", static_cast<long long>(*checked));
  }
  return 0;
}
