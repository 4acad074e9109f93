// FP8-activation mode, decode: dense FP8 Linears with <= 32 token rows as weight streaming
// on bf16 tensor cores (kernels_stream.h).
//
// Numerics: x is fake-quantised per 32 values (kFp8Block32Pow2) and stored as exact bf16; an
// e4m3 weight byte is placed as bf16 bits (value * 2^-120) and one bf16x2 multiply by
// 2^(S - 7) (S the ue8m0 byte of its 32 x 32 block; two multiplies when S > 134) gives value
// * 2^(S - 127) exactly. Each K part's output is one fp32 mma.sync m16n8k16 sum over its K
// steps; the parts' sums are added in part order (0, 1, ...), then to y when accumulating.
//
// Structure. A block of 8 warps owns a tile of 128 output rows (warp w: rows 16w .. 16w+15;
// lane g = lane / 4 reads rows g and g + 8) and one K part: a contiguous range of at most 8
// steps of 128 values. The `parts` blocks of a row tile form a thread-block cluster; each
// writes its [tokens x 128] partial sums to shared memory and the cluster adds them in rank
// order through distributed shared memory (no workspace, no atomics). The number of parts
// depends on the weight's shape only (LinearStreamSplit), so a token's bits do not depend on
// T or on the other tokens.
//   Weights: per step lane c = lane % 4 loads 32 bytes of each of its two rows (columns
// step*128 + 32c .. +31: one scale block) straight from global memory into registers, a
// ring of kRing = 4 steps in flight per warp (the first 4 issued before the PDL wait: weights
// are never written by a kernel). e4m3 word m of the 32 bytes (values 4m .. 4m+3) gives the
// two A registers of MMA m: pair (4m, 4m+2) as logical k (2c, 2c+1) and pair (4m+1, 4m+3) as
// (2c+8, 2c+9). The sum over k does not depend on which physical column a logical k is, as
// long as the B fragment uses the same map: the activations are stored in that "fragment
// order", so a lane's B registers for two MMAs are one 16-byte shared-memory load.
//   Activations: the block's K range of x in fragment order is staged once in shared memory
// (8 tokens x 128 values = 2 KB per step and token tile; <= 64 KB at 32 tokens). For T <= 4
// the block quantises its range of x itself (a few warp-blocks per warp; no separate kernel,
// no scratch); for more tokens QuantizeStreamKernel writes the fragment order to scratch
// first and the blocks copy their range with cp.async.
//
// Bytes in flight (Little's law: ~4.6 TB/s x ~1 us = ~4.6 MB over 132 SMs, ~35 KB per SM):
// 2 blocks per SM (<= 128 registers) x 8 warps x 4 steps x 2 KB = 128 KB per SM. The serial
// chain per warp is <= 8 steps = 2 ring turns (was up to 32 steps with 2 in flight). The
// parts are chosen (powers of two, <= 8 = the portable cluster size) so that chunks hold
// <= 8 steps and, where K allows >= 4 steps per chunk, the grid has >= 264 blocks. V4.1
// shapes (rows x K: tiles x parts = blocks, steps per block): wo_b 5120 x 8192: 40 x 8 = 320,
// 8; wq_b 32768 x 1280: 256 x 2 = 512, 5; wq_a 1280 x 5120: 10 x 8 = 80, 5; wkv 512 x 5120:
// 4 x 8 = 32, 5; shared w1 2304 x 5120: 18 x 8 = 144, 5; shared w2 5120 x 2304: 40 x 4 =
// 160, 4-5; wo_a (8 groups) 8192 x 4096: 64 x 8 = 512, 4; engram wkv 25600 x 6144: 200 x 8 =
// 1600, 6.
// Previous design (one warp per 16 rows walking all of K, 2 steps in flight; MEASURED H200
// run 54, T 1): wq_b 15.1 us, wo_b 18.5, shared w1 8.5, engram wkv 46.2; latency-bound.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

