// CudaBackend: normalisation, RoPE, fake-quant, mHC, attention pieces, MoE and Engram ops.
// Each op validates what the kernels cannot handle (reported as a sticky Unimplemented
// status, never a wrong result), launches, and checks the launch.
#include <algorithm>
#include <string>
#include <unordered_set>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_attn_prefill.h"
#include "backend/cuda/kernels_indexer.h"
#include "base/check.h"

namespace deepinfer::backend::cuda {
namespace {

base::Status Unsupported(const std::string& op, const std::string& what) {
  return base::UnimplementedError("CudaBackend::" + op + ": " + what);
}

}  // namespace

void CudaBackend::RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                          float eps, float* y, int64_t ldy) {
  if (rows <= 0 || !Usable()) return;
  Check(kernels::RmsNorm(x, rows, n, ldx, weight, eps, y, ldy, stream_), "RmsNorm");
  Done("RmsNorm");
}

void CudaBackend::Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride,
                       int64_t offset, int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                       bool inverse) {
  if (rows <= 0 || heads <= 0 || n_pairs <= 0 || !Usable()) return;
  const float* freq = DeviceConstant(inv_freq, n_pairs);  // inv_freq is host memory
  if (freq) {
    Check(kernels::Rope(x, rows, ld, heads, head_stride, offset, n_pairs, pos, freq, inverse,
                        stream_),
          "Rope");
  }
  Done("Rope");
}

void CudaBackend::FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld,
                            model::FakeQuantKind kind) {
  const int block = model::FakeQuantBlock(kind);
  CHECK_EQ(n % block, 0) << "fake-quant length " << n << " not a multiple of " << block;
  if (rows <= 0 || !Usable()) return;
  Check(kernels::FakeQuant(x, rows, n, ld, kind, stream_), "FakeQuant");
  Done("FakeQuant");
}

void CudaBackend::HcMix(const float* x, int64_t T, int64_t hc, int64_t D,
                        const model::HcSiteWeights& w, float norm_eps, float hc_eps,
                        int sinkhorn_iters, float* pre, float* post, float* comb) {
  if (T <= 0 || !Usable()) return;
  if (hc < 1 || hc > kernels::kMaxHc) {
    return Fail(
        Unsupported("HcMix", "hc " + std::to_string(hc) + " > " + std::to_string(kernels::kMaxHc)));
  }
  // Each token's 2 MB projection split into 128-column slices, one warp per slice and group
  // of tokens (fn held in registers for the group, a butterfly reduce-scatter per token),
  // then the finish per token (up to 32 tokens in the same kernel, through the backend's
  // counters); calls of up to 1024 tokens (the partials' scratch).
  // The split depends only on (hc, D), so HcMix is batch-invariant in every mode.
  // The counters are the backend's one set: a concurrent HcMix would share them.
  CHECK_EQ(Lane(), 0) << "HcMix in a side branch";
  const int64_t slice = std::min<int64_t>(T, 1024);
  auto* scratch = static_cast<float*>(TempBytes(
      static_cast<size_t>(slice * kernels::HcMixSplits(slice, hc, D) * 25) * sizeof(float)));
  for (int64_t t = 0; scratch != nullptr && t < T; t += slice) {
    const int64_t n = std::min(slice, T - t);
    if (!Check(kernels::HcMixSplit(x + t * hc * D, n, hc, D, w, norm_eps, hc_eps, sinkhorn_iters,
                                   pre + t * hc, post + t * hc, comb + t * hc * hc, scratch,
                                   hc_mix_counters_, stream_),
               "HcMix")) {
      break;
    }
  }
  Done("HcMix");
}

void CudaBackend::RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                                int64_t offset, int64_t n_pairs, const int32_t* pos,
                                const float* inv_freq, model::FakeQuantKind kind) {
  if (!kernels::RopeFakeQuantFusable(head_dim, offset, n_pairs)) {
    return Backend::RopeFakeQuant(x, rows, heads, head_dim, offset, n_pairs, pos, inv_freq, kind);
  }
  if (rows * heads <= 0 || n_pairs <= 0 || !Usable()) return;
  const float* freq = DeviceConstant(inv_freq, n_pairs);  // inv_freq is host memory
  if (freq) {
    Check(
        kernels::RopeFakeQuant(x, rows, heads, head_dim, offset, n_pairs, pos, freq, kind, stream_),
        "RopeFakeQuant");
  }
  Done("RopeFakeQuant");
}

void CudaBackend::HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                                 const float* weight, float eps, float* u0, float* y) {
  if (!Usable()) return;
  Check(kernels::HcCollapseNorm(x, pre, T, hc, D, weight, eps, u0, y, stream_), "HcCollapseNorm");
  Done("HcCollapseNorm");
}

void CudaBackend::HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                             float* y) {
  if (T <= 0 || !Usable()) return;
  Check(kernels::HcCollapse(x, pre, T, hc, D, y, stream_), "HcCollapse");
  Done("HcCollapse");
}

