// Sparse sink attention, gated pooling, indexer scores, candidate mask and top-k against
// the CPU reference (selection results must match exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaAttentionTest = CudaVsCpuTest;

struct AttnShape {
  int64_t T, heads, d, window, n_window, n_comp, n_select;
};

TEST_F(CudaAttentionTest, SparseAttentionWindowPlusSelectedEntries) {
  std::vector<AttnShape> shapes = {{1, 1, 32, 4, 4, 0, 0},    // window only
                                   {3, 4, 64, 8, 10, 12, 5},  // odd sizes
                                   {5, 3, 96, 6, 20, 40, 33}};
  if (!SmallOnly()) shapes.push_back({2, 64, 512, 128, 128, 300, 512});  // V4.1-Flash decode
  if (!SmallOnly()) shapes.push_back({9, 64, 512, 128, 200, 100, 64});   // prefill-like
  for (const AttnShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << s.T << " heads " << s.heads << " d " << s.d
                                      << " n_window " << s.n_window << " n_select " << s.n_select);
    const int32_t p0 = 250;
    std::vector<int32_t> q_pos(s.T);
    for (int64_t t = 0; t < s.T; ++t) q_pos[t] = p0 + static_cast<int32_t>(t);
    // Window rows: positions around the queries, some stale (-1 or too old), some future.
    std::vector<int32_t> window_pos = Ints(s.n_window, p0 - 2 * s.window, p0 + s.T);
    for (int64_t i = 0; i < s.n_window; i += 7) window_pos[i] = -1;
    std::vector<int32_t> selection =
        Ints(s.T * s.n_select, -1, static_cast<int32_t>(std::max<int64_t>(s.n_comp - 1, -1)));
    for (int64_t i = 0; i < s.T * s.n_select; i += 5) selection[i] = -1;
    const std::vector<float> q = Normal(s.T * s.heads * s.d), kv = Normal(s.n_window * s.d),
                             comp = Normal(std::max<int64_t>(s.n_comp, 1) * s.d),
                             sinks = Normal(s.heads, 2.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));

    model::SparseAttentionArgs a;
    a.q = q.data(), a.q_pos = q_pos.data(), a.tokens = s.T, a.heads = s.heads;
    a.head_dim = s.d, a.window_kv = kv.data(), a.window_pos = window_pos.data();
    a.n_window = s.n_window, a.window = s.window, a.comp_kv = comp.data(), a.n_comp = s.n_comp;
    a.selection = selection.data(), a.n_select = s.n_select, a.sinks = sinks.data();
    a.scale = scale;
    std::vector<float> expected(s.T * s.heads * s.d);
    a.out = expected.data();
    cpu_.SparseAttention(a);

    model::SparseAttentionArgs g = a;
    g.q = ToGpu(q), g.q_pos = ToGpu(q_pos), g.window_kv = ToGpu(kv);
    g.window_pos = ToGpu(window_pos), g.comp_kv = ToGpu(comp);
    g.selection = s.n_select > 0 ? ToGpu(selection) : nullptr;
    g.sinks = ToGpu(sinks);
    g.out = PoisonedFloats(s.T * s.heads * s.d);
    gpu_->SparseAttention(g);
    const std::vector<float> got = FromGpu(g.out, s.T * s.heads * s.d);
    EXPECT_TRUE(AllClose(got, expected, 1e-4, 1e-5 * std::max(1.0f, MaxAbs(expected))));
    EXPECT_TRUE(RelL2Close(got, expected, 1e-5));
  }
}

TEST_F(CudaAttentionTest, GatedPool) {
  for (auto [groups, ratio, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 1, 7}, {5, 2, 64}, {3, 4, 512}, {2, 128, 160}}) {
    SCOPED_TRACE(::testing::Message() << groups << " x " << ratio << " x " << n);
    const std::vector<float> c = Normal(groups * ratio * n), z = Normal(groups * ratio * n, 3.0f);
    std::vector<float> expected(groups * n);
    cpu_.GatedPool(c.data(), z.data(), groups, ratio, n, expected.data());
    float* out = PoisonedFloats(groups * n);
    gpu_->GatedPool(ToGpu(c), ToGpu(z), groups, ratio, n, out);
    EXPECT_TRUE(AllClose(FromGpu(out, groups * n), expected, 1e-5, 1e-6));
  }
}

struct IndexerShape {
  int64_t T, heads, dim, n_keys, ratio;
  int32_t p0;
};

