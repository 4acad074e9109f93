// The weight-streaming expert GEMM of RoutedExpertsBf16 for decode-sized items (<= 32 pairs
// per item; 8 / 16 at the default threshold), on the warp core of stream_mma.cuh: each expert's
// weight bytes are read once per item straight into registers, dequantised exactly to bf16 (scales
// folded in) and summed in fp32 by mma.sync m16n8k16 against the item's activations staged in
// shared memory. Same numbers as the wgmma kernel (k_moe_bf16.cu) up to the fp32 summation order; a
// pair's result does not depend on the other pairs of its item or on the item width (8, 16 or 32).
//
// Block: kWarps warps = 16 kWarps consecutive weight rows of one matrix part (W1, W3 or W2; 128
// divides I and D) x one item; grid (rows / (16 kWarps), max items). The shape (warps, blocks
// per SM, loads in flight, slice length) is one of the compiled kStreamShapes
// (moe_bf16_internal.cuh), picked per launch by kDefaultStreamTiers or by the environment
// (DEEPINFER_EXPERTS_STREAM_VARIANT=<name>, read on every call: the sweep of
// cuda_moe_stream_test's DISABLED_SweepVariants). No shape changes the bits. Before the sweep:
// 8 warps (128 rows halve the activation re-reads from L2 against 64: each block stages the
// item's rows once, 2 x 16 x K bytes at 16 pairs against 128 x K / 2 weight bytes); grids of
// <= 512 such blocks (B <= ~4) 2 warps, as the dequantisation makes an SM's time proportional
// to its warps and one partial wave (B = 1: 216 blocks of 8 warps on 132 SMs) leaves some SMs
// 16 warps and others 8 (2-warp blocks: 14 to 12). The sweep (H200, run 54) showed 8-warp blocks
// faster at every grid (T = 1: 56.9 us against 90.8 us in 2-warp blocks). Since run 126 the
// table has two rows of 8 warps: slices of 8 K steps up to B = 32, of 4 above.
//
// Roofline (V4.1-Flash decode, 384 experts of 3 x [2304 x 5120] MXFP4 = 18.9 MB, top-6):
// B = 1: 6 experts, 113 MB per layer; B = 32: ~150 experts, 2.85 GB per layer (25 us and
// 630 us at 4.5 TB/s). ptxas (sm_90a): 127 registers at 8 and 16 tokens (kPF 4), no spills: two
// blocks (16 warps) per SM, 64 KiB of weight loads in flight per SM.
// SASS of the K loop (8 tokens): ~173 warp instructions per step of 1024 weight bytes on the
// fast path (stream_mma.cuh header: 136 of them dequantise), ~182 at 16 tokens; at ~70%
// issue on 132 SMs x 4 schedulers x 1.75 GHz that is ~3.8 TB/s, at 50% ~2.7 TB/s (the FP8
// tile: 1.3 TB/s at B = 1, 2.5 TB/s at B = 32). B = 1 is also imbalanced: 216 blocks of
// the gate/up GEMM on 132 SMs (some hold two, some one).
// MEASURED (H200, one layer of RoutedExperts, DISABLED_Bench, before the shape sweep): T 1
// 68.7 us (1.64 TB/s of the distinct experts' bytes), T 8 329 us (2.63 TB/s), T 32 944 us
// (2.85 TB/s), T 256 2827 us (2.51 TB/s): ~46% issue at 2.85 TB/s by the SASS count, so
// probably latency-bound (loads in flight, the slice barrier), hence the shape sweep.
// After the sweep (8-warp blocks everywhere, run 54): T 1 56.9 us, T 8 297, T 32 950,
// T 256 2608-2832 (run to run). ncu at B = 32 (run 55): the gate/up GEMM 587 us for 2.25 GB
// read (3.84 TB/s, 80% of the DRAM peak, 62% issue active, 25% of warp slots active; stalls
// per issue: wait 1.46, long scoreboard 0.99, math-pipe throttle 0.74, barrier 0.63), the
// down GEMM 309 us for 1.05 GB (3.4 TB/s). The bytes read are ~10% above one read per
// distinct expert: experts with more than 8 pairs are read once per 8-pair item (items of up
// to 32 pairs computing only the tiles with pairs were slower overall: run 58, reverted).
// Session 17 (run 150): popular experts (more than 8 pairs) in 16- or 32-pair items of a second
// launch of each GEMM, every other expert in its one 8-pair item (a two-list grouping): no gain
// in the 4-layer decode step (ms, two interleaved rounds; one width / 32 / 16: B=32 5.92, 5.91 /
// 6.02, 5.91 / 5.96, 6.05; B=256 16.04, 16.05 / 16.50, 16.35 / 15.81, 16.02): an expert's second
// 8-pair item re-reads its weights from L2, not HBM. Not kept.
// Session 22 (runs 186-190): the DRAM bytes above one read per distinct expert (12-35%, ncu) came
// from the weight loads' 256-byte L2 prefetch, whose later sectors were fetched again; the loads
// now ask for 128-byte lines (stream_mma.cuh: kL2Prefetch; step -1.5 to -2.5% at B = 8-256), and
// w8pf4s8 serves the large grids too (moe_bf16_internal.cuh).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <iterator>

#include "backend/cuda/moe_bf16_internal.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_mma.cuh"

