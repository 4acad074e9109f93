// FP8-activation tensor-core GEMM core (the fast mode of kernels_fp8.h), shared by the dense
// Linear (k_fp8_gemm.cu) and the grouped routed experts (k_moe_fp8.cu). Include from .cu
// files only.
//
// Numerics (DeepSeek's kernels, model.md §2.8): activations are quantised per row per 32
// values to e4m3 with a power-of-two scale (QuantizeFp8Activations, the same values as
// FakeQuantKind::kFp8Block32Pow2); weights are e4m3 (FP8, ue8m0 scale per 32x32 block or per
// row and 32 columns) or e2m1 (MXFP4, ue8m0 scale per row and 32 columns). Every 32-value
// K block is one mma.sync m16n8k32 e4m3 x e4m3 into a fresh zero accumulator (a partial P);
// then acc += P * (weight scale * activation scale) in fp32 (fma). So each output is
// sum over K blocks, in K order, of one tensor-core partial: the result of an output
// element depends only on its weight row and its activation row, whatever the tile shape,
// the token count or the other tokens (batch-invariant within the fast mode).
//
// e2m1 -> e4m3 is exact: the nibble s|e1 e0|m becomes the byte s|0 0 e1 e0|m 0 0, which is
// the e2m1 value times 2^-6 (the e2m1 subnormal 0.5 lands on the e4m3 subnormal 2^-7); the
// 2^6 goes into the weight scale.
//
// K permutation inside a 32-value block. For lane (g = lane / 4, t = lane % 4), the MMA's
// logical k 4t..4t+3 (registers a0 / a1 and b0) are the physical values 8t, 8t+2, 8t+4, 8t+6
// and logical k 16+4t..16+4t+3 (a2 / a3 and b1) are 8t+1, 8t+3, 8t+5, 8t+7. The activations
// are stored permuted accordingly (each 8-value group as its values 0,2,4,6,1,3,5,7), so a
// lane's B fragment is one 8-byte load; one 32-bit word of e2m1 nibbles gives two A
// registers with 4 shifts/masks, and 8 e4m3 weight bytes give two with 2 byte permutes.
//
// Pipeline: a block owns BM weight rows x BN tokens; K runs in stages of 128 values (4
// scale blocks), loaded with cp.async into a kStages-deep ring of shared-memory buffers
// (weights, their scale bytes, activations, their scales; rows beyond the ends are
// zero-filled). Warps form a kWM x kWN grid; a warp owns kMT 16-row M tiles x kNT 8-token N
// tiles.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"
#include "model/backend.h"

