// The register-A (RS) expert GEMM of RoutedExpertsBf16 (kernels_fp8.h): the default wgmma kernel
// for items of 64 / 96 / 128 pairs (80 when forced; "rs", "rs2"), and the variant picking between
// it and the shared-tile (SS) kernel (moe_bf16_internal.cuh: WgmmaVariant, LaunchRsGemm).
// k_moe_bf16.cu documents the path (numerics, K order, weight dequantisation, the SS kernel); the
// block tiling is moe_bf16_tiles.cuh's. Both kernels give the same bits.
//
// - RS (ExpertGemmRsKernel, default "rs"; session 12): the dequantised weights never touch shared
//   memory. Lane (g, t) of a warp reads the raw bytes of its fragment rows g and g + 8 from the
//   ring (16-byte loads, broadcast in the quad; RawOffset's half swap keeps 8 rows on distinct
//   banks) and dequantises pair t of each word (with the 0 4 1 5 2 6 3 7 storage, logical k 2t,
//   2t + 1 of the group) into the wgmma A fragment registers; fragments double-buffered, so stage
//   i is dequantised while stage i - 1's wgmmas run. Ring of 8 / 8 / 7 / 6 slots at BN 64 / 80 /
//   96 / 128. "rs2": two m64 row tiles per warpgroup (2 warpgroups; items <= 96 pairs), half the
//   B reads. (rs-nofence / rs2-nofence, without the per-stage proxy fence, measured no gain:
//   removed.)
// MEASURED (H200). One layer's RoutedExperts at the V4.1 shape (CudaWgmmaVariantTest.
// DISABLED_Bench), the morning loop (runs 104-105): T 4096 SS 10.6-10.7 ms, RS 8.30-8.44 ms
// (~206 TFLOP/s of useful work), rs2 9.1 ms. ncu of the 4-layer bench checkpoint's 4096-token
// prefill (run 106): the up GEMM (RS<96, 1>) 5.04 ms and the down GEMM 2.67 ms (SS: 6.96 and
// 3.62); the up GEMM ran 2.03 G warp instructions = ~209 per warp per stage, issue active 43% of
// scheduler cycles; stalls per issued instruction: wait 1.36, mio throttle 1.30, not selected
// 1.23, barrier 1.16, long scoreboard 0.84, math pipe 0.84, dispatch 0.83.
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
// 52 bytes spilled), rs2 185 / 224, SS 71 / 95 / 117; no other spills. BN 80 (session 17): RS 123,
// rs2 205.
// Left: the dequantisation (80 of 159), at its floor for this K order, 4 ALU + 1 HMUL2 per pair
// (the sign moves 12 bits and e1 e0 m 6: a clean nibble (LOP3), IMAD x 0x1040, LOP3; lane t's
// nibbles sit 4t bits up: SHF, since lanes 2 and 3 need a right shift that no IMAD gives). Next:
// a 64-value stage permutation of the activations (quantisation kernels, SS store) in which lane
// t owns words 2t, 2t + 1 of its rows: compile-time nibble positions (~3.25 ALU per pair), one
// LDS.64 per row and one scale byte per row and stage. A prototype of its RS fast loop (SASS
// only, the activations not reordered) counted 144 per stage at BN 96 (64, 128: 135; rs2 222).
// MEASURED (this loop, DISABLED_Bench, runs 107 and 111): T 1024 6.11 ms (SS 7.98), T 4096
// 8.15 ms (SS 10.69; ~2% better than the morning loop), T 8192 15.30 ms (SS 17.41): 159
// instructions per stage instead of 216 bought little, so instruction count is not the only bound.
// (History before this file was split from k_moe_bf16.cu: git log of k_moe_bf16.cu.)
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <type_traits>

#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_bf16_internal.cuh"
#include "backend/cuda/moe_bf16_tiles.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_mma.cuh"
#include "backend/cuda/wgmma_bf16.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using moe_bf16::CoreOffset;
using moe_bf16::GemmArgs;
using moe_bf16::GemmItem;
using moe_bf16::kBK;
using moe_bf16::kBM;
using moe_bf16::kKBlocks;
using moe_bf16::kWRawBytes;
using stream_mma::E2m1PairBits;
using stream_mma::MulBf16x2;

