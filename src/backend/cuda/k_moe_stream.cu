// The weight-streaming expert GEMM of RoutedExpertsBf16 for decode-sized items (<= 32 pairs
// per item; 8 / 16 at the default threshold), on the warp core of stream_mma.cuh: each expert's
// weight bytes are read once per item straight into registers, dequantised exactly to bf16 (scales
// folded in) and summed in fp32 by mma.sync m16n8k16 against the item's activations staged in
// shared memory. Same numbers as the wgmma kernel (k_moe_bf16.cu) up to the fp32 summation order.
// Every output is 0 + S_0 + ... + S_7, the sums of kSplitParts K parts (a function of K only) in
// part order (moe_bf16_internal.cuh: THE K SPLIT), in both kernels here: the CHAIN kernel (each
// warp owns 16 rows and walks all the parts in turn, folding each part's MMA chain into per-lane
// totals) and the SPLIT kernel for small grids (the warps of a block share 16 rows, one K part
// each, their sums added in part order through shared memory). So a pair's result does not depend
// on the other pairs of its item, on the item width (8, 16 or 32; split: 8 only) or on the kernel
// and shape the table picks by the grid.
//
// Chain kernel block: kWarps warps = 16 kWarps consecutive weight rows of one matrix part (W1, W3
// or W2; 128 divides I and D) x one item; grid (rows / (16 kWarps), max items). The shape (warps,
// blocks per SM, loads in flight, slice length) is one of the compiled kStreamShapes
// (moe_bf16_internal.cuh), picked per launch by kDefaultStreamTiers or by the environment
// (DEEPINFER_EXPERTS_STREAM_VARIANT=<name>, read on every call: the sweep of
// cuda_moe_stream_test's DISABLED_SweepVariants). No shape changes the bits. Before the
// sweep: 8 warps (128 rows halve the activation re-reads from L2 against 64: each block stages the
// item's rows once, 2 x 16 x K bytes at 16 pairs against 128 x K / 2 weight bytes); grids of
// <= 512 such blocks (B <= ~4) 2 warps, as the dequantisation makes an SM's time proportional
// to its warps and one partial wave (B = 1: 216 blocks of 8 warps on 132 SMs) leaves some SMs
// 16 warps and others 8 (2-warp blocks: 14 to 12). The sweep (H200, run 54) showed 8-warp blocks
// faster at every grid (T = 1: 56.9 us against 90.8 us in 2-warp blocks): one row now.
//
// Roofline (V4.1-Flash decode, 384 experts of 3 x [2304 x 5120] MXFP4 = 18.9 MB, top-6):
// B = 1: 6 experts, 113 MB per layer; B = 32: ~150 experts, 2.85 GB per layer (25 us and
// 630 us at 4.5 TB/s). ptxas (sm_90a): 128 registers at 8 and 16 tokens (kPF 4), no spills:
// two blocks (16 warps) per SM, 64 KiB of weight loads in flight per SM. The K-part folding
// (PartFolder) adds a part test per step (expected ~2 instructions of ~173) and per part 4 kNT
// shared-memory read-add-writes per lane (7 folds per K).
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
  static constexpr int kTotalFloats = 4 * kNT * 32;  // per warp: the K parts' running sums
  static constexpr int kSmemBytes = Stage::kSmemBytes + kWarps * kTotalFloats * 4;
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

  // The K parts' sums (moe_bf16_internal.cuh: kSplitParts) folded in part order into the lane's
  // totals in shared memory (after the activation slices).
  float acc[kNT][4] = {};
  const int n_steps = static_cast<int>(K / sm::kStepK);
  float* totals = reinterpret_cast<float*>(smem + S::Stage::kSmemBytes) + warp * S::kTotalFloats;
  sm::PartFolder<kNT, kSplitParts> folder(totals + lane, n_steps);
  // One token tile folds before the MMAs (ptxas keeps interleaving a step's MMA chain with the
  // next step's dequantisation, no spills); wider ones after them (before: spills at 16 pairs).
  sm::StreamBlockRows<sm::StreamFormat::kMxFp4, kNT, kPF, kSlice, S::kThreads>(
      w, n_steps, act_row, smem, acc,
      [&](int step) {
        if constexpr (kNT == 1) folder.FoldBefore(step, acc);
      },
      [&](int step) {
        if constexpr (kNT > 1) folder.FoldAfter(step, acc);
      });
  folder.Finish(acc);

  // acc[nt][e]: row v0 + g (+ 8 for e >= 2), token 8 nt + 2 c (+ 1 for odd e).
  const int g = lane / 4, c = lane % 4;
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t v = v0 + g + (e >= 2 ? 8 : 0);
      const int tok = 8 * nt + 2 * c + (e & 1);
      if (v < n_rows && tok < item.count) {
        a.out[int64_t{pairs[tok]} * n_rows + v] = totals[(4 * nt + e) * 32 + lane];
      }
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
  constexpr int kSmem = S::kSmemBytes;
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (e != cudaSuccess) return e;
  }
  return pdl::Launch(kernel, grid, S::kThreads, kSmem, stream, a);
}

