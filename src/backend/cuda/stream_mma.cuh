// Weight-streaming bf16 tensor-core core for decode-sized GEMMs (few tokens, every weight byte
// read once): one warp owns 16 consecutive weight rows and walks all of K, loading its weight
// bytes straight from global memory into registers (no shared memory, no barriers for the
// weights), dequantising them exactly to bf16 with the block scale folded in, and feeding
// mma.sync m16n8k16 (bf16, fp32 accumulate) against activations that the block stages in
// shared memory. Users: k_moe_stream.cu (routed experts, FP8 mode), k_linear_stream.cu (dense
// Linear). Include from .cu files only.
//
// Numerics (the contract of RoutedExpertsBf16, k_moe_bf16.cu). Activations are bf16 values
// that are exact FP8-mode numbers (kFp8Block32Pow2) stored with each 8-value group permuted as
// 0 4 1 5 2 6 3 7. MXFP4 weights are dequantised exactly: nibble s|e1 e0|m becomes the bf16
// bits s<<15 | (e1 e0 m)<<6 (the e2m1 value times 2^-126; 0.5 lands on the subnormal
// 2^-127), then one bf16x2 multiply by 2^(S - 1) (S the ue8m0 scale byte); when S > 127 by
// 2^126 and then by 2^(S - 127), giving value * 2^(S - 127) exactly (S <= 253). Each
// output is ONE fp32 sum over its K products (MMA chain; only the fp32 rounding order differs
// from other kernels). A column (token) of an MMA never mixes with the other columns, so a
// token's result does not depend on which tokens share its weight rows (bitwise).
//
// Register mapping (one K step = 128 values). Lane (g = lane / 4, c = lane % 4) loads the 16
// bytes (32 e2m1 values = exactly one scale block) of rows g and g + 8 at K offset
// step * 128 + 32 c, and their two scale bytes. Dequantised, a row chunk is 16 bf16x2 words
// W[i] (i = 4 q + p: group q = 0..3 of 8 values, pair p = values (8q + p, 8q + p + 4), i.e.
// stored positions 2i, 2i + 1 of the permuted chunk). MMA s (0..7) of the step takes
// A = {Wg[2s], Wg8[2s], Wg[2s+1], Wg8[2s+1]} and B = {X[2s], X[2s+1]} where X are the same
// words of token n's activation chunk (n = g within each 8-token tile): the MMA's logical k
// (2c, 2c+1) is physical (chunk c, word 2s), (2c+8, 2c+9) is (chunk c, word 2s+1), for A and
// B alike, so the MMA sums exactly the products of the step (any bijection k <-> K works).
//
// Accumulator layout (per warp, kNT tiles of 8 tokens): acc[nt][e] is weight row
// row0 + g + (e >= 2 ? 8 : 0), token 8 nt + 2 c + (e & 1).
//
// Shared-memory layout of the staged activations (ActStage): two buffers (double-buffered K
// slices of kSliceSteps steps), each [step][j = 0..3][n = 0..8 kNT - 1][c = 0..3][16 bytes],
// the 16 bytes = words 4j..4j+3 of token n's chunk c (permuted values 8j..8j+7 of the 32 at
// step * 128 + 32 c), i.e. the B fragments of MMAs 2j and 2j+1 of thread (n % 8, c) of tile
// n / 8: one conflict-free 16-byte LDS per thread per two MMAs per tile.
//
// Roofline per warp and K step (MXFP4): 1024 weight bytes (32 lanes x 2 rows x 16) + 64 scale
// bytes. SASS of the K loop (k_moe_stream.cu, kNT = 1, sm_90a): ~173 instructions per step on
// the fast path: dequantisation 136 (per row of 16 bytes = 16 bf16x2 pairs: 32 LOP3 + 16
// IMAD + 4 SHF + 16 HMUL2, 4.25 per pair), 8 HMMA + 4 LDS.128 per token tile, 2 LDG.128 +
// 2 LDG.U8, ~15 for scales, vote, loop and predicates, ~7 NOP. The S > 127 path adds 32 HMUL2
// (never taken on real weights). H200 (132 SMs x 4 schedulers x ~1.75 GHz = 0.92 T
// warp-instructions/s): 5.4 TB/s at 100% issue, 2.7 TB/s at 50%; the HBM ceiling (4.5 TB/s) needs
// ~83% issue. Loads in flight per warp: kPF KiB (16 warps per SM at kPF = 4: 64 KiB per SM, enough
// for the HBM latency).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/mma_bf16.cuh"