namespace deepinfer::backend::cuda::kernels::moe_bf16 {
namespace {

namespace sm = stream_mma;

// One compiled shape (moe_bf16_internal.cuh: StreamShape) for items of 8 kNT pairs.
template <int kNT, int kWarps, int kMinBlocks, int kPF, int kSlice>
struct Shape {
  static_assert(kWarps % kNT == 0, "a staging thread copies one token row (StreamShapeFits)");
  // The slice barrier sits at a fixed step of the unrolled loop of kPF steps (kPF a multiple of
  // kSlice; with 3 at 16 tokens ptxas made three copies of the slice code) or every kSlice / kPF
  // loops.
  static_assert(kPF % kSlice == 0 || kSlice % kPF == 0, "slice starts at a loop boundary");
  static constexpr int kThreads = 32 * kWarps, kBlockRows = 16 * kWarps;
  using Stage = sm::ActStage<kNT, kSlice>;
};

template <int kNT, int kWarps, int kMinBlocks, int kPF, int kSlice>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) ExpertStreamGemmKernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  using S = Shape<kNT, kWarps, kMinBlocks, kPF, kSlice>;
  extern __shared__ __align__(16) char smem[];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const GemmItem item = a.items[blockIdx.y];
  if (item.count <= 0) return;  // a direct item of an out-of-range id (k_moe_bf16.cu)
  const ExpertPointers& ep = a.table[item.expert];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int64_t n_rows = a.up ? 2 * a.I : a.D, part_rows = a.up ? a.I : a.D;
  const int64_t K = a.up ? a.D : a.I;
  // The warp's 16 rows lie in one part (part_rows % 16 == 0): W1 / W3 for up, W2 for down.
  const int64_t v0 = int64_t{blockIdx.x} * S::kBlockRows + 16 * warp;
  const bool second = v0 >= part_rows;
  const int m = a.up ? (second ? 2 : 0) : 1;
  const sm::WarpRows w = sm::MxFp4WarpRows(ep.data[m], ep.scale[m], K, second ? v0 - part_rows : v0,
                                           part_rows, 0, lane);
  const int32_t* pairs = a.order + item.start;
  const int act_div = a.up ? static_cast<int>(a.k) : 1;
  const int n = S::Stage::Token(tid);
  const uint16_t* act_row = n < item.count ? a.act + int64_t{pairs[n] / act_div} * K : nullptr;

  float acc[kNT][4] = {};
  sm::StreamBlockRows<sm::StreamFormat::kMxFp4, kNT, kPF, kSlice, S::kThreads>(
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

template <int kNT, int kWarps, int kMinBlocks, int kPF, int kSlice>
cudaError_t Launch(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  using S = Shape<kNT, kWarps, kMinBlocks, kPF, kSlice>;
  constexpr auto kernel = ExpertStreamGemmKernel<kNT, kWarps, kMinBlocks, kPF, kSlice>;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>((rows + S::kBlockRows - 1) / S::kBlockRows),
                  static_cast<unsigned>(max_items));
  constexpr int kSmem = S::Stage::kSmemBytes;
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, kSmem);
    if (e != cudaSuccess) return e;
  }
  return pdl::Launch(kernel, grid, S::kThreads, kSmem, stream, a);
}

// Launches kStreamShapes[shape] (>= kIndex) for items of 8 kNT pairs; only shapes that fit
// kNT are instantiated.
template <int kNT, int kIndex = 0>
cudaError_t LaunchShape(int shape, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  if constexpr (kIndex < kNumStreamShapes) {
    constexpr StreamShape s = kStreamShapes[kIndex];
    if (shape == kIndex) {
      if constexpr (StreamShapeFits(s, kNT)) {
        return Launch<kNT, s.warps, s.min_blocks, s.prefetch, s.slice>(a, max_items, stream);
      } else {
        return cudaErrorInvalidValue;
      }
    }
    return LaunchShape<kNT, kIndex + 1>(shape, a, max_items, stream);
  } else {
    return cudaErrorInvalidValue;
  }
}

constexpr bool DefaultTableValid() {
  for (const StreamTier& t : kDefaultStreamTiers) {
    if (t.shape < 0 || t.shape >= kNumStreamShapes) return false;
  }
  const StreamShape& last =
      kStreamShapes[kDefaultStreamTiers[std::size(kDefaultStreamTiers) - 1].shape];
  return kDefaultStreamTiers[std::size(kDefaultStreamTiers) - 1].max_nt >= 4 &&
         StreamShapeFits(last, 1) && StreamShapeFits(last, 2) && StreamShapeFits(last, 4);
}
static_assert(DefaultTableValid(), "kDefaultStreamTiers: known shapes, the last fits every width");

}  // namespace

int PickStreamShape(int nt, int64_t grid128) {
  const char* env = std::getenv(kStreamVariantEnv);
  const int chosen = env != nullptr ? FindStreamShape(env) : -1;
  if (chosen >= 0 && StreamShapeFits(kStreamShapes[chosen], nt)) return chosen;
  for (const StreamTier& t : kDefaultStreamTiers) {
    if (grid128 <= t.max_grid && nt <= t.max_nt && StreamShapeFits(kStreamShapes[t.shape], nt)) {
      return t.shape;
    }
  }
  return kDefaultStreamTiers[std::size(kDefaultStreamTiers) - 1].shape;
}

cudaError_t LaunchStreamGemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  if (max_items <= 0) return cudaSuccess;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const int64_t grid128 = max_items * ((rows + 127) / 128);
  if (bn == 8) return LaunchShape<1>(PickStreamShape(1, grid128), a, max_items, stream);
  if (bn == 16) return LaunchShape<2>(PickStreamShape(2, grid128), a, max_items, stream);
  if (bn == 32) return LaunchShape<4>(PickStreamShape(4, grid128), a, max_items, stream);
  return cudaErrorInvalidValue;
}

}  // namespace deepinfer::backend::cuda::kernels::moe_bf16
