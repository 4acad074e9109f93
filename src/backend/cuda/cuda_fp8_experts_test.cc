// The routed experts in the FP8-activation mode (CudaBackend::RoutedExperts with
// set_fp8_activations): the FP8 tile path (kernels::RoutedExpertsFp8; batch-invariant mode,
// FP8 weights, or set_experts_bf16_min_tokens(0)) and, by default outside batch-invariant
// mode, the bf16 path (kernels::RoutedExpertsBf16; its wgmma kernel here, its streaming
// kernel in cuda_moe_stream_test.cc), against a per-token CPU reference that quantises x and
// h the same way; the wgmma kernel's variants (moe_bf16::WgmmaVariant: shared-memory or register
// weight operand) against each other, bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/moe_bf16_internal.cuh"

namespace deepinfer::backend::cuda::testing {
namespace {

namespace moe_bf16 = kernels::moe_bf16;
using moe_bf16::WgmmaVariant;

// kSs first: the others are compared with it.
constexpr WgmmaVariant kWgmmaVariants[] = {WgmmaVariant::kSs, WgmmaVariant::kRs,
                                           WgmmaVariant::kRs2};

// The streaming kernel switched off: the bf16 path runs its wgmma kernel at every T.
class WgmmaAtEveryT : public ScopedEnv {
 public:
  WgmmaAtEveryT() : ScopedEnv("DEEPINFER_EXPERTS_STREAM_MAX_PAIRS", "0") {}
};

// Every wgmma launch uses variant v for the object's lifetime (SetWgmmaVariantOverride).
class ForcedWgmmaVariant {
 public:
  explicit ForcedWgmmaVariant(WgmmaVariant v) { moe_bf16::SetWgmmaVariantOverride(&v); }
  ~ForcedWgmmaVariant() { moe_bf16::SetWgmmaVariantOverride(nullptr); }
  ForcedWgmmaVariant(const ForcedWgmmaVariant&) = delete;
  ForcedWgmmaVariant& operator=(const ForcedWgmmaVariant&) = delete;
};

class CudaFp8ExpertsTest : public CudaFp8Test {
 protected:
  // Runs all T tokens, then for each n in `tails` the last n of them alone: each such run
  // must give bitwise the full run's last n rows (a token's row depends on no other token).
  void ExpectTailsMatchFullRun(const Experts& ex, const std::vector<float>& x, int64_t T,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               int64_t k, std::initializer_list<int64_t> tails) {
    const std::vector<float> all = RunGpu(ex, x, T, ids, weights, k, 7.0f);
    for (int64_t n : tails) {
      const std::vector<float> xs(x.end() - n * ex.D, x.end());
      const std::vector<int32_t> is(ids.end() - n * k, ids.end());
      const std::vector<float> ws(weights.end() - n * k, weights.end());
      const std::vector<float> got = RunGpu(ex, xs, n, is, ws, k, 7.0f);
      EXPECT_TRUE(BitExact(got, std::vector<float>(all.end() - n * ex.D, all.end()))) << n;
    }
  }

  // Per token and slot: xq = FakeQuant(x), h = SwiGlu(W1 xq, W3 xq) * weight,
  // hq = FakeQuant(h), out = W2 hq; slots summed in order (cuda_test_util.h).
  std::vector<float> Reference(const Experts& ex, const std::vector<float>& x, int64_t T,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               int64_t k, float limit) {
    return RoutedExpertsReference(cpu_, ex.table, ex.D, ex.I, x, T, ids, weights, k, limit,
                                  /*fp8_activations=*/true);
  }

