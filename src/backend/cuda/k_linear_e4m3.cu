// FP8-activation mode, decode: the dense FP8 Linears of LinearStream (kernels_stream.h) on e4m3
// wgmma, for 1..32 token rows (the switch: LinearStreamE4m3, kernels_stream.h).
//
// MEASURED, NOT KEPT (H200, session 24, runs 201-204; removed in the commit after this one):
// correct (CudaLinearE4m3Test) but slower than the bf16 form nearly everywhere. Per call, us, e4m3
// / bf16 (run 204): wo_b T=1 24.7 / 17.8, T=32 40.5 / 29.5; wo_a T=1 17.9 / 14.8, T=32 38.5 / 26.8;
// wq_b T=1 15.3 / 15.0, T=32 23.5 / 23.9; the 4-layer decode step B=1 / 8 / 16 / 32 1.44-1.47
// / 2.40-2.41 / 3.48 / 5.32-5.34 ms against 1.40-1.41 / 2.35 / 3.40-3.42 / 4.93-4.94. ncu (run 203,
// wo_b T=1): the clusters spread unevenly (0 to 5 blocks an SM), short-scoreboard stalls on the
// promotion's scale reads, barrier stalls at the cluster reduction. Runs 201-203 also found ptxas
// serialising the wgmmas (info C7520) while a wgmma sat on a conditional path (fixed here: whole
// rings).
//
// Why. LinearStreamKernel (k_linear_stream.cu) turns every e4m3 weight byte into bf16 for
// mma.sync (~170 instructions per 2 KiB warp step) and reads the activations as bf16 from L2 per
// warp: at 32 tokens the wo_a / wo_b / wq_b streams ran at ~1-1.5 TB/s (H200, run 194). Here a
// weight byte goes into a wgmma A fragment as loaded, the activations are e4m3 in shared memory,
// and a k32 step costs one wgmma m64n8k32 per 8-token tile plus its fp32 promotion.
//
// Numerics. x is quantised per 32 values (kFp8Block32Pow2: e4m3 bytes and a power-of-two scale per
// token and block, the numbers of the bf16 path); a weight block is 32 rows x 32 values with one
// ue8m0 scale. So each k32 step is ONE scale block of both operands: the tensor core sums its 32
// e4m3 products (exact products) into a fresh fp32 part, which is promoted as acc += part *
// w_scale * x_scale[token] (both powers of two). The steps are promoted in K order; blocks that
// split K add their sums in cluster-rank order. A token's bits depend on the weight's shape only:
// every 8-token tile runs its own m64n8k32 with the same operands and order for any T.
//
// Layout of a k32 step. The wgmma A fragment of lane (g, t) of warp w is row 16 w + g (and + 8),
// logical k 4t .. 4t + 3 (registers 0, 1) and 16 + 4t .. 16 + 4t + 3 (registers 2, 3). Logical k
// 4t + i is taken as physical column 8t + i and 16 + 4t + i as 8t + 4 + i, so a lane's fragment of
// a row is the 8 contiguous bytes 8t .. 8t + 7 of the row's 32-byte block: one 8-byte load per row
// and step, four lanes reading one 32-byte sector. The activations are packed in the same order
// (PackE4m3Kernel): a step's 8-token tile is 256 bytes, two no-swizzle K-major core matrices (8
// tokens x 16 bytes), core c holding physical columns {8a + 4c + i}.
//
// Structure. A block is one warpgroup owning 64 weight rows and a range of K steps (at most
// kMaxBlockSteps); `split` blocks (a thread-block cluster, the weight's shape decides: E4m3Split)
// cover a tile's K. Each lane keeps kPF steps of its rows' weight loads in flight in registers,
// the first issued before the PDL wait (weights are never written by a kernel). After the wait
// thread 0 brings the block's packed activations and token scales into shared memory with two
// bulk copies. Steps run in groups of kG: issue the group's wgmmas into kG part sets, one wait,
// refill the group's ring slots, promote.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/bulk_copy.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/wgmma_fp8.cuh"
#include "base/logging.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kThreads = 128;           // one warpgroup
constexpr int kTileRows = 64;           // weight rows per block (the wgmma M)
constexpr int kStepK = 32;              // K values per step: one scale block
constexpr int kTileBytes = 8 * kStepK;  // one step's packed 8-token tile
constexpr int kMaxBlockSteps = 48;      // K steps of one block at most (its shared copy of x)
constexpr int kMinBlockSteps = 8;       // a split does not go below this many steps a block
constexpr int kMaxSplit = 8;            // the portable cluster size
constexpr int64_t kWantBlocks = 132;    // a block for every SM of an H200

