#include "backend/cpu/numerics.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

namespace deepinfer::backend::cpu {
namespace {

// Rounds |x| to a multiple of `step` (a power of two), ties to even.
inline float RoundToStep(float x, float step) { return std::nearbyint(x / step) * step; }

float Amax(const float* x, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

}  // namespace

float Bf16ToF32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

float E4m3ToF32(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -9);
  } else if (exponent == 15 && mantissa == 7) {
    magnitude = std::numeric_limits<float>::quiet_NaN();
  } else {
    magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return (bits & 0x80) ? -magnitude : magnitude;
}

float E8m0ToF32(uint8_t bits) { return std::ldexp(1.0f, static_cast<int>(bits) - 127); }

float E2m1ToF32(uint8_t nibble) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float v = kValues[nibble & 0x7];
  return (nibble & 0x8) ? -v : v;
}

float RoundToE4m3(float x) {
  const float a = std::min(std::fabs(x), 448.0f);
  float step;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid 2^-9
    step = 0.001953125f;
  } else {
    int exponent;
    std::frexp(a, &exponent);  // a = m * 2^exponent, m in [0.5, 1)
    step = std::ldexp(1.0f, exponent - 1 - 3);
  }
  const float r = std::min(RoundToStep(a, step), 448.0f);
  return std::copysign(r, x);
}

float RoundToE2m1(float x) {
  const float a = std::min(std::fabs(x), 6.0f);
  const float step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  return std::copysign(std::min(RoundToStep(a, step), 6.0f), x);
}

float Pow2Ceil(float t) {
  const uint32_t bits = std::bit_cast<uint32_t>(t);
  const int biased = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t mantissa = bits & 0x7FFFFF;
  if (biased == 0) {  // subnormal: fall back to frexp
    int exponent;
    const float m = std::frexp(t, &exponent);
    return m == 0.5f ? t : std::ldexp(1.0f, exponent);
  }
  const int exponent = biased - 127 + (mantissa != 0 ? 1 : 0);
  return std::ldexp(1.0f, exponent);
}

float Fp8Pow2Scale(float amax) { return Pow2Ceil(std::max(amax, 1e-4f) * (1.0f / 448.0f)); }

void FakeQuantFp8Pow2Block(float* x, int n) {
  const float scale = Fp8Pow2Scale(Amax(x, n));
  for (int i = 0; i < n; ++i) {
    const float q = std::clamp(x[i] / scale, -448.0f, 448.0f);
    x[i] = RoundToE4m3(q) * scale;
  }
}

void FakeQuantFp4E4m3Block(float* x, int n) {
  const float floor_amax = 6.0f * 0.001953125f;  // 6 * 2^-9
  const float scale = RoundToE4m3(std::max(Amax(x, n), floor_amax) / 6.0f);
  for (int i = 0; i < n; ++i) {
    const float q = std::clamp(x[i] / scale, -6.0f, 6.0f);
    x[i] = RoundToE2m1(q) * scale;
  }
}

void FakeQuantFp4Pow2Block(float* x, int n) {
  const float inv6 = 1.0f / 6.0f;
  const float floor_amax = 6.0f * std::ldexp(1.0f, -126);
  const float scale = Pow2Ceil(std::max(Amax(x, n), floor_amax) * inv6);
  for (int i = 0; i < n; ++i) {
    const float q = std::clamp(x[i] / scale, -6.0f, 6.0f);
    x[i] = RoundToE2m1(q) * scale;
  }
}

}  // namespace deepinfer::backend::cpu
