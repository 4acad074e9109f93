// Tensor-core sparse sink attention (see kernels_attn_mma.h for the contract).
//
// Roofline, DeepSeek-V4.1 (H = 64 heads, D = 512, N = 640 entries per token = 128 window
// rows + 512 selected compressed entries; H200: ~4.8 TB/s HBM, mma.sync bf16 roughly
// 0.5-0.65 PFLOP/s dense):
//   model FLOPs per token  = 2 * H * N * D (S = q K^T) + 2 * H * N * D (O = P V) = 83.9 MFLOP
//   tensor FLOPs per token = 3 x that (q and P as three bf16 terms)              = 252 MFLOP
//   bytes per token        = q + out 2 * H * D * 4 = 256 KiB (HBM), rows N * D * 4 = 1.25 MiB
//                            gathered fp32 per 16-head block (x4 blocks = 5 MiB through L2;
//                            the distinct rows of a prefill are a few MiB in all)
//   4096 tokens: 1.03 TFLOP of tensor work -> 1.6-2.1 ms at the mma.sync rate; 21 GB through
//   L2 (~2-4 ms) and 1.1 GB from HBM (0.22 ms). Shared memory is the tighter limit of this
//   design: ~150 KB of traffic per block and 16-entry chunk (q terms 48 KB, fp32->bf16
//   conversion 48 KB, rows 32 KB, score partials 24 KB) -> ~3 ms at 128 B/clk/SM. Expected
//   4-8 ms (the fp32 CUDA-core kernel: 268 ms). Decode T = 32: 128 blocks (2 splits each) x
//   40 chunks of 16 entries, ~20-40 us (fp32 kernel ~300 us). MEASURED (H200): T = 4096 x
//   640 candidates, one bf16 term (FP8 mode) 13.3 ms a call (the prefill path now takes
//   k_attention_prefill.cu: 5.2 ms); decode (ncu, one call at 4k: 128 window rows + 512
//   selected entries per token): T = 1 30 us, T = 8 61 us, T = 32 97 us (run 65; 47 / 97 /
//   130 us before the chunk loops lost their 64-bit index divisions).
//
// Structure. A block (8 warps, 256 threads) serves one token and 16 heads (the M side of
// every MMA); grid (tokens, heads / 16, splits). q of the 16 heads is split once into
// bf16 hi / mid / lo (SplitBf16x3: exact for normal fp32 values) in shared memory. The token's
// candidates (its window rows, then its selection slots; the same order and masking as
// kernels::SparseAttention and the CPU reference) run in chunks of kChunk = 16 rows:
//   1. the chunk's fp32 rows were copied by cp.async into stage ch % S of `raw` during the
//      previous S chunks (S stages: 1, or 2-3 in FP8 mode, see kMaxRawStages); they are
//      converted to bf16 `kv` (exact; a row that is not exact bf16 is rounded and flagged
//      kErrAttnKvNotBf16), rows not attended are zero;
//   2. the copies of chunk ch + S are issued into the stage just converted;
//   3. S = q K^T: warp w takes k-steps (16 channels) w, w + 8, .. of D for all 16 x 16
//      (head, row) scores (3 MMAs per k-step and n-tile: lo, mid, hi), writes its partial
//      to `spart`; the 8 partials are added in warp order (deterministic);
//   4. online softmax per head in fp32 (thread = (head, row)): running max m (starting at
//      the sink logit), p = exp(s - m), denominator l (starting at exp(sink - m) = 1),
//      rescale alpha; p split into bf16 hi / mid / lo;
//   5. O = O * alpha + P V: warp w owns channels [w D / 8, (w + 1) D / 8); each chunk's
//      P V goes into a fresh fp32 fragment (3 MMAs per n-tile: lo, mid, hi) that is then
//      added in fp32 round-to-nearest (tensor-core accumulation truncates; fresh partials
//      keep that to a few MMAs per rounding).
// out = O / l. Batch invariance: the candidates run as attention::kLanes fixed lanes,
// each from a fresh state, merged by a fixed binary tree (attention_common.cuh), so out[t]
// is bitwise the same whatever the other tokens of the call are. When tokens x head groups
// leave SMs idle (decode), the lanes are spread over a thread-block cluster of 2, 4 or 8
// blocks whose subtree roots are merged through distributed shared memory, exactly like
// kernels::SparseAttention.
//
// Cost of the lane tree (estimate, V4.1 shapes, 640 entries = 40 chunks): T = 1 (8 blocks
// per cluster, one lane each) and T = 32 (2 blocks, 4 lanes each) keep the former split;
// per lane end a block spends 2 barriers, 16 expf per head and <= 3 folds of its 32
// accumulator floats per thread, and parks pending subtrees in local memory (<= 7 stores +
// 7 loads of 32 KiB per block at T >= 34, i.e. < 1/2 of one chunk's row gather each); the
// chunk loop itself is unchanged. Expected: T = 1 and T = 32 within ~1%, T = 4096 (one
// block runs all 8 lanes) within ~3% (7 lane ends against 40 chunks). Token-count splits
// that were not a power of two (T = 9..16) now round down to 4 (was 5..7): up to ~25%
// slower there. TokenRows::Trim adds one scan of the token's window positions and
// selection ids (decode: 129 + 512 ints, one L2 round trip and 2 barriers before the first
// gather, ~1 us on T = 1's 38 us) and removes the masked rows at the ends of the range: in
// the engine a prefill chunk of T rows gives every token a window range of (cached + T)
// rows, which were all staged before (4224 rows at T = 4096, ~7x the attended 640); now
// ~40 chunks per token.
//
// Shared memory (D = 512): q terms 48.75 KiB, raw 32 KiB, kv 16.25 KiB, score partials
// 12 KiB, P terms 2.25 KiB: ~112 KiB, two blocks per SM. FP8 mode (one q term, 16.25 KiB):
// 110 KiB with two raw stages (two blocks per SM), 142 KiB with three (small decode grids, one
// block per SM). MEASURED (H200, 4-layer step at 4k, interleaved A/B): three stages at B = 1
// (32 blocks) 1.41-1.43 ms against 1.43-1.47 with two (run 134); B = 2 / 3 (64 / 96 blocks)
// 1.67-1.72 / 1.82-1.90 against 1.71-1.74 / 1.88-1.91, but B = 4 (128 blocks, 16 clusters of
// 8 at one block per SM) 2.10-2.18 against 2.07-2.11 (run 137); at B = 8 / 32 (256 blocks)
// three or four stages cost the second block per SM (+0.07-0.14 / +0.13-0.29 ms, runs
// 133-134). Hence three stages up to 3/4 of the SM count in blocks, else two.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using attention::CandidateRow;
using attention::kLaneLevels;
using attention::kMergeCoefs;
using attention::TokenRows;
using mma::CpAsync16;
using mma::CpAsyncCommit;
using mma::CpAsyncWaitAll;
using mma::CpAsyncWaitAllBut;
using mma::LdMatrixX4;
using mma::LdMatrixX4Trans;
using mma::MmaBf16;
using mma::SharedAddress;

