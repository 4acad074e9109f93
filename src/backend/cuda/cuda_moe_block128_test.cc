// The routed experts on FP8 tensor cores (kernels_moe_block128.h): the MXFP4 -> e4m3 re-blocking
// against its CPU values (bitwise), and CudaBackend::RoutedExperts on the e4m3 copies (a copy
// budget) and on the MXFP4 bytes (the register path) against a per-token CPU reference that
// quantises x and h per 128 values; a too-small budget falls back to the register path, and
// with both off the bf16 path runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/numerics.h"
#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernel_census.h"
#include "backend/cuda/kernels_block128.h"
#include "backend/cuda/kernels_moe_block128.h"

namespace deepinfer::backend::cuda::testing {
namespace {

constexpr int64_t kB = kernels::kBlock128;
constexpr size_t kBudget = size_t{1} << 30;

// The value of element (r, c) of an MXFP4 weight [rows, cols] (nibble c % 2 of byte c / 2).
float Mxfp4Value(const HostWeight& w, int64_t r, int64_t c) {
  const int64_t cols = w.device.cols;
  const uint8_t byte = w.data[(r * cols + c) / 2];
  const uint8_t nibble = c % 2 == 0 ? byte & 0xF : byte >> 4;
  return cpu::E2m1ToF32(nibble) * cpu::E8m0ToF32(w.scale[r * (cols / 32) + c / 32]);
}

class CudaMoeBlock128Test : public CudaFp8Test {
 protected:
  void SetUp() override {
    CudaFp8Test::SetUp();
    if (gpu_ == nullptr) return;
    EnableManyTokenPaths(kBudget);
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      gpu_->set_experts_block128_copy_budget(0);
      gpu_->set_experts_block128(false);
    }
    CudaFp8Test::TearDown();
  }

  // Which path RunGpu takes: the e4m3 copies (budget `copy_budget`), the register path over the
  // MXFP4 bytes (no budget), or RoutedExpertsBf16 (both off).
  enum class Path { kCopies, kRegisters, kBf16 };

  // Checks RequantMxFp4Block128 of w: every copied value times its block scale equals the CPU's
  // e4m3 rounding of value / scale times scale (bitwise), the scale is 2^(largest ue8m0 byte of
  // the block - 133); with `exact`, it equals the MXFP4 value itself.
  void ExpectRequant(const HostWeight& w, bool exact) {
    const int64_t rows = w.device.rows, cols = w.device.cols;
    ASSERT_TRUE(kernels::ExpertBlock128Convertible(w.device));
    uint8_t* buffer = PoisonedBytes(kernels::Block128WeightBytes(rows, cols));
    ASSERT_EQ(kernels::RequantMxFp4Block128(w.device, buffer, gpu_->stream()), cudaSuccess);
    const kernels::Block128Weight view = kernels::Block128WeightAt(buffer, rows, cols);
    const std::vector<uint8_t> data = BytesFromGpu(view.data, rows * cols);
    const std::vector<float> scale = FromGpu(view.scale, rows / kB * view.scale_ld);
    int64_t mismatches = 0, inexact = 0;
    for (int64_t rb = 0; rb < rows / kB; ++rb) {
      for (int64_t kb = 0; kb < cols / kB; ++kb) {
        int s_max = 0;
        for (int64_t r = rb * kB; r < rb * kB + kB; ++r) {
          for (int64_t c = kb * kB; c < kb * kB + kB; c += 32) {
            s_max = std::max<int>(s_max, w.scale[r * (cols / 32) + c / 32]);
          }
        }
        const float block_scale = std::ldexp(1.0f, s_max - 133);
        ASSERT_EQ(scale[rb * view.scale_ld + kb], block_scale) << rb << " " << kb;
        for (int64_t r = rb * kB; r < rb * kB + kB; ++r) {
          for (int64_t c = kb * kB; c < kb * kB + kB; ++c) {
            const float value = Mxfp4Value(w, r, c);
            const float got =
                cpu::E4m3ToF32(data[kernels::ExpertBlock128ByteOffset(r, c, cols)]) * block_scale;
            mismatches += got != cpu::RoundToE4m3(value / block_scale) * block_scale;
            inexact += got != value;
          }
        }
      }
    }
    EXPECT_EQ(mismatches, 0);
    if (exact) {
      EXPECT_EQ(inexact, 0);
    } else {
      EXPECT_GT(inexact, 0) << "the wide scale range should need rounding somewhere";
    }
  }

