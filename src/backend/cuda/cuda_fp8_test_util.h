// The fixture shared by the FP8-activation tests (cuda_fp8_test.cc: quantisation and Linear;
// cuda_fp8_experts_test.cc: routed experts): random FP8 / MXFP4 weights on both backends,
// activations with spread block magnitudes, the CPU fake-quantisation and the per-element
// error bound of the FP8 tiles.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
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
#include "backend/cuda/kernels_stream.h"

namespace deepinfer::backend::cuda::testing {

using model::ExpertWeights;
using model::FakeQuantKind;
using model::WeightFormat;
using model::WeightRef;

// Per element: |gpu - reference| <= kBoundTol * sum_k |xq[k] w[k]|. The products are exact;
// the tensor core sums each 32-value block with limited alignment precision (about 14
// significand bits reported for Hopper FP8 accumulation), then fp32 fma per block.
inline constexpr double kBoundTol = 0x1p-11;
inline constexpr double kRelL2Tol = 1e-3;

struct HostWeight {
  std::vector<uint8_t> data, scale;
  WeightRef ref;
  kernels::DeviceWeight device;
};

class CudaFp8Test : public CudaVsCpuTest {
 protected:
  // The tests of LinearFp8 and of the bf16 GEMMs pin those paths: the few-token streaming
  // Linear (kernels_stream.h), the kept bf16 weight copies (set_fp8_bf16_copy) and the
  // block-128 FP8 GEMM (set_fp8_block128_min_tokens), all on by default, are tested on their
  // own (cuda_linear_stream_test.cc, cuda_fp8_copy_test.cc, cuda_fp8_block128_test.cc).
  void SetUp() override {
    CudaVsCpuTest::SetUp();
    if (gpu_ != nullptr) {
      gpu_->set_linear_stream_max_tokens(0);
      gpu_->set_fp8_bf16_copy(0, 0);
      gpu_->set_fp8_block128_min_tokens(0);
      gpu_->set_experts_block128(false);     // cuda_moe_block128_test.cc tests it
      gpu_->set_experts_decode_e4m3(false);  // likewise
    }
  }

  // The FP8 mode with its default paths for many tokens (not batch-invariant; the stream up to
  // kStreamMaxTokens, bf16 weight copies from kFp8Bf16CopyMinTokens within copy_budget, the
  // bf16 GEMM from kFp8Bf16GemmMinTokens); the block-128 path stays as SetUp pinned it (off).
  void EnableManyTokenPaths(size_t copy_budget) {
    gpu_->set_fp8_activations(true);
    gpu_->set_batch_invariant(false);
    gpu_->set_fp8_bf16_gemm_min_tokens(CudaBackend::kFp8Bf16GemmMinTokens);
    gpu_->set_linear_stream_max_tokens(kernels::kStreamMaxTokens);
    gpu_->set_fp8_bf16_copy(CudaBackend::kFp8Bf16CopyMinTokens, copy_budget);
  }

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

  // An FP8 block-32 weight whose scale bytes are drawn from [scale_lo, scale_hi].
  HostWeight MakeFp8Weight(int64_t rows, int64_t cols, int scale_lo, int scale_hi) {
    HostWeight w = MakeWeight(WeightFormat::kFp8Block32, rows, cols);
    w.scale = Bytes(static_cast<int64_t>(w.scale.size()), scale_lo, scale_hi);
    w.ref.scale = w.scale.data();
    w.device.scale = BytesToGpu(w.scale);
    return w;
  }