// The arguments of one weight (row range) of a launch.
struct Target {
  const uint8_t* w;      // e4m3 [rows, K] row-major
  const uint8_t* scale;  // ue8m0 [ceil(rows / 32), K / 32]
  int64_t K;
  int64_t row0;         // first weight row (a multiple of 64)
  int64_t group_rows;   // weight rows per x group (grouped) or all rows
  int64_t group_steps;  // x steps per group (grouped: K / 32) or 0
  float* y;             // y[t * ldy + i] for weight row row0 + i
  int64_t ldy;
  bool accumulate;
};

struct Launch {
  Target a[kMaxStreamTargets];
  int64_t cluster_end[kMaxStreamTargets];  // row tiles of targets 0..i
  int n;
  int split;  // blocks per tile (the cluster), along K
  int T;
  const uint8_t* packed;  // [x_steps][NT][kTileBytes]
  const float* xscale;    // [x_steps][8 NT]
};

// The packed activations' bytes for x_steps steps of nts token tiles, then the scales.
int64_t PackedTileBytes(int64_t x_steps, int nts) { return x_steps * nts * kTileBytes; }
int64_t PackedBytes(int64_t x_steps, int nts) {
  return PackedTileBytes(x_steps, nts) + x_steps * nts * 8 * 4;
}

int TokenTiles(int64_t T) { return static_cast<int>((T + 7) / 8); }

// x [T, x_cols] (row stride ldx) -> packed tiles and scales for nts token tiles (tokens T ..
// 8 nts - 1 zeros). One warp per (token, 32-value block), lane l quantising column l.
__global__ void __launch_bounds__(256)
    PackE4m3Kernel(const float* x, int T, int64_t x_cols, int64_t ldx, int nts, uint8_t* packed,
                   float* xscale) {
  pdl::WaitThenAllowNext();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t per_row = x_cols / kStepK, n_pad = int64_t{nts} * 8, blocks = n_pad * per_row;
  const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
  for (int64_t b = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; b < blocks;
       b += warps) {
    const int64_t t = b / per_row, kb = b % per_row;
    const float v = t < T ? x[t * ldx + kb * kStepK + lane] : 0.0f;
    float s;
    const uint8_t byte = fp8::QuantizeLaneE4m3(v, &s);
    uint32_t word = uint32_t{byte} << (8 * (lane % 4));
    word |= __shfl_xor_sync(0xffffffffu, word, 1);
    word |= __shfl_xor_sync(0xffffffffu, word, 2);
    if (lane % 4 == 0) {  // column 8a + 4c + i: core c, byte 4a + i of token row t % 8
      const int a8 = lane / 8, c = (lane % 8) / 4;
      const int64_t off = (kb * nts + t / 8) * kTileBytes + c * 128 + (t % 8) * 16 + 4 * a8;
      *reinterpret_cast<uint32_t*>(packed + off) = word;
    }
    if (lane == 0) xscale[kb * n_pad + t] = s;
  }
}

// 8 weight bytes (a lane's fragment of one row and step), streamed: not kept in L1, the 128-byte
// line brought into L2 (the row's next three steps).
__device__ __forceinline__ uint2 LoadWeight8(const uint8_t* p) {
  uint2 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v2.u32 {%0, %1}, [%2];"
               : "=r"(r.x), "=r"(r.y)
               : "l"(p));
  return r;
}

// 2^(S - 127) for a ue8m0 byte S (S = 0: the subnormal 2^-127).
__device__ __forceinline__ float Ue8m0Scale(uint32_t S) { return ldexpf(1.0f, int(S) - 127); }

// One lane's weight bytes of one step: rows g and g + 8 of its warp.
struct StepWeights {
  uint2 lo, hi;
};

