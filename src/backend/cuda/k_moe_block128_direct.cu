// EXPERIMENTAL (issue 9, session 22; compiled, not yet run on a GPU): a GEMM of
// RoutedExpertsBlock128 for prefill items (64 pairs) with the weights loaded straight from global
// memory into e4m3 A fragments (moe_e4m3_lanes.cuh, as the decode kernel k_moe_block128_stream.cu
// does) and the conversion of stage st + 1 overlapped with stage st's MMAs. Selected by
// DEEPINFER_EXPERTS_BLOCK128_GEMM=direct (read on every call; default: the register GEMM of
// k_moe_block128_rs.cu).
//
// Why. The register GEMM (k_moe_block128_rs.cu) runs 202 SASS instructions per stage and
// consumer thread at 55% issue and 30% tensor (ncu, run 183): a warpgroup converts, issues its
// four MMAs and waits for them, so its conversion and its MMAs are serial. Here the weights need no
// producer copies and no shared-memory reads (two 16-byte loads and two scale bytes per lane and
// stage), and each warpgroup builds stage st + 1's fragments while stage st's MMAs run (two
// fragment sets, one accumulator set: ptxas keeps the wgmmas asynchronous; see the variants note
// in k_moe_block128_stream.cu).
//
// Numerics: those of the decode kernel (k_moe_block128_stream.cu) at items of 64 pairs: the
// register GEMM's operands and promotions with another grouping of a stage's values into its four
// k32 MMAs.
//
// Structure. Grid (weight rows / 128, max items); two consumer warpgroups (64 rows each) and one
// producer warp whose lane 0 brings the item's packed stages (PackOrder::kStream, 8,448 bytes
// each) into a ring of kXSlots slots by bulk copies on full / empty mbarriers (moe_block128.cuh
// Barriers). A consumer lane keeps kPF stages of its weight loads in flight.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_block128.cuh"
#include "backend/cuda/moe_e4m3_convert.cuh"
#include "backend/cuda/moe_e4m3_lanes.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_mma.cuh"
#include "backend/cuda/wgmma_fp8.cuh"

namespace deepinfer::backend::cuda::kernels::moe_block128 {
namespace {

constexpr int kDirectBN = 64;  // pairs per item
constexpr int kXSlots = 8;     // ring of packed activation stages (a power of two: cheap slot math)
constexpr int kDirectPF = 2;   // weight stages in flight per lane (4: spills at 168 registers)
constexpr int kXStageBytes = Pack<kDirectBN>::kStageBytes;
static_assert(kXStageBytes % 16 == 0, "slots stay 16-byte aligned for the bulk copies");
static_assert(kShiftTables <= 32 * kConsumerWarps, "the consumer threads build one table each");
// The ring, then its full and empty barriers.
constexpr int kDirectSmemBytes = kXSlots * kXStageBytes + 2 * kXSlots * 8;

// The producer lane: stage st of the item's packed activations into slot st % kXSlots once the
// consumers have released it.
__device__ void ProduceXStages(const uint8_t* xp, int n_stages, unsigned smem_base,
                               Barriers<kXSlots> bar) {
  for (int st = 0; st < n_stages; ++st) {
    const int slot = st % kXSlots;
    if (st >= kXSlots) bulk::WaitPhaseOrTrap(bar.empty(slot), ((st / kXSlots) - 1) & 1);
    bulk::ArriveExpectTx(bar.full(slot), kXStageBytes);
    bulk::BulkCopy(smem_base + slot * kXStageBytes, xp + int64_t{st} * kXStageBytes, kXStageBytes,
                   bar.full(slot));
  }
}

__global__ void __launch_bounds__(kGemmThreads, 1) ExpertGemmMxfp4DirectKernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(128) char smem[];
  __shared__ uint2 tables[kShiftTables];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const BlockJob job = BlockJob::Of(a);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, t4 = lane % 4;
  const int n_stages = job.n_stages;
  const unsigned smem_base = mma::SharedAddress(smem);
  const Barriers<kXSlots> bar{smem_base + kXSlots * kXStageBytes};
  if (tid < kShiftTables) BuildShiftTable(tables, tid);
  if (tid == 0) bar.Init(1);  // lane 0's expect-tx arrival
  __syncthreads();
  if (warp == kConsumerWarps) {
    if (lane == 0) {
      ProduceXStages(a.packed + int64_t{blockIdx.y} * n_stages * kXStageBytes, n_stages, smem_base,
                     bar);
    }
    return;
  }

