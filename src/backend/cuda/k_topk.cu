// Selection kernels: per-row top-k (11-bit radix select + unordered compaction + bitonic
// sort of the selected (key, id) pairs) and candidate-block scores / marking. The MoE router
// is in k_route.cu; both use the keys of select_keys.cuh.
//
// Order contract (as the CPU reference's partial_sort): larger value first, equal values by
// lower index; -0.0 and +0.0 are equal; slots whose value is -inf, and slots beyond
// min(k, n), hold -1. The router orders the same way (its NaN scores rank below -inf, see
// RouteKey in k_route.cu).
#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/select_keys.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kTopKThreads = 1024;
constexpr int kTopKWarps = kTopKThreads / 32;
constexpr int kRadixBins = 2048;  // 11-bit digits: passes over bits 31..21, 20..10, 9..0
constexpr int kBinsPerThread = kRadixBins / kTopKThreads;
constexpr int kThreads = 256;
constexpr uint32_t kNoDigit = 0xffffffffu;  // lanes that count nothing this radix pass
static_assert(kTopKWarps == 32, "the warp-level scans assume 32 warps per TopK block");
static_assert(kRadixBins % kTopKThreads == 0, "each thread owns whole radix bins");

// Shared state of one TopKKernel block.
struct TopKShared {
  // The radix passes' histograms alternate: passes 0 and 2 count in hist, pass 1 in hist_next.
  uint32_t hist[kRadixBins];
  union {
    uint64_t sel[kMaxTopK];  // after the passes: the selected pairs (unordered, then sorted)
    uint32_t hist_next[kRadixBins];  // during the passes
  };
  int warp_scratch[kTopKWarps];
  int found_bin, found_above, found_count;
  int taken;  // pairs written to sel so far
};

// One radix pass's bin choice over `hist`. Bins are walked from the top: thread t owns bins
// kRadixBins-1-t*kBinsPerThread downwards. Finds the bin where the running count from the
// top first reaches `remaining` (1 <= remaining <= sum of hist); every thread gets the bin,
// the count strictly above it and its own count. Two barriers: after the per-warp totals
// (every warp then scans all 32 itself) and after the bin is found.
__device__ void FindRadixBin(TopKShared& sh, const uint32_t* hist, int remaining, int* bin,
                             int* above, int* count) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int top = kRadixBins - 1 - static_cast<int>(threadIdx.x) * kBinsPerThread;
  int local = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) local += static_cast<int>(hist[top - j]);
  int inclusive = local;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int v = __shfl_up_sync(kFullWarp, inclusive, offset);
    if (lane >= offset) inclusive += v;
  }
  if (lane == 31) sh.warp_scratch[warp] = inclusive;
  __syncthreads();
  const int total = sh.warp_scratch[lane];  // kTopKWarps == 32
  int scan = total;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int v = __shfl_up_sync(kFullWarp, scan, offset);
    if (lane >= offset) scan += v;
  }
  const int warps_above = __shfl_sync(kFullWarp, scan - total, warp);  // exclusive over warps
  int run = warps_above + inclusive - local;  // count above this thread's bins
  if (run < remaining && run + local >= remaining) {
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int h = static_cast<int>(hist[top - j]);
      if (run + h >= remaining) {
        sh.found_bin = top - j, sh.found_above = run, sh.found_count = h;
        break;
      }
      run += h;
    }
  }
  __syncthreads();
  *bin = sh.found_bin, *above = sh.found_above, *count = sh.found_count;
}

// Appends the pairs of the lanes with `take` set to sh.sel (one shared atomic per warp).
// Every lane of the warp must call it.
__device__ __forceinline__ void AppendPairs(TopKShared& sh, bool take, uint32_t key, int64_t id) {
  const unsigned ballot = __ballot_sync(kFullWarp, take);
  if (ballot == 0) return;
  const int lane = threadIdx.x & 31;
  int base = 0;
  if (lane == 0) base = atomicAdd(&sh.taken, __popc(ballot));
  base = __shfl_sync(kFullWarp, base, 0);
  const int slot = base + __popc(ballot & ((1u << lane) - 1u));
  if (take && slot < kMaxTopK) sh.sel[slot] = PackPair(key, id);
}

