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
// Session 9 (H200 run 67, FP8 mode): at long context the one-row kernel reached only
// 0.27-0.4 TB/s, as each block loaded a key tile only after the previous tile's MMAs (the
// DRAM pipe idle during the math). It now loads the next tile into registers (KeyPrefetch,
// 32 KiB per block in flight at D = 128, two blocks per SM) before the current tile's MMAs,
// splits exactly-bf16 values without SplitBf16x3's arithmetic (same bits), and takes
// floor(2 * SMs / T) blocks per row (no partial second wave). The bits are those of the
// session-6 kernel, kept as the tests' reference (IndexerScoresMmaReference). Keys may also
// be read in place through per-row block tables (IndexerScoresMmaPaged, PagedRows).
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
//      is then added to the accumulator with round-to-nearest (k-steps in order);
//   4. epilogue: v = relu(dot) * scale * w[h] for the lane's heads g and g + 8, added, then
//      a xor butterfly over the 8 row groups gives the m-tile's 16-head sum per key, stored
//      in shared memory; after a barrier thread j sums key j's m-tile partials in order.
//
// Shared memory (H = 64, D = 128): q terms 51 KiB, key terms 51 KiB, w and partials 1.3 KiB:
// ~104 KiB, two blocks per SM.
//
// Prefill (T >= kIndexerGroupMinRows = 512 rows; fewer rows, e.g. decode batches, take the
// one-row kernel): the row-group kernel below (IndexerMmaGroupKernel) stages each key tile
// once for up to 4 rows of one sequence instead of once per row, with the same per-score
// operations (steps 3-4 are the shared device functions LoadKeyFragments, AccumulateKStep
// and StoreHeadSums). Shared memory at H = 64, D = 128: key terms 51 KiB + 4 fp32 q rows
// 136 KiB + w, partials 5 KiB: ~192 KiB, one block per SM.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_indexer.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using mma::LdMatrixX4;
using mma::MmaBf16;
using mma::SharedAddress;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTileKeys = 64;
constexpr int kKeysPerWarp = 32;                      // 4 n-tiles of 8 keys
constexpr int kKeyGroups = kTileKeys / kKeysPerWarp;  // warps along N
constexpr int kHeadGroups = kWarps / kKeyGroups;      // warps along M
constexpr int kTerms = 3;                             // hi, mid, lo
constexpr int kMaxHeads = 128, kMaxDim = 256;
constexpr int kLoadBatch = 8;  // float4 loads in flight per thread while staging
static_assert(kKeyGroups * kHeadGroups == kWarps, "warps tile the (heads, keys) block");

// Products (q term, key term) of order <= 2, smallest first.
constexpr int kProducts = 6;
__host__ __device__ constexpr int ProductQ(int i) {
  return i == 0 ? 2 : (i == 1 || i == 3) ? 1 : 0;
}
__host__ __device__ constexpr int ProductK(int i) {
  return i == 2 ? 2 : (i == 1 || i == 4) ? 1 : 0;
}

// bf16 row stride (elements) of the q and key term arrays.
__host__ __device__ inline int64_t TermStride(int64_t dim) { return dim + 8; }

struct Smem {
  uint16_t* q;  // [kTerms][heads][dim + 8]
  uint16_t* k;  // [kTerms][kTileKeys][dim + 8]
  float* w;     // [heads]
  float* part;  // [heads / 16][kTileKeys] per-m-tile head sums

  __device__ Smem(unsigned char* base, int64_t heads, int64_t dim) {
    const int64_t rs = TermStride(dim);
    q = reinterpret_cast<uint16_t*>(base);
    k = q + kTerms * heads * rs;
    w = reinterpret_cast<float*>(k + kTerms * kTileKeys * rs);
    part = w + heads;
  }
};

