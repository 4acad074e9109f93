#include "backend/cpu/numerics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace deepinfer::backend::cpu {
namespace {

TEST(NumericsTest, DecodesScalarFormats) {
  EXPECT_EQ(Bf16ToF32(0x3F80), 1.0f);
  EXPECT_EQ(Bf16ToF32(0xC000), -2.0f);
  EXPECT_EQ(E4m3ToF32(0x7E), 448.0f);
  EXPECT_EQ(E4m3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4m3ToF32(0x38), 1.0f);
  EXPECT_EQ(E4m3ToF32(0xB8), -1.0f);
  EXPECT_TRUE(std::isnan(E4m3ToF32(0x7F)));
  EXPECT_EQ(E8m0ToF32(127), 1.0f);
  EXPECT_EQ(E8m0ToF32(130), 8.0f);
  EXPECT_EQ(E8m0ToF32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E2m1ToF32(0x7), 6.0f);
  EXPECT_EQ(E2m1ToF32(0xD), -3.0f);
  EXPECT_EQ(E2m1ToF32(0x1), 0.5f);
}

TEST(NumericsTest, E2m1TiesToEvenCode) {
  EXPECT_EQ(RoundToE2m1(0.25f), 0.0f);
  EXPECT_EQ(RoundToE2m1(0.75f), 1.0f);
  EXPECT_EQ(RoundToE2m1(1.25f), 1.0f);
  EXPECT_EQ(RoundToE2m1(1.75f), 2.0f);
  EXPECT_EQ(RoundToE2m1(2.5f), 2.0f);
  EXPECT_EQ(RoundToE2m1(3.5f), 4.0f);
  EXPECT_EQ(RoundToE2m1(5.0f), 4.0f);
  EXPECT_EQ(RoundToE2m1(-5.01f), -6.0f);
  EXPECT_EQ(RoundToE2m1(9.0f), 6.0f);
  EXPECT_EQ(RoundToE2m1(0.26f), 0.5f);
}

TEST(NumericsTest, E4m3RoundsToNearestEven) {
  EXPECT_EQ(RoundToE4m3(1.0625f), 1.0f);   // tie between 1 and 1.125 -> even (1)
  EXPECT_EQ(RoundToE4m3(1.1875f), 1.25f);  // tie between 1.125 and 1.25 -> even (1.25)
  EXPECT_EQ(RoundToE4m3(500.0f), 448.0f);  // saturates
  EXPECT_EQ(RoundToE4m3(-0.0029296875f), -0.00390625f);  // subnormal tie 1.5*2^-9 -> 2*2^-9
  EXPECT_EQ(RoundToE4m3(0.1f), 0.1015625f);
}

TEST(NumericsTest, Pow2CeilUsesFloatBits) {
  EXPECT_EQ(Pow2Ceil(1.0f), 1.0f);
  EXPECT_EQ(Pow2Ceil(1.0000001f), 2.0f);
  EXPECT_EQ(Pow2Ceil(0.3f), 0.5f);
  EXPECT_EQ(Pow2Ceil(0.25f), 0.25f);
}

TEST(NumericsTest, Fp8Pow2ScaleFloorsAndRoundsUp) {
  EXPECT_EQ(Fp8Pow2Scale(448.0f), 1.0f);         // 448 / 448 = 1 exactly
  EXPECT_EQ(Fp8Pow2Scale(449.0f), 2.0f);         // just above: the next power of two
  EXPECT_EQ(Fp8Pow2Scale(0.0f), 0x1p-22f);       // the amax floor: 1e-4 / 448 = 2.2e-7 -> 2^-22
  EXPECT_EQ(Fp8Pow2Scale(1.0f), 1.0f / 256.0f);  // 1 / 448 rounds up to 2^-8
}

TEST(NumericsTest, FakeQuantFp8Block) {
  float x[32] = {};
  x[0] = 448.0f;  // amax 448 -> scale 2^ceil(log2(1)) = 1
  x[1] = 1.0625f;
  x[2] = -3.3f;
  FakeQuantFp8Pow2Block(x, 32);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], -3.25f);
  float y[32] = {};  // all zero -> amax floor 1e-4, values stay 0
  FakeQuantFp8Pow2Block(y, 32);
  EXPECT_EQ(y[5], 0.0f);
}

TEST(NumericsTest, FakeQuantFp4E4m3Block) {
  float x[16] = {};
  x[0] = 6.0f;    // amax 6 -> scale e4m3(1) = 1
  x[1] = 2.5f;    // tie -> 2
  x[2] = -0.75f;  // tie -> -1
  x[3] = 5.0f;    // tie -> 4
  FakeQuantFp4E4m3Block(x, 16);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], -1.0f);
  EXPECT_EQ(x[3], 4.0f);
  float y[16] = {};
  y[0] = 7.0f;  // scale e4m3(7/6 = 1.1667) = 1.125; 7/1.125 = 6.22 -> clamp 6 -> 6.75
  FakeQuantFp4E4m3Block(y, 16);
  EXPECT_EQ(y[0], 6.75f);
}

TEST(NumericsTest, FakeQuantFp4Pow2Block) {
  float x[32] = {};
  x[0] = 7.0f;  // scale 2^ceil(log2(7/6)) = 2; 7/2 = 3.5 -> 4 -> 8
  x[1] = 1.0f;  // 0.5 -> 0.5 -> 1
  x[2] = 2.5f;  // 1.25 -> 1 -> 2
  FakeQuantFp4Pow2Block(x, 32);
  EXPECT_EQ(x[0], 8.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], 2.0f);
}

}  // namespace
}  // namespace deepinfer::backend::cpu
