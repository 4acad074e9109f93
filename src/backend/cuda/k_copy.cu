// Many device-to-device copies in one launch (Backend::CopyDeviceMany): blockIdx.y picks the
// copy, blocks along x stride over it; 16-byte moves when both ends and the length allow,
// else 4-byte, else bytes.
#include <cstdint>

#include "backend/cuda/kernels_copy.h"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kCopyThreads = 256;

__global__ void __launch_bounds__(kCopyThreads) CopyManyKernel(const CopyDesc* descs) {
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

}  // namespace

cudaError_t CopyMany(const CopyDesc* device_descs, int64_t n, int64_t max_bytes,
                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  if (n > 65535) return cudaErrorInvalidValue;
  // Enough blocks along x for the largest copy (64 bytes per thread per pass), at most 64.
  int64_t blocks = (max_bytes / 64 + kCopyThreads - 1) / kCopyThreads;
  blocks = blocks < 1 ? 1 : (blocks > 64 ? 64 : blocks);
  CopyManyKernel<<<dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(n)), kCopyThreads, 0,
                   stream>>>(device_descs);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
