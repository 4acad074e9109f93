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
// 16 or 32 pairs), above it the wgmma tile kernel below (items of 64 / 96 / 128). Both give one
// fp32 sum over K per output (different summation orders, so a token's bits change when T crosses
// the threshold; within one kernel they do not depend on the other tokens). With at most
// kDirectMaxPairs pairs (B <= 2 at k = 6) the quantisation kernel writes one item per pair
// and the two grouping launches are skipped.
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
// Structure of the wgmma kernels: a block owns 256 weight rows of one expert x one item of up to
// BN pairs, all of K in 64-value stages, with a cp.async ring of the stage's e2m1 bytes (with the
// L2 256-byte prefetch) and bf16 activations (core-matrix layout, wgmma_bf16.cuh; B operand by
// descriptor), the block's scale bytes copied once. Two ways to feed the weights (A operand),
// selected per launch by moe_bf16::PickWgmmaVariant (env DEEPINFER_EXPERTS_WGMMA; same bits):
// - SS (ExpertGemmBf16Kernel, "ss"; sessions 6-9): each of 512 threads dequantises the 32 weights
//   it copied into a bf16 tile in shared memory (core-matrix layout), fence.proxy.async,
//   __syncthreads, then four warpgroups (64 rows each) run wgmma m64nBNk16 with both operands
//   from shared memory; stage i's MMAs run while stage i + 1 is dequantised into the other tile.
// - RS (ExpertGemmRsKernel, default "rs"; session 12): the dequantised weights never touch shared
//   memory. Lane (g, t) of a warp reads the raw bytes of its fragment rows g and g + 8 from the
//   ring (16-byte loads, broadcast in the quad; RawOffset's half swap keeps 8 rows on distinct
//   banks) and dequantises pair t of each word (with the 0 4 1 5 2 6 3 7 storage, logical k 2t,
//   2t + 1 of the group) into the wgmma A fragment registers; fragments double-buffered, so stage
//   i is dequantised while stage i - 1's wgmmas run. Ring of 8 / 7 / 6 slots at BN 64 / 96 / 128.
//   "rs2": two m64 row tiles per warpgroup (2 warpgroups; items <= 96 pairs), half the B reads.
//   (rs-nofence / rs2-nofence, without the per-stage proxy fence, measured no gain: removed.)
// Per 64-value stage of a block at BN 96: MMA ~770 tensor cycles (2048 bf16 MAC / clock / SM; BN 64
// ~510, 128 ~1020); shared memory SS ~140 KiB, RS ~76 KiB, rs2 ~52 KiB (128 B / clock).
// MEASURED (run 106, ncu, 4096-token prefill, 4-layer bench checkpoint): RoutedExperts per layer
// SS 10.6 ms, RS (the session-12 morning loop) 8.3-8.4 ms (206 TFLOP/s), rs2 9.1 ms. Up GEMM
// (RS<96, 1>) 5.04 ms: 2.03 G warp instructions = ~209 per warp per stage, issue active 43% of
// scheduler cycles: issue-bound (time = instructions / (0.43 x 4 x 132)).
// SASS of the RS<96, 1> loop (sm_90a, cuobjdump -sass; warp instructions per stage = static count
// of the two-stage loop body / 2; the morning loop's 216 include its S > 128 branch, 21 that the
// common path skips: ~195 executed), morning -> now (the fast loop: every scale byte <= 128):
//   dequant bits (SHF, LOP3, IMAD x 0x1040, LOP3 per pair) 64 -> 64; HMUL2 32 -> 16 (the second
//   multiply only in the general loop); scale factors + the S > 128 test 32.5 -> 4 (PRMT + LEA per
//   row give both halves' factors, HMUL2 .H0_H0 / .H1_H1; one LDS.32 per row per two stages);
//   LDS 6 -> 5; wgmma, descriptors, ring offsets 38.5 -> 14.5 (descriptor low word by adds);
//   address, loop, predicates 18.5 -> 32.5 (copy sources, LDS addresses, descriptor words now in
//   R registers); cp.async, barrier, waits, proxy fence 8 -> 8.5; NOPs (@!PT LDS before MEMBAR /
//   LDGSTS) 10 -> 10; branches (load guard, BN 96's third copy) 6.5 -> 4.5. Total 216 -> 159.
// BN 64: 207 -> 153; BN 128: 223 -> 154 (3 local-memory accesses per stage: the 64 accumulators
// and 32 fragment registers leave too few of 128); rs2 (per warp-stage of 2 row tiles) at BN 96 /
// 64: 386 / 370 -> 253 / 256. Registers (ptxas): RS 111 / 128 / 128 at BN 64 / 96 / 128 (BN 128:
// 52 bytes spilled), rs2 185 / 224, SS 71 / 95 / 117; no other spills.
// Left: the dequantisation (80 of 159), at its floor for this K order, 4 ALU + 1 HMUL2 per pair
// (the sign moves 12 bits and e1 e0 m 6: a clean nibble (LOP3), IMAD x 0x1040, LOP3; lane t's
// nibbles sit 4t bits up: SHF, since lanes 2 and 3 need a right shift that no IMAD gives). Next:
// a 64-value stage permutation of the activations (quantisation kernels, SS store) in which lane
// t owns words 2t, 2t + 1 of its rows: compile-time nibble positions (~3.25 ALU per pair), one
// LDS.64 per row and one scale byte per row and stage. A prototype of its RS fast loop (SASS
// only, the activations not reordered) counted 144 per stage at BN 96 (64, 128: 135; rs2 222).
// MEASURED (this loop): to be measured.
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
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_bf16_internal.cuh"
#include "backend/cuda/moe_groups.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_mma.cuh"
#include "backend/cuda/wgmma_bf16.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;
using moe_bf16::GemmArgs;
using moe_bf16::GemmItem;
using moe_groups::Item;
using moe_groups::MaxItems;
using stream_mma::E2m1PairBits;
using stream_mma::MulBf16x2;

