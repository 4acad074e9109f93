// The tensor-core indexer scores (k_indexer_mma.cu, reached through
// CudaBackend::IndexerScoresVarlen / IndexerScores) against the CPU reference at the
// DeepSeek-V4.1 shape (64 heads x 128), on random normal and FP4-fake-quantised inputs;
// bitwise batch invariance; the fp32 fallback for other shapes.
//
// Error bound per score s[t, g]: with B = scale * sum_h |w[t,h]| * sum_i |q[t,h,i]| |k[g,i]|,
//   |gpu - cpu| <= c * B,  c = 2^-21 + 6 * 2^-19 + (dim / 16 + heads + 5) * 2^-24
// 2^-21: the products the kernel drops (mid x lo, lo x mid, lo x lo of the exact 3-term
// bf16 split; |mid| < 2^-7 |x|, |lo| < 2^-15 |x|). 6 * 2^-19: each k-step's (<= 6) MMAs
// go into a fresh fragment; one MMA's fp32 result is taken within 17 truncations of one
// ulp of its largest addend (no guard bits assumed), i.e. 2^-19 of the k-step's
// magnitude sum, and the k-steps' magnitude sums add up to the dot's. dim / 16 * 2^-24:
// the round-to-nearest adds of the k-step partials. (heads + 5) * 2^-24: relu * scale * w,
// the fp32 head sum and the reference's rounding to float. heads 64, dim 128: c = 1.6e-5.
// That bound could not see a dropped small product, so the relative L2 error over the
// finite scores must also be <= 2e-6 (random inputs should give ~1e-7; a missing hi x lo
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_indexer_test_util.h"
#include "backend/cuda/kernels_indexer.h"

namespace deepinfer::backend::cuda::testing {
namespace {

TEST_F(CudaIndexerTest, AppliesToRealShapeOnly) {
  const float* p = reinterpret_cast<const float*>(uintptr_t{256});
  EXPECT_TRUE(kernels::IndexerMmaApplicable(p, p, 1, 64, 128, 4));
  EXPECT_TRUE(kernels::IndexerMmaApplicable(p, p, 65535, 16, 16, 1));
  EXPECT_TRUE(kernels::IndexerMmaApplicable(p, p, 3, 128, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 3, 10, 4));
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 64, 120, 4));   // dim % 16
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 72, 128, 4));   // heads % 16
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 144, 128, 4));  // heads > 128
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 64, 272, 4));   // dim > 256
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 128, 256, 4));  // shared memory
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p + 1, p, 1, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p + 2, 1, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 0, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaApplicable(p, p, 1, 64, 128, 0));
}

TEST_F(CudaIndexerTest, RealShapeNormalInputsMatchCpu) {
  for (const auto& seqs : RealShapeSeqs()) {
    const IdxCase c = MakeCase(seqs, kHeads, kDim, /*fp4=*/false);
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " n_keys " << c.n_keys);
    ExpectMatchesCpu(c, Gpu(c));
  }
}

TEST_F(CudaIndexerTest, RealShapeFp4InputsMatchCpu) {
  for (const auto& seqs : RealShapeSeqs()) {
    const IdxCase c = MakeCase(seqs, kHeads, kDim, /*fp4=*/true);
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " n_keys " << c.n_keys);
    ExpectMatchesCpu(c, Gpu(c));
  }
}

// Mixed rows: FP4 q with normal keys and the reverse (one side's extra terms skipped).
TEST_F(CudaIndexerTest, OneSideExactBf16MatchesCpu) {
  for (bool fp4_q : {true, false}) {
    IdxCase c = MakeCase({{300, 3}, {64, 2}}, kHeads, kDim, /*fp4=*/false);
    if (fp4_q) {
      cpu_.FakeQuant(c.q.data(), c.T * c.heads, c.dim, c.dim,
                     model::FakeQuantKind::kFp4Block32Pow2);
    } else {
      cpu_.FakeQuant(c.keys.data(), 364, c.dim, c.dim, model::FakeQuantKind::kFp4Block32Pow2);
    }
    SCOPED_TRACE(fp4_q ? "fp4 q" : "fp4 keys");
    ExpectMatchesCpu(c, Gpu(c));
  }
}

