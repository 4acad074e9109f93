// Fused dequantise + GEMV for Linear with few token rows (decode).
//
// A block (8 warps) computes a tile of output rows for a pass of up to kTok tokens:
// * the pass's x rows are staged in shared memory (padded layout, cuda_dequant.cuh), a
//   slice of K at a time so that a block needs at most ~46 KiB (several blocks per SM);
// * each warp owns kRows weight rows and reads them in 16-byte chunks (one chunk per lane
//   per step) through a ring of kDepth steps: step j + kDepth is issued before step j is
//   dequantised, so (kDepth + 1) x kRows independent 16-byte loads are in flight per lane;
//   the first kDepth steps are issued before pdl::WaitThenAllowNext (weights are never
//   written by a kernel), i.e. while the previous kernel finishes and x is staged;
// * every float4 of x read from shared memory feeds all kRows rows (DotChunks);
// * for short weights (few row tiles) `split` warps share a row group, each taking every
//   split-th chunk step; their sums are added in warp order through shared memory.
// Tokens beyond kTok run as further passes (each pass reads the weight again). fp32
// accumulation; the summation order differs from SGEMM (fp32 rounding only).
//
// Summation order (the bits of every output; cuda_gemv_test.cc reproduces it on the CPU):
// for output (row i, token t) of a pass of kTok tokens, with split = OrderSplit(kTok, n_rows)
// and chunks of ChunkValues(format) values:
//   1. lane l of part p (l < 32, p < split) sums, starting from 0, the DotChunks terms of
//      its chunks c = 32 p + l, c + 32 split, c + 64 split, ... in that order (per chunk:
//      acc = fma(part * ValueScale, scale, acc), part = 0 + e_0 + e_1 + ... over groups of 4
//      values, e = fma(v3, x3, fma(v2, x2, fma(v0, x0, v1 * x1))), as nvcc contracts
//      DotChunks' expression; cuda_dequant.cuh);
//   2. each part's 32 lane sums are added by WarpSum (xor butterfly 16, 8, 4, 2, 1; lane 0);
//   3. split > 1: the part sums are added to 0.0f in part order; then y (+)= the result.
// The launch shape (rows per warp, ring depth, staging) never changes this order: kRows and
// kDepth only decide how many rows a warp holds and how many loads are in flight.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_dequant.cuh"
#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {

// Test hook (declared by cuda_gemv_test.cc): forces the launch shape of later LinearGemv /
// LinearGemvGrouped calls; every shape gives the same bits. rows_per_warp: 0 = default
// (DefaultRowsPerWarp); 2 or 1 where the pass has that variant (1 token: 4/2/1; 2 tokens:
// 4/2), any other value RowsPerWarp (4 at 1-2 tokens, 2 at 3-8). depth: ring depth 1 or 4;
// 0 = default (LaunchRows). legacy_staging: x staged by the scalar StagePadded. (4, 1, true)
// is the launch shape of before session 13 (what DEEPINFER_CUDA_GEMV_LEGACY=1 selects; the
// code around the first loads is the current one). (0, 0, false) removes the override (the
// environment's choice again). Not thread-safe (tests and benches only).
void SetGemvLaunchForTesting(int rows_per_warp, int depth, bool legacy_staging);

