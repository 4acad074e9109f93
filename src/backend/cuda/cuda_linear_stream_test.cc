// The FP8-activation mode's few-token streaming Linear (kernels_stream.h: LinearStream,
// LinearStreamGrouped) against the CPU reference run on fake-quantised activations, with the
// FP8 tests' per-element bound; its independence of T and of the other tokens (bitwise);
// both scale branches (ue8m0 bytes above and below 134); and the backend's dispatch (<= 32
// tokens, kStreamMaxTokens, outside batch-invariant mode, LinearFp8 otherwise); several weights
// in one launch (LinearStreamMany, Backend::LinearMany) bitwise equal to their own calls. Token
// tiles: T 1..8 one, 9..16 two, 17..24 three, 25..32 four (the last two load the activations
// within a step: another register plan, same MMA order).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernels_stream.h"

namespace deepinfer::backend::cuda::testing {
namespace {

class CudaLinearStreamTest : public CudaFp8Test {
 protected:
  // Several outputs over one x (LinearStreamMany), K = kManyK: two row ranges of a 256-row
  // weight (the second accumulated into a padded y), rows 16.. of a 64-row weight with other
  // scales, a 2048-row weight (another split). ManyOuts(w) points into w, which must outlive
  // the outputs.
  static constexpr int64_t kManyK = 1280;
  struct ManyWeights {
    HostWeight a, b, c;
  };
  struct ManyOut {
    const HostWeight* w;
    int64_t row0, n_rows, ldy;
    bool accumulate;
  };
  ManyWeights MakeManyWeights() {
    return {MakeFp8Weight(256, kManyK, 112, 124), MakeFp8Weight(64, kManyK, 126, 142),
            MakeFp8Weight(2048, kManyK, 112, 124)};
  }
  static std::vector<ManyOut> ManyOuts(const ManyWeights& w) {
    return {{&w.a, 0, 128, 128, false},
            {&w.a, 128, 128, 131, true},
            {&w.b, 16, 48, 48, false},
            {&w.c, 0, 2048, 2048, false}};
  }

  // y [T, ldy] from kernels::LinearStream on the device copy of y0.
  std::vector<float> RunStream(const HostWeight& w, int64_t row0, int64_t n_rows,
                               const std::vector<float>& x, int64_t T, std::vector<float> y0,
                               int64_t ldy, bool accumulate) {
    const int64_t K = w.device.cols;
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
    float* y = ToGpu(y0);
    const cudaError_t e = kernels::LinearStream(w.device, row0, n_rows, ToGpu(x), T, K, y, ldy,
                                                accumulate, scratch, gpu_->stream());
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return FromGpu(y, T * ldy);
  }

  // The bound of CheckLinear (cuda_fp8_test_util.h) for LinearStream.
  void CheckStream(int64_t T, int64_t K, int64_t N, int64_t row0, int64_t n_rows, int64_t ldy_pad,
                   bool accumulate, int scale_lo = 112, int scale_hi = 124) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << T << " K=" << K << " N=" << N << " rows " << row0 << "+" << n_rows
                 << (accumulate ? " accumulate" : "") << " scales " << scale_lo << ".." << scale_hi
                 << " split " << kernels::LinearStreamSplit(n_rows, K));
    const HostWeight w = MakeFp8Weight(N, K, scale_lo, scale_hi);
    ASSERT_TRUE(kernels::LinearStreamApplicable(w.device, row0, n_rows, T));
    const int64_t ldy = n_rows + ldy_pad;
    const std::vector<float> x = Activations(T, K);
    const std::vector<float> xq = FakeQuantized(x, T, K);
    const std::vector<float> y0 = Normal(T * ldy);
    const std::vector<float> got = RunStream(w, row0, n_rows, x, T, y0, ldy, accumulate);
    ExpectLinearMatchesCpu(w, row0, n_rows, xq, T, y0, ldy, accumulate, got, "stream");
  }
};

TEST_F(CudaLinearStreamTest, MatchesCpu) {
  // T across all four token tiles (partial and full); K from one step to several per split
  // part; row ranges that start inside the weight (row0 16 and 32: the 16-row groups straddle
  // 32-row scale blocks differently); y padded and accumulated.
  for (int64_t T : {1, 2, 7, 8, 9, 16, 17, 24, 31, 32}) {
    CheckStream(T, 128, 64, 0, 64, 0, false);
    CheckStream(T, 512, 256, 16, 224, 3, true);
    CheckStream(T, 1280, 512, 32, 448, 0, false);
  }
  CheckStream(5, 4096, 96, 0, 96, 1, true);   // split 8: 4 steps per part
  CheckStream(29, 4096, 96, 0, 96, 1, true);  // the same with four token tiles
  CheckStream(21, 640, 96, 0, 96, 0, false);  // an odd number of steps per part (5, 3 tiles)
}