namespace cg = cooperative_groups;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kHeads = static_cast<int>(kAttnMmaHeadsPerBlock);  // M side: one m-tile
constexpr int kChunk = 16;                                       // candidate rows per round
constexpr int kMaxTerms = 3;  // q and P as bf16 hi, mid, lo (exact); 1 = rounded to bf16
constexpr int kMaxKSteps = static_cast<int>(kAttnMmaMaxHeadDim) / 16;
constexpr int kKStepsPerWarp = kMaxKSteps / kWarps;  // QK: at most 4 k-steps per warp
constexpr int kMaxNTilesPerWarp = static_cast<int>(kAttnMmaMaxHeadDim) / 8 / kWarps;  // PV: 8
constexpr int kRowsPerWarp = kChunk / kWarps;  // staging: rows issued per warp
constexpr int kSpStride = kChunk + 8;          // fp32 score partial row (bank spread)
constexpr int kPStride = kChunk + 8;           // bf16 P row: 48 bytes (ldmatrix conflict-free)
static_assert(kHeads * kChunk == kThreads, "softmax: one thread per (head, row)");
static_assert(kChunk == 16, "one PV k-step and two QK n-tiles per chunk");
static_assert(kChunk % kWarps == 0, "whole rows per warp when staging");

// --- shared memory ---------------------------------------------------------------------
__host__ __device__ inline int64_t RowStride(int64_t d) { return d + 8; }  // bf16 elements