  std::vector<float> RunGpu(const Experts& ex, const std::vector<float>& x, int64_t T,
                            const std::vector<int32_t>& ids, const std::vector<float>& weights,
                            int64_t k, float limit) {
    gpu_->set_fp8_activations(true);
    model::RoutedExpertsArgs a;
    a.x = ToGpu(x), a.T = T, a.D = ex.D, a.experts = ToGpu(ids), a.weights = ToGpu(weights);
    a.k = k, a.table = ex.table.data(), a.n_experts = static_cast<int64_t>(ex.table.size());
    a.swiglu_limit = limit;
    a.y = PoisonedFloats(T * ex.D);
    EXPECT_TRUE(gpu_->CanFuseRoutedExperts(T, ex.table[0]));
    gpu_->RoutedExperts(a);
    return FromGpu(a.y, T * ex.D);
  }
};

// The FP8 tile (kernels::RoutedExpertsFp8; the bf16 path is switched off: it is the default
// for MXFP4 at every T outside batch-invariant mode).
TEST_F(CudaFp8ExpertsTest, MatchesCpuReference) {
  gpu_->set_experts_bf16_min_tokens(0);
  for (WeightFormat f : {WeightFormat::kMxFp4, WeightFormat::kFp8Block32}) {
    const Experts ex = MakeExperts(16, f, 256, 384);
    for (int64_t T : {1, 7, 65, 100, 150, 600}) {  // item widths 8, 8, 32, 64, 96, 128
      SCOPED_TRACE(::testing::Message() << model::WeightFormatName(f) << " T " << T);
      const int64_t k = 6;
      const std::vector<float> x = Normal(T * ex.D, 4.0f);
      const std::vector<int32_t> ids = Route(T, k, 16);
      const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
      const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 7.0f);
      const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, 7.0f);
      EXPECT_TRUE(RelL2Close(got, expected, 5e-3));
      EXPECT_TRUE(AllClose(got, expected, 2e-2, 2e-2 * MaxAbs(expected)));
    }
  }
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

// On the FP8 tile, a token's row is bitwise the same alone and inside batches of 8, 64 and
// 600 tokens.
TEST_F(CudaFp8ExpertsTest, BatchInvariantBitwise) {
  gpu_->set_experts_bf16_min_tokens(0);
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t k = 6, T = 600;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  ExpectTailsMatchFullRun(ex, x, T, ids, weights, k, {1, 8, 64});
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

TEST_F(CudaFp8ExpertsTest, RealV41ShapeDecode) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  gpu_->set_experts_bf16_min_tokens(0);  // the FP8 tile
  const Experts ex = MakeExperts(24, WeightFormat::kMxFp4, 5120, 2304);
  const int64_t T = 4, k = 6;
  const std::vector<float> x = Normal(T * ex.D);
  const std::vector<int32_t> ids = Route(T, k, 24);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 0.5f);
  const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 7.0f);
  EXPECT_TRUE(RelL2Close(RunGpu(ex, x, T, ids, weights, k, 7.0f), expected, 5e-3));
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

// --- routed experts on bf16 tensor cores (k_moe_bf16.cu) ----------------------------------

// The bf16 path (from 1 token here) matches the reference on fake-quantised operands, for
// item widths 64 (T 40 and 100: ~15 and ~38 pairs per expert), 96 (T 200) and 128 (T 600),
// with MXFP4 scale bytes that
// reach both dequantisation branches (S <= 128 and S > 128) and outputs far from 1; it is
// not the FP8 tile's result (a different fp32 summation), and it repeats bitwise.
TEST_F(CudaFp8ExpertsTest, Bf16PathMatchesCpuReference) {
  for (const auto& [lo, hi] : {std::pair{118, 124}, std::pair{100, 140}}) {
    const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384, lo, hi);
    for (int64_t T : {40, 100, 200, 600}) {
      SCOPED_TRACE(::testing::Message() << "scales " << lo << ".." << hi << " T " << T);
      const int64_t k = 6;
      const std::vector<float> x = Normal(T * ex.D, 4.0f);
      const std::vector<int32_t> ids = Route(T, k, 16);
      const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
      const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 7.0f);
      gpu_->set_experts_bf16_min_tokens(0);
      const std::vector<float> tile = RunGpu(ex, x, T, ids, weights, k, 7.0f);
      gpu_->set_experts_bf16_min_tokens(1);
      const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, 7.0f);
      const std::vector<float> again = RunGpu(ex, x, T, ids, weights, k, 7.0f);
      gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
      EXPECT_TRUE(RelL2Close(got, expected, 5e-3));
      EXPECT_TRUE(AllClose(got, expected, 2e-2, 2e-2 * MaxAbs(expected)));
      EXPECT_FALSE(BitExact(got, tile)) << "the bf16 path did not run";
      EXPECT_TRUE(BitExact(got, again));
    }
  }
}

