// The block-128 FP8 path of the FP8-activation mode (kernels_block128.h,
// cuda_backend_block128.cc): the activation quantisation and the weight re-blocking against
// their CPU references (bitwise values), and the backend's Linear / LinearGrouped / LinearMany
// on cuBLASLt's block-scaled GEMM against an fp64 product of those CPU values (the FP8 tests'
// per-element bound). Also: where the path does not apply, the bf16 copies still run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/numerics.h"
#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernels_block128.h"
#include "backend/cuda/kernels_stream.h"

namespace deepinfer::backend::cuda::testing {
namespace {

constexpr int64_t kB = kernels::kBlock128;
constexpr size_t kBudget = size_t{1} << 30;
// cuBLASLt's FP8 tensor-core sums keep fewer bits within a 128-value block than the
// 32-value blocks of the FP8 kernels (kBoundTol): up to 0.0009 * sum |xq w| measured on the
// H200 (runs 141-144, K 256 - 640).
constexpr double kBlock128BoundTol = 0x1p-9;

// x [T, K] (row stride ldx) as its block-128 values (per token per 128 values, the FP8 pow2
// formula) [T, K]; *scales [T][K / 128] their scales.
std::vector<float> CpuQuantized(const std::vector<float>& x, int64_t T, int64_t K, int64_t ldx,
                                std::vector<float>* scales) {
  std::vector<float> q(T * K);
  scales->assign(T * (K / kB), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t kb = 0; kb < K / kB; ++kb) {
      float* block = &q[t * K + kb * kB];
      std::copy_n(&x[t * ldx + kb * kB], kB, block);
      float amax = 0.0f;
      for (int64_t i = 0; i < kB; ++i) amax = std::max(amax, std::fabs(block[i]));
      (*scales)[t * (K / kB) + kb] = cpu::Fp8Pow2Scale(amax);
      cpu::FakeQuantFp8Pow2Block(block, static_cast<int>(kB));
    }
  }
  return q;
}

// The re-blocked values of an FP8 block-32 weight [rows, cols]: value * 2^(own - block scale)
// rounded to e4m3, times the block's scale; *scales [row blocks][cols / 128] the block scales.
std::vector<float> CpuReblocked(const HostWeight& w, std::vector<float>* scales) {
  const int64_t rows = w.device.rows, cols = w.device.cols, sc = cols / 32;
  const int64_t row_blocks = (rows + kB - 1) / kB;
  std::vector<float> out(rows * cols);
  scales->assign(row_blocks * (cols / kB), 0.0f);
  for (int64_t rb = 0; rb < row_blocks; ++rb) {
    for (int64_t kb = 0; kb < cols / kB; ++kb) {
      int s_max = 0;
      for (int64_t r = rb * kB; r < std::min(rows, rb * kB + kB); r += 32) {
        for (int64_t c = kb * kB; c < kb * kB + kB; c += 32) {
          s_max = std::max<int>(s_max, w.scale[(r / 32) * sc + c / 32]);
        }
      }
      const float block_scale = std::ldexp(1.0f, s_max - 127);
      (*scales)[rb * (cols / kB) + kb] = block_scale;
      for (int64_t r = rb * kB; r < std::min(rows, rb * kB + kB); ++r) {
        for (int64_t c = kb * kB; c < kb * kB + kB; ++c) {
          const int shift = w.scale[(r / 32) * sc + c / 32] - s_max;
          const float v = cpu::E4m3ToF32(w.data[r * cols + c]);
          out[r * cols + c] = cpu::RoundToE4m3(std::ldexp(v, shift)) * block_scale;
        }
      }
    }
  }
  return out;
}

class CudaFp8Block128Test : public CudaFp8Test {
 protected:
  void SetUp() override {
    CudaFp8Test::SetUp();  // pins LinearFp8; the tests below turn the path on
    if (gpu_ == nullptr) return;
    EnableManyTokenPaths(kBudget);
    // From just past the stream (the default starts at prefill sizes): small T and tails too.
    gpu_->set_fp8_block128_min_tokens(kernels::kStreamMaxTokens + 1);
    gpu_->set_fp8_block128_copy_budget(kBudget);
  }

