// The block-128 FP8 GEMM operands of the FP8-activation mode for many tokens
// (k_fp8_block128.cu; the GEMM itself is cuBLASLt's, cuda_backend_block128.cc).
//
// Numerics (a documented choice of this mode, as DeepSeek-V3's inference kernels on Hopper):
// activations are quantised per token per 128 values (not 32) to e4m3 with a power-of-two
// scale (the kFp8Block32Pow2 formula over 128 values: amax floored at 1e-4, / 448, rounded up
// to a power of two); FP8 weights (e4m3 with ue8m0 scales per 32 x 32 block) are re-blocked
// once to 128 x 128 blocks: the block's scale is the largest of its 16 sub-block scales, and
// each e4m3 value of a sub-block with a smaller scale is re-rounded (nearest even) to its value
// times 2^(sub-block scale - block scale). That is exact unless the result falls below e4m3's
// normal range (2^-6 times the block scale), where low significand bits are lost. cuBLASLt
// promotes its FP8 tensor-core sums to fp32 once per 128 values of K.
//
// Scale layouts are cuBLASLt's on Hopper, as checked on the H200 by gpu_fp8_block_gemm (bench/
// gpu/fp8_block_gemm.cu, runs 140-143): activation scales [K / 128][T] with the token index
// fastest (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F of the GEMM's B operand; cuBLASLt runs only
// token counts that are multiples of 4, so their leading dimension Block128ScaleLd(T) is T);
// weight scales [ceil(rows / 128)][ld] with the K-block index fastest and ld = cols / 128
// rounded up to a multiple of 4 (BLK128x128_32F of the A operand; checked with 5 K blocks).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

inline constexpr int64_t kBlock128 = 128;

// A scale array's leading dimension for `n` scales a row: n rounded up to a multiple of 4.
inline int64_t Block128ScaleLd(int64_t n) { return (n + 3) / 4 * 4; }

// --- activations --------------------------------------------------------------------------

// cuBLASLt has no block-scaled algorithm for a token count that is not a multiple of this
// (H200, gpu_fp8_block_gemm runs 141-143: none for 1, 33 or 258 tokens; 4, 36, 260 and 264
// run): the backend runs the last T % kBlock128TokenQuantum tokens as a zero-padded GEMM of
// this many.
inline constexpr int64_t kBlock128TokenQuantum = 4;

// Bytes of QuantizeFp8Block128's outputs for T (padded) tokens of K values: q (T * K, rounded
// up to 16), then the scales (K / 128 rows of Block128ScaleLd(T) floats).
int64_t Block128ActivationBytes(int64_t T, int64_t K);
// Where those scales start in such a buffer that begins at q.
inline float* Block128ActivationScales(uint8_t* q, int64_t T, int64_t K) {
  return reinterpret_cast<float*>(q + AlignUp16(T * K));
}

// q [padded_T, K] (natural order) = e4m3 bytes of x / scale; scale[kb * Block128ScaleLd(
// padded_T) + t] = the power-of-two scale of values [128 kb, 128 kb + 128) of token t (x: T
// rows of stride ldx). Tokens T .. padded_T - 1 are zeros with scale 1. padded_T >= T (0:
// T); K % 128 == 0 and ldx % 4 == 0 (else cudaErrorInvalidValue); x, q and scale 16-byte
// aligned. The block-scaled GEMM takes the result only where padded_T % 4 == 0 (see above).
cudaError_t QuantizeFp8Block128(const float* x, int64_t T, int64_t K, int64_t ldx, uint8_t* q,
                                float* scale, cudaStream_t stream, int64_t padded_T = 0);

// y[t, i] (+)= part[t, i] for t < T, i < n (part: row stride ld_part; y: row stride ldy):
// the padded tail GEMM's rows into their place in y.
cudaError_t AddBlock128Tail(const float* part, int64_t ld_part, int64_t T, int64_t n, float* y,
                            int64_t ldy, bool accumulate, cudaStream_t stream);

// --- weights -------------------------------------------------------------------------------

// An FP8 weight re-blocked to 128 x 128 scales: data [rows, cols] e4m3 (row-major), scale
// [ceil(rows / 128)][scale_ld] fp32 (scale_ld = Block128ScaleLd(cols / 128)).
struct Block128Weight {
  const uint8_t* data = nullptr;
  const float* scale = nullptr;
  int64_t scale_ld = 0;
};

// True if w can be re-blocked: FP8 block32 (e4m3, ue8m0 per 32 x 32) with cols a positive
// multiple of 128.
bool Block128Convertible(const DeviceWeight& w);
// Bytes of the re-blocked copy of a rows x cols weight (data rounded up to 16, then scales).
int64_t Block128WeightBytes(int64_t rows, int64_t cols);
// The copy's view inside a buffer of Block128WeightBytes bytes at `buffer`.
Block128Weight Block128WeightAt(const void* buffer, int64_t rows, int64_t cols);
// Fills `buffer` (Block128WeightBytes(w.rows, w.cols), 16-byte aligned) with w re-blocked.
cudaError_t RequantFp8Block128(const DeviceWeight& w, void* buffer, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