namespace cg = cooperative_groups;
using model::WeightFormat;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kStepK = 128;  // K values per warp step: 4 lanes x 32
constexpr int kWarpRows = 16;
constexpr int kBlockRows = kWarps * kWarpRows;  // output rows of a block (a row tile)
constexpr int kMaxParts = 8;                    // blocks per cluster (portable maximum)
constexpr int kMaxChunkSteps = 8;               // K steps of one block at most
constexpr int kMinChunkSteps = 4;               // ... and at least, where K allows
constexpr int kRing = 4;                        // weight steps in flight per warp
constexpr int64_t kTargetBlocks = 264;          // 2 blocks on each of 132 SMs
constexpr int kFusedQuantMaxTokens = 4;         // T up to which blocks quantise x themselves
constexpr int kUnitsPerStep = 4 * 32;           // 16-byte x units per step and token tile
constexpr int kPartStride = kBlockRows + 4;     // floats per token of a partial tile (padded)
static_assert(kMaxChunkSteps % kRing == 0);
static_assert(kMaxParts * kMaxChunkSteps * kStepK == kStreamMaxK);

int TokenTiles(int64_t T) { return static_cast<int>((T + 7) / 8); }

// Programmatic dependent launch (pdl.cuh): both kernels go through pdl::Launch. The
// quantisation kernel waits for its predecessor, then lets LinearStreamKernel start; the
// stream kernel issues its first weight loads (weights are never written by a kernel, the one
// read allowed before the wait), then waits for its predecessor grid to complete (and its
// writes to be visible) before it reads x, then lets its own successor start.

// --- activations in fragment order ------------------------------------------------------
//
// For K step st, 16-byte unit q (0..3) of a 32-value chunk, token tile nt and lane
// (n, c) = (token nt*8 + n, chunk st*4 + c): the uint4 at ((st*4 + q) * NT + nt) * 32 + 4n + c.
// Inside a chunk, bf16x2 word j holds values (4(j/2) + j%2, 4(j/2) + j%2 + 2) (low, high):
// the pairs the weight conversion makes of e4m3 word j/2. Unit q = words 4q .. 4q+3. The
// units of consecutive steps are contiguous (a block's K range is one contiguous copy).
__device__ __forceinline__ int64_t FragmentUnit(int64_t st, int q, int nt, int n, int c, int nts) {
  return ((st * 4 + q) * nts + nt) * 32 + 4 * n + c;
}

// Where value `lane` of the 32-value chunk (step st, chunk c) of token (nt, n) goes, as a
// uint16_t index into the fragment-order array.
__device__ __forceinline__ int64_t FragmentHalf(int64_t st, int c, int nt, int n, int nts,
                                                int lane) {
  const int j = 2 * (lane / 4) + lane % 2, high = (lane % 4) / 2;
  return FragmentUnit(st, j / 4, nt, n, c, nts) * 8 + (j % 4) * 2 + high;
}

// xf = the quantised x [T, K] (row stride ldx) in fragment order for nts token tiles;
// tokens T .. nts*8 - 1 are zeros. One warp per (token, 32-value block).
__global__ void __launch_bounds__(kThreads)
    QuantizeStreamKernel(const float* x, int64_t T, int64_t K, int64_t ldx, int nts, uint16_t* xf) {
  pdl::WaitThenAllowNext();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t per_row = K / 32, blocks = int64_t{nts} * 8 * per_row;
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  for (int64_t b = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32; b < blocks; b += warps) {
    const int64_t t = b / per_row, kb = b % per_row;
    const float v = t < T ? x[t * ldx + kb * 32 + lane] : 0.0f;
    xf[FragmentHalf(kb / 4, static_cast<int>(kb % 4), static_cast<int>(t / 8),
                    static_cast<int>(t % 8), nts, lane)] = fp8::QuantizeLaneBf16(v);
  }
}

// --- the streaming GEMM -----------------------------------------------------------------

