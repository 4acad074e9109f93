// L2 prefetch of weights (kernels_prefetch.h). Roofline: no bytes move through the SMs; the
// kernel only issues one cp.async.bulk.prefetch.L2 per kPrefetchChunkBytes (2,048 requests
// for a 32 MiB weight), spread over up to one block per SM so that the requests enter the
// memory system from many SMs at once. The L2 (50 MiB on the H200) then holds what a
// following kernel reads, if nothing evicts it first.
#include <cstdint>

#include "backend/cuda/kernels_prefetch.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kPrefetchThreads = 64;
constexpr int kMaxPrefetchBlocks = 132;  // one per H200 SM

// The 16-byte aligned interior [begin, begin + bytes) of each range, and the first request
// index of each range (prefix sums of its requests).
struct PrefetchPlan {
  uint64_t begin[kMaxPrefetchRanges];
  int64_t bytes[kMaxPrefetchRanges];
  int64_t first[kMaxPrefetchRanges + 1];
  int n;
  int evict_last;
};

__device__ __forceinline__ void PrefetchChunk(uint64_t addr, uint32_t bytes, bool evict_last) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (evict_last) {
    asm volatile(
        "{\n\t.reg .b64 policy;\n\t"
        "createpolicy.fractional.L2::evict_last.b64 policy, 1.0;\n\t"
        "cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, policy;\n\t}" ::"l"(addr),
        "r"(bytes)
        : "memory");
  } else {
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(addr), "r"(bytes) : "memory");
  }
#endif
}

// Request q (grid-strided) of range i covers [begin + (q - first[i]) * chunk, ...): issued
// before the PDL wait (the weights do not depend on the previous kernel).
__global__ void __launch_bounds__(kPrefetchThreads)
    PrefetchL2Kernel(const __grid_constant__ PrefetchPlan p) {
  const int64_t total = p.first[p.n];
  int i = 0;
  for (int64_t q = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; q < total;
       q += int64_t{gridDim.x} * blockDim.x) {
    while (q >= p.first[i + 1]) ++i;
    const int64_t offset = (q - p.first[i]) * kPrefetchChunkBytes;
    const int64_t left = p.bytes[i] - offset;
    const int64_t bytes = left < kPrefetchChunkBytes ? left : kPrefetchChunkBytes;
    PrefetchChunk(p.begin[i] + static_cast<uint64_t>(offset), static_cast<uint32_t>(bytes),
                  p.evict_last != 0);
  }
  pdl::WaitThenAllowNext();
}

PrefetchPlan MakePlan(const PrefetchRange* ranges, int n, bool evict_last) {
  PrefetchPlan p{};
  p.n = n;
  p.evict_last = evict_last ? 1 : 0;
  for (int i = 0; i < n; ++i) {
    const auto start = reinterpret_cast<uint64_t>(ranges[i].base);
    const uint64_t end = ranges[i].bytes > 0 ? start + static_cast<uint64_t>(ranges[i].bytes) : 0;
    const uint64_t begin = (start + 15) / 16 * 16, stop = end / 16 * 16;
    p.begin[i] = begin;
    p.bytes[i] = stop > begin ? static_cast<int64_t>(stop - begin) : 0;
    p.first[i + 1] = p.first[i] + (p.bytes[i] + kPrefetchChunkBytes - 1) / kPrefetchChunkBytes;
  }
  return p;
}

}  // namespace

int64_t PrefetchL2Requests(const PrefetchRange* ranges, int n) {
  if (ranges == nullptr || n < 0 || n > kMaxPrefetchRanges) return 0;
  return MakePlan(ranges, n, false).first[n];
}

cudaError_t PrefetchL2(const PrefetchRange* ranges, int n, bool evict_last, cudaStream_t stream) {
  if (n < 0 || n > kMaxPrefetchRanges || (n > 0 && ranges == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const PrefetchPlan p = MakePlan(ranges, n, evict_last);
  const int64_t total = p.first[n];
  if (total == 0) return cudaSuccess;
  const int64_t blocks = (total + kPrefetchThreads - 1) / kPrefetchThreads;
  const int grid = static_cast<int>(blocks < kMaxPrefetchBlocks ? blocks : kMaxPrefetchBlocks);
  return pdl::Launch(PrefetchL2Kernel, dim3(grid), kPrefetchThreads, 0, stream, p);
}

}  // namespace deepinfer::backend::cuda::kernels
