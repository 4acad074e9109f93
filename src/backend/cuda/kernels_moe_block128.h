// Routed experts for prefill in the FP8-activation mode on FP8 tensor cores (k_moe_block128.cu),
// with the MXFP4 experts copied once to e4m3 at 128 x 128 block scales.
//
// Numerics (the block-128 choice the Linears of 512 or more tokens already make,
// kernels_block128.h; DeepSeek-V3's Hopper inference numerics): activations (x, and the SwiGLU
// output h) are quantised per token per 128 values to e4m3 with a power-of-two scale (the
// kFp8Block32Pow2 formula over 128 values); each expert matrix is re-blocked to e4m3 values with
// one fp32 power-of-two scale per 128 x 128 block; the tensor core sums each 128-value block of K
// (four wgmma k32 steps) and the kernel promotes that partial sum once per block into an fp32
// accumulator, times the two scales. The re-blocking is exact while the block's 32-value ue8m0
// scales lie within 14 octaves of its largest (an e2m1 value times 2^(own - largest + 6) is then
// an e4m3 value; the + 6 uses e4m3's headroom: 6 * 2^6 = 384 <= 448); beyond that, values are
// rounded to nearest even like RequantFp8Block128's. The results differ from the 32-value paths
// (RoutedExpertsBf16 / RoutedExpertsFp8) by the activation blocks and the FP8 sums.
//
// Memory: the copy is 1 byte per weight (+ a float per 128 x 128 block), twice the MXFP4 bytes,
// kept next to them (decode keeps reading MXFP4). The backend makes it only within a budget
// (CudaBackend::set_experts_block128_copy_budget; DEEPINFER_EXPERTS_FP8_COPY_GIB); without it
// the GEMMs read the MXFP4 bytes and build the e4m3 operands in registers (k_moe_block128_rs.cu:
// no copies, only a byte per weight row for the row scales, 3.7 MB per V4.1-Flash layer; since
// session 21 within ~1% of the copies' speed).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_block128.h"

