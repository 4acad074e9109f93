// Tensor-core skinny GEMM for Linear at 1..64 token rows (see kernels_mma.h).
//
// Roofline (H200: ~4.5 TB/s HBM, 132 SMs; mma.sync bf16 reaches roughly 0.5-0.65 PFLOP/s,
// about 2/3 of the wgmma peak):
//   bytes per call = weight (rows * K * {2 BF16, 1 FP8, 0.5 MXFP4} + scales)
//                    + x (T * K * 4 per 256-row tile, mostly L2 hits) + y (T * rows * 4)
//   tensor FLOPs   = 3 (x_hi, x_mid, x_lo) * 2 * rows * K * 8 * ceil(T / 8)
//   head 129280 x 5120 at T = 32: BF16 1.32 GB -> 294 us at 4.5 TB/s (530 us at the 2.5 TB/s
//   target); FP8 0.66 GB -> 147 us (265 us at 2.5 TB/s); tensor work 127 GFLOP -> ~210 us.
//   So BF16 is memory-bound up to T ~ 32 and about balanced at T = 64 (254 GFLOP ->
//   ~420 us); FP8 is memory-bound up to T ~ 16 and MMA-bound above (T = 64: ~420 us,
//   ~1.6 TB/s of weight at best); MXFP4 is MMA-bound above T ~ 8. (Three terms cost 3/2
//   the tensor work of the former hi/lo split.) x traffic: T * K * 4 bytes per 256 weight
//   rows = (T / 64) x the FP8 weight.
//
// Structure. A block (8 warps) owns 256 consecutive weight rows; warp w owns rows
// w*32 .. w*32+31 as two 16-row MMA tiles (M side); tokens are the N side (NT tiles of 8,
// padded with zero tokens). K runs in warp "chunks" of 4 * V values (V = values per
// 16-byte load: 8 BF16, 16 FP8, 32 MXFP4): lane (g = lane / 4, q = lane % 4) loads the 16
// bytes at k = chunk * 4V + q*V of rows g and g+8 of both tiles (4 loads), prefetched one
// chunk ahead (8 independent 16-byte loads in flight per thread).
// K permutation: mma m16n8k16 slot pairs {2q, 2q+1} and {2q+8, 2q+9} of lane q map to the
// four consecutive physical columns p .. p+3, p = chunk*4V + q*V + 4*step; A and B use the
// same map, so each product pair is the right one and a 16-byte load feeds V/4 MMA steps.
// Dequantisation is exact in bf16 (e4m3 / e2m1 values times a power of two, or bf16).
// Activations: K slices of x (all tokens, fp32, 32 KiB) are copied to shared memory with
// cp.async while the previous slice is multiplied, then split into three bf16 terms
// (SplitBf16x3: x = hi + mid + lo exactly, 48 KiB per slice), laid out so that a lane's B
// fragments of one term for 2 MMA steps are one 16-byte LDS.
// Accumulation. Tensor cores sum each MMA's products and C with truncation, not
// round-to-nearest (published measurements, V100 to H100), so every MMA into one large
// accumulator would shave up to an ulp of it, a bias that grows with the MMA count
// (3 * K / 16 per output). So for each pair of MMA steps (a group of 32 K values) a fresh
// partial P = 0 takes the six MMAs smallest first -- P += A*x_lo (step 0, step 1),
// P += A*x_mid (0, 1), P += A*x_hi (0, 1) -- and the accumulator takes acc += P in fp32
// (round to nearest): K / 32 rounded adds per output, like an fp32 dot product. A
// bit-level model (K = 5120, random data) gives relative L2 errors of 2.4e-7 this way,
// 2.2e-5 with all three terms' MMAs into the accumulator, 1.5e-5 for the former hi/lo
// kernel (whose error was this bias, not its 2^-17 split residual).
// Split K (weights with few row tiles): `split` blocks of one thread-block cluster take
// equal contiguous K ranges of the same 256 rows; partials go through distributed shared
// memory and are added in rank order 0, 1, .., split-1 by the owning block.
//
// Batch invariance: every (row, token) accumulator sees the same sequence of MMAs and adds
// (chunk order, group order, lo/mid/hi and step order inside a group) whatever T is, and
// the split (chosen from n_rows and K, never T) fixes the cross-block order, so y[t, i] is
// bitwise independent of T and of the other tokens.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <atomic>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

