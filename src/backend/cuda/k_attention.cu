// Sparse sink attention over window + selected compressed entries, and the lightning
// indexer scores. fp32; online (running-max) softmax, equivalent to the CPU reference's
// two-pass softmax up to fp32 rounding.
//
// SparseAttention is MQA: every query head attends to the SAME latent K=V rows. One block
// serves one token and a group of kAttnGroup heads, so each candidate row is staged in
// shared memory once (cp.async, double-buffered chunks of kAttnChunk rows) and reused by
// all heads of the group. Each token's candidates run as attention::kLanes fixed lanes
// merged by a fixed tree (attention_common.cuh), so out[t] is bitwise independent of the
// batch; when tokens x groups would leave most SMs idle (decode), the lanes are spread over
// a thread-block cluster of 2, 4 or 8 blocks whose subtree roots are merged through
// distributed shared memory, so no global workspace is needed.
//
// Cost of the lane tree (against the former per-call split): a block running k > 1 lanes
// folds 32 accumulator floats per thread k - 1 times (a few hundred FLOPs per thread,
// 2 barriers per lane) and keeps pending subtrees in local memory (<= 7 stores and 7 loads
// of 16 KiB per block, L1/L2); prefill blocks read ~40 chunks x 16 rows x 2 KiB, so < 3%.
// TokenRows::Trim scans the token's window positions and selection ids once per block (one
// L2 round trip, 2 barriers) and drops the masked rows at the ends of its range.
//
// Varlen (several sequences in one call, SparseAttentionArgs::window_start etc. non-null):
// token t's candidates are its window_len[t] window rows from window_start[t], then its
// n_select slots (ids relative to comp_offset[t], < comp_len[t]); each block splits the
// candidate range of its own token, so a launch covers sequences of different lengths.
//
// Decode traffic (T = 1, 64 heads, 640 candidates x 512 fp32 = 1.3 MB of rows): the
// per-(token, head) kernel read the rows 64 times (84 MB through L2); grouped by 8 heads
// they are read 8 times (10.5 MB through L2, 1.3 MB from HBM).
#include <cooperative_groups.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_indexer.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using attention::CandidateRow;
using attention::kLaneLevels;
using attention::kLanes;
using attention::kMergeCoefs;
using attention::TokenRows;

namespace cg = cooperative_groups;

constexpr int kAttnThreads = 256;  // 8 warps
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnGroup = 8;                              // heads per block
constexpr int kAttnChunk = 16;                             // candidate rows staged per round
constexpr int kAttnRowsPerWarp = kAttnChunk / kAttnWarps;  // scoring: rows per warp
static_assert(kAttnChunk % kAttnWarps == 0, "every warp scores whole rows");
static_assert(kAttnChunk <= 32, "softmax: one lane per staged row");
// Each thread owns at most one float4 quad of channels in the PV phase.
static_assert(kMaxAttnHeadDim <= 4 * kAttnThreads, "head_dim quads must fit one pass");

constexpr int kIdxThreads = 256;  // 8 warps
constexpr int kIdxKeysPerBlock = 64;

// --- cp.async helpers (sm_80+) ----------------------------------------------------------
template <int kBytes>
__device__ __forceinline__ void CpAsync(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  if constexpr (kBytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem));
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(gmem), "n"(kBytes));
  }
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__host__ __device__ inline int64_t AttnPaddedDim(int64_t d) { return (d + 3) / 4 * 4; }

// Floats of AttnSmem before its Trim scratch (rounded up to 8 bytes).
__host__ __device__ inline int64_t AttnFloatsBeforeTrim(int64_t dp) {
  const int64_t floats = kAttnGroup * dp + 2 * kAttnChunk * dp + 2 * kAttnChunk * kAttnGroup +
                         3 * kAttnGroup + kAttnGroup * kMergeCoefs + 4 * kLaneLevels * kAttnGroup;
  return (floats + 1) / 2 * 2;
}