static_assert(sizeof(GemmItem) == sizeof(Item) &&
                  offsetof(GemmItem, count) == offsetof(Item, count),
              "GemmItem mirrors moe_groups::Item");

constexpr int kThreads = 256;              // activation / SwiGLU kernels
constexpr int kGemmThreads = 512;          // expert GEMM: 4 warpgroups of 64 rows each
constexpr int kWChunksPerThread = 1;       // 16-byte weight chunks a GEMM thread copies
constexpr int kRowHalves = 1;              // m64 tiles per warpgroup
constexpr int kBM = 256;                   // weight rows per block
constexpr int kBK = 64;                    // K values per stage (two MXFP4 scale blocks)
constexpr int kKBlocks = kBK / 8;          // 8-value core-matrix columns per tile row
constexpr int kWRawBytes = kBM * kBK / 2;  // e2m1 bytes per stage
constexpr int kABytes = kBM * kBK * 2;     // one dequantised bf16 weight tile (two)

template <int kBN>
struct Shape {
  static_assert(kBN == 64 || kBN == 96 || kBN == 128, "wgmma m64nBNk16 shapes instantiated");
  static constexpr int kXBytes = kBN * kBK * 2;
  static constexpr int kStageBytes = kWRawBytes + kXBytes;
  // cp.async ring depth: 4 stages, 3 at BN 128 (two blocks per SM with two bf16 tiles).
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
int TokensPerItem(int64_t T, int64_t k, int64_t n_experts) {
  const int64_t mean = MeanPairs(T, k, n_experts);
  if (UseStream(T, k, n_experts)) return mean <= 4 ? 8 : mean <= 12 ? 16 : 32;
  const int64_t want = mean + mean / 4;
  return want <= 64 ? 64 : want <= 96 ? 96 : 128;
}

// --- activation quantisation ---------------------------------------------------------

// Stored position of value j (0..31) of a 32-value block: groups of 8 as 0 4 1 5 2 6 3 7.
__device__ __forceinline__ int PermutedBf16Index(int j) {
  const int n = j & 7;
  return (j & ~7) + (n < 4 ? 2 * n : 2 * (n - 4) + 1);
}

// The whole warp quantises one 32-value block (lane l holds value l) and stores the bf16
// bits of the kFp8Block32Pow2 values (exact in bf16) at block[PermutedBf16Index(l)].
__device__ __forceinline__ void StoreBf16Block(float v, uint16_t* block) {
  block[PermutedBf16Index(static_cast<int>(threadIdx.x % 32))] = fp8::QuantizeLaneBf16(v);
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

// xb [rows, K] (permuted bf16) = the quantised x [rows, K] (row stride K); one warp per block.
// Block 0 also writes the direct items if any.
__global__ void __launch_bounds__(kThreads)
    QuantizeRowsBf16Kernel(const float* x, int64_t rows, int64_t K, uint16_t* xb,
                           DirectItems direct) {
  pdl::WaitThenAllowNext();
  if (direct.experts != nullptr && blockIdx.x == 0) WriteDirectItems(direct);
  const int lane = threadIdx.x % 32;
  const int64_t blocks = rows * (K / 32);
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; b < blocks; b += warps) {
    StoreBf16Block(x[b * 32 + lane], xb + b * 32);
  }
}

// hb [P, I] (permuted bf16) = quantised SwiGLU(g, u) * weight of pair p (gu [P, 2I]).
__global__ void __launch_bounds__(kThreads)
    SwiGluBf16Kernel(const float* gu, const float* weights, int64_t P, int64_t I, float limit,
                     uint16_t* hb) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t per_row = I / 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; b < P * per_row;
       b += warps) {
    const int64_t p = b / per_row, c = (b % per_row) * 32 + lane;
    const float h = SwiGluValue(gu[p * 2 * I + c], gu[p * 2 * I + I + c], limit) * weights[p];
    StoreBf16Block(h, hb + p * I + (c - lane));
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

// Byte offset of the 16-byte chunk (row r, 8-value column block kb) of a tile in the wgmma
// core-matrix layout (wgmma_bf16.cuh): core matrix (r / 8, kb) at (r / 8 * kKBlocks + kb) *
// 128 bytes, its row r % 8 at + (r % 8) * 16.
__host__ __device__ constexpr uint32_t CoreOffset(int r, int kb) {
  return static_cast<uint32_t>(((r / 8) * kKBlocks + kb) * 128 + (r % 8) * 16);
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

  // Copy plan. Weight bytes: thread tid copies the 16-byte chunks c = tid + j * 256 (row
  // c / 2, half c % 2; j < 2) of every stage and later dequantises exactly them. Scales: all
  // of row tid's at the start (kblocks % 4 == 0 and the scale base 4-byte aligned).
  // Activations: 16-byte chunks of the item's rows.
  auto row_of = [&](int64_t v, int* part) {
    *part = v >= part_rows ? 1 : 0;
    return *part ? v - part_rows : v;
  };
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
  // All of the block's scale bytes ([kBM][kblocks]) once, 4-byte copies of row tid (per-stage
  // 4-byte copies were 7/8 wasted 32-byte sectors: ncu counted 44% excess sectors).
  static_assert(kBM <= kGemmThreads, "one scale row per thread");
  uint8_t* scales = reinterpret_cast<uint8_t*>(smem + S::kSmemBytes);
  const unsigned smem_base = mma::SharedAddress(smem);
  if (tid < kBM && v0 + tid < n_rows) {
    int part = 0;
    const int64_t row = row_of(v0 + tid, &part);
    const uint8_t* src = ep.scale[part ? m1 : m0] + row * kblocks;
    const unsigned dst = smem_base + S::kSmemBytes + tid * static_cast<unsigned>(kblocks);
    for (int64_t b = 0; b < kblocks; b += 4) fp8::CpAsync4(dst + b, src + b);
  }
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
  // Epilogue (wgmma_bf16.cuh accumulator layout): acc[h][4 j + e] is row 64 (kRowHalves wg + h) +
  // 16 w + g
  // (+ 8 for e >= 2), token 8 j + 2 t (+ 1 for odd e); w the warp within warpgroup wg.
  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int h = 0; h < kRowHalves; ++h) {
#pragma unroll
    for (int e = 0; e < kBN / 2; ++e) {
      const int64_t v =
          v0 + 64 * (kRowHalves * wg + h) + 16 * (warp % 4) + g + ((e & 3) >= 2 ? 8 : 0);
      const int n = 8 * (e / 4) + 2 * t4 + (e & 1);
      if (v >= n_rows || n >= item.count) continue;
      a.out[int64_t{act_rows[n]} * n_rows + v] = acc[h][e];
    }
  }
}

