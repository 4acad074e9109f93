// The CUDA backend for Hopper (sm_90a): every op of model::Backend on one device and one
// stream, checked against the CPU reference (backend/cpu) by cuda_backend_test.
//
// * Memory: activations/index arrays come from a caching cudaMalloc arena (DeviceArena);
//   AllocFloats/AllocInts return zeroed device memory, like the CPU backend's calloc;
//   AllocUninitialized skips the zero-fill.
// * Weights: uploaded once, in stored precision, on first use or by UploadWeight()
//   (WeightCache); Linear dequantises tiles of rows to fp32 scratch and runs cuBLAS SGEMM
//   (plain fp32 math, no TF32), so results match the CPU reference to fp32 rounding.
// * Errors: model::Backend's ops return void, so every CUDA / cuBLAS call and every launch
//   is checked and the FIRST failure is kept as a sticky base::Status (status()); after a
//   failure, ops do nothing and CopyToHost fills its destination with NaN bytes, so a
//   failure never yields a plausible result. Asynchronous kernel faults and kernel-detected
//   bad indices surface at the next Synchronize() / CopyToHost. Set DEEPINFER_CUDA_SYNC=1
//   to synchronise after every op (the failing op is then named in the status).
// * Threads: one thread at a time per backend (like the model's use of the CPU backend).
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend/cuda/device_arena.h"
#include "backend/cuda/kernels_block128.h"
#include "backend/cuda/kernels_moe_block128.h"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/stream_tape.h"
#include "backend/cuda/weight_cache.h"
#include "base/status.h"
#include "base/statusor.h"
#include "model/backend.h"

namespace deepinfer::backend::cuda {

// Device time of one kind of op (CudaBackend::TakeOpTimings).
struct OpTiming {
  std::string label;  // op name, e.g. "RmsNorm", "Linear[attn.wq_a.weight]"
  int64_t calls = 0;
  double total_us = 0.0;  // summed device time between the op's start and end events
};

// The timing label of an op: the op name, with the weight name for Linear / GatherRows
// ("layers.<n>." removed, "ffn.experts.<e>." collapsed to "ffn.experts.*.").
std::string OpTimingLabel(std::string_view op, std::string_view weight_name);

class CudaBackend final : public model::Backend {
 public:
  // Number of usable CUDA devices; 0 when there is no driver or device (never fails).
  static int DeviceCount();
  // A backend on `device` (its own stream, cuBLAS/cuBLASLt handles). FailedPrecondition if
  // the device is not compute capability 9.0 (this build holds sm_90a code only).
  static base::StatusOr<std::unique_ptr<CudaBackend>> Create(int device = 0);
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }

  // The first error since creation, OK if none (sticky).
  base::Status status() const;
  // Waits for all enqueued work; folds asynchronous errors and kernel-reported bad indices
  // into status() and returns it.
  base::Status Synchronize() override;
  // Uploads a weight now (load time) instead of at its first use.
  base::Status UploadWeight(const model::WeightRef& w);
  // Frees every uploaded weight and the cached routed-expert tables (call when the
  // checkpoint they came from is unloaded).
  void ForgetWeights();

  int device() const { return device_; }
  // The backend's stream, for work the caller enqueues itself: first issues what the graph
  // tape holds (see set_graphs) and stops recording this thread's launches until the next op.
  cudaStream_t stream();
  size_t weight_bytes() const { return weights_.bytes(); }
  // model::Backend's side-branch hints: while ops are recorded for CUDA graphs, the side
  // branch becomes the tape's side lane (StreamTape::RecordFork), so a replayed graph runs
  // the two branches concurrently; arena releases wait for the join. Op by op (graphs off, op
  // timing, DEEPINFER_CUDA_SYNC) the ops run in the order issued. cuBLAS calls of the side
  // lane use their own handle and workspace; HcMix must stay in the main lane.
  // Only for at most `side_branch_max_rows` token rows (default kSideBranchMaxRows;
  // DEEPINFER_CUDA_SIDE_BRANCH_MAX_ROWS=<rows> at creation, 0 = never): H200 run 96, FP8
  // mode, branches on against off: B=1 1.45 against 1.53-1.56 ms, B=32 5.95 against 6.10, but
  // from 33 rows (the dense Linears on cuBLAS) they lost: B=33 6.8 against 6.3 ms (run 102),
  // B=64 10.3 against 9.0 and B=256 19.4 against 16.5.
  static constexpr int64_t kSideBranchMaxRows = 32;
  void BeginSideBranch(int64_t rows) override;
  void EndSideBranch() override;
  void JoinSideBranch() override;
  void set_side_branch_max_rows(int64_t rows) { side_branch_max_rows_ = rows; }
  // Device bytes of the kept bf16 weight copies (set_fp8_bf16_copy).
  size_t bf16_copy_bytes() const { return weights_.copy_bytes(WeightCache::CopyKind::kBf16); }
  size_t arena_bytes_live() const { return arena_.bytes_live(); }
  // Linear calls with at most this many token rows use the fused dequant GEMV kernel
  // (default kernels::kDefaultGemvTokens, at most kernels::kMaxGemvTokens; 0 = always dequantise +
  // SGEMM; DEEPINFER_CUDA_GEMV=0 sets 0 at creation).
  void set_gemv_max_tokens(int64_t t) { gemv_max_tokens_ = t; }
  // Per-op device timing (off by default; no cost when off). When on, each op records a
  // CUDA event (from a pool) at its start and end on the stream. TakeOpTimings waits for
  // the stream, returns the summed time per label (descending total time) and clears.
  void SetOpTiming(bool on);
  // CUDA graphs (default on; DEEPINFER_CUDA_GRAPHS=0 turns them off at creation): the ops'
  // stream work is recorded on a StreamTape and issued at the next synchronisation point
  // (Synchronize, CopyToHost, cuBLAS, stream()); a tape seen before is replayed as one
  // launch of its captured graph (stream_tape.h). Off while op timing or
  // DEEPINFER_CUDA_SYNC is on. Results are the same bits either way.
  void set_graphs(bool on);
  // On, and the tape still captures (a failed capture turns graphs off for good).
  bool graphs() const { return graphs_ && tape_->graphs(); }
  const StreamTape::Stats& graph_stats() const { return tape_->stats(); }
  // Tapes with at least this many kernels may become graphs (default 1).
  void set_min_graph_kernels(int64_t n) { tape_->set_min_graph_kernels(n); }
  // The tape is also issued after the op that brings it to `n` kernels (0 = only at the
  // synchronisation points; default kGraphSegmentKernels, DEEPINFER_CUDA_GRAPH_SEGMENT),
  // ramping up from 8 kernels after each Synchronize: the device starts on the first segment
  // of a step while the host records the next.
  void set_graph_segment_kernels(int64_t n) { graph_segment_kernels_ = n; }
  std::vector<OpTiming> TakeOpTimings();