namespace deepinfer::backend::cuda::kernels::fp8 {

using model::WeightFormat;

inline constexpr int kStageK = 128;         // K values per pipeline stage
inline constexpr int kStageBlocks = 4;      // 32-value scale blocks per stage
inline constexpr int kActStride = 160;      // smem bytes per activation row per stage (+32 pad)
inline constexpr int kActStageBytes = 128;  // stored bytes per activation row per stage

// Shared-memory layout of a weight row per stage. The padding keeps the 8 rows a quarter
// warp reads in distinct banks.
template <WeightFormat F>
struct WeightTraits {
  static constexpr bool kFp4 = F == WeightFormat::kMxFp4;
  static constexpr int kStageBytes = kFp4 ? 64 : 128;  // stored bytes per row per stage
  static constexpr int kStride = kFp4 ? 80 : 160;
  static constexpr int kScaleShift = kFp4 ? 6 : 0;  // the e2m1 -> e4m3 factor 2^-6
  static constexpr int64_t RowBytes(int64_t K) { return kFp4 ? K / 2 : K; }
};

// Block shape. Threads = 32 * kWM * kWN; BM = 16 * kWM * kMT rows; BN = 8 * kWN * kNT tokens.
template <WeightFormat F, int kWM_, int kWN_, int kMT_, int kNT_, int kStages_>
struct TileConfig {
  static constexpr WeightFormat kFormat = F;
  static constexpr int kWM = kWM_, kWN = kWN_, kMT = kMT_, kNT = kNT_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWM * kWN;
  static constexpr int kBM = 16 * kWM * kMT;
  static constexpr int kBN = 8 * kWN * kNT;
  using W = WeightTraits<F>;
  static constexpr int kWeightBytes = kBM * W::kStride;
  static constexpr int kWeightScaleBytes = kBM * kStageBlocks;  // one byte per row and block
  static constexpr int kActBytes = kBN * kActStride;
  static constexpr int kActScaleBytes = kBN * kStageBlocks * 4;  // floats
  static constexpr int kStageBytes = kWeightBytes + kWeightScaleBytes + kActBytes + kActScaleBytes;
  static constexpr int kSmemBytes = kStages * kStageBytes;
  // Skinny tiles (one warp column) stream weights: two blocks per SM (three at 8 tokens,
  // where shared memory allows it for MXFP4) keep more loads in flight (caps registers at
  // 128 / 85); wide tiles run one block per SM.
  static constexpr int kMinBlocksPerSm = kWN == 1 ? (kNT == 1 ? 3 : 2) : 1;
};

// One block's problem. Virtual weight row v (0 <= v < n_rows) is stored row
// row_base + v of part 0 if v < part_rows, else row v - part_rows of part 1 (the gate and up
// matrices of an expert as one [2I, D] weight; a plain weight has part_rows >= n_rows).
// Activation row n (0 <= n < n_tokens) is row act_row(n) of xq / xs.
struct TileJob {
  const uint8_t* data[2];
  const uint8_t* scale[2];
  int64_t part_rows;
  int64_t row_base;
  int64_t n_rows;
  int64_t K;
  int64_t v0;               // first virtual row of the tile
  int64_t stage0, stage1;   // K stages [stage0, stage1) (split K)
  const uint8_t* xq;        // [*, act_ld] permuted e4m3 (this job's K columns first)
  const float* xs;          // [*, act_ld / 32]
  int64_t act_ld;           // activation row stride in values (>= K, a multiple of 128)
  const int32_t* act_rows;  // null: act_row(n) = act_base + n; else act_rows[n] / act_div
  int64_t act_base;
  int act_div;
  int n_tokens;  // tokens of this tile (<= BN)
};

// 16 bytes global -> shared (a shared-memory address), bypassing L1.
__device__ __forceinline__ void CpAsync16(unsigned smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem), "l"(gmem));
}

// The same with an L2 prefetch of the surrounding 256 bytes: a weight row contributes 64
// (MXFP4) or 128 (FP8) bytes per stage, so the next stages of the row come from L2 instead
// of separate short DRAM accesses (H200 decode B=32, FP8 mode: 13.96 -> 13.71 ms; B=256
// 55.6 -> 52.1 ms). Deeper rings (9 MXFP4 / 5 FP8 stages) were slower: B=32 15.3 ms.
__device__ __forceinline__ void CpAsync16Prefetch(unsigned smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(smem), "l"(gmem));
}
// 4 bytes global -> shared.
__device__ __forceinline__ void CpAsync4(unsigned smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(smem), "l"(gmem));
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

__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;"); }

template <int kPending>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}

// Eight e2m1 nibbles (nibble i = value i) as e4m3 bytes of value * 2^-6: .x holds values
// 0, 2, 4, 6 and .y values 1, 3, 5, 7 (byte j = the j-th of them).
__device__ __forceinline__ uint2 E2m1x8ToE4m3(uint32_t w) {
  uint2 r;
  r.x = ((w << 2) & 0x1C1C1C1Cu) | ((w << 4) & 0x80808080u);
  r.y = ((w >> 2) & 0x1C1C1C1Cu) | (w & 0x80808080u);
  return r;
}

// Eight e4m3 bytes (lo = values 0..3, hi = 4..7) as .x = values 0, 2, 4, 6, .y = 1, 3, 5, 7.
__device__ __forceinline__ uint2 SplitEvenOdd(uint32_t lo, uint32_t hi) {
  uint2 r;
  asm("prmt.b32 %0, %1, %2, 0x6420;" : "=r"(r.x) : "r"(lo), "r"(hi));
  asm("prmt.b32 %0, %1, %2, 0x7531;" : "=r"(r.y) : "r"(lo), "r"(hi));
  return r;
}

// Four e4m3 bytes as two f16x2 words (exact: every e4m3 value is a normal f16): .x = bytes
// 0, 1 (byte 0 in the low half), .y = bytes 2, 3.
__device__ __forceinline__ uint2 E4m3x4ToF16x4(uint32_t v) {
  uint2 r;
  asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
      "cvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
      : "=r"(r.x), "=r"(r.y)
      : "r"(v));
  return r;
}

