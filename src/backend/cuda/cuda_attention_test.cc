// Sparse sink attention, gated pooling, indexer scores, candidate mask and top-k against
// the CPU reference (selection results must match exactly).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_attention_invariance.h"
#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

struct AttnShape {
  int64_t T, heads, d, window, n_window, n_comp, n_select;
};

// One sequence of a varlen SparseAttention call: its query tokens, window rows and
// compressed entries (each packed after the previous sequence's in the shared buffers).
struct VarlenSeq {
  int64_t tokens, window_rows, comp_rows;
};

// Host inputs of a varlen call over several sequences (see MakeVarlenInputs).
struct VarlenInputs {
  int64_t heads = 0, d = 0, window = 0, n_select = 0;
  std::vector<VarlenSeq> seqs;
  std::vector<int64_t> tok_begin, win_begin, comp_begin;  // per sequence, total at the end
  std::vector<float> q, window_kv, comp_kv, sinks;
  std::vector<int32_t> q_pos, window_pos, selection;
  std::vector<int32_t> window_start, window_len, comp_offset, comp_len;  // per token
  float scale = 1.0f;

  int64_t tokens() const { return tok_begin.back(); }
  int64_t out_size() const { return tokens() * heads * d; }
};

// How the inputs of a SparseAttention case are drawn.
struct AttnInputs {
  int64_t empty_every = 5;        // every k-th selection slot is -1 (0: none forced)
  int64_t stale_every = 7;        // every k-th window row has position -1 (0: none forced)
  bool misalign_rows = false;     // comp_kv / window_kv 4 bytes off 16-byte alignment
  bool nothing_attended = false;  // all window rows stale, all slots empty
};

// An IndexerScores case: T queries (first at position p0) over n_keys keys.
struct IndexerShape {
  int64_t T, heads, dim, n_keys, ratio;
  int32_t p0;
};

class CudaAttentionTest : public CudaVsCpuTest {
 protected:
  // These cases test the fp32 kernel (kernels::SparseAttention) on arbitrary fp32 key rows;
  // the tensor-core kernel, which needs fake-quantised rows, has cuda_attention_mma_test.cc.
  void SetUp() override {
    CudaVsCpuTest::SetUp();
    if (gpu_) gpu_->set_attention_mma(false);
  }

  // Runs one SparseAttention case on both backends (GPU output NaN-poisoned) and compares:
  // elementwise |gpu - cpu| <= atol + rtol |cpu| (atol < 0: 1e-5 max(1, max |cpu|)) and
  // relative L2 <= rtol.
  void CheckSparseAttention(const AttnShape& s, const AttnInputs& in, double rtol, double atol);

  // Runs one varlen SparseAttention over `seqs` (MakeVarlenInputs) and compares the GPU
  // (NaN-poisoned output) with the CPU's varlen call (rel 1e-5, abs 1e-6, relative L2
  // 1e-5) and with separate single-sequence GPU calls (rel 1e-5, abs 1e-6).
  void CheckVarlenAttention(const std::vector<VarlenSeq>& seqs, int64_t heads, int64_t d,
                            int64_t window, int64_t n_select);
  VarlenInputs MakeVarlenInputs(const std::vector<VarlenSeq>& seqs, int64_t heads, int64_t d,
                                int64_t window, int64_t n_select);
  // The varlen call of `in` with every array copied to the device (out: NaN-poisoned).
  model::SparseAttentionArgs VarlenGpuArgs(const VarlenInputs& in);
  // IndexerScores of random q, w, keys for shape `s` (query t at position p0 + pos_step * t)
  // on the GPU (NaN-poisoned output) and on the CPU: {got, expected}.
  std::pair<std::vector<float>, std::vector<float>> IndexerScoresGpuAndCpu(const IndexerShape& s,
                                                                           int pos_step) {
    const std::vector<float> q = Normal(s.T * s.heads * s.dim), w = Normal(s.T * s.heads),
                             keys = Normal(s.n_keys * s.dim);
    std::vector<int32_t> q_pos(s.T);
    for (int64_t t = 0; t < s.T; ++t) q_pos[t] = s.p0 + static_cast<int32_t>(pos_step * t);
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.dim));
    std::vector<float> expected(s.T * s.n_keys);
    cpu_.IndexerScores(q.data(), w.data(), s.T, s.heads, s.dim, keys.data(), s.n_keys, q_pos.data(),
                       s.ratio, scale, expected.data());
    float* out = PoisonedFloats(s.T * s.n_keys);
    gpu_->IndexerScores(ToGpu(q), ToGpu(w), s.T, s.heads, s.dim, ToGpu(keys), s.n_keys,
                        ToGpu(q_pos), s.ratio, scale, out);
    return {FromGpu(out, s.T * s.n_keys), std::move(expected)};
  }
};

