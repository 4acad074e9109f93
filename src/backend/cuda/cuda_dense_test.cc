// Linear / GatherRows over every weight format, RMSNorm, RoPE, fake-quant and the mHC collapse /
// expand, each against the CPU reference on fresh random inputs (small odd shapes and real V4.1
// dims).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_mma.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using model::FakeQuantKind;
using model::WeightFormat;
using model::WeightRef;

// The format's name (model/backend.h), for traces and bench lines.
std::string FormatName(WeightFormat f) { return std::string(model::WeightFormatName(f)); }

// Random stored bytes of one weight in `format` (kept alive by the struct).
struct RandomWeight {
  std::vector<uint8_t> data, scale;
  WeightRef ref;
};

// Rows [0, rows) of `got` and `want` (row stride ld, n values used per row) bitwise equal;
// the failure names the first differing rows and columns.
::testing::AssertionResult RowsBitExact(const std::vector<float>& got,
                                        const std::vector<float>& want, int64_t rows, int64_t n,
                                        int64_t ld) {
  int64_t bad = 0;
  std::ostringstream first;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      const float a = got[r * ld + c], b = want[r * ld + c];
      if (std::memcmp(&a, &b, sizeof(float)) != 0 && bad++ < 5) {
        first << "\n  row " << r << " col " << c << ": got " << a << " expected " << b;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << rows * n << " values differ:" << first.str();
}

class CudaDenseTest : public CudaVsCpuTest {
 protected:
  RandomWeight MakeWeight(WeightFormat format, int64_t rows, int64_t cols) {
    RandomWeight w;
    RandomWeightBytes(format, rows, cols, &w.data, &w.scale);
    w.ref = WeightRef{std::string("test.") + FormatName(format), format, rows, cols, w.data.data(),
                      w.scale.empty() ? nullptr : w.scale.data()};
    return w;
  }

  // y[T, ldy] (cols [0, n_rows)) = x[T, ldx] W[row0 .. row0+n_rows)^T on both backends.
  void CheckLinear(WeightFormat format, int64_t T, int64_t K, int64_t N, int64_t row0,
                   int64_t n_rows, int64_t ldx_pad, int64_t ldy_pad, bool accumulate) {
    SCOPED_TRACE(::testing::Message()
                 << FormatName(format) << " T=" << T << " K=" << K << " N=" << N << " rows " << row0
                 << "+" << n_rows << (accumulate ? " accumulate" : ""));
    const RandomWeight w = MakeWeight(format, N, K);
    const int64_t ldx = K + ldx_pad, ldy = n_rows + ldy_pad;
    const std::vector<float> x = Normal(T * ldx);
    std::vector<float> expected = Normal(T * ldy);  // accumulate base (and pad) values
    float* y = ToGpu(expected);
    if (!accumulate) {
      for (int64_t t = 0; t < T; ++t) gpu_->Fill(y + t * ldy, n_rows, NAN);  // poison
    }
    cpu_.Linear(x.data(), T, ldx, w.ref, row0, n_rows, expected.data(), ldy, accumulate);
    gpu_->Linear(ToGpu(x), T, ldx, w.ref, row0, n_rows, y, ldy, accumulate);
    const std::vector<float> got = FromGpu(y, T * ldy);
    const double tol = std::max(1e-5, 2e-6 * std::sqrt(static_cast<double>(K)));
    EXPECT_TRUE(RelL2Close(got, expected, tol));
    EXPECT_TRUE(AllClose(got, expected, 1e-3, 1e-3 * MaxAbs(expected)));
  }
};

// Both Linear paths: dequantise + SGEMM (gemv off) and the fused GEMV allowed up to its
// limit (T <= 32 in passes of up to 8 tokens, K a multiple of the 16-byte chunk; K = 70
// always takes SGEMM).
TEST_F(CudaDenseTest, LinearAllFormatsSmallOddShapes) {
  for (bool gemv : {false, true}) {
    gpu_->set_gemv_max_tokens(gemv ? kernels::kMaxGemvTokens : 0);
    gpu_->set_mma_max_tokens(0);  // the tensor-core path has its own tests
    for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32,
                           WeightFormat::kFp8Row32, WeightFormat::kMxFp4}) {
      for (int64_t K : {70, 80, 96, 160}) {  // 80: FP8 GEMV over a partial scale block
        if (f == WeightFormat::kMxFp4 && K % 32 != 0) continue;
        SCOPED_TRACE(gemv ? "gemv allowed" : "sgemm only");
        CheckLinear(f, 1, K, 33, 0, 33, 0, 0, false);
        CheckLinear(f, 7, K, 77, 5, 41, 3, 2, false);  // row offset crosses a 32-row block
        CheckLinear(f, 5, K, 64, 32, 32, 0, 1, true);
        CheckLinear(f, 8, K, 40, 0, 40, 0, 0, true);
        CheckLinear(f, 9, K, 40, 0, 40, 1, 0, false);   // GEMV passes of 8 + 1 tokens
        CheckLinear(f, 3, K, 300, 7, 290, 2, 0, true);  // pass of 4 (3 used), split warps
        CheckLinear(f, 32, K, 70, 0, 70, 0, 3, false);  // 4 passes of 8
        CheckLinear(f, 33, K, 40, 0, 40, 0, 0, false);  // above the GEMV limit
      }
    }
  }
}

