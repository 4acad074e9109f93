// The decode GEMM of RoutedExpertsBlock128 (kernels_moe_block128.h) for items of 8 pairs: the
// MXFP4 expert bytes streamed from global memory straight into e4m3 wgmma A fragments.
//
// Why. The decode stream kernel (k_moe_stream.cu) dequantises MXFP4 to bf16 for mma.sync: ~195
// SASS instructions per 1 KiB warp step, 59-62% issue, ~3 TB/s (bench/gpu/RESULTS.md, session
// 22). Here a value costs one e4m3 byte: the register GEMM's conversion (moe_e4m3_convert.cuh, 9
// instructions per 8 values) and one wgmma m64n8k32 per k32 step and warpgroup: ~119 SASS
// instructions per 1 KiB warp step (bench/gpu/sass_loop.py: 474 for the loop of 4 stages; PRMT
// 128, LOP3 104, IMAD 68, SHF 32, QGMMA 16, FFMA 16), 111 registers, no spills. (Run 192 measured
// the form without the shift mask: 118.)
// The default at decode sizes (CudaBackend::set_experts_decode_e4m3). MEASURED (H200, run 192,
// the 4-layer decode step at 4k in FP8 mode, two interleaved rounds, ms, bf16 stream -> this
// kernel): B=1 1.42-1.43 -> 1.40, B=8 2.70-2.72 -> 2.50-2.56, B=32 5.78-5.79 -> 5.12-5.13,
// B=128 11.30-11.37 -> 9.87-9.89, B=256 15.50-15.60 -> 13.29-13.44.
//
// Numerics: those of the register GEMM (k_moe_block128_rs.cu): activations quantised per 128
// values (the stage's token scale), one weight scale per row (ExpertRowScaleMax), every block's
// shift folded into its e4m3 bytes, one fp32 promotion per 128 values. Only the grouping of a
// stage's values into the four k32 MMAs differs (the tensor core may round a k32 sum differently).
// A token's result does not depend on the other tokens of its item.
//
// Structure. Grid (weight rows / 128, max items), 8 warps (two warpgroups of 64 rows), no
// producer warp. At the start thread 0 brings the item's packed stages (PackOrder::kStream,
// moe_block128.cuh: 1,056 bytes per 128-value stage) into shared memory with one bulk copy while
// every lane issues its first kPF stages of weight loads. Lane (g, t) of warp w loads, per stage,
// 16 bytes of rows r and r + 8 (r = 64 wg + 16 (w % 4) + g): 32-value block t (one 16-byte load per
// row, four lanes read a row's 64 contiguous bytes, 128-byte L2 lines like the stream kernel) and
// the two blocks' scale bytes. Word j of a lane's block becomes its A fragment of k32 step j (the
// activations are packed in that order); the four wgmmas of a stage accumulate into `part`, which
// is promoted times the tokens' stage scales.
//
// Variants (kStreamVariants; DEEPINFER_EXPERTS_DECODE_E4M3_VARIANT picks one by name; all give
// the same bits): loads in flight (kPF 4 or 2) and 3 blocks per SM (pf2b3, 80 registers). Run 193
// (decode 4k, B=1 / 8 / 32 / 128 / 256, ms): pf4 1.40-1.42 / 2.49-2.54 / 5.10-5.11 / 9.80-9.85 /
// 13.23-13.25, pf2 1.44-1.48 / 2.49-2.50 / 5.09-5.16 / 9.74-9.79 / 13.11-13.12, pf2b3 1.45 / 2.48 /
// 5.08 / 9.88 / 13.17: within ~1%. A pipelined conversion (stage st + 1's fragments built while
// stage st's MMAs run; one accumulator set, because ptxas serialises the wgmmas, info C7513 /
// C7514, when a non-wgmma instruction reads an accumulator or writes an A register of a wgmma in
// flight) was 2-4% slower at B >= 32 (run 193) and was removed.
#include <cuda_runtime.h>

#include <atomic>
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
#include "base/logging.h"

namespace deepinfer::backend::cuda::kernels::moe_block128 {
namespace {

constexpr int kStreamBN = 8;     // pairs per item
constexpr int kStreamWarps = 8;  // two warpgroups: the block's 128 rows
constexpr int kStreamThreads = 32 * kStreamWarps;
constexpr int kMaxStages = 8192 / kBK;  // K <= 8192 (RoutedExpertsBlock128Applicable)
constexpr int kStageBytes = Pack<kStreamBN>::kStageBytes;
static_assert(kStageBytes % 16 == 0, "stages stay 16-byte aligned for the bulk copy");
static_assert(kShiftTables <= kStreamThreads, "one table per thread");

// Shared memory: the item's packed stages, then the bulk copy's barrier.
constexpr int SmemBytes(int n_stages) { return n_stages * kStageBytes + 8; }

// kPF: stages of weight loads in flight per lane. kMinBlocks: blocks per SM (__launch_bounds__).
template <int kPF, int kMinBlocks>
__global__ void __launch_bounds__(kStreamThreads, kMinBlocks)
    ExpertGemmMxfp4StreamKernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(128) char smem[];
  __shared__ uint2 tables[kShiftTables];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const BlockJob job = BlockJob::Of(a);
  const int tid = static_cast<int>(threadIdx.x), t4 = tid % 4;
  const int n_stages = job.n_stages;
  const LaneRows lr = LaneRowsOf(a, job, tid);
  LaneStage ring[kPF];
  PreloadRing(lr.rows, n_stages, ring);

