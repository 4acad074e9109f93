// Stored-weight chunks for the fused dequantise + dot kernels (GEMV, routed experts).
//
// A stored weight row is read in 16-byte chunks: 32 e2m1 (MXFP4, one 32-value scale
// block), 16 e4m3 (FP8, half of one 32-column scale block), 8 bf16 or 4 fp32 values.
// A chunk is loaded raw (RawChunk: the 16 bytes + its power-of-two scale) so that several
// loads are in flight before any math, then dequantised 4 values at a time. The scale is
// applied once to the chunk's partial dot product: scales are powers of two, so
// (sum v*x) * s equals sum (v*s)*x up to the summation order (no extra rounding).
//
// The activation vectors a chunk is dotted with live in shared memory in a padded layout
// (PaddedIndex): the values of chunk c start at c * (ChunkValues + 4), so that the float4
// reads of the 8 lanes of a quarter-warp (each on its own chunk) hit distinct banks.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"
#include "model/backend.h"

namespace deepinfer::backend::cuda {

// Values held by one 16-byte chunk of a stored row.
__host__ __device__ constexpr int ChunkValues(model::WeightFormat f) {
  return f == model::WeightFormat::kMxFp4  ? 32
         : f == model::WeightFormat::kF32  ? 4
         : f == model::WeightFormat::kBF16 ? 8
                                           : 16;
}

// Floats between the starts of two chunks in the padded shared-memory layout.
__host__ __device__ constexpr int PaddedStride(model::WeightFormat f) { return ChunkValues(f) + 4; }

// Shared-memory floats of a padded vector of `n` values (n a multiple of ChunkValues(f)).
__host__ __device__ constexpr int64_t PaddedFloats(model::WeightFormat f, int64_t n) {
  return n / ChunkValues(f) * PaddedStride(f);
}

// Position of value k in the padded layout.
template <model::WeightFormat kFormat>
__device__ __forceinline__ int64_t PaddedIndex(int64_t k) {
  constexpr int kValues = ChunkValues(kFormat);
  return (k / kValues) * PaddedStride(kFormat) + k % kValues;
}

// Copies v[0 .. n) (global) into the padded layout at `dst` (shared); all threads of the
// block call it (no barrier inside).
template <model::WeightFormat kFormat>
__device__ __forceinline__ void StagePadded(const float* v, int64_t n, float* dst) {
  for (int64_t k = threadIdx.x; k < n; k += blockDim.x) dst[PaddedIndex<kFormat>(k)] = v[k];
}

struct RawChunk {
  uint4 q;  // the 16 stored bytes
  float s;  // power-of-two scale of the chunk (1 for unscaled formats)
};

// Chunk `c` of row `r` of a stored [rows, K] weight (data 16-byte aligned; K a multiple of
// ChunkValues, so every row starts on a 16-byte boundary).
template <model::WeightFormat kFormat>
__device__ __forceinline__ RawChunk LoadRawChunk(const void* data, const uint8_t* scale, int64_t K,
                                                 int64_t r, int64_t c) {
  using model::WeightFormat;
  constexpr int kValues = ChunkValues(kFormat);
  const int64_t row_chunks = K / kValues;
  RawChunk ch;
  ch.q = __ldg(reinterpret_cast<const uint4*>(data) + (r * row_chunks + c));
  if constexpr (kFormat == WeightFormat::kMxFp4) {
    ch.s = E8m0ToF32(__ldg(scale + r * (K / 32) + c));  // a chunk is one 32-value block
  } else if constexpr (kFormat == WeightFormat::kFp8Block32 || kFormat == WeightFormat::kFp8Row32) {
    const int64_t scale_cols = (K + 31) / 32;
    const int64_t scale_row = kFormat == WeightFormat::kFp8Block32 ? r / 32 : r;
    ch.s = E8m0ToF32(__ldg(scale + scale_row * scale_cols + (c * 16) / 32));
  } else {
    ch.s = 1.0f;
  }
  return ch;
}

__device__ __forceinline__ uint32_t ChunkWord(const uint4& q, int i) {
  return i == 0 ? q.x : (i == 1 ? q.y : (i == 2 ? q.z : q.w));
}

__device__ __forceinline__ float Fp8E4m3ToFloat(uint32_t byte) {
  const __half_raw h =
      __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte & 0xFF), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float Fp4E2m1ToFloat(uint32_t nibble) {
  const uint32_t code = nibble & 0x7;
  const float v = code < 4 ? 0.5f * static_cast<float>(code)
                           : (code == 7 ? 6.0f : static_cast<float>(code) - 2.0f);
  return (nibble & 0x8) ? -v : v;
}

// Unscaled values 4g .. 4g+3 of a chunk (g < ChunkValues / 4; call with a constant g).
template <model::WeightFormat kFormat>
__device__ __forceinline__ void Dequant4(const RawChunk& ch, int g, float v[4]) {
  using model::WeightFormat;
  if constexpr (kFormat == WeightFormat::kF32) {
    v[0] = __uint_as_float(ch.q.x), v[1] = __uint_as_float(ch.q.y);
    v[2] = __uint_as_float(ch.q.z), v[3] = __uint_as_float(ch.q.w);
  } else if constexpr (kFormat == WeightFormat::kBF16) {
    const uint32_t lo = ChunkWord(ch.q, 2 * g), hi = ChunkWord(ch.q, 2 * g + 1);
    v[0] = __uint_as_float(lo << 16), v[1] = __uint_as_float(lo & 0xFFFF0000u);
    v[2] = __uint_as_float(hi << 16), v[3] = __uint_as_float(hi & 0xFFFF0000u);
  } else if constexpr (kFormat == WeightFormat::kMxFp4) {
    // Column 8i+j is nibble j of word i (low nibble = even column).
    const uint32_t word = ChunkWord(ch.q, g / 2) >> (16 * (g % 2));
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = Fp4E2m1ToFloat(word >> (4 * j));
  } else {  // FP8: column 4i+j is byte j of word i
    const uint32_t word = ChunkWord(ch.q, g);
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = Fp8E4m3ToFloat(word >> (8 * j));
  }
}

// acc[n][t] += chunk n . x_t for n < kRows, t < min(T, kTokens), where x_t's chunk values
// start at xs + t * x_stride (padded shared layout, 16-byte aligned). Each float4 of x read
// from shared memory feeds all kRows weight rows.
template <model::WeightFormat kFormat, int kRows, int kTokens>
__device__ __forceinline__ void DotChunks(const RawChunk (&ch)[kRows], const float* xs,
                                          int64_t x_stride, int T, float (&acc)[kRows][kTokens]) {
  constexpr int kGroups = ChunkValues(kFormat) / 4;
  float part[kRows][kTokens];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) part[n][t] = 0.0f;
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float v[kRows][4];
#pragma unroll
    for (int n = 0; n < kRows; ++n) Dequant4<kFormat>(ch[n], g, v[n]);
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < T) {
        const float4 x = *reinterpret_cast<const float4*>(xs + t * x_stride + 4 * g);
#pragma unroll
        for (int n = 0; n < kRows; ++n) {
          part[n][t] += v[n][0] * x.x + v[n][1] * x.y + v[n][2] * x.z + v[n][3] * x.w;
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[n][t] += part[n][t] * ch[n].s;
  }
}

}  // namespace deepinfer::backend::cuda
