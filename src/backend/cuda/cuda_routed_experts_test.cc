// Fused routed experts (CudaBackend::RoutedExperts) against the CPU reference computed
// per token and slot: y[t] = sum_i Linear(w2_e, SwiGlu(Linear(w1_e, x_t), Linear(w3_e, x_t))
// * weights[t, i]), the slots summed in order. Both kernel families are covered: the
// token-slot-major kernels of k_moe.cu and the expert-major grouped ones of
// k_moe_grouped.cu (chosen with DEEPINFER_CUDA_GROUPED_MOE, see GroupedMode).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_moe.h"

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

// Sets DEEPINFER_CUDA_GROUPED_MOE for its lifetime ("0": token-slot-major kernels, "1":
// grouped kernels whenever they apply, nullptr: unset, the default threshold), restoring
// the previous value.
class GroupedMode {
 public:
  explicit GroupedMode(const char* mode) {
    if (const char* old = std::getenv(kVar)) previous_ = old;
    if (mode != nullptr) {
      setenv(kVar, mode, 1);
    } else {
      unsetenv(kVar);
    }
  }
  ~GroupedMode() {
    if (previous_) {
      setenv(kVar, previous_->c_str(), 1);
    } else {
      unsetenv(kVar);
    }
  }
  GroupedMode(const GroupedMode&) = delete;
  GroupedMode& operator=(const GroupedMode&) = delete;

 private:
  static constexpr const char* kVar = "DEEPINFER_CUDA_GROUPED_MOE";
  std::optional<std::string> previous_;
};

// How Route picks the experts of a token.
enum class Routing {
  kSpread,  // uniform over all experts
  kPool,    // from a pool of k + 2 experts (each expert shared by many tokens)
  kHot,     // expert 0 in every token (a group of T pairs), the rest uniform
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

  // The CPU reference of RoutedExperts (cuda_test_util.h).
  std::vector<float> Reference(const Experts& ex, const std::vector<float>& x, int64_t T,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               int64_t k, float limit) {
    return RoutedExpertsReference(cpu_, ex.table, ex.D, ex.I, x, T, ids, weights, k, limit,
                                  /*fp8_activations=*/false);
  }

  // Random routing with repeated experts across tokens (ids drawn from a small pool when
  // `repeat`), distinct within a token like the router's top-k.
  std::vector<int32_t> Route(int64_t T, int64_t k, int64_t n_experts, bool repeat) {
    return Route(T, k, n_experts, repeat ? Routing::kPool : Routing::kSpread);
  }

  std::vector<int32_t> Route(int64_t T, int64_t k, int64_t n_experts, Routing routing) {
    std::vector<int32_t> ids(T * k);
    const int32_t pool = routing == Routing::kPool
                             ? static_cast<int32_t>(std::min<int64_t>(n_experts, k + 2))
                             : static_cast<int32_t>(n_experts);
    for (int64_t t = 0; t < T; ++t) {
      // The hot expert sits in a varying slot.
      const int64_t hot_slot = routing == Routing::kHot ? t % k : -1;
      for (int64_t i = 0; i < k; ++i) {
        int32_t e;
        do {
          e = i == hot_slot ? 0 : Ints(1, 0, pool - 1)[0];
        } while (std::find(&ids[t * k], &ids[t * k] + i, e) != &ids[t * k] + i ||
                 (hot_slot >= 0 && i != hot_slot && e == 0));
        ids[t * k + i] = e;
      }
    }
    return ids;
  }

  // y [T, D] of CudaBackend::RoutedExperts (the kernels the current GroupedMode picks).
  std::vector<float> RunGpu(const Experts& ex, const std::vector<float>& x, int64_t T,
                            const std::vector<int32_t>& ids, const std::vector<float>& weights,
                            int64_t k, float limit) {
    model::RoutedExpertsArgs a;
    a.x = ToGpu(x), a.T = T, a.D = ex.D, a.experts = ToGpu(ids), a.weights = ToGpu(weights);
    a.k = k, a.table = ex.table.data(), a.n_experts = static_cast<int64_t>(ex.table.size());
    a.swiglu_limit = limit;
    a.y = PoisonedFloats(T * ex.D);
    gpu_->RoutedExperts(a);
    return FromGpu(a.y, T * ex.D);
  }

  void Check(const Experts& ex, int64_t T, int64_t k, float limit, bool repeat) {
    Check(ex, T, k, limit, repeat ? Routing::kPool : Routing::kSpread);
  }

