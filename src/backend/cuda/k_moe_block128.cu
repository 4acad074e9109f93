// Routed experts for prefill on FP8 tensor cores over block-128 e4m3 copies of the experts
// (kernels_moe_block128.h, which states the numerics).
//
// Why. The bf16 path (k_moe_bf16.cu / k_moe_rs.cu) dequantises MXFP4 into bf16 wgmma operands:
// ~210 TFLOP/s at the V4.1 shape, half of it the dequantisation's issue, and a ceiling of the
// bf16 rate. Here both operands are e4m3 already in memory (the copies; k_moe_block128_rs.cu
// builds them in registers from the MXFP4 bytes instead), with one fp32 promotion per 128 values.
//
// GEMM structure (ExpertGemmBlock128Kernel). Grid: (weight rows / 128) x work items (the
// grouping of moe_groups.cuh: up to BN pairs of one expert). A block owns 128 weight rows -- one
// row block of the copy's scales, in one matrix (w1, w3 or w2) -- times one item, all of K in
// 128-value stages through a ring of kStages slots. A producer warp fills slot st % kStages with
// stage st by two bulk copies on the slot's full mbarrier: the weight tile (16 KiB, stored in the
// no-swizzle core-matrix layout of wgmma_fp8.cuh) and the item's packed stage (PackItemsKernel:
// its tokens' 128 values in the same layout, then their scales). Two consumer warpgroups (64 rows
// each) wait for the full barrier, run four SS wgmma m64nBNk32 into a partial accumulator (the
// first overwrites it), wait for them, add partial * (weight block scale * token scale) into
// their fp32 accumulator, and release the slot on its empty mbarrier (one arrival per warp). No
// block barrier in the loop: one warpgroup's promotion overlaps the other's MMAs.
//
// Roofline at the V4.1 shape (T = 4096, k = 6, 384 experts of [2304, 5120] x 3): 1.74 TFLOP per
// layer (1.2 ms at the measured ~1,420 TFLOP/s FP8 rate); the copies are 13.6 GB per layer, read
// at least once per layer (~3 ms at 4.5 TB/s): at 4k the path is bound by the weight bytes, from
// ~16k tokens by the tensor cores.
#include <cuda_fp8.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/kernels_moe_block128.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_block128.cuh"
#include "backend/cuda/moe_groups.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_fp8.cuh"
#include "base/check.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

using moe_block128::Barriers;
using moe_block128::BlockJob;
using moe_block128::GemmArgs;
using moe_block128::Item;
using moe_block128::kBK;
using moe_block128::kBM;
using moe_block128::kChunks;
using moe_block128::kConsumerWarps;
using moe_block128::kGemmThreads;
using moe_block128::kWTileBytes;
using moe_block128::Pack;
using moe_block128::TileOffset;
using moe_groups::MaxItems;

static_assert(sizeof(moe_block128::GemmItem) == sizeof(moe_groups::Item) &&
                  offsetof(moe_block128::GemmItem, count) == offsetof(moe_groups::Item, count),
              "GemmItem mirrors moe_groups::Item");

constexpr int kThreads = 256;  // quantisation / SwiGLU / re-blocking kernels

