// Expert-major (grouped) routed experts for decode batches (kernels_moe.h).
//
// Roofline (V4.1-Flash: 384 experts, top-6, D 5120, I 2304, MXFP4 experts): one expert is
// w1 + w3 [2304, 5120] and w2 [5120, 2304], each 5.90 MB of e2m1 nibbles + 0.37 MB of
// ue8m0 scales = 18.8 MB per expert. At T = 32 (192 pairs) uniform routing touches about
// 384 * (1 - (1 - 1/384)^192) = 151 distinct experts: 2.84 GB of weights, 0.63 ms at the
// measured 4.5 TB/s HBM ceiling (0.95 ms at the 3 TB/s goal). The token-slot-major path of
// k_moe.cu reads 192 experts (3.61 GB). Activation traffic (x 0.6 MB, h 1.8 MB and the
// per-pair outputs 3.9 MB, each written once and read once) is < 0.5 % of that.
// Issue-rate estimate (not measured): 4.5 TB/s over 132 SMs at ~1.9 GHz is ~34 MXFP4 values
// per SM cycle; the fp32 path (Fp4PairToFloat2 + scale + FMA, DotChunks) costs ~5-6 ALU
// ops per value, so with one pair per expert the tiles may be issue-bound near 3 TB/s
// before HBM-bound. MXFP4 chunks use DotChunksMxFp4Table (table + prmt decode, bitwise the
// same dots): ~3.6 instead of ~5.4 integer ops per value in the dot (nvdisasm), ~10 % fewer
// instructions per tile loop iteration, same spills. Pairs sharing an expert share the
// decode (one decode per chunk feeds every staged pair).
//
// Four launches, grid sizes depending only on T, k, n_experts and the shapes:
//  1. GroupPairs (one block): a stable counting sort of the P = T*k pairs by expert id,
//     computed by ranking (no atomics decide any position): order[] lists the pairs expert
//     by expert, pair indices ascending; group g (the g-th distinct valid expert, ascending
//     id) has expert[g], start[g], count[g]; n_active groups in all. Out-of-range ids set
//     kErrExpertOutOfRange and join no group.
//  2. ExpertTile<gate/up>: block (row tile of I, group slot g < min(P, n_experts)); slots
//     >= n_active exit at once. The block stages the x rows of up to kUpTokens pairs of its
//     group in shared memory and streams its W1/W3 row tile once for all of them (more
//     pairs run as further token passes, which re-read the just-read tile, mostly from L2),
//     writing h[p, r] = silu(min(g, limit)) * clamp(u, -limit, limit) * weights[p].
//  3. ExpertTile<down>: the same over D with W2, writing the per-pair output out[p, D].
//  4. CombineSlots: y[t] = sum over slots i = 0 .. k-1 in order of out[t*k + i] (NaN if
//     any slot's id was out of range).
// Dot products: a lane group of L lanes (L in {32, 16, 8}, chosen from K alone) splits a
// row's 16-byte chunks c = sub, sub + L, ...; each lane accumulates its chunks in order
// (DotChunks), then an xor butterfly over the L lanes. The order depends only on K, never
// on how many pairs share the expert, so results are deterministic and batch-invariant.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using model::WeightFormat;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUpTokens = 2;    // pairs staged at once by a gate/up block (x rows of D)
constexpr int kDownTokens = 2;  // pairs staged at once by a down block (h rows of I)
constexpr int kUpRows = 2;      // rows per lane group per matrix (gate/up: W1 and W3)
constexpr int kDownRows = 4;    // rows per lane group (down: W2)
// Resident tile blocks per SM the register budget is cut for (<= 80 registers; the MXFP4
// kernels spill ~60 bytes at 3, ~250 at 4; at 2 they use ~127 registers and do not spill).
// Memory parallelism: 3 blocks x 8 warps x 32 lanes x 8 loads of 16 bytes = 96 KiB in
// flight per SM.
constexpr int kTileBlocksPerSm = 3;
constexpr int64_t kTargetBlockWeightBytes = 128 * 1024;  // weight bytes a block streams
constexpr int kMaxPassesPerBlock = 8;
constexpr int kGroupThreads = 1024;
constexpr int kMaxPairs = static_cast<int>(kMaxFusedExpertTokens * kMaxFusedExpertSlots);
constexpr int kCombineThreads = 256;
constexpr int64_t kDefaultSharedLimit = 48 * 1024;  // above it the kernel must opt in