// Chunks of fp32 rows in flight (cp.async stages of `raw`, a kernel template parameter; 32
// KiB each at D = 512). Three q terms: one (a second would cost the second block per SM). One
// term (FP8 mode): two (110 KiB, still two blocks per SM), or kSmallGridStages when the grid
// has at most 3/4 of the SM count in blocks (decode B <= 3: 32-96 blocks; see the measurements
// at the top). Physical only: no bit depends on it. SetSparseAttentionMmaStages overrides the
// choice (A/B runs, tests).
constexpr int kMaxRawStages = 4;
constexpr int kSmallGridStages = 3;

template <int kTerms>
struct Smem {
  uint16_t* q;       // [kTerms][kHeads][d + 8] bf16 terms of q (hi, mid, lo)
  float* raw;        // [kStages][kChunk][d] fp32 rows in flight (chunk c in stage
                     // c % kStages); after the loop: O partial [kHeads][d]
  uint16_t* kv;      // [kChunk][d + 8] bf16 rows of the current chunk (zero if not attended)
  float* spart;      // [kWarps][kHeads][kSpStride] per-warp partial scores
  uint16_t* p;       // [kTerms][kHeads][kPStride] bf16 terms of the probabilities
  float* m;          // [kHeads] running max
  float* l;          // [kHeads] running denominator
  float* alpha;      // [kHeads] rescale of O for the current chunk
  float* coef;       // [kHeads][kMergeCoefs] cluster merge weights (aliases spart)
  float* step_a;     // [kLaneLevels][kHeads] fold weights at a lane's end (aliases spart)
  float* step_b;     // [kLaneLevels][kHeads] (aliases spart)
  float* pending_m;  // [kLaneLevels][kHeads] pending subtrees of the block's lanes
  float* pending_l;  // [kLaneLevels][kHeads]
  long long* trim;   // [4] TokenRows::Trim scratch
  int* raw_valid;    // [kStages][kChunk] 1 if the row in `raw` is attended
  int* kv_valid;     // [kChunk] 1 if the row in `kv` is attended

  __device__ Smem(unsigned char* base, int64_t d, int stages) {
    const int64_t rs = RowStride(d);
    q = reinterpret_cast<uint16_t*>(base);
    raw = reinterpret_cast<float*>(q + kTerms * kHeads * rs);
    kv = reinterpret_cast<uint16_t*>(raw + stages * kChunk * d);
    spart = reinterpret_cast<float*>(kv + kChunk * rs);
    p = reinterpret_cast<uint16_t*>(spart + kWarps * kHeads * kSpStride);
    m = reinterpret_cast<float*>(p + kTerms * kHeads * kPStride);
    l = m + kHeads;
    alpha = l + kHeads;
    coef = spart;  // spart is free after the chunk loop and at lane ends
    step_a = spart + kHeads * kMergeCoefs;
    step_b = step_a + kLaneLevels * kHeads;
    pending_m = alpha + kHeads;
    pending_l = pending_m + kLaneLevels * kHeads;
    trim = reinterpret_cast<long long*>(pending_l + kLaneLevels * kHeads);
    raw_valid = reinterpret_cast<int*>(trim + 4);
    kv_valid = raw_valid + stages * kChunk;
  }
};

int64_t SharedBytes(int64_t d, int kTerms, int64_t stages) {
  const int64_t rs = RowStride(d);
  return kTerms * kHeads * rs * 2 + stages * kChunk * d * 4 + kChunk * rs * 2 +
         kWarps * kHeads * kSpStride * 4 + kTerms * kHeads * kPStride * 2 + 3 * kHeads * 4 +
         2 * kLaneLevels * kHeads * 4 + 4 * 8 + (stages + 1) * kChunk * 4;
}
static_assert(kHeads * kMergeCoefs + 2 * kLaneLevels * kHeads <= kWarps * kHeads * kSpStride,
              "merge and fold weights fit in spart");
static_assert(kChunk >= kHeads, "the O partial of the split merge fits in `raw`");

// The source rows this warp stages for the chunk of candidate rows [row0, row0 + kChunk)
// (clipped to row_end): row warp * kRowsPerWarp + k, null if not attended. Resolved one
// chunk ahead of its copies, so that the index loads behind an address (window position,
// selection id) are off the copy's critical path.
using ChunkSources = const float* [kRowsPerWarp];

