// FP8-activation mode, decode: dense FP8 Linears with <= 32 token rows (kStreamMaxTokens) as
// weight streaming on bf16 tensor cores (kernels_stream.h).
//
// Numerics: x is fake-quantised per 32 values (kFp8Block32Pow2) and stored as exact bf16; an
// e4m3 weight byte is placed as bf16 bits (value * 2^-120) and one bf16x2 multiply by
// 2^(S - 7) (S the ue8m0 byte of its 32 x 32 block; two multiplies when S > 134) gives value
// * 2^(S - 127) exactly. Each output is one fp32 mma.sync m16n8k16 sum over K.
//
// Structure. A warp owns 16 weight rows (lane g = lane / 4 reads rows g and g + 8) and a
// range of K in steps of 128 values: per step lane c = lane % 4 loads 32 bytes of each of
// its two rows (columns step*128 + 32c .. +31: one scale block) straight from global memory
// into registers (no shared memory, no barriers), the next step's loads in flight while the
// current step is converted. e4m3 word m of the 32 bytes (values 4m .. 4m+3) gives the two
// A registers of MMA m: pair (4m, 4m+2) as logical k (2c, 2c+1) and pair (4m+1, 4m+3) as
// (2c+8, 2c+9). The sum over k does not depend on which physical column a logical k is, as
// long as the B fragment uses the same map: the activations are stored in that "fragment
// order" by QuantizeStreamKernel, so each lane's B registers for two MMAs are one 16-byte
// load (L1/L2 hits: x is at most 32 x K bf16). For weights with few rows, `split` warps of a
// block share 16 rows, each taking a contiguous range of the K steps; their sums are added in
// warp order through shared memory. The split depends on the weight's shape only.
//
// Token tiles: NT = ceil(T / 8) MMA columns of 8 tokens (1..4; T 17..24 take 3). NT = 1, 2
// double-buffer a step's weights AND activations in registers (StepRegs). NT = 3, 4 would
// need 16 * NT registers for a step's activations, so they double-buffer the weights only
// (WeightRegs) and load the activations within the step, unit by unit, one unit ahead
// (ComputeStepJit). Every NT issues a tile's MMAs in the same order (steps ascending, m =
// 0..7 within a step), so a token's bits do not depend on NT, i.e. on T. Registers at
// __launch_bounds__(256, 2) (ptxas, CUDA 13.0, sm_90a, session 13): NT 1: 104, 2: 128 (36
// bytes spill stores; 80 before the weight preload moved out of AccumulateRows), 3: 113, 4:
// 124 (no spills); NT 1 fused: 112 (no spills, 4 KiB static + T * K * 2 dynamic smem).
//
// Fused quantisation (T <= LinearStreamFuseMaxTokens, default 0 = off: no decode-step gain in
// run 118, see kernels_stream.h; see the section below): one launch instead of
// QuantizeStreamKernel + LinearStreamKernel. Each block, after its weight preload and the PDL
// wait, quantises all of x into shared memory (T * K * 2 bytes: 10 KiB at T = 1, K = 5120)
// and reads its B units from there; bitwise the two-kernel result.
//
// Roofline (per warp step: 2 KB of weight, 8 MMAs per 8 tokens): ~4.5 integer / bf16 ops per
// weight pair, so ~170 warp instructions per 2 KB (~12 bytes per instruction): 4.5 TB/s needs
// ~1.4 of the 4 instructions per cycle of an SM. V4.1-Flash decode (one layer, B = 1): wq_a
// 6.6 MB, wq_b 42 MB, wkv 2.6 MB, wo_a 34 MB, wo_b 42 MB, shared experts 35 MB, indexer wq_b
// 5.2 MB: ~170 MB, ~38 us at 4.5 TB/s.
// MEASURED (H200, DISABLED_Bench, run 54; LinearFp8 in brackets): T 1 wq_a 6.6 us (9.3), wq_b
// 15.1 (16.6; 2.8 TB/s), wkv 6.4 (9.7), wo_b 18.5 (20.1; 2.3 TB/s), shared w1 / w2 8.5 / 8.3
// (11.3 / 11.6), indexer wq_b 7.8 (12.6), engram wkv 46.2 (51.9; 3.4 TB/s); T 16 within ~20%.
// ncu (run 55): latency-bound (long-scoreboard stalls 2.4-2.9 per issue, ~15% of warp slots
// active, 34-45% issue); rings of 3 or 4 steps in flight were slower (runs 56, 59).
// Tried and removed (session 24, runs 201-204, code in commit c7c8a4d): the same Linears on e4m3
// wgmma (weight bytes as loaded in the A fragments, 8-byte loads per row and k32 step, e4m3
// activations bulk-copied into shared memory, one fp32 promotion per 32-value scale block, K split
// over thread-block clusters). Correct, but slower nearly everywhere: wo_b T=1 / 32 24.7 / 40.5 us
// against 17.8 / 29.5 here, wq_b even (15.3 / 23.5 against 15.0 / 23.9); decode B=32 5.32 against
// 4.93 ms. ncu: clusters placed unevenly (0-5 blocks an SM), promotion scale reads and the cluster
// reduction on the critical path. See docs/gpu-decode.md, "Update after session 24".
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <cstdlib>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_fp8.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;
using stream_fp8::ScaleFactors;
using stream_fp8::StepFactors;
using stream_fp8::WeightFragment;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStepK = 128;  // K values per warp step: 4 lanes x 32
constexpr int kWarpRows = 16;
// LinearStreamKernel<1, true>'s static shared memory (the split's partial sums). Without the
// opt-in a block may hold 48 KiB of shared memory in all, static included: the default
// dynamic limit of a kernel is 48 KiB minus its static bytes.
constexpr int kFusedStaticSmemBytes = kWarps * 4 * 32 * static_cast<int>(sizeof(float));
constexpr int kSmemNoOptIn = 48 * 1024;
// Blocks resident at once on an H200 (132 SMs x 2 blocks of the one-tile kernel).
constexpr int64_t kWaveBlocks = 264;