namespace cg = cooperative_groups;
using mma::MmaBf16;
using mma::MmaBf16First;
using mma::SharedAddress;
using model::WeightFormat;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTilesPerWarp = 2;                         // 16-row MMA tiles per warp
constexpr int kBlockRows = kWarps * kTilesPerWarp * 16;  // 256
constexpr int kTerms = 3;                                // x = hi + mid + lo (bf16 each)
constexpr int kRawBytes = 32 * 1024;                     // one staged fp32 x slice
constexpr int kXsBytes = kRawBytes / 4 * 2 * kTerms;     // the slice as 3 bf16 terms: 48 KiB
// xs + raw (80 KiB), then the split partials. Occupancy: the 128-register budget allows 2
// blocks (8 warps each) per SM; shared memory 2 x (80 + 1 reserved) KiB of 228 KiB allows
// them too (3 would not fit, nor do the registers allow them).
constexpr int kSmemBytes = kXsBytes + kRawBytes;
constexpr int kMaxSplit = 8;                // portable cluster size
constexpr int64_t kTargetBlocks = 2 * 132;  // two blocks per H200 SM
constexpr int64_t kMinChunksPerBlock = 4;

std::atomic<int> g_wide_blocks_per_sm{2};  // SetMmaWideBlocksPerSm

// K values of one warp chunk (4 lanes x one 16-byte load each).
__host__ __device__ constexpr int ChunkK(WeightFormat f) { return 4 * ChunkValues(f); }

// K values of x staged at once for NT token tiles (fills kRawBytes: 4 bytes per value).
__host__ __device__ constexpr int SliceK(int nt) { return kRawBytes / (nt * 8 * 4); }

struct MmaParams {
  const void* data;
  const uint8_t* scale;
  int64_t K;
  int64_t row0, n_rows;
  const float* x;
  int T;
  int64_t ldx;
  float* y;
  int64_t ldy;
  bool accumulate;
  bool x_vec4;  // x 16-byte aligned and ldx % 4 == 0
  int split;
  int64_t chunks_per_block;  // warp chunks of K per block (K / ChunkK / split)
  // Grouped (block-diagonal) weight: rows [g * group_rows, (g + 1) * group_rows) of the call
  // read x columns from g * x_group_stride (group_rows a multiple of kBlockRows; a plain
  // call has group_rows >= n_rows and x_group_stride 0).
  int64_t group_rows;
  int64_t x_group_stride;
};

// One lane's 16 bytes of a weight row plus its power-of-two scale: the factor s for FP8
// (1 for BF16); for MXFP4 the scale as a bf16 pair (E8m0ToBf16x2) that multiplies the
// decoded bf16 values (round to nearest: exact for scale bytes 2 .. 252, i.e. 2^-125 ..
// 2^125; byte 0 gives zeros, where the former fp32 path overflowed above byte 240).
struct LaneChunk {
  uint4 q;
  float s;         // FP8, BF16
  uint32_t s_bf2;  // MXFP4
};

// Lane chunk of row r at K offset k (k a multiple of ChunkValues).
template <WeightFormat kFormat>
__device__ __forceinline__ LaneChunk LoadLaneChunk(const MmaParams& p, int64_t r, int64_t k) {
  constexpr int kValues = ChunkValues(kFormat);
  LaneChunk ch;
  ch.q = mma::LoadStreaming16(reinterpret_cast<const uint4*>(p.data) +
                              (r * (p.K / kValues) + k / kValues));
  if constexpr (kFormat == WeightFormat::kMxFp4) {
    ch.s_bf2 = E8m0ToBf16x2(__ldg(p.scale + r * (p.K / 32) + k / 32));
  } else if constexpr (kFormat == WeightFormat::kFp8Block32 || kFormat == WeightFormat::kFp8Row32) {
    const int64_t scale_row = kFormat == WeightFormat::kFp8Block32 ? r / 32 : r;
    ch.s = E8m0ToF32(__ldg(p.scale + scale_row * ((p.K + 31) / 32) + k / 32));
  } else {
    ch.s = 1.0f;
  }
  return ch;
}

