// Tensor-core sparse sink attention for Hopper (k_attention_mma.cu).
//
// Same contract as kernels::SparseAttention (model::SparseAttentionArgs, varlen fields,
// kErrSelectionOutOfRange semantics), computed with mma.sync m16n8k16 bf16 at fp32-level
// accuracy: the key = value rows are used as bf16, which is EXACT for the rows the model
// produces (fake-quantised to FP8 e4m3 x 2^k or FP4 e2m1 x e4m3 scale before attention);
// q and the probabilities are split into three bf16 terms (x = hi + mid + lo, exact for
// normal fp32 values), every product is exact and all sums are fp32.
//
// Rows that are not exactly bf16 are rounded to nearest bf16 (results then carry bf16-level
// error in those rows) and flagged with kErrAttnKvNotBf16 in the error word.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

// Error-word bit (next to DeviceErrorBit): a key/value row that SparseAttentionMma staged
// was not exactly representable in bf16 (the fake-quantisation assumption is broken).
inline constexpr int kErrAttnKvNotBf16 = 4;

inline constexpr int64_t kAttnMmaHeadsPerBlock = 16;  // one MMA m-tile of heads
inline constexpr int64_t kAttnMmaMaxHeadDim = 512;

// True if SparseAttentionMma handles `args`: heads a positive multiple of 16 (at most
// 16 * 65535), head_dim a multiple of 64 in [64, 512], tokens in [0, 2^31), n_select >= 0,
// window_kv / comp_kv 16-byte aligned (when they have rows). Host-side check only; the
// arrays are not read.
bool SparseAttentionMmaApplicable(const model::SparseAttentionArgs& args);

// out = SparseAttention(args) (see model/backend.h), out[t] bitwise independent of the
// other tokens of the call (as kernels::SparseAttention; not bitwise equal to it). Device
// pointers. Selection ids >= the token's comp_len (n_comp without varlen) and varlen ranges
// outside the buffers set kErrSelectionOutOfRange in *error_word (those rows are not
// attended); rows that are not exact bf16 set kErrAttnKvNotBf16. Returns cudaErrorInvalidValue when
// !SparseAttentionMmaApplicable(args) (cudaSuccess for tokens == 0). bf16_rounded (the
// FP8-activation mode): q and the probabilities enter the MMAs rounded to bf16 (one term,
// like bf16 attention kernels) instead of split exactly into three (a third of the MMAs
// and of the q staging); still batch-invariant.
cudaError_t SparseAttentionMma(const model::SparseAttentionArgs& args, int* error_word,
                               cudaStream_t stream, bool bf16_rounded = false);

// Chunks of 16 candidate rows the one-term (bf16_rounded) kernel keeps in flight: 1 to 4, or 0
// (the default): 3 when the launch has at most 3/4 of the SM count in blocks, else 2 (two
// blocks per SM fit beside two stages, not three); the three-term kernel always keeps 1. Physical
// only: the bits do not depend on it. Process-wide; initially DEEPINFER_ATTN_MMA_STAGES from the
// environment. Each stage is 32 KiB of shared memory at head_dim 512.
void SetSparseAttentionMmaStages(int stages);

}  // namespace deepinfer::backend::cuda::kernels