// Within the bf16 path's wgmma kernel (every variant) a token's row does not depend on the other
// tokens or on the item width (T 600: items of 128 pairs; T 200: 96; T 100 and 8: 64). The
// streaming kernel (which T 8 would take by default) is switched off; cuda_moe_stream_test.cc tests
// it.
TEST_F(CudaFp8ExpertsTest, Bf16PathRowsIndependentOfBatch) {
  const WgmmaAtEveryT wgmma_only;
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t k = 6, T = 600;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  gpu_->set_experts_bf16_min_tokens(1);
  for (WgmmaVariant v : kWgmmaVariants) {
    SCOPED_TRACE(moe_bf16::WgmmaVariantName(v));
    const ForcedWgmmaVariant forced(v);
    ExpectTailsMatchFullRun(ex, x, T, ids, weights, k, {8, 100, 200});
  }
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

// Batch-invariant mode never takes the bf16 path: the FP8 tile's bits at any threshold.
TEST_F(CudaFp8ExpertsTest, BatchInvariantModeKeepsFp8Tile) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t k = 6, T = 100;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  gpu_->set_experts_bf16_min_tokens(0);
  const std::vector<float> tile = RunGpu(ex, x, T, ids, weights, k, 7.0f);
  gpu_->set_experts_bf16_min_tokens(1);
  gpu_->set_batch_invariant(true);
  const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, 7.0f);
  gpu_->set_batch_invariant(false);
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
  EXPECT_TRUE(BitExact(got, tile));
}

TEST_F(CudaFp8ExpertsTest, Bf16PathRealV41Shape) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  const Experts ex = MakeExperts(24, WeightFormat::kMxFp4, 5120, 2304);
  const int64_t T = 64, k = 6;
  const std::vector<float> x = Normal(T * ex.D);
  const std::vector<int32_t> ids = Route(T, k, 24);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 0.5f);
  const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 7.0f);
  gpu_->set_experts_bf16_min_tokens(1);
  const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, 7.0f);
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
  EXPECT_TRUE(RelL2Close(got, expected, 5e-3));
}

// The error is sticky in the backend, so this test runs on a backend of its own.
TEST_F(CudaFp8ExpertsTest, OutOfRangeIdGivesNanRowAndError) {
  const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, 256, 256);
  const int64_t T = 3, k = 2;
  const std::vector<float> x = Normal(T * ex.D);
  const std::vector<int32_t> ids = {0, 1, 2, 8, 3, 4};  // token 1 has id 8 of 8 experts
  const std::vector<float> weights = Uniform(T * k, 0.1f, 1.0f);
  // Threshold 0: the FP8 tile (cuda_moe_stream_test.cc: the bf16 path).
  const ExpertsRun run = RunExpertsOnOwnBackend(ex.table, ex.D, x, T, ids, weights, k, 0);
  EXPECT_FALSE(run.status.ok());
  EXPECT_NE(run.status.ToString().find("expert id"), std::string::npos) << run.status;
  const std::vector<float>& y = run.y;
  ASSERT_EQ(y.size(), static_cast<size_t>(T * ex.D));
  for (int64_t d = 0; d < ex.D; ++d) {
    EXPECT_TRUE(std::isnan(y[ex.D + d])) << d;
    EXPECT_TRUE(std::isfinite(y[d]) && std::isfinite(y[2 * ex.D + d])) << d;
  }
}

