// LinearStream (k_linear_stream.cu) with its weights fed by the TMA engine (kernels_bulk.h):
// bitwise the same results for T <= 8, another way for the weight bytes to reach registers.
//
// Why. LinearStream loads each lane's 2 x 32 weight bytes per K step with LDG.128 straight into
// registers; at B = 1 it reaches ~2.1-2.7 TB/s of the ~4.5 TB/s HBM ceiling, and every attempt
// to put more loads in flight through the load/store unit (L2 prefetch ahead, a cp.async ring,
// L1 prefetch of x) was slower; ncu: long-scoreboard stalls 3-5 per issue, L1 sectors 3x the
// weight bytes. Here the weights come by cp.async.bulk (one request per row and stage, no
// per-thread L1 traffic), and the activation loads of the 8 - T padding tokens are skipped.
//
// Structure (per warp; the block / split / reduction / output code is LinearStreamKernel<1>'s).
// A warp owns 16 weight rows [r, r + 16) and K steps [s0, s1) (same rows, same split as
// LinearStream). Its shared-memory ring has kStages stages; a stage holds kStageSteps
// consecutive K steps of the 16 rows, row i at i * kPitch (kPitch = kStageSteps * 128 + 16:
// the 16 bytes of padding put rows g and g + 1 on different banks, so the 8 lanes of a
// quarter warp -- rows g, g + 1 x c = 0..3, 16 bytes each -- read 128 distinct bytes of all
// 32 banks: conflict-free LDS.128). Fill j (steps s0 + j * kStageSteps ..) goes to stage
// j % kStages: lane 0 arms the stage's mbarrier with the fill's byte count (expect_tx), lanes
// 0..15 each issue one cp.async.bulk of their row's bytes, which completes the transaction.
// The consumer (the whole warp) waits for the stage's phase, reads a step's 4 x 16 bytes per
// lane (rows g and g + 8, bytes 32c .. 32c + 31: exactly LinearStream's registers), and once
// all steps of the stage are in registers (__syncwarp: no lane reads the stage any more) the
// stage is refilled kStages fills ahead. The first kStages fills are issued before the PDL
// wait (weights are never written by a kernel: allowed by pdl.cuh's contract); the
// activations are read only after it. Scale bytes and activations come by __ldg, one step
// ahead; lanes of tokens n >= T take zeros without loading (the fragment-order contract says
// those units are zeros).
//
// Bits. Per step the same conversion (stream_fp8.cuh, shared with LinearStream) and the same 8 MMAs
// in the same order (m = 0..7) on the same registers; steps ascending; split parts added in part
// order through shared memory; y written as LinearStreamKernel<1> does. So every output equals
// LinearStream's for the same weight shape (the split is LinearStreamSplit's).
//
// Shared memory (kDefault = 3 stages x 2 steps): 8 warps x 3 x 16 x 272 bytes + 24 barriers =
// 104640 bytes dynamic + 4 KiB static partial sums: two blocks (16 warps) per SM, 12 KiB of
// weight in flight per warp.
//
// MEASURED (H200, run 119; bitwise LinearStream in every test, 230 of 230 backend tests): not
// faster where it matters. Per call on ready fragments (DISABLED_Bench, T = 1; LinearStream's
// figure includes its quantisation launch): small weights gain (wq_a 5.0 against 9.7 us,
// indexer wq_b 4.7 against 8.7, shared w2 6.0 against 8.6), large ones lose (wo_b 18.8 against
// 17.9, engram wkv 59.3 against 44.7 us: 2.66 against 3.52 TB/s). In the decode step
// (DEEPINFER_LINEAR_STREAM_BULK=1) B = 1 1.59 against 1.45 ms, B = 8 3.10 against 2.75. The
// 16 per-row copies per warp and stage compile to a serial loop (~10 instructions each), and
// each copy moves only 256 bytes; hence the tensor-map rings below (one copy per stage), also
// slower in the step. Kept, off by default, for the measurements.
//
// Tensor-map rings (BulkRing::kTensor*; DEEPINFER_LINEAR_BULK_TMA2D=1/2/3 makes one the
// default). The same kernel with each stage filled by ONE cp.async.bulk.tensor.3d issued by
// lane 0 (instead of 16 per-row copies): a box of 16 rows x kStageSteps K steps of a 3D
// uint8 view of the weight, dims {128 bytes of a step, row, step}, byte strides {K, 128}
// (rows and steps swapped relative to memory order, so the box lands step-major: step u of a
// stage at u * 2048, row i of it at i * 128). The map's 128-byte swizzle (unit h of line i at
// unit h ^ (i % 8); stages 1024-byte aligned) makes the lanes' LDS.128 conflict-free without
// padding (LaneOffset). A warp's last stage, when fewer than kStageSteps steps are left, is
// filled by one-step boxes (a second map), so no byte outside the warp's steps is read. The
// maps are encoded on the host (cuTensorMapEncodeTiled through cudaGetDriverEntryPointByVersion:
// no libcuda link), cached per view (kernels_bulk.h: BulkTensorView) and passed in the
// __grid_constant__ parameter (4 maps of 128 bytes per target: 2 KiB). Registers, MMA order, split
// and output are the bulk kernel's: same bits as LinearStream. Shared memory: kTensor3x2 and
// kTensor6x1 8 x 12 KiB + 1 KiB alignment (two blocks per SM), kTensor2x4 8 x 16 KiB (one block per
// SM). The tensor rings' waits trap after ~2 s instead of hanging (kept as a guard).
// MEASURED (H200; kernel bench of run 122 with direct launches, bitwise LinearStream): on the
// large weights the block-box ring is the fastest or within 0.1 us of kTensor3x2 (T=1: wq_b
// 12.5 us, wo_b 16.7 against the row ring's 13.9 and 18.8; LinearStream with its quantisation
// 15.0 and 17.8) but slower than LinearStream on the largest (engram wkv 50.3 against 44.6
// us); kTensor2x4 is the slowest ring on the large weights. In the decode step none beat
// LinearStream: B=1 1.56-1.67 against 1.45-1.48 ms (run 122, CUDA graphs), 1.55-1.57 against
// 1.44-1.45 (run 125), 1.64-1.66 against 1.56 ms (run 123, op by op).
//
// Block-box ring (kTensorBlock3x2; launches whose targets all have split 1, else kTensor3x2).
// All 8 warps of a block walk the same K steps, so the block shares ONE ring of 3 stages x 2
// steps x 128 rows (the same 96 KiB): thread 0 fills a stage with one box of 128 rows (32
// KiB; rows past the target's last read as zeros and are not used), every warp waits on the
// stage's "full" barrier, reads its 16 lines (warp w: lines 16 w .. 16 w + 15 of each step,
// same swizzle) and arrives on the stage's "empty" barrier (one arrival per active warp);
// thread 0 waits for "empty" before refilling. 8 times fewer copies than kTensor3x2.
#include <cuda.h>  // CUtensorMap only (the maps are encoded in tensor_map_cache.cc)
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/kernels_bulk.h"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_fp8.cuh"
#include "backend/cuda/tensor_map_cache.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

