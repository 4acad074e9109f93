// Routed experts for prefill-sized batches in FP8-activation mode, on bf16 tensor cores
// (kernels_fp8.h: RoutedExpertsBf16).
//
// Numerics. The FP8 mode's operands are exact in bf16: an activation is an e4m3 value times
// a power-of-two block scale (kFp8Block32Pow2) and an MXFP4 weight is an e2m1 value times
// a ue8m0 block scale, and bf16 holds every such product (8 exponent bits, the 3 or 1
// mantissa bits fit in 7). So the block scales are folded into the operands once
// (activations when they are quantised, weights when a tile is dequantised into shared
// memory) and each output is ONE fp32 tensor-core sum over all of K (wgmma m64nBNk16
// bf16), with no per-32-value partials and fp32 promotions: the promotions made the FP8
// tile (fp8_gemm_core.cuh) issue-bound at prefill (Hopper has no FP8 mma.sync, and a
// 32-value block scale on both sides costs two fp32 ops per output per block, as much as the
// MMA). The ceiling is the bf16 rate (~half the FP8 dense rate); measured below. The
// results differ from RoutedExpertsFp8 only by fp32 rounding of the sums; they do not
// depend on the tile shape, but they do differ from the FP8 tile path, which serves small
// T, so the backend uses this path only outside batch-invariant mode (FP8 mode, from
// CudaBackend::kExpertsBf16MinTokens = 1 token).
//
// Two GEMM kernels, picked by the mean pairs per expert (ceil(T k / n_experts)): up to
// ExpertsStreamMaxMeanPairs() (12; decode) the weight-streaming kernel of k_moe_stream.cu
// (stream_mma.cuh: weights straight from global memory into mma.sync registers, items of 8,
// 16 or 32 pairs), above it a wgmma tile kernel (items of 64 / 96 / 128, 80 when forced; SS below,
// RS in k_moe_rs.cu). Both give one fp32 sum over K per output (different summation orders, so a
// token's bits change when T crosses the threshold; within one kernel they do not depend on the
// other tokens). With at most kDirectMaxPairs pairs (B <= 2 at k = 6) the quantisation kernel
// writes one item per pair and the two grouping launches are skipped.
//
// Launches: every kernel of the path is a programmatic dependent (pdl.cuh; WaitThenAllowNext
// first).
//
// K order. Each group of 8 consecutive K values is stored permuted as 0 4 1 5 2 6 3 7 on
// both sides (weights by the dequantisation, which pairs nibbles k and k + 4 of a 32-bit
// word into one bf16x2 so that both sign bits move by the same shift; activations by their
// quantisation kernels), so the MMA sums the same products.
//
// Weight dequantisation: nibble s|e1 e0|m placed as the bf16 bits s<<15 | (e1 e0 m)<<6 is
// the e2m1 value times 2^-126 (0.5 lands on the subnormal 2^-127); one bf16x2 multiply by
// 2^(S - 1) (S the ue8m0 byte; two multiplies when S > 128) gives value * 2^(S - 127)
// exactly.
//
// Structure of the wgmma kernels (tiling: moe_bf16_tiles.cuh): a block owns 256 weight rows of one
// expert x one item of up to BN pairs, all of K in 64-value stages, with a cp.async ring of the
// stage's e2m1 bytes (with the L2 256-byte prefetch) and bf16 activations (core-matrix layout,
// wgmma_bf16.cuh; B operand by descriptor), the block's scale bytes copied once. Two ways to feed
// the weights (A operand), selected per launch by moe_bf16::PickWgmmaVariant (env
// DEEPINFER_EXPERTS_WGMMA; same bits):
// - SS (ExpertGemmBf16Kernel, "ss"; sessions 6-9): each of 512 threads dequantises the 32 weights
//   it copied into a bf16 tile in shared memory (core-matrix layout), fence.proxy.async,
//   __syncthreads, then four warpgroups (64 rows each) run wgmma m64nBNk16 with both operands
//   from shared memory; stage i's MMAs run while stage i + 1 is dequantised into the other tile.
// - RS (ExpertGemmRsKernel, default "rs", and "rs2"; session 12; k_moe_rs.cu, which documents it
//   and its measurements): each warp dequantises its weight rows from the ring straight into the
//   wgmma A fragment registers; no bf16 tile in shared memory.
// Per 64-value stage of a block at BN 96: MMA ~770 tensor cycles (2048 bf16 MAC / clock / SM; BN 64
// ~510, 128 ~1020); shared memory SS ~140 KiB, RS ~76 KiB, rs2 ~52 KiB (128 B / clock).
//
// Roofline (V4.1-Flash, T = 4096, k = 6, 384 experts of [2304, 5120] x 3 MXFP4: ~64 pairs
// per expert): 1.74 TFLOP per layer; every expert's 18.8 MB read once per item (7.2 GB,
// 1.6 ms at 4.5 TB/s); ~2-3 ms per layer at the bf16 tensor rate.
// MEASURED (SS; H200, session 6; RoutedExperts of a 4096-token prefill, 4 layers): 62 ms with the
// FP8 tile, 44.7-47 ms with the SS kernel in every variant tried (mma.sync, 64/96/128-wide items,
// two or four warpgroups, scales loaded once, the L2 prefetch): ~1.6 us per 64-value stage of a
// block whatever the MMA work, ~170 TFLOP/s of useful work (history: git log of this file).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_bf16_internal.cuh"
#include "backend/cuda/moe_bf16_tiles.cuh"
#include "backend/cuda/moe_groups.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_mma.cuh"
#include "backend/cuda/wgmma_bf16.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;
using moe_bf16::CoreOffset;
using moe_bf16::GemmArgs;
using moe_bf16::GemmItem;
using moe_bf16::kBK;
using moe_bf16::kBM;
using moe_bf16::kKBlocks;
using moe_bf16::kWRawBytes;
using moe_groups::Item;
using moe_groups::MaxItems;
using stream_mma::E2m1PairBits;
using stream_mma::MulBf16x2;