// --- variants of the wgmma kernel (moe_bf16::WgmmaVariant) ----------------------------------

// Names, the environment and the test override pick the variant; rs2 serves items of <= 96 pairs.
TEST(WgmmaVariantTest, PickedByOverrideThenEnvironment) {
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant(nullptr), WgmmaVariant::kRs);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant(""), WgmmaVariant::kRs);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("bogus"), WgmmaVariant::kRs);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("SS"), WgmmaVariant::kRs);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("ss"), WgmmaVariant::kSs);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("rs"), WgmmaVariant::kRs);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("rs2"), WgmmaVariant::kRs2);
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("rs-nofence"), WgmmaVariant::kRs);  // removed: unknown
  EXPECT_EQ(moe_bf16::ParseWgmmaVariant("rs2-nofence"), WgmmaVariant::kRs);
  for (WgmmaVariant v : kWgmmaVariants) {
    EXPECT_EQ(moe_bf16::ParseWgmmaVariant(moe_bf16::WgmmaVariantName(v)), v);
  }
  {
    const ScopedEnv unset(moe_bf16::kWgmmaVariantEnv, nullptr);
    for (int bn : {64, 80, 96, 128}) EXPECT_EQ(moe_bf16::PickWgmmaVariant(bn), WgmmaVariant::kRs);
  }
  {
    const ScopedEnv ss(moe_bf16::kWgmmaVariantEnv, "ss");
    for (int bn : {64, 80, 96, 128}) EXPECT_EQ(moe_bf16::PickWgmmaVariant(bn), WgmmaVariant::kSs);
  }
  const ScopedEnv rs2(moe_bf16::kWgmmaVariantEnv, "rs2");
  EXPECT_EQ(moe_bf16::PickWgmmaVariant(64), WgmmaVariant::kRs2);
  EXPECT_EQ(moe_bf16::PickWgmmaVariant(80), WgmmaVariant::kRs2);
  EXPECT_EQ(moe_bf16::PickWgmmaVariant(96), WgmmaVariant::kRs2);
  EXPECT_EQ(moe_bf16::PickWgmmaVariant(128), WgmmaVariant::kRs);
  {
    const ForcedWgmmaVariant forced(WgmmaVariant::kRs2);
    const ScopedEnv ss(moe_bf16::kWgmmaVariantEnv, "ss");  // the override wins
    EXPECT_EQ(moe_bf16::PickWgmmaVariant(96), WgmmaVariant::kRs2);
    EXPECT_EQ(moe_bf16::PickWgmmaVariant(128), WgmmaVariant::kRs);
  }
  {
    const ForcedWgmmaVariant forced(WgmmaVariant::kSs);
    for (int bn : {64, 80, 96, 128}) EXPECT_EQ(moe_bf16::PickWgmmaVariant(bn), WgmmaVariant::kSs);
  }
  EXPECT_EQ(moe_bf16::PickWgmmaVariant(64), WgmmaVariant::kRs2);  // the environment again
}

class CudaWgmmaVariantTest : public CudaFp8ExpertsTest {
 protected:
  // Random routing over experts 0 .. n - 3, then token 0's first slot on expert n - 1: expert
  // n - 2 gets no pair, n - 1 exactly one, the others many.
  std::vector<int32_t> RouteIdleAndSingle(int64_t T, int64_t k, int64_t n) {
    std::vector<int32_t> ids = Route(T, k, n - 2);
    ids[0] = static_cast<int32_t>(n - 1);  // token 0's other slots are < n - 2
    return ids;
  }

