// Elementwise and row-copy kernels: Fill, Add, SwiGLU, masks, token gather/scatter, gated
// pooling, mHC collapse/expand and RoPE. fp32 throughout, same operation order as the CPU
// reference (backend/cpu) so results agree to fp32 rounding. Also the PDL switch of pdl.cuh
// (pdl::Enabled / SetEnabled).
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kThreads = 256;

#define DI_GRID_STRIDE(i, n)                                                \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

__global__ void FillKernel(float* x, int64_t n, float value) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, n) { x[i] = value; }
}

__global__ void AddKernel(const float* a, const float* b, int64_t n, float* y) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, n) { y[i] = a[i] + b[i]; }
}

__global__ void ScaleKernel(float* x, int64_t n, float s) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, n) { x[i] *= s; }
}

__global__ void SwiGluKernel(const float* gate, const float* up, int64_t T, int64_t n, float limit,
                             const float* row_scale, float* h) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, T * n) {
    float v = SwiGluValue(gate[i], up[i], limit);
    if (row_scale) v *= row_scale[i / n];
    h[i] = v;
  }
}

__global__ void ApplyMaskKernel(float* scores, const uint8_t* mask, int64_t count) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, count) {
    if (!mask[i]) scores[i] = -__int_as_float(0x7f800000);
  }
}

__global__ void GatherTokenRowsKernel(const float* x, int64_t ld, const int32_t* rows, int64_t n,
                                      int64_t width, float* out) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, n * width) {
    const int64_t r = i / width, c = i % width;
    out[i] = x[static_cast<int64_t>(rows[r]) * ld + c];
  }
}

// Distinct rows: every (i, c) is an independent read-modify-write.
__global__ void ScatterAddUniqueKernel(const float* v, int64_t n, int64_t width,
                                       const int32_t* rows, float* y, int64_t ld) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, n * width) {
    const int64_t r = i / width, c = i % width;
    y[static_cast<int64_t>(rows[r]) * ld + c] += v[i];
  }
}

// Repeated rows: one thread per column adds the rows in order (deterministic, as the CPU).
__global__ void ScatterAddOrderedKernel(const float* v, int64_t n, int64_t width,
                                        const int32_t* rows, float* y, int64_t ld) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(c, width) {
    for (int64_t r = 0; r < n; ++r) y[static_cast<int64_t>(rows[r]) * ld + c] += v[r * width + c];
  }
}

__global__ void GatedPoolKernel(const float* c, const float* z, int64_t groups, int64_t ratio,
                                int64_t n, float* out) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE(i, groups * n) {
    const int64_t g = i / n, ch = i % n;
    const float* zg = z + g * ratio * n + ch;
    const float* cg = c + g * ratio * n + ch;
    float mx = -__int_as_float(0x7f800000);
    for (int64_t r = 0; r < ratio; ++r) mx = MaxF(mx, zg[r * n]);
    float sum = 0.0f;
    for (int64_t r = 0; r < ratio; ++r) sum += expf(zg[r * n] - mx);
    float acc = 0.0f;
    for (int64_t r = 0; r < ratio; ++r) {
      const float weight = expf(zg[r * n] - mx) / sum;
      acc += weight * cg[r * n];
    }
    out[i] = acc;
  }
}

// The three kernels below are templated on the index type: int32 when every index of the
// call fits (always at decode shapes), which replaces the 64-bit divisions of the index
// decomposition (tens of instructions each) by 32-bit ones. Same float operations either way.
#define DI_GRID_STRIDE_T(Index, i, n)                                              \
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + \
                 static_cast<Index>(threadIdx.x);                                  \
       i < (n); i += static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x))

template <typename Index>
__global__ void HcCollapseKernel(const float* x, const float* pre, Index T, Index hc, Index D,
                                 float* y) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE_T(Index, i, T * D) {
    const Index t = i / D, d = i - t * D;
    const float* xt = x + t * hc * D + d;
    float acc = 0.0f;
    for (Index k = 0; k < hc; ++k) acc += pre[t * hc + k] * xt[k * D];
    y[i] = acc;
  }
}