static_assert(sizeof(GemmItem) == sizeof(Item) &&
                  offsetof(GemmItem, count) == offsetof(Item, count),
              "GemmItem mirrors moe_groups::Item");

constexpr int kThreads = 256;           // activation / SwiGLU kernels
constexpr int kGemmThreads = 512;       // expert GEMM: 4 warpgroups of 64 rows each
constexpr int kWChunksPerThread = 1;    // 16-byte weight chunks a GEMM thread copies
constexpr int kRowHalves = 1;           // m64 tiles per warpgroup
constexpr int kABytes = kBM * kBK * 2;  // one dequantised bf16 weight tile (two)

template <int kBN>
struct Shape {
  static_assert(kBN == 64 || kBN == 96 || kBN == 128, "wgmma m64nBNk16 shapes instantiated");
  static constexpr int kXBytes = kBN * kBK * 2;
  static constexpr int kStageBytes = kWRawBytes + kXBytes;
  // cp.async ring depth: 4 stages, 3 at BN 128 (the ring and the two bf16 tiles fit one block
  // per SM's shared memory).
  static constexpr int kStages = kBN == 128 ? 3 : 4;
  // Ring, two bf16 tiles, then the block's scale bytes (ScaleBytes(K), by launch).
  static constexpr int kSmemBytes = kStages * kStageBytes + 2 * kABytes;
};

struct Scratch {
  int64_t xb = 0, hb = 0, gu = 0, out = 0;
  moe_groups::GroupScratch groups;
  int64_t total = 0;
};

Scratch Layout(int64_t T, int64_t k, int64_t D, int64_t I, int64_t n_experts, int bn) {
  const int64_t P = T * k;
  Scratch s;
  ScratchCarver carver;
  s.xb = carver.Take(T * D * 2);
  s.hb = carver.Take(P * I * 2);
  s.gu = carver.Take(P * 2 * I * 4);
  s.out = carver.Take(P * D * 4);
  s.groups = moe_groups::TakeGroupScratch(carver, P, n_experts, bn);
  s.total = carver.total();
  return s;
}

// Mean pairs per expert (rounded up): what decides the item width and the GEMM kernel.
int64_t MeanPairs(int64_t T, int64_t k, int64_t n_experts) {
  return (T * k + n_experts - 1) / n_experts;
}

bool UseStream(int64_t T, int64_t k, int64_t n_experts) {
  return MeanPairs(T, k, n_experts) <= ExpertsStreamMaxMeanPairs();
}

