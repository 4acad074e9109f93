// FP8-activation fast mode of the CUDA backend (k_fp8_gemm.cu, k_moe_fp8.cu).
//
// DeepSeek's own kernels quantise the activations entering an FP8 or MXFP4 GEMM per row per
// 32 values to e4m3 with a power-of-two scale (model.md §2.8); the goldens' reference does
// not (it multiplies fp32 activations by the dequantised weights). This mode does what
// DeepSeek's kernels do: a documented deviation from the goldens, off by default
// (CudaBackend::set_fp8_activations, DEEPINFER_CUDA_FP8_ACT=1), tested against the CPU
// reference run on fake-quantised activations (FakeQuantKind::kFp8Block32Pow2 gives the
// same values as QuantizeFp8Activations).
//
// The GEMMs run on mma.sync m16n8k32 e4m3 (fp8_gemm_core.cuh): one MMA per 32-value K block
// into a fresh partial, scaled and added in fp32 in K order. A token's result is bitwise
// independent of T and of the other tokens (the split-K structure depends on the shape
// only, and a block that loops over the split's segments adds them in the same order).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {

// Tokens up to which LinearFp8 streams the weight once per call (skinny tiles, split K);
// above it, 128 x 128 tiles.
inline constexpr int64_t kFp8SkinnyTokens = 64;

// Bytes of QuantizeFp8Activations' outputs for rows x K values: q (rows * K, rounded up to
// 16) then the scales (rows * K / 32 floats).
int64_t Fp8ActivationBytes(int64_t rows, int64_t K);
// Where the scales start in such a buffer that begins at q.
inline float* Fp8ActivationScales(uint8_t* q, int64_t rows, int64_t K) {
  return reinterpret_cast<float*>(q + AlignUp16(rows * K));
}

// q [rows, K] = e4m3 bytes of x / scale, each 8-value group stored in the order 0, 2, 4, 6,
// 1, 3, 5, 7; scale [rows, K / 32] = the block's power of two (kFp8Block32Pow2: the same
// values, q * scale = FakeQuant(x)). K % 32 == 0; x has row stride ldx; q and scale
// 16-byte aligned.
cudaError_t QuantizeFp8Activations(const float* x, int64_t rows, int64_t K, int64_t ldx, uint8_t* q,
                                   float* scale, cudaStream_t stream);

// out [rows, K] (row stride K, natural order) = the bf16 bits of the kFp8Block32Pow2 values
// of x (row stride ldx): the same numbers as QuantizeFp8Activations' q * scale, exact in
// bf16. K % 32 == 0 (else cudaErrorInvalidValue).
cudaError_t QuantizeFp8ActivationsBf16(const float* x, int64_t rows, int64_t K, int64_t ldx,
                                       uint16_t* out, cudaStream_t stream);

// True if LinearFp8 handles w: FP8 block32 / row32 or MXFP4, K (w.cols) a positive multiple
// of 128, data 16-byte and scale 4-byte aligned.
bool Fp8LinearApplicable(const DeviceWeight& w);

// The split-K structure of LinearFp8 for n_rows rows of a K-column weight (1 .. 8 equal
// segments of the K stages; it depends on the shape only, never on T).
int Fp8LinearSegments(int64_t n_rows, int64_t K);

// Device scratch LinearFp8 needs for T tokens (split-K partials; 0 if none).
int64_t Fp8LinearScratchBytes(int64_t n_rows, int64_t K, int64_t T);

// y[t, i] (+)= sum_k xq[t, k] * W[row0 + i, k] for i < n_rows, t < T, with xq / xs from
// QuantizeFp8Activations of the T activation rows (K = w.cols). scratch: device,
// Fp8LinearScratchBytes bytes, 16-byte aligned (may be null when that is 0).
cudaError_t LinearFp8(const DeviceWeight& w, int64_t row0, int64_t n_rows, const uint8_t* xq,
                      const float* xs, int64_t T, float* y, int64_t ldy, bool accumulate,
                      void* scratch, cudaStream_t stream);