// The e4m3-copy GEMM's ring: slot = the weight tile, then one packed activation stage.
template <int kBN>
struct Shape {
  static constexpr int kScaleOffset = kWTileBytes + Pack<kBN>::kXTileBytes;  // in a ring slot
  static constexpr int kStageBytes = kWTileBytes + Pack<kBN>::kStageBytes;
  // Ring depth: 5 slots; 4 at BN 64, whose ~99 KiB and <= 112 registers let two blocks share an
  // SM.
  static constexpr int kStages = kBN == 64 ? 4 : 5;
  static constexpr int kMinBlocks = kBN == 64 ? 2 : 1;
  // The ring, then the full and empty barriers of its slots.
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kStages * 8;
};
// Grid (weight rows / 128, max_items): 2 consumer warpgroups (weight rows 64 wg .. + 63 of the
// block's 128) and one producer warp. The producer's lane 0 fills ring slot st % kStages with
// stage st -- the weight tile (16 KiB) and the item's packed stage, two bulk copies completing
// on the slot's full barrier -- once the consumers have released the slot (its empty barrier,
// one arrival per consumer warp). A consumer warpgroup waits for the full barrier, runs four SS
// wgmma m64nBNk32 into `part` (the first overwrites it), waits for them and promotes part *
// weight block scale * token scale into acc, then releases the slot. The two warpgroups drift
// apart freely: one's promotion overlaps the other's MMAs.
template <int kBN>
__global__ void __launch_bounds__(kGemmThreads, Shape<kBN>::kMinBlocks)
    ExpertGemmBlock128Kernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  using S = Shape<kBN>;
  extern __shared__ __align__(128) char smem[];
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const BlockJob job = BlockJob::Of(a);
  const ExpertBlock128Pointers& ep = a.table[job.item.expert];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t K = job.K, row0 = job.row0;
  const int n_stages = job.n_stages, m = job.m;
  const unsigned smem_base = mma::SharedAddress(smem);
  const Barriers<S::kStages> bar{smem_base + S::kStages * S::kStageBytes};
  if (tid == 0) bar.Init(1);
  __syncthreads();

  if (warp == kConsumerWarps) {  // the producer
    if (lane != 0) return;
    // The row block's tiles, K block after K block (16 KiB each, already in the smem layout).
    const uint8_t* w = ep.data[m] + (row0 / kBM) * (K / kBK) * kWTileBytes;
    const uint8_t* xp = a.packed + int64_t{blockIdx.y} * n_stages * Pack<kBN>::kStageBytes;
    for (int st = 0; st < n_stages; ++st) {
      const int slot = st % S::kStages;
      if (st >= S::kStages) bulk::WaitPhaseOrTrap(bar.empty(slot), ((st / S::kStages) - 1) & 1);
      const unsigned dst = smem_base + slot * S::kStageBytes;
      bulk::ArriveExpectTx(bar.full(slot), kWTileBytes + Pack<kBN>::kStageBytes);
      bulk::BulkCopy(dst, w + int64_t{st} * kWTileBytes, kWTileBytes, bar.full(slot));
      bulk::BulkCopy(dst + kWTileBytes, xp + int64_t{st} * Pack<kBN>::kStageBytes,
                     Pack<kBN>::kStageBytes, bar.full(slot));
    }
    return;
  }

  const float* w_scale = ep.scale[m] + (row0 / kBM) * a.w_scale_ld;
  const int wg = tid / 128, t4 = tid % 4;
  float acc[kBN / 2], part[kBN / 2];
#pragma unroll
  for (int e = 0; e < kBN / 2; ++e) acc[e] = 0.0f;
  for (int i = 0; i < n_stages; ++i) {
    const int slot = i % S::kStages;
    const unsigned base = smem_base + slot * S::kStageBytes;
    bulk::WaitPhaseOrTrap(bar.full(slot), (i / S::kStages) & 1);
    wgmma::FenceOperands(part);
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 32; ++ks) {
      const uint64_t da = wgmma::Descriptor(base + TileOffset(64 * wg, 2 * ks), 128, kChunks * 128);
      const uint64_t db =
          wgmma::Descriptor(base + kWTileBytes + TileOffset(0, 2 * ks), 128, kChunks * 128);
      wgmma::WgmmaE4m3<kBN>(part, da, db, ks > 0 ? 1 : 0);
    }
    wgmma::CommitGroup();
    const float ws = __ldg(w_scale + i);
    wgmma::WaitGroup<0>();
    wgmma::FenceOperands(part);
    const auto* xs = reinterpret_cast<const float*>(smem + slot * S::kStageBytes + S::kScaleOffset);
    moe_block128::Promote<kBN>(part, xs, t4, ws, ws, acc);  // one scale per 128 x 128 block
    __syncwarp();
    if (lane == 0) bulk::Arrive(bar.empty(slot));  // this warp no longer reads the slot
  }
  moe_block128::StoreOutputs<kBN>(acc, a, job.item, job.v0, job.n_rows, tid);
}

