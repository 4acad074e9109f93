// The FP8-activation fast mode (kernels_fp8.h) against the CPU reference run on
// fake-quantised activations: QuantizeFp8Activations (and its bf16 variant) bitwise against
// FakeQuant(kFp8Block32Pow2), LinearFp8 for FP8 (block32, row32) and MXFP4 weights at 1..300
// tokens (skinny split-K and wide tiles), its batch invariance (bitwise), the backend's bf16
// cuBLAS GEMMs for many tokens (Linear, LinearGrouped; never in batch-invariant mode), and the
// routed experts (CudaBackend::RoutedExperts with set_fp8_activations) against a per-token
// reference that quantises x and h the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_fp8.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using model::ExpertWeights;
using model::FakeQuantKind;
using model::WeightFormat;
using model::WeightRef;

// Per element: |gpu - reference| <= kBoundTol * sum_k |xq[k] w[k]|. The products are exact;
// the tensor core sums each 32-value block with limited alignment precision (about 14
// significand bits reported for Hopper FP8 accumulation), then fp32 fma per block.
constexpr double kBoundTol = 0x1p-11;
constexpr double kRelL2Tol = 1e-3;

struct HostWeight {
  std::vector<uint8_t> data, scale;
  WeightRef ref;
  kernels::DeviceWeight device;
};

class CudaFp8Test : public CudaVsCpuTest {
 protected:
  // MXFP4 scale bytes are drawn from [fp4_scale_lo, fp4_scale_hi].
  HostWeight MakeWeight(WeightFormat f, int64_t rows, int64_t cols, int fp4_scale_lo = 118,
                        int fp4_scale_hi = 124) {
    HostWeight w;
    const int64_t cb = cols / 32;
    if (f == WeightFormat::kMxFp4) {
      w.data = Bytes(rows * cols / 2, 0, 255);
      w.scale = Bytes(rows * cb, fp4_scale_lo, fp4_scale_hi);
    } else {
      w.data = Fp8Bytes(rows * cols);
      w.scale = Bytes((f == WeightFormat::kFp8Block32 ? (rows + 31) / 32 : rows) * cb, 112, 124);
    }
    w.ref = WeightRef{"fp8test", f, rows, cols, w.data.data(), w.scale.data()};
    w.device.format = f;
    w.device.rows = rows;
    w.device.cols = cols;
    w.device.data = BytesToGpu(w.data);
    w.device.scale = BytesToGpu(w.scale);
    return w;
  }

  // x with per-block magnitudes spread over ~2^-8 .. 2^8 (exercises the scales).
  std::vector<float> Activations(int64_t T, int64_t K) {
    std::vector<float> x = Normal(T * K);
    const std::vector<int32_t> e = Ints(T * K / 32, -8, 8);
    for (int64_t i = 0; i < T * K; ++i) x[i] = std::ldexp(x[i], e[i / 32]);
    return x;
  }

  std::vector<float> FakeQuantized(std::vector<float> x, int64_t T, int64_t K) {
    cpu_.FakeQuant(x.data(), T, K, K, FakeQuantKind::kFp8Block32Pow2);
    return x;
  }

  // y [T, ldy] from LinearFp8 (device quantisation of x first) on the device copy of y0.
  std::vector<float> RunLinear(const HostWeight& w, int64_t row0, int64_t n_rows,
                               const std::vector<float>& x, int64_t T, std::vector<float> y0,
                               int64_t ldy, bool accumulate) {
    const int64_t K = w.device.cols;
    auto* act = PoisonedBytes(kernels::Fp8ActivationBytes(T, K));
    auto* scale = kernels::Fp8ActivationScales(act, T, K);
    const int64_t scratch_bytes = kernels::Fp8LinearScratchBytes(n_rows, K, T);
    uint8_t* scratch = scratch_bytes > 0 ? PoisonedBytes(scratch_bytes) : nullptr;
    float* y = ToGpu(y0);
    EXPECT_EQ(kernels::QuantizeFp8Activations(ToGpu(x), T, K, K, act, scale, gpu_->stream()),
              cudaSuccess);
    const cudaError_t e = kernels::LinearFp8(w.device, row0, n_rows, act, scale, T, y, ldy,
                                             accumulate, scratch, gpu_->stream());
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return FromGpu(y, T * ldy);
  }

