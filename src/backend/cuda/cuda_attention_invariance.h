// Batch- and chunk-invariance (bitwise) of the CUDA sparse-attention kernels: a token's
// output must be identical, bit for bit, whether it is computed alone (tokens = 1), in a
// batch of other tokens, or repeated inside a larger call. Shared by cuda_attention_test.cc
// (kernels::SparseAttention) and cuda_attention_mma_test.cc (kernels::SparseAttentionMma).
//
// A case is a pool of distinct tokens, each with its own window rows (varied lengths, some
// stale) and compressed rows (varied counts, some slots empty) in shared buffers (varlen),
// or, with varlen off, one shared sequence seen by tokens at different positions. Every
// token runs alone first; then batches of 2, 6, 12, 24 tokens (consecutive tokens, covering
// the pool), the whole pool, and 64 and 300 entries that repeat tokens in a shuffled order.
// "Padded" calls (every token alone, the batches of 24 and the 300 entries) give each token
// what a prefill chunk or a wider batch adds around its rows in the engine: window ranges
// widened by rows older than the window and future rows (varlen), and n_select widened by
// -1 slots; the output must not change by a bit.
// On an H200 (132 SMs) these batch sizes put both kernels on 8, 4, 2 and 1 blocks per
// (token, head group). The whole-pool call is also checked against the CPU reference
// (max |gpu - cpu| <= a max |cpu|, relative L2 <= a, a = InvarianceCase::accuracy: 1e-5 for
// the exact kernels).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {

struct InvarianceCase {
  std::string name;
  int64_t heads = 16, d = 64, window = 16, n_select = 8;
  int64_t pool = 37;               // distinct tokens
  int64_t max_comp_rows = 100;     // per token (varlen) or in all (varlen off)
  int64_t shared_window_rows = 0;  // varlen off: rows of the one window buffer
  bool varlen = true;
  // The whole-pool call against the CPU reference: max |gpu - cpu| <= accuracy * max |cpu|
  // and relative L2 <= accuracy (1e-5: exact kernels; looser for bf16-rounded q and P).
  double accuracy = 1e-5;
  bool bf16_rows = false;  // fake-quantise the rows (exact bf16, as the tensor-core kernel needs)
};

// Launches one kernel on device args (error word: device int) on `stream`.
using AttentionLaunch =
    std::function<cudaError_t(const model::SparseAttentionArgs&, int*, cudaStream_t)>;

class SparseAttentionInvarianceTest : public CudaVsCpuTest {
 protected:
  // The pool's host data; entries of a call are gathered from it.
  struct Pool {
    InvarianceCase c;
    std::vector<float> q, window_kv, comp_kv, sinks;  // q: [pool, heads, d]
    std::vector<int32_t> q_pos, window_pos, selection;
    std::vector<int32_t> window_start, window_len, comp_offset, comp_len;
    std::vector<int32_t> padded_start, padded_len;  // varlen: the widened window ranges
    int64_t n_window = 0, n_comp = 0;
    float scale = 1.0f;
    // Device copies of the shared buffers.
    const float *window_kv_dev = nullptr, *comp_kv_dev = nullptr, *sinks_dev = nullptr;
    const int32_t* window_pos_dev = nullptr;
  };