// 8-token MMA columns for T tokens (1 <= T <= kStreamMaxTokens): ceil(T / 8), so T = 17..24
// takes 3 tiles and 25..32 four.
int TokenTiles(int64_t T) { return static_cast<int>((T + 7) / 8); }

// Programmatic dependent launch (pdl.cuh): both kernels go through pdl::Launch. The
// quantisation kernel waits for its predecessor, then lets LinearStreamKernel start; the
// stream kernel issues its first weight loads (weights are never written by a kernel, the one
// read allowed before the wait), then waits for the quantisation grid to complete (and its
// writes to be visible) before it reads x, then lets its own successor start.

// --- activations in fragment order ------------------------------------------------------
//
// For K step st, 16-byte unit q (0..3) of a 32-value chunk, token tile nt and lane
// (n, c) = (token nt*8 + n, chunk st*4 + c): the uint4 at ((st*4 + q) * NT + nt) * 32 + 4n + c.
// Inside a chunk, bf16x2 word j holds values (4(j/2) + j%2, 4(j/2) + j%2 + 2) (low, high):
// the pairs the weight conversion makes of e4m3 word j/2. Unit q = words 4q .. 4q+3.
__device__ __forceinline__ int64_t FragmentUnit(int64_t st, int q, int nt, int n, int c, int nts) {
  return ((st * 4 + q) * nts + nt) * 32 + 4 * n + c;
}

// xf = the quantised x [T, K] (row stride ldx) in fragment order for nts token tiles;
// tokens T .. nts*8 - 1 are zeros. One warp per (token, 32-value block).
__global__ void __launch_bounds__(kThreads)
    QuantizeStreamKernel(const float* x, int64_t T, int64_t K, int64_t ldx, int nts, uint16_t* xf) {
  pdl::WaitThenAllowNext();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t per_row = K / 32, blocks = int64_t{nts} * 8 * per_row;
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  for (int64_t b = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; b < blocks; b += warps) {
    const int64_t t = b / per_row, kb = b % per_row;
    const float v = t < T ? x[t * ldx + kb * 32 + lane] : 0.0f;
    const uint16_t bits = fp8::QuantizeLaneBf16(v);
    const int j = 2 * (lane / 4) + lane % 2, high = (lane % 4) / 2;
    const int64_t unit = FragmentUnit(kb / 4, j / 4, static_cast<int>(t / 8),
                                      static_cast<int>(t % 8), static_cast<int>(kb % 4), nts);
    xf[unit * 8 + (j % 4) * 2 + high] = bits;
  }
}

// --- the streaming GEMM -----------------------------------------------------------------

struct StreamArgs {
  const uint8_t* w;      // e4m3 [rows, K], row-major
  const uint8_t* scale;  // ue8m0 [ceil(rows / 32), K / 32]
  int64_t K;             // weight columns (a multiple of 128)
  int64_t row0;          // first weight row (a multiple of 16)
  int64_t n_rows;        // output rows (a multiple of 16)
  int64_t group_rows;    // weight rows per x group (grouped weights; else all rows)
  int64_t group_steps;   // x steps per group (grouped: K / 128; else 0)
  const uint4* xf;       // activations in fragment order
  int T;
  int split;  // warps sharing 16 rows, each a range of the K steps
  float* y;
  int64_t ldy;
  bool accumulate;
};

// Up to kMaxStreamTargets weights (row ranges) over the same activations in one launch:
// blocks [block_end[i - 1], block_end[i]) compute target i exactly as a launch of its own
// would (same split, same warps' row groups), so the bits do not depend on the grouping.
// Fused launches (LinearStreamKernel<1, true>) also carry x: every block quantises it into
// shared memory itself (see "fused quantisation" below); the targets' xf is then unused.
struct StreamMany {
  StreamArgs a[kMaxStreamTargets];
  int64_t block_end[kMaxStreamTargets];
  int n;
  int l2_head;  // K steps after the first two prefetched into L2 before the PDL wait
  // Fused only: x [x_tokens, x_cols] fp32 with row stride ldx (x_cols = every target's K).
  const float* x;
  int64_t ldx;
  int64_t x_cols;
  int x_tokens;
  bool x_vec4;        // x and ldx allow 16-byte loads of 8-value units
  bool x_quant_warp;  // quantise with the unfused kernel's one-warp-per-block code only
};

// One K step's registers: 32 weight bytes of rows g and g + 8, the B units, the scale byte
// (NT <= 2: a step's activations are loaded with its weights, a step ahead).
template <int NT>
struct StepRegs {
  uint4 w[4];
  uint4 x[4][NT];
  uint32_t scale;
};