void CudaAttentionTest::CheckSparseAttention(const AttnShape& s, const AttnInputs& in, double rtol,
                                             double atol) {
  CudaAttentionTest* test = this;
  cpu::CpuBackend& cpu = cpu_;
  CudaBackend& gpu = *gpu_;
  SCOPED_TRACE(::testing::Message()
               << "T " << s.T << " heads " << s.heads << " d " << s.d << " n_window " << s.n_window
               << " n_comp " << s.n_comp << " n_select " << s.n_select
               << (in.misalign_rows ? " misaligned" : "")
               << (in.nothing_attended ? " nothing attended" : ""));
  const int32_t p0 = 250;
  std::vector<int32_t> q_pos(s.T);
  for (int64_t t = 0; t < s.T; ++t) q_pos[t] = p0 + static_cast<int32_t>(t);
  // Window rows: positions around the queries, some stale (-1 or too old), some future.
  std::vector<int32_t> window_pos =
      test->Ints(s.n_window, static_cast<int32_t>(p0 - 2 * s.window), p0 + s.T);
  for (int64_t i = 0; in.stale_every > 0 && i < s.n_window; i += in.stale_every) {
    window_pos[i] = -1;
  }
  std::vector<int32_t> selection =
      test->Ints(s.T * s.n_select, -1, static_cast<int32_t>(std::max<int64_t>(s.n_comp - 1, -1)));
  for (int64_t i = 0; in.empty_every > 0 && i < s.T * s.n_select; i += in.empty_every) {
    selection[i] = -1;
  }
  if (in.nothing_attended) {
    std::fill(window_pos.begin(), window_pos.end(), -1);
    std::fill(selection.begin(), selection.end(), -1);
  }
  const std::vector<float> q = test->Normal(s.T * s.heads * s.d),
                           kv = test->Normal(s.n_window * s.d + 1),
                           comp = test->Normal(std::max<int64_t>(s.n_comp, 1) * s.d + 1),
                           sinks = test->Normal(s.heads, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d));

  model::SparseAttentionArgs a;
  a.q = q.data(), a.q_pos = q_pos.data(), a.tokens = s.T, a.heads = s.heads;
  a.head_dim = s.d, a.window_kv = kv.data(), a.window_pos = window_pos.data();
  a.n_window = s.n_window, a.window = s.window, a.comp_kv = comp.data(), a.n_comp = s.n_comp;
  a.selection = selection.data(), a.n_select = s.n_select, a.sinks = sinks.data();
  a.scale = scale;
  const int64_t n_out = s.T * s.heads * s.d;
  std::vector<float> expected(n_out);
  a.out = expected.data();
  cpu.SparseAttention(a);

  // The GPU copies carry one extra float so that they can start 4 bytes into the buffer.
  const int64_t offset = in.misalign_rows ? 1 : 0;
  model::SparseAttentionArgs g = a;
  g.q = test->ToGpu(q), g.q_pos = test->ToGpu(q_pos);
  std::vector<float> kv_shifted(kv.size()), comp_shifted(comp.size());
  std::copy(kv.begin(), kv.end() - 1, kv_shifted.begin() + offset);
  std::copy(comp.begin(), comp.end() - 1, comp_shifted.begin() + offset);
  g.window_kv = test->ToGpu(kv_shifted) + offset;
  g.comp_kv = test->ToGpu(comp_shifted) + offset;
  g.window_pos = s.n_window > 0 ? test->ToGpu(window_pos) : nullptr;
  g.selection = s.n_select > 0 ? test->ToGpu(selection) : nullptr;
  g.sinks = test->ToGpu(sinks);
  g.out = test->PoisonedFloats(std::max<int64_t>(n_out, 1));
  gpu.SparseAttention(g);
  const std::vector<float> got = test->FromGpu(g.out, n_out);
  if (atol < 0) atol = 1e-5 * std::max(1.0f, MaxAbs(expected));
  EXPECT_TRUE(AllClose(got, expected, rtol, atol));
  if (!in.nothing_attended) {
    EXPECT_TRUE(RelL2Close(got, expected, 1e-5));
  }
}

