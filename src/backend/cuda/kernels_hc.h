// The mHC pre-mix split over several blocks per token (decode: one block per token would
// read the 2 MB fn projection through a single SM). Declared apart from kernels.h only so that
// it could be added while that header was being edited; same conventions.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "model/backend.h"

namespace deepinfer::backend::cuda::kernels {

// Blocks per token HcMixSplit uses for T tokens of hc streams of D.
int64_t HcMixSplits(int64_t T, int64_t hc, int64_t D);
// Same results as HcMix up to fp32 rounding (the rms scale is applied to the summed logits).
// scratch: T * HcMixSplits(T, hc, D) * 25 floats of device memory.
cudaError_t HcMixSplit(const float* x, int64_t T, int64_t hc, int64_t D,
                       const model::HcSiteWeights& w, float norm_eps, float hc_eps,
                       int sinkhorn_iters, float* pre, float* post, float* comb, float* scratch,
                       cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
