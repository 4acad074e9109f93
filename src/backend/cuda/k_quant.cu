// QAT fake-quantisation (bit-exact with backend/cpu/numerics.cc), weight dequantisation
// from the stored formats (model.md §4.3) to fp32 and to exact bf16, the exact 3-term bf16
// split of activations, the FP8-mode activations as exact bf16
// (QuantizeFp8ActivationsBf16) and GatherRows' weight rows.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::FakeQuantKind;
using model::WeightFormat;

constexpr int kThreads = 256;

// The fake-quantised value of v in a block whose largest magnitude is amax (the CPU
// emulation's steps for each FakeQuantKind).
__device__ __forceinline__ float FakeQuantValue(float v, float amax, int kind) {
  if (kind == static_cast<int>(FakeQuantKind::kFp8Block32Pow2)) {
    const float scale = Fp8Pow2Scale(amax);
    return RoundToE4m3(ClampF(v / scale, -448.0f, 448.0f)) * scale;
  }
  if (kind == static_cast<int>(FakeQuantKind::kFp4Block16E4m3)) {
    const float floor_amax = 6.0f * 0.001953125f;  // 6 * 2^-9
    const float scale = RoundToE4m3(MaxF(amax, floor_amax) / 6.0f);
    return RoundToE2m1(ClampF(v / scale, -6.0f, 6.0f)) * scale;
  }
  const float inv6 = 1.0f / 6.0f;
  const float floor_amax = 6.0f * ldexpf(1.0f, -126);
  const float scale = Pow2Ceil(MaxF(amax, floor_amax) * inv6);
  return RoundToE2m1(ClampF(v / scale, -6.0f, 6.0f)) * scale;
}

// Lanes per quantisation block: one value per lane, kBlock (16 or 32) consecutive lanes per
// block, so a warp loads 32 consecutive values (coalesced) and the block's amax is a
// shuffle tree over kBlock lanes (max is order-independent: bit-exact with the CPU's loop).
// Each lane then performs the CPU emulation's steps on its own value. The loop trip count
// is warp-uniform (every lane takes part in the shuffles).
template <int kBlock>
__global__ void FakeQuantKernel(float* x, int64_t rows, int64_t n, int64_t ld, int kind) {
  pdl::WaitThenAllowNext();
  constexpr int kBlocksPerWarp = 32 / kBlock;
  const int lane = threadIdx.x & 31;
  const int64_t blocks_per_row = n / kBlock;
  const int64_t total = rows * blocks_per_row;
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  for (int64_t first = ((blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5) * kBlocksPerWarp;
       first < total; first += warps * kBlocksPerWarp) {
    const int64_t b = first + lane / kBlock;
    const bool live = b < total;
    float* p = x + (b / blocks_per_row) * ld + (b % blocks_per_row) * kBlock + lane % kBlock;
    const float v = live ? *p : 0.0f;
    float amax = MaxF(0.0f, fabsf(v));  // as the CPU loop from 0: a NaN never becomes amax
#pragma unroll
    for (int offset = kBlock / 2; offset > 0; offset >>= 1) {
      amax = MaxF(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    }
    const float out = FakeQuantValue(v, amax, kind);
    if (live) *p = out;
  }
}

// RopeKernel (forward) then FakeQuantKernel<kBlock> on x [rows, heads, head_dim] (head_dim %
// 32 == 0, offset even, the rotated pairs inside the head): one warp per 32 values of a head;
// a lane rotates its value with its pair partner's (lane ^ 1, read before any write) by the
// shared RotatePair, then the block's amax and FakeQuantValue as FakeQuantKernel. The bits of
// the two kernels.
template <int kBlock>
__global__ void RopeFakeQuantKernel(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                                    int64_t offset, int64_t n_pairs, const int32_t* pos,
                                    const float* inv_freq, int kind) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x & 31;
  const int64_t chunks_per_head = head_dim / 32, total = rows * heads * chunks_per_head;
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  for (int64_t chunk = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; chunk < total;
       chunk += warps) {  // warp-uniform trip count
    const int64_t rh = chunk / chunks_per_head, col = (chunk % chunks_per_head) * 32 + lane;
    float* p = x + rh * head_dim + col;
    float v = *p;
    const float partner = __shfl_xor_sync(0xffffffffu, v, 1);
    const int64_t rel = col - offset;
    if (rel >= 0 && rel < 2 * n_pairs) {
      const int64_t pair = rel / 2;
      const float angle = static_cast<float>(pos[rh / heads]) * inv_freq[pair];
      const float c = cosf(angle), s = sinf(angle);
      float ye, yo;
      if (rel % 2 == 0) {
        RotatePair(v, partner, c, s, &ye, &yo);
        v = ye;
      } else {
        RotatePair(partner, v, c, s, &ye, &yo);
        v = yo;
      }
    }
    float amax = MaxF(0.0f, fabsf(v));
#pragma unroll
    for (int o = kBlock / 2; o > 0; o >>= 1)
      amax = MaxF(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    *p = FakeQuantValue(v, amax, kind);
  }
}

__device__ __forceinline__ float DequantElement(const DeviceWeight& w, int64_t r, int64_t k) {
  const int64_t K = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      return static_cast<const float*>(w.data)[r * K + k];
    case WeightFormat::kBF16:
      return Bf16ToF32(static_cast<const uint16_t*>(w.data)[r * K + k]);
    case WeightFormat::kFp8Block32: {
      const int64_t scale_cols = (K + 31) / 32;
      const uint8_t s = w.scale[(r / 32) * scale_cols + k / 32];
      return E4m3ToF32(static_cast<const uint8_t*>(w.data)[r * K + k]) * E8m0ToF32(s);
    }
    case WeightFormat::kFp8Row32: {
      const int64_t scale_cols = (K + 31) / 32;
      const uint8_t s = w.scale[r * scale_cols + k / 32];
      return E4m3ToF32(static_cast<const uint8_t*>(w.data)[r * K + k]) * E8m0ToF32(s);
    }
    case WeightFormat::kMxFp4: {
      const uint8_t byte = static_cast<const uint8_t*>(w.data)[r * (K / 2) + k / 2];
      const uint8_t nibble = (k & 1) ? (byte >> 4) : (byte & 0xF);
      return E2m1ToF32(nibble) * E8m0ToF32(w.scale[r * (K / 32) + k / 32]);
    }
  }
  return __int_as_float(0x7fc00000);  // unknown format: NaN, never a plausible value
}

__global__ void DequantRowsKernel(DeviceWeight w, int64_t row0, int64_t n, float* out) {
  pdl::WaitThenAllowNext();
  const int64_t K = w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * K;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = DequantElement(w, row0 + i / K, i % K);
  }
}

