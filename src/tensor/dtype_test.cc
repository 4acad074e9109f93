#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace deepinfer::tensor {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Every finite float whose bit pattern is a multiple of `step`, both signs.
std::vector<float> SweepFloats(uint32_t step) {
  std::vector<float> values;
  for (uint64_t bits = 0; bits < 0x7F800000u; bits += step) {
    values.push_back(FloatFromBits(static_cast<uint32_t>(bits)));
    values.push_back(-FloatFromBits(static_cast<uint32_t>(bits)));
  }
  return values;
}

// Brute-force nearest code among `codes` (value, code pairs), ties to the even code.
template <typename Code>
Code NearestEven(double x, const std::vector<std::pair<double, Code>>& codes) {
  Code best = codes[0].second;
  double best_error = std::fabs(x - codes[0].first);
  for (const auto& [value, code] : codes) {
    const double error = std::fabs(x - value);
    if (error < best_error || (error == best_error && (code & 1) == 0 && (best & 1) == 1)) {
      best = code;
      best_error = error;
    }
  }
  return best;
}

// ---- names ---------------------------------------------------------------------------------

TEST(DTypeTest, NamesRoundTrip) {
  for (int i = 0; i < kNumDTypes; ++i) {
    const DType dtype = static_cast<DType>(i);
    const auto parsed = DTypeFromSafetensorsName(SafetensorsDTypeName(dtype));
    ASSERT_TRUE(parsed.has_value()) << DTypeName(dtype);
    EXPECT_EQ(*parsed, dtype);
  }
  EXPECT_EQ(DTypeName(DType::kF8E4M3), "f8_e4m3");
  EXPECT_EQ(SafetensorsDTypeName(DType::kF8E8M0), "F8_E8M0");
  EXPECT_EQ(SafetensorsDTypeName(DType::kBF16), "BF16");
  EXPECT_FALSE(DTypeFromSafetensorsName("F7").has_value());
  EXPECT_FALSE(DTypeFromSafetensorsName("f32").has_value());
}

TEST(DTypeTest, BitsAndStorage) {
  EXPECT_EQ(DTypeBits(DType::kFP4E2M1), 4);
  EXPECT_EQ(DTypeBits(DType::kF8E4M3), 8);
  EXPECT_EQ(DTypeBits(DType::kBF16), 16);
  EXPECT_EQ(DTypeBits(DType::kI64), 64);
  EXPECT_EQ(DTypeStorageBytes(DType::kFP4E2M1, 7), 4u);
  EXPECT_EQ(DTypeStorageBytes(DType::kFP4E2M1, 8), 4u);
  EXPECT_EQ(DTypeStorageBytes(DType::kF32, 3), 12u);
  EXPECT_EQ(DTypeStorageBytes(DType::kF32, 0), 0u);
  EXPECT_FALSE(DTypeStorageBytes(DType::kF32, -1).has_value());
  EXPECT_FALSE(DTypeStorageBytes(DType::kI64, std::numeric_limits<int64_t>::max()).has_value());
  EXPECT_TRUE(IsFloatingPoint(DType::kBF16));
  EXPECT_FALSE(IsFloatingPoint(DType::kI8));
}

// ---- E4M3 ----------------------------------------------------------------------------------

TEST(E4M3Test, DecodesAll256Codes) {
  int nans = 0;
  for (int code = 0; code < 256; ++code) {
    const float v = E4M3ToF32(static_cast<uint8_t>(code));
    const int exponent = (code >> 3) & 0xF;
    const int mantissa = code & 7;
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(v)) << code;
      ++nans;
      continue;
    }
    const double magnitude = exponent == 0 ? mantissa * std::ldexp(1.0, -9)
                                           : (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
    EXPECT_EQ(v, (code & 0x80) ? -magnitude : magnitude) << code;
    EXPECT_EQ(std::signbit(v), (code & 0x80) != 0) << code;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(E4M3ToF32(0x7E), 448.0f);
  EXPECT_EQ(E4M3ToF32(0xFE), -448.0f);
  EXPECT_EQ(E4M3ToF32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(E4M3ToF32(0x08), std::ldexp(1.0f, -6));
}

TEST(E4M3Test, EveryCodeRoundTrips) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(F32ToE4M3(E4M3ToF32(static_cast<uint8_t>(code))), code) << code;
    EXPECT_EQ(F32ToE4M3Saturating(E4M3ToF32(static_cast<uint8_t>(code))), code) << code;
  }
}