void CudaBackend::HcExpand(const float* y, const float* post, const float* comb, int64_t T,
                           int64_t hc, int64_t D, float* x) {
  if (T <= 0 || !Usable()) return;
  if (hc > kernels::kMaxHcExpand) {
    return Fail(Unsupported(
        "HcExpand", "hc " + std::to_string(hc) + " > " + std::to_string(kernels::kMaxHcExpand)));
  }
  Check(kernels::HcExpand(y, post, comb, T, hc, D, x, stream_), "HcExpand");
  Done("HcExpand");
}

void CudaBackend::SparseAttention(const model::SparseAttentionArgs& args) {
  if (args.tokens <= 0 || !Usable()) return;
  if (args.head_dim > kernels::kMaxAttnHeadDim || args.heads > 65535) {
    return Fail(Unsupported("SparseAttention", "head_dim " + std::to_string(args.head_dim) +
                                                   " / heads " + std::to_string(args.heads)));
  }
  // The FP8-activation mode's kernels for all 64 heads of a token at once (not
  // batch-invariant, so never in batch-invariant mode): from attention_prefill_min_tokens_
  // tokens, or attention_wgmma_min_tokens_ where the wgmma kernel takes the call.
  int64_t min_tokens = attention_prefill_min_tokens_;  // 0: never
  if (min_tokens > 0 && attention_wgmma_min_tokens_ > 0 && kernels::AttnPrefillUsesWgmma(args)) {
    min_tokens = std::min(min_tokens, attention_wgmma_min_tokens_);
  }
  if (attention_mma_ && fp8_activations_ && !batch_invariant_ && min_tokens > 0 &&
      args.tokens >= min_tokens && kernels::SparseAttentionPrefillApplicable(args)) {
    Check(kernels::SparseAttentionPrefill(args, error_word_, stream_), "SparseAttention prefill");
  } else if (attention_mma_ && kernels::SparseAttentionMmaApplicable(args)) {
    Check(kernels::SparseAttentionMma(args, error_word_, stream_, fp8_activations_),
          "SparseAttention mma");
  } else {
    Check(kernels::SparseAttention(args, error_word_, stream_), "SparseAttention");
  }
  Done("SparseAttention");
}

void CudaBackend::GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio,
                            int64_t n, float* out) {
  if (groups <= 0 || !Usable()) return;
  Check(kernels::GatedPool(c, z, groups, ratio, n, out, stream_), "GatedPool");
  Done("GatedPool");
}

void CudaBackend::IndexerScores(const float* q, const float* w, int64_t T, int64_t heads,
                                int64_t dim, const float* keys, int64_t n_keys,
                                const int32_t* q_pos, int64_t ratio, float scale, float* scores) {
  if (T <= 0 || n_keys <= 0 || !Usable()) return;
  if (kernels::IndexerScoresSharedBytes(heads, dim) > kernels::kMaxSharedBytes || T > 65535) {
    return Fail(Unsupported("IndexerScores", "heads x dim " + std::to_string(heads) + " x " +
                                                 std::to_string(dim) + ", T " + std::to_string(T)));
  }
  Check(kernels::IndexerScores(q, w, T, heads, dim, keys, n_keys, q_pos, ratio, scale, scores,
                               stream_, indexer_sums()),
        "IndexerScores");
  Done("IndexerScores");
}

void CudaBackend::IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads,
                                      int64_t dim, const float* keys, const int32_t* key_offset,
                                      const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                      int64_t ratio, float scale, float* scores) {
  if (T <= 0 || n_keys <= 0 || !Usable()) return;
  if (kernels::IndexerScoresSharedBytes(heads, dim) > kernels::kMaxSharedBytes || T > 65535) {
    return Fail(Unsupported("IndexerScoresVarlen", "heads x dim " + std::to_string(heads) + " x " +
                                                       std::to_string(dim) + ", T " +
                                                       std::to_string(T)));
  }
  Check(kernels::IndexerScoresVarlen(q, w, T, heads, dim, keys, key_offset, key_len, n_keys, q_pos,
                                     ratio, scale, scores, stream_, indexer_sums()),
        "IndexerScoresVarlen");
  Done("IndexerScoresVarlen");
}

bool CudaBackend::IndexerPagedApplicable(int64_t T, int64_t heads, int64_t dim,
                                         int64_t ratio) const {
  return paged_indexer_ && T < kernels::kIndexerGroupMinRows &&
         kernels::IndexerMmaPagedApplicable(T, heads, dim, ratio);
}

void CudaBackend::IndexerScoresPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                     int64_t dim, const int64_t* key_bases, int64_t max_blocks,
                                     int64_t rows_per_block, const int32_t* key_len, int64_t n_keys,
                                     const int32_t* q_pos, int64_t ratio, float scale,
                                     float* scores) {
  CHECK(IndexerPagedApplicable(T, heads, dim, ratio)) << "IndexerScoresPaged: not applicable";
  if (T <= 0 || n_keys <= 0 || !Usable()) return;
  kernels::PagedKeys keys;
  keys.bases = key_bases;
  keys.max_blocks = max_blocks;
  keys.rows_per_block = rows_per_block;
  keys.key_len = key_len;
  Check(kernels::IndexerScoresMmaPaged(q, w, T, heads, dim, keys, n_keys, q_pos, ratio, scale,
                                       scores, stream_, indexer_sums()),
        "IndexerScoresPaged");
  Done("IndexerScoresPaged");
}

