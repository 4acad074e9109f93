// Selection kernels: per-row top-k (radix select + ordered compaction + rank by counting),
// candidate-block scores / marking, and the sqrtsoftplus MoE router.
//
// Order contract (as the CPU reference's partial_sort): larger value first, equal values by
// lower index; -0.0 and +0.0 are equal.
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kTopKThreads = 512;
constexpr int kThreads = 256;
constexpr int kRouteThreads = 256;

__device__ __forceinline__ float NegInf() { return -__int_as_float(0x7f800000); }

// Order-preserving map float -> uint32 (larger float, larger key); -0.0 maps as +0.0.
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) == 0) bits = 0;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// One block per row. Finds the k_eff = min(k, n) largest entries, writes their ids in
// order to idx[row, 0..k_eff), -1 for -inf values and for slots k_eff..k.
__global__ void __launch_bounds__(kTopKThreads)
    TopKKernel(const float* scores, int64_t n, int64_t k, int32_t* idx) {
  __shared__ uint32_t hist[256];
  __shared__ int32_t sel_id[kMaxTopK];
  __shared__ uint32_t sel_key[kMaxTopK];
  __shared__ int scan_scratch[33];
  __shared__ uint32_t s_prefix;
  __shared__ int64_t s_remaining;
  const float* s = scores + blockIdx.x * n;
  int32_t* out = idx + blockIdx.x * k;
  const int64_t k_eff = k < n ? k : n;

  for (int64_t i = k_eff + threadIdx.x; i < k; i += blockDim.x) out[i] = -1;
  if (k_eff <= 0) return;

  // 1. Radix select (8 bits per pass, most significant first): the key of the k_eff-th
  //    largest entry, and how many entries equal to it are taken (s_remaining).
  if (threadIdx.x == 0) {
    s_prefix = 0;
    s_remaining = k_eff;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const uint32_t key = OrderedKey(s[i]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t above = 0;
      int bin = 255;
      for (; bin > 0; --bin) {
        if (above + hist[bin] >= s_remaining) break;
        above += hist[bin];
      }
      s_remaining -= above;
      s_prefix = prefix | (static_cast<uint32_t>(bin) << shift);
    }
    mask |= 0xFFu << shift;
    __syncthreads();
  }
  const uint32_t threshold = s_prefix;
  const int64_t ties_needed = s_remaining;

  // 2. Ordered compaction: every key > threshold, and the first ties_needed keys equal to it.
  int64_t ties_before = 0, taken_before = 0;
  for (int64_t chunk = 0; chunk < n; chunk += blockDim.x) {
    const int64_t i = chunk + threadIdx.x;
    const uint32_t key = i < n ? OrderedKey(s[i]) : 0;
    const bool greater = i < n && key > threshold;
    const bool equal = i < n && key == threshold;
    int eq_total = 0, take_total = 0;
    const int eq_rank = BlockExclusiveCount(equal, &eq_total, scan_scratch);
    const bool take = greater || (equal && ties_before + eq_rank < ties_needed);
    const int slot = BlockExclusiveCount(take, &take_total, scan_scratch);
    if (take) {
      sel_id[taken_before + slot] = static_cast<int32_t>(i);
      sel_key[taken_before + slot] = key;
    }
    ties_before += eq_total;
    taken_before += take_total;
  }
  __syncthreads();

  // 3. Rank by counting (the order is total: key descending, then id ascending).
  const uint32_t neg_inf_key = OrderedKey(NegInf());
  for (int64_t a = threadIdx.x; a < k_eff; a += blockDim.x) {
    const uint32_t ka = sel_key[a];
    const int32_t ia = sel_id[a];
    int64_t rank = 0;
    for (int64_t b = 0; b < k_eff; ++b) {
      const uint32_t kb = sel_key[b];
      rank += (kb > ka || (kb == ka && sel_id[b] < ia)) ? 1 : 0;
    }
    out[rank] = ka == neg_inf_key ? -1 : ia;
  }
}

__global__ void CandidateBlockScoresKernel(const float* scores, int64_t T, int64_t n,
                                           const int32_t* q_pos, int64_t ratio, int64_t block,
                                           float* block_scores) {
  const int64_t n_blocks = (n + block - 1) / block;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * n_blocks;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / n_blocks, b = i % n_blocks;
    const int64_t newest = (static_cast<int64_t>(q_pos[t]) + 1) / ratio - 1;
    float mx = NegInf();
    const int64_t end = (b + 1) * block < n ? (b + 1) * block : n;
    for (int64_t g = b * block; g < end; ++g) mx = MaxF(mx, scores[t * n + g]);
    if (newest >= 0 && newest < n && newest / block == b) mx = __int_as_float(0x7f800000);
    block_scores[i] = mx;
  }
}