// Item width. Streaming (decode): 8 pairs up to 4 per expert on average (B = 256, k = 6 of
// 384: ~2% of the experts need a second item), 16 up to 12, else 32 (only when
// DEEPINFER_EXPERTS_STREAM_MAX_PAIRS raises the threshold: prefill experiments). wgmma: each item
// re-reads the expert's weights, and columns past an item's pairs are wasted MMA work (prefill 4096
// x 6 / 384: ~64 pairs per expert -> 96; the MMA pipe was ~52% busy with 128-wide items).
// The wgmma item width forced by DEEPINFER_EXPERTS_ITEM_PAIRS (64 / 80 / 96 / 128; read on every
// call, like the variant; experiments), or 0 (unset or another value: ignored).
int ForcedItemPairs() {
  const auto v = static_cast<int>(EnvIntOr(kExpertsItemPairsEnv, 0, 64, 128));
  return v == 64 || v == 80 || v == 96 || v == 128 ? v : 0;
}

// Items of 80 (H200 run 147, T 4096): one layer with uniform random routing 7.75 against 8.15 ms
// at 96, but the 4-layer prefill, whose routing spreads wider (more experts need a second item),
// 54.3k against 55.0k tok/s; so 80 is only a forced width.
int TokensPerItem(int64_t T, int64_t k, int64_t n_experts) {
  const int64_t mean = MeanPairs(T, k, n_experts);
  if (UseStream(T, k, n_experts)) return mean <= 4 ? 8 : mean <= 12 ? 16 : 32;
  if (const int forced = ForcedItemPairs(); forced > 0) return forced;
  const int64_t want = mean + mean / 4;
  return want <= 64 ? 64 : want <= 96 ? 96 : 128;
}

// --- activation quantisation ---------------------------------------------------------

// Quantisation in quads: a warp handles 128 consecutive values (four 32-value blocks), lane l
// values 4 l .. 4 l + 3 (fp8::QuantizeQuadBf16: 8 lanes per block). Stored order: each group of
// 8 values as 0 4 1 5 2 6 3 7, i.e. the 16 bytes of a group interleave lane 2m's four values
// (0..3) with lane 2m + 1's (4..7): the odd lane hands its bits to the even lane, which stores
// the group with one 16-byte store (a warp: 256 contiguous bytes). MEASURED (H200, 4k prefill
// of the 4-layer bench, ncu run 162): with one warp per 32 values and scalar loads SwiGLU took
// 0.45 ms and the quantisation 0.11 ms per layer (~1 TB/s, latency-bound); in quads the
// RoutedExperts op went 35.4 -> 34.4 ms over the 4 layers (run 163).
__device__ __forceinline__ void StoreQuadsBf16(const float (&v)[4], uint16_t* segment) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  uint16_t bits[4];
  fp8::QuantizeQuadBf16(v, bits);
  const uint32_t lo = bits[0] | static_cast<uint32_t>(bits[1]) << 16;  // values 0, 1 (or 4, 5)
  const uint32_t hi = bits[2] | static_cast<uint32_t>(bits[3]) << 16;  // values 2, 3 (or 6, 7)
  const uint32_t odd_lo = __shfl_down_sync(0xffffffffu, lo, 1);
  const uint32_t odd_hi = __shfl_down_sync(0xffffffffu, hi, 1);
  if ((lane & 1) == 0) {
    uint4 group;  // bf16 pairs (v0, v4), (v1, v5), (v2, v6), (v3, v7)
    group.x = __byte_perm(lo, odd_lo, 0x5410);
    group.y = __byte_perm(lo, odd_lo, 0x7632);
    group.z = __byte_perm(hi, odd_hi, 0x5410);
    group.w = __byte_perm(hi, odd_hi, 0x7632);
    *reinterpret_cast<uint4*>(segment + 4 * lane) = group;
  }
}

// Decode with few pairs (P <= kDirectMaxPairs, 8-pair streaming items): every pair is an item
// of its own (order = identity, count 1), written by block 0 of the quantisation kernel
// instead of the two grouping launches (CountPairs, FillGroups: ~2 launches per layer at
// B = 1). A pair's bits are those of the grouped items (one 8-token tile either way); two
// tokens routed to one expert read its weights twice (P <= 16: rare and small).
constexpr int64_t kDirectMaxPairs = 16;

// The direct items' inputs and outputs; experts == nullptr: none (the grouping runs).
struct DirectItems {
  const int32_t* experts = nullptr;  // [P]
  int64_t P = 0, n_experts = 0;
  moe_groups::Groups groups{};
  int* error_word = nullptr;  // kErrExpertOutOfRange for ids outside [0, n_experts)
};