// NT >= 3 (the B units of a whole step would take 16 * NT registers): one K step's weight
// registers and scale byte only; the activations are loaded unit by unit within the step.
struct WeightRegs {
  uint4 w[4];
  uint32_t scale;
};

template <typename Regs>  // StepRegs<NT> or WeightRegs
__device__ __forceinline__ void LoadWeights(Regs& s, const uint8_t* w0, const uint8_t* w1,
                                            const uint8_t* sc, int64_t st) {
  const int64_t off = st * kStepK;
  s.w[0] = mma::LoadStreaming16(w0 + off);
  s.w[1] = mma::LoadStreaming16(w0 + off + 16);
  s.w[2] = mma::LoadStreaming16(w1 + off);
  s.w[3] = mma::LoadStreaming16(w1 + off + 16);
  s.scale = __ldg(sc + st * 4);
}

// Where a lane reads its B units. Unfused: global scratch in fragment order, unit (x step
// x_st, q, token tile nt) at p[((x_st * 4 + q) * NT + nt) * 32] (p = xf + lane). Fused (NT =
// 1): the block's shared copy (SharedUnit), unit (x_st, q) at p[(x_st * 4 + q) * stride]
// with p = units + 4n + c and stride 4 * T; lanes of tokens n >= T (has == false) read
// nothing and take zeros, the bits the quantisation gives those tokens in scratch.
struct XSource {
  const uint4* p;
  int64_t stride;
  bool has;
};

template <int NT, bool kFused>
__device__ __forceinline__ void LoadActivations(StepRegs<NT>& s, const XSource& x, int64_t x_st) {
  if constexpr (kFused) {
    static_assert(NT == 1, "the fused quantisation is for one token tile");
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      s.x[q][0] = x.has ? x.p[(x_st * 4 + q) * x.stride] : make_uint4(0u, 0u, 0u, 0u);
    }
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s.x[q][nt] = __ldg(x.p + ((x_st * 4 + q) * NT + nt) * 32);
    }
  }
}

template <int NT, bool kFused>
__device__ __forceinline__ void LoadStep(StepRegs<NT>& s, const uint8_t* w0, const uint8_t* w1,
                                         const uint8_t* sc, const XSource& x, int64_t st,
                                         int64_t x_st) {
  LoadWeights(s, w0, w1, sc, st);
  LoadActivations<NT, kFused>(s, x, x_st);
}

// L2 prefetches of this lane's weight bytes of steps [first, last) (rows g and g + 8),
// issued before the PDL wait so that HBM streams the start of the weight while the previous
// kernel (the activation quantisation) runs.
__device__ __forceinline__ void PrefetchStepsL2(const uint8_t* w0, const uint8_t* w1, int64_t first,
                                                int64_t last) {
  for (int64_t st = first; st < last; ++st) {
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(w0 + st * kStepK));
    asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(w1 + st * kStepK));
  }
}

// The 8 MMAs of one step (see the file comment for the operand maps).
template <int NT>
__device__ __forceinline__ void ComputeStep(const StepRegs<NT>& s, float (&acc)[NT][4]) {
  const ScaleFactors f = StepFactors(s.scale);
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    uint32_t a[4];
    WeightFragment(s.w, m, f, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const uint4& u = s.x[m / 2][nt];
      if (m % 2 == 0) {
        mma::MmaBf16(acc[nt], a, u.x, u.y);
      } else {
        mma::MmaBf16(acc[nt], a, u.z, u.w);
      }
    }
  }
}

// This lane's pointers for rows [r, r + 16): weight bytes of rows g and g + 8 and their scale
// bytes at K step 0, the x step of weight step 0, and its activation units.
struct LaneRows {
  const uint8_t *w0, *w1, *sc;
  int64_t x0;
  const uint4* xp;
};
__device__ __forceinline__ LaneRows LaneRowsOf(const StreamArgs& a, int64_t r) {
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, c = lane % 4;
  LaneRows p;
  p.w0 = a.w + (r + g) * a.K + 32 * c;
  p.w1 = p.w0 + 8 * a.K;
  p.sc = a.scale + (r / 32) * (a.K / 32) + c;
  p.x0 = (r / a.group_rows) * a.group_steps;
  p.xp = a.xf + lane;
  return p;
}

// NT <= 2, the first half of a warp's rows [r, r + 16) over K steps [s0, s1): the first two
// steps' weights into buf and the next l2_head steps into L2 (weights only: before the PDL
// wait).
template <int NT>
__device__ __forceinline__ void PreloadRows(const LaneRows& p, int64_t s0, int64_t s1, int l2_head,
                                            StepRegs<NT> (&buf)[2]) {
  if (s0 < s1) LoadWeights(buf[0], p.w0, p.w1, p.sc, s0);
  if (s0 + 1 < s1) LoadWeights(buf[1], p.w0, p.w1, p.sc, s0 + 1);
  PrefetchStepsL2(p.w0, p.w1, s0 + 2, s0 + 2 + l2_head < s1 ? s0 + 2 + l2_head : s1);
}