// SwiGLU of one gate/up pair (cuda_numerics.cuh) times the routing weight.
__device__ __forceinline__ float SwiGluScaled(float g, float u, float limit, float weight) {
  return SwiGluValue(g, u, limit) * weight;
}

// The grouping in scratch (all int32, device).
struct GroupView {
  int32_t* order;     // [P] pair indices, expert by expert (ascending pair index within)
  int32_t* expert;    // [G] expert id of group g (ascending)
  int32_t* start;     // [G] first position of group g in order
  int32_t* count;     // [G] pairs of group g
  int32_t* n_active;  // [1] groups in use
};

// Scratch layout: h [P, I] f32 | out [P, D] f32 | order [P] | expert, start, count [G] |
// n_active (every part 16-byte aligned).
struct ScratchLayout {
  int64_t h = 0, out = 0, order = 0, expert = 0, start = 0, count = 0, n_active = 0, total = 0;
};

int64_t MaxGroups(int64_t P, int64_t n_experts) { return std::min(P, n_experts); }

ScratchLayout Layout(int64_t T, int64_t k, int64_t D, int64_t I, int64_t n_experts) {
  const int64_t P = T * k, G = MaxGroups(P, n_experts);
  ScratchLayout l;
  ScratchCarver carver;
  l.h = carver.Take(P * I * 4);
  l.out = carver.Take(P * D * 4);
  l.order = carver.Take(P * 4);
  l.expert = carver.Take(G * 4);
  l.start = carver.Take(G * 4);
  l.count = carver.Take(G * 4);
  l.n_active = carver.Take(4);
  l.total = carver.total();
  return l;
}

// --- 1. grouping ---------------------------------------------------------------------

// One block of kGroupThreads. key(p) = experts[p] if valid, else n_experts (sorted last,
// in no group). Pair p goes to position below(p) + within(p) of order, where below counts
// the pairs with a smaller key and within the earlier pairs with the same key: a stable
// sort whose result is fixed by the ids alone. O(P^2 / threads) shared-memory compares
// (P = 192: ~200 per thread).
__global__ void __launch_bounds__(kGroupThreads)
    GroupPairsKernel(const int32_t* experts, int P, int n_experts, GroupView g, int* error_word) {
  pdl::WaitThenAllowNext();
  __shared__ int32_t keys[kMaxPairs];
  __shared__ uint8_t first[kMaxPairs];  // the pair is the first of its (valid) expert
  __shared__ int n_active;
  if (threadIdx.x == 0) n_active = 0;
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    const int32_t e = experts[p];
    const bool valid = e >= 0 && e < n_experts;
    if (!valid) atomicOr(error_word, kErrExpertOutOfRange);
    keys[p] = valid ? e : n_experts;
  }
  __syncthreads();
  int local_active = 0;
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    const int32_t key = keys[p];
    int below = 0, within = 0;
    for (int q = 0; q < P; ++q) {
      const int32_t kq = keys[q];
      below += kq < key;
      within += (kq == key) & (q < p);
    }
    g.order[below + within] = p;
    const bool is_first = within == 0 && key < n_experts;
    first[p] = is_first;
    local_active += is_first;
  }
  if (local_active > 0) atomicAdd(&n_active, local_active);  // a sum: order-independent
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    if (!first[p]) continue;
    const int32_t key = keys[p];
    int below = 0, same = 0, group = 0;
    for (int q = 0; q < P; ++q) {
      const int32_t kq = keys[q];
      below += kq < key;
      same += kq == key;
      group += first[q] & (kq < key);
    }
    g.expert[group] = key;
    g.start[group] = below;
    g.count[group] = same;
  }
  if (threadIdx.x == 0) *g.n_active = n_active;
}

