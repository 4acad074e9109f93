// kernels::SparseAttentionMma (tensor-core sparse sink attention, k_attention_mma.cu)
// against the CPU reference, with key/value rows fake-quantised like the model does
// (FP8 block32 pow2 for window rows, FP4 block16 e4m3 for compressed entries): exactly
// bf16, which the kernel relies on and checks (kErrAttnKvNotBf16).
//
// Bound (every case): max |gpu - cpu| <= 1e-5 * max |cpu| and relative L2 <= 1e-5. Expected
// error: q and P split into three bf16 terms are exact to ~2^-25 relative, every product is
// exact, the sums are fp32 (truncating tensor-core adds kept to a few per rounding), so
// ~1e-6 of max |out| is typical; the CPU reference sums in double.
//
// Filters: --gtest_filter='CudaAttentionMmaTest.*:AttnMma*.*:SparseAttentionInvarianceTest.*';
// the benchmark:
// --gtest_also_run_disabled_tests --gtest_filter='AttnMmaBench.DISABLED_V41Shapes'.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention_invariance.h"
#include "backend/cuda/cuda_attention_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using model::FakeQuantKind;

constexpr double kAbsTolOfMax = 1e-5;  // max |gpu - cpu| <= this * max |cpu|
constexpr double kRelL2Tol = 1e-5;

using MmaSeq = AttnSeq;
using MmaCase = AttnCase;
using MmaInputs = AttnInputs;

// What one GPU run produced.
struct MmaRun {
  std::vector<float> got;
  int error_word = 0;
};

class CudaAttentionMmaTest : public CudaAttentionTestBase {
 protected:
  // Runs SparseAttentionMma on `in` (the case must be applicable).
  MmaRun RunMma(const MmaInputs& in, bool bf16_rounded = false);
  std::vector<float> RunCpu(const MmaInputs& in) {
    std::vector<float> expected(in.out_size());
    cpu_.SparseAttention(in.HostArgs(expected.data()));
    return expected;
  }
  // Runs the case on both sides and checks the bounds and a clean error word.
  void Check(const MmaCase& c);
  void CheckInputs(const MmaInputs& in, const std::string& name);
};

MmaRun CudaAttentionMmaTest::RunMma(const MmaInputs& in, bool bf16_rounded) {
  const model::SparseAttentionArgs g = GpuArgs(in);
  EXPECT_TRUE(kernels::SparseAttentionMmaApplicable(g));
  int32_t* err = ToGpu(std::vector<int32_t>{0});
  EXPECT_EQ(
      kernels::SparseAttentionMma(g, reinterpret_cast<int*>(err), gpu_->stream(), bf16_rounded),
      cudaSuccess);
  MmaRun run;
  run.got = FromGpu(g.out, in.out_size());
  run.error_word = FromGpu(err, 1)[0];
  return run;
}

void CudaAttentionMmaTest::CheckInputs(const MmaInputs& in, const std::string& name) {
  SCOPED_TRACE(::testing::Message()
               << name << ": T " << in.tokens << " heads " << in.heads << " d " << in.d
               << " n_window " << in.n_window << " n_comp " << in.n_comp << " n_select "
               << in.n_select << (in.varlen ? " varlen" : ""));
  const std::vector<float> expected = RunCpu(in);
  const MmaRun run = RunMma(in);
  EXPECT_EQ(run.error_word, 0);
  const double max_abs = MaxAbs(expected);
  EXPECT_TRUE(AllClose(run.got, expected, 0.0, kAbsTolOfMax * max_abs));
  if (max_abs > 0.0) {
    EXPECT_TRUE(RelL2Close(run.got, expected, kRelL2Tol));
  }
}

void CudaAttentionMmaTest::Check(const MmaCase& c) { CheckInputs(MakeInputs(c), c.name); }

