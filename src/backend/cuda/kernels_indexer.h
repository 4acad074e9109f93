// Tensor-core lightning-indexer scores (k_indexer_mma.cu).
//
// Same contract as kernels::IndexerScoresVarlen (model::Backend::IndexerScoresVarlen):
// s[t, g] = sum_h (relu(q[t, h, :] . k[g, :]) * scale) * w[t, h] over row t's own keys
// (rows key_offset[t] .. of `keys`; null offset / length = one sequence of n_keys keys),
// -inf where g >= min(key_len[t], n_keys, (q_pos[t] + 1) / ratio); n_keys is the row
// stride of `scores`. Keys at or past a row's visible count are never read.
//
// Accuracy: q and keys are split exactly into three bf16 terms (SplitBf16x3) and the six
// cross products of order <= 2 are taken on mma.sync m16n8k16 with fp32 accumulation (each
// 16-channel k-step in a fresh fragment, added to the running dot with round-to-nearest),
// so each q . k carries at most 2^-21 * sum_i |q_i k_i| of dropped-term error plus the fp32
// (tensor-core) accumulation error; exactly-bf16 operands (e.g. FP4 fake-quantised) skip
// the all-zero terms. The error bound is derived in cuda_indexer_test.cc. With
// IndexerSums::kTensorCore (below) an exactly-bf16 tile is one MMA chain per score: each of the
// D / 16 MMAs may lose up to one unit in the last place of its largest addend per addend (17
// of them), so |err| <= (D / 16) * 17 * 2^-23 * sum_i |q_i k_i| before the head sum
// (TensorBoundFactor in cuda_indexer_test_util.h); when the products' block scales span a few
// octaves (FP4 fake-quantised operands usually) every partial sum is exact and so is the chain.
//
// Row groups: from kIndexerGroupMinRows = 512 rows (prefill; decode batches stay below) a
// block serves up to 4 consecutive rows that share their key offset, staging each key tile
// once for all of them; every score takes the one-row kernel's operations in the same order,
// so the bits do not depend on the grouping (IndexerScoresMmaGrouped runs a chosen group
// size; the tests compare them).
//
// Batch invariance: s[t, g] is bitwise a function of row t's q, w, q_pos, ratio, scale and
// its own keys 64 * floor(g / 64) .. (the key tile of g), never of T, n_keys, the grid or
// other rows: the K order (k-steps, then products in a fixed order), the head sum (rows g /
// g + 8 of a lane, then a fixed butterfly over the 8 row groups, then the 16-head tiles in
// order) and the term-skipping decisions depend on those inputs only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kernels {

// How a score's q . k products are summed.
// kExact: the accuracy contract above (each 16-channel k-step in a fresh fragment, added with
//   round-to-nearest; the CPU reference's accuracy).
// kTensorCore (the FP8 mode, like DeepSeek's FP8 indexer kernels, whose MMAs accumulate in the
//   tensor core): when q and the key tile are exactly bf16 (mid / lo terms all zero: FP4
//   fake-quantised operands always are), one MMA chain over all of D per score in the tensor
//   core's fp32 accumulation, dropping the per-k-step adds (4 MMAs and 16 FADDs a k-step ->
//   4 MMAs); any other tile takes the kExact operations. Deterministic and batch-invariant
//   like kExact (the same rules decide the operations); not bitwise equal to kExact in general
//   (equal while the chain's partial sums are exact, see Accuracy above).
enum class IndexerSums { kExact, kTensorCore };

// True if IndexerScoresMma handles the shape: heads a multiple of 16 in [16, 128], dim a
// multiple of 16 in [16, 256], the block's shared memory within kMaxSharedBytes, q and keys
// 16-byte aligned, 1 <= T <= 65535, ratio >= 1.
bool IndexerMmaApplicable(const float* q, const float* keys, int64_t T, int64_t heads, int64_t dim,
                          int64_t ratio);

// Shared memory bytes of one IndexerScoresMma block (one-row kernel).
int64_t IndexerMmaSharedBytes(int64_t heads, int64_t dim);

// Rows at which IndexerScoresMma switches to the row-group kernel. Below it (decode: rows of
// different sequences) the one-row kernel, whose two blocks per SM suit unrelated rows. The
// kernel cannot see on the host whether rows share keys; decode batches of 128 and 256 rows
// (one per sequence) were slower grouped (H200, 32k context, FP8 mode: B=128 20.4 -> 25.8 ms,
// B=256 31.2 -> 39.3 ms a step), so only calls of more rows than a decode batch take it.
inline constexpr int64_t kIndexerGroupMinRows = 512;

// The largest row-group size whose block fits kMaxSharedBytes (<= 4; 1 = no group kernel).
// 4 at 64 heads x 128.
int64_t IndexerMmaGroupRows(int64_t heads, int64_t dim);