// --- 2./3. expert tiles ------------------------------------------------------------

// Sum over the L lanes of an aligned lane group (xor butterfly: every lane of the group
// gets the same bits).
__device__ __forceinline__ float GroupSum(float v, int lanes) {
  for (int offset = lanes >> 1; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  return v;
}

// Rows of one matrix a block pass computes: kWarps warps x (32 / lanes) lane groups x kRows.
__host__ __device__ constexpr int PassRows(int lanes, int rows) {
  return kWarps * (32 / lanes) * rows;
}

struct TileArgs {
  const ExpertPointers* table;
  GroupView groups;
  const float* in;       // gate/up: x [T, K] (pair p reads row p / in_div); down: h [P, K]
  int64_t in_div;        // gate/up: k; down: 1
  int64_t K, N;          // dot length and output rows (gate/up: D, I; down: I, D)
  int lanes;             // L: lanes sharing one row (32, 16 or 8)
  int passes;            // row passes per block
  const float* weights;  // [P] routing weights (gate/up)
  float limit;           // SwiGLU limit (gate/up)
  float* out;            // gate/up: h [P, I]; down: out [P, D]
};

// Pointers to chunk 0 of kRows consecutive rows r0 .. r0+kRows-1 of a stored [N, K]
// matrix (r0 a multiple of kRows and kRows a divisor of 32, so the rows share one FP8
// block-scale row). Loads then need only 32-bit offsets.
struct RowGroupPtr {
  const uint4* data;
  const uint8_t* scale;
};

template <WeightFormat kFormat>
__device__ __forceinline__ RowGroupPtr RowGroupAt(const void* data, const uint8_t* scale,
                                                  int row_chunks, int64_t r0) {
  RowGroupPtr g;
  g.data = reinterpret_cast<const uint4*>(data) + r0 * row_chunks;
  if constexpr (kFormat == WeightFormat::kMxFp4) {
    g.scale = scale + r0 * row_chunks;  // one scale per 32-value chunk
  } else if constexpr (kFormat == WeightFormat::kFp8Block32) {
    g.scale = scale + (r0 / 32) * (row_chunks / 2);  // K / 32 scale columns
  } else {
    g.scale = nullptr;
  }
  return g;
}

// Chunk c of row r0 + n of a row group (the values LoadRawChunk yields for that chunk).
template <WeightFormat kFormat>
__device__ __forceinline__ RawChunk LoadGroupChunk(const RowGroupPtr& g, int row_chunks, int n,
                                                   int c) {
  RawChunk ch;
  ch.q = __ldg(g.data + n * row_chunks + c);
  if constexpr (kFormat == WeightFormat::kMxFp4) {
    ch.s = E8m0ToF32(__ldg(g.scale + n * row_chunks + c));
  } else if constexpr (kFormat == WeightFormat::kFp8Block32) {
    ch.s = E8m0ToF32(__ldg(g.scale + (c >> 1)));  // 16 values: half a 32-column block
  } else {
    ch.s = 1.0f;
  }
  return ch;
}

// Writes the finished dots of rows r0 .. r0+kRows-1 (those < N) for the n_tok pairs of the
// pass: the SwiGLU products into h (gate/up) or the plain dots into out (down).
template <bool kGateUp, int kRows, int kTok>
__device__ __forceinline__ void WriteOutputs(const TileArgs& a,
                                             const float (&acc)[(kGateUp ? 2 : 1) * kRows][kTok],
                                             const int32_t* pairs, int n_tok, int64_t r0) {
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
    const int64_t r = r0 + n;
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (r >= a.N || t >= n_tok) continue;
      const int64_t p = pairs[t];
      if constexpr (kGateUp) {
        a.out[p * a.N + r] = SwiGluScaled(acc[n][t], acc[kRows + n][t], a.limit, a.weights[p]);
      } else {
        a.out[p * a.N + r] = acc[n][t];
      }
    }
  }
}

