// HcCollapseNorm (the mHC collapse and the RMSNorm after it in one kernel) against the two
// kernels it replaces, bitwise, on both outputs: shapes where RmsNorm holds rows in registers
// (fused), one where it does not (D % 4 != 0: the two kernels), with and without a weight;
// and against the CPU backend (the default: the two ops) within fp32 rounding.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

class CudaHcCollapseNormTest : public CudaVsCpuTest {};

TEST_F(CudaHcCollapseNormTest, EqualsCollapseThenRmsNormBitwise) {
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

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