TEST_F(CudaLinearStreamTest, BothScaleBranches) {
  // ue8m0 bytes up to 134 take one bf16 multiply by 2^(S - 7); above, two. Warps mixing both.
  CheckStream(3, 512, 128, 0, 128, 0, false, 126, 142);
  CheckStream(9, 512, 128, 0, 128, 0, false, 135, 150);
  CheckStream(1, 256, 64, 0, 64, 0, true, 100, 110);
  CheckStream(19, 512, 128, 0, 128, 0, false, 126, 142);
  CheckStream(32, 512, 128, 0, 128, 0, true, 135, 150);
}

TEST_F(CudaLinearStreamTest, RealV41Shapes) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  CheckStream(1, 8192, 5120, 0, 5120, 0, false);     // wo_b
  CheckStream(4, 5120, 1280, 0, 1280, 0, false);     // wq_a
  CheckStream(16, 1280, 4096, 0, 4096, 0, false);    // indexer wq_b
  CheckStream(2, 2304, 5120, 0, 5120, 0, true);      // shared expert w2
  CheckStream(32, 8192, 5120, 0, 5120, 0, false);    // wo_b, four token tiles
  CheckStream(24, 1280, 32768, 0, 32768, 0, false);  // wq_b, three token tiles
}

// A token's row does not depend on T or on the other tokens: alone (T = 1), and as any row of
// a 16- or 32-token call, bitwise; the first T rows of a 32-token call equal a T-token call
// (T = 3, 12, 20: one, two and three token tiles against four).
TEST_F(CudaLinearStreamTest, TokenRowsIndependentOfTBitwise) {
  const int64_t K = 2048, N = 320;
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  const std::vector<float> x = Activations(32, K);
  auto run = [&](int64_t T) {  // the first T tokens of x
    const std::vector<float> xt(x.begin(), x.begin() + T * K);
    return RunStream(w, 0, N, xt, T, std::vector<float>(T * N), N, false);
  };
  auto rows = [&](const std::vector<float>& y, int64_t t0, int64_t t1) {
    return std::vector<float>(y.begin() + t0 * N, y.begin() + t1 * N);
  };
  const std::vector<float> all16 = run(16), all32 = run(32);
  for (int64_t t : {0, 5, 8, 9, 15, 17, 31}) {
    const std::vector<float> one(x.begin() + t * K, x.begin() + (t + 1) * K);
    const std::vector<float> got = RunStream(w, 0, N, one, 1, std::vector<float>(N), N, false);
    if (t < 16) {
      EXPECT_TRUE(BitExact(got, rows(all16, t, t + 1))) << "token " << t << " of 16";
    }
    EXPECT_TRUE(BitExact(got, rows(all32, t, t + 1))) << "token " << t << " of 32";
  }
  for (int64_t T : {3, 12, 20}) {
    EXPECT_TRUE(BitExact(run(T), rows(all32, 0, T))) << "T=" << T;
  }
  EXPECT_TRUE(BitExact(all16, rows(all32, 0, 16)));
}

TEST_F(CudaLinearStreamTest, GroupedMatchesCpu) {
  const int64_t groups = 8, R = 64, K = 512, N = groups * R;
  const HostWeight w = MakeFp8Weight(N, K, 110, 140);
  ASSERT_TRUE(kernels::LinearStreamGroupedApplicable(w.device, groups, 5));
  ASSERT_TRUE(kernels::LinearStreamGroupedApplicable(w.device, groups, 32));
  for (int64_t T : {1, 5, 16, 23, 32}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, groups * K);
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, groups * K));
    float* y = PoisonedFloats(T * N);
    ASSERT_EQ(kernels::LinearStreamGrouped(w.device, groups, ToGpu(x), T, groups * K, y, N, scratch,
                                           gpu_->stream()),
              cudaSuccess);
    ExpectGroupedMatchesCpu(w, groups, FakeQuantized(x, T, groups * K), T, FromGpu(y, T * N));
  }
}

