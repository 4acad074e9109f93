// Skinny BF16 Linear (contract in kernels_skinny.h).
//
// Roofline (H200, ~4.5 TB/s): the router [384, 5120] bf16 is 3.9 MB (0.9 us of HBM), the
// compressor's wkv / wgate 5.2 MB each, weights_proj 0.3 MB; x is <= 32 x 5120 fp32 (L2 hits).
// Tensor work 2 * rows * K * 8 * ceil(T / 8) is negligible. So the kernel is pure latency: the
// aim is one round of weight loads spread over as many SMs as possible, then a short reduction.
//
// Structure. A block (4 warps) owns a tile of 16 weight rows (the M side of m16n8k16) and one
// eighth of K: a thread-block cluster of kSplit = 8 blocks covers the tile's K (router: 24 tiles
// x 8 = 192 blocks). K runs in steps of 32 values; step s belongs to warp unit s % 32 (unit =
// 4 * cluster rank + warp), so each warp holds K / 1024 steps (5 at K = 5120), all loaded into
// registers before the PDL wait (weights are never written by a kernel; pdl.cuh). Lane
// (g = lane / 4, q = lane % 4) loads the 16 bytes at k = 32 s + 8 q of rows g and g + 8.
// K permutation: MMA 0 of a step takes physical columns 8q .. 8q + 3 as its logical pairs
// {2q, 2q + 1} and {2q + 8, 2q + 9}, MMA 1 columns 8q + 4 .. 8q + 7; the B fragments (x[token
// 8 n + g], rounded to bf16 on the fly from two float4 loads) use the same map, so each product
// pairs the right values. Tokens are the N side: kNT tiles of 8 (zeros past T).
// Reduction (deterministic): each warp's accumulators go to shared memory; a block adds its
// 4 warps in warp order, then cluster rank 0 adds the 8 blocks' sums in rank order through
// distributed shared memory and writes y. Every output sees the same MMA and add sequence for
// any T (batch invariance).
// MEASURED (H200, run 196, the 4-layer decode step at 4k in FP8 mode, three interleaved rounds,
// cuBLAS -> this kernel, ms): B=2 1.60 -> 1.56-1.58, B=4 1.91-1.92 -> 1.87-1.88, B=8 2.50-2.51 ->
// 2.47-2.49, B=16 3.57-3.66 -> 3.55-3.57, B=32 5.13-5.15 -> 5.10-5.12. Op by op at B=8: the router
// 4 calls 126-147 -> 35 us, weights_proj 3 calls 33 -> 22 us. 96-125 registers, no spills.
#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/kernels_skinny.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kSplit = 8;  // blocks of a cluster, along K
constexpr int kTileRows = 16;
constexpr int kStepK = 32;  // K values per warp step
constexpr int kUnits = kSplit * kWarps;
constexpr int kMaxStepsPerWarp = 8;  // K <= kUnits * kMaxStepsPerWarp * kStepK = 8192
constexpr int64_t kMaxK = int64_t{kUnits} * kMaxStepsPerWarp * kStepK;

struct SkinnyArgs {
  const uint16_t* w;  // row row0 of the weight [.., K]
  int64_t K;
  int64_t n_rows;
  const float* x;
  int64_t ldx;
  int T;
  float* y;
  int64_t ldy;
  bool accumulate;
};

// Tokens 8 n + g of x at physical columns k .. k + 7 as the four bf16x2 B words of a step.
__device__ __forceinline__ void LoadBWords(const SkinnyArgs& a, int token, int64_t k,
                                           uint32_t (&b)[4]) {
  if (token >= a.T) {
    b[0] = b[1] = b[2] = b[3] = 0u;
    return;
  }
  const float* row = a.x + token * a.ldx + k;
  const float4 v0 = *reinterpret_cast<const float4*>(row);
  const float4 v1 = *reinterpret_cast<const float4*>(row + 4);
  b[0] = PackBf16(v0.x, v0.y);
  b[1] = PackBf16(v0.z, v0.w);
  b[2] = PackBf16(v1.x, v1.y);
  b[3] = PackBf16(v1.z, v1.w);
}