// bf16 bits of a dequantised weight (exact: e4m3 / e2m1 values times a power of two, and
// bf16 itself, fit bf16; the F32 format is not routed here).
__global__ void DequantRowsBf16Kernel(DeviceWeight w, int64_t row0, int64_t n, uint16_t* out) {
  pdl::WaitThenAllowNext();
  const int64_t K = w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * K;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(DequantElement(w, row0 + i / K, i % K)));
  }
}

// x = hi + mid + lo to ~2^-25 relative (fp32 level): hi = bf16(x), mid = bf16(x - hi),
// lo = bf16(x - hi - mid); each residual is exact in fp32. [T, K] each, ld K.
__global__ void SplitBf16Kernel(const float* x, int64_t T, int64_t K, int64_t ldx, uint16_t* hi,
                                uint16_t* mid, uint16_t* lo) {
  pdl::WaitThenAllowNext();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * K;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float v = x[(i / K) * ldx + i % K];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    const float r1 = v - __bfloat162float(h);
    const __nv_bfloat16 m = __float2bfloat16_rn(r1);
    hi[i] = __bfloat16_as_ushort(h);
    if (mid == nullptr) continue;  // one term: x rounded to bf16
    mid[i] = __bfloat16_as_ushort(m);
    lo[i] = __bfloat16_as_ushort(__float2bfloat16_rn(r1 - __bfloat162float(m)));
  }
}

// One warp per 32-value block (grid-stride), lane l holding value l: the bf16 bits of the
// block's kFp8Block32Pow2 value, decoded from the e4m3 byte QuantizeLaneE4m3 gives the FP8
// path (e4m3 value times a power of two: exact in bf16).
__global__ void QuantizeFp8Bf16Kernel(const float* x, int64_t rows, int64_t K, int64_t ldx,
                                      uint16_t* out) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t blocks_per_row = K / 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
       b < rows * blocks_per_row; b += warps) {
    const int64_t row = b / blocks_per_row, col = (b % blocks_per_row) * 32 + lane;
    float scale;
    const uint8_t byte = fp8::QuantizeLaneE4m3(x[row * ldx + col], &scale);
    out[row * K + col] = __bfloat16_as_ushort(__float2bfloat16_rn(E4m3ToF32(byte) * scale));
  }
}