// Sequence s ends at position 400 + 3s (positions overlap, so rows of another sequence
// would pass the window test: only the per-token ranges keep sequences apart). Its window
// rows hold its last window_rows positions in ring order (rotated), every 7th stale (-1);
// its selection slots draw ids in [-1, comp_rows) with every 5th slot empty (all empty if
// comp_rows == 0).
VarlenInputs CudaAttentionTest::MakeVarlenInputs(const std::vector<VarlenSeq>& seqs, int64_t heads,
                                                 int64_t d, int64_t window, int64_t n_select) {
  VarlenInputs in;
  in.heads = heads, in.d = d, in.window = window, in.n_select = n_select, in.seqs = seqs;
  in.tok_begin = {0}, in.win_begin = {0}, in.comp_begin = {0};
  for (const VarlenSeq& s : seqs) {
    in.tok_begin.push_back(in.tok_begin.back() + s.tokens);
    in.win_begin.push_back(in.win_begin.back() + s.window_rows);
    in.comp_begin.push_back(in.comp_begin.back() + s.comp_rows);
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    const VarlenSeq& s = seqs[i];
    const int32_t last = 400 + 3 * static_cast<int32_t>(i);
    for (int64_t r = 0; r < s.window_rows; ++r) {
      const int64_t age = (r + 5 * static_cast<int64_t>(i)) % s.window_rows;  // ring order
      in.window_pos.push_back(r % 7 == 3 ? -1 : last - static_cast<int32_t>(age));
    }
    for (int64_t t = 0; t < s.tokens; ++t) {
      in.q_pos.push_back(last - static_cast<int32_t>(s.tokens - 1 - t));
      in.window_start.push_back(static_cast<int32_t>(in.win_begin[i]));
      in.window_len.push_back(static_cast<int32_t>(s.window_rows));
      in.comp_offset.push_back(static_cast<int32_t>(in.comp_begin[i]));
      in.comp_len.push_back(static_cast<int32_t>(s.comp_rows));
      std::vector<int32_t> ids = s.comp_rows > 0
                                     ? Ints(n_select, -1, static_cast<int32_t>(s.comp_rows - 1))
                                     : std::vector<int32_t>(n_select, -1);
      for (int64_t k = 0; k < n_select; k += 5) ids[k] = -1;
      if (s.comp_rows > 0 && n_select > 1) ids[1] = static_cast<int32_t>(s.comp_rows - 1);
      in.selection.insert(in.selection.end(), ids.begin(), ids.end());
    }
  }
  in.q = Normal(in.tokens() * heads * d);
  in.window_kv = Normal(std::max<int64_t>(in.win_begin.back(), 1) * d);
  in.comp_kv = Normal(std::max<int64_t>(in.comp_begin.back(), 1) * d);
  in.sinks = Normal(heads, 2.0f);
  in.scale = 1.0f / std::sqrt(static_cast<float>(d));
  return in;
}

// The varlen call over every sequence of `in`, with host pointers.
model::SparseAttentionArgs VarlenHostArgs(const VarlenInputs& in, float* out) {
  model::SparseAttentionArgs a;
  a.q = in.q.data(), a.q_pos = in.q_pos.data(), a.tokens = in.tokens(), a.heads = in.heads;
  a.head_dim = in.d, a.window_kv = in.window_kv.data(), a.window_pos = in.window_pos.data();
  a.n_window = in.win_begin.back(), a.window = in.window, a.comp_kv = in.comp_kv.data();
  a.n_comp = in.comp_begin.back(), a.selection = in.selection.data(), a.n_select = in.n_select;
  a.sinks = in.sinks.data(), a.scale = in.scale, a.out = out;
  a.window_start = in.window_start.data(), a.window_len = in.window_len.data();
  a.comp_offset = in.comp_offset.data(), a.comp_len = in.comp_len.data();
  return a;
}

// The same call with every array copied to the device (out: NaN-poisoned).
model::SparseAttentionArgs CudaAttentionTest::VarlenGpuArgs(const VarlenInputs& in) {
  model::SparseAttentionArgs g = VarlenHostArgs(in, nullptr);
  g.q = ToGpu(in.q), g.q_pos = ToGpu(in.q_pos);
  g.window_kv = ToGpu(in.window_kv), g.comp_kv = ToGpu(in.comp_kv);
  g.window_pos = in.window_pos.empty() ? nullptr : ToGpu(in.window_pos);
  g.selection = in.selection.empty() ? nullptr : ToGpu(in.selection);
  g.sinks = ToGpu(in.sinks);
  g.window_start = ToGpu(in.window_start), g.window_len = ToGpu(in.window_len);
  g.comp_offset = ToGpu(in.comp_offset), g.comp_len = ToGpu(in.comp_len);
  g.out = PoisonedFloats(std::max<int64_t>(in.out_size(), 1));
  return g;
}

