// The sqrtsoftplus MoE router (model::Backend routing, kernels::RouteSqrtSoftplus): three
// kernels for different token counts and expert counts, with identical outputs (moved out of
// k_topk.cu unchanged). Order contract as the top-k's: larger value first, equal values by
// lower index, -0.0 == +0.0; NaN scores rank below -inf (RouteKey).
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/select_keys.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kRouteThreads = 256;

__device__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// --- MoE router -----------------------------------------------------------------------
// Every router kernel computes s = sqrt(softplus(logit)) with the same device code, selects
// by the key RouteKey(s + bias, expert) -- one 64-bit compare per step: larger biased score
// first, equal scores by lower expert id, -0.0 == +0.0, NaN below -inf (NaNs by id) -- and
// sums the picked s in pick order. Hence identical ids and bitwise identical weights whichever
// kernel runs (batch invariance across the dispatch's T thresholds).

// The selection key of expert `id` with biased score v; every key is > 0 (its low word is
// ~id >= 2^31), so 0 pads and marks taken slots.
__device__ __forceinline__ uint64_t RouteKey(float v, int32_t id) {
  return PackPair(isnan(v) ? 0u : OrderedKey(v), id);
}

__device__ __forceinline__ uint64_t MaxKey(uint64_t a, uint64_t b) { return a < b ? b : a; }

// The weight of a pick with value s, given the sum of the k picked s in pick order.
__device__ __forceinline__ float RouteWeight(float s, float sum, int64_t k, bool renormalise,
                                             float scale) {
  return (renormalise && k > 1) ? s / (sum + 1e-20f) * scale : s * scale;
}

// One block per token: k rounds of block arg-max of the keys over s + bias (shared memory).
// Any n_experts <= kMaxRouteExperts and k <= 64.
__global__ void __launch_bounds__(kRouteThreads)
    RouteKernel(const float* logits, const float* bias, int64_t n_experts, int64_t k,
                bool renormalise, float scale, int32_t* experts, float* weights) {
  pdl::WaitThenAllowNext();
  extern __shared__ float smem[];
  float* s = smem;                   // [n_experts]
  float* biased = smem + n_experts;  // [n_experts] s + bias (selection only)
  __shared__ uint64_t best_key[kRouteThreads / 32];
  __shared__ int32_t picked[64];
  const int64_t t = blockIdx.x;
  for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) {
    s[e] = sqrtf(Softplus(logits[t * n_experts + e]));
    biased[e] = s[e] + (bias ? bias[e] : 0.0f);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t round = 0; round < k; ++round) {
    uint64_t best = 0;
    for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) {
      bool taken = false;
      for (int64_t r = 0; r < round; ++r) taken |= picked[r] == e;
      if (!taken) best = MaxKey(best, RouteKey(biased[e], static_cast<int32_t>(e)));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      best = MaxKey(best, __shfl_xor_sync(kFullWarp, best, offset));
    }
    if (lane == 0) best_key[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kRouteThreads / 32; ++w) best = MaxKey(best, best_key[w]);
      picked[round] = PairId(best);  // k <= n_experts: a real key
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += s[picked[i]];
  for (int64_t i = 0; i < k; ++i) {
    experts[t * k + i] = picked[i];
    weights[t * k + i] = RouteWeight(s[picked[i]], sum, k, renormalise, scale);
  }
}

// Experts per lane of RouteWarpKernel (n_experts <= 32 * kRouteWarpPerLane).
constexpr int kRouteWarpPerLane = 16;
constexpr int kRouteWarpThreads = 128;  // 4 tokens per block
constexpr int kRouteWarpMaxK = 32;

