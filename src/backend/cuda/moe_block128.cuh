// Internals shared by the two GEMMs of RoutedExpertsBlock128 (kernels_moe_block128.h): the
// e4m3-copy kernel (k_moe_block128.cu) and the register-A kernel over the MXFP4 bytes
// (k_moe_block128_rs.cu): tile constants and layout, the per-item activation packing, the
// launch arguments and the output store. Device code; include from those .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_moe_block128.h"
#include "backend/cuda/moe_groups.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels::moe_block128 {

inline constexpr int kBM = 128;           // weight rows per GEMM block (one scale row block)
inline constexpr int kBK = 128;           // K values per stage (one scale block)
inline constexpr int kChunks = kBK / 16;  // 16-byte chunks per tile row
inline constexpr int kWTileBytes = kBM * kBK;

// A work item of the grouping (moe_groups::Item's layout, static_assert'ed in
// k_moe_block128.cu; moe_groups.cuh's types have internal linkage, these are shared by two
// files).
struct GemmItem {
  int32_t expert, start, count, pad;
};

// One GEMM launch: out[pair, v] = sum over K blocks kb of wscale(v, kb) * ascale(row, kb) *
// sum_{k in kb} act[row, k] * W[v, k], for the rows v of [w1; w3] (up: act = the quantised x,
// row = pair / k, out = gu [P, 2I]) or of w2 (down: act = the quantised h, row = pair, out [P, D]);
// the activations and scales come packed per item (PackItemsKernel).
struct GemmArgs {
  const ExpertBlock128Pointers* table;  // the e4m3 copies (ExpertGemmBlock128Kernel)
  const ExpertPointers* mxfp4;          // the MXFP4 experts (k_moe_block128_rs.cu)
  bool up;
  int64_t D, I;
  int64_t w_scale_ld;     // Block128ScaleLd(K / 128) of the copies' scales
  const uint8_t* packed;  // [max_items][K / 128] packed stages
  const int32_t* order;
  const GemmItem* items;
  const int32_t* n_items;
  float* out;  // [P, n_rows]
  // The register-A kernel's row scales (ExpertRowScaleMax of a.mxfp4).
  const uint8_t* row_smax;
};

