// Stored-weight chunks for the fused dequantise + dot kernels (GEMV, routed experts).
//
// A stored weight row is read in 16-byte chunks: 32 e2m1 (MXFP4, one 32-value scale
// block), 16 e4m3 (FP8, half of one 32-column scale block), 8 bf16 or 4 fp32 values.
// A chunk is loaded raw (RawChunk: the 16 bytes + its power-of-two scale) so that several
// loads are in flight before any math, then dequantised 4 values at a time. The scale is
// applied once to the chunk's partial dot product: scales are powers of two, so
// (sum v*x) * s equals sum (v*s)*x up to the summation order (no extra rounding).
// e4m3 pairs use the hardware fp8x2 -> f16x2 conversion; e2m1 pairs a bit-exact fp16 trick,
// or (Fp4x8ToBf16x8 / Fp4x4ToBf16x4, DotChunksMxFp4Table) byte tables selected with prmt,
// which give exact bf16 with the power-of-two scale folded in at ~1/3 of the ops.
//
// The activation vectors a chunk is dotted with live in shared memory in a padded layout
// (PaddedIndex): the values of chunk c start at c * (ChunkValues + 4), so that the float4
// reads of the 8 lanes of a quarter-warp (each on its own chunk) hit distinct banks.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/cuda_numerics.cuh"
#include "model/backend.h"

