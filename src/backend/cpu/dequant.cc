// Weight dequantisation (model.md §4.3) for the CPU backend.
#include <cstring>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/numerics.h"
#include "base/check.h"

namespace deepinfer::backend::cpu {
namespace {

using model::WeightFormat;
using model::WeightRef;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Byte -> value tables (built once; decoding is on the hot path of every GEMM).
struct Tables {
  float e4m3[256];
  float e8m0[256];
  float e2m1[16];
  Tables() {
    for (int i = 0; i < 256; ++i) {
      e4m3[i] = E4m3ToF32(static_cast<uint8_t>(i));
      e8m0[i] = E8m0ToF32(static_cast<uint8_t>(i));
    }
    for (int i = 0; i < 16; ++i) e2m1[i] = E2m1ToF32(static_cast<uint8_t>(i));
  }
};
const Tables& Lut() {
  static const Tables tables;
  return tables;
}

void DequantRow(const WeightRef& w, int64_t r, float* out) {
  const int64_t K = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const float*>(w.data) + r * K, K * sizeof(float));
      return;
    case WeightFormat::kBF16: {
      const uint16_t* src = static_cast<const uint16_t*>(w.data) + r * K;
      for (int64_t k = 0; k < K; ++k) {
        const uint32_t bits = static_cast<uint32_t>(src[k]) << 16;
        std::memcpy(&out[k], &bits, sizeof(float));
      }
      return;
    }
    case WeightFormat::kFp8Block32:
    case WeightFormat::kFp8Row32: {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * K;
      const uint8_t* srow = w.format == WeightFormat::kFp8Block32
                                ? w.scale + (r / 32) * CeilDiv(K, 32)
                                : w.scale + r * CeilDiv(K, 32);
      const Tables& lut = Lut();
      for (int64_t k = 0; k < K; ++k) out[k] = lut.e4m3[src[k]] * lut.e8m0[srow[k / 32]];
      return;
    }
    case WeightFormat::kMxFp4: {
      const uint8_t* src = static_cast<const uint8_t*>(w.data) + r * (K / 2);
      const uint8_t* srow = w.scale + r * (K / 32);
      const Tables& lut = Lut();
      for (int64_t j = 0; j < K / 2; ++j) {
        const float s = lut.e8m0[srow[(2 * j) / 32]];
        out[2 * j] = lut.e2m1[src[j] & 0xF] * s;
        out[2 * j + 1] = lut.e2m1[src[j] >> 4] * s;
      }
      return;
    }
  }
  CHECK(false) << "unknown weight format for " << w.name;
}

}  // namespace

void DequantRows(const WeightRef& w, int64_t row0, int64_t n, float* out) {
  CHECK(w.valid()) << "missing weight " << w.name;
  CHECK(row0 >= 0 && row0 + n <= w.rows) << w.name << ": rows " << row0 << "+" << n;
  for (int64_t i = 0; i < n; ++i) DequantRow(w, row0 + i, out + i * w.cols);
}

}  // namespace deepinfer::backend::cpu
