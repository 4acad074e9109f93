// kernels::SparseAttentionPrefill (FP8-mode prefill sparse attention: k_attention_prefill.cu,
// and k_attention_wgmma.cu at head_dim 512)
// against the CPU reference. q is rounded to bf16 on the host and the key/value rows are
// fake-quantised like the model's (FP8 block32 pow2 window rows, FP4 block16 e4m3 entries:
// exactly bf16), so the kernel's only rounding left is that of the probabilities P to bf16.
//
// Bounds (every case), with V = max |key/value value| of the case:
//   * max |gpu - cpu| <= kPAbsTolOfV * V + 1e-5 * max |cpu|. Each weight p_j is rounded to
//     bf16 (relative error <= 2^-9) and the denominator sums the same rounded weights, so
//     the normalised weights move by at most sum_j |w'_j - w_j| <= 2 * 2^-9 / (1 - 2^-9) in
//     all: |out' - out| <= 2^-8 V (+ fp32 score / accumulation error, ~1e-6 relative);
//   * relative L2 <= kRelL2Tol (the roundings are independent, ~2^-9 / sqrt(3) = 1.1e-3
//     expected; SparseAttentionMma's bf16_rounded test uses 4e-3), far below the effect of a
//     missed or extra row (~1 / sqrt(candidates) relative);
//   * a clean error word, and bitwise the same output when run twice (deterministic).
//
// Filter: --gtest_filter='CudaAttentionPrefillTest.*:AttnPrefill*.*'; the timing:
// --gtest_also_run_disabled_tests --gtest_filter='AttnPrefillBench.DISABLED_V41Prefill'.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_attn_prefill.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using model::FakeQuantKind;

constexpr double kPAbsTolOfV = 1.1 / 256.0;  // 2^-8 with 10% margin (see the top)
constexpr double kAbsTolOfMax = 1e-5;
constexpr double kRelL2Tol = 3e-3;

// The prefill kernel's shapes by default (64 heads, wider windows and selections), q rounded
// to bf16 (the kernel's numerics, so only P carries rounding).
struct Case : AttnCase {
  Case() {
    heads = 64, window = 32, n_select = 24;
    q_bf16 = true;
  }
};
using Seq = AttnSeq;
using Inputs = AttnInputs;

struct PrefillRun {
  std::vector<float> got;
  int error_word = 0;
};

class CudaAttentionPrefillTest : public CudaAttentionTestBase {
 protected:
  // Runs SparseAttentionPrefill on device args `g` (the case must be applicable).
  PrefillRun RunPrefill(const model::SparseAttentionArgs& g);
  PrefillRun RunPrefill(const Inputs& in) { return RunPrefill(GpuArgs(in)); }
  std::vector<float> RunCpu(const Inputs& in) {
    std::vector<float> expected(in.out_size());
    cpu_.SparseAttention(in.HostArgs(expected.data()));
    return expected;
  }
  // `run` against the CPU on `reference` (the bounds at the top).
  void ExpectClose(const PrefillRun& run, const Inputs& reference);
  // Runs the inputs twice, checks the bounds, a clean error word and identical bits.
  void CheckInputs(const Inputs& in, const std::string& name);
  void Check(const Case& c) { CheckInputs(MakeInputs(c), c.name); }
  // For the dispatch tests: the output of device args `g` from SparseAttentionPrefill and from
  // SparseAttentionMma(bf16_rounded) (asserted to differ, so that the backend's choice shows),
  // the latter's error word; then the backend is set to the FP8-activation mode outside
  // batch-invariant mode with the prefill threshold at 64.
  struct DispatchPaths {
    std::vector<float> direct, mma;
    int32_t* err = nullptr;
  };
  DispatchPaths PrepareDispatch(const model::SparseAttentionArgs& g, int64_t out_size);
  // CudaBackend::SparseAttention(g)'s output.
  std::vector<float> BackendOutput(const model::SparseAttentionArgs& g, int64_t out_size) {
    gpu_->SparseAttention(g);
    return FromGpu(g.out, out_size);
  }
};

