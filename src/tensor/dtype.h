// Element types and scalar conversions between them.
//
// Storage formats used by DeepSeek-V4.1 checkpoints (shared/specs/model.md §4):
//   F32, BF16, F8_E4M3 (float8_e4m3fn: no infinities, 0x7F/0xFF = NaN, max 448),
//   F8_E8M0 (a raw exponent byte b: value 2^(b-127); 255 = NaN, rejected on load),
//   packed FP4 e2m1 (two codes per byte: low nibble = even element, high nibble = odd element;
//   code bit 3 = sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}). Checkpoints store packed
//   e2m1 as I8 bytes; kFP4E2M1 is the logical type (4 bits per element).
//
// All conversions are pure functions on bits, exact and independent of the FP environment
// (except where noted), and match torch's casts for the same types.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace deepinfer::tensor {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kF64,
  kF8E4M3,   // float8_e4m3fn
  kF8E5M2,   // recognised for listing only (no conversions)
  kF8E8M0,   // raw exponent byte
  kFP4E2M1,  // packed two per byte, low nibble first
  kI8,
  kU8,
  kI16,
  kU16,
  kI32,
  kU32,
  kI64,
  kU64,
  kBool,
};

inline constexpr int kNumDTypes = static_cast<int>(DType::kBool) + 1;

// Short lowercase name for messages: "f32", "bf16", "f8_e4m3", "fp4_e2m1", "i8", ...
std::string_view DTypeName(DType dtype);
// The safetensors header spelling: "F32", "BF16", "F8_E4M3", "F8_E8M0", "F4", "I8", "BOOL", ...
std::string_view SafetensorsDTypeName(DType dtype);
// Inverse of SafetensorsDTypeName; nullopt for an unknown string.
std::optional<DType> DTypeFromSafetensorsName(std::string_view name);

// Bits per element: 4 for kFP4E2M1, 8 for 1-byte types, ... 64.
int DTypeBits(DType dtype);
// Bytes needed to store `num_elements` contiguous elements (sub-byte types round up).
// Returns nullopt on overflow or negative input.
std::optional<uint64_t> DTypeStorageBytes(DType dtype, int64_t num_elements);
bool IsFloatingPoint(DType dtype);

// ---- BF16 ----------------------------------------------------------------------------------
// F32 -> BF16 with round-to-nearest-even. NaN stays NaN (quiet, sign kept); values beyond
// the BF16 range round to +-Inf like torch.
uint16_t F32ToBF16(float value);
float BF16ToF32(uint16_t bits);

// ---- F16 (IEEE binary16) -------------------------------------------------------------------
// Round-to-nearest-even; |x| >= 65520 -> +-Inf; subnormals kept; NaN -> quiet NaN.
uint16_t F32ToF16(float value);
float F16ToF32(uint16_t bits);

// ---- F8 E4M3 (float8_e4m3fn) ---------------------------------------------------------------
// Round-to-nearest-even with torch's float8_e4m3fn cast semantics: the format has no Inf, so
// NaN, +-Inf and every |x| > 464 (the midpoint between 448 and the NaN code) become NaN
// (0x7F, sign bit kept); |x| <= 464 rounds to at most 448. Subnormals (down to 2^-9) kept.
uint8_t F32ToE4M3(float value);
// Same, but finite values (and +-Inf) beyond +-448 clamp to +-448 first. NaN -> NaN.
uint8_t F32ToE4M3Saturating(float value);
// Exact. 0x7F and 0xFF are NaN.
float E4M3ToF32(uint8_t bits);

// ---- F8 E8M0 (raw exponent byte) -----------------------------------------------------------
inline constexpr uint8_t kE8M0NaN = 255;
// 2^(b-127) exactly (b = 0 gives the subnormal 2^-127); 255 -> NaN.
float E8M0ToF32(uint8_t bits);
// The E8M0 byte of 2^ceil(log2(x)) for a finite x > 0, computed from the float bits
// (the exponent, +1 if any mantissa bit is set), as the reference scales are chosen.
// Subnormal x is handled exactly; results clamp to [0, 254]. nullopt for x <= 0 / NaN / Inf.
std::optional<uint8_t> E8M0CeilFromF32(float value);

// ---- FP4 E2M1 ------------------------------------------------------------------------------
// Code (0..15) -> value: bit 3 = sign, bits 0-2 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
float E2M1ToF32(uint8_t code);
// Nearest value, ties to the even code: ties at 0.25, 1.25, 2.5, 5 go down, at 0.75, 1.75,
// 3.5 go up. |x| > 6 (and +-Inf) saturates to +-6. The sign bit is kept (a negative value
// that rounds to zero gives code 8, "-0"). NaN -> 0 (callers clamp first).
uint8_t F32ToE2M1(float value);
// Element `index` of a packed e2m1 array (byte index/2, low nibble for even index).
inline uint8_t PackedE2M1Code(const uint8_t* bytes, int64_t index) {
  const uint8_t byte = bytes[index >> 1];
  return (index & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xF);
}
inline uint8_t PackE2M1Pair(uint8_t even_code, uint8_t odd_code) {
  return static_cast<uint8_t>((even_code & 0xF) | ((odd_code & 0xF) << 4));
}

// ---- helpers ------------------------------------------------------------------------------
inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}
inline float FloatFromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// C++ type -> DType, for typed access (TensorView::data<T>()).
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::kI8;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<int16_t> {
  static constexpr DType value = DType::kI16;
};
template <>
struct DTypeOf<uint16_t> {
  static constexpr DType value = DType::kU16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<uint32_t> {
  static constexpr DType value = DType::kU32;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<uint64_t> {
  static constexpr DType value = DType::kU64;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

}  // namespace deepinfer::tensor