  // RoutedExperts through the backend (FP8 mode, not batch-invariant) on `path`.
  std::vector<float> RunGpu(const Experts& ex, const std::vector<float>& x, int64_t T,
                            const std::vector<int32_t>& ids, const std::vector<float>& weights,
                            int64_t k, Path path, size_t copy_budget = kBudget) {
    gpu_->set_experts_block128_copy_budget(path == Path::kCopies ? copy_budget : 0);
    gpu_->set_experts_block128(path != Path::kBf16);
    model::RoutedExpertsArgs a;
    a.x = ToGpu(x), a.T = T, a.D = ex.D, a.experts = ToGpu(ids), a.weights = ToGpu(weights);
    a.k = k, a.table = ex.table.data(), a.n_experts = static_cast<int64_t>(ex.table.size());
    a.swiglu_limit = 7.0f;
    a.y = PoisonedFloats(T * ex.D);
    gpu_->RoutedExperts(a);
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return FromGpu(a.y, T * ex.D);
  }

  // A call's inputs: x [T, D] ~ N(0, 4^2), k distinct ids per token of 16 experts, weights in
  // [0.05, 1.5] (drawn in that order).
  struct Inputs {
    std::vector<float> x;
    std::vector<int32_t> ids;
    std::vector<float> weights;
  };
  Inputs MakeInputs(const Experts& ex, int64_t T, int64_t k) {
    Inputs in;
    in.x = Normal(T * ex.D, 4.0f);
    in.ids = Route(T, k, 16);
    in.weights = Uniform(T * k, 0.05f, 1.5f);
    return in;
  }

  std::vector<float> Reference(const Experts& ex, const std::vector<float>& x, int64_t T,
                               const std::vector<int32_t>& ids, const std::vector<float>& weights,
                               int64_t k, int quant_block) {
    return RoutedExpertsReference(cpu_, ex.table, ex.D, ex.I, x, T, ids, weights, k, 7.0f,
                                  /*fp8_activations=*/true, quant_block);
  }

  // The kernels' device table of ex's experts (MakeExperts: one weight set per expert).
  const kernels::ExpertPointers* DeviceTable(const Experts& ex) {
    std::vector<kernels::ExpertPointers> host(ex.table.size());
    for (size_t e = 0; e < host.size(); ++e) {
      for (int m = 0; m < 3; ++m) {
        host[e].data[m] = ex.mats[3 * e + m].device.data;
        host[e].scale[m] = ex.mats[3 * e + m].device.scale;
      }
    }
    std::vector<uint8_t> bytes(sizeof(kernels::ExpertPointers) * host.size());
    std::memcpy(bytes.data(), host.data(), bytes.size());
    return reinterpret_cast<const kernels::ExpertPointers*>(BytesToGpu(bytes));
  }