  const LaneRows lr = LaneRowsOf(a, job, tid);
  LaneStage ring[kDirectPF];
  PreloadRing(lr.rows, n_stages, ring);
  const uint64_t x_desc0 = wgmma::Descriptor(smem_base, 128, kChunks * 128);

  float acc[kDirectBN / 2], part[kDirectBN / 2];
#pragma unroll
  for (int e = 0; e < kDirectBN / 2; ++e) acc[e] = 0.0f;
  uint32_t frag[2][4][4];
  // Promotes stage st (retired) and releases its slot.
  auto promote = [&](int st) {
    const int slot = st % kXSlots;
    const auto* xs =
        reinterpret_cast<const float*>(smem + slot * kXStageBytes + Pack<kDirectBN>::kXTileBytes);
    Promote<kDirectBN>(part, xs, t4, 1.0f, 1.0f, acc);
    __syncwarp();
    if (lane == 0) bulk::Arrive(bar.empty(slot));  // this warp no longer reads the slot
  };
  // Stage st from weight ring slot u (a constant after unrolling; st % kDirectPF == u).
  auto run_stage = [&](int st, int u) {
    const LaneStage ls = ring[u];
    if (st + kDirectPF < n_stages) LoadStage(lr.rows, st + kDirectPF, ring[u]);
    const uint2 t_lo = tables[(lr.smax_lo - ls.s[0]) & 0xFFu];
    const uint2 t_hi = tables[(lr.smax_hi - ls.s[1]) & 0xFFu];
    const int set = u % 2;
    BuildFragments(ls, t_lo, t_hi, frag[set]);  // while stage st - 1's MMAs run
    if (st > 0) {
      wgmma::WaitGroup<0>();
      Retired(frag[1 - set], part);
      promote(st - 1);
    }
    const int slot = st % kXSlots;
    bulk::WaitPhaseOrTrap(bar.full(slot), (st / kXSlots) & 1);
    IssueStageMmas<kDirectBN>(frag[set], wgmma::DescriptorPlus(x_desc0, slot * kXStageBytes), part);
  };
  static_assert(kDirectPF % 2 == 0, "a stage's fragment set is its weight slot's parity");
  ForEachStage<kDirectPF>(n_stages, run_stage);
  RetireLastStage(n_stages, frag, part);
  promote(n_stages - 1);
  const float ws_lo = RowScale(lr.smax_lo), ws_hi = RowScale(lr.smax_hi);
#pragma unroll
  for (int e = 0; e < kDirectBN / 2; ++e) acc[e] *= (e & 3) >= 2 ? ws_hi : ws_lo;
  StoreOutputs<kDirectBN>(acc, a, job.item, job.v0, job.n_rows, tid);
}

}  // namespace

bool DirectGemmSelected() {
  const char* env = std::getenv("DEEPINFER_EXPERTS_BLOCK128_GEMM");
  return env != nullptr && std::strcmp(env, "direct") == 0;
}

cudaError_t LaunchMxfp4DirectGemm(int bn, const GemmArgs& a, int64_t max_items,
                                  cudaStream_t stream) {
  if (a.mxfp4 == nullptr || a.row_smax == nullptr || bn != kDirectBN) return cudaErrorInvalidValue;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  if (rows % kBM != 0) return cudaErrorInvalidValue;
  const auto kernel = ExpertGemmMxfp4DirectKernel;
  const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, kDirectSmemBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(rows / kBM), static_cast<unsigned>(max_items));
  return pdl::Launch(kernel, grid, kGemmThreads, static_cast<size_t>(kDirectSmemBytes), stream, a);
}

}  // namespace deepinfer::backend::cuda::kernels::moe_block128