TEST_F(CudaDenseTest, LinearRealV41Dims) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  gpu_->set_gemv_max_tokens(kernels::kMaxGemvTokens);  // T = 32 below takes the GEMV too
  gpu_->set_mma_max_tokens(0);
  CheckLinear(WeightFormat::kFp8Block32, 3, 5120, 1280, 0, 1280, 0, 0, false);   // wq_a
  CheckLinear(WeightFormat::kMxFp4, 2, 5120, 2304, 0, 2304, 0, 0, false);        // expert w1
  CheckLinear(WeightFormat::kMxFp4, 5, 2304, 5120, 0, 5120, 0, 0, true);         // expert w2
  CheckLinear(WeightFormat::kBF16, 2, 5120, 384, 0, 384, 0, 0, false);           // router
  CheckLinear(WeightFormat::kFp8Block32, 17, 1024, 5120, 0, 5120, 0, 0, false);  // wo_b
  CheckLinear(WeightFormat::kFp8Block32, 1, 1024, 5120, 0, 5120, 0, 0, true);    // decode
  // Decode at T = 1, 8, 32 on V4.1 shapes (GEMV), then the SGEMM path.
  for (int64_t T : {1, 8, 32}) {
    CheckLinear(WeightFormat::kFp8Block32, T, 5120, 1280, 0, 1280, 0, 0, false);  // wq_a
    CheckLinear(WeightFormat::kMxFp4, T, 5120, 2304, 0, 2304, 0, 0, false);       // expert w1
    CheckLinear(WeightFormat::kMxFp4, T, 2304, 5120, 0, 5120, 0, 0, true);        // expert w2
    CheckLinear(WeightFormat::kBF16, T, 5120, 4096, 0, 4096, 0, 0, false);        // head slice
  }
  CheckLinear(WeightFormat::kFp8Block32, 1, 5120, 16384, 0, 16384, 0, 0, false);
  gpu_->set_gemv_max_tokens(0);
  CheckLinear(WeightFormat::kMxFp4, 2, 5120, 2304, 0, 2304, 0, 0, false);  // SGEMM path
}

// Linear's default dispatch for 9..64 rows: the tensor-core skinny GEMM (kernels::LinearMma)
// where it applies, through the backend (weights uploaded by the weight cache).
TEST_F(CudaDenseTest, LinearSkinnyMmaPathMatchesCpu) {
  gpu_->set_gemv_max_tokens(8);  // 9..64 rows: the tensor-core path
  gpu_->set_mma_max_tokens(kernels::kMaxMmaTokens);
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block32, WeightFormat::kMxFp4}) {
    for (int64_t T : {9, 16, 33, 64}) {
      CheckLinear(f, T, 256, 300, 0, 300, 0, 0, false);
      CheckLinear(f, T, 128, 96, 32, 64, 3, 2, true);
    }
  }
  if (!SmallOnly()) {
    CheckLinear(WeightFormat::kFp8Block32, 32, 5120, 1280, 0, 1280, 0, 0, false);  // wq_a
    CheckLinear(WeightFormat::kBF16, 32, 5120, 4096, 0, 4096, 0, 0, false);        // head slice
    CheckLinear(WeightFormat::kMxFp4, 64, 2304, 5120, 0, 5120, 0, 0, true);        // expert w2
  }
}