// The bf16 pairs of physical columns (o, o+1) and (o+2, o+3) of a lane chunk, o = 4*step
// (step < ChunkValues / 4), true values (scale folded in; exact).
template <WeightFormat kFormat>
__device__ __forceinline__ void StepPairs(const LaneChunk& ch, int step, uint32_t& lo,
                                          uint32_t& hi) {
  if constexpr (kFormat == WeightFormat::kBF16) {
    lo = ChunkWord(ch.q, 2 * step);
    hi = ChunkWord(ch.q, 2 * step + 1);
  } else if constexpr (kFormat == WeightFormat::kMxFp4) {
    // Table + prmt decode of the 4 nibbles at scale 1, then the exact bf16x2 multiply by
    // the scale: bitwise bf16(value * scale), as the former fp16-trick decode + fp32 multiply
    // + bf16 rounding gave (cuda_fp4_test.cu). One constant table serves every chunk, so
    // the 4 lane chunks of a warp chunk hold one scale register each, as before. Static
    // SASS of the MXFP4 kernels (nvcc 13.0): kNT 1: 3312 -> 2664 instructions, kNT 4:
    // 4240 -> 3616, kNT 8: 5408 -> 4784; spills unchanged or lower.
    constexpr E2m1Bf16Table kUnit = E2m1Bf16TableConstant(0);
    const uint2 v = Fp4x4ToBf16x4(ChunkWord(ch.q, step / 2) >> (16 * (step % 2)), kUnit);
    lo = MulBf16x2(v.x, ch.s_bf2);
    hi = MulBf16x2(v.y, ch.s_bf2);
  } else {  // FP8: column 4i+j is byte j of word i
    const uint32_t word = ChunkWord(ch.q, step);
    const float2 a = Fp8PairToFloat2(word), b = Fp8PairToFloat2(word >> 16);
    lo = PackBf16(a.x * ch.s, a.y * ch.s);
    hi = PackBf16(b.x * ch.s, b.y * ch.s);
  }
}

// Shared-memory x slice, in 16-byte units of 8 bf16: unit (cc, grp, term, t, q) holds
// x_term[t][cc*ChunkK + q*V + 8*grp .. +8] (term 0 = hi, 1 = mid, 2 = lo), so lane (g, q)
// reads its B fragments of one term for 2 MMA steps of token tile n as one unit,
// t = 8n + g, and the 8 lanes of a quarter warp read 128 contiguous bytes.
template <WeightFormat kFormat, int kNT>
__device__ __forceinline__ int XUnit(int cc, int grp, int term, int t, int q) {
  constexpr int kGroups = ChunkValues(kFormat) / 8;
  return (((cc * kGroups + grp) * kTerms + term) * (kNT * 8) + t) * 4 + q;
}

// Starts the asynchronous copy of x[:, k0 .. k0 + n_k) (fp32) into raw[t * SliceK + kk]
// for the kNT*8 token slots (zeros for t >= T, stored directly). Completed by
// cp.async.wait_all + a barrier. All threads call it.
template <int kNT>
__device__ void IssueRawX(const MmaParams& p, int64_t k0, int n_k, float* raw) {
  constexpr int kSlice = SliceK(kNT);
  if (p.x_vec4) {  // x 16-byte aligned and ldx % 4 == 0: 16-byte copies
    const int per_token = n_k / 4;
    for (int item = threadIdx.x; item < kNT * 8 * per_token; item += kThreads) {
      const int t = item / per_token, kk = (item % per_token) * 4;
      float* dst = raw + t * kSlice + kk;
      if (t < p.T) {
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(SharedAddress(dst)),
                     "l"(p.x + t * p.ldx + k0 + kk)
                     : "memory");
      } else {
        *reinterpret_cast<float4*>(dst) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
    }
  } else {
    for (int item = threadIdx.x; item < kNT * 8 * n_k; item += kThreads) {
      const int t = item / n_k, kk = item % n_k;
      float* dst = raw + t * kSlice + kk;
      if (t < p.T) {
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(SharedAddress(dst)),
                     "l"(p.x + t * p.ldx + k0 + kk)
                     : "memory");
      } else {
        *dst = 0.0f;
      }
    }
  }
}