// The fake-quantised rows are exactly bf16 (the kernel's assumption, stated here on the
// host; no device needed): FP8 e4m3 x 2^k has 4 significant bits, FP4 e2m1 x e4m3 scale at
// most 6, bf16 has 8.
TEST(AttnMmaAssumption, FakeQuantisedRowsAreExactBf16) {
  cpu::CpuBackend cpu;
  std::mt19937_64 rng(7);
  for (FakeQuantKind kind : {FakeQuantKind::kFp8Block32Pow2, FakeQuantKind::kFp4Block16E4m3}) {
    for (float stddev : {1e-3f, 1.0f, 300.0f}) {
      std::normal_distribution<float> normal(0.0f, stddev);
      const int64_t rows = 64, d = 512;
      std::vector<float> x(rows * d);
      for (float& v : x) v = normal(rng);
      cpu.FakeQuant(x.data(), rows, d, d, kind);
      for (float v : x) {
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        ASSERT_EQ(bits & 0xFFFFu, 0u) << v << " stddev " << stddev;
      }
    }
  }
}

// Decode: one token, single-sequence (null varlen arrays) and varlen calls; the V4.1 shape
// splits the candidates over a cluster of 8 blocks.
TEST_F(CudaAttentionMmaTest, DecodeSingleSequence) {
  std::vector<MmaCase> cases(4);
  cases[0].seqs = {{1, 20, 50}}, cases[0].varlen = false, cases[0].name = "small plain";
  cases[1].seqs = {{1, 20, 50}}, cases[1].name = "small varlen";
  cases[2].seqs = {{1, 33, 70}}, cases[2].heads = 32, cases[2].d = 128, cases[2].n_select = 40;
  cases[2].window = 32, cases[2].name = "32 heads x 128";
  cases[3].seqs = {{1, 140, 1000}}, cases[3].heads = 48, cases[3].d = 192;
  cases[3].window = 128, cases[3].n_select = 100, cases[3].name = "odd n-tiles per warp";
  if (!SmallOnly()) {
    MmaCase v41;
    v41.seqs = {{1, 128, 2000}}, v41.heads = 64, v41.d = 512, v41.window = 128;
    v41.n_select = 512, v41.name = "V4.1 decode";
    cases.push_back(v41);
    v41.varlen = false, v41.name = "V4.1 decode plain";
    cases.push_back(v41);
  }
  for (const MmaCase& c : cases) Check(c);
}

// Prefill: 64 (and 300) tokens of one sequence whose window rows end at the newest token,
// so each token sees only rows in (p - window, p] (a causal window; later rows are masked).
TEST_F(CudaAttentionMmaTest, PrefillCausalWindow) {
  MmaCase c;
  c.seqs = {{64, 64 + 31, 40}}, c.window = 32, c.n_select = 24, c.name = "T 64 d 64";
  Check(c);
  c.heads = 32, c.d = 256, c.name = "T 64 d 256";
  Check(c);
  c.varlen = false, c.name = "T 64 d 256 plain";
  Check(c);
  // Enough (token, head group) blocks that the candidates are not split (one block each).
  c.seqs = {{300, 300 + 31, 40}}, c.heads = 16, c.d = 64, c.varlen = true;
  c.name = "T 300 unsplit";
  Check(c);
}

// Three sequences in one call with different token counts, window lengths (one longer
// than the window) and compressed lengths (one with none).
TEST_F(CudaAttentionMmaTest, VarlenThreeSequences) {
  MmaCase c;
  c.seqs = {{1, 40, 100}, {5, 70, 0}, {3, 9, 30}}, c.heads = 32, c.d = 128, c.window = 48;
  c.n_select = 37, c.name = "3 sequences d 128";
  Check(c);
  c.d = 512, c.heads = 16, c.name = "3 sequences d 512";
  Check(c);
  c.seqs = {{2, 0, 12}, {1, 17, 1}, {4, 128, 300}}, c.d = 320, c.name = "no window rows";
  Check(c);
}

// `in` with q rounded to bf16 (what the one-term kernel multiplies), for the CPU reference.
MmaInputs WithBf16RoundedQ(MmaInputs in) {
  for (float& v : in.q) v = RoundBf16(v);
  return in;
}

