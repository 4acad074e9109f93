// Tensor-core lightning-indexer scores, prefill: the row-group kernel (contract in
// kernels_indexer.h; the shared per-score operations in indexer_mma_core.cuh, the one-row
// kernel in k_indexer_mma.cu). From kIndexerGroupMinRows = 512 rows a block stages each key
// tile once for up to 4 rows of one sequence instead of once per row; every score takes the
// one-row kernel's operations in the same order, so the bits do not depend on the grouping.
// Shared memory at H = 64, D = 128: key terms 51 KiB + 4 fp32 q rows 136 KiB + w, partials
// 5 KiB: ~192 KiB, one block per SM.
// MEASURED (H200, FP8 mode, the 4-layer bench checkpoint's 4k prefill, 3 indexer calls): 4.51 ms
// (run 147) -> 2.91 ms with one-term q rows restaged as bf16 (run 148; same bits) -> 2.71 ms
// with IndexerSums::kTensorCore (run 148); 16k prefill 51.8k (run 147) -> 56.7k -> 57.4k tok/s
// (run 148, means of two rounds; run 149, final code: 57.1k). Bench (T 4096 rows,
// 1024 keys, FP4 inputs, groups of 4; CudaIndexerGroupTest.DISABLED_BenchPrefillGroups, run
// 148): 547 us exact sums, 501 us tensor-core sums (the one-row kernel: 771 / 584 us).
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/indexer_mma_core.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_indexer.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace indexer_mma {
namespace {

// ---- Row-group kernel (prefill): a block serves up to kMaxGroupRows consecutive rows. ----
//
// Grid (splits, ceil(T / group_rows)); 512 threads. q of every row of the group is staged
// once as fp32 ([rows][heads][dim + 8], conflict-free float2 reads) and split into its bf16
// terms at fragment-load time (the same SplitBf16x3 bits ldmatrix reads in the one-row
// kernel); a row whose q is exactly bf16 (one term) is then restaged in its place as the
// one-row kernel's bf16 term rows ([heads][dim + 8] bf16, read by ldmatrix: ~12 instructions a
// k-step fewer than splitting on the fly, the same fragments); the rows are cut into runs of equal
// key_offset (rows of different sequences never share a staging). Per run and key tile: the keys
// visible to any row of the run are staged once (terms as in the one-row kernel, plus a per-key
// "has a mid / lo term" flag), then the warps take the tasks (row, m-tile, key half) in turn. Row
// r's k_terms is 3 iff a key it sees in the tile has a flag (what the one-row kernel decides from
// its own staging); staged keys past its visible count only feed its masked (-inf) columns, as MMA
// columns are independent. So every score takes exactly the one-row kernel's operations.
constexpr int kGroupThreads = 512;
constexpr int kGroupWarps = kGroupThreads / 32;
constexpr int kGroupLoadBatch = 4;
constexpr int64_t kMaxGroupRows = 4;

// fp32 q row stride (floats).
__host__ __device__ inline int64_t QStride(int64_t dim) { return dim + 8; }

struct GroupSmem {
  uint16_t* k;       // [kTerms][kTileKeys][dim + 8] key terms
  float* q;          // [rows][heads][dim + 8] fp32 q; a one-term row (q_terms 1) holds instead,
                     // from its start, bf16 [heads][dim + 8] (QRowBf16, RestageQRowBf16)
  float* w;          // [rows][heads]
  float* part;       // [rows][heads / 16][kTileKeys] per-m-tile head sums
  int64_t* visible;  // [rows]
  int* q_terms;      // [rows]
  int* key_extra;    // [kTileKeys] 1 if the staged key has a nonzero mid / lo term

  __device__ GroupSmem(unsigned char* base, int64_t heads, int64_t dim, int64_t rows) {
    k = reinterpret_cast<uint16_t*>(base);
    q = reinterpret_cast<float*>(k + kTerms * kTileKeys * TermStride(dim));
    w = q + rows * heads * QStride(dim);
    part = w + rows * heads;
    visible = reinterpret_cast<int64_t*>(part + rows * (heads / 16) * kTileKeys);
    q_terms = reinterpret_cast<int*>(visible + rows);
    key_extra = q_terms + rows;
  }
};

int64_t GroupSharedBytes(int64_t heads, int64_t dim, int64_t rows) {
  return 2 * kTerms * kTileKeys * TermStride(dim) + 4 * rows * heads * QStride(dim) +
         4 * rows * heads + 4 * rows * (heads / 16) * kTileKeys + 8 * rows + 4 * rows +
         4 * kTileKeys;
}

// Copies q row `src` (heads x dim) into dst (stride QStride); returns whether any value has
// a nonzero mid / lo term (block-uniform; contains a barrier).
__device__ bool StageQRow(const float* src, int64_t heads, int64_t dim, float* dst) {
  const int quads = static_cast<int>(dim / 4), total = static_cast<int>(heads) * quads;
  bool extra = false;
  for (int e = threadIdx.x; e < total; e += kGroupThreads) {
    const int h = e / quads, c = (e - h * quads) * 4;
    const float4 v = __ldg(reinterpret_cast<const float4*>(src + int64_t{h} * dim + c));
    *reinterpret_cast<float4*>(dst + h * QStride(dim) + c) = v;
    const Bf16x3 p0 = SplitBf16x3(v.x), p1 = SplitBf16x3(v.y), p2 = SplitBf16x3(v.z),
                 p3 = SplitBf16x3(v.w);
    extra |= ((p0.mid | p0.lo | p1.mid | p1.lo | p2.mid | p2.lo | p3.mid | p3.lo) & 0x7FFF) != 0;
  }
  return __syncthreads_or(extra) != 0;
}

// Stages the tile's keys 0 .. valid - 1 (zeros beyond) into s.k and sets s.key_extra[key]
// for keys with a nonzero mid / lo term (s.key_extra zero on entry). Ends with a barrier.
__device__ void StageKeyTile(const float* src, int64_t valid, int64_t dim, const GroupSmem& s) {
  const int quads = static_cast<int>(dim / 4), total = kTileKeys * quads;
  const int64_t rs = TermStride(dim);
  for (int base = threadIdx.x; base < total; base += kGroupThreads * kGroupLoadBatch) {
    float4 v[kGroupLoadBatch];
#pragma unroll
    for (int i = 0; i < kGroupLoadBatch; ++i) {
      const int e = base + i * kGroupThreads, r = e / quads;
      v[i] = e < total && r < valid
                 ? __ldg(reinterpret_cast<const float4*>(src + int64_t{r} * dim) + (e - r * quads))
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kGroupLoadBatch; ++i) {
      const int e = base + i * kGroupThreads, r = e / quads;
      if (e < total && SplitStore(v[i], s.k, kTileKeys, rs, r, (e - r * quads) * 4)) {
        s.key_extra[r] = 1;  // benign race: every writer stores 1
      }
    }
  }
  __syncthreads();
}

// Packs the three bf16 terms of fp32 pair x (low half = x.x) into a[term][i].
__device__ __forceinline__ void SplitPair(const float2 x, uint32_t (&a)[kTerms][4], int i) {
  const Bf16x3 p0 = SplitBf16x3(x.x), p1 = SplitBf16x3(x.y);
  a[0][i] = p0.hi | (uint32_t{p1.hi} << 16);
  a[1][i] = p0.mid | (uint32_t{p1.mid} << 16);
  a[2][i] = p0.lo | (uint32_t{p1.lo} << 16);
}

// The A fragment terms of k-step k0 from the fp32 q rows g (a_row) and g + 8 (a_row + 8 qs),
// in the one-row kernel's ldmatrix order: (g, k0..), (g + 8, k0..), (g, k0 + 8..), (g + 8, ..).
__device__ __forceinline__ void SplitQFragment(const float* a_row, int64_t qs, int k0,
                                               uint32_t (&a)[kTerms][4]) {
  SplitPair(*reinterpret_cast<const float2*>(a_row + k0), a, 0);
  SplitPair(*reinterpret_cast<const float2*>(a_row + 8 * qs + k0), a, 1);
  SplitPair(*reinterpret_cast<const float2*>(a_row + k0 + 8), a, 2);
  SplitPair(*reinterpret_cast<const float2*>(a_row + 8 * qs + k0 + 8), a, 3);
}

// Row r's q as the one-row kernel's bf16 hi-term rows (RestageQRowBf16), in place of its fp32
// rows.
__device__ __forceinline__ uint16_t* QRowBf16(const GroupSmem& s, int64_t heads, int64_t dim,
                                              int r) {
  return reinterpret_cast<uint16_t*>(s.q + r * heads * QStride(dim));
}

// Overwrites row r's staged fp32 q (every thread past StageQRow's barrier) with the bf16 hi
// terms of `src` (global, heads x dim) in the one-row kernel's layout ([heads][TermStride]);
// for rows with one term (SplitBf16x3's hi = the value). The caller adds a barrier.
__device__ void RestageQRowBf16(const float* src, int64_t heads, int64_t dim, uint16_t* dst) {
  const int quads = static_cast<int>(dim / 4), total = static_cast<int>(heads) * quads;
  for (int e = threadIdx.x; e < total; e += kGroupThreads) {
    const int h = e / quads, c = (e - h * quads) * 4;
    const float4 v = __ldg(reinterpret_cast<const float4*>(src + int64_t{h} * dim + c));
    const uint32_t lo = SplitBf16x3(v.x).hi | (uint32_t{SplitBf16x3(v.y).hi} << 16);
    const uint32_t hi = SplitBf16x3(v.z).hi | (uint32_t{SplitBf16x3(v.w).hi} << 16);
    *reinterpret_cast<uint2*>(dst + h * TermStride(dim) + c) = make_uint2(lo, hi);
  }
}

// ScoreMTile for row r of the group: one-term rows from their bf16 rows (ScoreTile), others'
// A fragments split from the fp32 q row on the fly.
__device__ void ScoreGroupTask(const GroupSmem& s, int64_t heads, int64_t dim, int r, int mt,
                               int n_base, int q_terms, int k_terms, bool tensor_sums,
                               float scale) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q4 = lane & 3, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = TermStride(dim), qs = QStride(dim);
  const float* w = s.w + r * heads + mt * 16;
  float* part = s.part + (r * (heads / 16) + mt) * kTileKeys + n_base;
  if (q_terms == 1) {  // warp-uniform
    ScoreTile(QRowBf16(s, heads, dim, r) + mt * 16 * rs, heads, s.k, dim, n_base, 1, k_terms,
              tensor_sums, w[g], w[g + 8], scale, part);
    return;
  }
  const int ksteps = static_cast<int>(dim / 16);
  const float* a_row = s.q + (r * heads + mt * 16 + g) * qs + 2 * q4;  // row g; g + 8 below
  const uint16_t* b_base = s.k + (n_base + mrow + 8 * (mat >> 1)) * rs + 8 * (mat & 1);
  float acc[4][4] = {};
  for (int ks = 0; ks < ksteps; ++ks) {
    const int k0 = ks * 16;
    uint32_t a[kTerms][4], b[kTerms][2][4];
    SplitQFragment(a_row, qs, k0, a);
    LoadKeyFragments(b, b_base, rs, k0, k_terms);
    AccumulateKStep(acc, a, b, q_terms, k_terms);
  }
  StoreHeadSums(acc, w[g], w[g + 8], scale, part);
}

// k_terms of a row that sees `valid` keys of the staged tile (warp-uniform).
__device__ __forceinline__ int RowKeyTerms(const GroupSmem& s, int64_t valid) {
  const int lane = threadIdx.x & 31;
  const bool f = (lane < valid && s.key_extra[lane] != 0) ||
                 (lane + 32 < valid && s.key_extra[lane + 32] != 0);
  return __any_sync(0xffffffffu, f) ? kTerms : 1;
}

// Everything the row-group kernel reads from global memory, and its group's first row.
struct GroupArgs {
  const float* keys;
  const int32_t* key_offset;
  int64_t n_keys, dim, heads;
  float scale;
  float* scores;
  int64_t t0;
  bool tensor_sums;  // IndexerSums::kTensorCore
};

// The block's key tiles for the group's rows [r0, r1) (equal key_offset).
__device__ void ScoreRun(const GroupSmem& s, const GroupArgs& p, int r0, int r1) {
  const float* keys = p.keys;
  if (p.key_offset != nullptr) keys += static_cast<int64_t>(p.key_offset[p.t0 + r0]) * p.dim;
  int64_t vis_max = 0;
  for (int r = r0; r < r1; ++r) vis_max = s.visible[r] > vis_max ? s.visible[r] : vis_max;
  const int warp = threadIdx.x >> 5, m_tiles = static_cast<int>(p.heads / 16);
  const int run_rows = r1 - r0, tasks = run_rows * m_tiles * kKeyGroups;
  const int64_t n_tiles = (p.n_keys + kTileKeys - 1) / kTileKeys;
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t g0 = tile * kTileKeys;
    const int64_t n_tile = p.n_keys - g0 < kTileKeys ? p.n_keys - g0 : kTileKeys;
    if (g0 < vis_max) {  // uniform
      StageKeyTile(keys + g0 * p.dim, vis_max - g0 < kTileKeys ? vis_max - g0 : kTileKeys, p.dim,
                   s);
      for (int task = warp; task < tasks; task += kGroupWarps) {
        const int kg = task % kKeyGroups, mt = (task / kKeyGroups) % m_tiles;
        const int r = r0 + task / (kKeyGroups * m_tiles);
        if (g0 >= s.visible[r]) continue;  // warp-uniform
        const int64_t valid = s.visible[r] - g0 < kTileKeys ? s.visible[r] - g0 : kTileKeys;
        ScoreGroupTask(s, p.heads, p.dim, r, mt, kg * kKeysPerWarp, s.q_terms[r],
                       RowKeyTerms(s, valid), p.tensor_sums, p.scale);
      }
      __syncthreads();
    }
    for (int e = threadIdx.x; e < run_rows * kTileKeys; e += kGroupThreads) {
      const int r = r0 + e / kTileKeys, j = e % kTileKeys;
      if (j >= n_tile) continue;
      const int64_t g = g0 + j;
      float sum = 0.0f;
      if (g0 < s.visible[r]) {
        for (int mt = 0; mt < m_tiles; ++mt) sum += s.part[(r * m_tiles + mt) * kTileKeys + j];
      }
      p.scores[(p.t0 + r) * p.n_keys + g] = g < s.visible[r] ? sum : NegInf();
    }
    if (threadIdx.x < kTileKeys) s.key_extra[threadIdx.x] = 0;
    __syncthreads();  // s.k, s.part and s.key_extra are rewritten by the next tile
  }
}