  // Runs the bf16 path's wgmma kernel (the streaming kernel off) in every variant on one
  // problem: each within the tolerances of the CPU reference (so a failure tells a numerics
  // difference from a broken kernel), each repeating bitwise, every RS variant bitwise equal
  // to the SS kernel.
  void ExpectVariantsAgree(const Experts& ex, int64_t T, int64_t k) {
    const int64_t n = static_cast<int64_t>(ex.table.size());
    const std::vector<float> x = Normal(T * ex.D, 4.0f);
    const std::vector<int32_t> ids = RouteIdleAndSingle(T, k, n);
    const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
    const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 7.0f);
    const WgmmaAtEveryT wgmma_only;
    gpu_->set_experts_bf16_min_tokens(1);
    std::vector<float> ss;
    for (WgmmaVariant v : kWgmmaVariants) {
      SCOPED_TRACE(moe_bf16::WgmmaVariantName(v));
      const ForcedWgmmaVariant forced(v);
      const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, 7.0f);
      EXPECT_TRUE(RelL2Close(got, expected, 5e-3));
      EXPECT_TRUE(AllClose(got, expected, 2e-2, 2e-2 * MaxAbs(expected)));
      if (v == WgmmaVariant::kSs) {
        ss = got;
      } else {
        EXPECT_TRUE(BitExact(got, ss)) << "differs from the SS kernel";
      }
      EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, 7.0f), got)) << "repeats";
    }
    gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
  }
};

// Short K (4 and 6 stages: the ring never wraps), 16 experts: T 7 and 101 (items of 64 pairs),
// 203 (96), 601 (128), scale bytes on both dequantisation branches (S <= 128 and S > 128) and
// up to exactly 128 (the RS kernel's fast loop at its largest factor, 2^127).
TEST_F(CudaWgmmaVariantTest, ShortKAllItemWidths) {
  for (const auto& [lo, hi] : {std::pair{118, 124}, std::pair{100, 140}, std::pair{123, 128}}) {
    const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384, lo, hi);
    for (int64_t T : {7, 101, 203, 601}) {
      SCOPED_TRACE(::testing::Message() << "scales " << lo << ".." << hi << " T " << T);
      ExpectVariantsAgree(ex, T, 6);
    }
  }
}

// Long K (18 stages up, 10 down: the ring wraps), a partial 256-row block (D = 1152 rows in the
// down GEMM), 8 experts: T 41 (items of 64 pairs), 91 (96), 151 (128).
TEST_F(CudaWgmmaVariantTest, LongKPartialRowBlock) {
  // Scale bytes 110..132 take the RS kernel's general loop (some byte > 128), 118..124 its fast
  // loop (every byte <= 128: the real checkpoints' case).
  for (const auto& [lo, hi] : {std::pair{110, 132}, std::pair{118, 124}}) {
    const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, 1152, 640, lo, hi);
    for (int64_t T : {41, 91, 151}) {
      SCOPED_TRACE(::testing::Message() << "scales " << lo << ".." << hi << " T " << T);
      ExpectVariantsAgree(ex, T, 6);
    }
  }
}