// bf16_rounded (FP8-activation mode): q and P rounded to bf16. Close to the CPU on bf16-
// rounded q (the P rounding adds ~2^-9 relative per weight), measurably not the exact
// three-term result, and still bitwise batch-invariant (a token alone = the same token in
// a call of three sequences).
TEST_F(CudaAttentionMmaTest, Bf16RoundedMode) {
  MmaCase c;
  c.seqs = {{1, 128, 300}, {4, 70, 90}, {2, 40, 0}}, c.heads = 64, c.d = 512, c.window = 128;
  c.n_select = 64, c.name = "bf16 rounded";
  MmaInputs in = MakeInputs(c);
  const std::vector<float> expected = RunCpu(WithBf16RoundedQ(in));
  const MmaRun fast = RunMma(in, /*bf16_rounded=*/true);
  EXPECT_EQ(fast.error_word, 0);
  EXPECT_TRUE(RelL2Close(fast.got, expected, 4e-3));
  const MmaRun exact = RunMma(in);
  EXPECT_FALSE(RelL2Close(fast.got, exact.got, 1e-5));
  // The first sequence's token alone (same shared buffers, its own ranges).
  MmaInputs alone = in;
  const int64_t per_token = c.heads * c.d;
  alone.q.resize(per_token);
  alone.tokens = 1;
  alone.q_pos.resize(1), alone.window_start.resize(1), alone.window_len.resize(1);
  alone.comp_offset.resize(1), alone.comp_len.resize(1);
  alone.selection.resize(c.n_select);
  const MmaRun single = RunMma(alone, /*bf16_rounded=*/true);
  EXPECT_TRUE(
      BitExact(single.got, std::vector<float>(fast.got.begin(), fast.got.begin() + per_token)));
}

// The one-term kernel with 1 to 4 chunks of rows in flight: bitwise the same (the stage count
// only changes when copies are issued), across V4.1 decode shapes with up to 40 chunks per
// token and an 8-token prefill block; and the default (2 stages here: 224 blocks) likewise.
TEST_F(CudaAttentionMmaTest, OneTermStagesBitwiseEqual) {
  MmaCase c;
  c.heads = 64, c.d = 512, c.window = 128, c.n_select = 512, c.name = "stages";
  for (int64_t i = 0; i < 6; ++i) c.seqs.push_back({1, 1 + (41 * i) % 128, 1 + (331 * i) % 900});
  c.seqs.push_back({8, 200, 600});
  const MmaInputs in = MakeInputs(c);
  std::vector<std::vector<float>> outs;
  for (int stages : {1, 2, 3, 4, 0}) {
    kernels::SetSparseAttentionMmaStages(stages);
    const MmaRun run = RunMma(in, /*bf16_rounded=*/true);
    EXPECT_EQ(run.error_word, 0) << stages << " stages";
    outs.push_back(run.got);
  }
  kernels::SetSparseAttentionMmaStages(0);
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_TRUE(BitExact(outs[0], outs[i])) << i;
  EXPECT_TRUE(RelL2Close(outs[1], RunCpu(WithBf16RoundedQ(in)), 4e-3));  // as in Bf16RoundedMode
}

// Empty selection slots: most slots -1, every slot -1, and nothing attended at all (only
// the sink: the output is exactly 0).
TEST_F(CudaAttentionMmaTest, EmptySelectionSlots) {
  MmaCase c;
  c.seqs = {{3, 20, 50}}, c.empty_every = 2, c.name = "half empty";
  Check(c);
  c.seqs = {{3, 20, 0}}, c.name = "all empty (no entries)";
  Check(c);
  c.seqs = {{2, 0, 0}}, c.name = "nothing attended";
  MmaInputs in = MakeInputs(c);
  const MmaRun run = RunMma(in);
  EXPECT_EQ(run.error_word, 0);
  for (float v : run.got) ASSERT_EQ(v, 0.0f);
  CheckInputs(in, c.name);
}

// A token whose only visible window row is its own (the others are stale or in its
// future), with and without selected entries.
TEST_F(CudaAttentionMmaTest, OnlyOwnWindowRow) {
  MmaCase c;
  c.seqs = {{1, 30, 20}}, c.stale_every = 0, c.name = "own row only";
  MmaInputs in = MakeInputs(c);
  const int32_t p = in.q_pos[0];
  for (int32_t& pos : in.window_pos) pos = pos == p ? p : (pos < p ? -1 : pos);
  in.window_pos[3] = p + 5;                               // future
  in.window_pos[4] = static_cast<int32_t>(p - c.window);  // just out of the window
  CheckInputs(in, c.name);
  std::fill(in.selection.begin(), in.selection.end(), -1);
  CheckInputs(in, "own row only, no entries");
}

