// Fused backend ops against the kernels they replace, bitwise, and against the CPU backend
// (whose defaults make the separate calls):
// - HcCollapseNorm (the mHC collapse and the RMSNorm after it): shapes where RmsNorm holds
//   rows in registers (fused), ones where it does not (the two kernels), with and without a
//   weight;
// - RopeFakeQuant (RoPE then QAT fake-quantisation): the model's four uses (window KV FP8,
//   indexer q / keys FP4, compressed entries FP4 block 16), offsets 0 and > 0, and a
//   non-fusable head (the two kernels).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

class CudaFusedOpsTest : public CudaVsCpuTest {};

TEST_F(CudaFusedOpsTest, EqualsCollapseThenRmsNormBitwise) {
  struct Shape {
    int64_t T, hc, D;
  };
  std::vector<Shape> shapes = {{1, 4, 64}, {3, 2, 160}, {9, 1, 40}, {5, 4, 42}, {33, 3, 128}};
  if (!SmallOnly()) shapes.insert(shapes.end(), {{1, 4, 5120}, {32, 4, 5120}, {2, 4, 9000}});
  const float eps = 1e-6f;
  for (const Shape& s : shapes) {
    for (bool with_weight : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "T " << s.T << " hc " << s.hc << " D " << s.D
                                        << (with_weight ? " weight" : " no weight"));
      const std::vector<float> x = Normal(s.T * s.hc * s.D), pre = Uniform(s.T * s.hc, -1, 2);
      const std::vector<float> weight = Uniform(s.D, 0.5f, 1.5f);
      const float* gx = ToGpu(x);
      const float* gpre = ToGpu(pre);
      const float* gw = with_weight ? ToGpu(weight) : nullptr;
      float *u0 = PoisonedFloats(s.T * s.D), *y = PoisonedFloats(s.T * s.D);
      gpu_->HcCollapseNorm(gx, gpre, s.T, s.hc, s.D, gw, eps, u0, y);
      float *u0_ref = PoisonedFloats(s.T * s.D), *y_ref = PoisonedFloats(s.T * s.D);
      gpu_->HcCollapse(gx, gpre, s.T, s.hc, s.D, u0_ref);
      gpu_->RmsNorm(u0_ref, s.T, s.D, s.D, gw, eps, y_ref, s.D);
      const std::vector<float> got_u0 = FromGpu(u0, s.T * s.D), got_y = FromGpu(y, s.T * s.D);
      EXPECT_TRUE(BitExact(got_u0, FromGpu(u0_ref, s.T * s.D)));
      EXPECT_TRUE(BitExact(got_y, FromGpu(y_ref, s.T * s.D)));
      std::vector<float> cpu_u0(s.T * s.D), cpu_y(s.T * s.D);
      cpu_.HcCollapseNorm(x.data(), pre.data(), s.T, s.hc, s.D,
                          with_weight ? weight.data() : nullptr, eps, cpu_u0.data(), cpu_y.data());
      EXPECT_TRUE(AllClose(got_u0, cpu_u0, 1e-5, 1e-5));
      EXPECT_TRUE(AllClose(got_y, cpu_y, 1e-4, 1e-5));
    }
  }
}

TEST_F(CudaFusedOpsTest, RopeFakeQuantEqualsRopeThenFakeQuantBitwise) {
  using model::FakeQuantKind;
  struct Case {
    int64_t rows, heads, head_dim, rd;
    FakeQuantKind kind;
  };
  const Case cases[] = {{3, 1, 512, 64, FakeQuantKind::kFp8Block32Pow2},
                        {5, 8, 128, 64, FakeQuantKind::kFp4Block32Pow2},
                        {4, 1, 512, 64, FakeQuantKind::kFp4Block16E4m3},
                        {2, 3, 64, 64, FakeQuantKind::kFp8Block32Pow2},   // offset 0
                        {33, 2, 96, 32, FakeQuantKind::kFp4Block32Pow2},  // 3 chunks a head
                        {3, 2, 48, 16, FakeQuantKind::kFp4Block16E4m3}};  // not fusable
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "rows " << c.rows << " heads " << c.heads << " dim " << c.head_dim << " rd "
                 << c.rd << " kind " << static_cast<int>(c.kind));
    const int64_t n = c.rows * c.heads * c.head_dim, pairs = c.rd / 2, offset = c.head_dim - c.rd;
    const std::vector<float> x = Normal(n, 3.0f);
    const std::vector<int32_t> pos = Ints(c.rows, 0, 40000);
    std::vector<float> inv_freq(pairs);
    for (int64_t i = 0; i < pairs; ++i) {
      inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(c.rd));
    }
    const int32_t* gpos = ToGpu(pos);
    const float* freq = inv_freq.data();  // host memory, as the backend's Rope takes it
    float* fused = ToGpu(x);
    float* separate = ToGpu(x);
    gpu_->RopeFakeQuant(fused, c.rows, c.heads, c.head_dim, offset, pairs, gpos, freq, c.kind);
    gpu_->Rope(separate, c.rows, c.heads * c.head_dim, c.heads, c.head_dim, offset, pairs, gpos,
               freq, false);
    std::vector<float> roped = FromGpu(separate, n);
    gpu_->FakeQuant(separate, c.rows * c.heads, c.head_dim, c.head_dim, c.kind);
    const std::vector<float> got = FromGpu(fused, n);
    EXPECT_TRUE(BitExact(got, FromGpu(separate, n)));
    EXPECT_FALSE(BitExact(got, x));  // it did rotate and quantise
    // The CPU's fake quantisation of the GPU's RoPE output (the CPU's own cosf / sinf may
    // differ in the last bits): the same values, bitwise.
    cpu_.FakeQuant(roped.data(), c.rows * c.heads, c.head_dim, c.head_dim, c.kind);
    EXPECT_TRUE(BitExact(got, roped));
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