__global__ void __launch_bounds__(kGroupThreads, 1)
    IndexerMmaGroupKernel(const float* q, const float* w, int64_t T, int64_t group_rows,
                          const int32_t* key_len, const int32_t* q_pos, int64_t ratio,
                          GroupArgs p) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Last group first: at causal prefill later rows see more keys, so the heaviest blocks
  // start in the first wave (the tail is light). No bit depends on the order.
  p.t0 = int64_t{gridDim.y - 1 - blockIdx.y} * group_rows;
  const int rows = static_cast<int>(T - p.t0 < group_rows ? T - p.t0 : group_rows);
  const GroupSmem s(smem_raw, p.heads, p.dim, group_rows);
  if (threadIdx.x < kTileKeys) s.key_extra[threadIdx.x] = 0;
  if (threadIdx.x < rows) {
    s.visible[threadIdx.x] = VisibleKeys(key_len, p.n_keys, q_pos, ratio, p.t0 + threadIdx.x);
  }
  for (int r = 0; r < rows; ++r) {
    const int64_t t = p.t0 + r;
    for (int64_t h = threadIdx.x; h < p.heads; h += kGroupThreads) {
      s.w[r * p.heads + h] = w[t * p.heads + h];
    }
    const bool extra =
        StageQRow(q + t * p.heads * p.dim, p.heads, p.dim, s.q + r * p.heads * QStride(p.dim));
    if (threadIdx.x == 0) s.q_terms[r] = extra ? kTerms : 1;
    if (!extra) {  // block-uniform
      RestageQRowBf16(q + t * p.heads * p.dim, p.heads, p.dim, QRowBf16(s, p.heads, p.dim, r));
    }
  }
  __syncthreads();
  for (int r0 = 0, r1 = 0; r0 < rows; r0 = r1) {
    for (r1 = r0 + 1; r1 < rows; ++r1) {
      if (p.key_offset != nullptr && p.key_offset[p.t0 + r1] != p.key_offset[p.t0 + r0]) break;
    }
    ScoreRun(s, p, r0, r1);
  }
}

}  // namespace

