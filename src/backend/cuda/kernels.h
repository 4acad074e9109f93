// Kernel launchers of the CUDA backend (defined in the k_*.cu files).
//
// Every launcher enqueues its work on `stream` and returns the launch status
// (cudaGetLastError() after the launch; cudaSuccess for empty work). Pointers are device
// pointers unless named host_*. Shapes and layouts are those of model/backend.h; the
// CudaBackend validates arguments (limits below) before calling a launcher.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels_indexer.h"
#include "model/backend.h"

namespace deepinfer::backend::cuda::kernels {

// Limits of the first kernel versions (CudaBackend reports Unimplemented beyond them).
inline constexpr int64_t kMaxHc = 4;               // HcMix: (2+hc)*hc <= 24 mix logits
inline constexpr int64_t kMaxHcExpand = 8;         // HcExpand: streams held in registers
inline constexpr int64_t kMaxAttnHeadDim = 1024;   // SparseAttention: 8 channels x 128 threads
inline constexpr int64_t kMaxTopK = 4096;          // TopK / CandidateMask kept blocks
inline constexpr int64_t kMaxRouteExperts = 8192;  // RouteSqrtSoftplus: shared-memory row
inline constexpr int64_t kMaxSharedBytes = 200 * 1024;
inline constexpr int64_t kMaxGemvTokens = 32;  // LinearGemv: token rows (passes of <= 8)
// Linear uses the GEMV up to this many rows by default. On an H200 (2026-11-30) it streamed
// the BF16 head at 4 TB/s for one row, faster than the tensor-core path (k_mma.cu), but only
// 0.45 TB/s at 8 rows, where the tensor-core path reached 2.6 TB/s.
inline constexpr int64_t kDefaultGemvTokens = 1;
inline constexpr int64_t kMaxFusedExpertTokens = 64;  // RoutedExperts: token rows per call
inline constexpr int64_t kMaxFusedExpertSlots = 64;   // RoutedExperts: experts per token (k)

// Bits of the device error word (CudaBackend::Synchronize turns them into a Status).
enum DeviceErrorBit : int {
  kErrSelectionOutOfRange = 1,  // SparseAttention selection id >= n_comp
  kErrExpertOutOfRange = 2,     // RoutedExperts expert id outside [0, n_experts)
};

// `bytes` rounded up to a multiple of 16 (scratch layouts keep every part 16-byte aligned).
inline constexpr int64_t AlignUp16(int64_t bytes) { return (bytes + 15) / 16 * 16; }
// Whether p is 16-byte aligned (host; what the vector and tensor-core paths need).
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Carves 16-byte-aligned parts out of one scratch allocation, in call order: Take(bytes)
// returns the part's byte offset; total() is the scratch size so far.
class ScratchCarver {
 public:
  int64_t Take(int64_t bytes) {
    const int64_t at = at_;
    at_ += AlignUp16(bytes);
    return at;
  }
  int64_t total() const { return at_; }

 private:
  int64_t at_ = 0;
};

// A weight matrix in device memory, in its stored format (see model::WeightFormat).
struct DeviceWeight {
  model::WeightFormat format = model::WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  const uint8_t* scale = nullptr;
};

// --- elementwise (k_elementwise.cu) ---------------------------------------------------
cudaError_t Fill(float* x, int64_t n, float value, cudaStream_t stream);
cudaError_t Add(const float* a, const float* b, int64_t n, float* y, cudaStream_t stream);
cudaError_t Scale(float* x, int64_t n, float s, cudaStream_t stream);
cudaError_t SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
                   const float* row_scale, float* h, cudaStream_t stream);
cudaError_t ApplyMask(float* scores, const uint8_t* mask, int64_t count, cudaStream_t stream);
cudaError_t GatherTokenRows(const float* x, int64_t ld, const int32_t* rows, int64_t n,
                            int64_t width, float* out, cudaStream_t stream);
// rows_unique: no row repeats (one parallel pass); otherwise rows are added in order.
cudaError_t ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* rows,
                           bool rows_unique, float* y, int64_t ld, cudaStream_t stream);
cudaError_t GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio, int64_t n,
                      float* out, cudaStream_t stream);
cudaError_t HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D, float* y,
                       cudaStream_t stream);
cudaError_t HcExpand(const float* y, const float* post, const float* comb, int64_t T, int64_t hc,
                     int64_t D, float* x, cudaStream_t stream);
// inv_freq: device [n_pairs].
cudaError_t Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride,
                 int64_t offset, int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                 bool inverse, cudaStream_t stream);