// Sequence s of the device varlen call `g` as a single-sequence call (pointers into the
// shared device buffers; null varlen arrays) writing into out + that sequence's rows.
model::SparseAttentionArgs SequenceGpuArgs(const VarlenInputs& in,
                                           const model::SparseAttentionArgs& g, size_t s,
                                           float* out) {
  model::SparseAttentionArgs a = g;
  const int64_t t0 = in.tok_begin[s], d = in.d;
  a.q = g.q + t0 * in.heads * d, a.q_pos = g.q_pos + t0, a.tokens = in.seqs[s].tokens;
  a.window_kv = g.window_kv + in.win_begin[s] * d, a.window_pos = g.window_pos + in.win_begin[s];
  a.n_window = in.seqs[s].window_rows;
  a.comp_kv = g.comp_kv + in.comp_begin[s] * d, a.n_comp = in.seqs[s].comp_rows;
  a.selection = g.selection + t0 * in.n_select, a.out = out + t0 * in.heads * d;
  a.window_start = nullptr, a.window_len = nullptr, a.comp_offset = nullptr;
  a.comp_len = nullptr;
  return a;
}

void CudaAttentionTest::CheckVarlenAttention(const std::vector<VarlenSeq>& seqs, int64_t heads,
                                             int64_t d, int64_t window, int64_t n_select) {
  std::string layout;
  for (const VarlenSeq& s : seqs) {
    layout += " (" + std::to_string(s.tokens) + " tok, " + std::to_string(s.window_rows) +
              " win, " + std::to_string(s.comp_rows) + " comp)";
  }
  SCOPED_TRACE(::testing::Message() << "heads " << heads << " d " << d << " window " << window
                                    << " n_select " << n_select << layout);
  const VarlenInputs in = MakeVarlenInputs(seqs, heads, d, window, n_select);
  std::vector<float> expected(in.out_size());
  cpu_.SparseAttention(VarlenHostArgs(in, expected.data()));

  const model::SparseAttentionArgs g = VarlenGpuArgs(in);
  gpu_->SparseAttention(g);
  const std::vector<float> got = FromGpu(g.out, in.out_size());
  EXPECT_TRUE(AllClose(got, expected, 1e-5, 1e-6)) << "varlen GPU vs varlen CPU";
  EXPECT_TRUE(RelL2Close(got, expected, 1e-5)) << "varlen GPU vs varlen CPU";

  // Separate single-sequence GPU calls on the same device buffers. Their split counts may
  // differ from the varlen launch's, so they agree to rounding, not bitwise.
  float* separate = PoisonedFloats(in.out_size());
  for (size_t s = 0; s < seqs.size(); ++s) {
    gpu_->SparseAttention(SequenceGpuArgs(in, g, s, separate));
  }
  EXPECT_TRUE(AllClose(got, FromGpu(separate, in.out_size()), 1e-5, 1e-6))
      << "varlen GPU vs separate GPU calls";
  ASSERT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaAttentionTest, SparseAttentionWindowPlusSelectedEntries) {
  std::vector<AttnShape> shapes = {{1, 1, 32, 4, 4, 0, 0},    // window only
                                   {3, 4, 64, 8, 10, 12, 5},  // odd sizes
                                   {5, 3, 96, 6, 20, 40, 33}};
  if (!SmallOnly()) shapes.push_back({2, 64, 512, 128, 128, 300, 512});  // V4.1-Flash decode
  if (!SmallOnly()) shapes.push_back({9, 64, 512, 128, 200, 100, 64});   // prefill-like
  for (const AttnShape& s : shapes) {
    // Bounds kept from the first kernel version (1e-5 for the L2 check); the cases below
    // are strict.
    CheckSparseAttention(s, AttnInputs{}, 1e-4, -1.0);
  }
}

// V4.1-Flash shapes (64 heads x 512, window 128, 512 selected entries): decode (the
// candidate range split over a cluster), a few tokens, and a prefill-sized batch.
TEST_F(CudaAttentionTest, SparseAttentionV41ShapesStrict) {
  if (SmallOnly()) GTEST_SKIP() << "V4.1-size case";
  for (int64_t T : {1, 3, 33}) {
    CheckSparseAttention({T, 64, 512, 128, 128, 2000, 512}, AttnInputs{}, 1e-5, 1e-6);
  }
  // Mostly empty selection (early in a sequence) and no forced empties at all.
  AttnInputs sparse;
  sparse.empty_every = 2;
  CheckSparseAttention({1, 64, 512, 128, 128, 40, 512}, sparse, 1e-5, 1e-6);
  AttnInputs dense;
  dense.empty_every = 0, dense.stale_every = 0;
  CheckSparseAttention({2, 64, 512, 128, 128, 3000, 512}, dense, 1e-5, 1e-6);
}

