// Expert-major (grouped) routed experts for decode batches (k_moe_grouped.cu).
//
// Same contract as kernels::RoutedExperts (kernels.h, RoutedExpertsLaunch), but the T*k
// (token, slot) pairs are first grouped by expert on the device, so every expert's weight
// tile is read once per call for all the pairs routed to it. The result is deterministic
// and batch-invariant: a token's output depends only on its own x, ids and weights (every
// dot product's summation order depends only on the shapes, never on the routing).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "model/backend.h"

namespace deepinfer::backend::cuda::kernels {

// The grouped path is the default from this many tokens per call (below it each expert is
// rarely shared and the token-slot-major kernels of k_moe.cu skip the grouping step).
inline constexpr int64_t kGroupedExpertsMinTokens = 4;
// The grouped path also takes larger decode batches than the token-slot kernels (up to this
// many tokens, with tokens * k <= kMaxGroupedExpertPairs): one device grouping sorts them.
inline constexpr int64_t kMaxGroupedExpertTokens = 256;
inline constexpr int64_t kMaxGroupedExpertPairs = kMaxFusedExpertTokens * kMaxFusedExpertSlots;
// CanFuseRoutedExperts does not know k; above kMaxFusedExpertTokens tokens it assumes at most
// this many slots per token (V4.1: 6), and RoutedExperts checks the real k.
inline constexpr int64_t kGroupedAssumedMaxSlots = 16;

// True if RoutedExpertsGrouped handles these formats and shapes: MXFP4 / FP8-block32 /
// BF16, D and I multiples of 32, 1 <= T <= kMaxGroupedExpertTokens, T * k <=
// kMaxGroupedExpertPairs,
// 1 <= k <= kMaxFusedExpertSlots, n_experts >= 1, staged activations within
// kMaxSharedBytes of shared memory.
bool RoutedExpertsGroupedApplicable(model::WeightFormat up_format, model::WeightFormat down_format,
                                    int64_t D, int64_t I, int64_t T, int64_t k, int64_t n_experts);

// Bytes of device scratch RoutedExpertsGrouped needs (16-byte aligned start):
// h [T*k, I] and per-pair outputs [T*k, D] as fp32, then the grouping (int32).
int64_t RoutedExpertsGroupedScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                         int64_t n_experts);

// Runs the grouped routed experts (4 launches: grouping, gate/up, down, combine); y is
// overwritten. An expert id outside [0, n_experts) sets kErrExpertOutOfRange and makes the
// whole output row of its token NaN. Grid sizes depend only on T, k, n_experts and the
// shapes (graph-capturable; no host synchronisation).
cudaError_t RoutedExpertsGrouped(const RoutedExpertsLaunch& launch, void* scratch,
                                 cudaStream_t stream);

// y[t, :] = sum over slots i = 0 .. k-1, in order, of part[t*k + i, :] ([T*k, D] per-pair
// expert outputs); a token with an id outside [0, n_experts) gets a NaN row (setting the
// error bit is the caller's job). Shared by the grouped and the FP8 routed experts.
cudaError_t CombineSlots(const float* part, const int32_t* experts, int64_t T, int64_t k,
                         int64_t n_experts, int64_t D, float* y, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
