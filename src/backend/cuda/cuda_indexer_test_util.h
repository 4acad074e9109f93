// Fixtures of the tensor-core indexer tests (cuda_indexer_test.cc: against the CPU and
// the row-group kernel; cuda_indexer_paged_test.cc: the pipelined one-row kernel and paged
// keys). Header-only; include from those test files.
#pragma once

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

  // IndexerSums::kTensorCore on exactly-bf16 operands: the products are exact; each of the
  // D / 16 MMAs of a dot adds 17 addends (16 products and the running sum), each of which may
  // lose up to one unit in the last place of the largest (<= 2^-23 B) when the tensor core
  // aligns and truncates them; then the head sum as in BoundFactor.
  static double TensorBoundFactor(int64_t heads, int64_t dim) {
    return static_cast<double>(dim / 16) * 17.0 * std::ldexp(1.0, -23) +
           static_cast<double>(heads + 5) * std::ldexp(1.0, -24);
  }

  // got vs the CPU reference: -inf at the same places, |err| <= factor B elsewhere (factor 0:
  // BoundFactor), relative L2 <= rel_l2; and the case has both visible and invisible entries.
  void ExpectMatchesCpu(const IdxCase& c, const std::vector<float>& got, double factor = 0.0,
                        double rel_l2 = 2e-6) {
    const std::vector<float> expected = Cpu(c);
    const std::vector<double> b = Magnitudes(c);
    if (factor == 0.0) factor = BoundFactor(c.heads, c.dim);
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
    EXPECT_TRUE(RelL2Close(got, expected, rel_l2));
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
  std::vector<float> Grouped(const IdxCase& c, int64_t group_rows,
                             kernels::IndexerSums sums = kernels::IndexerSums::kExact) {
    const float *q = ToGpu(c.q), *w = ToGpu(c.w), *keys = ToGpu(c.keys);
    const int32_t *off = ToGpu(c.offset), *len = ToGpu(c.len), *pos = ToGpu(c.q_pos);
    float* out = PoisonedFloats(c.T * c.n_keys);
    const int64_t hd = c.heads * c.dim;
    if (group_rows > 0) {
      EXPECT_EQ(
          kernels::IndexerScoresMmaGrouped(q, w, c.T, c.heads, c.dim, keys, off, len, c.n_keys, pos,
                                           c.ratio, c.scale, out, group_rows, gpu_->stream(), sums),
          cudaSuccess);
    } else {
      for (int64_t t = 0; t < c.T; ++t) {
        EXPECT_EQ(
            kernels::IndexerScoresMmaGrouped(q + t * hd, w + t * c.heads, 1, c.heads, c.dim, keys,
                                             off + t, len + t, c.n_keys, pos + t, c.ratio, c.scale,
                                             out + t * c.n_keys, 1, gpu_->stream(), sums),
            cudaSuccess);
      }
    }
    return FromGpu(out, c.T * c.n_keys);
  }

  // Channel block b (32 channels) of q and of every key times 2^(12 b): still exactly bf16 (one
  // term), but a dot's products now span ~2^72, so the tensor core's chain must round and differs
  // from the exact sums (IndexerSums::kTensorCore tests).
  static void ScaleChannelBlocks(IdxCase& c) {
    for (std::vector<float>* v : {&c.q, &c.keys}) {
      for (size_t i = 0; i < v->size(); ++i) {
        (*v)[i] *= std::ldexp(1.0f, 12 * static_cast<int>((i % c.dim) / 32));
      }
    }
  }

  // Every group size and the backend's own choice (in the mode that sums that way: FP8
  // activations for kTensorCore) give the one-row-per-call bits. Returns those bits.
  std::vector<float> ExpectGroupingInvariant(
      const IdxCase& c, kernels::IndexerSums sums = kernels::IndexerSums::kExact) {
    const std::vector<float> alone = Grouped(c, 0, sums);
    const int64_t max_rows = kernels::IndexerMmaGroupRows(c.heads, c.dim);
    for (int64_t g = 1; g <= max_rows; ++g) {
      SCOPED_TRACE(::testing::Message() << "group_rows " << g);
      EXPECT_TRUE(BitExact(Grouped(c, g, sums), alone));
    }
    SCOPED_TRACE("backend");
    const bool fp8 = gpu_->fp8_activations();
    gpu_->set_fp8_activations(sums == kernels::IndexerSums::kTensorCore);
    gpu_->set_exact_indexer_sums(false);  // whatever DEEPINFER_CUDA_EXACT_INDEXER says
    EXPECT_EQ(gpu_->indexer_sums(), sums);
    EXPECT_TRUE(BitExact(Gpu(c), alone));
    gpu_->set_fp8_activations(fp8);
    return alone;
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

}  // namespace deepinfer::backend::cuda::testing
