#include "backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "model/device_array.h"

namespace deepinfer::backend::cpu {
namespace {

using model::WeightFormat;
using model::WeightRef;

TEST(CpuBackendTest, LinearDequantisesFp8Blocks) {
  // W [2, 32] e4m3 ones (0x38) with scale 2^1 for the only block -> every weight 2.
  std::vector<uint8_t> w(64, 0x38);
  uint8_t scale = 128;
  WeightRef ref{"w", WeightFormat::kFp8Block32, 2, 32, w.data(), &scale};
  std::vector<float> x(32, 0.5f), y(2, 0.0f);
  CpuBackend b;
  b.Linear(x.data(), 1, 32, ref, 0, 2, y.data(), 2, false);
  EXPECT_FLOAT_EQ(y[0], 32.0f);
  EXPECT_FLOAT_EQ(y[1], 32.0f);
}

TEST(CpuBackendTest, MxFp4UnpacksLowNibbleFirst) {
  // Row of 32 values: byte 0 = 0x71 -> element 0 = 0.5, element 1 = 6.
  std::vector<uint8_t> w(16, 0);
  w[0] = 0x71;
  uint8_t scale = 126;  // 0.5
  WeightRef ref{"w", WeightFormat::kMxFp4, 1, 32, w.data(), &scale};
  std::vector<float> row(32);
  DequantRows(ref, 0, 1, row.data());
  EXPECT_EQ(row[0], 0.25f);
  EXPECT_EQ(row[1], 3.0f);
  EXPECT_EQ(row[2], 0.0f);
}

TEST(CpuBackendTest, SinkhornCombIsDoublyStochastic) {
  const int hc = 4, D = 8;
  std::vector<float> x(hc * D);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * i);
  std::vector<float> fn(24 * hc * D), base(24), scale = {0.5f, 0.7f, 1.3f};
  for (size_t i = 0; i < fn.size(); ++i) fn[i] = std::cos(0.3f * i);
  for (size_t i = 0; i < base.size(); ++i) base[i] = 0.1f * i;
  std::vector<float> pre(hc), post(hc), comb(hc * hc);
  CpuBackend b;
  b.HcMix(x.data(), 1, hc, D, {fn.data(), scale.data(), base.data()}, 1e-20f, 1e-6f, 20, pre.data(),
          post.data(), comb.data());
  for (int k = 0; k < hc; ++k) {
    float col = 0.0f, row = 0.0f;
    for (int j = 0; j < hc; ++j) col += comb[j * hc + k], row += comb[k * hc + j];
    EXPECT_NEAR(col, 1.0f, 1e-5f);
    EXPECT_NEAR(row, 1.0f, 1e-3f);
    EXPECT_GT(pre[k], 0.0f);
    EXPECT_LT(pre[k], 1.0f + 1e-5f);
    EXPECT_GT(post[k], 0.0f);
    EXPECT_LT(post[k], 2.0f);
  }
}

TEST(CpuBackendTest, TopKSkipsNegInfAndBreaksTiesByIndex) {
  const float inf = model::kNegInf;
  std::vector<float> s = {0.5f, inf, 2.0f, 0.5f, inf, inf};
  std::vector<int32_t> idx(4 * 1);
  CpuBackend b;
  b.TopK(s.data(), 1, 6, 4, idx.data());
  EXPECT_EQ(idx, (std::vector<int32_t>{2, 0, 3, -1}));
}

TEST(CpuBackendTest, ArgmaxRowsTakesTheFirstMaximumAndSkipsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // Rows of 5 (stride 6; the 6th value of each row is outside it and must be ignored).
  std::vector<float> x = {
      1.0f,  3.0f, 2.0f,  3.0f, -1.0f, 9.0f,   // tie of 3s: the first (1)
      nan,   5.0f, 6.0f,  7.0f, 8.0f,  9.0f,   // NaN first: 0
      1.0f,  nan,  -2.0f, nan,  0.5f,  9.0f,   // NaNs skipped: 0
      -inf,  -inf, -inf,  -inf, -inf,  9.0f,   // all -inf: 0
      -0.0f, 0.0f, -3.0f, inf,  inf,   9.0f};  // +inf twice: the first (3); -0 == 0
  std::vector<int32_t> out(5, -7);
  CpuBackend b;
  b.ArgmaxRows(x.data(), 5, 5, 6, out.data());
  EXPECT_EQ(out, (std::vector<int32_t>{1, 0, 0, 0, 3}));
}

TEST(CpuBackendTest, GatherSelectedRowsFollowsTheBlockTable) {
  // Two tokens; rows of width 2 in blocks of 3 rows; token 0 has 5 rows (blocks A, B),
  // token 1 has 2 rows (block C).
  std::vector<float> a = {0, 1, 2, 3, 4, 5}, b2 = {6, 7, 8, 9, 10, 11}, c = {20, 21, 22, 23, 0, 0};
  const int64_t bases[4] = {reinterpret_cast<int64_t>(a.data()),
                            reinterpret_cast<int64_t>(b2.data()),
                            reinterpret_cast<int64_t>(c.data()), 0};
  const int32_t count[2] = {5, 2};
  const int32_t selection[6] = {4, -1, 0, 1, 2, -1};  // k = 3; token 1's id 2 is out of range
  std::vector<float> out(12, -1.0f);
  std::vector<int32_t> remapped(6, 99);
  CpuBackend cpu;
  cpu.GatherSelectedRows(selection, 2, 3, bases, 2, count, 3, 2, out.data(), remapped.data());
  EXPECT_EQ(remapped, (std::vector<int32_t>{0, -1, 2, 0, 3, -1}));
  EXPECT_EQ(out, (std::vector<float>{8, 9, -1, -1, 0, 1, 22, 23, -1, -1, -1, -1}));
}

TEST(CpuBackendTest, IndexerScoresMaskInvisibleEntries) {
  // 1 token at position 3, ratio 2 -> entries 0, 1 visible; entry 2 not.
  std::vector<float> q = {1.0f, 2.0f, -1.0f, 1.0f};  // 2 heads x dim 2
  std::vector<float> w = {0.5f, 2.0f};
  std::vector<float> keys = {1.0f, 1.0f, 3.0f, -1.0f, 1.0f, 0.0f};
  std::vector<int32_t> pos = {3};
  std::vector<float> s(3);
  CpuBackend b;
  b.IndexerScores(q.data(), w.data(), 1, 2, 2, keys.data(), 3, pos.data(), 2, 0.5f, s.data());
  EXPECT_FLOAT_EQ(s[0], 0.5f * 3.0f * 0.5f + 2.0f * 0.0f * 0.5f);
  EXPECT_FLOAT_EQ(s[1], 0.5f * 1.0f * 0.5f + 2.0f * 0.0f * 0.5f);
  EXPECT_EQ(s[2], model::kNegInf);
}

// Two rows with their keys in scrambled blocks of 3 rows: the paged scores equal the
// varlen scores on the same keys gathered, bitwise, including the -inf past each row's
// visible count and key_len.
TEST(CpuBackendTest, IndexerScoresPagedEqualsGathered) {
  const int64_t heads = 2, dim = 4, rpb = 3, n_keys = 7;
  std::vector<float> q(2 * heads * dim), w(2 * heads);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7f * static_cast<float>(i)) - 0.2f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.5f + 0.25f * static_cast<float>(i);
  // Pool of 4 blocks; row 0 uses blocks 2, 0, 3 (7 keys), row 1 uses block 1 (2 keys).
  std::vector<float> pool(4 * rpb * dim);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = std::cos(1.3f * static_cast<float>(i));
  auto block = [&](int i) { return reinterpret_cast<int64_t>(pool.data() + i * rpb * dim); };
  const std::vector<int64_t> bases = {block(2), block(0), block(3), block(1), 0, 0};
  const std::vector<int32_t> key_len = {7, 2}, pos = {40, 5};  // ratio 2: rows see 20, 3
  std::vector<float> gathered;
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t j = 0; j < key_len[t]; ++j) {
      const float* row = reinterpret_cast<const float*>(bases[t * 3 + j / rpb]) + (j % rpb) * dim;
      gathered.insert(gathered.end(), row, row + dim);
    }
  }
  const std::vector<int32_t> offset = {0, 7};
  CpuBackend b;
  ASSERT_TRUE(b.IndexerPagedApplicable(2, heads, dim, 2));
  std::vector<float> paged(2 * n_keys), varlen(2 * n_keys);
  b.IndexerScoresPaged(q.data(), w.data(), 2, heads, dim, bases.data(), 3, rpb, key_len.data(),
                       n_keys, pos.data(), 2, 0.5f, paged.data());
  b.IndexerScoresVarlen(q.data(), w.data(), 2, heads, dim, gathered.data(), offset.data(),
                        key_len.data(), n_keys, pos.data(), 2, 0.5f, varlen.data());
  for (int64_t i = 0; i < 2 * n_keys; ++i) {
    EXPECT_EQ(std::memcmp(&paged[i], &varlen[i], sizeof(float)), 0) << i;
  }
  EXPECT_NE(paged[0], model::kNegInf);
  EXPECT_NE(paged[n_keys + 1], model::kNegInf);
  EXPECT_EQ(paged[n_keys + 2], model::kNegInf);  // past row 1's key_len
}