// Splits 4 consecutive values of row `row` (channel c) into the three term arrays
// (terms[term][row][c..c+3], row stride rs, term stride term_rows * rs). Returns true if a
// mid or lo term is nonzero.
template <bool kFast = true>
__device__ __forceinline__ bool SplitStore(const float4 v, uint16_t* terms, int64_t term_rows,
                                           int64_t rs, int64_t row, int64_t c) {
  uint16_t* at = terms + row * rs + c;
  const uint32_t bx = __float_as_uint(v.x), by = __float_as_uint(v.y), bz = __float_as_uint(v.z),
                 bw = __float_as_uint(v.w);
  // Fast path, the same bits as SplitBf16x3: a value whose low 16 bits are zero and that is
  // not a NaN (whose hi term SplitBf16x3 quiets) splits into hi = its top 16 bits, mid = lo
  // = +0.
  const bool low_zero = ((bx | by | bz | bw) & 0xFFFFu) == 0;
  const bool nan = ((bx & 0x7FFFFFFFu) > 0x7F800000u) | ((by & 0x7FFFFFFFu) > 0x7F800000u) |
                   ((bz & 0x7FFFFFFFu) > 0x7F800000u) | ((bw & 0x7FFFFFFFu) > 0x7F800000u);
  if (kFast && low_zero && !nan) {
    *reinterpret_cast<uint2*>(at) =
        make_uint2(__byte_perm(bx, by, 0x7632), __byte_perm(bz, bw, 0x7632));
    *reinterpret_cast<uint2*>(at + term_rows * rs) = make_uint2(0u, 0u);
    *reinterpret_cast<uint2*>(at + 2 * term_rows * rs) = make_uint2(0u, 0u);
    return false;
  }
  const Bf16x3 p0 = SplitBf16x3(v.x), p1 = SplitBf16x3(v.y), p2 = SplitBf16x3(v.z),
               p3 = SplitBf16x3(v.w);
  const uint2 hi = make_uint2(p0.hi | (uint32_t{p1.hi} << 16), p2.hi | (uint32_t{p3.hi} << 16));
  const uint2 mid =
      make_uint2(p0.mid | (uint32_t{p1.mid} << 16), p2.mid | (uint32_t{p3.mid} << 16));
  const uint2 lo = make_uint2(p0.lo | (uint32_t{p1.lo} << 16), p2.lo | (uint32_t{p3.lo} << 16));
  *reinterpret_cast<uint2*>(at) = hi;
  *reinterpret_cast<uint2*>(at + term_rows * rs) = mid;
  *reinterpret_cast<uint2*>(at + 2 * term_rows * rs) = lo;
  return ((mid.x | mid.y | lo.x | lo.y) & 0x7FFF7FFFu) != 0;
}

// Splits rows [0, rows) of `src` (row r at src + r * dim, read only for r < valid_rows;
// zeros beyond) into `terms`. Returns whether any thread saw a nonzero mid / lo term
// (block-uniform; contains a barrier).
template <bool kFast = true>
__device__ bool StageTerms(const float* src, int64_t rows, int64_t valid_rows, int64_t dim,
                           uint16_t* terms) {
  // 32-bit index math: rows * quads <= kMaxHeads * kMaxDim / 4.
  const int quads = static_cast<int>(dim / 4), total = static_cast<int>(rows) * quads;
  const int64_t rs = TermStride(dim);
  bool extra = false;
  for (int base = threadIdx.x; base < total; base += kThreads * kLoadBatch) {
    float4 v[kLoadBatch];
#pragma unroll
    for (int i = 0; i < kLoadBatch; ++i) {
      const int e = base + i * kThreads, r = e / quads;
      v[i] = e < total && r < valid_rows
                 ? __ldg(reinterpret_cast<const float4*>(src + int64_t{r} * dim) + (e - r * quads))
                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int i = 0; i < kLoadBatch; ++i) {
      const int e = base + i * kThreads, r = e / quads;
      if (e < total) extra |= SplitStore<kFast>(v[i], terms, rows, rs, r, (e - r * quads) * 4);
    }
  }
  return __syncthreads_or(extra) != 0;
}

// Loads the key tile's B fragments of k-step k0 (terms < k_terms): b[term][p] holds n-tiles
// 2p and 2p + 1 of the warp's 32 keys.
__device__ __forceinline__ void LoadKeyFragments(uint32_t (&b)[kTerms][2][4],
                                                 const uint16_t* b_base, int64_t rs, int k0,
                                                 int k_terms) {
#pragma unroll
  for (int term = 0; term < kTerms; ++term) {
    if (term < k_terms) {
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        LdMatrixX4(b[term][p], b_base + (term * kTileKeys + 16 * p) * rs + k0);
      }
    }
  }
}

