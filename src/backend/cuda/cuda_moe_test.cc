// MoE routing, SwiGLU, token gather/scatter and the Engram gate against the CPU reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels_moe.h"

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
  cases.push_back({1, 384, 6, true, true, 1.5f});    // decode: the split kernel
  cases.push_back({32, 384, 6, true, true, 1.5f});   // split kernel, T = 32
  cases.push_back({256, 384, 6, true, true, 1.5f});  // split kernel's largest T
  cases.push_back({257, 384, 6, true, true, 1.5f});  // warp kernel from T = 257
  cases.push_back({4, 512, 8, true, true, 1.0f});    // split kernel's limits (16 warps, k 8)
  cases.push_back({3, 257, 8, false, true, 1.0f});   // split kernel, one expert in warp 8
  cases.push_back({2, 1, 1, true, true, 1.0f});      // one expert
  cases.push_back({4, 384, 9, true, true, 1.0f});    // warp kernel (k > 8)
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
// on every kernel (split kernel: T <= 256, <= 512 experts, k <= 8; warp kernel: <= 512
// experts and k <= 32; block kernel otherwise).
TEST_F(CudaMoeTest, RouteSqrtSoftplusTiesGoToLowerIds) {
  struct Case {
    int64_t T, experts, k;
  };
  for (const Case& c : {Case{7, 384, 6}, Case{5, 512, 8}, Case{260, 384, 6}, Case{4, 512, 32},
                        Case{3, 600, 6}, Case{2, 64, 40}}) {
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

// The router's per-token output does not depend on T (batch-invariant mode relies on it):
// the rows routed in a batch of 300 (warp kernel) and as the first 1, 8, 32 and 256 rows
// (split kernel) give the same ids and bitwise the same weights. Normal logits with a bias,
// and tie-heavy integer logits without one.
TEST_F(CudaMoeTest, RouteSqrtSoftplusSameBitsAtEveryT) {
  const int64_t T = 300, experts = 384, k = 6;
  for (bool ties : {false, true}) {
    SCOPED_TRACE(ties ? "integer logits" : "normal logits");
    std::vector<float> logits = Normal(T * experts, 3.0f);
    if (ties) {
      const std::vector<int32_t> ints = Ints(T * experts, -2, 2);
      logits.assign(ints.begin(), ints.end());
    }
    const float* g_logits = ToGpu(logits);
    const float* g_bias = ties ? nullptr : ToGpu(Uniform(experts, -0.3f, 0.3f));
    int32_t* all_e = PoisonedInts(T * k);
    float* all_w = PoisonedFloats(T * k);
    gpu_->RouteSqrtSoftplus(g_logits, g_bias, T, experts, k, true, 2.5f, all_e, all_w);
    const std::vector<int32_t> batch_e = FromGpu(all_e, T * k);
    const std::vector<float> batch_w = FromGpu(all_w, T * k);
    for (int64_t rows : {1, 8, 32, 256}) {
      SCOPED_TRACE(::testing::Message() << "first " << rows << " rows alone");
      int32_t* e = PoisonedInts(rows * k);
      float* w = PoisonedFloats(rows * k);
      gpu_->RouteSqrtSoftplus(g_logits, g_bias, rows, experts, k, true, 2.5f, e, w);
      EXPECT_EQ(FromGpu(e, rows * k),
                std::vector<int32_t>(batch_e.begin(), batch_e.begin() + rows * k));
      EXPECT_TRUE(BitExact(FromGpu(w, rows * k),
                           std::vector<float>(batch_w.begin(), batch_w.begin() + rows * k)));
    }
  }
}

struct RouteShape {
  int64_t T, experts, k;
};
// One shape per router kernel: split (T <= 256, <= 512 experts, k <= 8), warp (k > 8) and
// block (> 512 experts).
constexpr RouteShape kRouteKernelShapes[] = {{5, 384, 6}, {4, 384, 12}, {3, 600, 6}};

// -inf logits (s = 0) and -inf biases (biased score -inf): -inf scores are ordinary values,
// equal to each other, so the lowest ids among them fill the slots the finite scores leave.
TEST_F(CudaMoeTest, RouteSqrtSoftplusNegativeInfinities) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const RouteShape& c : kRouteKernelShapes) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " experts " << c.experts << " k " << c.k);
    std::vector<float> logits = Normal(c.T * c.experts, 3.0f);
    const std::vector<int32_t> pick = Ints(c.T * c.experts, 0, 9);
    for (int64_t i = 0; i < c.T * c.experts; ++i) {
      if (pick[i] == 0) logits[i] = -inf;
    }
    // All but 3 experts biased to -inf: k - 3 slots go to -inf scores (ties by id).
    std::vector<float> bias(c.experts, -inf);
    for (int64_t e : {c.experts / 2, int64_t{7}, c.experts - 1}) bias[e] = 0.25f;
    std::vector<int32_t> experts(c.T * c.k);
    std::vector<float> weights(c.T * c.k);
    cpu_.RouteSqrtSoftplus(logits.data(), bias.data(), c.T, c.experts, c.k, true, 1.0f,
                           experts.data(), weights.data());
    int32_t* ge = PoisonedInts(c.T * c.k);
    float* gw = PoisonedFloats(c.T * c.k);
    gpu_->RouteSqrtSoftplus(ToGpu(logits), ToGpu(bias), c.T, c.experts, c.k, true, 1.0f, ge, gw);
    EXPECT_EQ(FromGpu(ge, c.T * c.k), experts);
    EXPECT_TRUE(AllClose(FromGpu(gw, c.T * c.k), weights, 1e-5, 1e-7));
  }
}