TEST(E4M3Test, MidpointsRoundToEven) {
  for (int code = 0; code < 0x7E; ++code) {
    const double lo = E4M3ToF32(static_cast<uint8_t>(code));
    const double hi = E4M3ToF32(static_cast<uint8_t>(code + 1));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact in f32
    const int even = (code % 2 == 0) ? code : code + 1;
    EXPECT_EQ(F32ToE4M3(mid), even) << "between codes " << code << " and " << code + 1;
    EXPECT_EQ(F32ToE4M3(std::nextafter(mid, 0.0f)), code);
    EXPECT_EQ(F32ToE4M3(std::nextafter(mid, kInf)), code + 1);
    EXPECT_EQ(F32ToE4M3(-mid), even | 0x80);
  }
}

TEST(E4M3Test, MatchesBruteForceNearestEven) {
  std::vector<std::pair<double, uint8_t>> codes;
  for (int code = 0; code <= 0x7E; ++code) codes.push_back({E4M3ToF32(code), code});
  for (float x : SweepFloats(0x1F3)) {
    const double a = std::fabs(x);
    const uint8_t got = F32ToE4M3(x);
    if (a > 464.0) {
      ASSERT_EQ(got & 0x7F, 0x7F) << x;
      continue;
    }
    const uint8_t want = NearestEven<uint8_t>(a, codes) | (std::signbit(x) ? 0x80 : 0);
    ASSERT_EQ(got, want) << x;
  }
}