// One k-step: the products go into a fresh fragment, added to acc in fp32 round-to-nearest
// (tensor-core accumulation truncates, and this keeps it to the k-step's partial sums).
// Shared by both kernels so that every (row, key) dot takes the same operations.
__device__ __forceinline__ void AccumulateKStep(float (&acc)[4][4], const uint32_t (&a)[kTerms][4],
                                                const uint32_t (&b)[kTerms][2][4], int q_terms,
                                                int k_terms) {
  float step[4][4] = {};
#pragma unroll
  for (int i = 0; i < kProducts; ++i) {
    const int qi = ProductQ(i), kj = ProductK(i);
    if (qi < q_terms && kj < k_terms) {
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        MmaBf16(step[n], a[qi], b[kj][n >> 1][2 * (n & 1)], b[kj][n >> 1][2 * (n & 1) + 1]);
      }
    }
  }
#pragma unroll
  for (int n = 0; n < 4; ++n) {
#pragma unroll
    for (int r = 0; r < 4; ++r) acc[n][r] = __fadd_rn(acc[n][r], step[n][r]);
  }
}

// First half of step 4: relu * scale * w of the lane's heads g (w0) and g + 8 (w1), the
// butterfly head sum, stored by row group 0 at part[key] (part = the m-tile's partials
// shifted to the warp's first key).
__device__ __forceinline__ void StoreHeadSums(const float (&acc)[4][4], float w0, float w1,
                                              float scale, float* part) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q4 = lane & 3;
#pragma unroll
  for (int n = 0; n < 4; ++n) {
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      // relu as MaxF: NaN propagates like the CPU reference's std::max(dot, 0).
      const float r0 = acc[n][c] < 0.0f ? 0.0f : acc[n][c];
      const float r1 = acc[n][2 + c] < 0.0f ? 0.0f : acc[n][2 + c];
      float v = r0 * scale * w0 + r1 * scale * w1;
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 16);
      if (g == 0) part[8 * n + 2 * q4 + c] = v;
    }
  }
}

// Step 3 and the first half of step 4 for m-tile mt: warp's 4 n-tiles (keys n_base ..
// n_base + 31 of the tile) x 16 heads, head-summed into s.part[mt][key].
__device__ void ScoreMTile(const Smem& s, int64_t heads, int64_t dim, int mt, int n_base,
                           int q_terms, int k_terms, float scale) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = TermStride(dim);
  const int ksteps = static_cast<int>(dim / 16);
  const uint16_t* a_base = s.q + (mt * 16 + mrow + 8 * (mat & 1)) * rs + 8 * (mat >> 1);
  const uint16_t* b_base = s.k + (n_base + mrow + 8 * (mat >> 1)) * rs + 8 * (mat & 1);
  float acc[4][4] = {};
  for (int ks = 0; ks < ksteps; ++ks) {
    const int k0 = ks * 16;
    uint32_t a[kTerms][4], b[kTerms][2][4];
#pragma unroll
    for (int term = 0; term < kTerms; ++term) {
      if (term < q_terms) LdMatrixX4(a[term], a_base + term * heads * rs + k0);
    }
    LoadKeyFragments(b, b_base, rs, k0, k_terms);
    AccumulateKStep(acc, a, b, q_terms, k_terms);
  }
  StoreHeadSums(acc, s.w[mt * 16 + g], s.w[mt * 16 + g + 8], scale,
                s.part + mt * kTileKeys + n_base);
}

// Row t's visible key count: min(key_len[t], n_keys, (q_pos[t] + 1) / ratio).
__device__ __forceinline__ int64_t VisibleKeys(const int32_t* key_len, int64_t n_keys,
                                               const int32_t* q_pos, int64_t ratio, int64_t t) {
  const int64_t own = key_len != nullptr && key_len[t] < n_keys ? key_len[t] : n_keys;
  const int64_t by_pos = (static_cast<int64_t>(q_pos[t]) + 1) / ratio;
  return by_pos < own ? by_pos : own;
}

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