// Sorts sh.sel[0, p) descending (p a power of two <= kMaxTopK). Ends with a barrier.
__device__ void BitonicSortDescending(TopKShared& sh, int p) {
  for (int size = 2; size <= p; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int t = threadIdx.x; t < (p >> 1); t += blockDim.x) {
        const int lo = 2 * t - (t & (stride - 1));
        const int hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const uint64_t a = sh.sel[lo], b = sh.sel[hi];
        if ((a < b) == descending && a != b) sh.sel[lo] = b, sh.sel[hi] = a;
      }
      __syncthreads();
    }
  }
}

// Slot of element e in the padded sort scratch: one pad slot per 32 elements, so that the
// transposed accesses of BitonicSortDescendingInRegisters (elements 32 apart on the lanes of
// a half-warp) hit distinct banks.
__device__ __forceinline__ int SortScratchSlot(int e) { return e + (e >> 5); }
static_assert(2 * kTopKThreads + kTopKThreads / 32 <= kMaxTopK,
              "the sort scratch lies in sh.sel beyond the first kTopKThreads pairs");

// Sorts the p (a power of two <= blockDim.x) pairs sh.sel[0, p) descending and returns
// pair threadIdx.x of the sorted order (0 for threads >= p). Thread i holds element i in a
// register and the compare-exchange stages of stride < 32 run on warp shuffles. For the
// stages of stride >= 32 of a merge size >= 64 the elements are transposed through shared
// memory (p = 32 << h: element (x << 5) | y goes to thread (y << h) | x), which turns those
// strides into shuffles across lanes 1 << (log2(stride) - 5) apart, and transposed back:
// two barriers per merge size (a 512-element sort: 9 barriers, 14 before; 1024: 11, was 21).
// The network is BitonicSortDescending's. sh.sel[0, p) is only read; the scratch is
// sh.sel[kTopKThreads, ..), each of its slots written and read by one thread between two
// barriers. Every thread must call.
__device__ uint64_t BitonicSortDescendingInRegisters(TopKShared& sh, int p) {
  const int i = threadIdx.x;
  __syncthreads();
  uint64_t v = i < p ? sh.sel[i] : 0;
  uint64_t* scratch = sh.sel + kTopKThreads;
  int h = 0;
  while ((32 << h) < p) ++h;
  const int transposed = ((i & ((1 << h) - 1)) << 5) | (i >> h);  // element held when transposed
  for (int size = 2; size <= p; size <<= 1) {
    if (size >= 64) {  // strides size/2 .. 32 in the transposed layout
      if (i < p) scratch[SortScratchSlot(i)] = v;
      __syncthreads();
      if (i < p) v = scratch[SortScratchSlot(transposed)];
      const bool descending = (transposed & size) == 0;
      for (int stride = size >> 1; stride >= 32; stride >>= 1) {
        const uint64_t o = __shfl_xor_sync(kFullWarp, v, stride >> 5);
        const bool keep_max = ((transposed & stride) == 0) == descending;
        v = keep_max ? (v > o ? v : o) : (v < o ? v : o);
      }
      if (i < p) scratch[SortScratchSlot(transposed)] = v;
      __syncthreads();
      if (i < p) v = scratch[SortScratchSlot(i)];
    }
    // Strides 16 .. 1: the lower index of a pair keeps the larger value iff descending.
    const bool descending = (i & size) == 0;
    for (int stride = (size >> 1) < 16 ? (size >> 1) : 16; stride > 0; stride >>= 1) {
      const uint64_t o = __shfl_xor_sync(kFullWarp, v, stride);
      const bool keep_max = ((i & stride) == 0) == descending;
      v = keep_max ? (v > o ? v : o) : (v < o ? v : o);
    }
  }
  return v;
}

// Keys per lane loaded together by ForSegment<0>.
constexpr int kTopKLoadBatch = 8;