CudaAttentionPrefillTest::DispatchPaths CudaAttentionPrefillTest::PrepareDispatch(
    const model::SparseAttentionArgs& g, int64_t out_size) {
  DispatchPaths paths;
  paths.direct = RunPrefill(g).got;
  paths.err = ToGpu(std::vector<int32_t>{0});
  EXPECT_EQ(kernels::SparseAttentionMma(g, reinterpret_cast<int*>(paths.err), gpu_->stream(),
                                        /*bf16_rounded=*/true),
            cudaSuccess);
  paths.mma = FromGpu(g.out, out_size);
  EXPECT_FALSE(BitExact(paths.direct, paths.mma));  // the two paths are distinguishable
  gpu_->set_fp8_activations(true);
  gpu_->set_batch_invariant(false);
  gpu_->set_attention_prefill_min_tokens(64);
  return paths;
}

PrefillRun CudaAttentionPrefillTest::RunPrefill(const model::SparseAttentionArgs& g) {
  EXPECT_TRUE(kernels::SparseAttentionPrefillApplicable(g));
  int32_t* err = ToGpu(std::vector<int32_t>{0});
  EXPECT_EQ(kernels::SparseAttentionPrefill(g, reinterpret_cast<int*>(err), gpu_->stream()),
            cudaSuccess);
  PrefillRun run;
  run.got = FromGpu(g.out, g.tokens * g.heads * g.head_dim);
  run.error_word = FromGpu(err, 1)[0];
  return run;
}

void CudaAttentionPrefillTest::ExpectClose(const PrefillRun& run, const Inputs& reference) {
  const std::vector<float> expected = RunCpu(reference);
  const double max_abs = MaxAbs(expected);
  EXPECT_TRUE(AllClose(run.got, expected, 0.0,
                       kPAbsTolOfV * reference.MaxRowValue() + kAbsTolOfMax * max_abs));
  if (max_abs > 0.0) {
    EXPECT_TRUE(RelL2Close(run.got, expected, kRelL2Tol));
  }
}

void CudaAttentionPrefillTest::CheckInputs(const Inputs& in, const std::string& name) {
  SCOPED_TRACE(::testing::Message()
               << name << ": T " << in.tokens << " heads " << in.heads << " d " << in.d
               << " n_window " << in.n_window << " n_comp " << in.n_comp << " n_select "
               << in.n_select << (in.varlen ? " varlen" : ""));
  const model::SparseAttentionArgs g = GpuArgs(in);
  const PrefillRun run = RunPrefill(g);
  EXPECT_EQ(run.error_word, 0);
  ExpectClose(run, in);
  const PrefillRun again = RunPrefill(g);
  EXPECT_EQ(again.error_word, run.error_word);
  EXPECT_TRUE(BitExact(again.got, run.got));
}

// Token counts 1, 7 and 200 (a causal window: later rows are masked by position) with
// window rows only, selected entries only, and both; single-sequence and varlen calls.
TEST_F(CudaAttentionPrefillTest, SmallShapeWindowSelectionBoth) {
  for (int64_t T : {1, 7, 200}) {
    Case c;
    c.seqs = {{T, T + 31, 40}}, c.name = "both T " + std::to_string(T);
    Check(c);
    c.varlen = false, c.name = "both plain T " + std::to_string(T);
    Check(c);
    c.varlen = true, c.n_select = 0, c.name = "window only T " + std::to_string(T);
    Check(c);
    c.seqs = {{T, 0, 90}}, c.n_select = 70, c.name = "selection only T " + std::to_string(T);
    Check(c);
  }
}