namespace deepinfer::backend::cuda::kernels::stream_mma {

inline constexpr int kStepK = 128;       // K values per warp step
inline constexpr int kL2Prefetch = 128;  // bytes the L2 fetches around a weight load

// Weight formats of the core. kMxFp4: e2m1 nibbles (value j of a row in nibble j, row stride
// K / 2 bytes) with one ue8m0 byte per row and 32 columns (row stride K / 32). kFp8Block32 is
// the place for FP8 e4m3 weights with ue8m0 scales per 32 x 32 block: per step a lane would
// load 2 x 16 bytes of each row (one 32-value block), turn bytes k and k + 4 of each 8-byte
// group into one bf16x2 (e4m3 -> bf16 is exact: shift the 7 magnitude bits by 4 and the sign
// separately, multiply by 2^(S - 127 + 120) as here), scale per 32 rows; not implemented yet.
enum class StreamFormat { kMxFp4 };

// --- exact dequantisation helpers (also used by k_moe_bf16.cu) ------------------------------

// Nibbles p and p + 4 of w (p = 0..3) as a bf16x2 (nibble p in the low half) of their e2m1
// values * 2^-126: bits s<<15 | (e1 e0 m)<<6 per half. Three integer ops (p < 2; p >= 2 also
// needs w >> 8, shared by p = 2 and 3): the nibble pair is masked, one multiply places two
// copies (magnitude at bits 6..8, sign of the second copy at bit 15), a mask keeps them.
__device__ __forceinline__ uint32_t E2m1PairBits(uint32_t w, int p) {
  const uint32_t x = p >= 2 ? w >> 8 : w;
  const uint32_t t = (p & 1) ? x & 0x00F000F0u : x & 0x000F000Fu;
  const uint32_t spread = (p & 1) ? t * 0x104u : t * 0x1040u;  // copies << (s, s + 6)
  return spread & 0x81C081C0u;
}

__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The first factor of scale byte S as bf16x2: 2^(min(S, 127) - 1); the second (S > 127 only)
// is 2^(S - 127). E2m1PairBits(...) * first (* second) = value * 2^(S - 127) exactly.
__device__ __forceinline__ uint32_t FirstFactorBf16x2(uint32_t S) {
  return (min(S, 127u) + 126u) * 0x00800080u;
}

// --- global loads ---------------------------------------------------------------------------

// Weight bytes: mma::LoadStreaming16<true, kL2Prefetch> (mma_bf16.cuh: not kept in L1, issued
// where written, ahead of the step that uses them), with the L2 fetching the 128-byte line around
// them: the row's next step too. With 256 bytes (the next three steps) the experts' GEMMs read
// 29-34% more DRAM bytes than the weights hold (ncu, B = 256, run 187: 6.35 against 4.77 GB for
// the up GEMM without a prefetch; the later steps' sectors were fetched again) and the decode
// step was 1.5-2% slower at B = 8-256 (runs 187-188); without a prefetch, or with a row's 4 steps
// requested together, the bytes are exact but the stream is slower (2.8-3.0 TB/s). A scale byte,
// likewise issued where written:
__device__ __forceinline__ uint32_t LoadScaleByte(const uint8_t* p) {
  uint32_t r;
  asm volatile("ld.global.nc.u8 %0, [%1];" : "=r"(r) : "l"(p));
  return r;
}

// --- the warp core --------------------------------------------------------------------------

// A warp's 16 weight rows: this lane's pointers for K step 0 of rows g and g + 8.
struct WarpRows {
  const uint8_t* data[2];   // 16 bytes at K offset k0 + 32 c
  const uint8_t* scale[2];  // the scale byte of block (k0 / 32) + c
};

// MXFP4 weight [n_rows, K] (data 16-byte aligned): the lane's pointers for the warp's rows
// row0 .. row0 + 15 from K offset k0 (a multiple of 128). Rows >= n_rows read row n_rows - 1:
// their accumulators are meaningless and must not be stored.
__device__ __forceinline__ WarpRows MxFp4WarpRows(const void* data, const uint8_t* scale, int64_t K,
                                                  int64_t row0, int64_t n_rows, int64_t k0,
                                                  int lane) {
  const int g = lane / 4, c = lane % 4;
  WarpRows w;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t row = min(row0 + g + 8 * h, n_rows - 1);
    w.data[h] = static_cast<const uint8_t*>(data) + row * (K / 2) + k0 / 2 + 16 * c;
    w.scale[h] = scale + row * (K / 32) + k0 / 32 + c;
  }
  return w;
}

// Staged activations: a double-buffered ring of K slices (layout in the file header).
template <int kNT, int kSliceSteps>
struct ActStage {
  static_assert(kNT >= 1 && kNT <= 4, "8 to 32 tokens");
  static constexpr int kStepBytes = kStepK * 2 * 8 * kNT;
  static constexpr int kSliceBytes = kSliceSteps * kStepBytes;
  static constexpr int kSmemBytes = 2 * kSliceBytes;
  static constexpr int kChunks = kSliceBytes / 16;  // 16-byte copies per slice