  // y [T, ldy] from CudaBackend::Linear in the FP8-activation mode (not batch-invariant) with
  // the bf16-GEMM threshold `min_tokens`, on the device copy of y0.
  std::vector<float> RunBackendLinear(const HostWeight& w, int64_t row0, int64_t n_rows,
                                      const std::vector<float>& x, int64_t T, std::vector<float> y0,
                                      int64_t ldy, bool accumulate, int64_t min_tokens) {
    gpu_->set_fp8_activations(true);
    gpu_->set_batch_invariant(false);
    gpu_->set_fp8_bf16_gemm_min_tokens(min_tokens);
    float* y = ToGpu(y0);
    gpu_->Linear(ToGpu(x), T, w.device.cols, w.ref, row0, n_rows, y, ldy, accumulate);
    return FromGpu(y, T * ldy);
  }

  // Which implementation CheckLinear runs: kernels::LinearFp8, or the backend's bf16 cuBLAS
  // GEMM on fake-quantised activations (threshold 1 token; the default when T reaches it).
  enum class Path { kKernel, kBackendBf16Gemm, kBackendDefaultThreshold };

  void CheckLinear(WeightFormat f, int64_t T, int64_t K, int64_t N, int64_t row0, int64_t n_rows,
                   int64_t ldy_pad, bool accumulate, Path path = Path::kKernel) {
    SCOPED_TRACE(::testing::Message()
                 << model::WeightFormatName(f) << " T=" << T << " K=" << K << " N=" << N << " rows "
                 << row0 << "+" << n_rows << (accumulate ? " accumulate" : "") << " segments "
                 << kernels::Fp8LinearSegments(n_rows, K) << " path " << static_cast<int>(path));
    const HostWeight w = MakeWeight(f, N, K);
    ASSERT_TRUE(kernels::Fp8LinearApplicable(w.device));
    const int64_t ldy = n_rows + ldy_pad;
    const std::vector<float> x = Activations(T, K);
    const std::vector<float> xq = FakeQuantized(x, T, K);
    const std::vector<float> y0 = Normal(T * ldy);
    std::vector<float> expected = y0;
    cpu_.Linear(xq.data(), T, K, w.ref, row0, n_rows, expected.data(), ldy, accumulate);
    const std::vector<float> got =
        path == Path::kKernel
            ? RunLinear(w, row0, n_rows, x, T, y0, ldy, accumulate)
            : RunBackendLinear(
                  w, row0, n_rows, x, T, y0, ldy, accumulate,
                  path == Path::kBackendBf16Gemm ? 1 : CudaBackend::kFp8Bf16GemmMinTokens);
    std::vector<int64_t> ids(n_rows);
    for (int64_t i = 0; i < n_rows; ++i) ids[i] = row0 + i;
    std::vector<float> wd(n_rows * K);
    cpu_.GatherRows(w.ref, ids.data(), n_rows, wd.data());
    const double worst =
        ExpectWithinBound(got, expected, y0, T, n_rows, ldy, accumulate, [&](int64_t t, int64_t i) {
          double bound = 0.0;
          for (int64_t k = 0; k < K; ++k) bound += std::fabs(double(xq[t * K + k]) * wd[i * K + k]);
          return bound;
        });
    std::printf("  %s T=%lld K=%lld rows=%lld: max |err| / sum|xw| = %.3g\n",
                std::string(model::WeightFormatName(f)).c_str(), static_cast<long long>(T),
                static_cast<long long>(K), static_cast<long long>(n_rows), worst);
    EXPECT_TRUE(RelL2Close(got, expected, kRelL2Tol));
  }