namespace deepinfer::backend::cuda {

// Values held by one 16-byte chunk of a stored row.
__host__ __device__ constexpr int ChunkValues(model::WeightFormat f) {
  return f == model::WeightFormat::kMxFp4  ? 32
         : f == model::WeightFormat::kF32  ? 4
         : f == model::WeightFormat::kBF16 ? 8
                                           : 16;
}

// Floats between the starts of two chunks in the padded shared-memory layout.
__host__ __device__ constexpr int PaddedStride(model::WeightFormat f) { return ChunkValues(f) + 4; }

// Shared-memory floats of a padded vector of `n` values (n a multiple of ChunkValues(f)).
__host__ __device__ constexpr int64_t PaddedFloats(model::WeightFormat f, int64_t n) {
  return n / ChunkValues(f) * PaddedStride(f);
}

// Position of value k in the padded layout.
template <model::WeightFormat kFormat>
__device__ __forceinline__ int64_t PaddedIndex(int64_t k) {
  constexpr int kValues = ChunkValues(kFormat);
  return (k / kValues) * PaddedStride(kFormat) + k % kValues;
}

// Copies v[0 .. n) (global, read-only for the kernel) into the padded layout at `dst`
// (shared); all threads of the block call it (no barrier inside). Each thread issues 8
// independent loads before storing, so staging costs a few memory latencies, not n/threads.
template <model::WeightFormat kFormat>
__device__ __forceinline__ void StagePadded(const float* v, int64_t n, float* dst) {
  constexpr int kBatch = 8;
  const int64_t stride = blockDim.x;
  for (int64_t base = threadIdx.x; base < n; base += kBatch * stride) {
    float r[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t k = base + j * stride;
      r[j] = k < n ? __ldg(v + k) : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int64_t k = base + j * stride;
      if (k < n) dst[PaddedIndex<kFormat>(k)] = r[j];
    }
  }
}

struct RawChunk {
  uint4 q;  // the 16 stored bytes
  float s;  // power-of-two scale of the chunk (1 for unscaled formats)
};

// Chunk `c` of row `r` of a stored [rows, K] weight (data 16-byte aligned; K a multiple of
// ChunkValues, so every row starts on a 16-byte boundary).
template <model::WeightFormat kFormat>
__device__ __forceinline__ RawChunk LoadRawChunk(const void* data, const uint8_t* scale, int64_t K,
                                                 int64_t r, int64_t c) {
  using model::WeightFormat;
  constexpr int kValues = ChunkValues(kFormat);
  const int64_t row_chunks = K / kValues;
  RawChunk ch;
  ch.q = __ldg(reinterpret_cast<const uint4*>(data) + (r * row_chunks + c));
  if constexpr (kFormat == WeightFormat::kMxFp4) {
    ch.s = E8m0ToF32(__ldg(scale + r * (K / 32) + c));  // a chunk is one 32-value block
  } else if constexpr (kFormat == WeightFormat::kFp8Block32 || kFormat == WeightFormat::kFp8Row32) {
    const int64_t scale_cols = (K + 31) / 32;
    const int64_t scale_row = kFormat == WeightFormat::kFp8Block32 ? r / 32 : r;
    ch.s = E8m0ToF32(__ldg(scale + scale_row * scale_cols + (c * 16) / 32));
  } else {
    ch.s = 1.0f;
  }
  return ch;
}

__device__ __forceinline__ uint32_t ChunkWord(const uint4& q, int i) {
  return i == 0 ? q.x : (i == 1 ? q.y : (i == 2 ? q.z : q.w));
}

// Dequant4 yields value * ValueScale(format)^-1 (MXFP4 decodes through fp16 bit patterns
// that are 2^-14 times the e2m1 value); DotChunks multiplies the scale back (exact).
__host__ __device__ constexpr float ValueScale(model::WeightFormat f) {
  return f == model::WeightFormat::kMxFp4 ? 16384.0f : 1.0f;
}

__device__ __forceinline__ float2 Half2BitsToFloat2(uint32_t bits) {
  __half2_raw raw;
  raw.x = static_cast<unsigned short>(bits & 0xFFFFu);
  raw.y = static_cast<unsigned short>(bits >> 16);
  return __half22float2(__half2(raw));
}

// Two e2m1 nibbles (low byte of b: low nibble first) as 2^-14 times their values: the
// 3 magnitude bits become the low exponent bits and top mantissa bit of an fp16 (exact,
// zero and 0.5 included through fp16 subnormals), the sign bit its sign.
__device__ __forceinline__ float2 Fp4PairToFloat2(uint32_t b) {
  const uint32_t bits =
      ((b & 0x7u) << 9) | ((b & 0x8u) << 12) | ((b & 0x70u) << 21) | ((b & 0x80u) << 24);
  return Half2BitsToFloat2(bits);
}

// ---- Fast exact e2m1 -> bf16 with the power-of-two scale folded in (table + prmt) ----
//
// The bf16 patterns of the 8 e2m1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} times 2^e are
// split into their high and low bytes, held as two 8-byte tables in 4 registers
// (E2m1Bf16Table). One prmt maps four 3-bit magnitude codes to four table bytes, so 4 prmt
// give the high and low bytes of 8 values; the sign bits are OR-ed into the high bytes and
// 4 more prmt interleave (low, high) byte pairs into 4 words of two bf16 each.
//
// Contract: scale_exp in [-125, 125]. Then every product is a normal bf16 (or zero) and the
// result is bit-exact: bf16(E2m1ToF32(n) * 2^scale_exp), -0 for the nibble 0x8 (real
// checkpoints use about 2^-12 .. 2^0; E8m0 bytes 2 .. 252). Outside that range the result
// is unspecified (no trap).
//
// Cost (nvdisasm of sm_90a code, nvcc 13.0 -O3): 15 integer ops per 8 values (10 PRMT,
// 3 LOP3, 1 SHF, 1 IMAD.SHL), no conversion and no float multiply; the table costs 8 ops
// (4 IMAD, 4 PRMT) per scale change. One 32-value MXFP4 chunk: 72 ops in all, against 233
// (64 LOP3, 49 IMAD, 37 FMUL, 35 SHF, 32 HADD2, 16 F2FP) for Fp4PairToFloat2 + scale
// multiply + bf16 pack, i.e. ~2.2 instead of ~7.3 ops per value.

// Bytes of the bf16 patterns of e2m1 magnitudes 0..7 times 2^e: byte m of {hi[0], hi[1]}
// (hi[0] = bytes 0..3) is the high byte of magnitude m, likewise lo for the low byte.
struct E2m1Bf16Table {
  uint32_t hi[2];
  uint32_t lo[2];
};

// PTX prmt in its default mode (selector nibbles 0..7 pick bytes of {b, a} = a bytes 0..3,
// b bytes 4..7). Selector nibbles must have bit 3 clear (no sign replication here).
__device__ __forceinline__ uint32_t BytePerm(uint32_t a, uint32_t b, uint32_t selector) {
  return __byte_perm(a, b, selector);
}

// The table for scale 2^scale_exp, scale_exp in [-125, 125] (8 ops).
__device__ __forceinline__ E2m1Bf16Table MakeE2m1Bf16Table(int scale_exp) {
  // bf16(v * 2^e) = bf16(v) + e * 2^7 (exponent field) for normal results, computed for two
  // magnitudes per 32-bit word at once: the low half stays in [0, 0xFFFF] for e in range, so
  // no carry or borrow crosses into the high half. Magnitude 0 is the constant 0x0000.
  const uint32_t e = static_cast<uint32_t>(scale_exp);
  const uint32_t w01 = 0x3F000000u + e * 0x00800000u;  // {0, 0.5}
  const uint32_t w23 = 0x3FC03F80u + e * 0x00800080u;  // {1, 1.5}
  const uint32_t w45 = 0x40404000u + e * 0x00800080u;  // {2, 3}
  const uint32_t w67 = 0x40C04080u + e * 0x00800080u;  // {4, 6}
  E2m1Bf16Table t;
  t.hi[0] = BytePerm(w01, w23, 0x7531u);
  t.hi[1] = BytePerm(w45, w67, 0x7531u);
  t.lo[0] = BytePerm(w01, w23, 0x6420u);
  t.lo[1] = BytePerm(w45, w67, 0x6420u);
  return t;
}

// The table for an E8m0 scale byte in [2, 252] (2^-125 .. 2^125).
__device__ __forceinline__ E2m1Bf16Table MakeE2m1Bf16TableFromE8m0(uint32_t scale_byte) {
  return MakeE2m1Bf16Table(static_cast<int>(scale_byte) - 127);
}

// bf16 bits of e2m1 magnitude m (0..7) times 2^e, e in [-125, 125] (host and device).
__host__ __device__ constexpr uint32_t E2m1MagnitudeBf16Bits(int m, int e) {
  // m >= 2 is 1.(m & 1) * 2^((m >> 1) - 1): exponent field 126 + (m >> 1), mantissa bit 6 =
  // m & 1; m = 1 is 0.5 (exponent field 126, the e2m1 subnormal). The scale adds e to the
  // exponent field.
  const int unscaled = m < 2 ? 0x3F00 : 0x3F00 + 0x80 * (m >> 1) + 0x40 * (m & 1);
  return m == 0 ? 0u : static_cast<uint32_t>(unscaled + 128 * e);
}

// MakeE2m1Bf16Table(e) as a compile-time constant, for a fixed scale (e in [-125, 125]).
__host__ __device__ constexpr E2m1Bf16Table E2m1Bf16TableConstant(int e) {
  E2m1Bf16Table t{};
  for (int m = 0; m < 8; ++m) {
    const uint32_t bits = E2m1MagnitudeBf16Bits(m, e);
    t.hi[m / 4] |= (bits >> 8) << (8 * (m % 4));
    t.lo[m / 4] |= (bits & 0xFFu) << (8 * (m % 4));
  }
  return t;
}

// Eight e2m1 nibbles (nibble j = bits 4j..4j+3 = column j, so the low nibble of each byte is
// the even column) as 8 bf16 values times the table's scale, in column order, two per word:
// word i holds columns 2i (low half) and 2i+1 (high half), as mma.sync bf16 fragments want.
__device__ __forceinline__ uint4 Fp4x8ToBf16x8(uint32_t nibbles, const E2m1Bf16Table& t) {
  // 3-bit magnitude codes as prmt selector nibbles (prmt reads only the low 16 bits).
  const uint32_t mag = nibbles & 0x77777777u;
  const uint32_t mag_hi = mag >> 16;
  uint32_t hi03 = BytePerm(t.hi[0], t.hi[1], mag);  // byte j: high byte of column j
  uint32_t hi47 = BytePerm(t.hi[0], t.hi[1], mag_hi);
  const uint32_t lo03 = BytePerm(t.lo[0], t.lo[1], mag);
  const uint32_t lo47 = BytePerm(t.lo[0], t.lo[1], mag_hi);
  // Sign of column j is bit 4j+3: bit 7 of byte j/2 of (nibbles << 4) for even j, of
  // `nibbles` for odd j; gather them to bit 7 of byte j (high bytes have bit 7 clear).
  const uint32_t shifted = nibbles << 4;
  hi03 |= BytePerm(shifted, nibbles, 0x5140u) & 0x80808080u;
  hi47 |= BytePerm(shifted, nibbles, 0x7362u) & 0x80808080u;
  uint4 out;
  out.x = BytePerm(lo03, hi03, 0x5140u);  // columns 0, 1
  out.y = BytePerm(lo03, hi03, 0x7362u);  // columns 2, 3
  out.z = BytePerm(lo47, hi47, 0x5140u);  // columns 4, 5
  out.w = BytePerm(lo47, hi47, 0x7362u);  // columns 6, 7
  return out;
}

// Four e2m1 nibbles (the low 16 bits of `nibbles`, column j = bits 4j..4j+3) as 4 bf16
// times the table's scale: .x = columns 0, 1, .y = columns 2, 3 (8 ops; for callers that
// consume 4 values at a time and are short of registers).
__device__ __forceinline__ uint2 Fp4x4ToBf16x4(uint32_t nibbles, const E2m1Bf16Table& t) {
  const uint32_t mag = nibbles & 0x77777777u;  // prmt reads the low 16 selector bits
  uint32_t hi = BytePerm(t.hi[0], t.hi[1], mag);
  const uint32_t lo = BytePerm(t.lo[0], t.lo[1], mag);
  hi |= BytePerm(nibbles << 4, nibbles, 0x5140u) & 0x80808080u;  // signs (as Fp4x8ToBf16x8)
  return make_uint2(BytePerm(lo, hi, 0x5140u), BytePerm(lo, hi, 0x7362u));
}

// Same, building the table for 2^scale_exp first (scale_exp in [-125, 125]); when several
// words share a scale, build the table once and call the overload above.
__device__ __forceinline__ uint4 Fp4x8ToBf16x8(uint32_t nibbles, int scale_exp) {
  return Fp4x8ToBf16x8(nibbles, MakeE2m1Bf16Table(scale_exp));
}

// Scale applied after the decode instead of folded into the table, for kernels that hold
// many differently scaled chunks at once (one table register set instead of 4 registers per
// scale): decode with E2m1Bf16TableConstant(0), then one bf16x2 multiply by 2^e per word
// (2 ops per 8 values on the FMA pipe). The product is the round-to-nearest bf16 of
// value * 2^e, bit-exact like the folded table for E8m0 bytes 2 .. 252 (and the IEEE result,
// inf included, beyond).

// bf16 2^(scale_byte - 127) in both halves of a word (scale_byte in [1, 254]).
__device__ __forceinline__ uint32_t E8m0ToBf16x2(uint32_t scale_byte) {
  return scale_byte * 0x00800080u;  // the byte is the exponent field of each bf16
}

// Two bf16 times two bf16 (halves paired), rounded to nearest even.
__device__ __forceinline__ uint32_t MulBf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else
  // a * b + (-0): the same rounding, and -0 stays -0.
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
  return d;
}

