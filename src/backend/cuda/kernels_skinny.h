// Skinny BF16 Linear for the FP8-activation mode's decode (k_linear_skinny.cu): the small BF16
// weights of a layer (the router [384, 5120], the compressor's wkv / wgate [512, 5120], the
// indexer's weights_proj [32, 5120]) at 2..32 token rows, where cuBLAS on bf16(x) picked slow
// kernels (H200 run 194, op by op: the router 31.6 us a call at B=8, 12.4 at B=32).
//
// y[t, i] (+)= sum_k bf16(x[t, k]) * W[row0 + i, k] for t < T, i < n_rows: the products the
// FP8 mode's cuBLAS path forms (x rounded to nearest-even bf16, W exact), summed in fp32 on
// mma.sync m16n8k16. Batch invariance: y[t, i] depends only on x[t, :] and W[row0 + i, :]; the
// summation order depends on K only (not on T, n_rows or the other tokens).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

inline constexpr int64_t kSkinnyMaxTokens = 32;
// The weights it was built and measured for have 32-512 rows (64 clusters of 8 blocks at most
// here); larger ones keep the other paths.
inline constexpr int64_t kSkinnyMaxRows = 1024;

// True if LinearSkinnyBf16 takes w with T rows: a BF16 weight of at most kSkinnyMaxRows rows
// with 16-byte aligned data, K % 32 == 0 and K <= 8192, 1 <= T <= kSkinnyMaxTokens.
bool SkinnyBf16Applicable(const DeviceWeight& w, int64_t T);

// x [T, ldx] fp32 (16-byte aligned rows: x and ldx % 4 == 0), y [T, ldy] fp32. One launch
// (thread-block clusters of 8 along K, programmatic dependent launch). cudaErrorNotSupported,
// launching nothing, where a cluster of 8 blocks cannot be scheduled (the caller falls back).
cudaError_t LinearSkinnyBf16(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                             int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                             cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