// d (+)= a * b on one m16n8k16 f16 tile with fp32 accumulation (kZero: d = a * b).
template <bool kZero>
__device__ __forceinline__ void MmaF16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (kZero) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.0f));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

// d = a * b on one m16n8k32 e4m3 tile (the registers of mma.sync m16n8k32 e4m3: a[0] / a[1]
// rows g / g+8 at logical k 4t..4t+3, a[2] / a[3] at 16+4t..; b0 / b1 likewise), fp32,
// from zero. Hopper has no FP8 mma.sync: ptxas emulates the e4m3 instruction with two f16
// MMAs plus an fp32 add of the zero accumulator per element; written out here, the k pairs
// (4t, 4t+1) and (4t+2, 4t+3) of each half become the f16 MMA's pairs (2t, 2t+1) and
// (2t+8, 2t+9) for A and B alike, and the second MMA accumulates onto the first (no add).
__device__ __forceinline__ void MmaE4m3(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  const uint2 a0 = E4m3x4ToF16x4(a[0]), a1 = E4m3x4ToF16x4(a[1]);
  const uint2 a2 = E4m3x4ToF16x4(a[2]), a3 = E4m3x4ToF16x4(a[3]);
  const uint2 lo = E4m3x4ToF16x4(b0), hi = E4m3x4ToF16x4(b1);
  MmaF16<true>(d, a0.x, a1.x, a0.y, a1.y, lo.x, lo.y);
  MmaF16<false>(d, a2.x, a3.x, a2.y, a3.y, hi.x, hi.y);
}

// 2^(b - 127 + kShift) for byte kByte (b) of a word of 4 ue8m0 scales, as the fp32 with
// biased exponent b + kShift: 3 integer ops (an ldexpf fallback for the ends of the range
// was compiled as predicated code on every call and made the tile loop integer-bound).
// Exact for b + kShift in 1..254; b = 0 with kShift = 0 (2^-127) gives 0, and MXFP4 scale
// bytes above 248 (values beyond 2^122) are not representable (never in real weights).
template <int kByte, int kShift>
__device__ __forceinline__ float ScaleFromE8m0Word(uint32_t word) {
  return __int_as_float((((word >> (8 * kByte)) & 0xFFu) + kShift) << 23);
}

// The e4m3 byte of v in a block of power-of-two scale s (kFp8Block32Pow2: v / s clamped to
// +-448, rounded to e4m3).
__device__ __forceinline__ uint8_t E4m3ByteOf(float v, float s) {
  const float q = RoundToE4m3(ClampF(v / s, -448.0f, 448.0f));
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

// Quantises one 32-value block held one value per lane (the whole warp calls it): returns
// the e4m3 byte of this lane's value and sets *scale to the block's power-of-two scale, the
// same numbers as FakeQuantKind::kFp8Block32Pow2 (cuda_numerics.cuh, backend/cpu/numerics.cc).
__device__ __forceinline__ uint8_t QuantizeLaneE4m3(float v, float* scale) {
  float amax = fabsf(v);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = MaxF(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = Fp8Pow2Scale(amax);
  *scale = s;
  return E4m3ByteOf(v, s);
}

// The bf16 bits of e4m3 byte `byte` times the block scale s (exact in bf16).
__device__ __forceinline__ uint16_t E4m3Bf16Bits(uint8_t byte, float s) {
  const float value = __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3))) * s;
  return __bfloat16_as_ushort(__float2bfloat16_rn(value));
}

// The bf16 bits of this lane's kFp8Block32Pow2 value (the whole warp calls it, lane l holding
// value l of a 32-value block): the e4m3 value of QuantizeLaneE4m3 times the block's power of
// two, exact in bf16 (4 significant bits, the fp32 exponent range).
__device__ __forceinline__ uint16_t QuantizeLaneBf16(float v) {
  float scale;
  const uint8_t byte = QuantizeLaneE4m3(v, &scale);
  return E4m3Bf16Bits(byte, scale);
}

