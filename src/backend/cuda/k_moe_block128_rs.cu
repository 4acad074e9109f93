// The register-A GEMM of RoutedExpertsBlock128 (kernels_moe_block128.h): the expert GEMMs on FP8
// tensor cores straight from the MXFP4 bytes, without e4m3 copies.
//
// Numerics: those of the copies, with one weight scale per row. smax = the largest ue8m0 byte of
// the whole row (ExpertRowScaleMax, kept with the backend's expert table); each e2m1 value v of a
// 32-value block with byte S becomes the e4m3 byte of v * 2^(S - smax + 6) (nearest even; exact
// while S >= smax - 14). The tensor core sums each 128-value block of K (four k32 steps); the
// kernel promotes that sum into the fp32 accumulator times the activations' token scale and
// multiplies the row's 2^(smax - 133) in once at the end. All scalings are powers of two, so
// wherever a row's blocks lie within 14 octaves of its largest the results are bitwise those of
// one scale per row and 128-value block, and the operand values times their scales are those of
// the copies wherever the copies are exact.
//
// Structure: the e4m3-copy kernel's (k_moe_block128.cu: a producer warp, a ring of slots with
// full / empty mbarriers, two consumer warpgroups of 64 weight rows, one fp32 promotion per 128
// values) with the weight tile as raw MXFP4 bytes: 64 per row and stage, brought by the producer
// warp's 16-byte cp.async copies (L2 256-byte prefetch; rows kRowPitch apart in shared memory:
// conflict-free 4-byte reads) together with the rows' scale words of the stage, completing on the
// full barrier through cp.async.mbarrier.arrive. The A operand is built in registers (wgmma RS
// m64nBNk32). (One bulk copy per 64-byte row piece was 3x slower than the e4m3 copies' kernel: 128
// small TMA requests a stage, run 169.)
//
// Fragment lane t of rows g and g + 8 needs MMA k-indices 4t..4t+3 and 16+4t..16+4t+3. The
// activations are packed in the order PermutedWords32 gives, so that these are the 8 nibbles of
// word t of the row's 16-byte block: one 4-byte shared-memory read per row and k32 step. A nibble
// becomes its e4m3 byte by table: the 8 magnitudes for shift d = smax - S (256 tables of 8 bytes
// built in static shared memory at the start, with the copies' rounding; the four shifts of a
// row's stage are one 32-bit subtraction) picked by PRMT on the 3-bit codes, the signs of four
// values by one sign-mode PRMT (E2m1x8ToE4m3).
//
// Cost (items of 64 pairs; bench/gpu/sass_loop.py on the object file): 202 SASS instructions per
// stage and consumer thread, 94 registers, no spills: 72 convert (9 per word of 8 values), 8 SHF +
// 8 LOP3 + 8 LDS.64 pick the tables, 2 LDS read the scale words and 8 the weights, 32 FFMA + 8
// LDS.64 promote, 4 QGMMA. (Session 20's form with a per-stage maximum took ~310.) ncu (run 183):
// 55% issue, 30% tensor; a warpgroup's conversion and its own MMAs are serial.
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_block128.cuh"
#include "backend/cuda/moe_e4m3_convert.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_fp8.cuh"