  Pool MakePool(const InvarianceCase& c) {
    Pool p;
    p.c = c;
    const int64_t T = c.pool;
    for (int64_t t = 0; t < T; ++t) p.q_pos.push_back(static_cast<int32_t>(1000 + 13 * t));
    if (c.varlen) {
      for (int64_t t = 0; t < T; ++t) {
        // Window lengths 0 .. window (+ some longer than the window: the oldest rows are
        // then outside it), compressed counts 0 .. max_comp_rows.
        const int64_t win = (t * 37) % (c.window + c.window / 4 + 1);
        const int64_t comp = t % 9 == 4 ? 0 : (t * 997 + 11) % (c.max_comp_rows + 1);
        // Rows around the token's own: `pre` older than its window, `post` in its future.
        const int64_t pre = t % 3 == 0 ? 0 : 1 + t % 5, post = t % 4 == 1 ? 0 : 1 + t % 7;
        const int32_t p_t = p.q_pos[t], w = static_cast<int32_t>(c.window);
        p.padded_start.push_back(static_cast<int32_t>(p.n_window));
        p.padded_len.push_back(static_cast<int32_t>(pre + win + post));
        p.window_start.push_back(static_cast<int32_t>(p.n_window + pre));
        p.window_len.push_back(static_cast<int32_t>(win));
        p.comp_offset.push_back(static_cast<int32_t>(p.n_comp));
        p.comp_len.push_back(static_cast<int32_t>(comp));
        for (int64_t r = 0; r < pre; ++r) p.window_pos.push_back(p_t - w - static_cast<int32_t>(r));
        for (int64_t r = 0; r < win; ++r) {
          const bool stale = r % 7 == 3;
          p.window_pos.push_back(stale ? -1 : p_t - static_cast<int32_t>(win - 1 - r));
        }
        for (int64_t r = 0; r < post; ++r)
          p.window_pos.push_back(p_t + 1 + static_cast<int32_t>(r));
        AppendSelection(p, comp);
        p.n_window += pre + win + post, p.n_comp += comp;
      }
    } else {
      // One sequence: rows at positions ending at the last token's; each token sees the
      // rows in (p - window, p].
      p.n_window = c.shared_window_rows, p.n_comp = c.max_comp_rows;
      for (int64_t r = 0; r < p.n_window; ++r) {
        p.window_pos.push_back(
            r % 11 == 5 ? -1 : p.q_pos[T - 1] - static_cast<int32_t>(p.n_window - 1 - r));
      }
      for (int64_t t = 0; t < T; ++t) AppendSelection(p, p.n_comp);
    }
    p.q = Normal(T * c.heads * c.d);
    p.window_kv = Normal(std::max<int64_t>(p.n_window, 1) * c.d);
    p.comp_kv = Normal(std::max<int64_t>(p.n_comp, 1) * c.d);
    if (c.bf16_rows && p.n_window > 0) {
      cpu_.FakeQuant(p.window_kv.data(), p.n_window, c.d, c.d,
                     model::FakeQuantKind::kFp8Block32Pow2);
    }
    if (c.bf16_rows && p.n_comp > 0) {
      cpu_.FakeQuant(p.comp_kv.data(), p.n_comp, c.d, c.d, model::FakeQuantKind::kFp4Block16E4m3);
    }
    p.sinks = Normal(c.heads, 2.0f);
    p.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    p.window_kv_dev = ToGpu(p.window_kv), p.comp_kv_dev = ToGpu(p.comp_kv);
    p.sinks_dev = ToGpu(p.sinks);
    p.window_pos_dev = p.window_pos.empty() ? nullptr : ToGpu(p.window_pos);
    return p;
  }

  // Selection slots of one token: ids in [-1, comp), every 5th slot empty.
  void AppendSelection(Pool& p, int64_t comp) {
    std::vector<int32_t> ids = comp > 0 ? Ints(p.c.n_select, -1, static_cast<int32_t>(comp - 1))
                                        : std::vector<int32_t>(p.c.n_select, -1);
    for (int64_t k = 2; k < p.c.n_select; k += 5) ids[k] = -1;
    p.selection.insert(p.selection.end(), ids.begin(), ids.end());
  }