// Block (row tile, group slot). kGateUp: W1 and W3 rows with the SwiGLU epilogue; else W2.
template <WeightFormat kFormat, bool kGateUp, int kRows, int kTok>
__global__ void __launch_bounds__(kThreads, kTileBlocksPerSm) ExpertTileKernel(TileArgs a) {
  pdl::WaitThenAllowNext();
  constexpr int kMats = kGateUp ? 2 : 1;
  constexpr int kChunks = kMats * kRows;  // weight chunks a lane holds per step
  constexpr int kStride = PaddedStride(kFormat);
  extern __shared__ float4 shared4[];
  float* xs = reinterpret_cast<float*>(shared4);
  __shared__ int32_t pass_pairs[kTok];
  const int slot = blockIdx.y;
  if (slot >= *a.groups.n_active) return;  // block-uniform
  const int32_t e = a.groups.expert[slot];
  const int32_t start = a.groups.start[slot], count = a.groups.count[slot];
  const ExpertPointers ep = a.table[e];
  const void* data0 = kGateUp ? ep.data[0] : ep.data[1];
  const uint8_t* scale0 = kGateUp ? ep.scale[0] : ep.scale[1];
  const void* data1 = ep.data[2];
  const uint8_t* scale1 = ep.scale[2];

  const int L = a.lanes;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % L, lane_group = lane / L;
  const int pass_rows = PassRows(L, kRows);
  const int64_t tile_row0 = static_cast<int64_t>(blockIdx.x) * a.passes * pass_rows;
  const int64_t group_row0 = (warp * (32 / L) + lane_group) * kRows;
  const int chunks = static_cast<int>(a.K / ChunkValues(kFormat));  // per row
  const int64_t x_stride = PaddedFloats(kFormat, a.K);
  const int token_passes = (count + kTok - 1) / kTok;
  const int segments = token_passes * a.passes;  // (token pass, row pass), row pass inner

  // First row of this lane group in segment s (unclamped: >= N means nothing to write).
  // N % 32 == 0 and kRows | 32: a group is wholly in range or wholly past the end, and a
  // group past the end loads the last kRows rows instead (its dots are dropped).
  auto group_row = [&](int s) { return tile_row0 + (s % a.passes) * pass_rows + group_row0; };
  auto load = [&](RawChunk(&ch)[kChunks], int s, int c) {
    const int64_t r = group_row(s);
    const int64_t r0 = r < a.N ? r : a.N - kRows;
    const RowGroupPtr g0 = RowGroupAt<kFormat>(data0, scale0, chunks, r0);
#pragma unroll
    for (int n = 0; n < kRows; ++n) ch[n] = LoadGroupChunk<kFormat>(g0, chunks, n, c);
    if constexpr (kGateUp) {
      const RowGroupPtr g1 = RowGroupAt<kFormat>(data1, scale1, chunks, r0);
#pragma unroll
      for (int n = 0; n < kRows; ++n) ch[kRows + n] = LoadGroupChunk<kFormat>(g1, chunks, n, c);
    }
  };
  RawChunk cur[kChunks] = {};
  if (sub < chunks) load(cur, 0, sub);  // in flight while the first inputs are staged

  for (int s = 0; s < segments; ++s) {
    const int tp = s / a.passes;
    const int n_tok = min(kTok, count - tp * kTok);
    if (s % a.passes == 0) {       // a new token pass: stage its inputs
      if (s > 0) __syncthreads();  // the previous pass's readers are done with xs
      if (threadIdx.x < n_tok) {
        pass_pairs[threadIdx.x] = a.groups.order[start + tp * kTok + threadIdx.x];
      }
      for (int t = 0; t < n_tok; ++t) {
        const int32_t p = a.groups.order[start + tp * kTok + t];
        StagePadded<kFormat>(a.in + (p / a.in_div) * a.K, a.K, xs + t * x_stride);
      }
      __syncthreads();
    }
    float acc[kChunks][kTok];
#pragma unroll
    for (int n = 0; n < kChunks; ++n) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) acc[n][t] = 0.0f;
    }
    for (int c = sub; c < chunks; c += L) {
      RawChunk next[kChunks] = {};  // the next chunk, or the next segment's first
      if (c + L < chunks) {
        load(next, s, c + L);
      } else if (s + 1 < segments) {
        load(next, s + 1, sub);
      }
      if constexpr (kFormat == WeightFormat::kMxFp4) {  // DotChunks' results, cheaper decode
        DotChunksMxFp4Table<kChunks, kTok>(cur, xs + c * kStride, x_stride, n_tok, acc);
      } else {
        DotChunks<kFormat, kChunks, kTok>(cur, xs + c * kStride, x_stride, n_tok, acc);
      }
#pragma unroll
      for (int n = 0; n < kChunks; ++n) cur[n] = next[n];
    }