// Candidate counts around the 32-row chunk (1 to 5 chunks: the kernel's prologue, which
// stages chunks 0 and 1, its steady state and last chunks), window rows only and selected
// entries only.
TEST_F(CudaAttentionPrefillTest, ChunkCounts) {
  for (int64_t rows : {1, 31, 32, 33, 64, 65, 96, 97, 160}) {
    Case c;
    c.d = 128, c.window = rows, c.n_select = 0, c.stale_every = 0;
    c.seqs = {{2, rows + 1, 0}}, c.name = "window rows " + std::to_string(rows);
    Check(c);
    c.window = 8, c.n_select = rows, c.empty_every = 0;
    c.seqs = {{2, 0, rows + 3}}, c.name = "selected rows " + std::to_string(rows);
    Check(c);
  }
}

// The real V4.1 shape: 64 heads x 512, window 128, 512 selected slots.
TEST_F(CudaAttentionPrefillTest, V41Shape) {
  Case c;
  c.heads = 64, c.d = 512, c.window = 128, c.n_select = 512, c.empty_every = 0;
  c.seqs = {{1, 128, 2000}}, c.name = "V4.1 T 1";
  Check(c);
  c.seqs = {{7, 7 + 127, 900}}, c.name = "V4.1 T 7";
  Check(c);
  if (SmallOnly()) return;
  c.seqs = {{200, 200 + 127, 700}}, c.name = "V4.1 T 200";
  Check(c);
  c.seqs = {{3, 0, 700}}, c.name = "V4.1 selection only";
  Check(c);
  c.seqs = {{3, 140, 0}}, c.n_select = 0, c.name = "V4.1 window only";
  Check(c);
}

// Two head groups of 64 and head dims with 2, 6 and 10 n-tile pairs per warp.
TEST_F(CudaAttentionPrefillTest, OtherShapes) {
  Case c;
  c.seqs = {{9, 40, 50}}, c.heads = 128, c.d = 128, c.name = "128 heads x 128";
  Check(c);
  c.heads = 64, c.d = 192, c.n_select = 33, c.name = "d 192";
  Check(c);
  c.d = 320, c.window = 48, c.name = "d 320";
  Check(c);
}

// Two (and three) sequences in one call, with different token counts, window lengths and
// compressed lengths (one with none).
TEST_F(CudaAttentionPrefillTest, Varlen) {
  Case c;
  c.seqs = {{70, 100, 80}, {5, 20, 30}}, c.d = 128, c.window = 48, c.n_select = 37;
  c.name = "two sequences";
  Check(c);
  c.seqs = {{3, 40, 100}, {66, 70, 0}, {2, 9, 30}}, c.d = 512, c.name = "three sequences d 512";
  Check(c);
}

// -1 selection slots (half of them, and all of them), and tokens that attend nothing at
// all: the output is exactly 0 (only the sink in the denominator). Head dims 64 (mma.sync
// kernel) and 512 (wgmma kernel).
TEST_F(CudaAttentionPrefillTest, EmptySlotsAndNothingAttended) {
  for (int64_t d : {64, 512}) {
    SCOPED_TRACE("d " + std::to_string(d));
    Case c;
    c.d = d;
    c.seqs = {{5, 20, 50}}, c.empty_every = 2, c.name = "half empty";
    Check(c);
    c.seqs = {{5, 20, 0}}, c.name = "all slots empty";
    Check(c);
    c.seqs = {{3, 0, 0}}, c.name = "nothing attended";
    Inputs in = MakeInputs(c);
    PrefillRun run = RunPrefill(in);
    EXPECT_EQ(run.error_word, 0);
    for (float v : run.got) ASSERT_EQ(v, 0.0f);
    // Window rows that are all stale or in the future, and only empty slots.
    c.seqs = {{2, 40, 10}}, c.stale_every = 0, c.name = "all masked";
    in = MakeInputs(c);
    for (int32_t& pos : in.window_pos) pos = pos % 2 == 0 ? -1 : 5000;
    std::fill(in.selection.begin(), in.selection.end(), -1);
    run = RunPrefill(in);
    EXPECT_EQ(run.error_word, 0);
    for (float v : run.got) ASSERT_EQ(v, 0.0f);
    CheckInputs(in, c.name);
  }
}

