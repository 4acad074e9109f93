// Tensor-core lightning-indexer scores (contract and accuracy in kernels_indexer.h).
//
// Shapes (DeepSeek-V4.1): H = 64 heads, D = 128, ~1024 keys per row at 4k context.
// Per (row, key): 2 * H * D = 16 KFLOP of model work; with all six bf16 products 6x that
// on tensor cores, with exactly-bf16 (FP4 fake-quantised) operands 1x. Decode T = 256 rows
// over their own 1024 keys: 4.3 GFLOP model work, 128 MiB of fp32 keys from HBM (~28 us at
// 4.8 TB/s), so the bf16-exact case is bandwidth-bound. MEASURED (H200, session 6,
// CudaIndexerTest.DISABLED_Bench, 64 x 128, 1024 keys per row): T = 1 8.4 us, T = 32 25.9 us,
// T = 256 324 us; prefill T = 4096 over 1024 keys: 860 us (FP4 inputs), 1.0 ms (fp32).
//
// Session 17 (run 148): IndexerSums::kTensorCore (FP8 mode; kernels_indexer.h): decode T = 32
// rows x 1024 FP4 keys 15.0 -> 12.1 us a call; the 4-layer decode step's three paged calls at
// B = 32 156-169 -> 127 us. On the tests' FP4-grid operands the chain gave the exact sums' bits
// (the partial sums are exact in fp32 while the block scales span a few octaves).
// Session 8 (H200 run 67, FP8 mode): at long context the one-row kernel reached only
// 0.27-0.4 TB/s, as each block loaded a key tile only after the previous tile's MMAs (the
// DRAM pipe idle during the math). It now loads the next tile into registers (KeyPrefetch,
// 32 KiB per block in flight at D = 128, two blocks per SM) before the current tile's MMAs,
// splits exactly-bf16 values without SplitBf16x3's arithmetic (same bits), and takes
// floor(2 * SMs / T) blocks per row (no partial second wave). The bits are those of the
// session-6 kernel, kept as the tests' reference (IndexerScoresMmaReference). Keys may also
// be read in place through per-row block tables (IndexerScoresMmaPaged, PagedRows).
// Session 26 (ncu, run 217, decode 4k, 4,096 fp32 keys a row): B=32 44 us a call (1.5 TB/s), B=128
// 145 us (1.9 TB/s); the stall samples sit on the staging stores (the keys' first use) and its
// barrier. Writing only the hi terms of exactly-splitting tiles was slower (run 218: 55 / 179 us).
// Removed then: an L2 prefetch hint for the tile after the register-prefetched one. Without it
// every measured call was faster (runs 221-222, us: 4k B=32 / 128 41.8-42.1 / 139.3-139.5
// against 44.5-45.1 / 148.2-149.2; 32k B=8 / 32 72.1 / 266-268 against 76.4 / 284); further
// ahead (3-6 tiles) read more DRAM bytes and was slower still.
//
// Structure. Grid (splits, T): block (x, t) serves row t and its key tiles x, x + splits, ..
// of kTileKeys = 64 keys (splits only spreads the work over the SMs; no bit depends on it).
//   1. q[t] (H x D fp32) is split once into bf16 hi / mid / lo terms in shared memory
//      ([3][H][D + 8], rows 16-byte aligned and ldmatrix conflict-free), w[t] beside it;
//      q_terms = 1 if every mid / lo term is zero, else 3 (block-uniform).
//   2. per tile: tiles at or past the visible count are written -inf without reading keys;
//      otherwise the tile's visible keys (prefetched into registers during the previous
//      tile) are split likewise into [3][64][D + 8] (keys past the visible count are
//      zeros, never read), k_terms = 1 or 3; the next tile's loads are then issued;
//   3. S = q K^T with M = heads, N = keys, K = D: warp w owns the 32 keys (w / 4) * 32 ..
//      (4 n-tiles) and the 16-head m-tiles w % 4, w % 4 + 4, ..; per k-step the products
//      (q term, key term) = (lo, hi), (mid, mid), (hi, lo), (mid, hi), (hi, mid), (hi, hi)
//      (smallest first; those with a zero side skipped) go into a fresh fp32 fragment that
//      is then added to the accumulator with round-to-nearest (k-steps in order); with
//      IndexerSums::kTensorCore and one term on both sides, one MMA chain instead (ChainKSteps);
//   4. epilogue: v = relu(dot) * scale * w[h] for the lane's heads g and g + 8, added, then
//      a xor butterfly over the 8 row groups gives the m-tile's 16-head sum per key, stored
//      in shared memory; after a barrier thread j sums key j's m-tile partials in order.
//
// Shared memory (H = 64, D = 128): q terms 51 KiB, key terms 51 KiB, w and partials 1.3 KiB:
// ~104 KiB, two blocks per SM.
//
// Prefill (T >= kIndexerGroupMinRows = 512 rows; fewer rows, e.g. decode batches, take the
// one-row kernel): the row-group kernel in k_indexer_group.cu (IndexerMmaGroupKernel) stages each
// key tile once for up to 4 rows of one sequence instead of once per row, with the same per-score
// operations (steps 3-4 are the shared device function ScoreTile: LoadKeyFragments,
// AccumulateKStep or ChainKSteps, and StoreHeadSums). Shared memory at H = 64, D = 128: key terms
// 51 KiB + 4 fp32 q rows 136 KiB + w, partials 5 KiB: ~192 KiB, one block per SM.
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