  // The per-token arrays of a call over pool tokens `entries`, gathered from the pool;
  // `padded`: widened window ranges and kSelectPad more -1 slots per token.
  static constexpr int64_t kSelectPad = 19;
  struct HostCall {
    int64_t n_select = 0;
    std::vector<float> q;
    std::vector<int32_t> q_pos, selection, window_start, window_len, comp_offset, comp_len;
  };
  HostCall Gather(const Pool& p, const std::vector<int64_t>& entries, bool padded) {
    HostCall h;
    h.n_select = p.c.n_select + (padded ? kSelectPad : 0);
    const int64_t hd = p.c.heads * p.c.d;
    for (int64_t t : entries) {
      h.q.insert(h.q.end(), p.q.begin() + t * hd, p.q.begin() + (t + 1) * hd);
      h.q_pos.push_back(p.q_pos[t]);
      h.selection.insert(h.selection.end(), p.selection.begin() + t * p.c.n_select,
                         p.selection.begin() + (t + 1) * p.c.n_select);
      h.selection.resize(h.selection.size() + (h.n_select - p.c.n_select), -1);
      if (p.c.varlen) {
        h.window_start.push_back(padded ? p.padded_start[t] : p.window_start[t]);
        h.window_len.push_back(padded ? p.padded_len[t] : p.window_len[t]);
        h.comp_offset.push_back(p.comp_offset[t]), h.comp_len.push_back(p.comp_len[t]);
      }
    }
    return h;
  }

  // Args of the call `h`: host pointers (no out), or device copies (out NaN-poisoned).
  model::SparseAttentionArgs CallArgs(const Pool& p, const HostCall& h, bool device) {
    model::SparseAttentionArgs a;
    a.tokens = static_cast<int64_t>(h.q_pos.size()), a.heads = p.c.heads, a.head_dim = p.c.d;
    a.n_window = p.n_window, a.window = p.c.window, a.n_comp = p.n_comp;
    a.n_select = h.n_select, a.scale = p.scale;
    const bool v = p.c.varlen;
    if (!device) {
      a.q = h.q.data(), a.q_pos = h.q_pos.data(), a.selection = h.selection.data();
      a.window_kv = p.window_kv.data(), a.window_pos = p.window_pos.data();
      a.comp_kv = p.comp_kv.data(), a.sinks = p.sinks.data();
      if (v) {
        a.window_start = h.window_start.data(), a.window_len = h.window_len.data();
        a.comp_offset = h.comp_offset.data(), a.comp_len = h.comp_len.data();
      }
      return a;
    }
    a.q = ToGpu(h.q), a.q_pos = ToGpu(h.q_pos), a.selection = ToGpu(h.selection);
    a.window_kv = p.window_kv_dev, a.window_pos = p.window_pos_dev;
    a.comp_kv = p.comp_kv_dev, a.sinks = p.sinks_dev;
    if (v) {
      a.window_start = ToGpu(h.window_start), a.window_len = ToGpu(h.window_len);
      a.comp_offset = ToGpu(h.comp_offset), a.comp_len = ToGpu(h.comp_len);
    }
    a.out = PoisonedFloats(a.tokens * p.c.heads * p.c.d);
    return a;
  }

  // Runs `launch` over `entries`; returns the outputs [entries, heads, d] (clean error word
  // expected).
  std::vector<float> RunEntries(const Pool& p, const std::vector<int64_t>& entries,
                                const AttentionLaunch& launch, bool padded = false) {
    const HostCall h = Gather(p, entries, padded);
    const model::SparseAttentionArgs a = CallArgs(p, h, /*device=*/true);
    int32_t* err = ToGpu(std::vector<int32_t>{0});
    EXPECT_EQ(launch(a, reinterpret_cast<int*>(err), gpu_->stream()), cudaSuccess);
    std::vector<float> out = FromGpu(a.out, a.tokens * p.c.heads * p.c.d);
    EXPECT_EQ(FromGpu(err, 1)[0], 0);
    return out;
  }

