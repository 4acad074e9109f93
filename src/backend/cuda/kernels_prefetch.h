// L2 prefetch of weights ahead of their use (k_prefetch.cu): Backend::PrefetchWeights.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kernels {

// Byte ranges of one prefetch launch.
inline constexpr int kMaxPrefetchRanges = 8;
// Bytes one cp.async.bulk.prefetch.L2 instruction asks for (one thread's request).
inline constexpr int64_t kPrefetchChunkBytes = 16 * 1024;

struct PrefetchRange {
  const void* base = nullptr;  // device memory
  int64_t bytes = 0;
};

// Asks the L2 cache to fetch `ranges` (device memory that no kernel writes while the prefetch
// may run: weights) without waiting for them: the kernel issues its prefetches before its
// programmatic-dependent-launch wait, so they overlap the previous kernel, and then only waits
// for the previous kernel and lets the next one start. Reads nothing into registers and writes
// nothing, so no result depends on it. Each range is shrunk to its 16-byte aligned interior
// (cp.async.bulk.prefetch.L2's contract). `evict_last`: the prefetched lines carry the
// evict-last L2 policy (kept over normally loaded lines) instead of the default.
// At most kMaxPrefetchRanges ranges (n in 0..kMaxPrefetchRanges; n = 0 launches nothing).
cudaError_t PrefetchL2(const PrefetchRange* ranges, int n, bool evict_last, cudaStream_t stream);

// Prefetch instructions PrefetchL2 issues for `ranges` (kPrefetchChunkBytes each, the last of
// a range shorter); for tests.
int64_t PrefetchL2Requests(const PrefetchRange* ranges, int n);

}  // namespace deepinfer::backend::cuda::kernels
