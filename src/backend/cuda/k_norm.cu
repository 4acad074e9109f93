// Row-reduction kernels: RMSNorm, the mHC pre-mix (norm + mix logits + Sinkhorn) and the
// Engram gate. fp32 with tree reductions. These run a few times per decode step on 1..32
// rows, so they are written for latency: where the shapes allow, a row is held in registers
// (float4 loads, all issued before the one reduction) instead of being walked twice.
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;  // 24 mix logits for hc = 4
constexpr int kMaxRowThreads = 512;             // threads of one register-held row
constexpr int kMaxVec = 4;                      // float4 per thread of a register-held row

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
__device__ __forceinline__ float SumSquares(float4 v) {
  return v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
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
template <int kVec>
__global__ void __launch_bounds__(kMaxRowThreads)
    RmsNormRowKernel(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                     float eps, float* y, int64_t ldy, int group_threads) {
  pdl::WaitThenAllowNext();
  __shared__ float scratch[32];
  const int g = static_cast<int>(threadIdx.x) % group_threads;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * (blockDim.x / group_threads) + threadIdx.x / group_threads;
  const bool live = row < rows;
  const int64_t n4 = n >> 2;
  const float4* xr = reinterpret_cast<const float4*>(x + (live ? row : 0) * ldx);
  const float4* wr = reinterpret_cast<const float4*>(weight);
  float4 v[kVec], w[kVec];
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = g + q * group_threads;
    const bool in = live && i < n4;
    v[q] = in ? xr[i] : Zero4();  // plain load: y may alias x (in place)
    w[q] = in && wr ? __ldg(wr + i) : Zero4();
  }
  float sum = 0.0f;
#pragma unroll
  for (int q = 0; q < kVec; ++q) sum += SumSquares(v[q]);
  sum = GroupSum(sum, group_threads, scratch);
  if (!live) return;
  const float inv = 1.0f / sqrtf(sum / static_cast<float>(n) + eps);
  float4* yr = reinterpret_cast<float4*>(y + row * ldy);
#pragma unroll
  for (int q = 0; q < kVec; ++q) {
    const int64_t i = g + q * group_threads;
    if (i >= n4) break;
    float4 o = make_float4(v[q].x * inv, v[q].y * inv, v[q].z * inv, v[q].w * inv);
    if (wr) o = make_float4(w[q].x * o.x, w[q].y * o.y, w[q].z * o.z, w[q].w * o.w);
    yr[i] = o;
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

// Split pre-mix, partial sums. Token t's flattened streams (width = hc * D values) are cut
// into slices of kMixSliceCols columns (HcMixSplits = ceil(width / 128), 160 at 4 x 5120, a
// function of (hc, D) only). One warp per (slice s, group of tokens): lane l owns columns
// c = s * 128 + 4 * l + {0, 1, 2, 3} and holds fn[j, c] for the n_mix logits in registers
// (24 float4), loaded once and reused by every token of its group. Per token the lane forms
// 25 values -- the logits x . fn[j] over its 4 columns and, at j = 24, x . x -- each as
// fma(x3, f3, fma(x2, f2, fma(x1, f1, x0 * f0))), then one butterfly reduce-scatter over the
// warp (MixReduceScatter) leaves the slice's sum of value MixSlot(l) in lane l, which writes
//   partial[t, s, j] (layout [T][splits][25]; j = 24 is the sum of squares).
// The rms normalisation is a per-token scalar, applied in the finish kernel.
//
// Batch invariance by construction: a token's partials use the same fn values, the same
// operations and the same tree whatever T, its group, its neighbours, the token count per
// warp or the load width (the float4 and scalar instantiations do identical arithmetic;
// out-of-range columns are zeros in both).
//
// Cost per (token, slice), one warp (SASS, sm_90a): one 512-byte load of x (coalesced
// float4), 100 FFMA/FMUL + 27 SHFL + 27 FADD + ~51 FSEL, 25 stores of 4 bytes: ~215 warp
// instructions. Per token at 4 x 5120: 160 slices -> 4,320 shuffles (the former warp-tree
// kernel: 40,000), 80 KB of x read once, 16 KB of partials written and read back by the
// finish kernel; fn (2 MB) is read from L2 once per token group (32 tokens at large T).
// 168 registers, 12 warps per SM. Expected on an H200: issue bound at large T, 4096 x 160 x
// 215 instructions / (132 SMs x 4 per clock) -> ~0.14 ms per 4096 tokens (the former kernel:
// ~1 ms); x (335 MB, ~0.08 ms of HBM) and fn's L2 re-reads (256 MB) overlap it. At T = 1 the
// 160 warps issue all 2 MB of fn loads at once: a few us, mostly the two launches.
constexpr int kMixSliceCols = 128;  // columns per warp slice: 4 per lane
constexpr int kMixChunk = 4;        // tokens whose x loads a warp issues together
constexpr int kMixValues = kMaxMix + 1;

// 4 consecutive values row[c .. c + 3] (zeros past `width`; read-only data). kVec: one
// float4 load (needs width % 4 == 0, a 16-byte aligned row, c % 4 == 0); else 4 scalar
// loads. Same values.
template <bool kVec>
__device__ __forceinline__ float4 LoadQuad(const float* row, int64_t c, int64_t width) {
  if constexpr (kVec) {
    if (c >= width) return Zero4();
    const float4* p = reinterpret_cast<const float4*>(row + c);
    return __ldg(p);
  } else {
    return make_float4(c < width ? row[c] : 0.0f, c + 1 < width ? row[c + 1] : 0.0f,
                       c + 2 < width ? row[c + 2] : 0.0f, c + 3 < width ? row[c + 3] : 0.0f);
  }
}

__device__ __forceinline__ float Dot4(float4 a, float4 b) {
  return __fmaf_rn(a.w, b.w, __fmaf_rn(a.z, b.z, __fmaf_rn(a.y, b.y, __fmul_rn(a.x, b.x))));
}

// One butterfly step over lane pairs (l, l ^ kOffset): of the N values v[0..N), lane l
// keeps the lower half v[0..H) (bit kOffset of l clear) or the upper half v[H..N) (set,
// padded with a zero when N is odd), sends the other half to its partner and adds what it
// receives: afterwards v[0..H) hold pair sums, H = ceil(N / 2). H shuffles.
template <int N, int kOffset>
__device__ __forceinline__ void ButterflyStep(float* v, int lane) {
  constexpr int H = (N + 1) / 2;
  const bool upper = (lane & kOffset) != 0;
#pragma unroll
  for (int k = 0; k < H; ++k) {
    const float lo = v[k];
    const float hi = k + H < N ? v[k + H] : 0.0f;
    const float keep = upper ? hi : lo;
    const float send = upper ? lo : hi;
    v[k] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, kOffset));
  }
}

