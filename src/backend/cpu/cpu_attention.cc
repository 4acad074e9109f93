// CpuBackend: sparse sink attention, compressor pooling, lightning indexer and top-k.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "base/check.h"
#include "base/thread_pool.h"

namespace deepinfer::backend::cpu {
namespace {

// Reductions accumulate in double (see Linear in cpu_backend.cc for why).
double Dot(const float* a, const float* b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
  return acc;
}

// Entry g of token t in paged args (SparseAttentionArgs::comp_bases).
const float* PagedEntry(const model::SparseAttentionArgs& a, int64_t t, int64_t g) {
  const int64_t block = g / a.comp_rows_per_block;
  CHECK_LT(block, a.comp_max_blocks) << "selected compressed entry " << g << " past the table";
  const auto* base = reinterpret_cast<const float*>(a.comp_bases[t * a.comp_max_blocks + block]);
  return base + (g % a.comp_rows_per_block) * a.head_dim;
}

}  // namespace

// Varlen (several sequences in one call): token t sees window rows
// [window_start[t], window_start[t] + window_len[t]) and comp rows comp_offset[t] + id for
// ids < comp_len[t]. A null pointer keeps the single-sequence meaning: start / offset 0,
// length = the rest of the buffer (n_window - start, n_comp - offset).
void CpuBackend::SparseAttention(const model::SparseAttentionArgs& a) {
  const int64_t d = a.head_dim;
  base::ThreadPool::Default().ParallelFor(a.tokens, 1, [&](int64_t t0, int64_t t1) {
    std::vector<const float*> keys;
    std::vector<double> scores, acc(d);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = a.q_pos[t];
      const int64_t w0 = a.window_start ? a.window_start[t] : 0;
      const int64_t w_len = a.window_len ? a.window_len[t] : a.n_window - w0;
      CHECK(w0 >= 0 && w_len >= 0 && w0 + w_len <= a.n_window)
          << "token " << t << " window rows [" << w0 << ", " << w0 + w_len << ") of " << a.n_window;
      const bool paged = a.comp_bases != nullptr;
      const int64_t c0 = !paged && a.comp_offset ? a.comp_offset[t] : 0;
      const int64_t c_len = a.comp_len ? a.comp_len[t] : a.n_comp - c0;
      CHECK(paged ? a.comp_len != nullptr && c_len >= 0
                  : c0 >= 0 && c_len >= 0 && c0 + c_len <= a.n_comp)
          << "token " << t << " compressed rows [" << c0 << ", " << c0 + c_len << ") of "
          << a.n_comp;
      keys.clear();
      for (int64_t i = w0; i < w0 + w_len; ++i) {
        if (a.window_pos[i] <= p && a.window_pos[i] > p - a.window) {
          keys.push_back(a.window_kv + i * d);
        }
      }
      for (int64_t s = 0; s < a.n_select; ++s) {
        const int32_t g = a.selection[t * a.n_select + s];
        if (g < 0) continue;
        CHECK(g < c_len) << "selected compressed entry " << g << " of " << c_len;
        keys.push_back(paged ? PagedEntry(a, t, g) : a.comp_kv + (c0 + g) * d);
      }
      scores.resize(keys.size());
      for (int64_t h = 0; h < a.heads; ++h) {
        const float* q = a.q + (t * a.heads + h) * d;
        float* o = a.out + (t * a.heads + h) * d;
        const double sink = a.sinks[h];
        double mx = sink;
        for (size_t j = 0; j < keys.size(); ++j) {
          scores[j] = Dot(q, keys[j], d) * a.scale;
          mx = std::max(mx, scores[j]);
        }
        double denom = std::exp(sink - mx);
        for (size_t j = 0; j < keys.size(); ++j) denom += (scores[j] = std::exp(scores[j] - mx));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (size_t j = 0; j < keys.size(); ++j) {
          const double wj = scores[j] / denom;
          for (int64_t i = 0; i < d; ++i) acc[i] += wj * keys[j][i];
        }
        for (int64_t i = 0; i < d; ++i) o[i] = static_cast<float>(acc[i]);
      }
    }
  });
}

void CpuBackend::GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio, int64_t n,
                           float* out) {
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t ch = 0; ch < n; ++ch) {
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < ratio; ++i) mx = std::max<double>(mx, z[(g * ratio + i) * n + ch]);
      double sum = 0.0;
      for (int64_t i = 0; i < ratio; ++i) sum += std::exp(z[(g * ratio + i) * n + ch] - mx);
      double acc = 0.0;
      for (int64_t i = 0; i < ratio; ++i) {
        const double wgt = std::exp(z[(g * ratio + i) * n + ch] - mx) / sum;
        acc += wgt * c[(g * ratio + i) * n + ch];
      }
      out[g * n + ch] = static_cast<float>(acc);
    }
  }
}

void CpuBackend::IndexerScores(const float* q, const float* w, int64_t T, int64_t heads,
                               int64_t dim, const float* keys, int64_t n_keys, const int32_t* q_pos,
                               int64_t ratio, float scale, float* scores) {
  IndexerScoresVarlen(q, w, T, heads, dim, keys, nullptr, nullptr, n_keys, q_pos, ratio, scale,
                      scores);
}