using stream_fp8::ScaleFactors;
using stream_fp8::StepFactors;
using stream_fp8::WeightFragment;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStepK = 128;  // K values (= weight bytes of a row) per warp step
constexpr int kWarpRows = 16;

// --- the step's math (stream_fp8.cuh, shared with k_linear_stream.cu) -------------------

// The 8 MMAs of one step for one token tile: weight words w, scale byte S, the step's 4 B
// units x (unit q feeds MMAs 2q (x, y) and 2q + 1 (z, w)).
__device__ __forceinline__ void ComputeStep(const uint4 (&w)[4], uint32_t S, const uint4 (&x)[4],
                                            float (&acc)[4]) {
  const ScaleFactors f = StepFactors(S);
#pragma unroll
  for (int m = 0; m < 8; ++m) {
    uint32_t a[4];
    WeightFragment(w, m, f, a);
    const uint4& u = x[m / 2];
    if (m % 2 == 0) {
      mma::MmaBf16(acc, a, u.x, u.y);
    } else {
      mma::MmaBf16(acc, a, u.z, u.w);
    }
  }
}

// --- tensor-map copies (the mbarrier and 1D bulk-copy PTX: bulk_copy.cuh) ---------------

using bulk::Arrive;
using bulk::ArriveExpectTx;
using bulk::BarrierInit;
using bulk::BulkCopy;
using bulk::FenceBarrierInit;
using bulk::TryWaitPhase;
using bulk::WaitPhase;
using bulk::WaitPhaseOrTrap;

// The box of a tensor map (`map`: the generic address of a __grid_constant__ kernel
// parameter) global -> shared at dst (1024-byte aligned: the 128-byte swizzle is a function
// of the address bits); completes the box's bytes on `bar`. Stage box (3D map, dims: byte of
// a K step, weight row, K step): the box at {0, row, step}. Step box (2D map, dims: byte of a
// row, weight row): the box at {128 step, row}.
__device__ __forceinline__ void StageBoxCopy(uint32_t dst, const CUtensorMap* map, int row,
                                             int step, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(row), "r"(step), "r"(bar)
      : "memory");
}
__device__ __forceinline__ void StepBoxCopy(uint32_t dst, const CUtensorMap* map, int row, int step,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(step * 128), "r"(row), "r"(bar)
      : "memory");
}

// --- launch arguments ---------------------------------------------------------------------

struct BulkArgs {
  BulkTarget t;
  int split;  // warps sharing 16 rows, each a range of the K steps (LinearStreamSplit)
};

// Blocks [block_end[i - 1], block_end[i]) compute target i (as LinearStreamMany).
struct BulkMany {
  BulkArgs a[kMaxBulkTargets];
  int64_t block_end[kMaxBulkTargets];
  int n;
  const uint4* xf;  // activations in fragment order, one token tile
  int T;
};

// A CUtensorMap's 128 bytes, 64-byte aligned as CUtensorMap itself: the TMA reads a map at a
// 64-byte aligned generic address, and only a parameter type aligned to 64 makes the driver
// place it there (run 120: with alignas(16) the first tensor-ring launch trapped after 1.4 s,
// before the ~2 s wait guard could fire: the alignment check in MapAt; gone with 64).
struct alignas(64) MapBytes {
  unsigned char bytes[sizeof(CUtensorMap)];
};
static_assert(sizeof(CUtensorMap) == 128, "a tensor map is 128 bytes");

// The tensor-map rings' launch parameter: per target, the 3D map whose box is one stage
// (kStageSteps K steps x 16 rows; valid if has_full) and the 2D map whose box is one step (a
// warp's last fill when fewer steps are left; every fill when the ring's stages are one step,
// or when the driver rejected the 3D map); the block-box ring (kTensorBlock3x2) adds, for
// targets of split 1, the same two maps with boxes of 128 rows (all 8 warps of a block). The
// maps come first, at offsets that are multiples of 128 of the kernel's only parameter (at
// parameter offset 0): the generic address of each is 64-byte aligned, as the TMA requires
// (MapAt traps otherwise). Value-initialise it (the tape compares parameter bytes).
struct TensorMany {
  MapBytes full[kMaxBulkTargets];
  MapBytes one[kMaxBulkTargets];
  MapBytes block_full[kMaxBulkTargets];
  MapBytes block_one[kMaxBulkTargets];
  BulkMany m;
  bool has_full[kMaxBulkTargets];
  bool block_ok[kMaxBulkTargets];
  bool block_has_full[kMaxBulkTargets];
};
static_assert(alignof(TensorMany) == 64, "the maps at 64-byte aligned parameter offsets");

