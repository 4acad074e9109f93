// The weight-streaming expert GEMMs of RoutedExpertsBf16 (k_moe_stream.cu on stream_mma.cuh),
// through CudaBackend::RoutedExperts in the FP8-activation mode (not batch-invariant): against
// the per-token CPU reference on fake-quantised x and h, against the wgmma kernel of the same
// path (DEEPINFER_EXPERTS_STREAM_MAX_PAIRS forces either), bitwise independence of the other
// tokens and of the item width, routing edge cases, and a DISABLED_ device-time benchmark.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/moe_bf16_internal.cuh"

namespace deepinfer::backend::cuda::testing {
namespace {

namespace moe_bf16 = kernels::moe_bf16;

constexpr const char* kStreamVar = "DEEPINFER_EXPERTS_STREAM_MAX_PAIRS";

// Sets DEEPINFER_EXPERTS_STREAM_MAX_PAIRS for its lifetime.
class StreamMode : public ScopedEnv {
 public:
  explicit StreamMode(const char* value) : ScopedEnv(kStreamVar, value) {}

  static constexpr const char* kAlways = "1000000";
  static constexpr const char* kNever = "0";
};

// Selects a compiled shape of the streaming kernel (null: the default table) for its lifetime.
class ShapeVariant : public ScopedEnv {
 public:
  explicit ShapeVariant(const char* name) : ScopedEnv(moe_bf16::kStreamVariantEnv, name) {}
};

class CudaMoeStreamTest : public CudaFp8Test {
 protected:
  // n MXFP4 experts (CudaFp8Test::MakeExperts); pool > 0: the benchmark's table of 384 entries
  // without 7 GB of weights.
  Experts MakeExperts(int64_t n, int64_t D, int64_t I, int lo = 118, int hi = 124,
                      int64_t pool = 0) {
    return CudaFp8Test::MakeExperts(n, WeightFormat::kMxFp4, D, I, lo, hi, pool);
  }

  struct Call {
    std::vector<float> x;
    std::vector<int32_t> ids;
    std::vector<float> weights;
    int64_t T = 0, k = 0;
    float limit = 7.0f;

    // The last n tokens as a call of their own.
    Call Tail(int64_t n, int64_t D) const {
      Call c = *this;
      c.T = n;
      c.x.assign(x.end() - n * D, x.end());
      c.ids.assign(ids.end() - n * k, ids.end());
      c.weights.assign(weights.end() - n * k, weights.end());
      return c;
    }
  };

  Call MakeCall(int64_t T, int64_t k, int64_t n_experts, int64_t D) {
    Call c;
    c.T = T, c.k = k;
    c.x = Normal(T * D, 4.0f);
    c.ids = Route(T, k, n_experts);
    c.weights = Uniform(T * k, 0.05f, 1.5f);
    return c;
  }

  std::vector<float> Reference(const Experts& ex, const Call& c) {
    return RoutedExpertsReference(cpu_, ex.table, ex.D, ex.I, c.x, c.T, c.ids, c.weights, c.k,
                                  c.limit, /*fp8_activations=*/true);
  }

  // The device arguments of one RoutedExperts call (y poisoned).
  model::RoutedExpertsArgs Upload(const Experts& ex, const Call& c) {
    model::RoutedExpertsArgs a;
    a.x = ToGpu(c.x), a.T = c.T, a.D = ex.D, a.experts = ToGpu(c.ids);
    a.weights = ToGpu(c.weights), a.k = c.k, a.table = ex.table.data();
    a.n_experts = static_cast<int64_t>(ex.table.size()), a.swiglu_limit = c.limit;
    a.y = PoisonedFloats(c.T * ex.D);
    return a;
  }

