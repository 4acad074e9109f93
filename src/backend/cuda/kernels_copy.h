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

// model::Backend::GatherSelectedRows (device arrays; one block per (slot, token)).
cudaError_t GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k, const int64_t* bases,
                               int64_t max_blocks, const int32_t* count, int64_t rows_per_block,
                               int64_t d, float* out, int32_t* remapped, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