TEST(E4M3Test, OverflowFollowsTorchFloat8E4M3fn) {
  EXPECT_EQ(F32ToE4M3(448.0f), 0x7E);
  EXPECT_EQ(F32ToE4M3(464.0f), 0x7E);  // tie between 448 and "480" goes to the even code
  EXPECT_EQ(F32ToE4M3(std::nextafter(464.0f, kInf)), 0x7F);
  EXPECT_EQ(F32ToE4M3(480.0f), 0x7F);
  EXPECT_EQ(F32ToE4M3(1e30f), 0x7F);
  EXPECT_EQ(F32ToE4M3(kInf), 0x7F);
  EXPECT_EQ(F32ToE4M3(-kInf), 0xFF);
  EXPECT_EQ(F32ToE4M3(kNaN) & 0x7F, 0x7F);
  EXPECT_EQ(F32ToE4M3(-500.0f), 0xFF);
  EXPECT_EQ(F32ToE4M3(0.0f), 0x00);
  EXPECT_EQ(F32ToE4M3(-0.0f), 0x80);
  EXPECT_EQ(F32ToE4M3(std::ldexp(1.0f, -10)), 0x00);  // half the smallest subnormal: tie -> 0
  EXPECT_EQ(F32ToE4M3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(F32ToE4M3(std::ldexp(1.0f, -100)), 0x00);
}

TEST(E4M3Test, SaturatingClampsFiniteAndInf) {
  EXPECT_EQ(F32ToE4M3Saturating(465.0f), 0x7E);
  EXPECT_EQ(F32ToE4M3Saturating(1e30f), 0x7E);
  EXPECT_EQ(F32ToE4M3Saturating(kInf), 0x7E);
  EXPECT_EQ(F32ToE4M3Saturating(-kInf), 0xFE);
  EXPECT_EQ(F32ToE4M3Saturating(-449.0f), 0xFE);
  EXPECT_EQ(F32ToE4M3Saturating(kNaN) & 0x7F, 0x7F);
  EXPECT_EQ(F32ToE4M3Saturating(1.0f), 0x38);
}

// ---- E8M0 ----------------------------------------------------------------------------------

TEST(E8M0Test, DecodesAllCodes) {
  for (int b = 0; b < 255; ++b) {
    EXPECT_EQ(E8M0ToF32(static_cast<uint8_t>(b)), std::ldexp(1.0f, b - 127)) << b;
  }
  EXPECT_TRUE(std::isnan(E8M0ToF32(255)));
  EXPECT_EQ(E8M0ToF32(127), 1.0f);
  EXPECT_EQ(E8M0ToF32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(E8M0ToF32(254), std::ldexp(1.0f, 127));
}

TEST(E8M0Test, CeilLog2FromFloatBits) {
  for (int b = 1; b < 255; ++b) {
    const float power = E8M0ToF32(static_cast<uint8_t>(b));
    EXPECT_EQ(E8M0CeilFromF32(power), b) << b;
    if (b < 254) {
      EXPECT_EQ(E8M0CeilFromF32(std::nextafter(power, kInf)), b + 1) << b;
    }
    EXPECT_EQ(E8M0CeilFromF32(std::nextafter(power, 0.0f)), b) << b;
  }
  EXPECT_EQ(E8M0CeilFromF32(1.5f), 128);
  EXPECT_EQ(E8M0CeilFromF32(0.75f), 127);
  EXPECT_EQ(E8M0CeilFromF32(448.0f / 448.0f), 127);
  EXPECT_EQ(E8M0CeilFromF32(std::ldexp(1.0f, -127)), 0);  // subnormal power of two
  EXPECT_EQ(E8M0CeilFromF32(std::ldexp(1.0f, -140)), 0);  // below 2^-127: clamps
  EXPECT_EQ(E8M0CeilFromF32(std::ldexp(1.5f, -128)), 0);  // ceil = 2^-127
  EXPECT_EQ(E8M0CeilFromF32(std::numeric_limits<float>::max()), 254);
  EXPECT_FALSE(E8M0CeilFromF32(0.0f).has_value());
  EXPECT_FALSE(E8M0CeilFromF32(-1.0f).has_value());
  EXPECT_FALSE(E8M0CeilFromF32(kNaN).has_value());
  EXPECT_FALSE(E8M0CeilFromF32(kInf).has_value());
}

// ---- E2M1 ----------------------------------------------------------------------------------

TEST(E2M1Test, DecodesAll16Codes) {
  const float expected[16] = {0,     0.5f,  1,  1.5f,  2,  3,  4,  6,
                              -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    EXPECT_EQ(E2M1ToF32(static_cast<uint8_t>(code)), expected[code]) << code;
    EXPECT_EQ(std::signbit(E2M1ToF32(static_cast<uint8_t>(code))), code >= 8) << code;
    EXPECT_EQ(F32ToE2M1(expected[code]), code) << code;
  }
}

TEST(E2M1Test, TiesGoToEvenCode) {
  EXPECT_EQ(F32ToE2M1(0.25f), 0);  // down
  EXPECT_EQ(F32ToE2M1(0.75f), 2);  // up
  EXPECT_EQ(F32ToE2M1(1.25f), 2);  // down
  EXPECT_EQ(F32ToE2M1(1.75f), 4);  // up
  EXPECT_EQ(F32ToE2M1(2.5f), 4);   // down
  EXPECT_EQ(F32ToE2M1(3.5f), 6);   // up
  EXPECT_EQ(F32ToE2M1(5.0f), 6);   // down
  EXPECT_EQ(F32ToE2M1(-0.75f), 0xA);
  EXPECT_EQ(F32ToE2M1(-5.0f), 0xE);
  EXPECT_EQ(F32ToE2M1(std::nextafter(5.0f, kInf)), 7);
  EXPECT_EQ(F32ToE2M1(std::nextafter(0.25f, kInf)), 1);
}

TEST(E2M1Test, SaturatesAndHandlesSpecials) {
  EXPECT_EQ(F32ToE2M1(6.0f), 7);
  EXPECT_EQ(F32ToE2M1(100.0f), 7);
  EXPECT_EQ(F32ToE2M1(kInf), 7);
  EXPECT_EQ(F32ToE2M1(-kInf), 15);
  EXPECT_EQ(F32ToE2M1(kNaN), 0);
  EXPECT_EQ(F32ToE2M1(-0.1f), 8);
}

TEST(E2M1Test, MatchesBruteForceNearestEven) {
  std::vector<std::pair<double, uint8_t>> codes;
  for (int code = 0; code < 8; ++code) codes.push_back({E2M1ToF32(code), code});
  for (float x : SweepFloats(0x3F1)) {
    const double a = std::min(std::fabs(static_cast<double>(x)), 6.0);
    const uint8_t want = NearestEven<uint8_t>(a, codes) | (std::signbit(x) ? 8 : 0);
    ASSERT_EQ(F32ToE2M1(x), want) << x;
  }
}

TEST(E2M1Test, PackedNibbleOrder) {
  const uint8_t bytes[2] = {PackE2M1Pair(0x3, 0xC), PackE2M1Pair(0x7, 0x1)};
  EXPECT_EQ(bytes[0], 0xC3);
  EXPECT_EQ(PackedE2M1Code(bytes, 0), 0x3);
  EXPECT_EQ(PackedE2M1Code(bytes, 1), 0xC);
  EXPECT_EQ(PackedE2M1Code(bytes, 2), 0x7);
  EXPECT_EQ(PackedE2M1Code(bytes, 3), 0x1);
  EXPECT_EQ(E2M1ToF32(PackedE2M1Code(bytes, 1)), -2.0f);
}

// ---- BF16 ----------------------------------------------------------------------------------

TEST(BF16Test, AllBitPatternsRoundTrip) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float v = BF16ToF32(static_cast<uint16_t>(bits));
    EXPECT_EQ(FloatBits(v), bits << 16);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(v)))) << bits;
      EXPECT_EQ(F32ToBF16(v) & 0x8000u, bits & 0x8000u);
    } else {
      ASSERT_EQ(F32ToBF16(v), bits) << bits;
    }
  }
}