TEST_F(CudaLinearStreamTest, Applicability) {
  const HostWeight w = MakeFp8Weight(128, 256, 112, 124);
  EXPECT_EQ(kernels::kStreamMaxTokens, 32);
  EXPECT_TRUE(kernels::LinearStreamApplicable(w.device, 0, 128, 16));
  EXPECT_TRUE(kernels::LinearStreamApplicable(w.device, 0, 128, 17));
  EXPECT_TRUE(kernels::LinearStreamApplicable(w.device, 0, 128, 32));
  EXPECT_FALSE(kernels::LinearStreamApplicable(w.device, 0, 128, 33));  // too many tokens
  EXPECT_FALSE(kernels::LinearStreamApplicable(w.device, 0, 128, 0));   // no tokens
  EXPECT_FALSE(kernels::LinearStreamGroupedApplicable(w.device, 2, 33));
  // Scratch: 8 tokens per tile, K bf16 each.
  EXPECT_EQ(kernels::LinearStreamScratchBytes(1, 256), 8 * 256 * 2);
  EXPECT_EQ(kernels::LinearStreamScratchBytes(16, 256), 16 * 256 * 2);
  EXPECT_EQ(kernels::LinearStreamScratchBytes(17, 256), 24 * 256 * 2);
  EXPECT_EQ(kernels::LinearStreamScratchBytes(32, 256), 32 * 256 * 2);
  EXPECT_FALSE(kernels::LinearStreamApplicable(w.device, 8, 64, 1));   // row0 % 16
  EXPECT_FALSE(kernels::LinearStreamApplicable(w.device, 0, 40, 1));   // n_rows % 16
  EXPECT_FALSE(kernels::LinearStreamApplicable(w.device, 64, 80, 1));  // past the weight
  const HostWeight narrow = MakeFp8Weight(64, 96, 112, 124);           // K % 128
  EXPECT_FALSE(kernels::LinearStreamApplicable(narrow.device, 0, 64, 1));
  const HostWeight fp4 = MakeWeight(WeightFormat::kMxFp4, 64, 256);
  EXPECT_FALSE(kernels::LinearStreamApplicable(fp4.device, 0, 64, 1));
  EXPECT_FALSE(kernels::LinearStreamGroupedApplicable(w.device, 16, 1));  // R = 8
  EXPECT_EQ(kernels::LinearStream(w.device, 8, 64, nullptr, 1, 256, nullptr, 64, false, nullptr,
                                  gpu_->stream()),
            cudaErrorInvalidValue);
}

// Through the backend: FP8 mode takes the stream for <= 32 tokens outside batch-invariant
// mode (bitwise the kernel's result; the default knob is kStreamMaxTokens); batch-invariant
// mode, 33 tokens, or the knob at 0 keep LinearFp8 (bitwise that kernel's result, which is not
// the stream's).
TEST_F(CudaLinearStreamTest, BackendDispatch) {
  const int64_t K = 1024, N = 256;
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  gpu_->set_fp8_activations(true);
  gpu_->set_fp8_bf16_gemm_min_tokens(CudaBackend::kFp8Bf16GemmMinTokens);
  auto backend = [&](const std::vector<float>& x, int64_t T) {
    float* y = PoisonedFloats(T * N);
    gpu_->Linear(ToGpu(x), T, K, w.ref, 0, N, y, N, false);
    return FromGpu(y, T * N);
  };
  for (int64_t T : {1, 16, 17, 32, 33}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const bool streams = T <= 32;
    const std::vector<float> x = Activations(T, K);
    const std::vector<float> stream =
        streams ? RunStream(w, 0, N, x, T, std::vector<float>(T * N), N, false)
                : std::vector<float>();
    const std::vector<float> fp8 = RunLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false);
    gpu_->set_batch_invariant(false);
    gpu_->set_linear_stream_max_tokens(kernels::kStreamMaxTokens);
    const std::vector<float> got = backend(x, T);
    if (streams) {
      EXPECT_TRUE(BitExact(got, stream));
      EXPECT_FALSE(BitExact(got, fp8));  // another summation order
    } else {
      EXPECT_TRUE(BitExact(got, fp8));
    }
    gpu_->set_linear_stream_max_tokens(0);
    EXPECT_TRUE(BitExact(backend(x, T), fp8));
    gpu_->set_linear_stream_max_tokens(kernels::kStreamMaxTokens);
    gpu_->set_batch_invariant(true);
    EXPECT_TRUE(BitExact(backend(x, T), fp8));
    gpu_->set_batch_invariant(false);
  }
}

