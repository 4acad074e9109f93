// Row-reduction kernels: RMSNorm, the mHC pre-mix (norm + mix logits + Sinkhorn) and the
// Engram gate. One thread block per row; fp32 with block tree reductions.
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_hc.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;  // 24 mix logits for hc = 4

__global__ void RmsNormKernel(const float* x, int64_t n, int64_t ldx, const float* weight,
                              float eps, float* y, int64_t ldy) {
  __shared__ float scratch[33];
  const float* xr = x + blockIdx.x * ldx;
  float* yr = y + blockIdx.x * ldy;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += xr[i] * xr[i];
  sum = BlockSum(sum, scratch);  // ends with a barrier: every read of xr is done
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    yr[i] = weight ? weight[i] * (xr[i] * inv) : xr[i] * inv;
  }
}

__device__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// pre, post and the Sinkhorn-normalised comb of token t from its mix logits z
// [(2+H)*H] (rms-normalised), computed by one warp: lane l < H*H holds comb element
// (j, k) = (l / H, l % H). Every row / column sum is taken in the CPU reference's order
// (k = 0, 1, .., H-1 resp. j = 0, 1, ..) from values gathered with shuffles, and each lane
// performs the reference's operations on its element, so the result is bitwise the same as
// the sequential reference loop, in ~1/10 of its dependent-latency chain (one thread took
// tens of µs per call). All 32 lanes must call it (shuffles).
template <int H>
__device__ void WarpWriteMix(const float* z, int64_t t, const float* scale, const float* base,
                             float hc_eps, int sinkhorn_iters, float* pre, float* post,
                             float* comb) {
  const int lane = threadIdx.x & 31;
  const int j = lane / H, k = lane % H;
  const bool mine = lane < H * H;
  if (lane < H) {
    pre[t * H + lane] = Sigmoid(z[lane] * scale[0] + base[lane]) + hc_eps;
    post[t * H + lane] = 2.0f * Sigmoid(z[H + lane] * scale[1] + base[H + lane]);
  }
  float c = mine ? z[2 * H + lane] * scale[2] + base[2 * H + lane] : 0.0f;
  // Sum (in index order) of the H elements of this lane's row, resp. column.
  auto row_sum = [&](float v) {
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < H; ++q) sum += __shfl_sync(0xffffffffu, v, j * H + q);
    return sum;
  };
  auto col_sum = [&](float v) {
    float sum = 0.0f;
#pragma unroll
    for (int q = 0; q < H; ++q) sum += __shfl_sync(0xffffffffu, v, q * H + k);
    return sum;
  };
  // Softmax over k per row j, + eps.
  float mx = __shfl_sync(0xffffffffu, c, j * H);
#pragma unroll
  for (int q = 1; q < H; ++q) mx = MaxF(mx, __shfl_sync(0xffffffffu, c, j * H + q));
  c = expf(c - mx);
  c = c / row_sum(c) + hc_eps;
  const int rounds = sinkhorn_iters > 1 ? sinkhorn_iters : 1;  // columns at least once
  for (int it = 0; it < rounds; ++it) {
    if (it > 0) c /= row_sum(c) + hc_eps;  // rows (skipped in the first round)
    c /= col_sum(c) + hc_eps;              // columns
  }
  if (mine) comb[t * H * H + lane] = c;
}