// The bf16 hi/mid/lo tensor-core path (prefill-sized T) against the fp32 CPU reference, with the
// same tolerance as the fp32 SGEMM path; forced on for small T too (threshold 1).
TEST_F(CudaDenseTest, LinearBf16SplitMatchesCpu) {
  gpu_->set_gemv_max_tokens(0);
  gpu_->set_mma_max_tokens(0);
  gpu_->set_bf16_gemm_min_tokens(1);
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block32, WeightFormat::kFp8Row32,
                         WeightFormat::kMxFp4, WeightFormat::kF32}) {  // F32 keeps SGEMM
    for (int64_t K : {64, 160}) {
      CheckLinear(f, 1, K, 33, 0, 33, 0, 0, false);
      CheckLinear(f, 7, K, 77, 5, 41, 3, 2, true);
      CheckLinear(f, 64, K, 96, 32, 64, 0, 1, false);
      CheckLinear(f, 130, K, 200, 0, 200, 5, 0, true);
    }
  }
  if (!SmallOnly()) {
    CheckLinear(WeightFormat::kFp8Block32, 256, 5120, 1280, 0, 1280, 0, 0, false);  // wq_a
    CheckLinear(WeightFormat::kMxFp4, 96, 5120, 2304, 0, 2304, 0, 0, false);        // expert w1
  }
  gpu_->set_bf16_gemm_min_tokens(1 << 30);
}

// LinearGrouped (wo_a's block-diagonal product): one GEMV launch for all groups when the
// group size is a multiple of 32, else one Linear per group; both against the CPU reference
// (which runs one Linear per group).
TEST_F(CudaDenseTest, LinearGroupedMatchesCpu) {
  for (bool mma : {false, true}) {
    SCOPED_TRACE(mma ? "tensor-core path" : "gemv path");
    gpu_->set_gemv_max_tokens(8);  // the grouped GEMV up to 8 rows, then per-group Linear
    gpu_->set_mma_max_tokens(mma ? kernels::kMaxMmaTokens : 0);
    struct Case {
      WeightFormat format;
      int64_t T, groups, R, K, x_stride_pad;
    };
    for (const Case c : {Case{WeightFormat::kFp8Block32, 1, 8, 64, 96, 0},
                         Case{WeightFormat::kFp8Block32, 3, 4, 32, 192, 7},
                         Case{WeightFormat::kBF16, 8, 2, 96, 64, 0},
                         Case{WeightFormat::kFp8Block32, 5, 3, 40, 96, 0},      // R % 32 != 0
                         Case{WeightFormat::kFp8Block32, 12, 4, 64, 96, 0}}) {  // T > GEMV
      SCOPED_TRACE(::testing::Message() << FormatName(c.format) << " T=" << c.T
                                        << " groups=" << c.groups << " R=" << c.R << " K=" << c.K);
      const RandomWeight w = MakeWeight(c.format, c.groups * c.R, c.K);
      const int64_t xs = c.K + c.x_stride_pad, ldx = c.groups * xs + 5, ldy = c.groups * c.R + 3;
      const std::vector<float> x = Normal(c.T * ldx);
      std::vector<float> expected(c.T * ldy, 0.0f);
      float* y = ToGpu(expected);
      gpu_->Fill(y, c.T * ldy, NAN);
      cpu_.LinearGrouped(x.data(), c.T, ldx, xs, w.ref, c.groups, expected.data(), ldy);
      gpu_->LinearGrouped(ToGpu(x), c.T, ldx, xs, w.ref, c.groups, y, ldy);
      std::vector<float> got = FromGpu(y, c.T * ldy);
      for (int64_t t = 0; t < c.T; ++t) {  // the ldy padding is not written
        for (int64_t i = c.groups * c.R; i < ldy; ++i) {
          ASSERT_TRUE(std::isnan(got[t * ldy + i])) << "t " << t << " col " << i;
          got[t * ldy + i] = expected[t * ldy + i] = 0.0f;
        }
      }
      EXPECT_TRUE(RelL2Close(got, expected, 2e-5));
      EXPECT_TRUE(AllClose(got, expected, 1e-3, 1e-3 * MaxAbs(expected)));
    }
  }
}