__global__ void MarkKeptBlocksKernel(const int32_t* kept, int64_t T, int64_t keep, int64_t n,
                                     int64_t block, uint8_t* mask) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * keep;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / keep;
    const int64_t b = kept[i];
    if (b < 0) continue;
    const int64_t end = (b + 1) * block < n ? (b + 1) * block : n;
    for (int64_t g = b * block; g < end; ++g) mask[t * n + g] = 1;
  }
}

__device__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// One block per token: s = sqrt(softplus(logit)), k rounds of block arg-max over s + bias.
__global__ void __launch_bounds__(kRouteThreads)
    RouteKernel(const float* logits, const float* bias, int64_t n_experts, int64_t k,
                bool renormalise, float scale, int32_t* experts, float* weights) {
  extern __shared__ float smem[];
  float* s = smem;                   // [n_experts]
  float* biased = smem + n_experts;  // [n_experts] s + bias (selection only)
  __shared__ float best_v[kRouteThreads / 32];
  __shared__ int32_t best_i[kRouteThreads / 32];
  __shared__ int32_t picked[64];
  const int64_t t = blockIdx.x;
  for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) {
    s[e] = sqrtf(Softplus(logits[t * n_experts + e]));
    biased[e] = s[e] + (bias ? bias[e] : 0.0f);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t round = 0; round < k; ++round) {
    float v = NegInf();
    int32_t id = -1;
    for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) {
      bool taken = false;
      for (int64_t r = 0; r < round; ++r) taken |= picked[r] == e;
      if (taken) continue;
      if (id < 0 || biased[e] > v) v = biased[e], id = static_cast<int32_t>(e);
    }
    // Warp then block arg-max: larger value, then lower id; id -1 loses.
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, v, offset);
      const int32_t oi = __shfl_xor_sync(0xffffffffu, id, offset);
      if (oi >= 0 && (id < 0 || ov > v || (ov == v && oi < id))) v = ov, id = oi;
    }
    if (lane == 0) best_v[warp] = v, best_i[warp] = id;
    __syncthreads();
    if (threadIdx.x == 0) {
      float bv = best_v[0];
      int32_t bi = best_i[0];
      for (int w = 1; w < kRouteThreads / 32; ++w) {
        if (best_i[w] >= 0 && (bi < 0 || best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi))) {
          bv = best_v[w], bi = best_i[w];
        }
      }
      picked[round] = bi;
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += s[picked[i]];
  for (int64_t i = 0; i < k; ++i) {
    const float w = s[picked[i]];
    experts[t * k + i] = picked[i];
    weights[t * k + i] = (renormalise && k > 1) ? w / (sum + 1e-20f) * scale : w * scale;
  }
}

}  // namespace

cudaError_t TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx,
                 cudaStream_t stream) {
  if (T <= 0 || k <= 0) return cudaSuccess;
  if ((k < n ? k : n) > kMaxTopK) return cudaErrorInvalidValue;
  TopKKernel<<<static_cast<unsigned>(T), kTopKThreads, 0, stream>>>(scores, n, k, idx);
  return cudaGetLastError();
}

cudaError_t CandidateBlockScores(const float* scores, int64_t T, int64_t n, const int32_t* q_pos,
                                 int64_t ratio, int64_t block, float* block_scores,
                                 cudaStream_t stream) {
  const int64_t total = T * ((n + block - 1) / block);
  if (total <= 0) return cudaSuccess;
  CandidateBlockScoresKernel<<<GridFor(total, kThreads), kThreads, 0, stream>>>(
      scores, T, n, q_pos, ratio, block, block_scores);
  return cudaGetLastError();
}

cudaError_t MarkKeptBlocks(const int32_t* kept, int64_t T, int64_t keep, int64_t n, int64_t block,
                           uint8_t* mask, cudaStream_t stream) {
  if (T * keep <= 0) return cudaSuccess;
  MarkKeptBlocksKernel<<<GridFor(T * keep, kThreads), kThreads, 0, stream>>>(kept, T, keep, n,
                                                                             block, mask);
  return cudaGetLastError();
}

cudaError_t RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T, int64_t n_experts,
                              int64_t k, bool renormalise, float scale, int32_t* experts,
                              float* weights, cudaStream_t stream) {
  if (T <= 0 || k <= 0) return cudaSuccess;
  if (n_experts > kMaxRouteExperts || k > 64 || k > n_experts) return cudaErrorInvalidValue;
  const size_t smem = 2 * static_cast<size_t>(n_experts) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        RouteKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  RouteKernel<<<static_cast<unsigned>(T), kRouteThreads, smem, stream>>>(
      logits, bias, n_experts, k, renormalise, scale, experts, weights);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