TEST(CpuBackendTest, CandidateMaskForcesNewestBlock) {
  // 8 entries, blocks of 2, keep 2; newest visible entry = (5+1)/1-1 = 5 (block 2).
  const float inf = model::kNegInf;
  std::vector<float> s = {9.0f, 1.0f, 0.0f, 8.0f, 0.1f, 0.2f, inf, inf};
  std::vector<int32_t> pos = {5};
  std::vector<uint8_t> mask(8);
  CpuBackend b;
  b.CandidateMask(s.data(), 1, 8, pos.data(), 1, 2, 2, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 1, 0, 0, 1, 1, 0, 0}));
}

TEST(CpuBackendTest, RouterRenormalisesUnbiasedScores) {
  std::vector<float> logits = {0.0f, 1.0f, -1.0f};
  std::vector<float> bias = {1.0f, 0.0f, 0.0f};
  std::vector<int32_t> e(2);
  std::vector<float> w(2);
  CpuBackend b;
  b.RouteSqrtSoftplus(logits.data(), bias.data(), 1, 3, 2, true, 1.5f, e.data(), w.data());
  const float s0 = std::sqrt(std::log1p(1.0f)), s1 = std::sqrt(std::log1p(std::exp(1.0f)));
  EXPECT_EQ(e[0], 0);  // biased score s0 + 1 beats s1
  EXPECT_EQ(e[1], 1);
  EXPECT_FLOAT_EQ(w[0], s0 / (s0 + s1) * 1.5f);
  EXPECT_FLOAT_EQ(w[1], s1 / (s0 + s1) * 1.5f);
}