__device__ __forceinline__ void WaitRawX() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// Converts the raw slice (n_k values per token slot) into the bf16 hi/mid/lo layout of XUnit.
// All threads call it; no barrier inside.
template <WeightFormat kFormat, int kNT>
__device__ void ConvertX(const float* raw, int n_k, uint4* xs) {
  constexpr int kValues = ChunkValues(kFormat);
  const int groups_per_token = n_k / 8;
  for (int item = threadIdx.x; item < kNT * 8 * groups_per_token; item += kThreads) {
    const int t = item / groups_per_token, off = (item % groups_per_token) * 8;
    const float4 v0 = *reinterpret_cast<const float4*>(raw + t * SliceK(kNT) + off);
    const float4 v1 = *reinterpret_cast<const float4*>(raw + t * SliceK(kNT) + off + 4);
    const float v[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
    uint32_t term[kTerms][4];  // [hi, mid, lo][bf16 pair]
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const Bf16x3 a = SplitBf16x3(v[2 * e]), b = SplitBf16x3(v[2 * e + 1]);
      term[0][e] = a.hi | static_cast<uint32_t>(b.hi) << 16;
      term[1][e] = a.mid | static_cast<uint32_t>(b.mid) << 16;
      term[2][e] = a.lo | static_cast<uint32_t>(b.lo) << 16;
    }
    const int cc = off / ChunkK(kFormat), in_chunk = off % ChunkK(kFormat);
    const int q = in_chunk / kValues, grp = (in_chunk % kValues) / 8;
#pragma unroll
    for (int s = 0; s < kTerms; ++s) {
      xs[XUnit<kFormat, kNT>(cc, grp, s, t, q)] =
          make_uint4(term[s][0], term[s][1], term[s][2], term[s][3]);
    }
  }
}

template <WeightFormat kFormat>
struct WarpChunk {
  LaneChunk c[kTilesPerWarp][2];  // [tile][row g, row g+8]
};

template <WeightFormat kFormat>
__device__ __forceinline__ WarpChunk<kFormat> LoadWarpChunk(const MmaParams& p,
                                                            const int64_t (&rows)[kTilesPerWarp][2],
                                                            int64_t chunk, int q) {
  WarpChunk<kFormat> w;
  const int64_t k = chunk * ChunkK(kFormat) + q * ChunkValues(kFormat);
#pragma unroll
  for (int m = 0; m < kTilesPerWarp; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) w.c[m][h] = LoadLaneChunk<kFormat>(p, rows[m][h], k);
  }
  return w;
}

// acc += the warp chunk's rows times the staged x chunk cc (all token tiles): per group of
// 2 MMA steps, a zero partial takes the lo, mid, hi MMAs (steps 0, 1 each), then one fp32
// add into acc (see the accumulation note at the top).
template <WeightFormat kFormat, int kNT>
__device__ __forceinline__ void MmaChunk(const WarpChunk<kFormat>& w, const uint4* xs, int cc,
                                         int g, int q, float (&acc)[kTilesPerWarp][kNT][4]) {
  constexpr int kGroups = ChunkValues(kFormat) / 8;
#pragma unroll
  for (int grp = 0; grp < kGroups; ++grp) {
    uint32_t a[kTilesPerWarp][2][4];  // [tile][step in group][A register]
#pragma unroll
    for (int m = 0; m < kTilesPerWarp; ++m) {
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        StepPairs<kFormat>(w.c[m][0], 2 * grp + s, a[m][s][0], a[m][s][2]);  // row g
        StepPairs<kFormat>(w.c[m][1], 2 * grp + s, a[m][s][1], a[m][s][3]);  // row g + 8
      }
    }
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
      const uint4 bh = xs[XUnit<kFormat, kNT>(cc, grp, 0, 8 * n + g, q)];
      const uint4 bm = xs[XUnit<kFormat, kNT>(cc, grp, 1, 8 * n + g, q)];
      const uint4 bl = xs[XUnit<kFormat, kNT>(cc, grp, 2, 8 * n + g, q)];
#pragma unroll
      for (int m = 0; m < kTilesPerWarp; ++m) {
        float part[4];
        MmaBf16First(part, a[m][0], bl.x, bl.y);
        MmaBf16(part, a[m][1], bl.z, bl.w);
        MmaBf16(part, a[m][0], bm.x, bm.y);
        MmaBf16(part, a[m][1], bm.z, bm.w);
        MmaBf16(part, a[m][0], bh.x, bh.y);
        MmaBf16(part, a[m][1], bh.z, bh.w);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] += part[e];
      }
    }
  }
}

