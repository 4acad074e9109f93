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
// product ~4e-6, a missing hi x mid product ~1e-3).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels_indexer.h"

namespace deepinfer::backend::cuda::testing {
namespace {

// One sequence of a varlen call: its key count and its query rows.
struct IdxSeq {
  int64_t keys, rows;
};

// Host inputs of a varlen indexer call (rows of sequence i follow those of i - 1; keys
// likewise).
struct IdxCase {
  int64_t T = 0, heads = 0, dim = 0, n_keys = 0, ratio = 4;
  float scale = 1.0f;
  std::vector<float> q, w, keys;
  std::vector<int32_t> offset, len, q_pos;
};

class CudaIndexerTest : public CudaVsCpuTest {
 protected:
  // Random case over `seqs`; q_pos of each row drawn so that between none and more than all
  // of its keys are visible (the last row of a sequence sees them all). n_keys = the
  // largest key count + extra (entries past every row's keys: -inf). fp4: q and keys
  // fake-quantised to the indexer's FP4 grid (exact in bf16).
  IdxCase MakeCase(const std::vector<IdxSeq>& seqs, int64_t heads, int64_t dim, bool fp4,
                   int64_t extra = 3) {
    IdxCase c;
    c.heads = heads;
    c.dim = dim;
    int64_t total = 0, n_max = 0;
    for (const IdxSeq& s : seqs) {
      for (int64_t j = 0; j < s.rows; ++j) {
        c.offset.push_back(static_cast<int32_t>(total));
        c.len.push_back(static_cast<int32_t>(s.keys));
        const int32_t hi = static_cast<int32_t>(c.ratio * (s.keys + 2));
        c.q_pos.push_back(j + 1 == s.rows ? hi : Ints(1, 0, hi)[0]);
      }
      total += s.keys;
      n_max = std::max(n_max, s.keys);
      c.T += s.rows;
    }
    c.n_keys = n_max + extra;
    c.scale = 1.0f / std::sqrt(static_cast<float>(dim));
    c.q = Normal(c.T * heads * dim);
    c.w = Normal(c.T * heads);
    c.keys = Normal(std::max<int64_t>(total, 1) * dim);
    if (fp4) {
      cpu_.FakeQuant(c.q.data(), c.T * heads, dim, dim, model::FakeQuantKind::kFp4Block32Pow2);
      cpu_.FakeQuant(c.keys.data(), total, dim, dim, model::FakeQuantKind::kFp4Block32Pow2);
    }
    return c;
  }

  std::vector<float> Cpu(const IdxCase& c) {
    std::vector<float> out(c.T * c.n_keys);
    cpu_.IndexerScoresVarlen(c.q.data(), c.w.data(), c.T, c.heads, c.dim, c.keys.data(),
                             c.offset.data(), c.len.data(), c.n_keys, c.q_pos.data(), c.ratio,
                             c.scale, out.data());
    return out;
  }

  std::vector<float> Gpu(const IdxCase& c) {
    float* out = PoisonedFloats(c.T * c.n_keys);
    gpu_->IndexerScoresVarlen(ToGpu(c.q), ToGpu(c.w), c.T, c.heads, c.dim, ToGpu(c.keys),
                              ToGpu(c.offset), ToGpu(c.len), c.n_keys, ToGpu(c.q_pos), c.ratio,
                              c.scale, out);
    return FromGpu(out, c.T * c.n_keys);
  }

  // B[t, g] of the header comment (0 where the entry is not visible), as
  // scale * sum_i |k[g,i]| * u[i] with u[i] = sum_h |w[t,h]| |q[t,h,i]|.
  static std::vector<double> Magnitudes(const IdxCase& c) {
    std::vector<double> b(c.T * c.n_keys, 0.0), u(c.dim);
    for (int64_t t = 0; t < c.T; ++t) {
      std::fill(u.begin(), u.end(), 0.0);
      for (int64_t h = 0; h < c.heads; ++h) {
        const float* qh = c.q.data() + (t * c.heads + h) * c.dim;
        for (int64_t i = 0; i < c.dim; ++i) u[i] += std::fabs(c.w[t * c.heads + h] * qh[i]);
      }
      const float* own = c.keys.data() + static_cast<int64_t>(c.offset[t]) * c.dim;
      for (int64_t g = 0; g < std::min<int64_t>(c.len[t], c.n_keys); ++g) {
        double sum = 0.0;
        for (int64_t i = 0; i < c.dim; ++i) sum += std::fabs(own[g * c.dim + i]) * u[i];
        b[t * c.n_keys + g] = sum * c.scale;
      }
    }
    return b;
  }