// An id >= comp_len (n_comp without varlen) sets kErrSelectionOutOfRange and the row is
// not attended (the result is the reference with that slot empty), also when the row
// exists in the shared buffer (it belongs to the next sequence). Head dims 64 and 512.
TEST_F(CudaAttentionPrefillTest, OutOfRangeIdSetsErrorAndSkipsRow) {
  for (int64_t d : {64, 512}) {
    SCOPED_TRACE("d " + std::to_string(d));
    Case c;
    c.d = d;
    c.seqs = {{1, 20, 30}, {70, 90, 40}}, c.n_select = 16, c.empty_every = 0;
    c.name = "varlen id >= comp_len";
    Inputs in = MakeInputs(c);
    in.selection[5] = 30;                 // token 0: comp_len 30, n_comp 70
    in.selection[40 * 16 + 3] = 1 << 20;  // a token of the second sequence
    Inputs skipped = in;
    skipped.selection[5] = -1, skipped.selection[40 * 16 + 3] = -1;
    const PrefillRun run = RunPrefill(in);
    EXPECT_EQ(run.error_word, kernels::kErrSelectionOutOfRange);
    ExpectClose(run, skipped);
    c.seqs = {{3, 20, 30}}, c.varlen = false, c.name = "plain id == n_comp";
    in = MakeInputs(c);
    in.selection[2 * 16 + 9] = 30;
    EXPECT_EQ(RunPrefill(in).error_word, kernels::kErrSelectionOutOfRange);
  }
}

// A row that is not exactly bf16 is rounded to nearest and flagged kErrAttnKvNotBf16; the
// result then matches the reference on the rounded rows. Once a window row (chunk 0), once
// a selected entry behind 70 window rows (chunk 2: converted inside the chunk loop).
TEST_F(CudaAttentionPrefillTest, InexactRowIsFlaggedAndRounded) {
  for (int64_t d : {64, 512})  // the mma.sync and the wgmma kernel
    for (bool in_window : {true, false}) {
      Case c;
      c.stale_every = 0, c.d = d;
      if (in_window) {
        c.seqs = {{2, 20, 30}}, c.name = "inexact window row";
      } else {
        c.seqs = {{2, 70, 30}}, c.window = 70, c.name = "inexact entry in chunk 2";
      }
      SCOPED_TRACE(c.name + " d " + std::to_string(d));
      Inputs in = MakeInputs(c);
      // The window row at token 0's position (visible to both tokens), or the entry every
      // token selects in slot 1 (MakeInputs).
      float* row = in_window ? in.window_kv.data() + (in.n_window - 2) * in.d
                             : in.comp_kv.data() + (in.n_comp - 1) * in.d;
      for (int64_t i = 0; i < in.d; ++i) row[i] = 1.0f + 0.001f * i;
      Inputs rounded = in;
      float* rounded_row = in_window ? rounded.window_kv.data() + (in.n_window - 2) * in.d
                                     : rounded.comp_kv.data() + (in.n_comp - 1) * in.d;
      for (int64_t i = 0; i < in.d; ++i) rounded_row[i] = RoundBf16(rounded_row[i]);
      const PrefillRun run = RunPrefill(in);
      EXPECT_EQ(run.error_word, kernels::kErrAttnKvNotBf16);
      ExpectClose(run, rounded);
    }
}

// Sets the wgmma-kernel override for a scope (kernels_attn_prefill.h).
class WgmmaOverride {
 public:
  explicit WgmmaOverride(bool on) : on_(on) { kernels::SetAttnPrefillWgmmaOverride(&on_); }
  ~WgmmaOverride() { kernels::SetAttnPrefillWgmmaOverride(nullptr); }
  WgmmaOverride(const WgmmaOverride&) = delete;
  WgmmaOverride& operator=(const WgmmaOverride&) = delete;

