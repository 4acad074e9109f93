// Sampling on the device: the greedy argmax of logits rows (model::Backend::ArgmaxRows).
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kArgmaxThreads = 1024;
constexpr int32_t kNoIndex = INT32_MAX;

// Whether (v, i) beats the best so far (bv, bi): larger value, or equal value and lower index.
// NaN compares false both ways, so a NaN value never wins: the reduction is then associative
// and commutative, and its result does not depend on the order the values were visited in.
__device__ __forceinline__ bool Beats(float v, int32_t i, float bv, int32_t bi) {
  return v > bv || (v == bv && i < bi);
}

__device__ __forceinline__ void Offer(float v, int32_t i, float& bv, int32_t& bi) {
  if (Beats(v, i, bv, bi)) {
    bv = v;
    bi = i;
  }
}

// (bv, bi) = the best of the warp's 32 pairs, in lane 0 (every lane must call).
__device__ __forceinline__ void WarpBest(float& bv, int32_t& bi) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    Offer(__shfl_down_sync(0xffffffffu, bv, offset), __shfl_down_sync(0xffffffffu, bi, offset), bv,
          bi);
  }
}

// One block per row: every thread scans a strided share of the row (float4 loads when the
// row is 16-byte aligned), then the block reduces (value, index) pairs with Beats.
// out[row] = 0 when x[row, 0] is NaN or every value is NaN (the sequential scan's answer).
__global__ void __launch_bounds__(kArgmaxThreads)
    ArgmaxRowsKernel(const float* x, int64_t n, int64_t ld, bool vector_loads, int32_t* out) {
  pdl::WaitThenAllowNext();
  const float* row = x + blockIdx.x * ld;
  float bv = -__int_as_float(0x7f800000);  // -inf: an all -inf row gives its lowest index
  int32_t bi = kNoIndex;
  int64_t scalar_from = 0;
  if (vector_loads) {
    const int64_t n4 = n / 4;
    const float4* row4 = reinterpret_cast<const float4*>(row);
    for (int64_t j = threadIdx.x; j < n4; j += kArgmaxThreads) {
      const float4 v = __ldg(row4 + j);
      const int32_t i = static_cast<int32_t>(4 * j);
      Offer(v.x, i, bv, bi);
      Offer(v.y, i + 1, bv, bi);
      Offer(v.z, i + 2, bv, bi);
      Offer(v.w, i + 3, bv, bi);
    }
    scalar_from = 4 * n4;
  }
  for (int64_t j = scalar_from + threadIdx.x; j < n; j += kArgmaxThreads) {
    Offer(__ldg(row + j), static_cast<int32_t>(j), bv, bi);
  }
  WarpBest(bv, bi);
  __shared__ float warp_v[kArgmaxThreads / 32];
  __shared__ int32_t warp_i[kArgmaxThreads / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    warp_v[warp] = bv;
    warp_i[warp] = bi;
  }
  __syncthreads();
  if (warp != 0) return;
  bv = warp_v[lane];
  bi = warp_i[lane];
  WarpBest(bv, bi);
  if (lane == 0) {
    const bool first_is_nan = !(row[0] == row[0]);
    out[blockIdx.x] = first_is_nan || bi == kNoIndex ? 0 : bi;
  }
}

}  // namespace

cudaError_t ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out,
                       cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  if (rows > INT32_MAX || n > INT32_MAX) return cudaErrorInvalidValue;
  const bool vector_loads = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ld % 4 == 0;
  pdl::Launch(ArgmaxRowsKernel, static_cast<unsigned>(rows), kArgmaxThreads, 0, stream, x, n, ld,
              vector_loads, out);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