// Adds the split partials (in rank order) of this block's share of the rows and writes y.
template <int kNT>
__device__ void ReduceSplit(const MmaParams& p, const float (&acc)[kTilesPerWarp][kNT][4],
                            float* red, int64_t tile_row0) {
  constexpr int kTok = kNT * 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  __syncthreads();  // every warp is done with the x slice that `red` overlays
#pragma unroll
  for (int m = 0; m < kTilesPerWarp; ++m) {
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = warp * 32 + m * 16 + g + (e >= 2 ? 8 : 0), t = 8 * n + 2 * q + (e & 1);
        red[r * kTok + t] = acc[m][n][e];
      }
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  const int share = kBlockRows / p.split;
  for (int idx = threadIdx.x; idx < share * p.T; idx += kThreads) {
    const int r = rank * share + idx / p.T, t = idx % p.T;
    const int64_t i = tile_row0 + r;
    if (i >= p.n_rows) continue;
    float part[kMaxSplit];  // all remote loads first (one latency), then the ordered sum
#pragma unroll
    for (int b = 0; b < kMaxSplit; ++b) {
      part[b] = b < p.split ? *cluster.map_shared_rank(red + r * kTok + t, b) : 0.0f;
    }
    float sum = part[0];
#pragma unroll
    for (int b = 1; b < kMaxSplit; ++b) {
      if (b < p.split) sum += part[b];
    }
    float* out = p.y + t * p.ldy + i;
    *out = p.accumulate ? *out + sum : sum;
  }
  cluster.sync();  // keep this block's partials alive until every rank has read them
}

// kMinBlocks: blocks per SM the register budget is cut for (2: <= 128 registers; 1: up to
// 255, half the warps per SM). ptxas (CUDA 12, sm_90a) spill stores with three terms:
// kNT = 8 at 2 blocks 24 (BF16) .. 144 (FP8) bytes, at 1 block 0 (BF16) .. 132 (MXFP4);
// kNT = 4 8 .. 72; kNT <= 2 0 .. 24.
template <WeightFormat kFormat, int kNT, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) MmaKernel(MmaParams p) {
  pdl::WaitThenAllowNext();
  extern __shared__ uint4 xs[];
  constexpr int kSliceChunks = SliceK(kNT) / ChunkK(kFormat);
  static_assert(kSliceChunks >= 1, "a staged slice holds whole warp chunks");
  static_assert(kBlockRows * kNT * 8 * 4 <= kSmemBytes, "split partials fit shared memory");
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int64_t tile = blockIdx.x / p.split;
  const int part = static_cast<int>(blockIdx.x % p.split);  // == cluster rank
  const int64_t tile_row0 = tile * kBlockRows;
  p.x += (tile_row0 / p.group_rows) * p.x_group_stride;  // the tile's group (0 if plain)
  int64_t rows[kTilesPerWarp][2];  // rows past the end re-read the last row (not written)
#pragma unroll
  for (int m = 0; m < kTilesPerWarp; ++m) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t i = tile_row0 + warp * 32 + m * 16 + g + 8 * h;
      rows[m][h] = p.row0 + (i < p.n_rows ? i : p.n_rows - 1);
    }
  }
  float acc[kTilesPerWarp][kNT][4];
