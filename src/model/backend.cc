#include "model/backend.h"

#include "base/check.h"

namespace deepinfer::model {

std::string_view WeightFormatName(WeightFormat format) {
  switch (format) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kFp8Block32:
      return "fp8_e4m3+e8m0/32x32";
    case WeightFormat::kFp8Row32:
      return "fp8_e4m3+e8m0/row32";
    case WeightFormat::kMxFp4:
      return "mxfp4_e2m1+e8m0/32";
  }
  return "unknown";
}

void Backend::LinearMany(const float* x, int64_t T, int64_t ldx, const LinearOut* outs, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const LinearOut& o = outs[i];
    CHECK(o.w != nullptr && o.w->cols == outs[0].w->cols)
        << "LinearMany: output " << i << " has no weight or another K";
    Linear(x, T, ldx, *o.w, o.row0, o.n_rows, o.y, o.ldy, o.accumulate);
  }
}

void Backend::RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t offset,
                            int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                            FakeQuantKind kind) {
  Rope(x, rows, heads * head_dim, heads, head_dim, offset, n_pairs, pos, inv_freq, false);
  FakeQuant(x, rows * heads, head_dim, head_dim, kind);
}

void Backend::HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                             const float* weight, float eps, float* u0, float* y) {
  HcCollapse(x, pre, T, hc, D, u0);
  RmsNorm(u0, T, D, D, weight, eps, y, D);
}

void Backend::LinearGrouped(const float* x, int64_t T, int64_t ldx, int64_t x_group_stride,
                            const WeightRef& w, int64_t groups, float* y, int64_t ldy) {
  CHECK(groups > 0 && w.rows % groups == 0)
      << w.name << ": " << w.rows << " rows in " << groups << " groups";
  const int64_t R = w.rows / groups;
  for (int64_t g = 0; g < groups; ++g) {
    Linear(x + g * x_group_stride, T, ldx, w, g * R, R, y + g * R, ldy);
  }
}

void Backend::RoutedExperts(const RoutedExpertsArgs& args) {
  (void)args;
  CHECK(false) << "backend " << name() << " has no fused routed experts";
}

void Backend::IndexerScoresPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                 int64_t dim, const int64_t* key_bases, int64_t max_blocks,
                                 int64_t rows_per_block, const int32_t* key_len, int64_t n_keys,
                                 const int32_t* q_pos, int64_t ratio, float scale, float* scores) {
  (void)q, (void)w, (void)T, (void)heads, (void)dim, (void)key_bases, (void)max_blocks;
  (void)rows_per_block, (void)key_len, (void)n_keys, (void)q_pos, (void)ratio, (void)scale;
  (void)scores;
  CHECK(false) << "backend " << name() << " has no paged indexer scores";
}

}  // namespace deepinfer::model