  // LinearMany of a (all rows, overwritten) and b (all rows, accumulated) over one x [T, K]
  // against each output's own Linear on the same inputs: bitwise equal.
  void ExpectLinearManyEqualsLinearEach(const HostWeight& a, const HostWeight& b, int64_t T) {
    const int64_t K = a.device.cols, ra = a.device.rows, rb = b.device.rows;
    const std::vector<float> x = Activations(T, K);
    const float* dx = ToGpu(x);
    const std::vector<float> ya = Normal(T * ra), yb = Normal(T * rb);
    float* many[2] = {ToGpu(ya), ToGpu(yb)};
    float* each[2] = {ToGpu(ya), ToGpu(yb)};
    const model::LinearOut outs[2] = {{&a.ref, 0, ra, many[0], ra, false},
                                      {&b.ref, 0, rb, many[1], rb, true}};
    gpu_->LinearMany(dx, T, K, outs, 2);
    gpu_->Linear(dx, T, K, a.ref, 0, ra, each[0], ra, false);
    gpu_->Linear(dx, T, K, b.ref, 0, rb, each[1], rb, true);
    ASSERT_TRUE(gpu_->Synchronize().ok());
    EXPECT_TRUE(BitExact(FromGpu(many[0], T * ra), FromGpu(each[0], T * ra)));
    EXPECT_TRUE(BitExact(FromGpu(many[1], T * rb), FromGpu(each[1], T * rb)));
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
    const std::vector<float> got =
        path == Path::kKernel
            ? RunLinear(w, row0, n_rows, x, T, y0, ldy, accumulate)
            : RunBackendLinear(
                  w, row0, n_rows, x, T, y0, ldy, accumulate,
                  path == Path::kBackendBf16Gemm ? 1 : CudaBackend::kFp8Bf16GemmMinTokens);
    ExpectLinearMatchesCpu(w, row0, n_rows, xq, T, y0, ldy, accumulate, got,
                           std::string(model::WeightFormatName(f)));
  }

  // got = y [T, ldy] of a Linear of rows [row0, row0 + n_rows) of w on the activations whose
  // fake-quantised values are xq [T, K] (onto y0 if accumulating), against the CPU Linear on
  // xq: ExpectWithinBound with the sum of |xq w| per element, and the relative L2 error.
  // Prints the worst |err| / bound under `label`.
  void ExpectLinearMatchesCpu(const HostWeight& w, int64_t row0, int64_t n_rows,
                              const std::vector<float>& xq, int64_t T, const std::vector<float>& y0,
                              int64_t ldy, bool accumulate, const std::vector<float>& got,
                              const std::string& label) {
    const int64_t K = w.device.cols;
    std::vector<float> expected = y0;
    cpu_.Linear(xq.data(), T, K, w.ref, row0, n_rows, expected.data(), ldy, accumulate);
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
    std::printf("  %s T=%lld K=%lld rows=%lld: max |err| / sum|xw| = %.3g\n", label.c_str(),
                static_cast<long long>(T), static_cast<long long>(K),
                static_cast<long long>(n_rows), worst);
    EXPECT_TRUE(RelL2Close(got, expected, kRelL2Tol));
  }

  // got = y [T, groups * R] of a LinearGrouped of w (groups of R rows, each over its own K
  // columns of the activations whose fake-quantised values are xq [T, groups * K]) against
  // the CPU LinearGrouped on xq: ExpectWithinBound per element, and the relative L2 error.
  void ExpectGroupedMatchesCpu(const HostWeight& w, int64_t groups, const std::vector<float>& xq,
                               int64_t T, const std::vector<float>& got) {
    const int64_t N = w.device.rows, K = w.device.cols, R = N / groups;
    std::vector<float> expected(T * N);
    cpu_.LinearGrouped(xq.data(), T, groups * K, K, w.ref, groups, expected.data(), N);
    std::vector<int64_t> ids(N);
    for (int64_t i = 0; i < N; ++i) ids[i] = i;
    std::vector<float> wd(N * K);
    cpu_.GatherRows(w.ref, ids.data(), N, wd.data());
    ExpectWithinBound(got, expected, expected, T, N, N, false, [&](int64_t t, int64_t i) {
      const float* xg = &xq[t * groups * K + (i / R) * K];
      double bound = 0.0;
      for (int64_t k = 0; k < K; ++k) bound += std::fabs(double(xg[k]) * wd[i * K + k]);
      return bound;
    });
    EXPECT_TRUE(RelL2Close(got, expected, kRelL2Tol));
  }

  // A table of routed experts and the host copies of their weights.
  struct Experts {
    std::vector<HostWeight> mats;
    std::vector<ExpertWeights> table;
    int64_t D = 0, I = 0;
  };

  // n experts of [I, D] / [D, I] / [I, D] in format f, scale bytes in [scale_lo, scale_hi]; with
  // pool > 0 only `pool` distinct weight sets, expert e using set e % pool (benchmarks).
  Experts MakeExperts(int64_t n, WeightFormat f, int64_t D, int64_t I, int scale_lo = 118,
                      int scale_hi = 124, int64_t pool = 0) {
    const ScaleRange r{scale_lo, scale_hi};
    return MakeExpertsPerMatrix(n, f, D, I, {r, r, r}, pool);
  }

