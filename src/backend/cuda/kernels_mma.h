// Tensor-core "skinny GEMM" for Linear with 1..64 token rows (k_mma.cu).
//
// Streams a stored weight (FP8 block32 / row32, MXFP4, BF16) once per call, dequantises it
// exactly to bf16 (the power-of-two scale folded in), and multiplies it with the
// activations split as x = bf16(x) + bf16(x - bf16(x)) on mma.sync m16n8k16 with fp32
// accumulation: fp32-reference accuracy (relative error ~1e-5 per dot product).
//
// Batch invariance: y[t, i] depends only on x[t, :] and W[row0 + i, :]; the K reduction
// order (chunk order, hi before lo, and the K split, which depends on n_rows and K only) is
// the same for every token and every T.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

inline constexpr int64_t kMaxMmaTokens = 64;

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

// The K split LinearMma uses for n_rows output rows of a K-column weight (1, 2, 4 or 8
// thread blocks of one cluster share a row tile). Exposed for tests and benchmarks; it
// never depends on T.
int MmaKSplit(model::WeightFormat format, int64_t n_rows, int64_t K);

// Tuning switch for T = 33..64 (benchmarks): the kernel variant sized for 2 blocks per SM
// (default; at most 128 registers, a few spilled) or for 1 block per SM (no spills).
// Results are bitwise identical either way.
void SetMmaWideBlocksPerSm(int blocks);

}  // namespace deepinfer::backend::cuda::kernels
