// Fused dequantise + GEMV for Linear with few token rows (decode): one warp per output row
// reads the stored weight row once (16-byte loads: 16 e4m3, 32 e2m1, 8 bf16 or 4 fp32
// values), dequantises in registers and accumulates up to kMaxGemvTokens dot products.
// fp32 accumulation; the summation order differs from SGEMM (fp32 rounding only).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;

constexpr int kGemvThreads = 256;  // 8 warps = 8 output rows per block
constexpr int kMaxT = static_cast<int>(kMaxGemvTokens);

// Values of one 16-byte chunk for each format.
__host__ __device__ constexpr int ChunkValues(WeightFormat f) {
  return f == WeightFormat::kMxFp4  ? 32
         : f == WeightFormat::kF32  ? 4
         : f == WeightFormat::kBF16 ? 8
                                    : 16;
}

__device__ __forceinline__ float Fp8ToFloat(uint8_t b) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float Fp4ToFloat(uint32_t nibble) {
  const uint32_t code = nibble & 0x7;
  const float v = code < 4 ? 0.5f * static_cast<float>(code)
                           : (code == 7 ? 6.0f : static_cast<float>(code) - 2.0f);
  return (nibble & 0x8) ? -v : v;
}

// Dequantises the chunk `c` (16 stored bytes) of weight row `r` into v[0 .. ChunkValues).
template <WeightFormat kFormat>
__device__ __forceinline__ void LoadChunk(const DeviceWeight& w, int64_t r, int64_t c, float* v) {
  const int64_t K = w.cols;
  if constexpr (kFormat == WeightFormat::kF32) {
    const float4 q = reinterpret_cast<const float4*>(static_cast<const float*>(w.data) + r * K)[c];
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else if constexpr (kFormat == WeightFormat::kBF16) {
    const uint4 q = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(w.data) + r * K)[c];
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
    }
  } else if constexpr (kFormat == WeightFormat::kMxFp4) {
    const uint4 q =
        reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + r * (K / 2))[c];
    const float s = E8m0ToF32(w.scale[r * (K / 32) + c]);  // a chunk is one 32-value block
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) v[8 * i + j] = Fp4ToFloat(words[i] >> (4 * j)) * s;
    }
  } else {  // kFp8Block32 / kFp8Row32: a chunk is half of one 32-column scale block
    const uint4 q = reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(w.data) + r * K)[c];
    const int64_t scale_cols = (K + 31) / 32;
    const int64_t scale_row = kFormat == WeightFormat::kFp8Block32 ? r / 32 : r;
    const float s = E8m0ToF32(w.scale[scale_row * scale_cols + (c * 16) / 32]);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        v[4 * i + j] = Fp8ToFloat(static_cast<uint8_t>(words[i] >> (8 * j))) * s;
      }
    }
  }
}

template <WeightFormat kFormat>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(DeviceWeight w, int64_t row0, int64_t n_rows, const float* x, int64_t T, int64_t ldx,
               float* y, int64_t ldy, bool accumulate) {
  constexpr int kValues = ChunkValues(kFormat);
  const int lane = threadIdx.x & 31;
  const int64_t i = blockIdx.x * int64_t{kGemvThreads / 32} + (threadIdx.x >> 5);
  if (i >= n_rows) return;  // whole warps leave together
  const int64_t r = row0 + i;
  const int64_t chunks = w.cols / kValues;
  float acc[kMaxT];
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) acc[t] = 0.0f;
  for (int64_t c = lane; c < chunks; c += 32) {
    float v[kValues];
    LoadChunk<kFormat>(w, r, c, v);
    const int64_t k0 = c * kValues;
#pragma unroll
    for (int t = 0; t < kMaxT; ++t) {
      if (t < T) {
        const float* xt = x + t * ldx + k0;
        float a = 0.0f;
#pragma unroll
        for (int e = 0; e < kValues; ++e) a += v[e] * __ldg(xt + e);
        acc[t] += a;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kMaxT; ++t) {
    if (t < T) {
      const float sum = WarpSum(acc[t]);
      if (lane == 0) {
        float* out = y + t * ldy + i;
        *out = accumulate ? *out + sum : sum;
      }
    }
  }
}

}  // namespace

bool GemvApplicable(const DeviceWeight& w, int64_t T) {
  if (T < 1 || T > kMaxGemvTokens) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  const int64_t values = ChunkValues(w.format);
  // Every row must start on a 16-byte boundary and hold whole chunks.
  return w.cols % values == 0 && (w.format != WeightFormat::kMxFp4 || w.cols % 32 == 0);
}

cudaError_t LinearGemv(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                       int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                       cudaStream_t stream) {
  if (n_rows <= 0 || T <= 0) return cudaSuccess;
  if (!GemvApplicable(w, T)) return cudaErrorInvalidValue;
  const unsigned blocks =
      static_cast<unsigned>((n_rows + kGemvThreads / 32 - 1) / (kGemvThreads / 32));
  switch (w.format) {
    case WeightFormat::kF32:
      GemvKernel<WeightFormat::kF32>
          <<<blocks, kGemvThreads, 0, stream>>>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate);
      break;
    case WeightFormat::kBF16:
      GemvKernel<WeightFormat::kBF16>
          <<<blocks, kGemvThreads, 0, stream>>>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate);
      break;
    case WeightFormat::kFp8Block32:
      GemvKernel<WeightFormat::kFp8Block32>
          <<<blocks, kGemvThreads, 0, stream>>>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate);
      break;
    case WeightFormat::kFp8Row32:
      GemvKernel<WeightFormat::kFp8Row32>
          <<<blocks, kGemvThreads, 0, stream>>>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate);
      break;
    case WeightFormat::kMxFp4:
      GemvKernel<WeightFormat::kMxFp4>
          <<<blocks, kGemvThreads, 0, stream>>>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate);
      break;
  }
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