// --- the split kernel (moe_bf16_internal.cuh: THE K SPLIT) ---------------------------------
//
// Block: kWarps = kSplitWarps x kGroups warps; warp (r = warp / kSplitWarps, w = warp %
// kSplitWarps) owns the 16 rows blockIdx.x * 16 kGroups + 16 r .. + 15 and the kPPW =
// kSplitParts / kSplitWarps consecutive K parts w kPPW .. (steps [p n / kSplitParts, (p + 1) n /
// kSplitParts) for part p, n = K / 128: at most 8 steps a part at K <= 8192). The block stages
// each warp range's activations once (the item's pairs only: token columns past item.count hold
// stale shared bytes, which reach only their own MMA columns, never stored; the copies issued
// right after the warp's first kPF weight loads), one __syncthreads, then every warp streams its
// rows over its parts with the chain core (stream_mma.cuh: StreamRows, one slice), storing each
// part's fp32 sum (one MMA chain from zero) in the part's slot in shared memory (PartSlots), and
// after a second barrier each output is 0 + slot 0 + slot 1 + ... in part order (fixed, no
// atomics).
//
// Shared memory: kSplitParts regions of ceil(n / kSplitParts) steps (ActStage layout at kNT =
// 1: 2 KiB per step; a warp's range of parts is contiguous), then the slots [row group][part][e]
// [lane] (kGroups x 4 KiB). V4.1 shape: gate/up K 5120 (40 steps, 5 per part) 80 KiB, down
// K 2304 (18 steps, 2-3 per part) 48 KiB, + 4 KiB of slots per 16 rows.
//
// Expected at B = 1 (V4.1 shape, not measured; k8w8pf4): the same weight bytes and
// dequantisation work as the chain kernel, but in 2016 (gate/up) / 2240 (down) blocks of 5 / 2-3
// steps per warp instead of 252 / 280 blocks of 40 / 18 steps (about 1 round trip to DRAM in
// flight per warp instead of 10, and no partial wave: 7.6 waves of 2 blocks per SM); by the
// issue count (~15 us at full issue for gate/up) ~20 us for gate/up and ~10 us for down at ~70%
// issue, if the per-block prologue (item, table, pairs: dependent loads) and the two barriers
// overlap with the other resident block. k4w8pf4 / k2w8pf4 (2 / 4 parts a warp, 32 / 64 rows a
// block) trade chain length for fewer blocks and activation re-reads.
template <int kWarps, int kMinBlocks, int kPF, int kSplitWarps>
struct SplitShape {
  static_assert(kSplitParts % kSplitWarps == 0 && kWarps % kSplitWarps == 0, "whole row groups");
  static constexpr int kThreads = 32 * kWarps, kGroups = kWarps / kSplitWarps;
  static constexpr int kPPW = kSplitParts / kSplitWarps;  // parts a warp walks
  static constexpr int kBlockRows = 16 * kGroups;
  static constexpr int kMaxPartSteps = 8;               // K <= 8192 (RoutedExpertsBf16Applicable)
  using Stage = sm::ActStage<1, kPPW * kMaxPartSteps>;  // one slice holds a warp's parts
  static constexpr int kStepBytes = Stage::kStepBytes;
  static constexpr int kSlotBytes = kGroups * kSplitParts * 4 * 32 * 4;
  static constexpr int kMaxSmemBytes = kSplitParts * kMaxPartSteps * kStepBytes + kSlotBytes;

  __host__ __device__ static int PartSteps(int n_steps) {
    return (n_steps + kSplitParts - 1) / kSplitParts;
  }
  static int SmemBytes(int n_steps) {
    return kSplitParts * PartSteps(n_steps) * kStepBytes + kSlotBytes;
  }
};

__device__ __forceinline__ int PartBegin(int p, int n_steps) { return p * n_steps / kSplitParts; }

// A warp's parts p0 .. p0 + kPPW - 1 (steps [first, last)): each non-empty part's sum is stored
// in its slot (this lane's floats at slots[(4 p + e) * 32], p absolute), empty parts keep +0.
// Store(step, acc) before the MMAs of every step (relative to first) stores and zeroes acc when
// a new part starts there; Finish(acc) stores the last part.
template <int kPPW>
struct PartSlots {
  float* slots;
  int n_steps, first, cur, end;  // cur: the part being summed; end: its end (relative)

