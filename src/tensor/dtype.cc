#include "tensor/dtype.h"

#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace deepinfer::tensor {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::string_view safetensors_name;
  int bits;
  bool floating;
};

constexpr std::array<DTypeInfo, kNumDTypes> kDTypeInfos = {{
    {DType::kF32, "f32", "F32", 32, true},
    {DType::kF16, "f16", "F16", 16, true},
    {DType::kBF16, "bf16", "BF16", 16, true},
    {DType::kF64, "f64", "F64", 64, true},
    {DType::kF8E4M3, "f8_e4m3", "F8_E4M3", 8, true},
    {DType::kF8E5M2, "f8_e5m2", "F8_E5M2", 8, true},
    {DType::kF8E8M0, "f8_e8m0", "F8_E8M0", 8, true},
    {DType::kFP4E2M1, "fp4_e2m1", "F4", 4, true},
    {DType::kI8, "i8", "I8", 8, false},
    {DType::kU8, "u8", "U8", 8, false},
    {DType::kI16, "i16", "I16", 16, false},
    {DType::kU16, "u16", "U16", 16, false},
    {DType::kI32, "i32", "I32", 32, false},
    {DType::kU32, "u32", "U32", 32, false},
    {DType::kI64, "i64", "I64", 64, false},
    {DType::kU64, "u64", "U64", 64, false},
    {DType::kBool, "bool", "BOOL", 8, false},
}};

const DTypeInfo& Info(DType dtype) { return kDTypeInfos[static_cast<int>(dtype)]; }

constexpr uint32_t kF32SignMask = 0x80000000u;
constexpr uint32_t kF32AbsMask = 0x7FFFFFFFu;
constexpr uint32_t kF32InfBits = 0x7F800000u;

// Drops the low `shift` bits of `bits` with round-to-nearest-even.
constexpr uint32_t RoundShiftRightEven(uint32_t bits, int shift) {
  const uint32_t half_minus_one = (1u << (shift - 1)) - 1;
  const uint32_t lowest_kept = (bits >> shift) & 1u;
  return (bits + half_minus_one + lowest_kept) >> shift;
}

std::array<float, 256> BuildE4M3Table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) {
    const int exponent = (code >> 3) & 0xF;
    const int mantissa = code & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7) {
      magnitude = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      magnitude = std::ldexp(static_cast<float>(mantissa), -9);
    } else {
      magnitude = std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
    }
    table[code] = (code & 0x80) ? -magnitude : magnitude;
  }
  return table;
}

const std::array<float, 256>& E4M3Table() {
  static const std::array<float, 256> table = BuildE4M3Table();
  return table;
}

constexpr std::array<float, 8> kE2M1Magnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

std::string_view DTypeName(DType dtype) { return Info(dtype).name; }
std::string_view SafetensorsDTypeName(DType dtype) { return Info(dtype).safetensors_name; }

std::optional<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const DTypeInfo& info : kDTypeInfos) {
    if (info.safetensors_name == name) return info.dtype;
  }
  return std::nullopt;
}

int DTypeBits(DType dtype) { return Info(dtype).bits; }
bool IsFloatingPoint(DType dtype) { return Info(dtype).floating; }

std::optional<uint64_t> DTypeStorageBytes(DType dtype, int64_t num_elements) {
  if (num_elements < 0) return std::nullopt;
  const uint64_t n = static_cast<uint64_t>(num_elements);
  const uint64_t bits = static_cast<uint64_t>(DTypeBits(dtype));
  if (n > (std::numeric_limits<uint64_t>::max() - 7) / bits) return std::nullopt;
  return (n * bits + 7) / 8;
}

// ---- BF16 ----------------------------------------------------------------------------------

uint16_t F32ToBF16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & kF32AbsMask) > kF32InfBits) {  // NaN: keep sign, force quiet
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  }
  return static_cast<uint16_t>(RoundShiftRightEven(bits, 16));
}

float BF16ToF32(uint16_t bits) { return FloatFromBits(static_cast<uint32_t>(bits) << 16); }

// ---- F16 -----------------------------------------------------------------------------------

uint16_t F32ToF16(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits & kF32SignMask) >> 16);
  const uint32_t abs = bits & kF32AbsMask;
  if (abs > kF32InfBits) return sign | 0x7E00u;             // NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00u;            // >= 65520 (tie goes to Inf) or Inf
  if (abs < 0x38800000u) {                                  // < 2^-14: subnormal half
    const float scaled = FloatFromBits(abs) * 16777216.0f;  // exact: * 2^24
    // Round half to even on an integer in [0, 1024]; 1024 encodes 2^-14 (the smallest normal).
    const float floor_value = std::floor(scaled);
    uint32_t code = static_cast<uint32_t>(floor_value);
    const float fraction = scaled - floor_value;
    if (fraction > 0.5f || (fraction == 0.5f && (code & 1u))) ++code;
    return static_cast<uint16_t>(sign | code);
  }
  const uint32_t rebiased = abs - (112u << 23);  // exponent bias 127 -> 15
  return static_cast<uint16_t>(sign | RoundShiftRightEven(rebiased, 13));
}

