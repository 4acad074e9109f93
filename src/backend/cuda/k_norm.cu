// Row-reduction kernels: RMSNorm (alone and after the mHC collapse) and the Engram gate (the
// mHC pre-mix is in k_hcmix.cu). fp32 with tree reductions. These run a few times per decode step
// on 1..32 rows, so they are written for latency: where the shapes allow, a row is held in
// registers (float4 loads, all issued before the one reduction) instead of being walked twice.
#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxRowThreads = 512;  // threads of one register-held row
constexpr int kMaxVec = 4;           // float4 per thread of a register-held row

// Any row length, any alignment: grid-stride over the row, two passes.
__global__ void RmsNormKernel(const float* x, int64_t n, int64_t ldx, const float* weight,
                              float eps, float* y, int64_t ldy) {
  pdl::WaitThenAllowNext();
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

__device__ __forceinline__ float4 Zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
// x*x + y*y + z*z + w*w with the roundings spelled out (the contraction the compiler chose
// for RmsNormRowKernel), so that kernels computing a row's values differently (the fused
// HcCollapseNorm) still give RmsNorm's bits.
__device__ __forceinline__ float SumSquares(float4 v) {
  return __fmaf_rn(v.w, v.w, __fmaf_rn(v.z, v.z, __fmaf_rn(v.y, v.y, __fmul_rn(v.x, v.x))));
}

// Sum over the `group_threads` threads (a multiple of 32) of this thread's row group; the
// block holds blockDim.x / group_threads groups. Every warp of a group sums the group's warp
// partials in the same order, so all get the same bits. `scratch`: 32 floats. All threads of
// the block must call; ends without a trailing barrier (scratch is written once per kernel).
__device__ __forceinline__ float GroupSum(float v, int group_threads, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = WarpSum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const int group_warps = group_threads >> 5;
  const int first = (static_cast<int>(threadIdx.x) / group_threads) * group_warps;
  return WarpSum(lane < group_warps ? scratch[first + lane] : 0.0f);
}

// Register-held rows: n % 4 == 0, 16-byte aligned rows, n <= 4 * kVec * group_threads. Each
// row is owned by a group of group_threads threads; thread g of the group holds float4s
// g, g + group_threads, .. of the row. All loads (x and weight) are issued before the one
// reduction. The summation order depends only on (n, kVec, group_threads), which the launcher
// derives from n alone: a row's bits do not depend on the number of rows.

// A thread's place in a register-held row: its index g in the row's group and the row (live:
// the row exists; the launcher pads the last block with groups past the end).
struct RowSlot {
  int g;
  int64_t row;
  bool live;
};
__device__ __forceinline__ RowSlot RowSlotOf(int64_t rows, int group_threads) {
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / group_threads) + threadIdx.x / group_threads;
  return {static_cast<int>(threadIdx.x) % group_threads, row, row < rows};
}

// The RMSNorm of a register-held row: v (and the weight's w where has_weight) as loaded by
// the thread, the sum of squares over the group, then yr[i] = (w *) v * rsqrt(mean + eps) and,
// with ur, ur[i] = v. Every thread of the block must call (the group reduction); only live
// rows store.
template <int kVec>
__device__ __forceinline__ void NormRow(const float4 (&v)[kVec], const float4 (&w)[kVec],
                                        bool has_weight, const RowSlot& slot, int group_threads,
                                        int64_t n, float eps, float4* yr, float4* ur,
                                        float* scratch) {
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) sum += SumSquares(v[q]);
  sum = GroupSum(sum, group_threads, scratch);
  if (!slot.live) return;
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = slot.g + q * group_threads;
    if (i >= (n >> 2)) break;
    if (ur != nullptr) ur[i] = v[q];
    float4 o = make_float4(v[q].x * inv, v[q].y * inv, v[q].z * inv, v[q].w * inv);
    if (has_weight) o = make_float4(w[q].x * o.x, w[q].y * o.y, w[q].z * o.z, w[q].w * o.w);
    yr[i] = o;
  }
}