  __device__ PartSlots(float* lane_slots, int n, int p0) : slots(lane_slots), n_steps(n) {
    first = PartBegin(p0, n_steps);
#pragma unroll
    for (int i = 0; i < 4 * kPPW; ++i) slots[32 * (4 * p0 + i)] = 0.0f;
    cur = p0;
    while (cur < p0 + kPPW - 1 && PartBegin(cur + 1, n_steps) == PartBegin(cur, n_steps)) ++cur;
    end = PartBegin(cur + 1, n_steps) - first;
  }

  __device__ __forceinline__ void Put(float (&acc)[1][4]) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      slots[32 * (4 * cur + e)] = acc[0][e];
      acc[0][e] = 0.0f;
    }
  }

  __device__ __forceinline__ void Store(int step, float (&acc)[1][4]) {
    if constexpr (kPPW > 1) {
      if (step != end) return;  // warp-uniform; steps remain, so a non-empty part follows
      Put(acc);
      do {
        ++cur;
      } while (PartBegin(cur + 1, n_steps) == PartBegin(cur, n_steps));
      end = PartBegin(cur + 1, n_steps) - first;
    }
  }

  __device__ __forceinline__ void Finish(float (&acc)[1][4]) { Put(acc); }
};

// Cp.async copies of the item's activations for K steps [first, last) into `part_act` (ActStage
// layout, kNT 1): token n's 16-byte chunk (step s, j, c) at s * kStepBytes + j * 512 + (4 n + c)
// * 16. The kGroups warps of a range share its copies (row group r takes every kGroups-th).
template <int kGroups, int kStepBytes>
__device__ __forceinline__ void StagePart(const GemmArgs& a, const GemmItem& item, int64_t K,
                                          int first, int last, int r, int lane, char* part_act) {
  const int tokens = min(item.count, 8);
  const unsigned chunks = static_cast<unsigned>(last - first) * 16;
  // Lane n < tokens: token n's activation row (one load and one division for all tokens).
  const unsigned act_div = a.up ? static_cast<unsigned>(a.k) : 1u;
  const unsigned lane_row =
      lane < tokens ? static_cast<unsigned>(a.order[item.start + lane]) / act_div : 0u;
  for (int n = 0; n < tokens; ++n) {
    const unsigned act_row = __shfl_sync(0xFFFFFFFFu, lane_row, n);
    const uint16_t* row = a.act + int64_t{act_row} * K + first * sm::kStepK;
    for (unsigned q = lane + 32 * r; q < chunks; q += 32 * kGroups) {
      const unsigned step = q / 16, j = (q / 4) % 4, c = q % 4;
      mma::CpAsync16(part_act + step * kStepBytes + j * 512 + (4 * n + c) * 16,
                     row + step * sm::kStepK + 32 * c + 8 * j);
    }
  }
  mma::CpAsyncCommit();
}

