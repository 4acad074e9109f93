// Device-side scalar formats and QAT fake-quantisation, bit-exact with
// backend/cpu/numerics.cc (same rounding: round-to-nearest-even, same operation order).
//
// Only exact operations are used (power-of-two scaling, rintf, IEEE division), so the results
// do not depend on FMA contraction or on the order of evaluation.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace deepinfer::backend::cuda {

// -inf as a float (no <limits> in device code; the bits of -infinity).
__device__ __forceinline__ float NegInf() { return -__int_as_float(0x7f800000); }

// Two floats as a bf16x2 word, each rounded to nearest even (lo in the low half).
__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

// One RoPE rotation of the pair (xe, xo) by the angle with cosine c and sine s, with the
// roundings spelled out (RopeKernel and the fused RopeFakeQuant share it, so their bits agree):
// ye = fma(xe, c, -(xo * s)), yo = fma(xe, s, xo * c).
__device__ __forceinline__ void RotatePair(float xe, float xo, float c, float s, float* ye,
                                           float* yo) {
  *ye = __fmaf_rn(xe, c, -__fmul_rn(xo, s));
  *yo = __fmaf_rn(xe, s, __fmul_rn(xo, c));
}

// std::min / std::clamp semantics (also for NaN, which they pass through).
__device__ __forceinline__ float MinF(float a, float b) { return b < a ? b : a; }
__device__ __forceinline__ float MaxF(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float ClampF(float v, float lo, float hi) {
  return v < lo ? lo : (hi < v ? hi : v);
}

__device__ __forceinline__ float Bf16ToF32(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

__device__ __forceinline__ float E4m3ToF32(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xF;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0) {
    magnitude = ldexpf(static_cast<float>(mantissa), -9);
  } else if (exponent == 15 && mantissa == 7) {
    magnitude = __int_as_float(0x7fc00000);  // NaN
  } else {
    magnitude = ldexpf(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
  }
  return (bits & 0x80) ? -magnitude : magnitude;
}

// 2^(bits-127). Byte 0 is 2^-127 (a float subnormal); 255 is rejected at load time.
__device__ __forceinline__ float E8m0ToF32(uint8_t bits) {
  return ldexpf(1.0f, static_cast<int>(bits) - 127);
}

__device__ __forceinline__ float E2m1ToF32(uint8_t nibble) {
  const int code = nibble & 0x7;
  // {0, .5, 1, 1.5, 2, 3, 4, 6}
  const float v = code < 4 ? 0.5f * static_cast<float>(code)
                           : (code == 4 ? 2.0f : (code == 5 ? 3.0f : (code == 6 ? 4.0f : 6.0f)));
  return (nibble & 0x8) ? -v : v;
}

// |x| rounded to a multiple of the power of two `step`, ties to even.
__device__ __forceinline__ float RoundToStep(float x, float step) { return rintf(x / step) * step; }

__device__ __forceinline__ float RoundToE4m3(float x) {
  const float a = MinF(fabsf(x), 448.0f);
  float step;
  if (a < 0.015625f) {  // below 2^-6: subnormal grid 2^-9
    step = 0.001953125f;
  } else {
    int exponent;
    frexpf(a, &exponent);  // a = m * 2^exponent, m in [0.5, 1)
    step = ldexpf(1.0f, exponent - 1 - 3);
  }
  const float r = MinF(RoundToStep(a, step), 448.0f);
  return copysignf(r, x);
}

__device__ __forceinline__ float RoundToE2m1(float x) {
  const float a = MinF(fabsf(x), 6.0f);
  const float step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
  return copysignf(MinF(RoundToStep(a, step), 6.0f), x);
}

// 2^ceil(log2(t)) for t > 0.
__device__ __forceinline__ float Pow2Ceil(float t) {
  const uint32_t bits = __float_as_uint(t);
  const int biased = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t mantissa = bits & 0x7FFFFF;
  if (biased == 0) {  // subnormal
    int exponent;
    const float m = frexpf(t, &exponent);
    return m == 0.5f ? t : ldexpf(1.0f, exponent);
  }
  const int exponent = biased - 127 + (mantissa != 0 ? 1 : 0);
  return ldexpf(1.0f, exponent);
}

// The power-of-two e4m3 scale of a block whose largest magnitude is amax (FakeQuantKind::
// kFp8Block32Pow2's formula, any block length): amax floored at 1e-4, / 448, rounded up to a
// power of two. (backend/cpu/numerics.cc FakeQuantFp8Pow2Block computes the same.)
__device__ __forceinline__ float Fp8Pow2Scale(float amax) {
  return Pow2Ceil(MaxF(amax, 1e-4f) * (1.0f / 448.0f));
}

// One warp quantises a 128-value block per token (the block-128 activations), lane l holding
// values 4 l .. 4 l + 3: returns lane l's four e4m3 bytes (value 4 l + i in byte i) of
// clamp(v / s, +-448) rounded to nearest even, s = Fp8Pow2Scale(the block's amax) in *scale.
// Every lane of the warp must call it (shuffles).
__device__ __forceinline__ uint32_t QuantizeWarpBlock128E4m3(const float (&v)[4], float* scale) {
  float amax = MaxF(MaxF(fabsf(v[0]), fabsf(v[1])), MaxF(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = MaxF(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float s = Fp8Pow2Scale(amax);
  const float inv = 1.0f / s;  // exact: s is a power of two
  uint32_t packed = 0;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const auto byte = static_cast<uint32_t>(
        __nv_cvt_float_to_fp8(ClampF(v[q] * inv, -448.0f, 448.0f), __NV_SATFINITE, __NV_E4M3));
    packed |= byte << (8 * q);
  }
  *scale = s;
  return packed;
}

// A quiet NaN: the output of an op whose input was invalid (never a plausible value).
__device__ __forceinline__ float NaNf() { return __int_as_float(0x7fc00000); }

// The clamped SwiGLU of one gate/up pair, in the CPU reference's operation order:
// u = clamp(u, -limit, limit), g = min(g, limit) when limit > 0, then (g * sigmoid(g)) * u.
// (expf is not exact: unlike the rest of this file, it matches the CPU to fp32 rounding.)
__device__ __forceinline__ float SwiGluValue(float g, float u, float limit) {
  if (limit > 0.0f) {
    u = ClampF(u, -limit, limit);
    g = MinF(g, limit);
  }
  const float sigmoid = 1.0f / (1.0f + expf(-g));
  return g * sigmoid * u;
}

}  // namespace deepinfer::backend::cuda