// Packs the activations of a launch's items, then runs the e4m3-copy GEMM (a.table != null) or
// the register-A GEMM over the MXFP4 experts (a.mxfp4) over them.
template <int kBN>
cudaError_t LaunchGemm(const GemmArgs& a, const uint8_t* act, const float* act_scale,
                       int64_t scale_ld, int64_t act_div, int64_t max_items, uint8_t* packed,
                       cudaStream_t stream) {
  GemmArgs g = a;
  g.packed = packed;
  const bool copies = a.table != nullptr;
  using moe_block128::PackOrder;
  cudaError_t e = copies ? moe_block128::LaunchPack<kBN, PackOrder::kTile>(
                               a, act, act_scale, scale_ld, act_div, max_items, packed, stream)
                         : moe_block128::LaunchPack<kBN, PackOrder::kRegister>(
                               a, act, act_scale, scale_ld, act_div, max_items, packed, stream);
  if (e != cudaSuccess) return e;
  if (!copies) return moe_block128::LaunchMxfp4Gemm(kBN, g, max_items, stream);
  const auto kernel = ExpertGemmBlock128Kernel<kBN>;
  if ((e = launch::RaiseMaxDynamicSmem(kernel, Shape<kBN>::kSmemBytes)) != cudaSuccess) return e;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>(rows / kBM), static_cast<unsigned>(max_items));
  return pdl::Launch(kernel, grid, kGemmThreads, static_cast<size_t>(Shape<kBN>::kSmemBytes),
                     stream, g);
}

// Bytes of one launch's packed stages (K values per token).
int64_t PackedBytes(int bn, int64_t max_items, int64_t K) {
  return max_items * (K / kBK) * moe_block128::PackStageBytes(bn);
}

cudaError_t LaunchGemmOfWidth(int bn, const GemmArgs& a, const uint8_t* act, const float* act_scale,
                              int64_t scale_ld, int64_t act_div, int64_t max_items, uint8_t* packed,
                              cudaStream_t stream) {
  if (bn == kBlock128DecodeItemPairs) {  // the decode streaming GEMM (MXFP4 bytes only)
    GemmArgs g = a;
    g.packed = packed;
    const cudaError_t e =
        moe_block128::LaunchPack<kBlock128DecodeItemPairs, moe_block128::PackOrder::kStream>(
            a, act, act_scale, scale_ld, act_div, max_items, packed, stream);
    return e != cudaSuccess ? e : moe_block128::LaunchMxfp4StreamGemm(g, max_items, stream);
  }
  if (bn == 64) {
    return LaunchGemm<64>(a, act, act_scale, scale_ld, act_div, max_items, packed, stream);
  }
  if (bn == 96) {
    return LaunchGemm<96>(a, act, act_scale, scale_ld, act_div, max_items, packed, stream);
  }
  return LaunchGemm<128>(a, act, act_scale, scale_ld, act_div, max_items, packed, stream);
}

// hq [P, I] e4m3 and hs [I / 128][hs_ld] = SwiGLU(g, u) * weight of pair p quantised per 128
// values (gu [P, 2I]); one warp per (pair, 128-value block), lane l values 4 l .. 4 l + 3.
__global__ void __launch_bounds__(kThreads)
    SwiGluBlock128Kernel(const float* gu, const float* weights, int64_t P, int64_t I, float limit,
                         uint8_t* hq, float* hs, int64_t hs_ld) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t per_row = I / kBK;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; b < P * per_row;
       b += warps) {
    const int64_t p = b / per_row, kb = b % per_row, c = kb * kBK + 4 * lane;
    const float4 g = *reinterpret_cast<const float4*>(gu + p * 2 * I + c);
    const float4 u = *reinterpret_cast<const float4*>(gu + p * 2 * I + I + c);
    const float wt = weights[p];
    const float v[4] = {SwiGluValue(g.x, u.x, limit) * wt, SwiGluValue(g.y, u.y, limit) * wt,
                        SwiGluValue(g.z, u.z, limit) * wt, SwiGluValue(g.w, u.w, limit) * wt};
    float s;
    *reinterpret_cast<uint32_t*>(hq + p * I + c) = QuantizeWarpBlock128E4m3(v, &s);
    if (lane == 0) hs[kb * hs_ld + p] = s;
  }
}