// The tensor map in `b` (a field of the __grid_constant__ parameter).
__device__ __forceinline__ const CUtensorMap* MapAt(const MapBytes& b) {
  if (reinterpret_cast<uintptr_t>(&b) % 64 != 0) __trap();  // see TensorMany
  return reinterpret_cast<const CUtensorMap*>(&b);
}

template <bool kTensor>
using KernelParams = std::conditional_t<kTensor, TensorMany, BulkMany>;

__device__ __forceinline__ const BulkMany& ManyOf(const BulkMany& p) { return p; }
__device__ __forceinline__ const BulkMany& ManyOf(const TensorMany& p) { return p.m; }

// --- the ring -----------------------------------------------------------------------------

// A warp's stage layouts. Bulk (per-row copies): row i at i * kPitch, step u of it at u * 128
// (kPitch = kStageSteps * 128 + 16, see the file comment). Tensor (one box per stage): step u
// at u * 2048, row i of it at i * 128 (a 128-byte line), the line's 16-byte unit h at
// (h ^ (i % 8)) * 16 (the TMA's 128-byte swizzle; stages start 1024-byte aligned).
// kBoxRows: rows of a box (tensor): 16 (a warp's), or 128 (the block-box ring: one ring of
// the block's 8 x 16 rows, warp w's rows at line 16 w of each step).
template <int kStages, int kStageSteps, bool kTensor = false, int kBoxRows = kWarpRows>
struct Ring {
  static_assert(kStages >= 1 && kStageSteps >= 1, "a ring has stages of steps");
  static_assert(kBoxRows == kWarpRows || (kTensor && kBoxRows == kWarps * kWarpRows), "box rows");
  static constexpr int kPitch = kTensor ? kStepK : kStageSteps * kStepK + 16;  // row to row
  static constexpr int kStepStride = kTensor ? kBoxRows * kStepK : kStepK;     // step to step
  static constexpr int kStageBytes = kTensor ? kStageSteps * kBoxRows * kStepK : kWarpRows * kPitch;
  static constexpr int kWarpBytes = kStages * kStageBytes;  // per ring
  static constexpr int kRings = kWarps * kWarpRows / kBoxRows;
  // Dynamic shared memory: the 8-byte barriers of all warps (kWarps * kStages * 8, a
  // multiple of 16; the block-box ring uses 2 kStages of them), then (tensor: from the next
  // 1024-byte boundary) each ring's stages.
  static constexpr int kBarrierBytes = kWarps * kStages * 8;
  static constexpr int kAlignPad = kTensor ? 1024 : 0;
  static constexpr int kSmemBytes = kBarrierBytes + kAlignPad + kRings * kWarpBytes;
  static_assert(kPitch % 16 == 0 && kBarrierBytes % 16 == 0, "16-byte aligned stages");
  static_assert(!kTensor || kStageBytes % 1024 == 0, "swizzled stages 1024-byte aligned");
};

// A warp's view of its ring: shared-memory addresses of stage 0's barrier and data (for the
// PTX), and the data as a pointer into the kernel's shared array (for the reads: plain LDS).
struct WarpRing {
  uint32_t bars;              // barrier of stage s at bars + 8 s
  uint32_t data;              // stage s at data + s * kStageBytes
  const unsigned char* view;  // the same bytes as `data`
};

template <int kStages, int kStageSteps, bool kTensor>
__device__ __forceinline__ WarpRing WarpRingOf(unsigned char* smem, int warp) {
  using R = Ring<kStages, kStageSteps, kTensor>;
  const uint32_t base = mma::SharedAddress(smem);
  const uint32_t bars = base + static_cast<uint32_t>(warp * kStages * 8);
  if constexpr (kTensor) {  // the stages from the first 1024-byte boundary after the barriers
    const uint32_t start = (base + static_cast<uint32_t>(R::kBarrierBytes) + 1023u) & ~1023u;
    const int data = static_cast<int>(start - base) + warp * R::kWarpBytes;
    return WarpRing{bars, base + static_cast<uint32_t>(data), smem + data};
  } else {
    const int data = R::kBarrierBytes + warp * R::kWarpBytes;
    return WarpRing{bars, base + static_cast<uint32_t>(data), smem + data};
  }
}

// This warp's weight rows from K step s0 and its step range, for issuing per-row fills.
struct RowSource {
  static constexpr bool kTensor = false;
  static constexpr int kBoxRows = kWarpRows;
  const uint8_t* first;  // byte s0 * 128 of row r
  int64_t K;             // row stride (bytes)
  int n_steps;           // s1 - s0
};

// The same for the tensor-map fills: box coordinates of the warp's rows and first step.
struct TensorSource {
  static constexpr bool kTensor = true;
  static constexpr int kBoxRows = kWarpRows;
  const CUtensorMap* full;  // box of kStageSteps steps x 16 rows (3D), or null: none
  const CUtensorMap* one;   // box of one step x 16 rows (2D)
  int row;                  // r (rows r .. r + 15)
  int s0;                   // the warp's first K step
  int n_steps;              // s1 - s0
};