// Other tensor-core shapes (16 / 48 / 128 heads, dim 16 / 48 / 256).
TEST_F(CudaIndexerTest, OtherApplicableShapesMatchCpu) {
  for (auto [heads, dim] :
       std::vector<std::pair<int64_t, int64_t>>{{16, 16}, {48, 48}, {128, 128}, {32, 256}}) {
    const IdxCase c = MakeCase({{200, 3}, {65, 2}}, heads, dim, /*fp4=*/false);
    ASSERT_TRUE(kernels::IndexerMmaApplicable(ToGpu(c.q), ToGpu(c.keys), c.T, heads, dim, 4));
    SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
    ExpectMatchesCpu(c, Gpu(c));
  }
}

// Shapes the tensor-core kernel does not take run the fp32 kernel (same contract).
TEST_F(CudaIndexerTest, OtherShapesFallBack) {
  for (auto [heads, dim] : std::vector<std::pair<int64_t, int64_t>>{{3, 10}, {64, 120}, {20, 32}}) {
    const IdxCase c = MakeCase({{100, 2}, {70, 3}}, heads, dim, /*fp4=*/false);
    SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
    const std::vector<float> got = Gpu(c);
    EXPECT_TRUE(AllClose(got, Cpu(c), 1e-5, 2e-6 * std::max(1.0f, MaxAbs(Cpu(c)))));
  }
}

// A row's scores are bitwise the same in a 300-row call, a 1-row varlen call, a 1-row
// varlen call with its own key count as the stride, and a single-sequence IndexerScores
// call.
TEST_F(CudaIndexerTest, BatchInvariantBitwise) {
  const IdxCase c = MakeCase(RealShapeSeqs().back(), kHeads, kDim, /*fp4=*/false);
  ASSERT_EQ(c.T, 300);
  const std::vector<float> all = Gpu(c);
  for (int64_t r : {0, 1, 119, 120, 150, 151, 299}) {
    SCOPED_TRACE(::testing::Message() << "row " << r);
    IdxCase one = c;
    one.T = 1;
    one.q.assign(c.q.begin() + r * kHeads * kDim, c.q.begin() + (r + 1) * kHeads * kDim);
    one.w.assign(c.w.begin() + r * kHeads, c.w.begin() + (r + 1) * kHeads);
    one.offset = {c.offset[r]};
    one.len = {c.len[r]};
    one.q_pos = {c.q_pos[r]};
    const std::vector<float> row(all.begin() + r * c.n_keys, all.begin() + (r + 1) * c.n_keys);
    EXPECT_TRUE(BitExact(Gpu(one), row));
    const int64_t own = c.len[r];
    if (own == 0) continue;
    one.n_keys = own;
    const std::vector<float> head(row.begin(), row.begin() + own);
    EXPECT_TRUE(BitExact(Gpu(one), head));
    float* out = PoisonedFloats(own);
    gpu_->IndexerScores(ToGpu(one.q), ToGpu(one.w), 1, kHeads, kDim,
                        ToGpu(c.keys) + static_cast<int64_t>(c.offset[r]) * kDim, own,
                        ToGpu(one.q_pos), c.ratio, c.scale, out);
    EXPECT_TRUE(BitExact(FromGpu(out, own), head));
  }
}

