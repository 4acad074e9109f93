// Sparse sink attention for prefill (many query tokens) in the FP8-activation mode
// (k_attention_prefill.cu on mma.sync; k_attention_wgmma.cu on wgmma at head_dim 512).
//
// Same contract as kernels::SparseAttention (model::SparseAttentionArgs, varlen fields,
// kErrSelectionOutOfRange semantics: rows with a bad id or outside the buffers are not
// attended) with the numerics of SparseAttentionMma(..., bf16_rounded = true): q and the
// probabilities enter the tensor-core MMAs rounded to bf16, the key = value rows are used as
// bf16 (exact for the rows the model produces; a row that is not is rounded to nearest and
// flagged kErrAttnKvNotBf16), scores, online softmax (with the sink in the denominator) and
// output in fp32.
//
// NOT bitwise equal to SparseAttentionMma and NOT batch-invariant across the token count:
// never use it in batch-invariant mode. Deterministic run to run: each token (and group of
// 64 heads) is computed in a fixed order, by one thread block, or at head_dim 512 with few
// tokens by a cluster of blocks over parts of its candidates merged in rank order.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels_attn_mma.h"

namespace deepinfer::backend::cuda::kernels {

inline constexpr int64_t kAttnPrefillHeadsPerBlock = 64;  // one wgmma M, 4 mma.sync m-tiles
inline constexpr int64_t kAttnPrefillMaxHeadDim = 512;

// True if SparseAttentionPrefill handles `args`: heads a positive multiple of 64 (at most
// 64 * 65535), head_dim a multiple of 64 in [64, 512], tokens in [0, 2^31), n_select,
// n_window, n_comp >= 0, window_kv / comp_kv 16-byte aligned (when they have rows), out
// 8-byte aligned.
// Host-side check only; the arrays are not read.
bool SparseAttentionPrefillApplicable(const model::SparseAttentionArgs& args);

// out = SparseAttention(args) (see model/backend.h) with the numerics above. Device
// pointers. Selection ids >= the token's comp_len (n_comp without varlen) and varlen ranges
// outside the buffers set kErrSelectionOutOfRange in *error_word (those rows are not
// attended); rows that are not exact bf16 set kErrAttnKvNotBf16. Returns
// cudaErrorInvalidValue when !SparseAttentionPrefillApplicable(args) (cudaSuccess for
// tokens == 0).
cudaError_t SparseAttentionPrefill(const model::SparseAttentionArgs& args, int* error_word,
                                   cudaStream_t stream);

// --- the two kernels behind SparseAttentionPrefill ---------------------------------------
// head_dim kAttnPrefillWgmmaHeadDim runs on the wgmma kernel (k_attention_wgmma.cu: the 64
// heads as the wgmma M, S and P V on warpgroup MMAs, the softmax in registers), other head
// dims on the mma.sync kernel (k_attention_prefill.cu). Both have the contract above; their
// bits differ (summation order). The knob is for A/B runs and tests:
// DEEPINFER_ATTN_PREFILL_WGMMA=0 (read on every call) keeps head_dim 512 on the mma.sync
// kernel.
inline constexpr int64_t kAttnPrefillWgmmaHeadDim = 512;
inline constexpr const char* kAttnPrefillWgmmaEnv = "DEEPINFER_ATTN_PREFILL_WGMMA";

// Whether SparseAttentionPrefill(args) takes the wgmma kernel: head_dim 512, q 16-byte aligned
// (16-byte loads), and the override (if set) or the environment allows it.
bool AttnPrefillUsesWgmma(const model::SparseAttentionArgs& args);

// Test hook: *on forces the wgmma kernel on (true) or off (false) for head_dim 512 whatever the
// environment; nullptr: the environment again (an atomic).
void SetAttnPrefillWgmmaOverride(const bool* on);

// Test hook: the wgmma kernel's blocks per (token, head group) (1, 2, 4 or 8: a cluster that
// splits each token's candidate chunks, merged in rank order; the bits depend on it); any other
// value: chosen per launch again (as many as keep one block per SM busy: decode batches split,
// prefill does not). An atomic.
void SetAttnWgmmaSplits(int splits);

// The wgmma kernel alone, for tests and SparseAttentionPrefill: cudaErrorInvalidValue unless
// args are applicable with head_dim 512 and q 16-byte aligned; cudaSuccess for tokens == 0.
cudaError_t SparseAttentionPrefillWgmma(const model::SparseAttentionArgs& args, int* error_word,
                                        cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