  // Block-128 copy bytes of an expert table of n distinct experts.
  static int64_t CopyBytes(const Experts& ex, int64_t n) {
    return n * (2 * kernels::Block128WeightBytes(ex.I, ex.D) +
                kernels::Block128WeightBytes(ex.D, ex.I));
  }
};

TEST_F(CudaMoeBlock128Test, RequantMatchesCpu) {
  // Scales within 14 octaves of the block's largest: exact. 30 octaves apart: rounded.
  ExpectRequant(MakeWeight(WeightFormat::kMxFp4, 256, 384, 118, 124), /*exact=*/true);
  ExpectRequant(MakeWeight(WeightFormat::kMxFp4, 128, 256, 100, 130), /*exact=*/false);
  const HostWeight odd = MakeWeight(WeightFormat::kMxFp4, 64, 256);
  uint8_t* buffer = PoisonedBytes(kernels::Block128WeightBytes(64, 256));
  EXPECT_FALSE(kernels::ExpertBlock128Convertible(odd.device));
  EXPECT_EQ(kernels::RequantMxFp4Block128(odd.device, buffer, gpu_->stream()),
            cudaErrorInvalidValue);
}

// ExpertRowScaleMax (the register path's one weight scale per row) against the CPU's maximum of
// each row's scale bytes, for w1, w3 and w2 rows of three experts whose bytes span 30 octaves;
// arguments it cannot take are refused.
TEST_F(CudaMoeBlock128Test, RowScaleMaxMatchesCpu) {
  const Experts ex = MakeExperts(3, WeightFormat::kMxFp4, 256, 384, 100, 130);
  const kernels::ExpertPointers* table = DeviceTable(ex);
  const int64_t stride = kernels::ExpertRowScaleMaxStride(ex.D, ex.I);
  ASSERT_EQ(stride, 2 * 384 + 256);
  uint8_t* out = PoisonedBytes(3 * stride);
  ASSERT_EQ(kernels::ExpertRowScaleMax(table, 3, ex.D, ex.I, out, gpu_->stream()), cudaSuccess);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  const std::vector<uint8_t> got = BytesFromGpu(out, 3 * stride);
  for (int e = 0; e < 3; ++e) {
    for (int64_t r = 0; r < stride; ++r) {
      // Rows of w1 (mats 3e), then w3 (3e + 2), then w2 (3e + 1).
      const int m = r < ex.I ? 0 : (r < 2 * ex.I ? 2 : 1);
      const int64_t row = m == 0 ? r : (m == 2 ? r - ex.I : r - 2 * ex.I);
      const kernels::ExpertRow er = kernels::ExpertRowOf(r, ex.I);
      ASSERT_TRUE(er.m == m && er.row == row) << r;
      const int64_t blocks = (m == 1 ? ex.I : ex.D) / 32;
      const std::vector<uint8_t>& scale = ex.mats[3 * e + m].scale;
      const uint8_t expected =
          *std::max_element(scale.begin() + row * blocks, scale.begin() + (row + 1) * blocks);
      ASSERT_EQ(got[e * stride + r], expected) << "expert " << e << " row " << r;
    }
  }
  EXPECT_EQ(kernels::ExpertRowScaleMax(nullptr, 3, ex.D, ex.I, out, gpu_->stream()),
            cudaErrorInvalidValue);
  EXPECT_EQ(kernels::ExpertRowScaleMax(table, 3, 200, ex.I, out, gpu_->stream()),
            cudaErrorInvalidValue);
  EXPECT_EQ(kernels::ExpertRowScaleMax(table, 0, ex.D, ex.I, out, gpu_->stream()),
            cudaErrorInvalidValue);
}

// The direct entry without row scales makes them in its scratch: the same bits as the backend,
// which passes the ones it keeps with its expert table.
TEST_F(CudaMoeBlock128Test, DirectEntryMakesItsOwnRowScales) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384, 110, 126);
  const int64_t T = 300, k = 6;
  const auto [x, ids, weights] = MakeInputs(ex, T, k);
  const std::vector<float> backend = RunGpu(ex, x, T, ids, weights, k, Path::kRegisters);
  kernels::RoutedExpertsLaunch l;
  l.table = DeviceTable(ex), l.n_experts = 16, l.D = ex.D, l.I = ex.I;
  l.x = ToGpu(x), l.T = T, l.experts = ToGpu(ids), l.weights = ToGpu(weights), l.k = k;
  l.swiglu_limit = 7.0f, l.y = PoisonedFloats(T * ex.D);
  l.error_word = ToGpu(std::vector<int32_t>{0});
  const int width = kernels::RoutedExpertsBlock128ItemPairs(T, k, 16);
  void* scratch =
      PoisonedBytes(kernels::RoutedExpertsBlock128ScratchBytes(T, k, ex.D, ex.I, 16, width));
  ASSERT_EQ(kernels::RoutedExpertsBlock128(l, width, nullptr, nullptr, scratch, gpu_->stream()),
            cudaSuccess);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  EXPECT_TRUE(BitExact(FromGpu(l.y, T * ex.D), backend));
}