// e4m3 bytes 0 and 2 (PairA) or 1 and 3 (PairB) of w as a bf16x2 (the first in the low half)
// of their values * 2^-120: magnitude bits to bf16 bits 4..10, sign to bit 15.
__device__ __forceinline__ uint32_t E4m3PairA(uint32_t w) {
  return ((w << 4) & 0x07F007F0u) | ((w << 8) & 0x80008000u);
}
__device__ __forceinline__ uint32_t E4m3PairB(uint32_t w) {
  return ((w >> 4) & 0x07F007F0u) | (w & 0x80008000u);
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

struct StreamArgs {
  const uint8_t* w;      // e4m3 [rows, K], row-major
  const uint8_t* scale;  // ue8m0 [ceil(rows / 32), K / 32]
  int64_t K;             // weight columns (a multiple of 128, <= kStreamMaxK)
  int64_t row0;          // first weight row (a multiple of 16)
  int64_t n_rows;        // output rows (a multiple of 16)
  int64_t group_rows;    // weight rows per x group (grouped: a multiple of 128; else all rows)
  int64_t group_steps;   // x steps per group (grouped: K / 128; else 0)
  const uint4* xf;       // quantised activations in fragment order (T > kFusedQuantMaxTokens)
  const float* x;        // fp32 activations, row stride ldx (T <= kFusedQuantMaxTokens)
  int64_t ldx;
  int T;
  int parts;  // blocks (a cluster) sharing a row tile, each a contiguous range of K steps
  float* y;
  int64_t ldy;
  bool accumulate;
};

// One K step's weight registers: 32 bytes of rows g and g + 8, and the scale byte.
struct WeightStep {
  uint4 w[4];
  uint32_t scale;
};

// The warp's weight stream: rows g and g + 8 of its 16 rows at the block's first K step.
struct WeightCursor {
  const uint8_t* w0;
  const uint8_t* w1;
  const uint8_t* sc;
};

// Step st (relative to the block's first step) of the cursor.
__device__ __forceinline__ void LoadWeights(WeightStep& s, const WeightCursor& cur, int st) {
  const int off = st * kStepK;
  s.w[0] = mma::LoadStreaming16(cur.w0 + off);
  s.w[1] = mma::LoadStreaming16(cur.w0 + off + 16);
  s.w[2] = mma::LoadStreaming16(cur.w1 + off);
  s.w[3] = mma::LoadStreaming16(cur.w1 + off + 16);
  s.scale = __ldg(cur.sc + st * 4);
}

// The 8 MMAs per token tile of one step (see the file comment for the operand maps). xs:
// this lane's unit of the step's activations in shared memory (unit q, tile nt at
// xs[(q * NT + nt) * 32]).
template <int NT>
__device__ __forceinline__ void ComputeStep(const WeightStep& s, const uint4* xs,
                                            float (&acc)[NT][4]) {
  const uint32_t S = s.scale;
  const bool one = S <= 134;  // 2^(S - 7) is a normal bf16
  const uint32_t f1 = (one ? S + 120 : 247u) * 0x00800080u, f2 = E8m0ToBf16x2(S);
  const bool all_one = __all_sync(0xffffffffu, one);
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint4 u[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) u[nt] = xs[(q * NT + nt) * 32];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = 2 * q + h;
      const uint32_t wa = Word(s.w[m / 4], m % 4), wb = Word(s.w[2 + m / 4], m % 4);
      uint32_t a[4] = {E4m3PairA(wa), E4m3PairA(wb), E4m3PairB(wa), E4m3PairB(wb)};
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = MulBf16x2(a[i], f1);
      if (!all_one && !one) {
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = MulBf16x2(a[i], f2);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        if (h == 0) {
          mma::MmaBf16(acc[nt], a, u[nt].x, u[nt].y);
        } else {
          mma::MmaBf16(acc[nt], a, u[nt].z, u[nt].w);
        }
      }
    }
  }
}