// Head counts that leave a partial head group, and head_dims 64 / 72 / 512 (plus 30, not a
// multiple of 4, and the kMaxAttnHeadDim limit).
TEST_F(CudaAttentionTest, SparseAttentionTailGroupsAndHeadDims) {
  std::vector<AttnShape> shapes = {{1, 12, 64, 16, 20, 50, 24},   {3, 5, 72, 16, 24, 30, 40},
                                   {2, 12, 30, 8, 12, 20, 9},     {1, 5, 512, 128, 128, 600, 512},
                                   {33, 12, 512, 32, 40, 90, 48}, {4, 1, 72, 4, 6, 8, 3},
                                   {2, 9, 1024, 16, 20, 40, 30}};
  for (const AttnShape& s : shapes) {
    CheckSparseAttention(s, AttnInputs{}, 1e-5, 1e-6);
  }
}

// Rows that are not 16-byte aligned take the 4-byte copy path; the results are the same.
TEST_F(CudaAttentionTest, SparseAttentionMisalignedRows) {
  AttnInputs in;
  in.misalign_rows = true;
  for (const AttnShape& s :
       std::vector<AttnShape>{{1, 64, 512, 128, 128, 700, 512}, {3, 5, 64, 8, 12, 20, 17}}) {
    CheckSparseAttention(s, in, 1e-5, 1e-6);
  }
}

// No attended key (only the sink): the output is exactly 0, also when split over a cluster.
TEST_F(CudaAttentionTest, SparseAttentionOnlySink) {
  AttnInputs none;
  none.nothing_attended = true;
  for (const AttnShape& s : std::vector<AttnShape>{
           {1, 64, 512, 128, 128, 50, 512}, {2, 5, 64, 8, 8, 10, 6}, {3, 12, 64, 8, 0, 0, 0}}) {
    CheckSparseAttention(s, none, 0.0, 0.0);
  }
}

// Varlen decode at V4.1 shapes: 3-5 sequences of one token each (different window lengths,
// one with no compressed entries, others with few or many), and a mixed call with 3 + 1 + 1
// tokens (the 3-token sequence's window rows include positions its early tokens may not see).
TEST_F(CudaAttentionTest, SparseAttentionVarlenV41Shapes) {
  if (SmallOnly()) GTEST_SKIP() << "V4.1-size case";
  const int64_t heads = 64, d = 512, window = 128, n_select = 512;
  CheckVarlenAttention({{1, 128, 3000}, {1, 57, 0}, {1, 1, 40}}, heads, d, window, n_select);
  CheckVarlenAttention({{1, 128, 100}, {1, 128, 2000}, {1, 9, 0}, {1, 100, 700}}, heads, d, window,
                       n_select);
  CheckVarlenAttention({{1, 20, 513}, {1, 128, 1}, {1, 128, 0}, {1, 64, 4096}, {1, 3, 30}}, heads,
                       d, window, n_select);
  CheckVarlenAttention({{3, 130, 600}, {1, 128, 0}, {1, 33, 50}}, heads, d, window, n_select);
  // Decode batch of 32 sequences (two splits per (token, group) on an H200).
  std::vector<VarlenSeq> batch;
  for (int64_t i = 0; i < 32; ++i) batch.push_back({1, 1 + (37 * i) % 128, (97 * i) % 900});
  CheckVarlenAttention(batch, heads, d, window, n_select);
}

// Small varlen shapes: partial head groups, head_dim not a multiple of 4 (4-byte copies),
// sequences with no window rows, no selection slots.
TEST_F(CudaAttentionTest, SparseAttentionVarlenSmallShapes) {
  CheckVarlenAttention({{2, 10, 12}, {1, 0, 5}, {3, 12, 0}}, 5, 64, 8, 17);
  CheckVarlenAttention({{1, 6, 9}, {2, 7, 1}, {1, 3, 20}, {1, 1, 0}}, 12, 30, 4, 9);
  CheckVarlenAttention({{1, 16, 0}, {2, 20, 0}}, 9, 72, 16, 0);
}

// An id >= comp_len[t] is out of range although row comp_offset[t] + id exists in the
// shared buffer (it belongs to the next sequence): the error bit, then InvalidArgument.
TEST_F(CudaAttentionTest, SparseAttentionVarlenIdBeyondCompLenBecomesStatus) {
  VarlenInputs in =
      MakeVarlenInputs({{1, 128, 100}, {1, 128, 300}, {1, 50, 200}}, 64, 512, 128, 512);
  in.selection[in.n_select - 3] = 100;  // sequence 0 (comp_len 100; n_comp 600), last split
  ASSERT_LT(in.comp_offset[0] + 100, in.comp_begin.back());
  gpu_->SparseAttention(VarlenGpuArgs(in));
  const base::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument) << s;
  gpu_.reset();  // skip TearDown's status check: this backend failed on purpose
}

