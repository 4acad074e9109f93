// Sparse sink attention for prefill in the FP8-activation mode (see kernels_attn_prefill.h for
// the contract), on mma.sync. Since session 18 head_dim 512 (V4.1) runs on the wgmma kernel
// (k_attention_wgmma.cu, 1.58x per V4.1 call) unless DEEPINFER_ATTN_PREFILL_WGMMA=0; the
// measurements below are this kernel's.
//
// MEASURED (H200, AttnPrefillBench.DISABLED_V41Prefill, 64 heads x 512, T = 4096 x 640
// candidates): 4199-4285 us per call (82-80 TFLOP/s; runs 106 and 106b), against 4525 us (76
// TFLOP/s, run 106) for the serial kernel it replaced (one block barrier pair per chunk with the
// conversion between them; the same bits); 4-layer model prefill (FP8 mode, run 106, stdout in
// bench/gpu/results/2026-12-01-n/run106) 4k tokens 48.9k -> 49.3k tok/s, 16k tokens 45.5k -> 46.0k
// tok/s. History: the serial kernel, first measured at 5.2 ms per call (SparseAttentionMma
// bf16_rounded: 13.3 ms), took the 4-layer prefill's attention from 47 to 16 ms.
//
// Roofline, DeepSeek-V4.1 prefill (H = 64 heads, D = 512, N = 640 candidates per token = 128
// window rows + 512 selected entries, T = 4096; H200: ~4.8 TB/s HBM, mma.sync bf16 roughly
// 0.5-0.65 PFLOP/s dense, shared memory 128 B/clk/SM ~ 30 TB/s in all):
//   FLOPs per token = 2 H N D (S = q K^T) + 2 H N D (O = P V)        = 83.9 MFLOP
//     T = 4096: 344 GFLOP -> 0.55-0.7 ms at the mma.sync rate
//   HBM: q + out 2 H D 4 = 256 KiB per token -> 1.07 GB -> 0.23 ms; the distinct rows of a
//     prefill are a few MiB (read from HBM once, then L2 hits)
//   L2: each token's rows gathered ONCE for all 64 heads as fp32, N D 4 = 1.25 MiB per token
//     -> 5.4 GB -> ~1 ms at ~5.5 TB/s (the decode kernel gathers them 4 times, 21 GB)
//   shared memory per 32-row chunk: 64 KiB (cp.async) + 96 (conversion) + 176 (S: 128 of
//     ldmatrix, 48 to sum the chains) + 80 (P V) = ~420 KiB = ~3400 clk = 1.85 us
//     -> 1.15 ms per call (4096 x 20 chunks over 132 SMs = 620 chunks per SM)
// The measured 4199 us is ~6.8 us per chunk per SM, far above each of these floors (and the
// ~0.9 us of MMAs per chunk); where the rest goes has not been profiled.
//
// Structure. Grid (tokens, heads / 64); a block (8 warps, 256 threads, ~224 KiB of shared
// memory at D = 512: one block per SM) serves one token and 64 heads. q of the 64 heads is
// rounded to bf16 once into shared memory. The token's candidates (TokenRows after Trim: its
// window rows, then its selection slots, in the order of the CPU reference) run in chunks of
// kChunk = 32 rows; chunk c's bf16 rows live in kv slot c % 2 (double-buffered). Each thread
// copies (cp.async, fp32 into `raw`) and later converts exactly its own bytes of a chunk, so
// no barrier sits between copy and conversion. Per chunk c:
//   1. [block barrier: slot c complete, every warp done with chunk c - 1 (its slot, P, alpha)]
//   2. S = q K^T (ScoreChunkChain): the k-steps of every score form kChains = 4 MMA chains
//      (k-step mod 4); warp w = (head half w / 4, chain w % 4) computes its chain for 32
//      heads x 32 rows (per k-step 4 ldmatrix.x4 feed 8 MMAs); SumChainsAcrossWarps adds the
//      chains of the head half's four warps (float4 per lane through shared memory, a
//      128-thread barrier, the fixed order (c0 + c1) + (c2 + c3));
//   3. online softmax (SoftmaxChunk), warp w = (head tile w / 2, row half w % 2), a thread
//      holding heads g and g + 8 of the tile: scaled scores, masked rows -inf, the chunk max
//      exchanged with the partner warp (a 64-thread barrier), m_new = max(m, chunk max) (m
//      starts at the finite sink logit, so it stays finite), p = bf16(exp(s - m_new)) written
//      to `p`, the partial denominator over the thread's rows l = l alpha + sum p (the rounded
//      p: the weights that are applied); alpha published in shared memory;
//   4. each thread converts its share of chunk c + 1 into the other slot and issues its copies
//      of chunk c + 2 (a chunk's copies get ~one chunk of time to land), so the conversion of
//      early warps overlaps the MMAs of late ones;
//   5. [128-thread barrier: P and alpha of the head half] P V (AccumulateChunk): warp w =
//      (head half w / 4, dim quarter w % 4) computes o = o alpha + P V for 32 heads x D / 4
//      dims (128 fp32 per thread at D = 512), each V fragment (ldmatrix.trans) feeding two
//      m-tiles, each chunk's P V a fresh fragment (two k-steps).
// At the end (WriteOutput) the partial denominators are summed (quad shuffle, then the warp
// pair, in a fixed order), l = exp(sink - m) + sum, out = o / l. Every token is computed by
// one block in a fixed order: deterministic, but a token's bits differ from
// SparseAttentionMma's (different chunking and P rounding). ptxas (sm_90a): 239 registers,
// no spills.
//
// Not done: staging bf16 instead of fp32 rows would need the producer to hold a chunk in
// registers (64 per thread at 256 threads: no room next to O); two tokens per block (sharing
// 127 of their 128 window rows) would cut the window part of the L2 traffic but not the S /
// P V traffic, and complicate the trim and masking.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_attn_prefill.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using attention::CandidateRow;
using attention::TokenRows;
using mma::CpAsync16;
using mma::CpAsyncCommit;
using mma::CpAsyncWaitAll;
using mma::LdMatrixX4;
using mma::LdMatrixX4Trans;
using mma::MmaBf16;
using mma::MmaBf16First;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kHeads = static_cast<int>(kAttnPrefillHeadsPerBlock);
constexpr int kChunk = 32;                     // candidate rows per round
constexpr int kRowsPerWarp = kChunk / kWarps;  // staging: rows copied and converted per warp
constexpr int kPStride = kChunk + 8;           // bf16 P row: 80 bytes (ldmatrix conflict-free)
constexpr int kSlots = 2;                      // chunks of bf16 rows (double buffer)
constexpr int kChains = 4;                     // MMA chains per score of S (see SumChains)
constexpr int kPairsPerWarp = static_cast<int>(kAttnPrefillMaxHeadDim) / 4 / 16;  // P V
static_assert(kHeads == 16 * kWarps / 2, "softmax: a warp pair per 16-head tile");
static_assert(kChunk == 32, "softmax: 16 rows per warp of the pair; P V: two k-steps");
static_assert(kChains * 2 == kWarps, "S: one chain per warp of a head half");

