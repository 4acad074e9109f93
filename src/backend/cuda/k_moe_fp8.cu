// Routed experts with FP8 activations, expert-major for any T (kernels_fp8.h).
//
// Roofline (V4.1-Flash: 384 MXFP4 experts of [2304, 5120] x 3, top-6): each distinct expert
// read once is 18.8 MB. Decode T = 32 touches ~151 experts: 2.84 GB, 0.62 ms at 4.6 TB/s.
// Prefill T = 4096 (24,576 pairs): 3 * 2 * 24576 * 2304 * 5120 = 1.74 TFLOP per layer,
// 1.2 ms at the 1,449 TFLOP/s FP8 ceiling; every expert is read once per item (<= BN pairs).
//
// Launches (grid sizes depend only on T, k, n_experts and the shapes; no host sync):
//  1. QuantizeFp8Activations(x) -> xq [T, D].
//  2-3. the grouping kernels of moe_groups.cuh (shared with k_moe_bf16.cu):
//  2. CountPairs: block e counts the pairs routed to expert e (__syncthreads_count).
//  3. FillGroups: block e places its pairs at order[start_e ..] in pair order (stable,
//     ballot prefix counts: no atomics decide a position) and writes its work items
//     (expert, first position, count <= BN), ceil(count / BN) of them at item_base_e.
//  4. Gate/up GEMM: grid (2I / BM, max items); item i multiplies the expert's [W1; W3]
//     (one [2I, D] weight) with the xq rows of its pairs' tokens -> gu [P, 2I].
//  5. SwiGluQuantize: h = SwiGLU(g, u) * weight -> hq [P, I] (e4m3, per 32 values).
//  6. Down GEMM: grid (D / BM, max items): W2 with the hq rows of the pairs -> out [P, D].
//  7. CombineSlots (k_moe_grouped.cu): y[t] = sum over slots in order of out[t*k + i] (NaN
//     for a bad id; CountPairs sets the error bit).
// Every output element is one tile lane's K-ordered sum (fp8_gemm_core.cuh), so a token's
// result does not depend on which other tokens share its experts, nor on T.
#include <algorithm>

#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/fp8_gemm_core.cuh"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/moe_groups.cuh"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

using fp8::TileConfig;
using fp8::TileJob;
using model::WeightFormat;
using moe_groups::Item;
using moe_groups::MaxItems;

constexpr int kThreads = 256;

struct Scratch {
  int64_t xq = 0, hq = 0, gu = 0, out = 0;
  moe_groups::GroupScratch groups;
  int64_t total = 0;
};

Scratch Layout(int64_t T, int64_t k, int64_t D, int64_t I, int64_t n_experts, int bn) {
  const int64_t P = T * k;
  Scratch s;
  ScratchCarver carver;
  s.xq = carver.Take(Fp8ActivationBytes(T, D));
  s.hq = carver.Take(Fp8ActivationBytes(P, I));
  s.gu = carver.Take(P * 2 * I * 4);
  s.out = carver.Take(P * D * 4);
  s.groups = moe_groups::TakeGroupScratch(carver, P, n_experts, bn);
  s.total = carver.total();
  return s;
}

// --- expert GEMMs --------------------------------------------------------------------

struct ExpertGemmArgs {
  const ExpertPointers* table;
  bool up;  // gate/up ([W1; W3] x xq rows of tokens) or down (W2 x hq rows of pairs)
  int64_t D, I, k;
  const uint8_t* xq;
  const float* xs;
  const int32_t* order;
  const Item* items;
  const int32_t* n_items;
  float* out;  // [P, n_rows]
};

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocksPerSm)
    ExpertGemmKernel(ExpertGemmArgs a) {
  pdl::WaitThenAllowNext();
  extern __shared__ __align__(16) char smem[];
  using Tile = fp8::Fp8Tile<Cfg>;
  if (static_cast<int32_t>(blockIdx.y) >= *a.n_items) return;  // whole block
  const Item item = a.items[blockIdx.y];
  const ExpertPointers& ep = a.table[item.expert];
  TileJob j{};
  const int m0 = a.up ? 0 : 1, m1 = a.up ? 2 : 1;
  j.data[0] = static_cast<const uint8_t*>(ep.data[m0]);
  j.data[1] = static_cast<const uint8_t*>(ep.data[m1]);
  j.scale[0] = ep.scale[m0];
  j.scale[1] = ep.scale[m1];
  j.n_rows = a.up ? 2 * a.I : a.D;
  j.part_rows = a.up ? a.I : a.D;
  j.row_base = 0;
  j.K = a.up ? a.D : a.I;
  j.v0 = int64_t{blockIdx.x} * Cfg::kBM;
  j.stage0 = 0;
  j.stage1 = j.K / fp8::kStageK;
  j.xq = a.xq;
  j.xs = a.xs;
  j.act_ld = j.K;
  j.act_rows = a.order + item.start;
  j.act_base = 0;
  j.act_div = a.up ? static_cast<int>(a.k) : 1;
  j.n_tokens = item.count;
  float total[Cfg::kMT][Cfg::kNT][4];
  Tile::template Run<false>(j, 1, smem, total);
#pragma unroll
  for (int mt = 0; mt < Cfg::kMT; ++mt) {
#pragma unroll
    for (int nt = 0; nt < Cfg::kNT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t v = j.v0 + Tile::AccRow(mt, i);
        const int n = Tile::AccToken(nt, i);
        if (v >= j.n_rows || n >= item.count) continue;
        a.out[int64_t{j.act_rows[n]} * j.n_rows + v] = total[mt][nt][i];
      }
    }
  }
}

