// Internal interface between the GEMM kernels of RoutedExpertsBf16 (kernels_fp8.h) and its host
// flow (k_moe_bf16.cu): the wgmma tile kernels for wide items (shared-tile SS in k_moe_bf16.cu,
// register-A RS and the variant picking in k_moe_rs.cu) and the weight-streaming kernel for items
// of <= 32 pairs (k_moe_stream.cu, stream_mma.cuh). Host-only declarations and constants: the
// .cu files and the tests (cuda_moe_stream_test.cc: the shape sweep; cuda_fp8_experts_test.cc:
// the wgmma variants) include it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string_view>

#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels::moe_bf16 {

// A work item: pairs order[start .. start + count) of one expert. The layout of
// moe_groups::Item (static_assert'ed in k_moe_bf16.cu, which converts the pointer).
struct GemmItem {
  int32_t expert, start, count, pad;
};

// One expert GEMM launch: out[pair, v] = sum_k act[row(pair), k] * W[v, k] for the rows v of
// [W1; W3] (up: act = xb, row(pair) = pair / k, out = gu [P, 2I]) or of W2 (down: act = hb,
// row(pair) = pair, out = out [P, D]), for every item.
struct GemmArgs {
  const ExpertPointers* table;
  bool up;
  int64_t D, I, k;
  const uint16_t* act;  // permuted bf16 [*, K]
  const int32_t* order;
  const GemmItem* items;
  const int32_t* n_items;
  float* out;  // [P, n_rows]
};

// --- variants of the wgmma tile kernel (A/B on the GPU; numerics-neutral) -------------------

// kSs: the dequantised weight tile goes through shared memory (both wgmma operands from shared
// memory; ExpertGemmBf16Kernel). kRs: every thread dequantises its wgmma A fragment straight into
// registers (wgmma RS form; ExpertGemmRsKernel, one m64 row tile per warpgroup, 4 warpgroups).
// kRs2: the RS kernel with two m64 row tiles per warpgroup (2 warpgroups), items of <= 96 pairs
// only (wider items take kRs). Every variant gives the same bits: each output is the same chain
// of wgmma k16 steps over the same products (the A fragments hold the values the SS tile holds).
// (Session 12 also had "rs-nofence" / "rs2-nofence", without the per-stage proxy fence: no gain
// on the H200, removed.)
enum class WgmmaVariant { kSs, kRs, kRs2 };

// The environment variable that selects a variant by name for every launch ("ss", "rs", "rs2";
// read on every call; unset, empty or unknown: kRs).
inline constexpr const char* kWgmmaVariantEnv = "DEEPINFER_EXPERTS_WGMMA";

// The variant called `name` (null, empty or unknown: kRs).
WgmmaVariant ParseWgmmaVariant(const char* name);
const char* WgmmaVariantName(WgmmaVariant v);

// Test hook: every later launch uses `v` whatever the environment; nullptr: the environment
// again (an atomic; for tests and experiments).
void SetWgmmaVariantOverride(const WgmmaVariant* v);

// The variant a wgmma launch over items of bn pairs (64, 80, 96 or 128) uses: the override, else
// the environment; kRs2 at bn 128 gives kRs.
WgmmaVariant PickWgmmaVariant(int bn);

// The RS kernel (k_moe_rs.cu) of variant v (kRs, or kRs2: bn <= 96 only) for items of <= bn
// pairs (bn 64, 80, 96 or 128); grid y = max_items, items past *n_items exit. Needs the weight
// rows (2I or D) and K (D or I) multiples of 128, K <= 8192. cudaErrorInvalidValue for kSs or a
// shape that does not exist.
cudaError_t LaunchRsGemm(WgmmaVariant v, int bn, const GemmArgs& a, int64_t max_items,
                         cudaStream_t stream);

// Items of at most this many pairs run on the streaming kernel (1, 2 or 4 token tiles of 8).
inline constexpr int kStreamMaxItemPairs = 32;

// The streaming GEMM for items of <= bn pairs (bn 8, 16 or 32; grid y = max_items, items past
// *n_items exit). Needs the weight rows (2I or D) and K (D or I) multiples of 128.
cudaError_t LaunchStreamGemm(int bn, const GemmArgs& a, int64_t max_items, cudaStream_t stream);

// --- shapes of the streaming kernel (tuning; numerics-neutral) ------------------------------

// A compiled shape of the streaming kernel. It changes only the launch and the pipelining, never
// the numbers: every output is the same MMA chain over K steps 0, 1, ... whatever the shape
// (each warp owns whole rows and walks all of K), so all shapes give the same bits.
struct StreamShape {
  const char* name;
  int warps;       // per block (16 weight rows each)
  int min_blocks;  // __launch_bounds__ blocks per SM: registers <= 65536 / (32 warps min_blocks)
  int prefetch;    // weight steps (1 KiB per warp) in flight per warp
  int slice;       // K steps per staged activation slice (one __syncthreads per slice)
  int max_nt;      // widest item served: 8 max_nt pairs (wider: ptxas spills at this budget)
};

