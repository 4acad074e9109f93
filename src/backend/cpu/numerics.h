// Scalar number formats and the reference's QAT fake-quantisation, in fp32.
//
// Rounding is round-to-nearest-even everywhere (matching torch's casts and the goldens
// README): e4m3 with subnormals (max 448), e2m1 {0, .5, 1, 1.5, 2, 3, 4, 6} nearest-even
// on the code (ties 0.25, 1.25, 2.5, 5 go down; 0.75, 1.75, 3.5 go up).
#pragma once

#include <cstdint>

namespace deepinfer::backend::cpu {

float Bf16ToF32(uint16_t bits);
float E4m3ToF32(uint8_t bits);
// 2^(bits-127); byte 255 (NaN) is rejected at load time, never decoded here.
float E8m0ToF32(uint8_t bits);
// Low 4 bits: bit 3 sign, bits 0-2 index into {0, .5, 1, 1.5, 2, 3, 4, 6}.
float E2m1ToF32(uint8_t nibble);

// Value of x rounded to the nearest e4m3 value (saturating at +-448).
float RoundToE4m3(float x);
// Value of x rounded to the nearest e2m1 value (saturating at +-6).
float RoundToE2m1(float x);
// 2^ceil(log2(t)) for t > 0, from the float bits (exponent, +1 if any mantissa bit set).
float Pow2Ceil(float t);
// The power-of-two e4m3 block scale of a block whose largest |value| is amax (kFp8Block32Pow2's
// formula, any block length): amax floored at 1e-4, / 448, rounded up to a power of two.
float Fp8Pow2Scale(float amax);

// In-place fake quantisation of one block of n values (see model/backend.h FakeQuantKind).
void FakeQuantFp8Pow2Block(float* x, int n);  // e4m3, amax floor 1e-4, /448
void FakeQuantFp4E4m3Block(float* x, int n);  // e2m1, scale e4m3(max(amax,6*2^-9)/6)
void FakeQuantFp4Pow2Block(float* x, int n);  // e2m1, amax floor 6*2^-126, /6

}  // namespace deepinfer::backend::cpu