// Barrier of the two warps of head tile `tile` (ids 1..4; 0 is __syncthreads).
__device__ __forceinline__ void PairBarrier(int tile) {
  asm volatile("bar.sync %0, 64;\n" ::"r"(tile + 1) : "memory");
}

// Barrier of the four warps 4 hh .. 4 hh + 3 (ids 5, 6): the softmax head tiles 2 hh, 2 hh + 1
// (their P, alpha and 1 / l) and the S / P V warps of head half hh.
__device__ __forceinline__ void QuadBarrier(int head_half) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(head_half + 5) : "memory");
}

// --- shared memory (every array starts 16-byte aligned: D % 64 == 0) --------------------
__host__ __device__ inline int64_t RowStride(int64_t d) { return d + 8; }  // bf16 elements

struct Smem {
  uint16_t* q;      // [kHeads][d + 8] bf16 q of the block's heads
  float* raw;       // [kChunk][d] fp32 rows in flight (cp.async)
  uint16_t* kv;     // [kSlots][kChunk][d + 8] bf16 rows of a chunk (zero if not attended)
  uint16_t* p;      // [kHeads][kPStride] bf16 probabilities of the current chunk
  float* part;      // [kWarps][16] per-warp chunk max (loop), partial denominator (end)
  long long* trim;  // [4] TokenRows::Trim scratch
  int* kv_valid;    // [kSlots][kChunk] 1 if the row in `kv` is attended
  float* alpha;     // [kHeads] O rescale factor of the current chunk
  float* inv;       // [kHeads] 1 / denominator at the end
  float4* xchg;     // [2][kChains][kChains - 1][2][32] chains of S (ChainSlot)