// Several weights over the same x in one launch (kernels::LinearStreamMany): every output is
// bitwise its own LinearStream call, across splits (weights of 64 .. 2048 rows), two row
// ranges of one weight, row offsets, padded y and accumulation, all four token tiles.
TEST_F(CudaLinearStreamTest, ManyEqualsSeparateCallsBitwise) {
  const int64_t K = kManyK;
  const ManyWeights weights = MakeManyWeights();
  const std::vector<ManyOut> outs = ManyOuts(weights);
  for (int64_t T : {1, 8, 9, 16, 17, 24, 25, 32}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, K);
    const float* dx = ToGpu(x);
    std::vector<std::vector<float>> y0;
    std::vector<float*> dy;
    std::vector<kernels::LinearStreamTarget> targets;
    for (const ManyOut& o : outs) {
      y0.push_back(Normal(T * o.ldy));
      dy.push_back(ToGpu(y0.back()));
      targets.push_back({&o.w->device, o.row0, o.n_rows, dy.back(), o.ldy, o.accumulate});
    }
    ASSERT_TRUE(kernels::LinearStreamManyApplicable(targets.data(), 4, T));
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
    ASSERT_EQ(kernels::LinearStreamMany(targets.data(), 4, dx, T, K, scratch, gpu_->stream()),
              cudaSuccess);
    for (size_t i = 0; i < std::size(outs); ++i) {
      const ManyOut& o = outs[i];
      const std::vector<float> alone =
          RunStream(*o.w, o.row0, o.n_rows, x, T, y0[i], o.ldy, o.accumulate);
      EXPECT_TRUE(BitExact(FromGpu(dy[i], T * o.ldy), alone)) << "output " << i;
    }
  }
}

TEST_F(CudaLinearStreamTest, ManyApplicability) {
  const HostWeight a = MakeFp8Weight(128, 256, 112, 124);
  const HostWeight other_k = MakeFp8Weight(128, 512, 112, 124);
  float* y = PoisonedFloats(32 * 128);
  const kernels::LinearStreamTarget ok{&a.device, 0, 128, y, 128, false};
  kernels::LinearStreamTarget five[5] = {ok, ok, ok, ok, ok};
  EXPECT_TRUE(kernels::LinearStreamManyApplicable(five, 4, 16));
  EXPECT_TRUE(kernels::LinearStreamManyApplicable(five, 4, 32));
  EXPECT_FALSE(kernels::LinearStreamManyApplicable(five, 5, 1));   // more than 4 outputs
  EXPECT_FALSE(kernels::LinearStreamManyApplicable(five, 0, 1));   // none
  EXPECT_FALSE(kernels::LinearStreamManyApplicable(five, 2, 33));  // too many tokens
  const kernels::LinearStreamTarget mixed_k[2] = {ok, {&other_k.device, 0, 128, y, 128, false}};
  EXPECT_FALSE(kernels::LinearStreamManyApplicable(mixed_k, 2, 1));
  const kernels::LinearStreamTarget bad_rows[2] = {ok, {&a.device, 8, 64, y, 64, false}};
  EXPECT_FALSE(kernels::LinearStreamManyApplicable(bad_rows, 2, 1));
  const kernels::LinearStreamTarget no_y[2] = {ok, {&a.device, 0, 128, nullptr, 128, false}};
  EXPECT_FALSE(kernels::LinearStreamManyApplicable(no_y, 2, 1));
  EXPECT_EQ(kernels::LinearStreamMany(mixed_k, 2, nullptr, 1, 256, nullptr, gpu_->stream()),
            cudaErrorInvalidValue);
}

