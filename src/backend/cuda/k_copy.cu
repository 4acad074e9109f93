// Many device-to-device copies in one launch (Backend::CopyDeviceMany): blockIdx.y picks the
// copy, blocks along x stride over it; 16-byte moves when both ends and the length allow,
// else 4-byte, else bytes.
#include <cstdint>

#include "backend/cuda/kernels_copy.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kCopyThreads = 256;

__global__ void __launch_bounds__(kCopyThreads) CopyManyKernel(const CopyDesc* descs) {
  pdl::WaitThenAllowNext();
  const CopyDesc c = descs[blockIdx.y];
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uintptr_t align = reinterpret_cast<uintptr_t>(c.dst) | reinterpret_cast<uintptr_t>(c.src) |
                          static_cast<uintptr_t>(c.bytes);
  if (align % 16 == 0) {
    // kUnroll loads in flight per thread before their stores (one at a time left each
    // thread waiting a full memory round trip per 16 bytes: ~0.7 TB/s on the H200).
    constexpr int kUnroll = 4;
    const int64_t n = c.bytes / 16;
    auto* d = static_cast<uint4*>(c.dst);
    const auto* s = static_cast<const uint4*>(c.src);
    int64_t i = first;
    for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = s[i + u * stride];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) d[i + u * stride] = v[u];
    }
    for (; i < n; i += stride) d[i] = s[i];
  } else if (align % 4 == 0) {
    const int64_t n = c.bytes / 4;
    auto* d = static_cast<uint32_t*>(c.dst);
    const auto* s = static_cast<const uint32_t*>(c.src);
    for (int64_t i = first; i < n; i += stride) d[i] = s[i];
  } else {
    auto* d = static_cast<uint8_t*>(c.dst);
    const auto* s = static_cast<const uint8_t*>(c.src);
    for (int64_t i = first; i < c.bytes; i += stride) d[i] = s[i];
  }
}

constexpr int kGatherThreads = 128;

// Block (s, t): slot s of token t (see GatherSelectedRows).
__global__ void __launch_bounds__(kGatherThreads)
    GatherSelectedRowsKernel(const int32_t* selection, int64_t k, const int64_t* bases,
                             int64_t max_blocks, const int32_t* count, int64_t rows_per_block,
                             int64_t d, float* out, int32_t* remapped) {
  pdl::WaitThenAllowNext();
  const int64_t t = blockIdx.y, s = blockIdx.x, slot = t * k + s;
  const int32_t id = selection[slot];
  const bool valid = id >= 0 && id < count[t] && id / rows_per_block < max_blocks;
  if (threadIdx.x == 0) remapped[slot] = valid ? static_cast<int32_t>(s) : (id < 0 ? -1 : k);
  if (!valid) return;
  const auto* src = reinterpret_cast<const float*>(bases[t * max_blocks + id / rows_per_block]) +
                    (id % rows_per_block) * d;
  float* dst = out + slot * d;
  const bool vec4 = d % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                    reinterpret_cast<uintptr_t>(dst) % 16 == 0;
  if (vec4) {
    for (int64_t i = threadIdx.x; i < d / 4; i += kGatherThreads) {
      reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(src)[i];
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += kGatherThreads) dst[i] = src[i];
  }
}

}  // namespace

cudaError_t GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k, const int64_t* bases,
                               int64_t max_blocks, const int32_t* count, int64_t rows_per_block,
                               int64_t d, float* out, int32_t* remapped, cudaStream_t stream) {
  if (T <= 0 || k <= 0) return cudaSuccess;
  if (T > 65535 || k > 0x7fffffff || rows_per_block <= 0) return cudaErrorInvalidValue;
  pdl::Launch(GatherSelectedRowsKernel, dim3(static_cast<unsigned>(k), static_cast<unsigned>(T)),
              kGatherThreads, 0, stream, selection, k, bases, max_blocks, count, rows_per_block, d,
              out, remapped);
  return cudaGetLastError();
}

cudaError_t CopyMany(const CopyDesc* device_descs, int64_t n, int64_t max_bytes,
                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > 65535) return cudaErrorInvalidValue;
  // Enough blocks along x for the largest copy (64 bytes per thread per pass), at most 64.
  int64_t blocks = (max_bytes / 64 + kCopyThreads - 1) / kCopyThreads;
  blocks = blocks < 1 ? 1 : (blocks > 64 ? 64 : blocks);
  pdl::Launch(CopyManyKernel, dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n)),
              kCopyThreads, 0, stream, device_descs);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