  // y of CudaBackend::RoutedExperts in the FP8 mode; stream_mode null: the default choice.
  // bf16_min_tokens 0 runs the FP8 tile (RoutedExpertsFp8) instead.
  std::vector<float> RunGpu(const Experts& ex, const Call& c, const char* stream_mode,
                            int64_t bf16_min_tokens = CudaBackend::kExpertsBf16MinTokens) {
    std::optional<StreamMode> mode;
    if (stream_mode != nullptr) mode.emplace(stream_mode);
    gpu_->set_fp8_activations(true);
    gpu_->set_batch_invariant(false);
    gpu_->set_experts_bf16_min_tokens(bf16_min_tokens);
    const model::RoutedExpertsArgs a = Upload(ex, c);
    EXPECT_TRUE(gpu_->CanFuseRoutedExperts(c.T, ex.table[0]));
    gpu_->RoutedExperts(a);
    std::vector<float> y = FromGpu(a.y, c.T * ex.D);
    gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
    return y;
  }

  // The bound of cuda_fp8_experts_test.cc (h is requantised to e4m3, so a rounding flip of
  // one h value moves its outputs by up to 2^-4 of a term: no per-element fp32 bound).
  static void ExpectNearReference(const std::vector<float>& got,
                                  const std::vector<float>& expected) {
    EXPECT_TRUE(RelL2Close(got, expected, 5e-3));
    EXPECT_TRUE(AllClose(got, expected, 2e-2, 2e-2 * MaxAbs(expected)));
  }