// An out-of-range id gives an item of 0 pairs (no work; CombineSlots makes its row NaN).
__device__ void WriteDirectItems(const DirectItems& d) {
  for (int64_t p = threadIdx.x; p < d.P; p += kThreads) {
    const int32_t e = d.experts[p];
    const bool ok = e >= 0 && e < d.n_experts;
    if (!ok && d.error_word != nullptr) atomicOr(d.error_word, kErrExpertOutOfRange);
    d.groups.order[p] = static_cast<int32_t>(p);
    d.groups.items[p] = Item{ok ? e : 0, static_cast<int32_t>(p), ok ? 1 : 0, 0};
  }
  if (threadIdx.x == 0) *d.groups.n_items = static_cast<int32_t>(d.P);
}

// xb [rows, K] (permuted bf16) = the quantised x [rows, K] (row stride K; K % 128 == 0); one
// warp per 128-value segment (StoreQuadsBf16). Block 0 also writes the direct items if any.
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsBf16Kernel(const float* x, int64_t rows, int64_t K, uint16_t* xb,
                           DirectItems direct) {
  pdl::WaitThenAllowNext();
  if (direct.experts != nullptr && blockIdx.x == 0) WriteDirectItems(direct);
  const int lane = threadIdx.x % 32;
  const int64_t segments = rows * (K / 128);
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; b < segments;
       b += warps) {
    const float4 q = *reinterpret_cast<const float4*>(x + b * 128 + 4 * lane);
    StoreQuadsBf16({q.x, q.y, q.z, q.w}, xb + b * 128);
  }
}

// hb [P, I] (permuted bf16) = quantised SwiGLU(g, u) * weight of pair p (gu [P, 2I]; I % 128 ==
// 0); one warp per 128-value segment of a pair's row (StoreQuadsBf16).
__global__ void __launch_bounds__(kThreads)
    SwiGluBf16Kernel(const float* gu, const float* weights, int64_t P, int64_t I, float limit,
                     uint16_t* hb) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t per_row = I / 128;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; b < P * per_row;
       b += warps) {
    const int64_t p = b / per_row, c = (b % per_row) * 128 + 4 * lane;
    const float4 g = *reinterpret_cast<const float4*>(gu + p * 2 * I + c);
    const float4 u = *reinterpret_cast<const float4*>(gu + p * 2 * I + I + c);
    const float w = weights[p];
    StoreQuadsBf16({SwiGluValue(g.x, u.x, limit) * w, SwiGluValue(g.y, u.y, limit) * w,
                    SwiGluValue(g.z, u.z, limit) * w, SwiGluValue(g.w, u.w, limit) * w},
                   hb + p * I + (c - 4 * lane));
  }
}

// --- the expert GEMM -------------------------------------------------------------------

// 32 e2m1 values (16 bytes, value j in nibble j) times 2^(S - 127) as 32 bf16 in the
// permuted order, written as four 8-value chunks to dst + q * chunk_stride (bf16 elements;
// 16-byte aligned shared memory).
__device__ __forceinline__ void DequantE2m1x32(uint4 raw, uint32_t S, uint16_t* dst,
                                               int chunk_stride) {
  // 2^(S - 1) as bf16x2 when S <= 128 (biased exponent S + 126); else 2^126, then 2^(S - 127).
  const bool one_step = S <= 128;
  const uint32_t f1 = one_step ? (S + 126) << 7 : 253u << 7;
  const uint32_t f1x2 = f1 | (f1 << 16), f2x2 = (S << 7) | (S << 23);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint4 out;
    uint32_t* o = &out.x;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      uint32_t v = MulBf16x2(E2m1PairBits(words[q], k), f1x2);
      if (!one_step) v = MulBf16x2(v, f2x2);
      o[k] = v;
    }
    *reinterpret_cast<uint4*>(dst + q * chunk_stride) = out;
  }
}