  // The token whose row thread tid copies (for every slice; kThreads % (32 kNT) == 0).
  __device__ static int Token(int tid) { return (tid / 4) % (8 * kNT); }

  // Copies slice `slice` (steps slice * kSliceSteps .. < n_steps) of the thread's token row
  // (permuted bf16 at the first staged K value; null: zeros) into buffer slice % 2 with
  // cp.async (the caller commits and waits).
  template <int kThreads>
  __device__ static void Copy(char* slices, const uint16_t* row, int slice, int n_steps, int tid) {
    static_assert(kThreads % (32 * kNT) == 0, "a thread copies one token row");
    char* buf = slices + (slice % 2) * kSliceBytes;
    const int c = tid % 4;
#pragma unroll
    for (int q = tid; q < kChunks; q += kThreads) {
      const int step = slice * kSliceSteps + q / (32 * 4 * kNT);
      if (step >= n_steps) break;
      const int j = (q / (32 * kNT)) % 4;
      if (row != nullptr) {
        mma::CpAsync16(buf + q * 16, row + int64_t{step} * kStepK + 32 * c + 8 * j);
      } else {
        *reinterpret_cast<uint4*>(buf + q * 16) = make_uint4(0, 0, 0, 0);
      }
    }
  }
};

namespace detail {

// 2^(S - 127) as bf16x2 for S > 127, else 1 (the second factor); volatile so that the fast
// path does not compute it ahead of the warp-uniform branch that needs it.
__device__ __forceinline__ uint32_t SecondFactorLazy(uint32_t S) {
  uint32_t f;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.gt.u32 p, %1, 127;\n\tmul.lo.u32 %0, %1, 0x00800080;\n\t"
      "@!p mov.b32 %0, 0x3F803F80;\n\t}"
      : "=r"(f)
      : "r"(S));
  return f;
}

// Dequantises a step's 2 x 16 bytes (rows g, g + 8) with their scale bytes into the A words
// a[h][i] (row g + 8 h, word i of the file header) times 2^(min(S, 127) - 1); returns true
// (warp-uniform) when some lane's S > 127 needs FinishTwoStep.
__device__ __forceinline__ bool DequantMxFp4Step(const uint4 (&w)[2], const uint32_t (&s)[2],
                                                 uint32_t (&a)[2][16]) {
  const bool two_steps = __any_sync(0xFFFFFFFFu, max(s[0], s[1]) > 127u);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t f1 = FirstFactorBf16x2(s[h]);
    const uint32_t words[4] = {w[h].x, w[h].y, w[h].z, w[h].w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
#pragma unroll
      for (int p = 0; p < 4; ++p) a[h][4 * q + p] = MulBf16x2(E2m1PairBits(words[q], p), f1);
    }
  }
  return two_steps;
}

__device__ __forceinline__ void FinishTwoStep(const uint32_t (&s)[2], uint32_t (&a)[2][16]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t f2 = SecondFactorLazy(s[h]);
#pragma unroll
    for (int i = 0; i < 16; ++i) a[h][i] = MulBf16x2(a[h][i], f2);
  }
}

// The 8 kNT MMAs of a step: A words a, staged activations at b (this lane's 16 bytes of
// (j = 0, tile 0) of the step).
template <int kNT>
__device__ __forceinline__ void MmaStep(const uint32_t (&a)[2][16], const char* b,
                                        float (&acc)[kNT][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t a_lo[4] = {a[0][4 * j], a[1][4 * j], a[0][4 * j + 1], a[1][4 * j + 1]};
    const uint32_t a_hi[4] = {a[0][4 * j + 2], a[1][4 * j + 2], a[0][4 * j + 3], a[1][4 * j + 3]};
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const uint4 x = *reinterpret_cast<const uint4*>(b + (j * kNT + nt) * 512);
      mma::MmaBf16(acc[nt], a_lo, x.x, x.y);
      mma::MmaBf16(acc[nt], a_hi, x.z, x.w);
    }
  }
}

}  // namespace detail