template <int kVec>
__global__ void __launch_bounds__(kMaxRowThreads)
    RmsNormRowKernel(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                     float eps, float* y, int64_t ldy, int group_threads) {
  pdl::WaitThenAllowNext();
  __shared__ float scratch[32];
  const RowSlot slot = RowSlotOf(rows, group_threads);
  const int64_t n4 = n >> 2, row = slot.live ? slot.row : 0;
  const float4* xr = reinterpret_cast<const float4*>(x + row * ldx);
  const float4* wr = reinterpret_cast<const float4*>(weight);
  float4 v[kVec], w[kVec];
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = slot.g + q * group_threads;
    const bool in = slot.live && i < n4;
    v[q] = in ? xr[i] : Zero4();  // plain load: y may alias x (in place)
    w[q] = in && wr ? __ldg(wr + i) : Zero4();
  }
  NormRow<kVec>(v, w, wr != nullptr, slot, group_threads, n, eps,
                reinterpret_cast<float4*>(y + row * ldy), nullptr, scratch);
}

// HcCollapse then RmsNormRowKernel in one pass: row t's values are collapsed from its hc
// streams (x [T, hc, D]) as HcCollapseKernel does (acc = 0, acc += pre[t, k] * x[t, k, d] in
// k order), written to u0, and normalised by NormRow as in RmsNormRowKernel, so u0 and y are
// bitwise the two kernels' outputs. Same launch shape as RmsNormRowKernel over the T rows of
// n = D values.
template <int kVec>
__global__ void __launch_bounds__(kMaxRowThreads)
    HcCollapseNormRowKernel(const float* x, const float* pre, int64_t rows, int64_t hc, int64_t n,
                            const float* weight, float eps, float* u0, float* y,
                            int group_threads) {
  pdl::WaitThenAllowNext();
  __shared__ float scratch[32];
  const RowSlot slot = RowSlotOf(rows, group_threads);
  const int64_t n4 = n >> 2, row = slot.live ? slot.row : 0;
  const float* pr = pre + row * hc;
  const float4* xr = reinterpret_cast<const float4*>(x + row * hc * n);
  const float4* wr = reinterpret_cast<const float4*>(weight);
  // All loads first (the streams' float4s of every q, unrolled over kMaxHc with hc <= kMaxHc
  // checked by the launcher), then the collapse in k order.
  float4 v[kVec], w[kVec], s[kVec][kMaxHc];
  float p[kMaxHc];
#pragma unroll
  for (int k = 0; k < kMaxHc; ++k) p[k] = slot.live && k < hc ? pr[k] : 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = slot.g + q * group_threads;
    const bool in = slot.live && i < n4;
#pragma unroll
    for (int k = 0; k < kMaxHc; ++k) s[q][k] = in && k < hc ? xr[k * n4 + i] : Zero4();
    w[q] = in && wr ? __ldg(wr + i) : Zero4();
  }
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    v[q] = Zero4();
#pragma unroll
    for (int k = 0; k < kMaxHc; ++k) {
      if (k >= hc) break;
      v[q].x += p[k] * s[q][k].x;
      v[q].y += p[k] * s[q][k].y;
      v[q].z += p[k] * s[q][k].z;
      v[q].w += p[k] * s[q][k].w;
    }
  }
  NormRow<kVec>(v, w, wr != nullptr, slot, group_threads, n, eps,
                reinterpret_cast<float4*>(y + row * n), reinterpret_cast<float4*>(u0 + row * n),
                scratch);
}