  // Streaming vs wgmma: the same products in two fp32 summation orders. Their h values are
  // requantised to e4m3, and one that rounds to the other neighbour in one of them moves its
  // token's row by ~2^-3 of one term (~3e-3 of the row norm at T 1, I 384): RelL2 5e-3.
  static void ExpectNearWgmma(const std::vector<float>& stream, const std::vector<float>& wgmma) {
    EXPECT_TRUE(RelL2Close(stream, wgmma, 5e-3));
  }
};

// Decode shapes of 384 small experts, top-6: T 1, 3, 8, 32 and 100 (mean pairs per expert 1 or
// 2: items of 8 pairs), both dequantisation branches (scale bytes 118..124 and 100..140).
// The streaming result is within the reference bound, close to the wgmma kernel's, not
// bitwise the same as either the wgmma kernel or the FP8 tile (so the streaming kernel ran),
// and it repeats bitwise.
TEST_F(CudaMoeStreamTest, MatchesCpuReference) {
  for (const auto& [lo, hi] : {std::pair{118, 124}, std::pair{100, 140}}) {
    const Experts ex = MakeExperts(384, 256, 384, lo, hi);
    for (int64_t T : {1, 3, 8, 32, 100}) {
      SCOPED_TRACE(::testing::Message() << "scales " << lo << ".." << hi << " T " << T);
      const Call c = MakeCall(T, 6, 384, ex.D);
      const std::vector<float> expected = Reference(ex, c);
      const std::vector<float> got = RunGpu(ex, c, StreamMode::kAlways);
      const std::vector<float> again = RunGpu(ex, c, StreamMode::kAlways);
      const std::vector<float> wgmma = RunGpu(ex, c, StreamMode::kNever);
      const std::vector<float> tile = RunGpu(ex, c, StreamMode::kAlways, /*bf16_min_tokens=*/0);
      ExpectNearReference(got, expected);
      ExpectNearReference(wgmma, expected);
      ExpectNearWgmma(got, wgmma);
      EXPECT_TRUE(BitExact(got, again));
      EXPECT_FALSE(BitExact(got, wgmma)) << "the streaming kernel did not run";
      EXPECT_FALSE(BitExact(got, tile)) << "the bf16 path did not run";
    }
  }
}

// The default choice streams at decode (mean pairs per expert <= 12) and keeps the wgmma
// kernel for prefill-sized batches.
TEST_F(CudaMoeStreamTest, DefaultChoiceByMeanPairs) {
  EXPECT_EQ(kernels::ExpertsStreamMaxMeanPairs(), kernels::kExpertsStreamMaxMeanPairs);
  {
    const StreamMode mode("5");
    EXPECT_EQ(kernels::ExpertsStreamMaxMeanPairs(), 5);
  }
  {
    const StreamMode mode("x");
    EXPECT_EQ(kernels::ExpertsStreamMaxMeanPairs(), kernels::kExpertsStreamMaxMeanPairs);
  }
  const Experts ex = MakeExperts(16, 256, 384);
  for (int64_t T : {8, 64}) {  // mean pairs 3 (stream) and 24 (wgmma)
    SCOPED_TRACE(::testing::Message() << "T " << T);
    const Call c = MakeCall(T, 6, 16, ex.D);
    const std::vector<float> by_default = RunGpu(ex, c, nullptr);
    const std::vector<float> stream = RunGpu(ex, c, StreamMode::kAlways);
    const std::vector<float> wgmma = RunGpu(ex, c, StreamMode::kNever);
    EXPECT_TRUE(BitExact(by_default, T == 8 ? stream : wgmma));
    EXPECT_FALSE(BitExact(stream, wgmma));
    ExpectNearReference(stream, Reference(ex, c));
  }
}

// Items of 16 and 32 pairs (two and four token tiles) with both scale branches and a tight
// SwiGLU limit: 16 experts, T 16 and 40 (means 6 and 15; forced streaming), within the bound.
TEST_F(CudaMoeStreamTest, WideItemsMatchCpuReference) {
  const Experts ex = MakeExperts(16, 256, 384, 100, 140);
  for (int64_t T : {16, 40}) {
    SCOPED_TRACE(::testing::Message() << "T " << T);
    Call c = MakeCall(T, 6, 16, ex.D);
    c.limit = 1.5f;
    const std::vector<float> got = RunGpu(ex, c, StreamMode::kAlways);
    ExpectNearReference(got, Reference(ex, c));
    ExpectNearWgmma(got, RunGpu(ex, c, StreamMode::kNever));
  }
}

// A token's row is bitwise the same alone and inside a batch: 384 experts, T 32 and 100
// (8-pair items, 8-warp blocks) against the last 1 and 3 tokens alone (direct items of one
// pair, or grouped); 16 experts, T 32 and 64 (16- and 32-pair items: two and
// four token tiles) against the last 1 and 3 tokens alone (8-pair items: one tile).
TEST_F(CudaMoeStreamTest, RowsIndependentOfBatchBitwise) {
  for (const auto& [n_experts, T] :
       {std::pair<int64_t, int64_t>{384, 32}, {384, 100}, {16, 32}, {16, 64}}) {
    SCOPED_TRACE(::testing::Message() << n_experts << " experts T " << T);
    const Experts ex = MakeExperts(n_experts, 256, 384);
    const Call all = MakeCall(T, 6, n_experts, ex.D);
    const std::vector<float> y = RunGpu(ex, all, StreamMode::kAlways);
    for (int64_t n : {int64_t{1}, int64_t{3}}) {
      const std::vector<float> alone = RunGpu(ex, all.Tail(n, ex.D), StreamMode::kAlways);
      EXPECT_TRUE(BitExact(alone, std::vector<float>(y.end() - n * ex.D, y.end()))) << n;
    }
  }
}

// The same pairs (T 48 over experts 0..15) in items of 32, 16 and 8 (tables of the first 16,
// the first 48 and all 96 of the same experts: means 18, 6 and 3) give the same bits.
TEST_F(CudaMoeStreamTest, ItemWidthDoesNotChangeBits) {
  const Experts all = MakeExperts(96, 256, 384);
  const Call c = MakeCall(48, 6, 16, all.D);
  std::vector<std::vector<float>> ys;
  for (int64_t n : {16, 48, 96}) {
    Experts ex;
    ex.D = all.D, ex.I = all.I;
    ex.table.assign(all.table.begin(), all.table.begin() + n);
    ys.push_back(RunGpu(ex, c, StreamMode::kAlways));
  }
  EXPECT_TRUE(BitExact(ys[0], ys[2]));
  EXPECT_TRUE(BitExact(ys[1], ys[2]));
  ExpectNearReference(ys[2], Reference(all, c));
}

// Routing edge cases: one expert takes every pair (T 40, k 1: five 8-pair items of one
// expert; k 2: that expert in every token's second slot), all other experts have no pairs.
TEST_F(CudaMoeStreamTest, OneExpertTakesAllPairs) {
  const Experts ex = MakeExperts(16, 256, 384);
  for (int64_t k : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "k " << k);
    Call c = MakeCall(40, k, 16, ex.D);
    for (int64_t t = 0; t < c.T; ++t) {
      c.ids[t * k + k - 1] = 5;
      if (k == 2) c.ids[t * k] = static_cast<int32_t>(t % 5);  // experts 0..4, never 5
    }
    const std::vector<float> got = RunGpu(ex, c, StreamMode::kAlways);
    ExpectNearReference(got, Reference(ex, c));
    // The last token alone: its pairs are items of their own.
    const std::vector<float> alone = RunGpu(ex, c.Tail(1, ex.D), StreamMode::kAlways);
    EXPECT_TRUE(BitExact(alone, std::vector<float>(got.end() - ex.D, got.end())));
  }
}

// The real V4.1-Flash expert shape (D 5120, I 2304), scale bytes 100..140, SwiGLU limit 7:
// T 2 and 8 over the first 8 of the experts (means 2 and 6: 8- and 16-pair items) and T 8
// over all 24 (mean 2).
TEST_F(CudaMoeStreamTest, RealV41Shape) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  const Experts all = MakeExperts(24, 5120, 2304, 100, 140);
  Experts eight;
  eight.D = all.D, eight.I = all.I;
  eight.table.assign(all.table.begin(), all.table.begin() + 8);
  for (const auto& [ex, T] :
       {std::pair<const Experts*, int64_t>{&eight, 2}, {&eight, 8}, {&all, 8}}) {
    const int64_t n = static_cast<int64_t>(ex->table.size());
    SCOPED_TRACE(::testing::Message() << n << " experts T " << T);
    Call c = MakeCall(T, 6, n, ex->D);
    c.x = Normal(T * ex->D);
    const std::vector<float> got = RunGpu(*ex, c, StreamMode::kAlways);
    ExpectNearReference(got, Reference(*ex, c));
    ExpectNearWgmma(got, RunGpu(*ex, c, StreamMode::kNever));
  }
}