// One thread owns channel d of all hc streams of token t, so the update is in place.
template <typename Index>
__global__ void HcExpandKernel(const float* y, const float* post, const float* comb, Index T,
                               Index hc, Index D, float* x) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE_T(Index, i, T * D) {
    const Index t = i / D, d = i - t * D;
    float* xt = x + t * hc * D + d;
    const float* c = comb + t * hc * hc;
    float old[kMaxHcExpand];
#pragma unroll
    for (int j = 0; j < kMaxHcExpand; ++j) old[j] = j < hc ? xt[j * D] : 0.0f;
#pragma unroll
    for (int k = 0; k < kMaxHcExpand; ++k) {
      if (k >= hc) break;
      float acc = post[t * hc + k] * y[t * D + d];
#pragma unroll
      for (int j = 0; j < kMaxHcExpand; ++j) {
        if (j < hc) acc += c[j * hc + k] * old[j];
      }
      xt[k * D] = acc;
    }
  }
}

template <typename Index>
__global__ void RopeKernel(float* x, Index rows, Index ld, Index heads, Index head_stride,
                           Index offset, Index n_pairs, const int32_t* pos, const float* inv_freq,
                           bool inverse) {
  pdl::WaitThenAllowNext();
  DI_GRID_STRIDE_T(Index, i, rows * heads * n_pairs) {
    const Index rh = i / n_pairs, pair = i - rh * n_pairs;
    const Index r = rh / heads, h = rh - r * heads;
    const float angle = static_cast<float>(pos[r]) * inv_freq[pair];
    const float c = cosf(angle);
    const float s = inverse ? -sinf(angle) : sinf(angle);
    float* v = x + r * ld + h * head_stride + offset + 2 * pair;
    RotatePair(v[0], v[1], c, s, &v[0], &v[1]);
  }
}

// Whether every index below `extent` (and the grid-stride overshoot) fits in int32.
bool FitsInt32(int64_t extent) { return extent < (int64_t{1} << 30); }

cudaError_t Launched() { return cudaGetLastError(); }

}  // namespace

namespace pdl {
namespace {
// -1: not read yet; 0: off; 1: on.
std::atomic<int> pdl_state{-1};
}  // namespace

bool Enabled() {
  int state = pdl_state.load(std::memory_order_relaxed);
  if (state < 0) {
    const char* env = std::getenv("DEEPINFER_CUDA_PDL");
    state = env != nullptr && std::strcmp(env, "0") == 0 ? 0 : 1;
    int expected = -1;  // a concurrent SetEnabled wins
    if (!pdl_state.compare_exchange_strong(expected, state)) state = expected;
  }
  return state == 1;
}

void SetEnabled(bool on) { pdl_state.store(on ? 1 : 0); }
}  // namespace pdl

cudaError_t Fill(float* x, int64_t n, float value, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  pdl::Launch(FillKernel, GridFor(n, kThreads), kThreads, 0, stream, x, n, value);
  return Launched();
}

cudaError_t Add(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  pdl::Launch(AddKernel, GridFor(n, kThreads), kThreads, 0, stream, a, b, n, y);
  return Launched();
}

cudaError_t Scale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  pdl::Launch(ScaleKernel, GridFor(n, kThreads), kThreads, 0, stream, x, n, s);
  return Launched();
}

cudaError_t SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
                   const float* row_scale, float* h, cudaStream_t stream) {
  if (T * n <= 0) return cudaSuccess;
  pdl::Launch(SwiGluKernel, GridFor(T * n, kThreads), kThreads, 0, stream, gate, up, T, n, limit,
              row_scale, h);
  return Launched();
}

cudaError_t ApplyMask(float* scores, const uint8_t* mask, int64_t count, cudaStream_t stream) {
  if (count <= 0) return cudaSuccess;
  pdl::Launch(ApplyMaskKernel, GridFor(count, kThreads), kThreads, 0, stream, scores, mask, count);
  return Launched();
}