// h = SwiGLU(g, u) * weight of pair p, quantised per 32 values: one warp per block.
__global__ void __launch_bounds__(kThreads)
    SwiGluQuantizeKernel(const float* gu, const float* weights, int64_t P, int64_t I, float limit,
                         uint8_t* hq, float* hs) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t per_row = I / 32;
  const int64_t warps = int64_t{gridDim.x} * (kThreads / 32);
  for (int64_t b = blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32; b < P * per_row;
       b += warps) {
    const int64_t p = b / per_row, c = (b % per_row) * 32 + lane;
    const float h = SwiGluValue(gu[p * 2 * I + c], gu[p * 2 * I + I + c], limit) * weights[p];
    fp8::StoreQuantizedBlock(h, hq + p * I + (c - lane), hs + b);
  }
}

template <class Cfg>
cudaError_t LaunchGemm(const ExpertGemmArgs& a, int64_t max_items, cudaStream_t stream) {
  static const cudaError_t attr = cudaFuncSetAttribute(
      ExpertGemmKernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes);
  if (attr != cudaSuccess) return attr;
  const int64_t rows = a.up ? 2 * a.I : a.D;
  const dim3 grid(static_cast<unsigned>((rows + Cfg::kBM - 1) / Cfg::kBM),
                  static_cast<unsigned>(max_items));
  pdl::Launch(ExpertGemmKernel<Cfg>, grid, Cfg::kThreads, Cfg::kSmemBytes, stream, a);
  return cudaGetLastError();
}

// Tile shapes by the mean pairs per expert (each item holds up to BN pairs of one expert, so
// BN near the mean wastes the fewest MMA columns): BN 8 and 32 stream 128-row tiles with 8
// warps of one M tile; BN 64, 96 and 128 use 2 x 4 warps of 4 x (BN / 32) MMA tiles.
enum class Shape { kBn8, kBn32, kBn64, kBn96, kBn128 };

Shape ShapeFor(int64_t T, int64_t k, int64_t n_experts) {
  const int64_t mean = (T * k + n_experts - 1) / n_experts;
  const int64_t want = mean + mean / 4;
  if (want <= 8) return Shape::kBn8;
  if (want <= 32) return Shape::kBn32;
  if (want <= 64) return Shape::kBn64;
  if (want <= 96) return Shape::kBn96;
  return Shape::kBn128;
}

int TokensPerItem(Shape s) {
  switch (s) {
    case Shape::kBn8:
      return 8;
    case Shape::kBn32:
      return 32;
    case Shape::kBn64:
      return 64;
    case Shape::kBn96:
      return 96;
    case Shape::kBn128:
      return 128;
  }
  return 128;
}