TEST_F(CudaDenseTest, GatherRowsAllFormats) {
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32,
                         WeightFormat::kFp8Row32, WeightFormat::kMxFp4}) {
    SCOPED_TRACE(FormatName(f));
    const int64_t rows = 300, cols = f == WeightFormat::kMxFp4 ? 256 : 250;
    const RandomWeight w = MakeWeight(f, rows, cols);
    const std::vector<int64_t> ids = {0, 299, 17, 17, 64, 31, 32, 150};
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<float> expected(n * cols);
    cpu_.GatherRows(w.ref, ids.data(), n, expected.data());
    float* out = PoisonedFloats(n * cols);
    gpu_->GatherRows(w.ref, ids.data(), n, out);
    EXPECT_TRUE(BitExact(FromGpu(out, n * cols), expected));  // dequantisation is exact
  }
}

TEST_F(CudaDenseTest, RmsNorm) {
  struct Case {
    int64_t rows, n, pad;
    bool weight;
    float eps;
  };
  std::vector<Case> cases = {
      {1, 1, 0, false, 1e-6f}, {5, 160, 3, true, 1e-20f}, {9, 333, 0, true, 1e-6f}};
  if (!SmallOnly()) cases.push_back({7, 5120, 0, true, 1e-6f});
  if (!SmallOnly()) cases.push_back({3, 20480, 0, false, 1e-20f});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " n " << c.n);
    const int64_t ld = c.n + c.pad;
    const std::vector<float> x = Normal(c.rows * ld, 3.0f), w = Normal(c.n);
    std::vector<float> expected(c.rows * ld, 0.0f);
    cpu_.RmsNorm(x.data(), c.rows, c.n, ld, c.weight ? w.data() : nullptr, c.eps, expected.data(),
                 ld);
    float* y = ToGpu(std::vector<float>(c.rows * ld, 0.0f));
    for (int64_t r = 0; r < c.rows; ++r) gpu_->Fill(y + r * ld, c.n, NAN);
    gpu_->RmsNorm(ToGpu(x), c.rows, c.n, ld, c.weight ? ToGpu(w) : nullptr, c.eps, y, ld);
    EXPECT_TRUE(AllClose(FromGpu(y, c.rows * ld), expected, 1e-5, 1e-6));
  }
}

// The decode shapes (rows of 5120, 1280, 512 and 128; the register-held vectorised path, and
// with ld % 4 != 0 the scalar fallback) at 1, 7, 32 and 300 rows: close to the CPU, and each
// row bitwise the same whether the call has 1, 7, 32 or 300 rows (batch invariance).
TEST_F(CudaDenseTest, RmsNormDecodeShapesAreBatchInvariant) {
  const int64_t max_rows = SmallOnly() ? 32 : 300;
  for (int64_t n : {5120, 1280, 512, 128, 8192, 8196}) {
    for (int64_t pad : {0, 4, 1}) {
      const bool weighted = pad != 4;
      SCOPED_TRACE(::testing::Message()
                   << "n " << n << " ld " << n + pad << (weighted ? " weighted" : " no weight"));
      const int64_t ld = n + pad;
      const std::vector<float> x = Normal(max_rows * ld, 3.0f), w = Normal(n);
      std::vector<float> expected(max_rows * ld, 0.0f);
      cpu_.RmsNorm(x.data(), max_rows, n, ld, weighted ? w.data() : nullptr, 1e-6f, expected.data(),
                   ld);
      const float* gx = ToGpu(x);
      const float* gw = weighted ? ToGpu(w) : nullptr;
      float* all = PoisonedFloats(max_rows * ld);
      gpu_->RmsNorm(gx, max_rows, n, ld, gw, 1e-6f, all, ld);
      const std::vector<float> full = FromGpu(all, max_rows * ld);
      std::vector<float> full_used(full), expected_used(expected);
      for (int64_t r = 0; r < max_rows; ++r) {  // compare only the n used values per row
        for (int64_t c = n; c < ld; ++c) full_used[r * ld + c] = expected_used[r * ld + c] = 0.0f;
      }
      EXPECT_TRUE(AllClose(full_used, expected_used, 1e-5, 1e-6));
      for (int64_t rows : {1, 7, 32}) {
        SCOPED_TRACE(::testing::Message() << "call of " << rows << " rows vs " << max_rows);
        float* part = PoisonedFloats(rows * ld);
        gpu_->RmsNorm(gx, rows, n, ld, gw, 1e-6f, part, ld);
        EXPECT_TRUE(RowsBitExact(FromGpu(part, rows * ld), full, rows, n, ld));
      }
    }
  }
}