  // y [T, ldy] = y0 (+ if accumulating) x * W[row0 .. row0 + n_rows)^T on the block-128
  // values: checked per element (ExpectWithinBound, bound sum |xq wq|).
  void ExpectBlock128Linear(const HostWeight& w, int64_t row0, int64_t n_rows,
                            const std::vector<float>& x, int64_t T, int64_t ldx,
                            const std::vector<float>& y0, int64_t ldy, bool accumulate,
                            const std::vector<float>& got) {
    const int64_t K = w.device.cols;
    std::vector<float> xs, ws;
    const std::vector<float> xq = CpuQuantized(x, T, K, ldx, &xs);
    const std::vector<float> wq = CpuReblocked(w, &ws);
    std::vector<float> expected = y0;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < n_rows; ++i) {
        double acc = accumulate ? y0[t * ldy + i] : 0.0;
        for (int64_t k = 0; k < K; ++k) acc += double(xq[t * K + k]) * wq[(row0 + i) * K + k];
        expected[t * ldy + i] = static_cast<float>(acc);
      }
    }
    const double worst = ExpectWithinBound(
        got, expected, y0, T, n_rows, ldy, accumulate,
        [&](int64_t t, int64_t i) {
          double b = 0.0;
          for (int64_t k = 0; k < K; ++k) {
            b += std::fabs(double(xq[t * K + k]) * wq[(row0 + i) * K + k]);
          }
          return b;
        },
        kBlock128BoundTol);
    std::printf("  block-128 T=%lld K=%lld rows=%lld: max |err| / sum|xw| = %.3g\n",
                static_cast<long long>(T), static_cast<long long>(K),
                static_cast<long long>(n_rows), worst);
  }
};

// Bitwise the CPU values: T not a multiple of 4 (padded scale rows), x with a row stride past
// K, magnitudes spread over 2^-8 .. 2^8 per 32 values (several per 128-value block).
TEST_F(CudaFp8Block128Test, QuantizeMatchesCpu) {
  const int64_t T = 37, K = 384, ldx = K + 32;
  const std::vector<float> x = Activations(T, ldx);
  uint8_t* q = PoisonedBytes(kernels::Block128ActivationBytes(T, K));
  float* s = kernels::Block128ActivationScales(q, T, K);
  ASSERT_EQ(kernels::QuantizeFp8Block128(ToGpu(x), T, K, ldx, q, s, gpu_->stream()), cudaSuccess);
  const std::vector<uint8_t> got_q = BytesFromGpu(q, T * K);
  const int64_t ld = kernels::Block128ScaleLd(T);
  ASSERT_EQ(ld, 40);
  const std::vector<float> got_s = FromGpu(s, (K / kB) * ld);
  std::vector<float> scales;
  const std::vector<float> want = CpuQuantized(x, T, K, ldx, &scales);
  int64_t bad = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t kb = 0; kb < K / kB; ++kb) {
      const float scale = got_s[kb * ld + t];
      if (scale != scales[t * (K / kB) + kb] && bad++ < 5) {
        ADD_FAILURE() << "scale t=" << t << " kb=" << kb << ": " << scale;
      }
      for (int64_t i = kb * kB; i < kb * kB + kB; ++i) {
        const float v = cpu::E4m3ToF32(got_q[t * K + i]) * scale;
        if (v != want[t * K + i] && bad++ < 5) {
          ADD_FAILURE() << "q[" << t << "," << i << "] = " << v << " expected " << want[t * K + i];
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(kernels::QuantizeFp8Block128(ToGpu(x), T, 96, ldx, q, s, gpu_->stream()),
            cudaErrorInvalidValue);  // K not a multiple of 128
}

// A partial last row block (rows 320), scale bytes spread over 2^12 (values pushed below
// e4m3's normal range lose bits, as the CPU reference does): bitwise the CPU values. Equal
// sub-block scales keep every byte.
TEST_F(CudaFp8Block128Test, ReblockMatchesCpu) {
  const int64_t rows = 320, cols = 384;
  for (int hi : {112, 124}) {
    SCOPED_TRACE("scale bytes 112.." + std::to_string(hi));
    const HostWeight w = MakeFp8Weight(rows, cols, 112, hi);
    ASSERT_TRUE(kernels::Block128Convertible(w.device));
    uint8_t* buffer = PoisonedBytes(kernels::Block128WeightBytes(rows, cols));
    ASSERT_EQ(kernels::RequantFp8Block128(w.device, buffer, gpu_->stream()), cudaSuccess);
    const kernels::Block128Weight view = kernels::Block128WeightAt(buffer, rows, cols);
    ASSERT_EQ(view.scale_ld, 4);
    const std::vector<uint8_t> data = BytesFromGpu(view.data, rows * cols);
    const std::vector<float> scale = FromGpu(view.scale, 3 * view.scale_ld);
    std::vector<float> want_scale;
    const std::vector<float> want = CpuReblocked(w, &want_scale);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float s = scale[(r / kB) * view.scale_ld + c / kB];
        ASSERT_EQ(s, want_scale[(r / kB) * (cols / kB) + c / kB]) << r << "," << c;
        const float v = cpu::E4m3ToF32(data[r * cols + c]) * s;
        if (v != want[r * cols + c] && bad++ < 5) {
          ADD_FAILURE() << "w[" << r << "," << c << "] = " << v << " expected "
                        << want[r * cols + c];
        }
      }
    }
    EXPECT_EQ(bad, 0);
    if (hi == 112) {
      EXPECT_EQ(data, w.data);  // one scale everywhere: the bytes as they were
    }
  }
}