TEST_F(CudaIndexerGroupTest, GroupRowsFitSharedMemory) {
  EXPECT_EQ(kernels::IndexerMmaGroupRows(64, 128), 4);
  EXPECT_EQ(kernels::IndexerMmaGroupRows(128, 128), 2);
  EXPECT_EQ(kernels::IndexerMmaGroupRows(16, 16), 4);
  const float* p = reinterpret_cast<const float*>(uintptr_t{256});
  float* out = reinterpret_cast<float*>(uintptr_t{256});
  const int32_t* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  EXPECT_EQ(kernels::IndexerScoresMmaGrouped(p, p, 8, 64, 128, p, nullptr, nullptr, 64, pos, 4,
                                             1.0f, out, 5, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kernels::IndexerScoresMmaGrouped(p, p, 8, 64, 128, p, nullptr, nullptr, 64, pos, 4,
                                             1.0f, out, 0, nullptr),
            cudaErrorInvalidValue);
}

TEST_F(CudaIndexerGroupTest, ExactBf16OperandsBitwiseEqualToRowAlone) {
  for (bool causal : {true, false}) {
    for (const auto& seqs : GroupSeqs()) {
      const IdxCase c = MakeGroupCase(seqs, IdxInputs::kExactBf16, causal);
      SCOPED_TRACE(::testing::Message()
                   << "T " << c.T << " seqs " << seqs.size() << " causal " << causal);
      ExpectGroupingInvariant(c);
    }
  }
}

TEST_F(CudaIndexerGroupTest, Fp32OperandsBitwiseEqualToRowAlone) {
  for (bool causal : {true, false}) {
    for (const auto& seqs : GroupSeqs()) {
      const IdxCase c = MakeGroupCase(seqs, IdxInputs::kFp32, causal);
      SCOPED_TRACE(::testing::Message()
                   << "T " << c.T << " seqs " << seqs.size() << " causal " << causal);
      ExpectGroupingInvariant(c);
    }
  }
}

// Rows of one group with different q term counts, and one tile whose first 32 keys are
// exact: rows that see only those take 1 key term, rows that see more take 3.
TEST_F(CudaIndexerGroupTest, MixedTermCountsBitwiseEqualToRowAlone) {
  for (bool causal : {true, false}) {
    for (const auto& seqs : GroupSeqs()) {
      const IdxCase c = MakeGroupCase(seqs, IdxInputs::kMixed, causal);
      SCOPED_TRACE(::testing::Message()
                   << "T " << c.T << " seqs " << seqs.size() << " causal " << causal);
      ExpectGroupingInvariant(c);
    }
  }
}

// The grouped prefill path against the CPU reference (the accuracy bound of the header).
TEST_F(CudaIndexerGroupTest, PrefillMatchesCpu) {
  for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32, IdxInputs::kMixed}) {
    const IdxCase c = MakeGroupCase({{1024, 400}, {333, 157}}, kind, /*causal=*/true);
    ASSERT_GE(c.T, kernels::kIndexerGroupMinRows);
    SCOPED_TRACE(::testing::Message() << "inputs " << static_cast<int>(kind));
    ExpectMatchesCpu(c, Grouped(c, kernels::IndexerMmaGroupRows(kHeads, kDim)));
  }
}

// IndexerSums::kTensorCore (the FP8 mode): every grouping, the one-row kernel and the backend
// in FP8 mode give the same bits; with split operands (fp32 inputs: three terms) the exact
// operations bit for bit. FP4-grid operands: products of e2m1 values times block scales are
// small integers times powers of two, so while a row's block scales span a few octaves every
// partial sum of a dot is exact in fp32 and the chain gives the exact sums' bits (H200 run 148:
// all of them); with block scales 2^24 apart the chain must round, and it differs from the
// exact sums (so the chain really runs) within TensorBoundFactor of the CPU reference.
TEST_F(CudaIndexerGroupTest, TensorSumsBitwiseAcrossGroupingsAndAccurate) {
  constexpr auto kTensor = kernels::IndexerSums::kTensorCore;
  for (bool causal : {true, false}) {
    for (const auto& seqs : GroupSeqs()) {
      for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32, IdxInputs::kMixed}) {
        const IdxCase c = MakeGroupCase(seqs, kind, causal);
        SCOPED_TRACE(::testing::Message() << "T " << c.T << " seqs " << seqs.size() << " causal "
                                          << causal << " inputs " << static_cast<int>(kind));
        const std::vector<float> tensor = ExpectGroupingInvariant(c, kTensor);
        if (kind == IdxInputs::kFp32) {
          EXPECT_TRUE(BitExact(tensor, Grouped(c, 0)));
        }
      }
    }
  }
  const int64_t max_rows = kernels::IndexerMmaGroupRows(kHeads, kDim);
  IdxCase c = MakeGroupCase({{1024, 400}, {333, 157}}, IdxInputs::kExactBf16, true);
  EXPECT_TRUE(BitExact(Grouped(c, max_rows, kTensor), Grouped(c, 1))) << "FP4 grid, exact sums";
  ScaleChannelBlocks(c);
  const std::vector<float> tensor = Grouped(c, max_rows, kTensor);
  ExpectMatchesCpu(c, tensor, TensorBoundFactor(kHeads, kDim), 1e-5);
  EXPECT_FALSE(BitExact(tensor, Grouped(c, max_rows))) << "the tensor-core sums took no effect";
  // Where the two sums differ, every grouping, the one-row kernel and the backend agree.
  const std::vector<float> alone = ExpectGroupingInvariant(c, kTensor);
  EXPECT_FALSE(BitExact(alone, Grouped(c, 0))) << "one-row kernel: no tensor-core sums";
}