  // MakeExperts with the scale bytes of w1, w2 and w3 in ranges[0], [1] and [2].
  struct ScaleRange {
    int lo, hi;
  };
  Experts MakeExpertsPerMatrix(int64_t n, WeightFormat f, int64_t D, int64_t I,
                               const std::array<ScaleRange, 3>& ranges, int64_t pool = 0) {
    Experts ex;
    ex.D = D, ex.I = I;
    const int64_t distinct = pool > 0 ? std::min(pool, n) : n;
    ex.mats.reserve(3 * distinct);
    for (int64_t e = 0; e < distinct; ++e) {
      ex.mats.push_back(MakeWeight(f, I, D, ranges[0].lo, ranges[0].hi));
      ex.mats.push_back(MakeWeight(f, D, I, ranges[1].lo, ranges[1].hi));
      ex.mats.push_back(MakeWeight(f, I, D, ranges[2].lo, ranges[2].hi));
    }
    for (int64_t e = 0; e < n; ++e) {
      const int64_t set = e % distinct;
      ExpertWeights w;
      w.w1 = ex.mats[3 * set].ref;
      w.w2 = ex.mats[3 * set + 1].ref;
      w.w3 = ex.mats[3 * set + 2].ref;
      w.w1.name = std::to_string(e) + ".w1";
      w.w2.name = std::to_string(e) + ".w2";
      w.w3.name = std::to_string(e) + ".w3";
      ex.table.push_back(w);
    }
    return ex;
  }

  // Random routing: T tokens x k distinct experts of [0, n).
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

  // RoutedExperts once, in FP8 mode with the experts-bf16 threshold `bf16_min_tokens`, on a
  // backend of its own (an out-of-range expert id leaves a sticky error): the backend's status
  // after the call and y [T, D] (n_experts = table.size(), no SwiGLU limit).
  struct ExpertsRun {
    base::Status status;
    std::vector<float> y;
  };
  ExpertsRun RunExpertsOnOwnBackend(const std::vector<ExpertWeights>& table, int64_t D,
                                    const std::vector<float>& x, int64_t T,
                                    const std::vector<int32_t>& ids,
                                    const std::vector<float>& weights, int64_t k,
                                    int64_t bf16_min_tokens) {
    auto created = CudaBackend::Create(0);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return {created.status(), {}};
    std::unique_ptr<CudaBackend> b = std::move(created).value();
    b->set_fp8_activations(true);
    b->set_experts_bf16_min_tokens(bf16_min_tokens);
    b->set_experts_decode_e4m3(false);  // the bf16 / FP8 paths under test
    model::RoutedExpertsArgs a;
    float* dx = b->AllocFloats(T * D);
    int32_t* dids = b->AllocInts(T * k);
    float* dw = b->AllocFloats(T * k);
    b->CopyToDevice(dx, x.data(), T * D * 4);
    b->CopyToDevice(dids, ids.data(), T * k * 4);
    b->CopyToDevice(dw, weights.data(), T * k * 4);
    a.x = dx, a.T = T, a.D = D, a.experts = dids, a.weights = dw;
    a.k = k, a.table = table.data(), a.n_experts = static_cast<int64_t>(table.size());
    a.swiglu_limit = 0.0f;
    a.y = b->AllocFloats(T * D);
    b->RoutedExperts(a);
    ExpertsRun run{b->Synchronize(), std::vector<float>(T * D)};
    EXPECT_EQ(cudaMemcpy(run.y.data(), a.y, run.y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return run;
  }

  // Per element of y [T, ldy]: a column i < n_cols is within tol * bound(t, i) (the sum of
  // |xq w| over its K products) + 2^-22 (|y0| if accumulating + |expected|); a padding column
  // (i >= n_cols) is bitwise y0. Returns the largest |err| / bound.
  double ExpectWithinBound(const std::vector<float>& got, const std::vector<float>& expected,
                           const std::vector<float>& y0, int64_t T, int64_t n_cols, int64_t ldy,
                           bool accumulate, const std::function<double(int64_t, int64_t)>& bound,
                           double tol = kBoundTol) {
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
        const double allowed = tol * b + 0x1p-22 * (base + std::fabs(expected[at]));
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

}  // namespace deepinfer::backend::cuda::testing