template <int kBN>
__global__ void __launch_bounds__(kGemmThreads, 1) ExpertGemmBf16Kernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) char smem[];
  using S = Shape<kBN>;
  constexpr int kXChunks = kBN * (kBK * 2 / 16);  // 16-byte activation copies a stage
  constexpr int kNX = (kXChunks + kGemmThreads - 1) / kGemmThreads;
  static_assert(kWRawBytes / 16 == kWChunksPerThread * kGemmThreads, "weight copies per thread");
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const GemmItem item = a.items[blockIdx.y];
  const ExpertPointers& ep = a.table[item.expert];
  const int tid = threadIdx.x;
  const int64_t n_rows = a.up ? 2 * a.I : a.D, part_rows = a.up ? a.I : a.D;
  const int64_t K = a.up ? a.D : a.I, kblocks = K / 32;
  const int64_t v0 = int64_t{blockIdx.x} * kBM;
  const int32_t* act_rows = a.order + item.start;
  const int act_div = a.up ? static_cast<int>(a.k) : 1;
  const int m0 = a.up ? 0 : 1, m1 = a.up ? 2 : 1;

  // Copy plan. Weight bytes: thread tid copies the 16-byte chunks c = tid + j * kGemmThreads
  // (row c / 2, half c % 2; j < kWChunksPerThread = 1) of every stage and later dequantises
  // exactly them. Scales: all
  // of row tid's at the start (kblocks % 4 == 0 and the scale base 4-byte aligned).
  // Activations: 16-byte chunks of the item's rows.
  const moe_bf16::PartRowOf row_of{part_rows};
  const uint8_t* w_src[kWChunksPerThread];
#pragma unroll
  for (int j = 0; j < kWChunksPerThread; ++j) {
    const int c = tid + j * kGemmThreads;
    w_src[j] = nullptr;
    if (v0 + c / 2 < n_rows) {
      int part = 0;
      const int64_t row = row_of(v0 + c / 2, &part);
      w_src[j] =
          static_cast<const uint8_t*>(ep.data[part ? m1 : m0]) + row * (K / 2) + (c % 2) * 16;
    }
  }
  // All of the block's scale bytes ([kBM][kblocks], after the ring and the two bf16 tiles) once.
  static_assert(kBM <= kGemmThreads, "one scale row per thread");
  uint8_t* scales = reinterpret_cast<uint8_t*>(smem + S::kSmemBytes);
  const unsigned smem_base = mma::SharedAddress(smem);
  moe_bf16::CopyBlockScales(ep, m0, m1, row_of, tid, v0, n_rows, kblocks,
                            smem_base + S::kSmemBytes);
  const uint16_t* x_src[kNX];
  uint32_t x_dst[kNX];
#pragma unroll
  for (int i = 0; i < kNX; ++i) {
    const int c = tid + i * kGemmThreads;
    const int n = c / (kBK * 2 / 16), chunk = c % (kBK * 2 / 16);
    const bool ok = c < kXChunks && n < item.count;
    x_src[i] = ok ? a.act + int64_t{act_rows[n] / act_div} * K + chunk * 8 : nullptr;
    x_dst[i] = CoreOffset(n, chunk);
  }
  // Copies of K stage st into ring slot `slot`. Rows past the job are not copied: their
  // stale shared bytes reach only accumulator rows / token columns that are never stored.
  auto load = [&](int st, int slot) {
    const unsigned base = smem_base + slot * S::kStageBytes;
#pragma unroll
    for (int j = 0; j < kWChunksPerThread; ++j) {
      if (w_src[j] != nullptr) {
        fp8::CpAsync16Prefetch(base + (tid + j * kGemmThreads) * 16,
                               w_src[j] + int64_t{st} * (kBK / 2));
      }
    }
#pragma unroll
    for (int i = 0; i < kNX; ++i) {
      if (x_src[i] != nullptr) {
        fp8::CpAsync16(base + kWRawBytes + x_dst[i], x_src[i] + int64_t{st} * kBK);
      }
    }
  };

  constexpr int kStages = S::kStages;
  uint16_t* a_tiles = reinterpret_cast<uint16_t*>(smem + kStages * S::kStageBytes);
  // Warpgroup accumulators: rows 64 (kRowHalves wg + h) .. + 63 x the BN tokens.
  float acc[kRowHalves][kBN / 2];
  const int n_stages = static_cast<int>(K / kBK);
  // Dequantises stage st (in ring slot st % kStages) into bf16 tile st % 2: the thread's
  // copied chunks, 32 weights each (row c / 2, K half c % 2: one scale block).
  auto dequant = [&](int st) {
    const char* raw_w = smem + (st % kStages) * S::kStageBytes;  // the slot's e2m1 bytes
    char* tile = reinterpret_cast<char*>(a_tiles) + (st % 2) * kABytes;
#pragma unroll
    for (int j = 0; j < kWChunksPerThread; ++j) {
      const int c = tid + j * kGemmThreads, r = c / 2, h = c % 2;
      const uint4 w = *reinterpret_cast<const uint4*>(raw_w + c * 16);
      const uint32_t scale = scales[r * kblocks + 2 * st + h];
      DequantE2m1x32(w, scale, reinterpret_cast<uint16_t*>(tile + CoreOffset(r, 4 * h)), 64);
    }
  };
