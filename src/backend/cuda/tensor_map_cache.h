// The process-wide cache of encoded TMA tensor maps for the TMA-fed decode Linear
// (k_linear_bulk.cu): one CUtensorMap per BulkTensorView (kernels_bulk.h), encoded with the
// driver's cuTensorMapEncodeTiled reached through the runtime (the target does not link
// libcuda). Host code only.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/kernels_bulk.h"

namespace deepinfer::backend::cuda::kernels {

// Bytes of one encoded map (sizeof(CUtensorMap)).
inline constexpr int kTensorMapBytes = 128;

// Writes the map of `view` (uint8 elements, no interleave, 128-byte swizzle, L2 promotion
// 256 B, no OOB fill) into map[0 .. kTensorMapBytes), encoding it on first use. A view the
// driver rejects is remembered (not retried) and gives cudaErrorInvalidValue;
// cudaErrorNotSupported when the driver has no cuTensorMapEncodeTiled. Thread-safe.
cudaError_t EncodeBulkTensorMap(const BulkTensorView& view, void* map);

}  // namespace deepinfer::backend::cuda::kernels