 private:
  bool on_;
};

// head_dim 512 on both kernels (wgmma by default, mma.sync with the knob off): candidate
// counts around the 32-row chunk (prologue, steady state, last chunks), the V4.1 shape, two
// head groups; each within the CPU bounds, deterministic, and the two kernels'
// outputs distinguishable where a token has more than one 32-row chunk (their summation orders
// differ; within one chunk they can coincide: run 212 saw equal bits at 31 window rows).
TEST_F(CudaAttentionPrefillTest, HeadDim512BothKernels) {
  std::vector<Case> cases;
  std::vector<std::string> one_chunk;  // cases whose tokens attend at most 32 rows
  for (int64_t rows : {1, 31, 32, 33, 64, 65, 97}) {
    Case c;
    c.d = 512, c.window = rows, c.n_select = 0, c.stale_every = 0;
    c.seqs = {{2, rows + 1, 0}}, c.name = "window rows " + std::to_string(rows);
    cases.push_back(c);
    c.window = 8, c.n_select = rows, c.empty_every = 0;
    c.seqs = {{2, 0, rows + 3}}, c.name = "selected rows " + std::to_string(rows);
    cases.push_back(c);
    if (rows <= 32) {
      one_chunk.push_back("window rows " + std::to_string(rows));
      one_chunk.push_back("selected rows " + std::to_string(rows));
    }
  }
  Case v41;
  v41.d = 512, v41.window = 128, v41.n_select = 512, v41.empty_every = 0;
  v41.seqs = {{7, 7 + 127, 900}}, v41.name = "V4.1 T 7";
  cases.push_back(v41);
  Case groups;
  groups.d = 512, groups.heads = 128, groups.seqs = {{9, 40, 50}}, groups.name = "128 heads";
  cases.push_back(groups);
  for (const Case& c : cases) {
    const Inputs in = MakeInputs(c);
    std::vector<float> out[2];
    for (bool wgmma : {false, true}) {
      WgmmaOverride knob(wgmma);
      EXPECT_EQ(kernels::AttnPrefillUsesWgmma(GpuArgs(in)), wgmma);
      CheckInputs(in, c.name + (wgmma ? " wgmma" : " mma.sync"));
      out[wgmma ? 1 : 0] = RunPrefill(in).got;
    }
    // The knob reaches the other kernel: their summation orders differ, so do the bits.
    const bool single_chunk =
        std::find(one_chunk.begin(), one_chunk.end(), c.name) != one_chunk.end();
    if (MaxAbs(out[0]) > 0.0 && !single_chunk) {
      EXPECT_FALSE(BitExact(out[0], out[1])) << c.name;
    }
  }
  Case d64;
  const Inputs small = MakeInputs(d64);
  model::SparseAttentionArgs g = GpuArgs(small);
  EXPECT_FALSE(kernels::AttnPrefillUsesWgmma(g));  // other head dims: mma.sync
  EXPECT_EQ(kernels::SparseAttentionPrefillWgmma(g, nullptr, gpu_->stream()),
            cudaErrorInvalidValue);
  Inputs misaligned = MakeInputs(v41);
  g = GpuArgs(misaligned);
  g.q += 1;  // not 16-byte aligned: the mma.sync kernel (scalar loads) takes it
  EXPECT_FALSE(kernels::AttnPrefillUsesWgmma(g));
  EXPECT_EQ(kernels::SparseAttentionPrefillWgmma(g, nullptr, gpu_->stream()),
            cudaErrorInvalidValue);
}

// Forces the wgmma kernel's splits for a scope (kernels::SetAttnWgmmaSplits).
class SplitsOverride {
 public:
  explicit SplitsOverride(int splits) { kernels::SetAttnWgmmaSplits(splits); }
  ~SplitsOverride() { kernels::SetAttnWgmmaSplits(0); }
  SplitsOverride(const SplitsOverride&) = delete;
  SplitsOverride& operator=(const SplitsOverride&) = delete;
};