  __device__ Smem(unsigned char* base, int64_t d) {
    const int64_t rs = RowStride(d);
    q = reinterpret_cast<uint16_t*>(base);
    raw = reinterpret_cast<float*>(q + kHeads * rs);
    kv = reinterpret_cast<uint16_t*>(raw + kChunk * d);
    p = kv + kSlots * kChunk * rs;
    part = reinterpret_cast<float*>(p + kHeads * kPStride);
    trim = reinterpret_cast<long long*>(part + kWarps * 16);
    kv_valid = reinterpret_cast<int*>(trim + 4);
    alpha = reinterpret_cast<float*>(kv_valid + kSlots * kChunk);
    inv = alpha + kHeads;
    xchg = reinterpret_cast<float4*>(inv + kHeads);
  }

  // The same view with kv / kv_valid pointing at slot `slot` (the consumer steps read
  // s.kv and s.kv_valid).
  __device__ Smem Slot(int slot, int64_t d) const {
    Smem v = *this;
    v.kv = kv + slot * kChunk * RowStride(d);
    v.kv_valid = kv_valid + slot * kChunk;
    return v;
  }
};

int64_t SharedBytes(int64_t d) {
  const int64_t rs = RowStride(d);
  const int64_t xchg = 2 * kChains * (kChains - 1) * 2 * 32 * 16;
  return kHeads * rs * 2 + kChunk * d * 4 + kSlots * kChunk * rs * 2 + kHeads * kPStride * 2 +
         kWarps * 16 * 4 + 4 * 8 + kSlots * kChunk * 4 + 2 * kHeads * 4 + xchg;
}

// Per-thread softmax state of heads g (lo) and g + 8 (hi) of the warp's head tile.
struct HeadState {
  float m_lo, m_hi;  // running max (starts at the sink logit)
  float l_lo, l_hi;  // partial denominator over this thread's rows (sink term added at the end)
};

// The k-steps of S form kChains independent MMA chains per score: chain c takes the k-steps
// ks = c (mod kChains) in ascending order from zero (ScoreChunkChain), and the score is
// (chain 0 + chain 1) + (chain 2 + chain 3).
__device__ __forceinline__ float SumChains(float c0, float c1, float c2, float c3) {
  return __fadd_rn(__fadd_rn(c0, c1), __fadd_rn(c2, c3));
}

// Staging (before the loop, and step 4). Issues the cp.async copies of this thread's share of
// candidate rows [row0, row0 + kChunk) (clipped to row_end) into `raw`: rows warp * kRowsPerWarp +
// k, columns 4 lane + 128 i. Returns bit k set if that row is attended. The thread later converts
// exactly the bytes it copied (ConvertOwnRows), so no barrier is needed between.
__device__ uint32_t IssueOwnRows(const model::SparseAttentionArgs& a, int64_t t,
                                 const TokenRows& rows, int64_t row0, int64_t row_end, float* raw,
                                 bool report, int* error_word) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t d = a.head_dim;
  uint32_t attended = 0;
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp * kRowsPerWarp + k;
    const int64_t j = row0 + r;
    const float* row =
        j < row_end ? CandidateRow(a, t, rows, j, report && lane == 0, error_word) : nullptr;
    if (row != nullptr) {
      for (int64_t c = 4 * lane; c < d; c += 128) CpAsync16(raw + r * d + c, row + c);
      attended |= 1u << k;
    }
  }
  CpAsyncCommit();
  return attended;
}