// IndexerScoresMma with blocks of group_rows consecutive rows (1 = the one-row kernel,
// 2 .. IndexerMmaGroupRows = the row-group kernel; rows with different key_offset never
// share a key staging). Bitwise the same scores for every group_rows.
// cudaErrorInvalidValue when !IndexerMmaApplicable or group_rows is out of range.
cudaError_t IndexerScoresMmaGrouped(const float* q, const float* w, int64_t T, int64_t heads,
                                    int64_t dim, const float* keys, const int32_t* key_offset,
                                    const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                    int64_t ratio, float scale, float* scores, int64_t group_rows,
                                    cudaStream_t stream, IndexerSums sums = IndexerSums::kExact);

// The scores on tensor cores (group size chosen by T); cudaErrorInvalidValue when
// !IndexerMmaApplicable, cudaSuccess for empty work (n_keys <= 0).
cudaError_t IndexerScoresMma(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                             const float* keys, const int32_t* key_offset, const int32_t* key_len,
                             int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                             float* scores, cudaStream_t stream,
                             IndexerSums sums = IndexerSums::kExact);

// Tests only: the session-6 one-row kernel (each key tile loaded and split only after the
// previous tile's MMAs, no shortcut in the bf16 split), which IndexerScoresMma and
// IndexerScoresMmaPaged must match bit for bit. Same contract as IndexerScoresMmaGrouped
// with group_rows = 1.
cudaError_t IndexerScoresMmaReference(const float* q, const float* w, int64_t T, int64_t heads,
                                      int64_t dim, const float* keys, const int32_t* key_offset,
                                      const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                      int64_t ratio, float scale, float* scores,
                                      cudaStream_t stream, IndexerSums sums = IndexerSums::kExact);

// ---- Keys read in place from paged blocks (no gather into one buffer). ----

// Row t's keys through its block table: key j (j < its visible count) is the `dim` floats
// at address bases[t * max_blocks + j / rows_per_block] + (j % rows_per_block) * dim.
// bases: device int64 addresses of float rows, [T, max_blocks]; every address 16-byte
// aligned; rows_per_block >= 1 (any value: a 64-key tile may straddle blocks, each key row
// is addressed on its own); the blocks of a row need not be contiguous or in order.
// key_len: device [T] (null = n_keys for every row); key_len[t] <= max_blocks *
// rows_per_block. Table entries of keys at or past a row's visible count are never read.
struct PagedKeys {
  const int64_t* bases = nullptr;
  int64_t max_blocks = 0;
  int64_t rows_per_block = 0;
  const int32_t* key_len = nullptr;
};

// Division of n < 2^31 by a fixed d in [1, 2^31] as a multiply and a shift (the paged
// kernel's key -> block step): n / d == (n * m) >> shift with l = ceil(log2 d),
// shift = 31 + l, m = ceil(2^shift / d) < 2^32 (m d - 2^shift < d <= 2^l makes the
// quotient exact for every n < 2^31).
struct U31Divider {
  uint32_t m = 0;
  uint32_t shift = 0;

  static U31Divider For(uint32_t d) {
    uint32_t l = 0;
    while ((uint64_t{1} << l) < d) ++l;
    U31Divider r;
    r.shift = 31 + l;
    r.m = static_cast<uint32_t>(((uint64_t{1} << r.shift) + d - 1) / d);
    return r;
  }
  __host__ __device__ uint32_t Divide(uint32_t n) const {
    return static_cast<uint32_t>((uint64_t{n} * m) >> shift);
  }
};

// True if IndexerScoresMmaPaged handles the shape: as IndexerMmaApplicable without the
// pointer checks (q must still be 16-byte aligned: checked at the call).
bool IndexerMmaPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio);

// The scores of IndexerScoresMma (same contract, same -inf masking with key_len =
// keys.key_len, n_keys = the row stride of `scores`) with each row's keys read through its
// block table. Bitwise equal to IndexerScoresMma on the same keys gathered contiguously
// (key_offset = the row's start in the gathered buffer), for every T: every call runs the
// one-row kernel (paged rows never share a key staging; the row-group kernel is not used).
// cudaErrorInvalidValue when !IndexerMmaPagedApplicable, q is not 16-byte aligned, or
// keys.bases is null / max_blocks < 1 / rows_per_block < 1; cudaSuccess for empty work.
cudaError_t IndexerScoresMmaPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                  int64_t dim, const PagedKeys& keys, int64_t n_keys,
                                  const int32_t* q_pos, int64_t ratio, float scale, float* scores,
                                  cudaStream_t stream, IndexerSums sums = IndexerSums::kExact);

}  // namespace deepinfer::backend::cuda::kernels