// Shape of the RS kernel: kRowTiles m64 row tiles per warpgroup, 4 / kRowTiles warpgroups, kBM =
// 256 weight rows per block either way. Ring of kStages slots (raw e2m1 bytes + activations;
// the block's scale bytes after it); with the bf16 tiles gone the ring is deeper than the SS
// kernel's: slots x stage bytes + the largest scale array (256 rows x 256 blocks at K = 8192)
// stay within the 227 KiB of an SM (BN 64: 8 x 16 KiB; 80: 8 x 18; 96: 7 x 20; 128: 6 x 24).
// (Session 17 also had "rs128": blocks of 128 rows, two warpgroups, two blocks per SM, so that
// one block's barrier waits would be the other's issue slots; slower at every T on the H200,
// run 147: T 1024 / 4096 / 8192 7.08 / 9.93 / 19.71 ms against rs 6.17 / 8.15 / 15.32; removed.)
template <int kBN, int kRowTiles>
struct RsShape {
  static_assert(kBN == 64 || kBN == 80 || kBN == 96 || kBN == 128,
                "wgmma m64nBNk16 shapes instantiated");
  static_assert(kRowTiles == 1 || kRowTiles == 2, "one or two m64 tiles per warpgroup");
  static constexpr int kWarpgroups = 4 / kRowTiles;
  static constexpr int kThreads = 128 * kWarpgroups;
  static constexpr int kWChunks = kWRawBytes / 16 / kThreads;  // 16-byte weight copies a stage
  static constexpr int kXBytes = kBN * kBK * 2;
  static constexpr int kStageBytes = kWRawBytes + kXBytes;
  static constexpr int kStages = kBN <= 80 ? 8 : kBN == 96 ? 7 : 6;
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
  const moe_bf16::PartRowOf row_of{part_rows};
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
  moe_bf16::CopyBlockScales(ep, m0, m1, row_of, tid, v0, n_rows, kblocks,
                            smem_base + S::kSmemBytes);
  // Activation copies: token n = c / 8, 16-byte chunk c % 8; tokens past the item read nothing
  // (source row 0 of act, 0 bytes). Chunks c >= kXChunks (the last i, BN 80 and 96) do not exist.
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
      fp8::CpAsync16Fill<true>(base + w_dst[j], w_src[j] + static_cast<uint32_t>(st) * (kBK / 2),
                               w_bytes[j]);
    }
#pragma unroll
    for (int i = 0; i < kNX; ++i) {
      const uint32_t dst = base + kWRawBytes + x_dst0 + i * kXStep;
      const uint16_t* src = x_src[i] + static_cast<uint32_t>(st) * kBK;
      if (i < kNX - 1 || kXChunks % kThreadsRs == 0) {
        fp8::CpAsync16Fill<false>(dst, src, x_bytes[i]);
      } else {
        fp8::CpAsync16FillIf(x_last_exists, dst, src, x_bytes[i]);
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
  moe_bf16::StoreAccumulators<kBN>(acc, frag_row, v0, n_rows, item.count, act_rows, t4, a.out);
}

template <int kBN, int kRowTiles>
cudaError_t LaunchRs(const GemmArgs& a, int64_t max_items, cudaStream_t stream) {
  using S = RsShape<kBN, kRowTiles>;
  return moe_bf16::LaunchExpertGemm(ExpertGemmRsKernel<kBN, kRowTiles>, S::kThreads, S::kSmemBytes,
                                    a, max_items, stream);
}

// SetWgmmaVariantOverride's variant + 1 (0: none).
std::atomic<int> g_wgmma_override{0};

}  // namespace

namespace moe_bf16 {

cudaError_t LaunchRsGemm(WgmmaVariant v, int bn, const GemmArgs& a, int64_t max_items,
                         cudaStream_t stream) {
  if (v == WgmmaVariant::kRs2) {  // two row tiles exist for items of <= 96 pairs only
    if (bn == 64) return LaunchRs<64, 2>(a, max_items, stream);
    if (bn == 80) return LaunchRs<80, 2>(a, max_items, stream);
    if (bn == 96) return LaunchRs<96, 2>(a, max_items, stream);
    return cudaErrorInvalidValue;
  }
  if (v != WgmmaVariant::kRs) return cudaErrorInvalidValue;
  if (bn == 64) return LaunchRs<64, 1>(a, max_items, stream);
  if (bn == 80) return LaunchRs<80, 1>(a, max_items, stream);
  if (bn == 96) return LaunchRs<96, 1>(a, max_items, stream);
  if (bn == 128) return LaunchRs<128, 1>(a, max_items, stream);
  return cudaErrorInvalidValue;
}

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

}  // namespace deepinfer::backend::cuda::kernels