__device__ void ResolveChunk(const model::SparseAttentionArgs& a, int64_t t, const TokenRows& rows,
                             int64_t row0, int64_t row_end, int* error_word, ChunkSources& src) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int64_t j = row0 + warp * kRowsPerWarp + k;
    src[k] = j < row_end ? CandidateRow(a, t, rows, j, lane == 0, error_word) : nullptr;
  }
}

// Issues the cp.async copies of a resolved chunk into stage `stage` of s.raw, as one commit
// group; s.raw_valid says which rows are attended.
template <int kTerms>
__device__ void IssueChunk(const ChunkSources& src, int64_t d, const Smem<kTerms>& s, int stage) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = static_cast<int>(d);
  float* raw = s.raw + stage * kChunk * d;
#pragma unroll
  for (int k = 0; k < kRowsPerWarp; ++k) {
    const int r = warp * kRowsPerWarp + k;
    if (src[k] != nullptr) {
      for (int c = 4 * lane; c < n; c += 128) CpAsync16(raw + r * d + c, src[k] + c);
    }
    if (lane == 0) s.raw_valid[stage * kChunk + r] = src[k] != nullptr;
  }
  CpAsyncCommit();
}

// s.kv = bf16(stage `stage` of s.raw) for attended rows, zero for the others. Returns true if
// this thread saw a value that is not exactly bf16.
template <int kTerms>
__device__ bool ConvertChunk(const Smem<kTerms>& s, int64_t d, int stage) {
  return attention::ConvertRowsToBf16<kChunk>(
      s.raw + stage * kChunk * d, s.raw_valid + stage * kChunk, d, RowStride(d), s.kv, s.kv_valid);
}

// Step 3: warp w's partial scores over its k-steps for all (head, row) of the chunk.
template <int kTerms>
__device__ void ScoreChunk(const Smem<kTerms>& s, int64_t d) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = RowStride(d);
  const int ksteps = static_cast<int>(d / 16);
  float acc[2][4] = {};
#pragma unroll
  for (int i = 0; i < kKStepsPerWarp; ++i) {
    const int ks = warp + i * kWarps;
    if (ks < ksteps) {
      const int k0 = ks * 16;
      // A (q terms): matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15).
      const int a_row = mrow + 8 * (mat & 1), a_col = k0 + 8 * (mat >> 1);
      uint32_t a[kTerms][4];
#pragma unroll
      for (int term = 0; term < kTerms; ++term) {
        LdMatrixX4(a[term], s.q + (term * kHeads + a_row) * rs + a_col);
      }
      // B (rows as [n][k]): n-tile 0 (k 0-7, 8-15), n-tile 1 (k 0-7, 8-15).
      uint32_t b[4];
      LdMatrixX4(b, s.kv + (mrow + 8 * (mat >> 1)) * rs + k0 + 8 * (mat & 1));
#pragma unroll
      for (int term = kTerms - 1; term >= 0; --term) {  // lo, mid, hi: smallest first
        MmaBf16(acc[0], a[term], b[0], b[1]);
        MmaBf16(acc[1], a[term], b[2], b[3]);
      }
    }
  }
  float* sp = s.spart + warp * kHeads * kSpStride;
#pragma unroll
  for (int n = 0; n < 2; ++n) {
    const int col = 8 * n + 2 * q4;
    *reinterpret_cast<float2*>(sp + g * kSpStride + col) = make_float2(acc[n][0], acc[n][1]);
    *reinterpret_cast<float2*>(sp + (g + 8) * kSpStride + col) = make_float2(acc[n][2], acc[n][3]);
  }
}

// Step 4: thread (head h = tid / 16, row r = tid % 16); the 16 threads of a head are one
// half-warp.
template <int kTerms>
__device__ void SoftmaxChunk(const Smem<kTerms>& s, float scale) {
  const int h = threadIdx.x >> 4, r = threadIdx.x & 15;
  float dot = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) dot += s.spart[(w * kHeads + h) * kSpStride + r];
  const bool valid = s.kv_valid[r] != 0;
  const float sc = valid ? dot * scale : NegInf();
  float cmax = sc;
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, off));
  const float m_old = s.m[h];
  const float m_new = fmaxf(m_old, cmax);
  const float pr = valid ? expf(sc - m_new) : 0.0f;
  float sum = pr;