// Where row t's keys live. ContiguousRows: key j at keys + (key_offset[t] + j) * dim;
// PagedRows: through the row's block table (PagedKeys in kernels_indexer.h). Row(j) is only
// called for j < the row's visible count (< 2^31), so table entries past it are never read.
struct ContiguousRows {
  // Row t's keys: Row(j) = key j.
  struct Bound {
    const float* keys;
    int64_t dim;
    __device__ const float* Row(int64_t j) const { return keys + j * dim; }
  };

  const float* keys;
  const int32_t* key_offset;  // null: every row starts at keys
  int64_t dim;

  __device__ Bound ForRow(int64_t t) const {
    const int64_t offset = key_offset != nullptr ? key_offset[t] : 0;
    return {keys + offset * dim, dim};
  }
};

struct PagedRows {
  // Row t's keys: its block table and the block size.
  struct Bound {
    const int64_t* table;     // [max_blocks] addresses of float rows
    uint32_t rows_per_block;  // >= 1 (clamped to 2^31 on the host: j < 2^31)
    U31Divider by_block;      // division by rows_per_block
    int64_t dim;
    __device__ const float* Row(int64_t j) const {
      const uint32_t jj = static_cast<uint32_t>(j), block = by_block.Divide(jj);
      const int64_t base = __ldg(table + block);
      return reinterpret_cast<const float*>(base) + int64_t{jj - block * rows_per_block} * dim;
    }
  };

  const int64_t* bases;  // [T, max_blocks]
  int64_t max_blocks;
  uint32_t rows_per_block;
  U31Divider by_block;
  int64_t dim;

  __device__ Bound ForRow(int64_t t) const {
    return {bases + t * max_blocks, rows_per_block, by_block, dim};
  }
};

// The first kLoadBatch * kThreads float4 of a key tile, loaded into registers one tile
// ahead (issued before the current tile's MMAs, so that its loads are in flight while they
// run). Thread x holds elements x + i * kThreads (i < kLoadBatch) of the tile's row-major
// quads (quad e: key e / quads, channels 4 (e % quads) ..); zeros past the visible keys.
// The rest of a tile (dim > 128 at 64 keys) is loaded when the tile is staged.
struct KeyPrefetch {
  float4 v[kLoadBatch];

