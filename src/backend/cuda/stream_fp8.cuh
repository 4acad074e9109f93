// The FP8 e4m3 weight-step math of the decode streaming Linear (k_linear_stream.cu; a TMA-fed
// form that shared it was measured slower and removed in session 24, run 207): a lane's 2 x 32
// weight bytes of one K step (rows g and g + 8, bytes 32c .. 32c + 31, as 4 uint4 words
// w[0..3]) become the bf16 A fragments of the step's 8 mma.sync m16n8k16, with the ue8m0 scale
// byte S of their 32 x 32 block folded in exactly. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_dequant.cuh"

namespace deepinfer::backend::cuda::kernels::stream_fp8 {

// e4m3 bytes 0 and 2 (PairA) or 1 and 3 (PairB) of w as a bf16x2 (the first in the low half)
// of their values * 2^-120: magnitude bits to bf16 bits 4..10, sign to bit 15.
__device__ __forceinline__ uint32_t E4m3PairA(uint32_t w) {
  return ((w << 4) & 0x07F007F0u) | ((w << 8) & 0x80008000u);
}
__device__ __forceinline__ uint32_t E4m3PairB(uint32_t w) {
  return ((w >> 4) & 0x07F007F0u) | (w & 0x80008000u);
}

__device__ __forceinline__ uint32_t Word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The bf16x2 factors that take an e4m3 pair (value * 2^-120) to value * 2^(S - 127): f1,
// then f2 where !one (S > 134); all_one: no lane of the warp needs f2.
struct ScaleFactors {
  uint32_t f1, f2;
  bool one, all_one;
};

__device__ __forceinline__ ScaleFactors StepFactors(uint32_t S) {
  ScaleFactors f;
  f.one = S <= 134;  // 2^(S - 7) is a normal bf16
  f.f1 = (f.one ? S + 120 : 247u) * 0x00800080u;
  f.f2 = E8m0ToBf16x2(S);
  f.all_one = __all_sync(0xffffffffu, f.one);
  return f;
}

// The A registers of MMA m (0..7) of a step from its weight words w: w[0], w[1] = bytes
// 32c .. 32c + 31 of row g, w[2], w[3] the same of row g + 8. e4m3 word m of a row's 32 bytes
// (values 4m .. 4m+3) gives pair (4m, 4m+2) as logical k (2c, 2c+1) and pair (4m+1, 4m+3) as
// (2c+8, 2c+9); the activations use the same map (k_linear_stream.cu: fragment order).
__device__ __forceinline__ void WeightFragment(const uint4 (&w)[4], int m, const ScaleFactors& f,
                                               uint32_t (&a)[4]) {
  const uint32_t wa = Word(w[m / 4], m % 4), wb = Word(w[2 + m / 4], m % 4);
  a[0] = E4m3PairA(wa);
  a[1] = E4m3PairA(wb);
  a[2] = E4m3PairB(wa);
  a[3] = E4m3PairB(wb);
#pragma unroll
  for (int i = 0; i < 4; ++i) a[i] = MulBf16x2(a[i], f.f1);
  if (!f.all_one && !f.one) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = MulBf16x2(a[i], f.f2);
  }
}

}  // namespace deepinfer::backend::cuda::kernels::stream_fp8
