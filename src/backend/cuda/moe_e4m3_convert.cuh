// The e2m1 -> e4m3 conversion of the register-A expert GEMMs (k_moe_block128_rs.cu for prefill,
// k_moe_block128_stream.cu for decode): a row's 32-value block with ue8m0 byte S, in a row whose
// largest byte is smax, becomes the e4m3 bytes of value * 2^(S - smax + 6) by one 8-byte shift
// table (d = smax - S) picked by PRMT, and the row's 2^(smax - 133) is applied to the fp32 sums.
// Device code; include from those .cu files only.
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"

namespace deepinfer::backend::cuda::kernels::moe_block128 {
namespace {

inline constexpr int kShiftTables = 256;  // d = 0 .. 255: every byte difference

// PTX prmt with an immediate selector, in its default mode (CUDA's __byte_perm ignores bit 3 of
// a selector nibble): byte n of the result is byte (nibble n of kSel) & 7 of {hi, lo}, or, when
// bit 3 of the nibble is set, that byte's bit 7 replicated over the byte.
template <uint32_t kSel>
__device__ __forceinline__ uint32_t PrmtSignMode(uint32_t lo, uint32_t hi) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lo), "r"(hi), "n"(kSel));
  return d;
}

// PTX prmt with a register selector (its low 16 bits; every nibble's bit 3 must be clear for
// plain byte selection). Opaque to the compiler, so that one 32-bit mask serves both halves of a
// word (with __byte_perm nvcc narrows the mask per half: one instruction more per word).
__device__ __forceinline__ uint32_t Prmt(uint32_t lo, uint32_t hi, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(lo), "r"(hi), "r"(sel));
  return d;
}

// The eight e2m1 nibbles of w (nibble i = value i) as e4m3 bytes: lo = values 0..3, hi = values
// 4..7 (byte i = value 4 h + i). The magnitude by the shift table (bytes: codes 0 .. 7) picked
// by PRMT on the 3-bit codes; the sign by one sign-mode PRMT per register: byte j of w << 4 has
// nibble 2 j's sign bit as its bit 7, byte j of w nibble 2 j + 1's, so selectors 8 + {0, 4, 1,
// 5} (lo) and 8 + {2, 6, 3, 7} (hi) replicate the eight sign bits in value order; one LOP3
// keeps their bit 7 and ORs it in. 9 instructions per 8 values.
__device__ __forceinline__ void E2m1x8ToE4m3(uint32_t w, uint2 table, uint32_t& lo, uint32_t& hi) {
  const uint32_t codes = w & 0x77777777u;  // one mask for both halves (Prmt reads 16 bits)
  const uint32_t w4 = w << 4;
  const uint32_t signs_lo = PrmtSignMode<0xD9C8u>(w4, w);
  const uint32_t signs_hi = PrmtSignMode<0xFBEAu>(w4, w);
  lo = Prmt(table.x, table.y, codes) | (signs_lo & 0x80808080u);
  hi = Prmt(table.x, table.y, codes >> 16) | (signs_hi & 0x80808080u);
}

// 2^(smax - 133) as a float (normal from smax = 7 on).
__device__ __forceinline__ float RowScale(uint32_t smax) {
  return smax >= 7 ? __uint_as_float((smax - 6) << 23) : ldexpf(1.0f, static_cast<int>(smax) - 133);
}

// Shift table d (thread d < kShiftTables) at tables[d]: byte c (c < 8) = the e4m3 byte of the
// e2m1 code c times 2^(6 - d), rounded like RequantMxFp4Block128 (all zeros from d = 19 on).
__device__ __forceinline__ void BuildShiftTable(uint2* tables, int d) {
  const float f = ldexpf(1.0f, 6 - d);
  uint32_t bytes[2] = {0, 0};
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    const auto byte = static_cast<uint32_t>(
        __nv_cvt_float_to_fp8(E2m1ToF32(static_cast<uint8_t>(c)) * f, __NV_SATFINITE, __NV_E4M3));
    bytes[c / 4] |= byte << (8 * (c % 4));
  }
  tables[d] = make_uint2(bytes[0], bytes[1]);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::kernels::moe_block128