TEST(CpuBackendTest, AttentionWithSinkOnly) {
  // One key equal to q; sink adds exp(sink) to the denominator.
  std::vector<float> q = {1.0f, 0.0f}, kv = {1.0f, 0.0f}, sinks = {0.0f}, out(2);
  std::vector<int32_t> qpos = {0}, kpos = {0};
  model::SparseAttentionArgs a;
  a.q = q.data();
  a.q_pos = qpos.data();
  a.tokens = 1;
  a.heads = 1;
  a.head_dim = 2;
  a.window_kv = kv.data();
  a.window_pos = kpos.data();
  a.n_window = 1;
  a.window = 4;
  a.sinks = sinks.data();
  a.scale = 1.0f;
  a.out = out.data();
  CpuBackend b;
  b.SparseAttention(a);
  const float e = std::exp(1.0f);
  EXPECT_FLOAT_EQ(out[0], e / (e + 1.0f));
  EXPECT_FLOAT_EQ(out[1], 0.0f);
}

TEST(CpuBackendTest, RopeInverseUndoesRotation) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f}, inv = {1.0f, 0.1f};
  std::vector<int32_t> pos = {7};
  CpuBackend b;
  b.Rope(x.data(), 1, 4, 1, 4, 0, 2, pos.data(), inv.data(), false);
  EXPECT_NEAR(x[0], std::cos(7.0f) - 2.0f * std::sin(7.0f), 1e-6f);
  b.Rope(x.data(), 1, 4, 1, 4, 0, 2, pos.data(), inv.data(), true);
  EXPECT_NEAR(x[0], 1.0f, 1e-5f);
  EXPECT_NEAR(x[3], 4.0f, 1e-5f);
}