// The block-box ring's fills: boxes of the block's 128 rows over all K steps (split 1).
// Barriers: full[s] at bars + 8 s (1 arrival: the producer's, thread 0), empty[s] at
// bars + 8 (kStages + s) (one arrival per active warp once it has read the stage).
struct BlockSource {
  static constexpr bool kTensor = true;
  static constexpr int kBoxRows = kWarps * kWarpRows;
  const CUtensorMap* full;  // box of kStageSteps steps x 128 rows (3D), or null: none
  const CUtensorMap* one;   // box of one step x 128 rows (2D)
  int row;                  // the block's first row (rows past row0 + n_rows: zeros, unread)
  int s0;                   // 0
  int n_steps;              // K / 128
};

// Issues fill j (steps s0 + j * kStageSteps .. at most s1) into stage j % kStages (= stage):
// lane 0 arms the barrier, then lanes 0..15 copy a row each. The whole warp calls this
// (converged), only when no lane reads the stage any more.
template <int kStages, int kStageSteps>
__device__ __forceinline__ void IssueFill(const WarpRing& ring, const RowSource& src, int j,
                                          int stage) {
  using R = Ring<kStages, kStageSteps>;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int first = j * kStageSteps, left = src.n_steps - first;
  const uint32_t bytes = static_cast<uint32_t>(left < kStageSteps ? left : kStageSteps) * kStepK;
  const uint32_t bar = ring.bars + 8u * static_cast<uint32_t>(stage);
  if (lane == 0) ArriveExpectTx(bar, kWarpRows * bytes);
  __syncwarp();  // the transaction count is armed before any copy can complete
  if (lane < kWarpRows) {
    const uint32_t dst =
        ring.data + static_cast<uint32_t>(stage * R::kStageBytes + lane * R::kPitch);
    BulkCopy(dst, src.first + lane * src.K + int64_t{first} * kStepK, bytes, bar);
  }
}

// One fill of a tensor ring by the calling thread: fill j into `stage` (arms the stage's
// barrier, then one box copy of the stage's kStageSteps steps, or -- last fill with fewer
// steps left, or no stage map -- one one-step box per step). The expected bytes are the
// boxes' (kBoxRows rows per step; a block box may pass the last row: the zero-filled rows
// count too, as TMA delivers the whole box).
template <int kStages, int kStageSteps, class Src>  // TensorSource or BlockSource
__device__ __forceinline__ void IssueBoxCopies(const WarpRing& ring, const Src& src, int j,
                                               int stage) {
  using R = Ring<kStages, kStageSteps, true, Src::kBoxRows>;
  constexpr uint32_t kStepBytes = Src::kBoxRows * kStepK;
  const int first = j * kStageSteps, left = src.n_steps - first;
  const uint32_t bar = ring.bars + 8u * static_cast<uint32_t>(stage);
  const uint32_t dst = ring.data + static_cast<uint32_t>(stage * R::kStageBytes);
  if (kStageSteps > 1 && left >= kStageSteps && src.full != nullptr) {
    ArriveExpectTx(bar, kStageSteps * kStepBytes);
    StageBoxCopy(dst, src.full, src.row, src.s0 + first, bar);
  } else {
    const int count = left < kStageSteps ? left : kStageSteps;
    ArriveExpectTx(bar, static_cast<uint32_t>(count) * kStepBytes);
#pragma unroll
    for (int u = 0; u < kStageSteps; ++u) {
      if (u >= count) break;
      StepBoxCopy(dst + static_cast<uint32_t>(u) * kStepBytes, src.one, src.row, src.s0 + first + u,
                  bar);
    }
  }
}

// Tensor form of IssueFill (the warp's 16-row boxes): lane 0 issues the fill.
template <int kStages, int kStageSteps>
__device__ __forceinline__ void IssueFill(const WarpRing& ring, const TensorSource& src, int j,
                                          int stage) {
  if (threadIdx.x % 32 != 0) return;
  IssueBoxCopies<kStages, kStageSteps>(ring, src, j, stage);
}

// Block form of IssueFill (every active warp, converged, once its lanes have read fill
// j - kStages from `stage`): the warp releases the stage; thread 0 then waits until every
// active warp has released it and refills it with fill j.
template <int kStages, int kStageSteps>
__device__ __forceinline__ void IssueFill(const WarpRing& ring, const BlockSource& src, int j,
                                          int stage) {
  if (threadIdx.x % 32 != 0) return;
  const uint32_t empty = ring.bars + 8u * static_cast<uint32_t>(kStages + stage);
  Arrive(empty);
  if (threadIdx.x != 0) return;
  WaitPhaseOrTrap(empty, static_cast<uint32_t>((j - kStages) / kStages) & 1u);
  IssueBoxCopies<kStages, kStageSteps>(ring, src, j, stage);
}

// Block ring, before the PDL wait, every thread of the block: thread 0 initialises the
// barriers (empty ones for `active_warps` arrivals) and, once all threads passed the block
// barrier that publishes them, issues the first kStages fills.
template <int kStages, int kStageSteps>
__device__ __forceinline__ void StartBlockRing(const WarpRing& ring, const BlockSource& src,
                                               int active_warps) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      BarrierInit(ring.bars + 8u * static_cast<uint32_t>(s), 1);
      BarrierInit(ring.bars + 8u * static_cast<uint32_t>(kStages + s),
                  static_cast<uint32_t>(active_warps));
    }
    FenceBarrierInit();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int fills = (src.n_steps + kStageSteps - 1) / kStageSteps;
    for (int j = 0; j < kStages && j < fills; ++j) {
      IssueBoxCopies<kStages, kStageSteps>(ring, src, j, j);
    }
  }
}