// Each matrix's scale bytes in its own range, 22 octaves between w1's and w3's: a GEMM that read
// another matrix's row scales would flush w1's values to zero (w3's maxima) or wrap the shifts
// (w1's maxima under w3's or w2's bytes). The register path still matches the per-128 reference.
TEST_F(CudaMoeBlock128Test, EachMatrixUsesItsOwnRowScales) {
  const Experts ex = MakeExpertsPerMatrix(16, WeightFormat::kMxFp4, 256, 384,
                                          {{{100, 106}, {111, 117}, {122, 128}}});
  const int64_t T = 300, k = 6;
  const auto [x, ids, weights] = MakeInputs(ex, T, k);
  const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 128);
  const std::vector<float> regs = RunGpu(ex, x, T, ids, weights, k, Path::kRegisters);
  EXPECT_GT(MaxAbs(expected), 0.0f);
  EXPECT_TRUE(RelL2Close(regs, expected, 5e-3));
  EXPECT_TRUE(AllClose(regs, expected, 2e-2, 2e-2 * MaxAbs(expected)));
}

// Mean pairs per expert 15 (T 40), 38, 113 and 263 (several items for most experts), with
// items of 64 (the default), 96 and 128 pairs: the copies and the register path against the
// per-128 reference and close to each other (the same operand values; the tensor core may sum
// a k32 step's products in another order); the copies were made (their bytes counted); the
// bf16 path's results differ and match the per-32 reference.
TEST_F(CudaMoeBlock128Test, MatchesBlock128Reference) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t k = 6;
  struct Case {
    int64_t T;
    const char* item_pairs;  // DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS
    int width;
  };
  for (const Case c : {Case{40, nullptr, 64}, Case{100, "96", 96}, Case{300, nullptr, 64},
                       Case{300, "128", 128}, Case{700, nullptr, 64}}) {
    const int64_t T = c.T;
    SCOPED_TRACE(::testing::Message() << "T " << T << " items of " << c.width);
    const ScopedEnv width("DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS", c.item_pairs);
    ASSERT_EQ(kernels::RoutedExpertsBlock128ItemPairs(T, k, 16), c.width);
    ASSERT_TRUE(kernels::RoutedExpertsBlock128Applicable(ex.D, ex.I, T, k, 16));
    const auto [x, ids, weights] = MakeInputs(ex, T, k);
    const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 128);
    const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, Path::kCopies);
    EXPECT_TRUE(RelL2Close(got, expected, 5e-3));
    EXPECT_TRUE(AllClose(got, expected, 2e-2, 2e-2 * MaxAbs(expected)));
    EXPECT_EQ(static_cast<int64_t>(gpu_->experts_block128_copy_bytes()), CopyBytes(ex, 16));
    const std::vector<float> regs = RunGpu(ex, x, T, ids, weights, k, Path::kRegisters);
    EXPECT_TRUE(RelL2Close(regs, expected, 5e-3));
    EXPECT_TRUE(AllClose(regs, expected, 2e-2, 2e-2 * MaxAbs(expected)));
    EXPECT_TRUE(RelL2Close(regs, got, 1e-3));
    EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, Path::kRegisters), regs));
    const std::vector<float> bf16 = RunGpu(ex, x, T, ids, weights, k, Path::kBf16);
    EXPECT_FALSE(BitExact(bf16, got));
    EXPECT_FALSE(BitExact(bf16, regs));
    EXPECT_TRUE(RelL2Close(bf16, Reference(ex, x, T, ids, weights, k, 32), 5e-3));
  }
  // Below the mean-pairs threshold (decode sizes) the path does not apply.
  EXPECT_FALSE(kernels::RoutedExpertsBlock128Applicable(ex.D, ex.I, 32, k, 16));
}