// acc (+)= the warp's 16 rows x n_steps K steps (from the rows' k0) times the staged tokens.
// on_slice(i) runs (in every warp of the block, so it may hold __syncthreads) before the MMAs
// of the first step of slice i (steps i * kSliceSteps ..): it must make slice i's staged
// activations visible in buffer i % 2 (ActStage layout at `slices`). The weight loads of the
// next kPF steps are always in flight, across slices. Every warp of the block must call this
// with the same n_steps. acc is not zeroed here.
template <StreamFormat kFormat, int kNT, int kPF, int kSliceSteps, class OnSlice>
__device__ __forceinline__ void StreamRows(const WarpRows& w, int n_steps, const char* slices,
                                           OnSlice&& on_slice, float (&acc)[kNT][4]) {
  static_assert(kFormat == StreamFormat::kMxFp4, "only MXFP4 weights so far");
  static_assert(kPF >= 1 && kPF <= 8, "loads in flight");
  using Stage = ActStage<kNT, kSliceSteps>;
  constexpr int kDataStep = kStepK / 2, kScaleStep = kStepK / 32;  // bytes per step
  uint4 ring[kPF][2];
  uint32_t scales[kPF][2];
  // Row pointers at step `base` of the loop below (loads use immediate offsets from them).
  const uint8_t* data[2] = {w.data[0], w.data[1]};
  const uint8_t* scale[2] = {w.scale[0], w.scale[1]};
  auto load = [&](int ahead, int slot) {  // step base + ahead into ring slot `slot`
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      ring[slot][h] =
          mma::LoadStreaming16</*kOrdered=*/true, kL2Prefetch>(data[h] + ahead * kDataStep);
      scales[slot][h] = LoadScaleByte(scale[h] + ahead * kScaleStep);
    }
  };
#pragma unroll
  for (int p = 0; p < kPF; ++p) {
    if (p < n_steps) load(p, p);
  }
  const char* lane_b = slices + (threadIdx.x % 32) * 16;
  // Step base + u from ring slot u (u a constant after unrolling).
  auto run_step = [&](int base, int u) {
    const int step = base + u;
    uint32_t a[2][16];
    const uint32_t s[2] = {scales[u][0], scales[u][1]};
    if (detail::DequantMxFp4Step(ring[u], s, a)) {
      detail::FinishTwoStep(s, a);  // warp-uniform; rare on real weights (S >= 128)
    }
    // The slot's registers are free now: refill it kPF steps ahead.
    if (step + kPF < n_steps) load(u + kPF, u);
    const int slice = step / kSliceSteps, in_slice = step % kSliceSteps;
    if (in_slice == 0) on_slice(slice);
    const char* b = lane_b + (slice % 2) * Stage::kSliceBytes + in_slice * Stage::kStepBytes;
    detail::MmaStep<kNT>(a, b, acc);
  };
  // Whole groups of kPF steps without per-step exit tests (so that ptxas can overlap a step's
  // MMA chain with the next step's dequantisation), then the remaining steps.
  const int whole = n_steps - n_steps % kPF;
  int base = 0;
  for (; base < whole; base += kPF) {
#pragma unroll
    for (int u = 0; u < kPF; ++u) run_step(base, u);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      data[h] += kPF * kDataStep;
      scale[h] += kPF * kScaleStep;
    }
  }
  if (base < n_steps) {
#pragma unroll
    for (int u = 0; u < kPF; ++u) {
      if (base + u < n_steps) run_step(base, u);
    }
  }
}

// The whole block (kThreads threads, each warp its own 16 rows) streams n_steps K steps: the
// thread's act_row (its ActStage::Token's permuted bf16 row at the first K value; null =
// zeros) is staged slice by slice (cp.async, one __syncthreads per slice), and each warp
// accumulates its rows into acc. slices: ActStage::kSmemBytes of shared memory, 16-byte
// aligned. Call with a __syncthreads() between two calls that reuse `slices`.
template <StreamFormat kFormat, int kNT, int kPF, int kSliceSteps, int kThreads>
__device__ __forceinline__ void StreamBlockRows(const WarpRows& w, int n_steps,
                                                const uint16_t* act_row, char* slices,
                                                float (&acc)[kNT][4]) {
  using Stage = ActStage<kNT, kSliceSteps>;
  const int tid = static_cast<int>(threadIdx.x);
  const int n_slices = (n_steps + kSliceSteps - 1) / kSliceSteps;
  Stage::template Copy<kThreads>(slices, act_row, 0, n_steps, tid);
  mma::CpAsyncCommit();
  auto on_slice = [&](int slice) {
    mma::CpAsyncWaitAll();  // this thread's copies of `slice` landed
    __syncthreads();        // everyone's; and nobody reads slice - 1's buffer any more
    if (slice + 1 < n_slices) {
      Stage::template Copy<kThreads>(slices, act_row, slice + 1, n_steps, tid);
      mma::CpAsyncCommit();
    }
  };
  StreamRows<kFormat, kNT, kPF, kSliceSteps>(w, n_steps, slices, on_slice, acc);
}

}  // namespace deepinfer::backend::cuda::kernels::stream_mma