// kPF: steps of weight loads in flight per lane; kG: steps per wgmma wait; kMinBlocks: per SM.
template <int NT, int kG, int kPF, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    LinearE4m3Kernel(const __grid_constant__ Launch m) {
  constexpr int kN = 8 * NT;
  extern __shared__ __align__(128) char smem[];
  __shared__ float wscale[2][kMaxBlockSteps];  // [32-row block of the tile][step]
  __shared__ __align__(8) uint64_t bar_word;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t4 = lane % 4;
  const int64_t cluster = blockIdx.x / m.split;
  const int part = static_cast<int>(blockIdx.x % m.split);  // the cluster rank
  int target = 0;
  while (target + 1 < m.n && cluster >= m.cluster_end[target]) ++target;
  const Target& a = m.a[target];
  const int64_t tile = cluster - (target == 0 ? 0 : m.cluster_end[target - 1]);
  const int64_t steps = a.K / kStepK;
  const int s0 = static_cast<int>(part * steps / m.split);
  const int ns = static_cast<int>((part + 1) * steps / m.split) - s0;
  const int64_t r_tile = a.row0 + tile * kTileRows;
  const uint8_t* w_lo = a.w + (r_tile + 16 * warp + g) * a.K + int64_t{s0} * kStepK + 8 * t4;
  const uint8_t* w_hi = w_lo + 8 * a.K;

  // Every ring slot is loaded and every step of whole rings issues its wgmmas (steps past ns read
  // step ns - 1 again and are not promoted): no wgmma or A-fragment write sits on a conditional
  // path, which would make ptxas serialise the wgmmas (info C7520).
  auto load_step = [&](int st) -> StepWeights {
    const int64_t off = int64_t{min(st, ns - 1)} * kStepK;
    return {LoadWeight8(w_lo + off), LoadWeight8(w_hi + off)};
  };
  StepWeights ring[kPF];
#pragma unroll
  for (int u = 0; u < kPF; ++u) ring[u] = load_step(u);
  // The weight scales (never written by a kernel either): loaded now, stored to shared memory
  // once the activations' copy is under way (the store waits for the load).
  const bool loads_scale = tid < 2 * ns;
  const uint8_t scale_byte =
      loads_scale ? a.scale[(r_tile / 32 + tid / ns) * steps + s0 + tid % ns] : uint8_t{0};
  const uint32_t smem_base = mma::SharedAddress(smem), bar = mma::SharedAddress(&bar_word);
  const uint32_t tile_bytes = static_cast<uint32_t>(ns * NT * kTileBytes);
  pdl::WaitThenAllowNext();
  if (tid == 0) {  // thread 0 initialises the barrier it arms; the others see it after the sync
    bulk::BarrierInit(bar, 1);
    bulk::FenceBarrierInit();
    const int64_t x_step0 = (a.group_steps != 0 ? (r_tile / a.group_rows) * a.group_steps : 0) + s0;
    const uint32_t scale_bytes = static_cast<uint32_t>(ns * kN * 4);
    bulk::ArriveExpectTx(bar, tile_bytes + scale_bytes);
    bulk::BulkCopy(smem_base, m.packed + x_step0 * NT * kTileBytes, tile_bytes, bar);
    bulk::BulkCopy(smem_base + tile_bytes, m.xscale + x_step0 * kN, scale_bytes, bar);
  }
  if (loads_scale) wscale[tid / ns][tid % ns] = Ue8m0Scale(scale_byte);
  __syncthreads();  // the barrier's initialisation and the weight scales
  const float* xs = reinterpret_cast<const float*>(smem + tile_bytes);
  const float* ws = wscale[warp / 2];  // warp w's rows 16 w .. 16 w + 15 lie in block w / 2
  const uint64_t desc0 = wgmma::Descriptor(smem_base, 128, 256);
  bulk::WaitPhaseOrTrap(bar, 0);

  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  float part_sum[kG][kN / 2];  // a step's wgmma accumulators: [4 nt + e] as acc[nt][e]
  uint32_t frag[kG][4];
  // Steps first .. first + kG - 1 from ring slots q0 .. q0 + kG - 1 (compile-time after
  // unrolling; step st sits in slot st % kPF).
  auto run_group = [&](int first, int q0) {
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      const StepWeights& sw = ring[q0 + u];
      frag[u][0] = sw.lo.x, frag[u][1] = sw.hi.x, frag[u][2] = sw.lo.y, frag[u][3] = sw.hi.y;
      wgmma::FenceOperands(frag[u]);
      wgmma::FenceOperands(part_sum[u]);
    }
    wgmma::Fence();
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      const uint32_t off = static_cast<uint32_t>((first + u) * NT * kTileBytes);
      wgmma::WgmmaE4m3Rs<kN>(part_sum[u], frag[u], wgmma::DescriptorPlus(desc0, off), 0);
    }
    wgmma::CommitGroup();
    // The group's scales while its wgmmas run. Steps past ns (whole rings) read scales that are
    // there (shared memory of this block) and are dropped below by a select, not a branch.
    float w[kG];
    float2 sc[kG][NT];
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      w[u] = ws[first + u];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        sc[u][nt] = *reinterpret_cast<const float2*>(xs + (first + u) * kN + 8 * nt + 2 * t4);
    }
    wgmma::WaitGroup<0>();
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      wgmma::FenceOperands(frag[u]);
      wgmma::FenceOperands(part_sum[u]);
      ring[q0 + u] = load_step(first + u + kPF);
    }