#pragma unroll
    for (int n = 0; n < kChunks; ++n) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) acc[n][t] = GroupSum(acc[n][t], L);
    }
    if (sub == 0) WriteOutputs<kGateUp, kRows, kTok>(a, acc, pass_pairs, n_tok, group_row(s));
  }
}

// --- 4. combine ----------------------------------------------------------------------

// y[t, d] = sum over slots i in order of part[(t*k + i), d]; NaN if a slot's id is out of
// range. Block (column vectors, token t): a thread owns one V of columns (V = float4 when
// D % 4 == 0 and part / y are 16-byte aligned, checked by the launch; else float) and issues
// the loads of up to kCombineBatch slots before adding them in slot order, so it keeps several
// loads in flight. The sums are the same fp32 additions in slot order whatever V: bitwise.
constexpr int kCombineBatch = 8;

__device__ __forceinline__ void AddTo(float& a, float b) { a += b; }
__device__ __forceinline__ void AddTo(float4& a, float4 b) {
  a.x += b.x;
  a.y += b.y;
  a.z += b.z;
  a.w += b.w;
}
template <class V>
__device__ __forceinline__ V Filled(float v) {
  if constexpr (sizeof(V) == sizeof(float4)) {
    return make_float4(v, v, v, v);
  } else {
    return v;
  }
}

template <class V>
__global__ void __launch_bounds__(kCombineThreads)
    CombineSlotsKernel(const V* part, const int32_t* experts, int64_t k, int64_t n_experts,
                       int64_t cols, V* y) {
  pdl::WaitThenAllowNext();
  const int64_t t = blockIdx.y;
  const int64_t d = static_cast<int64_t>(blockIdx.x) * kCombineThreads + threadIdx.x;
  if (d >= cols) return;
  bool bad = false;
  V sum = Filled<V>(0.0f);
  for (int64_t i0 = 0; i0 < k; i0 += kCombineBatch) {
    V v[kCombineBatch];
    bool ok[kCombineBatch];
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      const int64_t i = i0 + j;
      const int32_t e = i < k ? experts[t * k + i] : 0;
      ok[j] = i < k && e >= 0 && e < n_experts;
      bad = bad || (i < k && !ok[j]);
      if (ok[j]) v[j] = __ldg(&part[(t * k + i) * cols + d]);
    }
#pragma unroll
    for (int j = 0; j < kCombineBatch; ++j) {
      if (ok[j]) AddTo(sum, v[j]);
    }
  }
  y[t * cols + d] = bad ? Filled<V>(NaNf()) : sum;
}

// --- launch helpers ------------------------------------------------------------------