// K of 6 and 5 stages (D 768, I 640): the rings (4 or 5 slots) wrap around, so the empty barriers
// and the phase parities are exercised at every item width; the experts' scale bytes span 30
// octaves, so the shift tables' rounding and zero entries are used.
TEST_F(CudaMoeBlock128Test, RingsWrapAroundWithWideScales) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 768, 640, 100, 130);
  const int64_t T = 100, k = 6;
  const auto [x, ids, weights] = MakeInputs(ex, T, k);
  const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 128);
  for (const char* width : {"64", "96", "128"}) {
    SCOPED_TRACE(::testing::Message() << "items of " << width);
    const ScopedEnv env("DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS", width);
    for (const Path path : {Path::kCopies, Path::kRegisters}) {
      const std::vector<float> got = RunGpu(ex, x, T, ids, weights, k, path);
      EXPECT_TRUE(RelL2Close(got, expected, 5e-3)) << static_cast<int>(path);
    }
  }
}

// The decode form (items of 8 pairs on the e4m3 streaming GEMM, set_experts_decode_e4m3(true))
// at decode sizes (1-9 mean pairs per expert, below the prefill form's threshold) against the
// per-128 reference. K of 2 to 6 stages against a ring of 4 (D 256 / I 384; D 768 / I 640 with 30
// octaves of scales), 4 stages with no tail (D 512), and 48 (D 6144: the item's packed stages
// take more than 48 KiB of shared memory). Deterministic, the same bits from every compiled GEMM
// variant; other bits than the bf16 stream's (the setting takes effect); a token's bits do not
// depend on the other tokens of its items.
TEST_F(CudaMoeBlock128Test, DecodeItemsMatchBlock128Reference) {
  const int64_t k = 6;
  struct Shape {
    int64_t D, I;
    int scale_lo, scale_hi;
    int64_t max_T;
  };
  for (const Shape sh : {Shape{256, 384, 118, 124, 24}, Shape{768, 640, 100, 130, 24},
                         Shape{512, 512, 118, 124, 8}, Shape{6144, 256, 118, 124, 8}}) {
    const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, sh.D, sh.I, sh.scale_lo, sh.scale_hi);
    // Prefill sizes belong to the prefill form.
    EXPECT_FALSE(kernels::RoutedExpertsBlock128DecodeApplicable(ex.D, ex.I, 300, k, 16));
    for (const int64_t T : {1, 3, 8, 24}) {
      if (T > sh.max_T) continue;
      SCOPED_TRACE(::testing::Message() << "D " << ex.D << " I " << ex.I << " T " << T);
      ASSERT_FALSE(kernels::RoutedExpertsBlock128Applicable(ex.D, ex.I, T, k, 16));
      ASSERT_TRUE(kernels::RoutedExpertsBlock128DecodeApplicable(ex.D, ex.I, T, k, 16));
      const auto [x, ids, weights] = MakeInputs(ex, T, k);
      const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 128);
      gpu_->set_experts_decode_e4m3(true);
      const std::vector<float> e4m3 = RunGpu(ex, x, T, ids, weights, k, Path::kRegisters);
      EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, Path::kRegisters), e4m3));
      // Token 0 alone (its items hold no other pair).
      const std::vector<float> alone =
          RunGpu(ex, std::vector<float>(x.begin(), x.begin() + ex.D), 1,
                 std::vector<int32_t>(ids.begin(), ids.begin() + k),
                 std::vector<float>(weights.begin(), weights.begin() + k), k, Path::kRegisters);
      // The GEMM's compiled variants (loads in flight, 3 blocks per SM) give the same bits.
      for (const char* variant : {"pf2", "pf2b3"}) {
        if (T != 8) break;
        const ScopedEnv env("DEEPINFER_EXPERTS_DECODE_E4M3_VARIANT", variant);
        EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, Path::kRegisters), e4m3)) << variant;
      }
      gpu_->set_experts_decode_e4m3(false);
      EXPECT_GT(MaxAbs(expected), 0.0f);
      // At T = 1 (6 pairs) a few e4m3 roundings of h that flip against the reference's (gu
      // summed in another order) can move the relative error past 5e-3 (run 194: 5.3e-3 at D 512).
      EXPECT_TRUE(RelL2Close(e4m3, expected, T == 1 ? 1e-2 : 5e-3));
      EXPECT_TRUE(AllClose(e4m3, expected, 2e-2, 2e-2 * MaxAbs(expected)));
      EXPECT_TRUE(BitExact(alone, std::vector<float>(e4m3.begin(), e4m3.begin() + ex.D)));
      const std::vector<float> bf16 = RunGpu(ex, x, T, ids, weights, k, Path::kRegisters);
      EXPECT_FALSE(BitExact(bf16, e4m3));
      EXPECT_TRUE(RelL2Close(bf16, Reference(ex, x, T, ids, weights, k, 32), 5e-3));
    }
  }
}