namespace {

using model::WeightFormat;

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int64_t kMaxXShared = 46 * 1024;  // staged x slice (+ 1 KiB of partial sums)
constexpr int kMaxPassTokens = 8;
constexpr int kTargetBlocks = 2 * 132;  // enough row tiles to cover an H200's SMs twice
// Ring depth for latency-bound launches (split > 1: few row tiles, few warps per SM, few
// chunk steps per lane); big weights (split 1) keep 1 (many resident warps hide latency).
constexpr int kDeepRing = 4;
// Fewest blocks a 1-2 token pass aims for (about half an H200's SMs): below, warps hold
// fewer rows (DefaultRowsPerWarp).
constexpr int64_t kMinBlocks = 64;

struct LaunchOverride {
  int rows_per_warp = 0;
  int depth = 0;
  bool legacy_staging = false;
};
LaunchOverride g_override;
bool g_override_set = false;  // SetGemvLaunchForTesting set a shape (not (0, 0, false))

// The launch shape override in force: the test hook's while it sets one, else the
// pre-session-13 shape when DEEPINFER_CUDA_GEMV_LEGACY=1 (read once; same bits, for A/B
// timing of whole decode steps), else none.
const LaunchOverride& Override() {
  static const LaunchOverride from_env = [] {
    const char* v = std::getenv("DEEPINFER_CUDA_GEMV_LEGACY");
    return v != nullptr && std::strcmp(v, "1") == 0 ? LaunchOverride{4, 1, true} : LaunchOverride{};
  }();
  return g_override_set ? g_override : from_env;
}

// Weight rows per warp that fix the summation order of a pass of `tokens` (through
// OrderSplit); the launch may hold fewer rows per warp with the same order.
__host__ __device__ constexpr int RowsPerWarp(int tokens) { return tokens >= 4 ? 2 : 4; }

// Weight rows of a block whose row groups of `split` warps hold rows_per_warp rows each.
int64_t RowsPerBlock(int split, int rows_per_warp) {
  return int64_t{kGemvWarps / split} * rows_per_warp;
}

// Blocks of such a launch over n_rows rows.
int64_t BlocksFor(int split, int rows_per_warp, int64_t n_rows) {
  const int64_t rows_per_block = RowsPerBlock(split, rows_per_warp);
  return (n_rows + rows_per_block - 1) / rows_per_block;
}

// Warps per row group (the `split` of the summation order): the fewest (power of two, <= 8)
// that give at least kTargetBlocks blocks of 8 / split groups of RowsPerWarp(tok) rows (8 if
// none does).
int OrderSplit(int tok, int64_t n_rows) {
  int split = 1;
  while (split < kGemvWarps && BlocksFor(split, RowsPerWarp(tok), n_rows) < kTargetBlocks) {
    split *= 2;
  }
  return split;
}

// Chunks of K staged at once for `tok` tokens: all of K if it fits, else a multiple of 32
// (whole warp steps) when possible.
template <WeightFormat kFormat>
int64_t SliceChunks(int tok, int64_t K) {
  const int64_t chunks = K / ChunkValues(kFormat);
  int64_t slice = kMaxXShared / (int64_t{4} * tok * PaddedStride(kFormat));
  if (slice >= 32) slice = slice / 32 * 32;
  if (slice < 1) slice = 1;
  return slice < chunks ? slice : chunks;
}

template <WeightFormat kFormat>
int64_t GemvSharedBytes(int tok, int rows_per_warp, int64_t K) {
  return (tok * SliceChunks<kFormat>(tok, K) * PaddedStride(kFormat) +
          kGemvWarps * rows_per_warp * tok) *
         4;
}

// Values [0, n) of the T token rows x + t * ldx (16-byte aligned rows; n a multiple of 4)
// into the padded layout at xs + t * x_stride. All threads call it (no barrier inside);
// each thread issues up to 8 float4 loads before its first store, so a 5120-value token
// costs one L2 round trip (StagePadded: three, with four times the load instructions).
template <WeightFormat kFormat, int kTok>
__device__ __forceinline__ void StageTokensVec4(const float* x, int64_t ldx, int T, int n,
                                                float* xs, int64_t x_stride) {
  constexpr int kBatch = 8;
  const int n4 = n / 4, total = T * n4;
  for (int base = threadIdx.x; base < total; base += kBatch * kGemvThreads) {
    float4 r[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kGemvThreads;
      r[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (i < total) {
        const int t = kTok == 1 ? 0 : i / n4, k4 = i - t * n4;
        r[j] = __ldg(reinterpret_cast<const float4*>(x + t * ldx) + k4);
      }
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int i = base + j * kGemvThreads;
      if (i < total) {
        const int t = kTok == 1 ? 0 : i / n4, k4 = i - t * n4;
        *reinterpret_cast<float4*>(xs + t * x_stride + PaddedIndex<kFormat>(int64_t{4} * k4)) =
            r[j];
      }
    }
  }
}

// Chunk step c of the warp's rows into dst (zero chunks, scale 0, when c >= chunks).
template <WeightFormat kFormat, int kRows>
__device__ __forceinline__ void LoadStep(const DeviceWeight& w, const int64_t (&rows)[kRows],
                                         int64_t c, int64_t chunks, RawChunk (&dst)[kRows]) {
#pragma unroll
  for (int n = 0; n < kRows; ++n) dst[n] = RawChunk{};
  if (c < chunks) {
#pragma unroll
    for (int n = 0; n < kRows; ++n)
      dst[n] = LoadRawChunk<kFormat>(w.data, w.scale, w.cols, rows[n], c);
  }
}

template <WeightFormat kFormat, int kTok, int kRows, int kDepth>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(DeviceWeight w, int64_t row0, int64_t n_rows, const float* x, int T, int64_t ldx,
               float* y, int64_t ldy, bool accumulate, int split, int64_t slice_chunks,
               int64_t group_rows, int64_t x_group_stride, bool x_vec4) {
  constexpr int kValues = ChunkValues(kFormat);
  constexpr int kStride = PaddedStride(kFormat);
  extern __shared__ float4 shared4[];
  const int64_t K = w.cols;
  const int64_t x_stride = slice_chunks * kStride;  // floats per staged token
  float* xs = reinterpret_cast<float*>(shared4);
  float* red = xs + kTok * x_stride;  // [warp][kRows][kTok] partial sums when split > 1
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int split_log2 = __ffs(split) - 1;  // split is a power of two
  const int group = warp >> split_log2, part = warp & (split - 1);
  const int64_t block_row0 = static_cast<int64_t>(blockIdx.x) * (kGemvWarps >> split_log2) * kRows;
  const int64_t i0 = block_row0 + group * kRows;  // first row
  int64_t rows[kRows];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {  // rows past the end re-read the last row (not written)
    rows[n] = row0 + (i0 + n < n_rows ? i0 + n : n_rows - 1);
  }
  const int64_t chunks = K / ChunkValues(kFormat);
  const int64_t step = int64_t{32} * split;
  int64_t c = int64_t{32} * part + lane;

  // ring[d] holds chunk step c + d * step. The first weight loads (no kernel writes a
  // weight: the read pdl.cuh allows before the wait) are in flight while the previous
  // kernel finishes; x is read after the wait.
  RawChunk ring[kDepth][kRows];
#pragma unroll
  for (int d = 0; d < kDepth; ++d) LoadStep<kFormat, kRows>(w, rows, c + d * step, chunks, ring[d]);
  // Grouped weights: rows [g*group_rows, (g+1)*group_rows) read x columns from
  // g*x_group_stride on; a block's rows all lie in one group (checked by the launcher).
  // (After the loads: the 64-bit division is a call; ungrouped launches skip it.)
  if (block_row0 >= group_rows) x += (block_row0 / group_rows) * x_group_stride;
  pdl::WaitThenAllowNext();
  float acc[kRows][kTok];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[n][t] = 0.0f;
  }
  // Slices [s0, s1) of chunks: stage x's columns, then each thread's chunks c in the slice
  // (c runs through 32*part + lane + j*step across slices; the prefetched chunks may reach
  // into later slices: they need no x).
  for (int64_t s0 = 0; s0 < chunks; s0 += slice_chunks) {
    const int64_t s1 = s0 + slice_chunks < chunks ? s0 + slice_chunks : chunks;
    if (s0 > 0) __syncthreads();  // the previous slice's readers are done
    if (x_vec4) {
      StageTokensVec4<kFormat, kTok>(x + s0 * kValues, ldx, T,
                                     static_cast<int>((s1 - s0) * kValues), xs, x_stride);
    } else {
      for (int t = 0; t < T; ++t) {
        StagePadded<kFormat>(x + t * ldx + s0 * kValues, (s1 - s0) * kValues, xs + t * x_stride);
      }
    }
    __syncthreads();
    for (; c < s1; c += step) {
      RawChunk next[kRows];
      LoadStep<kFormat, kRows>(w, rows, c + kDepth * step, chunks, next);
      DotChunks<kFormat, kRows, kTok>(ring[0], xs + (c - s0) * kStride, x_stride, T, acc);
#pragma unroll
      for (int d = 0; d + 1 < kDepth; ++d) {
#pragma unroll
        for (int n = 0; n < kRows; ++n) ring[d][n] = ring[d + 1][n];
      }
#pragma unroll
      for (int n = 0; n < kRows; ++n) ring[kDepth - 1][n] = next[n];
    }
  }
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) acc[n][t] = WarpSum(acc[n][t]);
  }
  if (split > 1) {
    if (lane == 0) {
#pragma unroll
      for (int n = 0; n < kRows; ++n) {
#pragma unroll
        for (int t = 0; t < kTok; ++t) red[(warp * kRows + n) * kTok + t] = acc[n][t];
      }
    }
    __syncthreads();
    if (part != 0) return;  // no barrier follows
#pragma unroll
    for (int n = 0; n < kRows; ++n) {
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        float sum = 0.0f;
        for (int p = 0; p < split; ++p) sum += red[((warp + p) * kRows + n) * kTok + t];
        acc[n][t] = sum;
      }
    }
  }
  if (lane != 0) return;
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTok; ++t) {
      if (t < T && i0 + n < n_rows) {
        float* out = y + t * ldy + i0 + n;
        *out = accumulate ? *out + acc[n][t] : acc[n][t];
      }
    }
  }
}