  static double BoundFactor(int64_t heads, int64_t dim) {
    return std::ldexp(1.0, -21) + 6.0 * std::ldexp(1.0, -19) +
           static_cast<double>(dim / 16 + heads + 5) * std::ldexp(1.0, -24);
  }

  // got vs the CPU reference: -inf at the same places, |err| <= c B elsewhere, relative L2
  // <= 2e-6; and the case has both visible and invisible entries.
  void ExpectMatchesCpu(const IdxCase& c, const std::vector<float>& got) {
    const std::vector<float> expected = Cpu(c);
    const std::vector<double> b = Magnitudes(c);
    const double factor = BoundFactor(c.heads, c.dim);
    int64_t bad = 0, invisible = 0;
    double worst = 0.0;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (std::isinf(expected[i])) {
        ++invisible;
        if (!(std::isinf(got[i]) && got[i] < 0)) ++bad;
        continue;
      }
      const double err = std::fabs(static_cast<double>(got[i]) - expected[i]);
      if (!(err <= factor * b[i])) {  // NaN fails
        if (bad++ < 5) {
          ADD_FAILURE() << "row " << i / c.n_keys << " key " << i % c.n_keys << ": got " << got[i]
                        << " expected " << expected[i] << " bound " << factor * b[i];
        }
      }
      if (b[i] > 0) worst = std::max(worst, err / b[i]);
    }
    EXPECT_EQ(bad, 0) << "worst err / B " << worst;
    EXPECT_TRUE(RelL2Close(got, expected, 2e-6));
    double err2 = 0.0, ref2 = 0.0;
    for (size_t i = 0; i < expected.size(); ++i) {
      if (std::isinf(expected[i])) continue;
      err2 +=
          (static_cast<double>(got[i]) - expected[i]) * (static_cast<double>(got[i]) - expected[i]);
      ref2 += static_cast<double>(expected[i]) * expected[i];
    }
    // Margins for the record (the lead reads them on the GPU machine).
    std::printf("indexer T=%lld heads=%lld dim=%lld: worst err/B %.3g (bound %.3g), rel L2 %.3g\n",
                static_cast<long long>(c.T), static_cast<long long>(c.heads),
                static_cast<long long>(c.dim), worst, factor,
                ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0);
    EXPECT_GT(invisible, 0);
    EXPECT_LT(invisible, c.T * c.n_keys);
  }

  // The real-shape cases: T = 1, 7, 32, 300 over 1..3 sequences (one empty, key counts not
  // multiples of the 64-key tile).
  static std::vector<std::vector<IdxSeq>> RealShapeSeqs() {
    return {{{1000, 1}},
            {{0, 2}, {130, 2}, {1000, 3}},
            {{1024, 20}, {77, 12}},
            {{1024, 120}, {0, 30}, {777, 150}}};
  }
};

constexpr int64_t kHeads = 64, kDim = 128;

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

// ---- Row-group kernel (prefill): bitwise equal to one-row calls. ----

// Input kinds of the grouping tests: exact-bf16 (FP4 grid) q and keys (1 term each),
// general fp32 (3 terms), and mixed (keys exact in the first 32 of each 64-key tile and
// every third q row exact, so rows of one group and one tile take different term counts).
enum class IdxInputs { kExactBf16, kFp32, kMixed };

class CudaIndexerGroupTest : public CudaIndexerTest {
 protected:
  IdxCase MakeGroupCase(const std::vector<IdxSeq>& seqs, IdxInputs kind, bool causal,
                        int64_t heads = kHeads, int64_t dim = kDim) {
    IdxCase c = MakeCase(seqs, heads, dim, kind == IdxInputs::kExactBf16);
    if (kind == IdxInputs::kMixed) {
      for (int64_t t = 0; t < c.T; t += 3) {
        cpu_.FakeQuant(c.q.data() + t * heads * dim, heads, dim, dim,
                       model::FakeQuantKind::kFp4Block32Pow2);
      }
      const int64_t total = static_cast<int64_t>(c.keys.size()) / dim;
      for (int64_t k = 0; k < total; ++k) {
        if (k % 64 < 32) {
          cpu_.FakeQuant(c.keys.data() + k * dim, 1, dim, dim,
                         model::FakeQuantKind::kFp4Block32Pow2);
        }
      }
    }
    if (causal) {  // prefill: row j of a sequence of n keys at position j * 4n / rows
      int64_t t = 0;
      for (const IdxSeq& sq : seqs) {
        for (int64_t j = 0; j < sq.rows; ++j, ++t) {
          c.q_pos[t] = static_cast<int32_t>(j * c.ratio * std::max<int64_t>(sq.keys, 1) / sq.rows);
        }
      }
    }
    return c;
  }

