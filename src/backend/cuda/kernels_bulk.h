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

// Every field of `from` into `to`, whose padding bytes are left as they are (LinearBulkMany
// zeroes them first: a StreamTape compares parameter bytes).
void CopyBulkTargetFields(const BulkTarget& from, BulkTarget* to);

// True if LinearBulkMany takes these targets: 1 <= n <= kMaxBulkTargets, 1 <= T <=
// kBulkMaxTokens, xf non-null and 16-byte aligned, and every target has non-null w (16-byte
// aligned), scale and y, K a positive multiple of 128, row0 >= 0 and n_rows > 0 multiples of
// 16, group_rows > 0 (a multiple of 16 when group_steps != 0), group_steps >= 0, ldy >= n_rows.
// row0 + n_rows and K below 2^31 (box coordinates are int). (The weight's own row count
// is not known here: row0 + n_rows <= rows is the caller's.)
bool LinearBulkApplicable(const BulkTarget* targets, int n, const void* xf, int T);

// Every target in one launch over the activations xf (fragment order, see above; for grouped
// targets xf holds groups * K / 128 steps). cudaErrorInvalidValue when not applicable; with a
// tensor ring also when the driver rejects a map, cudaErrorNotSupported when the driver has
// no cuTensorMapEncodeTiled.
cudaError_t LinearBulkMany(const BulkTarget* targets, int n, const void* xf, int T,
                           cudaStream_t stream);

// Tests and benchmarks: the shared-memory ring of later launches (process-wide; no ring
// changes the bits). Stages x K steps per stage, per warp. Eager: a stage's weights go to
// registers right after its wait and it is refilled at once; lazy: each step is read just
// before its MMAs, a stage refilled after the wait for the next (fewer registers, one stage
// fewer in flight). kEager*/kLazy* fill a stage with one cp.async.bulk per row (16 x 128 *
// steps bytes); kTensor* with ONE tensor-map copy (cp.async.bulk.tensor: a box of the stage's
// steps x 16 rows, 128-byte swizzled in shared memory; a warp's last, partial stage one 2D
// box per step): kTensor3x2 eager 3 x 2 (4 KiB copies), kTensor2x4 lazy 2 x 4 (8 KiB),
// kTensor6x1 eager 6 x 1 (2 KiB, 2D map only). kTensorBlock3x2: for targets of split 1 one
// ring per BLOCK (its 8 warps' 128 rows) filled by thread 0 with one 128-row box per stage
// (32 KiB; 3 x 2, eager), each warp releasing a stage through an "empty" barrier after reading
// its 16 rows (a launch with a target of split > 1 runs as kTensor3x2). kDefault = the process
// default: kEager3x2, or the ring that LinearBulkRingFromEnv gives for DEEPINFER_LINEAR_BULK_TMA2D
// (read once).
enum class BulkRing {
  kDefault = 0,
  kEager2x2 = 1,
  kLazy3x2 = 2,
  kLazy2x3 = 3,
  kEager3x2 = 4,
  kTensor3x2 = 5,
  kTensor2x4 = 6,
  kTensor6x1 = 7,
  kTensorBlock3x2 = 8
};
void SetLinearBulkRing(BulkRing ring);

// The default ring for a value of DEEPINFER_LINEAR_BULK_TMA2D: "1" kTensor3x2, "2"
// kTensor2x4, "3" kTensor6x1, "4" kTensorBlock3x2; anything else (or null: unset) kEager3x2.
BulkRing LinearBulkRingFromEnv(const char* tma2d);

// --- the tensor-map rings' host side (exposed for tests) -----------------------------------

// Most K steps in one box.
inline constexpr int kBulkMaxBoxSteps = 8;

// The uint8 view of a target's weight that a tensor map encodes (rows: row0 + n_rows of
// them, the rows the target reads). box_steps == 1 (the step map): rank 2, dims {K, rows},
// byte stride of dim 1 K, box {128, box_rows} (one K step of box_rows rows). box_steps > 1
// (the stage map): rank 3, dims {128 bytes of a K step, rows, K / 128 steps}, byte strides of
// dims 1 and 2 {K, 128}, box {128, box_rows, box_steps}. box_rows: 16 (a warp's rows) or 128
// (a block's: kTensorBlock3x2; may pass the last row: zeros). Unused entries are 0. The view
// determines the map (no interleave, 128-byte swizzle, L2 promotion 256 B, no OOB fill): it is the
// key of the process-wide map cache.
struct BulkTensorView {
  int rank;             // 2 or 3
  const void* base;     // the weight (row 0, byte 0): 16-byte aligned
  uint64_t dims[3];     // elements (bytes) per dim
  uint64_t strides[2];  // bytes between consecutive indices of dims 1 and 2
  uint32_t box[3];      // box elements per dim
};

// False (view untouched) unless the target is one LinearBulkApplicable takes (alignment:
// base 16-byte aligned, row stride K a multiple of 128, rows and K < 2^31) and 1 <=
// box_steps <= min(kBulkMaxBoxSteps, K / 128), box_rows 16 or 128.
bool LinearBulkTensorView(const BulkTarget& t, int box_steps, BulkTensorView* view,
                          int box_rows = 16);

// Tensor maps encoded successfully so far (distinct views; the cache empties itself at 4096
// views). A stage map the driver rejects is not counted (its ring then uses step boxes).
int64_t LinearBulkTensorMapsCached();

}  // namespace deepinfer::backend::cuda::kernels