#pragma unroll
    for (int u = 0; u < kG; ++u) {
      const bool valid = first + u < ns;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float f0 = w[u] * sc[u][nt].x, f1 = w[u] * sc[u][nt].y;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sum = fmaf(part_sum[u][4 * nt + e], (e & 1) ? f1 : f0, acc[nt][e]);
          acc[nt][e] = valid ? sum : acc[nt][e];
        }
      }
    }
  };
  static_assert(kPF % kG == 0, "groups of kG steps fill the ring exactly");
  for (int base = 0; base < ns; base += kPF) {
#pragma unroll
    for (int q = 0; q < kPF; q += kG) run_group(base + q, q);
  }

  // acc[nt][e]: tile row 16 warp + g (+ 8 for e >= 2), token 8 nt + 2 t4 + (e & 1).
  const int64_t y_row0 = r_tile - a.row0;
  if (m.split == 1) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int t = 8 * nt + 2 * t4 + (e & 1);
        if (t >= m.T) continue;
        float* dst = a.y + t * a.ldy + y_row0 + 16 * warp + g + (e >= 2 ? 8 : 0);
        *dst = a.accumulate ? *dst + acc[nt][e] : acc[nt][e];
      }
    }
    return;
  }
  // Split K: the cluster's sums in rank order. Every block keeps its sums in its shared memory
  // in place of its tiles (red[token * 64 + row], 2 KiB per token tile: the tiles of whole rings
  // hold at least 8 steps of 256 bytes), once every warp is done with them; rank p then adds
  // outputs p * 128 + tid, + split * 128, ... over all ranks in order 0 .. split - 1 through
  // distributed shared memory.
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      red[(8 * nt + 2 * t4 + (e & 1)) * kTileRows + 16 * warp + g + (e >= 2 ? 8 : 0)] = acc[nt][e];
    }
  }
  const cg::cluster_group cl = cg::this_cluster();
  cl.sync();
  for (int e = part * kThreads + tid; e < m.T * kTileRows; e += m.split * kThreads) {
    float remote[kMaxSplit];  // every remote load first (one latency), then the ordered sum
#pragma unroll
    for (int b = 0; b < kMaxSplit; ++b) {
      if (b < m.split) remote[b] = *cl.map_shared_rank(red + e, b);
    }
    float sum = remote[0];
#pragma unroll
    for (int b = 1; b < kMaxSplit; ++b) {
      if (b < m.split) sum += remote[b];
    }
    float* dst = a.y + (e / kTileRows) * a.ldy + y_row0 + e % kTileRows;
    *dst = a.accumulate ? *dst + sum : sum;
  }
  cl.sync();  // every block's sums stay alive until all ranks have read them
}

}  // namespace
}  // namespace deepinfer::backend::cuda::kernels