  // All rows at once through kernels::IndexerScoresMmaGrouped (group_rows = 0: every row
  // alone, one T = 1 call per row).
  std::vector<float> Grouped(const IdxCase& c, int64_t group_rows) {
    const float *q = ToGpu(c.q), *w = ToGpu(c.w), *keys = ToGpu(c.keys);
    const int32_t *off = ToGpu(c.offset), *len = ToGpu(c.len), *pos = ToGpu(c.q_pos);
    float* out = PoisonedFloats(c.T * c.n_keys);
    const int64_t hd = c.heads * c.dim;
    if (group_rows > 0) {
      EXPECT_EQ(
          kernels::IndexerScoresMmaGrouped(q, w, c.T, c.heads, c.dim, keys, off, len, c.n_keys, pos,
                                           c.ratio, c.scale, out, group_rows, gpu_->stream()),
          cudaSuccess);
    } else {
      for (int64_t t = 0; t < c.T; ++t) {
        EXPECT_EQ(kernels::IndexerScoresMmaGrouped(
                      q + t * hd, w + t * c.heads, 1, c.heads, c.dim, keys, off + t, len + t,
                      c.n_keys, pos + t, c.ratio, c.scale, out + t * c.n_keys, 1, gpu_->stream()),
                  cudaSuccess);
      }
    }
    return FromGpu(out, c.T * c.n_keys);
  }

  // Every group size and the backend's own choice give the one-row-per-call bits.
  void ExpectGroupingInvariant(const IdxCase& c) {
    const std::vector<float> alone = Grouped(c, 0);
    const int64_t max_rows = kernels::IndexerMmaGroupRows(c.heads, c.dim);
    for (int64_t g = 1; g <= max_rows; ++g) {
      SCOPED_TRACE(::testing::Message() << "group_rows " << g);
      EXPECT_TRUE(BitExact(Grouped(c, g), alone));
    }
    SCOPED_TRACE("backend");
    EXPECT_TRUE(BitExact(Gpu(c), alone));
  }

  // Single-sequence and varlen row sets: T = 1, 5, 64, 300 in one sequence; 2-3 sequences
  // with different key counts whose boundaries fall inside groups of 4.
  static std::vector<std::vector<IdxSeq>> GroupSeqs() {
    return {{{1000, 1}},
            {{300, 5}},
            {{1024, 64}},
            {{1024, 300}},
            {{130, 3}, {1000, 7}, {77, 5}},
            {{500, 37}, {1023, 27}},
            {{1024, 121}, {0, 30}, {777, 149}}};
  }
};

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

// Other tensor-core shapes (group sizes 2 .. 4; dims multiples of 32, as the mixed inputs
// fake-quantise 32-value blocks).
TEST_F(CudaIndexerGroupTest, OtherShapesBitwiseEqualToRowAlone) {
  for (auto [heads, dim] :
       std::vector<std::pair<int64_t, int64_t>>{{16, 32}, {48, 64}, {128, 128}, {32, 256}}) {
    const IdxCase c =
        MakeGroupCase({{200, 9}, {65, 6}}, IdxInputs::kMixed, /*causal=*/true, heads, dim);
    SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
    ExpectGroupingInvariant(c);
  }
}

// Device time per call, one-row kernel vs row groups: prefill of one sequence (T = 4096
// rows at positions 0 .. 4095, 1024 keys at ratio 4, 64 heads x 128), normal and FP4
// inputs, and decode (T = 32 rows, each its own 1024 keys, all visible).
TEST_F(CudaIndexerGroupTest, DISABLED_BenchPrefillGroups) {
  const int64_t n_keys = 1024, ratio = 4, max_rows = kernels::IndexerMmaGroupRows(kHeads, kDim);
  for (const int64_t T : {int64_t{4096}, int64_t{32}}) {
    const bool prefill = T == 4096;
    std::vector<int32_t> offset(T), len(T, static_cast<int32_t>(n_keys)), q_pos(T);
    for (int64_t t = 0; t < T; ++t) {
      offset[t] = prefill ? 0 : static_cast<int32_t>(t * n_keys);
      q_pos[t] = static_cast<int32_t>(prefill ? t : ratio * n_keys + t % ratio);
    }
    for (bool fp4 : {false, true}) {
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
                                                 gpos, ratio, 0.088f, out, g, gpu_->stream()),
                cudaSuccess);
          }
        });
        std::printf("IndexerScoresVarlen %s T=%lld keys=%lld %s group_rows=%s: %.2f us/call\n",
                    prefill ? "prefill" : "decode ", static_cast<long long>(T),
                    static_cast<long long>(n_keys), fp4 ? "fp4 " : "fp32",
                    g == 0 ? "auto" : std::to_string(g).c_str(), us);
        EXPECT_GT(us, 0.0);
      }
    }
  }
}