// The second half (after the wait): acc += the rows times the activations over [s0, s1).
template <int NT, bool kFused>
__device__ __forceinline__ void AccumulateRows(const LaneRows& p, const XSource& x, int64_t s0,
                                               int64_t s1, StepRegs<NT> (&buf)[2],
                                               float (&acc)[NT][4]) {
  const int64_t x0 = p.x0;
  if (s0 < s1) LoadActivations<NT, kFused>(buf[0], x, x0 + s0);
  if (s0 + 1 < s1) LoadActivations<NT, kFused>(buf[1], x, x0 + s0 + 1);
  for (int64_t st = s0; st < s1; st += 2) {
    ComputeStep(buf[0], acc);
    if (st + 2 < s1) LoadStep<NT, kFused>(buf[0], p.w0, p.w1, p.sc, x, st + 2, x0 + st + 2);
    if (st + 1 < s1) {
      ComputeStep(buf[1], acc);
      if (st + 3 < s1) LoadStep<NT, kFused>(buf[1], p.w0, p.w1, p.sc, x, st + 3, x0 + st + 3);
    }
  }
}

// --- NT >= 3: activations loaded within the step ----------------------------------------

// x[nt] = the B unit q of x step x_st for token tile nt (this lane's).
template <int NT>
__device__ __forceinline__ void LoadUnit(uint4 (&x)[NT], const uint4* xp, int64_t x_st, int q) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) x[nt] = __ldg(xp + ((x_st * 4 + q) * NT + nt) * 32);
}

// ComputeStep for NT >= 3, the MMAs in the same order (m = 0..7, each over the token tiles).
// Unit q of x step x_st is x[q % 2]: x[0] holds unit 0 on entry; unit q + 1 is loaded before
// unit q's MMAs, and after unit 2's MMAs x[0] takes unit 0 of x step x_st + 1 if `next`.
template <int NT>
__device__ __forceinline__ void ComputeStepJit(const WeightRegs& s, const uint4* xp, int64_t x_st,
                                               bool next, uint4 (&x)[2][NT], float (&acc)[NT][4]) {
  const ScaleFactors f = StepFactors(s.scale);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if (q < 3) {
      LoadUnit<NT>(x[(q + 1) % 2], xp, x_st, q + 1);
    } else if (next) {
      LoadUnit<NT>(x[0], xp, x_st + 1, 0);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t a[4];
      WeightFragment(s.w, 2 * q + h, f, a);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint4& u = x[q % 2][nt];
        if (h == 0) {
          mma::MmaBf16(acc[nt], a, u.x, u.y);
        } else {
          mma::MmaBf16(acc[nt], a, u.z, u.w);
        }
      }
    }
  }
}

// AccumulateRows for NT >= 3: the same weight double buffer and step order; the activations
// of a step are loaded within it (ComputeStepJit), the next step's first unit ahead.
template <int NT>
__device__ __forceinline__ void AccumulateRowsJit(const StreamArgs& a, int64_t r, int64_t s0,
                                                  int64_t s1, int l2_head, float (&acc)[NT][4]) {
  const auto [w0, w1, sc, x0, xp] = LaneRowsOf(a, r);
  WeightRegs buf[2];
  if (s0 < s1) LoadWeights(buf[0], w0, w1, sc, s0);
  if (s0 + 1 < s1) LoadWeights(buf[1], w0, w1, sc, s0 + 1);
  PrefetchStepsL2(w0, w1, s0 + 2, s0 + 2 + l2_head < s1 ? s0 + 2 + l2_head : s1);
  pdl::WaitThenAllowNext();
  uint4 x[2][NT];
  if (s0 < s1) LoadUnit<NT>(x[0], xp, x0 + s0, 0);
  for (int64_t st = s0; st < s1; st += 2) {
    ComputeStepJit<NT>(buf[0], xp, x0 + st, st + 1 < s1, x, acc);
    if (st + 2 < s1) LoadWeights(buf[0], w0, w1, sc, st + 2);
    if (st + 1 < s1) {
      ComputeStepJit<NT>(buf[1], xp, x0 + st + 1, st + 2 < s1, x, acc);
      if (st + 3 < s1) LoadWeights(buf[1], w0, w1, sc, st + 3);
    }
  }
}

// --- fused quantisation (T <= LinearStreamFuseMaxTokens, one token tile) ----------------
//
// Every block quantises all of x [T, K] (T <= 8) into shared memory after the PDL wait, then
// streams as above with its B units read from there: no QuantizeStreamKernel launch. The
// shared copy holds only the T real tokens, in fragment order compacted over tokens: unit q
// of chunk (K step st, lane column c) of token t is units[((st * 4 + q) * T + t) * 4 + c]
// (T * K * 2 bytes). The bits equal QuantizeStreamKernel's for every x:
// - a block whose 32 values are all finite: amax is their plain maximum (the warp butterfly
//   of fp8::QuantizeLaneE4m3 takes the same maximum in any order: MaxF of non-NaN values
//   is max, and |-0| = +0), taken as the maximum of the magnitude bits. Then with s =
//   Pow2Ceil(MaxF(amax, 1e-4) / 448) = 2^e, e in [-22, 120], and r = v / s = v * (1 / s)
//   (1 / s exact, one rounding of the same quotient), QuantizeLaneBf16's
//   RoundToE4m3(ClampF(r)) (round half even on the e4m3 grid, subnormals on 2^-9, |r| <=
//   448) is exactly the hardware cvt.rn.satfinite.e4m3x2 of ClampF(r); the e4m3 -> f16 ->
//   f32 conversions are exact, and the product with s and its bf16 rounding are the same
//   operations.
// - a block with an Inf or NaN (a NaN makes the butterfly's amax lane-dependent): the warp
//   that meets one quantises its blocks of that round again with fp8::QuantizeLaneBf16 itself.