// The backend's Linear past the stream: row ranges (row0 a multiple of 128), accumulated and
// padded y, T from just past the stream to a prefill-sized call, with and without a tail of
// T % 4 tokens. One re-blocked copy of the weight, no bf16 copy.
TEST_F(CudaFp8Block128Test, LinearMatchesCpu) {
  const int64_t N = 512, K = 640;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  struct Case {
    int64_t T, row0, n_rows, ldy_pad;
    bool accumulate;
  };
  for (const Case& c :
       {Case{33, 0, N, 0, false}, Case{64, 128, 256, 4, true}, Case{509, 0, N, 8, false},
        Case{600, 256, 200, 0, true}, Case{602, 128, 384, 0, true}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " rows " << c.row0 << "+" << c.n_rows);
    const int64_t ldy = c.n_rows + c.ldy_pad;
    const std::vector<float> x = Activations(c.T, K);
    const std::vector<float> y0 = Normal(c.T * ldy);
    float* y = ToGpu(y0);
    gpu_->Linear(ToGpu(x), c.T, K, w.ref, c.row0, c.n_rows, y, ldy, c.accumulate);
    ASSERT_TRUE(gpu_->Synchronize().ok());
    ExpectBlock128Linear(w, c.row0, c.n_rows, x, c.T, K, y0, ldy, c.accumulate,
                         FromGpu(y, c.T * ldy));
    EXPECT_EQ(gpu_->fp8_block128_copy_bytes(),
              static_cast<size_t>(kernels::Block128WeightBytes(N, K)));
    EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
  }
  gpu_->ForgetWeights();
  EXPECT_EQ(gpu_->fp8_block128_copy_bytes(), size_t{0});  // freed with its weight
}

