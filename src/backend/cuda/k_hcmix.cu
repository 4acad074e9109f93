// The mHC pre-mix (model::Backend::HcMix): each token's mix logits (its hc streams against the
// 2 MB fn projection, split into 128-column slices), their rms normalisation, then pre, post
// and the Sinkhorn-normalised comb. fp32, with every sum in the CPU reference's order where it
// decides bits, and a split that does not depend on T (batch-invariant). Moved out of
// k_norm.cu unchanged.
#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/env_knob.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kMaxMix = (2 + kMaxHc) * kMaxHc;  // 24 mix logits for hc = 4

__device__ __forceinline__ float4 Zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ float Sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

// pre, post and the Sinkhorn-normalised comb of token t from its mix logits, computed by one
// warp: lane l < n_mix holds logit z_l (rms-normalised) in `z`, and lane l < H*H computes comb
// element (j, k) = (l / H, l % H). Every row / column sum is taken in the CPU reference's
// order (k = 0, 1, .., H-1 resp. j = 0, 1, ..) from values gathered with shuffles, and each
// lane performs the reference's operations on its element, so the result is bitwise the same
// as the sequential reference loop, in ~1/10 of its dependent-latency chain (one thread took
// tens of µs per call). All 32 lanes must call it (shuffles).
//
// Sums start from the first element instead of 0.0f + first (one dependent FADD less per
// half-step, 41 of them): the same bits. 0 + v == v except for v = -0 (and NaN payloads, but
// every value here is an arithmetic result, so a NaN is already the canonical one); the start
// can only change the sign of a zero sum, i.e. of a row / column of zeros, and such a sum is
// only used as the divisor sum + eps, which is then eps (the same) or, with eps = 0, divides
// zeros by a zero (NaN either way). The softmax sum adds expf values, never -0.
template <int H>
__device__ void WarpWriteMix(float z, int64_t t, const float* scale, const float* base,
                             float hc_eps, int sinkhorn_iters, float* pre, float* post,
                             float* comb) {
  const int lane = threadIdx.x & 31;
  const int j = lane / H, k = lane % H;
  const bool mine = lane < H * H;
  const float z_post = __shfl_sync(0xffffffffu, z, (H + lane) & 31);
  const float z_comb = __shfl_sync(0xffffffffu, z, (2 * H + lane) & 31);
  if (lane < H) {
    pre[t * H + lane] = Sigmoid(z * scale[0] + base[lane]) + hc_eps;
    post[t * H + lane] = 2.0f * Sigmoid(z_post * scale[1] + base[H + lane]);
  }
  float c = mine ? z_comb * scale[2] + base[2 * H + lane] : 0.0f;
  // Sum (in index order) of the H elements of this lane's row, resp. column.
  auto row_sum = [&](float v) {
    float sum = __shfl_sync(0xffffffffu, v, j * H);
#pragma unroll
    for (int q = 1; q < H; ++q) sum += __shfl_sync(0xffffffffu, v, j * H + q);
    return sum;
  };
  auto col_sum = [&](float v) {
    float sum = __shfl_sync(0xffffffffu, v, k);
#pragma unroll
    for (int q = 1; q < H; ++q) sum += __shfl_sync(0xffffffffu, v, q * H + k);
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

// The mix of token t by one warp (every lane of it must call; lane l holds logit l in z);
// 1 <= hc <= kMaxHc (checked by the launchers).
__device__ void WriteMix(float z, int64_t t, int64_t hc, const float* scale, const float* base,
                         float hc_eps, int sinkhorn_iters, float* pre, float* post, float* comb) {
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
// The rms normalisation is a per-token scalar, applied in the finish (FinishToken): a
// separate kernel, or at T <= 32 the last block of each token group (see HcMixSliceKernel).
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
// 160 warps issue all 2 MB of fn loads at once: a few us, mostly launch and latency.
constexpr int kMixSliceCols = 128;  // columns per warp slice: 4 per lane
constexpr int kMixChunk = 4;        // tokens whose x loads a warp issues together
constexpr int kMixValues = kMaxMix + 1;

// 4 consecutive values row[c .. c + 3] (zeros past `width`; read-only data). kVec: one
// float4 load (needs width % 4 == 0, a 16-byte aligned row, c % 4 == 0); else 4 scalar
// loads. Same values. kPinned: the float4 load is a plain ld.global in an asm volatile, which
// ptxas keeps ahead of a following PDL wait (SASS: LDG.E.128 x 24, then the wait); an
// ld.global.nc there (__ldg, or the same asm with .nc) was moved after the wait.
template <bool kVec, bool kPinned = false>
__device__ __forceinline__ float4 LoadQuad(const float* row, int64_t c, int64_t width) {
  if constexpr (kVec) {
    if (c >= width) return Zero4();
    const float4* p = reinterpret_cast<const float4*>(row + c);
    if constexpr (kPinned) {
      float4 v;
      asm volatile("ld.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                   : "l"(p));
      return v;
    } else {
      return __ldg(p);
    }
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

// v + 0, with the add made to depend on `all` (the OR of the bits of a round's loaded
// values): bitwise v for every v. When the select picks +0, v & all == 0x7fffffff means v is
// a NaN (the canonical one, as every arithmetic result here), which + 0 keeps; otherwise it
// adds -0, the exact identity. Its purpose is scheduling only: the first add of a round then
// needs every load of the round, so ptxas issues all of them before it. Without it ptxas
// interleaves the loads with the adds (seen in the SASS: ~57 loads ahead of the first add,
// the rest issued one by one as the adds retire, i.e. a second L2 round trip per round).
__device__ __forceinline__ float AfterAll(float v, uint32_t all) {
  return v + ((__float_as_uint(v) & all) == 0x7fffffffu ? 0.0f : -0.0f);
}

// Sum, in slice order, of value `lane` (0..24) of token t's partials ([splits][25] floats at
// partial + t * splits * 25); lanes 25..31 get 0. The chain is the sequential loop
// v = ((0 + p_0) + p_1) + .. of the former finish kernel (the same bits: AfterAll is exact),
// but all loads of a round of kFinishRound slices are issued before its first add, into
// registers: one L2 round trip per round (one at 4 x 5120) instead of one per few slices
// through shared memory. Per load instruction lanes 0..24 read 100 contiguous bytes. __ldcg:
// the partials may have been written by other blocks of the same grid (the fused path) and
// the scratch is reused by every call, so L1 must not serve them. 160 values in registers
// fit the fused kernel's 168 too (SASS: all 160 loads ahead of the adds; 2 spill stores and
// reloads per thread, between the loads and the adds, none in the add chain).
constexpr int kFinishRound = 160;

__device__ __forceinline__ float SumPartials(const float* partial, int64_t t, int64_t splits,
                                             int lane) {
  const bool mine = lane < kMixValues;
  const float* src = partial + t * splits * kMixValues + (mine ? lane : 0);
  float v = 0.0f;
  for (int64_t s0 = 0; s0 < splits; s0 += kFinishRound) {
    const int count = static_cast<int>(splits - s0 < kFinishRound ? splits - s0 : kFinishRound);
    const float* round = src + s0 * kMixValues;
    float p[kFinishRound];
#pragma unroll
    for (int q = 0; q < kFinishRound; ++q) {
      p[q] = mine && q < count ? __ldcg(round + q * kMixValues) : 0.0f;
    }
    uint32_t ors[8] = {};  // 8 independent OR chains (short latency)
#pragma unroll
    for (int q = 0; q < kFinishRound; ++q) ors[q % 8] |= __float_as_uint(p[q]);
    v = AfterAll(v, ors[0] | ors[1] | ors[2] | ors[3] | ors[4] | ors[5] | ors[6] | ors[7]);
#pragma unroll
    for (int q = 0; q < kFinishRound; ++q) {
      if (q < count) v += p[q];
    }
  }
  return v;
}

// The finish of token t by one warp (all 32 lanes call): its 25 slice sums, the rms
// normalisation of the logits (same operations as the former finish kernel), then the mix.
struct MixFinishArgs {
  int64_t splits, hc, width;
  const float* scale;
  const float* base;
  float norm_eps, hc_eps;
  int sinkhorn_iters;
  float *pre, *post, *comb;
};

__device__ void FinishToken(const float* partial, int64_t t, const MixFinishArgs& a) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  float z = SumPartials(partial, t, a.splits, lane);
  const float sum_squares = __shfl_sync(0xffffffffu, z, kMaxMix);
  const float inv = 1.0f / sqrtf(sum_squares / static_cast<float>(a.width) + a.norm_eps);
  if (lane < static_cast<int>((2 + a.hc) * a.hc)) z *= inv;
  WriteMix(z, t, a.hc, a.scale, a.base, a.hc_eps, a.sinkhorn_iters, a.pre, a.post, a.comb);
}

// The slice kernel: blocks of W = blockDim.x / 32 warps (1 unless fused), warp w of block
// (bx, g) takes slice s = bx * W + w (none when s >= splits) for the tokens of group g
// (tokens_per_warp consecutive tokens). See the comment above kMixSliceCols.
//
// kFused (W == tokens_per_warp <= 4, the launcher's small-T path): the finish is folded in
// by the "last block done" pattern. Every block, after writing its partials, fences and
// bumps counters[g]; the block that brings it to gridDim.x (all slices of group g written)
// resets it to 0 (for the next call on the stream, or a graph replay) and finishes the group,
// warp w token t0 + w, in parallel. The arithmetic is FinishToken's either way, so the bits
// equal the separate finish kernel's.
constexpr int kFusedMaxWarps = 4;         // warps per block of the fused kernel (<= 168 registers)
constexpr int kHcMixXPrefetchChunks = 2;  // XPrefetchChunks' default

// Asks the L2 for the 16 bytes of x at p (a hint; no bit depends on it).
__device__ __forceinline__ void PrefetchL2(const float* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// x_prefetch > 0 (the large-T launch): each lane also asks the L2 for its x quads of the chunk
// x_prefetch chunks ahead, so that more of x is on its way than the chunk in registers (the
// loads were ~24 KiB in flight per SM: 12 warps x 4 tokens x 512 bytes). MEASURED (H200 run
// 152, T 4096, hc 4 x 5120): 324 us a call without, 309 / 311 / 323 us at 1 / 2 / 4 chunks
// ahead; the 4-layer 4k prefill's 8 calls 2.66 -> 2.54 ms (prefill tok/s within noise). x
// streams at only ~1.08 TB/s either way: the kernel is bound by its issue and latency (~215
// instructions per token and slice at 12 warps per SM), not by HBM.
template <bool kVec, bool kFused>
__global__ void __launch_bounds__(kFused ? 32 * kFusedMaxWarps : 32, kFused ? 3 : 12)
    HcMixSliceKernel(const float* x, int64_t T, int64_t width, int n_mix, const float* fn,
                     int64_t tokens_per_warp, float* partial, MixFinishArgs finish,
                     unsigned* counters, int x_prefetch) {
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  const int64_t warps = blockDim.x >> 5, splits = finish.splits;
  const int64_t s = static_cast<int64_t>(blockIdx.x) * warps + warp;
  const int64_t c = s * kMixSliceCols + 4 * lane;
  // fn is a weight (no kernel writes it): its loads are issued before the PDL wait (the
  // exception pdl.cuh allows), so under PDL their HBM latency overlaps the previous kernel.
  float4 f[kMaxMix];
#pragma unroll
  for (int j = 0; j < kMaxMix; ++j) {
    f[j] = s < splits && j < n_mix ? LoadQuad<kVec, true>(fn + j * width, c, width) : Zero4();
  }
  pdl::WaitThenAllowNext();
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * tokens_per_warp;
  const int64_t t_end = t0 + tokens_per_warp < T ? t0 + tokens_per_warp : T;
  if (s < splits) {  // uniform over the warp
    const int slot = MixSlot(lane);
    // (!kFused only: the fused kernel's registers are at its bound.)
    auto prefetch_chunk = [&](int64_t tc) {
      if constexpr (!kFused) {
        if (c >= width) return;
#pragma unroll
        for (int g = 0; g < kMixChunk; ++g) {
          if (tc + g < t_end) PrefetchL2(x + (tc + g) * width + c);
        }
      }
    };
    for (int d = 1; d < x_prefetch; ++d) prefetch_chunk(t0 + int64_t{d} * kMixChunk);
    for (int64_t t = t0; t < t_end; t += kMixChunk) {
      if (x_prefetch > 0) prefetch_chunk(t + int64_t{x_prefetch} * kMixChunk);
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
  if constexpr (kFused) {
    // The ordering of cooperative groups' grid barrier: the block's writes, a barrier, then
    // thread 0's fence (cumulative: it covers what the barrier ordered before it) and count;
    // on the other side thread 0's fence after seeing the count, then a barrier.
    __shared__ bool last_block;
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      const unsigned arrived = atomicAdd(counters + blockIdx.y, 1u) + 1u;
      last_block = arrived == gridDim.x;
      if (last_block) {
        counters[blockIdx.y] = 0u;  // every block of the group has counted
        __threadfence();
      }
    }
    __syncthreads();
    if (!last_block) return;
    if (t0 + warp < t_end) FinishToken(partial, t0 + warp, finish);
  }
}

// The separate finish (large T): one warp per token, kFinishWarps tokens per block.
constexpr int kFinishWarps = 4;

__global__ void __launch_bounds__(32 * kFinishWarps, 1)
    HcMixFinishKernel(const float* partial, int64_t T, MixFinishArgs finish) {
  pdl::WaitThenAllowNext();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kFinishWarps + (threadIdx.x >> 5);
  if (t < T) FinishToken(partial, t, finish);  // uniform over the warp
}

// The fused path runs for T <= kFusedMaxT (kHcMixCounters token groups of kFusedMaxWarps).
constexpr int64_t kFusedMaxT = kFusedMaxWarps * kHcMixCounters;

// Chunks ahead that the large-T slice kernel prefetches x (DEEPINFER_HCMIX_X_PREFETCH = 0 .. 8,
// read on every call; A/B runs); no bit depends on it.
int XPrefetchChunks() {
  return static_cast<int>(EnvIntOr("DEEPINFER_HCMIX_X_PREFETCH", kHcMixXPrefetchChunks, 0, 8));
}

template <bool kVec>
void LaunchHcMix(const float* x, int64_t T, int n_mix, const float* fn, float* scratch,
                 const MixFinishArgs& finish, unsigned* counters, cudaStream_t stream) {
  const auto splits = finish.splits, width = finish.width;
  if (counters != nullptr && T <= kFusedMaxT) {
    // W = min(T, 4) warps per block and tokens per group: the same fn traffic as the
    // two-kernel path (2 MB per group of <= 4 tokens); at T < 4 the 160 slices take 160 / W
    // blocks (T = 1: one warp per block, as in the two-kernel path).
    const int64_t warps = T < kFusedMaxWarps ? T : kFusedMaxWarps;
    const dim3 grid(static_cast<unsigned>((splits + warps - 1) / warps),
                    static_cast<unsigned>((T + warps - 1) / warps));
    pdl::Launch(HcMixSliceKernel<kVec, true>, grid, static_cast<unsigned>(32 * warps), 0, stream, x,
                T, width, n_mix, fn, warps, scratch, finish, counters, 0);
    return;
  }
  // Tokens per warp: only how many tokens share one fn load (no bit depends on it). Small
  // T: more warps for latency; large T: fn (2 MB) read from L2 once per 32 tokens.
  const int64_t tokens_per_warp = T <= 256 ? kMixChunk : (T <= 512 ? 4 : 8) * kMixChunk;
  const dim3 grid(static_cast<unsigned>(splits),
                  static_cast<unsigned>((T + tokens_per_warp - 1) / tokens_per_warp));
  pdl::Launch(HcMixSliceKernel<kVec, false>, grid, 32, 0, stream, x, T, width, n_mix, fn,
              tokens_per_warp, scratch, finish, static_cast<unsigned*>(nullptr), XPrefetchChunks());
  pdl::Launch(HcMixFinishKernel, static_cast<unsigned>((T + kFinishWarps - 1) / kFinishWarps),
              32 * kFinishWarps, 0, stream, static_cast<const float*>(scratch), T, finish);
}

}  // namespace

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
                       unsigned* counters, cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (hc > kMaxHc || hc <= 0 || T > 65535) return cudaErrorInvalidValue;
  const int64_t splits = HcMixSplits(T, hc, D), width = hc * D;
  const int n_mix = static_cast<int>((2 + hc) * hc);
  const MixFinishArgs finish{splits,         hc,  width, w.scale, w.base, norm_eps, hc_eps,
                             sinkhorn_iters, pre, post,  comb};
  // The load width (float4 or scalar) does not change any bit, nor does the path.
  if (width % 4 == 0 && Aligned16(x) && Aligned16(w.fn)) {
    LaunchHcMix<true>(x, T, n_mix, w.fn, scratch, finish, counters, stream);
  } else {
    LaunchHcMix<false>(x, T, n_mix, w.fn, scratch, finish, counters, stream);
  }
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