__global__ void GatherWeightRowsKernel(DeviceWeight w, const int64_t* ids, int64_t n, float* out) {
  pdl::WaitThenAllowNext();
  const int64_t K = w.cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * K;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = DequantElement(w, ids[i / K], i % K);
  }
}

}  // namespace

cudaError_t FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, FakeQuantKind kind,
                      cudaStream_t stream) {
  const int block = model::FakeQuantBlock(kind);
  const int64_t total = rows * (n / block);
  if (total <= 0) return cudaSuccess;
  const unsigned grid = GridFor(total * block, kThreads);  // one lane per value
  if (block == 16) {
    pdl::Launch(FakeQuantKernel<16>, grid, kThreads, 0, stream, x, rows, n, ld,
                static_cast<int>(kind));
  } else {
    pdl::Launch(FakeQuantKernel<32>, grid, kThreads, 0, stream, x, rows, n, ld,
                static_cast<int>(kind));
  }
  return cudaGetLastError();
}

bool RopeFakeQuantFusable(int64_t head_dim, int64_t offset, int64_t n_pairs) {
  return head_dim > 0 && head_dim % 32 == 0 && offset >= 0 && offset % 2 == 0 && n_pairs >= 0 &&
         offset + 2 * n_pairs <= head_dim;
}

cudaError_t RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t offset,
                          int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                          FakeQuantKind kind, cudaStream_t stream) {
  if (!RopeFakeQuantFusable(head_dim, offset, n_pairs)) return cudaErrorInvalidValue;
  const int64_t total = rows * heads * head_dim;  // one lane per value
  if (total <= 0) return cudaSuccess;
  const unsigned grid = GridFor(total, kThreads);
  if (kind == FakeQuantKind::kFp4Block16E4m3) {
    pdl::Launch(RopeFakeQuantKernel<16>, grid, kThreads, 0, stream, x, rows, heads, head_dim,
                offset, n_pairs, pos, inv_freq, static_cast<int>(kind));
  } else {
    pdl::Launch(RopeFakeQuantKernel<32>, grid, kThreads, 0, stream, x, rows, heads, head_dim,
                offset, n_pairs, pos, inv_freq, static_cast<int>(kind));
  }
  return cudaGetLastError();
}

cudaError_t DequantRows(const DeviceWeight& w, int64_t row0, int64_t n, float* out,
                        cudaStream_t stream) {
  if (n * w.cols <= 0) return cudaSuccess;
  pdl::Launch(DequantRowsKernel, GridFor(n * w.cols, kThreads), kThreads, 0, stream, w, row0, n,
              out);
  return cudaGetLastError();
}

cudaError_t DequantRowsBf16(const DeviceWeight& w, int64_t row0, int64_t n, uint16_t* out,
                            cudaStream_t stream) {
  if (w.format == WeightFormat::kF32) return cudaErrorInvalidValue;  // not exact in bf16
  if (n * w.cols <= 0) return cudaSuccess;
  pdl::Launch(DequantRowsBf16Kernel, GridFor(n * w.cols, kThreads), kThreads, 0, stream, w, row0, n,
              out);
  return cudaGetLastError();
}

cudaError_t SplitBf16(const float* x, int64_t T, int64_t K, int64_t ldx, uint16_t* hi,
                      uint16_t* mid, uint16_t* lo, cudaStream_t stream) {
  if (T * K <= 0) return cudaSuccess;
  pdl::Launch(SplitBf16Kernel, GridFor(T * K, kThreads), kThreads, 0, stream, x, T, K, ldx, hi, mid,
              lo);
  return cudaGetLastError();
}

cudaError_t QuantizeFp8ActivationsBf16(const float* x, int64_t rows, int64_t K, int64_t ldx,
                                       uint16_t* out, cudaStream_t stream) {
  if (rows <= 0 || K <= 0) return cudaSuccess;
  if (K % 32 != 0) return cudaErrorInvalidValue;
  static_assert(kThreads == 256, "fp8::WarpPerBlockGrid assumes 256-thread blocks");
  pdl::Launch(QuantizeFp8Bf16Kernel, fp8::WarpPerBlockGrid(rows * (K / 32)), kThreads, 0, stream, x,
              rows, K, ldx, out);
  return cudaGetLastError();
}

cudaError_t GatherWeightRows(const DeviceWeight& w, const int64_t* ids, int64_t n, float* out,
                             cudaStream_t stream) {
  if (n * w.cols <= 0) return cudaSuccess;
  pdl::Launch(GatherWeightRowsKernel, GridFor(n * w.cols, kThreads), kThreads, 0, stream, w, ids, n,
              out);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