// Two e4m3 bytes (low 16 bits of b: low byte first) through the hardware fp8x2 -> f16x2.
__device__ __forceinline__ float2 Fp8PairToFloat2(uint32_t b) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(b & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(h));
}

// Values 4g .. 4g+3 of a chunk divided by ValueScale (g < ChunkValues / 4; call with a
// constant g).
template <model::WeightFormat kFormat>
__device__ __forceinline__ void Dequant4(const RawChunk& ch, int g, float v[4]) {
  using model::WeightFormat;
  if constexpr (kFormat == WeightFormat::kF32) {
    v[0] = __uint_as_float(ch.q.x), v[1] = __uint_as_float(ch.q.y);
    v[2] = __uint_as_float(ch.q.z), v[3] = __uint_as_float(ch.q.w);
  } else if constexpr (kFormat == WeightFormat::kBF16) {
    const uint32_t lo = ChunkWord(ch.q, 2 * g), hi = ChunkWord(ch.q, 2 * g + 1);
    v[0] = __uint_as_float(lo << 16), v[1] = __uint_as_float(lo & 0xFFFF0000u);
    v[2] = __uint_as_float(hi << 16), v[3] = __uint_as_float(hi & 0xFFFF0000u);
  } else if constexpr (kFormat == WeightFormat::kMxFp4) {
    // Column 8i+j is nibble j of word i (low nibble = even column).
    const uint32_t bits = ChunkWord(ch.q, g / 2) >> (16 * (g % 2));
    const float2 a = Fp4PairToFloat2(bits), b = Fp4PairToFloat2(bits >> 8);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  } else {  // FP8: column 4i+j is byte j of word i
    const uint32_t word = ChunkWord(ch.q, g);
    const float2 a = Fp8PairToFloat2(word), b = Fp8PairToFloat2(word >> 16);
    v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
  }
}