// Before the PDL wait (weights only): the warp's barriers initialised and its first kStages
// fills issued.
template <int kStages, int kStageSteps, class Src>
__device__ __forceinline__ void StartRing(const WarpRing& ring, const Src& src) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) BarrierInit(ring.bars + 8u * static_cast<uint32_t>(s), 1);
    FenceBarrierInit();
  }
  __syncwarp();
  const int fills = (src.n_steps + kStageSteps - 1) / kStageSteps;
  for (int j = 0; j < kStages && j < fills; ++j) IssueFill<kStages, kStageSteps>(ring, src, j, j);
}

// This lane's 4 B units of x step x_st (zeros for padding tokens: has == false).
__device__ __forceinline__ void LoadActivations(uint4 (&x)[4], const uint4* xp, bool has,
                                                int64_t x_st) {
#pragma unroll
  for (int q = 0; q < 4; ++q) x[q] = has ? __ldg(xp + (x_st * 4 + q) * 32) : make_uint4(0, 0, 0, 0);
}

// This lane's pointers besides the ring: scale bytes (step 0 of the rows' 32-row block, chunk
// c), the B units (xf + lane; has: token lane / 4 < T), the x step of weight step 0.
struct LaneInputs {
  const uint8_t* sc;
  const uint4* xp;
  bool has;
  int64_t x0;
};

// The 4 x 16 weight bytes of step u of a stage for this lane: row g bytes 32c .. 32c + 15 at
// p + u * kStepStride, bytes 32c + 16 .. 32c + 31 `second` bytes further; row g + 8 is
// 8 * kPitch further (tensor: the same swizzle, as (g + 8) % 8 = g).
template <class R>
__device__ __forceinline__ void ReadStep(const unsigned char* p, int u, int second, uint4 (&w)[4]) {
  const unsigned char* q = p + u * R::kStepStride;
  w[0] = *reinterpret_cast<const uint4*>(q);
  w[1] = *reinterpret_cast<const uint4*>(q + second);
  w[2] = *reinterpret_cast<const uint4*>(q + 8 * R::kPitch);
  w[3] = *reinterpret_cast<const uint4*>(q + 8 * R::kPitch + second);
}

// This lane's (g, c) offset of row g, bytes 32c .. in a stage's step 0, and the distance to
// its bytes 32c + 16 ... Tensor: units 2c and 2c + 1 of line g sit at units (2c) ^ g and
// (2c + 1) ^ g = ((2c) ^ g) ^ 1, i.e. 16 bytes after for even g, 16 before for odd g.
// Conflict-free LDS.128: a quarter warp (rows g, g + 1, c = 0..3) reads units {0, 2, 4, 6} ^ g
// and {0, 2, 4, 6} ^ (g + 1), 8 distinct 16-byte units = all 32 banks.
template <class R>
__device__ __forceinline__ int LaneOffset(int g, int c) {
  if constexpr (R::kStepStride == kStepK) return g * R::kPitch + 32 * c;
  return g * kStepK + ((2 * c) ^ g) * 16;
}
template <class R>
__device__ __forceinline__ int SecondHalf(int g) {
  if constexpr (R::kStepStride == kStepK) return 16;
  return g % 2 == 0 ? 16 : -16;
}

// After the PDL wait: acc += rows [r, r + 16) x the activations over the warp's steps, the
// weights from the ring (the first kStages fills already issued by StartRing). kEager: a
// stage's steps are all read into registers right after its wait and the stage is refilled
// at once (kStages fills in flight during the MMAs; 16 kStageSteps registers of weight).
// Otherwise each step is read just before its MMAs and a stage is refilled after the wait
// for the next one (kStages - 1 fills in flight; 16 registers of weight).
template <int kStages, int kStageSteps, bool kEager, class Src>
__device__ __forceinline__ void AccumulateRing(const WarpRing& ring, const Src& src,
                                               const LaneInputs& in, int64_t s0, uint32_t scale0,
                                               float (&acc)[4]) {
  using R = Ring<kStages, kStageSteps, Src::kTensor, Src::kBoxRows>;
  constexpr int kHeld = kEager ? kStageSteps : 1;  // steps of weight registers
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, c = lane % 4;
  const int n = src.n_steps, fills = (n + kStageSteps - 1) / kStageSteps;
  const unsigned char* lane_row = ring.view + LaneOffset<R>(g, c);
  const int second = SecondHalf<R>(g);
  uint4 x[4], x_next[4] = {};
  uint32_t scale = scale0, scale_next = 0;
  if (n > 0) LoadActivations(x, in.xp, in.has, in.x0 + s0);
  int stage = 0;
  uint32_t parity = 0;
  for (int j = 0; j < fills; ++j) {
    if constexpr (Src::kTensor) {
      WaitPhaseOrTrap(ring.bars + 8u * static_cast<uint32_t>(stage), parity);
    } else {
      WaitPhase(ring.bars + 8u * static_cast<uint32_t>(stage), parity);
    }
    const unsigned char* p = lane_row + stage * R::kStageBytes;
    uint4 w[kHeld][4];
    if constexpr (kEager) {
#pragma unroll
      for (int u = 0; u < kStageSteps; ++u) {
        if (j * kStageSteps + u < n) ReadStep<R>(p, u, second, w[u]);
      }
      __syncwarp();  // every lane's reads of the stage are done: it may be refilled
      if (j + kStages < fills) IssueFill<kStages, kStageSteps>(ring, src, j + kStages, stage);
    } else if (j > 0) {
      __syncwarp();  // every lane has read fill j - 1 (its steps' MMAs were issued)
      const int prev = stage == 0 ? kStages - 1 : stage - 1;
      if (j - 1 + kStages < fills)
        IssueFill<kStages, kStageSteps>(ring, src, j - 1 + kStages, prev);
    }
#pragma unroll
    for (int u = 0; u < kStageSteps; ++u) {
      const int i = j * kStageSteps + u;  // step s0 + i
      if (i >= n) break;
      if constexpr (!kEager) ReadStep<R>(p, u, second, w[0]);
      if (i + 1 < n) {
        LoadActivations(x_next, in.xp, in.has, in.x0 + s0 + i + 1);
        scale_next = __ldg(in.sc + (s0 + i + 1) * 4);
      }
      ComputeStep(w[kEager ? u : 0], scale, x, acc);
#pragma unroll
      for (int q = 0; q < 4; ++q) x[q] = x_next[q];
      scale = scale_next;
    }
    if (++stage == kStages) {
      stage = 0;
      parity ^= 1u;
    }
  }
}

