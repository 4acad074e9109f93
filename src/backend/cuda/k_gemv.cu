// Fused dequantise + GEMV for Linear with few token rows (decode).
//
// A block (8 warps) computes a tile of output rows for a pass of up to kTok tokens:
// * the pass's x rows are staged in shared memory (padded layout, cuda_dequant.cuh), a
//   slice of K at a time so that a block needs at most ~46 KiB (several blocks per SM);
// * each warp owns kRows weight rows and reads them in 16-byte chunks (one chunk per lane
//   per step), double-buffered: the next step's kRows loads are issued before the current
//   chunks are dequantised, so 2 x kRows independent 16-byte loads are in flight per lane
//   (the first ones even before x is staged);
// * every float4 of x read from shared memory feeds all kRows rows (DotChunks);
// * for short weights (few row tiles) `split` warps share a row group, each taking every
//   split-th chunk step; their sums are added in warp order through shared memory
//   (deterministic).
// Tokens beyond kTok run as further passes (each pass reads the weight again). fp32
// accumulation; the summation order differs from SGEMM (fp32 rounding only).
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int64_t kMaxXShared = 46 * 1024;  // staged x slice (+ 1 KiB of partial sums)
constexpr int kMaxPassTokens = 8;
constexpr int kTargetBlocks = 2 * 132;  // enough row tiles to cover an H200's SMs twice

// Weight rows per warp: more rows reuse each x value more; fewer keep registers low when
// many tokens are accumulated.
__host__ __device__ constexpr int RowsPerWarp(int tokens) { return tokens >= 4 ? 2 : 4; }

// Chunks of K staged at once for `tok` tokens: all of K if it fits, else a multiple of 32
// (whole warp steps) when possible.
template <WeightFormat kFormat>
int64_t SliceChunks(int tok, int64_t K) {
  const int64_t chunks = K / ChunkValues(kFormat);
  int64_t slice = kMaxXShared / (int64_t{4} * tok * PaddedStride(kFormat));
  if (slice >= 32) slice = slice / 32 * 32;
  if (slice < 1) slice = 1;
  return slice < chunks ? slice : chunks;
}

template <WeightFormat kFormat>
int64_t GemvSharedBytes(int tok, int64_t K) {
  return (tok * SliceChunks<kFormat>(tok, K) * PaddedStride(kFormat) +
          kGemvWarps * RowsPerWarp(tok) * tok) *
         4;
}

template <WeightFormat kFormat, int kTok>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(DeviceWeight w, int64_t row0, int64_t n_rows, const float* x, int T, int64_t ldx,
               float* y, int64_t ldy, bool accumulate, int split, int64_t slice_chunks,
               int64_t group_rows, int64_t x_group_stride) {
  constexpr int kRows = RowsPerWarp(kTok);
  constexpr int kValues = ChunkValues(kFormat);
  constexpr int kStride = PaddedStride(kFormat);
  extern __shared__ float4 shared4[];
  const int64_t K = w.cols;
  const int64_t x_stride = slice_chunks * kStride;  // floats per staged token
  float* xs = reinterpret_cast<float*>(shared4);
  float* red = xs + kTok * x_stride;  // [warp][kRows][kTok] partial sums when split > 1
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int group = warp / split, part = warp % split;
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x) * (kGemvWarps / split) * kRows;
  const int64_t i0 = block_row0 + group * kRows;  // first row
  // Grouped weights: rows [g*group_rows, (g+1)*group_rows) read x columns from
  // g*x_group_stride on; a block's rows all lie in one group (checked by the launcher).
  x += (block_row0 / group_rows) * x_group_stride;
  int64_t rows[kRows];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {  // rows past the end re-read the last row (not written)
    rows[n] = row0 + (i0 + n < n_rows ? i0 + n : n_rows - 1);
  }
  const int64_t chunks = K / ChunkValues(kFormat);
  const int64_t step = int64_t{32} * split;
  int64_t c = int64_t{32} * part + lane;

  RawChunk cur[kRows] = {};
  if (c < chunks) {
#pragma unroll
    for (int n = 0; n < kRows; ++n) cur[n] = LoadRawChunk<kFormat>(w.data, w.scale, K, rows[n], c);
  }
  // The first weight loads (no kernel writes a weight: the read pdl.cuh allows before the
  // wait) are in flight while the previous kernel finishes; x is read after the wait.
  pdl::WaitThenAllowNext();
  float acc[kRows][kTok];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[n][t] = 0.0f;
  }
  // Slices [s0, s1) of chunks: stage x's columns, then each thread's chunks c in the slice
  // (c runs through 32*part + lane + j*step across slices; the prefetch of the next chunk
  // may reach into the next slice: it needs no x).
  for (int64_t s0 = 0; s0 < chunks; s0 += slice_chunks) {
    const int64_t s1 = s0 + slice_chunks < chunks ? s0 + slice_chunks : chunks;
    if (s0 > 0) __syncthreads();  // the previous slice's readers are done
    for (int t = 0; t < T; ++t) {
      StagePadded<kFormat>(x + t * ldx + s0 * kValues, (s1 - s0) * kValues, xs + t * x_stride);
    }
    __syncthreads();
    for (; c < s1; c += step) {
      RawChunk next[kRows] = {};
      if (c + step < chunks) {
#pragma unroll
        for (int n = 0; n < kRows; ++n) {
          next[n] = LoadRawChunk<kFormat>(w.data, w.scale, K, rows[n], c + step);
        }
      }
      DotChunks<kFormat, kRows, kTok>(cur, xs + (c - s0) * kStride, x_stride, T, acc);
#pragma unroll
      for (int n = 0; n < kRows; ++n) cur[n] = next[n];
    }
  }
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[n][t] = WarpSum(acc[n][t]);
  }
  if (split > 1) {
    if (lane == 0) {
#pragma unroll
      for (int n = 0; n < kRows; ++n) {
#pragma unroll
        for (int t = 0; t < kTok; ++t) red[(warp * kRows + n) * kTok + t] = acc[n][t];
      }
    }
    __syncthreads();
    if (part != 0) return;  // no barrier follows
#pragma unroll
    for (int n = 0; n < kRows; ++n) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        float sum = 0.0f;
        for (int p = 0; p < split; ++p) sum += red[((warp + p) * kRows + n) * kTok + t];
        acc[n][t] = sum;
      }
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t < T && i0 + n < n_rows) {
        float* out = y + t * ldy + i0 + n;
        *out = accumulate ? *out + acc[n][t] : acc[n][t];
      }
    }
  }
}