// Asks the L2 to fetch the tile of keys g0 .. g0 + valid - 1 (a hint: one prefetch per
// 128 bytes of each key row from dim >= 32; no bit depends on it). Issued two tiles ahead,
// so that a block has that tile on its way besides the one in KeyPrefetch's registers.
template <class RowKeys>
__device__ __forceinline__ void PrefetchTileL2(const RowKeys& keys, int64_t g0, int64_t valid,
                                               int quads) {
  const int total = static_cast<int>(valid) * quads;
  for (int e = threadIdx.x * 8; e < total; e += kThreads * 8) {
    const int r = e / quads;
    const float4* at = reinterpret_cast<const float4*>(keys.Row(g0 + r)) + (e - r * quads);
    asm volatile("prefetch.global.L2 [%0];" ::"l"(at));
  }
}

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
  bool l2_prefetch = false;  // PrefetchTileL2 two tiles ahead
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
    if (!kReference) {
      pf.Issue(keys, g0, valid_of(g0), quads);
      const int64_t next = g0 + int64_t{gridDim.x} * kTileKeys;
      if (p.l2_prefetch && next < visible) PrefetchTileL2(keys, next, valid_of(next), quads);
    }
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
      const int64_t stride = int64_t{gridDim.x} * kTileKeys, next = g0 + stride;
      if (next < visible) pf.Issue(keys, next, valid_of(next), quads);
      if (p.l2_prefetch && next + stride < visible) {
        PrefetchTileL2(keys, next + stride, valid_of(next + stride), quads);
      }
    }
    for (int mt = warp % kHeadGroups; mt < m_tiles; mt += kHeadGroups) {
      ScoreMTile(s, heads, dim, mt, n_base, q_terms, k_terms, p.scale);
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

// ---- Row-group kernel (prefill): a block serves up to kMaxGroupRows consecutive rows. ----
//
// Grid (splits, ceil(T / group_rows)); 512 threads. q of every row of the group is staged
// once as fp32 ([rows][heads][dim + 8], conflict-free float2 reads) and split into its bf16
// terms at fragment-load time (the same SplitBf16x3 bits ldmatrix reads in the one-row
// kernel); the rows are cut into runs of equal key_offset (rows of different sequences
// never share a staging). Per run and key tile: the keys visible to any row of the run are
// staged once (terms as in the one-row kernel, plus a per-key "has a mid / lo term" flag),
// then the warps take the tasks (row, m-tile, key half) in turn. Row r's k_terms is 3 iff a
// key it sees in the tile has a flag (what the one-row kernel decides from its own staging);
// staged keys past its visible count only feed its masked (-inf) columns, as MMA columns
// are independent. So every score takes exactly the one-row kernel's operations.
constexpr int kGroupThreads = 512;
constexpr int kGroupWarps = kGroupThreads / 32;
constexpr int kGroupLoadBatch = 4;
constexpr int64_t kMaxGroupRows = 4;

// fp32 q row stride (floats).
__host__ __device__ inline int64_t QStride(int64_t dim) { return dim + 8; }

struct GroupSmem {
  uint16_t* k;       // [kTerms][kTileKeys][dim + 8] key terms
  float* q;          // [rows][heads][dim + 8] fp32 q
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

// Packs the bf16 terms of fp32 pair x (low half = x.x) into a[term][i]; only the hi term
// (SplitBf16x3's, the rest left to dead-code elimination) if !kAllTerms.
template <bool kAllTerms>
__device__ __forceinline__ void SplitPair(const float2 x, uint32_t (&a)[kTerms][4], int i) {
  const Bf16x3 p0 = SplitBf16x3(x.x), p1 = SplitBf16x3(x.y);
  a[0][i] = p0.hi | (uint32_t{p1.hi} << 16);
  if (kAllTerms) {
    a[1][i] = p0.mid | (uint32_t{p1.mid} << 16);
    a[2][i] = p0.lo | (uint32_t{p1.lo} << 16);
  }
}

// The A fragment terms of k-step k0 from the fp32 q rows g (a_row) and g + 8 (a_row + 8 qs),
// in the one-row kernel's ldmatrix order: (g, k0..), (g + 8, k0..), (g, k0 + 8..), (g + 8, ..).
template <bool kAllTerms>
__device__ __forceinline__ void SplitQFragment(const float* a_row, int64_t qs, int k0,
                                               uint32_t (&a)[kTerms][4]) {
  SplitPair<kAllTerms>(*reinterpret_cast<const float2*>(a_row + k0), a, 0);
  SplitPair<kAllTerms>(*reinterpret_cast<const float2*>(a_row + 8 * qs + k0), a, 1);
  SplitPair<kAllTerms>(*reinterpret_cast<const float2*>(a_row + k0 + 8), a, 2);
  SplitPair<kAllTerms>(*reinterpret_cast<const float2*>(a_row + 8 * qs + k0 + 8), a, 3);
}

// ScoreMTile for row r of the group: A fragments split from the fp32 q row on the fly.
__device__ void ScoreGroupTask(const GroupSmem& s, int64_t heads, int64_t dim, int r, int mt,
                               int n_base, int q_terms, int k_terms, float scale) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q4 = lane & 3, mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = TermStride(dim), qs = QStride(dim);
  const int ksteps = static_cast<int>(dim / 16);
  const float* a_row = s.q + (r * heads + mt * 16 + g) * qs + 2 * q4;  // row g; g + 8 below
  const uint16_t* b_base = s.k + (n_base + mrow + 8 * (mat >> 1)) * rs + 8 * (mat & 1);
  float acc[4][4] = {};
  for (int ks = 0; ks < ksteps; ++ks) {
    const int k0 = ks * 16;
    uint32_t a[kTerms][4], b[kTerms][2][4];
    if (q_terms == 1) {  // warp-uniform
      SplitQFragment<false>(a_row, qs, k0, a);
    } else {
      SplitQFragment<true>(a_row, qs, k0, a);
    }
    LoadKeyFragments(b, b_base, rs, k0, k_terms);
    AccumulateKStep(acc, a, b, q_terms, k_terms);
  }
  const float* w = s.w + r * heads + mt * 16;
  StoreHeadSums(acc, w[g], w[g + 8], scale, s.part + (r * (heads / 16) + mt) * kTileKeys + n_base);
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
                       RowKeyTerms(s, valid), p.scale);
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
  }
  __syncthreads();
  for (int r0 = 0, r1 = 0; r0 < rows; r0 = r1) {
    for (r1 = r0 + 1; r1 < rows; ++r1) {
      if (p.key_offset != nullptr && p.key_offset[p.t0 + r1] != p.key_offset[p.t0 + r0]) break;
    }
    ScoreRun(s, p, r0, r1);
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

bool g_l2_prefetch = true;  // IndexerMmaSetL2Prefetch

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
        cudaFuncSetAttribute(IndexerMmaKernel<Keys, kReference>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const int64_t n_tiles = (args.n_keys + kTileKeys - 1) / kTileKeys;
  const dim3 grid(static_cast<unsigned>(RowSplits(T, n_tiles)), static_cast<unsigned>(T));
  pdl::Launch(IndexerMmaKernel<Keys, kReference>, grid, kThreads, static_cast<size_t>(smem), stream,
              args, keys);
  return cudaGetLastError();
}

}  // namespace