bool FormatSupported(WeightFormat f) {
  return f == WeightFormat::kMxFp4 || f == WeightFormat::kFp8Block32 || f == WeightFormat::kBF16;
}

// Lanes per row for a dot of `chunks` 16-byte chunks: the fewest idle lane steps, ties to
// more lanes (a function of K alone).
int LanesFor(int64_t chunks) {
  int best = 32;
  int64_t best_waste = (chunks + 31) / 32 * 32 - chunks;
  for (int lanes : {16, 8}) {
    const int64_t waste = (chunks + lanes - 1) / lanes * lanes - chunks;
    if (waste < best_waste) best = lanes, best_waste = waste;
  }
  return best;
}

// Stored bytes of one row of K values (data + scales).
int64_t RowBytes(WeightFormat f, int64_t K) {
  const int64_t data = K / ChunkValues(f) * 16;
  return f == WeightFormat::kMxFp4 ? data + K / 32 : data;
}

int64_t TileSharedBytes(WeightFormat f, int tokens, int64_t K) {
  return tokens * PaddedFloats(f, K) * 4;
}

template <WeightFormat kFormat, bool kGateUp>
cudaError_t LaunchTile(TileArgs a, int64_t max_groups, cudaStream_t stream) {
  constexpr int kRows = kGateUp ? kUpRows : kDownRows;
  constexpr int kTok = kGateUp ? kUpTokens : kDownTokens;
  constexpr int kMats = kGateUp ? 2 : 1;
  a.lanes = LanesFor(a.K / ChunkValues(kFormat));
  const int64_t pass_rows = PassRows(a.lanes, kRows);
  const int64_t pass_bytes = pass_rows * kMats * RowBytes(kFormat, a.K);
  const int64_t row_passes = (a.N + pass_rows - 1) / pass_rows;
  int64_t passes = (kTargetBlockWeightBytes + pass_bytes - 1) / pass_bytes;
  passes = std::max<int64_t>(1, std::min<int64_t>({passes, kMaxPassesPerBlock, row_passes}));
  a.passes = static_cast<int>(passes);
  const int64_t tiles = (row_passes + passes - 1) / passes;
  const int64_t smem = TileSharedBytes(kFormat, kTok, a.K);
  auto* kernel = ExpertTileKernel<kFormat, kGateUp, kRows, kTok>;
  if (smem + 1024 > kDefaultSharedLimit) {  // (+ the static pass_pairs, with margin)
    const cudaError_t e = launch::RaiseMaxDynamicSmem(kernel, static_cast<int>(smem));
    if (e != cudaSuccess) return e;
  }
  const dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(max_groups));
  pdl::Launch(kernel, grid, kThreads, smem, stream, a);
  return cudaGetLastError();
}

