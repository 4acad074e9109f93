// Selection kernels: per-row top-k (11-bit radix select + unordered compaction + bitonic
// sort of the selected (key, id) pairs), candidate-block scores / marking, and the
// sqrtsoftplus MoE router.
//
// Order contract (as the CPU reference's partial_sort): larger value first, equal values by
// lower index; -0.0 and +0.0 are equal; slots whose value is -inf, and slots beyond
// min(k, n), hold -1. The router orders the same way (its NaN scores rank below -inf, see
// RouteKey).
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kTopKThreads = 1024;
constexpr int kTopKWarps = kTopKThreads / 32;
constexpr int kRadixBins = 2048;  // 11-bit digits: passes over bits 31..21, 20..10, 9..0
constexpr int kBinsPerThread = kRadixBins / kTopKThreads;
constexpr int kThreads = 256;
constexpr int kRouteThreads = 256;
constexpr unsigned kFullWarp = 0xffffffffu;
constexpr uint32_t kNoDigit = 0xffffffffu;  // lanes that count nothing this radix pass
static_assert(kTopKWarps == 32, "the warp-level scans assume 32 warps per TopK block");
static_assert(kRadixBins % kTopKThreads == 0, "each thread owns whole radix bins");

// Order-preserving map float -> uint32 (larger float, larger key); -0.0 maps as +0.0.
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) == 0) bits = 0;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// (key, id) packed so that a larger pair comes first in the output order: key descending,
// then id ascending. Every real pair is > 0 (the low word is ~id >= 2^31), so 0 pads.
__device__ __forceinline__ uint64_t PackPair(uint32_t key, int64_t id) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
__device__ __forceinline__ uint32_t PairKey(uint64_t p) { return static_cast<uint32_t>(p >> 32); }
__device__ __forceinline__ int32_t PairId(uint64_t p) {
  return static_cast<int32_t>(~static_cast<uint32_t>(p));
}

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

__device__ float Softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// --- MoE router -----------------------------------------------------------------------
// Every router kernel computes s = sqrt(softplus(logit)) with the same device code, selects
// by the key RouteKey(s + bias, expert) -- one 64-bit compare per step: larger biased score
// first, equal scores by lower expert id, -0.0 == +0.0, NaN below -inf (NaNs by id) -- and
// sums the picked s in pick order. Hence identical ids and bitwise identical weights whichever
// kernel runs (batch invariance across the dispatch's T thresholds).

// The selection key of expert `id` with biased score v; every key is > 0 (its low word is
// ~id >= 2^31), so 0 pads and marks taken slots.
__device__ __forceinline__ uint64_t RouteKey(float v, int32_t id) {
  return PackPair(isnan(v) ? 0u : OrderedKey(v), id);
}

__device__ __forceinline__ uint64_t MaxKey(uint64_t a, uint64_t b) { return a < b ? b : a; }

// The weight of a pick with value s, given the sum of the k picked s in pick order.
__device__ __forceinline__ float RouteWeight(float s, float sum, int64_t k, bool renormalise,
                                             float scale) {
  return (renormalise && k > 1) ? s / (sum + 1e-20f) * scale : s * scale;
}

// One block per token: k rounds of block arg-max of the keys over s + bias (shared memory).
// Any n_experts <= kMaxRouteExperts and k <= 64.
__global__ void __launch_bounds__(kRouteThreads)
    RouteKernel(const float* logits, const float* bias, int64_t n_experts, int64_t k,
                bool renormalise, float scale, int32_t* experts, float* weights) {
  pdl::WaitThenAllowNext();
  extern __shared__ float smem[];
  float* s = smem;                   // [n_experts]
  float* biased = smem + n_experts;  // [n_experts] s + bias (selection only)
  __shared__ uint64_t best_key[kRouteThreads / 32];
  __shared__ int32_t picked[64];
  const int64_t t = blockIdx.x;
  for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) {
    s[e] = sqrtf(Softplus(logits[t * n_experts + e]));
    biased[e] = s[e] + (bias ? bias[e] : 0.0f);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t round = 0; round < k; ++round) {
    uint64_t best = 0;
    for (int64_t e = threadIdx.x; e < n_experts; e += blockDim.x) {
      bool taken = false;
      for (int64_t r = 0; r < round; ++r) taken |= picked[r] == e;
      if (!taken) best = MaxKey(best, RouteKey(biased[e], static_cast<int32_t>(e)));
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      best = MaxKey(best, __shfl_xor_sync(kFullWarp, best, offset));
    }
    if (lane == 0) best_key[warp] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kRouteThreads / 32; ++w) best = MaxKey(best, best_key[w]);
      picked[round] = PairId(best);  // k <= n_experts: a real key
    }
    __syncthreads();
  }
  if (threadIdx.x != 0) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += s[picked[i]];
  for (int64_t i = 0; i < k; ++i) {
    experts[t * k + i] = picked[i];
    weights[t * k + i] = RouteWeight(s[picked[i]], sum, k, renormalise, scale);
  }
}