// Keys of one warp segment [seg_begin, seg_end): f(i, valid, key) for i = seg_begin + lane,
// + 32, .. in this order (warp-uniform trip count). kCached > 0: the keys come from this
// thread's registers `cached` (loaded once per row); 0: from global memory.
template <int kCached, typename F>
__device__ __forceinline__ void ForSegment(const float* s, int64_t seg_begin, int64_t seg_end,
                                           const uint32_t* cached, F&& f) {
  const int lane = threadIdx.x & 31;
  if constexpr (kCached > 0) {
#pragma unroll
    for (int q = 0; q < kCached; ++q) {
      const int64_t base = seg_begin + 32 * q;
      if (base >= seg_end) break;
      f(base + lane, base + lane < seg_end, cached[q]);
    }
  } else {
    // Loads kTopKLoadBatch keys per lane at once, then calls f on them in index order: one
    // global-memory latency per batch instead of one per key (f's warp votes and shared
    // atomics otherwise keep the next load from issuing early).
    (void)cached;
    for (int64_t batch = seg_begin; batch < seg_end; batch += 32 * kTopKLoadBatch) {
      uint32_t keys[kTopKLoadBatch];
#pragma unroll
      for (int q = 0; q < kTopKLoadBatch; ++q) {
        const int64_t i = batch + 32 * q + lane;
        keys[q] = i < seg_end ? OrderedKey(__ldg(s + i)) : 0u;
      }
#pragma unroll
      for (int q = 0; q < kTopKLoadBatch; ++q) {
        const int64_t base = batch + 32 * q;
        if (base >= seg_end) break;
        f(base + lane, base + lane < seg_end, keys[q]);
      }
    }
  }
}

// Keys per thread of a register-held TopK row: n <= kTopKThreads * kTopKCachedKeys, or
// kTopKCachedKeysLarge for the longer rows (the indexer's decode rows up to 16K entries).
constexpr int kTopKCachedKeys = 4;
constexpr int kTopKCachedKeysLarge = 16;
// Rows up to which TopK takes kTopKCachedKeysLarge: its 64 registers per thread fit one block
// per SM (the others' 32 fit two), which costs throughput only once rows outnumber SMs. The
// variants differ only in where a key is read from, so their outputs are identical.
constexpr int64_t kTopKFewRows = 128;

// One block of kTopKThreads per row. Writes the ids of the k_eff = min(k, n) largest
// entries in order to idx[row, 0..k_eff), -1 for -inf values and for slots k_eff..k.
// Warp w owns the index segment [w * seg, (w + 1) * seg); with kCached > 0 its keys are
// loaded once into registers and every pass reads them there.
//
// 1. Radix select, 11 bits per pass from the top: keeps a key prefix (prefix under mask)
//    such that every key whose masked bits exceed it is selected, and of the eq_count keys
//    matching it the `remaining` largest are. Stops early once remaining == eq_count.
// 2. Compaction, unordered (sorted later): the keys above the prefix, plus the keys equal
//    to it -- all of them, or (prefix fully resolved) the `remaining` of lowest index,
//    found by a per-warp-segment count in index order.
// 3. Bitonic sort of the k_eff packed (key, id) pairs; write ids.
template <int kCached>
__global__ void __launch_bounds__(kTopKThreads)
    TopKKernel(const float* scores, int64_t n, int64_t k, int32_t* idx) {
  pdl::WaitThenAllowNext();
  __shared__ TopKShared sh;
  const float* s = scores + static_cast<int64_t>(blockIdx.x) * n;
  int32_t* out = idx + static_cast<int64_t>(blockIdx.x) * k;
  const int k_eff = static_cast<int>(k < n ? k : n);
  for (int64_t i = k_eff + threadIdx.x; i < k; i += blockDim.x) out[i] = -1;
  if (k_eff <= 0) return;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t seg = ((n + kTopKWarps - 1) / kTopKWarps + 31) / 32 * 32;
  const int64_t seg_begin = warp * seg < n ? warp * seg : n;
  const int64_t seg_end = seg_begin + seg < n ? seg_begin + seg : n;
  uint32_t cached[kCached > 0 ? kCached : 1];
#pragma unroll
  for (int q = 0; q < kCached; ++q) {
    const int64_t i = seg_begin + 32 * q + lane;
    cached[q] = i < seg_end ? OrderedKey(__ldg(s + i)) : 0u;
  }

  // 1. Radix select.
  uint32_t prefix = 0, mask = 0;
  int remaining = k_eff;
  int64_t eq_count = n;
  if (threadIdx.x == 0) sh.taken = 0;  // the compaction's counter, visible after this barrier
  if (remaining < eq_count) {
    for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) sh.hist[b] = 0;
  }
  __syncthreads();