void CudaBackend::CandidateMask(const float* scores, int64_t T, int64_t n, const int32_t* q_pos,
                                int64_t ratio, int64_t block, int64_t keep_blocks, uint8_t* mask) {
  if (T <= 0 || n <= 0 || !Usable()) return;
  const int64_t n_blocks = (n + block - 1) / block;
  if (std::min(keep_blocks, n_blocks) > kernels::kMaxTopK) {
    return Fail(Unsupported("CandidateMask", "keep_blocks " + std::to_string(keep_blocks)));
  }
  MemsetAsync(mask, 0, static_cast<size_t>(T * n), "CandidateMask zero");
  if (keep_blocks > 0) {
    auto* block_scores = static_cast<float*>(TempBytes(T * n_blocks * sizeof(float)));
    auto* kept = static_cast<int32_t*>(TempBytes(T * keep_blocks * sizeof(int32_t)));
    if (block_scores && kept &&
        Check(
            kernels::CandidateBlockScores(scores, T, n, q_pos, ratio, block, block_scores, stream_),
            "CandidateMask block scores") &&
        Check(kernels::TopK(block_scores, T, n_blocks, keep_blocks, kept, stream_),
              "CandidateMask top-k")) {
      Check(kernels::MarkKeptBlocks(kept, T, keep_blocks, n, block, mask, stream_),
            "CandidateMask mark");
    }
  }
  Done("CandidateMask");
}

void CudaBackend::ApplyMask(float* scores, const uint8_t* mask, int64_t T, int64_t n) {
  if (T * n <= 0 || !Usable()) return;
  Check(kernels::ApplyMask(scores, mask, T * n, stream_), "ApplyMask");
  Done("ApplyMask");
}

void CudaBackend::TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx) {
  if (T <= 0 || k <= 0 || !Usable()) return;
  if (std::min(k, n) > kernels::kMaxTopK) {
    return Fail(
        Unsupported("TopK", "k " + std::to_string(k) + " > " + std::to_string(kernels::kMaxTopK)));
  }
  Check(kernels::TopK(scores, T, n, k, idx, stream_), "TopK");
  Done("TopK");
}

void CudaBackend::ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out) {
  if (rows <= 0 || n <= 0 || !Usable()) return;
  Check(kernels::ArgmaxRows(x, rows, n, ld, out, stream_), "ArgmaxRows");
  Done("ArgmaxRows");
}

void CudaBackend::RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T,
                                    int64_t n_experts, int64_t k, bool renormalise, float scale,
                                    int32_t* experts, float* weights) {
  if (T <= 0 || !Usable()) return;
  if (n_experts > kernels::kMaxRouteExperts || k > 64 || k > n_experts || k < 1) {
    return Fail(Unsupported("RouteSqrtSoftplus",
                            "experts " + std::to_string(n_experts) + ", k " + std::to_string(k)));
  }
  Check(kernels::RouteSqrtSoftplus(logits, bias, T, n_experts, k, renormalise, scale, experts,
                                   weights, stream_),
        "RouteSqrtSoftplus");
  Done("RouteSqrtSoftplus");
}

void CudaBackend::SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
                         const float* row_scale, float* h) {
  if (T * n <= 0 || !Usable()) return;
  Check(kernels::SwiGlu(gate, up, T, n, limit, row_scale, h, stream_), "SwiGlu");
  Done("SwiGlu");
}

void CudaBackend::GatherTokenRows(const float* x, int64_t ld, const int32_t* host_rows, int64_t n,
                                  int64_t width, float* out) {
  if (n <= 0 || width <= 0 || !Usable()) return;
  const int32_t* rows = StageToDevice(host_rows, n);
  if (rows) Check(kernels::GatherTokenRows(x, ld, rows, n, width, out, stream_), "GatherTokenRows");
  Done("GatherTokenRows");
}

void CudaBackend::ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* host_rows,
                                 float* y, int64_t ld) {
  if (n <= 0 || width <= 0 || !Usable()) return;
  const std::unordered_set<int32_t> distinct(host_rows, host_rows + n);
  const bool unique = static_cast<int64_t>(distinct.size()) == n;
  const int32_t* rows = StageToDevice(host_rows, n);
  if (rows) {
    Check(kernels::ScatterAddRows(v, n, width, rows, unique, y, ld, stream_), "ScatterAddRows");
  }
  Done("ScatterAddRows");
}

void CudaBackend::EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                             const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps) {
  if (T * hc <= 0 || !Usable()) return;
  Check(kernels::EngramGate(x, key, value, q_weight, k_weight, T, hc, D, eps, stream_),
        "EngramGate");
  Done("EngramGate");
}

}  // namespace deepinfer::backend::cuda