// Experts per lane of RouteWarpKernel (n_experts <= 32 * kRouteWarpPerLane).
constexpr int kRouteWarpPerLane = 16;
constexpr int kRouteWarpThreads = 128;  // 4 tokens per block
constexpr int kRouteWarpMaxK = 32;

// RouteKernel for n_experts <= 32 * kRouteWarpPerLane and k <= kRouteWarpMaxK, one warp per
// token with no block barriers (the many-token path): lane l holds experts l, l + 32, ..
// (s and the key in registers); each round is a register max over the lane's keys + a 5-step
// shuffle max, after which every lane holds the same winner; its owner lane marks it taken
// and records the pick.
__global__ void __launch_bounds__(kRouteWarpThreads)
    RouteWarpKernel(const float* logits, const float* bias, int64_t T, int64_t n_experts, int64_t k,
                    bool renormalise, float scale, int32_t* experts, float* weights) {
  pdl::WaitThenAllowNext();
  __shared__ float picked_s[kRouteWarpThreads / 32][kRouteWarpMaxK];
  __shared__ int32_t picked_id[kRouteWarpThreads / 32][kRouteWarpMaxK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kRouteWarpThreads / 32) + warp;
  if (t >= T) return;  // whole warps leave
  float s[kRouteWarpPerLane], b[kRouteWarpPerLane], raw[kRouteWarpPerLane];
  uint64_t keys[kRouteWarpPerLane];
#pragma unroll
  for (int q = 0; q < kRouteWarpPerLane; ++q) {
    const int64_t e = lane + 32 * q;
    raw[q] = e < n_experts ? __ldg(logits + t * n_experts + e) : 0.0f;
    b[q] = e < n_experts && bias ? __ldg(bias + e) : 0.0f;
  }
#pragma unroll
  for (int q = 0; q < kRouteWarpPerLane; ++q) {
    const int32_t e = lane + 32 * q;
    s[q] = sqrtf(Softplus(raw[q]));
    keys[q] = e < n_experts ? RouteKey(s[q] + b[q], e) : 0;
  }
  unsigned taken = 0;  // bit q: expert lane + 32 q already picked
  for (int64_t round = 0; round < k; ++round) {
    uint64_t best = 0;
#pragma unroll
    for (int q = 0; q < kRouteWarpPerLane; ++q) {
      best = MaxKey(best, (taken >> q & 1u) ? uint64_t{0} : keys[q]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      best = MaxKey(best, __shfl_xor_sync(kFullWarp, best, offset));
    }
    const int32_t id = PairId(best);  // k <= n_experts: a real key
    if ((id & 31) == lane) {
      const int q = id >> 5;
      float sv = 0.0f;
#pragma unroll
      for (int r = 0; r < kRouteWarpPerLane; ++r) sv = r == q ? s[r] : sv;
      taken |= 1u << q;
      picked_s[warp][round] = sv, picked_id[warp][round] = id;
    }
  }
  __syncwarp();
  if (lane >= k) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += picked_s[warp][i];
  experts[t * k + lane] = picked_id[warp][lane];
  weights[t * k + lane] = RouteWeight(picked_s[warp][lane], sum, k, renormalise, scale);
}

// RouteSplitKernel limits: one thread per expert (at most 16 warps), k <= kRouteSplitMaxK,
// and T <= kRouteSplitMaxT (beyond, the one-warp-per-token kernel does less work per token).
constexpr int kRouteSplitMaxExperts = 512;
constexpr int kRouteSplitMaxK = 8;
constexpr int64_t kRouteSplitMaxT = 256;
static_assert(kRouteSplitMaxK * 4 == 32, "RouteSplitKernel ranks each head on 4 lanes");
static_assert(kRouteSplitMaxK % 2 == 0, "RouteSplitKernel counts heads in pairs");

// Sorts the 32 keys of a warp descending (lane 0 gets the largest): the bitonic network of
// BitonicSortDescendingInRegisters for 32 elements, 15 shuffle compare-exchange stages.
__device__ __forceinline__ uint64_t WarpSortDescending(uint64_t v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int size = 2; size <= 32; size <<= 1) {
    const bool descending = (lane & size) == 0;
#pragma unroll
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      const uint64_t o = __shfl_xor_sync(kFullWarp, v, stride);
      const bool keep_max = ((lane & stride) == 0) == descending;
      v = keep_max ? MaxKey(v, o) : (v < o ? v : o);
    }
  }
  return v;
}