  // The whole check of one case (see the top of this file).
  void CheckInvariance(const InvarianceCase& c, const AttentionLaunch& launch) {
    SCOPED_TRACE(::testing::Message()
                 << c.name << ": heads " << c.heads << " d " << c.d << " window " << c.window
                 << " n_select " << c.n_select << (c.varlen ? " varlen" : " one sequence"));
    const Pool p = MakePool(c);
    const int64_t hd = c.heads * c.d;
    std::vector<std::vector<float>> alone(c.pool);
    for (int64_t t = 0; t < c.pool; ++t) alone[t] = RunEntries(p, {t}, launch);
    const auto check = [&](const std::vector<int64_t>& entries, const std::vector<float>& got) {
      for (size_t k = 0; k < entries.size(); ++k) {
        const std::vector<float> mine(got.begin() + k * hd, got.begin() + (k + 1) * hd);
        ASSERT_TRUE(BitExact(mine, alone[entries[k]]))
            << "token " << entries[k] << " (window_len "
            << (c.varlen ? p.window_len[entries[k]] : p.n_window) << ", comp_len "
            << (c.varlen ? p.comp_len[entries[k]] : p.n_comp) << ") at entry " << k << " of "
            << entries.size();
      }
    };
    for (int64_t t = 0; t < c.pool; ++t) {
      SCOPED_TRACE("alone, padded");
      check({t}, RunEntries(p, {t}, launch, /*padded=*/true));
    }
    for (int64_t size : {2, 6, 12, 24}) {
      SCOPED_TRACE(::testing::Message() << "batches of " << size << (size == 24 ? ", padded" : ""));
      for (int64_t first = 0; first < c.pool; first += size) {
        std::vector<int64_t> entries;
        for (int64_t k = 0; k < size; ++k) entries.push_back((first + k) % c.pool);
        check(entries, RunEntries(p, entries, launch, /*padded=*/size == 24));
      }
    }
    std::vector<int64_t> all(c.pool);
    for (int64_t t = 0; t < c.pool; ++t) all[t] = t;
    const std::vector<float> got_all = RunEntries(p, all, launch);
    {
      SCOPED_TRACE("the whole pool");
      check(all, got_all);
    }
    for (int64_t size : {64, 300}) {
      SCOPED_TRACE(::testing::Message() << size << " entries, tokens repeated");
      std::vector<int64_t> entries(size);
      for (int64_t k = 0; k < size; ++k) entries[k] = (k * 5 + 3) % c.pool;
      check(entries, RunEntries(p, entries, launch, /*padded=*/size == 300));
    }
    // Accuracy of the whole-pool call against the CPU reference.
    const HostCall h = Gather(p, all, /*padded=*/false);
    model::SparseAttentionArgs ha = CallArgs(p, h, /*device=*/false);
    std::vector<float> expected(c.pool * hd);
    ha.out = expected.data();
    cpu_.SparseAttention(ha);
    const double max_abs = MaxAbs(expected);
    EXPECT_TRUE(AllClose(got_all, expected, 0.0, c.accuracy * max_abs));
    if (max_abs > 0.0) {
      EXPECT_TRUE(RelL2Close(got_all, expected, c.accuracy));
    }
  }

  // The cases both kernels run (shapes the tensor-core kernel takes: heads % 16 == 0,
  // d % 64 == 0): the V4.1 decode shape (64 heads x 512, 128-row window, 512 selected:
  // up to 640 candidates), long lists (2048 selected: 2,048 - 2,208 candidates), tiny ones
  // (4 selected, window 16: 4 - 24 candidates, one or two chunks) and one shared sequence.
  static std::vector<InvarianceCase> Cases(bool small_only) {
    std::vector<InvarianceCase> cases;
    InvarianceCase tiny;
    tiny.name = "tiny", tiny.heads = 16, tiny.d = 64, tiny.window = 16, tiny.n_select = 4;
    tiny.max_comp_rows = 6;
    cases.push_back(tiny);
    InvarianceCase shared;
    shared.name = "one sequence", shared.heads = 32, shared.d = 128, shared.window = 64;
    shared.n_select = 300, shared.max_comp_rows = 500, shared.shared_window_rows = 600;
    shared.varlen = false;
    cases.push_back(shared);
    InvarianceCase longer;
    longer.name = "2k candidates", longer.heads = 32, longer.d = 128, longer.window = 128;
    longer.n_select = 2048, longer.max_comp_rows = 4000;
    cases.push_back(longer);
    if (!small_only) {
      InvarianceCase v41;
      v41.name = "V4.1 decode", v41.heads = 64, v41.d = 512, v41.window = 128;
      v41.n_select = 512, v41.max_comp_rows = 3000;
      cases.push_back(v41);
    }
    return cases;
  }
};

}  // namespace deepinfer::backend::cuda::testing
