// FP8-activation mode, decode: dense Linears with few token rows as weight streaming on bf16
// tensor cores (k_linear_stream.cu).
//
// Numerics: the FP8 mode's operands are exact in bf16 (an activation is an e4m3 value times
// a power-of-two block scale, kFp8Block32Pow2; an FP8 weight is an e4m3 value times its
// ue8m0 32x32-block scale), so both scales are folded into bf16 operands and every output is
// ONE fp32 tensor-core sum over K (mma.sync m16n8k16). The results equal LinearFp8's up to
// fp32 summation order (tested against the CPU on fake-quantised activations with the FP8
// tests' bound). A token's bits depend on the weight's shape only (the split of K over warps
// is fixed by the shape), not on T or on the other tokens; they differ from LinearFp8's, so
// the backend uses this path only outside batch-invariant mode.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

// Token rows LinearStream takes at most (four 8-token MMA columns). The backend streams FP8
// Linears up to this many tokens by default (CudaBackend::set_linear_stream_max_tokens).
inline constexpr int64_t kStreamMaxTokens = 32;

// True if LinearStream handles rows [row0, row0 + n_rows) of w for T tokens: FP8 block-32
// weight, K = w.cols a positive multiple of 128, row0 and n_rows multiples of 16 (so a warp's
// 16 rows share one 32-row scale block), 1 <= T <= kStreamMaxTokens, data 16-byte aligned.
bool LinearStreamApplicable(const DeviceWeight& w, int64_t row0, int64_t n_rows, int64_t T);

// Device scratch of LinearStream / LinearStreamGrouped for T tokens of K values (the
// activations as bf16 in the kernel's fragment order).
int64_t LinearStreamScratchBytes(int64_t T, int64_t K);

// y[t, i] (+)= sum_k FakeQuant(x)[t, k] * W[row0 + i, k] for i < n_rows, t < T (x row stride
// ldx, K = w.cols values per row). scratch: LinearStreamScratchBytes(T, w.cols) bytes,
// 16-byte aligned.
cudaError_t LinearStream(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                         int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                         void* scratch, cudaStream_t stream);

// Weights (row ranges) that read the same activations, in one launch (one quantisation of
// x, one grid): target i computes y_i[t, r] (+)= sum_k FakeQuant(x)[t, k] * W_i[row0_i + r, k]
// with bitwise the result of its own LinearStream call. All weights have the same cols (K).
inline constexpr int kMaxStreamTargets = 4;
struct LinearStreamTarget {
  const DeviceWeight* w = nullptr;
  int64_t row0 = 0;
  int64_t n_rows = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  bool accumulate = false;
};
// True if 1 <= n <= kMaxStreamTargets, every target is LinearStreamApplicable for T and all
// share w->cols. scratch of LinearStreamMany: LinearStreamScratchBytes(T, K).
bool LinearStreamManyApplicable(const LinearStreamTarget* targets, int n, int64_t T);
cudaError_t LinearStreamMany(const LinearStreamTarget* targets, int n, const float* x, int64_t T,
                             int64_t ldx, void* scratch, cudaStream_t stream);

// Block-diagonal weight (model::Backend::LinearGrouped with contiguous groups): y[t, g*R + i]
// = sum_k FakeQuant(x)[t, g*K + k] * W[g*R + i, k], R = w.rows / groups, K = w.cols, y
// overwritten. Applicable as LinearStream for all rows, with R a multiple of 16. scratch:
// LinearStreamScratchBytes(T, groups * w.cols).
bool LinearStreamGroupedApplicable(const DeviceWeight& w, int64_t groups, int64_t T);
cudaError_t LinearStreamGrouped(const DeviceWeight& w, int64_t groups, const float* x, int64_t T,
                                int64_t ldx, float* y, int64_t ldy, void* scratch,
                                cudaStream_t stream);

// The number of warps that split K for a weight of n_rows x K (1, 2, 4 or 8; shape only).
int LinearStreamSplit(int64_t n_rows, int64_t K);

}  // namespace deepinfer::backend::cuda::kernels