  // Whether CanFuseRoutedExperts may say yes (default on; DEEPINFER_CUDA_FUSED_MOE=0 turns
  // it off at creation).
  void set_fused_experts(bool on) { fused_experts_ = on; }
  // Linear with at least `t` token rows (and a non-F32 weight) uses LinearBf16Split (default
  // 64; DEEPINFER_CUDA_BF16_GEMM=0 disables it at creation).
  void set_bf16_gemm_min_tokens(int64_t t) { bf16_gemm_min_tokens_ = t; }
  // Linear with more rows than the GEMV takes and at most `t` uses the tensor-core skinny GEMM
  // (kernels::LinearMma) where it applies (default kernels::kMaxMmaTokens; 0 = never;
  // DEEPINFER_CUDA_MMA=0 sets 0 at creation).
  void set_mma_max_tokens(int64_t t) { mma_max_tokens_ = t; }
  // SparseAttention on tensor cores (kernels::SparseAttentionMma) where it applies (default
  // on; DEEPINFER_CUDA_ATTN_MMA=0 turns it off at creation).
  void set_attention_mma(bool on) { attention_mma_ = on; }
  // Decode indexer calls read the index keys in place (IndexerScoresPaged) where the paged
  // kernel applies (default on; DEEPINFER_CUDA_PAGED_INDEXER=0 turns it off at creation, and
  // the model then gathers the keys first: the same scores, bitwise).
  void set_paged_indexer(bool on) { paged_indexer_ = on; }
  // SparseAttention reads the selected compressed entries in place through the sequences'
  // block tables (SparseAttentionArgs::comp_bases) instead of after GatherSelectedRows (default
  // on; DEEPINFER_CUDA_PAGED_ATTENTION=0 at creation or set_paged_attention(false) gathers
  // first: the same bits).
  void set_paged_attention(bool on) { paged_attention_ = on; }
  bool SparseAttentionReadsPagedEntries() const override { return paged_attention_; }
  // LinearMany shares one stream launch where it can (default on; DEEPINFER_CUDA_LINEAR_MANY=0
  // turns it off at creation: one Linear per output, the same bits).
  void set_linear_many(bool on) { linear_many_ = on; }
  // SparseAttention with at least `t` tokens uses kernels::SparseAttentionPrefill in the
  // FP8-activation mode outside batch-invariant mode, with set_attention_mma on, where it
  // applies (default kAttentionPrefillMinTokens; 0 = never; DEEPINFER_ATTN_PREFILL_MIN_TOKENS=<n>
  // at creation).
  static constexpr int64_t kAttentionPrefillMinTokens = 64;
  void set_attention_prefill_min_tokens(int64_t t) { attention_prefill_min_tokens_ = t; }
  // The same from `t` tokens where SparseAttentionPrefill runs its wgmma kernel (head_dim 512:
  // V4.1; kernels::AttnPrefillUsesWgmma), which splits a decode batch's tokens over clusters
  // (default kAttentionWgmmaMinTokens = 8; 0 = the threshold above;
  // DEEPINFER_ATTN_WGMMA_MIN_TOKENS=<n> at creation). H200 runs 211-212, 4-layer step at 4k,
  // from 1 token against the mma.sync kernel: B = 8 / 16 / 32 2.37-2.42 / 3.41-3.50 / 4.93-5.08
  // -> 2.27-2.33 / 3.25-3.31 / 4.85-4.94 ms; B = 1 / 2 / 4 no gain (1.42-1.47 / 1.55-1.65 /
  // 1.79-1.85 either way), hence 8.
  static constexpr int64_t kAttentionWgmmaMinTokens = 8;
  void set_attention_wgmma_min_tokens(int64_t t) { attention_wgmma_min_tokens_ = t; }
  // FP8-activation fast mode (kernels_fp8.h): FP8 / MXFP4 Linears and the routed experts
  // quantise their activations per 32 values to e4m3 like DeepSeek's kernels, and the
  // tensor-core indexer sums its exactly-bf16 products in the tensor core
  // (kernels::IndexerSums::kTensorCore) like DeepSeek's FP8 indexer (documented deviations from
  // the goldens; default off, DEEPINFER_CUDA_FP8_ACT=1 turns it on at creation).
  void set_fp8_activations(bool on) { fp8_activations_ = on; }
  // FP8-activation mode, not batch-invariant: an FP8 / MXFP4 Linear (and LinearGrouped) with
  // at least `t` token rows multiplies the fake-quantised activations (exact in bf16) by the
  // weight dequantised exactly to bf16 in one cuBLAS bf16 GEMM (fp32 accumulation) instead of
  // kernels::LinearFp8: the same products, another fp32 summation order (default
  // kFp8Bf16GemmMinTokens; DEEPINFER_FP8_BF16_GEMM_MIN_TOKENS=<t> at creation, 0 = never).
  static constexpr int64_t kFp8Bf16GemmMinTokens = 512;
  // FP8-activation mode (outside batch-invariant mode): a one-row Linear over a BF16 weight
  // of at least this many elements runs on cuBLAS (LinearBf16Split) instead of the GEMV.
  static constexpr int64_t kFp8CublasRowMinElements = int64_t{1} << 26;
  // FP8-activation mode (outside batch-invariant mode): a Linear over a BF16 weight below
  // kFp8CublasRowMinElements (the router, the compressor's wkv / wgate, the indexer's
  // weights_proj) with 2..kernels::kSkinnyMaxTokens token rows runs on kernels::LinearSkinnyBf16
  // (the same bf16(x) products as cuBLAS, one launch spread over clusters of 8 blocks along K)
  // instead of cuBLAS. It comes before the GEMV rule (set_gemv_max_tokens), so in FP8 mode such
  // weights at 2-32 rows take it whatever that limit. Default on;
  // DEEPINFER_FP8_SMALL_BF16_SKINNY=0 at creation keeps cuBLAS.
  void set_fp8_small_bf16_skinny(bool on) { fp8_small_bf16_skinny_ = on; }
  // Small uploads from the pinned staging (CopyToDevice, CopyDeviceMany's descriptors, up to
  // kernels::kMaxUploadKernelBytes) run as a PDL kernel that reads the host bytes before its
  // wait (kernels::UploadPinned) instead of a copy-engine transfer, which inside a graph is a
  // memcpy node that stops the kernel chain. Default on; DEEPINFER_CUDA_UPLOAD_KERNEL=0 at
  // creation keeps cudaMemcpyAsync.
  void set_upload_kernel(bool on) { upload_kernel_ = on; }
  void set_fp8_bf16_gemm_min_tokens(int64_t t) { fp8_bf16_gemm_min_tokens_ = t; }
  // FP8-activation mode, not batch-invariant: an FP8 block-32 Linear (and LinearGrouped) with
  // at most `t` token rows streams its weight through kernels::LinearStream (scales folded
  // into bf16 operands, one fp32 sum over K per output; kernels_stream.h) instead of
  // kernels::LinearFp8 (default kernels::kStreamMaxTokens; DEEPINFER_LINEAR_STREAM_MAX_TOKENS
  // =<t> at creation, 0 = never).
  void set_linear_stream_max_tokens(int64_t t) { linear_stream_max_tokens_ = t; }
  // FP8-activation mode, not batch-invariant: an FP8 block-32 Linear (and LinearGrouped) of
  // at least `min_tokens` token rows that LinearStream does not take multiplies a bf16 copy of
  // its weight with one cuBLAS bf16 GEMM (x quantised to bf16 as in the bf16 GEMM path above).
  // The copy is made by one dequantisation the first time and kept on the device with the
  // weight (WeightCache::DerivedCopy, kind kBf16); it is exact, an e4m3 value times its ue8m0 block
  // scale being a bf16 value, so only the fp32 summation order differs from LinearFp8. The copies
  // take at most `budget_bytes` in all; past that a weight keeps the per-call paths (default
  // kFp8Bf16CopyMinTokens and kFp8Bf16CopyBudget; DEEPINFER_FP8_BF16_COPY_MIN_TOKENS=<t>, 0 =
  // never, and DEEPINFER_FP8_BF16_COPY_GIB=<GiB> at creation).
  static constexpr int64_t kFp8Bf16CopyMinTokens = kernels::kStreamMaxTokens + 1;
  static constexpr size_t kFp8Bf16CopyBudget = size_t{16} << 30;
  // A copy is not made if it would leave less device memory free than this (the KV pools
  // and the arena come first); such a weight keeps the per-call paths.
  static constexpr size_t kFp8Bf16CopyKeepFree = size_t{8} << 30;
  void set_fp8_bf16_copy(int64_t min_tokens, size_t budget_bytes) {
    fp8_bf16_copy_min_tokens_ = min_tokens;
    fp8_bf16_copy_budget_ = budget_bytes;
  }
  // FP8-activation mode, not batch-invariant: an FP8 block-32 Linear (and LinearGrouped) of at
  // least `t` token rows that LinearStream does not take runs cuBLASLt's block-scaled FP8 GEMM
  // (kernels_block128.h: activations quantised per token per 128 values, the weight re-blocked
  // once to 128 x 128 scales and kept with it: at most `copy_budget_bytes` of such copies in
  // all, kFp8Block128CopyBudget by default, DEEPINFER_FP8_BLOCK128_COPY_GIB=<GiB> at creation)
  // instead of the bf16 copy and bf16 GEMM paths, which keep the calls it does not fit (row0
  // not a multiple of 128, unaligned x or y, no cuBLASLt algorithm, budget spent). Default
  // kFp8Block128MinTokens (H200 run 141: from 33 tokens on, decode B=64 / 128 steps took 8.92
  // -> 9.28 / 12.01 -> 12.32 ms against the bf16 copies, B=256 16.40 -> 16.44; 4k prefill
  // 48,877 -> 54,539 tok/s); DEEPINFER_FP8_BLOCK128_MIN_TOKENS=<t> at creation, 0 = never.
  static constexpr int64_t kFp8Block128MinTokens = 512;
  static constexpr size_t kFp8Block128CopyBudget = size_t{16} << 30;
  void set_fp8_block128_min_tokens(int64_t t) { fp8_block128_min_tokens_ = t; }
  void set_fp8_block128_copy_budget(size_t bytes) { fp8_block128_copy_budget_ = bytes; }
  size_t fp8_block128_copy_bytes() const {
    return weights_.copy_bytes(WeightCache::CopyKind::kFp8Block128);
  }
  // FP8-activation mode, not batch-invariant: RoutedExperts with at least `t` tokens runs
  // kernels::RoutedExpertsBf16 (block scales folded into bf16 operands, one fp32 sum over K;
  // weight streaming at decode, wgmma tiles at prefill) instead of kernels::RoutedExpertsFp8
  // where it applies (default kExpertsBf16MinTokens = 1: every T;
  // DEEPINFER_EXPERTS_BF16_MIN_TOKENS=<t> at creation, 0 = never).
  static constexpr int64_t kExpertsBf16MinTokens = 1;
  void set_experts_bf16_min_tokens(int64_t t) { experts_bf16_min_tokens_ = t; }
  // FP8-activation mode, not batch-invariant: RoutedExperts at prefill sizes (more than
  // kernels::ExpertsStreamMaxMeanPairs() pairs per expert on average) runs on FP8 tensor cores
  // over e4m3 copies of the MXFP4 experts at 128 x 128 block scales (kernels_moe_block128.h:
  // activations per 128 values, like the block-128 Linears), made on first use and kept next to
  // the MXFP4 bytes (which decode keeps reading): twice the expert bytes again, so off by
  // default (budget 0). At most `bytes` of such copies; a layer whose copies do not all fit
  // keeps the register path below. DEEPINFER_EXPERTS_FP8_COPY_GIB=<GiB> at creation (prefill
  // servers: `deepinfer serve --fp8-expert-copy-gib`).
  static constexpr size_t kExpertsBlock128CopyBudget = 0;
  // Without copies (budget 0, or a layer whose copies did not fit), the same FP8 prefill path
  // reads the MXFP4 bytes and builds the e4m3 operands in registers (k_moe_block128_rs.cu):
  // on by default; set_experts_block128(false) or DEEPINFER_EXPERTS_BLOCK128=0 at creation
  // keeps RoutedExpertsBf16 there.
  void set_experts_block128(bool on) { experts_block128_ = on; }
  // Decode sizes (below the block-128 path's mean pairs per expert) on the e4m3 streaming GEMM
  // of k_moe_block128_stream.cu (RoutedExpertsBlock128 in items of 8 pairs: the block-128
  // numerics, activations per 128 values) instead of RoutedExpertsBf16's bf16 stream (per-32
  // activations). On by default (issue 9, sessions 22-23: decode step -7 to -14% at B=8-256);
  // set_experts_decode_e4m3(false) or DEEPINFER_EXPERTS_DECODE_E4M3=0 at creation keeps the bf16
  // stream.
  void set_experts_decode_e4m3(bool on) { experts_decode_e4m3_ = on; }
  void set_experts_block128_copy_budget(size_t bytes) { experts_block128_copy_budget_ = bytes; }
  size_t experts_block128_copy_bytes() const {
    return weights_.copy_bytes(WeightCache::CopyKind::kExpertBlock128);
  }
  // Batch-invariant mode (backend::BackendOptions): no kernel is chosen by token count. Linear
  // skips the one-row GEMV and runs the tensor-core path in slices of at most 64 tokens
  // (FP8-mode Linears keep kernels::LinearFp8), RoutedExperts the grouped kernels in slices of
  // 256 (FP8 mode: kernels::RoutedExpertsFp8); HcMix, SparseAttentionMma / SparseAttention and
  // the indexer are invariant in every mode. The FP8-mode prefill paths (bf16 GEMM Linear,
  // RoutedExpertsBf16, SparseAttentionPrefill) are never taken. Default off
  // (DEEPINFER_BATCH_INVARIANT=1 turns it on at creation).
  void set_batch_invariant(bool on);
  bool batch_invariant() const { return batch_invariant_; }
  bool fp8_activations() const { return fp8_activations_; }
  // How the indexer kernels sum their products in the current mode: kTensorCore with FP8
  // activations (in batch-invariant mode too: the sums are batch-invariant) unless exact sums
  // are forced (DEEPINFER_CUDA_EXACT_INDEXER=1 at creation, or the setter; A/B runs).
  void set_exact_indexer_sums(bool on) { exact_indexer_sums_ = on; }
  kernels::IndexerSums indexer_sums() const {
    return fp8_activations_ && !exact_indexer_sums_ ? kernels::IndexerSums::kTensorCore
                                                    : kernels::IndexerSums::kExact;
  }