// Reduce-scatter of 25 values over the warp: 25 -> 13 -> 7 -> 4 -> 2 -> 1 values (27
// shuffles instead of the 125 of 25 warp trees); v[0] of lane l then holds the warp's sum of
// value MixSlot(l). The tree (and so every bit) is fixed.
__device__ __forceinline__ void MixReduceScatter(float* v, int lane) {
  static_assert(kMixValues == 25, "the butterfly below is laid out for 25 values");
  ButterflyStep<25, 16>(v, lane);
  ButterflyStep<13, 8>(v, lane);
  ButterflyStep<7, 4>(v, lane);
  ButterflyStep<4, 2>(v, lane);
  ButterflyStep<2, 1>(v, lane);
}

// The value (0..24) whose warp sum MixReduceScatter leaves in `lane`, or -1 for the 7 lanes
// that end on padding. Index of lane's kept entry at each level, from the last step back:
// i4 = b2 * 2 + b1 (of 4), i3 = b4 * 4 + i4 (of 7), i2 = b8 * 7 + i3 (of 13),
// i1 = b16 * 13 + i2 (of 25), where bK = bit K of the lane; an index past its level's count
// is padding.
__device__ __forceinline__ int MixSlot(int lane) {
  const int i3 = lane & 7;  // b4 * 4 + b2 * 2 + b1
  const int i2 = ((lane >> 3) & 1) * 7 + i3;
  const int i1 = ((lane >> 4) & 1) * 13 + i2;
  return i3 < 7 && i2 < 13 && i1 < kMixValues ? i1 : -1;
}

// Grid (splits, token groups), one warp per block. See the comment above kMixSliceCols.
template <bool kVec>
__global__ void __launch_bounds__(32)
    HcMixSliceKernel(const float* x, int64_t T, int64_t width, int n_mix, const float* fn,
                     int64_t tokens_per_warp, float* partial) {
  pdl::WaitThenAllowNext();
  const int lane = static_cast<int>(threadIdx.x);
  const int64_t s = blockIdx.x, splits = gridDim.x;
  const int64_t c = s * kMixSliceCols + 4 * lane;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * tokens_per_warp;
  const int64_t t_end = t0 + tokens_per_warp < T ? t0 + tokens_per_warp : T;
  float4 f[kMaxMix];
#pragma unroll
  for (int j = 0; j < kMaxMix; ++j) {
    f[j] = j < n_mix ? LoadQuad<kVec>(fn + j * width, c, width) : Zero4();
  }
  const int slot = MixSlot(lane);
  for (int64_t t = t0; t < t_end; t += kMixChunk) {
    float4 xv[kMixChunk];  // all loads of the chunk in flight together
#pragma unroll
    for (int g = 0; g < kMixChunk; ++g) {
      xv[g] = t + g < t_end ? LoadQuad<kVec>(x + (t + g) * width, c, width) : Zero4();
    }
#pragma unroll
    for (int g = 0; g < kMixChunk; ++g) {
      if (t + g >= t_end) break;  // uniform over the warp
      float v[kMixValues];
#pragma unroll
      for (int j = 0; j < kMaxMix; ++j) v[j] = Dot4(xv[g], f[j]);
      v[kMaxMix] = Dot4(xv[g], xv[g]);
      MixReduceScatter(v, lane);
      if (slot >= 0) partial[((t + g) * splits + s) * kMixValues + slot] = v[0];
    }
  }
}

