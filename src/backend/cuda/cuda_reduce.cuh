// Warp and block reductions / scans for kernels whose blockDim.x is a multiple of 32
// (at most 1024). Every thread of the block must call the block-level helpers.
#pragma once

#include <cstdint>

namespace deepinfer::backend::cuda {

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block, returned to every thread. `scratch` holds >= 33 floats of shared
// memory; the call ends with a barrier so scratch may be reused right after.
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < n_warps ? scratch[lane] : 0.0f;
    s = WarpSum(s);
    if (lane == 0) scratch[32] = s;
  }
  __syncthreads();
  const float total = scratch[32];
  __syncthreads();
  return total;
}

// Exclusive prefix count of `flag` over the block in thread order; *total gets the block's
// count. `scratch` holds >= 33 ints of shared memory. Ends with a barrier.
__device__ __forceinline__ int BlockExclusiveCount(bool flag, int* total, int* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  const unsigned ballot = __ballot_sync(0xffffffffu, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) scratch[warp] = __popc(ballot);
  __syncthreads();
  if (threadIdx.x == 0) {
    int running = 0;
    for (int w = 0; w < n_warps; ++w) {
      const int c = scratch[w];
      scratch[w] = running;
      running += c;
    }
    scratch[32] = running;
  }
  __syncthreads();
  const int result = scratch[warp] + in_warp;
  *total = scratch[32];
  __syncthreads();
  return result;
}

// Grid size for a grid-stride loop over `n` items with `threads` per block.
inline unsigned GridFor(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  const int64_t cap = int64_t{132} * 32;  // enough blocks to fill an H200 many times over
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

}  // namespace deepinfer::backend::cuda