// One block per 128 x 128 block of an MXFP4 matrix (blockIdx.x = K block, .y = row block).
// smax = the largest of the block's ue8m0 scale bytes; value (e2m1 times 2^(S - 127)) is stored
// as the e4m3 byte of e2m1 * 2^(S - smax + 6) (nearest even; exact while S >= smax - 14) with
// the block scale 2^(smax - 133), in the tile layout (ExpertBlock128ByteOffset). Thread t: row
// t / 2 of the block, values 64 (t % 2) .. + 63 (four 16-byte chunks of the tile).
__global__ void __launch_bounds__(kThreads)
    RequantMxFp4Block128Kernel(const uint8_t* data, const uint8_t* scale, int64_t cols,
                               uint8_t* out, float* out_scale, int64_t scale_ld) {
  pdl::WaitThenAllowNext();
  __shared__ int block_max;
  const int64_t kb = blockIdx.x, rb = blockIdx.y;
  const int tid = threadIdx.x, half = tid % 2, r = tid / 2;
  const int64_t row = rb * kBM + r;
  const uint8_t* s_row = scale + row * (cols / 32) + kb * 4 + half * 2;
  const int s0 = s_row[0], s1 = s_row[1];
  if (tid == 0) block_max = 0;
  __syncthreads();
  atomicMax(&block_max, max(s0, s1));
  __syncthreads();
  const int smax = block_max;
  const uint8_t* src = data + row * (cols / 2) + kb * (kBK / 2) + half * 32;
  uint8_t* tile = out + (rb * (cols / kBK) + kb) * kWTileBytes;
#pragma unroll
  for (int q = 0; q < 2; ++q) {  // one 32-value scale block: 16 bytes in, two chunks out
    const float f = ldexpf(1.0f, (q == 0 ? s0 : s1) - smax + 6);
    const uint4 raw = *reinterpret_cast<const uint4*>(src + 16 * q);
    const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
    uint32_t packed[8];
#pragma unroll
    for (int wi = 0; wi < 4; ++wi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t p = 0;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t nibble = (words[wi] >> (4 * (4 * h + j))) & 0xFu;
          const auto byte = static_cast<uint32_t>(__nv_cvt_float_to_fp8(
              E2m1ToF32(static_cast<uint8_t>(nibble)) * f, __NV_SATFINITE, __NV_E4M3));
          p |= byte << (8 * j);
        }
        packed[2 * wi + h] = p;
      }
    }
    const int chunk = 4 * half + 2 * q;
    *reinterpret_cast<uint4*>(tile + TileOffset(r, chunk)) =
        make_uint4(packed[0], packed[1], packed[2], packed[3]);
    *reinterpret_cast<uint4*>(tile + TileOffset(r, chunk + 1)) =
        make_uint4(packed[4], packed[5], packed[6], packed[7]);
  }
  if (tid == 0) out_scale[rb * scale_ld + kb] = ldexpf(1.0f, smax - 133);
}

struct Scratch {
  int64_t xq = 0, gu = 0, hq = 0, out = 0, packed = 0;
  moe_groups::GroupScratch groups;
  int64_t row_smax = 0;  // the register path's row scales (ExpertRowScaleMax)
  int64_t total = 0;
};

Scratch Layout(int64_t T, int64_t k, int64_t D, int64_t I, int64_t n_experts, int bn) {
  const int64_t P = T * k;
  Scratch s;
  ScratchCarver carver;
  s.xq = carver.Take(Block128ActivationBytes(T, D));
  s.gu = carver.Take(P * 2 * I * 4);
  s.hq = carver.Take(Block128ActivationBytes(P, I));
  s.out = carver.Take(P * D * 4);
  s.packed = carver.Take(PackedBytes(bn, MaxItems(P, n_experts, bn), std::max(D, I)));
  s.groups = moe_groups::TakeGroupScratch(carver, P, n_experts, bn);
  s.row_smax = carver.Take(n_experts * ExpertRowScaleMaxStride(D, I));
  s.total = carver.total();
  return s;
}

}  // namespace