// Sinks that dominate or vanish, and peaky scores (q with a large spread).
TEST_F(CudaAttentionMmaTest, SinksAndPeakyScores) {
  MmaCase c;
  c.seqs = {{4, 40, 90}}, c.heads = 32, c.d = 128, c.n_select = 33;
  c.sink_std = 8.0f, c.name = "large sinks";
  Check(c);
  c.sink_std = 2.0f, c.q_std = 4.0f, c.name = "peaky scores";
  Check(c);
}

// An id >= comp_len (n_comp without varlen) sets kErrSelectionOutOfRange, also when the
// row exists in the shared buffer (it belongs to the next sequence) and in a split call.
TEST_F(CudaAttentionMmaTest, OutOfRangeIdSetsErrorWord) {
  MmaCase c;
  c.seqs = {{1, 20, 30}, {2, 10, 40}}, c.n_select = 16, c.name = "varlen id >= comp_len";
  MmaInputs in = MakeInputs(c);
  in.selection[5] = 30;  // token 0: comp_len 30, n_comp 70
  EXPECT_EQ(RunMma(in).error_word & kernels::kErrSelectionOutOfRange,
            kernels::kErrSelectionOutOfRange);
  MmaCase d;
  d.seqs = {{1, 128, 100}}, d.heads = 64, d.d = 512, d.window = 128, d.n_select = 512;
  d.varlen = false;
  MmaInputs one = MakeInputs(d);
  one.selection[509] = 100;  // == n_comp, in the last split
  EXPECT_EQ(RunMma(one).error_word, kernels::kErrSelectionOutOfRange);
}

// Through the backend (whichever kernel it dispatches to): Synchronize returns the error.
TEST_F(CudaAttentionMmaTest, OutOfRangeIdBecomesStatus) {
  MmaCase c;
  c.seqs = {{1, 128, 100}}, c.heads = 64, c.d = 512, c.window = 128, c.n_select = 64;
  MmaInputs in = MakeInputs(c);
  in.selection[7] = 100;
  const model::SparseAttentionArgs g = GpuArgs(in);
  ASSERT_TRUE(kernels::SparseAttentionMmaApplicable(g));
  gpu_->SparseAttention(g);
  const base::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument) << s;
  gpu_.reset();  // skip TearDown's status check: this backend failed on purpose
}

// A row that is not exactly bf16 is rounded to nearest and flagged kErrAttnKvNotBf16; the
// result then matches the reference on the rounded rows.
TEST_F(CudaAttentionMmaTest, InexactRowIsFlaggedAndRounded) {
  MmaCase c;
  c.seqs = {{2, 20, 30}}, c.stale_every = 0, c.name = "inexact window row";
  MmaInputs in = MakeInputs(c);
  const int64_t row = in.n_window - 2;  // position of token 0: visible to both tokens
  for (int64_t i = 0; i < in.d; ++i) in.window_kv[row * in.d + i] = 1.0f + 0.001f * i;
  const MmaRun run = RunMma(in);
  EXPECT_EQ(run.error_word, kernels::kErrAttnKvNotBf16);
  MmaInputs rounded = in;
  for (int64_t i = 0; i < in.d; ++i) {
    float& v = rounded.window_kv[row * in.d + i];
    v = RoundBf16(v);
  }
  const std::vector<float> expected = RunCpu(rounded);
  EXPECT_TRUE(AllClose(run.got, expected, 0.0, kAbsTolOfMax * MaxAbs(expected)));
  EXPECT_TRUE(RelL2Close(run.got, expected, kRelL2Tol));
}