// NaN scores rank below every number (-inf included), NaNs among themselves by id; every
// kernel agrees. Rows with ~10% NaN logits route as the CPU reference does with those
// experts' scores at -inf (no other -inf score, and at least k numbers per row); a row of
// NaN logits picks experts 0..k-1 with NaN weights.
TEST_F(CudaMoeTest, RouteSqrtSoftplusNaNRanksLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const RouteShape& c : kRouteKernelShapes) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " experts " << c.experts << " k " << c.k);
    std::vector<float> logits = Normal(c.T * c.experts, 3.0f);
    const std::vector<float> bias = Uniform(c.experts, -0.3f, 0.3f);
    const std::vector<int32_t> pick = Ints(c.T * c.experts, 0, 9);
    const int64_t nan_row = c.T - 1;  // the last row is all NaN
    std::vector<float> cpu_logits = logits;
    for (int64_t t = 0; t < nan_row; ++t) {
      for (int64_t e = 0; e < c.experts; ++e) {
        if (pick[t * c.experts + e] != 0) continue;
        logits[t * c.experts + e] = (e % 2) ? nan : -nan;  // either sign bit
        cpu_logits[t * c.experts + e] = -inf;              // s = 0: score = bias, finite
      }
    }
    for (int64_t e = 0; e < c.experts; ++e) logits[nan_row * c.experts + e] = nan;
    // CPU reference for the rows before nan_row: NaN experts' scores at -inf via the bias.
    std::vector<int32_t> experts(nan_row * c.k);
    std::vector<float> weights(nan_row * c.k);
    for (int64_t t = 0; t < nan_row; ++t) {
      std::vector<float> row_bias = bias;
      for (int64_t e = 0; e < c.experts; ++e) {
        if (pick[t * c.experts + e] == 0) row_bias[e] = -inf;
      }
      cpu_.RouteSqrtSoftplus(cpu_logits.data() + t * c.experts, row_bias.data(), 1, c.experts, c.k,
                             true, 1.0f, experts.data() + t * c.k, weights.data() + t * c.k);
    }
    int32_t* ge = PoisonedInts(c.T * c.k);
    float* gw = PoisonedFloats(c.T * c.k);
    gpu_->RouteSqrtSoftplus(ToGpu(logits), ToGpu(bias), c.T, c.experts, c.k, true, 1.0f, ge, gw);
    const std::vector<int32_t> got_e = FromGpu(ge, c.T * c.k);
    const std::vector<float> got_w = FromGpu(gw, c.T * c.k);
    EXPECT_EQ(std::vector<int32_t>(got_e.begin(), got_e.begin() + nan_row * c.k), experts);
    EXPECT_TRUE(AllClose(std::vector<float>(got_w.begin(), got_w.begin() + nan_row * c.k), weights,
                         1e-5, 1e-7));
    for (int64_t i = 0; i < c.k; ++i) {
      EXPECT_EQ(got_e[nan_row * c.k + i], i) << "NaN row, slot " << i;
      EXPECT_TRUE(std::isnan(got_w[nan_row * c.k + i])) << "NaN row, slot " << i;
    }
  }
}

