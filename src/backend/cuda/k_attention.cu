// Sparse sink attention over window + selected compressed entries, and the lightning
// indexer scores. fp32; online (running-max) softmax, equivalent to the CPU reference's
// two-pass softmax up to fp32 rounding.
#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kAttnThreads = 128;  // 4 warps
constexpr int kAttnWarps = kAttnThreads / 32;
constexpr int kAttnChunk = 32;  // keys scored per round
constexpr int kAttnPerThread = static_cast<int>(kMaxAttnHeadDim / kAttnThreads);

constexpr int kIdxThreads = 256;  // 8 warps
constexpr int kIdxKeysPerBlock = 64;

__device__ __forceinline__ float NegInf() { return -__int_as_float(0x7f800000); }

// The key/value row of candidate j of query token t, or null if it is not attended:
// j < n_window: window row j if its position is in (p - window, p];
// else: selection slot j - n_window (-1 = empty; ids >= n_comp flag an error).
__device__ const float* CandidateRow(const model::SparseAttentionArgs& a, int64_t t, int64_t p,
                                     int64_t j, int* error_word) {
  if (j < a.n_window) {
    const int64_t wp = a.window_pos[j];
    return (wp <= p && wp > p - a.window) ? a.window_kv + j * a.head_dim : nullptr;
  }
  const int32_t g = a.selection[t * a.n_select + (j - a.n_window)];
  if (g < 0) return nullptr;
  if (g >= a.n_comp) {
    atomicOr(error_word, kErrSelectionOutOfRange);
    return nullptr;
  }
  return a.comp_kv + static_cast<int64_t>(g) * a.head_dim;
}

// Grid (tokens, heads). Each thread owns channels c = threadIdx.x + i * 128.
__global__ void __launch_bounds__(kAttnThreads)
    SparseAttentionKernel(model::SparseAttentionArgs a, int* error_word) {
  extern __shared__ float q_s[];         // [head_dim]
  __shared__ float score_s[kAttnChunk];  // scaled scores of the current chunk
  const int64_t t = blockIdx.x, h = blockIdx.y, d = a.head_dim;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const float* q = a.q + (t * a.heads + h) * d;
  for (int64_t c = threadIdx.x; c < d; c += kAttnThreads) q_s[c] = q[c];
  __syncthreads();

  const int64_t p = a.q_pos[t];
  const int64_t total = a.n_window + a.n_select;
  float m = a.sinks[h];  // running max, starts at the sink logit
  float denom = 1.0f;    // exp(sink - m)
  float o[kAttnPerThread];
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) o[i] = 0.0f;

  for (int64_t base = 0; base < total; base += kAttnChunk) {
    for (int jj = warp; jj < kAttnChunk; jj += kAttnWarps) {
      const int64_t j = base + jj;
      const float* row = j < total ? CandidateRow(a, t, p, j, error_word) : nullptr;
      float score = NegInf();
      if (row) {
        float dot = 0.0f;
        for (int64_t c = lane; c < d; c += 32) dot += q_s[c] * row[c];
        score = WarpSum(dot) * a.scale;
      }
      if (lane == 0) score_s[jj] = score;
    }
    __syncthreads();
    float chunk_max = m;
    for (int jj = 0; jj < kAttnChunk; ++jj) chunk_max = MaxF(chunk_max, score_s[jj]);
    const float alpha = expf(m - chunk_max);
    denom *= alpha;
#pragma unroll
    for (int i = 0; i < kAttnPerThread; ++i) o[i] *= alpha;
    for (int jj = 0; jj < kAttnChunk; ++jj) {
      const float s = score_s[jj];
      if (s == NegInf()) continue;  // not attended (or a -inf score: weight 0)
      const float e = expf(s - chunk_max);
      denom += e;
      const float* row = CandidateRow(a, t, p, base + jj, error_word);
#pragma unroll
      for (int i = 0; i < kAttnPerThread; ++i) {
        const int64_t c = threadIdx.x + int64_t{i} * kAttnThreads;
        if (c < d) o[i] += e * row[c];
      }
    }
    m = chunk_max;
    __syncthreads();  // score_s is rewritten by the next chunk
  }
  float* out = a.out + (t * a.heads + h) * d;