TEST_F(CudaDenseTest, RopeForwardAndInverse) {
  struct Case {
    int64_t rows, heads, stride, offset, pairs, extra;
    int32_t max_pos;
  };
  std::vector<Case> cases = {{7, 4, 64, 48, 8, 0, 100}, {3, 1, 40, 0, 20, 5, 1000}};
  if (!SmallOnly()) cases.push_back({5, 64, 512, 448, 32, 0, 1 << 20});  // real q heads
  for (const Case& c : cases) {
    for (bool inverse : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "heads " << c.heads << " pairs " << c.pairs << (inverse ? " inverse" : ""));
      const int64_t ld = c.heads * c.stride + c.extra;
      std::vector<float> x = Normal(c.rows * ld);
      const std::vector<int32_t> pos = Ints(c.rows, 0, c.max_pos);
      std::vector<float> freq(c.pairs);
      for (int64_t i = 0; i < c.pairs; ++i) {
        freq[i] = std::pow(10000.0f, -2.0f * i / (2.0f * c.pairs));
      }
      float* dx = ToGpu(x);
      gpu_->Rope(dx, c.rows, ld, c.heads, c.stride, c.offset, c.pairs, ToGpu(pos), freq.data(),
                 inverse);
      cpu_.Rope(x.data(), c.rows, ld, c.heads, c.stride, c.offset, c.pairs, pos.data(), freq.data(),
                inverse);
      EXPECT_TRUE(AllClose(FromGpu(dx, c.rows * ld), x, 1e-5, 1e-5));
    }
  }
}

// Blocks with magnitudes 2^-30 .. 2^10, all-zero blocks, tiny blocks (amax floors) and
// exact rounding ties.
std::vector<float> QuantInputs(CudaVsCpuTest* t, std::mt19937_64& rng, int64_t rows, int64_t ld,
                               int block) {
  std::vector<float> x(rows * ld);
  std::uniform_int_distribution<int> exp_dist(-30, 10), kind_dist(0, 9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t b = 0; b < rows * ld; b += block) {
    const int kind = kind_dist(rng);
    const float mag = std::ldexp(1.0f, exp_dist(rng));
    for (int i = 0; i < block && b + i < rows * ld; ++i) {
      float v = normal(rng) * mag;
      if (kind == 0) v = 0.0f;
      if (kind == 1) v *= 1e-30f;
      if (kind == 2)
        v = std::ldexp(static_cast<float>(static_cast<int>(normal(rng) * 8)) + 0.5f,
                       -3) *
            mag;  // halfway points
      x[b + i] = v;
    }
  }
  (void)t;
  return x;
}

TEST_F(CudaDenseTest, FakeQuantBitExact) {
  for (FakeQuantKind kind : {FakeQuantKind::kFp8Block32Pow2, FakeQuantKind::kFp4Block16E4m3,
                             FakeQuantKind::kFp4Block32Pow2}) {
    for (int64_t n : {32, 64, 512}) {
      SCOPED_TRACE(::testing::Message() << "kind " << static_cast<int>(kind) << " n " << n);
      const int64_t rows = 37, ld = n + 32;
      std::vector<float> x = QuantInputs(this, rng_, rows, ld, 16);
      float* dx = ToGpu(x);
      gpu_->FakeQuant(dx, rows, n, ld, kind);
      cpu_.FakeQuant(x.data(), rows, n, ld, kind);
      EXPECT_TRUE(BitExact(FromGpu(dx, rows * ld), x));
    }
  }
}