template <bool kGateUp>
cudaError_t LaunchTileFor(WeightFormat f, const TileArgs& a, int64_t max_groups,
                          cudaStream_t stream) {
  switch (f) {
    case WeightFormat::kMxFp4:
      return LaunchTile<WeightFormat::kMxFp4, kGateUp>(a, max_groups, stream);
    case WeightFormat::kFp8Block32:
      return LaunchTile<WeightFormat::kFp8Block32, kGateUp>(a, max_groups, stream);
    case WeightFormat::kBF16:
      return LaunchTile<WeightFormat::kBF16, kGateUp>(a, max_groups, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

bool RoutedExpertsGroupedApplicable(WeightFormat up_format, WeightFormat down_format, int64_t D,
                                    int64_t I, int64_t T, int64_t k, int64_t n_experts) {
  return FormatSupported(up_format) && FormatSupported(down_format) && T >= 1 &&
         T <= kMaxGroupedExpertTokens && k >= 1 && k <= kMaxFusedExpertSlots &&
         T * k <= kMaxGroupedExpertPairs && n_experts >= 1 && n_experts < (int64_t{1} << 30) &&
         D > 0 && I > 0 && D % 32 == 0 && I % 32 == 0 &&
         TileSharedBytes(up_format, kUpTokens, D) <= kMaxSharedBytes &&
         TileSharedBytes(down_format, kDownTokens, I) <= kMaxSharedBytes;
}

int64_t RoutedExpertsGroupedScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                         int64_t n_experts) {
  return Layout(T, k, D, I, n_experts).total;
}

cudaError_t RoutedExpertsGrouped(const RoutedExpertsLaunch& a, void* scratch, cudaStream_t stream) {
  if (a.T <= 0) return cudaSuccess;
  if (!RoutedExpertsGroupedApplicable(a.up_format, a.down_format, a.D, a.I, a.T, a.k,
                                      a.n_experts) ||
      scratch == nullptr || reinterpret_cast<uintptr_t>(scratch) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  const ScratchLayout l = Layout(a.T, a.k, a.D, a.I, a.n_experts);
  auto* base = static_cast<char*>(scratch);
  auto* h = reinterpret_cast<float*>(base + l.h);
  auto* part = reinterpret_cast<float*>(base + l.out);
  GroupView g;
  g.order = reinterpret_cast<int32_t*>(base + l.order);
  g.expert = reinterpret_cast<int32_t*>(base + l.expert);
  g.start = reinterpret_cast<int32_t*>(base + l.start);
  g.count = reinterpret_cast<int32_t*>(base + l.count);
  g.n_active = reinterpret_cast<int32_t*>(base + l.n_active);
  const int64_t P = a.T * a.k, max_groups = MaxGroups(P, a.n_experts);

  pdl::Launch(GroupPairsKernel, 1, kGroupThreads, 0, stream, a.experts, static_cast<int>(P),
              static_cast<int>(a.n_experts), g, a.error_word);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;

  TileArgs up{};
  up.table = a.table, up.groups = g, up.in = a.x, up.in_div = a.k, up.K = a.D, up.N = a.I;
  up.weights = a.weights, up.limit = a.swiglu_limit, up.out = h;
  e = LaunchTileFor<true>(a.up_format, up, max_groups, stream);
  if (e != cudaSuccess) return e;

  TileArgs down{};
  down.table = a.table, down.groups = g, down.in = h, down.in_div = 1, down.K = a.I;
  down.N = a.D, down.out = part;
  e = LaunchTileFor<false>(a.down_format, down, max_groups, stream);
  if (e != cudaSuccess) return e;

  return CombineSlots(part, a.experts, a.T, a.k, a.n_experts, a.D, a.y, stream);
}

cudaError_t CombineSlots(const float* part, const int32_t* experts, int64_t T, int64_t k,
                         int64_t n_experts, int64_t D, float* y, cudaStream_t stream) {
  constexpr int64_t kMaxGridY = 65535;
  for (int64_t t0 = 0; t0 < T; t0 += kMaxGridY) {  // tokens as grid rows, in slices
    const int64_t n = T - t0 < kMaxGridY ? T - t0 : kMaxGridY;
    const float* p = part + t0 * k * D;
    float* out = y + t0 * D;
    const bool vec4 = D % 4 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(out) % 16 == 0;
    const int64_t cols = vec4 ? D / 4 : D;
    const dim3 grid(static_cast<unsigned>((cols + kCombineThreads - 1) / kCombineThreads),
                    static_cast<unsigned>(n));
    if (vec4) {
      pdl::Launch(CombineSlotsKernel<float4>, grid, kCombineThreads, 0, stream,
                  reinterpret_cast<const float4*>(p), experts + t0 * k, k, n_experts, cols,
                  reinterpret_cast<float4*>(out));
    } else {
      pdl::Launch(CombineSlotsKernel<float>, grid, kCombineThreads, 0, stream, p, experts + t0 * k,
                  k, n_experts, cols, out);
    }
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace deepinfer::backend::cuda::kernels