TEST(CpuBackendTest, ExpandSumsCombOverFirstIndex) {
  // hc = 2, D = 1: x = (1, 10), y = 3, post = (1, 2), comb = [[a00, a01], [a10, a11]].
  std::vector<float> x = {1.0f, 10.0f}, y = {3.0f}, post = {1.0f, 2.0f};
  std::vector<float> comb = {0.5f, 0.25f, 0.125f, 2.0f};
  CpuBackend b;
  b.HcExpand(y.data(), post.data(), comb.data(), 1, 2, 1, x.data());
  EXPECT_EQ(x[0], 3.0f + 0.5f * 1.0f + 0.125f * 10.0f);
  EXPECT_EQ(x[1], 6.0f + 0.25f * 1.0f + 2.0f * 10.0f);
  std::vector<float> pre = {0.5f, 2.0f}, out(1);
  b.HcCollapse(x.data(), pre.data(), 1, 2, 1, out.data());
  EXPECT_EQ(out[0], 0.5f * x[0] + 2.0f * x[1]);
}

TEST(CpuBackendTest, GatedPoolSoftmaxesPerChannel) {
  // One group of ratio 2, two channels: equal gates average, a dominant gate selects.
  std::vector<float> c = {1.0f, 4.0f, 3.0f, 8.0f}, z = {0.0f, 100.0f, 0.0f, 0.0f}, out(2);
  CpuBackend b;
  b.GatedPool(c.data(), z.data(), 1, 2, 2, out.data());
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 4.0f);
}

TEST(CpuBackendTest, SwiGluClampsGateAboveAndUpBothWays) {
  std::vector<float> gate = {20.0f, -1.0f}, up = {-30.0f, 2.0f}, scale = {0.5f}, h(2);
  CpuBackend b;
  b.SwiGlu(gate.data(), up.data(), 1, 2, 10.0f, scale.data(), h.data());
  const float silu10 = 10.0f / (1.0f + std::exp(-10.0f));
  const float silu_m1 = -1.0f / (1.0f + std::exp(1.0f));
  EXPECT_FLOAT_EQ(h[0], silu10 * -10.0f * 0.5f);
  EXPECT_FLOAT_EQ(h[1], silu_m1 * 2.0f * 0.5f);
}

TEST(CpuBackendTest, EngramGateOfZeroDotIsSigmoidOfSqrtFloor) {
  // x orthogonal to key -> dot 0 -> gate = sigmoid(+sqrt(1e-6)) (copysign of +0).
  const int hc = 1, D = 2;
  std::vector<float> x = {1.0f, 0.0f}, key = {0.0f, 1.0f}, value = {1.0f, -1.0f};
  std::vector<float> qw = {1.0f, 1.0f}, kw = {1.0f, 1.0f};
  CpuBackend b;
  b.EngramGate(x.data(), key.data(), value.data(), qw.data(), kw.data(), 1, hc, D, 1e-20f);
  const float g = 1.0f / (1.0f + std::exp(-1e-3f));
  EXPECT_FLOAT_EQ(x[0], 1.0f + g);
  EXPECT_FLOAT_EQ(x[1], -g);
}

TEST(CpuBackendTest, LinearRowRangeAndAccumulate) {
  // BF16 W [3, 2] = [[1, 2], [3, 4], [5, 6]]; rows 1..2 only, accumulated onto y.
  std::vector<uint16_t> w = {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0};
  WeightRef ref{"w", WeightFormat::kBF16, 3, 2, w.data(), nullptr};
  std::vector<float> x = {1.0f, 1.0f}, y = {100.0f, 200.0f};
  CpuBackend b;
  b.Linear(x.data(), 1, 2, ref, 1, 2, y.data(), 2, true);
  EXPECT_EQ(y[0], 107.0f);
  EXPECT_EQ(y[1], 211.0f);
}