  // --- model::Backend ------------------------------------------------------------------
  float* AllocFloats(int64_t n) override;
  int32_t* AllocInts(int64_t n) override;
  // Arena memory without the zero-fill launch.
  float* AllocUninitialized(int64_t n) override;
  void Free(void* p) override;
  // Page-locked host memory (cudaHostAlloc); null on failure.
  float* AllocHostFloats(int64_t n) override;
  void FreeHostFloats(float* p) override;
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override;
  void CopyToHost(void* dst, const void* src, int64_t bytes) override;
  void CopyDevice(void* dst, const void* src, int64_t bytes) override;
  void CopyDeviceMany(const model::DeviceCopy* copies, int64_t n) override;
  void Fill(float* x, int64_t n, float value) override;

  void Linear(const float* x, int64_t T, int64_t ldx, const model::WeightRef& w, int64_t row0,
              int64_t n_rows, float* y, int64_t ldy, bool accumulate) override;
  // FP8-activation mode, up to kernels::kMaxStreamTargets outputs of one K, each bitwise its
  // own Linear: at streaming token counts one quantisation of x and one
  // kernels::LinearStreamMany launch; where every output would take LinearFp8, one
  // quantisation and LinearFp8 per output. Else Linear each.
  void LinearMany(const float* x, int64_t T, int64_t ldx, const model::LinearOut* outs,
                  int64_t n) override;
  // One GEMV launch for all groups when the GEMV applies, else one Linear per group.
  void LinearGrouped(const float* x, int64_t T, int64_t ldx, int64_t x_group_stride,
                     const model::WeightRef& w, int64_t groups, float* y, int64_t ldy) override;
  void GatherRows(const model::WeightRef& w, const int64_t* host_ids, int64_t n,
                  float* out) override;
  void Add(const float* a, const float* b, int64_t n, float* y) override;
  void Scale(float* x, int64_t n, float s) override;

