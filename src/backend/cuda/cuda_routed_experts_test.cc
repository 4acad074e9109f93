// Fused routed experts (CudaBackend::RoutedExperts) against the CPU reference computed
// per token and slot: y[t] = sum_i Linear(w2_e, SwiGlu(Linear(w1_e, x_t), Linear(w3_e, x_t))
// * weights[t, i]), the slots summed in order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using model::ExpertWeights;
using model::WeightFormat;
using model::WeightRef;

// Random stored experts (host memory), all of one shape.
struct Experts {
  std::vector<std::vector<uint8_t>> bytes;  // data and scales of every matrix
  std::vector<ExpertWeights> table;
  int64_t D = 0, I = 0;
};

class CudaRoutedExpertsTest : public CudaVsCpuTest {
 protected:
  WeightRef MakeMatrix(Experts& ex, WeightFormat f, int64_t rows, int64_t cols,
                       const std::string& name) {
    std::vector<uint8_t> data, scale;
    switch (f) {
      case WeightFormat::kMxFp4:
        data = Bytes(rows * cols / 2, 0, 255);
        scale = Bytes(rows * cols / 32, 118, 124);
        break;
      case WeightFormat::kFp8Block32:
        data = Fp8Bytes(rows * cols);
        scale = Bytes(((rows + 31) / 32) * (cols / 32), 112, 120);
        break;
      case WeightFormat::kBF16: {
        const std::vector<uint16_t> b = Bf16Bits(rows * cols, 0.05f);
        data.resize(b.size() * 2);
        std::memcpy(data.data(), b.data(), data.size());
        break;
      }
      default:
        ADD_FAILURE() << "format not used here";
    }
    ex.bytes.push_back(std::move(data));
    const uint8_t* data_ptr = ex.bytes.back().data();
    const uint8_t* scale_ptr = nullptr;
    if (!scale.empty()) {
      ex.bytes.push_back(std::move(scale));
      scale_ptr = ex.bytes.back().data();
    }
    return WeightRef{name, f, rows, cols, data_ptr, scale_ptr};
  }

  Experts MakeExperts(int64_t n, WeightFormat up, WeightFormat down, int64_t D, int64_t I) {
    Experts ex;
    ex.D = D, ex.I = I;
    ex.bytes.reserve(6 * n);  // stable addresses
    for (int64_t e = 0; e < n; ++e) {
      const std::string p = "layers.3.ffn.experts." + std::to_string(e) + ".";
      ExpertWeights w;
      w.w1 = MakeMatrix(ex, up, I, D, p + "w1.weight");
      w.w2 = MakeMatrix(ex, down, D, I, p + "w2.weight");
      w.w3 = MakeMatrix(ex, up, I, D, p + "w3.weight");
      ex.table.push_back(w);
    }
    return ex;
  }

  // The CPU reference of RoutedExperts.
  std::vector<float> Reference(const Experts& ex, const std::vector<float>& x, int64_t T,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               int64_t k, float limit) {
    const int64_t D = ex.D, I = ex.I;
    std::vector<float> y(T * D, 0.0f), gate(I), up(I), h(I), out(D);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        const ExpertWeights& e = ex.table[ids[t * k + i]];
        cpu_.Linear(x.data() + t * D, 1, D, e.w1, 0, I, gate.data(), I, false);
        cpu_.Linear(x.data() + t * D, 1, D, e.w3, 0, I, up.data(), I, false);
        cpu_.SwiGlu(gate.data(), up.data(), 1, I, limit, &weights[t * k + i], h.data());
        cpu_.Linear(h.data(), 1, I, e.w2, 0, D, out.data(), D, false);
        for (int64_t d = 0; d < D; ++d) y[t * D + d] += out[d];
      }
    }
    return y;
  }

  // Random routing with repeated experts across tokens (ids drawn from a small pool when
  // `repeat`), distinct within a token like the router's top-k.
  std::vector<int32_t> Route(int64_t T, int64_t k, int64_t n_experts, bool repeat) {
    std::vector<int32_t> ids(T * k);
    const int32_t pool = repeat ? static_cast<int32_t>(std::min<int64_t>(n_experts, k + 2))
                                : static_cast<int32_t>(n_experts);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < k; ++i) {
        int32_t e;
        do {
          e = Ints(1, 0, pool - 1)[0];
        } while (std::find(&ids[t * k], &ids[t * k] + i, e) != &ids[t * k] + i);
        ids[t * k + i] = e;
      }
    }
    return ids;
  }

  void Check(const Experts& ex, int64_t T, int64_t k, float limit, bool repeat) {
    const int64_t n = static_cast<int64_t>(ex.table.size());
    if (k > n) return;
    SCOPED_TRACE(::testing::Message()
                 << "T " << T << " k " << k << " experts " << n << " D " << ex.D << " I " << ex.I
                 << " limit " << limit << (repeat ? " repeated" : ""));
    ASSERT_TRUE(gpu_->CanFuseRoutedExperts(T, ex.table[0]));
    const std::vector<float> x = Normal(T * ex.D, 10.0f);  // some gates beyond the limit
    const std::vector<int32_t> ids = Route(T, k, n, repeat);
    const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
    const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, limit);
    model::RoutedExpertsArgs a;
    a.x = ToGpu(x), a.T = T, a.D = ex.D, a.experts = ToGpu(ids), a.weights = ToGpu(weights);
    a.k = k, a.table = ex.table.data(), a.n_experts = n, a.swiglu_limit = limit;
    a.y = PoisonedFloats(T * ex.D);
    gpu_->RoutedExperts(a);
    const std::vector<float> got = FromGpu(a.y, T * ex.D);
    EXPECT_TRUE(RelL2Close(got, expected, 1e-4));
    EXPECT_TRUE(AllClose(got, expected, 1e-3, 1e-3 * MaxAbs(expected)));
  }
};