// Shared-memory layout of SparseAttentionKernel (floats unless noted). dp = head_dim
// rounded up to 4; channels >= head_dim are zero in q_s and kv_s.
struct AttnSmem {
  float* q;          // [kAttnGroup, dp] the group's queries (zero for heads >= heads)
  float* kv;         // [2, kAttnChunk, dp] double-buffered staged rows (zero if not attended)
  float* score;      // [kAttnChunk, kAttnGroup] scaled scores of the current chunk
  float* prob;       // [kAttnChunk, kAttnGroup] exp(score - running max)
  float* m;          // [kAttnGroup] running max (starts at the sink logit)
  float* l;          // [kAttnGroup] running denominator
  float* alpha;      // [kAttnGroup] rescale of the accumulators for the current chunk
  float* coef;       // [kAttnGroup, kMergeCoefs] cluster merge tree weights
  float* pending_m;  // [kLaneLevels, kAttnGroup] pending subtrees of the block's lanes
  float* pending_l;  // [kLaneLevels, kAttnGroup]
  float* step_a;     // [kLaneLevels, kAttnGroup] weights of the folds at a lane's end
  float* step_b;     // [kLaneLevels, kAttnGroup]
  long long* trim;   // [4] TokenRows::Trim scratch
  int* valid;        // [2, kAttnChunk] 1 if the staged row is attended
  float* part;       // [kAttnGroup, dp] the split's weighted sums (aliases kv after the loop)

  __device__ AttnSmem(float* base, int64_t dp) {
    q = base;
    kv = q + kAttnGroup * dp;
    score = kv + 2 * kAttnChunk * dp;
    prob = score + kAttnChunk * kAttnGroup;
    m = prob + kAttnChunk * kAttnGroup;
    l = m + kAttnGroup;
    alpha = l + kAttnGroup;
    coef = alpha + kAttnGroup;
    pending_m = coef + kAttnGroup * kMergeCoefs;
    pending_l = pending_m + kLaneLevels * kAttnGroup;
    step_a = pending_l + kLaneLevels * kAttnGroup;
    step_b = step_a + kLaneLevels * kAttnGroup;
    trim = reinterpret_cast<long long*>(base + AttnFloatsBeforeTrim(dp));  // 8-byte aligned
    valid = reinterpret_cast<int*>(trim + 4);
    part = kv;
  }
};
static_assert(2 * kAttnChunk >= kAttnGroup, "the split partials fit in the staging buffers");

int64_t AttnSharedBytes(int64_t d) {
  const int64_t dp = AttnPaddedDim(d);
  return AttnFloatsBeforeTrim(dp) * static_cast<int64_t>(sizeof(float)) + 4 * sizeof(long long) +
         2 * kAttnChunk * sizeof(int);
}

// Issues the copies of chunk rows [row0, row0 + kAttnChunk) (clipped to row_end) into
// buffer `buf`; rows that are not attended are zero-filled. kVec floats per copy (4 needs
// 16-byte aligned rows and head_dim % 4 == 0).
template <int kVec>
__device__ void StageChunk(const model::SparseAttentionArgs& a, int64_t t, const TokenRows& rows,
                           int64_t row0, int64_t row_end, int buf, const AttnSmem& s, int64_t dp,
                           int* error_word) {
  const int64_t pieces = dp / kVec;
  float* kv = s.kv + static_cast<int64_t>(buf) * kAttnChunk * dp;
  for (int64_t e = threadIdx.x; e < kAttnChunk * pieces; e += kAttnThreads) {
    const int r = static_cast<int>(e / pieces);
    const int64_t c = (e - r * pieces) * kVec;
    const int64_t j = row0 + r;
    const float* row = j < row_end ? CandidateRow(a, t, rows, j, c == 0, error_word) : nullptr;
    float* dst = kv + r * dp + c;
    if (row != nullptr && c < a.head_dim) {
      CpAsync<kVec * 4>(dst, row + c);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i) dst[i] = 0.0f;
    }
    if (c == 0) s.valid[buf * kAttnChunk + r] = row != nullptr;
  }
}

