// Block tiling shared by the two wgmma expert GEMM kernels of RoutedExpertsBf16 (kernels_fp8.h):
// the shared-tile kernel (SS, k_moe_bf16.cu) and the register-A kernel (RS, k_moe_rs.cu). A block
// owns kBM weight rows of one expert x one item, all of K in stages of kBK values; the
// activations of a stage (and the SS kernel's bf16 weight tiles) are in the wgmma core-matrix
// layout (wgmma_bf16.cuh); the block's scale bytes are copied once, after the cp.async ring.
// Device code; included by those two .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/moe_bf16_internal.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels::moe_bf16 {

inline constexpr int kBM = 256;                   // weight rows per block
inline constexpr int kBK = 64;                    // K values per stage (two MXFP4 scale blocks)
inline constexpr int kKBlocks = kBK / 8;          // 8-value core-matrix columns per tile row
inline constexpr int kWRawBytes = kBM * kBK / 2;  // e2m1 bytes per stage

// Byte offset of the 16-byte chunk (row r, 8-value column block kb) of a tile in the wgmma
// core-matrix layout (wgmma_bf16.cuh): core matrix (r / 8, kb) at (r / 8 * kKBlocks + kb) *
// 128 bytes, its row r % 8 at + (r % 8) * 16.
__host__ __device__ constexpr uint32_t CoreOffset(int r, int kb) {
  return static_cast<uint32_t>(((r / 8) * kKBlocks + kb) * 128 + (r % 8) * 16);
}

// Block row v (0 <= v < n_rows) of a launch's weights as (part, row): up: [W1; W3], part 1 (W3)
// from part_rows = I on; down: W2, part 0 (part_rows = D).
struct PartRowOf {
  int64_t part_rows;
  __device__ __forceinline__ int64_t operator()(int64_t v, int* part) const {
    *part = v >= part_rows ? 1 : 0;
    return *part ? v - part_rows : v;
  }
};

// Thread tid's copies of the block's scale bytes ([kBM][kblocks] at shared address dst, all of
// K at once): row tid, when tid < kBM and block row v0 + tid < n_rows, from the scale bytes of
// matrix m0 (part 0) or m1 (part 1) of ep, in 4-byte cp.async copies (kblocks % 4 == 0 and every
// scale row 4-byte aligned; per-stage 4-byte copies were 7/8 wasted 32-byte sectors: ncu counted
// 44% excess sectors). The caller commits them with its first stage.
__device__ __forceinline__ void CopyBlockScales(const ExpertPointers& ep, int m0, int m1,
                                                const PartRowOf& row_of, int tid, int64_t v0,
                                                int64_t n_rows, int64_t kblocks, unsigned dst) {
  if (tid < kBM && v0 + tid < n_rows) {
    int part = 0;
    const int64_t row = row_of(v0 + tid, &part);
    const uint8_t* src = ep.scale[part ? m1 : m0] + row * kblocks;
    const unsigned row_dst = dst + tid * static_cast<unsigned>(kblocks);
    for (int64_t b = 0; b < kblocks; b += 4) fp8::CpAsync4(row_dst + b, src + b);
  }
}

// Stores a block's accumulators (wgmma_bf16.cuh layout): acc[h][4 j + e] is block row
// row_of(h, half) with half = (e & 3) >= 2 (the caller's fragment rows g / g + 8 of row tile h),
// token 8 j + 2 t4 + (e & 1) of the item, t4 = lane % 4: out[pair, v0 + row] with pair =
// act_rows[token]; rows >= n_rows and tokens >= count are not written.
template <int kBN, int kTiles, class RowOf>
__device__ __forceinline__ void StoreAccumulators(const float (&acc)[kTiles][kBN / 2], RowOf row_of,
                                                  int64_t v0, int64_t n_rows, int count,
                                                  const int32_t* act_rows, int t4, float* out) {
#pragma unroll
  for (int h = 0; h < kTiles; ++h) {
#pragma unroll
    for (int e = 0; e < kBN / 2; ++e) {
      const int64_t v = v0 + row_of(h, (e & 3) >= 2 ? 1 : 0);
      const int n = 8 * (e / 4) + 2 * t4 + (e & 1);
      if (v >= n_rows || n >= count) continue;
      out[int64_t{act_rows[n]} * n_rows + v] = acc[h][e];
    }
  }
}

// Launches an expert GEMM kernel on a grid of (row blocks of kBM over the launch's weight rows)
// x max_items, with tile_bytes of shared memory plus the block's scale bytes (kBM x K / 32).
template <class Kernel>
cudaError_t LaunchExpertGemm(Kernel kernel, int threads, int tile_bytes, const GemmArgs& a,
                             int64_t max_items, cudaStream_t stream) {
  const int64_t K = a.up ? a.D : a.I;
  const int smem = tile_bytes + static_cast<int>(kBM * (K / 32));
  const cudaError_t attr = launch::RaiseMaxDynamicSmem(kernel, smem);
  if (attr != cudaSuccess) return attr;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>((rows + kBM - 1) / kBM), static_cast<unsigned>(max_items));
  return pdl::Launch(kernel, grid, threads, static_cast<size_t>(smem), stream, a);
}

}  // namespace deepinfer::backend::cuda::kernels::moe_bf16
