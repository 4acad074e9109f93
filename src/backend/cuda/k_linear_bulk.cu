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
// each copy moves only 256 bytes; the next form to try is one 2D tensor-map copy per stage.
// Kept (off by default) as the base of that experiment.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/kernels_bulk.h"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_fp8.cuh"

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

// --- mbarrier and bulk-copy PTX (sm_90) -------------------------------------------------

__device__ __forceinline__ void BarrierInit(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the bulk copies).
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival on `bar` that also expects `bytes` more transaction bytes in this phase.
__device__ __forceinline__ void ArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared by the TMA
// engine; completes `bytes` transaction bytes on `bar`.
__device__ __forceinline__ void BulkCopy(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// Blocks until the phase of `bar` with parity `parity` has completed (its bytes have landed
// and are visible to this thread). The "memory" clobber keeps the stage's reads after it.
__device__ __forceinline__ void WaitPhase(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  while (done == 0) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  }
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

// --- the ring -----------------------------------------------------------------------------

template <int kStages, int kStageSteps>
struct Ring {
  static_assert(kStages >= 1 && kStageSteps >= 1, "a ring has stages of steps");
  static constexpr int kPitch = kStageSteps * kStepK + 16;  // bytes per row of a stage
  static constexpr int kStageBytes = kWarpRows * kPitch;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  // Dynamic shared memory: the 8-byte barriers of all warps (kWarps * kStages * 8, a
  // multiple of 16), then each warp's stages.
  static constexpr int kBarrierBytes = kWarps * kStages * 8;
  static constexpr int kSmemBytes = kBarrierBytes + kWarps * kWarpBytes;
  static_assert(kPitch % 16 == 0 && kBarrierBytes % 16 == 0, "16-byte aligned stages");
};

// A warp's view of its ring: shared-memory addresses of stage 0's barrier and data (for the
// PTX), and the data as a pointer into the kernel's shared array (for the reads: plain LDS).
struct WarpRing {
  uint32_t bars;              // barrier of stage s at bars + 8 s
  uint32_t data;              // stage s at data + s * kStageBytes
  const unsigned char* view;  // the same bytes as `data`
};

template <int kStages, int kStageSteps>
__device__ __forceinline__ WarpRing WarpRingOf(unsigned char* smem, int warp) {
  using R = Ring<kStages, kStageSteps>;
  const uint32_t base = mma::SharedAddress(smem);
  const int data = R::kBarrierBytes + warp * R::kWarpBytes;
  return WarpRing{base + static_cast<uint32_t>(warp * kStages * 8),
                  base + static_cast<uint32_t>(data), smem + data};
}

// This warp's weight rows from K step s0 and its step range, for issuing fills.
struct RowSource {
  const uint8_t* first;  // byte s0 * 128 of row r
  int64_t K;             // row stride (bytes)
  int n_steps;           // s1 - s0
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

// Before the PDL wait (weights only): the warp's barriers initialised and its first kStages
// fills issued.
template <int kStages, int kStageSteps>
__device__ __forceinline__ void StartRing(const WarpRing& ring, const RowSource& src) {
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

// The 4 x 16 weight bytes of step u of a stage for this lane (p: row g, byte 32c of the
// stage's step 0; row g + 8 is 8 rows further).
template <int kPitch>
__device__ __forceinline__ void ReadStep(const unsigned char* p, int u, uint4 (&w)[4]) {
  const unsigned char* q = p + u * kStepK;
  w[0] = *reinterpret_cast<const uint4*>(q);
  w[1] = *reinterpret_cast<const uint4*>(q + 16);
  w[2] = *reinterpret_cast<const uint4*>(q + 8 * kPitch);
  w[3] = *reinterpret_cast<const uint4*>(q + 8 * kPitch + 16);
}

// After the PDL wait: acc += rows [r, r + 16) x the activations over the warp's steps, the
// weights from the ring (the first kStages fills already issued by StartRing). kEager: a
// stage's steps are all read into registers right after its wait and the stage is refilled
// at once (kStages fills in flight during the MMAs; 16 kStageSteps registers of weight).
// Otherwise each step is read just before its MMAs and a stage is refilled after the wait
// for the next one (kStages - 1 fills in flight; 16 registers of weight).
template <int kStages, int kStageSteps, bool kEager>
__device__ __forceinline__ void AccumulateRing(const WarpRing& ring, const RowSource& src,
                                               const LaneInputs& in, int64_t s0, uint32_t scale0,
                                               float (&acc)[4]) {
  using R = Ring<kStages, kStageSteps>;
  constexpr int kHeld = kEager ? kStageSteps : 1;  // steps of weight registers
  const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, c = lane % 4;
  const int n = src.n_steps, fills = (n + kStageSteps - 1) / kStageSteps;
  const unsigned char* lane_row = ring.view + g * R::kPitch + 32 * c;
  uint4 x[4], x_next[4] = {};
  uint32_t scale = scale0, scale_next = 0;
  if (n > 0) LoadActivations(x, in.xp, in.has, in.x0 + s0);
  int stage = 0;
  uint32_t parity = 0;
  for (int j = 0; j < fills; ++j) {
    WaitPhase(ring.bars + 8u * static_cast<uint32_t>(stage), parity);
    const unsigned char* p = lane_row + stage * R::kStageBytes;
    uint4 w[kHeld][4];
    if constexpr (kEager) {
#pragma unroll
      for (int u = 0; u < kStageSteps; ++u) {
        if (j * kStageSteps + u < n) ReadStep<R::kPitch>(p, u, w[u]);
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
      if constexpr (!kEager) ReadStep<R::kPitch>(p, u, w[0]);
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

template <int kStages, int kStageSteps, bool kEager>
__global__ void __launch_bounds__(kThreads, 2)
    LinearBulkKernel(const __grid_constant__ BulkMany m) {
  extern __shared__ __align__(16) unsigned char ring_smem[];
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
  const WarpRing ring = WarpRingOf<kStages, kStageSteps>(ring_smem, warp);
  RowSource src{};
  LaneInputs in{};
  uint32_t scale0 = 0;
  if (active) {  // weights and scales before the wait (never written by a kernel)
    src = RowSource{a.w + r * a.K + s0 * kStepK, a.K, static_cast<int>(s1 - s0)};
    in = LaneInputs{a.scale + (r / 32) * (a.K / 32) + c, m.xf + lane, g < m.T,
                    (r / a.group_rows) * a.group_steps};
    StartRing<kStages, kStageSteps>(ring, src);
    if (s0 < s1) scale0 = __ldg(in.sc + s0 * 4);
  }
  pdl::WaitThenAllowNext();  // every thread, before any read of x or write of y
  if (active) AccumulateRing<kStages, kStageSteps, kEager>(ring, src, in, s0, scale0, acc);
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

template <int kStages, int kStageSteps, bool kEager>
cudaError_t LaunchRing(const BulkMany& m, dim3 grid, cudaStream_t stream) {
  constexpr auto kernel = LinearBulkKernel<kStages, kStageSteps, kEager>;
  constexpr int kSmem = Ring<kStages, kStageSteps>::kSmemBytes;
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

bool TargetOk(const BulkTarget& t) {
  return t.w != nullptr && reinterpret_cast<uintptr_t>(t.w) % 16 == 0 && t.scale != nullptr &&
         t.y != nullptr && t.K > 0 && t.K % kStepK == 0 && t.row0 >= 0 && t.row0 % kWarpRows == 0 &&
         t.n_rows > 0 && t.n_rows % kWarpRows == 0 && t.group_rows > 0 && t.group_steps >= 0 &&
         (t.group_steps == 0 || t.group_rows % kWarpRows == 0) && t.ldy >= t.n_rows;
}

}  // namespace

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

void SetLinearBulkRing(BulkRing ring) { ring_choice.store(static_cast<int>(ring)); }

cudaError_t LinearBulkMany(const BulkTarget* targets, int n, const void* xf, int T,
                           cudaStream_t stream) {
  if (!LinearBulkApplicable(targets, n, xf, T)) return cudaErrorInvalidValue;
  BulkMany m{};
  m.n = n;
  m.xf = static_cast<const uint4*>(xf);
  m.T = T;
  int64_t blocks = 0;
  for (int i = 0; i < n; ++i) {
    const BulkTarget& t = targets[i];
    const int split = LinearStreamSplit(t.n_rows, t.K);
    const int64_t row_groups = t.n_rows / kWarpRows, per_block = kWarps / split;
    blocks += (row_groups + per_block - 1) / per_block;
    m.a[i] = BulkArgs{t, split};
    m.block_end[i] = blocks;
  }
  const dim3 grid(static_cast<unsigned>(blocks));
  switch (static_cast<BulkRing>(ring_choice.load())) {
    case BulkRing::kEager2x2:
      return LaunchRing<2, 2, true>(m, grid, stream);
    case BulkRing::kLazy3x2:
      return LaunchRing<3, 2, false>(m, grid, stream);
    case BulkRing::kLazy2x3:
      return LaunchRing<2, 3, false>(m, grid, stream);
    default:
      return LaunchRing<3, 2, true>(m, grid, stream);
  }
}

}  // namespace deepinfer::backend::cuda::kernels