// Waits for this thread's copies, then writes its share of the chunk as bf16 into kv (zero
// for rows not attended) and kv_valid. Sets `inexact` if a value was not exactly bf16.
__device__ void ConvertOwnRows(const float* raw, uint32_t attended, int64_t d, uint16_t* kv,
                               int* kv_valid, bool& inexact) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t rs = RowStride(d);
  CpAsyncWaitAll();
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp * kRowsPerWarp + k;
    const bool valid = ((attended >> k) & 1u) != 0;
    for (int64_t c = 4 * lane; c < d; c += 128) {
      uint2 packed = make_uint2(0u, 0u);
      if (valid) {
        packed = attention::Bf16x4Bits(*reinterpret_cast<const float4*>(raw + r * d + c), inexact);
      }
      *reinterpret_cast<uint2*>(kv + r * rs + c) = packed;
    }
    if (lane == 0) kv_valid[r] = valid ? 1 : 0;
  }
}

// Step 2a: warp w = (head half hh = w / 4, chain c = w % 4) computes chain c of S (see
// SumChains) for 32 heads x all 32 rows of the chunk (two m-tiles x four n-tiles: one
// ldmatrix.x4 per two MMAs). chain[m][n]: m-tile m (heads 32 hh + 16 m + g, + 8), rows
// 8 n + 2 q4 + {0, 1}. ksteps = D / 16 is a multiple of kChains (D % 64 == 0).
__device__ __forceinline__ void ScoreChunkChain(const Smem& s, int64_t d, int hh, int c,
                                                float (&chain)[2][4][4]) {
  const int lane = threadIdx.x & 31, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = RowStride(d);
  const int ksteps = static_cast<int>(d / 16);
  const uint16_t* q_row = s.q + (32 * hh + mrow + 8 * (mat & 1)) * rs + 8 * (mat >> 1);
  const uint16_t* k_row = s.kv + (mrow + 8 * (mat >> 1)) * rs + 8 * (mat & 1);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < 4; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) chain[m][n][i] = 0.0f;
    }
  }
#pragma unroll 2
  for (int ks = c; ks < ksteps; ks += kChains) {
    uint32_t a[2][4], b[2][4];
#pragma unroll
    for (int m = 0; m < 2; ++m) LdMatrixX4(a[m], q_row + 16 * m * rs + 16 * ks);
#pragma unroll
    for (int h = 0; h < 2; ++h) LdMatrixX4(b[h], k_row + 16 * h * rs + 16 * ks);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        MmaBf16(chain[m][2 * h], a[m], b[h][0], b[h][1]);
        MmaBf16(chain[m][2 * h + 1], a[m], b[h][2], b[h][3]);
      }
    }
  }
}

// The exchange buffer slot (float4 per lane) where chain `writer` leaves its part of
// quarter `quarter` (n-tile j of it) for the warp that owns the quarter; writer != quarter.
__device__ __forceinline__ float4* ChainSlot(const Smem& s, int hh, int quarter, int writer,
                                             int j) {
  const int k = writer < quarter ? writer : writer - 1;
  return s.xchg + ((((hh * kChains + quarter) * (kChains - 1) + k) * 2 + j) * 32 +
                   static_cast<int>(threadIdx.x & 31));
}