// Three sequences packed into shared window / compressed buffers (the varlen layout).
struct VarlenAttentionCase {
  static constexpr int64_t kHeads = 3, kDim = 8, kWindow = 4, kSelect = 5;
  std::vector<int64_t> seq_tokens = {1, 4, 2};
  std::vector<int64_t> seq_window_rows = {5, 9, 3};
  std::vector<int64_t> seq_comp_rows = {7, 0, 12};        // sequence 1: no compressed entries yet
  std::vector<int64_t> tok_begin, win_begin, comp_begin;  // per sequence, + total at the end
  std::vector<float> q, window_kv, comp_kv, sinks;
  std::vector<int32_t> q_pos, window_pos, selection;
  std::vector<int32_t> window_start, window_len, comp_offset, comp_len;  // per token

  VarlenAttentionCase() {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize(n);
      for (float& x : v) x = normal(rng);
    };
    auto prefix = [](const std::vector<int64_t>& n) {
      std::vector<int64_t> b = {0};
      for (int64_t x : n) b.push_back(b.back() + x);
      return b;
    };
    tok_begin = prefix(seq_tokens), win_begin = prefix(seq_window_rows);
    comp_begin = prefix(seq_comp_rows);
    const int64_t T = tok_begin.back();
    fill(q, T * kHeads * kDim), fill(window_kv, win_begin.back() * kDim);
    fill(comp_kv, comp_begin.back() * kDim), fill(sinks, kHeads);
    for (size_t s = 0; s < seq_tokens.size(); ++s) {
      // Every sequence uses the same positions, so rows of another sequence would pass the
      // window test: only the per-token ranges keep them apart.
      for (int64_t i = 0; i < seq_window_rows[s]; ++i) {
        window_pos.push_back(static_cast<int32_t>(20 - seq_window_rows[s] + 1 + i));
      }
      for (int64_t t = 0; t < seq_tokens[s]; ++t) {
        q_pos.push_back(static_cast<int32_t>(20 - seq_tokens[s] + 1 + t));
        window_start.push_back(static_cast<int32_t>(win_begin[s]));
        window_len.push_back(static_cast<int32_t>(seq_window_rows[s]));
        comp_offset.push_back(static_cast<int32_t>(comp_begin[s]));
        comp_len.push_back(static_cast<int32_t>(seq_comp_rows[s]));
        for (int64_t k = 0; k < kSelect; ++k) {
          const int64_t id = (3 * t + 5 * k + static_cast<int64_t>(s)) % (seq_comp_rows[s] + 2);
          selection.push_back(id < seq_comp_rows[s] ? static_cast<int32_t>(id) : -1);
        }
      }
    }
  }

  int64_t tokens() const { return tok_begin.back(); }

  // The varlen call over every sequence.
  model::SparseAttentionArgs Varlen(float* out) const {
    model::SparseAttentionArgs a = Sequence(0, out);
    a.q = q.data(), a.q_pos = q_pos.data(), a.tokens = tokens();
    a.window_kv = window_kv.data(), a.window_pos = window_pos.data();
    a.n_window = win_begin.back(), a.comp_kv = comp_kv.data(), a.n_comp = comp_begin.back();
    a.selection = selection.data();
    a.window_start = window_start.data(), a.window_len = window_len.data();
    a.comp_offset = comp_offset.data(), a.comp_len = comp_len.data();
    return a;
  }

  // The single-sequence call of sequence s (out = that sequence's rows).
  model::SparseAttentionArgs Sequence(size_t s, float* out) const {
    model::SparseAttentionArgs a;
    const int64_t t0 = tok_begin[s];
    a.q = q.data() + t0 * kHeads * kDim, a.q_pos = q_pos.data() + t0;
    a.tokens = seq_tokens[s], a.heads = kHeads, a.head_dim = kDim;
    a.window_kv = window_kv.data() + win_begin[s] * kDim;
    a.window_pos = window_pos.data() + win_begin[s];
    a.n_window = seq_window_rows[s], a.window = kWindow;
    a.comp_kv = comp_kv.data() + comp_begin[s] * kDim, a.n_comp = seq_comp_rows[s];
    a.selection = selection.data() + t0 * kSelect, a.n_select = kSelect;
    a.sinks = sinks.data(), a.scale = 0.35f, a.out = out;
    return a;
  }
};