// Decode-shaped calls (one token per sequence) on the wgmma kernel with each token's chunks
// split over clusters of 1, 2, 4 and 8 blocks (and the launch's own choice): each within the
// CPU bounds and deterministic; splits > 1 merge in another order than one block (other bits).
// Cases: the V4.1 decode shape (128 window rows + 512 selected entries per token), candidate
// counts that leave blocks of the cluster without a chunk (1 and 33 rows), two head groups.
TEST_F(CudaAttentionPrefillTest, WgmmaDecodeSplits) {
  WgmmaOverride knob(true);
  std::vector<Case> cases;
  Case v41;
  v41.d = 512, v41.window = 128, v41.n_select = 512, v41.empty_every = 0;
  v41.seqs = {{1, 128, 900}, {1, 128, 2000}, {1, 60, 700}, {1, 128, 0}};
  v41.name = "V4.1 decode";
  cases.push_back(v41);
  Case few;
  few.d = 512, few.window = 32, few.n_select = 8;
  few.seqs = {{1, 1, 0}, {1, 25, 9}, {1, 0, 0}}, few.name = "few rows";
  cases.push_back(few);
  Case groups;
  groups.d = 512, groups.heads = 128, groups.window = 64, groups.n_select = 96;
  groups.seqs = {{1, 64, 300}, {2, 70, 200}}, groups.name = "128 heads";
  cases.push_back(groups);
  for (const Case& c : cases) {
    const Inputs in = MakeInputs(c);
    std::vector<float> one;
    for (int splits : {1, 2, 4, 8, 0}) {
      SplitsOverride forced(splits);
      CheckInputs(in, c.name + " splits " + std::to_string(splits));
      const std::vector<float> got = RunPrefill(in).got;
      if (splits == 1) one = got;
      if (splits == 2 && c.name == "V4.1 decode") {
        EXPECT_FALSE(BitExact(got, one)) << "the split path ran";
      }
    }
  }
}

// CudaBackend::SparseAttention takes the prefill kernel in the FP8-activation mode from
// attention_prefill_min_tokens_ tokens (bitwise the direct call), and SparseAttentionMma
// with bf16_rounded below it and in batch-invariant mode (bitwise that call).
TEST_F(CudaAttentionPrefillTest, BackendDispatch) {
  Case c;
  c.seqs = {{100, 100 + 31, 60}}, c.heads = 64, c.d = 128, c.name = "dispatch";
  const Inputs in = MakeInputs(c);
  const model::SparseAttentionArgs g = GpuArgs(in);
  const DispatchPaths paths = PrepareDispatch(g, in.out_size());
  const std::vector<float>& direct = paths.direct;
  const std::vector<float>& mma = paths.mma;
  auto backend_out = [&] { return BackendOutput(g, in.out_size()); };
  EXPECT_TRUE(BitExact(backend_out(), direct));
  gpu_->set_attention_prefill_min_tokens(101);
  EXPECT_TRUE(BitExact(backend_out(), mma));
  gpu_->set_attention_prefill_min_tokens(100);
  EXPECT_TRUE(BitExact(backend_out(), direct));
  gpu_->set_batch_invariant(true);
  EXPECT_TRUE(BitExact(backend_out(), mma));
  EXPECT_EQ(FromGpu(paths.err, 1)[0], 0);
}