int64_t IndexerMmaSharedBytes(int64_t heads, int64_t dim) {
  return IndexerMmaSharedBytesImpl(heads, dim);
}

bool IndexerMmaApplicable(const float* q, const float* keys, int64_t T, int64_t heads, int64_t dim,
                          int64_t ratio) {
  return heads >= 16 && heads <= kMaxHeads && heads % 16 == 0 && dim >= 16 && dim <= kMaxDim &&
         dim % 16 == 0 && IndexerMmaSharedBytes(heads, dim) <= kMaxSharedBytes && T >= 1 &&
         T <= 65535 && ratio >= 1 && Aligned16(q) && Aligned16(keys);
}

int64_t IndexerMmaGroupRows(int64_t heads, int64_t dim) {
  for (int64_t rows = kMaxGroupRows; rows >= 2; --rows) {
    if (GroupSharedBytes(heads, dim, rows) <= kMaxSharedBytes) return rows;
  }
  return 1;
}

cudaError_t IndexerScoresMmaGrouped(const float* q, const float* w, int64_t T, int64_t heads,
                                    int64_t dim, const float* keys, const int32_t* key_offset,
                                    const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                    int64_t ratio, float scale, float* scores, int64_t group_rows,
                                    cudaStream_t stream) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaApplicable(q, keys, T, heads, dim, ratio) || group_rows < 1 ||
      group_rows > IndexerMmaGroupRows(heads, dim)) {
    return cudaErrorInvalidValue;
  }
  const int64_t n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int64_t sms = attention::MultiprocessorCount();
  if (group_rows == 1) {
    RowArgs args{q, w, heads, dim, key_len, n_keys, q_pos, ratio, scale, scores};
    args.l2_prefetch = g_l2_prefetch;
    return LaunchRowKernel(args, T, ContiguousRows{keys, key_offset, dim}, stream);
  }
  const int64_t smem = GroupSharedBytes(heads, dim, group_rows);
  const cudaError_t e = cudaFuncSetAttribute(
      IndexerMmaGroupKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  // One block per SM (shared memory); enough groups x splits to fill the SMs.
  const int64_t groups = (T + group_rows - 1) / group_rows;
  const int64_t want = (sms + groups - 1) / groups;
  const int64_t splits = want < n_tiles ? want : n_tiles;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(groups));
  const GroupArgs args{keys, key_offset, n_keys, dim, heads, scale, scores, 0};
  pdl::Launch(IndexerMmaGroupKernel, grid, kGroupThreads, static_cast<size_t>(smem), stream, q, w,
              T, group_rows, key_len, q_pos, ratio, args);
  return cudaGetLastError();
}