  void Check(const Experts& ex, int64_t T, int64_t k, float limit, Routing routing) {
    const int64_t n = static_cast<int64_t>(ex.table.size());
    if (k > n) return;
    SCOPED_TRACE(::testing::Message()
                 << "T " << T << " k " << k << " experts " << n << " D " << ex.D << " I " << ex.I
                 << " limit " << limit << " routing " << static_cast<int>(routing));
    ASSERT_TRUE(gpu_->CanFuseRoutedExperts(T, ex.table[0]));
    const std::vector<float> x = Normal(T * ex.D, 10.0f);  // some gates beyond the limit
    const std::vector<int32_t> ids = Route(T, k, n, routing);
    const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
    const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, limit);
    const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, limit);
    EXPECT_TRUE(RelL2Close(got, expected, 1e-4));
    EXPECT_TRUE(AllClose(got, expected, 1e-3, 1e-3 * MaxAbs(expected)));
  }

  // Bytes of a stored matrix's data and scales (the layouts MakeMatrix writes).
  static std::pair<int64_t, int64_t> StoredBytes(const WeightRef& w) {
    switch (w.format) {
      case WeightFormat::kMxFp4:
        return {w.rows * w.cols / 2, w.rows * w.cols / 32};
      case WeightFormat::kFp8Block32:
        return {w.rows * w.cols, ((w.rows + 31) / 32) * (w.cols / 32)};
      case WeightFormat::kBF16:
        return {w.rows * w.cols * 2, 0};
      default:
        ADD_FAILURE() << "format not used here";
        return {0, 0};
    }
  }

  // The experts' stored bytes on the device and their pointer table (device), for calling
  // the kernel launchers directly.
  const kernels::ExpertPointers* UploadTable(const Experts& ex) {
    std::vector<kernels::ExpertPointers> host(ex.table.size());
    for (size_t e = 0; e < ex.table.size(); ++e) {
      const WeightRef* refs[3] = {&ex.table[e].w1, &ex.table[e].w2, &ex.table[e].w3};
      for (int m = 0; m < 3; ++m) {
        const auto [data_bytes, scale_bytes] = StoredBytes(*refs[m]);
        const auto* data = static_cast<const uint8_t*>(refs[m]->data);
        host[e].data[m] = BytesToGpu(std::vector<uint8_t>(data, data + data_bytes));
        host[e].scale[m] =
            scale_bytes > 0
                ? BytesToGpu(std::vector<uint8_t>(refs[m]->scale, refs[m]->scale + scale_bytes))
                : nullptr;
      }
    }
    std::vector<uint8_t> raw(host.size() * sizeof(kernels::ExpertPointers));
    std::memcpy(raw.data(), host.data(), raw.size());
    return reinterpret_cast<const kernels::ExpertPointers*>(BytesToGpu(raw));
  }

  struct DirectResult {
    std::vector<float> y;  // [T, D]
    int error_word = 0;
  };

  // kernels::RoutedExpertsGrouped called directly (any T, no dispatch threshold) on the
  // default stream, with NaN-poisoned output and 0xAB-poisoned scratch.
  DirectResult RunGroupedDirect(const kernels::ExpertPointers* table, const Experts& ex,
                                const std::vector<float>& x, int64_t T,
                                const std::vector<int32_t>& ids, const std::vector<float>& weights,
                                int64_t k, float limit) {
    const int64_t n = static_cast<int64_t>(ex.table.size());
    kernels::RoutedExpertsLaunch l;
    l.table = table, l.n_experts = n;
    l.up_format = ex.table[0].w1.format, l.down_format = ex.table[0].w2.format;
    l.D = ex.D, l.I = ex.I, l.x = ToGpu(x), l.T = T, l.experts = ToGpu(ids);
    l.weights = ToGpu(weights), l.k = k, l.swiglu_limit = limit;
    l.y = PoisonedFloats(T * ex.D);
    int32_t* error_word = ToGpu(std::vector<int32_t>{0});
    l.error_word = reinterpret_cast<int*>(error_word);
    uint8_t* scratch =
        PoisonedBytes(kernels::RoutedExpertsGroupedScratchBytes(T, k, ex.D, ex.I, n));
    EXPECT_TRUE(gpu_->Synchronize().ok());  // uploads done before the default stream runs
    EXPECT_EQ(kernels::RoutedExpertsGrouped(l, scratch, nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    DirectResult r;
    r.y = FromGpu(l.y, T * ex.D);
    r.error_word = FromGpu(error_word, 1)[0];
    return r;
  }

  // Row t of a [T, D] array.
  static std::vector<float> Row(const std::vector<float>& v, int64_t t, int64_t D) {
    return std::vector<float>(v.begin() + t * D, v.begin() + (t + 1) * D);
  }
};

TEST_F(CudaRoutedExpertsTest, MatchesCpuAcrossShapesAndFormats) {
  const GroupedMode token_slot_major("0");
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
  const GroupedMode token_slot_major("0");
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
  // Above the token-slot kernels' limit: the grouped kernels, up to their own limit.
  EXPECT_TRUE(gpu_->CanFuseRoutedExperts(kernels::kMaxFusedExpertTokens + 1, e));
  EXPECT_TRUE(gpu_->CanFuseRoutedExperts(kernels::kMaxGroupedExpertTokens, e));
  EXPECT_FALSE(gpu_->CanFuseRoutedExperts(kernels::kMaxGroupedExpertTokens + 1, e));
  {
    const GroupedMode off("0");
    EXPECT_FALSE(gpu_->CanFuseRoutedExperts(kernels::kMaxFusedExpertTokens + 1, e));
    EXPECT_TRUE(gpu_->CanFuseRoutedExperts(kernels::kMaxFusedExpertTokens, e));
  }
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
// Both kernel families.
TEST_F(CudaRoutedExpertsTest, BadExpertIdFails) {
  for (const char* mode : {"0", "1"}) {
    SCOPED_TRACE(::testing::Message() << "DEEPINFER_CUDA_GROUPED_MOE=" << mode);
    const GroupedMode grouped(mode);
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
}

// --- the grouped (expert-major) kernels of k_moe_grouped.cu ---------------------------

struct GroupedCase {
  WeightFormat up, down;
  int64_t D, I;
};

// Shapes that reach every lane-group width and partial row tiles: MXFP4 160 / 96 (5 and
// 3 chunks per row: 8 lanes per row, the last row tile partly past the end), FP8 512 / 256
// (32 and 16 chunks: 32 and 16 lanes), BF16 gate/up.
constexpr GroupedCase kGroupedCases[] = {
    {WeightFormat::kMxFp4, WeightFormat::kMxFp4, 160, 96},
    {WeightFormat::kFp8Block32, WeightFormat::kFp8Block32, 512, 256},
    {WeightFormat::kBF16, WeightFormat::kMxFp4, 160, 96},
};

// k = 6 over 16 and 64 experts: spread routing (64 experts, T = 1: most experts without a
// token), a small pool (every expert shared by many tokens) and a hot expert in every
// token (a group of T pairs, several token passes per block).
TEST_F(CudaRoutedExpertsTest, GroupedMatchesCpu) {
  const GroupedMode grouped("1");
  for (const GroupedCase& c : kGroupedCases) {
    for (int64_t n_experts : {16, 64}) {
      SCOPED_TRACE(::testing::Message() << "formats " << model::WeightFormatName(c.up) << " / "
                                        << model::WeightFormatName(c.down));
      const Experts ex = MakeExperts(n_experts, c.up, c.down, c.D, c.I);
      for (int64_t T : {1, 5, 8, 32, 64, 100, 256}) {  // > 64: only the grouped kernels
        for (Routing r : {Routing::kSpread, Routing::kPool, Routing::kHot}) {
          Check(ex, T, 6, /*limit=*/T % 2 ? 10.0f : 0.0f, r);
        }
      }
      Check(ex, 32, 1, 10.0f, Routing::kPool);
      Check(ex, 32, 8, 0.0f, Routing::kHot);
    }
  }
}

// Wider rows: several row passes per block (the prefetch crosses passes and token passes).
TEST_F(CudaRoutedExpertsTest, GroupedMatchesCpuWideRows) {
  const GroupedMode grouped("1");
  const Experts mx = MakeExperts(16, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 1024, 256);
  const Experts fp8 =
      MakeExperts(16, WeightFormat::kFp8Block32, WeightFormat::kFp8Block32, 1024, 512);
  for (const Experts* ex : {&mx, &fp8}) {
    Check(*ex, 8, 6, 10.0f, Routing::kHot);
    Check(*ex, 64, 6, 0.0f, Routing::kPool);
  }
}

TEST_F(CudaRoutedExpertsTest, GroupedRealV41Dims) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  const GroupedMode grouped("1");
  const Experts ex = MakeExperts(8, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 5120, 2304);
  Check(ex, 8, 6, 10.0f, Routing::kSpread);  // 48 pairs on 8 experts: 6 per expert
}

// A token's output is bitwise the same alone and inside a batch of 32 (sharing its experts
// with other tokens, at another position), and repeated runs agree bitwise.
TEST_F(CudaRoutedExpertsTest, GroupedIsBatchInvariant) {
  const GroupedMode grouped("1");
  for (const GroupedCase& c : kGroupedCases) {
    SCOPED_TRACE(::testing::Message() << "formats " << model::WeightFormatName(c.up) << " / "
                                      << model::WeightFormatName(c.down));
    const Experts ex = MakeExperts(64, c.up, c.down, c.D, c.I);
    const int64_t T = 32, k = 6, D = ex.D;
    const float limit = 10.0f;
    const std::vector<float> x = Normal(T * D, 10.0f);
    const std::vector<int32_t> ids = Route(T, k, 64, Routing::kHot);
    const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
    const std::vector<float> batch = RunGpu(ex, x, T, ids, weights, k, limit);
    EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, limit), batch)) << "repeat";
    for (int64_t t : {int64_t{0}, T - 1}) {
      SCOPED_TRACE(::testing::Message() << "token " << t);
      const std::vector<float> x_t = Row(x, t, D);
      const std::vector<int32_t> ids_t(ids.begin() + t * k, ids.begin() + (t + 1) * k);
      const std::vector<float> w_t(weights.begin() + t * k, weights.begin() + (t + 1) * k);
      EXPECT_TRUE(BitExact(RunGpu(ex, x_t, 1, ids_t, w_t, k, limit), Row(batch, t, D)));
    }
    // The batch in reverse token order: every row is the same bits.
    std::vector<float> x_rev(x.size()), w_rev(weights.size());
    std::vector<int32_t> ids_rev(ids.size());
    for (int64_t t = 0; t < T; ++t) {
      std::copy_n(x.begin() + t * D, D, x_rev.begin() + (T - 1 - t) * D);
      std::copy_n(ids.begin() + t * k, k, ids_rev.begin() + (T - 1 - t) * k);
      std::copy_n(weights.begin() + t * k, k, w_rev.begin() + (T - 1 - t) * k);
    }
    const std::vector<float> reversed = RunGpu(ex, x_rev, T, ids_rev, w_rev, k, limit);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_TRUE(BitExact(Row(reversed, T - 1 - t, D), Row(batch, t, D))) << "token " << t;
    }
  }
}