// acc += the warp's 16 rows times the activations over the block's n (<= kMaxChunkSteps)
// steps; ring[j] holds step j on entry (j < min(n, kRing)). Step st + kRing is loaded into
// the registers step st frees.
template <int NT>
__device__ __forceinline__ void StreamSteps(WeightStep (&ring)[kRing], const WeightCursor& cur,
                                            const uint4* xs, int n, float (&acc)[NT][4]) {
#pragma unroll
  for (int i = 0; i < kMaxChunkSteps; i += kRing) {
#pragma unroll
    for (int j = 0; j < kRing; ++j) {
      const int st = i + j;
      if (st < n) {
        ComputeStep<NT>(ring[j], xs + st * NT * kUnitsPerStep, acc);
        if (st + kRing < n) LoadWeights(ring[j], cur, st + kRing);
      }
    }
  }
}

// Shared memory [n steps][NT token tiles] in fragment order = the activations of x steps
// x_s0 .. x_s0 + n - 1; visible to the whole block on return.
template <int NT, bool kFused>
__device__ __forceinline__ void StageActivations(const StreamArgs& a, int64_t x_s0, int n,
                                                 uint4* xs) {
  if constexpr (kFused) {
    static_assert(NT == 1, "fused quantisation is for one token tile");
    auto* xs16 = reinterpret_cast<uint16_t*>(xs);
    const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
    const int chunks = 4 * n;  // 32-value chunks per token
    for (int b = warp; b < 8 * chunks; b += kWarps) {
      const int t = b / chunks, kc = b % chunks;
      uint16_t bits = 0;  // tokens T .. 7: zeros
      if (t < a.T) bits = fp8::QuantizeLaneBf16(a.x[t * a.ldx + (x_s0 * 4 + kc) * 32 + lane]);
      xs16[FragmentHalf(kc / 4, kc % 4, 0, t, 1, lane)] = bits;
    }
  } else {
    const uint4* src = a.xf + x_s0 * NT * kUnitsPerStep;
    const int units = n * NT * kUnitsPerStep;
    for (int i = static_cast<int>(threadIdx.x); i < units; i += kThreads) {
      mma::CpAsync16(xs + i, src + i);
    }
    mma::CpAsyncCommit();
    mma::CpAsyncWaitAll();
  }
  __syncthreads();
}

// The cluster's sum of the parts' partials (in rank order) for rows of this block's tile,
// written (or added) to y. part: this block's shared memory, [NT*8 tokens][kPartStride].
template <int NT>
__device__ __forceinline__ void ReduceParts(const StreamArgs& a, int64_t tile,
                                            const float (&acc)[NT][4], float* part) {
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4, c = lane % 4;
  __syncthreads();  // every warp is done with the activations that `part` overlays
  // Accumulator (m16n8): acc[nt][i] is row g (+ 8 for i >= 2), token nt*8 + 2c + i % 2.
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = nt * 8 + 2 * c + i % 2, r = warp * kWarpRows + g + (i >= 2 ? 8 : 0);
      part[t * kPartStride + r] = acc[nt][i];
    }
  }
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int rank = static_cast<int>(cluster.block_rank());
  const int elements = a.T * kBlockRows;
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < elements;
       e += a.parts * kThreads) {
    const int t = e / kBlockRows, r = e % kBlockRows;
    const int64_t row = tile * kBlockRows + r;
    if (row >= a.n_rows) continue;
    float p[kMaxParts];  // all remote loads first (one latency), then the ordered sum
#pragma unroll
    for (int b = 0; b < kMaxParts; ++b) {
      p[b] = b < a.parts ? *cluster.map_shared_rank(part + t * kPartStride + r, b) : 0.0f;
    }
    float sum = p[0];
#pragma unroll
    for (int b = 1; b < kMaxParts; ++b) {
      if (b < a.parts) sum += p[b];
    }
    float* dst = a.y + t * a.ldy + row;
    *dst = a.accumulate ? *dst + sum : sum;
  }
  cluster.sync();  // keep this block's partials alive until every rank has read them
}