// The mix of token t by one warp (every lane of it must call); 1 <= hc <= kMaxHc (checked by
// the launchers).
__device__ void WriteMix(const float* z, int64_t t, int64_t hc, const float* scale,
                         const float* base, float hc_eps, int sinkhorn_iters, float* pre,
                         float* post, float* comb) {
  static_assert(kMaxHc == 4, "WriteMix dispatches hc = 1..4");
  switch (hc) {
    case 1:
      return WarpWriteMix<1>(z, t, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
    case 2:
      return WarpWriteMix<2>(z, t, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
    case 3:
      return WarpWriteMix<3>(z, t, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
    default:
      return WarpWriteMix<4>(z, t, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
  }
}

// One block per token: z = rmsnorm(x[t]) . fn^T (n_mix outputs), then pre/post/comb.
__global__ void HcMixKernel(const float* x, int64_t hc, int64_t D, const float* fn,
                            const float* scale, const float* base, float norm_eps, float hc_eps,
                            int sinkhorn_iters, float* pre, float* post, float* comb) {
  __shared__ float scratch[33];
  __shared__ float partial[kThreads / 32][kMaxMix];
  __shared__ float z[kMaxMix];
  const int64_t t = blockIdx.x;
  const int64_t width = hc * D;
  const int n_mix = static_cast<int>((2 + hc) * hc);
  const float* xt = x + t * width;

  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) sum += xt[i] * xt[i];
  sum = BlockSum(sum, scratch);
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(width) + norm_eps);

  float acc[kMaxMix];
#pragma unroll
  for (int j = 0; j < kMaxMix; ++j) acc[j] = 0.0f;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    const float normed = xt[i] * inv;
#pragma unroll
    for (int j = 0; j < kMaxMix; ++j) {
      if (j < n_mix) acc[j] += normed * fn[j * width + i];
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j < kMaxMix; ++j) {
    const float s = WarpSum(acc[j]);
    if (lane == 0) partial[warp][j] = s;
  }
  __syncthreads();
  if (threadIdx.x < n_mix) {
    float s = 0.0f;
    for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) s += partial[w][threadIdx.x];
    z[threadIdx.x] = s;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;  // warp 0 writes the mix
  WriteMix(z, t, hc, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
}

// Split pre-mix for few tokens (decode): block (t, s) reduces slice s of token t's flattened
// streams: partial[t, s, j] = sum_i x[i] * fn[j, i] for the n_mix logits and, at j = n_mix,
// sum_i x[i]^2. The rms normalisation is a per-token scalar, applied in the finish kernel.
__global__ void __launch_bounds__(kThreads)
    HcMixPartialKernel(const float* x, int64_t width, int n_mix, const float* fn, int64_t slice,
                       float* partial) {
  __shared__ float part[kThreads / 32][kMaxMix + 1];
  const int64_t t = blockIdx.x, s = blockIdx.y, splits = gridDim.y;
  const float* xt = x + t * width;
  const int64_t begin = s * slice, end = begin + slice < width ? begin + slice : width;
  float acc[kMaxMix + 1];
#pragma unroll
  for (int j = 0; j <= kMaxMix; ++j) acc[j] = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float v = xt[i];
    acc[kMaxMix] += v * v;
#pragma unroll
    for (int j = 0; j < kMaxMix; ++j) {
      if (j < n_mix) acc[j] += v * __ldg(fn + j * width + i);
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 0; j <= kMaxMix; ++j) {
    const float v = WarpSum(acc[j]);
    if (lane == 0) part[warp][j] = v;
  }
  __syncthreads();
  if (threadIdx.x <= kMaxMix) {
    float v = 0.0f;
    for (int w = 0; w < kThreads / 32; ++w) v += part[w][threadIdx.x];
    partial[(t * splits + s) * (kMaxMix + 1) + threadIdx.x] = v;
  }
}

// One warp per token: sums the slices in order (deterministic), then pre / post / comb.
__global__ void HcMixFinishKernel(const float* partial, int64_t splits, int64_t hc, int64_t width,
                                  const float* scale, const float* base, float norm_eps,
                                  float hc_eps, int sinkhorn_iters, float* pre, float* post,
                                  float* comb) {
  __shared__ float z[kMaxMix + 1];
  const int64_t t = blockIdx.x;
  const int n_mix = static_cast<int>((2 + hc) * hc);
  for (int j = threadIdx.x; j <= kMaxMix; j += blockDim.x) {
    float v = 0.0f;
    for (int64_t s = 0; s < splits; ++s) v += partial[(t * splits + s) * (kMaxMix + 1) + j];
    z[j] = v;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;  // one warp (the launch has 32 threads)
  const float inv = 1.0f / sqrtf(z[kMaxMix] / static_cast<float>(width) + norm_eps);
  if (threadIdx.x < n_mix) z[threadIdx.x] *= inv;
  __syncwarp();
  WriteMix(z, t, hc, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
}

// One block per (token, stream).
__global__ void EngramGateKernel(float* x, const float* key, const float* value,
                                 const float* q_weight, const float* k_weight, int64_t hc,
                                 int64_t D, float eps) {
  __shared__ float scratch[33];
  const int64_t row = blockIdx.x;  // t * hc + k
  const int64_t t = row / hc, k = row % hc;
  float* xs = x + row * D;
  const float* ks = key + row * D;
  float sx = 0.0f, sk = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    sx += xs[d] * xs[d];
    sk += ks[d] * ks[d];
  }
  sx = BlockSum(sx, scratch);
  sk = BlockSum(sk, scratch);
  const float rx = 1.0f / sqrtf(sx / static_cast<float>(D) + eps);
  const float rk = 1.0f / sqrtf(sk / static_cast<float>(D) + eps);
  float dot = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    dot += (xs[d] * rx * q_weight[k * D + d]) * (ks[d] * rk * k_weight[k * D + d]);
  }
  dot = BlockSum(dot, scratch);  // barrier: all reads of xs are done before the update
  dot *= 1.0f / sqrtf(static_cast<float>(D));
  const float gate = Sigmoid(copysignf(sqrtf(MaxF(fabsf(dot), 1e-6f)), dot));
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) xs[d] += gate * value[t * D + d];
}

}  // namespace

cudaError_t RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                    float eps, float* y, int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, n, ldx, weight, eps, y,
                                                                      ldy);
  return cudaGetLastError();
}