// The block-box ring's part of LinearBulkKernel for a block of a split-1 target with block
// maps: acc of this warp's 16 rows (rows r = the block's first + 16 warp) over all K steps,
// the weights from the block's ring (one box of 128 rows per stage). Every thread calls it;
// it calls pdl::WaitThenAllowNext.
template <int kStages, int kStageSteps>
__device__ __forceinline__ void AccumulateBlockBox(const TensorMany& params, int target,
                                                   int64_t block, unsigned char* smem,
                                                   float (&acc)[4]) {
  using R = Ring<kStages, kStageSteps, true, BlockSource::kBoxRows>;
  const BulkMany& m = params.m;
  const BulkTarget& a = m.a[target].t;
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4, c = lane % 4;
  const int64_t first_row = a.row0 + block * BlockSource::kBoxRows;
  const int64_t r = first_row + warp * kWarpRows, steps = a.K / kStepK;
  const int64_t rows_left = a.n_rows - block * BlockSource::kBoxRows;  // > 0
  const int active_warps =
      static_cast<int>(rows_left >= kWarps * kWarpRows ? kWarps : rows_left / kWarpRows);
  const bool active = warp < active_warps;
  const uint32_t base = mma::SharedAddress(smem);
  const uint32_t start = (base + static_cast<uint32_t>(R::kBarrierBytes) + 1023u) & ~1023u;
  const int data = static_cast<int>(start - base);
  // view: this warp's 16 lines of each step (the lanes' reads); data: the ring (the copies).
  const WarpRing ring{base, start, smem + data + warp * kWarpRows * kStepK};
  const BlockSource src{params.block_has_full[target] ? MapAt(params.block_full[target]) : nullptr,
                        MapAt(params.block_one[target]), static_cast<int>(first_row), 0,
                        static_cast<int>(steps)};
  StartBlockRing<kStages, kStageSteps>(ring, src, active_warps);
  LaneInputs in{};
  uint32_t scale0 = 0;
  if (active) {
    in = LaneInputs{a.scale + (r / 32) * (a.K / 32) + c, m.xf + lane, g < m.T,
                    (r / a.group_rows) * a.group_steps};
    scale0 = __ldg(in.sc);
  }
  pdl::WaitThenAllowNext();  // every thread, before any read of x or write of y
  if (active) AccumulateRing<kStages, kStageSteps, true>(ring, src, in, 0, scale0, acc);
}

template <int kStages, int kStageSteps, bool kEager, bool kTensor, bool kBlockBox = false>
__global__ void __launch_bounds__(kThreads, 2)
    LinearBulkKernel(const __grid_constant__ KernelParams<kTensor> params) {
  extern __shared__ __align__(16) unsigned char ring_smem[];
  const BulkMany& m = ManyOf(params);
  __shared__ float partial[kWarps][4][32];
  int target = 0;
  while (target + 1 < m.n && int64_t{blockIdx.x} >= m.block_end[target]) ++target;
  const BulkTarget& a = m.a[target].t;
  const int split = m.a[target].split;
  const int64_t block = int64_t{blockIdx.x} - (target == 0 ? 0 : m.block_end[target - 1]);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t rg = block * (kWarps / split) + warp / split;
  const int part = warp % split;
  const int64_t steps = a.K / kStepK;
  const bool active = rg * kWarpRows < a.n_rows;
  const int64_t r = a.row0 + rg * kWarpRows, s0 = part * steps / split,
                s1 = (part + 1) * steps / split;
  const int g = lane / 4, c = lane % 4;
  float acc[4] = {};
  if constexpr (kBlockBox) {  // every target of split 1 with block maps (LaunchTensorRing)
    static_assert(kTensor && kEager, "the block-box ring is an eager tensor ring");
    AccumulateBlockBox<kStages, kStageSteps>(params, target, block, ring_smem, acc);
  } else {
    const WarpRing ring = WarpRingOf<kStages, kStageSteps, kTensor>(ring_smem, warp);
    std::conditional_t<kTensor, TensorSource, RowSource> src{};
    LaneInputs in{};
    uint32_t scale0 = 0;
    if (active) {               // weights and scales before the wait (never written by a kernel)
      if constexpr (kTensor) {  // the maps' rows are the weight's (row0 + n_rows <= INT32_MAX)
        src = TensorSource{params.has_full[target] ? MapAt(params.full[target]) : nullptr,
                           MapAt(params.one[target]), static_cast<int>(r), static_cast<int>(s0),
                           static_cast<int>(s1 - s0)};
      } else {
        src = RowSource{a.w + r * a.K + s0 * kStepK, a.K, static_cast<int>(s1 - s0)};
      }
      in = LaneInputs{a.scale + (r / 32) * (a.K / 32) + c, m.xf + lane, g < m.T,
                      (r / a.group_rows) * a.group_steps};
      StartRing<kStages, kStageSteps>(ring, src);
      if (s0 < s1) scale0 = __ldg(in.sc + s0 * 4);
    }
    pdl::WaitThenAllowNext();  // every thread, before any read of x or write of y
    if (active) AccumulateRing<kStages, kStageSteps, kEager>(ring, src, in, s0, scale0, acc);
  }
  if (split > 1) {  // the parts' sums, added in part order by part 0 (as LinearStreamKernel)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[i];
    __syncthreads();
    if (part != 0) return;
    for (int p = 1; p < split; ++p) {
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[i] += partial[warp + p][i][lane];
    }
  }
  if (!active) return;
    // Accumulator (m16n8): acc[i] is row g (+ 8 for i >= 2), token 2c + i % 2.
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int t = 2 * c + i % 2;
    if (t >= m.T) continue;
    float* dst = a.y + t * a.ldy + rg * kWarpRows + g + (i >= 2 ? 8 : 0);
    *dst = a.accumulate ? *dst + acc[i] : acc[i];
  }
}