// A token range outside the shared buffers (window_start + window_len > n_window) reads
// nothing outside them and is reported like an out-of-range id.
TEST_F(CudaAttentionTest, SparseAttentionVarlenRangeOutsideBuffersBecomesStatus) {
  VarlenInputs in = MakeVarlenInputs({{1, 16, 10}, {2, 16, 10}}, 8, 64, 16, 8);
  in.window_len[2] = 17;  // sequence 1's second token: rows [16, 33) of 32
  gpu_->SparseAttention(VarlenGpuArgs(in));
  const base::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument) << s;
  gpu_.reset();
}

// T = 0 writes nothing and reports no error.
TEST_F(CudaAttentionTest, SparseAttentionNoTokens) {
  model::SparseAttentionArgs a;
  a.tokens = 0, a.heads = 64, a.head_dim = 512, a.n_window = 128, a.window = 128;
  a.n_select = 512, a.n_comp = 10, a.scale = 0.5f;
  a.out = PoisonedFloats(16);
  gpu_->SparseAttention(a);
  const std::vector<float> got = FromGpu(a.out, 16);
  for (float v : got) EXPECT_TRUE(std::isnan(v));
}

// An id >= n_comp in a decode-shaped call (split over a cluster) sets the error bit.
TEST_F(CudaAttentionTest, SparseAttentionBadIdInSplitDecodeBecomesStatus) {
  const int64_t heads = 64, d = 512, n_window = 128, n_select = 512, n_comp = 100;
  std::vector<int32_t> selection = Ints(n_select, -1, static_cast<int32_t>(n_comp - 1));
  selection[n_select - 3] = static_cast<int32_t>(n_comp);  // last split, out of range
  const std::vector<int32_t> q_pos = {300}, window_pos = Ints(n_window, 200, 300);
  model::SparseAttentionArgs a;
  a.q = ToGpu(Normal(heads * d)), a.q_pos = ToGpu(q_pos), a.tokens = 1, a.heads = heads;
  a.head_dim = d, a.window_kv = ToGpu(Normal(n_window * d)), a.window_pos = ToGpu(window_pos);
  a.n_window = n_window, a.window = 128, a.comp_kv = ToGpu(Normal(n_comp * d));
  a.n_comp = n_comp, a.selection = ToGpu(selection), a.n_select = n_select;
  a.sinks = ToGpu(Normal(heads)), a.scale = 0.05f, a.out = PoisonedFloats(heads * d);
  gpu_->SparseAttention(a);
  const base::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument) << s;
  gpu_.reset();  // skip TearDown's status check: this backend failed on purpose
}

// Device time per SparseAttention call at V4.1-Flash shapes (decode T = 1 and T = 32, and
// varlen T = 32: 32 sequences x 1 token in one call).
// Run with --gtest_also_run_disabled_tests --gtest_filter='*BenchDecodeAttention*'.
TEST_F(CudaAttentionTest, DISABLED_BenchDecodeAttention) {
  const int64_t heads = 64, d = 512, n_window = 128, n_select = 512, n_comp = 4096;
  for (int64_t T : {1, 32}) {
    std::vector<int32_t> q_pos(T), window_pos(n_window);
    for (int64_t t = 0; t < T; ++t) q_pos[t] = static_cast<int32_t>(5000 + t);
    for (int64_t i = 0; i < n_window; ++i) window_pos[i] = static_cast<int32_t>(5000 - i);
    model::SparseAttentionArgs a;
    a.q = ToGpu(Normal(T * heads * d)), a.q_pos = ToGpu(q_pos), a.tokens = T, a.heads = heads;
    a.head_dim = d, a.window_kv = ToGpu(Normal(n_window * d)), a.window_pos = ToGpu(window_pos);
    a.n_window = n_window, a.window = 128, a.comp_kv = ToGpu(Normal(n_comp * d));
    a.n_comp = n_comp, a.selection = ToGpu(Ints(T * n_select, 0, static_cast<int32_t>(n_comp - 1)));
    a.n_select = n_select, a.sinks = ToGpu(Normal(heads)), a.scale = 0.044f;
    a.out = PoisonedFloats(T * heads * d);
    const double us = DeviceMicrosPerCall([&] { gpu_->SparseAttention(a); });
    const double mb = static_cast<double>((n_window + n_select) * d * 4) / 1e6;
    std::printf(
        "SparseAttention T=%lld heads=%lld d=%lld keys=%lld: %.2f us/call (%.2f MB of "
        "unique K/V rows per token)\n",
        static_cast<long long>(T), static_cast<long long>(heads), static_cast<long long>(d),
        static_cast<long long>(n_window + n_select), us, mb);
    EXPECT_GT(us, 0.0);
  }
  // Varlen decode: 32 sequences x 1 token in one call (128 window rows and 1024 compressed
  // entries each) against 32 single-sequence calls on the same buffers.
  const int64_t seqs = 32;
  const VarlenInputs in = MakeVarlenInputs(
      std::vector<VarlenSeq>(seqs, VarlenSeq{1, n_window, 1024}), heads, d, 128, n_select);
  const model::SparseAttentionArgs g = VarlenGpuArgs(in);
  const double varlen_us = DeviceMicrosPerCall([&] { gpu_->SparseAttention(g); });
  const double separate_us = DeviceMicrosPerCall([&] {
    for (int64_t s = 0; s < seqs; ++s) {
      gpu_->SparseAttention(SequenceGpuArgs(in, g, static_cast<size_t>(s), g.out));
    }
  });
  std::printf(
      "SparseAttention varlen %lld seqs x 1 token heads=%lld d=%lld keys=%lld: %.2f us/call "
      "(%lld single-sequence calls: %.2f us)\n",
      static_cast<long long>(seqs), static_cast<long long>(heads), static_cast<long long>(d),
      static_cast<long long>(n_window + n_select), varlen_us, static_cast<long long>(seqs),
      separate_us);
  EXPECT_GT(varlen_us, 0.0);
  EXPECT_GT(separate_us, 0.0);
}