  const unsigned smem_base = mma::SharedAddress(smem);
  const unsigned bar = smem_base + n_stages * kStageBytes;
  if (tid < kShiftTables) BuildShiftTable(tables, tid);
  if (tid == 0) {
    bulk::BarrierInit(bar, 1);
    bulk::FenceBarrierInit();
  }
  __syncthreads();
  if (tid == 0) {
    const uint32_t bytes = static_cast<uint32_t>(n_stages * kStageBytes);
    bulk::ArriveExpectTx(bar, bytes);
    bulk::BulkCopy(smem_base, a.packed + int64_t{blockIdx.y} * n_stages * kStageBytes, bytes, bar);
  }
  const uint64_t x_desc0 = wgmma::Descriptor(smem_base, 128, kChunks * 128);
  bulk::WaitPhaseOrTrap(bar, 0);

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, part[4];
  uint32_t frag[4][4];
  auto promote = [&](int st) {
    const auto* xs =
        reinterpret_cast<const float*>(smem + st * kStageBytes + Pack<kStreamBN>::kXTileBytes);
    Promote<kStreamBN>(part, xs, t4, 1.0f, 1.0f, acc);
  };
  // Stage st from ring slot u (a constant after unrolling; st % kPF == u).
  auto run_stage = [&](int st, int u) {
    const LaneStage ls = ring[u];
    if (st + kPF < n_stages)
      LoadStage(lr.rows, st + kPF, ring[u]);  // the slot's registers are free
    // Every scale byte of a row is <= its maximum: the shifts are 0 .. 255 (masked all the same,
    // so that row maxima that do not match the weights cannot read past the tables).
    const uint2 t_lo = tables[(lr.smax_lo - ls.s[0]) & 0xFFu];
    const uint2 t_hi = tables[(lr.smax_hi - ls.s[1]) & 0xFFu];
    BuildFragments(ls, t_lo, t_hi, frag);
    IssueStageMmas<kStreamBN>(frag, wgmma::DescriptorPlus(x_desc0, st * kStageBytes), part);
    wgmma::WaitGroup<0>();
    Retired(frag, part);
    promote(st);
  };
  ForEachStage<kPF>(n_stages, run_stage);
  const float ws_lo = RowScale(lr.smax_lo), ws_hi = RowScale(lr.smax_hi);
  acc[0] *= ws_lo, acc[1] *= ws_lo, acc[2] *= ws_hi, acc[3] *= ws_hi;
  StoreOutputs<kStreamBN>(acc, a, job.item, job.v0, job.n_rows, tid);
}

}  // namespace

namespace {

// The compiled variants (all give the same bits): the default first; the others are picked by
// name with DEEPINFER_EXPERTS_DECODE_E4M3_VARIANT (read on every call; run 193 in the file
// comment).
struct StreamVariant {
  const char* name;
  int prefetch;  // kPF
  int min_blocks;
};
constexpr StreamVariant kStreamVariants[] = {
    {"pf4", 4, 2},
    {"pf2", 2, 2},
    {"pf2b3", 2, 3},
};
constexpr int kNumStreamVariants = sizeof(kStreamVariants) / sizeof(kStreamVariants[0]);

int PickStreamVariant() {
  const char* env = std::getenv("DEEPINFER_EXPERTS_DECODE_E4M3_VARIANT");
  if (env == nullptr) return 0;
  for (int i = 0; i < kNumStreamVariants; ++i) {
    if (std::strcmp(env, kStreamVariants[i].name) == 0) return i;
  }
  static std::atomic<bool> warned{false};  // e.g. pipe2 / pipe4, removed in session 23
  if (!warned.exchange(true)) {
    LOG_WARN("DEEPINFER_EXPERTS_DECODE_E4M3_VARIANT={}: no such variant, running {}", env,
             kStreamVariants[0].name);
  }
  return 0;
}

template <int kIndex = 0>
cudaError_t LaunchVariant(int index, const GemmArgs& a, int64_t max_items, int64_t K,
                          cudaStream_t stream) {
  if constexpr (kIndex < kNumStreamVariants) {
    if (index != kIndex) return LaunchVariant<kIndex + 1>(index, a, max_items, K, stream);
    constexpr StreamVariant v = kStreamVariants[kIndex];
    const auto kernel = ExpertGemmMxfp4StreamKernel<v.prefetch, v.min_blocks>;
    const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, SmemBytes(kMaxStages));
    if (e != cudaSuccess) return e;
    const int64_t rows = a.up ? 2 * a.I : a.D;
    const dim3 grid(static_cast<unsigned>(rows / kBM), static_cast<unsigned>(max_items));
    return pdl::Launch(kernel, grid, kStreamThreads,
                       static_cast<size_t>(SmemBytes(static_cast<int>(K / kBK))), stream, a);
  } else {
    return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t LaunchMxfp4StreamGemm(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  if (a.mxfp4 == nullptr || a.row_smax == nullptr) return cudaErrorInvalidValue;
  const int64_t K = a.up ? a.D : a.I;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  if (K % kBK != 0 || K / kBK > kMaxStages || rows % kBM != 0) return cudaErrorInvalidValue;
  return LaunchVariant(PickStreamVariant(), a, max_items, K, stream);
}

}  // namespace deepinfer::backend::cuda::kernels::moe_block128
