// Batched device-to-device copies (Backend::CopyDeviceMany) and the selected-entry gather
// (Backend::GatherSelectedRows). Same conventions as kernels.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kernels {

struct CopyDesc {
  void* dst;
  const void* src;
  int64_t bytes;
};

// Runs n copies described by `device_descs` (device memory) in one launch; max_bytes is the
// largest copy (sizes the grid). Destinations must not overlap each other or any source.
cudaError_t CopyMany(const CopyDesc* device_descs, int64_t n, int64_t max_bytes,
                     cudaStream_t stream);

// dst (device) <- `bytes` bytes of page-locked host memory `pinned_src` (cudaHostAlloc: the
// same pointer is valid on the device under unified addressing), by a kernel instead of a
// copy-engine transfer, so that inside a CUDA graph the upload is one more PDL kernel of the
// chain: each thread reads its host bytes (uncached, ld.global.cv) before griddepcontrol.wait,
// i.e. while the previous kernel runs, and writes dst after it. Contract: the host bytes stay
// unchanged from the launch until the kernel has run (the backend's pinned staging, reclaimed
// only after a stream synchronisation), and no kernel writes them. At most kMaxUploadKernelBytes.
// MEASURED (H200, 4-layer decode step at 4k in FP8 mode, ~17-21 uploads a step, memcpy nodes ->
// this kernel, interleaved rounds, ms): B=4 1.87-1.94 -> 1.81-1.85, B=8 2.49-2.52 -> 2.38-2.43,
// B=32 5.12-5.16 -> 5.00-5.07 (runs 197-198); B=1 1.40-1.45 -> 1.41-1.47 (within its noise).
inline constexpr int64_t kMaxUploadKernelBytes = int64_t{64} << 10;
cudaError_t UploadPinned(void* dst, const void* pinned_src, int64_t bytes, cudaStream_t stream);

// model::Backend::GatherSelectedRows (device arrays; one block per (slot, token)).
cudaError_t GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k, const int64_t* bases,
                               int64_t max_blocks, const int32_t* count, int64_t rows_per_block,
                               int64_t d, float* out, int32_t* remapped, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