// Device time per IndexerScores call at V4.1-Flash shapes (64 heads x 128, 16384 visible
// compressed entries = a 64K-token context at ratio 4), decode T = 1 and T = 32.
TEST_F(CudaAttentionTest, DISABLED_BenchIndexerScores) {
  const int64_t heads = 64, dim = 128, n_keys = 16384, ratio = 4;
  for (int64_t T : {1, 32}) {
    std::vector<int32_t> q_pos(T);
    for (int64_t t = 0; t < T; ++t) q_pos[t] = static_cast<int32_t>(ratio * n_keys + t);
    const float* q = ToGpu(Normal(T * heads * dim));
    const float* w = ToGpu(Normal(T * heads));
    const float* keys = ToGpu(Normal(n_keys * dim));
    const int32_t* pos = ToGpu(q_pos);
    float* out = PoisonedFloats(T * n_keys);
    const double us = DeviceMicrosPerCall(
        [&] { gpu_->IndexerScores(q, w, T, heads, dim, keys, n_keys, pos, ratio, 0.088f, out); });
    std::printf("IndexerScores T=%lld heads=%lld dim=%lld keys=%lld: %.2f us/call\n",
                static_cast<long long>(T), static_cast<long long>(heads),
                static_cast<long long>(dim), static_cast<long long>(n_keys), us);
    EXPECT_GT(us, 0.0);
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

TEST_F(CudaAttentionTest, IndexerScoresMaskInvisibleEntries) {
  std::vector<IndexerShape> shapes = {
      {1, 2, 2, 3, 2, 3}, {3, 8, 32, 17, 2, 20}, {4, 5, 48, 70, 1, 60}};
  if (!SmallOnly()) shapes.push_back({3, 32, 128, 3000, 4, 8000});  // V4.1-Flash indexer
  for (const IndexerShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << s.T << " heads " << s.heads << " dim " << s.dim
                                      << " keys " << s.n_keys);
    const auto [got, expected] = IndexerScoresGpuAndCpu(s, 3);
    EXPECT_TRUE(AllClose(got, expected, 1e-4, 1e-5 * std::max(1.0f, MaxAbs(expected))));
  }
}

// The staged-key-tile kernel at V4.1 indexer shapes (64 / 32 heads x 128) and odd ones
// (heads > 32 but not a multiple of 32, dim not a multiple of 4, partial key tiles, whole
// tiles not yet visible), at tighter bounds.
TEST_F(CudaAttentionTest, IndexerScoresTiledKeysStrict) {
  std::vector<IndexerShape> shapes = {{1, 64, 128, 1000, 4, 2000}, {5, 64, 128, 777, 4, 1500},
                                      {2, 40, 30, 130, 2, 100},    {3, 33, 7, 65, 1, 40},
                                      {2, 1, 4, 64, 1, 0},         {33, 32, 128, 300, 4, 500}};
  for (const IndexerShape& s : shapes) {
    SCOPED_TRACE(::testing::Message() << "T " << s.T << " heads " << s.heads << " dim " << s.dim
                                      << " keys " << s.n_keys);
    const auto [got, expected] = IndexerScoresGpuAndCpu(s, 7);
    EXPECT_TRUE(AllClose(got, expected, 1e-5, 2e-6 * std::max(1.0f, MaxAbs(expected))));
    // Every case has invisible entries (exactly -inf: AllClose demands equal infinities)
    // and visible ones.
    int64_t invisible = 0;
    for (float v : expected) invisible += std::isinf(v) ? 1 : 0;
    EXPECT_GT(invisible, 0);
    EXPECT_LT(invisible, s.T * s.n_keys);
  }
}

// Varlen indexer: several sequences' keys in one buffer, each row scoring only its own
// (entries past them -inf), against the CPU reference and against separate GPU calls.
TEST_F(CudaAttentionTest, IndexerScoresVarlenMatchesCpuAndSeparateCalls) {
  const int64_t heads = 32, dim = 128, ratio = 1;
  // Keys per sequence (one empty) and rows (tokens) per sequence.
  const std::vector<int64_t> lens = {700, 0, 64, 1500, 5};
  const std::vector<int64_t> rows_of = {1, 1, 3, 1, 2};
  int64_t total = 0, n_max = 0, T = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    total += lens[i];
    n_max = std::max(n_max, lens[i]);
    T += rows_of[i];
  }
  const std::vector<float> q = Normal(T * heads * dim), w = Normal(T * heads),
                           keys = Normal(total * dim);
  std::vector<int32_t> offset(T), len(T), q_pos(T);
  int64_t row = 0, at = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    for (int64_t j = 0; j < rows_of[i]; ++j, ++row) {
      offset[row] = static_cast<int32_t>(at);
      len[row] = static_cast<int32_t>(lens[i]);
      // The last row of a sequence sees all its entries; earlier ones fewer.
      q_pos[row] = static_cast<int32_t>(std::max<int64_t>(lens[i] - rows_of[i] + j, 0));
    }
    at += lens[i];
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> expected(T * n_max);
  cpu_.IndexerScoresVarlen(q.data(), w.data(), T, heads, dim, keys.data(), offset.data(),
                           len.data(), n_max, q_pos.data(), ratio, scale, expected.data());
  float* out = PoisonedFloats(T * n_max);
  float* gq = ToGpu(q);
  float* gw = ToGpu(w);
  float* gk = ToGpu(keys);
  int32_t* gpos = ToGpu(q_pos);
  gpu_->IndexerScoresVarlen(gq, gw, T, heads, dim, gk, ToGpu(offset), ToGpu(len), n_max, gpos,
                            ratio, scale, out);
  const std::vector<float> got = FromGpu(out, T * n_max);
  EXPECT_TRUE(AllClose(got, expected, 1e-5, 2e-6 * std::max(1.0f, MaxAbs(expected))));
  // Entries past a row's own keys are exactly -inf; the empty sequence's row is all -inf.
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t g = len[t]; g < n_max; ++g) ASSERT_TRUE(std::isinf(got[t * n_max + g])) << t;
  }
  // Separate single-sequence GPU calls give the same scores on each row's own entries.
  row = 0;
  at = 0;
  for (size_t i = 0; i < lens.size(); ++i) {
    if (lens[i] > 0) {
      float* one = PoisonedFloats(rows_of[i] * lens[i]);
      gpu_->IndexerScores(gq + row * heads * dim, gw + row * heads, rows_of[i], heads, dim,
                          gk + at * dim, lens[i], gpos + row, ratio, scale, one);
      const std::vector<float> alone = FromGpu(one, rows_of[i] * lens[i]);
      for (int64_t j = 0; j < rows_of[i]; ++j) {
        const std::vector<float> a(alone.begin() + j * lens[i], alone.begin() + (j + 1) * lens[i]);
        const std::vector<float> v(got.begin() + (row + j) * n_max,
                                   got.begin() + (row + j) * n_max + lens[i]);
        EXPECT_TRUE(AllClose(v, a, 1e-6, 1e-6)) << "sequence " << i << " row " << j;
      }
    }
    row += rows_of[i];
    at += lens[i];
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

// Every token's output is bitwise the same alone, in batches and repeated in larger calls
// (cuda_attention_invariance.h), for the fp32 kernel on arbitrary fp32 rows.
TEST_F(SparseAttentionInvarianceTest, Fp32KernelBatchAndChunkInvariantBitwise) {
  for (const InvarianceCase& c : Cases(SmallOnly())) {
    CheckInvariance(c, [](const model::SparseAttentionArgs& a, int* err, cudaStream_t stream) {
      return kernels::SparseAttention(a, err, stream);
    });
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