#pragma unroll
  for (int m = 0; m < kTilesPerWarp; ++m) {
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
    }
  }
  const int64_t c_begin = part * p.chunks_per_block, c_end = c_begin + p.chunks_per_block;
  // Shared memory: [xs: bf16 hi/mid/lo slice, kXsBytes][raw: fp32 slice, kRawBytes]; the
  // raw copy of slice s+1 runs (cp.async) while slice s is multiplied.
  float* raw = reinterpret_cast<float*>(xs) + kXsBytes / 4;
  const auto slice_end = [&](int64_t s0) {
    return s0 + kSliceChunks < c_end ? s0 + kSliceChunks : c_end;
  };
  IssueRawX<kNT>(p, c_begin * ChunkK(kFormat),
                 static_cast<int>((slice_end(c_begin) - c_begin) * ChunkK(kFormat)), raw);
  WarpChunk<kFormat> cur = LoadWarpChunk<kFormat>(p, rows, c_begin, q);
  for (int64_t s0 = c_begin; s0 < c_end; s0 += kSliceChunks) {
    const int64_t s1 = slice_end(s0);
    WaitRawX();
    __syncthreads();  // raw slice s0 complete; every warp is done with the previous xs
    ConvertX<kFormat, kNT>(raw, static_cast<int>((s1 - s0) * ChunkK(kFormat)), xs);
    __syncthreads();  // xs ready; raw free
    if (s1 < c_end) {
      IssueRawX<kNT>(p, s1 * ChunkK(kFormat),
                     static_cast<int>((slice_end(s1) - s1) * ChunkK(kFormat)), raw);
    }
    for (int64_t c = s0; c < s1; ++c) {
      // The prefetch of the next chunk may reach into the next slice: it needs no x.
      const WarpChunk<kFormat> next = LoadWarpChunk<kFormat>(p, rows, c + 1 < c_end ? c + 1 : c, q);
      MmaChunk<kFormat, kNT>(cur, xs, static_cast<int>(c - s0), g, q, acc);
      cur = next;
    }
  }
  if (p.split > 1) {
    ReduceSplit<kNT>(p, acc, reinterpret_cast<float*>(xs), tile_row0);
    return;
  }
#pragma unroll
  for (int m = 0; m < kTilesPerWarp; ++m) {
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = tile_row0 + warp * 32 + m * 16 + g + (e >= 2 ? 8 : 0);
        const int t = 8 * n + 2 * q + (e & 1);
        if (t < p.T && i < p.n_rows) {
          float* out = p.y + t * p.ldy + i;
          *out = p.accumulate ? *out + acc[m][n][e] : acc[m][n][e];
        }
      }
    }
  }
}

template <WeightFormat kFormat, int kNT, int kMinBlocks = 2>
cudaError_t Launch(const MmaParams& p, int64_t blocks, cudaStream_t stream) {
  auto kernel = MmaKernel<kFormat, kNT, kMinBlocks>;
  // Opt in to > 48 KiB of dynamic shared memory once per device (host-side attribute).
  static std::atomic<uint64_t> opted_in{0};
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (opted_in.load(std::memory_order_acquire) & bit) == 0) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
    if (e != cudaSuccess) return e;
    opted_in.fetch_or(bit, std::memory_order_release);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmemBytes;
  config.stream = stream;
  cudaLaunchAttribute attr[2];  // the cluster, and PDL (pdl.cuh) when enabled
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(p.split);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = pdl::AppendAttribute(attr, 1);
  return launch::LaunchKernel(config, kernel, p);
}

template <WeightFormat kFormat>
cudaError_t LaunchFormat(const MmaParams& p, int64_t blocks, cudaStream_t stream) {
  if (p.T <= 8) return Launch<kFormat, 1>(p, blocks, stream);
  if (p.T <= 16) return Launch<kFormat, 2>(p, blocks, stream);
  if (p.T <= 32) return Launch<kFormat, 4>(p, blocks, stream);
  if (g_wide_blocks_per_sm.load(std::memory_order_relaxed) == 1) {
    return Launch<kFormat, 8, 1>(p, blocks, stream);
  }
  return Launch<kFormat, 8, 2>(p, blocks, stream);
}

}  // namespace