namespace deepinfer::backend::cuda::kernels {

// One expert's three copies, for m = w1, w2, w3: data[m] the e4m3 values of a [rows, cols]
// matrix in 128 x 128 tiles (ExpertBlock128ByteOffset: tile (r / 128, c / 128) is 16 KiB of
// contiguous bytes in the wgmma no-swizzle core-matrix layout, so a GEMM stage copies it as one
// sequential stream into shared memory unchanged) and scale[m] fp32 [rows / 128][Block128ScaleLd(
// cols / 128)]; both at Block128WeightAt's offsets.
struct ExpertBlock128Pointers {
  const uint8_t* data[3];
  const float* scale[3];
};

// Byte offset of element (r, c) in an expert copy's data (cols a multiple of 128): tile
// (r / 128, c / 128) at ((r / 128) * (cols / 128) + c / 128) * 16384; inside it the 16-byte chunk
// (row r % 128, chunk (c % 128) / 16) at ((r % 128) / 8 * 8 + chunk) * 128 + (r % 8) * 16.
constexpr int64_t ExpertBlock128ByteOffset(int64_t r, int64_t c, int64_t cols) {
  const int64_t tile = (r / 128) * (cols / 128) + c / 128;
  const int64_t rr = r % 128, chunk = (c % 128) / 16;
  return tile * 16384 + ((rr / 8) * 8 + chunk) * 128 + (rr % 8) * 16 + c % 16;
}

// True if w (an expert matrix) can be copied: MXFP4 with rows and cols positive multiples of 128.
bool ExpertBlock128Convertible(const DeviceWeight& w);

// Fills `buffer` (Block128WeightBytes(w.rows, w.cols) bytes, 16-byte aligned) with the e4m3
// copy of w at 128 x 128 scales (see above). cudaErrorInvalidValue if not convertible.
cudaError_t RequantMxFp4Block128(const DeviceWeight& w, void* buffer, cudaStream_t stream);

// Rows of one expert in ExpertRowScaleMax's output: w1's I, then w3's I, then w2's D.
constexpr int64_t ExpertRowScaleMaxStride(int64_t D, int64_t I) { return 2 * I + D; }

// Row r (< ExpertRowScaleMaxStride) of that output: matrix m (0 = w1, 1 = w2, 2 = w3, the order
// of ExpertPointers) and its row there.
struct ExpertRow {
  int m;
  int64_t row;
};
constexpr ExpertRow ExpertRowOf(int64_t r, int64_t I) {
  return r < I ? ExpertRow{0, r} : (r < 2 * I ? ExpertRow{2, r - I} : ExpertRow{1, r - 2 * I});
}

// out[e * ExpertRowScaleMaxStride(D, I) + r] = the largest ue8m0 scale byte of row r of expert
// e's [w1; w3; w2] (table: device [n_experts] MXFP4 experts of [I, D] / [D, I] / [I, D], scale
// pointers 4-byte aligned; D and I multiples of 128; n_experts <= 65535), the register path's
// one weight scale per row. cudaErrorInvalidValue otherwise.
cudaError_t ExpertRowScaleMax(const ExpertPointers* table, int64_t n_experts, int64_t D, int64_t I,
                              uint8_t* out, cudaStream_t stream);

// Whether RoutedExpertsBlock128 takes a launch of these shapes: D and I multiples of 128 up to
// 8192, 1 <= k <= kMaxFusedExpertSlots, and a mean of more than ExpertsStreamMaxMeanPairs()
// pairs per expert (prefill sizes; decode sizes: RoutedExpertsBlock128DecodeApplicable).
bool RoutedExpertsBlock128Applicable(int64_t D, int64_t I, int64_t T, int64_t k, int64_t n_experts);

// Whether the decode form of RoutedExpertsBlock128 (items of kBlock128DecodeItemPairs pairs, the
// streaming GEMM of k_moe_block128_stream.cu; MXFP4 bytes only, no copies) takes these shapes:
// those of RoutedExpertsBlock128Applicable with at most ExpertsStreamMaxMeanPairs() pairs per
// expert on average (decode sizes; wider means belong to the prefill form). The backend uses it
// unless set_experts_decode_e4m3(false) (CudaBackend::RoutedExpertsFp8).
inline constexpr int kBlock128DecodeItemPairs = 8;
bool RoutedExpertsBlock128DecodeApplicable(int64_t D, int64_t I, int64_t T, int64_t k,
                                           int64_t n_experts);

// Pairs per work item: 64, or 96 / 128 when DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS says so (read
// on every call). The caller picks it once and passes the same width to the scratch size and the
// launch.
int RoutedExpertsBlock128ItemPairs(int64_t T, int64_t k, int64_t n_experts);

// Scratch of a launch with items of item_pairs pairs (8, 64, 96 or 128; CHECKed).
int64_t RoutedExpertsBlock128ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                          int64_t n_experts, int item_pairs);

// y [T, D] = the routed experts of l (its x, experts, weights, swiglu_limit) on FP8 tensor cores;
// overwritten. With `copies` (device [l.n_experts]) the GEMMs read the e4m3 copies; with
// copies == nullptr they read l.table's MXFP4 bytes and build the e4m3 operands in registers
// (k_moe_block128_rs.cu: every scale pointer of l.table 4-byte aligned, the caller's check).
// Both give the numerics above; the register path scales each row by its largest ue8m0 byte
// (row_smax: ExpertRowScaleMax of l.table's current bytes made by the caller -- a byte below a
// row's true maximum gives wrong results -- or null: made into the scratch at every call, one
// launch more), so its operands are exact while a row's 32-value scales
// lie within 14 octaves of the row's largest (the copies: of their 128 x 128 block's largest;
// trained weights satisfy both). Launches: quantise x, group the pairs, pack, up GEMM,
// SwiGLU + quantise, pack, down GEMM, combine the slots (graph-capturable: grid sizes depend on
// the shapes only). An expert id outside [0, n_experts) sets kErrExpertOutOfRange and makes its
// token's row NaN. cudaErrorInvalidValue when not applicable, for weights other than MXFP4,
// with neither copies nor l.table, or x not 16-byte aligned. (l.table's data pointers must be
// 16-byte aligned, like every MXFP4 kernel's.) Items of item_pairs pairs (64, 96 or 128, else
// cudaErrorInvalidValue; or kBlock128DecodeItemPairs with copies == nullptr, where
// RoutedExpertsBlock128DecodeApplicable replaces RoutedExpertsBlock128Applicable); scratch holds
// RoutedExpertsBlock128ScratchBytes(..., item_pairs).
cudaError_t RoutedExpertsBlock128(const RoutedExpertsLaunch& l, int item_pairs,
                                  const ExpertBlock128Pointers* copies, const uint8_t* row_smax,
                                  void* scratch, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
