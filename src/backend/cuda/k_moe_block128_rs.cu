// The register-A GEMM of RoutedExpertsBlock128 (kernels_moe_block128.h): the expert GEMMs on FP8
// tensor cores straight from the MXFP4 bytes, without e4m3 copies.
//
// Numerics: those of the copies, with one weight scale per row and 128-value block: smax = the
// largest of the row's four ue8m0 bytes of the block, and each e2m1 value v of a 32-value block
// with byte S becomes the e4m3 byte of v * 2^(S - smax + 6) (nearest even; exact while S >=
// smax - 14), promoted with 2^(smax - 133). Wherever the copy (one smax per 128 x 128 block) is
// exact, the operand values times their scales are the same.
//
// Structure: the e4m3-copy kernel's (k_moe_block128.cu: a producer warp, a ring of slots with
// full / empty mbarriers, two consumer warpgroups of 64 weight rows, one fp32 promotion per 128
// values) with the weight tile as raw MXFP4 bytes -- 64 per row and stage, brought by the
// producer warp's 16-byte cp.async copies (L2 256-byte prefetch; rows kRowPitch apart in shared
// memory: conflict-free 4-byte reads), completing on the full barrier through
// cp.async.mbarrier.arrive -- and the A operand built in registers (wgmma RS m64nBNk32). (One bulk
// copy per 64-byte row piece was 3x slower than the e4m3 copies' kernel: 128 small TMA requests a
// stage, run 169.)
//
// Fragment lane t of rows g and g + 8 needs MMA k-indices 4t..4t+3 and 16+4t..16+4t+3. The
// activations are packed in the order PermutedWords32 gives, so that these are the 8 nibbles of
// word t of the row's 16-byte block: one 4-byte shared-memory read per row and k32 step. A nibble
// becomes its e4m3 byte by table: the 8 magnitudes for shift d = smax - S (32 tables of 8 bytes
// built in shared memory at the start, with the copies' rounding) picked by PRMT on the 3-bit
// codes, the signs of four values by one sign-mode PRMT (E2m1x8ToE4m3).
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_block128.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_fp8.cuh"

namespace deepinfer::backend::cuda::kernels::moe_block128 {
namespace {

constexpr int kRawRowBytes = kBK / 2;           // e2m1 bytes of a row per stage
constexpr int kRowPitch = kRawRowBytes + 16;    // rows 80 bytes apart: banks 20 g + t
constexpr int kRawTileBytes = kBM * kRowPitch;  // one stage's weight rows
constexpr int kShiftTables = 32;                // d = 0 .. 31 (larger d: table 31)
constexpr int kTableBytes = kShiftTables * 8;

template <int kBN>
struct RsShape {
  static constexpr int kStageBytes = kRawTileBytes + Pack<kBN>::kStageBytes;
  static constexpr int kScaleOffset = kRawTileBytes + Pack<kBN>::kXTileBytes;
  static constexpr int kStages = 4;
  static constexpr int kMinBlocks = kBN == 64 ? 2 : 1;
  // The ring, the shift tables, the full and empty barriers.
  static constexpr int kSmemBytes = kStages * kStageBytes + kTableBytes + 2 * kStages * 8;
};

// PTX prmt with an immediate selector, in its default mode (CUDA's __byte_perm ignores bit 3 of
// a selector nibble): byte n of the result is byte (nibble n of kSel) & 7 of {hi, lo}, or, when
// bit 3 of the nibble is set, that byte's bit 7 replicated over the byte.
template <uint32_t kSel>
__device__ __forceinline__ uint32_t PrmtSignMode(uint32_t lo, uint32_t hi) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lo), "r"(hi), "n"(kSel));
  return d;
}

// The eight e2m1 nibbles of w (nibble i = value i) as e4m3 bytes: lo = values 0..3, hi = values
// 4..7 (byte i = value 4 h + i). The magnitude by the shift table (bytes: codes 0 .. 7) picked
// by PRMT on the 3-bit codes; the sign by one sign-mode PRMT per register: byte j of w << 4 has
// nibble 2 j's sign bit as its bit 7, byte j of w nibble 2 j + 1's, so selectors 8 + {0, 4, 1,
// 5} (lo) and 8 + {2, 6, 3, 7} (hi) replicate the eight sign bits in value order; one LOP3
// keeps their bit 7 and ORs it in. 9 instructions per 8 values.
__device__ __forceinline__ void E2m1x8ToE4m3(uint32_t w, uint2 table, uint32_t& lo, uint32_t& hi) {
  const uint32_t codes = w & 0x77777777u;
  const uint32_t w4 = w << 4;
  const uint32_t signs_lo = PrmtSignMode<0xD9C8u>(w4, w);
  const uint32_t signs_hi = PrmtSignMode<0xFBEAu>(w4, w);
  lo = __byte_perm(table.x, table.y, codes) | (signs_lo & 0x80808080u);
  hi = __byte_perm(table.x, table.y, codes >> 16) | (signs_hi & 0x80808080u);
}