float F16ToF32(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1Fu;
  const uint32_t mantissa = bits & 0x3FFu;
  if (exponent == 0x1F) return FloatFromBits(sign | kF32InfBits | (mantissa << 13));
  if (exponent == 0) {
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return FloatFromBits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// ---- F8 E4M3 -------------------------------------------------------------------------------

uint8_t F32ToE4M3(float value) {
  const uint32_t bits = FloatBits(value);
  const uint8_t sign = static_cast<uint8_t>((bits & kF32SignMask) >> 24);
  const uint32_t abs = bits & kF32AbsMask;
  constexpr uint32_t k464Bits = 0x43E80000u;           // 464.0f
  if (abs > k464Bits) return sign | 0x7Fu;             // NaN, Inf and |x| > 464 -> NaN
  if (abs < 0x3C800000u) {                             // < 2^-6: subnormal e4m3, step 2^-9
    const float scaled = FloatFromBits(abs) * 512.0f;  // exact
    const float floor_value = std::floor(scaled);
    uint32_t code = static_cast<uint32_t>(floor_value);
    const float fraction = scaled - floor_value;
    if (fraction > 0.5f || (fraction == 0.5f && (code & 1u))) ++code;
    return static_cast<uint8_t>(sign | code);  // code 8 = the smallest normal, 2^-6
  }
  const uint32_t rebiased = abs - (120u << 23);  // exponent bias 127 -> 7
  return static_cast<uint8_t>(sign | RoundShiftRightEven(rebiased, 20));
}

uint8_t F32ToE4M3Saturating(float value) {
  if (std::isnan(value)) return F32ToE4M3(value);
  if (value > 448.0f) value = 448.0f;
  if (value < -448.0f) value = -448.0f;
  return F32ToE4M3(value);
}

float E4M3ToF32(uint8_t bits) { return E4M3Table()[bits]; }

// ---- F8 E8M0 -------------------------------------------------------------------------------

float E8M0ToF32(uint8_t bits) {
  if (bits == kE8M0NaN) return std::numeric_limits<float>::quiet_NaN();
  if (bits == 0) return FloatFromBits(0x00400000u);  // 2^-127 (subnormal)
  return FloatFromBits(static_cast<uint32_t>(bits) << 23);
}

std::optional<uint8_t> E8M0CeilFromF32(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & kF32SignMask) || (bits & kF32AbsMask) == 0 || (bits & kF32AbsMask) >= kF32InfBits) {
    return std::nullopt;
  }
  const int biased_exponent = static_cast<int>((bits >> 23) & 0xFF);
  const uint32_t mantissa = bits & 0x7FFFFFu;
  int log2_ceil;
  if (biased_exponent == 0) {  // subnormal: value = mantissa * 2^-149
    const int floor_log2 = 31 - std::countl_zero(mantissa);
    const bool exact_power = (mantissa & (mantissa - 1)) == 0;
    log2_ceil = -149 + floor_log2 + (exact_power ? 0 : 1);
  } else {
    log2_ceil = biased_exponent - 127 + (mantissa != 0 ? 1 : 0);
  }
  int biased = log2_ceil + 127;
  if (biased < 0) biased = 0;
  if (biased > 254) biased = 254;
  return static_cast<uint8_t>(biased);
}

// ---- FP4 E2M1 ------------------------------------------------------------------------------

float E2M1ToF32(uint8_t code) {
  const float magnitude = kE2M1Magnitudes[code & 0x7];
  return (code & 0x8) ? -magnitude : magnitude;
}

uint8_t F32ToE2M1(float value) {
  if (std::isnan(value)) return 0;
  const uint8_t sign = std::signbit(value) ? 0x8 : 0x0;
  const float a = std::fabs(value);
  uint8_t code;
  if (a <= 0.25f) {
    code = 0;
  } else if (a < 0.75f) {
    code = 1;
  } else if (a <= 1.25f) {
    code = 2;
  } else if (a < 1.75f) {
    code = 3;
  } else if (a <= 2.5f) {
    code = 4;
  } else if (a < 3.5f) {
    code = 5;
  } else if (a <= 5.0f) {
    code = 6;
  } else {
    code = 7;
  }
  return sign | code;
}

}  // namespace deepinfer::tensor