// A token routed to an id outside [0, n_experts) gets a NaN row; the others are unaffected (on
// both FP8 paths).
class CudaMoeBlock128PathTest : public CudaMoeBlock128Test,
                                public ::testing::WithParamInterface<bool> {};

TEST_P(CudaMoeBlock128PathTest, OutOfRangeIdGivesNaNRow) {
  const Path path = GetParam() ? Path::kCopies : Path::kRegisters;
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t T = 64, k = 6;
  const std::vector<float> x = Normal(T * ex.D, 4.0f);
  std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  const std::vector<float> clean = RunGpu(ex, x, T, ids, weights, k, path);
  ids[5 * k + 2] = 99;
  model::RoutedExpertsArgs a;
  a.x = ToGpu(x), a.T = T, a.D = ex.D, a.experts = ToGpu(ids), a.weights = ToGpu(weights);
  a.k = k, a.table = ex.table.data(), a.n_experts = 16, a.swiglu_limit = 7.0f;
  a.y = PoisonedFloats(T * ex.D);
  gpu_->RoutedExperts(a);
  // The backend's stream is non-blocking: a plain cudaMemcpy does not wait for it, so the stream
  // is synchronised first (run 177 read a poisoned row otherwise). FromGpu would stop at the
  // backend's status.
  const base::Status s = gpu_->Synchronize();  // the error word reports the id
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument) << s;
  std::vector<float> got(T * ex.D);
  ASSERT_EQ(cudaMemcpy(got.data(), a.y, got.size() * sizeof(float), cudaMemcpyDeviceToHost),
            cudaSuccess);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = 0; d < ex.D; ++d) {
      const float v = got[t * ex.D + d];
      if (t == 5) {
        ASSERT_TRUE(std::isnan(v)) << d;
      } else {
        ASSERT_EQ(v, clean[t * ex.D + d]) << t << " " << d;
      }
    }
  }
  gpu_.reset();  // skip TearDown's status check: this backend failed on purpose
}

INSTANTIATE_TEST_SUITE_P(CopiesOrRegisters, CudaMoeBlock128PathTest, ::testing::Bool());

// Which GEMM kernel computes each path: with a kernel's launches dropped (kernel_census.h), the
// path that uses it gives other bits (its expert GEMMs leave the previous run's products in the
// scratch: the arena hands the same block back), and the other paths the same bits.
TEST_F(CudaMoeBlock128Test, EachPathRunsItsOwnGemm) {
  // Skip patterns drop recorded launches only (DEEPINFER_CUDA_GRAPHS=0 issues them directly).
  if (!gpu_->graphs()) GTEST_SKIP() << "launches are not recorded: skip patterns do not apply";
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t T = 300, k = 6;
  const std::vector<float> x = Normal(T * ex.D, 4.0f), other = Normal(T * ex.D, 4.0f);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 1.5f);
  const Path paths[] = {Path::kCopies, Path::kRegisters, Path::kBf16};
  std::vector<float> clean[3];
  for (const Path path : paths)
    clean[static_cast<int>(path)] = RunGpu(ex, x, T, ids, weights, k, path);
  const std::pair<const char*, Path> gemms[] = {{"ExpertGemmBlock128Kernel", Path::kCopies},
                                                {"ExpertGemmMxfp4Kernel", Path::kRegisters}};
  for (const auto& [kernel, user] : gemms) {
    SCOPED_TRACE(kernel);
    RunGpu(ex, other, T, ids, weights, k, user);
    const ScopedKernelSkipPatterns skip({kernel});
    EXPECT_FALSE(BitExact(RunGpu(ex, x, T, ids, weights, k, user), clean[static_cast<int>(user)]));
    for (const Path path : paths) {
      if (path == user) continue;
      EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, path), clean[static_cast<int>(path)]))
          << static_cast<int>(path);
    }
  }
}