// ---- The pipelined one-row kernel against the session-6 kernel, and paged keys. ----

class CudaIndexerPipelineTest : public CudaIndexerGroupTest {
 protected:
  // Sets a few keys and q values to special floats (NaN with payloads, one of them exactly
  // bf16 (low 16 bits zero, which the split must still quiet), +-inf, -0, subnormals, bf16
  // subnormals), in whole 4-value groups and alone.
  void AddSpecialValues(IdxCase& c) {
    const uint32_t bits[] = {0x7FA00000u, 0xFFC00001u, 0x7F800001u, 0x7F800000u, 0xFF800000u,
                             0x80000000u, 0x00000001u, 0x00010000u, 0x807F0000u, 0x3F800001u};
    const auto put = [&](std::vector<float>& v, int64_t at, uint32_t b) {
      float x;
      std::memcpy(&x, &b, 4);
      v[at % static_cast<int64_t>(v.size())] = x;
    };
    for (int i = 0; i < 10; ++i) {
      put(c.keys, 4 * (977 * i + 5), bits[i]);          // first of a 4-value group
      put(c.keys, 4 * (613 * i + 3) + 2, bits[9 - i]);  // inside one
      put(c.q, 4 * (1601 * i + 7) + 1, bits[i]);
    }
    for (int i = 0; i < 4; ++i) put(c.keys, 4 * (311 * i + 11) + i, 0x7FA00000u);
  }

  // kernels::IndexerScoresMmaReference (the session-6 one-row kernel) on all rows.
  std::vector<float> Reference(const IdxCase& c) {
    float* out = PoisonedFloats(c.T * c.n_keys);
    EXPECT_EQ(kernels::IndexerScoresMmaReference(
                  ToGpu(c.q), ToGpu(c.w), c.T, c.heads, c.dim, ToGpu(c.keys), ToGpu(c.offset),
                  ToGpu(c.len), c.n_keys, ToGpu(c.q_pos), c.ratio, c.scale, out, gpu_->stream()),
              cudaSuccess);
    return FromGpu(out, c.T * c.n_keys);
  }

  // Row t's visible key count (the contract's min(key_len, n_keys, (q_pos + 1) / ratio)).
  static int64_t Visible(const IdxCase& c, int64_t t) {
    return std::min({static_cast<int64_t>(c.len[t]), c.n_keys,
                     (static_cast<int64_t>(c.q_pos[t]) + 1) / c.ratio});
  }

