// Pieces the sparse-attention kernels share (k_attention.cu on CUDA cores,
// k_attention_mma.cu on tensor cores): which rows a query token attends, the fixed
// "lane" decomposition of a token's candidates with its merge tree, and the launch with
// the lanes spread over a thread-block cluster. k_attention_prefill.cu and k_attention_wgmma.cu
// use only the attended rows (TokenRows, CandidateRow / LoadCandidate + ResolveCandidate,
// Bf16Bits) and host helpers (no lanes, so they are not batch-invariant); k_indexer_mma.cu only
// MultiprocessorCount. Include from .cu files only.
//
// Batch invariance (bitwise). out[t] must not depend on how many tokens share the call,
// so the arithmetic of a token is fixed by the token alone:
//   * its candidates (window rows from its first to its last attended one, then selection
//     slots from its first to its last non-empty one: TokenRows::Trim) are cut into
//     kLanes = 8 lanes of LaneRows(candidates) consecutive rows (a multiple of the
//     kernel's chunk; trailing lanes may be empty);
//   * each lane runs the online softmax from a fresh state (m = sink, l = 1 for lane 0 and
//     0 for the others, O = 0) chunk by chunk, in candidate order;
//   * the 8 lane states are merged by the complete binary tree ((0 1)(2 3))((4 5)(6 7)),
//     every node computed by FoldScalars / FoldValue (left = lower lanes), no FMA
//     contraction; out = FoldValue-root * InverseDenominator(l-root).
// Only the physical mapping depends on T: `splits` (1, 2, 4 or 8) blocks per (token, head
// group) form a cluster; block b runs lanes [b k, (b + 1) k), k = kLanes / splits, folding
// them with the same tree (a binary counter whose pending subtrees are kept per thread in
// local memory), and the cluster folds the `splits` subtree roots through distributed
// shared memory with the upper levels of the same tree. Every mapping performs the same
// float operations on the same values, so the bits do not change with splits.
//
// The contract therefore: out[t] is bitwise a function of q[t], q_pos[t], the sinks, the
// scale and window, and the token's trimmed candidate sequence (the rows and ids in it,
// in order), whatever T, n_select, the other tokens and the untrimmed ranges are.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/env_knob.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "model/backend.h"

namespace deepinfer::backend::cuda::kernels::attention {

// The rows one query token may attend: window rows [win0, win0 + win_len) and selection
// slots [sel0, sel0 + sel_len) (ids index compressed rows comp0 + id, id < comp_len; with
// paged entries, comp0 = 0 and the rows are found through token t's block table).
// The constructor takes the token's full ranges (null varlen arrays: the whole buffers);
// ranges outside the shared buffers (a caller bug) are flagged kErrSelectionOutOfRange (if
// `report`) and attend nothing there, so no read leaves the buffers.
//
// Trim (called by every thread of the block) then cuts the window range to its first ..
// last attended row and the slots to the first .. last non-empty one. The token's
// candidates are these trimmed ranges, so rows that a caller adds or drops around them
// (older or future window rows, -1 padding of a wider n_select: what changes with the
// batch and the prefill chunk) change nothing, not even the bits.
struct TokenRows {
  int64_t t;  // query token
  int64_t p;  // query position
  int64_t win0, win_len, comp0, comp_len, sel0, sel_len;

  __device__ TokenRows(const model::SparseAttentionArgs& a, int64_t token, bool report,
                       int* error_word)
      : t(token) {
    p = a.q_pos[t];
    win0 = a.window_start != nullptr ? a.window_start[t] : 0;
    win_len = a.window_len != nullptr ? a.window_len[t] : a.n_window - win0;
    const bool paged = a.comp_bases != nullptr;  // comp_len required, no offset or buffer
    comp0 = !paged && a.comp_offset != nullptr ? a.comp_offset[t] : 0;
    comp_len = a.comp_len != nullptr ? a.comp_len[t] : (paged ? 0 : a.n_comp - comp0);
    sel0 = 0, sel_len = a.n_select;
    const bool bad_window = win0 < 0 || win_len < 0 || win0 + win_len > a.n_window;
    const bool bad_comp = comp_len < 0 || (!paged && (comp0 < 0 || comp0 + comp_len > a.n_comp));
    if (bad_window) win0 = 0, win_len = 0;
    if (bad_comp) comp0 = 0, comp_len = 0;
    if (report && (bad_window || bad_comp)) atomicOr(error_word, kErrSelectionOutOfRange);
  }