namespace deepinfer::backend::cuda::kernels::moe_block128 {
namespace {

constexpr int kRawRowBytes = kBK / 2;           // e2m1 bytes of a row per stage
constexpr int kRowPitch = kRawRowBytes + 16;    // rows 80 bytes apart: banks 20 g + t
constexpr int kRawTileBytes = kBM * kRowPitch;  // one stage's weight rows
static_assert(kShiftTables <= 32 * kConsumerWarps, "the consumer threads build one table each");

constexpr int kScaleWordBytes = kBM * 4;  // the 128 rows' four scale bytes of one stage

// A slot: the raw weight rows, the packed activation stage (X tile, token scales), the rows'
// scale words.
template <int kBN>
struct RsShape {
  static constexpr int kStageBytes = kRawTileBytes + Pack<kBN>::kStageBytes + kScaleWordBytes;
  static constexpr int kScaleOffset = kRawTileBytes + Pack<kBN>::kXTileBytes;
  static constexpr int kScaleWordOffset = kRawTileBytes + Pack<kBN>::kStageBytes;
  // Four slots: five were no faster (RoutedExperts 19.54-19.55 against 19.38-19.41 ms, run 182).
  static constexpr int kStages = 4;
  static constexpr int kMinBlocks = kBN == 64 ? 2 : 1;
  // The ring, the full and empty barriers (the shift tables are static shared memory).
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8;
};

// The largest byte of w.
__device__ __forceinline__ uint32_t MaxByte(uint32_t w) {
  const uint32_t m = __vmaxu4(w, w >> 16);
  return __vmaxu4(m, m >> 8) & 0xFFu;
}

// out[e * stride + r] = the largest scale byte of row r of expert e's [w1; w3; w2] (stride =
// ExpertRowScaleMaxStride(D, I)); one thread per row, grid (ceil(stride / 256), n_experts).
__global__ void __launch_bounds__(256)
    RowScaleMaxKernel(const ExpertPointers* table, int64_t D, int64_t I, uint8_t* out) {
  pdl::WaitThenAllowNext();
  const int64_t stride = ExpertRowScaleMaxStride(D, I);
  const int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (r >= stride) return;
  const ExpertPointers& ep = table[blockIdx.y];
  const ExpertRow er = ExpertRowOf(r, I);
  const int64_t K = er.m == 1 ? I : D;
  const auto* words = reinterpret_cast<const uint32_t*>(ep.scale[er.m] + er.row * (K / 32));
  uint32_t mx = 0;
  for (int64_t w = 0; w < K / 128; ++w) mx = __vmaxu4(mx, __ldg(words + w));
  out[int64_t{blockIdx.y} * stride + r] = static_cast<uint8_t>(MaxByte(mx));
}

// The producer warp: stage st into slot st % kStages once the slot is released -- the item's
// packed stage by one bulk copy (lane 0, with the slot's expected bytes), the 128 weight rows'
// 64 bytes by 16-byte cp.async (chunk c = lane + 32 i: row c / 4, chunk c % 4; four lanes read a
// row's contiguous bytes, the L2 256-byte prefetch brings its next three stages) and their scale
// words by 4-byte cp.async (rows lane + 32 j), each lane arriving on the full barrier once its
// copies have landed. (scale: the block's first row's ue8m0 bytes, K / 32 a row.)
template <int kBN>
__device__ void ProduceStages(const uint8_t* raw, const uint8_t* scale, int64_t K,
                              const uint8_t* xp, int n_stages, unsigned smem_base,
                              Barriers<RsShape<kBN>::kStages> bar, int lane) {
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
    // Chunk c = lane + 32 i is row lane / 4 + 8 i, chunk lane % 4 (addresses by one stride).
    const uint8_t* src = raw + (lane / 4) * (K / 2) + st * kRawRowBytes + (lane % 4) * 16;
    const unsigned dst_lane = dst + (lane / 4) * kRowPitch + (lane % 4) * 16;
#pragma unroll
    for (int i = 0; i < kBM * kRawRowBytes / 16 / 32; ++i) {
      fp8::CpAsync16Prefetch(dst_lane + 8 * i * kRowPitch, src + i * (4 * K));
    }
    const uint8_t* words = scale + lane * (K / 32) + 4 * st;
#pragma unroll
    for (int j = 0; j < kBM / 32; ++j) {
      fp8::CpAsync4(dst + S::kScaleWordOffset + 4 * (lane + 32 * j), words + j * K);
    }
    bulk::CpAsyncArriveNoinc(bar.full(slot));  // one of the 32 lane arrivals the barrier expects
  }
  fp8::CpAsyncWait<0>();  // no copy of this thread outlives it
}

// The A fragment of k32 step b for this lane's rows r_lo and r_lo + 8 (raw: the slot's weight
// rows; d_lo / d_hi: byte b = the row's shift smax - S of its 32-value block b) from word t4 of
// each row's 16-byte block b (wgmma_fp8.cuh: WgmmaE4m3Rs).
__device__ __forceinline__ void BuildFragment(const char* raw, const uint2* tables, int r_lo,
                                              int t4, int b, uint32_t d_lo, uint32_t d_hi,
                                              uint32_t (&frag)[4]) {
  const uint32_t w_lo =
      *reinterpret_cast<const uint32_t*>(raw + r_lo * kRowPitch + 16 * b + 4 * t4);
  const uint32_t w_hi =
      *reinterpret_cast<const uint32_t*>(raw + (r_lo + 8) * kRowPitch + 16 * b + 4 * t4);
  const uint2 t_lo = tables[(d_lo >> (8 * b)) & 0xFFu];
  const uint2 t_hi = tables[(d_hi >> (8 * b)) & 0xFFu];
  E2m1x8ToE4m3(w_lo, t_lo, frag[0], frag[2]);
  E2m1x8ToE4m3(w_hi, t_hi, frag[1], frag[3]);
}

// One stage's four k32 steps into part (overwritten): the four fragments, then the four wgmmas.
// (Issuing each step's wgmma as soon as its fragment is built, so that the tensor core works
// while the next one is built, was slower: RoutedExperts 24.3-24.4 against 24.0 ms, run 180.)
template <int kBN>
__device__ __forceinline__ void StageMmas(const char* raw, const uint2* tables, int r_lo, int t4,
                                          uint32_t d_lo, uint32_t d_hi, uint64_t x_desc,
                                          float (&part)[kBN / 2]) {
  uint32_t frag[4][4];
  wgmma::FenceOperands(part);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    BuildFragment(raw, tables, r_lo, t4, b, d_lo, d_hi, frag[b]);
    wgmma::FenceOperands(frag[b]);
  }
  wgmma::Fence();
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint64_t db = wgmma::DescriptorPlus(x_desc, TileOffset(0, 2 * b));
    wgmma::WgmmaE4m3Rs<kBN>(part, frag[b], db, b > 0 ? 1 : 0);
  }
  wgmma::CommitGroup();
  wgmma::WaitGroup<0>();
  wgmma::FenceOperands(part);