TEST_F(CudaAttentionTest, IndexerScoresMaskInvisibleEntries) {
  std::vector<IndexerShape> shapes = {
      {1, 2, 2, 3, 2, 3}, {3, 8, 32, 17, 2, 20}, {4, 5, 48, 70, 1, 60}};
  if (!SmallOnly()) shapes.push_back({3, 32, 128, 3000, 4, 8000});  // V4.1-Flash indexer
  for (const IndexerShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << s.T << " heads " << s.heads << " dim " << s.dim
                                      << " keys " << s.n_keys);
    const std::vector<float> q = Normal(s.T * s.heads * s.dim), w = Normal(s.T * s.heads),
                             keys = Normal(s.n_keys * s.dim);
    std::vector<int32_t> q_pos(s.T);
    for (int64_t t = 0; t < s.T; ++t) q_pos[t] = s.p0 + static_cast<int32_t>(3 * t);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
    std::vector<float> expected(s.T * s.n_keys);
    cpu_.IndexerScores(q.data(), w.data(), s.T, s.heads, s.dim, keys.data(), s.n_keys, q_pos.data(),
                       s.ratio, scale, expected.data());
    float* out = PoisonedFloats(s.T * s.n_keys);
    gpu_->IndexerScores(ToGpu(q), ToGpu(w), s.T, s.heads, s.dim, ToGpu(keys), s.n_keys,
                        ToGpu(q_pos), s.ratio, scale, out);
    EXPECT_TRUE(AllClose(FromGpu(out, s.T * s.n_keys), expected, 1e-4,
                         1e-5 * std::max(1.0f, MaxAbs(expected))));
  }
}

// Scores with many exact ties (small integers), +-0.0, -inf tails and a few +inf.
std::vector<float> TiedScores(CudaVsCpuTest* test, int64_t n, std::vector<int32_t> ints) {
  (void)test;
  std::vector<float> s(n);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t v = ints[i];
    if (v < -15) {
      s[i] = -std::numeric_limits<float>::infinity();
    } else if (v == 0) {
      s[i] = (i % 2) ? -0.0f : 0.0f;
    } else if (v > 19) {
      s[i] = std::numeric_limits<float>::infinity();
    } else {
      s[i] = static_cast<float>(v) * 0.25f;
    }
  }
  return s;
}

TEST_F(CudaAttentionTest, TopKMatchesPartialSortOrder) {
  struct Case {
    int64_t T, n, k;
  };
  std::vector<Case> cases = {{1, 6, 4}, {3, 5, 9}, {4, 100, 17}, {2, 1000, 1000}, {5, 777, 1}};
  if (!SmallOnly()) cases.push_back({3, 16384, 512});  // index_topk over a long context
  if (!SmallOnly()) cases.push_back({2, 40000, 2048});
  for (const Case& c : cases) {
    for (bool tied : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "T " << c.T << " n " << c.n << " k " << c.k
                                        << (tied ? " tied" : " distinct"));
      std::vector<float> s =
          tied ? TiedScores(this, c.T * c.n, Ints(c.T * c.n, -20, 20)) : Normal(c.T * c.n);
      std::vector<int32_t> expected(c.T * c.k);
      cpu_.TopK(s.data(), c.T, c.n, c.k, expected.data());
      int32_t* idx = PoisonedInts(c.T * c.k);
      gpu_->TopK(ToGpu(s), c.T, c.n, c.k, idx);
      EXPECT_EQ(FromGpu(idx, c.T * c.k), expected);
    }
  }
}

TEST_F(CudaAttentionTest, CandidateMaskAndApplyMask) {
  struct Case {
    int64_t T, n, ratio, block, keep;
    int32_t p0;
  };
  std::vector<Case> cases = {{3, 37, 2, 4, 3, 60}, {2, 9, 1, 4, 8, 5}, {4, 64, 2, 8, 2, 100}};
  if (!SmallOnly()) cases.push_back({2, 16384, 4, 8, 2048, 70000});  // release: keeps all
  if (!SmallOnly()) cases.push_back({3, 20000, 4, 8, 2048, 70000});  // drops blocks
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "T " << c.T << " n " << c.n << " block " << c.block << " keep " << c.keep);
    std::vector<int32_t> q_pos(c.T);
    for (int64_t t = 0; t < c.T; ++t) q_pos[t] = c.p0 + static_cast<int32_t>(5 * t);
    // Indexer-like scores: -inf beyond the visible entries, ties among the rest.
    std::vector<float> s = TiedScores(this, c.T * c.n, Ints(c.T * c.n, -15, 19));
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t visible = (q_pos[t] + 1) / c.ratio;
      for (int64_t g = visible; g < c.n; ++g) s[t * c.n + g] = model::kNegInf;
    }
    std::vector<uint8_t> expected(c.T * c.n);
    cpu_.CandidateMask(s.data(), c.T, c.n, q_pos.data(), c.ratio, c.block, c.keep, expected.data());
    uint8_t* mask = PoisonedBytes(c.T * c.n);
    float* gs = ToGpu(s);
    gpu_->CandidateMask(gs, c.T, c.n, ToGpu(q_pos), c.ratio, c.block, c.keep, mask);
    EXPECT_EQ(BytesFromGpu(mask, c.T * c.n), expected);

    cpu_.ApplyMask(s.data(), expected.data(), c.T, c.n);
    gpu_->ApplyMask(gs, mask, c.T, c.n);
    EXPECT_TRUE(BitExact(FromGpu(gs, c.T * c.n), s));
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
