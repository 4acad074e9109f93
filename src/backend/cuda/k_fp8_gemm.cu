// FP8-activation quantisation and dense Linear (kernels_fp8.h; core in fp8_gemm_core.cuh).
//
// Roofline (H200: 4.6 TB/s HBM read, FP8 dense 1,449 TFLOP/s measured with cuBLASLt; the
// mma.sync path reaches perhaps half of that):
//   bytes = weight (rows * K * {1 FP8, 0.5 MXFP4} + scales) + T * K * 1.03 (activations,
//           re-read per 128-row tile, mostly from L2) + T * rows * 4 (y)
//   FLOPs = 2 * rows * K * T (one m16n8k32 per 32-value block, tokens padded to 8)
//   Decode (T <= 64): memory-bound. wq_b 32768 x 1280 FP8 (42 MB) at 4.6 TB/s: 9.1 us.
//   Prefill (T = 4096): wq_b is 344 GFLOP: 0.24 ms at the FP8 ceiling; the tile loop's fp32
//   scale-and-add (4 FMUL + 4 FFMA per MMA and lane) costs about as much issue as the MMA, so
//   ~40-60 % of the FP8 ceiling is this design's limit.
// Tiles. Skinny (T <= 64): 8 warps x one 16-row M tile (128 rows) x all T tokens (8, 16, 32
// or 64 wide), weights streamed once, K split into Fp8LinearSegments blocks when the rows
// give fewer than ~2 blocks per SM; partials [segments, T, n_rows] then ReduceSegments.
// Wide (T > 64): 2 x 4 warps of 4 x 4 MMA tiles = 128 rows x 128 tokens, one block loops
// over the segments (same sums, same order: fp8_gemm_core.cuh Run), or, when the tiles are
// too few to fill the GPU, one block per segment as for skinny tiles (SplitsK).
#include <algorithm>

#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using fp8::TileConfig;
using fp8::TileJob;
using model::WeightFormat;

constexpr int kQuantThreads = 256;
constexpr int64_t kTargetBlocks = 2 * 132;  // ~2 blocks per H200 SM
constexpr int kMaxSegments = 8;
constexpr int kMinStagesPerSegment = 4;

// One warp per 32-value block (grid-stride).
__global__ void __launch_bounds__(kQuantThreads)
    QuantizeKernel(const float* x, int64_t rows, int64_t K, int64_t ldx, uint8_t* q, float* scale) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t blocks_per_row = K / 32;
  const int64_t warps = int64_t{gridDim.x} * (kQuantThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kQuantThreads / 32} + threadIdx.x / 32;
       b < rows * blocks_per_row; b += warps) {
    const int64_t row = b / blocks_per_row, blk = b % blocks_per_row;
    fp8::StoreQuantizedBlock(x[row * ldx + blk * 32 + lane], q + row * K + blk * 32, scale + b);
  }
}

struct DenseArgs {
  const uint8_t* data;
  const uint8_t* scale;
  int64_t K, row0, n_rows;
  const uint8_t* xq;
  const float* xs;
  int64_t T;
  float* y;
  int64_t ldy;
  bool accumulate;
  int64_t group_rows;  // rows per group (a multiple of the tile rows); >= n_rows if ungrouped
  int64_t act_ld;      // activation row stride in values; group g reads columns g*K ..
  int segments;
  bool split;      // one block per segment (grid z), partials to `partial`
  float* partial;  // [segments, T, n_rows]
};

// kSegmented: one block loops over a.segments > 1 segments (the wide tiles' split-K
// equivalent); otherwise a block runs one segment (a.split) or the whole K (segments == 1).
template <class Cfg, bool kSegmented>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm) DenseKernel(DenseArgs a) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) char smem[];
  using Tile = fp8::Fp8Tile<Cfg>;
  const int64_t v0 = int64_t{blockIdx.x} * Cfg::kBM;
  const int64_t n0 = int64_t{blockIdx.y} * Cfg::kBN;
  const int64_t stages = a.K / fp8::kStageK;
  TileJob j{};
  j.data[0] = j.data[1] = a.data;
  j.scale[0] = j.scale[1] = a.scale;
  j.part_rows = a.n_rows;
  j.row_base = a.row0;
  j.n_rows = a.n_rows;
  j.K = a.K;
  j.v0 = v0;
  const int64_t group = v0 / a.group_rows;
  j.xq = a.xq + group * a.K;
  j.xs = a.xs + group * (a.K / 32);
  j.act_ld = a.act_ld;
  j.act_rows = nullptr;
  j.act_base = n0;
  j.act_div = 1;
  j.n_tokens = static_cast<int>(a.T - n0 < Cfg::kBN ? a.T - n0 : Cfg::kBN);
  const int seg = a.split ? static_cast<int>(blockIdx.z) : 0;
  j.stage0 = a.split ? seg * stages / a.segments : 0;
  j.stage1 = a.split ? (seg + 1 == a.segments ? stages : (seg + 1) * stages / a.segments) : stages;
  float total[Cfg::kMT][Cfg::kNT][4];
  Tile::template Run<kSegmented>(j, a.split ? 1 : a.segments, smem, total);