#pragma unroll
  for (int off = 8; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if constexpr (kTerms == 1) {
    s.p[h * kPStride + r] = __bfloat16_as_ushort(__float2bfloat16_rn(pr));
  } else {
    const Bf16x3 parts = SplitBf16x3(pr);
    s.p[(0 * kHeads + h) * kPStride + r] = parts.hi;
    s.p[(1 * kHeads + h) * kPStride + r] = parts.mid;
    s.p[(2 * kHeads + h) * kPStride + r] = parts.lo;
  }
  __syncwarp();  // every lane of the head has read s.m[h]
  if (r == 0) {
    const float alpha = expf(m_old - m_new);
    s.alpha[h] = alpha;
    s.l[h] = s.l[h] * alpha + sum;
    s.m[h] = m_new;
  }
}

// Step 5: o[n] (n-tile n of warp w's channels) = o[n] * alpha + P V.
template <int kTerms>
__device__ void AccumulateChunk(const Smem<kTerms>& s, int64_t d,
                                float (&o)[kMaxNTilesPerWarp][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = RowStride(d);
  const int nt = static_cast<int>(d / 64);  // n-tiles per warp
  const int64_t d0 = int64_t{warp} * nt * 8;
  uint32_t a[kTerms][4];
#pragma unroll
  for (int term = 0; term < kTerms; ++term) {
    LdMatrixX4(a[term], s.p + (term * kHeads + mrow + 8 * (mat & 1)) * kPStride + 8 * (mat >> 1));
  }
  const float alpha_lo = s.alpha[g], alpha_hi = s.alpha[g + 8];
#pragma unroll
  for (int pair = 0; pair < kMaxNTilesPerWarp / 2; ++pair) {
    if (2 * pair < nt) {
      // B = V [k = row][n = channel]: matrices (rows 0-7 | 8-15) x (n-tile 2 pair | +1),
      // transposed. With nt odd the second n-tile reads the next warp's channels (or the
      // row padding) and is discarded.
      uint32_t b[4];
      LdMatrixX4Trans(b, s.kv + (mrow + 8 * (mat & 1)) * rs + d0 + 16 * pair + 8 * (mat >> 1));
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int n = 2 * pair + half;
        if (n < nt) {
          float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
          for (int term = kTerms - 1; term >= 0; --term) {
            MmaBf16(part, a[term], b[2 * half], b[2 * half + 1]);
          }
          o[n][0] = o[n][0] * alpha_lo + part[0];
          o[n][1] = o[n][1] * alpha_lo + part[1];
          o[n][2] = o[n][2] * alpha_hi + part[2];
          o[n][3] = o[n][3] * alpha_hi + part[3];
        }
      }
    }
  }
}

// Merges the subtree roots of the cluster's blocks (O in each block's s.raw as
// [kHeads][d], m and l in s.m, s.l) with the upper levels of the lane tree.
template <int kTerms>
__device__ void MergeSplits(const model::SparseAttentionArgs& a, int64_t t, int64_t head_base,
                            const Smem<kTerms>& s) {
  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t d = a.head_dim;
  attention::ClusterMergeCoefs(s.m, s.l, s.coef, kHeads);  // every root m, l, O is final
  const int n = static_cast<int>(d);                       // <= kAttnMmaMaxHeadDim: 32-bit indices
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < kHeads * n;
       e += splits * kThreads) {
    const int h = e / n, c = e - h * n;
    a.out[(t * a.heads + head_base + h) * d + c] =
        attention::ClusterTreeValue(splits, s.coef + h * kMergeCoefs,
                                    [&](int b) { return *cluster.map_shared_rank(s.raw + e, b); });
  }
  cluster.sync();  // keep this block's shared memory alive until every block has read it
}

// Per thread: the pending subtrees of the block's lanes, the same fragment layout as `o`
// (local memory: indexed by tree level, touched only at lane ends).
using PendingFragments = float[kLaneLevels][kMaxNTilesPerWarp][4];