  // Every row's keys copied into blocks of rows_per_block keys, placed in a shuffled order
  // in one pool with a NaN row after each block; rows of one sequence share their blocks.
  // Table entries past the blocks of a row's visible keys hold an unmapped address (a read
  // would fault). key_len = the case's (or null).
  kernels::PagedKeys BuildPaged(const IdxCase& c, int64_t rows_per_block, bool with_key_len) {
    const int64_t dim = c.dim, slot_rows = rows_per_block + 1;
    // Blocks of each sequence (consecutive rows of equal key offset and length; an empty
    // sequence shares its offset with the next one), numbered in order of appearance.
    std::vector<int64_t> first_block(c.T);
    std::vector<bool> shares(c.T, false);  // row t uses row t - 1's blocks
    int64_t n_blocks = 0, max_blocks = 1;
    for (int64_t t = 0; t < c.T; ++t) {
      shares[t] = t > 0 && c.offset[t] == c.offset[t - 1] && c.len[t] == c.len[t - 1];
      if (shares[t]) {
        first_block[t] = first_block[t - 1];
        continue;
      }
      const int64_t blocks = (c.len[t] + rows_per_block - 1) / rows_per_block;
      first_block[t] = n_blocks;
      n_blocks += blocks;
      max_blocks = std::max(max_blocks, blocks + 1);
    }
    std::vector<int64_t> slot(n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) slot[b] = b;
    std::shuffle(slot.begin(), slot.end(), rng_);
    std::vector<float> pool(std::max<int64_t>(n_blocks, 1) * slot_rows * dim,
                            std::numeric_limits<float>::quiet_NaN());
    for (int64_t t = 0; t < c.T; ++t) {
      if (shares[t]) continue;
      for (int64_t j = 0; j < c.len[t]; ++j) {
        const int64_t b = first_block[t] + j / rows_per_block;
        std::copy_n(c.keys.begin() + (c.offset[t] + j) * dim, dim,
                    pool.begin() + (slot[b] * slot_rows + j % rows_per_block) * dim);
      }
    }
    const float* dev_pool = ToGpu(pool);
    std::vector<int64_t> table(c.T * max_blocks, int64_t{0x10});  // unmapped
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t used = (Visible(c, t) + rows_per_block - 1) / rows_per_block;
      for (int64_t i = 0; i < used; ++i) {
        table[t * max_blocks + i] =
            reinterpret_cast<int64_t>(dev_pool + slot[first_block[t] + i] * slot_rows * dim);
      }
    }
    std::vector<uint8_t> table_bytes(table.size() * sizeof(int64_t));
    std::memcpy(table_bytes.data(), table.data(), table_bytes.size());
    kernels::PagedKeys keys;
    keys.bases = reinterpret_cast<const int64_t*>(BytesToGpu(table_bytes));
    keys.max_blocks = max_blocks;
    keys.rows_per_block = rows_per_block;
    keys.key_len = with_key_len ? ToGpu(c.len) : nullptr;
    return keys;
  }

  // The scores through BuildPaged's block tables.
  std::vector<float> Paged(const IdxCase& c, int64_t rows_per_block, bool with_key_len = true) {
    const kernels::PagedKeys keys = BuildPaged(c, rows_per_block, with_key_len);
    float* out = PoisonedFloats(c.T * c.n_keys);
    EXPECT_EQ(
        kernels::IndexerScoresMmaPaged(ToGpu(c.q), ToGpu(c.w), c.T, c.heads, c.dim, keys, c.n_keys,
                                       ToGpu(c.q_pos), c.ratio, c.scale, out, gpu_->stream()),
        cudaSuccess);
    return FromGpu(out, c.T * c.n_keys);
  }

  // -inf exactly at the entries past each row's visible count, finite elsewhere (inputs
  // without special values).
  static void ExpectMasking(const IdxCase& c, const std::vector<float>& got) {
    int64_t bad = 0;
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t visible = Visible(c, t);
      for (int64_t g = 0; g < c.n_keys; ++g) {
        const float v = got[t * c.n_keys + g];
        const bool ok = g < visible ? std::isfinite(v) : (std::isinf(v) && v < 0);
        if (!ok && bad++ < 5) {
          ADD_FAILURE() << "row " << t << " key " << g << " visible " << visible << ": " << v;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
};

// The pipelined one-row kernel (register prefetch, split shortcut for exactly-bf16 values)
// gives the session-6 kernel's bits: decode and prefill-like rows, all input kinds, special
// values, every applicable head / dim family (dim 256: tiles larger than the prefetch).
TEST_F(CudaIndexerPipelineTest, OneRowKernelBitwiseEqualToSession6Kernel) {
  for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32, IdxInputs::kMixed}) {
    for (bool special : {false, true}) {
      for (const auto& seqs : GroupSeqs()) {
        IdxCase c = MakeGroupCase(seqs, kind, /*causal=*/false);
        if (special) AddSpecialValues(c);
        SCOPED_TRACE(::testing::Message() << "T " << c.T << " inputs " << static_cast<int>(kind)
                                          << " special " << special);
        const std::vector<float> ref = Reference(c);
        EXPECT_TRUE(BitExact(Grouped(c, 1), ref));
        EXPECT_TRUE(BitExact(Gpu(c), ref));
      }
    }
  }
  for (auto [heads, dim] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 16}, {48, 48}, {128, 128}, {32, 256}, {64, 256}}) {
    for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kMixed, IdxInputs::kFp32}) {
      // FP4 fake-quantisation works on 32-value blocks; dims 16 and 48 take fp32 only.
      if ((dim % 32 == 0) == (kind == IdxInputs::kFp32)) continue;
      IdxCase c = MakeGroupCase({{200, 3}, {65, 2}, {700, 1}}, kind, false, heads, dim);
      SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
      ASSERT_TRUE(kernels::IndexerMmaApplicable(ToGpu(c.q), ToGpu(c.keys), c.T, heads, dim, 4));
      EXPECT_TRUE(BitExact(Grouped(c, 1), Reference(c)));
    }
  }
}