// Scores of the staged chunk for every (row, head): warp w scores rows
// w*kAttnRowsPerWarp.. for all heads; lanes split the channels in float4 quads.
__device__ void ScoreChunk(const AttnSmem& s, int buf, int64_t dp, float scale) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r0 = warp * kAttnRowsPerWarp;
  const float* kv = s.kv + static_cast<int64_t>(buf) * kAttnChunk * dp;
  float acc[kAttnRowsPerWarp][kAttnGroup] = {};
  for (int64_t c = 4 * lane; c < dp; c += 128) {
    float4 k[kAttnRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kAttnRowsPerWarp; ++r) {
      k[r] = *reinterpret_cast<const float4*>(kv + (r0 + r) * dp + c);
    }
#pragma unroll
    for (int h = 0; h < kAttnGroup; ++h) {
      const float4 q = *reinterpret_cast<const float4*>(s.q + h * dp + c);
#pragma unroll
      for (int r = 0; r < kAttnRowsPerWarp; ++r) {
        acc[r][h] += q.x * k[r].x + q.y * k[r].y + q.z * k[r].z + q.w * k[r].w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kAttnRowsPerWarp; ++r) {
    const bool valid = s.valid[buf * kAttnChunk + r0 + r] != 0;
#pragma unroll
    for (int h = 0; h < kAttnGroup; ++h) {
      const float dot = WarpSum(acc[r][h]);
      if (lane == 0) s.score[(r0 + r) * kAttnGroup + h] = valid ? dot * scale : NegInf();
    }
  }
}

// Online softmax step per head (warp w handles heads w, w + kAttnWarps, ...; lane r holds
// row r): new running max, probabilities of the chunk, rescale factor, denominator.
__device__ void SoftmaxChunk(const AttnSmem& s) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int h = warp; h < kAttnGroup; h += kAttnWarps) {
    const float sc = lane < kAttnChunk ? s.score[lane * kAttnGroup + h] : NegInf();
    float cmax = sc;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      cmax = MaxF(cmax, __shfl_xor_sync(0xffffffffu, cmax, off));
    const float m_old = s.m[h];
    const float m_new = MaxF(m_old, cmax);
    const float pr = sc == NegInf() ? 0.0f : expf(sc - m_new);
    const float sum = WarpSum(pr);
    if (lane < kAttnChunk) s.prob[lane * kAttnGroup + h] = pr;
    if (lane == 0) {
      const float alpha = expf(m_old - m_new);
      s.alpha[h] = alpha;
      s.l[h] = s.l[h] * alpha + sum;
      s.m[h] = m_new;
    }
  }
}

// PV ownership: thread t accumulates channel quad t % quads for heads
// t / quads + k * head_lanes (k < kAttnGroup); threads with t / quads >= head_lanes idle.
struct PvOwner {
  int64_t quad;
  int head0, head_lanes;
  bool active;

  __device__ explicit PvOwner(int64_t dp) {
    const int64_t quads = dp / 4;
    const int64_t lanes = kAttnThreads / quads;
    head_lanes = static_cast<int>(lanes < kAttnGroup ? lanes : kAttnGroup);
    quad = threadIdx.x % quads;
    head0 = static_cast<int>(threadIdx.x / quads);
    active = head0 < head_lanes;
  }
};

// acc[k] (head o.head0 + k * o.head_lanes) = acc[k] * alpha + sum_r prob[r] * kv[r].
__device__ void AccumulateChunk(const AttnSmem& s, int buf, int64_t dp, const PvOwner& o,
                                float4 (&acc)[kAttnGroup]) {
  if (!o.active) return;
  const float* kv = s.kv + static_cast<int64_t>(buf) * kAttnChunk * dp + 4 * o.quad;
#pragma unroll
  for (int k = 0; k < kAttnGroup; ++k) {
    const int h = o.head0 + k * o.head_lanes;
    if (h < kAttnGroup) {
      const float al = s.alpha[h];
      acc[k].x *= al, acc[k].y *= al, acc[k].z *= al, acc[k].w *= al;
    }
  }
  for (int r = 0; r < kAttnChunk; ++r) {
    const float4 v = *reinterpret_cast<const float4*>(kv + r * dp);
#pragma unroll
    for (int k = 0; k < kAttnGroup; ++k) {
      const int h = o.head0 + k * o.head_lanes;
      if (h < kAttnGroup) {
        const float pr = s.prob[r * kAttnGroup + h];
        acc[k].x += pr * v.x, acc[k].y += pr * v.y, acc[k].z += pr * v.z, acc[k].w += pr * v.w;
      }
    }
  }
}