cudaError_t GatherTokenRows(const float* x, int64_t ld, const int32_t* rows, int64_t n,
                            int64_t width, float* out, cudaStream_t stream) {
  if (n * width <= 0) return cudaSuccess;
  pdl::Launch(GatherTokenRowsKernel, GridFor(n * width, kThreads), kThreads, 0, stream, x, ld, rows,
              n, width, out);
  return Launched();
}

cudaError_t ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* rows,
                           bool rows_unique, float* y, int64_t ld, cudaStream_t stream) {
  if (n * width <= 0) return cudaSuccess;
  if (rows_unique) {
    pdl::Launch(ScatterAddUniqueKernel, GridFor(n * width, kThreads), kThreads, 0, stream, v, n,
                width, rows, y, ld);
  } else {
    pdl::Launch(ScatterAddOrderedKernel, GridFor(width, kThreads), kThreads, 0, stream, v, n, width,
                rows, y, ld);
  }
  return Launched();
}

cudaError_t GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio, int64_t n,
                      float* out, cudaStream_t stream) {
  if (groups * n <= 0) return cudaSuccess;
  pdl::Launch(GatedPoolKernel, GridFor(groups * n, kThreads), kThreads, 0, stream, c, z, groups,
              ratio, n, out);
  return Launched();
}

cudaError_t HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D, float* y,
                       cudaStream_t stream) {
  if (T * D <= 0) return cudaSuccess;
  if (FitsInt32(T * hc * D)) {
    pdl::Launch(HcCollapseKernel<int32_t>, GridFor(T * D, kThreads), kThreads, 0, stream, x, pre,
                static_cast<int32_t>(T), static_cast<int32_t>(hc), static_cast<int32_t>(D), y);
  } else {
    pdl::Launch(HcCollapseKernel<int64_t>, GridFor(T * D, kThreads), kThreads, 0, stream, x, pre, T,
                hc, D, y);
  }
  return Launched();
}

cudaError_t HcExpand(const float* y, const float* post, const float* comb, int64_t T, int64_t hc,
                     int64_t D, float* x, cudaStream_t stream) {
  if (T * D <= 0) return cudaSuccess;
  if (hc > kMaxHcExpand) return cudaErrorInvalidValue;
  if (FitsInt32(T * hc * D)) {
    pdl::Launch(HcExpandKernel<int32_t>, GridFor(T * D, kThreads), kThreads, 0, stream, y, post,
                comb, static_cast<int32_t>(T), static_cast<int32_t>(hc), static_cast<int32_t>(D),
                x);
  } else {
    pdl::Launch(HcExpandKernel<int64_t>, GridFor(T * D, kThreads), kThreads, 0, stream, y, post,
                comb, T, hc, D, x);
  }
  return Launched();
}

cudaError_t Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride,
                 int64_t offset, int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                 bool inverse, cudaStream_t stream) {
  const int64_t total = rows * heads * n_pairs;
  if (total <= 0) return cudaSuccess;
  // Largest element offset touched: (rows - 1) * ld + heads * head_stride + offset + 2 * n_pairs.
  if (FitsInt32(total) && FitsInt32(rows * ld + heads * head_stride + offset + 2 * n_pairs)) {
    const auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
    pdl::Launch(RopeKernel<int32_t>, GridFor(total, kThreads), kThreads, 0, stream, x, i32(rows),
                i32(ld), i32(heads), i32(head_stride), i32(offset), i32(n_pairs), pos, inv_freq,
                inverse);
  } else {
    pdl::Launch(RopeKernel<int64_t>, GridFor(total, kThreads), kThreads, 0, stream, x, rows, ld,
                heads, head_stride, offset, n_pairs, pos, inv_freq, inverse);
  }
  return Launched();
}

}  // namespace deepinfer::backend::cuda::kernels
