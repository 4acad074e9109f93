// Shared device code of the tensor-core lightning indexer (k_indexer_mma.cu: the one-row
// and paged kernels; k_indexer_group.cu: the prefill row-group kernel): tile shape, the
// exact bf16 three-term split, the per-k-step MMA products, the head sum and the
// visibility rule, so that every (row, key) score takes the same operations in every
// kernel (kernels_indexer.h "Batch invariance"). Include from .cu files only.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_indexer.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels::indexer_mma {

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

// The IndexerSums::kTensorCore k-loop (q and the key tile exactly bf16: one term each): every
// k-step's 4 MMAs accumulate straight into acc, one tensor-core chain over all of D per score.
__device__ __forceinline__ void ChainKSteps(float (&acc)[4][4], const uint16_t* a_base,
                                            const uint16_t* b_base, int64_t rs, int ksteps) {
#pragma unroll 2
  for (int ks = 0; ks < ksteps; ++ks) {
    const int k0 = ks * 16;
    uint32_t a[4], b[2][4];
    LdMatrixX4(a, a_base + k0);
#pragma unroll
    for (int p = 0; p < 2; ++p) LdMatrixX4(b[p], b_base + 16 * p * rs + k0);
#pragma unroll
    for (int n = 0; n < 4; ++n)
      MmaBf16(acc[n], a, b[n >> 1][2 * (n & 1)], b[n >> 1][2 * (n & 1) + 1]);
  }
}

// Step 3 and the first half of step 4 for one m-tile: the warp's 4 n-tiles (keys n_base ..
// n_base + 31 of the key term arrays k_terms_at, [kTerms][kTileKeys][rs]) x the 16 heads whose
// q term rows start at q_rows ([kTerms][heads][rs], the m-tile's first head), head-summed with
// weights w0 / w1 (the lane's heads g, g + 8) into part[key] (the m-tile's partials shifted to
// the warp's first key). tensor_sums: IndexerSums::kTensorCore (kernels_indexer.h).
inline __device__ void ScoreTile(const uint16_t* q_rows, int64_t heads, const uint16_t* k_terms_at,
                                 int64_t dim, int n_base, int q_terms, int k_terms,
                                 bool tensor_sums, float w0, float w1, float scale, float* part) {
  const int lane = threadIdx.x & 31;
  const int mat = lane >> 3, mrow = lane & 7;
  const int64_t rs = TermStride(dim);
  const int ksteps = static_cast<int>(dim / 16);
  const uint16_t* a_base = q_rows + (mrow + 8 * (mat & 1)) * rs + 8 * (mat >> 1);
  const uint16_t* b_base = k_terms_at + (n_base + mrow + 8 * (mat >> 1)) * rs + 8 * (mat & 1);
  float acc[4][4] = {};
  if (tensor_sums && q_terms == 1 && k_terms == 1) {  // warp-uniform
    ChainKSteps(acc, a_base, b_base, rs, ksteps);
  } else {
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
  }
  StoreHeadSums(acc, w0, w1, scale, part);
}

// ScoreTile for m-tile mt of the one-row kernel's staging, into s.part[mt][key].
inline __device__ void ScoreMTile(const Smem& s, int64_t heads, int64_t dim, int mt, int n_base,
                                  int q_terms, int k_terms, bool tensor_sums, float scale) {
  const int g = (threadIdx.x & 31) >> 2;
  ScoreTile(s.q + mt * 16 * TermStride(dim), heads, s.k, dim, n_base, q_terms, k_terms, tensor_sums,
            s.w[mt * 16 + g], s.w[mt * 16 + g + 8], scale, s.part + mt * kTileKeys + n_base);
}

// Row t's visible key count: min(key_len[t], n_keys, (q_pos[t] + 1) / ratio).
__device__ __forceinline__ int64_t VisibleKeys(const int32_t* key_len, int64_t n_keys,
                                               const int32_t* q_pos, int64_t ratio, int64_t t) {
  const int64_t own = key_len != nullptr && key_len[t] < n_keys ? key_len[t] : n_keys;
  const int64_t by_pos = (static_cast<int64_t>(q_pos[t]) + 1) / ratio;
  return by_pos < own ? by_pos : own;
}

// The row-group kernel over T rows in groups of group_rows (2 .. GroupRows; shape checked
// by the caller, n_keys >= 1): k_indexer_group.cu.
cudaError_t LaunchGroupKernel(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                              const float* keys, const int32_t* key_offset, const int32_t* key_len,
                              int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                              float* scores, int64_t group_rows, cudaStream_t stream,
                              bool tensor_sums);

}  // namespace deepinfer::backend::cuda::kernels::indexer_mma