// Writes out[t, head, c] = value for the channels c < head_dim of one quad.
__device__ __forceinline__ void StoreQuad(const model::SparseAttentionArgs& a, int64_t t,
                                          int64_t head, int64_t c, float4 v) {
  float* out = a.out + (t * a.heads + head) * a.head_dim + c;
  const float vals[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if (c + i < a.head_dim) out[i] = vals[i];
  }
}

// Merges the subtree roots of the cluster's blocks with the upper levels of the lane tree
// (attention::ClusterTreeScalars / ClusterTreeValue). Block rank b writes elements b,
// b + S, ... (in units of kAttnThreads). Every block of the cluster must call it.
__device__ void MergeSplits(const model::SparseAttentionArgs& a, int64_t t, int64_t head_base,
                            const AttnSmem& s, int64_t dp) {
  cg::cluster_group cluster = cg::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  attention::ClusterMergeCoefs(s.m, s.l, s.coef, kAttnGroup);  // every root m, l, part is final
  const int64_t n_heads = a.heads - head_base < kAttnGroup ? a.heads - head_base : kAttnGroup;
  const int64_t n = n_heads * a.head_dim;
  for (int64_t e = rank * int64_t{kAttnThreads} + threadIdx.x; e < n;
       e += int64_t{splits} * kAttnThreads) {
    const int64_t h = e / a.head_dim, c = e - h * a.head_dim;
    a.out[(t * a.heads + head_base + h) * a.head_dim + c] = attention::ClusterTreeValue(
        splits, s.coef + h * kMergeCoefs,
        [&](int b) { return *cluster.map_shared_rank(s.part + h * dp + c, b); });
  }
  cluster.sync();  // keep this block's shared memory alive until every block has read it
}

// Per thread: the pending subtrees of the block's lanes for PvOwner's heads (local memory:
// indexed by tree level, touched only at lane ends).
using PendingQuads = float4[kLaneLevels][kAttnGroup];

// End of lane `lane` of the block (attention::EndLaneScalars): folds the lane's state into
// the block's tree and starts the next lane from the fresh state (m = sink, l = 0, O = 0),
// or leaves the block's root in s.m, s.l and acc for the block's last lane.
__device__ void EndLane(const model::SparseAttentionArgs& a, int64_t head_base, const AttnSmem& s,
                        const PvOwner& o, int lane, int block_levels, bool last,
                        float4 (&acc)[kAttnGroup], PendingQuads& pending) {
  __syncthreads();  // the lane's m, l are final; the previous end's weights are read
  if (threadIdx.x < kAttnGroup) {
    const int h = threadIdx.x;
    float m = s.m[h], l = s.l[h];
    attention::EndLaneScalars(lane, block_levels, last, m, l, s.pending_m, s.pending_l, s.step_a,
                              s.step_b, kAttnGroup, h);
    const int64_t head = head_base + h;
    s.m[h] = last ? m : (head < a.heads ? a.sinks[head] : 0.0f);
    s.l[h] = last ? l : 0.0f;
  }
  __syncthreads();
  if (!o.active) return;
  const int folds = attention::EndLaneFolds(lane, block_levels);
  for (int level = 0; level < folds; ++level) {
#pragma unroll
    for (int k = 0; k < kAttnGroup; ++k) {
      const int h = o.head0 + k * o.head_lanes;
      if (h < kAttnGroup) {
        const float wa = s.step_a[level * kAttnGroup + h], wb = s.step_b[level * kAttnGroup + h];
        const float4 p = pending[level][k];
        float4& v = acc[k];
        v.x = attention::FoldValue(p.x, v.x, wa, wb), v.y = attention::FoldValue(p.y, v.y, wa, wb);
        v.z = attention::FoldValue(p.z, v.z, wa, wb), v.w = attention::FoldValue(p.w, v.w, wa, wb);
      }
    }
  }
  if (last) return;
#pragma unroll
  for (int k = 0; k < kAttnGroup; ++k) {
    pending[folds][k] = acc[k];
    acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
}

// Grid (tokens, ceil(heads / kAttnGroup), splits), splits in {1, 2, 4, 8}; a cluster spans
// the splits of one (token, group). Block z runs lanes [z k, (z + 1) k), k = kLanes /
// splits, of its token's candidates (window rows, then selection slots; lane v = rows
// [v R, (v + 1) R), R = attention::LaneRows), each from a fresh online-softmax state.
template <int kVec>
__global__ void __launch_bounds__(kAttnThreads, 2)  // 2 blocks per SM: <= 128 registers
    SparseAttentionKernel(model::SparseAttentionArgs a, int* error_word) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) float smem[];
  const int64_t d = a.head_dim, dp = AttnPaddedDim(d);
  const AttnSmem s(smem, dp);
  const int64_t t = blockIdx.x, head_base = int64_t{blockIdx.y} * kAttnGroup;
  const int split = blockIdx.z;
  const bool reporter = threadIdx.x == 0 && blockIdx.y == 0 && split == 0;
  TokenRows rows(a, t, reporter, error_word);
  rows.Trim(a, t, s.trim);
  const int64_t total = rows.candidates();
  const int lanes = kLanes / static_cast<int>(gridDim.z), first_lane = split * lanes;
  const int block_levels = attention::BlockLevels(static_cast<int>(gridDim.z));
  const int64_t lane_rows = attention::LaneRows(total, kAttnChunk);
  const int64_t lane_chunks = lane_rows / kAttnChunk;

  for (int64_t e = threadIdx.x; e < kAttnGroup * dp; e += kAttnThreads) {
    const int64_t h = e / dp, c = e - h * dp, head = head_base + h;
    s.q[e] = head < a.heads && c < d ? a.q[(t * a.heads + head) * d + c] : 0.0f;
  }
  if (threadIdx.x < kAttnGroup) {
    const int64_t head = head_base + threadIdx.x;
    s.m[threadIdx.x] = head < a.heads ? a.sinks[head] : 0.0f;
    s.l[threadIdx.x] = first_lane == 0 ? 1.0f : 0.0f;  // exp(sink - m): lane 0 only
  }

  const int64_t row_limit = int64_t{first_lane} * lane_rows;
  const int64_t row_begin = total < row_limit ? total : row_limit;
  const int64_t row_stop = row_limit + lanes * lane_rows;
  const int64_t row_end = total < row_stop ? total : row_stop;
  const int64_t n_chunks = (row_end - row_begin + kAttnChunk - 1) / kAttnChunk;
  const PvOwner owner(dp);
  float4 acc[kAttnGroup];
  PendingQuads pending;