// acc[n][t] += chunk n . x_t for n < kRows, t < min(T, kTokens), where x_t's chunk values
// start at xs + t * x_stride (padded shared layout, 16-byte aligned). Each float4 of x read
// from shared memory feeds all kRows weight rows.
template <model::WeightFormat kFormat, int kRows, int kTokens>
__device__ __forceinline__ void DotChunks(const RawChunk (&ch)[kRows], const float* xs,
                                          int64_t x_stride, int T, float (&acc)[kRows][kTokens]) {
  constexpr int kGroups = ChunkValues(kFormat) / 4;
  float part[kRows][kTokens];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) part[n][t] = 0.0f;
  }
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float v[kRows][4];
#pragma unroll
    for (int n = 0; n < kRows; ++n) Dequant4<kFormat>(ch[n], g, v[n]);
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < T) {
        const float4 x = *reinterpret_cast<const float4*>(xs + t * x_stride + 4 * g);
#pragma unroll
        for (int n = 0; n < kRows; ++n) {
          part[n][t] += v[n][0] * x.x + v[n][1] * x.y + v[n][2] * x.z + v[n][3] * x.w;
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[n][t] += (part[n][t] * ValueScale(kFormat)) * ch[n].s;
  }
}

// DotChunks<kMxFp4, kRows, kTokens> with the e2m1 values decoded by the table + prmt path
// (Fp4x4ToBf16x4 at the fixed scale 1 / ValueScale = 2^-14, so each value is bitwise the
// float Dequant4 gives; bf16 -> fp32 is a shift or a mask). Same products and the same
// accumulation order as DotChunks (group g ascending, the same 4-term expression per
// group), hence the same fp32 results. Decoding 4 values at a time keeps the register
// footprint of Dequant4. nvdisasm (sm_90a, kRows 4, kTokens 2, one chunk = 128 values):
// 463 integer ops (160 PRMT, 128 LOP3, 73 SHF, 66 IMAD, 36 MOV) against 695 for DotChunks
// (257 SHF, 256 LOP3, 128 HADD2, 54 IMAD); the float ops (200 FFMA, 72 FMUL, 64 FADD) are
// the same.
template <int kRows, int kTokens>
__device__ __forceinline__ void DotChunksMxFp4Table(const RawChunk (&ch)[kRows], const float* xs,
                                                    int64_t x_stride, int T,
                                                    float (&acc)[kRows][kTokens]) {
  constexpr model::WeightFormat kFormat = model::WeightFormat::kMxFp4;
  constexpr E2m1Bf16Table kTable = E2m1Bf16TableConstant(-14);  // 2^-14 = 1 / ValueScale
  static_assert(ValueScale(kFormat) == 16384.0f, "table scale is 1 / ValueScale");
  float part[kRows][kTokens];
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) part[n][t] = 0.0f;
  }
#pragma unroll
  for (int g = 0; g < 8; ++g) {  // values 4g .. 4g+3: nibbles 4 (g % 2) .. +3 of word g / 2
    float v[kRows][4];
#pragma unroll
    for (int n = 0; n < kRows; ++n) {
      const uint2 b = Fp4x4ToBf16x4(ChunkWord(ch[n].q, g / 2) >> (16 * (g % 2)), kTable);
      v[n][0] = __uint_as_float(b.x << 16), v[n][1] = __uint_as_float(b.x & 0xFFFF0000u);
      v[n][2] = __uint_as_float(b.y << 16), v[n][3] = __uint_as_float(b.y & 0xFFFF0000u);
    }
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      if (t < T) {
        const float4 x = *reinterpret_cast<const float4*>(xs + t * x_stride + 4 * g);
#pragma unroll
        for (int n = 0; n < kRows; ++n) {
          part[n][t] += v[n][0] * x.x + v[n][1] * x.y + v[n][2] * x.z + v[n][3] * x.w;
        }
      }
    }
  }
#pragma unroll
  for (int n = 0; n < kRows; ++n) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) acc[n][t] += (part[n][t] * ValueScale(kFormat)) * ch[n].s;
  }
}

}  // namespace deepinfer::backend::cuda