#pragma unroll
  for (int i = 0; i < kAttnPerThread; ++i) {
    const int64_t c = threadIdx.x + int64_t{i} * kAttnThreads;
    if (c < d) out[c] = o[i] / denom;
  }
}

// Grid (key blocks of 64, tokens); one warp per key; lane h accumulates head h's dot.
__global__ void __launch_bounds__(kIdxThreads)
    IndexerScoresKernel(const float* q, const float* w, int64_t heads, int64_t dim,
                        const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                        float scale, float* scores) {
  extern __shared__ float smem[];
  const int64_t stride = dim + 1;      // padded rows: lane h reads q_s[h*stride + i] conflict-free
  float* q_s = smem;                   // [heads, dim + 1]
  float* w_s = smem + heads * stride;  // [heads]
  const int64_t t = blockIdx.y;
  for (int64_t i = threadIdx.x; i < heads * dim; i += blockDim.x) {
    q_s[(i / dim) * stride + i % dim] = q[t * heads * dim + i];
  }
  for (int64_t i = threadIdx.x; i < heads; i += blockDim.x) w_s[i] = w[t * heads + i];
  __syncthreads();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t visible = (static_cast<int64_t>(q_pos[t]) + 1) / ratio;
  for (int kk = warp; kk < kIdxKeysPerBlock; kk += kIdxThreads / 32) {
    const int64_t g = blockIdx.x * int64_t{kIdxKeysPerBlock} + kk;
    if (g >= n_keys) break;
    float* s = scores + t * n_keys + g;
    if (g >= visible) {
      if (lane == 0) *s = NegInf();
      continue;
    }
    const float* key = keys + g * dim;
    float acc = 0.0f;
    for (int64_t h = lane; h < heads; h += 32) {
      const float* qh = q_s + h * stride;
      float dot = 0.0f;
      for (int64_t i = 0; i < dim; ++i) dot += qh[i] * key[i];
      acc += MaxF(dot, 0.0f) * scale * w_s[h];
    }
    acc = WarpSum(acc);
    if (lane == 0) *s = acc;
  }
}

}  // namespace

cudaError_t SparseAttention(const model::SparseAttentionArgs& args, int* error_word,
                            cudaStream_t stream) {
  if (args.tokens <= 0 || args.heads <= 0) return cudaSuccess;
  if (args.head_dim > kMaxAttnHeadDim || args.heads > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(args.tokens), static_cast<unsigned>(args.heads));
  const size_t smem = static_cast<size_t>(args.head_dim) * sizeof(float);
  SparseAttentionKernel<<<grid, kAttnThreads, smem, stream>>>(args, error_word);
  return cudaGetLastError();
}

int64_t IndexerScoresSharedBytes(int64_t heads, int64_t dim) {
  return (heads * (dim + 1) + heads) * static_cast<int64_t>(sizeof(float));
}

cudaError_t IndexerScores(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                          const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                          float scale, float* scores, cudaStream_t stream) {
  if (T <= 0 || n_keys <= 0) return cudaSuccess;
  const int64_t smem = IndexerScoresSharedBytes(heads, dim);
  if (smem > kMaxSharedBytes || T > 65535 || ratio <= 0) return cudaErrorInvalidValue;
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        IndexerScoresKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>((n_keys + kIdxKeysPerBlock - 1) / kIdxKeysPerBlock),
                  static_cast<unsigned>(T));
  IndexerScoresKernel<<<grid, kIdxThreads, static_cast<size_t>(smem), stream>>>(
      q, w, heads, dim, keys, n_keys, q_pos, ratio, scale, scores);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