  // Per element of y [T, ldy]: a column i < n_cols is within kBoundTol * bound(t, i) (the sum
  // of |xq w| over its K products) + 2^-22 (|y0| if accumulating + |expected|); a padding
  // column (i >= n_cols) is bitwise y0. Returns the largest |err| / bound.
  double ExpectWithinBound(const std::vector<float>& got, const std::vector<float>& expected,
                           const std::vector<float>& y0, int64_t T, int64_t n_cols, int64_t ldy,
                           bool accumulate, const std::function<double(int64_t, int64_t)>& bound) {
    int64_t bad = 0;
    double worst = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < ldy; ++i) {
        const int64_t at = t * ldy + i;
        if (i >= n_cols) {
          if (std::memcmp(&got[at], &y0[at], 4) != 0 && bad++ < 5) {
            ADD_FAILURE() << "pad y[" << t << "," << i << "] changed";
          }
          continue;
        }
        const double b = bound(t, i);
        const double base = accumulate ? std::fabs(y0[at]) : 0.0;
        const double err = std::fabs(double(got[at]) - double(expected[at]));
        worst = std::max(worst, err / (b + 1e-30));
        const double allowed = kBoundTol * b + 0x1p-22 * (base + std::fabs(expected[at]));
        if (!(err <= allowed) && bad++ < 5) {
          ADD_FAILURE() << "y[" << t << "," << i << "] = " << got[at] << " expected "
                        << expected[at] << " (|err| " << err << " > " << allowed << ")";
        }
      }
    }
    EXPECT_EQ(bad, 0);
    return worst;
  }
};

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
  for (const Case c : {Case{1, 32, 32}, Case{3, 32, 40}, Case{37, 256, 300}, Case{5, 5120, 5120}}) {
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
// In FP8-activation mode a BF16 weight (the head) above the GEMV's token count multiplies x
// rounded to nearest bf16 (one GEMM): equal to the CPU on rounded x to fp32 accumulation
// error, and clearly not the exact product (the difference is the bf16 rounding of x).
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

// --- routed experts --------------------------------------------------------------------

class CudaFp8ExpertsTest : public CudaFp8Test {
 protected:
  struct Experts {
    std::vector<HostWeight> mats;
    std::vector<ExpertWeights> table;
    int64_t D = 0, I = 0;
  };

  Experts MakeExperts(int64_t n, WeightFormat f, int64_t D, int64_t I, int scale_lo = 118,
                      int scale_hi = 124) {
    Experts ex;
    ex.D = D, ex.I = I;
    ex.mats.reserve(3 * n);
    for (int64_t e = 0; e < n; ++e) {
      ExpertWeights w;
      ex.mats.push_back(MakeWeight(f, I, D, scale_lo, scale_hi));
      w.w1 = ex.mats.back().ref;
      ex.mats.push_back(MakeWeight(f, D, I, scale_lo, scale_hi));
      w.w2 = ex.mats.back().ref;
      ex.mats.push_back(MakeWeight(f, I, D, scale_lo, scale_hi));
      w.w3 = ex.mats.back().ref;
      w.w1.name = std::to_string(e) + ".w1";
      w.w2.name = std::to_string(e) + ".w2";
      w.w3.name = std::to_string(e) + ".w3";
      ex.table.push_back(w);
    }
    return ex;
  }

  // Per token and slot: xq = FakeQuant(x), h = SwiGlu(W1 xq, W3 xq) * weight,
  // hq = FakeQuant(h), out = W2 hq; slots summed in order (cuda_test_util.h).
  std::vector<float> Reference(const Experts& ex, const std::vector<float>& x, int64_t T,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               int64_t k, float limit) {
    return RoutedExpertsReference(cpu_, ex.table, ex.D, ex.I, x, T, ids, weights, k, limit,
                                  /*fp8_activations=*/true);
  }

  std::vector<int32_t> Route(int64_t T, int64_t k, int64_t n) {
    std::vector<int32_t> ids(T * k);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        int32_t e;
        do {
          e = Ints(1, 0, static_cast<int32_t>(n - 1))[0];
        } while (std::find(&ids[t * k], &ids[t * k] + i, e) != &ids[t * k] + i);
        ids[t * k + i] = e;
      }
    }
    return ids;
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

TEST_F(CudaFp8ExpertsTest, MatchesCpuReference) {
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
}

// A token's row is bitwise the same alone and inside batches of 8, 64 and 600 tokens.
TEST_F(CudaFp8ExpertsTest, BatchInvariantBitwise) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t k = 6, T = 600;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  const std::vector<float> all = RunGpu(ex, x, T, ids, weights, k, 7.0f);
  for (int64_t n : {1, 8, 64}) {
    const std::vector<float> xs(x.end() - n * ex.D, x.end());
    const std::vector<int32_t> is(ids.end() - n * k, ids.end());
    const std::vector<float> ws(weights.end() - n * k, weights.end());
    const std::vector<float> got = RunGpu(ex, xs, n, is, ws, k, 7.0f);
    EXPECT_TRUE(BitExact(got, std::vector<float>(all.end() - n * ex.D, all.end()))) << n;
  }
}

