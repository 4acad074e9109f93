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

constexpr int kUploadThreads = 128;

// 16 bytes of host memory, fetched again from the host (a cached system-memory line is stale:
// the host rewrites the staging between graph replays).
__device__ __forceinline__ uint4 LoadHost16(const void* p) {
  uint4 r;
  asm volatile("ld.global.cv.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ uint8_t LoadHostByte(const uint8_t* p) {
  uint16_t r;
  asm volatile("ld.global.cv.u8 %0, [%1];" : "=h"(r) : "l"(p));
  return static_cast<uint8_t>(r);
}

// Thread i moves bytes [16 i, 16 i + 16) (a 16-byte load from the 16-byte aligned staging; the
// store in one piece when dst allows, else byte by byte). The loads come before the PDL wait
// (host bytes no kernel writes; kernels_copy.h), the stores after it.
__global__ void __launch_bounds__(kUploadThreads)
    UploadPinnedKernel(uint8_t* dst, const uint8_t* src, int64_t bytes) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kUploadThreads + threadIdx.x;
  const int64_t begin = 16 * i, n = bytes - begin < 16 ? bytes - begin : 16;
  uint4 v = make_uint4(0, 0, 0, 0);
  uint8_t tail[16];
  if (n == 16) {
    v = LoadHost16(src + begin);
  } else if (n > 0) {
#pragma unroll
    for (int b = 0; b < 16; ++b) tail[b] = b < n ? LoadHostByte(src + begin + b) : 0;
  }
  pdl::WaitThenAllowNext();
  if (n <= 0) return;
  if (n == 16 && reinterpret_cast<uintptr_t>(dst + begin) % 16 == 0) {
    *reinterpret_cast<uint4*>(dst + begin) = v;
    return;
  }
  if (n == 16) {
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int b = 0; b < 16; ++b) tail[b] = static_cast<uint8_t>(words[b / 4] >> (8 * (b % 4)));
  }
  for (int b = 0; b < n; ++b) dst[begin + b] = tail[b];
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

cudaError_t UploadPinned(void* dst, const void* pinned_src, int64_t bytes, cudaStream_t stream) {
  if (bytes <= 0) return cudaSuccess;
  if (bytes > kMaxUploadKernelBytes || reinterpret_cast<uintptr_t>(pinned_src) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const int64_t chunks = (bytes + 15) / 16;
  const auto blocks = static_cast<unsigned>((chunks + kUploadThreads - 1) / kUploadThreads);
  return pdl::Launch(UploadPinnedKernel, dim3(blocks), dim3(kUploadThreads), 0, stream,
                     static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(pinned_src), bytes);
}

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