template <WeightFormat F>
cudaError_t LaunchFormat(Shape s, const ExpertGemmArgs& a, int64_t max_items, cudaStream_t stream) {
  constexpr int kSkinnyStages = F == WeightFormat::kMxFp4 ? 6 : 4;
  switch (s) {
    case Shape::kBn8:
      return LaunchGemm<TileConfig<F, 8, 1, 1, 1, kSkinnyStages>>(a, max_items, stream);
    case Shape::kBn32:
      return LaunchGemm<TileConfig<F, 8, 1, 1, 4, kSkinnyStages>>(a, max_items, stream);
    case Shape::kBn64:
      return LaunchGemm<TileConfig<F, 2, 4, 4, 2, 4>>(a, max_items, stream);
    case Shape::kBn96:
      return LaunchGemm<TileConfig<F, 2, 4, 4, 3, 4>>(a, max_items, stream);
    case Shape::kBn128:
      return LaunchGemm<TileConfig<F, 2, 4, 4, 4, 4>>(a, max_items, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchExpertGemm(WeightFormat f, Shape s, const ExpertGemmArgs& a, int64_t max_items,
                             cudaStream_t stream) {
  if (f == WeightFormat::kMxFp4) return LaunchFormat<WeightFormat::kMxFp4>(s, a, max_items, stream);
  if (f == WeightFormat::kFp8Block32) {
    return LaunchFormat<WeightFormat::kFp8Block32>(s, a, max_items, stream);
  }
  return cudaErrorInvalidValue;
}

bool FormatOk(WeightFormat f) {
  return f == WeightFormat::kMxFp4 || f == WeightFormat::kFp8Block32;
}

}  // namespace

bool RoutedExpertsFp8Applicable(WeightFormat up_format, WeightFormat down_format, int64_t D,
                                int64_t I, int64_t T, int64_t k, int64_t n_experts) {
  return FormatOk(up_format) && FormatOk(down_format) && D > 0 && I > 0 && D % fp8::kStageK == 0 &&
         I % fp8::kStageK == 0 && T >= 1 && k >= 1 && k <= kMaxFusedExpertSlots && n_experts >= 1 &&
         T * k <= (int64_t{1} << 30);
}

int64_t RoutedExpertsFp8ScratchBytes(int64_t T, int64_t k, int64_t D, int64_t I,
                                     int64_t n_experts) {
  return Layout(T, k, D, I, n_experts, TokensPerItem(ShapeFor(T, k, n_experts))).total;
}

cudaError_t RoutedExpertsFp8(const RoutedExpertsLaunch& l, void* scratch, cudaStream_t stream) {
  if (l.T <= 0) return cudaSuccess;
  if (!RoutedExpertsFp8Applicable(l.up_format, l.down_format, l.D, l.I, l.T, l.k, l.n_experts)) {
    return cudaErrorInvalidValue;
  }
  const Shape shape = ShapeFor(l.T, l.k, l.n_experts);
  const int bn = TokensPerItem(shape);
  const int64_t P = l.T * l.k;
  const Scratch s = Layout(l.T, l.k, l.D, l.I, l.n_experts, bn);
  auto* base = static_cast<char*>(scratch);
  auto* xq = reinterpret_cast<uint8_t*>(base + s.xq);
  auto* xs = Fp8ActivationScales(xq, l.T, l.D);
  auto* hq = reinterpret_cast<uint8_t*>(base + s.hq);
  auto* hs = Fp8ActivationScales(hq, P, l.I);
  auto* gu = reinterpret_cast<float*>(base + s.gu);
  auto* out = reinterpret_cast<float*>(base + s.out);
  const moe_groups::Groups groups = moe_groups::GroupsAt(base, s.groups);
  const int64_t max_items = MaxItems(P, l.n_experts, bn);

  cudaError_t e = QuantizeFp8Activations(l.x, l.T, l.D, l.D, xq, xs, stream);
  if (e != cudaSuccess) return e;
  e = moe_groups::LaunchGrouping(l.experts, P, l.n_experts, bn, groups, l.error_word, stream);
  if (e != cudaSuccess) return e;

  ExpertGemmArgs a{};
  a.table = l.table;
  a.D = l.D;
  a.I = l.I;
  a.k = l.k;
  a.order = groups.order;
  a.items = groups.items;
  a.n_items = groups.n_items;
  a.up = true;
  a.xq = xq;
  a.xs = xs;
  a.out = gu;
  if ((e = LaunchExpertGemm(l.up_format, shape, a, max_items, stream)) != cudaSuccess) return e;
  const int64_t h_blocks = P * (l.I / 32);
  pdl::Launch(SwiGluQuantizeKernel, fp8::WarpPerBlockGrid(h_blocks), kThreads, 0, stream, gu,
              l.weights, P, l.I, l.swiglu_limit, hq, hs);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  a.up = false;
  a.xq = hq;
  a.xs = hs;
  a.out = out;
  if ((e = LaunchExpertGemm(l.down_format, shape, a, max_items, stream)) != cudaSuccess) return e;
  return CombineSlots(out, l.experts, l.T, l.k, l.n_experts, l.D, l.y, stream);
}

}  // namespace deepinfer::backend::cuda::kernels