constexpr int kFinishThreads = 128;
constexpr int kFinishSlices = 160;  // slices staged in shared memory per round (160 at 4 x 5120)

// One block of kFinishThreads per token: the token's partials (contiguous, [splits][25]) are
// staged in shared memory by coalesced loads of all threads (a few per thread, in flight
// together), thread j <= 24 sums logit j over the slices in order (deterministic, the same
// bits as a sequential loop), then warp 0 writes pre / post / comb.
__global__ void __launch_bounds__(kFinishThreads)
    HcMixFinishKernel(const float* partial, int64_t splits, int64_t hc, int64_t width,
                      const float* scale, const float* base, float norm_eps, float hc_eps,
                      int sinkhorn_iters, float* pre, float* post, float* comb) {
  pdl::WaitThenAllowNext();
  __shared__ float stage[kFinishSlices * (kMaxMix + 1)];
  __shared__ float z[kMaxMix + 1];
  const int64_t t = blockIdx.x;
  const int n_mix = static_cast<int>((2 + hc) * hc);
  const int j = threadIdx.x;
  float v = 0.0f;
  for (int64_t s0 = 0; s0 < splits; s0 += kFinishSlices) {
    const int count = static_cast<int>(splits - s0 < kFinishSlices ? splits - s0 : kFinishSlices);
    const float* src = partial + (t * splits + s0) * (kMaxMix + 1);
#pragma unroll 4
    for (int e = threadIdx.x; e < count * (kMaxMix + 1); e += kFinishThreads) stage[e] = src[e];
    __syncthreads();
    if (j <= kMaxMix) {
      for (int q = 0; q < count; ++q) v += stage[q * (kMaxMix + 1) + j];
    }
    __syncthreads();
  }
  if (j <= kMaxMix) z[j] = v;
  __syncthreads();
  if (threadIdx.x >= 32) return;  // warp 0 writes the mix
  const float inv = 1.0f / sqrtf(z[kMaxMix] / static_cast<float>(width) + norm_eps);
  if (threadIdx.x < n_mix) z[threadIdx.x] *= inv;
  __syncwarp();
  WriteMix(z, t, hc, scale, base, hc_eps, sinkhorn_iters, pre, post, comb);
}

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

bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

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
  // Short rows: several rows (groups of shape.threads threads) per block.
  const RowShape shape = RowShapeFor(n / 4);
  int64_t rows_per_block = shape.threads < kThreads ? kThreads / shape.threads : 1;
  if (rows_per_block > rows) rows_per_block = rows;
  const auto blocks = static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block);
  const auto threads = static_cast<unsigned>(rows_per_block * shape.threads);
  LaunchByVec(shape.vec, [&](auto vec) {
    pdl::Launch(RmsNormRowKernel<decltype(vec)::value>, blocks, threads, 0, stream, x, rows, n, ldx,
                weight, eps, y, ldy, shape.threads);
  });
  return cudaGetLastError();
}

int64_t HcMixSplits(int64_t T, int64_t hc, int64_t D) {
  // Slices of kMixSliceCols columns. The split does not depend on T, so a token's reduction
  // order (and result) is the same at every batch size.
  (void)T;
  const int64_t s = (hc * D + kMixSliceCols - 1) / kMixSliceCols;
  return s < 1 ? 1 : s;
}

cudaError_t HcMixSplit(const float* x, int64_t T, int64_t hc, int64_t D,
                       const model::HcSiteWeights& w, float norm_eps, float hc_eps,
                       int sinkhorn_iters, float* pre, float* post, float* comb, float* scratch,
                       cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (hc > kMaxHc || hc <= 0 || T > 65535) return cudaErrorInvalidValue;
  const int64_t splits = HcMixSplits(T, hc, D), width = hc * D;
  const int n_mix = static_cast<int>((2 + hc) * hc);
  // Tokens per warp: only how many tokens share one fn load (no bit depends on it). Small
  // T: more warps for latency; large T: fn (2 MB) read from L2 once per 32 tokens.
  const int64_t tokens_per_warp = T <= 256 ? kMixChunk : (T <= 512 ? 4 : 8) * kMixChunk;
  const dim3 grid(static_cast<unsigned>(splits),
                  static_cast<unsigned>((T + tokens_per_warp - 1) / tokens_per_warp));
  // The load width (float4 or scalar) does not change any bit either.
  if (width % 4 == 0 && Aligned16(x) && Aligned16(w.fn)) {
    pdl::Launch(HcMixSliceKernel<true>, grid, 32, 0, stream, x, T, width, n_mix, w.fn,
                tokens_per_warp, scratch);
  } else {
    pdl::Launch(HcMixSliceKernel<false>, grid, 32, 0, stream, x, T, width, n_mix, w.fn,
                tokens_per_warp, scratch);
  }
  pdl::Launch(HcMixFinishKernel, static_cast<unsigned>(T), kFinishThreads, 0, stream, scratch,
              splits, hc, width, w.scale, w.base, norm_eps, hc_eps, sinkhorn_iters, pre, post,
              comb);
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