#pragma unroll
  for (int st = 0; st < kStages - 1; ++st) {
    if (st < n_stages) load(st, st);
    fp8::CpAsyncCommit();
  }
  fp8::CpAsyncWait<kStages - 2>();
  __syncthreads();  // stage 0 landed (every thread's copies)
  dequant(0);
  wgmma::FenceProxyAsync();
  __syncthreads();
  // Iteration i: the warpgroup's MMAs of stage i run asynchronously (wgmma) while the threads
  // dequantise stage i + 1 into the other bf16 tile.
  const uint32_t a_base = mma::SharedAddress(a_tiles);
  const int wg = tid / 128;  // warpgroup: weight rows 64 kRowHalves wg ..
  for (int i = 0; i < n_stages; ++i) {
    const uint32_t x_base = smem_base + (i % kStages) * S::kStageBytes + kWRawBytes;
    const uint32_t a_tile = a_base + (i % 2) * kABytes;
    wgmma::Fence();
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      const uint64_t db = wgmma::Descriptor(x_base + CoreOffset(0, 2 * ks), 128, kKBlocks * 128);
#pragma unroll
      for (int h = 0; h < kRowHalves; ++h) {
        const uint64_t da = wgmma::Descriptor(
            a_tile + CoreOffset(64 * (kRowHalves * wg + h), 2 * ks), 128, kKBlocks * 128);
        wgmma::WgmmaBf16<kBN>(acc[h], da, db, i > 0 || ks > 0 ? 1 : 0);
      }
    }
    wgmma::CommitGroup();
    fp8::CpAsyncWait<kStages - 3>();
    __syncthreads();  // stage i + 1 landed (every thread's copies); stage i - 1's slot is free
    if (i + kStages - 1 < n_stages) load(i + kStages - 1, (i + kStages - 1) % kStages);
    fp8::CpAsyncCommit();
    if (i + 1 < n_stages) dequant(i + 1);
    wgmma::FenceProxyAsync();
    wgmma::WaitGroup<0>();  // stage i's MMAs done: its tile and slot may be rewritten
    __syncthreads();
  }
  fp8::CpAsyncWait<0>();
  // Epilogue (wgmma_bf16.cuh accumulator layout): acc[h][4 j + e] is row
  // 64 (kRowHalves wg + h) + 16 w + g (+ 8 for e >= 2), token 8 j + 2 t (+ 1 for odd e); w the
  // warp within warpgroup wg.
  const int warp = tid / 32, lane = tid % 32, g = lane / 4;
  const auto row_of_fragment = [&](int h, int half) {
    return 64 * (kRowHalves * wg + h) + 16 * (warp % 4) + g + 8 * half;
  };
  moe_bf16::StoreAccumulators<kBN>(acc, row_of_fragment, v0, n_rows, item.count, act_rows, lane % 4,
                                   a.out);
}

template <int kBN>
cudaError_t LaunchSsGemm(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  return moe_bf16::LaunchExpertGemm(ExpertGemmBf16Kernel<kBN>, kGemmThreads, Shape<kBN>::kSmemBytes,
                                    a, max_items, stream);
}

// The wgmma kernel of the variant PickWgmmaVariant(bn) for items of bn (64, 80, 96, 128) pairs.
cudaError_t LaunchGemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  using moe_bf16::WgmmaVariant;
  const WgmmaVariant v = moe_bf16::PickWgmmaVariant(bn);
  if (v == WgmmaVariant::kSs) {
    if (bn == 64) return LaunchSsGemm<64>(a, max_items, stream);
    if (bn <= 96) return LaunchSsGemm<96>(a, max_items, stream);  // items of 80: the 96 tile
    return LaunchSsGemm<128>(a, max_items, stream);
  }
  return moe_bf16::LaunchRsGemm(v, bn, a, max_items, stream);
}

}  // namespace