cudaError_t HcMix(const float* x, int64_t T, int64_t hc, int64_t D, const model::HcSiteWeights& w,
                  float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post,
                  float* comb, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (hc > kMaxHc || hc <= 0) return cudaErrorInvalidValue;
  HcMixKernel<<<static_cast<unsigned>(T), kThreads, 0, stream>>>(
      x, hc, D, w.fn, w.scale, w.base, norm_eps, hc_eps, sinkhorn_iters, pre, post, comb);
  return cudaGetLastError();
}

int64_t HcMixSplits(int64_t T, int64_t hc, int64_t D) {
  // Each thread sums 2 values of its slice. The split does not depend on T, so a token's
  // reduction order (and result) is the same at every batch size up to 64 tokens.
  (void)T;
  const int64_t s = (hc * D) / (kThreads * 2);
  return s < 1 ? 1 : s;
}

cudaError_t HcMixSplit(const float* x, int64_t T, int64_t hc, int64_t D,
                       const model::HcSiteWeights& w, float norm_eps, float hc_eps,
                       int sinkhorn_iters, float* pre, float* post, float* comb, float* scratch,
                       cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (hc > kMaxHc || hc <= 0 || T > 65535) return cudaErrorInvalidValue;
  const int64_t splits = HcMixSplits(T, hc, D), width = hc * D;
  const int64_t slice = (width + splits - 1) / splits;
  HcMixPartialKernel<<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(splits)), kThreads, 0,
                       stream>>>(x, width, static_cast<int>((2 + hc) * hc), w.fn, slice, scratch);
  HcMixFinishKernel<<<static_cast<unsigned>(T), 32, 0, stream>>>(scratch, splits, hc, width,
                                                                 w.scale, w.base, norm_eps, hc_eps,
                                                                 sinkhorn_iters, pre, post, comb);
  return cudaGetLastError();
}

cudaError_t EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                       const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps,
                       cudaStream_t stream) {
  if (T * hc <= 0 || D <= 0) return cudaSuccess;
  EngramGateKernel<<<static_cast<unsigned>(T * hc), kThreads, 0, stream>>>(x, key, value, q_weight,
                                                                           k_weight, hc, D, eps);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