template <int kStages, int kStageSteps, bool kEager, bool kTensor = false, bool kBlockBox = false>
cudaError_t LaunchRing(const KernelParams<kTensor>& m, dim3 grid, cudaStream_t stream) {
  constexpr auto kernel = LinearBulkKernel<kStages, kStageSteps, kEager, kTensor, kBlockBox>;
  static_assert(Ring<kStages, kStageSteps, kTensor>::kSmemBytes == Ring < kStages, kStageSteps,
                kTensor, kBlockBox ? kWarps * kWarpRows : kWarpRows > ::kSmemBytes,
                "the block ring and the warp rings take the same shared memory");
  constexpr int kSmem = Ring<kStages, kStageSteps, kTensor>::kSmemBytes;
  static const cudaError_t carveout = cudaFuncSetAttribute(
      kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (carveout != cudaSuccess) return carveout;
  if constexpr (kSmem > 48 * 1024) {
    const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, kSmem);
    if (e != cudaSuccess) return e;
  }
  return pdl::Launch(kernel, grid, kThreads, kSmem, stream, m);
}

std::atomic<int> ring_choice{static_cast<int>(BulkRing::kDefault)};

// What kDefault stands for in this process (DEEPINFER_LINEAR_BULK_TMA2D, read once).
BulkRing ProcessDefaultRing() {
  static const BulkRing ring = LinearBulkRingFromEnv(std::getenv("DEEPINFER_LINEAR_BULK_TMA2D"));
  return ring;
}

// `from`'s fields into `to`, whose other bytes (padding) are zeros: the caller's padding bytes
// are indeterminate and would reach the kernel parameter, which a StreamTape compares byte
// for byte (equal work would then miss its graph).
void CopyTarget(const BulkTarget& from, BulkTarget* to) {
  std::memset(to, 0, sizeof(*to));
  CopyBulkTargetFields(from, to);
}

bool TargetOk(const BulkTarget& t) {
  constexpr int64_t kMaxCoordinate = INT32_MAX;  // rows and row bytes are int box coordinates
  return t.w != nullptr && reinterpret_cast<uintptr_t>(t.w) % 16 == 0 && t.scale != nullptr &&
         t.y != nullptr && t.K > 0 && t.K % kStepK == 0 && t.K <= kMaxCoordinate && t.row0 >= 0 &&
         t.row0 % kWarpRows == 0 && t.n_rows > 0 && t.n_rows % kWarpRows == 0 &&
         t.n_rows <= kMaxCoordinate - t.row0 && t.group_rows > 0 && t.group_steps >= 0 &&
         (t.group_steps == 0 || t.group_rows % kWarpRows == 0) && t.ldy >= t.n_rows;
}

// The tensor rings' parameter: m plus each target's maps. The step map is required; the stage
// map (3D, strides {K, 128}: not in memory order) only where a stage has several steps and
// the weight that many; where the driver rejects it the ring falls back to step boxes for
// every fill (same bytes, same bits; LinearBulkTensorMapsCached then counts no stage map).
// kBlockBox: also the 128-row maps of split-1 targets (block_ok when the step one encodes).
template <int kStageSteps, bool kBlockBox>
cudaError_t MakeTensorMany(const BulkMany& m, TensorMany* p) {
  std::memcpy(&p->m, &m, sizeof(m));  // padding included (a plain assignment may skip it)
  for (int i = 0; i < m.n; ++i) {
    const BulkTarget& t = m.a[i].t;
    BulkTensorView one{}, full{};
    if (!LinearBulkTensorView(t, 1, &one)) return cudaErrorInvalidValue;
    const cudaError_t e = EncodeBulkTensorMap(one, &p->one[i]);
    if (e != cudaSuccess) return e;
    p->has_full[i] = kStageSteps > 1 && LinearBulkTensorView(t, kStageSteps, &full) &&
                     EncodeBulkTensorMap(full, &p->full[i]) == cudaSuccess;
    p->block_ok[i] = p->block_has_full[i] = false;
    if (!kBlockBox || m.a[i].split != 1) continue;
    constexpr int kBlockRows = kWarps * kWarpRows;
    p->block_ok[i] = LinearBulkTensorView(t, 1, &one, kBlockRows) &&
                     EncodeBulkTensorMap(one, &p->block_one[i]) == cudaSuccess;
    p->block_has_full[i] = kStageSteps > 1 &&
                           LinearBulkTensorView(t, kStageSteps, &full, kBlockRows) &&
                           EncodeBulkTensorMap(full, &p->block_full[i]) == cudaSuccess;
  }
  return cudaSuccess;
}

