// Sparse attention for prefill (many tokens) in FP8-activation mode (kernels_attn_prefill.h).
// (Being written.)
#include "backend/cuda/kernels_attn_mma.h"
