// The weight-streaming expert GEMM of RoutedExpertsBf16 for decode-sized items (<= 32 pairs
// per item; 8 / 16 at the default threshold), on the warp core of stream_mma.cuh: each expert's
// weight bytes are read once per item straight into registers, dequantised exactly to bf16 (scales
// folded in) and summed in fp32 by mma.sync m16n8k16 against the item's activations staged in
// shared memory. Same numbers as the wgmma kernel (k_moe_bf16.cu) up to the fp32 summation order; a
// pair's result does not depend on the other pairs of its item or on the item width (8, 16 or 32).
//
// Block: 8 warps = 128 consecutive weight rows of one matrix part (W1, W3 or W2; 128 divides
// I and D) x one item; grid (rows / 128, max items). 128 rows per block halve the activation
// re-reads from L2 against 64 (each block stages the item's rows once: 2 x 16 x K bytes at
// 16 pairs against 128 x K / 2 weight bytes). Small grids (B <= ~4) of items of <= 16 pairs
// take 2-warp blocks instead (kSmallGridBlocks).
//
// Roofline (V4.1-Flash decode, 384 experts of 3 x [2304 x 5120] MXFP4 = 18.9 MB, top-6):
// B = 1: 6 experts, 113 MB per layer; B = 32: ~150 experts, 2.85 GB per layer (25 us and
// 630 us at 4.5 TB/s). ptxas (sm_90a): 127 registers at 8 and 16 tokens (kPF 4), no spills: two
// blocks (16 warps) per SM, 64 KiB of weight loads in flight per SM.
// SASS of the K loop (8 tokens): ~173 warp instructions per step of 1024 weight bytes on the
// fast path (stream_mma.cuh header: 136 of them dequantise), ~182 at 16 tokens; at ~70%
// issue on 132 SMs x 4 schedulers x 1.75 GHz that is ~3.8 TB/s, at 50% ~2.7 TB/s (the FP8
// tile: 1.3 TB/s at B = 1, 2.5 TB/s at B = 32). B = 1 is also imbalanced: 216 blocks of
// the gate/up GEMM on 132 SMs (some hold two, some one). NOT MEASURED YET (no GPU in the
// session that wrote it): cuda_moe_stream_test's DISABLED_Bench prints the numbers.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/moe_bf16_internal.cuh"
#include "backend/cuda/stream_mma.cuh"

namespace deepinfer::backend::cuda::kernels::moe_bf16 {
namespace {

namespace sm = stream_mma;

constexpr int kSliceSteps = 4;  // K values staged per slice: 512

// Warps per block: 8 (128 rows), or 2 (32 rows) for grids of at most kSmallGridBlocks
// 8-warp blocks. The dequantisation makes an SM's time proportional to its warps, and a grid
// of one partial wave (B = 1: 216 blocks of 8 warps on 132 SMs) leaves some SMs 16 warps and
// others 8; in 2-warp blocks the spread is 14 to 12. Larger grids take 8-warp blocks: each
// block stages its item's activations once, so 2-warp blocks would read them 4x as often.
constexpr int64_t kSmallGridBlocks = 512;

template <int kWarps>
constexpr int kBlocksPerSm = 16 / kWarps;  // at <= 128 registers

// Weight loads in flight per warp (steps of 1 KiB). A multiple of kSliceSteps, so that the
// slice barrier sits at a fixed place of the unrolled loop (with 3 at 16 tokens, ptxas made
// three copies of the slice code).
constexpr int kPrefetch = 4;
static_assert(kPrefetch % kSliceSteps == 0, "slice starts at the first step of the unrolled loop");

template <int kNT>
using Stage = sm::ActStage<kNT, kSliceSteps>;

template <int kNT, int kWarps>
__global__ void __launch_bounds__(32 * kWarps, kBlocksPerSm<kWarps>)
    ExpertStreamGemmKernel(GemmArgs a) {
  constexpr int kThreads = 32 * kWarps, kBlockRows = 16 * kWarps;
  extern __shared__ __align__(16) char smem[];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const GemmItem item = a.items[blockIdx.y];
  if (item.count <= 0) return;  // a direct item of an out-of-range id (k_moe_bf16.cu)
  const ExpertPointers& ep = a.table[item.expert];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t n_rows = a.up ? 2 * a.I : a.D, part_rows = a.up ? a.I : a.D;
  const int64_t K = a.up ? a.D : a.I;
  // The warp's 16 rows lie in one part (part_rows % 16 == 0): W1 / W3 for up, W2 for down.
  const int64_t v0 = int64_t{blockIdx.x} * kBlockRows + 16 * warp;
  const bool second = v0 >= part_rows;
  const int m = a.up ? (second ? 2 : 0) : 1;
  const sm::WarpRows w = sm::MxFp4WarpRows(ep.data[m], ep.scale[m], K, second ? v0 - part_rows : v0,
                                           part_rows, 0, lane);
  const int32_t* pairs = a.order + item.start;
  const int act_div = a.up ? static_cast<int>(a.k) : 1;
  const int n = Stage<kNT>::Token(tid);
  const uint16_t* act_row = n < item.count ? a.act + int64_t{pairs[n] / act_div} * K : nullptr;

  float acc[kNT][4] = {};
  sm::StreamBlockRows<sm::StreamFormat::kMxFp4, kNT, kPrefetch, kSliceSteps, kThreads>(
      w, static_cast<int>(K / sm::kStepK), act_row, smem, acc);

  // acc[nt][e]: row v0 + g (+ 8 for e >= 2), token 8 nt + 2 c (+ 1 for odd e).
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t v = v0 + g + (e >= 2 ? 8 : 0);
      const int tok = 8 * nt + 2 * c + (e & 1);
      if (v < n_rows && tok < item.count) a.out[int64_t{pairs[tok]} * n_rows + v] = acc[nt][e];
    }
  }
}

template <int kNT, int kWarps>
cudaError_t Launch(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  const int64_t rows = a.up ? 2 * a.I : a.D;
  constexpr int kBlockRows = 16 * kWarps;
  const dim3 grid(static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows),
                  static_cast<unsigned>(max_items));
  constexpr int kSmem = Stage<kNT>::kSmemBytes;
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(ExpertStreamGemmKernel<kNT, kWarps>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (e != cudaSuccess) return e;
  }
  ExpertStreamGemmKernel<kNT, kWarps><<<grid, 32 * kWarps, kSmem, stream>>>(a);
  return cudaGetLastError();
}

template <int kNT>
cudaError_t Launch(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  const int64_t rows = a.up ? 2 * a.I : a.D;
  if constexpr (kNT <= 2) {  // a 2-warp block stages at most 16 token rows (one per 4 threads)
    if (max_items * ((rows + 127) / 128) <= kSmallGridBlocks) {
      return Launch<kNT, 2>(a, max_items, stream);
    }
  }
  return Launch<kNT, 8>(a, max_items, stream);
}

}  // namespace

cudaError_t LaunchStreamGemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  if (max_items <= 0) return cudaSuccess;
  if (bn == 8) return Launch<1>(a, max_items, stream);
  if (bn == 16) return Launch<2>(a, max_items, stream);
  if (bn == 32) return Launch<4>(a, max_items, stream);
  return cudaErrorInvalidValue;
}

}  // namespace deepinfer::backend::cuda::kernels::moe_bf16