TEST_F(CudaRoutedExpertsTest, MatchesCpuAcrossShapesAndFormats) {
  struct Formats {
    WeightFormat up, down;
  };
  for (Formats f : {Formats{WeightFormat::kMxFp4, WeightFormat::kMxFp4},
                    Formats{WeightFormat::kFp8Block32, WeightFormat::kFp8Block32},
                    Formats{WeightFormat::kBF16, WeightFormat::kMxFp4}}) {
    for (int64_t n_experts : {8, 384}) {
      SCOPED_TRACE(::testing::Message() << "formats " << model::WeightFormatName(f.up) << " / "
                                        << model::WeightFormatName(f.down));
      // D = 160: 10 down tiles; I = 96: 3 gate/up tiles; D not a multiple of the 128-value
      // stride of a warp's chunks (MXFP4 160 = 5 chunks: lanes 5..31 idle).
      const Experts ex = MakeExperts(n_experts, f.up, f.down, 160, 96);
      for (int64_t T : {1, 3, 8, 33, 64}) {
        for (int64_t k : {1, 2, 6}) {
          Check(ex, T, k, /*limit=*/T % 2 ? 10.0f : 0.0f, /*repeat=*/k > 1 && T > 2);
        }
      }
      Check(ex, 5, 6, 0.0f, false);
      Check(ex, 5, 6, 10.0f, true);
    }
  }
}

TEST_F(CudaRoutedExpertsTest, RealV41Dims) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  // V4.1-Flash routed experts: D 5120... shapes from the bench (w1 2304 x 5120).
  const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 5120, 2304);
  Check(ex, 1, 6, 10.0f, false);
  Check(ex, 4, 6, 0.0f, true);
  const Experts fp8 =
      MakeExperts(6, WeightFormat::kFp8Block32, WeightFormat::kFp8Block32, 1024, 512);
  Check(fp8, 2, 6, 10.0f, false);
}

TEST_F(CudaRoutedExpertsTest, TableSurvivesForgetWeights) {
  const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 64, 64);
  Check(ex, 3, 2, 10.0f, true);
  gpu_->ForgetWeights();
  Check(ex, 3, 2, 10.0f, true);  // re-uploaded and rebuilt
}

TEST_F(CudaRoutedExpertsTest, CanFuseLimits) {
  const Experts ex = MakeExperts(1, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 64, 96);
  const ExpertWeights& e = ex.table[0];
  EXPECT_TRUE(gpu_->CanFuseRoutedExperts(1, e));
  EXPECT_TRUE(gpu_->CanFuseRoutedExperts(kernels::kMaxFusedExpertTokens, e));
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(kernels::kMaxFusedExpertTokens + 1, e));
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(0, e));
  ExpertWeights f32 = e;
  f32.w1.format = f32.w3.format = WeightFormat::kF32;
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(1, f32));
  ExpertWeights odd = e;
  odd.w1.cols = odd.w3.cols = odd.w2.rows = 80;  // D not a multiple of 32
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(1, odd));
  ExpertWeights mismatched = e;
  mismatched.w3.format = WeightFormat::kFp8Block32;
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(1, mismatched));
  gpu_->set_fused_experts(false);
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(1, e));
}

// An out-of-range expert id is a sticky InvalidArgument and NaN outputs (own backend, so
// that the fixture's backend stays healthy).
TEST_F(CudaRoutedExpertsTest, BadExpertIdFails) {
  auto created = CudaBackend::Create(0);
  ASSERT_TRUE(created.ok()) << created.status();
  CudaBackend& b = **created;
  const Experts ex = MakeExperts(4, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 64, 64);
  const int64_t T = 2, k = 2, D = 64;
  const std::vector<float> x = Normal(T * D), weights(T * k, 0.5f);
  const std::vector<int32_t> ids = {0, 1, 4, 2};  // 4 >= n_experts
  float* dx = b.AllocFloats(T * D);
  float* dw = b.AllocFloats(T * k);
  int32_t* di = b.AllocInts(T * k);
  float* dy = b.AllocFloats(T * D);
  b.CopyToDevice(dx, x.data(), T * D * 4);
  b.CopyToDevice(dw, weights.data(), T * k * 4);
  b.CopyToDevice(di, ids.data(), T * k * 4);
  model::RoutedExpertsArgs a;
  a.x = dx, a.T = T, a.D = D, a.experts = di, a.weights = dw, a.k = k;
  a.table = ex.table.data(), a.n_experts = 4, a.y = dy;
  b.RoutedExperts(a);
  const base::Status s = b.Synchronize();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("expert id"), std::string::npos) << s;
  std::vector<float> y(T * D, 0.0f);
  b.CopyToHost(y.data(), dy, T * D * 4);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
