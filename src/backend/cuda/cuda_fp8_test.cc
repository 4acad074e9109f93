// The FP8-activation fast mode (kernels_fp8.h) against the CPU reference run on
// fake-quantised activations: QuantizeFp8Activations (and its bf16 variant) bitwise against
// FakeQuant(kFp8Block32Pow2), LinearFp8 for FP8 (block32, row32) and MXFP4 weights at 1..300
// tokens (skinny split-K and wide tiles), its batch invariance (bitwise), and the backend's
// bf16 cuBLAS GEMMs for many tokens (Linear, LinearGrouped; never in batch-invariant mode).
// The routed experts are in cuda_fp8_experts_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

TEST_F(CudaFp8Test, QuantizeMatchesFakeQuantBitwise) {
  for (const auto& [T, K] : {std::pair<int64_t, int64_t>{1, 32}, {37, 256}, {5, 5120}}) {
    std::vector<float> x = Activations(T, K);
    x[0] = 0.0f;  // an all-small block takes the 1e-4 amax floor
    for (int i = 1; i < 32 && i < K; ++i) x[i] = 1e-7f * static_cast<float>(i);
    auto* q = PoisonedBytes(kernels::Fp8ActivationBytes(T, K));
    auto* s = kernels::Fp8ActivationScales(q, T, K);
    ASSERT_EQ(kernels::QuantizeFp8Activations(ToGpu(x), T, K, K, q, s, gpu_->stream()),
              cudaSuccess);
    const std::vector<uint8_t> qb = BytesFromGpu(q, T * K);
    std::vector<float> scales(T * K / 32);
    ASSERT_EQ(cudaMemcpy(scales.data(), s, scales.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    const std::vector<float> expected = FakeQuantized(x, T, K);
    std::vector<float> got(T * K);
    for (int64_t i = 0; i < T * K; ++i) {
      const int64_t j = i % 32, base = i - j;
      const int64_t pos = base + (j & ~7) + ((j & 1) ? 4 + ((j & 7) >> 1) : ((j & 7) >> 1));
      const uint8_t b = qb[pos];
      const int exponent = (b >> 3) & 0xF, mantissa = b & 7;
      const float mag = exponent == 0 ? std::ldexp(float(mantissa), -9)
                                      : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
      got[i] = ((b & 0x80) ? -mag : mag) * scales[i / 32];
    }
    EXPECT_TRUE(BitExact(got, expected)) << "T " << T << " K " << K;
  }
}

// QuantizeFp8ActivationsBf16: each output is the bf16 bits of FakeQuant(kFp8Block32Pow2) on
// the CPU, which must itself be exact in bf16 (low 16 bits zero). Covers K = 32, ldx > K
// (the padding is not read into the output), an all-zero row, huge and tiny blocks, -0.
TEST_F(CudaFp8Test, QuantizeBf16MatchesFakeQuantBitwise) {
  struct Case {
    int64_t T, K, ldx;
  };
  // Also an odd row stride and the wide rows of wo_a at prefill (32,768 values).
  for (const Case c : {Case{1, 32, 32}, Case{3, 32, 40}, Case{37, 256, 300}, Case{5, 5120, 5120},
                       Case{7, 96, 97}, Case{34, 32768, 32768}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " K " << c.K << " ldx " << c.ldx);
    std::vector<float> x = Activations(1, (c.T * c.ldx + 31) / 32 * 32);  // row stride ldx
    for (int i = 0; i < 32; ++i) {
      x[i] = 3e38f * (i % 2 ? -1.0f : 1.0f) / static_cast<float>(i + 1);  // near FLT_MAX
    }
    if (c.T > 1) {
      std::fill(x.begin() + c.ldx, x.begin() + 2 * c.ldx, 0.0f);  // an all-zero row
      x[c.ldx + 3] = -0.0f;
    }
    if (c.T > 2) {  // tiny values: the 1e-4 amax floor, and values that round to (-)0
      for (int i = 0; i < 32; ++i) x[2 * c.ldx + i] = (i % 2 ? -1e-30f : 1e-7f) * (i + 1);
    }
    std::vector<float> packed(c.T * c.K);  // the CPU reference sees the rows without padding
    for (int64_t t = 0; t < c.T; ++t) {
      std::copy_n(x.begin() + t * c.ldx, c.K, packed.begin() + t * c.K);
    }
    const std::vector<float> expected = FakeQuantized(packed, c.T, c.K);
    auto* out = reinterpret_cast<uint16_t*>(PoisonedBytes(c.T * c.K * 2));
    ASSERT_EQ(kernels::QuantizeFp8ActivationsBf16(ToGpu(x), c.T, c.K, c.ldx, out, gpu_->stream()),
              cudaSuccess);
    const std::vector<uint8_t> raw = BytesFromGpu(reinterpret_cast<uint8_t*>(out), c.T * c.K * 2);
    int64_t bad = 0;
    for (int64_t i = 0; i < c.T * c.K; ++i) {
      uint16_t got;
      std::memcpy(&got, &raw[2 * i], 2);
      uint32_t want;
      std::memcpy(&want, &expected[i], 4);
      ASSERT_EQ(want & 0xFFFFu, 0u) << "FakeQuant value " << expected[i] << " not exact in bf16";
      const uint32_t decoded_bits = static_cast<uint32_t>(got) << 16;
      float decoded;
      std::memcpy(&decoded, &decoded_bits, 4);
      if ((got != want >> 16 || std::memcmp(&decoded, &expected[i], 4) != 0) && bad++ < 5) {
        ADD_FAILURE() << "value " << i << ": bf16 " << decoded << " (0x" << std::hex << got
                      << ") expected " << expected[i] << std::dec << " from x " << packed[i];
      }
    }
    EXPECT_EQ(bad, 0);
  }
  EXPECT_EQ(kernels::QuantizeFp8ActivationsBf16(nullptr, 1, 48, 48, nullptr, gpu_->stream()),
            cudaErrorInvalidValue);  // K not a multiple of 32
}

// The backend's bf16 cuBLAS GEMM on fake-quantised activations (FP8 mode, many tokens):
// the same bound as LinearFp8 (exact bf16 products, fp32 accumulation in another order).
TEST_F(CudaFp8Test, LinearBf16GemmMatchesCpu) {
  for (WeightFormat f :
       {WeightFormat::kFp8Block32, WeightFormat::kFp8Row32, WeightFormat::kMxFp4}) {
    CheckLinear(f, 5, 256, 77, 5, 41, 3, true, Path::kBackendBf16Gemm);
    CheckLinear(f, 100, 2048, 300, 7, 293, 0, false, Path::kBackendBf16Gemm);
    CheckLinear(f, CudaBackend::kFp8Bf16GemmMinTokens, 1024, 260, 3, 250, 5, true,
                Path::kBackendDefaultThreshold);
    CheckLinear(f, 600, 1024, 260, 0, 260, 0, false, Path::kBackendDefaultThreshold);
  }
}

// FP8 mode, one row over a head-sized BF16 weight (>= kFp8CublasRowMinElements): the backend
// runs cuBLAS on bf16(x), so the result is within the fp32-accumulation bound of the CPU
// Linear on bf16(x) (the GEMV on fp32 x would miss it by ~2^-9 relative); row offset, ldy
// padding and accumulate honoured. Batch-invariant mode keeps the GEMV on fp32 x.
TEST_F(CudaFp8Test, OneRowLargeBf16WeightRunsOnCublas) {
  const int64_t K = 4096, row0 = 64, n_rows = CudaBackend::kFp8CublasRowMinElements / K;
  const int64_t N = row0 + n_rows + 16, ldy = n_rows + 3;
  HostWeight w;
  const std::vector<uint16_t> bits = Bf16Bits(N * K);
  w.data.resize(N * K * 2);
  std::memcpy(w.data.data(), bits.data(), w.data.size());
  w.ref = WeightRef{"bf16head", WeightFormat::kBF16, N, K, w.data.data(), nullptr};
  w.device.cols = K;
  const std::vector<float> x = Activations(1, K);
  std::vector<float> xb(K);
  for (int64_t k = 0; k < K; ++k) {  // round to nearest even (x is finite)
    const uint32_t b = std::bit_cast<uint32_t>(x[k]);
    xb[k] = std::bit_cast<float>((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
  }
  const std::vector<float> y0 = Normal(ldy);
  const std::vector<float> got =
      RunBackendLinear(w, row0, n_rows, x, 1, y0, ldy, true, CudaBackend::kFp8Bf16GemmMinTokens);
  ExpectLinearMatchesCpu(w, row0, n_rows, xb, 1, y0, ldy, true, got, "bf16 head T=1");
}

// FP8 mode, router-sized BF16 weights ([384, 5120], and 300 rows of a [400, 2048] weight from
// row 40 with ldy padding and accumulate: partial 16-row tiles): at 2..32 token rows the backend
// runs LinearSkinnyBf16, within the fp32-accumulation bound of the CPU Linear on bf16(x) (as
// the cuBLAS path it replaces); a token's outputs are bitwise the same at every T (here: T = 2
// against the first two tokens of each larger call); set_fp8_small_bf16_skinny(false) takes
// cuBLAS again (other bits).
TEST_F(CudaFp8Test, SmallBf16WeightRunsOnTheSkinnyKernel) {
  gpu_->set_fp8_small_bf16_skinny(true);  // whatever the environment says
  struct Case {
    int64_t N, K, row0, n_rows, ldy_pad;
    bool accumulate;
  };
  for (const Case c : {Case{384, 5120, 0, 384, 0, false}, Case{400, 2048, 40, 300, 5, true}}) {
    HostWeight w;
    const std::vector<uint16_t> bits = Bf16Bits(c.N * c.K);
    w.data.resize(c.N * c.K * 2);
    std::memcpy(w.data.data(), bits.data(), w.data.size());
    w.ref = WeightRef{"router", WeightFormat::kBF16, c.N, c.K, w.data.data(), nullptr};
    w.device.cols = c.K;
    const int64_t ldy = c.n_rows + c.ldy_pad, min_tokens = CudaBackend::kFp8Bf16GemmMinTokens;
    const std::vector<float> x = Activations(32, c.K);
    std::vector<float> xb(x.size());
    for (size_t i = 0; i < x.size(); ++i) {  // round to nearest even (x is finite)
      const uint32_t b = std::bit_cast<uint32_t>(x[i]);
      xb[i] = std::bit_cast<float>((b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u);
    }
    const std::vector<float> y0 = Normal(32 * ldy);
    auto run = [&](int64_t T) {
      return RunBackendLinear(
          w, c.row0, c.n_rows, std::vector<float>(x.begin(), x.begin() + T * c.K), T,
          std::vector<float>(y0.begin(), y0.begin() + T * ldy), ldy, c.accumulate, min_tokens);
    };
    const std::vector<float> two = run(2);
    for (const int64_t T : {2, 5, 8, 9, 17, 32}) {
      SCOPED_TRACE(::testing::Message() << "N " << c.N << " K " << c.K << " T " << T);
      const std::vector<float> got = run(T);
      ExpectLinearMatchesCpu(w, c.row0, c.n_rows,
                             std::vector<float>(xb.begin(), xb.begin() + T * c.K), T,
                             std::vector<float>(y0.begin(), y0.begin() + T * ldy), ldy,
                             c.accumulate, got, "bf16 skinny");
      EXPECT_TRUE(BitExact(std::vector<float>(got.begin(), got.begin() + 2 * ldy), two));
    }
    gpu_->set_fp8_small_bf16_skinny(false);
    const std::vector<float> cublas = run(8);
    gpu_->set_fp8_small_bf16_skinny(true);
    EXPECT_FALSE(BitExact(cublas, run(8)));
  }
}

// The routing at the default threshold: one token below it the backend runs LinearFp8
// (bitwise its result); at it, the bf16 GEMM (another fp32 summation order over K = 1024:
// some of the 153600 outputs differ in their last bits).
TEST_F(CudaFp8Test, LinearTakesBf16GemmFromThreshold) {
  const int64_t K = 1024, N = 300, T0 = CudaBackend::kFp8Bf16GemmMinTokens;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  for (int64_t T : {T0 - 1, T0}) {
    const std::vector<float> x = Activations(T, K);
    const std::vector<float> y0 = Normal(T * N);
    const bool same = static_cast<bool>(BitExact(RunBackendLinear(w, 0, N, x, T, y0, N, true, T0),
                                                 RunLinear(w, 0, N, x, T, y0, N, true)));
    EXPECT_EQ(same, T < T0) << "T " << T;
  }
}

TEST_F(CudaFp8Test, LinearMatchesCpuAllFormats) {
  struct Shape {
    int64_t K, N, row0, n_rows, ldy_pad;
  };
  const std::vector<Shape> shapes = {
      {256, 77, 5, 41, 3},       // 2 stages, one partial tile
      {2048, 300, 7, 293, 0},    // 16 stages, split into segments
      {1024, 1300, 0, 1300, 1},  // 11 tiles
  };
  for (WeightFormat f :
       {WeightFormat::kFp8Block32, WeightFormat::kFp8Row32, WeightFormat::kMxFp4}) {
    for (int64_t T : {1, 5, 9, 33, 64, 65, 200}) {
      for (const Shape& s : shapes) {
        CheckLinear(f, T, s.K, s.N, s.row0, s.n_rows, s.ldy_pad, T % 2 == 1);
      }
    }
  }
}

TEST_F(CudaFp8Test, LinearMatchesCpuRealV41Dims) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  for (int64_t T : {1, 32, 300}) {
    CheckLinear(WeightFormat::kFp8Block32, T, 5120, 1280, 0, 1280, 0, false);  // wq_a
    CheckLinear(WeightFormat::kFp8Block32, T, 1280, 4096, 0, 4096, 0, true);   // wq_b slice
    CheckLinear(WeightFormat::kMxFp4, T, 5120, 2304, 0, 2304, 0, false);       // expert w1
  }
}

// LinearGrouped (wo_a's shape class: contiguous groups) through the backend in the FP8 mode:
// one quantisation of all groups and one grouped GEMM, against the CPU on fake-quantised x.
TEST_F(CudaFp8Test, LinearGroupedMatchesCpu) {
  const int64_t groups = 8, R = 256, K = 512;
  for (WeightFormat f : {WeightFormat::kFp8Block32, WeightFormat::kMxFp4}) {
    const HostWeight w = MakeWeight(f, groups * R, K);
    ASSERT_TRUE(kernels::Fp8LinearGroupedApplicable(w.device, groups));
    for (int64_t T : {1, 9, 100}) {
      SCOPED_TRACE(::testing::Message() << model::WeightFormatName(f) << " T " << T);
      const std::vector<float> x = Activations(T, groups * K);
      const std::vector<float> xq = FakeQuantized(x, T, groups * K);
      std::vector<float> expected(T * groups * R);
      cpu_.LinearGrouped(xq.data(), T, groups * K, K, w.ref, groups, expected.data(), groups * R);
      gpu_->set_fp8_activations(true);
      gpu_->set_fp8_bf16_gemm_min_tokens(0);  // the grouped FP8 kernel at every T
      float* y = PoisonedFloats(T * groups * R);
      gpu_->LinearGrouped(ToGpu(x), T, groups * K, K, w.ref, groups, y, groups * R);
      const std::vector<float> got = FromGpu(y, T * groups * R);
      EXPECT_TRUE(RelL2Close(got, expected, kRelL2Tol));
      EXPECT_TRUE(AllClose(got, expected, 1e-3, 1e-4 * MaxAbs(expected)));
    }
  }
}

// LinearGrouped in the FP8 mode through the bf16 cuBLAS strided-batched GEMM (threshold 1
// token, and the default threshold at T = 600), ldy padded: the bound of the dense test.
TEST_F(CudaFp8Test, LinearGroupedBf16GemmMatchesCpu) {
  struct Case {
    WeightFormat f;
    int64_t groups, R, K, T, min_tokens;
  };
  std::vector<Case> cases = {
      {WeightFormat::kFp8Block32, 8, 256, 512, 7, 1},
      {WeightFormat::kMxFp4, 8, 256, 512, 100, 1},
      {WeightFormat::kFp8Block32, 4, 128, 1024, 600, CudaBackend::kFp8Bf16GemmMinTokens},
      {WeightFormat::kMxFp4, 4, 128, 1024, 600, CudaBackend::kFp8Bf16GemmMinTokens},
  };
  // 64 Mi weight values: two tiles of 8 groups (the dequantisation scratch holds 32 Mi).
  if (!SmallOnly()) cases.push_back({WeightFormat::kFp8Block32, 16, 1024, 4096, 2, 1});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << model::WeightFormatName(c.f) << " groups " << c.groups
                                      << " R " << c.R << " K " << c.K << " T " << c.T);
    const int64_t K = c.K, R = c.R, cols = c.groups * c.R, ldy = cols + 4;
    const HostWeight w = MakeWeight(c.f, cols, K);
    ASSERT_TRUE(kernels::Fp8LinearGroupedApplicable(w.device, c.groups));
    const std::vector<float> x = Activations(c.T, c.groups * K);
    const std::vector<float> xq = FakeQuantized(x, c.T, c.groups * K);
    const std::vector<float> y0 = Normal(c.T * ldy);
    std::vector<float> expected = y0;
    cpu_.LinearGrouped(xq.data(), c.T, c.groups * K, K, w.ref, c.groups, expected.data(), ldy);
    gpu_->set_fp8_activations(true);
    gpu_->set_batch_invariant(false);
    gpu_->set_fp8_bf16_gemm_min_tokens(c.min_tokens);
    float* y = ToGpu(y0);
    gpu_->LinearGrouped(ToGpu(x), c.T, c.groups * K, K, w.ref, c.groups, y, ldy);
    const std::vector<float> got = FromGpu(y, c.T * ldy);
    std::vector<int64_t> ids(cols);
    for (int64_t i = 0; i < cols; ++i) ids[i] = i;
    std::vector<float> wd(cols * K);
    cpu_.GatherRows(w.ref, ids.data(), cols, wd.data());
    ExpectWithinBound(got, expected, y0, c.T, cols, ldy, false, [&](int64_t t, int64_t i) {
      const float* xg = &xq[t * c.groups * K + (i / R) * K];
      double bound = 0.0;
      for (int64_t k = 0; k < K; ++k) bound += std::fabs(double(xg[k]) * wd[i * K + k]);
      return bound;
    });
    EXPECT_TRUE(RelL2Close(got, expected, kRelL2Tol));
    // The grouped FP8 kernel (threshold 0 = never) sums in another order: not bitwise equal,
    // so the result above came from the bf16 GEMM.
    gpu_->set_fp8_bf16_gemm_min_tokens(0);
    float* y_kernel = ToGpu(y0);
    gpu_->LinearGrouped(ToGpu(x), c.T, c.groups * K, K, w.ref, c.groups, y_kernel, ldy);
    EXPECT_FALSE(BitExact(FromGpu(y_kernel, c.T * ldy), got));
  }
}

// A token's output is bitwise the same alone, among 63 others (skinny tiles, split K) and
// among 299 others (wide tiles, segments looped in one block).
// In FP8-activation mode a BF16 weight above the GEMV's token count multiplies x rounded to
// nearest bf16 (one cuBLAS GEMM, or LinearSkinnyBf16 at 2-32 rows for a weight this small):
// equal to the CPU on rounded x to fp32 accumulation error, and clearly not the exact product
// (the difference is the bf16 rounding of x).
TEST_F(CudaFp8Test, Bf16WeightsTakeBf16RoundedActivations) {
  const int64_t N = 300, K = 512;
  const std::vector<uint16_t> bits = Bf16Bits(N * K);
  const WeightRef w{"bf16test", WeightFormat::kBF16, N, K, bits.data(), nullptr};
  gpu_->set_fp8_activations(true);
  for (int64_t T : {9, 32, 64, 100}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Normal(T * K);
    std::vector<float> xr(x.size());
    for (size_t i = 0; i < x.size(); ++i) {  // round to nearest even bf16
      uint32_t b;
      std::memcpy(&b, &x[i], 4);
      b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
      std::memcpy(&xr[i], &b, 4);
    }
    std::vector<float> exact(T * N), rounded(T * N);
    cpu_.Linear(x.data(), T, K, w, 0, N, exact.data(), N, false);
    cpu_.Linear(xr.data(), T, K, w, 0, N, rounded.data(), N, false);
    float* y = PoisonedFloats(T * N);
    gpu_->Linear(ToGpu(x), T, K, w, 0, N, y, N, false);
    const std::vector<float> got = FromGpu(y, T * N);
    EXPECT_TRUE(RelL2Close(got, rounded, 1e-6));
    EXPECT_FALSE(RelL2Close(got, exact, 1e-4));  // bf16 rounding of x: ~2^-9 relative
  }
}

TEST_F(CudaFp8Test, LinearBatchInvariantBitwise) {
  for (WeightFormat f : {WeightFormat::kFp8Block32, WeightFormat::kMxFp4}) {
    const int64_t K = 2048, N = 700;
    const HostWeight w = MakeWeight(f, N, K);
    ASSERT_GT(kernels::Fp8LinearSegments(N, K), 1);
    const std::vector<float> big = Activations(300, K);
    const std::vector<float> all =
        RunLinear(w, 0, N, big, 300, std::vector<float>(300 * N), N, false);
    for (int64_t T : {1, 2, 8, 64, 65}) {
      const std::vector<float> x(big.end() - T * K, big.end());  // the last T tokens
      const std::vector<float> got = RunLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false);
      const std::vector<float> tail(all.end() - T * N, all.end());
      EXPECT_TRUE(BitExact(got, tail)) << model::WeightFormatName(f) << " T " << T;
    }
  }
}

// Batch-invariant mode never takes the bf16 GEMM, whatever its threshold: through the
// backend (Linear and LinearGrouped), a token's row is bitwise the same alone and among 600.
TEST_F(CudaFp8Test, BackendBatchInvariantKeepsLinearFp8AtLargeT) {
  const int64_t T = 600, K = 1024, groups = 4, R = 128, N = groups * R;  // N: y's width
  gpu_->set_fp8_activations(true);
  gpu_->set_batch_invariant(true);
  gpu_->set_fp8_bf16_gemm_min_tokens(1);
  const auto run = [&](const WeightRef& w, const std::vector<float>& x, int64_t n, bool grouped) {
    float* y = PoisonedFloats(n * N);
    if (grouped) {
      gpu_->LinearGrouped(ToGpu(x), n, groups * K, K, w, groups, y, N);
    } else {
      gpu_->Linear(ToGpu(x), n, K, w, 0, N, y, N, false);
    }
    return FromGpu(y, n * N);
  };
  for (WeightFormat f : {WeightFormat::kFp8Block32, WeightFormat::kMxFp4}) {
    for (bool grouped : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << model::WeightFormatName(f) << (grouped ? " grouped" : ""));
      const HostWeight w = MakeWeight(f, N, K);
      const int64_t x_cols = grouped ? groups * K : K;
      const std::vector<float> x = Activations(T, x_cols);
      const std::vector<float> all = run(w.ref, x, T, grouped);
      const std::vector<float> last = run(w.ref, {x.end() - x_cols, x.end()}, 1, grouped);
      EXPECT_TRUE(BitExact(last, std::vector<float>(all.end() - N, all.end())));
      const std::vector<float> first = run(w.ref, {x.begin(), x.begin() + x_cols}, 1, grouped);
      EXPECT_TRUE(BitExact(first, std::vector<float>(all.begin(), all.begin() + N)));
    }
  }
}