namespace deepinfer::backend::cuda::kernels {
namespace {

// Steps of each block (the largest part of a split).
int BlockSteps(int64_t K, int split) { return static_cast<int>((K / kStepK + split - 1) / split); }

// Dynamic shared memory of a block: its packed tiles (room for whole rings of pf steps: the
// steps past the block's read what is there) and token scales.
int SmemBytes(int max_block_steps, int nts, int pf) {
  const int ring_steps = (max_block_steps + pf - 1) / pf * pf;
  return ring_steps * nts * kTileBytes + max_block_steps * nts * 8 * 4;
}

// The compiled variants (same bits; DEEPINFER_LINEAR_E4M3_VARIANT picks one by name, read once).
using LaunchFn = cudaError_t (*)(const cudaLaunchConfig_t&, const Launch&);
struct Variant {
  const char* name;
  int pf;
  const void* kernel[4];  // by token tiles - 1
  LaunchFn launch[4];
};

template <int NT, int kPF, int kMinBlocks>
constexpr auto kKernel = LinearE4m3Kernel<NT, (NT <= 2 ? 4 : 2), kPF, kMinBlocks>;

template <int NT, int kPF, int kMinBlocks>
cudaError_t LaunchOne(const cudaLaunchConfig_t& config, const Launch& m) {
  return launch::LaunchKernel(config, kKernel<NT, kPF, kMinBlocks>, m);
}

template <int kPF, int kMinBlocks>
Variant MakeVariant(const char* name) {
  return Variant{name,
                 kPF,
                 {reinterpret_cast<const void*>(kKernel<1, kPF, kMinBlocks>),
                  reinterpret_cast<const void*>(kKernel<2, kPF, kMinBlocks>),
                  reinterpret_cast<const void*>(kKernel<3, kPF, kMinBlocks>),
                  reinterpret_cast<const void*>(kKernel<4, kPF, kMinBlocks>)},
                 {LaunchOne<1, kPF, kMinBlocks>, LaunchOne<2, kPF, kMinBlocks>,
                  LaunchOne<3, kPF, kMinBlocks>, LaunchOne<4, kPF, kMinBlocks>}};
}

const Variant& PickVariant() {
  static const Variant variants[] = {MakeVariant<8, 4>("pf8"), MakeVariant<12, 3>("pf12")};
  static const int index = [] {
    const char* env = std::getenv("DEEPINFER_LINEAR_E4M3_VARIANT");
    if (env == nullptr) return 0;
    for (int i = 0; i < 2; ++i) {
      if (std::strcmp(env, variants[i].name) == 0) return i;
    }
    LOG_WARN("DEEPINFER_LINEAR_E4M3_VARIANT={}: no such variant, running {}", env,
             variants[0].name);
    return 0;
  }();
  return variants[index];
}

cudaLaunchConfig_t ConfigFor(const Launch& m, int64_t blocks, int smem, cudaStream_t stream,
                             cudaLaunchAttribute (&attr)[2]) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = stream;
  unsigned n_attr = 0;
  if (m.split > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(m.split);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    n_attr = 1;
  }
  config.attrs = attr;
  config.numAttrs = pdl::AppendAttribute(attr, n_attr);
  return config;
}

// One GEMM launch over targets [i0, i1) (all of split `split`): its Launch, grid and shared
// memory. Returns cudaErrorNotSupported when its cluster cannot be scheduled (nothing launched).
struct Planned {
  Launch m;
  int64_t blocks;
  int smem;
};

Planned Plan(const E4m3StreamTarget* targets, int i0, int i1, int split, int T,
             const uint8_t* packed, const float* xscale) {
  Planned p{};
  p.m.n = i1 - i0;
  p.m.split = split;
  p.m.T = T;
  p.m.packed = packed;
  p.m.xscale = xscale;
  int64_t tiles = 0;
  int max_steps = 0;
  for (int i = i0; i < i1; ++i) {
    const E4m3StreamTarget& t = targets[i];
    Target& a = p.m.a[i - i0];
    a.w = t.w;
    a.scale = t.scale;
    a.K = t.K;
    a.row0 = t.row0;
    a.group_rows = t.group_rows;
    a.group_steps = t.grouped ? t.K / kStepK : 0;
    a.y = t.y;
    a.ldy = t.ldy;
    a.accumulate = t.accumulate;
    tiles += t.n_rows / kTileRows;
    p.m.cluster_end[i - i0] = tiles;
    max_steps = std::max(max_steps, BlockSteps(t.K, split));
  }
  p.blocks = tiles * split;
  p.smem = SmemBytes(max_steps, TokenTiles(T), PickVariant().pf);
  return p;
}

cudaError_t LaunchPlanned(const Planned& p, cudaStream_t stream) {
  cudaLaunchAttribute attr[2];
  const cudaLaunchConfig_t config = ConfigFor(p.m, p.blocks, p.smem, stream, attr);
  return PickVariant().launch[TokenTiles(p.m.T) - 1](config, p.m);
}

// Test / benchmark override of the switch (-1: the environment).
std::atomic<int> e4m3_override{-1};

}  // namespace