bool ExpertBlock128Convertible(const DeviceWeight& w) {
  return w.format == model::WeightFormat::kMxFp4 && w.data != nullptr && w.scale != nullptr &&
         Aligned16(w.data) && w.rows > 0 && w.cols > 0 && w.rows % kBM == 0 && w.cols % kBK == 0;
}

cudaError_t RequantMxFp4Block128(const DeviceWeight& w, void* buffer, cudaStream_t stream) {
  if (!ExpertBlock128Convertible(w) || !Aligned16(buffer)) return cudaErrorInvalidValue;
  const Block128Weight view = Block128WeightAt(buffer, w.rows, w.cols);
  const dim3 grid(static_cast<unsigned>(w.cols / kBK), static_cast<unsigned>(w.rows / kBM));
  return pdl::Launch(RequantMxFp4Block128Kernel, grid, kThreads, 0, stream,
                     static_cast<const uint8_t*>(w.data), w.scale, w.cols,
                     const_cast<uint8_t*>(view.data), const_cast<float*>(view.scale),
                     view.scale_ld);
}

int RoutedExpertsBlock128ItemPairs(int64_t T, int64_t k, int64_t n_experts) {
  // Items of 64 pairs: two blocks share an SM (~99 KiB, <= 112 registers). MEASURED (H200, run
  // 166, the 4-layer prefill's RoutedExperts at 4k / prefill tok/s at 4k and 16k): items of 64
  // 18.3 ms / 81.2k / 76.2k, 96 21.3 ms / 75.4k / 72.9k, 128 22.4 ms / 73.1k / 73.4k, even
  // though wider items read each expert's weights fewer times.
  // DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS = 96 / 128 (read on every call): experiments.
  (void)T, (void)k, (void)n_experts;
  const int64_t forced = EnvIntOr("DEEPINFER_EXPERTS_BLOCK128_ITEM_PAIRS", 64, 0, 1 << 20);
  return forced == 96 || forced == 128 ? static_cast<int>(forced) : 64;
}

namespace {

// The item widths a launch may use: the prefill GEMMs' 64, 96 and 128, and the decode form's.
bool KnownItemPairs(int item_pairs) {
  return item_pairs == kBlock128DecodeItemPairs || item_pairs == 64 || item_pairs == 96 ||
         item_pairs == 128;
}

bool ShapesFit(int64_t D, int64_t I, int64_t T, int64_t k, int64_t n_experts) {
  return D > 0 && I > 0 && D % 128 == 0 && I % 128 == 0 && std::max(D, I) <= 8192 && T >= 1 &&
         k >= 1 && k <= kMaxFusedExpertSlots && n_experts >= 1 && T * k <= (int64_t{1} << 30);
}

}  // namespace

bool RoutedExpertsBlock128Applicable(int64_t D, int64_t I, int64_t T, int64_t k,
                                     int64_t n_experts) {
  if (!ShapesFit(D, I, T, k, n_experts)) return false;
  const int64_t mean_pairs = (T * k + n_experts - 1) / n_experts;
  // Items of 64 pairs, the narrowest width, give the most items (the grid's y limit).
  return mean_pairs > ExpertsStreamMaxMeanPairs() && MaxItems(T * k, n_experts, 64) <= 65535;
}

bool RoutedExpertsBlock128DecodeApplicable(int64_t D, int64_t I, int64_t T, int64_t k,
                                           int64_t n_experts) {
  if (!ShapesFit(D, I, T, k, n_experts)) return false;
  // Decode sizes only: items of 8 pairs read an expert's weights once per 8 of its pairs.
  const int64_t mean_pairs = (T * k + n_experts - 1) / n_experts;
  return mean_pairs <= ExpertsStreamMaxMeanPairs() &&
         MaxItems(T * k, n_experts, kBlock128DecodeItemPairs) <= 65535;
}