namespace {

// s[t, g] of the indexer contract for rows [0, T): `len(t)` is row t's key count (already
// clipped to n_keys), `key(t, g)` the address of its key g (g < that count).
template <typename Len, typename Key>
void IndexerScoreRows(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                      int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                      float* scores, Len len, Key key) {
  base::ThreadPool::Default().ParallelFor(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t visible =
          std::min<int64_t>((static_cast<int64_t>(q_pos[t]) + 1) / ratio, len(t));
      for (int64_t g = 0; g < n_keys; ++g) {
        float* s = scores + t * n_keys + g;
        if (g >= visible) {
          *s = model::kNegInf;
          continue;
        }
        const float* k = key(t, g);
        double acc = 0.0;
        for (int64_t h = 0; h < heads; ++h) {
          const double dot = Dot(q + (t * heads + h) * dim, k, dim);
          acc += std::max(dot, 0.0) * scale * w[t * heads + h];
        }
        *s = static_cast<float>(acc);
      }
    }
  });
}

}  // namespace

void CpuBackend::IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads,
                                     int64_t dim, const float* keys, const int32_t* key_offset,
                                     const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                     int64_t ratio, float scale, float* scores) {
  IndexerScoreRows(
      q, w, T, heads, dim, n_keys, q_pos, ratio, scale, scores,
      [&](int64_t t) { return key_len ? std::min<int64_t>(key_len[t], n_keys) : n_keys; },
      [&](int64_t t, int64_t g) {
        return keys + ((key_offset ? static_cast<int64_t>(key_offset[t]) : 0) + g) * dim;
      });
}

void CpuBackend::IndexerScoresPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                    int64_t dim, const int64_t* key_bases, int64_t max_blocks,
                                    int64_t rows_per_block, const int32_t* key_len, int64_t n_keys,
                                    const int32_t* q_pos, int64_t ratio, float scale,
                                    float* scores) {
  IndexerScoreRows(
      q, w, T, heads, dim, n_keys, q_pos, ratio, scale, scores,
      [&](int64_t t) { return std::min<int64_t>(key_len[t], n_keys); },
      [&](int64_t t, int64_t g) {
        const int64_t base = key_bases[t * max_blocks + g / rows_per_block];
        return reinterpret_cast<const float*>(base) + (g % rows_per_block) * dim;
      });
}

void CpuBackend::CandidateMask(const float* scores, int64_t T, int64_t n, const int32_t* q_pos,
                               int64_t ratio, int64_t block, int64_t keep_blocks, uint8_t* mask) {
  const int64_t n_blocks = (n + block - 1) / block;
  std::vector<float> block_score(n_blocks);
  std::vector<int32_t> order(n_blocks);
  for (int64_t t = 0; t < T; ++t) {
    const float* s = scores + t * n;
    for (int64_t b = 0; b < n_blocks; ++b) {
      float mx = model::kNegInf;
      for (int64_t g = b * block; g < std::min(n, (b + 1) * block); ++g) mx = std::max(mx, s[g]);
      block_score[b] = mx;
    }
    const int64_t newest = (static_cast<int64_t>(q_pos[t]) + 1) / ratio - 1;
    if (newest >= 0 && newest < n) {
      block_score[newest / block] = std::numeric_limits<float>::infinity();
    }
    std::iota(order.begin(), order.end(), 0);
    const int64_t keep = std::min(keep_blocks, n_blocks);
    std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int32_t a, int32_t b) {
      return block_score[a] > block_score[b] || (block_score[a] == block_score[b] && a < b);
    });
    std::fill(mask + t * n, mask + (t + 1) * n, 0);
    for (int64_t i = 0; i < keep; ++i) {
      const int64_t b = order[i];
      if (block_score[b] == model::kNegInf) continue;
      for (int64_t g = b * block; g < std::min(n, (b + 1) * block); ++g) mask[t * n + g] = 1;
    }
  }
}

void CpuBackend::ApplyMask(float* scores, const uint8_t* mask, int64_t T, int64_t n) {
  for (int64_t i = 0; i < T * n; ++i) {
    if (!mask[i]) scores[i] = model::kNegInf;
  }
}

void CpuBackend::TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx) {
  std::vector<int32_t> order(n);
  for (int64_t t = 0; t < T; ++t) {
    const float* s = scores + t * n;
    std::iota(order.begin(), order.end(), 0);
    const int64_t m = std::min(k, n);
    std::partial_sort(order.begin(), order.begin() + m, order.end(),
                      [&](int32_t a, int32_t b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    for (int64_t i = 0; i < k; ++i) {
      idx[t * k + i] = (i < m && s[order[i]] != model::kNegInf) ? order[i] : -1;
    }
  }
}

void CpuBackend::ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* v = x + r * ld;
    int64_t best = 0;
    for (int64_t t = 1; t < n; ++t) {
      if (v[t] > v[best]) best = t;
    }
    out[r] = static_cast<int32_t>(best);
  }
}

void CpuBackend::GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k,
                                    const int64_t* bases, int64_t max_blocks, const int32_t* count,
                                    int64_t rows_per_block, int64_t d, float* out,
                                    int32_t* remapped) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t s = 0; s < k; ++s) {
      const int32_t id = selection[t * k + s];
      if (id < 0 || id >= count[t]) {
        remapped[t * k + s] = id < 0 ? -1 : static_cast<int32_t>(k);
        continue;
      }
      const int64_t block = id / rows_per_block;
      CHECK_LT(block, max_blocks) << "entry " << id << " of token " << t << " unpaged";
      const auto* src =
          reinterpret_cast<const float*>(bases[t * max_blocks + block]) + (id % rows_per_block) * d;
      std::copy(src, src + d, out + (t * k + s) * d);
      remapped[t * k + s] = static_cast<int32_t>(s);
    }
  }
}

}  // namespace deepinfer::backend::cpu