int LinearE4m3Split(int64_t n_rows, int64_t K) {
  const int64_t steps = K / kStepK, tiles = n_rows / kTileRows;
  int split = static_cast<int>((steps + kMaxBlockSteps - 1) / kMaxBlockSteps);
  while (split * 2 <= kMaxSplit && tiles * split < kWantBlocks &&
         steps / (2 * split) >= kMinBlockSteps) {
    split *= 2;
  }
  return split;
}

bool LinearE4m3Applicable(const E4m3StreamTarget& t, int64_t T) {
  return T >= 1 && T <= kStreamMaxTokens && t.w != nullptr && t.scale != nullptr &&
         t.y != nullptr && t.K > 0 && t.K % 128 == 0 &&
         t.K / kStepK <= int64_t{kMaxSplit} * kMaxBlockSteps && t.row0 >= 0 &&
         t.row0 % kTileRows == 0 && t.n_rows > 0 && t.n_rows % kTileRows == 0 &&
         (!t.grouped || (t.group_rows > 0 && t.group_rows % kTileRows == 0)) &&
         reinterpret_cast<uintptr_t>(t.w) % 16 == 0;
}

int64_t LinearE4m3ScratchBytes(int64_t T, int64_t x_cols) {
  return PackedBytes(x_cols / kStepK, TokenTiles(T));
}

bool LinearStreamE4m3(int64_t T) {
  static const int from_env = EnvIntClamped("DEEPINFER_LINEAR_STREAM_E4M3", 0, 0, 1);
  static const int min_tokens = EnvIntClamped("DEEPINFER_LINEAR_STREAM_E4M3_MIN_T", 1, 1, 33);
  const int forced = e4m3_override.load();
  return (forced >= 0 ? forced : from_env) == 1 && T >= min_tokens;
}

void SetLinearStreamE4m3(int on) { e4m3_override.store(on < 0 ? -1 : on > 0 ? 1 : 0); }

cudaError_t LinearE4m3Many(const E4m3StreamTarget* targets, int n, const float* x, int64_t x_cols,
                           int64_t ldx, int64_t T, void* scratch, cudaStream_t stream) {
  if (n < 1 || n > kMaxStreamTargets || x_cols % 128 != 0) return cudaErrorInvalidValue;
  for (int i = 0; i < n; ++i) {
    if (!LinearE4m3Applicable(targets[i], T)) return cudaErrorInvalidValue;
  }
  const int nts = TokenTiles(T);
  auto* packed = static_cast<uint8_t*>(scratch);
  const auto* xscale =
      reinterpret_cast<const float*>(packed + PackedTileBytes(x_cols / kStepK, nts));
  // Consecutive targets of the same split share a launch; all are planned and checked first.
  Planned plans[kMaxStreamTargets];
  int n_plans = 0;
  for (int i0 = 0; i0 < n;) {
    const int split = LinearE4m3Split(targets[i0].n_rows, targets[i0].K);
    int i1 = i0 + 1;
    while (i1 < n && LinearE4m3Split(targets[i1].n_rows, targets[i1].K) == split) ++i1;
    plans[n_plans] = Plan(targets, i0, i1, split, static_cast<int>(T), packed, xscale);
    const Planned& p = plans[n_plans++];
    const void* kernel = PickVariant().kernel[nts - 1];
    if (p.smem > 48 * 1024) {
      const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, p.smem);
      if (e != cudaSuccess) return e;
    }
    if (split > 1) {
      cudaLaunchAttribute attr[2];
      const cudaLaunchConfig_t config = ConfigFor(p.m, p.blocks, p.smem, stream, attr);
      if (!launch::ClusterSchedulable(kernel, config)) return cudaErrorNotSupported;
    }
    i0 = i1;
  }
  const cudaError_t e = pdl::Launch(
      PackE4m3Kernel, fp8::WarpPerBlockGrid(int64_t{nts} * 8 * (x_cols / kStepK)), 256, 0, stream,
      x, static_cast<int>(T), x_cols, ldx, nts, packed, const_cast<float*>(xscale));
  if (e != cudaSuccess) return e;
  for (int i = 0; i < n_plans; ++i) {
    const cudaError_t le = LaunchPlanned(plans[i], stream);
    if (le != cudaSuccess) return le;
  }
  return cudaSuccess;
}

}  // namespace deepinfer::backend::cuda::kernels