// --- the register-A (RS) expert GEMM ---------------------------------------------------------

// Shape of the RS kernel: kRowTiles m64 row tiles per warpgroup, 4 / kRowTiles warpgroups, kBM =
// 256 weight rows per block either way. Ring of kStages slots (raw e2m1 bytes + activations;
// the block's scale bytes after it); with the bf16 tiles gone the ring is deeper than the SS
// kernel's: slots x stage bytes + the largest scale array (256 rows x 256 blocks at K = 8192)
// stay within the 227 KiB of an SM (BN 64: 8 x 16 KiB; 96: 7 x 20 KiB; 128: 6 x 24 KiB).
template <int kBN, int kRowTiles>
struct RsShape {
  static_assert(kBN == 64 || kBN == 96 || kBN == 128, "wgmma m64nBNk16 shapes instantiated");
  static_assert(kRowTiles == 1 || kRowTiles == 2, "one or two m64 tiles per warpgroup");
  static constexpr int kWarpgroups = 4 / kRowTiles;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kWChunks = kWRawBytes / 16 / kThreads;  // 16-byte weight copies a stage
  static constexpr int kXBytes = kBN * kBK * 2;
  static constexpr int kStageBytes = kWRawBytes + kXBytes;
  static constexpr int kStages = kBN == 64 ? 8 : kBN == 96 ? 7 : 6;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  static_assert(kSmemBytes + kBM * (8192 / 32) <= 227 * 1024, "ring + scales fit an SM");
  static_assert(kStages >= 3, "a slot in flight on the tensor core, one dequantised, one loading");
};

// Byte offset of the 16-byte chunk (row r, K half h: 32 values) of a stage's raw e2m1 bytes in
// the RS ring: rows of 32 bytes, the halves swapped in rows with r / 4 odd, so that the 16-byte
// loads of one half by the 8 rows g = 0..7 of a warp's fragment hit all 32 banks once.
__host__ __device__ constexpr uint32_t RawOffset(int r, int h) {
  return static_cast<uint32_t>(r * 32 + ((h ^ (r >> 2)) & 1) * 16);
}
static_assert(RawOffset(13, 0) == RawOffset(5, 0) + 256 &&
                  RawOffset(13, 1) == RawOffset(5, 1) + 256,
              "row r + 8: the same swap, 256 bytes further");

// The lane's pair of a word: E2m1PairBits(w, p) for p = t, the lane's index in its quad, as
// E2m1PairBits(w >> 4p, 0) (nibbles p and p + 4 moved to nibbles 0 and 4: the same masked bits,
// the same bf16x2; shift = 4p once per thread, the mask and multiplier immediates).
__device__ __forceinline__ uint32_t PickPairBits(uint32_t w, uint32_t shift) {
  return E2m1PairBits(w >> shift, 0);
}