// Shared-memory unit of unit q of 32-value block kb (K chunk kb = st * 4 + c) of token t.
__device__ __forceinline__ int64_t SharedUnit(int64_t kb, int q, int t, int T) {
  return (((kb / 4) * 4 + q) * T + t) * 4 + kb % 4;
}

// One 32-value block b = t * (K / 32) + kb with the unfused kernel's code (the whole warp,
// lane l quantising value l), written as 16-bit words into the shared units.
__device__ __forceinline__ void QuantizeBlockWarp(const StreamMany& m, int b, uint4* units) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int per_row = static_cast<int>(m.x_cols / 32), t = b / per_row, kb = b % per_row;
  const uint16_t bits = fp8::QuantizeLaneBf16(m.x[t * m.ldx + kb * 32 + lane]);
  const int j = 2 * (lane / 4) + lane % 2, high = (lane % 4) / 2;
  auto* words = reinterpret_cast<uint16_t*>(units);
  words[SharedUnit(kb, j / 4, t, m.x_tokens) * 8 + (j % 4) * 2 + high] = bits;
}

// Blocks [b0, min(b0 + count, n_blocks)) one after the other with QuantizeBlockWarp (the
// whole warp; b0, count, n_blocks warp-uniform). Not inlined: the rare path of the fused
// quantisation (and the x_quant_warp mode) stays out of the kernel's straight-line code.
__device__ __noinline__ void QuantizeBlocksWarp(const StreamMany& m, int b0, int count,
                                                int n_blocks, uint4* units) {
  for (int b = b0; b < b0 + count && b < n_blocks; ++b) QuantizeBlockWarp(m, b, units);
}

// Pow2Ceil (cuda_numerics.cuh) for a normal t whose result is a normal float (here t in
// [2^-23, 2^120): the block scales of finite x), without its ldexpf: the biased exponent of t,
// plus one when t has mantissa bits, as an exponent field.
__device__ __forceinline__ float Pow2CeilNormal(float t) {
  const uint32_t bits = __float_as_uint(t);
  return __uint_as_float(((bits >> 23) + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u)) << 23);
}

// Values lo and hi (finite) of a block with scale s = 2^e (inv = 1 / s) as the bf16x2 of
// QuantizeLaneBf16's results (lo in the low half).
__device__ __forceinline__ uint32_t QuantizePairBf16x2(float lo, float hi, float s, float inv) {
  const float2 r =
      make_float2(ClampF(lo * inv, -448.0f, 448.0f), ClampF(hi * inv, -448.0f, 448.0f));
  const __nv_fp8x2_storage_t q = __nv_cvt_float2_to_fp8x2(r, __NV_SATFINITE, __NV_E4M3);
  const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(q, __NV_E4M3)));
  const __nv_bfloat162 v = __floats2bfloat162_rn(f.x * s, f.y * s);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Values 8q .. 8q+7 (unit q) of block b into v (zeros when !valid).
__device__ __forceinline__ void LoadUnitValues(const StreamMany& m, int b, int q, bool valid,
                                               float (&v)[8]) {
  if (!valid) {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = 0.0f;
    return;
  }
  const int per_row = static_cast<int>(m.x_cols / 32), t = b / per_row, kb = b % per_row;
  const float* p = m.x + t * m.ldx + kb * 32 + 8 * q;
  if (m.x_vec4) {
    const float4 a = *reinterpret_cast<const float4*>(p),
                 c = *reinterpret_cast<const float4*>(p + 4);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = c.x, v[5] = c.y, v[6] = c.z, v[7] = c.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = p[i];
  }
}

// One round of a warp: blocks b0 .. b0 + 7 (those < n_blocks), lane l taking unit l % 4 of
// block b0 + l / 4 (values v). b0 and n_blocks are warp-uniform.
__device__ __forceinline__ void QuantizeRound(const StreamMany& m, int b0, int n_blocks,
                                              const float (&v)[8], uint4* units) {
  const int lane = static_cast<int>(threadIdx.x % 32), q = lane % 4, b = b0 + lane / 4;
  uint32_t mag = 0;  // the largest |v| bits of the block (Inf / NaN: >= 0x7F800000)
#pragma unroll
  for (int i = 0; i < 8; ++i) mag = max(mag, __float_as_uint(v[i]) & 0x7FFFFFFFu);
  mag = max(mag, __shfl_xor_sync(0xffffffffu, mag, 1));
  mag = max(mag, __shfl_xor_sync(0xffffffffu, mag, 2));
  if (!__all_sync(0xffffffffu, mag < 0x7F800000u)) {
    QuantizeBlocksWarp(m, b0, 8, n_blocks, units);
    return;
  }
  if (b >= n_blocks) return;
  const float s = Pow2CeilNormal(MaxF(__uint_as_float(mag), 1e-4f) * (1.0f / 448.0f));
  // 1 / s exactly: s = 2^e with e in [-22, 120] (a normal float without mantissa bits).
  const float inv = __uint_as_float(0x7F000000u - __float_as_uint(s));
  // bf16x2 word k of the unit: values (4(k/2) + k%2, 4(k/2) + k%2 + 2) of the 8.
  const uint4 u =
      make_uint4(QuantizePairBf16x2(v[0], v[2], s, inv), QuantizePairBf16x2(v[1], v[3], s, inv),
                 QuantizePairBf16x2(v[4], v[6], s, inv), QuantizePairBf16x2(v[5], v[7], s, inv));
  const int per_row = static_cast<int>(m.x_cols / 32);
  units[SharedUnit(b % per_row, q, b / per_row, m.x_tokens)] = u;
}

// Rounds whose x loads are issued together (their latency is paid once per group).
constexpr int kQuantRounds = 4;

// The whole block: x into `units` (then the caller syncs the block). Warp w takes rounds
// b0 = 8w, 8w + 64, ...; all its lanes run the same rounds.
__device__ __forceinline__ void QuantizeToShared(const StreamMany& m, uint4* units) {
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int n_blocks = m.x_tokens * static_cast<int>(m.x_cols / 32);
  if (m.x_quant_warp) {  // warp w: blocks 8w .. 8w + 7, 8w + 64 .., as the rounds
    for (int b = warp * 8; b < n_blocks; b += kWarps * 8)
      QuantizeBlocksWarp(m, b, 8, n_blocks, units);
    return;
  }
  constexpr int kRoundStride = kWarps * 8;
  for (int g = warp * 8; g < n_blocks; g += kRoundStride * kQuantRounds) {
    float v[kQuantRounds][8];
#pragma unroll
    for (int i = 0; i < kQuantRounds; ++i) {
      const int b = g + i * kRoundStride + lane / 4;
      LoadUnitValues(m, b, lane % 4, b < n_blocks, v[i]);
    }
#pragma unroll
    for (int i = 0; i < kQuantRounds; ++i) {
      if (g + i * kRoundStride < n_blocks)
        QuantizeRound(m, g + i * kRoundStride, n_blocks, v[i], units);
    }
  }
}

// Every thread of the block, once, right after its pre-wait weight loads: the PDL wait, then
// (fused) the block's shared copy of x, complete for every warp after the barrier. The source
// of this lane's B units for rows of the target `a`.
template <int NT, bool kFused>
__device__ __forceinline__ XSource WaitForActivations(const StreamMany& m, const StreamArgs& a,
                                                      uint4* units) {
  pdl::WaitThenAllowNext();
  const int lane = static_cast<int>(threadIdx.x % 32);
  if constexpr (kFused) {
    QuantizeToShared(m, units);
    __syncthreads();
    const int n = lane / 4, c = lane % 4;
    return XSource{units + 4 * n + c, 4 * int64_t{m.x_tokens}, n < m.x_tokens};
  } else {
    return XSource{a.xf + lane, 0, true};
  }
}

template <int NT, bool kFused>
__global__ void __launch_bounds__(kThreads, 2)
    LinearStreamKernel(const __grid_constant__ StreamMany m) {
  __shared__ float partial[kWarps][NT * 4][32];
  static_assert(NT != 1 || sizeof(partial) == kFusedStaticSmemBytes, "the fused opt-in's sum");
  int target = 0;
  while (target + 1 < m.n && int64_t{blockIdx.x} >= m.block_end[target]) ++target;
  const StreamArgs& a = m.a[target];
  const int64_t block = int64_t{blockIdx.x} - (target == 0 ? 0 : m.block_end[target - 1]);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t rg = block * (kWarps / a.split) + warp / a.split;
  const int part = warp % a.split;
  const int64_t steps = a.K / kStepK;
  const bool active = rg * kWarpRows < a.n_rows;
  float acc[NT][4] = {};
  const int64_t r = a.row0 + rg * kWarpRows, s0 = part * steps / a.split,
                s1 = (part + 1) * steps / a.split;
  if constexpr (NT <= 2) {
    // Weights before the wait; every thread (also of warps without rows) waits (and, fused,
    // quantises x and meets the barrier) at this one place.
    extern __shared__ uint4 fused_units[];
    LaneRows p{};
    StepRegs<NT> buf[2];
    if (active) {
      p = LaneRowsOf(a, r);
      PreloadRows<NT>(p, s0, s1, m.l2_head, buf);
    }
    const XSource x = WaitForActivations<NT, kFused>(m, a, fused_units);
    if (active) AccumulateRows<NT, kFused>(p, x, s0, s1, buf, acc);
  } else {
    static_assert(!kFused, "the fused quantisation is for one token tile");
    if (!active) pdl::WaitThenAllowNext();  // (an active warp waits in AccumulateRowsJit)
    if (active) AccumulateRowsJit<NT>(a, r, s0, s1, m.l2_head, acc);
  }
  if (a.split > 1) {  // the parts' sums, added in part order by part 0
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[warp][nt * 4 + i][lane] = acc[nt][i];
    }
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < a.split; ++p) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] += partial[warp + p][nt * 4 + i][lane];
      }
    }
  }
  if (!active) return;
  // Accumulator (m16n8): acc[nt][i] is row g (+ 8 for i >= 2), token nt*8 + 2c + i % 2.
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = nt * 8 + 2 * c + i % 2;
      if (t >= a.T) continue;
      float* dst = a.y + t * a.ldy + rg * kWarpRows + g + (i >= 2 ? 8 : 0);
      *dst = a.accumulate ? *dst + acc[nt][i] : acc[nt][i];
    }
  }
}

// Steps prefetched into L2 before the PDL wait: DEEPINFER_LINEAR_STREAM_L2HEAD (read once,
// 0..32), default kDefaultL2Head. MEASURED (H200, run 116, decode 4k, FP8 mode): 4 steps
// B = 1 / 8 / 32 1.45 / 2.74 / 5.92 ms against 1.45 / 2.77-2.78 / 5.99-6.01 with none; 8 and
// 16 steps slower (B = 1 1.50 / 1.52 ms), like an in-loop prefetch ahead (run 112).
constexpr int kDefaultL2Head = 4;
int LinearStreamL2Head() {
  static const int head = EnvIntClamped("DEEPINFER_LINEAR_STREAM_L2HEAD", kDefaultL2Head, 0, 32);
  return head;
}

// Test / benchmark overrides (kernels_stream.h): -1 = none.
std::atomic<int> fuse_max_tokens_override{-1};
std::atomic<bool> fused_quant_warp{false};

// Shared memory of a fused block's copy of x at most (T * K * 2 bytes; with the 4 KiB of
// partial sums two blocks per SM still fit easily): K = 8192 fuses up to T = 4.
constexpr int64_t kFusedMaxSmemBytes = 64 * 1024;

// Whether LaunchMany quantises inside the stream kernel (fused): one token tile, at most
// LinearStreamFuseMaxTokens() tokens, x within kFusedMaxSmemBytes, no grouped weight.
bool FuseQuantisation(const StreamArgs* targets, int n, int64_t T, int64_t x_cols) {
  if (T > LinearStreamFuseMaxTokens() || TokenTiles(T) != 1 ||
      T * x_cols * 2 > kFusedMaxSmemBytes) {
    return false;
  }
  for (int i = 0; i < n; ++i) {
    if (targets[i].group_steps != 0) return false;
  }
  return true;
}