// Arguments of one pass, shared by every launch shape.
struct PassArgs {
  const DeviceWeight* w;
  int64_t row0, n_rows;
  const float* x;
  int T;
  int64_t ldx;
  float* y;
  int64_t ldy;
  bool accumulate;
  int64_t group_rows, x_group_stride;
  cudaStream_t stream;
};

// Blocks of `kernel` (kGemvThreads threads, the most shared memory a pass uses) resident at
// once on the current device; 132 (one per H200 SM) if the runtime cannot tell (the error
// is cleared: it must not surface as the launch's status).
int ResidentBlocks(const void* kernel) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kGemvThreads,
                                                    kMaxXShared + 1024) != cudaSuccess ||
      sms <= 0 || per_sm <= 0) {
    cudaGetLastError();
    return 132;
  }
  return sms * per_sm;
}

// Launches one pass with kRows rows per warp; `split` fixes the order. The ring is deep
// (kDeepRing) for latency-bound launches: split > 1 (few row tiles) and every block resident
// at once (the deep ring's extra registers must not add a wave); else 1 (many resident warps
// hide the latency). An override depth of 1 or kDeepRing forces it.
template <WeightFormat kFormat, int kTok, int kRows>
cudaError_t LaunchRows(const PassArgs& a, int split, bool x_vec4) {
  const int64_t blocks = BlocksFor(split, kRows, a.n_rows);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (a.group_rows < a.n_rows && a.group_rows % RowsPerBlock(split, kRows) != 0) {
    return cudaErrorInvalidValue;  // a block would straddle two groups
  }
  constexpr auto kShallow = GemvKernel<kFormat, kTok, kRows, 1>;
  constexpr auto kDeep = GemvKernel<kFormat, kTok, kRows, kDeepRing>;
  static const int deep_resident = ResidentBlocks(reinterpret_cast<const void*>(kDeep));
  bool deep = split > 1 && blocks <= deep_resident;
  const int forced = Override().depth;
  if (forced == 1 || forced == kDeepRing) deep = forced == kDeepRing;
  const int64_t smem = GemvSharedBytes<kFormat>(kTok, kRows, a.w->cols);
  pdl::Launch(deep ? kDeep : kShallow, static_cast<unsigned>(blocks), kGemvThreads, smem, a.stream,
              *a.w, a.row0, a.n_rows, a.x, a.T, a.ldx, a.y, a.ldy, a.accumulate, split,
              SliceChunks<kFormat>(kTok, a.w->cols), a.group_rows, a.x_group_stride, x_vec4);
  return cudaGetLastError();
}

