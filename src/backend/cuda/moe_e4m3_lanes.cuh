// The lanes of the direct-load e4m3 expert GEMM (k_moe_block128_stream.cu, decode items; a
// prefill form on the same lanes, items of 64 with a producer warp for the activations, was 26%
// slower than the register GEMM, session 23): each lane loads, per 128-value stage, 16 bytes of
// its two fragment rows r and r + 8 straight from global memory -- lane t of a quad holds 32-value
// block t of the stage -- and word j of that block becomes its A fragment of k32 step j
// (activations packed in PackOrder::kStream), through the shift tables of moe_e4m3_convert.cuh.
// Device code; include from that .cu file only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/mma_bf16.cuh"
#include "backend/cuda/moe_block128.cuh"
#include "backend/cuda/moe_e4m3_convert.cuh"
#include "backend/cuda/stream_mma.cuh"
#include "backend/cuda/wgmma_fp8.cuh"

namespace deepinfer::backend::cuda::kernels::moe_block128 {
namespace {

// A consumer lane's rows of its block's job (thread tid < 256: warpgroup tid / 128 owns rows
// 64 wg .. + 63 of the block's 128; lane g = (tid % 32) / 4 of warp w holds fragment rows
// r = 64 wg + 16 (w % 4) + g and r + 8): their weight pointers from K offset 0 and their row
// maxima (ExpertRowScaleMax bytes; rows of the launch: [w1; w3] for up, w2 at 2I on for down).
struct LaneRows {
  stream_mma::WarpRows rows;
  uint32_t smax_lo, smax_hi;
};

__device__ __forceinline__ LaneRows LaneRowsOf(const GemmArgs& a, const BlockJob& job, int tid) {
  const int wg = tid / 128, warp = tid / 32, lane = tid % 32;
  const ExpertPointers& ep = a.mxfp4[job.item.expert];
  const int64_t part_rows = a.up ? a.I : a.D;  // rows of matrix job.m
  LaneRows l;
  l.rows = stream_mma::MxFp4WarpRows(ep.data[job.m], ep.scale[job.m], job.K,
                                     job.row0 + 64 * wg + 16 * (warp % 4), part_rows, 0, lane);
  const int r_lo = 64 * wg + 16 * (warp % 4) + lane / 4;
  const uint8_t* smax_rows = a.row_smax + job.item.expert * ExpertRowScaleMaxStride(a.D, a.I) +
                             (a.up ? 0 : 2 * a.I) + job.v0;
  l.smax_lo = smax_rows[r_lo];
  l.smax_hi = smax_rows[r_lo + 8];
  return l;
}

// One stage's weights of this lane: 16 bytes of rows r and r + 8, their blocks' scale bytes.
struct LaneStage {
  uint4 w[2];
  uint32_t s[2];
};

__device__ __forceinline__ void LoadStage(const stream_mma::WarpRows& rows, int st,
                                          LaneStage& out) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    out.w[h] = mma::LoadStreaming16</*kOrdered=*/true, stream_mma::kL2Prefetch>(rows.data[h] +
                                                                                st * (kBK / 2));
    out.s[h] = stream_mma::LoadScaleByte(rows.scale[h] + st * (kBK / 32));
  }
}

// One stage's A fragments from the lane's two 16-byte blocks (shift tables t_lo, t_hi).
__device__ __forceinline__ void BuildFragments(const LaneStage& ls, uint2 t_lo, uint2 t_hi,
                                               uint32_t (&frag)[4][4]) {
  const uint32_t lo[4] = {ls.w[0].x, ls.w[0].y, ls.w[0].z, ls.w[0].w};
  const uint32_t hi[4] = {ls.w[1].x, ls.w[1].y, ls.w[1].z, ls.w[1].w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    E2m1x8ToE4m3(lo[j], t_lo, frag[j][0], frag[j][2]);
    E2m1x8ToE4m3(hi[j], t_hi, frag[j][1], frag[j][3]);
    wgmma::FenceOperands(frag[j]);
  }
}

// One stage's four wgmma m64nNk32 into part (overwritten; x_desc: the stage's X tile, N rows),
// issued and committed, not waited for: frag and part belong to the MMAs until the WaitGroup that
// retires them.
template <int N>
__device__ __forceinline__ void IssueStageMmas(uint32_t (&frag)[4][4], uint64_t x_desc,
                                               float (&part)[N / 2]) {
  wgmma::FenceOperands(part);
  wgmma::Fence();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    wgmma::WgmmaE4m3Rs<N>(part, frag[j], wgmma::DescriptorPlus(x_desc, TileOffset(0, 2 * j)),
                          j > 0);
  }
  wgmma::CommitGroup();
}

// After the WaitGroup that retired a stage: its registers are the thread's again.
template <int M>
__device__ __forceinline__ void Retired(uint32_t (&frag)[4][4], float (&part)[M]) {
  wgmma::FenceOperands(part);
#pragma unroll
  for (int j = 0; j < 4; ++j) wgmma::FenceOperands(frag[j]);
}

// The first kPF stages' loads of a lane's ring (slot p = stage p).
template <int kPF>
__device__ __forceinline__ void PreloadRing(const stream_mma::WarpRows& rows, int n_stages,
                                            LaneStage (&ring)[kPF]) {
#pragma unroll
  for (int p = 0; p < kPF; ++p) {
    if (p < n_stages) LoadStage(rows, p, ring[p]);
  }
}

// run(st, u) for st = 0 .. n_stages - 1 with u = st % kPF a compile-time constant (ring slots
// live in registers): whole groups of kPF stages, then the rest.
template <int kPF, class Run>
__device__ __forceinline__ void ForEachStage(int n_stages, Run&& run) {
  int base = 0;
  for (; base + kPF <= n_stages; base += kPF) {
#pragma unroll
    for (int u = 0; u < kPF; ++u) run(base + u, u);
  }
#pragma unroll
  for (int u = 0; u < kPF; ++u) {
    if (base + u < n_stages) run(base + u, u);
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::kernels::moe_block128