// --- row reductions (k_norm.cu; the mHC mix: k_hcmix.cu) --------------------------
cudaError_t RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                    float eps, float* y, int64_t ldy, cudaStream_t stream);
// HcCollapse (x [T, hc, D] -> u0 [T, D]) then RmsNorm(u0) -> y [T, D] (weight may be null), in
// one launch where RmsNorm would hold the rows in registers; the two kernels' bits either way.
cudaError_t HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                           const float* weight, float eps, float* u0, float* y,
                           cudaStream_t stream);
// The mHC pre-mix (model::Backend::HcMix), each token's 2 MB fn projection split into
// HcMixSplits(T, hc, D) = ceil(hc * D / 128) slices of 128 columns (a split that does not
// depend on T; one warp per slice and group of tokens, butterfly reduce-scatter), partial sums
// then the finish per token: for T <= 32 with `counters` in the same kernel (the last block
// of each token group finishes it), else a finish kernel. The same bits either way.
// scratch: T * HcMixSplits(T, hc, D) * 25 floats of device memory. counters: null (two
// kernels), or kHcMixCounters zeroed device unsigned ints that every call leaves zeroed, used
// by one stream's calls only (calls running at the same time need their own).
inline constexpr int64_t kHcMixCounters = 8;
int64_t HcMixSplits(int64_t T, int64_t hc, int64_t D);
cudaError_t HcMixSplit(const float* x, int64_t T, int64_t hc, int64_t D,
                       const model::HcSiteWeights& w, float norm_eps, float hc_eps,
                       int sinkhorn_iters, float* pre, float* post, float* comb, float* scratch,
                       unsigned* counters, cudaStream_t stream);
cudaError_t EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                       const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps,
                       cudaStream_t stream);

// --- quantisation (k_quant.cu) --------------------------------------------------------
cudaError_t FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, model::FakeQuantKind kind,
                      cudaStream_t stream);
// Rope (forward) on x [rows, heads, head_dim] (rows' positions pos, pairs from `offset`) then
// FakeQuant of its rows * heads rows of head_dim values, in one launch with the bits of the
// two kernels. Fusable: head_dim % 32 == 0, offset even, the pairs inside the head (else
// cudaErrorInvalidValue).
bool RopeFakeQuantFusable(int64_t head_dim, int64_t offset, int64_t n_pairs);
cudaError_t RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t offset,
                          int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                          model::FakeQuantKind kind, cudaStream_t stream);
// out [n, w.cols] = rows row0 .. row0+n-1 of w, dequantised to fp32.
cudaError_t DequantRows(const DeviceWeight& w, int64_t row0, int64_t n, float* out,
                        cudaStream_t stream);
// Rows [row0, row0 + n) dequantised to bf16 bits [n, cols] (exact for every format but F32,
// which returns cudaErrorInvalidValue).
cudaError_t DequantRowsBf16(const DeviceWeight& w, int64_t row0, int64_t n, uint16_t* out,
                            cudaStream_t stream);
// x [T, K] (ld ldx) as three bf16 [T, K] arrays with x = hi + mid + lo to ~2^-25
// relative (two terms leave ~2^-17, which the model's fake-quant points amplify). With mid
// and lo null, only hi = x rounded to nearest bf16 is written.
cudaError_t SplitBf16(const float* x, int64_t T, int64_t K, int64_t ldx, uint16_t* hi,
                      uint16_t* mid, uint16_t* lo, cudaStream_t stream);
// out [n, w.cols] = rows ids[i] of w (ids device, validated by the caller).
cudaError_t GatherWeightRows(const DeviceWeight& w, const int64_t* ids, int64_t n, float* out,
                             cudaStream_t stream);

// --- fused dequant GEMV for few token rows (k_gemv.cu) -----------------------------
// True if LinearGemv handles w with T rows (1 <= T <= kMaxGemvTokens, whole 16-byte
// chunks per row, 16-byte aligned data).
// Tokens run in passes of up to 8 (each pass reads the weight once).
bool GemvApplicable(const DeviceWeight& w, int64_t T);
// y[t, i] (+)= sum_k x[t, k] * W[row0 + i, k] for i < n_rows, t < T.
cudaError_t LinearGemv(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                       int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                       cudaStream_t stream);
// Grouped weight (block-diagonal product, e.g. wo_a): row i of [row0, row0 + n_rows) reads
// x columns [g*x_group_stride, g*x_group_stride + cols) with g = i / group_rows. One launch
// for all groups. Applicable when GemvApplicable and 32 divides group_rows.
bool GemvGroupedApplicable(const DeviceWeight& w, int64_t T, int64_t group_rows);
cudaError_t LinearGemvGrouped(const DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                              int64_t T, int64_t ldx, float* y, int64_t ldy, bool accumulate,
                              int64_t group_rows, int64_t x_group_stride, cudaStream_t stream);

