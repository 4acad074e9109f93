// Host-side SampleToken on one row of V = 129,280 logits (the DeepSeek-V4.1 vocabulary).
//
// Logits: normal(0, 2) plus a few peaked tokens (a realistic decode row). Each iteration
// samples one row at a fresh position, so the uniform draw changes. Cases:
//   BM_Temperature        temperature 0.8 only
//   BM_TopP               + top_p 0.95
//   BM_TopK               + top_k 50
//   BM_TopPTopKMinP       top_p 0.9, top_k 40, min_p 0.05
//   BM_TopPLogprobs       top_p 0.95, logprobs, top_logprobs 5
//   BM_Penalties          repetition 1.1, frequency 0.3, presence 0.2 over a 2k-token history
//   BM_BroadTopP          top_p 0.95, temperature 1, no peaked tokens (a high-entropy row:
//                         the nucleus is ~1/3 of the vocabulary)
//   BM_FlatTopP           top_p 0.95 at temperature 100 (nearly flat: the worst case)
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/sampling.h"

namespace deepinfer::engine {
namespace {

constexpr int kVocab = 129280;

std::vector<float> MakeLogits(bool peaked) {
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> l(kVocab);
  for (float& v : l) v = normal(rng);
  const int peaks[] = {17, 4242, 9001, 65000, 128000};
  for (int i = 0; peaked && i < 5; ++i) l[static_cast<size_t>(peaks[i])] = 14.0f - 1.0f * i;
  return l;
}

const std::vector<float>& Logits(bool peaked = true) {
  static const std::vector<float> with_peaks = MakeLogits(true);
  static const std::vector<float> without_peaks = MakeLogits(false);
  return peaked ? with_peaks : without_peaks;
}

const std::vector<TokenId>& History() {
  static const std::vector<TokenId> history = [] {
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<TokenId> token(0, kVocab - 1);
    std::vector<TokenId> h(2048);
    for (TokenId& t : h) t = token(rng);
    return h;
  }();
  return history;
}

void Run(benchmark::State& state, const SamplingParams& params, bool with_history,
         bool peaked = true) {
  const std::vector<float>& logits = Logits(peaked);
  const std::span<const TokenId> history =
      with_history ? std::span<const TokenId>(History()) : std::span<const TokenId>();
  // Prompt = the first half of the history, output = the second half.
  const std::span<const TokenId> prompt = history.subspan(0, history.size() / 2);
  const std::span<const TokenId> output = history.subspan(history.size() / 2);
  int64_t position = 0;
  for (auto _ : state) {
    const SampleContext ctx{1234, 0, position++, prompt, output};
    Sampled s = SampleToken(logits, params, ctx);
    benchmark::DoNotOptimize(s);
  }
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

SamplingParams Temperature(float t) {
  SamplingParams p;
  p.temperature = t;
  return p;
}

void BM_Temperature(benchmark::State& state) { Run(state, Temperature(0.8f), false); }

void BM_TopP(benchmark::State& state) {
  SamplingParams p = Temperature(0.8f);
  p.top_p = 0.95f;
  Run(state, p, false);
}

void BM_TopK(benchmark::State& state) {
  SamplingParams p = Temperature(0.8f);
  p.top_k = 50;
  Run(state, p, false);
}

void BM_TopPTopKMinP(benchmark::State& state) {
  SamplingParams p = Temperature(0.8f);
  p.top_p = 0.9f;
  p.top_k = 40;
  p.min_p = 0.05f;
  Run(state, p, false);
}

void BM_TopPLogprobs(benchmark::State& state) {
  SamplingParams p = Temperature(0.8f);
  p.top_p = 0.95f;
  p.logprobs = true;
  p.top_logprobs = 5;
  Run(state, p, false);
}

void BM_Penalties(benchmark::State& state) {
  SamplingParams p = Temperature(0.8f);
  p.repetition_penalty = 1.1f;
  p.frequency_penalty = 0.3f;
  p.presence_penalty = 0.2f;
  Run(state, p, true);
}

void BM_BroadTopP(benchmark::State& state) {
  SamplingParams p = Temperature(1.0f);
  p.top_p = 0.95f;
  Run(state, p, false, /*peaked=*/false);
}

void BM_FlatTopP(benchmark::State& state) {
  SamplingParams p = Temperature(100.0f);
  p.top_p = 0.95f;
  Run(state, p, false);
}

BENCHMARK(BM_Temperature)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopK)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopPTopKMinP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_TopPLogprobs)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Penalties)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_BroadTopP)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FlatTopP)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer::engine

BENCHMARK_MAIN();