// DequantE2m1x32's factors of scale byte S as bf16x2: f1 = 2^(S - 1) (2^126 when S > 128) and
// f2 = 2^(S - 127) when S > 128, else 1.0 (exact: the general loop multiplies by both).
struct ScaleFactors {
  uint32_t f1, f2;
};
__device__ __forceinline__ ScaleFactors FactorsOf(uint32_t S) {
  const bool one_step = S <= 128;
  const uint32_t f1 = one_step ? (S + 126) << 7 : 253u << 7;
  const uint32_t f2 = one_step ? 127u << 7 : S << 7;
  return {f1 * 0x10001u, f2 * 0x10001u};
}

// A warpgroup's A fragments of one stage: [row tile][k16 step][register] (wgmma_bf16.cuh).
template <int kRowTiles>
using StageFragments = uint32_t[kRowTiles][kBK / 16][4];

// The fast loop's factors (every scale byte of the block <= 128): FactorsOf(S).f1 = 2^(S - 1) of
// bytes b (low half) and b + 1 (high half) of the scale word w: the two bytes spread to bytes 0
// and 2 (one PRMT), times 128 plus 126 << 7 in each half (one LEA; S + 126 <= 254 stays in the
// exponent field).
__device__ __forceinline__ uint32_t FastFactorPair(uint32_t w, int b) {
  const uint32_t spread =
      __byte_perm(w, 0u, static_cast<uint32_t>(b | 4 << 4 | (b + 1) << 8 | 4 << 12));
  return spread * 128u + 0x3F003F00u;
}
// a * (the low (kHigh false) or high half of pair, in both halves): bf16x2 multiply by a
// broadcast half (HMUL2 with an .H0_H0 / .H1_H1 operand).
template <bool kHigh>
__device__ __forceinline__ uint32_t MulBf16x2ByHalf(uint32_t a, uint32_t pair) {
  uint32_t d;
  if constexpr (kHigh) {
    asm("{\n.reg .b16 lo, hi;\n.reg .b32 b;\nmov.b32 {lo, hi}, %2;\nmov.b32 b, {hi, hi};\n"
        "mul.rn.bf16x2 %0, %1, b;\n}\n"
        : "=r"(d)
        : "r"(a), "r"(pair));
  } else {
    asm("{\n.reg .b16 lo, hi;\n.reg .b32 b;\nmov.b32 {lo, hi}, %2;\nmov.b32 b, {lo, lo};\n"
        "mul.rn.bf16x2 %0, %1, b;\n}\n"
        : "=r"(d)
        : "r"(a), "r"(pair));
  }
  return d;
}

// cp.async of 16 bytes that reads src_bytes of them: 16, or 0 (nothing read, the 16 shared bytes
// zeroed; the source must still be a mapped address). Rows and tokens past the job need no
// branch that way. kL2Prefetch: the L2 256-byte prefetch of CpAsync16Prefetch.
template <bool kL2Prefetch>
__device__ __forceinline__ void CpAsync16Fill(uint32_t smem_addr, const void* gmem,
                                              uint32_t src_bytes) {
  if constexpr (kL2Prefetch) {
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(smem_addr),
                 "l"(gmem), "r"(src_bytes));
  } else {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr), "l"(gmem),
                 "r"(src_bytes));
  }
}
// CpAsync16Fill<false> issued only where `exists` (a predicated instruction, no branch).
__device__ __forceinline__ void CpAsync16FillIf(bool exists, uint32_t smem_addr, const void* gmem,
                                                uint32_t src_bytes) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n"
      "@p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}\n" ::"r"(smem_addr),
      "l"(gmem), "r"(src_bytes), "r"(static_cast<uint32_t>(exists)));
}

// Register-A expert GEMM (same items, arguments, activation layout and outputs as
// ExpertGemmBf16Kernel; the same bits; the top comment describes the fragments). Iteration i:
// wait for stage i's copies, barrier, refill the slot of stage i - 2 (every thread passed
// wait_group 1 of iteration i - 1: its wgmmas are done in every warpgroup), dequantise stage i
// into fragment buffer i % 2 (stage i - 1's wgmmas still read the other), issue stage i's
// wgmmas, wait until only they are pending. Two copies of the loop, chosen once per block after
// the scale bytes landed: the fast one when every scale byte of the block's rows is <= 128 (real
// checkpoints; one multiply per pair, FastFactorPair), else the general one (per stage 2-byte
// scale loads, FactorsOf, two multiplies per pair: f2 = 1.0 where S <= 128, exact).
template <int kBN, int kRowTiles>
__global__ void __launch_bounds__(RsShape<kBN, kRowTiles>::kThreads, 1)
    ExpertGemmRsKernel(GemmArgs a) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) char smem[];
  using S = RsShape<kBN, kRowTiles>;
  constexpr int kStages = S::kStages, kThreadsRs = S::kThreads;
  constexpr int kXChunks = kBN * (kBK * 2 / 16);  // 16-byte activation copies a stage
  constexpr int kNX = (kXChunks + kThreadsRs - 1) / kThreadsRs;
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const GemmItem item = a.items[blockIdx.y];
  const ExpertPointers& ep = a.table[item.expert];
  const int tid = threadIdx.x;
  const int64_t n_rows = a.up ? 2 * a.I : a.D, part_rows = a.up ? a.I : a.D;
  const int64_t K = a.up ? a.D : a.I, kblocks = K / 32;
  const int64_t v0 = int64_t{blockIdx.x} * kBM;  // < n_rows: the grid has ceil(rows / kBM) blocks
  const int32_t* act_rows = a.order + item.start;
  const int act_div = a.up ? static_cast<int>(a.k) : 1;
  const int m0 = a.up ? 0 : 1, m1 = a.up ? 2 : 1;
  auto row_of = [&](int64_t v, int* part) {
    *part = v >= part_rows ? 1 : 0;
    return *part ? v - part_rows : v;
  };
  // Weight copies: chunks c = tid + j kThreadsRs (row c / 2, K half c % 2) of every stage; rows
  // past the matrix read nothing (source clamped to row v0, 0 bytes: zeros in the ring).
  const uint8_t* w_src[S::kWChunks];
  uint32_t w_dst[S::kWChunks], w_bytes[S::kWChunks];
