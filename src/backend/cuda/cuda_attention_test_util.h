// Inputs shared by the sparse-attention GPU tests (cuda_attention_mma_test.cc for
// SparseAttentionMma, cuda_attention_prefill_test.cc for SparseAttentionPrefill): sequences of
// query tokens with causal windows and compressed entries, the rows fake-quantised as the
// model makes them, the host and device views of model::SparseAttentionArgs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "model/backend.h"

namespace deepinfer::backend::cuda::testing {

// x rounded to the nearest bf16 (ties to even), as a float.
inline float RoundBf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &b, 4);
  return x;
}

// One sequence of a call: its query tokens (the last `tokens` positions), its window rows
// (the last `window_rows` positions, ascending, ending at the newest token: a causal
// window) and its compressed entries.
struct AttnSeq {
  int64_t tokens, window_rows, comp_rows;
};

struct AttnCase {
  std::vector<AttnSeq> seqs;
  int64_t heads = 16, d = 64, window = 16, n_select = 8;
  bool varlen = true;  // pass the varlen arrays (false: one sequence, null arrays)
  float q_std = 1.0f, sink_std = 2.0f;
  bool q_bf16 = false;      // q rounded to bf16
  int64_t empty_every = 5;  // every k-th selection slot is -1 (0: none forced)
  int64_t stale_every = 7;  // every k-th window row has position -1 (0: none forced)
  std::string name;
};

// Host inputs of a case; window_kv / comp_kv fake-quantised (FP8 block32 / FP4 block16 e4m3).
struct AttnInputs {
  int64_t heads = 0, d = 0, window = 0, n_select = 0, tokens = 0, n_window = 0, n_comp = 0;
  bool varlen = true;
  std::vector<float> q, window_kv, comp_kv, sinks;
  std::vector<int32_t> q_pos, window_pos, selection;
  std::vector<int32_t> window_start, window_len, comp_offset, comp_len;
  float scale = 1.0f;

  int64_t out_size() const { return tokens * heads * d; }

  model::SparseAttentionArgs HostArgs(float* out) const {
    model::SparseAttentionArgs a;
    a.q = q.data(), a.q_pos = q_pos.data(), a.tokens = tokens, a.heads = heads, a.head_dim = d;
    a.window_kv = window_kv.data(), a.window_pos = window_pos.data(), a.n_window = n_window;
    a.window = window, a.comp_kv = comp_kv.data(), a.n_comp = n_comp;
    a.selection = selection.data(), a.n_select = n_select, a.sinks = sinks.data();
    a.scale = scale, a.out = out;
    if (varlen) {
      a.window_start = window_start.data(), a.window_len = window_len.data();
      a.comp_offset = comp_offset.data(), a.comp_len = comp_len.data();
    }
    return a;
  }

  // max |value| over the key/value rows.
  double MaxRowValue() const { return std::max(MaxAbs(window_kv), MaxAbs(comp_kv)); }
};

class CudaAttentionTestBase : public CudaVsCpuTest {
 protected:
  AttnInputs MakeInputs(const AttnCase& c) {
    AttnInputs in;
    in.heads = c.heads, in.d = c.d, in.window = c.window, in.n_select = c.n_select;
    in.varlen = c.varlen;
    int64_t win_begin = 0, comp_begin = 0;
    for (size_t i = 0; i < c.seqs.size(); ++i) {
      const AttnSeq& s = c.seqs[i];
      const int32_t last = 1000 + 7 * static_cast<int32_t>(i);  // sequences overlap in position
      for (int64_t r = 0; r < s.window_rows; ++r) {
        const bool stale = c.stale_every > 0 && r % c.stale_every == c.stale_every - 1;
        in.window_pos.push_back(stale ? -1 : last - static_cast<int32_t>(s.window_rows - 1 - r));
      }
      for (int64_t t = 0; t < s.tokens; ++t) {
        in.q_pos.push_back(last - static_cast<int32_t>(s.tokens - 1 - t));
        in.window_start.push_back(static_cast<int32_t>(win_begin));
        in.window_len.push_back(static_cast<int32_t>(s.window_rows));
        in.comp_offset.push_back(static_cast<int32_t>(comp_begin));
        in.comp_len.push_back(static_cast<int32_t>(s.comp_rows));
        std::vector<int32_t> ids = s.comp_rows > 0
                                       ? Ints(c.n_select, -1, static_cast<int32_t>(s.comp_rows - 1))
                                       : std::vector<int32_t>(c.n_select, -1);
        for (int64_t k = 0; c.empty_every > 0 && k < c.n_select; k += c.empty_every) ids[k] = -1;
        if (s.comp_rows > 0 && c.n_select > 1) ids[1] = static_cast<int32_t>(s.comp_rows - 1);
        in.selection.insert(in.selection.end(), ids.begin(), ids.end());
      }
      win_begin += s.window_rows;
      comp_begin += s.comp_rows;
    }
    in.tokens = static_cast<int64_t>(in.q_pos.size());
    in.n_window = win_begin, in.n_comp = comp_begin;
    in.q = Normal(in.tokens * c.heads * c.d, c.q_std);
    if (c.q_bf16) {
      for (float& v : in.q) v = RoundBf16(v);
    }
    in.window_kv = Normal(std::max<int64_t>(in.n_window, 1) * c.d);
    in.comp_kv = Normal(std::max<int64_t>(in.n_comp, 1) * c.d);
    if (in.n_window > 0) {
      cpu_.FakeQuant(in.window_kv.data(), in.n_window, c.d, c.d,
                     model::FakeQuantKind::kFp8Block32Pow2);
    }
    if (in.n_comp > 0) {
      cpu_.FakeQuant(in.comp_kv.data(), in.n_comp, c.d, c.d, model::FakeQuantKind::kFp4Block16E4m3);
    }
    in.sinks = Normal(c.heads, c.sink_std);
    in.scale = 1.0f / std::sqrt(static_cast<float>(c.d));
    return in;
  }

  // The device copy of in.HostArgs (out NaN-poisoned).
  model::SparseAttentionArgs GpuArgs(const AttnInputs& in) {
    model::SparseAttentionArgs g = in.HostArgs(nullptr);
    g.q = ToGpu(in.q), g.q_pos = ToGpu(in.q_pos);
    g.window_kv = ToGpu(in.window_kv), g.comp_kv = ToGpu(in.comp_kv);
    g.window_pos = in.window_pos.empty() ? nullptr : ToGpu(in.window_pos);
    g.selection = in.selection.empty() ? nullptr : ToGpu(in.selection);
    g.sinks = ToGpu(in.sinks);
    if (in.varlen) {
      g.window_start = ToGpu(in.window_start), g.window_len = ToGpu(in.window_len);
      g.comp_offset = ToGpu(in.comp_offset), g.comp_len = ToGpu(in.comp_len);
    }
    g.out = PoisonedFloats(std::max<int64_t>(in.out_size(), 1));
    return g;
  }
};

}  // namespace deepinfer::backend::cuda::testing