int64_t ExpertsStreamMaxMeanPairs() {
  return EnvIntOr("DEEPINFER_EXPERTS_STREAM_MAX_PAIRS", kExpertsStreamMaxMeanPairs, 0, INT64_MAX);
}

bool RoutedExpertsBf16Applicable(WeightFormat up_format, WeightFormat down_format, int64_t D,
                                 int64_t I, int64_t T, int64_t k, int64_t n_experts) {
  return up_format == WeightFormat::kMxFp4 && down_format == WeightFormat::kMxFp4 && D > 0 &&
         I > 0 && D % 128 == 0 && I % 128 == 0 && std::max(D, I) <= 8192 && T >= 1 && k >= 1 &&
         k <= kMaxFusedExpertSlots && n_experts >= 1 && T * k <= (int64_t{1} << 30) &&
         MaxItems(T * k, n_experts, TokensPerItem(T, k, n_experts)) <= 65535;
}

int RoutedExpertsBf16ItemPairs(int64_t T, int64_t k, int64_t n_experts) {
  return TokensPerItem(T, k, n_experts);
}

int64_t RoutedExpertsBf16ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                      int64_t n_experts) {
  return Layout(T, k, D, I, n_experts, TokensPerItem(T, k, n_experts)).total;
}

cudaError_t RoutedExpertsBf16(const RoutedExpertsLaunch& l, void* scratch, cudaStream_t stream) {
  if (l.T <= 0) return cudaSuccess;
  if (!RoutedExpertsBf16Applicable(l.up_format, l.down_format, l.D, l.I, l.T, l.k, l.n_experts) ||
      !Aligned16(l.x)) {  // x: float4 loads (QuantizeRowsBf16Kernel)
    return cudaErrorInvalidValue;
  }
  const int bn = TokensPerItem(l.T, l.k, l.n_experts);
  const int64_t P = l.T * l.k;
  const Scratch s = Layout(l.T, l.k, l.D, l.I, l.n_experts, bn);
  auto* base = static_cast<char*>(scratch);
  auto* xb = reinterpret_cast<uint16_t*>(base + s.xb);
  auto* hb = reinterpret_cast<uint16_t*>(base + s.hb);
  auto* gu = reinterpret_cast<float*>(base + s.gu);
  auto* out = reinterpret_cast<float*>(base + s.out);
  const moe_groups::Groups groups = moe_groups::GroupsAt(base, s.groups);
  const int64_t max_items = MaxItems(P, l.n_experts, bn);

  DirectItems direct;
  if (bn == 8 && P <= kDirectMaxPairs && P <= max_items) {
    direct = DirectItems{l.experts, P, l.n_experts, groups, l.error_word};
  }
  cudaError_t e = pdl::Launch(QuantizeRowsBf16Kernel, fp8::WarpPerBlockGrid(l.T * (l.D / 128)),
                              kThreads, 0, stream, l.x, l.T, l.D, xb, direct);
  if (e == cudaSuccess && direct.experts == nullptr) {
    e = moe_groups::LaunchGrouping(l.experts, P, l.n_experts, bn, groups, l.error_word, stream);
  }
  if (e != cudaSuccess) return e;

  GemmArgs a{};
  a.table = l.table;
  a.D = l.D;
  a.I = l.I;
  a.k = l.k;
  a.order = groups.order;
  a.items = reinterpret_cast<const GemmItem*>(groups.items);
  a.n_items = groups.n_items;
  a.up = true;
  a.act = xb;
  a.out = gu;
  auto gemm = [&] {
    return bn <= moe_bf16::kStreamMaxItemPairs
               ? moe_bf16::LaunchStreamGemm(bn, a, max_items, stream)
               : LaunchGemm(bn, a, max_items, stream);
  };
  if ((e = gemm()) != cudaSuccess) return e;
  e = pdl::Launch(SwiGluBf16Kernel, fp8::WarpPerBlockGrid(P * (l.I / 128)), kThreads, 0, stream, gu,
                  l.weights, P, l.I, l.swiglu_limit, hb);
  if (e != cudaSuccess) return e;
  a.up = false;
  a.act = hb;
  a.out = out;
  if ((e = gemm()) != cudaSuccess) return e;
  return CombineSlots(out, l.experts, l.T, l.k, l.n_experts, l.D, l.y, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