// An expert id out of range sets the error bit and gives its token a NaN row on the streaming
// path, the other tokens finite: T 3 (6 pairs: the direct items written by the quantisation
// kernel) and T 9 (18 pairs: the grouping kernels). The error is sticky, so each case runs on
// a backend of its own.
TEST_F(CudaMoeStreamTest, OutOfRangeIdGivesNanRowAndError) {
  const StreamMode mode(StreamMode::kAlways);
  const Experts ex = MakeExperts(8, 256, 256);
  const int64_t k = 2;
  for (int64_t T : {3, 9}) {
    SCOPED_TRACE(::testing::Message() << "T " << T);
    const std::vector<float> x = Normal(T * ex.D);
    std::vector<int32_t> ids = Route(T, k, 8);
    ids[3] = 8;  // token 1's second slot: id 8 of 8 experts
    const std::vector<float> weights = Uniform(T * k, 0.1f, 1.0f);
    const ExpertsRun run = RunExpertsOnOwnBackend(ex.table, ex.D, x, T, ids, weights, k, 1);
    EXPECT_FALSE(run.status.ok());
    EXPECT_NE(run.status.ToString().find("expert id"), std::string::npos) << run.status;
    const std::vector<float>& y = run.y;
    ASSERT_EQ(y.size(), static_cast<size_t>(T * ex.D));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t d = 0; d < ex.D; ++d) {
        const float v = y[t * ex.D + d];
        EXPECT_TRUE(t == 1 ? std::isnan(v) : std::isfinite(v)) << t << " " << d << " " << v;
      }
    }
  }
}