#pragma unroll
  for (int b = 0; b < 4; ++b) wgmma::FenceOperands(frag[b]);
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
  // The shift tables are static shared memory: lookups address them from a uniform register.
  __shared__ uint2 tables[kShiftTables];
  const unsigned smem_base = mma::SharedAddress(smem);
  const Barriers<S::kStages> bar{smem_base + S::kStages * S::kStageBytes};
  if (tid < kShiftTables) BuildShiftTable(tables, tid);
  if (tid == 0) bar.Init(1 + 32);  // lane 0's expect-tx arrival + 32 cp.async ones
  __syncthreads();
  if (warp == kConsumerWarps) {
    ProduceStages<kBN>(static_cast<const uint8_t*>(ep.data[m]) + row0 * (K / 2),
                       ep.scale[m] + row0 * (K / 32), K,
                       a.packed + int64_t{blockIdx.y} * n_stages * Pack<kBN>::kStageBytes, n_stages,
                       smem_base, bar, lane);
    return;
  }

  const int wg = tid / 128, t4 = lane % 4;
  const int r_lo = 64 * wg + 16 * (warp % 4) + lane / 4;  // fragment rows r_lo, r_lo + 8
  // The launch's row v is the table's row v for up ([w1; w3]) and 2I + v for down (w2).
  const uint8_t* smax_rows = a.row_smax + job.item.expert * ExpertRowScaleMaxStride(a.D, a.I) +
                             (a.up ? 0 : 2 * a.I) + job.v0;
  const uint32_t smax_lo = smax_rows[r_lo], smax_hi = smax_rows[r_lo + 8];
  // smax in every byte: minus a stage's four scale bytes (each <= smax, so no borrows) gives
  // the four shifts.
  const uint32_t rep_lo = smax_lo * 0x01010101u, rep_hi = smax_hi * 0x01010101u;
  // The X tile of slot 0 (k32 step b of slot s: + s * kStageBytes + TileOffset(0, 2 b)).
  const uint64_t x_desc0 = wgmma::Descriptor(smem_base + kRawTileBytes, 128, kChunks * 128);
  float acc[kBN / 2], part[kBN / 2];
#pragma unroll
  for (int e = 0; e < kBN / 2; ++e) acc[e] = 0.0f;
  for (int i = 0; i < n_stages; ++i) {
    const int slot = i % S::kStages;
    bulk::WaitPhaseOrTrap(bar.full(slot), (i / S::kStages) & 1);
    const char* slot_bytes = smem + slot * S::kStageBytes;
    const auto* words = reinterpret_cast<const uint32_t*>(slot_bytes + S::kScaleWordOffset);
    const uint32_t d_lo = rep_lo - words[r_lo], d_hi = rep_hi - words[r_lo + 8];
    StageMmas<kBN>(slot_bytes, tables, r_lo, t4, d_lo, d_hi,
                   wgmma::DescriptorPlus(x_desc0, slot * S::kStageBytes), part);
    Promote<kBN>(part, reinterpret_cast<const float*>(slot_bytes + S::kScaleOffset), t4, 1.0f, 1.0f,
                 acc);
    __syncwarp();
    if (lane == 0) bulk::Arrive(bar.empty(slot));  // this warp no longer reads the slot
  }
  const float ws_lo = RowScale(smax_lo), ws_hi = RowScale(smax_hi);
#pragma unroll
  for (int e = 0; e < kBN / 2; ++e) acc[e] *= (e & 3) >= 2 ? ws_hi : ws_lo;
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
  if (a.mxfp4 == nullptr || a.row_smax == nullptr) return cudaErrorInvalidValue;
  if (bn == 64) return Launch<64>(a, max_items, stream);
  if (bn == 96) return Launch<96>(a, max_items, stream);
  if (bn == 128) return Launch<128>(a, max_items, stream);
  return cudaErrorInvalidValue;
}

}  // namespace deepinfer::backend::cuda::kernels::moe_block128

namespace deepinfer::backend::cuda::kernels {

cudaError_t ExpertRowScaleMax(const ExpertPointers* table, int64_t n_experts, int64_t D, int64_t I,
                              uint8_t* out, cudaStream_t stream) {
  if (table == nullptr || out == nullptr || n_experts < 1 || n_experts > 65535 || D <= 0 ||
      I <= 0 || D % 128 != 0 || I % 128 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t rows = ExpertRowScaleMaxStride(D, I);
  const dim3 grid(static_cast<unsigned>((rows + 255) / 256), static_cast<unsigned>(n_experts));
  return pdl::Launch(moe_block128::RowScaleMaxKernel, grid, 256, 0, stream, table, D, I, out);
}

}  // namespace deepinfer::backend::cuda::kernels