// Block (tile, part) = blockIdx.x = tile * parts + part; the part is the cluster rank.
template <int NT, bool kFused>
__global__ void __launch_bounds__(kThreads, 2) LinearStreamKernel(StreamArgs a) {
  extern __shared__ uint4 smem[];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int64_t tile = blockIdx.x / a.parts;
  const int part = static_cast<int>(blockIdx.x % a.parts);
  const int64_t steps = a.K / kStepK, s0 = part * steps / a.parts;
  const int n = static_cast<int>((part + 1) * steps / a.parts - s0);
  const int64_t rel = tile * kBlockRows + warp * kWarpRows;  // the warp's first output row
  const bool active = rel < a.n_rows;
  const int64_t r = a.row0 + (active ? rel : 0);
  const int g = lane / 4, c = lane % 4;
  WeightCursor cur;
  cur.w0 = a.w + (r + g) * a.K + s0 * kStepK + 32 * c;
  cur.w1 = cur.w0 + 8 * a.K;
  cur.sc = a.scale + (r / 32) * (a.K / 32) + s0 * 4 + c;
  WeightStep ring[kRing];
  if (active) {
#pragma unroll
    for (int j = 0; j < kRing; ++j) {
      if (j < n) LoadWeights(ring[j], cur, j);
    }
  }
  pdl::WaitThenAllowNext();
  // Grouped weights: the tile lies in one group (group_rows is a multiple of kBlockRows).
  const int64_t x_s0 = ((a.row0 + tile * kBlockRows) / a.group_rows) * a.group_steps + s0;
  StageActivations<NT, kFused>(a, x_s0, n, smem);
  float acc[NT][4] = {};
  if (active) StreamSteps<NT>(ring, cur, smem + lane, n, acc);
  ReduceParts<NT>(a, tile, acc, reinterpret_cast<float*>(smem));
}

// Dynamic shared memory of a block: the larger of its activations and its partial tile.
size_t SmemBytes(int nts, int64_t chunk_steps) {
  const int64_t x = chunk_steps * kUnitsPerStep * 16, part = int64_t{8} * kPartStride * 4;
  return static_cast<size_t>(nts * std::max(x, part));
}

template <int NT, bool kFused>
cudaError_t LaunchStream(const StreamArgs& a, int64_t blocks, size_t smem, cudaStream_t stream) {
  auto kernel = LinearStreamKernel<NT, kFused>;
  // Opt in to the instance's largest shared memory once per device (host-side attribute).
  static std::atomic<uint64_t> opted_in{0};
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e != cudaSuccess) return e;
  const uint64_t bit = device < 64 ? uint64_t{1} << device : 0;
  if (bit == 0 || (opted_in.load(std::memory_order_acquire) & bit) == 0) {
    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(SmemBytes(NT, kMaxChunkSteps)));
    if (e != cudaSuccess) return e;
    opted_in.fetch_or(bit, std::memory_order_release);
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attr[2];  // the cluster, and PDL (pdl.cuh) when enabled
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = static_cast<unsigned>(a.parts);
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = pdl::AppendAttribute(attr, 1);
  return cudaLaunchKernelEx(&config, kernel, a);
}

// x_cols: the columns of x (K, or groups * K for grouped weights).
cudaError_t Launch(StreamArgs a, const float* x, int64_t x_cols, int64_t ldx, void* scratch,
                   cudaStream_t stream) {
  const int nts = TokenTiles(a.T);
  const bool fused = a.T <= kFusedQuantMaxTokens;
  if (fused) {
    a.x = x;
    a.ldx = ldx;
  } else {
    const cudaError_t e =
        pdl::Launch(QuantizeStreamKernel, fp8::WarpPerBlockGrid(int64_t{nts} * 8 * (x_cols / 32)),
                    kThreads, 0, stream, x, a.T, x_cols, ldx, nts, static_cast<uint16_t*>(scratch));
    if (e != cudaSuccess) return e;
    a.xf = static_cast<const uint4*>(scratch);
  }
  a.parts = LinearStreamSplit(a.n_rows, a.K);
  const int64_t steps = a.K / kStepK, chunk = (steps + a.parts - 1) / a.parts;
  const int64_t blocks = (a.n_rows + kBlockRows - 1) / kBlockRows * a.parts;
  const size_t smem = SmemBytes(nts, chunk);
  if (fused) return LaunchStream<1, true>(a, blocks, smem, stream);
  switch (nts) {
    case 1:
      return LaunchStream<1, false>(a, blocks, smem, stream);
    case 2:
      return LaunchStream<2, false>(a, blocks, smem, stream);
    case 3:
      return LaunchStream<3, false>(a, blocks, smem, stream);
    default:
      return LaunchStream<4, false>(a, blocks, smem, stream);
  }
}