// The shape choice (moe_bf16_internal.cuh): unset, empty or unknown names take the default
// table, whose pick fits the item width (2-warp shapes serve at most 16 pairs, w8pf2b3 8); a
// named shape serves every width it fits and leaves the others to the table; the largest grids
// take w8pf4s8 for items of 8 and 16 pairs and the last row for 32.
TEST_F(CudaMoeStreamTest, ShapeChoiceByEnvironmentAndTable) {
  const int64_t grids[] = {1, 252, 512, 513, 1944, 21000, int64_t{1} << 40};
  std::vector<std::vector<int>> by_table;
  {
    const ShapeVariant unset(nullptr);
    for (int nt : {1, 2, 4}) {
      by_table.emplace_back();
      for (int64_t g : grids) {
        const int s = moe_bf16::PickStreamShape(nt, g);
        ASSERT_GE(s, 0);
        ASSERT_LT(s, moe_bf16::kNumStreamShapes);
        EXPECT_TRUE(moe_bf16::StreamShapeFits(moe_bf16::kStreamShapes[s], nt)) << nt << " " << g;
        by_table.back().push_back(s);
      }
    }
    // The largest grids (B > 32): items of 8 and 16 pairs take w8pf4s8 (run 190), 32-pair items
    // the last row, which serves every width.
    const moe_bf16::StreamTier& last = *std::rbegin(moe_bf16::kDefaultStreamTiers);
    EXPECT_EQ(by_table[0].back(), moe_bf16::FindStreamShape("w8pf4s8"));
    EXPECT_EQ(by_table[1].back(), moe_bf16::FindStreamShape("w8pf4s8"));
    EXPECT_EQ(by_table[2].back(), last.shape);
    EXPECT_EQ(last.shape, moe_bf16::FindStreamShape("w8pf4s4"));
    // Every decode launch up to B = 32 takes one shape (the one run 126 measured in the step):
    // the V4.1 up / down GEMM grids at B = 1 (216 / 240) and B = 32 (7,776 / 8,640).
    for (int64_t g : {216, 240, 7776, 8640}) {
      EXPECT_EQ(moe_bf16::PickStreamShape(1, g), moe_bf16::PickStreamShape(1, 1)) << g;
    }
  }
  for (const char* other : {"", "w8pf4s4x", "bogus"}) {
    const ShapeVariant variant(other);
    for (int i = 0; i < 3; ++i) {
      for (size_t j = 0; j < std::size(grids); ++j) {
        EXPECT_EQ(moe_bf16::PickStreamShape(1 << i, grids[j]), by_table[i][j]) << other;
      }
    }
  }
  for (int s = 0; s < moe_bf16::kNumStreamShapes; ++s) {
    const moe_bf16::StreamShape& shape = moe_bf16::kStreamShapes[s];
    EXPECT_EQ(moe_bf16::FindStreamShape(shape.name), s);
    EXPECT_TRUE(moe_bf16::StreamShapeFits(shape, 1)) << shape.name;
    const ShapeVariant variant(shape.name);
    for (int i = 0; i < 3; ++i) {
      const bool fits = moe_bf16::StreamShapeFits(shape, 1 << i);
      for (size_t j = 0; j < std::size(grids); ++j) {
        EXPECT_EQ(moe_bf16::PickStreamShape(1 << i, grids[j]), fits ? s : by_table[i][j])
            << shape.name << " nt " << (1 << i) << " grid " << grids[j];
      }
    }
  }
  EXPECT_FALSE(
      moe_bf16::StreamShapeFits(moe_bf16::kStreamShapes[moe_bf16::FindStreamShape("w2pf4s4")], 4));
  EXPECT_FALSE(
      moe_bf16::StreamShapeFits(moe_bf16::kStreamShapes[moe_bf16::FindStreamShape("w8pf2b3")], 2));
}