#pragma unroll
  for (int j = 0; j < S::kWChunks; ++j) {
    const int c = tid + j * kThreadsRs;
    const bool ok = v0 + c / 2 < n_rows;
    int part = 0;
    const int64_t row = row_of(ok ? v0 + c / 2 : v0, &part);
    w_src[j] = static_cast<const uint8_t*>(ep.data[part ? m1 : m0]) + row * (K / 2) + (c % 2) * 16;
    w_dst[j] = RawOffset(c / 2, c % 2);
    w_bytes[j] = ok ? 16u : 0u;
  }
  // All of the block's scale bytes ([kBM][kblocks], after the ring) once, with stage 0's copies.
  static_assert(kBM <= kThreadsRs, "one scale row per thread");
  const uint8_t* scales = reinterpret_cast<const uint8_t*>(smem + S::kSmemBytes);
  const unsigned smem_base = mma::SharedAddress(smem);
  if (tid < kBM && v0 + tid < n_rows) {
    int part = 0;
    const int64_t row = row_of(v0 + tid, &part);
    const uint8_t* src = ep.scale[part ? m1 : m0] + row * kblocks;
    const unsigned dst = smem_base + S::kSmemBytes + tid * static_cast<unsigned>(kblocks);
    for (int64_t b = 0; b < kblocks; b += 4) fp8::CpAsync4(dst + b, src + b);
  }
  // Activation copies: token n = c / 8, 16-byte chunk c % 8; tokens past the item read nothing
  // (source row 0 of act, 0 bytes). Chunks c >= kXChunks (the last i, BN 96 only) do not exist.
  // Copy i's token is token(0) + i kThreadsRs / 8 (a multiple of 8 rows): its shared offset is
  // x_dst0 + i kXStep.
  static_assert(kThreadsRs % 64 == 0, "copy i + 1 lands whole core matrices further");
  constexpr uint32_t kXStep = CoreOffset(kThreadsRs / 8, 0);
  const uint32_t x_dst0 = CoreOffset(tid / 8, tid % 8);
  const uint16_t* x_src[kNX];
  uint32_t x_bytes[kNX];