  // scratch: 4 long longs of shared memory. Two block barriers; every thread must call it.
  __device__ void Trim(const model::SparseAttentionArgs& a, int64_t t, long long* scratch) {
    constexpr long long kNone = 0x7fffffffffffffffLL;
    if (threadIdx.x == 0) scratch[0] = kNone, scratch[1] = -1, scratch[2] = kNone, scratch[3] = -1;
    __syncthreads();
    long long w_lo = kNone, w_hi = -1, s_lo = kNone, s_hi = -1;  // j ascends per thread
#pragma unroll 4
    for (int64_t j = threadIdx.x; j < win_len; j += blockDim.x) {
      const int64_t wp = a.window_pos[win0 + j];
      if (wp <= p && wp > p - a.window) w_lo = w_lo == kNone ? j : w_lo, w_hi = j;
    }
#pragma unroll 4
    for (int64_t k = threadIdx.x; k < a.n_select; k += blockDim.x) {
      if (a.selection[t * a.n_select + k] >= 0) s_lo = s_lo == kNone ? k : s_lo, s_hi = k;
    }
    if (w_hi >= 0) atomicMin(&scratch[0], w_lo), atomicMax(&scratch[1], w_hi);
    if (s_hi >= 0) atomicMin(&scratch[2], s_lo), atomicMax(&scratch[3], s_hi);
    __syncthreads();
    const long long w_first = scratch[0], w_last = scratch[1];
    const long long s_first = scratch[2], s_last = scratch[3];
    win0 = w_last >= 0 ? win0 + w_first : win0;
    win_len = w_last >= 0 ? w_last - w_first + 1 : 0;
    sel0 = s_last >= 0 ? s_first : 0;
    sel_len = s_last >= 0 ? s_last - s_first + 1 : 0;
  }