// Other tensor-core shapes (group sizes 2 .. 4; dims multiples of 32, as the mixed inputs
// fake-quantise 32-value blocks).
TEST_F(CudaIndexerGroupTest, OtherShapesBitwiseEqualToRowAlone) {
  for (auto [heads, dim] :
       std::vector<std::pair<int64_t, int64_t>>{{16, 32}, {48, 64}, {128, 128}, {32, 256}}) {
    const IdxCase c =
        MakeGroupCase({{200, 9}, {65, 6}}, IdxInputs::kMixed, /*causal=*/true, heads, dim);
    SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
    ExpectGroupingInvariant(c);
    ExpectGroupingInvariant(c, kernels::IndexerSums::kTensorCore);
  }
}

// Device time per call, one-row kernel vs row groups: prefill of one sequence (T = 4096
// rows at positions 0 .. 4095, 1024 keys at ratio 4, 64 heads x 128), normal and FP4
// inputs, and decode (T = 32 rows, each its own 1024 keys, all visible); FP4 inputs also with
// IndexerSums::kTensorCore ("fp4 tensor").
TEST_F(CudaIndexerGroupTest, DISABLED_BenchPrefillGroups) {
  const int64_t n_keys = 1024, ratio = 4, max_rows = kernels::IndexerMmaGroupRows(kHeads, kDim);
  for (const int64_t T : {int64_t{4096}, int64_t{32}}) {
    const bool prefill = T == 4096;
    std::vector<int32_t> offset(T), len(T, static_cast<int32_t>(n_keys)), q_pos(T);
    for (int64_t t = 0; t < T; ++t) {
      offset[t] = prefill ? 0 : static_cast<int32_t>(t * n_keys);
      q_pos[t] = static_cast<int32_t>(prefill ? t : ratio * n_keys + t % ratio);
    }
    for (int inputs = 0; inputs < 3; ++inputs) {  // fp32, fp4, fp4 with tensor-core sums
      const bool fp4 = inputs > 0;
      const kernels::IndexerSums sums =
          inputs == 2 ? kernels::IndexerSums::kTensorCore : kernels::IndexerSums::kExact;
      gpu_->set_fp8_activations(inputs == 2);
      std::vector<float> qh = Normal(T * kHeads * kDim);
      std::vector<float> kh = Normal((prefill ? 1 : T) * n_keys * kDim);
      if (fp4) {
        cpu_.FakeQuant(qh.data(), T * kHeads, kDim, kDim, model::FakeQuantKind::kFp4Block32Pow2);
        cpu_.FakeQuant(kh.data(), static_cast<int64_t>(kh.size()) / kDim, kDim, kDim,
                       model::FakeQuantKind::kFp4Block32Pow2);
      }
      const float *q = ToGpu(qh), *w = ToGpu(Normal(T * kHeads)), *keys = ToGpu(kh);
      const int32_t *goff = ToGpu(offset), *glen = ToGpu(len), *gpos = ToGpu(q_pos);
      float* out = PoisonedFloats(T * n_keys);
      for (int64_t g : {int64_t{1}, max_rows, int64_t{0}}) {  // 0: the backend's choice
        const double us = DeviceMicrosPerCall([&] {
          if (g == 0) {
            gpu_->IndexerScoresVarlen(q, w, T, kHeads, kDim, keys, goff, glen, n_keys, gpos, ratio,
                                      0.088f, out);
          } else {
            EXPECT_EQ(
                kernels::IndexerScoresMmaGrouped(q, w, T, kHeads, kDim, keys, goff, glen, n_keys,
                                                 gpos, ratio, 0.088f, out, g, gpu_->stream(), sums),
                cudaSuccess);
          }
        });
        std::printf("IndexerScoresVarlen %s T=%lld keys=%lld %s group_rows=%s: %.2f us/call\n",
                    prefill ? "prefill" : "decode ", static_cast<long long>(T),
                    static_cast<long long>(n_keys),
                    inputs == 2 ? "fp4 tensor"
                    : fp4       ? "fp4"
                                : "fp32",
                    g == 0 ? "auto" : std::to_string(g).c_str(), us);
        EXPECT_GT(us, 0.0);
      }
    }
  }
  gpu_->set_fp8_activations(false);
}