#pragma unroll
  for (int i = 0; i < kNX; ++i) {
    const int c = tid + i * kThreadsRs;
    const int n = c / (kBK * 2 / 16), chunk = c % (kBK * 2 / 16);
    const bool ok = n < item.count;  // false for c >= kXChunks (count <= kBN)
    x_src[i] = a.act + (ok ? int64_t{act_rows[n] / act_div} * K : 0) + chunk * 8;
    x_bytes[i] = ok ? 16u : 0u;
  }
  const bool x_last_exists = kXChunks % kThreadsRs == 0 || tid + (kNX - 1) * kThreadsRs < kXChunks;
  // Copies of K stage st into the ring slot at byte offset slot_off.
  auto load = [&](int st, uint32_t slot_off) {
    const unsigned base = smem_base + slot_off;
#pragma unroll
    for (int j = 0; j < S::kWChunks; ++j) {
      CpAsync16Fill<true>(base + w_dst[j], w_src[j] + static_cast<uint32_t>(st) * (kBK / 2),
                          w_bytes[j]);
    }
#pragma unroll
    for (int i = 0; i < kNX; ++i) {
      const uint32_t dst = base + kWRawBytes + x_dst0 + i * kXStep;
      const uint16_t* src = x_src[i] + static_cast<uint32_t>(st) * kBK;
      if (i < kNX - 1 || kXChunks % kThreadsRs == 0) {
        CpAsync16Fill<false>(dst, src, x_bytes[i]);
      } else {
        CpAsync16FillIf(x_last_exists, dst, src, x_bytes[i]);
      }
    }
  };

  const int warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int wg = warp / 4;
  // Block row of the lane's fragment row g (sel 0) or g + 8 (sel 1) of row tile h.
  auto frag_row = [&](int h, int sel) {
    return 64 * (kRowTiles * wg + h) + 16 * (warp % 4) + g + 8 * sel;
  };
  const uint32_t pick_shift = 4u * static_cast<uint32_t>(t4);  // PickPairBits
  // Per row tile: ring offset of the lane's raw bytes of row g, K half 0 / 1 (row g + 8: 256
  // bytes further), and the shared offset of row g's scale bytes (row g + 8: 8 kblocks further).
  uint32_t raw_off[kRowTiles][2], scale_off[kRowTiles];
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h) {
    const int r = frag_row(h, 0);
    raw_off[h][0] = RawOffset(r, 0);
    raw_off[h][1] = RawOffset(r, 1);
    scale_off[h] = S::kSmemBytes + static_cast<uint32_t>(r * kblocks);
  }
  const uint32_t scale_rows8 = static_cast<uint32_t>(8 * kblocks);
  // Fast dequantisation of a stage (ring slot at slot_off) into the lane's A fragments: sw holds
  // the scale bytes of the stage pair (blocks 2 i .. 2 i + 3 of rows g, g + 8 of each tile), kP the
  // stage's place in the pair.
  auto dequant_fast = [&](uint32_t slot_off, const uint32_t(&sw)[kRowTiles][2], auto parity,
                          StageFragments<kRowTiles>& frag) {
    constexpr int kP = decltype(parity)::value;
    const char* raw = smem + slot_off;
#pragma unroll
    for (int h = 0; h < kRowTiles; ++h) {
#pragma unroll
      for (int sel = 0; sel < 2; ++sel) {
        const uint32_t f_pair = FastFactorPair(sw[h][sel], 2 * kP);  // halves 0 and 1
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const uint4 raw16 = *reinterpret_cast<const uint4*>(raw + raw_off[h][half] + 256 * sel);
          const uint32_t* w = &raw16.x;
#pragma unroll
          for (int j = 0; j < 4; ++j) {  // word q = 4 half + j: k16 step q / 2
            const uint32_t bits = PickPairBits(w[j], pick_shift);
            frag[h][2 * half + j / 2][2 * (j % 2) + sel] =
                half ? MulBf16x2ByHalf<true>(bits, f_pair) : MulBf16x2ByHalf<false>(bits, f_pair);
          }
        }
      }
    }
  };
  // General dequantisation of stage st (any scale byte): FactorsOf, two multiplies per pair.
  auto dequant_general = [&](int st, uint32_t slot_off, StageFragments<kRowTiles>& frag) {
    const char* raw = smem + slot_off;
#pragma unroll
    for (int h = 0; h < kRowTiles; ++h) {
#pragma unroll
      for (int sel = 0; sel < 2; ++sel) {
        const uint32_t s2 =
            *reinterpret_cast<const uint16_t*>(smem + scale_off[h] + sel * scale_rows8 + 2 * st);
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const ScaleFactors f = FactorsOf((s2 >> (8 * half)) & 0xFFu);
          const uint4 raw16 = *reinterpret_cast<const uint4*>(raw + raw_off[h][half] + 256 * sel);
          const uint32_t* w = &raw16.x;
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            frag[h][2 * half + j / 2][2 * (j % 2) + sel] =
                MulBf16x2(MulBf16x2(PickPairBits(w[j], pick_shift), f.f1), f.f2);
          }
        }
      }
    }
  };
  // Warpgroup accumulators: rows frag_row(h, *) x the BN tokens (wgmma_bf16.cuh layout).
  float acc[kRowTiles][kBN / 2];
  // B descriptors: the low word of slot 0's k16 step 0 (start address field (addr >> 4) < 2^14
  // for any shared address, so slot and step offsets are plain adds), the high word constant.
  const uint64_t desc0 = wgmma::Descriptor(smem_base + kWRawBytes, 128, kKBlocks * 128);
  const uint32_t desc0_lo = static_cast<uint32_t>(desc0),
                 desc_hi = static_cast<uint32_t>(desc0 >> 32);
  // The low word of the current slot's B descriptor (k16 step 0), advanced like cur (ptxas keeps
  // it in a vector register either way: an R2UR per wgmma).
  uint32_t desc_lo = desc0_lo;
  auto issue = [&](int st, const StageFragments<kRowTiles>& frag) {
    const uint32_t lo = desc_lo;
    wgmma::Fence();  // the fragments were just written
#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      // CoreOffset(0, 2 ks) = 256 ks bytes: 16 ks in the address field.
      const uint64_t db = (uint64_t{desc_hi} << 32) | (lo + 16u * ks);
#pragma unroll
      for (int h = 0; h < kRowTiles; ++h) {
        wgmma::WgmmaBf16Rs<kBN>(acc[h], frag[h][ks], db, st > 0 || ks > 0 ? 1 : 0);
      }
    }
    wgmma::CommitGroup();
    wgmma::WaitGroup<1>();  // stage st - 1's wgmmas done: its fragments may be rewritten
  };
  const int n_stages = static_cast<int>(K / kBK);  // even: K % 128 == 0
  // Ring byte offsets of the slots of stage i (cur) and of stage i + kStages - 2 (next_load, the
  // slot of stage i - 2), advanced by one slot per stage (no modulo in the loop).
  uint32_t cur = 0, next_load = (kStages - 2) * S::kStageBytes;
  auto advance = [](uint32_t off) {
    off += S::kStageBytes;
    return off == static_cast<uint32_t>(S::kSmemBytes) ? 0u : off;
  };