template <int kWarps, int kMinBlocks, int kPF, int kSplitWarps>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) ExpertSplitGemmKernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  using S = SplitShape<kWarps, kMinBlocks, kPF, kSplitWarps>;
  extern __shared__ __align__(16) char smem[];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const GemmItem item = a.items[blockIdx.y];
  if (item.count <= 0) return;  // a direct item of an out-of-range id (k_moe_bf16.cu)
  const ExpertPointers& ep = a.table[item.expert];
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int r = warp / kSplitWarps, p0 = (warp % kSplitWarps) * S::kPPW;
  const int64_t n_rows = a.up ? 2 * a.I : a.D, part_rows = a.up ? a.I : a.D;
  const int64_t K = a.up ? a.D : a.I;
  const int n_steps = static_cast<int>(K / sm::kStepK);
  const int first = PartBegin(p0, n_steps), last = PartBegin(p0 + S::kPPW, n_steps);
  const int part_bytes = S::PartSteps(n_steps) * S::kStepBytes;
  char* range_act = smem + p0 * part_bytes;
  float* slots = reinterpret_cast<float*>(smem + kSplitParts * part_bytes);  // [r][p][e][lane]

  // The warp's 16 rows lie in one part (part_rows % 16 == 0): W1 / W3 for up, W2 for down. (Their
  // pointers first: the table load then overlaps the staging's pair loads.)
  const int64_t v0 = int64_t{blockIdx.x} * S::kBlockRows + 16 * r;
  const bool second = v0 >= part_rows;
  const int m = a.up ? (second ? 2 : 0) : 1;
  const sm::WarpRows w = sm::MxFp4WarpRows(ep.data[m], ep.scale[m], K, second ? v0 - part_rows : v0,
                                           part_rows, int64_t{first} * sm::kStepK, lane);
  auto stage = [&] {
    StagePart<S::kGroups, S::kStepBytes>(a, item, K, first, last, r, lane, range_act);
  };
  // Every thread passes exactly one barrier here: in StreamRows before its first MMAs (its
  // weight loads, then its activation copies issued), or directly when its parts are empty
  // (n_steps < kSplitParts).
  auto staged = [](int) {
    mma::CpAsyncWaitAll();
    __syncthreads();
  };
  PartSlots<S::kPPW> part_slots(slots + r * kSplitParts * 128 + lane, n_steps, p0);
  float acc[1][4] = {};
  if (last > first) {
    sm::StreamRows<sm::StreamFormat::kMxFp4, 1, kPF, S::kPPW * S::kMaxPartSteps>(
        w, last - first, range_act, staged, acc, [&](int step) { part_slots.Store(step, acc); },
        [](int) {}, stage);
    part_slots.Finish(acc);
  } else {
    staged(0);  // an empty range: nothing to stage or stream
  }
  __syncthreads();

  // Output (r, e, lane) = 0 + slot 0 + slot 1 + ... of row group r: sm::PartFolder's fp32
  // operations. An empty part's slot (+0) is an addition PartFolder skips: the same bits, as the
  // sum starts at +0 and so is never -0.
  const int32_t* pairs = a.order + item.start;
  for (int i = tid; i < S::kGroups * 128; i += S::kThreads) {
    const int out_r = i / 128, e = (i / 32) % 4, out_lane = i % 32;
    const int tok = 2 * (out_lane % 4) + (e & 1);
    if (tok >= item.count) continue;
    const float* src = slots + (out_r * kSplitParts * 4 + e) * 32 + out_lane;
    float sum = 0.0f;
#pragma unroll
    for (int p = 0; p < kSplitParts; ++p) sum += src[p * 128];
    const int64_t v =
        int64_t{blockIdx.x} * S::kBlockRows + 16 * out_r + out_lane / 4 + (e >= 2 ? 8 : 0);
    if (v < n_rows) a.out[int64_t{pairs[tok]} * n_rows + v] = sum;
  }
}

template <int kWarps, int kMinBlocks, int kPF, int kSplitWarps>
cudaError_t LaunchSplit(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  using S = SplitShape<kWarps, kMinBlocks, kPF, kSplitWarps>;
  constexpr auto kernel = ExpertSplitGemmKernel<kWarps, kMinBlocks, kPF, kSplitWarps>;
  const int64_t rows = a.up ? 2 * a.I : a.D, K = a.up ? a.D : a.I;
  if (K % sm::kStepK != 0 || K / sm::kStepK > kSplitParts * S::kMaxPartSteps) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>((rows + S::kBlockRows - 1) / S::kBlockRows),
                  static_cast<unsigned>(max_items));
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, S::kMaxSmemBytes);
  if (e != cudaSuccess) return e;
  const int smem = S::SmemBytes(static_cast<int>(K / sm::kStepK));
  return pdl::Launch(kernel, grid, S::kThreads, static_cast<size_t>(smem), stream, a);
}

// Launches kStreamShapes[shape] (>= kIndex) for items of 8 kNT pairs; only shapes that fit
// kNT are instantiated.
template <int kNT, int kIndex = 0>
cudaError_t LaunchShape(int shape, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  if constexpr (kIndex < kNumStreamShapes) {
    constexpr StreamShape s = kStreamShapes[kIndex];
    if (shape == kIndex) {
      if constexpr (!StreamShapeFits(s, kNT)) {
        return cudaErrorInvalidValue;
      } else if constexpr (s.split_warps != 0) {
        return LaunchSplit<s.warps, s.min_blocks, s.prefetch, s.split_warps>(a, max_items, stream);
      } else {
        return Launch<kNT, s.warps, s.min_blocks, s.prefetch, s.slice>(a, max_items, stream);
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
  return StreamShapeFits(last, 1) && StreamShapeFits(last, 2) && StreamShapeFits(last, 4);
}
static_assert(DefaultTableValid(), "kDefaultStreamTiers: known shapes, the last fits every width");

}  // namespace

int PickStreamShape(int nt, int64_t grid128) {
  const char* env = std::getenv(kStreamVariantEnv);
  const int chosen = env != nullptr ? FindStreamShape(env) : -1;
  if (chosen >= 0 && StreamShapeFits(kStreamShapes[chosen], nt)) return chosen;
  for (const StreamTier& t : kDefaultStreamTiers) {
    if (grid128 <= t.max_grid && StreamShapeFits(kStreamShapes[t.shape], nt)) return t.shape;
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
