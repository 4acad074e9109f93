// Prefill and decode throughput of the V4.1 forward on the CPU backend.
//
//   BM_Prefill/<model>/<tokens>: one prompt of <tokens> tokens from an empty sequence, logits
//     of the last token only. items_per_second = prompt tokens/s.
//   BM_Decode/<model>/<context>: one token per forward after a <context>-token prefill (not
//     timed), 16 steps per iteration. items_per_second = generated tokens/s.
// <model>: 0 = demo (hidden 256), 1 = medium (hidden 1024); both 8 layers, vocab 129,280,
// generated (seed 0) into $TMPDIR at start-up and deleted at exit.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/demo_model.h"
#include "model/engram_hash.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

struct LoadedModel {
  backend::cpu::CpuBackend backend;
  std::unique_ptr<Model> model;
};

fs::path BenchRoot() {
  static const fs::path root =
      fs::temp_directory_path() / ("cpu_model_bench_" + std::to_string(::getpid()));
  return root;
}

// Generates and loads model `index` once; CHECK-fails on error (a benchmark cannot go on).
LoadedModel& GetModel(int index) {
  static std::unique_ptr<LoadedModel> models[2];
  if (!models[index]) {
    const fs::path dir = BenchRoot() / (index == 0 ? "demo" : "medium");
    DemoModelOptions options;
    if (index == 1) options.size = DemoModelSize::Medium();
    CHECK_OK(WriteDemoModel(dir, options));
    auto config = io::LoadModelConfig(dir / "config.json");
    CHECK_OK(config.status());
    auto engram = DeriveEngramHashConstants(config->text_config, (dir / "tokenizer.json").string());
    CHECK_OK(engram.status());
    models[index] = std::make_unique<LoadedModel>();
    auto model = Model::Load(dir, &models[index]->backend, *engram);
    CHECK_OK(model.status());
    models[index]->model = std::move(*model);
  }
  return *models[index];
}

std::vector<int32_t> Prompt(int64_t n) {
  std::vector<int32_t> tokens = {0};
  for (int64_t i = 1; i < n; ++i) tokens.push_back(static_cast<int32_t>(1000 + 7919 * i % 120000));
  return tokens;
}

void RunChunk(Model& model, SequenceState& seq, std::span<const int32_t> tokens) {
  ForwardBatch batch;
  batch.chunks.push_back({&seq, tokens, seq.length, false});
  auto out = model.Forward(batch);
  CHECK_OK(out.status());
  benchmark::DoNotOptimize(out->logits.data());
}

void BM_Prefill(benchmark::State& state) {
  Model& model = *GetModel(static_cast<int>(state.range(0))).model;
  const std::vector<int32_t> prompt = Prompt(state.range(1));
  for (auto _ : state) {
    SequenceState seq = model.NewSequence();
    RunChunk(model, seq, prompt);
  }
  state.SetItemsProcessed(state.iterations() * state.range(1));
}

void BM_Decode(benchmark::State& state) {
  constexpr int kSteps = 16;
  Model& model = *GetModel(static_cast<int>(state.range(0))).model;
  const std::vector<int32_t> prompt = Prompt(state.range(1));
  for (auto _ : state) {
    state.PauseTiming();
    SequenceState seq = model.NewSequence();
    RunChunk(model, seq, prompt);
    state.ResumeTiming();
    for (int step = 0; step < kSteps; ++step) {
      const int32_t token = static_cast<int32_t>(2000 + 104729 * step % 100000);
      RunChunk(model, seq, std::span<const int32_t>(&token, 1));
    }
  }
  state.SetItemsProcessed(state.iterations() * kSteps);
}

BENCHMARK(BM_Prefill)
    ->ArgNames({"model", "tokens"})
    ->Args({0, 128})
    ->Args({0, 512})
    ->Args({1, 128})
    ->Args({1, 512})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_Decode)
    ->ArgNames({"model", "context"})
    ->Args({0, 128})
    ->Args({1, 128})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace deepinfer::model

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  std::filesystem::remove_all(deepinfer::model::BenchRoot(), ec);
  return 0;
}