__device__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// One block per (token, stream).
__global__ void EngramGateKernel(float* x, const float* key, const float* value,
                                 const float* q_weight, const float* k_weight, int64_t hc,
                                 int64_t D, float eps) {
  pdl::WaitThenAllowNext();
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

// EngramGateKernel with register-held rows: D % 4 == 0, 16-byte aligned operands,
// D <= 4 * kVec * blockDim.x. One block of blockDim.x threads (a multiple of 32) per (token,
// stream); thread g holds float4s g, g + blockDim.x, .. of x, key, both weights and value,
// all loaded before the first reduction; two reductions (both norms together, then the dot).
template <int kVec>
__global__ void __launch_bounds__(kMaxRowThreads)
    EngramGateRowKernel(float* x, const float* key, const float* value, const float* q_weight,
                        const float* k_weight, int64_t hc, int64_t D, float eps) {
  pdl::WaitThenAllowNext();
  __shared__ float norms[2][32];
  __shared__ float dots[32];
  const int64_t row = blockIdx.x;  // t * hc + k
  const int64_t t = row / hc, k = row % hc, D4 = D >> 2;
  const int g = threadIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  float4* xs = reinterpret_cast<float4*>(x + row * D);
  const float4* ks = reinterpret_cast<const float4*>(key + row * D);
  const float4* qw = reinterpret_cast<const float4*>(q_weight + k * D);
  const float4* kw = reinterpret_cast<const float4*>(k_weight + k * D);
  const float4* vs = reinterpret_cast<const float4*>(value + t * D);
  float4 xv[kVec], kv[kVec], qv[kVec], wv[kVec], vv[kVec];
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = g + q * static_cast<int64_t>(blockDim.x);
    const bool in = i < D4;
    xv[q] = in ? xs[i] : Zero4();
    kv[q] = in ? __ldg(ks + i) : Zero4();
    qv[q] = in ? __ldg(qw + i) : Zero4();
    wv[q] = in ? __ldg(kw + i) : Zero4();
    vv[q] = in ? __ldg(vs + i) : Zero4();
  }
  float sx = 0.0f, sk = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) sx += SumSquares(xv[q]), sk += SumSquares(kv[q]);
  sx = WarpSum(sx), sk = WarpSum(sk);
  if (lane == 0) norms[0][warp] = sx, norms[1][warp] = sk;
  __syncthreads();
  sx = WarpSum(lane < n_warps ? norms[0][lane] : 0.0f);
  sk = WarpSum(lane < n_warps ? norms[1][lane] : 0.0f);
  const float rx = 1.0f / sqrtf(sx / static_cast<float>(D) + eps);
  const float rk = 1.0f / sqrtf(sk / static_cast<float>(D) + eps);
  auto term = [&](float xe, float qe, float ke, float we) {
    return (xe * rx * qe) * (ke * rk * we);
  };
  float dot = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    dot += term(xv[q].x, qv[q].x, kv[q].x, wv[q].x) + term(xv[q].y, qv[q].y, kv[q].y, wv[q].y) +
           term(xv[q].z, qv[q].z, kv[q].z, wv[q].z) + term(xv[q].w, qv[q].w, kv[q].w, wv[q].w);
  }
  dot = GroupSum(dot, blockDim.x, dots);
  dot *= 1.0f / sqrtf(static_cast<float>(D));
  const float gate = Sigmoid(copysignf(sqrtf(MaxF(fabsf(dot), 1e-6f)), dot));
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = g + q * static_cast<int64_t>(blockDim.x);
    if (i >= D4) break;
    xs[i] = make_float4(xv[q].x + gate * vv[q].x, xv[q].y + gate * vv[q].y,
                        xv[q].z + gate * vv[q].z, xv[q].w + gate * vv[q].w);
  }
}

// float4s per thread and threads per row of a register-held row of n4 float4s: the fewest
// float4s per thread that keep the row within kMaxRowThreads threads (a function of n only).
struct RowShape {
  int vec, threads;
};
RowShape RowShapeFor(int64_t n4) {
  int vec = 1;
  while (vec < kMaxVec && n4 > int64_t{vec} * kMaxRowThreads) vec *= 2;
  const int64_t threads = ((n4 + vec - 1) / vec + 31) / 32 * 32;
  return {vec, static_cast<int>(threads)};
}