// Long rows (8192 keys: a block walks up to ~21 tiles with the prefetch) at T = 1, 3, 40
// (each row its own keys, random positions), with and without the L2 hint.
TEST_F(CudaIndexerPipelineTest, LongRowsBitwiseEqualToSession6Kernel) {
  for (int64_t rows : {1, 3, 40}) {
    for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32}) {
      std::vector<IdxSeq> seqs;
      for (int64_t r = 0; r < rows; ++r) seqs.push_back({r % 3 == 0 ? 8192 : 8192 - 37 * r, 1});
      const IdxCase c = MakeGroupCase(seqs, kind, /*causal=*/false);
      SCOPED_TRACE(::testing::Message() << "T " << c.T << " inputs " << static_cast<int>(kind));
      const std::vector<float> ref = Reference(c);
      EXPECT_TRUE(BitExact(Gpu(c), ref));
      kernels::IndexerMmaSetL2Prefetch(false);  // a hint only: the same bits without it
      EXPECT_TRUE(BitExact(Gpu(c), ref));
      kernels::IndexerMmaSetL2Prefetch(true);
    }
  }
}

// The paged kernel's key -> block division (host arithmetic, the same expression as on the
// device): exact for block sizes 1 .. 2^31 and key indices 0 .. 2^31 - 1.
TEST(IndexerU31DividerTest, ExactQuotients) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (uint32_t d :
       {4095u, 4096u, 4097u, 65535u, 65536u, 100000u, 1u << 30, (1u << 31) - 1, 1u << 31}) {
    divisors.push_back(d);
  }
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % (1u << 31)));
  int64_t bad = 0;
  for (uint32_t d : divisors) {
    const kernels::U31Divider div = kernels::U31Divider::For(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, (1u << 31) - 1, (1u << 31) - 2};
    for (uint32_t n = 0; n < 3000; ++n) ns.push_back(n);
    for (int i = 0; i < 3000; ++i) ns.push_back(static_cast<uint32_t>(rng() % (1u << 31)));
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      if (div.Divide(n) != n / d && bad++ < 5) {
        ADD_FAILURE() << n << " / " << d << ": got " << div.Divide(n) << " expected " << n / d;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(CudaIndexerPipelineTest, PagedApplicabilityAndArguments) {
  EXPECT_TRUE(kernels::IndexerMmaPagedApplicable(1, 64, 128, 4));
  EXPECT_TRUE(kernels::IndexerMmaPagedApplicable(65535, 16, 16, 1));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(0, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(65536, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 64, 120, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 72, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 128, 256, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 64, 128, 0));
  const float* p = reinterpret_cast<const float*>(uintptr_t{256});
  const int32_t* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  float* out = reinterpret_cast<float*>(uintptr_t{256});
  kernels::PagedKeys keys;
  keys.bases = reinterpret_cast<const int64_t*>(uintptr_t{256});
  keys.max_blocks = 4;
  keys.rows_per_block = 16;
  const auto call = [&](const float* q, int64_t T, int64_t n_keys, const kernels::PagedKeys& k) {
    return kernels::IndexerScoresMmaPaged(q, p, T, 64, 128, k, n_keys, pos, 4, 1.0f, out,
                                          gpu_->stream());
  };
  EXPECT_EQ(call(p + 1, 1, 64, keys), cudaErrorInvalidValue);  // q not 16-byte aligned
  kernels::PagedKeys bad = keys;
  bad.bases = nullptr;
  EXPECT_EQ(call(p, 1, 64, bad), cudaErrorInvalidValue);
  bad = keys;
  bad.rows_per_block = 0;
  EXPECT_EQ(call(p, 1, 64, bad), cudaErrorInvalidValue);
  bad = keys;
  bad.max_blocks = 0;
  EXPECT_EQ(call(p, 1, 64, bad), cudaErrorInvalidValue);
  EXPECT_EQ(call(p, 1, 0, keys), cudaSuccess);  // empty work: nothing launched
  EXPECT_EQ(call(p, 0, 64, keys), cudaSuccess);
}

// Paged keys give the bits of the contiguous call: key counts 0, 1, 63, 64, 65, 1000, 8192
// (one sequence each, 1-2 rows with random positions), block sizes 1, 16, 64, 100, 256,
// shuffled blocks, n_keys past every row's keys and below the longest (rows cut at n_keys).
TEST_F(CudaIndexerPipelineTest, PagedBitwiseEqualToContiguous) {
  const std::vector<IdxSeq> seqs = {{0, 1},  {1, 2},    {63, 1},  {64, 2},
                                    {65, 1}, {1000, 2}, {8192, 2}};
  for (int64_t extra : {3, -5000}) {
    for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32}) {
      IdxCase c = MakeGroupCase(seqs, kind, /*causal=*/false);
      c.n_keys = 8192 + extra;
      const std::vector<float> contiguous = Grouped(c, 1);
      ExpectMasking(c, contiguous);
      for (int64_t rpb : {1, 16, 64, 100, 256}) {
        SCOPED_TRACE(::testing::Message() << "n_keys " << c.n_keys << " inputs "
                                          << static_cast<int>(kind) << " rows_per_block " << rpb);
        const std::vector<float> paged = Paged(c, rpb);
        EXPECT_TRUE(BitExact(paged, contiguous));
        ExpectMasking(c, paged);
      }
    }
  }
}