bool WeightOk(const DeviceWeight& w) {
  return w.format == WeightFormat::kFp8Block32 && w.cols > 0 && w.cols % kStepK == 0 &&
         w.cols <= kStreamMaxK && w.data != nullptr && w.scale != nullptr &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
}

}  // namespace

int LinearStreamSplit(int64_t n_rows, int64_t K) {
  static const int64_t forced = [] {
    const char* env = std::getenv("DEEPINFER_LINEAR_STREAM_SPLIT");  // tuning only
    return env != nullptr ? std::atoll(env) : 0;
  }();
  const int64_t steps = K / kStepK, tiles = (n_rows + kBlockRows - 1) / kBlockRows;
  // Chunks of at most kMaxChunkSteps steps; growing the grid towards kTargetBlocks only
  // while chunks keep kMinChunkSteps steps (where K has that many).
  const int64_t lo = (steps + kMaxChunkSteps - 1) / kMaxChunkSteps;
  const int64_t hi = std::max(lo, std::min<int64_t>(kMaxParts, steps / kMinChunkSteps));
  if (forced >= std::max<int64_t>(lo, 1) && forced <= std::min<int64_t>(kMaxParts, steps)) {
    return static_cast<int>(forced);
  }
  int64_t parts = 1;
  while (parts < kMaxParts && (parts < lo || (parts * 2 <= hi && tiles * parts < kTargetBlocks))) {
    parts *= 2;
  }
  return static_cast<int>(parts);
}

bool LinearStreamApplicable(const DeviceWeight& w, int64_t row0, int64_t n_rows, int64_t T) {
  return WeightOk(w) && T >= 1 && T <= kStreamMaxTokens && row0 >= 0 && n_rows > 0 &&
         row0 % kWarpRows == 0 && n_rows % kWarpRows == 0 && row0 + n_rows <= w.rows;
}

int64_t LinearStreamScratchBytes(int64_t T, int64_t K) {
  return int64_t{TokenTiles(T)} * 8 * K * 2;
}

cudaError_t LinearStream(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                         int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                         void* scratch, cudaStream_t stream) {
  if (!LinearStreamApplicable(w, row0, n_rows, T)) return cudaErrorInvalidValue;
  StreamArgs a{};
  a.w = static_cast<const uint8_t*>(w.data);
  a.scale = w.scale;
  a.K = w.cols;
  a.row0 = row0;
  a.n_rows = n_rows;
  a.group_rows = w.rows;
  a.group_steps = 0;
  a.T = static_cast<int>(T);
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  return Launch(a, x, w.cols, ldx, scratch, stream);
}

bool LinearStreamGroupedApplicable(const DeviceWeight& w, int64_t groups, int64_t T) {
  return groups > 0 && w.rows % groups == 0 && (w.rows / groups) % kBlockRows == 0 &&
         LinearStreamApplicable(w, 0, w.rows, T);
}

cudaError_t LinearStreamGrouped(const DeviceWeight& w, int64_t groups, const float* x, int64_t T,
                                int64_t ldx, float* y, int64_t ldy, void* scratch,
                                cudaStream_t stream) {
  if (!LinearStreamGroupedApplicable(w, groups, T)) return cudaErrorInvalidValue;
  StreamArgs a{};
  a.w = static_cast<const uint8_t*>(w.data);
  a.scale = w.scale;
  a.K = w.cols;
  a.row0 = 0;
  a.n_rows = w.rows;
  a.group_rows = w.rows / groups;
  a.group_steps = w.cols / kStepK;
  a.T = static_cast<int>(T);
  a.y = y;
  a.ldy = ldy;
  a.accumulate = false;
  return Launch(a, x, groups * w.cols, ldx, scratch, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
