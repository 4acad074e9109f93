// requests/s and generated tokens/s of the Engine vs batch size.
//
//   BM_SchedulerOverhead/<batch>: FakeModelRunner (vocab 256, no model math): what the
//     scheduler, sampling over a tiny vocabulary and the engine loop cost per step.
//   BM_DemoModel/<batch>: the embedded demo model on the CPU backend (ModelRunnerV41).
// Every request: 32 prompt tokens, max_tokens generated (greedy, EOS ignored); all `batch`
// requests are submitted together and the benchmark times until all are done.
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model_runner.h"
#ifdef DEEPINFER_ENGINE_BENCH_MODEL
#include "engine/model_engine.h"
#endif

namespace deepinfer::engine {
namespace {

std::vector<Request> MakeRequests(int batch, int prompt_len, int max_tokens, int vocab) {
  std::vector<Request> requests;
  for (int i = 0; i < batch; ++i) {
    Request r;
    for (int k = 0; k < prompt_len; ++k) r.prompt.push_back((i * 31 + k * 7 + 3) % vocab);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    requests.push_back(std::move(r));
  }
  return requests;
}

void Run(benchmark::State& state, Engine& engine, const std::vector<Request>& requests) {
  int64_t tokens = 0;
  for (auto _ : state) {
    for (const EngineResult& r : engine.Generate(requests)) {
      tokens += static_cast<int64_t>(r.result.samples.at(0).tokens.size());
    }
  }
  state.counters["requests/s"] = benchmark::Counter(
      static_cast<double>(state.iterations() * static_cast<int64_t>(requests.size())),
      benchmark::Counter::kIsRate);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}

void BM_SchedulerOverhead(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  constexpr int kVocab = 256;
  EngineConfig c;
  c.layout.window = 4;
  c.layout.num_window_layers = 1;
  c.layout.window_row_bytes = 8;
  c.layout.groups = {{.source_layer = 0,
                      .ratio = 2,
                      .entry_bytes = 4,
                      .index_key_bytes = 1,
                      .partial_row_bytes = 8}};
  c.layout.block_tokens = 16;
  c.num_slots = batch;
  c.num_blocks = batch * 4;
  c.scheduler.max_tokens_per_step = std::max(256, batch);
  c.scheduler.max_model_len = 64;
  auto engine =
      Engine::Create(c, std::make_unique<FakeModelRunner>(kVocab, c.num_slots, c.num_blocks, 16));
  if (!engine.ok()) return state.SkipWithError(engine.status().ToString().c_str());
  Run(state, **engine, MakeRequests(batch, 32, 32, kVocab));
}
BENCHMARK(BM_SchedulerOverhead)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->Arg(64)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#ifdef DEEPINFER_ENGINE_BENCH_MODEL
void BM_DemoModel(benchmark::State& state) {
  static auto* loaded = [] {
    auto l = LoadModelForEngine("");
    CHECK(l.ok()) << l.status();
    return new LoadedModel(std::move(*l));
  }();
  const int batch = static_cast<int>(state.range(0));
  ModelEngineOptions options;
  options.num_slots = batch;
  options.max_model_len = 128;
  auto engine = MakeModelEngine(*loaded, options);
  if (!engine.ok()) return state.SkipWithError(engine.status().ToString().c_str());
  Run(state, **engine, MakeRequests(batch, 32, 16, 129280));
}
BENCHMARK(BM_DemoModel)
    ->Arg(1)
    ->Arg(4)
    ->Arg(16)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
#endif

}  // namespace
}  // namespace deepinfer::engine

BENCHMARK_MAIN();
