// Tensor-core lightning-indexer scores (contract and accuracy in kernels_indexer.h).
//
// Shapes (DeepSeek-V4.1): H = 64 heads, D = 128, ~1024 keys per row at 4k context.
// Per (row, key): 2 * H * D = 16 KFLOP of model work; with all six bf16 products 6x that
// on tensor cores, with exactly-bf16 (FP4 fake-quantised) operands 1x. Decode T = 256 rows
// over their own 1024 keys: 4.3 GFLOP model work, 128 MiB of fp32 keys from HBM (~28 us at
// 4.8 TB/s), so the bf16-exact case is bandwidth-bound. NOT MEASURED YET.
//
// Structure. Grid (splits, T): block (x, t) serves row t and its key tiles x, x + splits, ..
// of kTileKeys = 64 keys (splits only spreads the work over the SMs; no bit depends on it).
//   1. q[t] (H x D fp32) is split once into bf16 hi / mid / lo terms in shared memory
//      ([3][H][D + 8], rows 16-byte aligned and ldmatrix conflict-free), w[t] beside it;
//      q_terms = 1 if every mid / lo term is zero, else 3 (block-uniform).
//   2. per tile: tiles at or past the visible count are written -inf without reading keys;
//      otherwise the tile's visible keys are split likewise into [3][64][D + 8] (keys past
//      the visible count are zeros, never read), k_terms = 1 or 3;
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
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_indexer.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/mma_bf16.cuh"

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

__device__ __forceinline__ float NegInf() { return -__int_as_float(0x7f800000); }

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
__device__ __forceinline__ bool SplitStore(const float4 v, uint16_t* terms, int64_t term_rows,
                                           int64_t rs, int64_t row, int64_t c) {
  const Bf16x3 p0 = SplitBf16x3(v.x), p1 = SplitBf16x3(v.y), p2 = SplitBf16x3(v.z),
               p3 = SplitBf16x3(v.w);
  const uint2 hi = make_uint2(p0.hi | (uint32_t{p1.hi} << 16), p2.hi | (uint32_t{p3.hi} << 16));
  const uint2 mid =
      make_uint2(p0.mid | (uint32_t{p1.mid} << 16), p2.mid | (uint32_t{p3.mid} << 16));
  const uint2 lo = make_uint2(p0.lo | (uint32_t{p1.lo} << 16), p2.lo | (uint32_t{p3.lo} << 16));
  uint16_t* at = terms + row * rs + c;
  *reinterpret_cast<uint2*>(at) = hi;
  *reinterpret_cast<uint2*>(at + term_rows * rs) = mid;
  *reinterpret_cast<uint2*>(at + 2 * term_rows * rs) = lo;
  return ((mid.x | mid.y | lo.x | lo.y) & 0x7FFF7FFFu) != 0;
}

// Splits rows [0, rows) of `src` (row r at src + r * dim, read only for r < valid_rows;
// zeros beyond) into `terms`. Returns whether any thread saw a nonzero mid / lo term
// (block-uniform; contains a barrier).
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
      if (e < total) extra |= SplitStore(v[i], terms, rows, rs, r, (e - r * quads) * 4);
    }
  }
  return __syncthreads_or(extra) != 0;
}

// Step 3 and the first half of step 4 for m-tile mt: warp's 4 n-tiles (keys n_base ..
// n_base + 31 of the tile) x 16 heads, head-summed into s.part[mt][key].
__device__ void ScoreMTile(const Smem& s, int64_t heads, int64_t dim, int mt, int n_base,
                           int q_terms, int k_terms, float scale) {
  const int lane = threadIdx.x & 31;
  const int g = lane >> 2, q4 = lane & 3, mat = lane >> 3, mrow = lane & 7;
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
      if (term < k_terms) {
#pragma unroll
        for (int p = 0; p < 2; ++p) {
          LdMatrixX4(b[term][p], b_base + (term * kTileKeys + 16 * p) * rs + k0);
        }
      }
    }
    // The k-step's products go into a fresh fragment, added to acc in fp32 round-to-nearest:
    // tensor-core accumulation truncates, and this keeps it to the k-step's partial sums.
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
  const float w0 = s.w[mt * 16 + g], w1 = s.w[mt * 16 + g + 8];
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
      if (g == 0) s.part[mt * kTileKeys + n_base + 8 * n + 2 * q4 + c] = v;
    }
  }
}