// Rows per warp of a pass of kTok tokens: RowsPerWarp(kTok), halved (down to 1 at one token,
// 2 at two; RowsPerWarp at more) while the launch would have fewer than kMinBlocks blocks:
// on a weight of few rows, fewer rows per warp spread the bytes over more SMs (a block's
// bytes are its latency-bound critical path); the order (split) stays.
template <int kTok>
int DefaultRowsPerWarp(int split, int64_t n_rows) {
  const int fewest = kTok == 1 ? 1 : kTok == 2 ? 2 : RowsPerWarp(kTok);
  int rows = RowsPerWarp(kTok);
  while (rows > fewest && BlocksFor(split, rows, n_rows) < kMinBlocks) rows /= 2;
  return rows;
}

// Launches one pass of T <= kTok tokens. Default shape: DefaultRowsPerWarp, the ring depth
// of LaunchRows, float4 staging when x's rows are 16-byte aligned.
template <WeightFormat kFormat, int kTok>
cudaError_t LaunchPass(const PassArgs& a) {
  const int split = OrderSplit(kTok, a.n_rows);
  const bool aligned =
      reinterpret_cast<uintptr_t>(a.x) % 16 == 0 && a.ldx % 4 == 0 && a.x_group_stride % 4 == 0;
  const bool x_vec4 = aligned && !Override().legacy_staging;
  const int rows = Override().rows_per_warp != 0 ? Override().rows_per_warp
                                                 : DefaultRowsPerWarp<kTok>(split, a.n_rows);
  if constexpr (kTok <= 2) {
    if (rows == 2) return LaunchRows<kFormat, kTok, 2>(a, split, x_vec4);
  }
  if constexpr (kTok == 1) {
    if (rows == 1) return LaunchRows<kFormat, kTok, 1>(a, split, x_vec4);
  }
  return LaunchRows<kFormat, kTok, RowsPerWarp(kTok)>(a, split, x_vec4);
}