// End of lane `lane` of the block (attention::EndLaneScalars): folds the lane's state into
// the block's tree and starts the next lane from the fresh state (m = sink, l = 0, o = 0),
// or leaves the block's root in s.m, s.l and o for the block's last lane.
template <int kTerms>
__device__ void EndLane(const model::SparseAttentionArgs& a, int64_t head_base,
                        const Smem<kTerms>& s, int lane, int block_levels, bool last,
                        float (&o)[kMaxNTilesPerWarp][4], PendingFragments& pending) {
  __syncthreads();  // the lane's m, l are final; spart and the previous weights are free
  if (threadIdx.x < kHeads) {
    const int h = threadIdx.x;
    float m = s.m[h], l = s.l[h];
    attention::EndLaneScalars(lane, block_levels, last, m, l, s.pending_m, s.pending_l, s.step_a,
                              s.step_b, kHeads, h);
    s.m[h] = last ? m : a.sinks[head_base + h];
    s.l[h] = last ? l : 0.0f;
  }
  __syncthreads();
  const int g = (threadIdx.x & 31) >> 2;
  const int nt = static_cast<int>(a.head_dim / 64);
  const int folds = attention::EndLaneFolds(lane, block_levels);
  for (int level = 0; level < folds; ++level) {
    const float a_lo = s.step_a[level * kHeads + g], b_lo = s.step_b[level * kHeads + g];
    const float a_hi = s.step_a[level * kHeads + g + 8], b_hi = s.step_b[level * kHeads + g + 8];
#pragma unroll
    for (int n = 0; n < kMaxNTilesPerWarp; ++n) {
      if (n < nt) {
        o[n][0] = attention::FoldValue(pending[level][n][0], o[n][0], a_lo, b_lo);
        o[n][1] = attention::FoldValue(pending[level][n][1], o[n][1], a_lo, b_lo);
        o[n][2] = attention::FoldValue(pending[level][n][2], o[n][2], a_hi, b_hi);
        o[n][3] = attention::FoldValue(pending[level][n][3], o[n][3], a_hi, b_hi);
      }
    }
  }
  if (last) return;
#pragma unroll
  for (int n = 0; n < kMaxNTilesPerWarp; ++n) {
#pragma unroll
    for (int i = 0; i < 4; ++i) pending[folds][n][i] = o[n][i], o[n][i] = 0.0f;
  }
}

// s.q = the bf16 term(s) of q for the block's heads: one warp per head row; each lane loads
// all of its values of the row before converting any (one round of load latency per row;
// H200 run 66: no measurable change against the former loop, which the compiler had
// already pipelined).
template <int kTerms>
__device__ void StageQ(const model::SparseAttentionArgs& a, int64_t t, int64_t head_base,
                       const Smem<kTerms>& s) {
  constexpr int kPerLane = static_cast<int>(kAttnMmaMaxHeadDim) / 32;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = static_cast<int>(a.head_dim);
  const int64_t rs = RowStride(a.head_dim);
  for (int h = warp; h < kHeads; h += kWarps) {
    const float* row = a.q + (t * a.heads + head_base + h) * a.head_dim;
    float v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) v[i] = 32 * i + lane < n ? row[32 * i + lane] : 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int c = 32 * i + lane;
      if (c >= n) continue;
      if constexpr (kTerms == 1) {
        s.q[h * rs + c] = __bfloat16_as_ushort(__float2bfloat16_rn(v[i]));
      } else {
        const Bf16x3 parts = SplitBf16x3(v[i]);
        s.q[(0 * kHeads + h) * rs + c] = parts.hi;
        s.q[(1 * kHeads + h) * rs + c] = parts.mid;
        s.q[(2 * kHeads + h) * rs + c] = parts.lo;
      }
    }
  }
}

// Grid (tokens, heads / 16, splits), splits in {1, 2, 4, 8}; a cluster spans the splits of
// one (token, group). Block z runs lanes [z k, (z + 1) k), k = kLanes / splits, of its
// token's candidates (lane v = rows [v R, (v + 1) R), R = attention::LaneRows), each from a
// fresh online-softmax state, folded by the lane tree. kStages: chunks of rows in flight.
template <int kTerms, int kStages>
__global__ void __launch_bounds__(kThreads, 2)
    SparseAttentionMmaKernel(model::SparseAttentionArgs a, int* error_word) {
  pdl::WaitThenAllowNext();
  static_assert(kTerms == 1 || kTerms == kMaxTerms, "q and P as 1 or 3 bf16 terms");
  static_assert(kStages >= 1 && kStages <= kMaxRawStages, "1 to 4 chunks in flight");
  extern __shared__ __align__(16) unsigned char smem_bytes[];
  const int64_t d = a.head_dim, rs = RowStride(d);
  const Smem<kTerms> s(smem_bytes, d, kStages);
  const int64_t t = blockIdx.x, head_base = int64_t{blockIdx.y} * kHeads;
  const int split = blockIdx.z;
  TokenRows rows(a, t, threadIdx.x == 0 && blockIdx.y == 0 && split == 0, error_word);
  rows.Trim(a, t, s.trim);
  const int64_t total = rows.candidates();
  const int lanes = attention::kLanes / static_cast<int>(gridDim.z), first_lane = split * lanes;
  const int block_levels = attention::BlockLevels(static_cast<int>(gridDim.z));
  const int64_t lane_rows = attention::LaneRows(total, kChunk);
  const int64_t lane_chunks = lane_rows / kChunk;
  const int64_t row_limit = int64_t{first_lane} * lane_rows;
  const int64_t row_begin = total < row_limit ? total : row_limit;
  const int64_t row_stop = row_limit + lanes * lane_rows;
  const int64_t row_end = total < row_stop ? total : row_stop;
  const int64_t n_chunks = (row_end - row_begin + kChunk - 1) / kChunk;

  // Chunk c is copied into stage c % kStages, kStages chunks ahead of its math; `next` holds
  // the sources of the first chunk not yet issued (resolved one chunk before its copies).
  ChunkSources next;
  for (int c = 0; c <= kStages; ++c) {
    if (c < n_chunks) ResolveChunk(a, t, rows, row_begin + c * kChunk, row_end, error_word, next);
    if (c < kStages && c < n_chunks) IssueChunk(next, d, s, c);
  }
  StageQ(a, t, head_base, s);
  if (threadIdx.x < kHeads) {
    s.m[threadIdx.x] = a.sinks[head_base + threadIdx.x];
    s.l[threadIdx.x] = first_lane == 0 ? 1.0f : 0.0f;  // exp(sink - m): lane 0 only
  }

  float o[kMaxNTilesPerWarp][4] = {};
  PendingFragments pending;
  int64_t ch = 0;
  for (int lane = 0; lane < lanes; ++lane) {
    const int64_t lane_end =
        (lane + 1) * lane_chunks < n_chunks ? (lane + 1) * lane_chunks : n_chunks;
    for (; ch < lane_end; ++ch) {
      const int stage = static_cast<int>(ch % kStages);
      // Chunks ch + 1 .. ch + kStages - 1 (those issued) may still be in flight.
      const int64_t issued_after = n_chunks - 1 - ch;
      CpAsyncWaitAllBut(issued_after < kStages - 1 ? issued_after : kStages - 1);
      __syncthreads();  // raw(ch) landed; q, m, l set; the previous chunk's kv / p are free
      const bool inexact = ConvertChunk(s, d, stage);
      if (__syncthreads_or(inexact) && threadIdx.x == 0) atomicOr(error_word, kErrAttnKvNotBf16);
      if (ch + kStages < n_chunks) {  // the stage is free: copy a chunk during the math
        IssueChunk(next, d, s, stage);
        if (ch + kStages + 1 < n_chunks) {
          ResolveChunk(a, t, rows, row_begin + (ch + kStages + 1) * kChunk, row_end, error_word,
                       next);
        }
      }
      ScoreChunk(s, d);
      __syncthreads();
      SoftmaxChunk(s, a.scale);
      __syncthreads();
      AccumulateChunk(s, d, o);
    }
    EndLane(a, head_base, s, first_lane + lane, block_levels, lane + 1 == lanes, o, pending);
  }
  CpAsyncWaitAll();
  __syncthreads();  // m, l final; raw free

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q4 = lane & 3;
  const int nt = static_cast<int>(d / 64);
  const int64_t d0 = int64_t{warp} * nt * 8;
  if (gridDim.z == 1) {
    const float inv_lo = attention::InverseDenominator(s.l[g]);
    const float inv_hi = attention::InverseDenominator(s.l[g + 8]);
    float* out_lo = a.out + (t * a.heads + head_base + g) * d + d0 + 2 * q4;
    float* out_hi = out_lo + 8 * d;
#pragma unroll
    for (int n = 0; n < kMaxNTilesPerWarp; ++n) {
      if (n < nt) {
        out_lo[8 * n] = attention::Normalize(o[n][0], inv_lo);
        out_lo[8 * n + 1] = attention::Normalize(o[n][1], inv_lo);
        out_hi[8 * n] = attention::Normalize(o[n][2], inv_hi);
        out_hi[8 * n + 1] = attention::Normalize(o[n][3], inv_hi);
      }
    }
    return;
  }
#pragma unroll
  for (int n = 0; n < kMaxNTilesPerWarp; ++n) {
    if (n < nt) {
      float* part = s.raw + d0 + 8 * n + 2 * q4;
      part[g * d] = o[n][0], part[g * d + 1] = o[n][1];
      part[(g + 8) * d] = o[n][2], part[(g + 8) * d + 1] = o[n][3];
    }
  }
  MergeSplits(a, t, head_base, s);
}