// QuantizeLaneBf16 for a quad: 8 consecutive lanes hold one 32-value block, lane l values
// 4 (l % 8) .. + 3 (the whole warp calls it: four blocks). The same bits per value for blocks
// without NaN (MaxF of non-NaN values is exact in any order; with a NaN the order decides
// whether the scale sees it).
__device__ __forceinline__ void QuantizeQuadBf16(const float (&v)[4], uint16_t (&bits)[4]) {
  float amax = MaxF(MaxF(fabsf(v[0]), fabsf(v[1])), MaxF(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) amax = MaxF(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = Fp8Pow2Scale(amax);
#pragma unroll
  for (int i = 0; i < 4; ++i) bits[i] = E4m3Bf16Bits(E4m3ByteOf(v[i], s), s);
}

// Position of value j (0..31) of a block in the permuted storage order.
__device__ __forceinline__ int PermutedIndex(int j) {
  return (j & ~7) + ((j & 1) ? 4 + ((j & 7) >> 1) : ((j & 7) >> 1));
}

// The whole warp quantises one 32-value block, lane l holding value l: its byte goes to
// q_block[PermutedIndex(l)], lane 0 writes the block's scale.
__device__ __forceinline__ void StoreQuantizedBlock(float v, uint8_t* q_block, float* scale) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  float s;
  const uint8_t byte = QuantizeLaneE4m3(v, &s);
  q_block[PermutedIndex(lane)] = byte;
  if (lane == 0) *scale = s;
}

// Warps (one per work item, grid-stride: a 32-value block, or a 128-value segment in the expert
// path's quad kernels) of 256-thread blocks: a grid for n_blocks items.
inline unsigned WarpPerBlockGrid(int64_t n_blocks) {
  const int64_t blocks = (n_blocks + 7) / 8;
  return static_cast<unsigned>(blocks < 132 * 16 ? (blocks < 1 ? 1 : blocks) : 132 * 16);
}

template <class Cfg>
struct Fp8Tile {
  using W = typename Cfg::W;
  static constexpr int kBM = Cfg::kBM, kBN = Cfg::kBN, kMT = Cfg::kMT, kNT = Cfg::kNT;

  struct Stage {
    uint8_t* w;
    uint8_t* ws;
    uint8_t* x;
    float* xs;
  };

  __device__ static Stage StageAt(char* smem, int s) {
    char* base = smem + s * Cfg::kStageBytes;
    Stage st;
    st.w = reinterpret_cast<uint8_t*>(base);
    st.ws = st.w + Cfg::kWeightBytes;
    st.x = st.ws + Cfg::kWeightScaleBytes;
    st.xs = reinterpret_cast<float*>(st.x + Cfg::kActBytes);
    return st;
  }

  // Stored row of virtual row v: (part, row within the part).
  __device__ static const uint8_t* WeightRow(const TileJob& j, int64_t v, int64_t* row_out,
                                             int* part_out) {
    const int part = v >= j.part_rows ? 1 : 0;
    const int64_t row = part ? v - j.part_rows : j.row_base + v;
    *row_out = row;
    *part_out = part;
    return (part ? j.data[1] : j.data[0]) + row * W::RowBytes(j.K);
  }

  __device__ static int64_t ActRow(const TileJob& j, int n) {
    return j.act_rows == nullptr ? j.act_base + n : int64_t{j.act_rows[n]} / j.act_div;
  }

  // Per-thread share of a stage's cp.async copies: weight chunks, weight scale words,
  // activation chunks, activation scale rows (thread i takes copies i, i + threads, ..).
  static constexpr int kWChunks = W::kStageBytes / 16;  // 16-byte chunks per weight row
  static constexpr int kXChunks = kActStageBytes / 16;  // per activation row
  static constexpr int kWCopies = kBM * kWChunks, kWsCopies = kBM;
  static constexpr int kXCopies = kBN * kXChunks, kXsCopies = kBN;
  static constexpr int PerThread(int copies) {
    return (copies + Cfg::kThreads - 1) / Cfg::kThreads;
  }
  static constexpr int kNW = PerThread(kWCopies), kNWs = PerThread(kWsCopies);
  static constexpr int kNX = PerThread(kXCopies), kNXs = PerThread(kXsCopies);

  // This thread's copies, computed once per tile (the index math, row lookups and 64-bit
  // stage offsets of every copy were most of a decode tile's instructions; ncu and SASS,
  // H200): the global source of the next stage to load (advanced by one stage per
  // LoadNextStage), the shared-memory destination offset within a stage, and whether the
  // copy exists. A copy of a row past the job's rows or tokens is skipped, not zero-filled:
  // its shared bytes then hold stale data, which only reaches the accumulator rows or token
  // columns of that row (an MMA output depends on one A row and one B column), and those are
  // never stored.
  struct LoadPlan {
    const uint8_t* w[kNW];
    const uint8_t* ws[kNWs];
    const uint8_t* x[kNX];
    const uint8_t* xs[kNXs];
    uint32_t w_dst[kNW], ws_dst[kNWs], x_dst[kNX], xs_dst[kNXs];
    bool w_ok[kNW], ws_ok[kNWs], x_ok[kNX], xs_ok[kNXs];
  };

  __device__ static bool Mine(int i, int copies) {
    return copies % Cfg::kThreads == 0 ||
           static_cast<int>(threadIdx.x) + i * Cfg::kThreads < copies;
  }

  // The plan with every source at K stage j.stage0.
  __device__ static LoadPlan MakePlan(const TileJob& j) {
    LoadPlan p;
    const int64_t kblocks = j.K / 32;
    const int64_t w_at = j.stage0 * W::kStageBytes, ws_at = j.stage0 * kStageBlocks;
    const int64_t x_at = j.stage0 * kStageK, xs_at = j.stage0 * kStageBlocks * 4;
#pragma unroll
    for (int i = 0; i < kNW; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * Cfg::kThreads;
      const int64_t v = j.v0 + c / kWChunks;
      int64_t row = 0;
      int part = 0;
      p.w_ok[i] = Mine(i, kWCopies) && v < j.n_rows;
      p.w[i] = p.w_ok[i] ? WeightRow(j, v, &row, &part) + (c % kWChunks) * 16 + w_at : j.xq;
      p.w_dst[i] = (c / kWChunks) * W::kStride + (c % kWChunks) * 16;
    }
#pragma unroll
    for (int i = 0; i < kNWs; ++i) {
      const int r = static_cast<int>(threadIdx.x) + i * Cfg::kThreads;
      const int64_t v = j.v0 + r;
      p.ws_ok[i] = Mine(i, kWsCopies) && v < j.n_rows;
      p.ws[i] = j.xq;
      if (p.ws_ok[i]) {
        int64_t row = 0;
        int part = 0;
        WeightRow(j, v, &row, &part);
        const int64_t scale_row = Cfg::kFormat == WeightFormat::kFp8Block32 ? row / 32 : row;
        p.ws[i] = (part ? j.scale[1] : j.scale[0]) + scale_row * kblocks + ws_at;
      }
      p.ws_dst[i] = Cfg::kWeightBytes + r * kStageBlocks;
    }
#pragma unroll
    for (int i = 0; i < kNX; ++i) {
      const int c = static_cast<int>(threadIdx.x) + i * Cfg::kThreads;
      const int n = c / kXChunks;
      p.x_ok[i] = Mine(i, kXCopies) && n < j.n_tokens;
      p.x[i] = p.x_ok[i] ? j.xq + ActRow(j, n) * j.act_ld + (c % kXChunks) * 16 + x_at : j.xq;
      p.x_dst[i] =
          Cfg::kWeightBytes + Cfg::kWeightScaleBytes + n * kActStride + (c % kXChunks) * 16;
    }
#pragma unroll
    for (int i = 0; i < kNXs; ++i) {
      const int n = static_cast<int>(threadIdx.x) + i * Cfg::kThreads;
      p.xs_ok[i] = Mine(i, kXsCopies) && n < j.n_tokens;
      p.xs[i] =
          p.xs_ok[i]
              ? reinterpret_cast<const uint8_t*>(j.xs + ActRow(j, n) * (j.act_ld / 32)) + xs_at
              : j.xq;
      p.xs_dst[i] =
          Cfg::kWeightBytes + Cfg::kWeightScaleBytes + Cfg::kActBytes + n * kStageBlocks * 4;
    }
    return p;
  }

  // Issues the cp.async loads of the plan's next K stage into the stage whose shared address
  // is `stage` (no commit), then advances the plan by one stage.
  __device__ static void LoadNextStage(LoadPlan& p, unsigned stage) {
#pragma unroll
    for (int i = 0; i < kNW; ++i) {
      if (p.w_ok[i]) CpAsync16Prefetch(stage + p.w_dst[i], p.w[i]);
      p.w[i] += W::kStageBytes;
    }
#pragma unroll
    for (int i = 0; i < kNWs; ++i) {
      if (p.ws_ok[i]) CpAsync4(stage + p.ws_dst[i], p.ws[i]);
      p.ws[i] += kStageBlocks;
    }
#pragma unroll
    for (int i = 0; i < kNX; ++i) {
      if (p.x_ok[i]) CpAsync16(stage + p.x_dst[i], p.x[i]);
      p.x[i] += kStageK;
    }
#pragma unroll
    for (int i = 0; i < kNXs; ++i) {
      if (p.xs_ok[i]) CpAsync16(stage + p.xs_dst[i], p.xs[i]);
      p.xs[i] += kStageBlocks * 4;
    }
  }

  // The A fragment of local rows (r, r + 8) for scale block kb of a stage.
  __device__ static void LoadA(const Stage& st, int r, int kb, int t, uint32_t (&a)[4]) {
    if constexpr (W::kFp4) {
      const uint32_t w0 =
          *reinterpret_cast<const uint32_t*>(st.w + r * W::kStride + kb * 16 + 4 * t);
      const uint32_t w1 =
          *reinterpret_cast<const uint32_t*>(st.w + (r + 8) * W::kStride + kb * 16 + 4 * t);
      const uint2 p0 = E2m1x8ToE4m3(w0), p1 = E2m1x8ToE4m3(w1);
      a[0] = p0.x;
      a[1] = p1.x;
      a[2] = p0.y;
      a[3] = p1.y;
    } else {
      const uint2 w0 = *reinterpret_cast<const uint2*>(st.w + r * W::kStride + kb * 32 + 8 * t);
      const uint2 w1 =
          *reinterpret_cast<const uint2*>(st.w + (r + 8) * W::kStride + kb * 32 + 8 * t);
      const uint2 p0 = SplitEvenOdd(w0.x, w0.y), p1 = SplitEvenOdd(w1.x, w1.y);
      a[0] = p0.x;
      a[1] = p1.x;
      a[2] = p0.y;
      a[3] = p1.y;
    }
  }

  // Multiplies one stage into acc (warp (wm, wn), lane (g, t)).
  __device__ static void ComputeStage(const Stage& st, int wm, int wn, int g, int t,
                                      float (&acc)[kMT][kNT][4]) {
    // The stage's weight scales: 4 bytes per row (one word).
    uint32_t ws_word[kMT][2];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      const int r = (wm * kMT + mt) * 16 + g;
      ws_word[mt][0] = *reinterpret_cast<const uint32_t*>(st.ws + r * kStageBlocks);
      ws_word[mt][1] = *reinterpret_cast<const uint32_t*>(st.ws + (r + 8) * kStageBlocks);
    }
    ComputeBlock<0>(st, wm, wn, g, t, ws_word, acc);
    ComputeBlock<1>(st, wm, wn, g, t, ws_word, acc);
    ComputeBlock<2>(st, wm, wn, g, t, ws_word, acc);
    ComputeBlock<3>(st, wm, wn, g, t, ws_word, acc);
  }

  // Scale block kKb of a stage: one MMA per (M tile, N tile), scaled into acc.
  template <int kKb>
  __device__ static void ComputeBlock(const Stage& st, int wm, int wn, int g, int t,
                                      const uint32_t (&ws_word)[kMT][2],
                                      float (&acc)[kMT][kNT][4]) {
    constexpr int kb = kKb;
    {
      uint32_t b[kNT][2];
      float xs[kNT][2];
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int n = (wn * kNT + nt) * 8;
        const uint2 v =
            *reinterpret_cast<const uint2*>(st.x + (n + g) * kActStride + kb * 32 + 8 * t);
        b[nt][0] = v.x;
        b[nt][1] = v.y;
        xs[nt][0] = st.xs[(n + 2 * t) * kStageBlocks + kb];
        xs[nt][1] = st.xs[(n + 2 * t + 1) * kStageBlocks + kb];
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        const int r = (wm * kMT + mt) * 16 + g;
        uint32_t a[4];
        LoadA(st, r, kb, t, a);
        const float ws0 = ScaleFromE8m0Word<kKb, W::kScaleShift>(ws_word[mt][0]);
        const float ws1 = ScaleFromE8m0Word<kKb, W::kScaleShift>(ws_word[mt][1]);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          float p[4];
          MmaE4m3(p, a, b[nt][0], b[nt][1]);
          acc[mt][nt][0] = fmaf(p[0], ws0 * xs[nt][0], acc[mt][nt][0]);
          acc[mt][nt][1] = fmaf(p[1], ws0 * xs[nt][1], acc[mt][nt][1]);
          acc[mt][nt][2] = fmaf(p[2], ws1 * xs[nt][0], acc[mt][nt][2]);
          acc[mt][nt][3] = fmaf(p[3], ws1 * xs[nt][1], acc[mt][nt][3]);
        }
      }
    }
  }

  // Runs the K stages [stage0, stage1) of job j into total: the range is cut into `segments`
  // equal parts (boundaries stage0 + s * n / segments, n = stage1 - stage0); each part is
  // summed in acc (from zero), then total = part 0, total += part 1, ... in order, exactly
  // as the split-K reduction adds the partials of `segments` blocks (so one block looping
  // over the segments gives the same bits as a split over blocks). smem holds
  // Cfg::kSmemBytes. Every thread of the block must call it. kSegmented = false requires
  // segments == 1 and keeps no second accumulator (fewer registers).
  template <bool kSegmented>
  __device__ static void Run(const TileJob& j, int segments, char* smem,
                             float (&total)[kMT][kNT][4]) {
    if constexpr (!kSegmented) segments = 1;
    float acc[kMT][kNT][4];
    ZeroAcc(acc);
    ZeroAcc(total);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int wm = warp % Cfg::kWM, wn = warp / Cfg::kWM;
    const int g = lane / 4, t = lane % 4;
    const int n_stages = static_cast<int>(j.stage1 - j.stage0);
    LoadPlan plan = MakePlan(j);
    const unsigned smem_base = static_cast<unsigned>(__cvta_generic_to_shared(smem));
#pragma unroll
    for (int s = 0; s < Cfg::kStages - 1; ++s) {
      if (s < n_stages) LoadNextStage(plan, smem_base + s * Cfg::kStageBytes);
      CpAsyncCommit();
    }
    int segment = 0;
    int boundary = n_stages / segments;
    // Ring slots of the stage computed (i) and of the stage loaded (i + kStages - 1).
    int compute_slot = 0, load_slot = Cfg::kStages - 1;
    for (int i = 0; i < n_stages; ++i) {
      CpAsyncWait<Cfg::kStages - 2>();
      __syncthreads();
      if (i + Cfg::kStages - 1 < n_stages) {
        LoadNextStage(plan, smem_base + load_slot * Cfg::kStageBytes);
      }
      CpAsyncCommit();
      ComputeStage(StageAt(smem, compute_slot), wm, wn, g, t, acc);
      compute_slot = compute_slot + 1 == Cfg::kStages ? 0 : compute_slot + 1;
      load_slot = load_slot + 1 == Cfg::kStages ? 0 : load_slot + 1;
      if (kSegmented && i + 1 == boundary) {
        Fold(segment == 0, acc, total);
        ++segment;
        boundary = segment + 1 == segments ? n_stages : (segment + 1) * n_stages / segments;
      }
    }
    CpAsyncWait<0>();
    if constexpr (!kSegmented) Fold(true, acc, total);
  }

  __device__ static void ZeroAcc(float (&acc)[kMT][kNT][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
      }
    }
  }

  // total = acc (first segment) or total + acc; then acc = 0.
  __device__ static void Fold(bool first, float (&acc)[kMT][kNT][4], float (&total)[kMT][kNT][4]) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          total[mt][nt][i] = first ? acc[mt][nt][i] : total[mt][nt][i] + acc[mt][nt][i];
          acc[mt][nt][i] = 0.0f;
        }
      }
    }
  }

  // Output coordinates of acc[mt][nt][i]: local row and local token.
  __device__ static int AccRow(int mt, int i) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return ((warp % Cfg::kWM) * kMT + mt) * 16 + lane / 4 + (i >= 2 ? 8 : 0);
  }
  __device__ static int AccToken(int nt, int i) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return ((warp / Cfg::kWM) * kNT + nt) * 8 + 2 * (lane % 4) + (i & 1);
  }
};

}  // namespace deepinfer::backend::cuda::kernels::fp8