template <WeightFormat kFormat>
cudaError_t GemvAllTokens(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                          int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate, int64_t g,
                          int64_t xs, cudaStream_t stream) {
  for (int64_t t0 = 0; t0 < T;) {
    const int left = static_cast<int>(T - t0 < kMaxPassTokens ? T - t0 : kMaxPassTokens);
    const PassArgs a{&w,  row0,       n_rows, x + t0 * ldx, left,  ldx, y + t0 * ldy,
                     ldy, accumulate, g,      xs,           stream};
    cudaError_t e;
    if (left == 1) {  // smallest pass that holds `left` tokens
      e = LaunchPass<kFormat, 1>(a);
    } else if (left == 2) {
      e = LaunchPass<kFormat, 2>(a);
    } else if (left <= 4) {
      e = LaunchPass<kFormat, 4>(a);
    } else {
      e = LaunchPass<kFormat, 8>(a);
    }
    if (e != cudaSuccess) return e;
    t0 += left;
  }
  return cudaSuccess;
}

}  // namespace

void SetGemvLaunchForTesting(int rows_per_warp, int depth, bool legacy_staging) {
  g_override = LaunchOverride{rows_per_warp, depth, legacy_staging};
  g_override_set = rows_per_warp != 0 || depth != 0 || legacy_staging;
}

bool GemvApplicable(const DeviceWeight& w, int64_t T) {
  if (T < 1 || T > kMaxGemvTokens) return false;
  if (reinterpret_cast<uintptr_t>(w.data) % 16 != 0) return false;
  // Every row must start on a 16-byte boundary and hold whole chunks.
  return w.cols > 0 && w.cols % ChunkValues(w.format) == 0;
}

cudaError_t LinearGemv(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                       int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                       cudaStream_t stream) {
  return LinearGemvGrouped(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, n_rows, 0, stream);
}

bool GemvGroupedApplicable(const DeviceWeight& w, int64_t T, int64_t group_rows) {
  // Blocks hold at most 8 warps x 4 rows: 32 | group_rows keeps each block in one group.
  return GemvApplicable(w, T) && group_rows > 0 && group_rows % 32 == 0;
}

cudaError_t LinearGemvGrouped(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                              int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                              int64_t group_rows, int64_t x_group_stride, cudaStream_t stream) {
  if (n_rows <= 0 || T <= 0) return cudaSuccess;
  if (!GemvApplicable(w, T) || group_rows <= 0) return cudaErrorInvalidValue;
  const int64_t g = group_rows, xs = x_group_stride;
  switch (w.format) {
    case WeightFormat::kF32:
      return GemvAllTokens<WeightFormat::kF32>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, g,
                                               xs, stream);
    case WeightFormat::kBF16:
      return GemvAllTokens<WeightFormat::kBF16>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, g,
                                                xs, stream);
    case WeightFormat::kFp8Block32:
      return GemvAllTokens<WeightFormat::kFp8Block32>(w, row0, n_rows, x, T, ldx, y, ldy,
                                                      accumulate, g, xs, stream);
    case WeightFormat::kFp8Row32:
      return GemvAllTokens<WeightFormat::kFp8Row32>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate,
                                                    g, xs, stream);
    case WeightFormat::kMxFp4:
      return GemvAllTokens<WeightFormat::kMxFp4>(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, g,
                                                 xs, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace deepinfer::backend::cuda::kernels
