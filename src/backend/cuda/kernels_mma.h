// Tensor-core "skinny GEMM" for Linear with 1..64 token rows (k_mma.cu).
//
// Streams a stored weight (FP8 block32 / row32, MXFP4, BF16) once per call, dequantises it
// exactly to bf16 (the power-of-two scale folded in), and multiplies it with the
// activations split exactly into three bf16 terms x = hi + mid + lo (SplitBf16x3) on
// mma.sync m16n8k16 with fp32 accumulation: fp32-level accuracy (the split is exact, the
// products are exact; only the fp32 sums round).
//
// Batch invariance: y[t, i] depends only on x[t, :] and W[row0 + i, :]; the K reduction
// order (chunk order, the fixed MMA order inside a chunk, and the K split, which depends on
// n_rows and K only) is the same for every token and every T.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

inline constexpr int64_t kMaxMmaTokens = 64;

// Three bf16 bit patterns whose sum is an fp32 value (SplitBf16x3).
struct Bf16x3 {
  uint16_t hi, mid, lo;
};

__host__ __device__ inline uint32_t MmaF32Bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
#endif
}

__host__ __device__ inline float MmaF32FromBits(uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, 4);
  return x;
#endif
}

// x = hi + mid + lo exactly whenever x is finite and its last significand bit is worth at
// least 2^-133 (the bf16 subnormal step; every |x| >= 2^-110 qualifies); otherwise the
// error is below 2^-133 in absolute value. hi is x truncated to bf16 (its top 16 bits),
// mid the top 16 bits of r1 = x - hi (exact in fp32: the low 16 significand bits of x),
// lo = r2 = r1 - mid (exact; at most 8 significant bits, so exactly a bf16). An exactly
// bf16 x gives mid = lo = +0. Infinity stays in hi (mid = lo = 0); NaN gives a quiet NaN hi.
__host__ __device__ inline Bf16x3 SplitBf16x3(float x) {
  const uint32_t b = MmaF32Bits(x);
  if ((b & 0x7F800000u) == 0x7F800000u) {
    const uint32_t quiet = (b & 0x007FFFFFu) != 0 ? 0x0040u : 0u;
    return {static_cast<uint16_t>((b >> 16) | quiet), 0, 0};
  }
  const uint32_t hi = b & 0xFFFF0000u;
  const float r1 = x - MmaF32FromBits(hi);
  const uint32_t mid = MmaF32Bits(r1) & 0xFFFF0000u;
  const float r2 = r1 - MmaF32FromBits(mid);
  return {static_cast<uint16_t>(hi >> 16), static_cast<uint16_t>(mid >> 16),
          static_cast<uint16_t>(MmaF32Bits(r2) >> 16)};
}

// True if LinearMma handles w with T rows: format FP8 (block32 or row32), MXFP4 or BF16
// (not F32); 1 <= T <= kMaxMmaTokens; w.data 16-byte aligned; w.cols a positive multiple of
// 32 (BF16), 64 (FP8) or 128 (MXFP4) values; w.rows >= 1.
bool MmaLinearApplicable(const DeviceWeight& w, int64_t T);

// y[t, i] (+)= sum_k x[t, k] * W[row0 + i, k] for i < n_rows, t < T (same contract as
// LinearGemv). x: device fp32 [T, ldx] (ldx >= w.cols, any alignment); y: device fp32
// [T, ldy] (ldy >= n_rows); rows row0 .. row0 + n_rows - 1 must exist in w. Returns
// cudaErrorInvalidValue when !MmaLinearApplicable(w, T); cudaSuccess for empty work.
cudaError_t LinearMma(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                      int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                      cudaStream_t stream);

// Grouped (block-diagonal) weight in one launch, as model::Backend::LinearGrouped:
// y[t, g*R + i] = sum_k x[t, g*x_group_stride + k] * W[g*R + i, k], R = w.rows / groups
// (a multiple of 256), y overwritten. One K split for the whole weight, chosen from its
// shape, so a token's bits do not depend on T.
bool MmaLinearGroupedApplicable(const DeviceWeight& w, int64_t T, int64_t groups);
cudaError_t LinearMmaGrouped(const DeviceWeight& w, int64_t groups, const float* x, int64_t T,
                             int64_t ldx, int64_t x_group_stride, float* y, int64_t ldy,
                             cudaStream_t stream);

// The K split LinearMma uses for n_rows output rows of a K-column weight (1, 2, 4 or 8
// thread blocks of one cluster share a row tile). Exposed for tests and benchmarks; it
// never depends on T.
int MmaKSplit(model::WeightFormat format, int64_t n_rows, int64_t K);

// Tuning switch for T = 33..64 (benchmarks): the kernel variant sized for 2 blocks per SM
// (default; at most 128 registers, some spilled) or for 1 block per SM (up to 255
// registers; fewer spills). Results are bitwise identical either way.
void SetMmaWideBlocksPerSm(int blocks);

}  // namespace deepinfer::backend::cuda::kernels