// At head_dim 512 (the wgmma kernel) the backend takes SparseAttentionPrefill from
// attention_wgmma_min_tokens_ tokens (default 8: decode batches too), the prefill threshold
// when that is 0, and never in batch-invariant mode or with the prefill threshold at 0.
TEST_F(CudaAttentionPrefillTest, BackendDispatchWgmmaDecode) {
  Case c;
  c.d = 512, c.window = 64, c.n_select = 64, c.empty_every = 0;
  c.seqs = {{1, 64, 300}, {1, 40, 200}, {1, 64, 90}}, c.name = "decode";
  const Inputs in = MakeInputs(c);
  const model::SparseAttentionArgs g = GpuArgs(in);
  ASSERT_TRUE(kernels::AttnPrefillUsesWgmma(g));
  const DispatchPaths paths = PrepareDispatch(g, in.out_size());
  const std::vector<float>& direct = paths.direct;
  const std::vector<float>& mma = paths.mma;
  auto backend_out = [&] { return BackendOutput(g, in.out_size()); };
  EXPECT_TRUE(BitExact(backend_out(), mma));  // the default: from 8 tokens
  gpu_->set_attention_wgmma_min_tokens(4);
  EXPECT_TRUE(BitExact(backend_out(), mma));
  gpu_->set_attention_wgmma_min_tokens(3);
  EXPECT_TRUE(BitExact(backend_out(), direct));
  gpu_->set_attention_wgmma_min_tokens(0);  // the prefill threshold (64)
  EXPECT_TRUE(BitExact(backend_out(), mma));
  gpu_->set_attention_wgmma_min_tokens(1);
  gpu_->set_attention_prefill_min_tokens(0);  // never
  EXPECT_TRUE(BitExact(backend_out(), mma));
  gpu_->set_attention_prefill_min_tokens(64);
  gpu_->set_batch_invariant(true);
  EXPECT_TRUE(BitExact(backend_out(), mma));
  EXPECT_EQ(FromGpu(paths.err, 1)[0], 0);
}

// Device time per call at the V4.1 prefill shape (64 heads x 512, T = 4096, each token
// attending the 128 window rows ending at its position and 512 selected entries of 1024:
// 640 candidates), SparseAttentionPrefill against SparseAttentionMma(bf16_rounded). The
// outputs must agree to the P rounding of each (~1.1e-3 relative L2 each). Run with:
//   cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='AttnPrefillBench.*'
class AttnPrefillBench : public CudaVsCpuTest {};

TEST_F(AttnPrefillBench, DISABLED_V41Prefill) {
  const int64_t T = 4096, heads = 64, d = 512, window = 128, n_select = 512, n_comp = 1024;
  const int64_t n_window = T + window - 1;
  std::vector<int32_t> q_pos(T), window_pos(n_window);
  for (int64_t t = 0; t < T; ++t) q_pos[t] = static_cast<int32_t>(10000 + t);
  for (int64_t i = 0; i < n_window; ++i) {
    window_pos[i] = static_cast<int32_t>(10000 - (window - 1) + i);
  }
  std::vector<float> kv = Normal(n_window * d), comp = Normal(n_comp * d);
  cpu_.FakeQuant(kv.data(), n_window, d, d, FakeQuantKind::kFp8Block32Pow2);
  cpu_.FakeQuant(comp.data(), n_comp, d, d, FakeQuantKind::kFp4Block16E4m3);
  model::SparseAttentionArgs a;
  a.q = ToGpu(Normal(T * heads * d)), a.q_pos = ToGpu(q_pos), a.tokens = T, a.heads = heads;
  a.head_dim = d, a.window_kv = ToGpu(kv), a.window_pos = ToGpu(window_pos);
  a.n_window = n_window, a.window = window, a.comp_kv = ToGpu(comp), a.n_comp = n_comp;
  a.selection = ToGpu(Ints(T * n_select, 0, static_cast<int32_t>(n_comp - 1)));
  a.n_select = n_select, a.sinks = ToGpu(Normal(heads)), a.scale = 0.044f;
  a.out = PoisonedFloats(T * heads * d);
  int* err = reinterpret_cast<int*>(ToGpu(std::vector<int32_t>{0}));
  ASSERT_TRUE(kernels::SparseAttentionPrefillApplicable(a));
  const double flops = 4.0 * T * heads * (window + n_select) * d;
  auto time_prefill = [&](bool wgmma) {
    WgmmaOverride knob(wgmma);
    return DeviceMicrosPerCall(
        [&] { EXPECT_EQ(kernels::SparseAttentionPrefill(a, err, gpu_->stream()), cudaSuccess); });
  };
  const double sync_us = time_prefill(false);
  const std::vector<float> sync_out = FromGpu(a.out, T * heads * d);
  const double prefill_us = time_prefill(true);
  const std::vector<float> prefill = FromGpu(a.out, T * heads * d);
  const double mma_us = DeviceMicrosPerCall([&] {
    EXPECT_EQ(kernels::SparseAttentionMma(a, err, gpu_->stream(), /*bf16_rounded=*/true),
              cudaSuccess);
  });
  const std::vector<float> mma = FromGpu(a.out, T * heads * d);
  EXPECT_EQ(FromGpu(reinterpret_cast<int32_t*>(err), 1)[0], 0);
  EXPECT_TRUE(RelL2Close(prefill, mma, 6e-3));
  EXPECT_TRUE(RelL2Close(sync_out, mma, 6e-3));
  std::printf(
      "SparseAttention V4.1 prefill T=%lld x %lld candidates: wgmma kernel %.1f us (%.1f "
      "TFLOP/s), mma.sync prefill kernel %.1f us (%.1f TFLOP/s), mma bf16 %.1f us (%.1f "
      "TFLOP/s); wgmma vs mma.sync prefill %.2fx\n",
      static_cast<long long>(T), static_cast<long long>(window + n_select), prefill_us,
      flops / prefill_us / 1e6, sync_us, flops / sync_us / 1e6, mma_us, flops / mma_us / 1e6,
      sync_us / prefill_us);
  EXPECT_GT(prefill_us, 0.0);
}