// Step 2b: sums the chains of S across the four warps of head half hh. Warp (hh, c) owns
// quarter c = (m-tile c / 2, rows 16 (c % 2) ..): exactly SoftmaxChunk's (tile, half) of the
// same warp (w = 4 hh + c: tile = w / 2, half = w % 2). It leaves its chain of the other
// three quarters in s.xchg, and after the barrier sums the four chains of its own quarter
// (SumChains, chain order) into acc: acc[n][0..1] head g, rows 16 half + 8 n + 2 q4 + {0, 1};
// acc[n][2..3] head g + 8. Contains one QuadBarrier.
__device__ __forceinline__ void SumChainsAcrossWarps(const Smem& s, int hh, int c,
                                                     const float (&chain)[2][4][4],
                                                     float (&acc)[2][4]) {
  float own[2][4];
#pragma unroll
  for (int q = 0; q < kChains; ++q) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float* v = chain[q >> 1][2 * (q & 1) + j];
      if (q != c) {
        *ChainSlot(s, hh, q, c, j) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) own[j][i] = v[i];
      }
    }
  }
  QuadBarrier(hh);
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    float part[kChains][4];
#pragma unroll
    for (int w = 0; w < kChains; ++w) {
      if (w != c) {
        const float4 v = *ChainSlot(s, hh, c, w, j);
        part[w][0] = v.x, part[w][1] = v.y, part[w][2] = v.z, part[w][3] = v.w;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) part[w][i] = own[j][i];
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[j][i] = SumChains(part[0][i], part[1][i], part[2][i], part[3][i]);
  }
}

// Step 3: online softmax of the chunk for the thread's two heads (warp = (tile, half); acc as
// SumChainsAcrossWarps leaves it); writes bf16 P to s.p and returns the rescale factors of O
// in alpha_lo / alpha_hi. Contains one pair barrier.
__device__ __forceinline__ void SoftmaxChunk(const Smem& s, float scale, int tile, int half,
                                             const float (&acc)[2][4], HeadState& st,
                                             float& alpha_lo, float& alpha_hi) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  float sc[2][4];
  float max_lo = NegInf(), max_hi = NegInf();
#pragma unroll
  for (int n = 0; n < 2; ++n) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const bool valid = s.kv_valid[16 * half + 8 * n + 2 * q4 + i] != 0;
      // __fmul_rn: never contracted into the exp argument (the same rounding wherever the
      // compiler inlines this).
      sc[n][i] = valid ? __fmul_rn(acc[n][i], scale) : NegInf();
      sc[n][i + 2] = valid ? __fmul_rn(acc[n][i + 2], scale) : NegInf();
      max_lo = fmaxf(max_lo, sc[n][i]);
      max_hi = fmaxf(max_hi, sc[n][i + 2]);
    }
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    max_lo = fmaxf(max_lo, __shfl_xor_sync(0xffffffffu, max_lo, off));
    max_hi = fmaxf(max_hi, __shfl_xor_sync(0xffffffffu, max_hi, off));
  }
  if (q4 == 0) s.part[warp * 16 + g] = max_lo, s.part[warp * 16 + g + 8] = max_hi;
  PairBarrier(tile);
  const float* other = s.part + (warp ^ 1) * 16;
  // Both warps of the pair compute the same m_new (max is exact and order-free).
  const float m_lo = fmaxf(st.m_lo, fmaxf(max_lo, other[g]));
  const float m_hi = fmaxf(st.m_hi, fmaxf(max_hi, other[g + 8]));
  alpha_lo = expf(st.m_lo - m_lo);
  alpha_hi = expf(st.m_hi - m_hi);
  st.m_lo = m_lo, st.m_hi = m_hi;
  float sum_lo = 0.0f, sum_hi = 0.0f;
  uint16_t* p_lo = s.p + (16 * tile + g) * kPStride + 16 * half + 2 * q4;
  uint16_t* p_hi = p_lo + 8 * kPStride;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    // exp(-inf - m) = 0 for masked rows (m is finite).
    const uint32_t lo = PackBf16(expf(sc[n][0] - m_lo), expf(sc[n][1] - m_lo));
    const uint32_t hi = PackBf16(expf(sc[n][2] - m_hi), expf(sc[n][3] - m_hi));
    sum_lo += __uint_as_float(lo << 16) + __uint_as_float(lo & 0xFFFF0000u);
    sum_hi += __uint_as_float(hi << 16) + __uint_as_float(hi & 0xFFFF0000u);
    *reinterpret_cast<uint32_t*>(p_lo + 8 * n) = lo;
    *reinterpret_cast<uint32_t*>(p_hi + 8 * n) = hi;
  }
  st.l_lo = fmaf(st.l_lo, alpha_lo, sum_lo);
  st.l_hi = fmaf(st.l_hi, alpha_hi, sum_hi);
}