#pragma unroll
  for (int st = 0; st < kStages - 2; ++st) {
    if (st < n_stages) load(st, st * S::kStageBytes);
    fp8::CpAsyncCommit();
  }
  // Stage 0 and the scale bytes landed (group 0); any scale byte > 128 in the block's rows (rows
  // past the matrix hold stale bytes and are not looked at) picks the general loop.
  fp8::CpAsyncWait<kStages - 3>();
  __syncthreads();
  bool big_scale = false;
  if (tid < kBM && v0 + tid < n_rows) {
    const auto* row = reinterpret_cast<const uint32_t*>(scales + tid * kblocks);
    for (int64_t b = 0; b < kblocks / 4; ++b) big_scale |= __vcmpgtu4(row[b], 0x80808080u) != 0;
  }
  const bool general = __syncthreads_or(big_scale) != 0;

  auto run = [&](auto general_tag) {
    constexpr bool kGeneral = decltype(general_tag)::value;
    StageFragments<kRowTiles> frag0, frag1;
    uint32_t sw[kRowTiles][2];  // fast loop: scale bytes of the stage pair
    auto step = [&](int i, auto parity, StageFragments<kRowTiles>& frag) {
      fp8::CpAsyncWait<kStages - 3>();  // stage i landed (this thread's copies)
      wgmma::FenceProxyAsync();         // the copies, to the wgmma's async proxy
      __syncthreads();  // every thread's copies of stage i; stage i - 2 retired everywhere
      if (i + kStages - 2 < n_stages) load(i + kStages - 2, next_load);
      fp8::CpAsyncCommit();
      if constexpr (kGeneral) {
        dequant_general(i, cur, frag);
      } else {
        if constexpr (decltype(parity)::value == 0) {  // i even: 4-byte aligned
#pragma unroll
          for (int h = 0; h < kRowTiles; ++h) {
            const char* row_g = smem + scale_off[h] + 2 * i;
            sw[h][0] = *reinterpret_cast<const uint32_t*>(row_g);
            sw[h][1] = *reinterpret_cast<const uint32_t*>(row_g + scale_rows8);
          }
        }
        dequant_fast(cur, sw, parity, frag);
      }
      issue(i, frag);
      cur = advance(cur);
      next_load = advance(next_load);
      desc_lo += S::kStageBytes / 16;
      if (desc_lo == desc0_lo + S::kSmemBytes / 16) desc_lo = desc0_lo;
    };
    for (int i = 0; i < n_stages; i += 2) {
      step(i, std::integral_constant<int, 0>{}, frag0);
      step(i + 1, std::integral_constant<int, 1>{}, frag1);
    }
  };
  if (general) {
    run(std::true_type{});
  } else {
    run(std::false_type{});
  }
  wgmma::WaitGroup<0>();
  fp8::CpAsyncWait<0>();
  // Epilogue: acc[h][4 j + e] is block row frag_row(h, e & 2 ? 1 : 0), token 8 j + 2 t + (e & 1).
#pragma unroll
  for (int h = 0; h < kRowTiles; ++h) {
#pragma unroll
    for (int e = 0; e < kBN / 2; ++e) {
      const int64_t v = v0 + frag_row(h, (e & 3) >= 2 ? 1 : 0);
      const int n = 8 * (e / 4) + 2 * t4 + (e & 1);
      if (v >= n_rows || n >= item.count) continue;
      a.out[int64_t{act_rows[n]} * n_rows + v] = acc[h][e];
    }
  }
}

template <int kBN, int kRowTiles>
cudaError_t LaunchRsGemm(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  using S = RsShape<kBN, kRowTiles>;
  const int64_t K = a.up ? a.D : a.I;
  const int smem = S::kSmemBytes + static_cast<int>(kBM * (K / 32));
  const cudaError_t attr = launch::RaiseMaxDynamicSmem(ExpertGemmRsKernel<kBN, kRowTiles>, smem);
  if (attr != cudaSuccess) return attr;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>((rows + kBM - 1) / kBM), static_cast<unsigned>(max_items));
  return pdl::Launch(ExpertGemmRsKernel<kBN, kRowTiles>, grid, S::kThreads,
                     static_cast<size_t>(smem), stream, a);
}

template <int kBN>
cudaError_t LaunchSsGemm(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  const int64_t K = a.up ? a.D : a.I;
  const int smem = Shape<kBN>::kSmemBytes + static_cast<int>(kBM * (K / 32));
  const cudaError_t attr = launch::RaiseMaxDynamicSmem(ExpertGemmBf16Kernel<kBN>, smem);
  if (attr != cudaSuccess) return attr;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>((rows + kBM - 1) / kBM), static_cast<unsigned>(max_items));
  return pdl::Launch(ExpertGemmBf16Kernel<kBN>, grid, kGemmThreads, static_cast<size_t>(smem),
                     stream, a);
}