TEST_F(CudaIndexerTest, DISABLED_Bench) {
  const int64_t ratio = 4;
  for (auto [T, keys_per_row] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1024}, {32, 1024}, {256, 1024}, {32, 8192}, {256, 8192}}) {
    std::vector<int32_t> offset(T), len(T, keys_per_row), q_pos(T);
    for (int64_t t = 0; t < T; ++t) {
      offset[t] = static_cast<int32_t>(t * keys_per_row);
      q_pos[t] = static_cast<int32_t>(ratio * keys_per_row + t % ratio);
    }
    std::vector<float> qh = Normal(T * kHeads * kDim + 1), kh = Normal(T * keys_per_row * kDim);
    float* q = ToGpu(qh);
    const float* w = ToGpu(Normal(T * kHeads));
    const float* keys = ToGpu(kh);
    // FP4-fake-quantised copies (exactly bf16: one term each, as in the model).
    cpu_.FakeQuant(qh.data(), T * kHeads, kDim, kDim, model::FakeQuantKind::kFp4Block32Pow2);
    cpu_.FakeQuant(kh.data(), T * keys_per_row, kDim, kDim, model::FakeQuantKind::kFp4Block32Pow2);
    const float *q4 = ToGpu(qh), *keys4 = ToGpu(kh);
    const int32_t *goff = ToGpu(offset), *glen = ToGpu(len), *gpos = ToGpu(q_pos);
    float* out = PoisonedFloats(T * keys_per_row);
    // 0: mma on fp32 inputs; 1: the fp32 kernel (q misaligned); 2: mma on FP4 inputs.
    for (int variant = 0; variant < 3; ++variant) {
      if (variant == 1 && keys_per_row > 1024) continue;  // the fp32 kernel: short rows only
      const float* qv = variant == 2 ? q4 : q + (variant == 1 ? 1 : 0);
      const float* kv = variant == 2 ? keys4 : keys;
      const double us = DeviceMicrosPerCall([&] {
        gpu_->IndexerScoresVarlen(qv, w, T, kHeads, kDim, kv, goff, glen, keys_per_row, gpos, ratio,
                                  0.088f, out);
      });
      const char* name[] = {"mma fp32 inputs", "fp32 kernel    ", "mma fp4 inputs "};
      std::printf(
          "IndexerScoresVarlen %s T=%lld heads=64 dim=128 keys/row=%lld: %.2f us/call (%.2f "
          "TB/s)\n",
          name[variant], static_cast<long long>(T), static_cast<long long>(keys_per_row), us,
          T * keys_per_row * kDim * 4.0 / us * 1e-6);
      EXPECT_GT(us, 0.0);
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