#pragma unroll
  for (int k = 0; k < kAttnGroup; ++k) acc[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

  if (n_chunks > 0) StageChunk<kVec>(a, t, rows, row_begin, row_end, 0, s, dp, error_word);
  CpAsyncCommit();
  int64_t ch = 0;
  for (int lane = 0; lane < lanes; ++lane) {
    const int64_t lane_end =
        (lane + 1) * lane_chunks < n_chunks ? (lane + 1) * lane_chunks : n_chunks;
    for (; ch < lane_end; ++ch) {
      const int buf = static_cast<int>(ch & 1);
      if (ch + 1 < n_chunks) {
        StageChunk<kVec>(a, t, rows, row_begin + (ch + 1) * kAttnChunk, row_end, buf ^ 1, s, dp,
                         error_word);
        CpAsyncCommit();
        CpAsyncWait<1>();
      } else {
        CpAsyncWait<0>();
      }
      __syncthreads();  // chunk ch staged; q, m, l initialised
      ScoreChunk(s, buf, dp, a.scale);
      __syncthreads();
      SoftmaxChunk(s);
      __syncthreads();
      AccumulateChunk(s, buf, dp, owner, acc);
      __syncthreads();  // buffer buf is restaged by the next round
    }
    EndLane(a, head_base, s, owner, first_lane + lane, block_levels, lane + 1 == lanes, acc,
            pending);
  }
  CpAsyncWait<0>();
  __syncthreads();

  if (gridDim.z == 1) {
    if (owner.active) {
#pragma unroll
      for (int k = 0; k < kAttnGroup; ++k) {
        const int h = owner.head0 + k * owner.head_lanes;
        if (h < kAttnGroup && head_base + h < a.heads) {
          const float inv_l = attention::InverseDenominator(s.l[h]);
          const float4 v = acc[k];
          StoreQuad(
              a, t, head_base + h, 4 * owner.quad,
              make_float4(attention::Normalize(v.x, inv_l), attention::Normalize(v.y, inv_l),
                          attention::Normalize(v.z, inv_l), attention::Normalize(v.w, inv_l)));
        }
      }
    }
    return;
  }
  if (owner.active) {
#pragma unroll
    for (int k = 0; k < kAttnGroup; ++k) {
      const int h = owner.head0 + k * owner.head_lanes;
      if (h < kAttnGroup) {
        *reinterpret_cast<float4*>(s.part + h * dp + 4 * owner.quad) = acc[k];
      }
    }
  }
  MergeSplits(a, t, head_base, s, dp);
}