// Every compiled shape: one kernel per shape and item width (8, 16, 32 pairs) that it fits.
// ptxas (sm_90a) registers at widths 8 / 16 / 32, no spills in any instantiated kernel:
//   w8pf4s4 127/127/128, w2pf4s4 127/127/-, w8pf2b3 80/-/- (spills at 16 and 32 pairs),
//   w4pf4s4 127/127/128, w4pf8s8 167/167/167, w16pf2s4 96/96/127, w8pf4s8 128/128/127,
//   w2pf8s8 167/167/-.
inline constexpr StreamShape kStreamShapes[] = {
    {"w8pf4s4", 8, 2, 4, 4, 4},    // 8 warps, 2 blocks per SM (the shape before the sweep)
    {"w2pf4s4", 2, 8, 4, 4, 2},    // 2 warps, 8 blocks per SM (small grids before the sweep)
    {"w8pf2b3", 8, 3, 2, 4, 1},    // 8 warps, 3 blocks per SM (<= 80 registers)
    {"w4pf4s4", 4, 4, 4, 4, 4},    // 4 warps, 4 blocks per SM
    {"w4pf8s8", 4, 3, 8, 8, 4},    // 4 warps, 3 blocks per SM (<= 168 registers), 8 KiB in flight
    {"w16pf2s4", 16, 1, 2, 4, 4},  // 16 warps, 1 block per SM
    {"w8pf4s8", 8, 2, 4, 8, 4},    // 8 warps, 2 blocks per SM, slices of 8 steps
    {"w2pf8s8", 2, 6, 8, 8, 2},    // 2 warps, 6 blocks per SM (<= 168 registers), 8 KiB in flight
};
inline constexpr int kNumStreamShapes = sizeof(kStreamShapes) / sizeof(kStreamShapes[0]);

// Index of the shape called `name` in kStreamShapes, or -1.
constexpr int FindStreamShape(std::string_view name) {
  for (int i = 0; i < kNumStreamShapes; ++i) {
    if (name == kStreamShapes[i].name) return i;
  }
  return -1;
}

// Whether a shape serves items of 8 nt pairs: nt <= max_nt, a staging thread copies one token
// row (32 warps % (32 nt) == 0) and the double-buffered slices fit in shared memory (227 KiB).
constexpr bool StreamShapeFits(const StreamShape& s, int nt) {
  return nt <= s.max_nt && s.warps % nt == 0 && 2 * s.slice * 128 * 2 * 8 * nt <= 227 * 1024;
}

// THE DEFAULT TABLE (DEEPINFER_EXPERTS_STREAM_VARIANT unset; edit it after a sweep): the first
// row whose max_grid is >= the launch's grid size in 128-row blocks (max items x ceil(rows /
// 128): at the V4.1 shape and k = 6, B = 1 is 216 / 240 (up / down GEMM), B = 32 7,776 / 8,640,
// B = 256 ~21000), whose max_nt is >= the item width (8 nt pairs) and whose shape fits that
// width. The last row must fit every width.
struct StreamTier {
  int64_t max_grid;
  int shape;   // index in kStreamShapes
  int max_nt;  // widest items the row serves
};
// Sweep on the H200 (run 54, one layer's RoutedExperts at the real shape, us): T = 1: w8pf4s4
// 56.9, w16pf2s4 56.2, w8pf4s8 56.6, w2pf4s4 (the former small-grid row) 90.8; T = 8: w8pf4s4
// 296.9, w8pf2b3 292.1; T = 32: w8pf4s4 950.2, w8pf4s8 942.9; T = 256: w8pf4s4 2608-2832 (run
// to run), w8pf4s8 2696. Then one row: w8pf4s4 everywhere (within 2% of the best at every T).
// Decode step (H200 run 126, FP8 mode, 4k, three interleaved pairs, ms): w8pf4s8 against
// w8pf4s4 B=1 1.438 / 1.434 / 1.441 against 1.445 / 1.438 / 1.445, B=8 2.724 / 2.718 / 2.742
// against 2.738 / 2.739 / 2.746, B=32 5.894 / 5.877 / 5.955 against 5.924 / 5.924 / 5.931
// (8 of 9 pairs faster, -0.3 to -0.5% on average; run 123's sweep of all shapes: no other
// faster). So w8pf4s8 for every launch up to B = 32 (both GEMMs' grids <= 9,216 blocks).
// Above, with the 128-byte weight loads (run 190, two interleaved rounds, ms): w8pf4s8 against
// w8pf4s4 B=64 8.34 / 8.38 against 8.45 / 8.45, B=128 11.15 / 11.17 against 11.23 / 11.36,
// B=256 15.08 / 15.13 against 15.19 / 15.30 (w16pf2s4: 9.6-17.1, slower). So w8pf4s8 for items
// of 8 and 16 pairs at any grid; 32-pair items (only when DEEPINFER_EXPERTS_STREAM_MAX_PAIRS is
// raised) keep w8pf4s4 on large grids (w8pf4s8 would take 128 KiB of slices: one block per SM).
inline constexpr StreamTier kDefaultStreamTiers[] = {
    {9216, FindStreamShape("w8pf4s8"), 4},
    {int64_t{1} << 62, FindStreamShape("w8pf4s8"), 2},
    {int64_t{1} << 62, FindStreamShape("w8pf4s4"), 4},
};

// The environment variable that selects one shape by name for every launch (read on every
// call; unset, empty or unknown: the default table; a shape that does not fit an item width
// falls back to the table for that width).
inline constexpr const char* kStreamVariantEnv = "DEEPINFER_EXPERTS_STREAM_VARIANT";

// The shape (index in kStreamShapes) of a launch over items of 8 * nt pairs (nt 1, 2 or 4) and
// a grid of grid128 128-row blocks, by the environment and the default table.
int PickStreamShape(int nt, int64_t grid128);

}  // namespace deepinfer::backend::cuda::kernels::moe_bf16