namespace {

using Item = GemmItem;

// Byte offset of the 16-byte chunk (row r, chunk c) of a tile in the no-swizzle core-matrix
// layout: core matrix (r / 8, c) at (r / 8 * kChunks + c) * 128, its row r % 8 at + (r % 8) * 16.
// A wgmma k32 step s reads chunks 2 s and 2 s + 1: LBO 128, SBO kChunks * 128.
__host__ __device__ constexpr uint32_t TileOffset(int r, int c) {
  return static_cast<uint32_t>(((r / 8) * kChunks + c) * 128 + (r % 8) * 16);
}

// The register-A kernel's order of a 32-value block (words w0 .. w7 of 4 values, in lo = w0..w3,
// hi = w4..w7): lo <- w0 w2 w4 w6, hi <- w1 w3 w5 w7. MMA k-index 4 t + i then holds value
// 8 t + i and 16 + 4 t + i value 8 t + 4 + i (t, i < 4): the 8 values of fragment lane t are the
// 8 consecutive e2m1 nibbles of one 32-bit word of an MXFP4 row.
__device__ __forceinline__ void PermutedWords32(uint4* lo, uint4* hi) {
  const uint4 a = *lo, b = *hi;
  *lo = make_uint4(a.x, a.z, b.x, b.z);
  *hi = make_uint4(a.y, a.w, b.y, b.w);
}

// One packed activation stage of an item of <= kBN tokens (PackItemsKernel): the X tile (kBN
// rows x 128 e4m3 in the tile layout), then the kBN fp32 token scales.
// Bytes of one packed stage of an item of bn tokens: the X tile, then the bn scales.
constexpr int PackStageBytes(int bn) { return bn * kBK + bn * 4; }
template <int kBN>
struct Pack {
  static_assert(kBN == 8 || kBN == 64 || kBN == 96 || kBN == 128,
                "wgmma m64nBNk32 shapes instantiated");
  static constexpr int kXTileBytes = kBN * kBK;
  static constexpr int kStageBytes = PackStageBytes(kBN);
};

constexpr int kConsumerWarps = 8;                        // 2 warpgroups
constexpr int kGemmThreads = 32 * (kConsumerWarps + 1);  // + the producer warp
constexpr int kPackThreads = 256;

// The k order of a packed stage: kTile, the values in order (the e4m3 copies' SS GEMM);
// kRegister, within each 32-value block the order the register-A kernel's fragments want
// (PermutedWords32); kStream, the decode stream kernel's order (k_moe_block128_stream.cu): its
// lane t holds 32-value block t of its rows and feeds word j of that block to k32 step j, so MMA
// k-index 4 t + i of step j holds stage value 32 t + 8 j + i and 16 + 4 t + i value 32 t + 8 j +
// 4 + i (t, i < 4); in 32-bit words W0 .. W31 of a token's stage, chunk 2 j of the tile = W(2 j),
// W(8 + 2 j), W(16 + 2 j), W(24 + 2 j) and chunk 2 j + 1 the next word of each.
enum class PackOrder { kTile, kRegister, kStream };

// The packed stages of every item: stage st of item i (at (i * n_stages + st) * kPackStageBytes)
// holds its tokens' 128 values st * 128 .. in the no-swizzle core-matrix tile layout (token n =
// tile row n; rows from the item's count on are zeros) in kOrder, then their scales (zeros past
// count), so that the GEMM brings each stage in with one bulk copy. Grid (n_stages, max_items);
// act row of token n = order[start + n] / act_div.
template <int kBN, PackOrder kOrder>
__global__ void __launch_bounds__(kPackThreads)
    PackItemsKernel(const uint8_t* act, const float* act_scale, int64_t scale_ld, int64_t K,
                    int64_t act_div, const int32_t* order, const Item* items,
                    const int32_t* n_items, uint8_t* packed) {
  pdl::WaitThenAllowNext();
  using S = Pack<kBN>;
  if (static_cast<int32_t>(blockIdx.y) >= *n_items) return;
  const Item item = items[blockIdx.y];
  const int st = blockIdx.x;
  const int64_t n_stages = K / kBK;
  uint8_t* dst = packed + (int64_t{blockIdx.y} * n_stages + st) * S::kStageBytes;
  if constexpr (kOrder == PackOrder::kStream) {
    // Thread item c: token n = c / 8, chunk c % 8.
    for (int c = threadIdx.x; c < kBN * kChunks; c += kPackThreads) {
      const int n = c / kChunks, chunk = c % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (n < item.count) {
        const int64_t row = order[item.start + n] / act_div;
        const auto* words = reinterpret_cast<const uint32_t*>(act + row * K + st * kBK);
        // Word `chunk` of each 32-value block (block t starts at word 8 t).
        v = make_uint4(words[chunk], words[chunk + 8], words[chunk + 16], words[chunk + 24]);
      }
      *reinterpret_cast<uint4*>(dst + TileOffset(n, chunk)) = v;
    }
  } else {
    // Thread item c: token n = c / 4, 32-value block b = c % 4 (chunks 2 b and 2 b + 1).
    for (int c = threadIdx.x; c < kBN * 4; c += kPackThreads) {
      const int n = c / 4, b = c % 4;
      uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
      if (n < item.count) {
        const int64_t row = order[item.start + n] / act_div;
        const auto* src = reinterpret_cast<const uint4*>(act + row * K + st * kBK + b * 32);
        lo = src[0];
        hi = src[1];
      }
      if constexpr (kOrder == PackOrder::kRegister) PermutedWords32(&lo, &hi);
      *reinterpret_cast<uint4*>(dst + TileOffset(n, 2 * b)) = lo;
      *reinterpret_cast<uint4*>(dst + TileOffset(n, 2 * b + 1)) = hi;
    }
  }
  for (int n = threadIdx.x; n < kBN; n += kPackThreads) {
    const float sc =
        n < item.count ? act_scale[st * scale_ld + order[item.start + n] / act_div] : 0.0f;
    reinterpret_cast<float*>(dst + S::kXTileBytes)[n] = sc;
  }
}

// Packs the activation stages of a launch's items (grid K / 128 x max_items).
template <int kBN, PackOrder kOrder>
cudaError_t LaunchPack(const GemmArgs& a, const uint8_t* act, const float* act_scale,
                       int64_t scale_ld, int64_t act_div, int64_t max_items, uint8_t* packed,
                       cudaStream_t stream) {
  const int64_t K = a.up ? a.D : a.I;
  return pdl::Launch(PackItemsKernel<kBN, kOrder>,
                     dim3(static_cast<unsigned>(K / kBK), static_cast<unsigned>(max_items)),
                     kPackThreads, 0, stream, act, act_scale, scale_ld, K, act_div, a.order,
                     a.items, a.n_items, packed);
}

// What a GEMM block (blockIdx.x: 128 weight rows, blockIdx.y: an item) works on. The block's rows
// lie in one matrix (I % 128 == 0): up: w1 below I, w3 from I; down: w2.
struct BlockJob {
  Item item;
  int64_t n_rows, K;  // weight rows of the launch ([w1; w3] or w2), values per row
  int n_stages;       // K / 128
  int64_t v0;         // first row of the block in the launch's rows
  int m;              // the matrix: 0 (w1), 1 (w2) or 2 (w3)
  int64_t row0;       // first row of the block in matrix m