// Row stride of the indexer's shared q and key tiles: dim rounded up to 4, then to an odd
// number of float4 quads (lanes reading float4 at rows h*stride are bank-conflict free).
__host__ __device__ inline int64_t IdxStride(int64_t dim) {
  const int64_t quads = (dim + 3) / 4;
  return 4 * (quads | 1);
}

constexpr int kIdxKeysPerWarp = kIdxKeysPerBlock / (kIdxThreads / 32);
static_assert(kIdxKeysPerBlock % (kIdxThreads / 32) == 0, "whole keys per warp");

// Grid (key blocks of kIdxKeysPerBlock, tokens). The block's keys are staged in shared
// memory once (coalesced); warp w scores keys w*kIdxKeysPerWarp.. and lane h accumulates
// the dots of heads h, h + 32, ... (float4 steps; channels >= dim are zero on both sides).
__global__ void __launch_bounds__(kIdxThreads)
    IndexerScoresKernel(const float* q, const float* w, int64_t heads, int64_t dim,
                        const float* keys, const int32_t* key_offset, const int32_t* key_len,
                        int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                        float* scores) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) float smem[];
  const int64_t stride = IdxStride(dim);
  float* q_s = smem;                             // [heads, stride]
  float* k_s = q_s + heads * stride;             // [kIdxKeysPerBlock, stride]
  float* w_s = k_s + kIdxKeysPerBlock * stride;  // [heads]
  const int64_t t = blockIdx.y, g0 = int64_t{blockIdx.x} * kIdxKeysPerBlock;
  // Varlen: this row's own keys and how many it has (entries past them are never visible).
  if (key_offset != nullptr) keys += static_cast<int64_t>(key_offset[t]) * dim;
  const int64_t own = key_len != nullptr && key_len[t] < n_keys ? key_len[t] : n_keys;
  const int64_t by_pos = (static_cast<int64_t>(q_pos[t]) + 1) / ratio;
  const int64_t visible = by_pos < own ? by_pos : own;
  const int64_t n_tile = n_keys - g0 < kIdxKeysPerBlock ? n_keys - g0 : kIdxKeysPerBlock;
  if (g0 >= visible) {  // nothing visible in this block (uniform: before any barrier)
    for (int64_t kk = threadIdx.x; kk < n_tile; kk += kIdxThreads) {
      scores[t * n_keys + g0 + kk] = NegInf();
    }
    return;
  }
  for (int64_t e = threadIdx.x; e < heads * stride; e += kIdxThreads) {
    const int64_t h = e / stride, i = e - h * stride;
    q_s[e] = i < dim ? q[(t * heads + h) * dim + i] : 0.0f;
  }
  for (int64_t e = threadIdx.x; e < kIdxKeysPerBlock * stride; e += kIdxThreads) {
    const int64_t kk = e / stride, i = e - kk * stride;
    k_s[e] = kk < n_tile && g0 + kk < own && i < dim ? keys[(g0 + kk) * dim + i] : 0.0f;
  }
  for (int64_t h = threadIdx.x; h < heads; h += kIdxThreads) w_s[h] = w[t * heads + h];
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int k0 = warp * kIdxKeysPerWarp;
  if (g0 + k0 >= n_keys) return;  // no barrier follows
  float total[kIdxKeysPerWarp] = {};
  for (int64_t h = lane; h < heads; h += 32) {
    float dot[kIdxKeysPerWarp] = {};
    for (int64_t i = 0; i < stride; i += 4) {
      const float4 qv = *reinterpret_cast<const float4*>(q_s + h * stride + i);
#pragma unroll
      for (int k = 0; k < kIdxKeysPerWarp; ++k) {
        const float4 kv = *reinterpret_cast<const float4*>(k_s + (k0 + k) * stride + i);
        dot[k] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
      }
    }
    const float wh = w_s[h];
#pragma unroll
    for (int k = 0; k < kIdxKeysPerWarp; ++k) total[k] += MaxF(dot[k], 0.0f) * scale * wh;
  }