// Every forced item width (DEEPINFER_EXPERTS_ITEM_PAIRS; 80 exists only as a forced width, its SS
// run takes the 96 tile) is the width the launch uses and gives every variant bitwise the default
// width's result: T 203 (mean 153 pairs per expert: default items of 128 pairs) with a partial
// row block of the down GEMM (D = 1152); unknown values are ignored.
TEST_F(CudaWgmmaVariantTest, ForcedItemWidthsGiveTheSameBits) {
  const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, 1152, 640, 118, 124);
  const int64_t T = 203, k = 6;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = RouteIdleAndSingle(T, k, 8);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  const WgmmaAtEveryT wgmma_only;
  gpu_->set_experts_bf16_min_tokens(1);
  const std::vector<float> base = RunGpu(ex, x, T, ids, weights, k, 7.0f);
  EXPECT_TRUE(std::all_of(base.begin(), base.end(), [](float y) { return std::isfinite(y); }));
  EXPECT_EQ(kernels::RoutedExpertsBf16ItemPairs(T, k, 8), 128);
  for (const char* bad : {"72", "96x", ""}) {
    const ScopedEnv ignored(kernels::kExpertsItemPairsEnv, bad);
    EXPECT_EQ(kernels::RoutedExpertsBf16ItemPairs(T, k, 8), 128) << bad;
  }
  for (const char* width : {"64", "80", "96", "128"}) {
    const ScopedEnv forced_width(kernels::kExpertsItemPairsEnv, width);
    EXPECT_EQ(kernels::RoutedExpertsBf16ItemPairs(T, k, 8), std::atoi(width));
    for (WgmmaVariant v : kWgmmaVariants) {
      SCOPED_TRACE(::testing::Message()
                   << "items of " << width << ", " << moe_bf16::WgmmaVariantName(v));
      const ForcedWgmmaVariant forced(v);
      EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, 7.0f), base));
    }
  }
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

// The real V4.1 expert shape (K = 5120 and 2304: 80 and 36 stages, the largest scale arrays):
// every RS variant bitwise equal to SS at items of 64 (T 64), 96 (T 250) and 128 (T 400) pairs.
TEST_F(CudaWgmmaVariantTest, RealV41ShapeBitwise) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  const Experts ex = MakeExperts(24, WeightFormat::kMxFp4, 5120, 2304);
  const WgmmaAtEveryT wgmma_only;
  gpu_->set_experts_bf16_min_tokens(1);
  for (int64_t T : {64, 250, 400}) {
    SCOPED_TRACE(::testing::Message() << "T " << T);
    const int64_t k = 6;
    const std::vector<float> x = Normal(T * ex.D);
    const std::vector<int32_t> ids = RouteIdleAndSingle(T, k, 24);
    const std::vector<float> weights = Uniform(T * k, 0.05f, 0.5f);
    std::vector<float> ss;
    for (WgmmaVariant v : kWgmmaVariants) {
      SCOPED_TRACE(moe_bf16::WgmmaVariantName(v));
      const ForcedWgmmaVariant forced(v);
      const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, 7.0f);
      if (v == WgmmaVariant::kSs) {
        ss = got;
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float y) { return std::isfinite(y); }));
      } else {
        EXPECT_TRUE(BitExact(got, ss)) << "differs from the SS kernel";
      }
    }
  }
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

// An expert id outside [0, n_experts) on the wgmma kernel (every variant): the backend's error
// names it, the token's row is NaN, and every other row is bitwise the row of a run where that
// slot has a valid id (a token's row depends on no other token).
TEST_F(CudaWgmmaVariantTest, OutOfRangeIdGivesNanRowAndError) {
  const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, 256, 256);
  const int64_t T = 53, k = 2, bad_token = 17;
  const std::vector<float> x = Normal(T * ex.D);
  const std::vector<int32_t> ids = Route(T, k, 8);  // 106 pairs: items of 64
  const std::vector<float> weights = Uniform(T * k, 0.1f, 1.0f);
  const WgmmaAtEveryT wgmma_only;
  for (WgmmaVariant v : kWgmmaVariants) {
    SCOPED_TRACE(moe_bf16::WgmmaVariantName(v));
    const ForcedWgmmaVariant forced(v);
    const ExpertsRun clean = RunExpertsOnOwnBackend(ex.table, ex.D, x, T, ids, weights, k, 1);
    ASSERT_TRUE(clean.status.ok()) << clean.status;
    std::vector<int32_t> bad_ids = ids;
    bad_ids[bad_token * k + 1] = 8;
    const ExpertsRun run = RunExpertsOnOwnBackend(ex.table, ex.D, x, T, bad_ids, weights, k, 1);
    EXPECT_FALSE(run.status.ok());
    EXPECT_NE(run.status.ToString().find("expert id"), std::string::npos) << run.status;
    ASSERT_EQ(run.y.size(), static_cast<size_t>(T * ex.D));
    ASSERT_EQ(clean.y.size(), run.y.size());
    int64_t not_nan = 0, differ = 0, not_finite = 0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < ex.D; ++d) {
        const float got = run.y[t * ex.D + d], want = clean.y[t * ex.D + d];
        if (t == bad_token) {
          not_nan += std::isnan(got) ? 0 : 1;
        } else {
          not_finite += std::isfinite(want) ? 0 : 1;
          differ += std::memcmp(&got, &want, 4) == 0 ? 0 : 1;
        }
      }
    }
    EXPECT_EQ(not_nan, 0) << "values of the bad token's row that are not NaN";
    EXPECT_EQ(not_finite, 0) << "non-finite values in the clean run";
    EXPECT_EQ(differ, 0) << "other tokens' values that differ from the clean run";
  }
}

