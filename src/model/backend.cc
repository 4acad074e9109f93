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

}  // namespace deepinfer::model
