// Fused routed experts for decode (RoutedExpertsArgs of model/backend.h), two kernels with
// the routing read on the device:
//  1. gate/up: block (row tile of I, token-slot pair p = t*k + i). x_t is staged once in
//     shared memory; each warp computes 2 rows of W1_e x_t and W3_e x_t (4 weight rows,
//     double-buffered: 8 16-byte loads in flight per lane, the first issued before x is
//     staged) and writes
//     h[p, r] = silu(min(g, limit)) * clamp(u, -limit, limit) * weights[p].
//  2. down: block (row tile of D, token t). For slot i = 0 .. k-1 in order, h[t*k+i] is
//     staged in shared memory and each warp computes 2 rows of W2_e h (double-buffered; the
//     next slot's first chunks load while its h is staged); the per-slot dots are added in
//     slot order (deterministic, no atomics) and y[t] is overwritten.
// An expert id outside [0, n_experts) sets kErrExpertOutOfRange and yields NaN outputs.
#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 2;
constexpr int kPassRows = kWarps * kRowsPerWarp;  // rows a block computes at once
constexpr int kUpTileRows = 2 * kPassRows;        // I rows per gate/up block (2 passes)
constexpr int kDownTileRows = kPassRows;          // D rows per down block (1 pass)
constexpr int64_t kMaxDynamicShared = 48 * 1024;  // no opt-in needed

// SwiGLU of one gate/up pair (cuda_numerics.cuh) times the routing weight.
__device__ __forceinline__ float SwiGluScaled(float g, float u, float limit, float weight) {
  return SwiGluValue(g, u, limit) * weight;
}

template <WeightFormat kFormat>
__global__ void __launch_bounds__(kThreads)
    GateUpKernel(const ExpertPointers* table, int64_t n_experts, const float* x, int64_t D,
                 int64_t I, const int32_t* experts, const float* weights, int64_t k, float limit,
                 float* h, int* error_word) {
  pdl::WaitThenAllowNext();
  extern __shared__ float4 shared4[];
  float* xs = reinterpret_cast<float*>(shared4);
  const int64_t p = blockIdx.y;
  const int64_t row_base = static_cast<int64_t>(blockIdx.x) * kUpTileRows;
  float* hp = h + p * I;
  const int32_t e = experts[p];  // block-uniform
  if (e < 0 || e >= n_experts) {
    if (threadIdx.x == 0) atomicOr(error_word, kErrExpertOutOfRange);
    for (int j = threadIdx.x; j < kUpTileRows; j += kThreads) {
      if (row_base + j < I) hp[row_base + j] = NaNf();
    }
    return;
  }
  const ExpertPointers ep = table[e];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t chunks = D / ChunkValues(kFormat);
  constexpr int kStride = PaddedStride(kFormat);
  constexpr int kPasses = kUpTileRows / kPassRows;
  // Rows r, r+1 of W1 and W3 for pass `pass` (in range: I % 32 == 0, whole tiles).
  auto load = [&](RawChunk(&ch)[4], int pass, int64_t c) {
    const int64_t r = row_base + pass * kPassRows + warp * kRowsPerWarp;
    ch[0] = LoadRawChunk<kFormat>(ep.data[0], ep.scale[0], D, r, c);
    ch[1] = LoadRawChunk<kFormat>(ep.data[0], ep.scale[0], D, r + 1, c);
    ch[2] = LoadRawChunk<kFormat>(ep.data[2], ep.scale[2], D, r, c);
    ch[3] = LoadRawChunk<kFormat>(ep.data[2], ep.scale[2], D, r + 1, c);
  };
  RawChunk cur[4] = {};
  if (lane < chunks) load(cur, 0, lane);  // in flight while x is staged
  StagePadded<kFormat>(x + (p / k) * D, D, xs);
  __syncthreads();
  const float weight = weights[p];
  for (int pass = 0; pass < kPasses; ++pass) {
    float acc[4][1] = {{0.0f}, {0.0f}, {0.0f}, {0.0f}};  // gate r, gate r+1, up r, up r+1
    for (int64_t c = lane; c < chunks; c += 32) {
      RawChunk next[4] = {};  // double buffer: the next chunk (or the next pass's first)
      if (c + 32 < chunks) {
        load(next, pass, c + 32);
      } else if (pass + 1 < kPasses) {
        load(next, pass + 1, lane);
      }
      DotChunks<kFormat, 4, 1>(cur, xs + c * kStride, 0, 1, acc);
#pragma unroll
      for (int n = 0; n < 4; ++n) cur[n] = next[n];
    }
#pragma unroll
    for (int n = 0; n < 4; ++n) acc[n][0] = WarpSum(acc[n][0]);
    if (lane < kRowsPerWarp) {
      const int64_t r = row_base + pass * kPassRows + warp * kRowsPerWarp;
      const float g = lane == 0 ? acc[0][0] : acc[1][0];
      const float u = lane == 0 ? acc[2][0] : acc[3][0];
      hp[r + lane] = SwiGluScaled(g, u, limit, weight);
    }
  }
}