// Grouped and token-slot-major kernels agree within the CPU-comparison tolerance.
TEST_F(CudaRoutedExpertsTest, GroupedAgreesWithTokenSlotPath) {
  for (const GroupedCase& c : kGroupedCases) {
    SCOPED_TRACE(::testing::Message() << "formats " << model::WeightFormatName(c.up) << " / "
                                      << model::WeightFormatName(c.down));
    const Experts ex = MakeExperts(64, c.up, c.down, c.D, c.I);
    for (int64_t T : {5, 32, 64}) {
      SCOPED_TRACE(::testing::Message() << "T " << T);
      const int64_t k = 6;
      const std::vector<float> x = Normal(T * ex.D, 10.0f);
      const std::vector<int32_t> ids = Route(T, k, 64, Routing::kPool);
      const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
      std::vector<float> old_path, grouped_path;
      {
        const GroupedMode mode("0");
        old_path = RunGpu(ex, x, T, ids, weights, k, 10.0f);
      }
      {
        const GroupedMode mode("1");
        grouped_path = RunGpu(ex, x, T, ids, weights, k, 10.0f);
      }
      EXPECT_TRUE(RelL2Close(grouped_path, old_path, 1e-4));
      EXPECT_TRUE(AllClose(grouped_path, old_path, 1e-3, 1e-3 * MaxAbs(old_path)));
    }
  }
}

