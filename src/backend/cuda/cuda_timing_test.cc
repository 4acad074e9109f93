// Per-op device timing (CudaBackend::SetOpTiming / TakeOpTimings) and its labels.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

TEST(CudaOpTimingLabel, StripsLayerAndCollapsesExpert) {
  EXPECT_EQ(OpTimingLabel("RmsNorm", ""), "RmsNorm");
  EXPECT_EQ(OpTimingLabel("Linear", "layers.12.attn.wq_a.weight"), "Linear[attn.wq_a.weight]");
  EXPECT_EQ(OpTimingLabel("Linear", "layers.3.ffn.experts.177.w1.weight"),
            "Linear[ffn.experts.*.w1.weight]");
  EXPECT_EQ(OpTimingLabel("GatherRows", "embed.weight"), "GatherRows[embed.weight]");
  // LinearMany's joined names (CudaBackend::LinearMany).
  EXPECT_EQ(OpTimingLabel("Linear", "layers.2.attn.wq_a.weight+layers.2.attn.wkv.weight"),
            "Linear[attn.wq_a.weight+attn.wkv.weight]");
  EXPECT_EQ(OpTimingLabel("Linear", "mtp.layers.0.ffn.shared_experts.w2.weight"),
            "Linear[mtp.ffn.shared_experts.w2.weight]");
  EXPECT_EQ(OpTimingLabel("Linear", "xlayers.1.w"), "Linear[xlayers.1.w]");  // not a prefix
  EXPECT_EQ(OpTimingLabel("Linear", "layers.x.w"), "Linear[layers.x.w]");    // no index
}

using CudaOpTimingTest = CudaVsCpuTest;

TEST_F(CudaOpTimingTest, CountsCallsPerLabel) {
  const int64_t K = 256, N = 512, T = 2;
  std::vector<uint8_t> data = Fp8Bytes(N * K), scale = Bytes((N / 32) * (K / 32), 118, 122);
  const model::WeightRef wq{"layers.7.attn.wq_a.weight",
                            model::WeightFormat::kFp8Block32,
                            N,
                            K,
                            data.data(),
                            scale.data()};
  model::WeightRef expert = wq;
  expert.name = "layers.2.ffn.experts.17.w1.weight";
  float* x = ToGpu(Normal(T * K));
  float* y = PoisonedFloats(T * N);
  float* rows = PoisonedFloats(2 * K);
  const int64_t ids[2] = {3, 9};

  gpu_->Fill(y, T * N, 0.0f);  // timing off: not recorded
  gpu_->SetOpTiming(true);
  for (int i = 0; i < 3; ++i) gpu_->Fill(y, T * N, 1.0f);
  for (int i = 0; i < 2; ++i) gpu_->Linear(x, T, K, wq, 0, N, y, N, false);
  gpu_->Linear(x, T, K, expert, 0, N, y, N, false);
  gpu_->GatherRows(expert, ids, 2, rows);
  const std::vector<OpTiming> timings = gpu_->TakeOpTimings();
  ASSERT_TRUE(gpu_->Synchronize().ok());

  std::map<std::string, OpTiming> by_label;
  for (const OpTiming& t : timings) by_label[t.label] = t;
  ASSERT_EQ(by_label.size(), 4u);
  EXPECT_EQ(by_label["Fill"].calls, 3);
  EXPECT_EQ(by_label["Linear[attn.wq_a.weight]"].calls, 2);
  EXPECT_EQ(by_label["Linear[ffn.experts.*.w1.weight]"].calls, 1);
  EXPECT_EQ(by_label["GatherRows[ffn.experts.*.w1.weight]"].calls, 1);
  for (const OpTiming& t : timings) EXPECT_GT(t.total_us, 0.0) << t.label;
  for (size_t i = 1; i < timings.size(); ++i) {
    EXPECT_GE(timings[i - 1].total_us, timings[i].total_us);  // sorted, largest first
  }
  EXPECT_TRUE(gpu_->TakeOpTimings().empty());  // taken and cleared

  gpu_->Scale(y, T * N, 2.0f);  // still on: recorded again with pooled events
  const std::vector<OpTiming> again = gpu_->TakeOpTimings();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].label, "Scale");
  EXPECT_EQ(again[0].calls, 1);

  gpu_->SetOpTiming(false);
  gpu_->Fill(y, T * N, 0.0f);
  EXPECT_TRUE(gpu_->TakeOpTimings().empty());
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