TEST_F(CudaFp8ExpertsTest, RealV41ShapeDecode) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  const Experts ex = MakeExperts(24, WeightFormat::kMxFp4, 5120, 2304);
  const int64_t T = 4, k = 6;
  const std::vector<float> x = Normal(T * ex.D);
  const std::vector<int32_t> ids = Route(T, k, 24);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 0.5f);
  const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 7.0f);
  EXPECT_TRUE(RelL2Close(RunGpu(ex, x, T, ids, weights, k, 7.0f), expected, 5e-3));
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

// Within the bf16 path a token's row does not depend on the other tokens or on the item
// width (T 600: items of 128 pairs; T 200: 96; T 100 and 8: 64).
TEST_F(CudaFp8ExpertsTest, Bf16PathRowsIndependentOfBatch) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t k = 6, T = 600;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  gpu_->set_experts_bf16_min_tokens(1);
  const std::vector<float> all = RunGpu(ex, x, T, ids, weights, k, 7.0f);
  for (int64_t n : {8, 100, 200}) {
    const std::vector<float> xs(x.end() - n * ex.D, x.end());
    const std::vector<int32_t> is(ids.end() - n * k, ids.end());
    const std::vector<float> ws(weights.end() - n * k, weights.end());
    const std::vector<float> got = RunGpu(ex, xs, n, is, ws, k, 7.0f);
    EXPECT_TRUE(BitExact(got, std::vector<float>(all.end() - n * ex.D, all.end()))) << n;
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
  auto created = CudaBackend::Create(0);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<CudaBackend> b = std::move(created).value();
  b->set_fp8_activations(true);
  model::RoutedExpertsArgs a;
  float* dx = b->AllocFloats(T * ex.D);
  int32_t* dids = b->AllocInts(T * k);
  float* dw = b->AllocFloats(T * k);
  b->CopyToDevice(dx, x.data(), T * ex.D * 4);
  b->CopyToDevice(dids, ids.data(), T * k * 4);
  b->CopyToDevice(dw, weights.data(), T * k * 4);
  a.x = dx, a.T = T, a.D = ex.D, a.experts = dids, a.weights = dw;
  a.k = k, a.table = ex.table.data(), a.n_experts = 8, a.swiglu_limit = 0.0f;
  a.y = b->AllocFloats(T * ex.D);
  b->RoutedExperts(a);
  const base::Status st = b->Synchronize();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("expert id"), std::string::npos) << st;
  std::vector<float> y(T * ex.D);
  ASSERT_EQ(cudaMemcpy(y.data(), a.y, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (int64_t d = 0; d < ex.D; ++d) {
    EXPECT_TRUE(std::isnan(y[ex.D + d])) << d;
    EXPECT_TRUE(std::isfinite(y[d]) && std::isfinite(y[2 * ex.D + d])) << d;
  }
}

// Device buffers of one LinearFp8 call at T tokens on an N x K weight: quantised random
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