// activations, split-K scratch and y (for the benchmarks).
struct Fp8Call {
  uint8_t* q;
  float* scale;
  uint8_t* scratch;
  float* y;
};

class CudaFp8BenchTest : public CudaFp8Test {
 protected:
  Fp8Call Prepare(int64_t T, int64_t N, int64_t K) {
    Fp8Call c{};
    c.q = PoisonedBytes(kernels::Fp8ActivationBytes(T, K));
    c.scale = kernels::Fp8ActivationScales(c.q, T, K);
    const int64_t sb = kernels::Fp8LinearScratchBytes(N, K, T);
    c.scratch = sb > 0 ? PoisonedBytes(sb) : nullptr;
    c.y = PoisonedFloats(T * N);
    EXPECT_EQ(kernels::QuantizeFp8Activations(ToGpu(Normal(T * K)), T, K, K, c.q, c.scale,
                                              gpu_->stream()),
              cudaSuccess);
    return c;
  }
  cudaError_t Run(const HostWeight& w, const Fp8Call& c, int64_t T) {
    return kernels::LinearFp8(w.device, 0, w.device.rows, c.q, c.scale, T, c.y, w.device.rows,
                              false, c.scratch, gpu_->stream());
  }
};

// Device time at V4.1 shapes (run with --gtest_also_run_disabled_tests).
TEST_F(CudaFp8BenchTest, DISABLED_Bench) {
  for (WeightFormat f : {WeightFormat::kFp8Block32, WeightFormat::kMxFp4}) {
    const int64_t K = 5120, N = f == WeightFormat::kMxFp4 ? 4608 : 32768;
    const HostWeight w = MakeWeight(f, N, K);
    for (int64_t T : {1, 8, 32, 64, 256, 4096}) {
      const Fp8Call c = Prepare(T, N, K);
      const double us = DeviceMicrosPerCall([&] { Run(w, c, T); });
      const double bytes = double(N) * K * (f == WeightFormat::kMxFp4 ? 0.5 : 1.0);
      std::printf("FP8ACT %s %lldx%lld T=%lld: %.1f us, weight %.0f GB/s, %.1f TFLOP/s\n",
                  std::string(model::WeightFormatName(f)).c_str(), static_cast<long long>(N),
                  static_cast<long long>(K), static_cast<long long>(T), us, bytes / us / 1e3,
                  2.0 * N * K * T / us / 1e6);
    }
  }
}

// One call per shape, for profilers (ncu -k regex:DenseKernel).
TEST_F(CudaFp8BenchTest, DISABLED_ProfileOnce) {
  for (WeightFormat f : {WeightFormat::kFp8Block32, WeightFormat::kMxFp4}) {
    const HostWeight w = MakeWeight(f, 32768, 5120);
    for (int64_t T : {1, 32, 4096}) {
      ASSERT_EQ(Run(w, Prepare(T, 32768, 5120), T), cudaSuccess);
      ASSERT_TRUE(gpu_->Synchronize().ok());
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