// Without the switch, calls below kGroupedExpertsMinTokens tokens run the token-slot-major
// kernels and calls from it the grouped ones (bitwise the results of the forced modes).
TEST_F(CudaRoutedExpertsTest, DefaultDispatchFollowsThreshold) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 160, 96);
  for (int64_t T : {kernels::kGroupedExpertsMinTokens - 1, kernels::kGroupedExpertsMinTokens}) {
    SCOPED_TRACE(::testing::Message() << "T " << T);
    const int64_t k = 6;
    const std::vector<float> x = Normal(T * ex.D, 10.0f);
    const std::vector<int32_t> ids = Route(T, k, 16, Routing::kPool);
    const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
    std::vector<float> by_default, forced;
    {
      const GroupedMode mode(nullptr);
      by_default = RunGpu(ex, x, T, ids, weights, k, 10.0f);
    }
    {
      const GroupedMode mode(T >= kernels::kGroupedExpertsMinTokens ? "1" : "0");
      forced = RunGpu(ex, x, T, ids, weights, k, 10.0f);
    }
    EXPECT_TRUE(BitExact(by_default, forced));
  }
}

// The launcher directly: out-of-range ids (n_experts and -1) set kErrExpertOutOfRange and
// make exactly their tokens' rows NaN; the other tokens match the CPU reference.
TEST_F(CudaRoutedExpertsTest, GroupedBadExpertIdNaNsOnlyItsTokens) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, WeightFormat::kMxFp4, 160, 96);
  const kernels::ExpertPointers* table = UploadTable(ex);
  const int64_t T = 5, k = 6, D = ex.D;
  const std::vector<float> x = Normal(T * D, 10.0f);
  const std::vector<int32_t> valid_ids = Route(T, k, 16, Routing::kPool);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  const std::vector<float> expected = Reference(ex, x, T, valid_ids, weights, k, 10.0f);
  std::vector<int32_t> ids = valid_ids;
  ids[2 * k + 3] = 16;  // == n_experts
  ids[4 * k + 0] = -1;
  const DirectResult r = RunGroupedDirect(table, ex, x, T, ids, weights, k, 10.0f);
  EXPECT_EQ(r.error_word, kernels::kErrExpertOutOfRange);
  for (int64_t t = 0; t < T; ++t) {
    SCOPED_TRACE(::testing::Message() << "token " << t);
    const std::vector<float> got = Row(r.y, t, D);
    if (t == 2 || t == 4) {
      EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isnan(v); }));
    } else {
      const std::vector<float> want = Row(expected, t, D);
      EXPECT_TRUE(AllClose(got, want, 1e-3, 1e-3 * MaxAbs(want)));
    }
  }
  // Valid ids: no error, every row matches (the launcher itself, T below the threshold).
  const DirectResult ok = RunGroupedDirect(table, ex, x, T, valid_ids, weights, k, 10.0f);
  EXPECT_EQ(ok.error_word, 0);
  EXPECT_TRUE(RelL2Close(ok.y, expected, 1e-4));
  const DirectResult one =
      RunGroupedDirect(table, ex, Row(x, 0, D), 1,
                       std::vector<int32_t>(ids.begin(), ids.begin() + k), weights, k, 10.0f);
  EXPECT_TRUE(BitExact(one.y, Row(ok.y, 0, D)));
}