template <WeightFormat kFormat>
__global__ void __launch_bounds__(kThreads)
    DownKernel(const ExpertPointers* table, int64_t n_experts, const float* h, int64_t D, int64_t I,
               const int32_t* experts, int64_t k, float* y, int* error_word) {
  pdl::WaitThenAllowNext();
  extern __shared__ float4 shared4[];
  float* hs = reinterpret_cast<float*>(shared4);
  const int64_t t = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kDownTileRows + warp * kRowsPerWarp;
  const bool rows_valid = r + 1 < D;  // D % 32 == 0: always true (whole tiles)
  const int64_t chunks = I / ChunkValues(kFormat);
  constexpr int kStride = PaddedStride(kFormat);
  // Expert of slot i, or -1 if out of range (block-uniform).
  auto expert_of = [&](int64_t i) -> int32_t {
    const int32_t e = experts[t * k + i];
    return e >= 0 && e < n_experts ? e : -1;
  };
  auto load = [&](RawChunk(&ch)[kRowsPerWarp], int32_t e, int64_t c) {
    const ExpertPointers& ep = table[e];
    ch[0] = LoadRawChunk<kFormat>(ep.data[1], ep.scale[1], I, r, c);
    ch[1] = LoadRawChunk<kFormat>(ep.data[1], ep.scale[1], I, r + 1, c);
  };
  float total[kRowsPerWarp] = {0.0f, 0.0f};
  bool bad = false;
  int32_t e = expert_of(0);
  RawChunk cur[kRowsPerWarp] = {};
  if (e >= 0 && rows_valid && lane < chunks) load(cur, e, lane);
  for (int64_t i = 0; i < k; ++i) {
    const int32_t e_next = i + 1 < k ? expert_of(i + 1) : -1;
    bad = bad || e < 0;
    __syncthreads();  // the previous slot's readers are done with hs
    if (e >= 0) StagePadded<kFormat>(h + (t * k + i) * I, I, hs);
    __syncthreads();
    float acc[kRowsPerWarp][1] = {{0.0f}, {0.0f}};
    for (int64_t c = lane; c < chunks; c += 32) {
      RawChunk next[kRowsPerWarp] = {};  // the next chunk, or the next slot's first
      if (rows_valid) {
        if (c + 32 < chunks) {
          if (e >= 0) load(next, e, c + 32);
        } else if (e_next >= 0) {
          load(next, e_next, lane);
        }
      }
      if (e >= 0) DotChunks<kFormat, kRowsPerWarp, 1>(cur, hs + c * kStride, 0, 1, acc);
#pragma unroll
      for (int n = 0; n < kRowsPerWarp; ++n) cur[n] = next[n];
    }
#pragma unroll
    for (int n = 0; n < kRowsPerWarp; ++n) total[n] += WarpSum(acc[n][0]);  // slot order
    e = e_next;
  }
  if (bad && threadIdx.x == 0) atomicOr(error_word, kErrExpertOutOfRange);
  if (rows_valid && lane < kRowsPerWarp) {
    y[t * D + r + lane] = bad ? NaNf() : (lane == 0 ? total[0] : total[1]);
  }
}

bool FormatSupported(WeightFormat f) {
  return f == WeightFormat::kMxFp4 || f == WeightFormat::kFp8Block32 || f == WeightFormat::kBF16;
}

int64_t SharedBytes(WeightFormat f, int64_t n) { return PaddedFloats(f, n) * 4; }

template <WeightFormat kFormat>
cudaError_t LaunchGateUp(const RoutedExpertsLaunch& a, float* h, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.I / kUpTileRows), static_cast<unsigned>(a.T * a.k));
  pdl::Launch(GateUpKernel<kFormat>, grid, kThreads, SharedBytes(kFormat, a.D), stream, a.table,
              a.n_experts, a.x, a.D, a.I, a.experts, a.weights, a.k, a.swiglu_limit, h,
              a.error_word);
  return cudaGetLastError();
}

template <WeightFormat kFormat>
cudaError_t LaunchDown(const RoutedExpertsLaunch& a, const float* h, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.D / kDownTileRows), static_cast<unsigned>(a.T));
  pdl::Launch(DownKernel<kFormat>, grid, kThreads, SharedBytes(kFormat, a.I), stream, a.table,
              a.n_experts, h, a.D, a.I, a.experts, a.k, a.y, a.error_word);
  return cudaGetLastError();
}

}  // namespace

bool RoutedExpertsApplicable(WeightFormat up_format, WeightFormat down_format, int64_t D, int64_t I,
                             int64_t T, int64_t k) {
  return FormatSupported(up_format) && FormatSupported(down_format) && T >= 1 &&
         T <= kMaxFusedExpertTokens && k >= 1 && k <= kMaxFusedExpertSlots && D > 0 && I > 0 &&
         D % 32 == 0 && I % 32 == 0 && SharedBytes(up_format, D) <= kMaxDynamicShared &&
         SharedBytes(down_format, I) <= kMaxDynamicShared;
}

cudaError_t RoutedExperts(const RoutedExpertsLaunch& a, float* h, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (!RoutedExpertsApplicable(a.up_format, a.down_format, a.D, a.I, a.T, a.k)) {
    return cudaErrorInvalidValue;
  }
  cudaError_t e = cudaErrorInvalidValue;
  switch (a.up_format) {
    case WeightFormat::kMxFp4:
      e = LaunchGateUp<WeightFormat::kMxFp4>(a, h, stream);
      break;
    case WeightFormat::kFp8Block32:
      e = LaunchGateUp<WeightFormat::kFp8Block32>(a, h, stream);
      break;
    case WeightFormat::kBF16:
      e = LaunchGateUp<WeightFormat::kBF16>(a, h, stream);
      break;
    default:
      break;
  }
  if (e != cudaSuccess) return e;
  e = cudaErrorInvalidValue;
  switch (a.down_format) {
    case WeightFormat::kMxFp4:
      e = LaunchDown<WeightFormat::kMxFp4>(a, h, stream);
      break;
    case WeightFormat::kFp8Block32:
      e = LaunchDown<WeightFormat::kFp8Block32>(a, h, stream);
      break;
    case WeightFormat::kBF16:
      e = LaunchDown<WeightFormat::kBF16>(a, h, stream);
      break;
    default:
      break;
  }
  return e;
}

}  // namespace deepinfer::backend::cuda::kernels