// The low-latency router (few tokens): one block per token, thread e owns expert e (blockDim
// = n_experts rounded up to warps). Softplus runs once per thread; each warp sorts its 32 keys
// (so lane j holds the warp's j-th largest) and publishes its kRouteSplitMaxK largest, the
// heads; each warp ranks its first k heads (4 lanes per head). The global rank of a head c is the
// number of published keys greater than c: if c is among the k largest, every larger key is within
// the k largest of its own warp, so published, and the count is exact; otherwise either every
// larger key is published (count >= k) or one is not, and then its warp publishes kRouteSplitMaxK
// >= k keys above it (count >= k again). Keys are distinct, so the k heads of rank < k fill the k
// pick slots, one each.
__global__ void __launch_bounds__(kRouteSplitMaxExperts)
    RouteSplitKernel(const float* logits, const float* bias, int64_t n_experts, int64_t k,
                     bool renormalise, float scale, int32_t* experts, float* weights) {
  pdl::WaitThenAllowNext();
  constexpr int kMaxWarps = kRouteSplitMaxExperts / 32;
  __shared__ __align__(16) uint64_t heads[kMaxWarps][kRouteSplitMaxK];  // per warp, descending
  __shared__ float picked_s[kRouteSplitMaxK];
  __shared__ int32_t picked_id[kRouteSplitMaxK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = static_cast<int>(blockDim.x >> 5);
  const int64_t t = blockIdx.x;
  const int32_t e = static_cast<int32_t>(threadIdx.x);
  float s = 0.0f;
  uint64_t key = 0;  // pad: below every real key
  if (e < n_experts) {
    const float x = __ldg(logits + t * n_experts + e);
    const float b = bias ? __ldg(bias + e) : 0.0f;
    s = sqrtf(Softplus(x));
    key = RouteKey(s + b, e);
  }
  key = WarpSortDescending(key);
  // The s of the expert whose key this lane now holds (its owner is a lane of this warp).
  const float key_s = __shfl_sync(kFullWarp, s, PairId(key) & 31);
  if (lane < kRouteSplitMaxK) heads[warp][lane] = key;
  // Lane l ranks head l / 4 of its warp against the heads of warps l % 4, l % 4 + 4, ..;
  // the 4 partial counts are summed by two shuffles.
  const int head = lane >> 2, part = lane & 3;
  const uint64_t cand = __shfl_sync(kFullWarp, key, head);
  const float cand_s = __shfl_sync(kFullWarp, key_s, head);
  __syncthreads();
  int rank_even = 0, rank_odd = 0;  // two chains of adds instead of one
  for (int w = part; w < n_warps; w += 4) {
#pragma unroll
    for (int j = 0; j < kRouteSplitMaxK; j += 2) {
      rank_even += heads[w][j] > cand ? 1 : 0;
      rank_odd += heads[w][j + 1] > cand ? 1 : 0;
    }
  }
  int rank = rank_even + rank_odd;
  rank += __shfl_xor_sync(kFullWarp, rank, 1);
  rank += __shfl_xor_sync(kFullWarp, rank, 2);
  if (part == 0 && head < k && rank < k) picked_s[rank] = cand_s, picked_id[rank] = PairId(cand);
  __syncthreads();
  if (threadIdx.x >= k) return;
  float sum = 0.0f;
  for (int64_t i = 0; i < k; ++i) sum += picked_s[i];
  experts[t * k + threadIdx.x] = picked_id[threadIdx.x];
  weights[t * k + threadIdx.x] = RouteWeight(picked_s[threadIdx.x], sum, k, renormalise, scale);
}

// Whether RouteSqrtSoftplus may take RouteSplitKernel: DEEPINFER_CUDA_ROUTE_SPLIT=0 in the
// environment (read once) keeps the one-warp-per-token kernel at every T, for A/B timing.
// Both give identical outputs.
bool RouteSplitEnabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("DEEPINFER_CUDA_ROUTE_SPLIT");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
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

cudaError_t RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T, int64_t n_experts,
                              int64_t k, bool renormalise, float scale, int32_t* experts,
                              float* weights, cudaStream_t stream) {
  if (T <= 0 || k <= 0) return cudaSuccess;
  if (n_experts > kMaxRouteExperts || k > 64 || k > n_experts) return cudaErrorInvalidValue;
  if (T <= kRouteSplitMaxT && n_experts <= kRouteSplitMaxExperts && k <= kRouteSplitMaxK &&
      RouteSplitEnabled()) {
    const unsigned threads = static_cast<unsigned>((n_experts + 31) / 32 * 32);
    pdl::Launch(RouteSplitKernel, static_cast<unsigned>(T), threads, 0, stream, logits, bias,
                n_experts, k, renormalise, scale, experts, weights);
    return cudaGetLastError();
  }
  if (n_experts <= 32 * kRouteWarpPerLane && k <= kRouteWarpMaxK) {
    const int per_block = kRouteWarpThreads / 32;
    pdl::Launch(RouteWarpKernel, static_cast<unsigned>((T + per_block - 1) / per_block),
                kRouteWarpThreads, 0, stream, logits, bias, T, n_experts, k, renormalise, scale,
                experts, weights);
    return cudaGetLastError();
  }
  const size_t smem = 2 * static_cast<size_t>(n_experts) * sizeof(float);
  if (smem > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(
        RouteKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  pdl::Launch(RouteKernel, static_cast<unsigned>(T), kRouteThreads, smem, stream, logits, bias,
              n_experts, k, renormalise, scale, experts, weights);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels
