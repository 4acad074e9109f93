// Sparse sink attention for prefill in the FP8-activation mode on wgmma (Hopper warpgroup MMA),
// head_dim 512: the kernel SparseAttentionPrefill runs there unless the A/B knob turns it off
// (kernels_attn_prefill.h: contract and knob; k_attention_prefill.cu: the mma.sync kernel, other
// head dims).
//
// Structure. Grid (tokens, heads / 64); a block (two warpgroups, 256 threads, ~224 KiB of
// shared memory: one block per SM) serves one token and 64 heads, so the heads are the M = 64
// of every wgmma and the token's candidate rows are gathered once for all of them. q of the 64
// heads is rounded to bf16 once into shared memory (core-matrix layout, wgmma_bf16.cuh). The
// candidates (TokenRows after Trim) run in chunks of kChunk = 32 rows; chunk c's bf16 rows live
// in tile c % 3 (core-matrix layout), staged as in k_attention_prefill.cu: each thread copies
// (cp.async, fp32) and later converts exactly its own bytes. Per chunk c, in both warpgroups:
//   1. [block barrier: tile c % 3 and its valid-row word written; both warpgroups past the
//      wait of chunk c - 1, so S and P V of chunk c - 2 are done and tile (c + 1) % 3 is free]
//   2. S = q K^T for all 64 heads x 32 rows: 32 SS wgmma m64n32k16 (one MMA chain over the 512
//      dims per score), issued. Both warpgroups compute the same S (the same instructions on the
//      same shared memory), so each holds whole rows of P and no exchange is needed;
//   3. while they run: each thread converts its share of chunk c + 1 into tile (c + 1) % 3 and
//      issues its copies of chunk c + 2 (whose row keys were loaded just before);
//   4. wait (S(c), and P V(c - 1) before it); online softmax in registers: a thread holds heads
//      g and g + 8 of its warp's 16 x 32 rows of S; row max by a quad shuffle, m_new = max(m,
//      chunk max) (m starts at the finite sink logit), p = bf16(exp(s - m_new)), l = l alpha +
//      sum of the rounded p, O *= alpha (skipped by a warp whose alphas are all 1). Base 2:
//      scores and m are kept times log2(e) and each exp is one ex2.approx (relative error
//      ~2^-22, far below P's bf16 rounding);
//   5. O += P V: the bf16 P accumulator pairs are directly the A fragments of two RS wgmma
//      m64n256k16 (B = the tile read N-major: V rows x the warpgroup's 256 dims); warpgroup w
//      owns O dims 256 w .. + 255 (128 fp32 per thread); left running into the next chunk.
// At the end the partial denominators are summed over the quad (fixed order), l = exp(sink - m)
// + sum, out = O / l. Every token is computed by one block in a fixed order: deterministic, but
// the bits differ from the mma.sync kernel's (one chain per score instead of four, O scaled
// before the tensor core adds P V).
//
// Decode splits. With few tokens (decode batches) one block per token leaves most SMs idle, so
// the launch spreads each (token, head group) over a thread-block cluster of `splits` blocks
// (grid z; WgmmaSplits: as many as keep one block per SM, a power of two <= 8): block z runs
// chunks [z c, (z + 1) c) of the token's ceil(chunks / splits) = c, from a fresh state (m at the
// sink logit, l = 0, O = 0), and MergeSplits combines the states through distributed shared
// memory in rank order. The result depends on `splits`, i.e. on the token count of the call (as
// everything of this kernel; never in batch-invariant mode); splits = 1 is the path above.
//
// Roofline per chunk and SM (H200): MMAs 3 M MAC (S twice, P V once) = 1,536 clk at 2,048 bf16
// MAC/clk; shared memory ~400 KiB (S: q 64 + K 32 per warpgroup, P V: 16 per warpgroup, the
// staging 64 written + 64 read + 32 written) = ~3,200 clk at 128 B/clk; L2 64 KiB of fp32 rows.
// MEASURED (H200, AttnPrefillBench.DISABLED_V41Prefill: T 4096 x 640 candidates, ~620 chunks per
// SM): 2,686 us per call = ~4.3 us (~7,900 clk) per chunk, 128 TFLOP/s, against 4,247 us for the
// mma.sync kernel in the same run (run 159). ncu (run 157, an earlier version at 3,032 us): 2
// warps per scheduler issuing 0.34 instructions per cycle, the stall samples spread over the
// staging (cp.async issue ~12%, conversion ~15%), S issue ~7.5%, softmax ~6%, P V ~8%: latency,
// not one unit. Next: TMA bulk copies of whole rows, a bf16 KV cache (no conversion).
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_prefill.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_bf16.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

namespace cg = cooperative_groups;
using attention::TokenRows;

constexpr int kThreads = 256;  // two warpgroups
constexpr int kHeads = static_cast<int>(kAttnPrefillHeadsPerBlock);
constexpr int kD = static_cast<int>(kAttnPrefillWgmmaHeadDim);
constexpr int kChunk = 32;                                     // candidate rows per round
constexpr int kKBlocks = kD / 8;                               // core matrices along a row
constexpr uint32_t kRowGroupBytes = kKBlocks * 128;            // 8 rows of a tile (8 KiB)
constexpr uint32_t kQBytes = kHeads * kD * 2;                  // bf16 q (64 KiB)
constexpr uint32_t kTileBytes = kChunk * kD * 2;               // bf16 rows of a chunk (32 KiB)
constexpr uint32_t kRawBytes = kChunk * kD * 4;                // fp32 rows in flight (64 KiB)
constexpr int kCopies = kRawBytes / 16 / kThreads;             // 16-byte copies per thread (16)
constexpr int kTiles = 3;                                      // chunk c in tile c % 3
constexpr uint32_t kTilesOff = kQBytes;                        // the tiles
constexpr uint32_t kRawOff = kTilesOff + kTiles * kTileBytes;  // raw
constexpr uint32_t kValidOff = kRawOff + kRawBytes;  // [kTiles] words: row r attended = bit r
constexpr uint32_t kTrimOff = kValidOff + 16;        // TokenRows::Trim scratch
constexpr uint32_t kSmemBytes = kTrimOff + 4 * 8;
// MergeSplits' shared memory (after the chunk loop, over q / tiles / raw): the block's O as
// [kHeads][kOStride] fp32 (rows padded so that a warp's stores spread over the banks), then
// m [kHeads], l [kHeads] and the merge weights [kHeads][kMaxSplits].
constexpr int kMaxSplits = attention::kLanes;
constexpr int kOStride = kD + 8;
constexpr uint32_t kMergeMOff = kHeads * kOStride * 4;
constexpr uint32_t kMergeLOff = kMergeMOff + kHeads * 4;
constexpr uint32_t kMergeCoefOff = kMergeLOff + kHeads * 4;
static_assert(kHeads == 64 && kD == 512, "one m64 of heads, two n256 halves of O");
static_assert(kMergeCoefOff + kHeads * kMaxSplits * 4 <= kSmemBytes, "merge fits");
static_assert(kCopies * 16 * kThreads == static_cast<int>(kRawBytes), "whole copies");
static_assert(kSmemBytes <= 227 * 1024, "one block per SM");

// 2^x by the SFU (ex2.approx.ftz: max relative error ~2^-22; 2^-inf = 0). The softmax runs in
// base 2: scores and the running max are kept times log2(e), so every exp is one ex2.
__device__ __forceinline__ float Exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
constexpr float kLog2e = 1.4426950408889634f;

// Staging share of thread (warp w, lane l) in every chunk: rows 8 (w / 2) .. + 7 of the chunk,
// dims 256 (w % 2) .. + 255; lane l's row is 8 (w / 2) + (l % 16) / 2 and its copy i covers
// dims 256 (w % 2) + 16 i + 8 (l / 16) + 4 (l % 2) .. + 3. In the tile these 4 bf16 land at
// byte OwnTileOffset() + 256 i, so the 16 lanes of a half warp fill one core matrix (8 rows x
// 16 bytes) per copy: conflict-free stores. In raw, copy i of thread tid is at (i kThreads +
// tid) 16 bytes.
__device__ __forceinline__ uint32_t OwnTileOffset() {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  return (warp >> 1) * kRowGroupBytes + (warp & 1) * (kRowGroupBytes / 2) + (lane >> 4) * 128 +
         (lane & 15) * 8;
}

// The candidate key (attention_common.cuh) of lane (< 8)'s row of this warp pair in the chunk
// starting at row0 (row 8 (w / 2) + lane), or j = -1 for lanes >= 8 and rows past `total`.
// Loaded before the conversion that precedes its copies and resolved (ResolveRow) after it, so
// the load is in flight during the conversion instead of stalling the copies.
__device__ attention::CandidateKey LoadRowKey(const model::SparseAttentionArgs& a, int64_t t,
                                              const TokenRows& rows, int64_t row0, int64_t total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t j = row0 + 8 * (warp >> 1) + lane;
  if (lane >= 8 || j >= total) return {-1, 0};
  return attention::LoadCandidate(a, t, rows, j);
}

// The row of a LoadRowKey key, or null (none, or not attended).
__device__ const float* ResolveRow(const model::SparseAttentionArgs& a, const TokenRows& rows,
                                   attention::CandidateKey key, bool report, int* error_word) {
  if (key.j < 0) return nullptr;
  const bool reporter = report && ((threadIdx.x >> 5) & 1) == 0;  // one warp of each pair
  return attention::ResolveCandidate(a, rows, key, reporter, error_word);
}

// Issues this thread's copies of its row (`mine` of lane (l % 16) / 2, ResolveRow) into raw and
// writes the chunk's valid byte of this warp pair (bit k: row 8 (w / 2) + k attended) into
// valid_bytes. Returns true if this thread's row is attended (its bytes were copied).
__device__ bool IssueChunk(const float* mine, char* smem, uint8_t* valid_bytes) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const unsigned attended = __ballot_sync(0xffffffffu, mine != nullptr) & 0xFFu;
  if ((warp & 1) == 0 && lane == 0) valid_bytes[warp >> 1] = static_cast<uint8_t>(attended);
  const auto* row = reinterpret_cast<const float*>(
      __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine), (lane & 15) >> 1));
  if (row != nullptr) {
    const float* src = row + 256 * (warp & 1) + 8 * (lane >> 4) + 4 * (lane & 1);
    char* dst = smem + kRawOff + threadIdx.x * 16;
#pragma unroll
    for (int i = 0; i < kCopies; ++i) mma::CpAsync16(dst + i * kThreads * 16, src + 16 * i);
  }
  mma::CpAsyncCommit();
  return row != nullptr;
}

// Waits for this thread's copies and writes its share of the chunk as bf16 into the tile at
// `tile` (zeros if its row is not attended); sets `inexact` if a value was not exactly bf16.
// Fast path: the high halves of the fp32 bits (exact when every low half is 0, the rows the
// model produces); one test over the thread's share afterwards, and if any value was not
// exactly bf16 the share is converted again with rounding (Bf16Bits). Ends with the proxy fence
// that makes the stores visible to the wgmma (after a barrier).
__device__ void ConvertChunk(char* smem, bool attended, uint32_t tile, bool& inexact) {
  mma::CpAsyncWaitAll();
  const char* raw = smem + kRawOff + threadIdx.x * 16;
  char* dst = smem + tile + OwnTileOffset();
  uint32_t low = 0;  // OR of the low halves
#pragma unroll
  for (int i = 0; i < kCopies; ++i) {
    uint2 packed = make_uint2(0u, 0u);
    if (attended) {
      const uint4 v = *reinterpret_cast<const uint4*>(raw + i * kThreads * 16);
      low |= v.x | v.y | v.z | v.w;
      packed.x = __byte_perm(v.x, v.y, 0x7632);
      packed.y = __byte_perm(v.z, v.w, 0x7632);
    }
    *reinterpret_cast<uint2*>(dst + i * 256) = packed;
  }
  if ((low & 0xFFFFu) != 0) {  // rare: round every value of the share to nearest
#pragma unroll 1
    for (int i = 0; i < kCopies; ++i) {
      *reinterpret_cast<uint2*>(dst + i * 256) =
          attention::Bf16x4Bits(*reinterpret_cast<const float4*>(raw + i * kThreads * 16), inexact);
    }
  }
  wgmma::FenceProxyAsync();
}

// q of the block's 64 heads (fp32 [64][512], row stride 512) as bf16 in the core-matrix layout
// at smem offset 0: element (h, c) at ((h / 8) kKBlocks + c / 8) 128 + (h % 8) 16 + (c % 8) 2.
// Item e: 4 values (float4 load, one 8-byte store) of head 8 hb + hr, columns 4 cq ..; a warp
// covers 8 heads x 16 columns per round (two core matrices, 256 contiguous bytes).
__device__ void StageQ(const float* q, char* smem) {
  constexpr int kItems = kHeads * kD / 4, kPerThread = kItems / kThreads, kBatch = 16;
  static_assert(kPerThread % kBatch == 0, "whole batches");
  // Item e: head h = 8 hb + hr, columns c = 4 cq ..; its q offset and its shared byte offset.
  auto head_and_column = [](int e, int* h, int* c) {
    const int hr = e & 7, cq = (e >> 3) % (kD / 4), hb = e / (8 * (kD / 4));
    *h = 8 * hb + hr, *c = 4 * cq;
  };
  for (int b = 0; b < kPerThread; b += kBatch) {
    float4 v[kBatch];  // all loads of a batch in flight before its stores
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      int h, c;
      head_and_column(threadIdx.x + (b + k) * kThreads, &h, &c);
      v[k] = *reinterpret_cast<const float4*>(q + h * kD + c);
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      int h, c;
      head_and_column(threadIdx.x + (b + k) * kThreads, &h, &c);
      const uint32_t off = ((h / 8) * kKBlocks + c / 8) * 128 + (h % 8) * 16 + (c % 8) * 2;
      *reinterpret_cast<uint2*>(smem + off) =
          make_uint2(PackBf16(v[k].x, v[k].y), PackBf16(v[k].z, v[k].w));
    }
  }
  wgmma::FenceProxyAsync();
}

// Online-softmax state of the thread's heads g (lo) and g + 8 (hi) of its warp's 16.
struct HeadState {
  float m_lo, m_hi;  // running max times log2(e) (starts at the sink logit times log2(e))
  float l_lo, l_hi;  // partial denominator over this thread's columns (sink added at the end)
};

// The sink logit of head h in base-2 units: the running max starts here and the denominator's
// sink term is Exp2(SinkLog2 - m), the same expression both times (Exp2(0) = 1 exactly).
__device__ __forceinline__ float SinkLog2(const model::SparseAttentionArgs& a, int64_t h) {
  return __fmul_rn(a.sinks[h], kLog2e);
}

// Step 4 of the header for one chunk, in base-2 units (scale2 = scale log2(e); st.m = max
// times log2(e)): s (the m64n32 accumulators: s[4 j + e] = head g (e < 2) or g + 8, row
// 8 j + 2 t4 + (e & 1)) -> P as the A fragments of the two P V k-steps, alpha of the rows.
__device__ __forceinline__ void SoftmaxChunk(const float (&s)[16], uint32_t valid, float scale2,
                                             HeadState& st, uint32_t (&pa)[2][4], float& alpha_lo,
                                             float& alpha_hi) {
  const int t4 = threadIdx.x & 3;
  float sc[16];
  float max_lo = NegInf(), max_hi = NegInf();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = 8 * j + 2 * t4 + (e & 1);
      // __fmul_rn: never contracted into the exp argument.
      sc[4 * j + e] = ((valid >> row) & 1u) != 0 ? __fmul_rn(s[4 * j + e], scale2) : NegInf();
    }
    max_lo = fmaxf(max_lo, fmaxf(sc[4 * j], sc[4 * j + 1]));
    max_hi = fmaxf(max_hi, fmaxf(sc[4 * j + 2], sc[4 * j + 3]));
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    max_lo = fmaxf(max_lo, __shfl_xor_sync(0xffffffffu, max_lo, off));
    max_hi = fmaxf(max_hi, __shfl_xor_sync(0xffffffffu, max_hi, off));
  }
  const float m_lo = fmaxf(st.m_lo, max_lo), m_hi = fmaxf(st.m_hi, max_hi);
  alpha_lo = Exp2(st.m_lo - m_lo);
  alpha_hi = Exp2(st.m_hi - m_hi);
  st.m_lo = m_lo, st.m_hi = m_hi;
  float sum_lo = 0.0f, sum_hi = 0.0f;
  uint32_t lo[4], hi[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    // exp(-inf - m) = 0 for masked rows (m is finite).
    lo[j] = PackBf16(Exp2(sc[4 * j] - m_lo), Exp2(sc[4 * j + 1] - m_lo));
    hi[j] = PackBf16(Exp2(sc[4 * j + 2] - m_hi), Exp2(sc[4 * j + 3] - m_hi));
    sum_lo += __uint_as_float(lo[j] << 16) + __uint_as_float(lo[j] & 0xFFFF0000u);
    sum_hi += __uint_as_float(hi[j] << 16) + __uint_as_float(hi[j] & 0xFFFF0000u);
  }
  st.l_lo = fmaf(st.l_lo, alpha_lo, sum_lo);
  st.l_hi = fmaf(st.l_hi, alpha_hi, sum_hi);
  // A fragment of k-step kk (rows 16 kk ..): (g, 2 t4..), (g + 8, 2 t4..), (g, 2 t4 + 8..),
  // (g + 8, 2 t4 + 8..) = n-tiles 2 kk (lo, hi) and 2 kk + 1 (lo, hi) of S.
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    pa[kk][0] = lo[2 * kk], pa[kk][1] = hi[2 * kk];
    pa[kk][2] = lo[2 * kk + 1], pa[kk][3] = hi[2 * kk + 1];
  }
}

// The thread's partial denominators summed over its quad (xor butterfly, a fixed order): the
// chunks' l of heads g (lo) and g + 8 (hi), the sink not included.
__device__ __forceinline__ void QuadSums(const HeadState& st, float& l_lo, float& l_hi) {
  l_lo = st.l_lo, l_hi = st.l_hi;
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
}

// out = O / l for the thread's two heads and its warpgroup's dims (o[4 j + e]: dim 256 wg + 8 j
// + 2 t4 + (e & 1), head g (e < 2) or g + 8).
__device__ void WriteOutput(const model::SparseAttentionArgs& a, int64_t t, int64_t head0,
                            const HeadState& st, const float (&o)[128]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3, wg = warp >> 2;
  float l_lo, l_hi;
  QuadSums(st, l_lo, l_hi);
  const int64_t h_lo = head0 + 16 * (warp & 3) + g;
  const float inv_lo = 1.0f / (Exp2(SinkLog2(a, h_lo) - st.m_lo) + l_lo);
  const float inv_hi = 1.0f / (Exp2(SinkLog2(a, h_lo + 8) - st.m_hi) + l_hi);
  float* out_lo = a.out + (t * a.heads + h_lo) * kD + (kD / 2) * wg + 2 * t4;
  float* out_hi = out_lo + 8 * kD;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    *reinterpret_cast<float2*>(out_lo + 8 * j) =
        make_float2(o[4 * j] * inv_lo, o[4 * j + 1] * inv_lo);
    *reinterpret_cast<float2*>(out_hi + 8 * j) =
        make_float2(o[4 * j + 2] * inv_hi, o[4 * j + 3] * inv_hi);
  }
}

// Splits > 1: combines the cluster's states (see the header) and writes out. Each block holds
// its chunks' m, l (base-2 units; l without the sink, after the quad sum) and O (unnormalised);
// for head h, M = max_z m_z, L = 2^(sink - M) + sum_z l_z 2^(m_z - M) (z ascending), weights
// c_z = 2^(m_z - M) / L, and out = sum_z c_z O_z (z ascending, FMAs). Block rank r writes
// outputs [r n, (r + 1) n) of the group's 64 x 512 in float4 units (n = 8,192 / splits). Every
// thread of every block of the cluster must call it, after the last wgmma wait.
__device__ void MergeSplits(const model::SparseAttentionArgs& a, int64_t t, int64_t head0,
                            const HeadState& st, const float (&o)[128], char* smem) {
  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t4 = lane & 3, wg = warp >> 2, h_lo = 16 * (warp & 3) + g;
  float l_lo, l_hi;
  QuadSums(st, l_lo, l_hi);
  auto* O = reinterpret_cast<float*>(smem);
  auto* m = reinterpret_cast<float*>(smem + kMergeMOff);
  auto* l = reinterpret_cast<float*>(smem + kMergeLOff);
  auto* coef = reinterpret_cast<float*>(smem + kMergeCoefOff);
  __syncthreads();  // every warpgroup is past its last wgmma: q, tiles and raw are free
  float* o_lo = O + h_lo * kOStride + (kD / 2) * wg + 2 * t4;
  float* o_hi = o_lo + 8 * kOStride;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    *reinterpret_cast<float2*>(o_lo + 8 * j) = make_float2(o[4 * j], o[4 * j + 1]);
    *reinterpret_cast<float2*>(o_hi + 8 * j) = make_float2(o[4 * j + 2], o[4 * j + 3]);
  }
  if (wg == 0 && t4 == 0) {  // both warpgroups hold the same m and l
    m[h_lo] = st.m_lo, m[h_lo + 8] = st.m_hi;
    l[h_lo] = l_lo, l[h_lo + 8] = l_hi;
  }
  cluster.sync();  // every block's O, m, l written and visible to the cluster
  if (threadIdx.x < kHeads) {
    const int h = static_cast<int>(threadIdx.x);
    float mz[kMaxSplits], lz[kMaxSplits], top = NegInf();
#pragma unroll
    for (int z = 0; z < kMaxSplits; ++z) {
      if (z < splits) {
        mz[z] = *cluster.map_shared_rank(m + h, z);
        lz[z] = *cluster.map_shared_rank(l + h, z);
        top = fmaxf(top, mz[z]);
      }
    }
    float denominator = Exp2(SinkLog2(a, head0 + h) - top), weight[kMaxSplits];
#pragma unroll
    for (int z = 0; z < kMaxSplits; ++z) {
      if (z < splits) {
        weight[z] = Exp2(mz[z] - top);
        denominator = fmaf(lz[z], weight[z], denominator);
      }
    }
    const float inv = 1.0f / denominator;
#pragma unroll
    for (int z = 0; z < kMaxSplits; ++z) {
      if (z < splits) coef[h * kMaxSplits + z] = weight[z] * inv;
    }
  }
  __syncthreads();
  const int per_rank = kHeads * kD / 4 / splits;
  for (int i = static_cast<int>(threadIdx.x); i < per_rank; i += kThreads) {
    const int e = rank * per_rank + i, h = e / (kD / 4), c = 4 * (e % (kD / 4));
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int z = 0; z < kMaxSplits; ++z) {
      if (z < splits) {
        const float4 v =
            *cluster.map_shared_rank(reinterpret_cast<const float4*>(O + h * kOStride + c), z);
        const float w = coef[h * kMaxSplits + z];
        sum.x = fmaf(v.x, w, sum.x), sum.y = fmaf(v.y, w, sum.y);
        sum.z = fmaf(v.z, w, sum.z), sum.w = fmaf(v.w, w, sum.w);
      }
    }
    float* out = a.out + (t * a.heads + head0 + h) * kD + c;  // 8-byte aligned (contract)
    *reinterpret_cast<float2*>(out) = make_float2(sum.x, sum.y);
    *reinterpret_cast<float2*>(out + 2) = make_float2(sum.z, sum.w);
  }
  cluster.sync();  // keep this block's shared memory alive until every block has read it
}

// Step 2: issues S(tile) = q K^T into s (32 SS wgmma m64n32k16, one commit group). k-step ks
// reads core-matrix columns 2 ks, 2 ks + 1 of q and of the tile, 256 bytes on: 16 in the
// descriptors' address field, which stays below 2^14 for any shared address. (s need not be
// initialised: the first k-step overwrites it.)
__device__ __forceinline__ void IssueScores(uint32_t base, uint32_t tile, float (&s)[16]) {
  wgmma::Fence();
  const uint64_t da0 = wgmma::Descriptor(base, 128, kRowGroupBytes);
  const uint64_t db0 = wgmma::Descriptor(base + tile, 128, kRowGroupBytes);
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    wgmma::WgmmaBf16<32>(s, da0 + 16 * ks, db0 + 16 * ks, ks > 0 ? 1 : 0);
  }
  wgmma::CommitGroup();
}

// Step 5: O *= alpha (skipped by a warp whose alphas are all 1: exact either way), then issues
// O += P V(tile) for the warpgroup's 256 dims (two RS wgmma m64n256k16, one commit group, left
// running). V rows 16 kk .. are row groups 2 kk, 2 kk + 1; read N-major, the next 8 dims are 128
// bytes on and the next 8 rows a row group on.
__device__ __forceinline__ void RescaleAndIssuePv(uint32_t base, uint32_t tile, float alpha_lo,
                                                  float alpha_hi, uint32_t (&pa)[2][4],
                                                  float (&o)[128]) {
  if (__any_sync(0xffffffffu, alpha_lo != 1.0f || alpha_hi != 1.0f)) {
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= alpha_lo, o[4 * j + 1] *= alpha_lo;
      o[4 * j + 2] *= alpha_hi, o[4 * j + 3] *= alpha_hi;
    }
  }
  const uint32_t wg = threadIdx.x >> 7;
  wgmma::FenceOperands(o);
  wgmma::FenceOperands(pa[0]);
  wgmma::FenceOperands(pa[1]);
  wgmma::Fence();
#pragma unroll
  for (int kk = 0; kk < 2; ++kk) {
    const uint64_t dv = wgmma::Descriptor(
        base + tile + 2 * kk * kRowGroupBytes + wg * (kRowGroupBytes / 2), kRowGroupBytes, 128);
    wgmma::WgmmaBf16RsTransB<256>(o, pa[kk], dv, 1);
  }
  wgmma::CommitGroup();
  wgmma::FenceOperands(o);
  wgmma::FenceOperands(pa[0]);
  wgmma::FenceOperands(pa[1]);
}

__global__ void __launch_bounds__(kThreads, 1)
    SparseAttentionWgmmaKernel(model::SparseAttentionArgs a, int* error_word) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(128) char smem[];
  const int64_t t = blockIdx.x, head0 = int64_t{blockIdx.y} * kHeads;
  const bool report = blockIdx.y == 0;  // one block per token reports range errors
  auto* valid_bytes = reinterpret_cast<uint8_t*>(smem + kValidOff);
  TokenRows rows(a, t, report && threadIdx.x == 0, error_word);
  rows.Trim(a, t, reinterpret_cast<long long*>(smem + kTrimOff));
  const int64_t total = rows.candidates();
  // This block's chunks of the token: [first, first + n_chunks) (all of them without splits).
  const int splits = static_cast<int>(gridDim.z);
  const int64_t all_chunks = (total + kChunk - 1) / kChunk;
  const int64_t per_split = (all_chunks + splits - 1) / splits;
  const int64_t first = min(all_chunks, int64_t{blockIdx.z} * per_split);
  const int64_t n_chunks = min(all_chunks - first, per_split);
  auto load_key = [&](int64_t chunk) {
    return LoadRowKey(a, t, rows, (first + chunk) * kChunk, total);
  };
  auto lookup = [&](attention::CandidateKey key) {
    return ResolveRow(a, rows, key, report, error_word);
  };
  // Prologue: chunk 0 copied and converted into tile 0 (q staged meanwhile), chunk 1 copied.
  bool staged = false;  // this thread's row of the chunk in raw is attended
  if (n_chunks > 0) staged = IssueChunk(lookup(load_key(0)), smem, valid_bytes);
  StageQ(a.q + (t * a.heads + head0) * kD, smem);
  bool inexact = false;
  if (n_chunks > 0) {
    ConvertChunk(smem, staged, kTilesOff, inexact);
    if (n_chunks > 1) staged = IssueChunk(lookup(load_key(1)), smem, valid_bytes + 4);
  }
  // Tile / valid word of chunk ch (cur), ch + 1 (nxt); advanced mod kTiles without division.
  uint32_t cur = 0, nxt = 1;
  auto advance = [](uint32_t i) { return i + 1 == kTiles ? 0u : i + 1; };

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t h_lo = head0 + 16 * (warp & 3) + (lane >> 2);
  HeadState st{SinkLog2(a, h_lo), SinkLog2(a, h_lo + 8), 0.0f, 0.0f};
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  const uint32_t base = mma::SharedAddress(smem);
  const float scale2 = __fmul_rn(a.scale, kLog2e);  // scores in base-2 units
  for (int64_t ch = 0; ch < n_chunks; ++ch) {
    const uint32_t tile = kTilesOff + cur * kTileBytes;
    // Step 1: tile cur (chunk ch), its valid word and q are written (and fenced); every
    // warpgroup is past the wait of iteration ch - 1, so S and P V of chunk ch - 2 are done:
    // tile nxt is free.
    __syncthreads();
    float s[16];
    IssueScores(base, tile, s);
    // Step 3, while S(ch) runs: chunk ch + 1 into tile nxt, the copies of chunk ch + 2.
    if (ch + 1 < n_chunks) {
      const attention::CandidateKey next_key = load_key(ch + 2);
      ConvertChunk(smem, staged, kTilesOff + nxt * kTileBytes, inexact);
      if (ch + 2 < n_chunks) {
        staged = IssueChunk(lookup(next_key), smem, valid_bytes + 4 * advance(nxt));
      }
    }
    wgmma::WaitGroup<0>();  // S(ch) done, and P V(ch - 1) before it
    wgmma::FenceOperands(s);
    wgmma::FenceOperands(o);
    const uint32_t valid = *reinterpret_cast<const uint32_t*>(smem + kValidOff + 4 * cur);
    uint32_t pa[2][4];
    float alpha_lo, alpha_hi;
    SoftmaxChunk(s, valid, scale2, st, pa, alpha_lo, alpha_hi);
    RescaleAndIssuePv(base, tile, alpha_lo, alpha_hi, pa, o);
    cur = nxt, nxt = advance(nxt);
  }
  wgmma::WaitGroup<0>();
  wgmma::FenceOperands(o);
  if (__any_sync(0xffffffffu, inexact) && lane == 0) atomicOr(error_word, kErrAttnKvNotBf16);
  if (splits == 1) {
    WriteOutput(a, t, head0, st, o);
  } else {
    MergeSplits(a, t, head0, st, o, smem);
  }
}

// SetAttnPrefillWgmmaOverride's value + 1 (0: the environment).
std::atomic<int> g_wgmma_override{0};
// SetAttnWgmmaSplits' value (0: chosen per launch).
std::atomic<int> g_splits_override{0};

// Blocks per (token, head group): the test hook's value, else as many as keep one block per SM
// busy (attention::PhysicalSplits: a power of two <= 8 and <= the estimated chunks per token;
// DEEPINFER_ATTN_SPLITS overrides the wish, as for the mma.sync kernels), halved while the
// (token, head group) clusters would not all run at once (attention::SplitsInOneWave). The
// kernel's shared-memory limit must be raised first.
int WgmmaSplits(const model::SparseAttentionArgs& args) {
  if (const int forced = g_splits_override.load(); forced > 0) return forced;
  const int64_t clusters = args.tokens * (args.heads / kHeads);
  const int splits = attention::PhysicalSplits(attention::MultiprocessorCount() / clusters,
                                               attention::CandidateChunks(args, kChunk));
  return attention::SplitsInOneWave(SparseAttentionWgmmaKernel, clusters, splits, kThreads,
                                    kSmemBytes);
}

}  // namespace

void SetAttnWgmmaSplits(int splits) {
  g_splits_override.store(splits == 1 || splits == 2 || splits == 4 || splits == 8 ? splits : 0);
}

void SetAttnPrefillWgmmaOverride(const bool* on) {
  g_wgmma_override.store(on == nullptr ? 0 : (*on ? 2 : 1));
}

bool AttnPrefillUsesWgmma(const model::SparseAttentionArgs& args) {
  // q is read in 16-byte loads (StageQ).
  if (args.head_dim != kAttnPrefillWgmmaHeadDim || !Aligned16(args.q)) return false;
  const int forced = g_wgmma_override.load();
  if (forced > 0) return forced == 2;
  return EnvIntOr(kAttnPrefillWgmmaEnv, 1, 0, 1) != 0;
}

cudaError_t SparseAttentionPrefillWgmma(const model::SparseAttentionArgs& args, int* error_word,
                                        cudaStream_t stream) {
  if (!SparseAttentionPrefillApplicable(args) || args.head_dim != kAttnPrefillWgmmaHeadDim ||
      !Aligned16(args.q)) {
    return cudaErrorInvalidValue;
  }
  if (args.tokens == 0) return cudaSuccess;
  const cudaError_t e =
      launch::RaiseMaxDynamicSmem(SparseAttentionWgmmaKernel, static_cast<int>(kSmemBytes));
  if (e != cudaSuccess) return e;
  // Grid (tokens, heads / 64, splits), a cluster over the splits (falls back to one block per
  // token and head group where such a cluster cannot be scheduled).
  return attention::LaunchClusterSplit(SparseAttentionWgmmaKernel, args, error_word,
                                       args.heads / kAttnPrefillHeadsPerBlock, WgmmaSplits(args),
                                       kThreads, kSmemBytes, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