// V4.1-Flash shapes: 64 heads x 512, window 128, 512 selected. Decode batch T = 32 (32
// sequences of one token, varied window / compressed lengths) and a T = 256 prefill.
TEST_F(CudaAttentionMmaTest, V41Shapes) {
  if (SmallOnly()) GTEST_SKIP() << "V4.1-size case";
  MmaCase decode;
  decode.heads = 64, decode.d = 512, decode.window = 128, decode.n_select = 512;
  for (int64_t i = 0; i < 32; ++i) {
    decode.seqs.push_back({1, 1 + (37 * i) % 128, 1 + (97 * i) % 1500});
  }
  decode.name = "V4.1 decode T 32";
  Check(decode);
  MmaCase prefill = decode;
  prefill.seqs = {{256, 256 + 127, 700}}, prefill.name = "V4.1 prefill T 256";
  Check(prefill);
}

// Which shapes the kernel takes (host-only).
TEST(AttnMmaApplicable, Shapes) {
  alignas(16) static float rows[64];
  model::SparseAttentionArgs a;
  a.tokens = 4, a.heads = 64, a.head_dim = 512, a.n_window = 1, a.window_kv = rows;
  a.n_comp = 1, a.comp_kv = rows, a.n_select = 512;
  EXPECT_TRUE(kernels::SparseAttentionMmaApplicable(a));
  for (int64_t heads : {16, 32, 128}) {
    a.heads = heads;
    EXPECT_TRUE(kernels::SparseAttentionMmaApplicable(a)) << heads;
  }
  for (int64_t heads : {0, 8, 24, 65}) {
    a.heads = heads;
    EXPECT_FALSE(kernels::SparseAttentionMmaApplicable(a)) << heads;
  }
  a.heads = 64;
  for (int64_t d : {64, 128, 192, 448}) {
    a.head_dim = d;
    EXPECT_TRUE(kernels::SparseAttentionMmaApplicable(a)) << d;
  }
  for (int64_t d : {0, 32, 96, 576, 1024}) {
    a.head_dim = d;
    EXPECT_FALSE(kernels::SparseAttentionMmaApplicable(a)) << d;
  }
  a.head_dim = 512;
  a.window_kv = rows + 1;  // 4 bytes off 16-byte alignment
  EXPECT_FALSE(kernels::SparseAttentionMmaApplicable(a));
  a.n_window = 0;  // no window rows: the pointer is never read
  EXPECT_TRUE(kernels::SparseAttentionMmaApplicable(a));
  a.comp_kv = rows + 2;
  EXPECT_FALSE(kernels::SparseAttentionMmaApplicable(a));
}

// Device time per call at V4.1 shapes (64 heads x 512, 128 window rows + 512 selected
// entries = 640 per token, all attended): T = 1 and 32 (decode, one sequence per token) and
// 4096 (prefill, sliding window), the tensor-core kernel against kernels::SparseAttention.
// TFLOP/s counts the model's 4 * T * heads * 640 * head_dim FLOPs (not the 3 bf16 terms).
class AttnMmaBench : public CudaVsCpuTest {
 protected:
  // Microseconds per call of `call` on gpu_'s stream (2 warm-up calls, `iters` timed).
  double MicrosPerCall(const std::function<cudaError_t()>& call, int iters) {
    for (int i = 0; i < 2; ++i) EXPECT_EQ(call(), cudaSuccess);
    cudaEvent_t start = nullptr, stop = nullptr;
    EXPECT_EQ(cudaEventCreate(&start), cudaSuccess);
    EXPECT_EQ(cudaEventCreate(&stop), cudaSuccess);
    cudaEventRecord(start, gpu_->stream());
    for (int i = 0; i < iters; ++i) call();
    cudaEventRecord(stop, gpu_->stream());
    EXPECT_EQ(cudaEventSynchronize(stop), cudaSuccess);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return 1000.0 * ms / iters;
  }
};