  template <class RowKeys>
  __device__ __forceinline__ void Issue(const RowKeys& keys, int64_t g0, int64_t valid, int quads) {
    const int total = kTileKeys * quads;
#pragma unroll
    for (int i = 0; i < kLoadBatch; ++i) {
      const int e = threadIdx.x + i * kThreads, r = e / quads;
      v[i] = e < total && r < valid
                 ? __ldg(reinterpret_cast<const float4*>(keys.Row(g0 + r)) + (e - r * quads))
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
};

// Splits the tile of keys g0 .. g0 + 63 (rows r < valid from `keys`, zeros beyond) into
// s.k: the prefetched part from `pf`, the rest loaded here. The same shared-memory contents
// as StageTerms over the contiguous tile. Returns whether any key has a nonzero mid / lo
// term (block-uniform; contains a barrier).
template <class RowKeys>
__device__ bool StageRowKeyTile(const KeyPrefetch& pf, const RowKeys& keys, int64_t g0,
                                int64_t valid, int64_t dim, uint16_t* terms) {
  const int quads = static_cast<int>(dim / 4), total = kTileKeys * quads;
  const int64_t rs = TermStride(dim);
  bool extra = false;
#pragma unroll
  for (int i = 0; i < kLoadBatch; ++i) {
    const int e = threadIdx.x + i * kThreads, r = e / quads;
    if (e < total) extra |= SplitStore(pf.v[i], terms, kTileKeys, rs, r, (e - r * quads) * 4);
  }
  for (int e = threadIdx.x + kLoadBatch * kThreads; e < total; e += kThreads) {
    const int r = e / quads;
    const float4 v =
        r < valid ? __ldg(reinterpret_cast<const float4*>(keys.Row(g0 + r)) + (e - r * quads))
                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    extra |= SplitStore(v, terms, kTileKeys, rs, r, (e - r * quads) * 4);
  }
  return __syncthreads_or(extra) != 0;
}

// Everything the one-row kernel reads and writes besides the keys.
struct RowArgs {
  const float* q;
  const float* w;
  int64_t heads, dim;
  const int32_t* key_len;
  int64_t n_keys;
  const int32_t* q_pos;
  int64_t ratio;
  float scale;
  float* scores;
  bool tensor_sums = false;  // IndexerSums::kTensorCore
};

// Block (x, t): row t, key tiles x, x + gridDim.x, .. (the file comment's steps 1-4). The
// next visible tile's keys are loaded into registers (KeyPrefetch) before the current
// tile's MMAs; every shared-memory content and operation is as without the prefetch.
// kReference (tests only; ContiguousRows): the session-6 kernel that the bits are pinned
// to: each tile loaded and split (SplitBf16x3 on every value) after the previous one.
template <class Keys, bool kReference = false>
__global__ void __launch_bounds__(kThreads, 2) IndexerMmaKernel(RowArgs p, Keys all_keys) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Smem s(smem_raw, p.heads, p.dim);
  const int64_t t = blockIdx.y, heads = p.heads, dim = p.dim, n_keys = p.n_keys;
  const int64_t visible = VisibleKeys(p.key_len, n_keys, p.q_pos, p.ratio, t);
  const typename Keys::Bound keys = all_keys.ForRow(t);
  float* out = p.scores + t * n_keys;
  const int64_t n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int quads = static_cast<int>(dim / 4);
  const auto valid_of = [&](int64_t g0) {
    return visible - g0 < kTileKeys ? visible - g0 : int64_t{kTileKeys};
  };

  // q staged only if some tile of this block is visible (uniform); the first tile's keys
  // are requested before q is staged.
  const bool any_visible = int64_t{blockIdx.x} * kTileKeys < visible;
  int q_terms = 1;
  KeyPrefetch pf;
  if (any_visible) {
    const int64_t g0 = int64_t{blockIdx.x} * kTileKeys;
    if (!kReference) pf.Issue(keys, g0, valid_of(g0), quads);
    for (int64_t h = threadIdx.x; h < heads; h += kThreads) s.w[h] = p.w[t * heads + h];
    q_terms = StageTerms<!kReference>(p.q + t * heads * dim, heads, heads, dim, s.q) ? kTerms : 1;
  }
  const int warp = threadIdx.x >> 5;
  const int n_base = (warp / kHeadGroups) * kKeysPerWarp;
  const int m_tiles = static_cast<int>(heads / 16);
  for (int64_t tile = blockIdx.x; tile < n_tiles; tile += gridDim.x) {
    const int64_t g0 = tile * kTileKeys;
    const int64_t n_tile = n_keys - g0 < kTileKeys ? n_keys - g0 : kTileKeys;
    if (g0 >= visible) {  // uniform; no shared memory touched
      if (threadIdx.x < n_tile) out[g0 + threadIdx.x] = NegInf();
      continue;
    }
    // The staging's barrier also orders this tile's s.part writes (after it) after the
    // previous tile's epilogue reads (before it), so the loop needs no closing barrier.
    int k_terms;
    if constexpr (kReference) {
      k_terms = StageTerms<false>(keys.Row(g0), kTileKeys, valid_of(g0), dim, s.k) ? kTerms : 1;
    } else {
      k_terms = StageRowKeyTile(pf, keys, g0, valid_of(g0), dim, s.k) ? kTerms : 1;
      const int64_t next = g0 + int64_t{gridDim.x} * kTileKeys;
      if (next < visible) pf.Issue(keys, next, valid_of(next), quads);
    }
    for (int mt = warp % kHeadGroups; mt < m_tiles; mt += kHeadGroups) {
      ScoreMTile(s, heads, dim, mt, n_base, q_terms, k_terms, p.tensor_sums, p.scale);
    }
    __syncthreads();  // s.part complete; s.k free for the next tile
    if (threadIdx.x < n_tile) {
      const int64_t g = g0 + threadIdx.x;
      float sum = 0.0f;
      for (int mt = 0; mt < m_tiles; ++mt) sum += s.part[mt * kTileKeys + threadIdx.x];
      out[g] = g < visible ? sum : NegInf();
    }
    if (kReference) __syncthreads();
  }
}

// Blocks of the one-row kernel along a row: as many as fit two per SM over the T rows
// (floor: a second, partial wave would double the time of long rows), at least 1 and at
// most the row's tiles. No bit depends on it.
int64_t RowSplits(int64_t T, int64_t n_tiles) {
  const int64_t fit = 2 * attention::MultiprocessorCount() / T;
  return fit < 1 ? 1 : fit < n_tiles ? fit : n_tiles;
}

int64_t IndexerMmaSharedBytesImpl(int64_t heads, int64_t dim) {
  const int64_t rs = TermStride(dim);
  return 2 * kTerms * rs * (heads + kTileKeys) + 4 * heads + 4 * (heads / 16) * kTileKeys;
}

// The one-row kernel over T rows (shape checked by the caller; n_keys >= 1).
template <class Keys, bool kReference = false>
cudaError_t LaunchRowKernel(const RowArgs& args, int64_t T, const Keys& keys, cudaStream_t stream) {
  const int64_t smem = IndexerMmaSharedBytesImpl(args.heads, args.dim);
  if (smem > 48 * 1024) {
    const cudaError_t e =
        launch::RaiseMaxDynamicSmem(IndexerMmaKernel<Keys, kReference>, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t n_tiles = (args.n_keys + kTileKeys - 1) / kTileKeys;
  const dim3 grid(static_cast<unsigned>(RowSplits(T, n_tiles)), static_cast<unsigned>(T));
  pdl::Launch(IndexerMmaKernel<Keys, kReference>, grid, kThreads, static_cast<size_t>(smem), stream,
              args, keys);
  return cudaGetLastError();
}

}  // namespace
}  // namespace indexer_mma

using indexer_mma::ContiguousRows;
using indexer_mma::IndexerMmaSharedBytesImpl;
using indexer_mma::kMaxDim;
using indexer_mma::kMaxHeads;
using indexer_mma::LaunchRowKernel;
using indexer_mma::PagedRows;
using indexer_mma::RowArgs;

int64_t IndexerMmaSharedBytes(int64_t heads, int64_t dim) {
  return IndexerMmaSharedBytesImpl(heads, dim);
}

bool IndexerMmaApplicable(const float* q, const float* keys, int64_t T, int64_t heads, int64_t dim,
                          int64_t ratio) {
  return heads >= 16 && heads <= kMaxHeads && heads % 16 == 0 && dim >= 16 && dim <= kMaxDim &&
         dim % 16 == 0 && IndexerMmaSharedBytes(heads, dim) <= kMaxSharedBytes && T >= 1 &&
         T <= 65535 && ratio >= 1 && Aligned16(q) && Aligned16(keys);
}

cudaError_t IndexerScoresMmaGrouped(const float* q, const float* w, int64_t T, int64_t heads,
                                    int64_t dim, const float* keys, const int32_t* key_offset,
                                    const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                    int64_t ratio, float scale, float* scores, int64_t group_rows,
                                    cudaStream_t stream, IndexerSums sums) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaApplicable(q, keys, T, heads, dim, ratio) || group_rows < 1 ||
      group_rows > IndexerMmaGroupRows(heads, dim)) {
    return cudaErrorInvalidValue;
  }
  if (group_rows == 1) {
    RowArgs args{q, w, heads, dim, key_len, n_keys, q_pos, ratio, scale, scores};
    args.tensor_sums = sums == IndexerSums::kTensorCore;
    return LaunchRowKernel(args, T, ContiguousRows{keys, key_offset, dim}, stream);
  }
  return indexer_mma::LaunchGroupKernel(q, w, T, heads, dim, keys, key_offset, key_len, n_keys,
                                        q_pos, ratio, scale, scores, group_rows, stream,
                                        sums == IndexerSums::kTensorCore);
}