// The largest byte of w.
__device__ __forceinline__ uint32_t MaxByte(uint32_t w) {
  const uint32_t m = __vmaxu4(w, w >> 16);
  return __vmaxu4(m, m >> 8) & 0xFFu;
}

// 2^(smax - 133) as a float (normal from smax = 7 on).
__device__ __forceinline__ float RowScale(uint32_t smax) {
  return smax >= 7 ? __uint_as_float((smax - 6) << 23) : ldexpf(1.0f, static_cast<int>(smax) - 133);
}

// Shift table d (thread d < kShiftTables) at tables[d]: byte c (c < 8) = the e4m3 byte of the
// e2m1 code c times 2^(6 - d), rounded like RequantMxFp4Block128.
__device__ __forceinline__ void BuildShiftTable(uint2* tables, int d) {
  const float f = ldexpf(1.0f, 6 - d);
  uint32_t bytes[2] = {0, 0};
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const auto byte = static_cast<uint32_t>(
        __nv_cvt_float_to_fp8(E2m1ToF32(static_cast<uint8_t>(c)) * f, __NV_SATFINITE, __NV_E4M3));
    bytes[c / 4] |= byte << (8 * (c % 4));
  }
  tables[d] = make_uint2(bytes[0], bytes[1]);
}

// The producer warp: stage st into slot st % kStages once the slot is released -- the item's
// packed stage by one bulk copy (lane 0, with the slot's expected bytes), the 128 weight rows'
// 64 bytes by 16-byte cp.async (chunk c = lane + 32 i: row c / 4, chunk c % 4; four lanes read a
// row's contiguous bytes, the L2 256-byte prefetch brings its next three stages), each lane
// arriving on the full barrier once its copies have landed.
template <int kBN>
__device__ void ProduceStages(const uint8_t* raw, int64_t K, const uint8_t* xp, int n_stages,
                              unsigned smem_base, Barriers<RsShape<kBN>::kStages> bar, int lane) {
  using S = RsShape<kBN>;
  for (int st = 0; st < n_stages; ++st) {
    const int slot = st % S::kStages;
    if (st >= S::kStages) bulk::WaitPhaseOrTrap(bar.empty(slot), ((st / S::kStages) - 1) & 1);
    const unsigned dst = smem_base + slot * S::kStageBytes;
    if (lane == 0) {
      bulk::ArriveExpectTx(bar.full(slot), Pack<kBN>::kStageBytes);
      bulk::BulkCopy(dst + kRawTileBytes, xp + int64_t{st} * Pack<kBN>::kStageBytes,
                     Pack<kBN>::kStageBytes, bar.full(slot));
    }
#pragma unroll
    for (int i = 0; i < kBM * kRawRowBytes / 16 / 32; ++i) {
      const int c = lane + 32 * i, r = c / 4, q = c % 4;
      fp8::CpAsync16Prefetch(dst + r * kRowPitch + q * 16,
                             raw + r * (K / 2) + st * kRawRowBytes + q * 16);
    }
    bulk::CpAsyncArriveNoinc(bar.full(slot));  // one of the 32 lane arrivals the barrier expects
  }
  fp8::CpAsyncWait<0>();  // no copy of this thread outlives it
}

// The A fragments of one stage for this lane's rows r_lo and r_lo + 8 (raw: the slot's weight
// rows; s_lo / s_hi: the rows' four scale bytes, max_lo / max_hi their largest): k32 step b's
// registers from word t4 of each row's 16-byte block b (wgmma_fp8.cuh: WgmmaE4m3Rs).
__device__ __forceinline__ void BuildFragments(const char* raw, const uint2* tables, int r_lo,
                                               int t4, uint32_t s_lo, uint32_t s_hi,
                                               uint32_t max_lo, uint32_t max_hi,
                                               uint32_t (&frag)[4][4]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t w_lo =
        *reinterpret_cast<const uint32_t*>(raw + r_lo * kRowPitch + 16 * b + 4 * t4);
    const uint32_t w_hi =
        *reinterpret_cast<const uint32_t*>(raw + (r_lo + 8) * kRowPitch + 16 * b + 4 * t4);
    const uint2 t_lo = tables[min(max_lo - ((s_lo >> (8 * b)) & 0xFFu), kShiftTables - 1u)];
    const uint2 t_hi = tables[min(max_hi - ((s_hi >> (8 * b)) & 0xFFu), kShiftTables - 1u)];
    E2m1x8ToE4m3(w_lo, t_lo, frag[b][0], frag[b][2]);
    E2m1x8ToE4m3(w_hi, t_hi, frag[b][1], frag[b][3]);
  }
}