// Step 5: o = o alpha + P V. Warp w = (head half hh = w / 4, dim quarter dq = w % 4)
// accumulates O[32 hh .. + 32][dq D / 4 .. + D / 4] (two m-tiles x D / 32 n-tiles: 128 fp32
// per thread at D = 512), so every V fragment (B = V [k = row][n = dim], ldmatrix.trans)
// feeds both m-tiles; the chunk's P V is a fresh fragment (two k-steps) added by one FMA per
// element. alpha[m][0 / 1]: heads g / g + 8 of m-tile m. o[m][2 i + j]: m-tile m, n-tile j
// of pair i (dims dq D / 4 + 16 i + 8 j ..).
__device__ __forceinline__ void AccumulateChunk(const Smem& s, int64_t d, int hh, int dq,
                                                const float (&alpha)[2][2],
                                                float (&o)[2][2 * kPairsPerWarp][4]) {
  const int lane = threadIdx.x & 31, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = RowStride(d);
  const int pairs = static_cast<int>(d / 64);
  uint32_t a[2][2][4];  // [m-tile][k-step]
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int kk = 0; kk < 2; ++kk) {
      LdMatrixX4(a[m][kk], s.p + (32 * hh + 16 * m + mrow + 8 * (mat & 1)) * kPStride + 16 * kk +
                               8 * (mat >> 1));
    }
  }
  const uint16_t* v_row = s.kv + (mrow + 8 * (mat & 1)) * rs + dq * (d / 4) + 8 * (mat >> 1);
#pragma unroll
  for (int i = 0; i < kPairsPerWarp; ++i) {
    if (i < pairs) {
      float part[2][2][4];  // [m-tile][n-tile of the pair]
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        uint32_t b[4];
        LdMatrixX4Trans(b, v_row + 16 * kk * rs + 16 * i);
#pragma unroll
        for (int m = 0; m < 2; ++m) {
          if (kk == 0) {
            MmaBf16First(part[m][0], a[m][0], b[0], b[1]);
            MmaBf16First(part[m][1], a[m][0], b[2], b[3]);
          } else {
            MmaBf16(part[m][0], a[m][1], b[0], b[1]);
            MmaBf16(part[m][1], a[m][1], b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int m = 0; m < 2; ++m) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          float* acc = o[m][2 * i + j];
          acc[0] = fmaf(acc[0], alpha[m][0], part[m][j][0]);
          acc[1] = fmaf(acc[1], alpha[m][0], part[m][j][1]);
          acc[2] = fmaf(acc[2], alpha[m][1], part[m][j][2]);
          acc[3] = fmaf(acc[3], alpha[m][1], part[m][j][3]);
        }
      }
    }
  }
}