// Block-diagonal weights (wo_a): one quantisation of all groups per token part, a GEMM per
// group and part (72 tokens, and 75: a tail of 3).
TEST_F(CudaFp8Block128Test, GroupedMatchesCpu) {
  const int64_t groups = 4, R = 128, K = 256, N = groups * R;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  for (int64_t T : {72, 75}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, groups * K);
    float* y = PoisonedFloats(T * N);
    gpu_->LinearGrouped(ToGpu(x), T, groups * K, K, w.ref, groups, y, N);
    ASSERT_TRUE(gpu_->Synchronize().ok());
    const std::vector<float> got = FromGpu(y, T * N);
    // Group g is the Linear of rows [g R, g R + R) on columns [g K, g K + K) of x.
    for (int64_t g = 0; g < groups; ++g) {
      SCOPED_TRACE("group " + std::to_string(g));
      std::vector<float> xg(T * K), got_g(T * R), zero(T * R, 0.0f);
      for (int64_t t = 0; t < T; ++t) {
        std::copy_n(&x[t * groups * K + g * K], K, &xg[t * K]);
        std::copy_n(&got[t * N + g * R], R, &got_g[t * R]);
      }
      ExpectBlock128Linear(w, g * R, R, xg, T, K, zero, R, false, got_g);
    }
    EXPECT_EQ(gpu_->fp8_block128_copy_bytes(),
              static_cast<size_t>(kernels::Block128WeightBytes(N, K)));
    EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
  }
}

// Several weights of one x past the stream: each output bitwise its own Linear.
TEST_F(CudaFp8Block128Test, LinearManyEqualsLinearEach) {
  const int64_t K = 1024;
  const HostWeight a = MakeWeight(WeightFormat::kFp8Block32, 256, K);
  const HostWeight b = MakeWeight(WeightFormat::kFp8Block32, 128, K);
  ExpectLinearManyEqualsLinearEach(a, b, 40);
  EXPECT_EQ(gpu_->fp8_block128_copy_bytes(),
            static_cast<size_t>(kernels::Block128WeightBytes(256, K) +
                                kernels::Block128WeightBytes(128, K)));
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
}

// Where the path does not fit (row0 not a multiple of 128, ldy not a multiple of 4), past its
// copy budget, below its threshold and in batch-invariant mode, the former paths run: a bf16
// copy (within the FP8 tests' bound on the per-32 activations) or none, and no re-blocked
// copy.
TEST_F(CudaFp8Block128Test, OtherPathsWhereItDoesNotApply) {
  const int64_t N = 256, K = 512, T = 48;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  const std::vector<float> x = Activations(T, K);
  for (const auto& [row0, n_rows, ldy] :
       {std::tuple<int64_t, int64_t, int64_t>{32, 224, 224}, {0, N, N + 1}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << row0 << "+" << n_rows << " ldy " << ldy);
    const std::vector<float> y0 = Normal(T * ldy);
    float* y = ToGpu(y0);
    gpu_->Linear(ToGpu(x), T, K, w.ref, row0, n_rows, y, ldy, false);
    ExpectLinearMatchesCpu(w, row0, n_rows, FakeQuantized(x, T, K), T, y0, ldy, false,
                           FromGpu(y, T * ldy), "bf16 copy");
    EXPECT_EQ(gpu_->fp8_block128_copy_bytes(), size_t{0});
    EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{N} * K * 2);
  }
  gpu_->ForgetWeights();
  gpu_->set_fp8_bf16_copy(0, 0);  // no bf16 copies (the re-blocked ones have their own budget)
  gpu_->set_fp8_block128_copy_budget(static_cast<size_t>(kernels::Block128WeightBytes(N, K)) - 1);
  gpu_->Linear(ToGpu(x), T, K, w.ref, 0, N, PoisonedFloats(T * N), N, false);  // past it
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(gpu_->fp8_block128_copy_bytes(), size_t{0});
  gpu_->set_fp8_block128_copy_budget(kBudget);
  gpu_->set_batch_invariant(true);
  gpu_->Linear(ToGpu(x), T, K, w.ref, 0, N, PoisonedFloats(T * N), N, false);
  gpu_->set_batch_invariant(false);
  gpu_->set_fp8_block128_min_tokens(T + 1);
  gpu_->Linear(ToGpu(x), T, K, w.ref, 0, N, PoisonedFloats(T * N), N, false);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_EQ(gpu_->fp8_block128_copy_bytes(), size_t{0});
  gpu_->set_fp8_block128_min_tokens(T);
  gpu_->Linear(ToGpu(x), T, K, w.ref, 0, N, PoisonedFloats(T * N), N, false);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_GT(gpu_->fp8_block128_copy_bytes(), size_t{0});
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