template <int kNT>
__global__ void __launch_bounds__(kThreads) SkinnyBf16Kernel(SkinnyArgs a) {
  constexpr int kTok = kNT * 8;
  __shared__ float part[kWarps][kTok * kTileRows];  // [warp][token * 16 + row]
  __shared__ float block_sum[kTok * kTileRows];
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int64_t tile_row0 = int64_t{blockIdx.x / kSplit} * kTileRows;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, q = lane % 4, unit = rank * kWarps + warp;
  const int64_t steps = a.K / kStepK;
  // Rows past n_rows read the last row (their outputs are not stored).
  const int64_t r_lo = min(tile_row0 + g, a.n_rows - 1),
                r_hi = min(tile_row0 + g + 8, a.n_rows - 1);
  const uint16_t* w_lo = a.w + r_lo * a.K + 8 * q;
  const uint16_t* w_hi = a.w + r_hi * a.K + 8 * q;
  uint4 lo[kMaxStepsPerWarp], hi[kMaxStepsPerWarp];
#pragma unroll
  for (int i = 0; i < kMaxStepsPerWarp; ++i) {
    const int64_t s = unit + int64_t{i} * kUnits;
    if (s < steps) {
      lo[i] = mma::LoadStreaming16</*kOrdered=*/false, 128>(w_lo + s * kStepK);
      hi[i] = mma::LoadStreaming16</*kOrdered=*/false, 128>(w_hi + s * kStepK);
    }
  }
  pdl::WaitThenAllowNext();

  float acc[kNT][4];
#pragma unroll
  for (int n = 0; n < kNT; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxStepsPerWarp; ++i) {
    const int64_t s = unit + int64_t{i} * kUnits;
    if (s >= steps) break;
    const uint32_t a0[4] = {lo[i].x, hi[i].x, lo[i].y, hi[i].y};
    const uint32_t a1[4] = {lo[i].z, hi[i].z, lo[i].w, hi[i].w};
#pragma unroll
    for (int n = 0; n < kNT; ++n) {
      uint32_t b[4];
      LoadBWords(a, 8 * n + g, s * kStepK + 8 * q, b);
      mma::MmaBf16(acc[n], a0, b[0], b[1]);
      mma::MmaBf16(acc[n], a1, b[2], b[3]);
    }
  }
  // acc[n][e]: row g (e < 2) or g + 8, token 8 n + 2 q + (e & 1).
#pragma unroll
  for (int n = 0; n < kNT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = g + (e >= 2 ? 8 : 0), t = 8 * n + 2 * q + (e & 1);
      part[warp][t * kTileRows + r] = acc[n][e];
    }
  }
  __syncthreads();
  for (int e = static_cast<int>(threadIdx.x); e < kTok * kTileRows; e += kThreads) {
    float sum = part[0][e];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) sum += part[w][e];
    block_sum[e] = sum;
  }
  cluster.sync();
  if (rank == 0) {
    for (int e = static_cast<int>(threadIdx.x); e < kTok * kTileRows; e += kThreads) {
      const int t = e / kTileRows;
      const int64_t i = tile_row0 + e % kTileRows;
      if (t >= a.T || i >= a.n_rows) continue;
      float remote[kSplit];  // every remote load first (one latency), then the ordered sum
#pragma unroll
      for (int b = 1; b < kSplit; ++b) remote[b] = *cluster.map_shared_rank(block_sum + e, b);
      float sum = block_sum[e];
#pragma unroll
      for (int b = 1; b < kSplit; ++b) sum += remote[b];
      float* out = a.y + t * a.ldy + i;
      *out = a.accumulate ? *out + sum : sum;
    }
  }
  cluster.sync();  // keep every block's sums alive until rank 0 has read them
}

template <int kNT>
cudaError_t Launch(const SkinnyArgs& a, cudaStream_t stream) {
  const int64_t tiles = (a.n_rows + kTileRows - 1) / kTileRows;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(tiles * kSplit));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attr[2];  // the cluster, and PDL (pdl.cuh) when enabled
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = kSplit;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  config.attrs = attr;
  config.numAttrs = pdl::AppendAttribute(attr, 1);
  // A recorded launch (CUDA graphs) fails only when issued: ask now whether a cluster of 8 fits.
  if (!launch::ClusterSchedulable(reinterpret_cast<const void*>(SkinnyBf16Kernel<kNT>), config)) {
    return cudaErrorNotSupported;
  }
  return launch::LaunchKernel(config, SkinnyBf16Kernel<kNT>, a);
}

}  // namespace

bool SkinnyBf16Applicable(const DeviceWeight& w, int64_t T) {
  return w.format == model::WeightFormat::kBF16 && T >= 1 && T <= kSkinnyMaxTokens &&
         reinterpret_cast<uintptr_t>(w.data) % 16 == 0 && w.cols > 0 && w.cols % kStepK == 0 &&
         w.cols <= kMaxK && w.rows >= 1 && w.rows <= kSkinnyMaxRows;
}

cudaError_t LinearSkinnyBf16(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                             int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                             cudaStream_t stream) {
  if (T <= 0 || n_rows <= 0) return cudaSuccess;
  if (!SkinnyBf16Applicable(w, T) || row0 < 0 || row0 + n_rows > w.rows ||
      reinterpret_cast<uintptr_t>(x) % 16 != 0 || ldx % 4 != 0) {
    return cudaErrorInvalidValue;
  }
  SkinnyArgs a{};  // padding zeroed: the parameter bytes key CUDA graphs
  a.w = static_cast<const uint16_t*>(w.data) + row0 * w.cols;
  a.K = w.cols;
  a.n_rows = n_rows;
  a.x = x;
  a.ldx = ldx;
  a.T = static_cast<int>(T);
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  if (T <= 8) return Launch<1>(a, stream);
  if (T <= 16) return Launch<2>(a, stream);
  return Launch<4>(a, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
