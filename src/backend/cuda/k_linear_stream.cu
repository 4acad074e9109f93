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
// __launch_bounds__(256, 2) (ptxas, CUDA 13.0, sm_90a, session 24): NT 1: 103, 2: 128 (24
// bytes of stack; session 13: 36 bytes of spill stores, 80 before the weight preload moved out
// of AccumulateRows), 3: 113, 4: 124 (no spills).
//
// Removed after measuring (session 24): a fused form in which every block quantised x into its
// shared memory itself (one launch instead of QuantizeStreamKernel + LinearStreamKernel; no
// decode-step gain in run 118, slower in run 207: B = 1 / 8 1.50-1.52 / 2.43-2.48 against
// 1.41-1.46 / 2.38-2.44 ms), and a TMA-fed form (k_linear_bulk.cu; slower in runs 119-125, 207).
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
// Tried and removed (session 26, run 216; branch experiment/stream-paired-rows): warps of 32 rows
// (two 16-row groups reading each activation unit once; same bits) at one block an SM: slower at
// every T (wq_b T=1 / 32 19.8 / 26.4 us against 14.8 / 23.8), so warps in flight bound the stream.
#include <cuda_bf16.h>

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
struct StreamMany {
  StreamArgs a[kMaxStreamTargets];
  int64_t block_end[kMaxStreamTargets];
  int n;
  int l2_head;  // K steps after the first two prefetched into L2 before the PDL wait
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

// A lane's B units: global scratch in fragment order, unit (x step x_st, q, token tile nt) at
// xp[((x_st * 4 + q) * NT + nt) * 32] (xp = xf + lane).
// x[nt] = the B unit q of x step x_st for token tile nt (this lane's).
template <int NT>
__device__ __forceinline__ void LoadUnit(uint4 (&x)[NT], const uint4* xp, int64_t x_st, int q) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) x[nt] = __ldg(xp + ((x_st * 4 + q) * NT + nt) * 32);
}

// All four units of x step x_st (NT <= 2: a whole step's activations, loaded with its weights).
template <int NT>
__device__ __forceinline__ void LoadActivations(StepRegs<NT>& s, const uint4* xp, int64_t x_st) {
#pragma unroll
  for (int q = 0; q < 4; ++q) LoadUnit<NT>(s.x[q], xp, x_st, q);
}

template <int NT>
__device__ __forceinline__ void LoadStep(StepRegs<NT>& s, const uint8_t* w0, const uint8_t* w1,
                                         const uint8_t* sc, const uint4* xp, int64_t st,
                                         int64_t x_st) {
  LoadWeights(s, w0, w1, sc, st);
  LoadActivations<NT>(s, xp, x_st);
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
template <int NT>
__device__ __forceinline__ void AccumulateRows(const LaneRows& p, int64_t s0, int64_t s1,
                                               StepRegs<NT> (&buf)[2], float (&acc)[NT][4]) {
  const int64_t x0 = p.x0;
  if (s0 < s1) LoadActivations<NT>(buf[0], p.xp, x0 + s0);
  if (s0 + 1 < s1) LoadActivations<NT>(buf[1], p.xp, x0 + s0 + 1);
  for (int64_t st = s0; st < s1; st += 2) {
    ComputeStep(buf[0], acc);
    if (st + 2 < s1) LoadStep<NT>(buf[0], p.w0, p.w1, p.sc, p.xp, st + 2, x0 + st + 2);
    if (st + 1 < s1) {
      ComputeStep(buf[1], acc);
      if (st + 3 < s1) LoadStep<NT>(buf[1], p.w0, p.w1, p.sc, p.xp, st + 3, x0 + st + 3);
    }
  }
}

// --- NT >= 3: activations loaded within the step ----------------------------------------

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

template <int NT>
__global__ void __launch_bounds__(kThreads, 2)
    LinearStreamKernel(const __grid_constant__ StreamMany m) {
  __shared__ float partial[kWarps][NT * 4][32];
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
    // Weights before the wait; every thread (also of warps without rows) waits at this one
    // place.
    LaneRows p{};
    StepRegs<NT> buf[2];
    if (active) {
      p = LaneRowsOf(a, r);
      PreloadRows<NT>(p, s0, s1, m.l2_head, buf);
    }
    pdl::WaitThenAllowNext();
    if (active) AccumulateRows<NT>(p, s0, s1, buf, acc);
  } else {
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

// Runs every target in one LinearStreamKernel launch after QuantizeStreamKernel has quantised x
// once into scratch. targets[i].split and .xf are set here; all targets share T and the
// activations' K.
cudaError_t LaunchMany(StreamArgs* targets, int n, const float* x, int64_t x_cols, int64_t ldx,
                       void* scratch, cudaStream_t stream) {
  const int T = targets[0].T;
  const int nts = TokenTiles(T);
  auto* xf = static_cast<uint16_t*>(scratch);
  const cudaError_t e =
      pdl::Launch(QuantizeStreamKernel, fp8::WarpPerBlockGrid(int64_t{nts} * 8 * (x_cols / 32)),
                  kThreads, 0, stream, x, int64_t{T}, x_cols, ldx, nts, xf);
  if (e != cudaSuccess) return e;
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
  switch (nts) {
    case 1:
      return pdl::Launch(LinearStreamKernel<1>, grid, kThreads, 0, stream, m);
    case 2:
      return pdl::Launch(LinearStreamKernel<2>, grid, kThreads, 0, stream, m);
    case 3:
      return pdl::Launch(LinearStreamKernel<3>, grid, kThreads, 0, stream, m);
    default:
      return pdl::Launch(LinearStreamKernel<4>, grid, kThreads, 0, stream, m);
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