// End: the softmax warps (tile, half) sum their partial denominators (quad shuffle, then
// even warp + odd warp of the pair), form 1 / l = 1 / (exp(sink - m) + sum) of their heads
// and publish it in s.inv; the P V warps (hh, dq) write out = o / l.
__device__ void WriteOutput(const model::SparseAttentionArgs& a, int64_t t, int64_t head0,
                            const Smem& s, int tile, int half, const HeadState& st,
                            const float (&o)[2][2 * kPairsPerWarp][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int64_t d = a.head_dim;
  float l_lo = st.l_lo, l_hi = st.l_hi;
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  // The partner read this warp's last chunk max before the last chunk's quad barrier.
  if (q4 == 0) s.part[warp * 16 + g] = l_lo, s.part[warp * 16 + g + 8] = l_hi;
  PairBarrier(tile);
  const float* even = s.part + (warp & ~1) * 16;
  const float* odd = even + 16;
  const int h_lo = 16 * tile + g;
  if (half == 0 && q4 == 0) {
    s.inv[h_lo] = 1.0f / (expf(a.sinks[head0 + h_lo] - st.m_lo) + (even[g] + odd[g]));
    s.inv[h_lo + 8] =
        1.0f / (expf(a.sinks[head0 + h_lo + 8] - st.m_hi) + (even[g + 8] + odd[g + 8]));
  }
  const int hh = warp >> 2, dq = warp & 3;
  QuadBarrier(hh);
  const int pairs = static_cast<int>(d / 64);
#pragma unroll
  for (int m = 0; m < 2; ++m) {
    const int h = 32 * hh + 16 * m + g;
    const float inv_lo = s.inv[h], inv_hi = s.inv[h + 8];
    float* out_lo = a.out + (t * a.heads + head0 + h) * d + dq * (d / 4) + 2 * q4;
    float* out_hi = out_lo + 8 * d;
#pragma unroll
    for (int n = 0; n < 2 * kPairsPerWarp; ++n) {
      if (n < 2 * pairs) {
        const float* v = o[m][n];
        *reinterpret_cast<float2*>(out_lo + 8 * n) = make_float2(v[0] * inv_lo, v[1] * inv_lo);
        *reinterpret_cast<float2*>(out_hi + 8 * n) = make_float2(v[2] * inv_hi, v[3] * inv_hi);
      }
    }
  }
}

// Grid (tokens, heads / 64), kThreads threads, SharedBytes(D); see the top of the file.
// Chunk c's bf16 rows live in kv slot c % 2; during chunk c each thread converts its own
// cp.async share of chunk c + 1 into the other slot and issues its copies of chunk c + 2,
// between the softmax and P V, so one block barrier per chunk remains.
__global__ void __launch_bounds__(kThreads, 1)
    SparseAttentionPrefillKernel(model::SparseAttentionArgs a, int* error_word) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int64_t d = a.head_dim, rs = RowStride(d);
  const Smem s(smem_bytes, d);
  const int64_t t = blockIdx.x, head0 = int64_t{blockIdx.y} * kHeads;
  const bool report = blockIdx.y == 0;  // one block per token reports range errors
  TokenRows rows(a, t, report && threadIdx.x == 0, error_word);
  rows.Trim(a, t, s.trim);
  const int64_t total = rows.candidates();
  const int64_t n_chunks = (total + kChunk - 1) / kChunk;
  uint32_t staged = 0;  // attended rows of this thread's share of the chunk in `raw`
  if (n_chunks > 0) staged = IssueOwnRows(a, t, rows, 0, total, s.raw, report, error_word);

  const float* q = a.q + (t * a.heads + head0) * d;
  const int half_d = static_cast<int>(d / 2);
  for (int e = threadIdx.x; e < kHeads * half_d; e += kThreads) {
    const int h = e / half_d, c = 2 * (e - h * half_d);
    *reinterpret_cast<uint32_t*>(s.q + h * rs + c) = PackBf16(q[h * d + c], q[h * d + c + 1]);
  }
  bool inexact = false;
  if (n_chunks > 0) {
    ConvertOwnRows(s.raw, staged, d, s.kv, s.kv_valid, inexact);  // chunk 0 -> slot 0
    if (n_chunks > 1) staged = IssueOwnRows(a, t, rows, kChunk, total, s.raw, report, error_word);
  }

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile = warp >> 1, half = warp & 1, g = lane >> 2, q4 = lane & 3;
  // P V: head half hh, dim quarter dq; S: head half hh, chain dq.
  const int hh = warp >> 2, dq = warp & 3;
  HeadState st;
  st.m_lo = a.sinks[head0 + 16 * tile + g];
  st.m_hi = a.sinks[head0 + 16 * tile + g + 8];
  st.l_lo = 0.0f, st.l_hi = 0.0f;
  float o[2][2 * kPairsPerWarp][4];
#pragma unroll
  for (int m = 0; m < 2; ++m) {
#pragma unroll
    for (int n = 0; n < 2 * kPairsPerWarp; ++n) {
#pragma unroll
      for (int i = 0; i < 4; ++i) o[m][n][i] = 0.0f;
    }
  }

  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    const Smem cur = s.Slot(static_cast<int>(ch & 1), d);
    // Slot ch % 2 (chunk ch) and q are written; every warp is done with chunk ch - 1 (its
    // slot, P and alpha).
    __syncthreads();
    float acc[2][4];
    {
      float chain[2][4][4];
      ScoreChunkChain(cur, d, hh, dq, chain);
      SumChainsAcrossWarps(cur, hh, dq, chain, acc);
    }
    float alpha_lo, alpha_hi;
    SoftmaxChunk(cur, a.scale, tile, half, acc, st, alpha_lo, alpha_hi);
    if (half == 0 && q4 == 0)
      s.alpha[16 * tile + g] = alpha_lo, s.alpha[16 * tile + g + 8] = alpha_hi;
    if (ch + 1 < n_chunks) {
      const Smem next = s.Slot(static_cast<int>((ch + 1) & 1), d);
      ConvertOwnRows(s.raw, staged, d, next.kv, next.kv_valid, inexact);
      if (ch + 2 < n_chunks) {
        staged = IssueOwnRows(a, t, rows, (ch + 2) * kChunk, total, s.raw, report, error_word);
      }
    }
    QuadBarrier(hh);  // P and alpha of the head half are written
    float alpha[2][2];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      alpha[m][0] = s.alpha[32 * hh + 16 * m + g];
      alpha[m][1] = s.alpha[32 * hh + 16 * m + g + 8];
    }
    AccumulateChunk(cur, d, hh, dq, alpha, o);
  }
  if (__any_sync(0xffffffffu, inexact) && lane == 0) atomicOr(error_word, kErrAttnKvNotBf16);
  WriteOutput(a, t, head0, s, tile, half, st, o);
}

}  // namespace