#pragma unroll 1
  for (int pass = 0; pass < 3 && remaining < eq_count; ++pass) {
    const int shift = pass == 0 ? 21 : (pass == 1 ? 10 : 0);
    const uint32_t digit_mask = pass == 2 ? 0x3FFu : 0x7FFu;
    uint32_t* hist = (pass & 1) ? sh.hist_next : sh.hist;
    // Zero the next pass's histogram while this one counts: its last reads (the previous
    // pass's FindRadixBin) are behind that call's barriers, and the barrier after this count
    // orders the zeros before the next pass's atomics.
    uint32_t* next_hist = (pass & 1) ? sh.hist : sh.hist_next;
    for (int b = threadIdx.x; b < kRadixBins; b += blockDim.x) next_hist[b] = 0;
    // Lanes with the same digit add once (ties are common).
    ForSegment<kCached>(s, seg_begin, seg_end, cached, [&](int64_t, bool valid, uint32_t key) {
      const bool counted = valid && (key & mask) == prefix;
      const uint32_t digit = counted ? (key >> shift) & digit_mask : kNoDigit;
      const unsigned peers = __match_any_sync(kFullWarp, digit);
      if (counted && lane == __ffs(peers) - 1) {
        atomicAdd(&hist[digit], static_cast<uint32_t>(__popc(peers)));
      }
    });
    __syncthreads();
    int bin, above, count;
    FindRadixBin(sh, hist, remaining, &bin, &above, &count);
    prefix |= static_cast<uint32_t>(bin) << shift;
    mask |= digit_mask << shift;
    remaining -= above;
    eq_count = count;
  }
  const bool take_all_equal = remaining == eq_count;

  // 2. Compaction. sh.sel shares storage with sh.hist_next, whose last reads (FindRadixBin)
  // and zeroing (the pass's count phase) precede that call's final barrier.
  int warp_equal = 0;
  ForSegment<kCached>(s, seg_begin, seg_end, cached, [&](int64_t i, bool valid, uint32_t key) {
    const uint32_t masked = key & mask;
    const bool equal = valid && masked == prefix;
    warp_equal += __popc(__ballot_sync(kFullWarp, equal));
    AppendPairs(sh, valid && (masked > prefix || (take_all_equal && equal)), key, i);
  });
  if (!take_all_equal) {
    // The prefix is the full key: take its first `remaining` occurrences in index order.
    if (lane == 0) sh.warp_scratch[warp] = warp_equal;
    __syncthreads();
    if (warp == 0) {
      const int total = sh.warp_scratch[lane];
      int scan = total;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int v = __shfl_up_sync(kFullWarp, scan, offset);
        if (lane >= offset) scan += v;
      }
      sh.warp_scratch[lane] = scan - total;
    }
    __syncthreads();
    int rank = sh.warp_scratch[warp];
    ForSegment<kCached>(s, seg_begin, seg_end, cached, [&](int64_t i, bool valid, uint32_t key) {
      if (rank >= remaining) return;  // warp-uniform
      const bool equal = valid && key == prefix;
      const unsigned ballot = __ballot_sync(kFullWarp, equal);
      const int my_rank = rank + __popc(ballot & ((1u << lane) - 1u));
      AppendPairs(sh, equal && my_rank < remaining, prefix, i);
      rank += __popc(ballot);
    });
  }

  // 3. Sort the k_eff selected pairs (padded with zeros to a power of two) and write ids.
  int p = 1;
  while (p < k_eff) p <<= 1;
  for (int i = k_eff + threadIdx.x; i < p; i += blockDim.x) sh.sel[i] = 0;
  const uint32_t neg_inf_key = OrderedKey(NegInf());
  if (p <= static_cast<int>(blockDim.x)) {
    const uint64_t pair = BitonicSortDescendingInRegisters(sh, p);
    if (static_cast<int>(threadIdx.x) < k_eff) {
      out[threadIdx.x] = PairKey(pair) == neg_inf_key ? -1 : PairId(pair);
    }
    return;
  }
  __syncthreads();
  BitonicSortDescending(sh, p);
  for (int i = threadIdx.x; i < k_eff; i += blockDim.x) {
    const uint64_t pair = sh.sel[i];
    out[i] = PairKey(pair) == neg_inf_key ? -1 : PairId(pair);
  }
}