// --- fused routed experts for few token rows (k_moe.cu) ----------------------------
// Device pointers of one expert's stored weights: [0] w1 (gate) [I, D], [1] w2 (down)
// [D, I], [2] w3 (up) [I, D]; data 16-byte aligned, scale null for BF16.
struct ExpertPointers {
  const void* data[3];
  const uint8_t* scale[3];
};

// One RoutedExperts launch (model::RoutedExpertsArgs with the expert table on the device).
struct RoutedExpertsLaunch {
  const ExpertPointers* table = nullptr;  // device [n_experts]
  int64_t n_experts = 0;
  model::WeightFormat up_format = model::WeightFormat::kMxFp4;    // w1 and w3
  model::WeightFormat down_format = model::WeightFormat::kMxFp4;  // w2
  int64_t D = 0, I = 0;
  const float* x = nullptr;  // [T, D]
  int64_t T = 0;
  const int32_t* experts = nullptr;  // [T, k]
  const float* weights = nullptr;    // [T, k]
  int64_t k = 0;
  float swiglu_limit = 0.0f;
  float* y = nullptr;  // [T, D], overwritten
  int* error_word = nullptr;
};

// True if RoutedExperts handles these formats and shapes: MXFP4 / FP8-block32 / BF16,
// D and I multiples of 32, 1 <= T <= kMaxFusedExpertTokens, 1 <= k <= kMaxFusedExpertSlots,
// a padded D (and I) vector within 48 KiB of shared memory.
bool RoutedExpertsApplicable(model::WeightFormat up_format, model::WeightFormat down_format,
                             int64_t D, int64_t I, int64_t T, int64_t k);
// Runs the routed experts; h is scratch of RoutedExpertsScratchFloats floats.
cudaError_t RoutedExperts(const RoutedExpertsLaunch& launch, float* h, cudaStream_t stream);
inline int64_t RoutedExpertsScratchFloats(int64_t T, int64_t k, int64_t I) { return T * k * I; }

// --- attention pieces (k_attention.cu) ------------------------------------------------
// SparseAttention (and SparseAttentionMma): out[t] is bitwise a function of token t's own
// inputs (q rows, position, sinks, and its candidates trimmed to the window rows between its
// first and last attended one and the selection slots between its first and last non-empty
// one), never of args.tokens, n_select padding, masked rows around its window range or the
// other tokens of the call (fixed lanes and merge tree, see attention_common.cuh).
cudaError_t SparseAttention(const model::SparseAttentionArgs& args, int* error_word,
                            cudaStream_t stream);
cudaError_t IndexerScores(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                          const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                          float scale, float* scores, cudaStream_t stream,
                          IndexerSums sums = IndexerSums::kExact);
// Varlen: row t reads rows key_offset[t] .. of keys, entries >= key_len[t] are -inf (both
// int32 [T] device arrays; null = the single-sequence meaning). `sums` applies where the
// tensor-core kernels run (IndexerMmaApplicable; kernels_indexer.h), the fp32 fallback is exact.
cudaError_t IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads,
                                int64_t dim, const float* keys, const int32_t* key_offset,
                                const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                int64_t ratio, float scale, float* scores, cudaStream_t stream,
                                IndexerSums sums = IndexerSums::kExact);
// Shared memory IndexerScores needs (the caller checks it against kMaxSharedBytes).
int64_t IndexerScoresSharedBytes(int64_t heads, int64_t dim);

// --- sampling (k_sample.cu) -----------------------------------------------------------
// model::Backend::ArgmaxRows: out[r] (int32 [rows], device) = the first maximum of row r.
cudaError_t ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out,
                       cudaStream_t stream);

// --- selection (k_topk.cu; the router: k_route.cu) ------------------------------------
cudaError_t TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx,
                 cudaStream_t stream);
// block_scores [T, ceil(n/block)]: max per block, newest visible block forced to +inf.
cudaError_t CandidateBlockScores(const float* scores, int64_t T, int64_t n, const int32_t* q_pos,
                                 int64_t ratio, int64_t block, float* block_scores,
                                 cudaStream_t stream);
// mask [T, n] (already zeroed): 1 for the entries of blocks kept [T, keep] (-1 = none).
cudaError_t MarkKeptBlocks(const int32_t* kept, int64_t T, int64_t keep, int64_t n, int64_t block,
                           uint8_t* mask, cudaStream_t stream);
cudaError_t RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T, int64_t n_experts,
                              int64_t k, bool renormalise, float scale, int32_t* experts,
                              float* weights, cudaStream_t stream);

}  // namespace deepinfer::backend::cuda::kernels