int64_t RoutedExpertsBlock128ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                          int64_t n_experts, int item_pairs) {
  CHECK(KnownItemPairs(item_pairs)) << item_pairs;
  return Layout(T, k, D, I, n_experts, item_pairs).total;
}

cudaError_t RoutedExpertsBlock128(const RoutedExpertsLaunch& l, int item_pairs,
                                  const ExpertBlock128Pointers* copies, const uint8_t* row_smax,
                                  void* scratch, cudaStream_t stream) {
  if (l.T <= 0) return cudaSuccess;
  const bool decode = item_pairs == kBlock128DecodeItemPairs;
  if (!KnownItemPairs(item_pairs) ||
      (decode ? copies != nullptr ||
                    !RoutedExpertsBlock128DecodeApplicable(l.D, l.I, l.T, l.k, l.n_experts)
              : !RoutedExpertsBlock128Applicable(l.D, l.I, l.T, l.k, l.n_experts)) ||
      l.up_format != model::WeightFormat::kMxFp4 || l.down_format != model::WeightFormat::kMxFp4 ||
      (copies == nullptr && l.table == nullptr) || !Aligned16(l.x)) {
    return cudaErrorInvalidValue;
  }
  const int bn = item_pairs;
  const int64_t P = l.T * l.k;
  const Scratch s = Layout(l.T, l.k, l.D, l.I, l.n_experts, bn);
  auto* base = static_cast<char*>(scratch);
  auto* xq = reinterpret_cast<uint8_t*>(base + s.xq);
  auto* gu = reinterpret_cast<float*>(base + s.gu);
  auto* hq = reinterpret_cast<uint8_t*>(base + s.hq);
  auto* out = reinterpret_cast<float*>(base + s.out);
  float* xs = Block128ActivationScales(xq, l.T, l.D);
  float* hs = Block128ActivationScales(hq, P, l.I);
  const moe_groups::Groups groups = moe_groups::GroupsAt(base, s.groups);
  const int64_t max_items = MaxItems(P, l.n_experts, bn);

  cudaError_t e = cudaSuccess;
  if (copies == nullptr && row_smax == nullptr) {
    auto* made = reinterpret_cast<uint8_t*>(base + s.row_smax);
    e = ExpertRowScaleMax(l.table, l.n_experts, l.D, l.I, made, stream);
    row_smax = made;
  }
  if (e == cudaSuccess) e = QuantizeFp8Block128(l.x, l.T, l.D, l.D, xq, xs, stream);
  if (e == cudaSuccess) {
    e = moe_groups::LaunchGrouping(l.experts, P, l.n_experts, bn, groups, l.error_word, stream);
  }
  if (e != cudaSuccess) return e;
  auto* packed = reinterpret_cast<uint8_t*>(base + s.packed);
  GemmArgs a{};
  a.table = copies;
  a.mxfp4 = l.table;
  a.row_smax = row_smax;
  a.D = l.D;
  a.I = l.I;
  a.order = groups.order;
  a.items = reinterpret_cast<const moe_block128::GemmItem*>(groups.items);
  a.n_items = groups.n_items;
  a.up = true;
  a.w_scale_ld = Block128ScaleLd(l.D / kBK);
  a.out = gu;
  e = LaunchGemmOfWidth(bn, a, xq, xs, Block128ScaleLd(l.T), l.k, max_items, packed, stream);
  if (e != cudaSuccess) return e;
  e = pdl::Launch(SwiGluBlock128Kernel, fp8::WarpPerBlockGrid(P * (l.I / kBK)), kThreads, 0, stream,
                  gu, l.weights, P, l.I, l.swiglu_limit, hq, hs, Block128ScaleLd(P));
  if (e != cudaSuccess) return e;
  a.up = false;
  a.w_scale_ld = Block128ScaleLd(l.I / kBK);
  a.out = out;
  e = LaunchGemmOfWidth(bn, a, hq, hs, Block128ScaleLd(P), 1, max_items, packed, stream);
  if (e != cudaSuccess) return e;
  return CombineSlots(out, l.experts, l.T, l.k, l.n_experts, l.D, l.y, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