__global__ void CandidateBlockScoresKernel(const float* scores, int64_t T, int64_t n,
                                           const int32_t* q_pos, int64_t ratio, int64_t block,
                                           float* block_scores) {
  pdl::WaitThenAllowNext();
  const int64_t n_blocks = (n + block - 1) / block;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * n_blocks;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / n_blocks, b = i % n_blocks;
    const int64_t newest = (static_cast<int64_t>(q_pos[t]) + 1) / ratio - 1;
    float mx = NegInf();
    const int64_t end = (b + 1) * block < n ? (b + 1) * block : n;
    for (int64_t g = b * block; g < end; ++g) mx = MaxF(mx, scores[t * n + g]);
    if (newest >= 0 && newest < n && newest / block == b) mx = __int_as_float(0x7f800000);
    block_scores[i] = mx;
  }
}

__global__ void MarkKeptBlocksKernel(const int32_t* kept, int64_t T, int64_t keep, int64_t n,
                                     int64_t block, uint8_t* mask) {
  pdl::WaitThenAllowNext();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < T * keep;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / keep;
    const int64_t b = kept[i];
    if (b < 0) continue;
    const int64_t end = (b + 1) * block < n ? (b + 1) * block : n;
    for (int64_t g = b * block; g < end; ++g) mask[t * n + g] = 1;
  }
}

}  // namespace

cudaError_t TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx,
                 cudaStream_t stream) {
  if (T <= 0 || k <= 0) return cudaSuccess;
  if ((k < n ? k : n) > kMaxTopK) return cudaErrorInvalidValue;
  if (n <= int64_t{kTopKThreads} * kTopKCachedKeys) {
    pdl::Launch(TopKKernel<kTopKCachedKeys>, static_cast<unsigned>(T), kTopKThreads, 0, stream,
                scores, n, k, idx);
  } else if (T <= kTopKFewRows && n <= int64_t{kTopKThreads} * kTopKCachedKeysLarge) {
    pdl::Launch(TopKKernel<kTopKCachedKeysLarge>, static_cast<unsigned>(T), kTopKThreads, 0, stream,
                scores, n, k, idx);
  } else {
    pdl::Launch(TopKKernel<0>, static_cast<unsigned>(T), kTopKThreads, 0, stream, scores, n, k,
                idx);
  }
  return cudaGetLastError();
}

cudaError_t CandidateBlockScores(const float* scores, int64_t T, int64_t n, const int32_t* q_pos,
                                 int64_t ratio, int64_t block, float* block_scores,
                                 cudaStream_t stream) {
  const int64_t total = T * ((n + block - 1) / block);
  if (total <= 0) return cudaSuccess;
  pdl::Launch(CandidateBlockScoresKernel, GridFor(total, kThreads), kThreads, 0, stream, scores, T,
              n, q_pos, ratio, block, block_scores);
  return cudaGetLastError();
}

cudaError_t MarkKeptBlocks(const int32_t* kept, int64_t T, int64_t keep, int64_t n, int64_t block,
                           uint8_t* mask, cudaStream_t stream) {
  if (T * keep <= 0) return cudaSuccess;
  pdl::Launch(MarkKeptBlocksKernel, GridFor(T * keep, kThreads), kThreads, 0, stream, kept, T, keep,
              n, block, mask);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