__global__ void __launch_bounds__(kThreads, 2)
    IndexerMmaKernel(const float* q, const float* w, int64_t heads, int64_t dim, const float* keys,
                     const int32_t* key_offset, const int32_t* key_len, int64_t n_keys,
                     const int32_t* q_pos, int64_t ratio, float scale, float* scores) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const Smem s(smem_raw, heads, dim);
  const int64_t t = blockIdx.y;
  if (key_offset != nullptr) keys += static_cast<int64_t>(key_offset[t]) * dim;
  const int64_t own = key_len != nullptr && key_len[t] < n_keys ? key_len[t] : n_keys;
  const int64_t by_pos = (static_cast<int64_t>(q_pos[t]) + 1) / ratio;
  const int64_t visible = by_pos < own ? by_pos : own;
  float* out = scores + t * n_keys;
  const int64_t n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;

  // q staged only if some tile of this block is visible (uniform).
  const bool any_visible = int64_t{blockIdx.x} * kTileKeys < visible;
  int q_terms = 1;
  if (any_visible) {
    for (int64_t h = threadIdx.x; h < heads; h += kThreads) s.w[h] = w[t * heads + h];
    q_terms = StageTerms(q + t * heads * dim, heads, heads, dim, s.q) ? kTerms : 1;
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
    const int64_t valid = visible - g0 < kTileKeys ? visible - g0 : kTileKeys;
    const int k_terms = StageTerms(keys + g0 * dim, kTileKeys, valid, dim, s.k) ? kTerms : 1;
    for (int mt = warp % kHeadGroups; mt < m_tiles; mt += kHeadGroups) {
      ScoreMTile(s, heads, dim, mt, n_base, q_terms, k_terms, scale);
    }
    __syncthreads();
    if (threadIdx.x < n_tile) {
      const int64_t g = g0 + threadIdx.x;
      float sum = 0.0f;
      for (int mt = 0; mt < m_tiles; ++mt) sum += s.part[mt * kTileKeys + threadIdx.x];
      out[g] = g < visible ? sum : NegInf();
    }
    __syncthreads();  // s.k and s.part are rewritten by the next tile
  }
}

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

int64_t IndexerMmaSharedBytes(int64_t heads, int64_t dim) {
  const int64_t rs = TermStride(dim);
  return 2 * kTerms * rs * (heads + kTileKeys) + 4 * heads + 4 * (heads / 16) * kTileKeys;
}

bool IndexerMmaApplicable(const float* q, const float* keys, int64_t T, int64_t heads, int64_t dim,
                          int64_t ratio) {
  return heads >= 16 && heads <= kMaxHeads && heads % 16 == 0 && dim >= 16 && dim <= kMaxDim &&
         dim % 16 == 0 && IndexerMmaSharedBytes(heads, dim) <= kMaxSharedBytes && T >= 1 &&
         T <= 65535 && ratio >= 1 && Aligned16(q) && Aligned16(keys);
}

cudaError_t IndexerScoresMma(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                             const float* keys, const int32_t* key_offset, const int32_t* key_len,
                             int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                             float* scores, cudaStream_t stream) {
  if (n_keys <= 0 || T <= 0) return cudaSuccess;
  if (!IndexerMmaApplicable(q, keys, T, heads, dim, ratio)) return cudaErrorInvalidValue;
  const int64_t smem = IndexerMmaSharedBytes(heads, dim);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        IndexerMmaKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  // Enough blocks for two per SM; each then loops over its share of the row's tiles.
  const int64_t n_tiles = (n_keys + kTileKeys - 1) / kTileKeys;
  const int64_t want = (2 * int64_t{attention::MultiprocessorCount()} + T - 1) / T;
  const int64_t splits = want < n_tiles ? want : n_tiles;
  const dim3 grid(static_cast<unsigned>(splits), static_cast<unsigned>(T));
  IndexerMmaKernel<<<grid, kThreads, static_cast<size_t>(smem), stream>>>(
      q, w, heads, dim, keys, key_offset, key_len, n_keys, q_pos, ratio, scale, scores);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