// Grid (weight rows / 128, max_items), kGemmThreads threads: see the top of the file.
template <int kBN>
__global__ void __launch_bounds__(kGemmThreads, RsShape<kBN>::kMinBlocks)
    ExpertGemmMxfp4Kernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  using S = RsShape<kBN>;
  extern __shared__ __align__(128) char smem[];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const BlockJob job = BlockJob::Of(a);
  const ExpertPointers& ep = a.mxfp4[job.item.expert];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t K = job.K, row0 = job.row0;
  const int n_stages = job.n_stages, m = job.m;
  const unsigned smem_base = mma::SharedAddress(smem);
  auto* tables = reinterpret_cast<uint2*>(smem + S::kStages * S::kStageBytes);
  const Barriers<S::kStages> bar{smem_base + S::kStages * S::kStageBytes + kTableBytes};
  if (tid < kShiftTables) BuildShiftTable(tables, tid);
  if (tid == 0) bar.Init(1 + 32);  // lane 0's expect-tx arrival + 32 cp.async ones
  __syncthreads();
  if (warp == kConsumerWarps) {
    ProduceStages<kBN>(static_cast<const uint8_t*>(ep.data[m]) + row0 * (K / 2), K,
                       a.packed + int64_t{blockIdx.y} * n_stages * Pack<kBN>::kStageBytes, n_stages,
                       smem_base, bar, lane);
    return;
  }

  const int wg = tid / 128, t4 = lane % 4;
  const int r_lo = 64 * wg + 16 * (warp % 4) + lane / 4;  // fragment rows r_lo, r_lo + 8
  const auto* scale_lo = reinterpret_cast<const uint32_t*>(ep.scale[m] + (row0 + r_lo) * (K / 32));
  const auto* scale_hi =
      reinterpret_cast<const uint32_t*>(ep.scale[m] + (row0 + r_lo + 8) * (K / 32));
  float acc[kBN / 2], part[kBN / 2];
#pragma unroll
  for (int e = 0; e < kBN / 2; ++e) acc[e] = 0.0f;
  for (int i = 0; i < n_stages; ++i) {
    const int slot = i % S::kStages;
    const uint32_t s_lo = __ldg(scale_lo + i), s_hi = __ldg(scale_hi + i);  // 4 blocks a row
    const uint32_t max_lo = MaxByte(s_lo), max_hi = MaxByte(s_hi);
    bulk::WaitPhaseOrTrap(bar.full(slot), (i / S::kStages) & 1);
    uint32_t frag[4][4];
    BuildFragments(smem + slot * S::kStageBytes, tables, r_lo, t4, s_lo, s_hi, max_lo, max_hi,
                   frag);
    const unsigned x_base = smem_base + slot * S::kStageBytes + kRawTileBytes;
    wgmma::FenceOperands(part);
#pragma unroll
    for (int b = 0; b < 4; ++b) wgmma::FenceOperands(frag[b]);
    wgmma::Fence();
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint64_t db = wgmma::Descriptor(x_base + TileOffset(0, 2 * b), 128, kChunks * 128);
      wgmma::WgmmaE4m3Rs<kBN>(part, frag[b], db, b > 0 ? 1 : 0);
    }
    wgmma::CommitGroup();
    const float ws_lo = RowScale(max_lo), ws_hi = RowScale(max_hi);
    wgmma::WaitGroup<0>();
    wgmma::FenceOperands(part);
#pragma unroll
    for (int b = 0; b < 4; ++b) wgmma::FenceOperands(frag[b]);
    Promote<kBN>(part,
                 reinterpret_cast<const float*>(smem + slot * S::kStageBytes + S::kScaleOffset), t4,
                 ws_lo, ws_hi, acc);
    __syncwarp();
    if (lane == 0) bulk::Arrive(bar.empty(slot));  // this warp no longer reads the slot
  }
  StoreOutputs<kBN>(acc, a, job.item, job.v0, job.n_rows, tid);
}

template <int kBN>
cudaError_t Launch(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  const auto kernel = ExpertGemmMxfp4Kernel<kBN>;
  const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, RsShape<kBN>::kSmemBytes);
  if (e != cudaSuccess) return e;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>(rows / kBM), static_cast<unsigned>(max_items));
  return pdl::Launch(kernel, grid, kGemmThreads, static_cast<size_t>(RsShape<kBN>::kSmemBytes),
                     stream, a);
}

}  // namespace

cudaError_t LaunchMxfp4Gemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  if (a.mxfp4 == nullptr) return cudaErrorInvalidValue;
  if (bn == 64) return Launch<64>(a, max_items, stream);
  if (bn == 96) return Launch<96>(a, max_items, stream);
  if (bn == 128) return Launch<128>(a, max_items, stream);
  return cudaErrorInvalidValue;
}

}  // namespace deepinfer::backend::cuda::kernels::moe_block128