// The wgmma kernel of the variant PickWgmmaVariant(bn) for items of bn (64, 96, 128) pairs.
cudaError_t LaunchGemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  using moe_bf16::WgmmaVariant;
  const WgmmaVariant v = moe_bf16::PickWgmmaVariant(bn);
  if (v == WgmmaVariant::kSs) {
    if (bn == 64) return LaunchSsGemm<64>(a, max_items, stream);
    if (bn == 96) return LaunchSsGemm<96>(a, max_items, stream);
    return LaunchSsGemm<128>(a, max_items, stream);
  }
  if (v == WgmmaVariant::kRs2) {  // PickWgmmaVariant: bn <= 96
    if (bn == 64) return LaunchRsGemm<64, 2>(a, max_items, stream);
    return LaunchRsGemm<96, 2>(a, max_items, stream);
  }
  if (bn == 64) return LaunchRsGemm<64, 1>(a, max_items, stream);
  if (bn == 96) return LaunchRsGemm<96, 1>(a, max_items, stream);
  return LaunchRsGemm<128, 1>(a, max_items, stream);
}

// SetWgmmaVariantOverride's variant + 1 (0: none).
std::atomic<int> g_wgmma_override{0};

}  // namespace

namespace moe_bf16 {

namespace {

struct NamedVariant {
  const char* name;
  WgmmaVariant variant;
};
constexpr NamedVariant kVariantNames[] = {
    {"ss", WgmmaVariant::kSs},
    {"rs", WgmmaVariant::kRs},
    {"rs2", WgmmaVariant::kRs2},
};

}  // namespace

WgmmaVariant ParseWgmmaVariant(const char* name) {
  if (name == nullptr) return WgmmaVariant::kRs;
  for (const NamedVariant& n : kVariantNames) {
    if (std::string_view(name) == n.name) return n.variant;
  }
  return WgmmaVariant::kRs;
}

const char* WgmmaVariantName(WgmmaVariant v) {
  for (const NamedVariant& n : kVariantNames) {
    if (n.variant == v) return n.name;
  }
  return "rs";
}

void SetWgmmaVariantOverride(const WgmmaVariant* v) {
  g_wgmma_override.store(v == nullptr ? 0 : static_cast<int>(*v) + 1);
}

WgmmaVariant PickWgmmaVariant(int bn) {
  const int forced = g_wgmma_override.load();
  const WgmmaVariant v = forced > 0 ? static_cast<WgmmaVariant>(forced - 1)
                                    : ParseWgmmaVariant(std::getenv(kWgmmaVariantEnv));
  if (bn > 96 && v == WgmmaVariant::kRs2) return WgmmaVariant::kRs;
  return v;
}

}  // namespace moe_bf16

int64_t ExpertsStreamMaxMeanPairs() {
  const char* env = std::getenv("DEEPINFER_EXPERTS_STREAM_MAX_PAIRS");
  if (env == nullptr || *env == '\0') return kExpertsStreamMaxMeanPairs;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  return end != nullptr && *end == '\0' && v >= 0 ? static_cast<int64_t>(v)
                                                  : kExpertsStreamMaxMeanPairs;
}

bool RoutedExpertsBf16Applicable(WeightFormat up_format, WeightFormat down_format, int64_t D,
                                 int64_t I, int64_t T, int64_t k, int64_t n_experts) {
  return up_format == WeightFormat::kMxFp4 && down_format == WeightFormat::kMxFp4 && D > 0 &&
         I > 0 && D % 128 == 0 && I % 128 == 0 && std::max(D, I) <= 8192 && T >= 1 && k >= 1 &&
         k <= kMaxFusedExpertSlots && n_experts >= 1 && T * k <= (int64_t{1} << 30) &&
         MaxItems(T * k, n_experts, TokensPerItem(T, k, n_experts)) <= 65535;
}

int64_t RoutedExpertsBf16ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                      int64_t n_experts) {
  return Layout(T, k, D, I, n_experts, TokensPerItem(T, k, n_experts)).total;
}

cudaError_t RoutedExpertsBf16(const RoutedExpertsLaunch& l, void* scratch, cudaStream_t stream) {
  if (l.T <= 0) return cudaSuccess;
  if (!RoutedExpertsBf16Applicable(l.up_format, l.down_format, l.D, l.I, l.T, l.k, l.n_experts)) {
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
  cudaError_t e = pdl::Launch(QuantizeRowsBf16Kernel, fp8::WarpPerBlockGrid(l.T * (l.D / 32)),
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
  e = pdl::Launch(SwiGluBf16Kernel, fp8::WarpPerBlockGrid(P * (l.I / 32)), kThreads, 0, stream, gu,
                  l.weights, P, l.I, l.swiglu_limit, hb);
  if (e != cudaSuccess) return e;
  a.up = false;
  a.act = hb;
  a.out = out;
  if ((e = gemm()) != cudaSuccess) return e;
  return CombineSlots(out, l.experts, l.T, l.k, l.n_experts, l.D, l.y, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