// Every compiled shape gives the default's bits (a shape changes only warps, blocks per SM,
// loads in flight and the slice length; every output stays one MMA chain over K in step order):
// 16 experts of D 1152, I 2304 (K steps 9 and 18: whole groups of 2, 4 and 8 steps plus a tail,
// several slices of 4 and 8 steps), scale bytes 100..140 (both dequantisation branches),
// T 1 (direct items), 8 (8-pair items), 16 (16-pair
// items) and 40 (32-pair items); shapes that do not fit a width run the table's (same bits).
// The default is within the CPU reference bound.
TEST_F(CudaMoeStreamTest, EveryShapeGivesDefaultBits) {
  const bool small = SmallOnly();
  const Experts ex = MakeExperts(16, small ? 256 : 1152, small ? 384 : 2304, 100, 140);
  for (int64_t T : {1, 8, 16, 40}) {
    SCOPED_TRACE(::testing::Message() << "T " << T);
    const Call c = MakeCall(T, 6, 16, ex.D);
    std::vector<float> by_default;
    {
      const ShapeVariant table(nullptr);
      by_default = RunGpu(ex, c, StreamMode::kAlways);
    }
    ExpectNearReference(by_default, Reference(ex, c));
    for (const moe_bf16::StreamShape& shape : moe_bf16::kStreamShapes) {
      const ShapeVariant variant(shape.name);
      EXPECT_TRUE(BitExact(RunGpu(ex, c, StreamMode::kAlways), by_default)) << shape.name;
    }
  }
}

// Device time of one layer's RoutedExperts at the V4.1-Flash shape (384 experts of [2304 x
// 5120] x 3 MXFP4, top-6, random routing; 64 distinct weight sets behind the 384 table entries,
// so consecutive uses of one set are ~800 MB of streaming apart: no L2 reuse), for T 1, 8, 32
// and 256 (default: streaming) and 4096 (default: wgmma; forced streaming takes 32-pair
// items), against the wgmma kernel and the FP8 tile, with GB/s on the distinct experts'
// bytes (18.9 MB each). Run with --gtest_also_run_disabled_tests
// --gtest_filter='CudaMoeStreamTest.DISABLED_Bench'.
TEST_F(CudaMoeStreamTest, DISABLED_Bench) {
  const int64_t D = 5120, I = 2304, n = 384, k = 6;
  const Experts ex = MakeExperts(n, D, I, 118, 124, /*pool=*/64);
  const double expert_bytes = 3.0 * (I * D / 2 + I * D / 32);
  for (int64_t T : {1, 8, 32, 256, 4096}) {
    const Call c = MakeCall(T, k, n, D);
    const std::set<int32_t> distinct(c.ids.begin(), c.ids.end());
    const double bytes = expert_bytes * static_cast<double>(distinct.size());
    const model::RoutedExpertsArgs a = Upload(ex, c);
    gpu_->set_fp8_activations(true);
    gpu_->set_batch_invariant(false);
    struct Variant {
      const char* name;
      const char* stream;
      int64_t bf16_min_tokens;
    };
    for (const Variant& v : {Variant{"default", nullptr, 1}, Variant{"stream", "1000000", 1},
                             Variant{"wgmma", "0", 1}, Variant{"fp8-tile", nullptr, 0}}) {
      std::optional<StreamMode> mode;
      if (v.stream != nullptr) mode.emplace(v.stream);
      gpu_->set_experts_bf16_min_tokens(v.bf16_min_tokens);
      const double us = DeviceMicrosPerCall([&] { gpu_->RoutedExperts(a); });
      std::printf("EXPERTS T=%lld %-8s: %8.1f us, %zu experts, %.0f GB/s of expert bytes\n",
                  static_cast<long long>(T), v.name, us, distinct.size(), bytes / us / 1e3);
    }
    gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
  }
}