// Launches one pass of T <= kTok tokens.
template <WeightFormat kFormat, int kTok>
cudaError_t LaunchPass(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x, int T,
                       int64_t ldx, float* y, int64_t ldy, bool accumulate, int64_t group_rows,
                       int64_t x_group_stride, cudaStream_t stream) {
  constexpr int kRows = RowsPerWarp(kTok);
  const int64_t smem = GemvSharedBytes<kFormat>(kTok, w.cols);
  // Fewest warps per row group that still gives about kTargetBlocks blocks.
  int split = 1;
  auto blocks_for = [&](int s) {
    const int64_t rows_per_block = (kGemvWarps / s) * kRows;
    return (n_rows + rows_per_block - 1) / rows_per_block;
  };
  while (split < kGemvWarps && blocks_for(split) < kTargetBlocks) split *= 2;
  const int64_t blocks = blocks_for(split);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (group_rows < n_rows && group_rows % ((kGemvWarps / split) * kRows) != 0) {
    return cudaErrorInvalidValue;  // a block would straddle two groups
  }
  pdl::Launch(GemvKernel<kFormat, kTok>, static_cast<unsigned>(blocks), kGemvThreads, smem, stream,
              w, row0, n_rows, x, T, ldx, y, ldy, accumulate, split,
              SliceChunks<kFormat>(kTok, w.cols), group_rows, x_group_stride);
  return cudaGetLastError();
}

template <WeightFormat kFormat>
cudaError_t GemvAllTokens(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                          int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate, int64_t g,
                          int64_t xs, cudaStream_t stream) {
  for (int64_t t0 = 0; t0 < T;) {
    const int left = static_cast<int>(T - t0 < kMaxPassTokens ? T - t0 : kMaxPassTokens);
    const float* xp = x + t0 * ldx;
    float* yp = y + t0 * ldy;
    cudaError_t e;
    if (left == 1) {  // smallest pass that holds `left` tokens
      e = LaunchPass<kFormat, 1>(w, row0, n_rows, xp, left, ldx, yp, ldy, accumulate, g, xs,
                                 stream);
    } else if (left == 2) {
      e = LaunchPass<kFormat, 2>(w, row0, n_rows, xp, left, ldx, yp, ldy, accumulate, g, xs,
                                 stream);
    } else if (left <= 4) {
      e = LaunchPass<kFormat, 4>(w, row0, n_rows, xp, left, ldx, yp, ldy, accumulate, g, xs,
                                 stream);
    } else {
      e = LaunchPass<kFormat, 8>(w, row0, n_rows, xp, left, ldx, yp, ldy, accumulate, g, xs,
                                 stream);
    }
    if (e != cudaSuccess) return e;
    t0 += left;
  }
  return cudaSuccess;
}

}  // namespace

bool GemvApplicable(const DeviceWeight& w, int64_t T) {
  if (T < 1 || T > kMaxGemvTokens) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  // Every row must start on a 16-byte boundary and hold whole chunks.
  return w.cols > 0 && w.cols % ChunkValues(w.format) == 0;
}

cudaError_t LinearGemv(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                       int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                       cudaStream_t stream) {
  return LinearGemvGrouped(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, n_rows, 0, stream);
}

bool GemvGroupedApplicable(const DeviceWeight& w, int64_t T, int64_t group_rows) {
  // Blocks hold at most 8 warps x 4 rows: 32 | group_rows keeps each block in one group.
  return GemvApplicable(w, T) && group_rows > 0 && group_rows % 32 == 0;
}

cudaError_t LinearGemvGrouped(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                              int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                              int64_t group_rows, int64_t x_group_stride, cudaStream_t stream) {
  if (n_rows <= 0 || T <= 0) return cudaSuccess;
  if (!GemvApplicable(w, T) || group_rows <= 0) return cudaErrorInvalidValue;
  const int64_t g = group_rows, xs = x_group_stride;
  switch (w.format) {
    case WeightFormat::kF32:
      return GemvAllTokens<WeightFormat::kF32>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, g,
                                               xs, stream);
    case WeightFormat::kBF16:
      return GemvAllTokens<WeightFormat::kBF16>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, g,
                                                xs, stream);
    case WeightFormat::kFp8Block32:
      return GemvAllTokens<WeightFormat::kFp8Block32>(w, row0, n_rows, x, T, ldx, y, ldy,
                                                      accumulate, g, xs, stream);
    case WeightFormat::kFp8Row32:
      return GemvAllTokens<WeightFormat::kFp8Row32>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate,
                                                    g, xs, stream);
    case WeightFormat::kMxFp4:
      return GemvAllTokens<WeightFormat::kMxFp4>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, g,
                                                 xs, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deepinfer::backend::cuda::kernels