  __device__ int64_t candidates() const { return win_len + sel_len; }
};

// Candidate j of query token t in two steps, so that a kernel can issue the load early and
// resolve the row later (0 <= j < rows.candidates()): LoadCandidate reads its key (j < win_len:
// the position of window row
// win0 + j; else the id in selection slot sel0 + j - win_len), ResolveCandidate turns it into
// the key/value row, or null if it is not attended (a window position outside (p - window, p],
// an empty slot -1, or an id >= comp_len, which flags an error if `report`). With paged entries
// (SparseAttentionArgs::comp_bases) the row comes through the token's block table, and an id
// whose block is >= comp_max_blocks is out of range like one >= comp_len.
struct CandidateKey {
  int64_t j;
  int32_t key;
};

__device__ __forceinline__ CandidateKey LoadCandidate(const model::SparseAttentionArgs& a,
                                                      int64_t t, const TokenRows& rows, int64_t j) {
  const int32_t key = j < rows.win_len
                          ? a.window_pos[rows.win0 + j]
                          : a.selection[t * a.n_select + rows.sel0 + (j - rows.win_len)];
  return {j, key};
}

__device__ __forceinline__ const float* ResolveCandidate(const model::SparseAttentionArgs& a,
                                                         const TokenRows& rows, CandidateKey c,
                                                         bool report, int* error_word) {
  if (c.j < rows.win_len) {
    const int64_t wp = c.key;
    return (wp <= rows.p && wp > rows.p - a.window) ? a.window_kv + (rows.win0 + c.j) * a.head_dim
                                                    : nullptr;
  }
  if (c.key < 0) return nullptr;
  const bool paged = a.comp_bases != nullptr;  // SparseAttentionArgs::comp_bases
  const int64_t block = paged ? c.key / a.comp_rows_per_block : 0;
  if (c.key >= rows.comp_len || (paged && block >= a.comp_max_blocks)) {
    if (report) atomicOr(error_word, kErrSelectionOutOfRange);
    return nullptr;
  }
  if (paged) {
    return reinterpret_cast<const float*>(a.comp_bases[rows.t * a.comp_max_blocks + block]) +
           (c.key - block * a.comp_rows_per_block) * a.head_dim;
  }
  return a.comp_kv + (rows.comp0 + c.key) * a.head_dim;
}

// The key/value row of candidate j of query token t, or null if it is not attended (the two
// steps above at once).
__device__ __forceinline__ const float* CandidateRow(const model::SparseAttentionArgs& a, int64_t t,
                                                     const TokenRows& rows, int64_t j, bool report,
                                                     int* error_word) {
  return ResolveCandidate(a, rows, LoadCandidate(a, t, rows, j), report, error_word);
}

// bf16 bits of x, and whether x was exactly a bf16 (else rounded to nearest even).
__device__ __forceinline__ uint32_t Bf16Bits(float x, bool& inexact) {
  const uint32_t b = __float_as_uint(x);
  if ((b & 0xFFFFu) == 0) return b >> 16;
  inexact = true;
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Four floats as two bf16x2 words (Bf16Bits of each, the lower value in the low half).
__device__ __forceinline__ uint2 Bf16x4Bits(float4 v, bool& inexact) {
  return make_uint2(Bf16Bits(v.x, inexact) | (Bf16Bits(v.y, inexact) << 16),
                    Bf16Bits(v.z, inexact) | (Bf16Bits(v.w, inexact) << 16));
}

// kv[r] = bf16(raw[r]) for the kRows rows of a chunk (raw fp32 [kRows][d], kv bf16 with
// row stride rs), zero for rows with raw_valid[r] == 0; kv_valid = raw_valid. One warp per
// row (rows warp, warp + warps, ..), lanes over 4-value quads: no index division. d is a
// multiple of 4. Returns true if this thread saw a value that is not exactly bf16.
template <int kRows>
__device__ bool ConvertRowsToBf16(const float* raw, const int* raw_valid, int64_t d, int64_t rs,
                                  uint16_t* kv, int* kv_valid) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int warps = static_cast<int>(blockDim.x >> 5), n = static_cast<int>(d);
  bool inexact = false;
  for (int r = warp; r < kRows; r += warps) {
    const bool valid = raw_valid[r] != 0;
    for (int c = 4 * lane; c < n; c += 128) {
      uint2 packed = make_uint2(0u, 0u);
      if (valid) {
        packed = Bf16x4Bits(*reinterpret_cast<const float4*>(raw + r * d + c), inexact);
      }
      *reinterpret_cast<uint2*>(kv + r * rs + c) = packed;
    }
  }
  if (threadIdx.x < kRows) kv_valid[threadIdx.x] = raw_valid[threadIdx.x];
  return inexact;
}

// --- lanes and their merge tree -----------------------------------------------------
inline constexpr int kLanes = 8;                        // virtual splits of every token
inline constexpr int kLaneLevels = 3;                   // log2(kLanes): depth of the merge tree
inline constexpr int kTreeNodes = kLanes - 1;           // inner nodes of the tree
inline constexpr int kMergeCoefs = 2 * kTreeNodes + 1;  // (a, b) per node, then 1 / l
static_assert(kLanes == 1 << kLaneLevels, "a complete binary tree over the lanes");

// Rows per lane of a token with `candidates` rows: whole chunks, ceil(chunks / kLanes).
__host__ __device__ inline int64_t LaneRows(int64_t candidates, int64_t chunk) {
  const int64_t chunks = (candidates + chunk - 1) / chunk;
  return (chunks + kLanes - 1) / kLanes * chunk;
}

// One merge node: the left (lower lanes) state (m_l, l_l) and the right one (m_r, l_r)
// give m = max, a = exp(m_l - m), b = exp(m_r - m), l = l_l a + l_r b.
struct FoldWeights {
  float m, l, a, b;
};
__device__ __forceinline__ FoldWeights FoldScalars(float m_left, float l_left, float m_right,
                                                   float l_right) {
  FoldWeights w;
  w.m = fmaxf(m_left, m_right);
  w.a = expf(m_left - w.m);
  w.b = expf(m_right - w.m);
  w.l = __fadd_rn(__fmul_rn(l_left, w.a), __fmul_rn(l_right, w.b));
  return w;
}
// One output value of a merge node: left a + right b, rounded step by step (never an FMA,
// so every code path that merges gets the same bits).
__device__ __forceinline__ float FoldValue(float left, float right, float a, float b) {
  return __fadd_rn(__fmul_rn(left, a), __fmul_rn(right, b));
}
__device__ __forceinline__ float InverseDenominator(float l) { return __fdiv_rn(1.0f, l); }
__device__ __forceinline__ float Normalize(float o, float inv_l) { return __fmul_rn(o, inv_l); }

// Levels of the tree a block folds itself when it runs kLanes / splits lanes.
__device__ __forceinline__ int BlockLevels(int splits) {
  int levels = 0;
  while ((splits << levels) < kLanes) ++levels;
  return levels;
}

// The pending subtrees of one block's lanes (per head; the kernel keeps the matching
// per-thread values). End of lane `lane` (global lane index) whose final state is (m, l):
// folds it with the pending subtrees of the levels where `lane` has a 1 bit (lowest first,
// at most `block_levels`), records each node's (a, b) in step_a/step_b[level], and either
// pushes the result as pending at the next level or, for the block's last lane, leaves the
// block's root in (m, l). Returns the number of folds. Called by the thread of one head.
__device__ __forceinline__ int EndLaneScalars(int lane, int block_levels, bool last, float& m,
                                              float& l, float* pending_m, float* pending_l,
                                              float* step_a, float* step_b, int heads, int h) {
  int level = 0;
  while (level < block_levels && ((lane >> level) & 1) != 0) {
    const FoldWeights w =
        FoldScalars(pending_m[level * heads + h], pending_l[level * heads + h], m, l);
    step_a[level * heads + h] = w.a;
    step_b[level * heads + h] = w.b;
    m = w.m, l = w.l;
    ++level;
  }
  if (!last) pending_m[level * heads + h] = m, pending_l[level * heads + h] = l;
  return level;
}

// Folds in a block: the number of folds at the end of lane `lane` (as EndLaneScalars).
__device__ __forceinline__ int EndLaneFolds(int lane, int block_levels) {
  int level = 0;
  while (level < block_levels && ((lane >> level) & 1) != 0) ++level;
  return level;
}

// Node i of the tree level that folds `width` values into width / 2 (8 -> 4: nodes 0-3,
// 4 -> 2: nodes 4-5, 2 -> 1: node 6).
__host__ __device__ constexpr int TreeNode(int width, int i) { return kLanes - width + i; }

// The cluster's upper tree levels for one head: the `splits` roots (m(r), l(r)) of ranks
// r < splits are folded pairwise level by level; coef gets (a, b) of node n at 2n, 2n + 1
// (TreeNode; the levels the blocks folded themselves are unused) and 1 / l of the root at
// 2 kTreeNodes.
template <typename LoadM, typename LoadL>
__device__ void ClusterTreeScalars(int splits, float* coef, LoadM load_m, LoadL load_l) {
  float m[kLanes], l[kLanes];
#pragma unroll
  for (int r = 0; r < kLanes; ++r) {
    m[r] = r < splits ? load_m(r) : 0.0f;
    l[r] = r < splits ? load_l(r) : 0.0f;
  }
#pragma unroll
  for (int width = kLanes; width > 1; width >>= 1) {
    if (width <= splits) {
#pragma unroll
      for (int i = 0; i < width / 2; ++i) {
        const FoldWeights w = FoldScalars(m[2 * i], l[2 * i], m[2 * i + 1], l[2 * i + 1]);
        coef[2 * TreeNode(width, i)] = w.a;
        coef[2 * TreeNode(width, i) + 1] = w.b;
        m[i] = w.m, l[i] = w.l;
      }
    }
  }
  coef[2 * kTreeNodes] = InverseDenominator(l[0]);
}

// Cluster-wide step of the merge: waits until every block's root m / l are final, then
// thread h < n_heads writes head h's coefficients coef[h * kMergeCoefs ..] from the roots'
// m[h], l[h] of all blocks (ClusterTreeScalars). Ends with a block barrier. Every thread
// of every block of the cluster must call it.
__device__ inline void ClusterMergeCoefs(const float* m, const float* l, float* coef, int n_heads) {
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const int splits = static_cast<int>(cluster.num_blocks());
  cluster.sync();
  if (static_cast<int>(threadIdx.x) < n_heads) {
    const int h = static_cast<int>(threadIdx.x);
    ClusterTreeScalars(
        splits, coef + h * kMergeCoefs, [&](int b) { return *cluster.map_shared_rank(m + h, b); },
        [&](int b) { return *cluster.map_shared_rank(l + h, b); });
  }
  __syncthreads();
}

// One output value from the `splits` roots' values load(r) with ClusterTreeScalars' coef.
template <typename Load>
__device__ __forceinline__ float ClusterTreeValue(int splits, const float* coef, Load load) {
  float x[kLanes];
#pragma unroll
  for (int r = 0; r < kLanes; ++r) x[r] = r < splits ? load(r) : 0.0f;
#pragma unroll
  for (int width = kLanes; width > 1; width >>= 1) {
    if (width <= splits) {
#pragma unroll
      for (int i = 0; i < width / 2; ++i) {
        x[i] = FoldValue(x[2 * i], x[2 * i + 1], coef[2 * TreeNode(width, i)],
                         coef[2 * TreeNode(width, i) + 1]);
      }
    }
  }
  return Normalize(x[0], coef[2 * kTreeNodes]);
}

// DEEPINFER_ATTN_SPLITS=<n> in the environment (read once; 0 or unset: none) replaces the
// launchers' wanted blocks per (token, head group) by n, for measuring the split choice (the
// bits do not depend on it).
inline int64_t SplitsOverride() {
  static const int n = EnvIntClamped("DEEPINFER_ATTN_SPLITS", 0, 0, kLanes);
  return n;
}

// Blocks per (token, head group): the largest power of two <= min(want, chunks, kLanes),
// at least 1 (a physical choice only: the bits do not depend on it).
inline int PhysicalSplits(int64_t want, int64_t chunks) {
  if (const int forced = SplitsOverride(); forced > 0) want = forced;
  int splits = 1;
  while (2 * splits <= kLanes && 2 * splits <= want && 2 * splits <= chunks) splits *= 2;
  return splits;
}

// SMs of the current device (132, an H200, if it cannot be read).
inline int MultiprocessorCount() {
  static const int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 132;  // H200
    }
    return n;
  }();
  return count;
}