// Runs every target in one LinearStreamKernel launch: fused (FuseQuantisation), or after
// QuantizeStreamKernel has quantised x once into scratch. targets[i].split and .xf are set
// here; all targets share T and the activations' K.
cudaError_t LaunchMany(StreamArgs* targets, int n, const float* x, int64_t x_cols, int64_t ldx,
                       void* scratch, cudaStream_t stream) {
  const int T = targets[0].T;
  const int nts = TokenTiles(T);
  const bool fused = FuseQuantisation(targets, n, T, x_cols);
  if (!fused) {
    auto* xf = static_cast<uint16_t*>(scratch);
    const cudaError_t e =
        pdl::Launch(QuantizeStreamKernel, fp8::WarpPerBlockGrid(int64_t{nts} * 8 * (x_cols / 32)),
                    kThreads, 0, stream, x, int64_t{T}, x_cols, ldx, nts, xf);
    if (e != cudaSuccess) return e;
  }
  StreamMany m{};
  m.n = n;
  m.l2_head = LinearStreamL2Head();
  int64_t blocks = 0;
  for (int i = 0; i < n; ++i) {
    StreamArgs& a = targets[i];
    a.xf = static_cast<const uint4*>(scratch);
    a.split = LinearStreamSplit(a.n_rows, a.K);
    const int64_t row_groups = a.n_rows / kWarpRows, per_block = kWarps / a.split;
    blocks += (row_groups + per_block - 1) / per_block;
    m.a[i] = a;
    m.block_end[i] = blocks;
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  if (fused) {
    m.x = x;
    m.ldx = ldx;
    m.x_cols = x_cols;
    m.x_tokens = T;
    m.x_vec4 = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
    m.x_quant_warp = fused_quant_warp.load();
    const int smem = static_cast<int>(T * x_cols * 2);
    if (smem + kFusedStaticSmemBytes > kSmemNoOptIn) {  // e.g. T = 6, K = 4096: 48 + 4 KiB
      const cudaError_t e = launch::RaiseMaxDynamicSmem(LinearStreamKernel<1, true>, smem);
      if (e != cudaSuccess) return e;
    }
    return pdl::Launch(LinearStreamKernel<1, true>, grid, kThreads, smem, stream, m);
  }
  switch (nts) {
    case 1:
      return pdl::Launch(LinearStreamKernel<1, false>, grid, kThreads, 0, stream, m);
    case 2:
      return pdl::Launch(LinearStreamKernel<2, false>, grid, kThreads, 0, stream, m);
    case 3:
      return pdl::Launch(LinearStreamKernel<3, false>, grid, kThreads, 0, stream, m);
    default:
      return pdl::Launch(LinearStreamKernel<4, false>, grid, kThreads, 0, stream, m);
  }
}

cudaError_t Launch(StreamArgs a, const float* x, int64_t x_cols, int64_t ldx, void* scratch,
                   cudaStream_t stream) {
  return LaunchMany(&a, 1, x, x_cols, ldx, scratch, stream);
}

// The arguments of rows [row0, row0 + n_rows) of w (ungrouped), y (+)= into y.
StreamArgs RowsArgs(const DeviceWeight& w, int64_t row0, int64_t n_rows, int64_t T, float* y,
                    int64_t ldy, bool accumulate) {
  StreamArgs a{};
  a.w = static_cast<const uint8_t*>(w.data);
  a.scale = w.scale;
  a.K = w.cols;
  a.row0 = row0;
  a.n_rows = n_rows;
  a.group_rows = w.rows;
  a.group_steps = 0;
  a.T = static_cast<int>(T);
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  return a;
}

bool WeightOk(const DeviceWeight& w) {
  return w.format == WeightFormat::kFp8Block32 && w.cols > 0 && w.cols % kStepK == 0 &&
         w.data != nullptr && w.scale != nullptr && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

}  // namespace

int LinearStreamSplit(int64_t n_rows, int64_t K) {
  static const int64_t forced = [] {
    const char* env = std::getenv("DEEPINFER_LINEAR_STREAM_SPLIT");  // tuning only
    return env != nullptr ? std::atoll(env) : 0;
  }();
  if (forced == 1 || forced == 2 || forced == 4 || forced == 8) return static_cast<int>(forced);
  // The most warps per row group that still fit one wave of blocks (a second, partial wave
  // doubled the time of wo_b), each with at least 4 steps of K.
  const int64_t row_groups = n_rows / kWarpRows, steps = K / kStepK;
  int split = 1;
  while (split < kWarps && row_groups * 2 * split <= kWaveBlocks * kWarps &&
         steps >= 4 * 2 * split) {
    split *= 2;
  }
  return split;
}

int LinearStreamFuseMaxTokens() {
  static const int from_env =
      EnvIntClamped("DEEPINFER_LINEAR_STREAM_FUSE_MAX_T", static_cast<int>(kFusedMaxTokens), 0, 8);
  const int forced = fuse_max_tokens_override.load();
  return forced >= 0 ? forced : from_env;
}

void SetLinearStreamFuseMaxTokens(int max_tokens) {
  fuse_max_tokens_override.store(max_tokens < 0 ? -1 : max_tokens > 8 ? 8 : max_tokens);
}

void SetLinearStreamFusedQuantWarp(bool on) { fused_quant_warp.store(on); }

bool LinearStreamApplicable(const DeviceWeight& w, int64_t row0, int64_t n_rows, int64_t T) {
  return WeightOk(w) && T >= 1 && T <= kStreamMaxTokens && row0 >= 0 && n_rows > 0 &&
         row0 % kWarpRows == 0 && n_rows % kWarpRows == 0 && row0 + n_rows <= w.rows;
}

int64_t LinearStreamScratchBytes(int64_t T, int64_t K) {
  return int64_t{TokenTiles(T)} * 8 * K * 2;
}

cudaError_t LinearStream(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                         int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                         void* scratch, cudaStream_t stream) {
  if (!LinearStreamApplicable(w, row0, n_rows, T)) return cudaErrorInvalidValue;
  return Launch(RowsArgs(w, row0, n_rows, T, y, ldy, accumulate), x, w.cols, ldx, scratch, stream);
}

bool LinearStreamManyApplicable(const LinearStreamTarget* targets, int n, int64_t T) {
  if (n < 1 || n > kMaxStreamTargets) return false;
  for (int i = 0; i < n; ++i) {
    const LinearStreamTarget& t = targets[i];
    if (t.w == nullptr || t.y == nullptr || t.w->cols != targets[0].w->cols ||
        !LinearStreamApplicable(*t.w, t.row0, t.n_rows, T)) {
      return false;
    }
  }
  return true;
}

cudaError_t LinearStreamMany(const LinearStreamTarget* targets, int n, const float* x, int64_t T,
                             int64_t ldx, void* scratch, cudaStream_t stream) {
  if (!LinearStreamManyApplicable(targets, n, T)) return cudaErrorInvalidValue;
  StreamArgs args[kMaxStreamTargets];
  for (int i = 0; i < n; ++i) {
    const LinearStreamTarget& t = targets[i];
    args[i] = RowsArgs(*t.w, t.row0, t.n_rows, T, t.y, t.ldy, t.accumulate);
  }
  return LaunchMany(args, n, x, targets[0].w->cols, ldx, scratch, stream);
}

bool LinearStreamGroupedApplicable(const DeviceWeight& w, int64_t groups, int64_t T) {
  return groups > 0 && w.rows % groups == 0 && (w.rows / groups) % kWarpRows == 0 &&
         LinearStreamApplicable(w, 0, w.rows, T);
}

cudaError_t LinearStreamGrouped(const DeviceWeight& w, int64_t groups, const float* x, int64_t T,
                                int64_t ldx, float* y, int64_t ldy, void* scratch,
                                cudaStream_t stream) {
  if (!LinearStreamGroupedApplicable(w, groups, T)) return cudaErrorInvalidValue;
  StreamArgs a = RowsArgs(w, 0, w.rows, T, y, ldy, /*accumulate=*/false);
  a.group_rows = w.rows / groups;
  a.group_steps = w.cols / kStepK;
  return Launch(a, x, groups * w.cols, ldx, scratch, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