// RouteKernel for n_experts <= 32 * kRouteWarpPerLane and k <= kRouteWarpMaxK, one warp per
// token with no block barriers (the many-token path): lane l holds experts l, l + 32, ..
// (s and the key in registers); each round is a register max over the lane's keys + a 5-step
// shuffle max, after which every lane holds the same winner; its owner lane marks it taken
// and records the pick.
__global__ void __launch_bounds__(kRouteWarpThreads)
    RouteWarpKernel(const float* logits, const float* bias, int64_t T, int64_t n_experts, int64_t k,
                    bool renormalise, float scale, int32_t* experts, float* weights) {
  pdl::WaitThenAllowNext();
  __shared__ float picked_s[kRouteWarpThreads / 32][kRouteWarpMaxK];
  __shared__ int32_t picked_id[kRouteWarpThreads / 32][kRouteWarpMaxK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kRouteWarpThreads / 32) + warp;
  if (t >= T) return;  // whole warps leave
  float s[kRouteWarpPerLane], b[kRouteWarpPerLane], raw[kRouteWarpPerLane];
  uint64_t keys[kRouteWarpPerLane];
#pragma unroll
  for (int q = 0; q < kRouteWarpPerLane; ++q) {
    const int64_t e = lane + 32 * q;
    raw[q] = e < n_experts ? __ldg(logits + t * n_experts + e) : 0.0f;
    b[q] = e < n_experts && bias ? __ldg(bias + e) : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kRouteWarpPerLane; ++q) {
    const int32_t e = lane + 32 * q;
    s[q] = sqrtf(Softplus(raw[q]));
    keys[q] = e < n_experts ? RouteKey(s[q] + b[q], e) : 0;
  }
  unsigned taken = 0;  // bit q: expert lane + 32 q already picked
  for (int64_t round = 0; round < k; ++round) {
    uint64_t best = 0;
#pragma unroll
    for (int q = 0; q < kRouteWarpPerLane; ++q) {
      best = MaxKey(best, (taken >> q & 1u) ? uint64_t{0} : keys[q]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      best = MaxKey(best, __shfl_xor_sync(kFullWarp, best, offset));
    }
    const int32_t id = PairId(best);  // k <= n_experts: a real key
    if ((id & 31) == lane) {
      const int q = id >> 5;
      float sv = 0.0f;
#pragma unroll
      for (int r = 0; r < kRouteWarpPerLane; ++r) sv = r == q ? s[r] : sv;
      taken |= 1u << q;
      picked_s[warp][round] = sv, picked_id[warp][round] = id;
    }
  }
  __syncwarp();
  if (lane >= k) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += picked_s[warp][i];
  experts[t * k + lane] = picked_id[warp][lane];
  weights[t * k + lane] = RouteWeight(picked_s[warp][lane], sum, k, renormalise, scale);
}

// RouteSplitKernel limits: one thread per expert (at most 16 warps), k <= kRouteSplitMaxK,
// and T <= kRouteSplitMaxT (beyond, the one-warp-per-token kernel does less work per token).
constexpr int kRouteSplitMaxExperts = 512;
constexpr int kRouteSplitMaxK = 8;
constexpr int64_t kRouteSplitMaxT = 256;
static_assert(kRouteSplitMaxK * 4 == 32, "RouteSplitKernel ranks each head on 4 lanes");
static_assert(kRouteSplitMaxK % 2 == 0, "RouteSplitKernel counts heads in pairs");

// Sorts the 32 keys of a warp descending (lane 0 gets the largest): the bitonic network of
// BitonicSortDescendingInRegisters for 32 elements, 15 shuffle compare-exchange stages.
__device__ __forceinline__ uint64_t WarpSortDescending(uint64_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
    const bool descending = (lane & size) == 0;
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const uint64_t o = __shfl_xor_sync(kFullWarp, v, stride);
      const bool keep_max = ((lane & stride) == 0) == descending;
      v = keep_max ? MaxKey(v, o) : (v < o ? v : o);
    }
  }
  return v;
}