// Paged calls of many rows (the one-row kernel at every T) against the backend's contiguous
// choice (the row-group kernel from kIndexerGroupMinRows rows), causal prefill rows, mixed
// term counts and special values; and key_len null (n_keys keys for every row).
TEST_F(CudaIndexerPipelineTest, PagedManyRowsAndSpecialValues) {
  for (const auto& seqs :
       std::vector<std::vector<IdxSeq>>{{{1024, 600}}, {{1024, 121}, {0, 30}, {777, 149}}}) {
    for (int64_t rpb : {64, 100}) {
      IdxCase c = MakeGroupCase(seqs, IdxInputs::kMixed, /*causal=*/true);
      AddSpecialValues(c);
      SCOPED_TRACE(::testing::Message() << "T " << c.T << " rows_per_block " << rpb);
      EXPECT_TRUE(BitExact(Paged(c, rpb), Gpu(c)));
    }
  }
  IdxCase c = MakeGroupCase({{300, 4}}, IdxInputs::kFp32, /*causal=*/true);
  c.n_keys = 300;
  SCOPED_TRACE("key_len null");
  const std::vector<float> paged = Paged(c, 16, /*with_key_len=*/false);
  EXPECT_TRUE(BitExact(paged, Grouped(c, 1)));
  ExpectMasking(c, paged);
}