// The launch of a register-held row kernel over `rows` rows of n values: the row shape, and
// short rows several to a block (groups of shape.threads threads).
struct RowLaunch {
  RowShape shape;
  unsigned blocks, threads;
};
RowLaunch RowLaunchFor(int64_t rows, int64_t n) {
  const RowShape shape = RowShapeFor(n / 4);
  int64_t rows_per_block = shape.threads < kThreads ? kThreads / shape.threads : 1;
  if (rows_per_block > rows) rows_per_block = rows;
  return {shape, static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
          static_cast<unsigned>(rows_per_block * shape.threads)};
}

template <typename Kernel>
void LaunchByVec(int vec, Kernel&& launch) {
  switch (vec) {
    case 1:
      return launch(std::integral_constant<int, 1>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    default:
      return launch(std::integral_constant<int, 4>{});
  }
}

}  // namespace

cudaError_t RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                    float eps, float* y, int64_t ldy, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return cudaSuccess;
  const bool vectorised = n % 4 == 0 && ldx % 4 == 0 && ldy % 4 == 0 && Aligned16(x) &&
                          Aligned16(y) && (weight == nullptr || Aligned16(weight)) &&
                          n / 4 <= int64_t{kMaxVec} * kMaxRowThreads;
  if (!vectorised) {
    pdl::Launch(RmsNormKernel, static_cast<unsigned>(rows), kThreads, 0, stream, x, n, ldx, weight,
                eps, y, ldy);
    return cudaGetLastError();
  }
  const RowLaunch l = RowLaunchFor(rows, n);
  LaunchByVec(l.shape.vec, [&](auto vec) {
    pdl::Launch(RmsNormRowKernel<decltype(vec)::value>, l.blocks, l.threads, 0, stream, x, rows, n,
                ldx, weight, eps, y, ldy, l.shape.threads);
  });
  return cudaGetLastError();
}

cudaError_t HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                           const float* weight, float eps, float* u0, float* y,
                           cudaStream_t stream) {
  if (T <= 0 || D <= 0) return cudaSuccess;
  const bool vectorised = hc >= 1 && hc <= kMaxHc && D % 4 == 0 && Aligned16(x) && Aligned16(u0) &&
                          Aligned16(y) && (weight == nullptr || Aligned16(weight)) &&
                          D / 4 <= int64_t{kMaxVec} * kMaxRowThreads;
  if (!vectorised) {  // the two kernels
    const cudaError_t e = HcCollapse(x, pre, T, hc, D, u0, stream);
    return e != cudaSuccess ? e : RmsNorm(u0, T, D, D, weight, eps, y, D, stream);
  }
  // RmsNorm's launch shape for rows of D (so the same reduction, hence the same bits).
  const RowLaunch l = RowLaunchFor(T, D);
  LaunchByVec(l.shape.vec, [&](auto vec) {
    pdl::Launch(HcCollapseNormRowKernel<decltype(vec)::value>, l.blocks, l.threads, 0, stream, x,
                pre, T, hc, D, weight, eps, u0, y, l.shape.threads);
  });
  return cudaGetLastError();
}

cudaError_t EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                       const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps,
                       cudaStream_t stream) {
  if (T * hc <= 0 || D <= 0) return cudaSuccess;
  const bool vectorised = D % 4 == 0 && D / 4 <= int64_t{kMaxVec} * kMaxRowThreads &&
                          Aligned16(x) && Aligned16(key) && Aligned16(value) &&
                          Aligned16(q_weight) && Aligned16(k_weight);
  if (vectorised) {
    const RowShape shape = RowShapeFor(D / 4);
    LaunchByVec(shape.vec, [&](auto vec) {
      pdl::Launch(EngramGateRowKernel<decltype(vec)::value>, static_cast<unsigned>(T * hc),
                  static_cast<unsigned>(shape.threads), 0, stream, x, key, value, q_weight,
                  k_weight, hc, D, eps);
    });
    return cudaGetLastError();
  }
  pdl::Launch(EngramGateKernel, static_cast<unsigned>(T * hc), kThreads, 0, stream, x, key, value,
              q_weight, k_weight, hc, D, eps);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
