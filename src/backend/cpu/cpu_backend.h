// The reference CPU backend: fp32 math, GEMMs through OpenBLAS (cblas_sgemm) on weight
// tiles dequantised on the fly, threads from base::ThreadPool for the per-row ops.
// It reproduces the goldens' numerics (see model/backend.h for each op's contract).
#pragma once

#include "model/backend.h"

namespace deepinfer::backend::cpu {

// Dequantises rows [row0, row0+n) of w into out [n, w.cols] (fp32).
void DequantRows(const model::WeightRef& w, int64_t row0, int64_t n, float* out);

class CpuBackend final : public model::Backend {
 public:
  CpuBackend();
  std::string_view name() const override { return "cpu"; }

  float* AllocFloats(int64_t n) override;
  int32_t* AllocInts(int64_t n) override;
  // Filled with kUninitializedPattern (a quiet NaN; as int32 a huge id).
  float* AllocUninitialized(int64_t n) override;
  static constexpr uint32_t kUninitializedPattern = 0x7FC00001u;
  void Free(void* p) override;
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override;
  void CopyToHost(void* dst, const void* src, int64_t bytes) override;
  void CopyDevice(void* dst, const void* src, int64_t bytes) override;
  void Fill(float* x, int64_t n, float value) override;

  void Linear(const float* x, int64_t T, int64_t ldx, const model::WeightRef& w, int64_t row0,
              int64_t n_rows, float* y, int64_t ldy, bool accumulate) override;
  void GatherRows(const model::WeightRef& w, const int64_t* host_ids, int64_t n,
                  float* out) override;
  void Add(const float* a, const float* b, int64_t n, float* y) override;
  void Scale(float* x, int64_t n, float s) override;

  void RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight, float eps,
               float* y, int64_t ldy) override;
  void Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride, int64_t offset,
            int64_t n_pairs, const int32_t* pos, const float* inv_freq, bool inverse) override;
  void FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, model::FakeQuantKind kind) override;

  void HcMix(const float* x, int64_t T, int64_t hc, int64_t D, const model::HcSiteWeights& w,
             float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post,
             float* comb) override;
  void HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                  float* y) override;
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
  bool SparseAttentionReadsPagedEntries() const override { return true; }
  bool IndexerPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio) const override {
    return T > 0 && heads > 0 && dim > 0 && ratio > 0;
  }
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
  void GatherTokenRows(const float* x, int64_t ld, const int32_t* host_rows, int64_t n,
                       int64_t width, float* out) override;
  void ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* host_rows, float* y,
                      int64_t ld) override;

  void EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                  const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps) override;
};

}  // namespace deepinfer::backend::cpu