// Blocks per (token, head group): as many as keep one wave of blocks (two per SM) full, a
// power of two <= kLanes, at most the (estimated) chunks per token. Physical only: the
// bits do not depend on it.
int Splits(int64_t blocks, int64_t chunks) {
  return attention::PhysicalSplits(2 * int64_t{attention::MultiprocessorCount()} / blocks, chunks);
}

}  // namespace

bool SparseAttentionMmaApplicable(const model::SparseAttentionArgs& a) {
  return a.heads > 0 && a.heads % kAttnMmaHeadsPerBlock == 0 &&
         a.heads / kAttnMmaHeadsPerBlock <= 65535 && a.head_dim >= 64 && a.head_dim % 64 == 0 &&
         a.head_dim <= kAttnMmaMaxHeadDim && a.tokens >= 0 && a.tokens <= 0x7fffffff &&
         a.n_select >= 0 && a.n_window >= 0 && a.n_comp >= 0 &&
         (a.n_window == 0 || Aligned16(a.window_kv)) && (a.n_comp == 0 || Aligned16(a.comp_kv));
}

namespace {

// The one-term stage count set by SetSparseAttentionMmaStages, initially
// DEEPINFER_ATTN_MMA_STAGES (0: chosen per launch, see kMaxRawStages).
std::atomic<int>& StagesOverride() {
  static std::atomic<int> stages = EnvIntClamped("DEEPINFER_ATTN_MMA_STAGES", 0, 0, kMaxRawStages);
  return stages;
}

template <int kTerms, int kStages>
cudaError_t LaunchMmaStages(const model::SparseAttentionArgs& args, int* error_word, int64_t groups,
                            int splits, cudaStream_t stream) {
  const auto kernel = SparseAttentionMmaKernel<kTerms, kStages>;
  const int64_t smem = SharedBytes(args.head_dim, kTerms, kStages);
  cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  return attention::LaunchClusterSplit(kernel, args, error_word, groups, splits, kThreads, smem,
                                       stream);
}

template <int kTerms>
cudaError_t LaunchMma(const model::SparseAttentionArgs& args, int* error_word,
                      cudaStream_t stream) {
  const int64_t groups = args.heads / kAttnMmaHeadsPerBlock;
  const int splits = Splits(args.tokens * groups, attention::CandidateChunks(args, kChunk));
  if constexpr (kTerms == 1) {
    int stages = StagesOverride().load(std::memory_order_relaxed);
    if (stages == 0) {
      const bool small_grid =
          4 * args.tokens * groups * splits <= 3 * int64_t{attention::MultiprocessorCount()};
      stages = small_grid ? kSmallGridStages : 2;
    }
    switch (stages) {
      case 1:
        return LaunchMmaStages<1, 1>(args, error_word, groups, splits, stream);
      case 2:
        return LaunchMmaStages<1, 2>(args, error_word, groups, splits, stream);
      case 3:
        return LaunchMmaStages<1, 3>(args, error_word, groups, splits, stream);
      default:
        return LaunchMmaStages<1, 4>(args, error_word, groups, splits, stream);
    }
  } else {
    return LaunchMmaStages<kTerms, 1>(args, error_word, groups, splits, stream);
  }
}

}  // namespace

void SetSparseAttentionMmaStages(int stages) {
  StagesOverride().store(stages >= 1 && stages <= kMaxRawStages ? stages : 0,
                         std::memory_order_relaxed);
}

cudaError_t SparseAttentionMma(const model::SparseAttentionArgs& args, int* error_word,
                               cudaStream_t stream, bool bf16_rounded) {
  if (!SparseAttentionMmaApplicable(args)) return cudaErrorInvalidValue;
  if (args.tokens == 0) return cudaSuccess;
  return bf16_rounded ? LaunchMma<1>(args, error_word, stream)
                      : LaunchMma<kMaxTerms>(args, error_word, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