TEST(CpuBackendTest, VarlenAttentionEqualsSeparateCallsBitwise) {
  const VarlenAttentionCase c;
  const int64_t row = VarlenAttentionCase::kHeads * VarlenAttentionCase::kDim;
  std::vector<float> varlen(c.tokens() * row, std::nanf("")), single(varlen.size(), 1e30f);
  CpuBackend b;
  b.SparseAttention(c.Varlen(varlen.data()));
  for (size_t s = 0; s < c.seq_tokens.size(); ++s) {
    b.SparseAttention(c.Sequence(s, single.data() + c.tok_begin[s] * row));
  }
  ASSERT_EQ(std::memcmp(varlen.data(), single.data(), varlen.size() * sizeof(float)), 0);
  // The case is not degenerate: sequence 1 (only the sink and window rows) differs from
  // sequence 0 and 2 with their compressed entries, and every output is finite.
  for (float v : varlen) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(varlen[0], varlen[c.tok_begin[1] * row]);
  // Ignoring the ranges (every token sees every window row) changes the result.
  model::SparseAttentionArgs unranged = c.Varlen(single.data());
  unranged.window_start = nullptr, unranged.window_len = nullptr;
  b.SparseAttention(unranged);
  EXPECT_NE(std::memcmp(varlen.data(), single.data(), varlen.size() * sizeof(float)), 0);
}

// An id >= comp_len[t] is out of range even when row comp_offset[t] + id exists: the same
// CHECK failure as an id >= n_comp in a single-sequence call.
TEST(CpuBackendDeathTest, VarlenAttentionIdBeyondCompLenIsOutOfRange) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  VarlenAttentionCase c;
  std::vector<float> out(c.tokens() * VarlenAttentionCase::kHeads * VarlenAttentionCase::kDim);
  CpuBackend b;
  b.SparseAttention(c.Varlen(out.data()));  // in range: no failure
  ASSERT_EQ(c.selection[2], 1);
  c.selection[2] = 7;  // token 0 (sequence 0): comp_len 7, n_comp 19
  EXPECT_DEATH(b.SparseAttention(c.Sequence(0, out.data())), "selected compressed entry 7 of 7");
  EXPECT_DEATH(b.SparseAttention(c.Varlen(out.data())), "selected compressed entry 7 of 7");
}

}  // namespace
}  // namespace deepinfer::backend::cpu

namespace deepinfer::backend::cpu {
namespace {

// Uninitialized allocations are poisoned (so that the model's tests catch a read before a
// write) and zeroed ones are zero.
TEST(CpuBackendAllocTest, UninitializedIsPoisonedZeroedIsZero) {
  CpuBackend backend;
  float* u = backend.AllocUninitialized(1000);
  float* z = backend.AllocFloats(1000);
  for (int i = 0; i < 1000; ++i) {
    uint32_t bits;
    std::memcpy(&bits, u + i, sizeof(bits));
    ASSERT_EQ(bits, CpuBackend::kUninitializedPattern) << i;
    ASSERT_TRUE(std::isnan(u[i]));
    ASSERT_EQ(z[i], 0.0f);
  }
  backend.Free(u);
  backend.Free(z);
  model::DeviceFloats d(&backend, 5);
  EXPECT_TRUE(std::isnan(d.data()[4]));
  EXPECT_EQ(model::DeviceInts::Zeros(&backend, 3).data()[2], 0);
}

}  // namespace
}  // namespace deepinfer::backend::cpu