TEST(CudaRoutedExpertsGroupedTest, ApplicableLimits) {
  using kernels::RoutedExpertsGroupedApplicable;
  const WeightFormat mx = WeightFormat::kMxFp4, fp8 = WeightFormat::kFp8Block32;
  EXPECT_TRUE(RoutedExpertsGroupedApplicable(mx, mx, 5120, 2304, 32, 6, 384));
  EXPECT_TRUE(RoutedExpertsGroupedApplicable(fp8, fp8, 5120, 2304, 1, 6, 384));
  EXPECT_TRUE(RoutedExpertsGroupedApplicable(WeightFormat::kBF16, mx, 5120, 2304, 64, 6, 384));
  EXPECT_TRUE(RoutedExpertsGroupedApplicable(mx, mx, 64, 64, kernels::kMaxFusedExpertTokens,
                                             kernels::kMaxFusedExpertSlots, 1));
  EXPECT_TRUE(
      RoutedExpertsGroupedApplicable(mx, mx, 64, 64, kernels::kMaxGroupedExpertTokens, 6, 16));
  EXPECT_FALSE(
      RoutedExpertsGroupedApplicable(mx, mx, 64, 64, kernels::kMaxGroupedExpertTokens + 1, 6, 16));
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, mx, 64, 64, 100, 64, 16));  // 6400 pairs
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, mx, 64, 64, 0, 6, 16));
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, mx, 64, 64, 4, 0, 16));
  EXPECT_FALSE(
      RoutedExpertsGroupedApplicable(mx, mx, 64, 64, 4, kernels::kMaxFusedExpertSlots + 1, 16));
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, mx, 64, 64, 4, 6, 0));
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, mx, 80, 64, 4, 6, 16));  // D % 32
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, mx, 64, 48, 4, 6, 16));  // I % 32
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(WeightFormat::kF32, mx, 64, 64, 4, 6, 16));
  EXPECT_FALSE(RoutedExpertsGroupedApplicable(mx, WeightFormat::kFp8Row32, 64, 64, 4, 6, 16));
  // h and the per-pair outputs in fp32 at least.
  EXPECT_GE(kernels::RoutedExpertsGroupedScratchBytes(32, 6, 5120, 2304, 384),
            int64_t{192} * (5120 + 2304) * 4);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