// The low-latency router (few tokens): one block per token, thread e owns expert e (blockDim
// = n_experts rounded up to warps). Softplus runs once per thread; each warp sorts its 32 keys
// (so lane j holds the warp's j-th largest) and publishes its kRouteSplitMaxK largest, the
// heads; each warp ranks its first k heads (4 lanes per head). The global rank of a head c is the
// number of published keys greater than c: if c is among the k largest, every larger key is within
// the k largest of its own warp, so published, and the count is exact; otherwise either every
// larger key is published (count >= k) or one is not, and then its warp publishes kRouteSplitMaxK
// >= k keys above it (count >= k again). Keys are distinct, so the k heads of rank < k fill the k
// pick slots, one each.
__global__ void __launch_bounds__(kRouteSplitMaxExperts)
    RouteSplitKernel(const float* logits, const float* bias, int64_t n_experts, int64_t k,
                     bool renormalise, float scale, int32_t* experts, float* weights) {
  pdl::WaitThenAllowNext();
  constexpr int kMaxWarps = kRouteSplitMaxExperts / 32;
  __shared__ __align__(16) uint64_t heads[kMaxWarps][kRouteSplitMaxK];  // per warp, descending
  __shared__ float picked_s[kRouteSplitMaxK];
  __shared__ int32_t picked_id[kRouteSplitMaxK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  const int64_t t = blockIdx.x;
  const int32_t e = static_cast<int32_t>(threadIdx.x);
  float s = 0.0f;
  uint64_t key = 0;  // pad: below every real key
  if (e < n_experts) {
    const float x = __ldg(logits + t * n_experts + e);
    const float b = bias ? __ldg(bias + e) : 0.0f;
    s = sqrtf(Softplus(x));
    key = RouteKey(s + b, e);
  }
  key = WarpSortDescending(key);
  // The s of the expert whose key this lane now holds (its owner is a lane of this warp).
  const float key_s = __shfl_sync(kFullWarp, s, PairId(key) & 31);
  if (lane < kRouteSplitMaxK) heads[warp][lane] = key;
  // Lane l ranks head l / 4 of its warp against the heads of warps l % 4, l % 4 + 4, ..;
  // the 4 partial counts are summed by two shuffles.
  const int head = lane >> 2, part = lane & 3;
  const uint64_t cand = __shfl_sync(kFullWarp, key, head);
  const float cand_s = __shfl_sync(kFullWarp, key_s, head);
  __syncthreads();
  int rank_even = 0, rank_odd = 0;  // two chains of adds instead of one
  for (int w = part; w < n_warps; w += 4) {
#pragma unroll
    for (int j = 0; j < kRouteSplitMaxK; j += 2) {
      rank_even += heads[w][j] > cand ? 1 : 0;
      rank_odd += heads[w][j + 1] > cand ? 1 : 0;
    }
  }
  int rank = rank_even + rank_odd;
  rank += __shfl_xor_sync(kFullWarp, rank, 1);
  rank += __shfl_xor_sync(kFullWarp, rank, 2);
  if (part == 0 && head < k && rank < k) picked_s[rank] = cand_s, picked_id[rank] = PairId(cand);
  __syncthreads();
  if (threadIdx.x >= k) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += picked_s[i];
  experts[t * k + threadIdx.x] = picked_id[threadIdx.x];
  weights[t * k + threadIdx.x] = RouteWeight(picked_s[threadIdx.x], sum, k, renormalise, scale);
}

// Whether RouteSqrtSoftplus may take RouteSplitKernel: DEEPINFER_CUDA_ROUTE_SPLIT=0 in the
// environment (read once) keeps the one-warp-per-token kernel at every T, for A/B timing.
// Both give identical outputs.
bool RouteSplitEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("DEEPINFER_CUDA_ROUTE_SPLIT");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}

}  // namespace

cudaError_t RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T, int64_t n_experts,
                              int64_t k, bool renormalise, float scale, int32_t* experts,
                              float* weights, cudaStream_t stream) {
  if (T <= 0 || k <= 0) return cudaSuccess;
  if (n_experts > kMaxRouteExperts || k > 64 || k > n_experts) return cudaErrorInvalidValue;
  if (T <= kRouteSplitMaxT && n_experts <= kRouteSplitMaxExperts && k <= kRouteSplitMaxK &&
      RouteSplitEnabled()) {
    const unsigned threads = static_cast<unsigned>((n_experts + 31) / 32 * 32);
    pdl::Launch(RouteSplitKernel, static_cast<unsigned>(T), threads, 0, stream, logits, bias,
                n_experts, k, renormalise, scale, experts, weights);
    return cudaGetLastError();
  }
  if (n_experts <= 32 * kRouteWarpPerLane && k <= kRouteWarpMaxK) {
    const int per_block = kRouteWarpThreads / 32;
    pdl::Launch(RouteWarpKernel, static_cast<unsigned>((T + per_block - 1) / per_block),
                kRouteWarpThreads, 0, stream, logits, bias, T, n_experts, k, renormalise, scale,
                experts, weights);
    return cudaGetLastError();
  }
  const size_t smem = 2 * static_cast<size_t>(n_experts) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = launch::RaiseMaxDynamicSmem(RouteKernel, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  pdl::Launch(RouteKernel, static_cast<unsigned>(T), kRouteThreads, smem, stream, logits, bias,
              n_experts, k, renormalise, scale, experts, weights);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