  __device__ static BlockJob Of(const GemmArgs& a) {
    BlockJob j;
    j.item = a.items[blockIdx.y];
    j.n_rows = a.up ? 2 * a.I : a.D;
    j.K = a.up ? a.D : a.I;
    j.n_stages = static_cast<int>(j.K / kBK);
    j.v0 = int64_t{blockIdx.x} * kBM;
    const bool second = a.up && j.v0 >= a.I;
    j.m = a.up ? (second ? 2 : 0) : 1;
    j.row0 = second ? j.v0 - a.I : j.v0;
    return j;
  }
};

// A ring's barriers at shared address `bars`: full(slot), then empty(slot).
template <int kStages>
struct Barriers {
  unsigned bars;
  __device__ unsigned full(int slot) const { return bars + 8u * static_cast<unsigned>(slot); }
  __device__ unsigned empty(int slot) const {
    return bars + 8u * static_cast<unsigned>(kStages + slot);
  }
  // Thread 0: full barriers expecting `full_arrivals`, empty ones one arrival per consumer warp.
  __device__ void Init(unsigned full_arrivals) const {
    for (int slot = 0; slot < kStages; ++slot) {
      bulk::BarrierInit(full(slot), full_arrivals);
      bulk::BarrierInit(empty(slot), kConsumerWarps);
    }
    bulk::FenceBarrierInit();
  }
};

// The fp32 promotion of one stage: acc += part * weight scale (ws_lo for accumulator row g,
// ws_hi for g + 8) * token scale (xs: the stage's kBN token scales; the wgmma accumulator layout
// of StoreOutputs, t4 = lane % 4).
template <int kBN>
__device__ __forceinline__ void Promote(const float (&part)[kBN / 2], const float* xs, int t4,
                                        float ws_lo, float ws_hi, float (&acc)[kBN / 2]) {
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) {
    const float2 sc = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * t4);
    acc[4 * j + 0] = fmaf(part[4 * j + 0], ws_lo * sc.x, acc[4 * j + 0]);
    acc[4 * j + 1] = fmaf(part[4 * j + 1], ws_lo * sc.y, acc[4 * j + 1]);
    acc[4 * j + 2] = fmaf(part[4 * j + 2], ws_hi * sc.x, acc[4 * j + 2]);
    acc[4 * j + 3] = fmaf(part[4 * j + 3], ws_hi * sc.y, acc[4 * j + 3]);
  }
}

// Stores the accumulators of a consumer warpgroup (wgmma layout): element 4 j + e is block row
// 64 wg + 16 (warp % 4) + g (+ 8 for e >= 2), token 8 j + 2 t4 (+ 1 for odd e); out[pair, v0 +
// row] for rows below n_rows and tokens below the item's count.
template <int kBN>
__device__ __forceinline__ void StoreOutputs(const float (&acc)[kBN / 2], const GemmArgs& a,
                                             const Item& item, int64_t v0, int64_t n_rows,
                                             int tid) {
  const int32_t* act_rows = a.order + item.start;
  const int wg = tid / 128, warp = tid / 32, g = (tid % 32) / 4, t4 = tid % 4;
#pragma unroll
  for (int e = 0; e < kBN / 2; ++e) {
    const int64_t v = v0 + 64 * wg + 16 * (warp % 4) + g + ((e & 3) >= 2 ? 8 : 0);
    const int n = 8 * (e / 4) + 2 * t4 + (e & 1);
    if (v < n_rows && n < item.count) a.out[int64_t{act_rows[n]} * n_rows + v] = acc[e];
  }
}

}  // namespace

// The register-A GEMM over the MXFP4 experts a.mxfp4 (k_moe_block128_rs.cu) for items of bn
// pairs (64, 96 or 128), on activations packed in PackOrder::kRegister.
cudaError_t LaunchMxfp4Gemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream);

// The decode GEMM over the MXFP4 experts a.mxfp4 (k_moe_block128_stream.cu) for items of 8 pairs,
// on activations packed in PackOrder::kStream.
cudaError_t LaunchMxfp4StreamGemm(const GemmArgs& a, int64_t max_items, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels::moe_block128