// A budget too small for the layer's copies: none is made (all of a layer's or none), the
// register path runs (bitwise its result without a budget), and the layer is not asked again.
TEST_F(CudaMoeBlock128Test, SmallBudgetFallsBackToRegisters) {
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 256, 384);
  const int64_t T = 200, k = 6;
  const auto [x, ids, weights] = MakeInputs(ex, T, k);
  const std::vector<float> regs = RunGpu(ex, x, T, ids, weights, k, Path::kRegisters);
  const size_t small = static_cast<size_t>(CopyBytes(ex, 3));
  EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, Path::kCopies, small), regs));
  EXPECT_TRUE(BitExact(RunGpu(ex, x, T, ids, weights, k, Path::kCopies, small), regs));
  EXPECT_EQ(gpu_->experts_block128_copy_bytes(), 0u);
}

// The direct entry refuses what it cannot run: neither copies nor an MXFP4 table, decode sizes,
// unaligned x, shapes that are not multiples of 128, item widths without a kernel.
TEST_F(CudaMoeBlock128Test, DirectEntryChecksArguments) {
  kernels::RoutedExpertsLaunch l;
  l.n_experts = 16, l.D = 256, l.I = 384, l.T = 300, l.k = 6;
  l.x = PoisonedFloats(l.T * l.D + 1);
  auto* table = reinterpret_cast<const kernels::ExpertBlock128Pointers*>(
      PoisonedBytes(16 * static_cast<int64_t>(sizeof(kernels::ExpertBlock128Pointers))));
  void* scratch = PoisonedBytes(16);
  EXPECT_EQ(kernels::RoutedExpertsBlock128(l, 64, nullptr, nullptr, scratch, gpu_->stream()),
            cudaErrorInvalidValue);
  kernels::RoutedExpertsLaunch small = l;
  small.T = 32;  // 12 pairs per expert: the streaming kernels' side
  EXPECT_EQ(kernels::RoutedExpertsBlock128(small, 64, table, nullptr, scratch, gpu_->stream()),
            cudaErrorInvalidValue);
  kernels::RoutedExpertsLaunch unaligned = l;
  unaligned.x = l.x + 1;
  EXPECT_EQ(kernels::RoutedExpertsBlock128(unaligned, 64, table, nullptr, scratch, gpu_->stream()),
            cudaErrorInvalidValue);
  for (const int width : {0, 32, 80, 256}) {  // item widths without a kernel
    EXPECT_EQ(kernels::RoutedExpertsBlock128(l, width, table, nullptr, scratch, gpu_->stream()),
              cudaErrorInvalidValue)
        << width;
  }
  EXPECT_FALSE(kernels::RoutedExpertsBlock128Applicable(256, 320, 300, 6, 16));
  EXPECT_FALSE(kernels::RoutedExpertsBlock128Applicable(192, 384, 300, 6, 16));
  EXPECT_FALSE(kernels::RoutedExpertsBlock128Applicable(256, 384, 300, 65, 16));
  EXPECT_TRUE(kernels::RoutedExpertsBlock128Applicable(256, 384, 300, 6, 16));
}

TEST_F(CudaMoeBlock128Test, RealV41Shape) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  const Experts ex = MakeExperts(16, WeightFormat::kMxFp4, 5120, 2304);
  const int64_t T = 40, k = 6;  // 15 pairs per expert
  const std::vector<float> x = Normal(T * ex.D);
  const std::vector<int32_t> ids = Route(T, k, 16);
  const std::vector<float> weights = Uniform(T * k, 0.05f, 0.5f);
  const std::vector<float> expected = Reference(ex, x, T, ids, weights, k, 128);
  EXPECT_TRUE(RelL2Close(RunGpu(ex, x, T, ids, weights, k, Path::kCopies, size_t{4} << 30),
                         expected, 5e-3));
  EXPECT_TRUE(RelL2Close(RunGpu(ex, x, T, ids, weights, k, Path::kRegisters), expected, 5e-3));
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
