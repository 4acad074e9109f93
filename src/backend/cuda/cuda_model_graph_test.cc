// End to end: decode steps of a random V4.1 checkpoint replayed from captured CUDA graphs
// (CudaBackend::set_graphs) must give the logits of the same steps issued op by op, bitwise,
// and steady-state decode steps must really be replays (the launch shapes of a step repeat:
// see the model's decode-shape contract).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_model_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "model/model.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaModelGraphTest = CudaVsCpuTest;

// Logits of two sequences prefilled one after the other (45 and 70 tokens: past the demo's
// 32-token window and 16-entry top-k), then `steps` decode steps of both in one batch;
// before_step(s) runs before decode step s.
std::vector<float> PrefillThenDecode(model::Model& m, int steps,
                                     const std::function<void(int)>& before_step = {}) {
  model::SequenceState a = m.NewSequence(), b = m.NewSequence();
  const std::vector<int32_t> pa = DemoPrompt(45, 1), pb = DemoPrompt(70, 2);
  for (auto [state, prompt] : {std::pair{&a, &pa}, std::pair{&b, &pb}}) {
    model::ForwardBatch prefill;
    prefill.chunks.push_back({state, std::span(*prompt), 0, false});
    auto out = m.Forward(prefill);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return {};
  }
  return DecodeTwo(m, a, b, steps, before_step);
}

TEST_F(CudaModelGraphTest, DecodeFromGraphsEqualsOpByOpBitwise) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_cuda_model_graph";
  auto m = LoadDemoModel(dir, /*seed=*/12, gpu_.get());
  ASSERT_TRUE(m.ok()) << m.status();

  const int steps = 30;
  constexpr int kSteadyFrom = 6;
  const int64_t vocab = (*m)->config().text().vocab_size;
  for (const bool fp8 : {false, true}) {
    SCOPED_TRACE(fp8 ? "FP8 activations" : "exact");
    gpu_->set_fp8_activations(fp8);
    gpu_->set_graphs(true);
    const StreamTape::Stats before = gpu_->graph_stats();
    StreamTape::Stats steady;  // from step kSteadyFrom on: past the first captures
    const std::vector<float> graphed = PrefillThenDecode(**m, steps, [&](int s) {
      if (s == kSteadyFrom) steady = gpu_->graph_stats();
    });
    const StreamTape::Stats after = gpu_->graph_stats();
    gpu_->set_graphs(false);
    const std::vector<float> eager = PrefillThenDecode(**m, steps);
    gpu_->set_graphs(true);
    ASSERT_TRUE(gpu_->Synchronize().ok());

    ASSERT_EQ(graphed.size(), static_cast<size_t>(2 * steps * vocab));
    ASSERT_EQ(graphed.size(), eager.size());
    EXPECT_EQ(std::memcmp(graphed.data(), eager.data(), graphed.size() * sizeof(float)), 0);
    for (float v : graphed) ASSERT_TRUE(std::isfinite(v));
    const int64_t launches = after.graph_launches - before.graph_launches;
    const int64_t captures = after.graph_captures - before.graph_captures;
    std::printf("decode graphs (%s): %lld launches (%lld captures), %lld op-by-op flushes\n",
                fp8 ? "fp8" : "exact", static_cast<long long>(launches),
                static_cast<long long>(captures),
                static_cast<long long>(after.eager_flushes - before.eager_flushes));
    // Steady state repeats with period 2 (the ratio-2 compressors pool every other step), so
    // after the first captures nearly every kernel runs inside a replayed graph. A step where
    // a standalone sequence takes a new state block (a recorded zero-fill, maybe more
    // block-table slots) differs.
    const int64_t graph_kernels = after.graph_kernels - steady.graph_kernels;
    const int64_t eager_kernels = after.eager_kernels - steady.eager_kernels;
    std::printf("steady steps: %lld kernels in graphs, %lld op by op\n",
                static_cast<long long>(graph_kernels), static_cast<long long>(eager_kernels));
    EXPECT_GE(launches, steps / 2);
    EXPECT_GE(graph_kernels, 9 * eager_kernels);
    // The model's side branches (the window KV and compressor beside q and the indexer's queries,
    // the shared expert beside the routed ones) became branches of the captured graphs.
    const int64_t forked = after.forked_graphs - before.forked_graphs;
    std::printf("captured graphs with side branches: %lld of %lld\n",
                static_cast<long long>(forked), static_cast<long long>(captures));
    EXPECT_GE(forked, 2);
  }
  gpu_->set_fp8_activations(false);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
