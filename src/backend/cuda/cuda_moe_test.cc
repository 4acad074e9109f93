// MoE routing, SwiGLU, token gather/scatter and the Engram gate against the CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaMoeTest = CudaVsCpuTest;

TEST_F(CudaMoeTest, RouteSqrtSoftplus) {
  struct Case {
    int64_t T, experts, k;
    bool renormalise, bias;
    float scale;
  };
  std::vector<Case> cases = {{1, 8, 1, true, false, 1.0f},
                             {5, 8, 2, true, true, 2.5f},
                             {7, 12, 3, false, true, 1.5f},
                             {3, 33, 33, true, true, 1.0f}};
  if (!SmallOnly()) cases.push_back({9, 384, 6, true, true, 1.5f});  // V4.1-Flash router
  if (!SmallOnly()) cases.push_back({300, 384, 6, true, true, 1.5f});
  cases.push_back({6, 512, 32, true, true, 1.0f});   // the warp kernel's limits
  cases.push_back({5, 40, 32, false, false, 2.0f});  // k = 32 of few experts
  cases.push_back({3, 513, 6, true, true, 1.0f});    // block kernel (experts > 512)
  cases.push_back({2, 100, 40, true, false, 1.0f});  // block kernel (k > 32)
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " experts " << c.experts << " k " << c.k);
    const std::vector<float> logits = Normal(c.T * c.experts, 3.0f);
    const std::vector<float> bias = Uniform(c.experts, -0.3f, 0.3f);
    std::vector<int32_t> experts(c.T * c.k);
    std::vector<float> weights(c.T * c.k);
    cpu_.RouteSqrtSoftplus(logits.data(), c.bias ? bias.data() : nullptr, c.T, c.experts, c.k,
                           c.renormalise, c.scale, experts.data(), weights.data());
    int32_t* ge = PoisonedInts(c.T * c.k);
    float* gw = PoisonedFloats(c.T * c.k);
    gpu_->RouteSqrtSoftplus(ToGpu(logits), c.bias ? ToGpu(bias) : nullptr, c.T, c.experts, c.k,
                            c.renormalise, c.scale, ge, gw);
    EXPECT_EQ(FromGpu(ge, c.T * c.k), experts);
    EXPECT_TRUE(AllClose(FromGpu(gw, c.T * c.k), weights, 1e-5, 1e-7));
  }
}

// Many exact ties (logits from a few integers, no bias): the lower expert id wins each tie,
// on both kernels (warp kernel: <= 512 experts and k <= 32; block kernel otherwise).
TEST_F(CudaMoeTest, RouteSqrtSoftplusTiesGoToLowerIds) {
  struct Case {
    int64_t T, experts, k;
  };
  for (const Case& c : {Case{7, 384, 6}, Case{4, 512, 32}, Case{3, 600, 6}, Case{2, 64, 40}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " experts " << c.experts << " k " << c.k);
    const std::vector<int32_t> ints = Ints(c.T * c.experts, -2, 2);
    const std::vector<float> logits(ints.begin(), ints.end());
    std::vector<int32_t> experts(c.T * c.k);
    std::vector<float> weights(c.T * c.k);
    cpu_.RouteSqrtSoftplus(logits.data(), nullptr, c.T, c.experts, c.k, true, 1.0f, experts.data(),
                           weights.data());
    int32_t* ge = PoisonedInts(c.T * c.k);
    float* gw = PoisonedFloats(c.T * c.k);
    gpu_->RouteSqrtSoftplus(ToGpu(logits), nullptr, c.T, c.experts, c.k, true, 1.0f, ge, gw);
    EXPECT_EQ(FromGpu(ge, c.T * c.k), experts);
    EXPECT_TRUE(AllClose(FromGpu(gw, c.T * c.k), weights, 1e-5, 1e-7));
  }
}

TEST_F(CudaMoeTest, SwiGluWithAndWithoutClamp) {
  for (auto [T, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {7, 64}, {3, 2304}}) {
    for (float limit : {0.0f, 10.0f, 0.5f}) {
      for (bool scaled : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << T << " x " << n << " limit " << limit << (scaled ? " row-scaled" : ""));
        const std::vector<float> gate = Normal(T * n, 4.0f), up = Normal(T * n, 4.0f),
                                 row_scale = Uniform(T, 0.0f, 1.0f);
        std::vector<float> expected(T * n);
        cpu_.SwiGlu(gate.data(), up.data(), T, n, limit, scaled ? row_scale.data() : nullptr,
                    expected.data());
        float* h = PoisonedFloats(T * n);
        gpu_->SwiGlu(ToGpu(gate), ToGpu(up), T, n, limit, scaled ? ToGpu(row_scale) : nullptr, h);
        EXPECT_TRUE(AllClose(FromGpu(h, T * n), expected, 1e-5, 1e-6));
      }
    }
  }
}

TEST_F(CudaMoeTest, GatherAndScatterTokenRows) {
  const int64_t tokens = 11, ld = 70, width = 64;
  const std::vector<float> x = Normal(tokens * ld);
  for (bool unique : {true, false}) {
    SCOPED_TRACE(unique ? "distinct rows" : "repeated rows");
    const std::vector<int32_t> rows =
        unique ? std::vector<int32_t>{3, 0, 10, 7, 5} : std::vector<int32_t>{3, 3, 0, 10, 3, 0};
    const int64_t n = static_cast<int64_t>(rows.size());
    std::vector<float> gathered(n * width);
    cpu_.GatherTokenRows(x.data(), ld, rows.data(), n, width, gathered.data());
    float* gg = PoisonedFloats(n * width);
    gpu_->GatherTokenRows(ToGpu(x), ld, rows.data(), n, width, gg);
    EXPECT_TRUE(BitExact(FromGpu(gg, n * width), gathered));

    const std::vector<float> v = Normal(n * width);
    std::vector<float> y = x;
    float* gy = ToGpu(y);
    cpu_.ScatterAddRows(v.data(), n, width, rows.data(), y.data(), ld);
    gpu_->ScatterAddRows(ToGpu(v), n, width, rows.data(), gy, ld);
    EXPECT_TRUE(BitExact(FromGpu(gy, tokens * ld), y));  // same adds in the same order
  }
}

TEST_F(CudaMoeTest, EngramGate) {
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 32}, {3, 96}, {5, 160}};
  if (!SmallOnly()) shapes.push_back({4, 5120});
  const int64_t hc = 4;
  for (auto [T, D] : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << T << " D " << D);
    std::vector<float> x = Normal(T * hc * D);
    const std::vector<float> key = Normal(T * hc * D, 2.0f), value = Normal(T * D),
                             qw = Normal(hc * D), kw = Normal(hc * D);
    float* gx = ToGpu(x);
    gpu_->EngramGate(gx, ToGpu(key), ToGpu(value), ToGpu(qw), ToGpu(kw), T, hc, D, 1e-6f);
    cpu_.EngramGate(x.data(), key.data(), value.data(), qw.data(), kw.data(), T, hc, D, 1e-6f);
    EXPECT_TRUE(AllClose(FromGpu(gx, T * hc * D), x, 1e-5, 1e-5));
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