// Chunks of `chunk` candidates per token, for choosing the split. Varlen window lengths live
// on the device, so this assumes min(n_window, window) window rows (the kernel splits each
// token's real range).
inline int64_t CandidateChunks(const model::SparseAttentionArgs& args, int64_t chunk) {
  const int64_t window_rows = args.window_len == nullptr    ? args.n_window
                              : args.window < args.n_window ? args.window
                                                            : args.n_window;
  return (window_rows + args.n_select + chunk - 1) / chunk;
}

// A launch configuration for a (x, y, z) grid of `threads`-thread blocks with `smem` bytes of
// dynamic shared memory whose z blocks of each (x, y) form one cluster: attrs[0] is set to the
// cluster dimension and the config points at attrs with numAttrs = 1 (a caller may append more).
inline cudaLaunchConfig_t ClusterSplitConfig(dim3 grid, int threads, int64_t smem,
                                             cudaLaunchAttribute* attrs) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = 1;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = grid.z;
  config.attrs = attrs;
  config.numAttrs = 1;
  return config;
}

// `splits` (a power of two) halved while `clusters` clusters of that many blocks of `kernel`
// (`threads` a block, `smem` dynamic shared memory, its limit already raised) would not all run
// at once (cudaOccupancyMaxActiveClusters; the GPCs hold whole clusters, so a second wave
// would double the call). Physical only, like the split itself.
template <typename Kernel>
int SplitsInOneWave(Kernel kernel, int64_t clusters, int splits, int threads, int64_t smem) {
  for (; splits > 1; splits /= 2) {
    cudaLaunchAttribute attrs[1];
    const cudaLaunchConfig_t config =
        ClusterSplitConfig(dim3(1, 1, static_cast<unsigned>(splits)), threads, smem, attrs);
    if (clusters <= launch::MaxActiveClusters(reinterpret_cast<const void*>(kernel), config)) break;
  }
  return splits;
}