// Device time of one layer's RoutedExperts at the V4.1-Flash prefill shape (384 experts of
// [2304 x 5120] x 3 MXFP4 behind 64 distinct weight sets, top-6, random routing; the wgmma kernel
// at every T) in every variant: T 1024 (items of 64 pairs), 4096 (96; also forced to 80 and 64),
// 8192 (128). Lines "WGMMA T=.. items=<width> <variant>: us, TFLOP/s of useful work (2 x 3 x D x I
// per pair), same bits as ss".
// Run with --gtest_also_run_disabled_tests --gtest_filter='CudaWgmmaVariantTest.DISABLED_Bench'.
TEST_F(CudaWgmmaVariantTest, DISABLED_Bench) {
  const int64_t D = 5120, I = 2304, n = 384, k = 6;
  const Experts ex = MakeExperts(n, WeightFormat::kMxFp4, D, I, 118, 124, /*pool=*/64);
  gpu_->set_fp8_activations(true);
  gpu_->set_batch_invariant(false);
  gpu_->set_experts_bf16_min_tokens(1);
  const WgmmaAtEveryT wgmma_only;
  struct Case {
    int64_t T;
    const char* width;  // nullptr: the default pick
  };
  for (const Case& c : {Case{1024, nullptr}, Case{4096, nullptr}, Case{4096, "80"},
                        Case{4096, "64"}, Case{8192, nullptr}}) {
    const int64_t T = c.T;
    const ScopedEnv forced_width(kernels::kExpertsItemPairsEnv, c.width);
    model::RoutedExpertsArgs a;
    a.x = ToGpu(Normal(T * D, 4.0f)), a.T = T, a.D = D, a.experts = ToGpu(Route(T, k, n));
    a.weights = ToGpu(Uniform(T * k, 0.05f, 1.5f)), a.k = k, a.table = ex.table.data();
    a.n_experts = n, a.swiglu_limit = 7.0f;
    a.y = PoisonedFloats(T * D);
    const double flop = 2.0 * 3.0 * static_cast<double>(T * k) * static_cast<double>(D * I);
    std::vector<float> ss;
    for (WgmmaVariant v : kWgmmaVariants) {
      const ForcedWgmmaVariant forced(v);
      const double us = DeviceMicrosPerCall([&] { gpu_->RoutedExperts(a); });
      const std::vector<float> y = FromGpu(a.y, T * D);
      if (v == WgmmaVariant::kSs) ss = y;
      const bool same = BitExact(y, ss);
      EXPECT_TRUE(same) << moe_bf16::WgmmaVariantName(v) << " T " << T;
      std::printf("WGMMA T=%lld items=%-7s %-6s: %9.1f us, %6.1f TFLOP/s, %s\n",
                  static_cast<long long>(T), c.width != nullptr ? c.width : "default",
                  moe_bf16::WgmmaVariantName(v), us, flop / us / 1e6,
                  same ? "same bits as ss" : "BITS DIFFER from ss");
    }
  }
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