#pragma unroll
  for (int k = 0; k < kIdxKeysPerWarp; ++k) {
    const float sum = WarpSum(total[k]);
    const int64_t g = g0 + k0 + k;
    if (lane == 0 && g < n_keys) scores[t * n_keys + g] = g < visible ? sum : NegInf();
  }
}

// Blocks per (token, group): enough to cover the SMs twice, a power of two <= kLanes, at
// most the (estimated) chunks per token. Physical only: the bits do not depend on it.
int AttnSplits(int64_t blocks, int64_t chunks) {
  const int64_t want = (2 * int64_t{attention::MultiprocessorCount()} + blocks - 1) / blocks;
  return attention::PhysicalSplits(want, chunks);
}

template <int kVec>
cudaError_t LaunchSparseAttention(const model::SparseAttentionArgs& args, int* error_word,
                                  cudaStream_t stream) {
  const auto kernel = SparseAttentionKernel<kVec>;
  const int64_t smem = AttnSharedBytes(args.head_dim);
  if (smem > 48 * 1024) {
    const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t groups = (args.heads + kAttnGroup - 1) / kAttnGroup;
  const int splits = AttnSplits(args.tokens * groups, attention::CandidateChunks(args, kAttnChunk));
  return attention::LaunchClusterSplit(kernel, args, error_word, groups, splits, kAttnThreads, smem,
                                       stream);
}

}  // namespace

cudaError_t SparseAttention(const model::SparseAttentionArgs& args, int* error_word,
                            cudaStream_t stream) {
  if (args.tokens <= 0 || args.heads <= 0 || args.head_dim <= 0) return cudaSuccess;
  if (args.head_dim > kMaxAttnHeadDim || args.heads > 65535 || args.tokens > 0x7fffffff) {
    return cudaErrorInvalidValue;
  }
  const bool vec4 = args.head_dim % 4 == 0 && Aligned16(args.window_kv) && Aligned16(args.comp_kv);
  return vec4 ? LaunchSparseAttention<4>(args, error_word, stream)
              : LaunchSparseAttention<1>(args, error_word, stream);
}

int64_t IndexerScoresSharedBytes(int64_t heads, int64_t dim) {
  return ((heads + kIdxKeysPerBlock) * IdxStride(dim) + heads) *
         static_cast<int64_t>(sizeof(float));
}

cudaError_t IndexerScores(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                          const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                          float scale, float* scores, cudaStream_t stream, IndexerSums sums) {
  return IndexerScoresVarlen(q, w, T, heads, dim, keys, nullptr, nullptr, n_keys, q_pos, ratio,
                             scale, scores, stream, sums);
}

cudaError_t IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads,
                                int64_t dim, const float* keys, const int32_t* key_offset,
                                const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                int64_t ratio, float scale, float* scores, cudaStream_t stream,
                                IndexerSums sums) {
  if (T <= 0 || n_keys <= 0) return cudaSuccess;
  if (IndexerMmaApplicable(q, keys, T, heads, dim, ratio)) {  // tensor cores (k_indexer_mma.cu)
    return IndexerScoresMma(q, w, T, heads, dim, keys, key_offset, key_len, n_keys, q_pos, ratio,
                            scale, scores, stream, sums);
  }
  const int64_t smem = IndexerScoresSharedBytes(heads, dim);
  if (smem > kMaxSharedBytes || T > 65535 || ratio <= 0) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = launch::RaiseMaxDynamicSmem(IndexerScoresKernel, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>((n_keys + kIdxKeysPerBlock - 1) / kIdxKeysPerBlock),
                  static_cast<unsigned>(T));
  pdl::Launch(IndexerScoresKernel, grid, kIdxThreads, static_cast<size_t>(smem), stream, q, w,
              heads, dim, keys, key_offset, key_len, n_keys, q_pos, ratio, scale, scores);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