cudaError_t IndexerScoresMmaReference(const float* q, const float* w, int64_t T, int64_t heads,
                                      int64_t dim, const float* keys, const int32_t* key_offset,
                                      const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                      int64_t ratio, float scale, float* scores,
                                      cudaStream_t stream) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaApplicable(q, keys, T, heads, dim, ratio)) return cudaErrorInvalidValue;
  const RowArgs args{q, w, heads, dim, key_len, n_keys, q_pos, ratio, scale, scores};
  return LaunchRowKernel<ContiguousRows, true>(args, T, ContiguousRows{keys, key_offset, dim},
                                               stream);
}

void IndexerMmaSetL2Prefetch(bool on) { g_l2_prefetch = on; }

bool IndexerMmaPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio) {
  const float* aligned = reinterpret_cast<const float*>(uintptr_t{256});
  return IndexerMmaApplicable(aligned, aligned, T, heads, dim, ratio);
}

cudaError_t IndexerScoresMmaPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                  int64_t dim, const PagedKeys& keys, int64_t n_keys,
                                  const int32_t* q_pos, int64_t ratio, float scale, float* scores,
                                  cudaStream_t stream) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaPagedApplicable(T, heads, dim, ratio) || !Aligned16(q) || keys.bases == nullptr ||
      keys.max_blocks < 1 || keys.rows_per_block < 1) {
    return cudaErrorInvalidValue;
  }
  // Key indices stay below 2^31, so a larger block size reads as 2^31 (block 0 only).
  const int64_t rpb =
      keys.rows_per_block < (int64_t{1} << 31) ? keys.rows_per_block : (int64_t{1} << 31);
  RowArgs args{q, w, heads, dim, keys.key_len, n_keys, q_pos, ratio, scale, scores};
  args.l2_prefetch = g_l2_prefetch;
  const PagedRows rows{keys.bases, keys.max_blocks, static_cast<uint32_t>(rpb),
                       U31Divider::For(static_cast<uint32_t>(rpb)), dim};
  return LaunchRowKernel(args, T, rows, stream);
}

cudaError_t IndexerScoresMma(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                             const float* keys, const int32_t* key_offset, const int32_t* key_len,
                             int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                             float* scores, cudaStream_t stream) {
  const int64_t group_rows = T >= kIndexerGroupMinRows ? IndexerMmaGroupRows(heads, dim) : 1;
  return IndexerScoresMmaGrouped(q, w, T, heads, dim, keys, key_offset, key_len, n_keys, q_pos,
                                 ratio, scale, scores, group_rows, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
