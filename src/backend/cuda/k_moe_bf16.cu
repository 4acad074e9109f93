// Routed experts at prefill in FP8-activation mode on bf16 tensor cores (kernels_fp8.h).
// (Being written.)
#include "backend/cuda/kernels_fp8.h"