// Device time per router call at the V4.1-Flash shape (384 experts, top-6, bias,
// renormalised) for T = 1, 8, 32 (split kernel) and 300 (warp kernel). With
// DEEPINFER_CUDA_ROUTE_SPLIT=0 every T takes the warp kernel (A/B in one binary).
TEST_F(CudaMoeTest, DISABLED_BenchRouter) {
  const int64_t experts = 384, k = 6;
  const float* bias = ToGpu(Uniform(experts, -0.3f, 0.3f));
  for (int64_t T : {1, 8, 32, 300}) {
    const float* logits = ToGpu(Normal(T * experts, 3.0f));
    int32_t* e = PoisonedInts(T * k);
    float* w = PoisonedFloats(T * k);
    const double us = DeviceMicrosPerCall(
        [&] { gpu_->RouteSqrtSoftplus(logits, bias, T, experts, k, true, 2.5f, e, w); });
    std::printf("RouteSqrtSoftplus T=%lld experts=%lld k=%lld: %.2f us/call\n",
                static_cast<long long>(T), static_cast<long long>(experts),
                static_cast<long long>(k), us);
    EXPECT_GT(us, 0.0);
  }
}

// CombineSlots: y[t] = the in-order fp32 sum of its k slot rows (bitwise: a host loop adds in
// the same order), NaN rows for out-of-range ids. D % 4 == 0 takes the float4 kernel (slots
// batched 8 at a time: k = 1, 6, 8, 13 cross the batch edge); D = 30 and an unaligned part
// pointer take the scalar kernel. Tokens 0 and 1 have an out-of-range slot (NaN rows), so
// every case has T >= 3: at least one row of real sums.
TEST_F(CudaMoeTest, CombineSlotsSumsSlotsInOrderBitwise) {
  struct Case {
    int64_t T, k, D;
    bool unaligned;
  };
  for (const Case c : {Case{3, 1, 64, false}, Case{5, 6, 5120, false}, Case{3, 8, 260, false},
                       Case{4, 13, 36, false}, Case{3, 6, 30, false}, Case{3, 6, 64, true}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " k " << c.k << " D " << c.D
                                      << (c.unaligned ? " unaligned" : ""));
    const int64_t n_experts = 16, P = c.T * c.k;
    std::vector<float> part = Normal(P * c.D + 1, 2.0f);
    std::vector<int32_t> experts(P);
    for (int64_t p = 0; p < P; ++p) experts[p] = static_cast<int32_t>((p * 7) % n_experts);
    experts[c.k - 1] = static_cast<int32_t>(n_experts);  // token 0's last slot: out of range
    if (c.T > 1) experts[c.k] = -1;                      // token 1's first slot
    const int64_t off = c.unaligned ? 1 : 0;
    // A finite sentinel (not NaN), so that the NaN rows' check fails if nothing is written.
    float* y = ToGpu(std::vector<float>(c.T * c.D, 12345.0f));
    ASSERT_EQ(kernels::CombineSlots(ToGpu(part) + off, ToGpu(experts), c.T, c.k, n_experts, c.D, y,
                                    gpu_->stream()),
              cudaSuccess);
    const std::vector<float> got = FromGpu(y, c.T * c.D);
    int64_t bad = 0;
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t d = 0; d < c.D; ++d) {
        float sum = 0.0f;
        bool nan_row = false;
        for (int64_t i = 0; i < c.k; ++i) {
          const int32_t e = experts[t * c.k + i];
          if (e < 0 || e >= n_experts) {
            nan_row = true;
          } else {
            sum += part[off + (t * c.k + i) * c.D + d];
          }
        }
        const float g = got[t * c.D + d];
        const bool ok = nan_row ? std::isnan(g) : std::memcmp(&g, &sum, 4) == 0;
        if (!ok && bad++ < 5) {
          ADD_FAILURE() << "t " << t << " d " << d << ": " << g << " expected "
                        << (nan_row ? std::numeric_limits<float>::quiet_NaN() : sum);
        }
      }
    }
    EXPECT_EQ(bad, 0);
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
