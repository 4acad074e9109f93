// Internal interface between the two GEMM kernels of RoutedExpertsBf16 (kernels_fp8.h): the
// wgmma tile kernel for wide items (k_moe_bf16.cu) and the weight-streaming kernel for items
// of <= 32 pairs (k_moe_stream.cu, stream_mma.cuh). Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels::moe_bf16 {

// A work item: pairs order[start .. start + count) of one expert. The layout of
// moe_groups::Item (static_assert'ed in k_moe_bf16.cu, which converts the pointer).
struct GemmItem {
  int32_t expert, start, count, pad;
};

// One expert GEMM launch: out[pair, v] = sum_k act[row(pair), k] * W[v, k] for the rows v of
// [W1; W3] (up: act = xb, row(pair) = pair / k, out = gu [P, 2I]) or of W2 (down: act = hb,
// row(pair) = pair, out = out [P, D]), for every item.
struct GemmArgs {
  const ExpertPointers* table;
  bool up;
  int64_t D, I, k;
  const uint16_t* act;  // permuted bf16 [*, K]
  const int32_t* order;
  const GemmItem* items;
  const int32_t* n_items;
  float* out;  // [P, n_rows]
};

// Items of at most this many pairs run on the streaming kernel (1, 2 or 4 token tiles of 8).
inline constexpr int kStreamMaxItemPairs = 32;

// The streaming GEMM for items of <= bn pairs (bn 8, 16 or 32; grid y = max_items, items past
// *n_items exit). Needs the weight rows (2I or D) and K (D or I) multiples of 128.
cudaError_t LaunchStreamGemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels::moe_bf16