// Launches kernel(args, error_word) on a (tokens, groups, splits) grid, the `splits` blocks
// of a (token, group) forming one cluster (splits: 1, 2, 4 or 8). If such a cluster cannot
// be scheduled, the (non-sticky) launch error is cleared and each (token, group) runs in one
// block (same bits, see the top of this file). The launch carries the PDL attribute when
// enabled (pdl.cuh): `kernel` must start with pdl::WaitThenAllowNext().
template <typename Kernel>
cudaError_t LaunchClusterSplit(Kernel kernel, const model::SparseAttentionArgs& args,
                               int* error_word, int64_t groups, int splits, int threads,
                               int64_t smem, cudaStream_t stream) {
  for (;;) {
    cudaLaunchAttribute attrs[2];  // the cluster (splits > 1), and PDL (pdl.cuh) when enabled
    cudaLaunchConfig_t config =
        ClusterSplitConfig(dim3(static_cast<unsigned>(args.tokens), static_cast<unsigned>(groups),
                                static_cast<unsigned>(splits)),
                           threads, smem, attrs);
    config.stream = stream;
    config.numAttrs = pdl::AppendAttribute(attrs, splits > 1 ? 1 : 0);
    // A recorded launch (CUDA graphs) fails only when it is issued: ask now whether such a
    // cluster can be scheduled, which is what the retry below finds out by launching.
    if (splits > 1 && launch::SinkFor(stream) != nullptr &&
        !launch::ClusterSchedulable(reinterpret_cast<const void*>(kernel), config)) {
      splits = 1;
      continue;
    }
    cudaError_t e = launch::LaunchKernel(config, kernel, args, error_word);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess || splits == 1) return e;
    cudaGetLastError();
    splits = 1;
  }
}

}  // namespace deepinfer::backend::cuda::kernels::attention