// Grouped (block-diagonal) weight, as model::Backend::LinearGrouped with contiguous groups:
// y[t, g*R + i] = sum_k xq[t, g*K + k] * W[g*R + i, k], R = w.rows / groups, K = w.cols;
// xq / xs quantise the T rows of groups * K values (QuantizeFp8Activations with K * groups);
// y overwritten. One launch (+ the split-K reduction). Applicable when Fp8LinearApplicable
// and R is a multiple of 128. scratch: Fp8LinearScratchBytes(w.rows, K, T).
bool Fp8LinearGroupedApplicable(const DeviceWeight& w, int64_t groups);
cudaError_t LinearFp8Grouped(const DeviceWeight& w, int64_t groups, const uint8_t* xq,
                             const float* xs, int64_t T, float* y, int64_t ldy, void* scratch,
                             cudaStream_t stream);

// --- grouped routed experts (k_moe_fp8.cu) ----------------------------------------------

// True if RoutedExpertsFp8 handles the experts: w1/w3 and w2 MXFP4 or FP8 block32, D and I
// multiples of 128, T >= 1, 1 <= k <= kMaxFusedExpertSlots, n_experts >= 1.
bool RoutedExpertsFp8Applicable(model::WeightFormat up_format, model::WeightFormat down_format,
                                int64_t D, int64_t I, int64_t T, int64_t k, int64_t n_experts);

int64_t RoutedExpertsFp8ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I, int64_t n_experts);

// The routed experts with FP8 activations, expert-major for any T (the launch's contract as
// kernels::RoutedExperts; y overwritten; an expert id outside [0, n_experts) sets
// kErrExpertOutOfRange and makes its token's row NaN). No host synchronisation; grid sizes
// depend only on T, k, n_experts and the shapes.
cudaError_t RoutedExpertsFp8(const RoutedExpertsLaunch& launch, void* scratch, cudaStream_t stream);

// RoutedExpertsBf16 (k_moe_bf16.cu): the same contract as RoutedExpertsFp8 (fake-quantised
// activations and h, MXFP4 weights), computed on bf16 tensor cores with the block scales
// folded exactly into bf16 operands, one fp32 sum over all of K per output. Results differ
// from RoutedExpertsFp8 by fp32 rounding (not bitwise equal; the backend keeps RoutedExpertsFp8
// in batch-invariant mode); deterministic, and independent of the other tokens' routing as
// long as T stays on one side of the streaming threshold (ExpertsStreamMaxMeanPairs).
// Applicable: w1/w3 and w2 MXFP4, D and I multiples of 128 and <= 8192, each expert's scale arrays
// 4-byte aligned (the caller checks that), 1 <= k <= kMaxFusedExpertSlots. RoutedExpertsBf16
// itself also needs x 16-byte aligned (float4 loads; cudaErrorInvalidValue otherwise).
bool RoutedExpertsBf16Applicable(model::WeightFormat up_format, model::WeightFormat down_format,
                                 int64_t D, int64_t I, int64_t T, int64_t k, int64_t n_experts);

// Mean pairs per expert (ceil(T * k / n_experts)) up to which RoutedExpertsBf16 runs its two
// GEMMs on the weight-streaming kernel (k_moe_stream.cu: decode, items of <= 8 / 16 / 32 pairs);
// above it, on the wgmma tile kernel (prefill, items of 64 .. 128 pairs). The environment
// variable DEEPINFER_EXPERTS_STREAM_MAX_PAIRS=<n> overrides the default (read on every call,
// so tests and benchmarks can switch it; 0 = never stream, a large n = always).
inline constexpr int64_t kExpertsStreamMaxMeanPairs = 12;
int64_t ExpertsStreamMaxMeanPairs();

// The environment variable that forces the wgmma kernel's item width (64, 80, 96 or 128 pairs;
// read on every call; unset or another value: by the mean pairs per expert). Numerics-neutral:
// each output is the same chain whatever the width.
inline constexpr const char* kExpertsItemPairsEnv = "DEEPINFER_EXPERTS_ITEM_PAIRS";

// The pairs per work item RoutedExpertsBf16 uses for a call (8 / 16 / 32 on the streaming
// kernel, 64 / 80 / 96 / 128 on the wgmma kernel; kExpertsItemPairsEnv applies).
int RoutedExpertsBf16ItemPairs(int64_t T, int64_t k, int64_t n_experts);

int64_t RoutedExpertsBf16ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                      int64_t n_experts);
cudaError_t RoutedExpertsBf16(const RoutedExpertsLaunch& launch, void* scratch,
                              cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