TEST_F(AttnMmaBench, DISABLED_V41Shapes) {
  const int64_t heads = 64, d = 512, window = 128, n_select = 512;
  for (int64_t T : {1, 32, 4096}) {
    const bool prefill = T > 32;
    // Decode: token t owns window rows [128 t, 128 t + 128) and 2048 compressed entries.
    // Prefill: rows [t, t + 128) of one sliding window, 1024 compressed entries shared.
    const int64_t n_window = prefill ? T + window - 1 : T * window;
    const int64_t comp_per = prefill ? 1024 : 2048, n_comp = prefill ? comp_per : T * comp_per;
    std::vector<int32_t> q_pos(T), window_pos(n_window), start(T), len(T, window), offset(T),
        clen(T, static_cast<int32_t>(comp_per));
    for (int64_t t = 0; t < T; ++t) {
      q_pos[t] = static_cast<int32_t>(10000 + (prefill ? t : 0));
      start[t] = static_cast<int32_t>(prefill ? t : t * window);
      offset[t] = static_cast<int32_t>(prefill ? 0 : t * comp_per);
    }
    for (int64_t i = 0; i < n_window; ++i) {
      window_pos[i] = prefill ? static_cast<int32_t>(10000 - (window - 1) + i)
                              : static_cast<int32_t>(10000 - window + 1 + i % window);
    }
    std::vector<float> kv = Normal(n_window * d), comp = Normal(n_comp * d);
    cpu_.FakeQuant(kv.data(), n_window, d, d, FakeQuantKind::kFp8Block32Pow2);
    cpu_.FakeQuant(comp.data(), n_comp, d, d, FakeQuantKind::kFp4Block16E4m3);
    model::SparseAttentionArgs a;
    a.q = ToGpu(Normal(T * heads * d)), a.q_pos = ToGpu(q_pos), a.tokens = T, a.heads = heads;
    a.head_dim = d, a.window_kv = ToGpu(kv), a.window_pos = ToGpu(window_pos);
    a.n_window = n_window, a.window = window, a.comp_kv = ToGpu(comp), a.n_comp = n_comp;
    a.selection = ToGpu(Ints(T * n_select, 0, static_cast<int32_t>(comp_per - 1)));
    a.n_select = n_select, a.sinks = ToGpu(Normal(heads)), a.scale = 0.044f;
    a.window_start = ToGpu(start), a.window_len = ToGpu(len);
    a.comp_offset = ToGpu(offset), a.comp_len = ToGpu(clen);
    a.out = PoisonedFloats(T * heads * d);
    int* err = reinterpret_cast<int*>(ToGpu(std::vector<int32_t>{0}));
    ASSERT_TRUE(kernels::SparseAttentionMmaApplicable(a));
    const int iters = prefill ? 3 : 100;
    const double mma_us =
        MicrosPerCall([&] { return kernels::SparseAttentionMma(a, err, gpu_->stream()); }, iters);
    const double old_us =
        MicrosPerCall([&] { return kernels::SparseAttention(a, err, gpu_->stream()); }, iters);
    EXPECT_EQ(FromGpu(reinterpret_cast<int32_t*>(err), 1)[0], 0);
    const double flops = 4.0 * T * heads * (window + n_select) * d;
    std::printf(
        "SparseAttention V4.1 T=%lld x %lld entries: mma %.1f us (%.1f TFLOP/s), fp32 %.1f us "
        "(%.1f TFLOP/s), speed-up %.1fx\n",
        static_cast<long long>(T), static_cast<long long>(window + n_select), mma_us,
        flops / mma_us / 1e6, old_us, flops / old_us / 1e6, old_us / mma_us);
    EXPECT_GT(mma_us, 0.0);
  }
}

// Every token's output is bitwise the same alone, in batches and repeated in larger calls
// (cuda_attention_invariance.h), for the tensor-core kernel on fake-quantised rows: three
// terms, and one term (FP8 mode: small calls keep 3 chunks of rows in flight, larger ones 2,
// so the batches also compare the two stage counts bitwise).
TEST_F(SparseAttentionInvarianceTest, MmaKernelBatchAndChunkInvariantBitwise) {
  for (const bool one_term : {false, true}) {
    for (InvarianceCase c : Cases(SmallOnly())) {
      c.bf16_rows = true;
      if (one_term) c.accuracy = 3e-2;  // q and P rounded to bf16 (~2^-9 each)
      SCOPED_TRACE(one_term ? "one term" : "three terms");
      CheckInvariance(
          c, [one_term](const model::SparseAttentionArgs& a, int* err, cudaStream_t stream) {
            EXPECT_TRUE(kernels::SparseAttentionMmaApplicable(a));
            return kernels::SparseAttentionMma(a, err, stream, one_term);
          });
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