cudaError_t LaunchGroupKernel(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                              const float* keys, const int32_t* key_offset, const int32_t* key_len,
                              int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                              float* scores, int64_t group_rows, cudaStream_t stream,
                              bool tensor_sums) {
  const int64_t n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int64_t sms = attention::MultiprocessorCount();
  const int64_t smem = GroupSharedBytes(heads, dim, group_rows);
  const cudaError_t e = launch::RaiseMaxDynamicSmem(IndexerMmaGroupKernel, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  // One block per SM (shared memory); enough groups x splits to fill the SMs.
  const int64_t groups = (T + group_rows - 1) / group_rows;
  const int64_t want = (sms + groups - 1) / groups;
  const int64_t splits = want < n_tiles ? want : n_tiles;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(groups));
  const GroupArgs args{keys, key_offset, n_keys, dim, heads, scale, scores, 0, tensor_sums};
  pdl::Launch(IndexerMmaGroupKernel, grid, kGroupThreads, static_cast<size_t>(smem), stream, q, w,
              T, group_rows, key_len, q_pos, ratio, args);
  return cudaGetLastError();
}

}  // namespace indexer_mma

int64_t IndexerMmaGroupRows(int64_t heads, int64_t dim) {
  for (int64_t rows = indexer_mma::kMaxGroupRows; rows >= 2; --rows) {
    if (indexer_mma::GroupSharedBytes(heads, dim, rows) <= kMaxSharedBytes) return rows;
  }
  return 1;
}

}  // namespace deepinfer::backend::cuda::kernels