TEST(BF16Test, RoundToNearestEven) {
  EXPECT_EQ(F32ToBF16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(F32ToBF16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(F32ToBF16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  EXPECT_EQ(F32ToBF16(kInf), 0x7F80);
  EXPECT_EQ(F32ToBF16(-kInf), 0xFF80);
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000);
  EXPECT_EQ(F32ToBF16(kNaN) & 0x7FC0, 0x7FC0);
  // A signalling NaN whose payload sits in the low bits must not become Inf.
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(FloatFromBits(0x7F800001u)))));
  EXPECT_EQ(F32ToBF16(FloatFromBits(0x00000001u)), 0x0000);  // tiny subnormal -> 0
}

TEST(BF16Test, MatchesBruteForceNearestEven) {
  for (float x : SweepFloats(0x3FF1)) {
    const uint32_t bits = FloatBits(x);
    const uint16_t lo = static_cast<uint16_t>(bits >> 16);
    const double dlo = BF16ToF32(lo);
    // Next magnitude; the one past the largest finite bf16 counts as 2^128 (IEEE rounding
    // with an unbounded exponent, then overflow to Inf).
    const uint16_t next = static_cast<uint16_t>(lo + 1);
    const double dhi = (next & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : BF16ToF32(next);
    const double ex = std::fabs(static_cast<double>(x)), elo = std::fabs(dlo), ehi = std::fabs(dhi);
    uint16_t want;
    if (ex - elo < ehi - ex) {
      want = lo;
    } else if (ex - elo > ehi - ex) {
      want = static_cast<uint16_t>(lo + 1);
    } else {
      want = (lo & 1) ? static_cast<uint16_t>(lo + 1) : lo;
    }
    ASSERT_EQ(F32ToBF16(x), want) << x;
  }
}

// ---- F16 -----------------------------------------------------------------------------------

TEST(F16Test, AllBitPatternsRoundTrip) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const float v = F16ToF32(static_cast<uint16_t>(bits));
    if (std::isnan(v)) {
      EXPECT_EQ((bits >> 10) & 0x1F, 0x1Fu);
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(v))));
    } else {
      ASSERT_EQ(F32ToF16(v), bits) << bits;
    }
  }
  EXPECT_EQ(F16ToF32(0x7BFF), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16ToF32(0x3C00), 1.0f);
  EXPECT_EQ(F16ToF32(0xC000), -2.0f);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7C00)));
}

TEST(F16Test, RoundingAndOverflow) {
  EXPECT_EQ(F32ToF16(65519.0f), 0x7BFF);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7C00);  // tie with the odd max goes to Inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7C00);
  EXPECT_EQ(F32ToF16(-kInf), 0xFC00);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even (0)
  EXPECT_EQ(F32ToF16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);         // tie between 1 and 2 -> 2
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(F32ToF16(kNaN) & 0x7E00, 0x7E00);
}

TEST(F16Test, MatchesBruteForceNearestEven) {
  // All finite non-negative halves in increasing order.
  std::vector<double> halves;
  for (uint32_t bits = 0; bits < 0x7C00; ++bits)
    halves.push_back(F16ToF32(static_cast<uint16_t>(bits)));
  for (float x : SweepFloats(0x7FF3)) {
    const double a = std::fabs(static_cast<double>(x));
    uint16_t want;
    if (a >= 65520.0) {
      want = 0x7C00;
    } else {
      const size_t hi = std::lower_bound(halves.begin(), halves.end(), a) - halves.begin();
      if (hi == halves.size()) {  // between 65504 and 65520
        want = 0x7BFF;
      } else if (halves[hi] == a || hi == 0) {
        want = static_cast<uint16_t>(hi);
      } else {
        const double dlo = a - halves[hi - 1], dhi = halves[hi] - a;
        want = static_cast<uint16_t>(dlo < dhi   ? hi - 1
                                     : dlo > dhi ? hi
                                                 : ((hi & 1) ? hi - 1 : hi));
      }
    }
    if (std::signbit(x)) want |= 0x8000;
    ASSERT_EQ(F32ToF16(x), want) << x;
  }
}

}  // namespace
}  // namespace deepinfer::tensor