cudaError_t IndexerScoresMmaReference(const float* q, const float* w, int64_t T, int64_t heads,
                                      int64_t dim, const float* keys, const int32_t* key_offset,
                                      const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                      int64_t ratio, float scale, float* scores,
                                      cudaStream_t stream, IndexerSums sums) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaApplicable(q, keys, T, heads, dim, ratio)) return cudaErrorInvalidValue;
  RowArgs args{q, w, heads, dim, key_len, n_keys, q_pos, ratio, scale, scores};
  args.tensor_sums = sums == IndexerSums::kTensorCore;
  return LaunchRowKernel<ContiguousRows, true>(args, T, ContiguousRows{keys, key_offset, dim},
                                               stream);
}

bool IndexerMmaPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio) {
  const float* aligned = reinterpret_cast<const float*>(uintptr_t{256});
  return IndexerMmaApplicable(aligned, aligned, T, heads, dim, ratio);
}

cudaError_t IndexerScoresMmaPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                  int64_t dim, const PagedKeys& keys, int64_t n_keys,
                                  const int32_t* q_pos, int64_t ratio, float scale, float* scores,
                                  cudaStream_t stream, IndexerSums sums) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaPagedApplicable(T, heads, dim, ratio) || !Aligned16(q) || keys.bases == nullptr ||
      keys.max_blocks < 1 || keys.rows_per_block < 1) {
    return cudaErrorInvalidValue;
  }
  // Key indices stay below 2^31, so a larger block size reads as 2^31 (block 0 only).
  const int64_t rpb =
      keys.rows_per_block < (int64_t{1} << 31) ? keys.rows_per_block : (int64_t{1} << 31);
  RowArgs args{q, w, heads, dim, keys.key_len, n_keys, q_pos, ratio, scale, scores};
  args.tensor_sums = sums == IndexerSums::kTensorCore;
  const PagedRows rows{keys.bases, keys.max_blocks, static_cast<uint32_t>(rpb),
                       U31Divider::For(static_cast<uint32_t>(rpb)), dim};
  return LaunchRowKernel(args, T, rows, stream);
}

cudaError_t IndexerScoresMma(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                             const float* keys, const int32_t* key_offset, const int32_t* key_len,
                             int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                             float* scores, cudaStream_t stream, IndexerSums sums) {
  const int64_t group_rows = T >= kIndexerGroupMinRows ? IndexerMmaGroupRows(heads, dim) : 1;
  return IndexerScoresMmaGrouped(q, w, T, heads, dim, keys, key_offset, key_len, n_keys, q_pos,
                                 ratio, scale, scores, group_rows, stream, sums);
}

}  // namespace deepinfer::backend::cuda::kernels