template <int kStages, int kStageSteps, bool kEager, bool kBlockBox = false>
cudaError_t LaunchTensorRing(const BulkMany& m, dim3 grid, cudaStream_t stream) {
  static_assert(sizeof(TensorMany) <= 4096, "kernel parameters fit the classic 4 KiB");
  TensorMany p;  // every byte defined: the tape compares parameter bytes, padding included
  std::memset(&p, 0, sizeof(p));
  const cudaError_t e = MakeTensorMany<kStageSteps, kBlockBox>(m, &p);
  if (e != cudaSuccess) return e;
  if constexpr (kBlockBox) {  // the block kernel when every target can take it
    bool all = true;
    for (int i = 0; i < m.n; ++i) all = all && p.block_ok[i];
    if (all) return LaunchRing<kStages, kStageSteps, kEager, true, true>(p, grid, stream);
  }
  return LaunchRing<kStages, kStageSteps, kEager, true>(p, grid, stream);
}

}  // namespace

static_assert(sizeof(BulkTarget) == 80, "CopyBulkTargetFields copies every field of BulkTarget");
void CopyBulkTargetFields(const BulkTarget& from, BulkTarget* to) {
  to->w = from.w;
  to->scale = from.scale;
  to->K = from.K;
  to->row0 = from.row0;
  to->n_rows = from.n_rows;
  to->group_rows = from.group_rows;
  to->group_steps = from.group_steps;
  to->y = from.y;
  to->ldy = from.ldy;
  to->accumulate = from.accumulate;
}

bool LinearBulkApplicable(const BulkTarget* targets, int n, const void* xf, int T) {
  if (targets == nullptr || n < 1 || n > kMaxBulkTargets || T < 1 || T > kBulkMaxTokens ||
      xf == nullptr || reinterpret_cast<uintptr_t>(xf) % 16 != 0) {
    return false;
  }
  for (int i = 0; i < n; ++i) {
    if (!TargetOk(targets[i])) return false;
  }
  return true;
}

bool LinearBulkTensorView(const BulkTarget& t, int box_steps, BulkTensorView* view, int box_rows) {
  if (view == nullptr || !TargetOk(t) || box_steps < 1 || box_steps > kBulkMaxBoxSteps ||
      box_steps > t.K / kStepK || (box_rows != kWarpRows && box_rows != kWarps * kWarpRows)) {
    return false;
  }
  *view = BulkTensorView{};
  view->base = t.w;
  view->box[0] = kStepK;
  view->box[1] = static_cast<uint32_t>(box_rows);
  view->strides[0] = static_cast<uint64_t>(t.K);
  view->dims[1] = static_cast<uint64_t>(t.row0 + t.n_rows);
  if (box_steps == 1) {  // the weight as it is: {K bytes, rows}
    view->rank = 2;
    view->dims[0] = static_cast<uint64_t>(t.K);
    return true;
  }
  view->rank = 3;  // {128 bytes, rows, K / 128 steps}, strides {K, 128}
  view->dims[0] = kStepK;
  view->dims[2] = static_cast<uint64_t>(t.K / kStepK);
  view->strides[1] = kStepK;
  view->box[2] = static_cast<uint32_t>(box_steps);
  return true;
}

BulkRing LinearBulkRingFromEnv(const char* tma2d) {
  if (tma2d == nullptr) return BulkRing::kEager3x2;
  const std::string value(tma2d);
  if (value == "1") return BulkRing::kTensor3x2;
  if (value == "2") return BulkRing::kTensor2x4;
  if (value == "3") return BulkRing::kTensor6x1;
  if (value == "4") return BulkRing::kTensorBlock3x2;
  return BulkRing::kEager3x2;
}

void SetLinearBulkRing(BulkRing ring) { ring_choice.store(static_cast<int>(ring)); }

cudaError_t LinearBulkMany(const BulkTarget* targets, int n, const void* xf, int T,
                           cudaStream_t stream) {
  if (!LinearBulkApplicable(targets, n, xf, T)) return cudaErrorInvalidValue;
  BulkMany m;
  std::memset(&m, 0, sizeof(m));  // every byte defined (see CopyTarget)
  m.n = n;
  m.xf = static_cast<const uint4*>(xf);
  m.T = T;
  int64_t blocks = 0;
  for (int i = 0; i < n; ++i) {
    const BulkTarget& t = targets[i];
    const int split = LinearStreamSplit(t.n_rows, t.K);
    const int64_t row_groups = t.n_rows / kWarpRows, per_block = kWarps / split;
    blocks += (row_groups + per_block - 1) / per_block;
    CopyTarget(t, &m.a[i].t);
    m.a[i].split = split;
    m.block_end[i] = blocks;
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  BulkRing ring = static_cast<BulkRing>(ring_choice.load());
  if (ring == BulkRing::kDefault) ring = ProcessDefaultRing();
  switch (ring) {
    case BulkRing::kEager2x2:
      return LaunchRing<2, 2, true>(m, grid, stream);
    case BulkRing::kLazy3x2:
      return LaunchRing<3, 2, false>(m, grid, stream);
    case BulkRing::kLazy2x3:
      return LaunchRing<2, 3, false>(m, grid, stream);
    case BulkRing::kTensor3x2:
      return LaunchTensorRing<3, 2, true>(m, grid, stream);
    case BulkRing::kTensor2x4:
      return LaunchTensorRing<2, 4, false>(m, grid, stream);
    case BulkRing::kTensor6x1:
      return LaunchTensorRing<6, 1, true>(m, grid, stream);
    case BulkRing::kTensorBlock3x2:
      return LaunchTensorRing<3, 2, true, true>(m, grid, stream);
    default:
      return LaunchRing<3, 2, true>(m, grid, stream);
  }
}

}  // namespace deepinfer::backend::cuda::kernels