void SetMmaWideBlocksPerSm(int blocks) {
  g_wide_blocks_per_sm.store(blocks == 1 ? 1 : 2, std::memory_order_relaxed);
}

int MmaKSplit(WeightFormat format, int64_t n_rows, int64_t K) {
  const int64_t chunks = K / ChunkK(format);
  const int64_t tiles = (n_rows + kBlockRows - 1) / kBlockRows;
  int split = 1;
  while (split < kMaxSplit && tiles * split < kTargetBlocks && chunks % (2 * split) == 0 &&
         chunks / (2 * split) >= kMinChunksPerBlock) {
    split *= 2;
  }
  return split;
}

bool MmaLinearApplicable(const DeviceWeight& w, int64_t T) {
  if (T < 1 || T > kMaxMmaTokens) return false;
  if (w.format == WeightFormat::kF32) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.rows < 1) return false;
  if (w.format != WeightFormat::kBF16 && w.scale == nullptr) return false;
  return w.cols > 0 && w.cols % ChunkK(w.format) == 0;
}

namespace {

cudaError_t RunMma(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x, int64_t T,
                   int64_t ldx, float* y, int64_t ldy, bool accumulate, int64_t group_rows,
                   int64_t x_group_stride, cudaStream_t stream) {
  MmaParams p = MmaParams();  // padding zeroed: the parameter bytes key CUDA graphs
  p.group_rows = group_rows;
  p.x_group_stride = x_group_stride;
  p.data = w.data;
  p.scale = w.scale;
  p.K = w.cols;
  p.row0 = row0;
  p.n_rows = n_rows;
  p.x = x;
  p.T = static_cast<int>(T);
  p.ldx = ldx;
  p.y = y;
  p.ldy = ldy;
  p.accumulate = accumulate;
  p.x_vec4 = reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0 && x_group_stride % 4 == 0;
  p.split = MmaKSplit(w.format, n_rows, w.cols);
  p.chunks_per_block = w.cols / ChunkK(w.format) / p.split;
  const int64_t blocks = (n_rows + kBlockRows - 1) / kBlockRows * p.split;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  switch (w.format) {
    case WeightFormat::kBF16:
      return LaunchFormat<WeightFormat::kBF16>(p, blocks, stream);
    case WeightFormat::kFp8Block32:
      return LaunchFormat<WeightFormat::kFp8Block32>(p, blocks, stream);
    case WeightFormat::kFp8Row32:
      return LaunchFormat<WeightFormat::kFp8Row32>(p, blocks, stream);
    case WeightFormat::kMxFp4:
      return LaunchFormat<WeightFormat::kMxFp4>(p, blocks, stream);
    case WeightFormat::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t LinearMma(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                      int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                      cudaStream_t stream) {
  if (n_rows <= 0 || T <= 0) return cudaSuccess;
  if (!MmaLinearApplicable(w, T) || row0 < 0 || row0 + n_rows > w.rows) {
    return cudaErrorInvalidValue;
  }
  return RunMma(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, /*group_rows=*/n_rows,
                /*x_group_stride=*/0, stream);
}

bool MmaLinearGroupedApplicable(const DeviceWeight& w, int64_t T, int64_t groups) {
  return MmaLinearApplicable(w, T) && groups >= 1 && w.rows % groups == 0 &&
         (w.rows / groups) % kBlockRows == 0;
}

cudaError_t LinearMmaGrouped(const DeviceWeight& w, int64_t groups, const float* x, int64_t T,
                             int64_t ldx, int64_t x_group_stride, float* y, int64_t ldy,
                             cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (!MmaLinearGroupedApplicable(w, T, groups)) return cudaErrorInvalidValue;
  return RunMma(w, 0, w.rows, x, T, ldx, y, ldy, /*accumulate=*/false, w.rows / groups,
                x_group_stride, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