  void RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight, float eps,
               float* y, int64_t ldy) override;
  void Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride, int64_t offset,
            int64_t n_pairs, const int32_t* pos, const float* inv_freq, bool inverse) override;
  void FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, model::FakeQuantKind kind) override;
  // One kernel (kernels::RopeFakeQuant) where fusable: the bits of Rope then FakeQuant.
  void RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t offset,
                     int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                     model::FakeQuantKind kind) override;

  void HcMix(const float* x, int64_t T, int64_t hc, int64_t D, const model::HcSiteWeights& w,
             float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post,
             float* comb) override;
  void HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                  float* y) override;
  // One kernel (kernels::HcCollapseNorm): the bits of HcCollapse then RmsNorm.
  void HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                      const float* weight, float eps, float* u0, float* y) override;
  void HcExpand(const float* y, const float* post, const float* comb, int64_t T, int64_t hc,
                int64_t D, float* x) override;

  void SparseAttention(const model::SparseAttentionArgs& args) override;
  void GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio, int64_t n,
                 float* out) override;
  void IndexerScores(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                     const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                     float scale, float* scores) override;
  void IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                           const float* keys, const int32_t* key_offset, const int32_t* key_len,
                           int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                           float* scores) override;
  // Paged keys on the tensor-core one-row kernel (kernels::IndexerScoresMmaPaged), below
  // kernels::kIndexerGroupMinRows rows: larger calls (prefill) keep the gathered keys and the
  // row-group kernel, which stages a key tile once for several rows (the same bits).
  bool IndexerPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio) const override;
  void IndexerScoresPaged(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                          const int64_t* key_bases, int64_t max_blocks, int64_t rows_per_block,
                          const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                          int64_t ratio, float scale, float* scores) override;
  void CandidateMask(const float* scores, int64_t T, int64_t n, const int32_t* q_pos, int64_t ratio,
                     int64_t block, int64_t keep_blocks, uint8_t* mask) override;
  void ApplyMask(float* scores, const uint8_t* mask, int64_t T, int64_t n) override;
  void TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx) override;
  void ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out) override;
  void GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k, const int64_t* bases,
                          int64_t max_blocks, const int32_t* count, int64_t rows_per_block,
                          int64_t d, float* out, int32_t* remapped) override;

  void RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T, int64_t n_experts,
                         int64_t k, bool renormalise, float scale, int32_t* experts,
                         float* weights) override;
  void SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
              const float* row_scale, float* h) override;
  // Fused for experts in MXFP4 / FP8-block32 / BF16 with D and I multiples of 32: the
  // token-slot kernels up to kernels::kMaxFusedExpertTokens rows, the grouped kernels above
  // (FP8 mode: kernels::RoutedExpertsFp8Applicable, any T). The first call for an expert
  // table uploads every expert of it and caches a device array of their pointers (keyed by
  // the table's address; dropped by ForgetWeights).
  bool CanFuseRoutedExperts(int64_t T, const model::ExpertWeights& e) const override;
  void RoutedExperts(const model::RoutedExpertsArgs& args) override;
  void GatherTokenRows(const float* x, int64_t ld, const int32_t* host_rows, int64_t n,
                       int64_t width, float* out) override;
  void ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* host_rows, float* y,
                      int64_t ld) override;

  void EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                  const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps) override;

 private:
  explicit CudaBackend(int device) : device_(device) {}
  base::Status Init();

  // True if ops may run (no earlier failure); also selects the device for this thread.
  bool Usable();
  // Records `status` as the sticky error if it is the first one (and logs it).
  void Fail(const base::Status& status);
  // Whether ops record their stream work on tape_ instead of enqueuing it.
  bool Recording() const { return graphs_ && !timing_on_ && !sync_each_op_; }
  // Issues what tape_ holds (the next stream work is issued directly or recorded after it).
  void FlushTape();
  // After an op (Done): issues the tape once it holds this step's next segment (8, 16, then
  // graph_segment_kernels_ kernels after each Synchronize).
  void MaybeFlushSegment();
  // cudaMemcpyAsync / cudaMemsetAsync on stream_, or recorded on tape_ while Recording().
  // A host-to-device copy must read the pinned staging buffer (UploadAsync); device-to-host
  // copies are never recorded (flush first). Return false after a failure (recorded).
  bool CopyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what);
  bool MemsetAsync(void* dst, int value, size_t bytes, const char* what);
  // A cuBLAS call on stream_ (`gemm`, which must own copies of everything it reads, scalars
  // included): made now, or recorded on tape_ while Recording() with `key` (key_bytes: every
  // value the call depends on; equal keys must mean equal work; the call site is added).
  // Returns false after a failure (recorded; a recorded call's failure is recorded when the
  // tape is issued).
  // `gemm` gets the cuBLAS handle to use (the side lane's own while recording it).
  bool Blas(const char* what, const uint64_t* key, size_t key_bytes,
            std::function<cublasStatus_t(cublasHandle_t)> gemm);
  // The tape lane ops are recorded in (0 = main; 0 when not recording).
  int Lane() const { return Recording() && tape_ != nullptr ? tape_->lane() : 0; }
  // Returns an arena block, or keeps it until JoinSideBranch while a branch is open.
  void ReleaseDevice(void* p, const char* what);
  // A cuBLAS handle on stream_ with the backend's modes and its own fixed workspace of
  // kCublasWorkspaceBytes (a GEMM captured into a CUDA graph must not allocate one); false,
  // with nothing left allocated, on failure.
  bool CreateBlasHandle(cublasHandle_t* handle, void** workspace);
  // The side lane's cuBLAS handle with its own workspace (made on first use; false if not).
  bool EnsureSideBlas();
  // Records a failed CUDA / cuBLAS call; returns true on success.
  bool Check(cudaError_t e, const char* what);
  bool CheckBlas(cublasStatus_t s, const char* what);
  // After each op: optional per-op synchronisation (DEEPINFER_CUDA_SYNC=1); with op timing
  // on, closes the op's timing record (labelled with `weight_name` if not empty).
  void Done(const char* what, std::string_view weight_name = {});
  // Op timing: the start event of the op in progress, and its end.
  void TimingStart();
  void TimingEnd(const char* what, std::string_view weight_name);
  cudaEvent_t TimingEvent();
  void FreeTimingEvents();

  // Scratch device memory that lives until the end of the current op (stream-ordered reuse
  // is safe: all work is on stream_).
  void* TempBytes(size_t bytes);
  template <typename T>
  T* StageToDevice(const T* host, int64_t n) {
    T* dev = static_cast<T*>(TempBytes(static_cast<size_t>(n) * sizeof(T)));
    if (dev && n > 0)
      UploadAsync(dev, host, static_cast<size_t>(n) * sizeof(T), "stage host array");
    return dev;
  }
  // Enqueues a host-to-device copy of `bytes` from `src`; the caller may reuse `src` at once.
  // Small copies go through the pinned staging buffer (a host memcpy plus a DMA from pinned
  // memory: much less host time than the driver's pageable path); large ones take the
  // pageable path. Returns false after a failure (recorded).
  bool UploadAsync(void* dst, const void* src, size_t bytes, const char* what);
  // The device reader of every staged byte has completed (after a stream synchronisation):
  // the staging buffer may be reused from its start.
  void ReclaimPinned() { pinned_used_ = 0; }
  // A device copy of a small constant host array (RoPE frequencies), uploaded on first use and
  // again only when its contents change (compared on every call: n floats). Null on failure.
  const float* DeviceConstant(const float* host, int64_t n);
  void ReleaseTemps();
  // Linear for many token rows on tensor cores. terms == 3: fp32-level accuracy, x = hi +
  // mid + lo (bf16 parts, ~2^-25 relative), three cuBLAS bf16 GEMMs with fp32 accumulation
  // (y += W x_hi, W x_mid, W x_lo); terms == 1: x rounded to bf16, one GEMM (FP8-activation
  // mode). A BF16 weight is used in place; other formats are dequantised exactly to bf16 a
  // tile of rows at a time. Not for F32 weights.
  void LinearBf16Split(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                       int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate,
                       int terms);
  // The GEMMs of LinearBf16Split: y [T, n_rows] (ld ldy) (+)= sum over the `terms` bf16
  // activation parts [T, K] (ld K) of W[row0 .., :] part^T, parts added in order.
  // Weight rows dequantised at once by the tiled Linear paths (about 32M values).
  static int64_t TileRows(int64_t cols);
  // bf16_copy: w's kept bf16 copy (all rows), multiplied in place; null: dequantise tiles.
  void LinearBf16Gemm(const uint16_t* const* parts, int terms, int64_t T,
                      const kernels::DeviceWeight& w, int64_t row0, int64_t n_rows, float* y,
                      int64_t ldy, bool accumulate, const uint16_t* bf16_copy = nullptr);
  // x [T, K] (row stride ldx) quantised for the FP8 kernels into temp memory, followed by
  // extra_bytes of scratch (extra, null if 0); q is null after a failure (recorded).
  struct Fp8Input {
    uint8_t* q = nullptr;
    float* scale = nullptr;
    void* extra = nullptr;
  };
  Fp8Input QuantizeFp8(const float* x, int64_t T, int64_t K, int64_t ldx, int64_t extra_bytes,
                       const char* what);
  // Linear in the FP8-activation mode (quantise x, then kernels::LinearFp8).
  void LinearFp8(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                 int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate);
  // x [T, K] (row stride ldx) as the bf16 bits of its kFp8Block32Pow2 values [T, K] (ld K),
  // in temp memory; null after a failure (recorded).
  const uint16_t* QuantizeFp8Bf16(const float* x, int64_t T, int64_t K, int64_t ldx);
  // Linear in the FP8-activation mode for many tokens: x quantised to bf16
  // (kernels::QuantizeFp8ActivationsBf16), then LinearBf16Gemm (on bf16_copy if not null).
  void LinearFp8Bf16(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                     int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate,
                     const uint16_t* bf16_copy);
  // LinearGrouped in the FP8-activation mode (contiguous groups, one GEMM launch).
  void LinearGroupedFp8(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                        int64_t groups, float* y, int64_t ldy);
  // LinearGroupedFp8 for many tokens: x quantised to bf16, the weight dequantised to bf16 a
  // tile of whole groups at a time (or all of w's kept bf16_copy if not null), one
  // strided-batched cuBLAS bf16 GEMM per tile.
  void LinearGroupedFp8Bf16(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                            int64_t groups, float* y, int64_t ldy, const uint16_t* bf16_copy);
  // Whether an FP8-mode Linear of T token rows may use a kept bf16 weight copy.
  bool Fp8UsesBf16Copy(int64_t T) const {
    return !batch_invariant_ && fp8_bf16_copy_min_tokens_ > 0 && fp8_bf16_copy_budget_ > 0 &&
           T >= fp8_bf16_copy_min_tokens_;
  }
  // The kept bf16 copy of FP8 weight w for a Linear of T token rows (made on first use), or
  // null when T does not use copies or the budget / device memory does not allow one.
  const uint16_t* Fp8Bf16CopyFor(const kernels::DeviceWeight& w, int64_t T);
  // Whether an FP8-mode Linear of T token rows takes the bf16 GEMM (never batch-invariant).
  bool Fp8UsesBf16Gemm(int64_t T) const {
    return !batch_invariant_ && fp8_bf16_gemm_min_tokens_ > 0 && T >= fp8_bf16_gemm_min_tokens_;
  }
  // Whether an FP8-mode Linear of T token rows may stream (never batch-invariant).
  bool Fp8UsesStream(int64_t T) const {
    return !batch_invariant_ && T <= linear_stream_max_tokens_;
  }
  // LinearFp8 / LinearGroupedFp8 for few tokens (kernels::LinearStream / LinearStreamGrouped).
  void LinearFp8Stream(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                       int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate);
  void LinearGroupedFp8Stream(const float* x, int64_t T, int64_t ldx,
                              const kernels::DeviceWeight& w, int64_t groups, float* y,
                              int64_t ldy);
  // --- the block-128 FP8 path (cuda_backend_block128.cc) ---
  bool Fp8UsesBlock128(int64_t T) const {
    return !batch_invariant_ && fp8_block128_min_tokens_ > 0 && fp8_block128_copy_budget_ > 0 &&
           T >= fp8_block128_min_tokens_;
  }
  // The re-blocked copy of FP8 weight w (made on first use), or a view with null data (not
  // convertible, budget or device memory short).
  kernels::Block128Weight Fp8Block128CopyFor(const kernels::DeviceWeight& w);
  // Linear / LinearGrouped on that path. False, with nothing done, when the call does not fit
  // it; true when it took the call (a failure is recorded).
  bool LinearFp8Block128(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                         int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate);
  bool LinearGroupedFp8Block128(const float* x, int64_t T, int64_t ldx,
                                const kernels::DeviceWeight& w, int64_t groups, float* y,
                                int64_t ldy);
  // One cuBLASLt GEMM, column-major: y^T [rows, T] (ld ldy, += if accumulate) = W[rows, K]^T
  // xq^T [K, T] (ld ld_xq) with their block-128 scales (ws: ceil(rows / 128) rows of the
  // weight copy's scale_ld, K-block fastest; xs: K / 128 rows of Block128ScaleLd(T), token
  // fastest). Operands 16-byte aligned.
  struct Block128Shape {
    int64_t rows, T, K, ld_xq, ldy;
    bool accumulate;
  };
  struct Block128Gemm {
    const uint8_t* w;
    const float* ws;
    const uint8_t* xq;
    const float* xs;
    float* y;
    Block128Shape shape;
  };
  // Whether a GEMM of this shape onto y can run (y 16-byte aligned, or null for an arena
  // scratch; ldy a multiple of 4, ld_xq of 16, a cuBLASLt algorithm: Block128AlgoFor).
  bool Block128Fits(const Block128Shape& s, const float* y);
  // The GEMMs of one block-128 Linear (cuda_backend_block128.cc), whether x / y fit them, and
  // running them (quantisation, GEMMs per group and token part, the tail's addition).
  struct Block128Plan;
  bool Block128PlanFits(const Block128Plan& p, const float* x, int64_t ldx, float* y);
  void RunBlock128Plan(const Block128Plan& p, const float* x, int64_t ldx,
                       const kernels::Block128Weight& w, int64_t row0, float* y, int64_t ldy);
  // Issued now or recorded on the tape (after Block128Fits); false after a failure (recorded).
  bool RunBlock128Gemm(const Block128Gemm& g);
  // cuBLASLt's heuristic for the shape (16-byte alignment assumed), cached; nullopt: none.
  std::optional<cublasLtMatmulAlgo_t> Block128AlgoFor(const Block128Shape& s);
  // (Cleared when it reaches kMaxBlock128Algos entries: one per prefill length and shape.)
  std::map<std::array<int64_t, 5>, std::optional<cublasLtMatmulAlgo_t>> block128_algos_;
  static constexpr size_t kMaxBlock128Algos = 4096;

  // The persistent fp32 dequantisation tile for Linear, grown on demand.
  float* LinearScratch(int64_t floats);

  // The device pointer table of a routed-expert table (uploads its experts the first time);
  // null after a failure (recorded).
  struct ExpertTable {
    kernels::ExpertPointers* device = nullptr;  // cudaMalloc'ed [n_experts]
    int64_t n_experts = 0;
    // Identity of the host table it was built from (checked on every use).
    const void* first_w1 = nullptr;
    const void* last_w2 = nullptr;
    model::WeightFormat up_format = model::WeightFormat::kMxFp4;
    model::WeightFormat down_format = model::WeightFormat::kMxFp4;
    int64_t D = 0, I = 0;
    bool scales_aligned4 = true;  // every scale pointer 4-byte aligned (the FP8 kernels)
    // The block-128 copies' pointer table (ExpertBlock128TableFor), once made; refused: some
    // copy could not be made (budget or memory), not asked again.
    kernels::ExpertBlock128Pointers* block128 = nullptr;
    bool block128_refused = false;
    // kernels::ExpertRowScaleMax of the table (the block-128 register path's row scales), made
    // on first use: [n_experts][ExpertRowScaleMaxStride(D, I)] bytes; refused: could not be
    // made (the kernels then make them at every call), not asked again.
    uint8_t* row_smax = nullptr;
    bool row_smax_refused = false;
  };
  ExpertTable* ExpertTableFor(const model::RoutedExpertsArgs& args);
  // The kernels' view of a RoutedExperts call on a cached expert table.
  kernels::RoutedExpertsLaunch ExpertsLaunch(const model::RoutedExpertsArgs& args,
                                             const ExpertTable& table) const;
  // RoutedExperts in the FP8-activation mode: outside batch-invariant mode at prefill sizes
  // kernels::RoutedExpertsBlock128 (on the e4m3 copies within the budget, else from the MXFP4
  // bytes unless experts_block128_ is off), at decode sizes with experts_decode_e4m3_ the same
  // in items of 8 pairs, else kernels::RoutedExpertsBf16 from experts_bf16_min_tokens_ tokens,
  // else kernels::RoutedExpertsFp8.
  void RoutedExpertsFp8(const model::RoutedExpertsArgs& args, ExpertTable& table);
  // Whether RoutedExpertsBlock128 may take this call at all (not batch-invariant, MXFP4 experts
  // with 4-byte aligned scales, x 16-byte aligned); the caller checks the sizes.
  bool Block128Eligible(const model::RoutedExpertsArgs& args, const ExpertTable& table) const;
  // RoutedExpertsBlock128 in items of item_pairs pairs, its scratch from the arena.
  void RunRoutedExpertsBlock128(const model::RoutedExpertsArgs& args, const ExpertTable& table,
                                int item_pairs, const kernels::ExpertBlock128Pointers* copies,
                                const uint8_t* row_smax, const char* what);
  // The table's row scales for the block-128 register path (made on first use); null when they
  // could not be made (a warning; RoutedExpertsBlock128 then makes them itself).
  const uint8_t* ExpertRowScaleMaxFor(ExpertTable& table);
  // The device table of block-128 copies of the call's experts (made on first use); null when
  // they do not all fit (the table remembers that) or after a failure (recorded).
  const kernels::ExpertBlock128Pointers* ExpertBlock128TableFor(
      const model::RoutedExpertsArgs& args, ExpertTable& table);
  // Whether all of a layer's copies fit the budget and the free memory (logs why not).
  bool ExpertBlock128CopiesFit(const model::RoutedExpertsArgs& args, const ExpertTable& table);
  // The block-128 copy of one expert matrix (made on first use); null if not made.
  const void* ExpertBlock128CopyOf(const model::WeightRef& ref);
  base::StatusOr<ExpertTable> BuildExpertTable(const model::RoutedExpertsArgs& args);
  // A device copy of `bytes` host bytes (cudaMalloc; uploaded and waited for on the stream);
  // ResourceExhausted naming `what` on failure.
  base::StatusOr<void*> UploadTable(const void* host, size_t bytes, const char* what);
  void FreeExpertTable(ExpertTable& table);  // its device tables (the stream must be idle)
  void FreeExpertTables();

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;  // the block-128 FP8 GEMMs (shares cuBLAS's workspaces)
  void* cublas_workspace_ = nullptr;      // cublasSetWorkspace, kCublasWorkspaceBytes
  // A fixed cuBLAS workspace per handle (cuBLAS's Hopper default size): a GEMM captured into
  // a CUDA graph must not allocate one.
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
  cublasHandle_t cublas_side_ = nullptr;   // the side lane's (EnsureSideBlas)
  void* cublas_side_workspace_ = nullptr;  // its workspace, kCublasWorkspaceBytes
  int* error_word_ = nullptr;              // device int, DeviceErrorBit flags
  int* error_host_ = nullptr;              // page-locked int: where Synchronize reads it to
  unsigned* hc_mix_counters_ = nullptr;    // kernels::kHcMixCounters, zero between HcMix calls
  bool sync_each_op_ = false;
  int64_t gemv_max_tokens_ = 0;           // set in Init()
  bool fused_experts_ = true;             // set in Init()
  int64_t bf16_gemm_min_tokens_ = 0;      // set in Init(); LinearBf16Split from this many rows
  bool attention_mma_ = true;             // set in Init(); SparseAttentionMma where it applies
  int64_t mma_max_tokens_ = 0;            // set in Init(); LinearMma above the GEMV up to this
  bool fp8_activations_ = false;          // set in Init(); the FP8-activation fast mode
  bool exact_indexer_sums_ = false;       // set in Init(); indexer_sums()
  int64_t fp8_bf16_gemm_min_tokens_ = 0;  // set in Init(); FP8 mode's bf16 GEMM (0 = never)
  bool paged_indexer_ = true;
  bool paged_attention_ = true;
  bool linear_many_ = true;
  int64_t linear_stream_max_tokens_ = 0;     // set in Init(); FP8 mode's LinearStream (0 = never)
  int64_t fp8_bf16_copy_min_tokens_ = 0;     // set in Init(); kept bf16 weight copies (0 = never)
  size_t fp8_bf16_copy_budget_ = 0;          // set in Init(); their device bytes at most
  int64_t fp8_block128_min_tokens_ = 0;      // set in Init(); cuBLASLt block-128 FP8 (0 = never)
  size_t fp8_block128_copy_budget_ = 0;      // set in Init(); its re-blocked copies' bytes at most
  int64_t experts_bf16_min_tokens_ = 0;      // set in Init(); RoutedExpertsBf16 (0 = never)
  size_t experts_block128_copy_budget_ = 0;  // set in Init(); expert block-128 copies (0 = off)
  bool experts_block128_ = true;             // set in Init(); the register path without copies
  bool upload_kernel_ = true;                // set in Init(); UploadPinned for small uploads
  bool fp8_small_bf16_skinny_ = true;        // set in Init(); LinearSkinnyBf16 at 2-32 rows
  bool experts_decode_e4m3_ = true;          // set in Init(); decode sizes on e4m3 wgmma
  bool batch_invariant_ = false;             // set in Init(); set_batch_invariant

  // Set in Init(); SparseAttentionPrefill from this many tokens (FP8 mode; 0 = never).
  int64_t attention_prefill_min_tokens_ = kAttentionPrefillMinTokens;
  int64_t attention_wgmma_min_tokens_ = kAttentionWgmmaMinTokens;
  std::unordered_map<const model::ExpertWeights*, ExpertTable> expert_tables_;
  bool graphs_ = true;                 // set in Init(); set_graphs
  int64_t graph_segment_kernels_ = 0;  // set in Init(); set_graph_segment_kernels
  int64_t segments_since_sync_ = 0;    // segments issued by Done since Synchronize
  std::unique_ptr<StreamTape> tape_;   // created in Init(), on stream_
  DeviceArena arena_;
  WeightCache weights_;
  std::vector<void*> temps_;
  struct TimingRecord {
    std::string label;
    int start, end;  // indices into timing_events_
  };
  bool timing_on_ = false;
  int timing_pending_ = -1;  // start event of the op in progress, -1 if none
  int timing_next_ = 0;      // next free event of the pool
  std::vector<cudaEvent_t> timing_events_;
  std::vector<TimingRecord> timing_records_;
  float* linear_scratch_[2] = {};  // per tape lane (LinearScratch)
  int64_t linear_scratch_floats_[2] = {};
  enum class Branch { kNone, kSide, kMain };  // the side-branch hints' state
  Branch branch_ = Branch::kNone;
  int64_t side_branch_max_rows_ = 0;      // set in Init(); set_side_branch_max_rows
  std::vector<void*> deferred_releases_;  // arena blocks released while a branch is open
  struct DeviceConstantEntry {
    std::vector<float> host;  // the contents last uploaded
    float* device = nullptr;  // arena block
  };
  std::unordered_map<const float*, DeviceConstantEntry> constants_;
  // Pinned staging buffer of UploadAsync: [0, pinned_used_) is awaiting its DMA readers.
  char* pinned_ = nullptr;
  size_t pinned_capacity_ = 0;
  size_t pinned_used_ = 0;

  mutable std::mutex status_mu_;
  base::Status status_;
  std::atomic<bool> failed_{false};
};

}  // namespace deepinfer::backend::cuda