// Device time per call at decode shapes (each row its own keys, all visible; FP4 keys):
// contiguous keys, then paged keys in shuffled blocks of 64 and 256 keys (checked bitwise).
TEST_F(CudaIndexerPipelineTest, DISABLED_BenchPaged) {
  const int64_t ratio = 4;
  for (auto [T, keys_per_row] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1024}, {32, 1024}, {256, 1024}, {32, 8192}, {256, 8192}}) {
    IdxCase c = MakeCase({{keys_per_row, 1}}, kHeads, kDim, /*fp4=*/true, 0);
    c.T = T;  // every row: the first row's q, w and keys (copied T times)
    c.offset.resize(T);
    c.len.assign(T, static_cast<int32_t>(keys_per_row));
    c.q_pos.assign(T, static_cast<int32_t>(ratio * keys_per_row));
    std::vector<float> q1 = c.q, w1 = c.w, k1 = c.keys;
    c.q.clear();
    c.w.clear();
    c.keys.clear();
    for (int64_t t = 0; t < T; ++t) {
      c.offset[t] = static_cast<int32_t>(t * keys_per_row);
      c.q.insert(c.q.end(), q1.begin(), q1.end());
      c.w.insert(c.w.end(), w1.begin(), w1.end());
      c.keys.insert(c.keys.end(), k1.begin(), k1.end());
    }
    const float *q = ToGpu(c.q), *w = ToGpu(c.w), *keys = ToGpu(c.keys);
    const int32_t *off = ToGpu(c.offset), *len = ToGpu(c.len), *pos = ToGpu(c.q_pos);
    float* out = PoisonedFloats(T * keys_per_row);
    const double contiguous_us = DeviceMicrosPerCall([&] {
      kernels::IndexerScoresMma(q, w, T, kHeads, kDim, keys, off, len, c.n_keys, pos, ratio,
                                c.scale, out, gpu_->stream());
    });
    const std::vector<float> contiguous = FromGpu(out, T * keys_per_row);
    std::printf("IndexerScoresMma T=%lld keys/row=%lld fp4 contiguous: %.2f us/call (%.2f TB/s)\n",
                static_cast<long long>(T), static_cast<long long>(keys_per_row), contiguous_us,
                T * keys_per_row * kDim * 4.0 / contiguous_us * 1e-6);
    EXPECT_GT(contiguous_us, 0.0);
    for (int64_t rpb : {64, 256}) {
      const kernels::PagedKeys paged = BuildPaged(c, rpb, true);
      float* paged_out = PoisonedFloats(T * keys_per_row);
      const double us = DeviceMicrosPerCall([&] {
        kernels::IndexerScoresMmaPaged(q, w, T, kHeads, kDim, paged, c.n_keys, pos, ratio, c.scale,
                                       paged_out, gpu_->stream());
      });
      std::printf("  paged rows_per_block=%lld: %.2f us/call\n", static_cast<long long>(rpb), us);
      EXPECT_TRUE(BitExact(FromGpu(paged_out, T * keys_per_row), contiguous));
    }
  }
}

// Device time per call at decode (V4.1 shapes, each row its own sequence of 1024 or 8192
// keys, all visible), tensor cores on fp32 and FP4-fake-quantised inputs and, for
// comparison at 1024 keys, the fp32 kernel (reached by a q pointer that is not 16-byte
// aligned). TB/s: the keys' bytes per call over the time (short rows: L2-resident).
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
    // 0, 1: mma on fp32 inputs (L2 prefetch on, off); 2: the fp32 kernel (q misaligned);
    // 3, 4: mma on FP4 inputs (L2 prefetch on, off).
    for (int variant = 0; variant < 5; ++variant) {
      if (variant == 2 && keys_per_row > 1024) continue;  // the fp32 kernel: short rows only
      const float* qv = variant >= 3 ? q4 : q + (variant == 2 ? 1 : 0);
      const float* kv = variant >= 3 ? keys4 : keys;
      kernels::IndexerMmaSetL2Prefetch(variant != 1 && variant != 4);
      const double us = DeviceMicrosPerCall([&] {
        gpu_->IndexerScoresVarlen(qv, w, T, kHeads, kDim, kv, goff, glen, keys_per_row, gpos, ratio,
                                  0.088f, out);
      });
      const char* name[] = {"mma fp32 inputs      ", "mma fp32 inputs no L2",
                            "fp32 kernel          ", "mma fp4 inputs       ",
                            "mma fp4 inputs no L2 "};
      std::printf(
          "IndexerScoresVarlen %s T=%lld heads=64 dim=128 keys/row=%lld: %.2f us/call (%.2f "
          "TB/s)\n",
          name[variant], static_cast<long long>(T), static_cast<long long>(keys_per_row), us,
          T * keys_per_row * kDim * 4.0 / us * 1e-6);
      EXPECT_GT(us, 0.0);
    }
    kernels::IndexerMmaSetL2Prefetch(true);
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
