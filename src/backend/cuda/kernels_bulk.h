// FP8-activation mode, decode: the weight-streaming Linear of kernels_stream.h (LinearStream)
// with its weight bytes brought into shared memory by the TMA engine (cp.async.bulk) instead
// of per-thread global loads (k_linear_bulk.cu). Same numerics, same split of K over warps,
// same MMA order: the results are BITWISE those of LinearStream / LinearStreamMany /
// LinearStreamGrouped for T <= 8 tokens (one 8-token MMA column).
//
// Input: the activations already quantised in LinearStream's fragment order for one token
// tile (what QuantizeStreamKernel writes into LinearStream's scratch for T <= 8; tokens T..7
// are zeros): for K step st (128 values), 16-byte unit q (0..3), lane (n, c) = (token n,
// 32-value chunk st * 4 + c) the uint4 at (st * 4 + q) * 32 + 4 n + c. The kernel reads the
// units of tokens n < T only (the others are zeros by contract and are not read).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kernels {

// Targets per launch at most (as kMaxStreamTargets).
inline constexpr int kMaxBulkTargets = 4;
// Tokens at most (one token tile).
inline constexpr int kBulkMaxTokens = 8;

// One weight (row range) of a launch; the fields mean what StreamArgs's do in
// k_linear_stream.cu. y[t * ldy + i] (+)= sum_k x[t, k] * W[row0 + i, k] for i < n_rows.
struct BulkTarget {
  const uint8_t* w;      // e4m3 [rows, K] row-major, 16-byte aligned
  const uint8_t* scale;  // ue8m0 [ceil(rows / 32), K / 32]
  int64_t K;             // weight columns, a positive multiple of 128
  int64_t row0;          // first weight row, a multiple of 16
  int64_t n_rows;        // output rows, a positive multiple of 16
  int64_t group_rows;    // weight rows per x group (grouped weight: rows / groups; else rows)
  int64_t group_steps;   // x steps per group (grouped: K / 128; else 0)
  float* y;
  int64_t ldy;
  bool accumulate;
};

// True if LinearBulkMany takes these targets: 1 <= n <= kMaxBulkTargets, 1 <= T <=
// kBulkMaxTokens, xf non-null and 16-byte aligned, and every target has non-null w (16-byte
// aligned), scale and y, K a positive multiple of 128, row0 >= 0 and n_rows > 0 multiples of
// 16, group_rows > 0 (a multiple of 16 when group_steps != 0), group_steps >= 0, ldy >= n_rows.
// (The weight's own row count is not known here: row0 + n_rows <= rows is the caller's.)
bool LinearBulkApplicable(const BulkTarget* targets, int n, const void* xf, int T);

// Every target in one launch over the activations xf (fragment order, see above; for grouped
// targets xf holds groups * K / 128 steps). cudaErrorInvalidValue when not applicable.
cudaError_t LinearBulkMany(const BulkTarget* targets, int n, const void* xf, int T,
                           cudaStream_t stream);

// Tests and benchmarks: the shared-memory ring of later launches (process-wide; no ring
// changes the bits). Stages x K steps per stage, per warp. Eager: a stage's weights go to
// registers right after its wait and it is refilled at once; lazy: each step is read just
// before its MMAs, a stage refilled after the wait for the next (fewer registers, one stage
// fewer in flight). kDefault = eager 3 x 2.
enum class BulkRing { kDefault = 0, kEager2x2 = 1, kLazy3x2 = 2, kLazy2x3 = 3 };
void SetLinearBulkRing(BulkRing ring);

}  // namespace deepinfer::backend::cuda::kernels