bool SparseAttentionPrefillApplicable(const model::SparseAttentionArgs& a) {
  return a.heads > 0 && a.heads % kAttnPrefillHeadsPerBlock == 0 &&
         a.heads / kAttnPrefillHeadsPerBlock <= 65535 && a.head_dim >= 64 && a.head_dim % 64 == 0 &&
         a.head_dim <= kAttnPrefillMaxHeadDim && a.tokens >= 0 && a.tokens <= 0x7fffffff &&
         a.n_select >= 0 && a.n_window >= 0 && a.n_comp >= 0 &&
         (a.n_window == 0 || Aligned16(a.window_kv)) && (a.n_comp == 0 || Aligned16(a.comp_kv)) &&
         (reinterpret_cast<uintptr_t>(a.out) & 7u) == 0;  // float2 stores
}

cudaError_t SparseAttentionPrefill(const model::SparseAttentionArgs& args, int* error_word,
                                   cudaStream_t stream) {
  if (!SparseAttentionPrefillApplicable(args)) return cudaErrorInvalidValue;
  if (args.tokens == 0) return cudaSuccess;
  if (AttnPrefillUsesWgmma(args)) return SparseAttentionPrefillWgmma(args, error_word, stream);
  const int64_t smem = SharedBytes(args.head_dim);
  const cudaError_t e =
      launch::RaiseMaxDynamicSmem(SparseAttentionPrefillKernel, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(args.tokens),
                  static_cast<unsigned>(args.heads / kAttnPrefillHeadsPerBlock));
  return pdl::Launch(SparseAttentionPrefillKernel, grid, kThreads, smem, stream, args, error_word);
}

}  // namespace deepinfer::backend::cuda::kernels