// FakeQuant at the decode shapes (rows of 512 for the FP8 and FP4-E4M3 kinds, 64 x 128 for
// the FP4 pow2 kind) and at 1, 7, 32 and 300 rows, bitwise against the CPU emulation.
TEST_F(CudaDenseTest, FakeQuantDecodeShapesBitExact) {
  struct Case {
    FakeQuantKind kind;
    int64_t n;
  };
  for (const Case& c :
       {Case{FakeQuantKind::kFp8Block32Pow2, 512}, Case{FakeQuantKind::kFp4Block16E4m3, 512},
        Case{FakeQuantKind::kFp4Block32Pow2, 128},
        Case{FakeQuantKind::kFp4Block16E4m3, 48}}) {  // 3 blocks per row
    for (int64_t rows : {1, 7, 32, 64, 300}) {
      SCOPED_TRACE(::testing::Message()
                   << "kind " << static_cast<int>(c.kind) << " n " << c.n << " rows " << rows);
      std::vector<float> x = QuantInputs(this, rng_, rows, c.n, 16);
      float* dx = ToGpu(x);
      gpu_->FakeQuant(dx, rows, c.n, c.n, c.kind);
      cpu_.FakeQuant(x.data(), rows, c.n, c.n, c.kind);
      EXPECT_TRUE(RowsBitExact(FromGpu(dx, rows * c.n), x, rows, c.n, c.n));
    }
  }
}

TEST_F(CudaDenseTest, HcMixCollapseExpand) {
  const int64_t hc = 4, n_mix = (2 + hc) * hc;
  std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 8}, {5, 64}, {3, 160}};
  if (!SmallOnly()) shapes.push_back({4, 5120});
  for (auto [T, D] : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << T << " D " << D);
    const std::vector<float> x = Normal(T * hc * D), fn = Normal(n_mix * hc * D, 0.05f);
    const std::vector<float> scale = Uniform(3, 0.2f, 2.0f), base = Normal(n_mix);
    std::vector<float> pre(T * hc), post(T * hc), comb(T * hc * hc);
    cpu_.HcMix(x.data(), T, hc, D, {fn.data(), scale.data(), base.data()}, 1e-20f, 1e-6f, 20,
               pre.data(), post.data(), comb.data());
    float *gpre = PoisonedFloats(T * hc), *gpost = PoisonedFloats(T * hc),
          *gcomb = PoisonedFloats(T * hc * hc);
    float* gx = ToGpu(x);
    gpu_->HcMix(gx, T, hc, D, {ToGpu(fn), ToGpu(scale), ToGpu(base)}, 1e-20f, 1e-6f, 20, gpre,
                gpost, gcomb);
    EXPECT_TRUE(AllClose(FromGpu(gpre, T * hc), pre, 1e-4, 1e-5));
    EXPECT_TRUE(AllClose(FromGpu(gpost, T * hc), post, 1e-4, 1e-5));
    EXPECT_TRUE(AllClose(FromGpu(gcomb, T * hc * hc), comb, 1e-4, 1e-5));

    // Collapse and expand from the CPU's mix so that only these ops are compared.
    std::vector<float> y(T * D);
    cpu_.HcCollapse(x.data(), pre.data(), T, hc, D, y.data());
    float* gy = PoisonedFloats(T * D);
    gpu_->HcCollapse(gx, ToGpu(pre), T, hc, D, gy);
    EXPECT_TRUE(AllClose(FromGpu(gy, T * D), y, 1e-5, 1e-6));

    std::vector<float> streams = x;
    const std::vector<float> out = Normal(T * D);
    cpu_.HcExpand(out.data(), post.data(), comb.data(), T, hc, D, streams.data());
    gpu_->HcExpand(ToGpu(out), ToGpu(post), ToGpu(comb), T, hc, D, gx);
    EXPECT_TRUE(AllClose(FromGpu(gx, T * hc * D), streams, 1e-5, 1e-6));
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