// Through the backend: LinearMany gives bitwise each output's own Linear in every mode and
// token count (FP8 mode: one stream launch at <= 32 tokens, one shared quantisation where
// every output takes LinearFp8 -- more tokens, batch-invariant mode, an MXFP4 output at 33;
// Linear by Linear otherwise, e.g. a stream-capable pair with an MXFP4 output at 1 token).
TEST_F(CudaLinearStreamTest, BackendLinearManyEqualsLinearEach) {
  const int64_t K = 1024;
  const HostWeight a = MakeFp8Weight(256, K, 112, 124);
  const HostWeight b = MakeFp8Weight(96, K, 120, 140);
  const HostWeight fp4 = MakeWeight(WeightFormat::kMxFp4, 64, K);
  gpu_->set_fp8_bf16_gemm_min_tokens(CudaBackend::kFp8Bf16GemmMinTokens);
  gpu_->set_linear_stream_max_tokens(kernels::kStreamMaxTokens);
  for (int mode = 0; mode < 3; ++mode) {  // FP8, FP8 batch-invariant, exact
    const bool fp8 = mode < 2, invariant = mode == 1;
    gpu_->set_fp8_activations(fp8);
    gpu_->set_batch_invariant(invariant);
    for (bool with_fp4 : {false, true}) {
      for (int64_t T : {1, 16, 17, 32, 33, 40}) {
        SCOPED_TRACE(::testing::Message() << "fp8 " << fp8 << " invariant " << invariant << " fp4 "
                                          << with_fp4 << " T=" << T);
        const std::vector<float> x = Activations(T, K);
        const float* dx = ToGpu(x);
        const HostWeight& third = with_fp4 ? fp4 : b;
        const int64_t rows[3] = {256, 96, third.device.rows};
        const model::WeightRef* refs[3] = {&a.ref, &b.ref, &third.ref};
        std::vector<float> y0[3];
        float* many[3];
        float* each[3];
        model::LinearOut outs[3];
        for (int i = 0; i < 3; ++i) {
          y0[i] = Normal(T * rows[i]);
          many[i] = ToGpu(y0[i]);
          each[i] = ToGpu(y0[i]);
          outs[i] = {refs[i], 0, rows[i], many[i], rows[i], /*accumulate=*/i == 1};
        }
        gpu_->set_linear_many(true);
        gpu_->LinearMany(dx, T, K, outs, 3);
        for (int i = 0; i < 3; ++i) {
          gpu_->Linear(dx, T, K, *refs[i], 0, rows[i], each[i], rows[i], i == 1);
        }
        ASSERT_TRUE(gpu_->Synchronize().ok());
        for (int i = 0; i < 3; ++i) {
          EXPECT_TRUE(BitExact(FromGpu(many[i], T * rows[i]), FromGpu(each[i], T * rows[i])))
              << "output " << i;
        }
      }
    }
  }
  gpu_->set_batch_invariant(false);
  gpu_->set_fp8_activations(false);
}

// Device time of the V4.1-Flash decode Linears (run with --gtest_also_run_disabled_tests):
// achieved GB/s on the weight bytes, LinearStream vs LinearFp8.
TEST_F(CudaLinearStreamTest, DISABLED_Bench) {
  struct Shape {
    const char* name;
    int64_t rows, K;
  };
  const Shape shapes[] = {{"wq_a", 1280, 5120},      {"wq_b", 32768, 1280},
                          {"wkv", 512, 5120},        {"wo_b", 5120, 8192},
                          {"shared w1", 2304, 5120}, {"shared w2", 5120, 2304},
                          {"idx wq_b", 4096, 1280},  {"engram wkv", 25600, 6144}};
  for (const Shape& s : shapes) {
    const HostWeight w = MakeFp8Weight(s.rows, s.K, 112, 124);
    const double bytes = double(s.rows) * s.K * (1.0 + 1.0 / 1024.0);
    for (int64_t T : {1, 8, 16, 24, 32}) {
      const std::vector<float> x = Activations(T, s.K);
      const float* dx = ToGpu(x);
      float* y = PoisonedFloats(T * s.rows);
      uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, s.K));
      const double us_stream = DeviceMicrosPerCall([&] {
        kernels::LinearStream(w.device, 0, s.rows, dx, T, s.K, y, s.rows, false, scratch,
                              gpu_->stream());
      });
      auto* act = PoisonedBytes(kernels::Fp8ActivationBytes(T, s.K));
      auto* act_scale = kernels::Fp8ActivationScales(act, T, s.K);
      uint8_t* fp8_scratch = PoisonedBytes(kernels::Fp8LinearScratchBytes(s.rows, s.K, T) + 16);
      const double us_fp8 = DeviceMicrosPerCall([&] {
        kernels::QuantizeFp8Activations(dx, T, s.K, s.K, act, act_scale, gpu_->stream());
        kernels::LinearFp8(w.device, 0, s.rows, act, act_scale, T, y, s.rows, false, fp8_scratch,
                           gpu_->stream());
      });
      std::printf(
          "%-11s T=%2lld split %d: stream %8.2f us (%6.0f GB/s)  fp8 %8.2f us (%6.0f GB/s)\n",
          s.name, static_cast<long long>(T), kernels::LinearStreamSplit(s.rows, s.K), us_stream,
          bytes / us_stream * 1e-3, us_fp8, bytes / us_fp8 * 1e-3);
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