#pragma unroll
  for (int mt = 0; mt < Cfg::kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Cfg::kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t v = v0 + Tile::AccRow(mt, i), n = n0 + Tile::AccToken(nt, i);
        if (v >= a.n_rows || n >= a.T) continue;
        const float r = total[mt][nt][i];
        if (a.split) {
          a.partial[(seg * a.T + n) * a.n_rows + v] = r;
        } else {
          float* out = a.y + n * a.ldy + v;
          *out = a.accumulate ? *out + r : r;
        }
      }
    }
  }
}

// y[t, i] (+)= ((p0 + p1) + p2) + ... over the segments, in order.
__global__ void ReduceSegmentsKernel(const float* partial, int segments, int64_t T, int64_t n_rows,
                                     float* y, int64_t ldy, bool accumulate) {
  pdl::WaitThenAllowNext();
  const int64_t count = T * n_rows;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < count;
       e += int64_t{gridDim.x} * blockDim.x) {
    float s = partial[e];
    for (int seg = 1; seg < segments; ++seg) s += partial[seg * count + e];
    float* out = y + (e / n_rows) * ldy + e % n_rows;
    *out = accumulate ? *out + s : s;
  }
}

template <class Cfg, bool kSegmented>
cudaError_t LaunchDenseKernel(const DenseArgs& a, cudaStream_t stream) {
  static const cudaError_t attr = cudaFuncSetAttribute(
      DenseKernel<Cfg, kSegmented>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  const dim3 grid(static_cast<unsigned>((a.n_rows + Cfg::kBM - 1) / Cfg::kBM),
                  static_cast<unsigned>((a.T + Cfg::kBN - 1) / Cfg::kBN),
                  static_cast<unsigned>(a.split ? a.segments : 1));
  pdl::Launch(DenseKernel<Cfg, kSegmented>, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, a);
  return cudaGetLastError();
}

template <class Cfg>
cudaError_t LaunchDense(const DenseArgs& a, cudaStream_t stream) {
  if (!a.split && a.segments > 1) return LaunchDenseKernel<Cfg, true>(a, stream);
  return LaunchDenseKernel<Cfg, false>(a, stream);
}

// Skinny configurations: 8 warps x 16 rows, NT token tiles; deeper rings for MXFP4 (its
// stages are half the bytes) so that ~100 KiB per SM are in flight.
template <WeightFormat F, int kNT>
using Skinny = TileConfig<F, 8, 1, 1, kNT, F == WeightFormat::kMxFp4 ? 6 : 4>;
template <WeightFormat F>
using Wide = TileConfig<F, 2, 4, 4, 4, 4>;

template <WeightFormat F>
cudaError_t LaunchFor(const DenseArgs& a, cudaStream_t stream) {
  // Skinny tiles never loop over segments (T <= 64 splits K over blocks instead).
  if (a.T <= 8) return LaunchDenseKernel<Skinny<F, 1>, false>(a, stream);
  if (a.T <= 16) return LaunchDenseKernel<Skinny<F, 2>, false>(a, stream);
  if (a.T <= 32) return LaunchDenseKernel<Skinny<F, 4>, false>(a, stream);
  if (a.T <= kFp8SkinnyTokens) return LaunchDenseKernel<Skinny<F, 8>, false>(a, stream);
  return LaunchDense<Wide<F>>(a, stream);
}

bool Aligned(const void* p, uintptr_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

}  // namespace

int64_t Fp8ActivationBytes(int64_t rows, int64_t K) {
  return AlignUp16(rows * K) + AlignUp16(rows * (K / 32) * 4);
}

cudaError_t QuantizeFp8Activations(const float* x, int64_t rows, int64_t K, int64_t ldx, uint8_t* q,
                                   float* scale, cudaStream_t stream) {
  if (rows <= 0 || K <= 0) return cudaSuccess;
  if (K % 32 != 0) return cudaErrorInvalidValue;
  pdl::Launch(QuantizeKernel, fp8::WarpPerBlockGrid(rows * (K / 32)), kQuantThreads, 0, stream, x,
              rows, K, ldx, q, scale);
  return cudaGetLastError();
}

bool Fp8LinearApplicable(const DeviceWeight& w) {
  const bool format_ok = w.format == WeightFormat::kFp8Block32 ||
                         w.format == WeightFormat::kFp8Row32 || w.format == WeightFormat::kMxFp4;
  return format_ok && w.rows >= 1 && w.cols > 0 && w.cols % fp8::kStageK == 0 &&
         w.data != nullptr && w.scale != nullptr && Aligned(w.data, 16) && Aligned(w.scale, 4);
}

int Fp8LinearSegments(int64_t n_rows, int64_t K) {
  const int64_t tiles = (n_rows + 127) / 128;
  const int64_t stages = K / fp8::kStageK;
  int64_t segments = (kTargetBlocks + tiles - 1) / tiles;
  segments = std::min<int64_t>(segments, kMaxSegments);
  segments = std::min<int64_t>(segments, stages / kMinStagesPerSegment);
  return static_cast<int>(std::max<int64_t>(segments, 1));
}

// Whether LinearFp8 splits K over blocks (partials + ReduceSegments) for T tokens: always
// for skinny tiles; for wide tiles when they alone would leave most SMs idle (narrow weights
// at T = 65 .. ~1000: wkv, 512 rows at T = 256, ran as 8 blocks, 123 us a call on the H200).
// Either way a token's bits are the same (the segments are summed in the same order).
bool SplitsK(int64_t n_rows, int64_t K, int64_t T) {
  if (Fp8LinearSegments(n_rows, K) == 1) return false;
  if (T <= kFp8SkinnyTokens) return true;
  return ((n_rows + 127) / 128) * ((T + 127) / 128) < kTargetBlocks;
}

int64_t Fp8LinearScratchBytes(int64_t n_rows, int64_t K, int64_t T) {
  if (!SplitsK(n_rows, K, T)) return 0;
  return AlignUp16(int64_t{Fp8LinearSegments(n_rows, K)} * T * n_rows * 4);
}

namespace {

// The arguments of an ungrouped call (one group of all rows; activation rows of K values).
DenseArgs DenseArgsFor(int64_t row0, int64_t n_rows, const uint8_t* xq, const float* xs, int64_t T,
                       float* y, int64_t ldy, bool accumulate, void* scratch) {
  DenseArgs a{};
  a.row0 = row0;
  a.n_rows = n_rows;
  a.xq = xq;
  a.xs = xs;
  a.T = T;
  a.y = y;
  a.ldy = ldy;
  a.accumulate = accumulate;
  a.group_rows = n_rows;
  a.act_ld = 0;  // RunDense: the weight's K
  a.partial = static_cast<float*>(scratch);
  return a;
}

// Fills the weight fields (and act_ld if unset), launches the tiles and, for a split K, the
// reduction.
cudaError_t RunDense(const DeviceWeight& w, DenseArgs a, cudaStream_t stream) {
  a.data = static_cast<const uint8_t*>(w.data);
  a.scale = w.scale;
  a.K = w.cols;
  if (a.act_ld == 0) a.act_ld = w.cols;
  a.segments = Fp8LinearSegments(a.n_rows, w.cols);
  a.split = SplitsK(a.n_rows, w.cols, a.T);
  if (a.split && a.partial == nullptr) return cudaErrorInvalidValue;
  cudaError_t e = cudaErrorInvalidValue;
  switch (w.format) {
    case WeightFormat::kFp8Block32:
      e = LaunchFor<WeightFormat::kFp8Block32>(a, stream);
      break;
    case WeightFormat::kFp8Row32:
      e = LaunchFor<WeightFormat::kFp8Row32>(a, stream);
      break;
    case WeightFormat::kMxFp4:
      e = LaunchFor<WeightFormat::kMxFp4>(a, stream);
      break;
    default:
      break;
  }
  if (e != cudaSuccess || !a.split) return e;
  const int64_t count = a.T * a.n_rows;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((count + 255) / 256, 132 * 8));
  pdl::Launch(ReduceSegmentsKernel, blocks, 256, 0, stream, a.partial, a.segments, a.T, a.n_rows,
              a.y, a.ldy, a.accumulate);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LinearFp8(const DeviceWeight& w, int64_t row0, int64_t n_rows, const uint8_t* xq,
                      const float* xs, int64_t T, float* y, int64_t ldy, bool accumulate,
                      void* scratch, cudaStream_t stream) {
  if (n_rows <= 0 || T <= 0) return cudaSuccess;
  if (!Fp8LinearApplicable(w) || row0 < 0 || row0 + n_rows > w.rows) return cudaErrorInvalidValue;
  return RunDense(w, DenseArgsFor(row0, n_rows, xq, xs, T, y, ldy, accumulate, scratch), stream);
}

bool Fp8LinearGroupedApplicable(const DeviceWeight& w, int64_t groups) {
  return Fp8LinearApplicable(w) && groups >= 1 && w.rows % groups == 0 &&
         (w.rows / groups) % 128 == 0;
}

cudaError_t LinearFp8Grouped(const DeviceWeight& w, int64_t groups, const uint8_t* xq,
                             const float* xs, int64_t T, float* y, int64_t ldy, void* scratch,
                             cudaStream_t stream) {
  if (T <= 0) return cudaSuccess;
  if (!Fp8LinearGroupedApplicable(w, groups)) return cudaErrorInvalidValue;
  DenseArgs a = DenseArgsFor(0, w.rows, xq, xs, T, y, ldy, /*accumulate=*/false, scratch);
  a.group_rows = w.rows / groups;
  a.act_ld = groups * w.cols;
  return RunDense(w, a, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