// Which shapes the kernel takes (host-only).
TEST(AttnPrefillApplicable, Shapes) {
  alignas(16) static float rows[64];
  model::SparseAttentionArgs a;
  a.tokens = 4096, a.heads = 64, a.head_dim = 512, a.n_window = 1, a.window_kv = rows;
  a.n_comp = 1, a.comp_kv = rows, a.n_select = 512;
  EXPECT_TRUE(kernels::SparseAttentionPrefillApplicable(a));
  for (int64_t heads : {128, 256}) {
    a.heads = heads;
    EXPECT_TRUE(kernels::SparseAttentionPrefillApplicable(a)) << heads;
  }
  for (int64_t heads : {0, 16, 32, 48, 96}) {
    a.heads = heads;
    EXPECT_FALSE(kernels::SparseAttentionPrefillApplicable(a)) << heads;
  }
  a.heads = 64;
  for (int64_t d : {64, 128, 192, 448}) {
    a.head_dim = d;
    EXPECT_TRUE(kernels::SparseAttentionPrefillApplicable(a)) << d;
  }
  for (int64_t d : {0, 32, 96, 576, 1024}) {
    a.head_dim = d;
    EXPECT_FALSE(kernels::SparseAttentionPrefillApplicable(a)) << d;
  }
  a.head_dim = 512;
  a.n_select = -1;
  EXPECT_FALSE(kernels::SparseAttentionPrefillApplicable(a));
  a.n_select = 512;
  a.window_kv = rows + 1;  // 4 bytes off 16-byte alignment
  EXPECT_FALSE(kernels::SparseAttentionPrefillApplicable(a));
  a.n_window = 0;  // no window rows: the pointer is never read
  EXPECT_TRUE(kernels::SparseAttentionPrefillApplicable(a));
  a.comp_kv = rows + 2;
  EXPECT_FALSE(kernels::SparseAttentionPrefillApplicable(a));
  a.comp_kv = rows;
  a.out = rows + 1;  // float2 stores need 8-byte alignment
  EXPECT_FALSE(kernels::SparseAttentionPrefillApplicable(a));
  a.out = rows + 2;
  EXPECT_TRUE(kernels::SparseAttentionPrefillApplicable(a));
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