// The shape sweep: one layer's RoutedExperts at the V4.1-Flash shape (as DISABLED_Bench: 384
// experts of [2304 x 5120] x 3 MXFP4 behind 64 distinct weight sets, top-6, random routing) for
// T 1, 8, 32 and 256 (8-pair items), in the default table and in every compiled shape: device
// us per call, GB/s of the distinct experts' bytes, and the bits against the default table
// (every shape must give the same bits). Lines "SWEEP T=.. <shape>" (the default's line names
// the shapes its table picked for the up / down GEMMs) and "BEST T=..". Run with
// --gtest_also_run_disabled_tests --gtest_filter='CudaMoeStreamTest.DISABLED_SweepVariants'.
TEST_F(CudaMoeStreamTest, DISABLED_SweepVariants) {
  const int64_t D = 5120, I = 2304, n = 384, k = 6;
  const Experts ex = MakeExperts(n, D, I, 118, 124, /*pool=*/64);
  const double expert_bytes = 3.0 * (I * D / 2 + I * D / 32);
  gpu_->set_fp8_activations(true);
  gpu_->set_batch_invariant(false);
  gpu_->set_experts_bf16_min_tokens(1);
  const StreamMode stream(StreamMode::kAlways);  // means <= 4 pairs: 8-pair items either way
  for (int64_t T : {1, 8, 32, 256}) {
    ASSERT_LE((T * k + n - 1) / n, 4);
    const Call c = MakeCall(T, k, n, D);
    const std::set<int32_t> distinct(c.ids.begin(), c.ids.end());
    const double bytes = expert_bytes * static_cast<double>(distinct.size());
    const model::RoutedExpertsArgs a = Upload(ex, c);
    // The grids of the up and down GEMMs in 128-row blocks (moe_groups::MaxItems items of 8
    // pairs), for the default table's picks in the report.
    const int64_t items = (T * k + 7) / 8 + std::min(T * k, n);
    const int64_t up_grid = items * (2 * I / 128), down_grid = items * (D / 128);
    std::string best = "default";
    double best_us = 0.0;
    std::vector<float> by_default;
    for (int s = -1; s < moe_bf16::kNumStreamShapes; ++s) {
      const char* name = s < 0 ? nullptr : moe_bf16::kStreamShapes[s].name;
      const ShapeVariant variant(name);
      gpu_->RoutedExperts(a);
      const std::vector<float> y = FromGpu(a.y, T * D);
      if (s < 0) by_default = y;
      const bool same = BitExact(y, by_default);
      EXPECT_TRUE(same) << (name ? name : "default") << " T " << T;
      const double us = DeviceMicrosPerCall([&] { gpu_->RoutedExperts(a); });
      std::string label = name ? name : "default";
      if (s < 0) {
        label += std::string("(") +
                 moe_bf16::kStreamShapes[moe_bf16::PickStreamShape(1, up_grid)].name + "/" +
                 moe_bf16::kStreamShapes[moe_bf16::PickStreamShape(1, down_grid)].name + ")";
      }
      std::printf("SWEEP T=%-4lld %-26s: %8.1f us, %5.0f GB/s of %zu experts' bytes, bits %s\n",
                  static_cast<long long>(T), label.c_str(), us, bytes / us / 1e3, distinct.size(),
                  same ? "= default" : "DIFFER");
      if (s < 0 || us < best_us) best = label, best_us = us;
    }
    std::printf("BEST  T=%-4lld %-26s: %8.1f us\n", static_cast<long long>(T), best.c_str(),
                best_us);
  }
  gpu_->set_experts_bf16_min_tokens(CudaBackend::kExpertsBf16MinTokens);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
