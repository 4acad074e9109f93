// The table + prmt e2m1 -> bf16 decodes of cuda_dequant.cuh (Fp4x8ToBf16x8, Fp4x4ToBf16x4,
// the scale folded into the table or applied by MulBf16x2), checked bitwise on the GPU
// against a host reference built from the e2m1 value table, for every 16-bit nibble pattern
// in both halves of the 32-bit input word and every scale of the contract (2^-125 ..
// 2^125); against the older fp16-trick decode (Fp4PairToFloat2, fp32 scale multiply, bf16
// rounding) that LinearMma used, so that its bf16 operands, hence its results, stay
// bitwise the same; and DotChunksMxFp4Table against DotChunks<kMxFp4> (fp32 bitwise).
//
// A .cu file (not .cc): the kernels that call the device functions live here. The GPU
// tests skip without a CUDA device unless DEEPINFER_REQUIRE_GPU=1.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_dequant.cuh"

namespace deepinfer::backend::cuda {
namespace {

constexpr int kWords = 1 << 16;
constexpr int kThreads = 256;
constexpr int kMinExp = -125, kMaxExp = 125;  // the contract of Fp4x8ToBf16x8

// Word i of a sweep: low half i, high half an odd multiple of i (a bijection of 16-bit
// values), so each half of the input takes every 16-bit pattern once.
__host__ __device__ uint32_t SweepWord(uint32_t i) {
  return i | ((((i * 0x9E37u) ^ 0x5A5Au) & 0xFFFFu) << 16);
}

__global__ void DecodeOne(uint32_t word, int scale_exp, uint4* out) {
  *out = Fp4x8ToBf16x8(word, scale_exp);
}

__global__ void DecodeWithExponent(int scale_exp, uint4* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kWords) out[i] = Fp4x8ToBf16x8(SweepWord(i), scale_exp);
}

// One table per thread reused for two words (the word and its complement), as a kernel
// does for the 4 words of a 32-value scale block.
__global__ void DecodeWithSharedTable(uint32_t scale_byte, uint4* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kWords) return;
  const E2m1Bf16Table table = MakeE2m1Bf16TableFromE8m0(scale_byte);
  out[i] = Fp4x8ToBf16x8(SweepWord(i), table);
  out[kWords + i] = Fp4x8ToBf16x8(~SweepWord(i), table);
}

// 4 values at a time at scale 1, then the bf16x2 multiply by 2^(byte - 127), as
// LinearMma's MXFP4 StepPairs does.
__global__ void DecodeThenMultiply(uint32_t scale_byte, uint4* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kWords) return;
  constexpr E2m1Bf16Table kUnit = E2m1Bf16TableConstant(0);
  const uint32_t scale = E8m0ToBf16x2(scale_byte);
  const uint2 lo = Fp4x4ToBf16x4(SweepWord(i), kUnit);
  const uint2 hi = Fp4x4ToBf16x4(SweepWord(i) >> 16, kUnit);
  out[i] = make_uint4(MulBf16x2(lo.x, scale), MulBf16x2(lo.y, scale), MulBf16x2(hi.x, scale),
                      MulBf16x2(hi.y, scale));
}

// The device-built table for every exponent of the contract: [e - kMinExp] = 4 words.
__global__ void BuildTables(uint4* out) {
  const int e = kMinExp + static_cast<int>(threadIdx.x);
  if (e > kMaxExp) return;
  const E2m1Bf16Table t = MakeE2m1Bf16Table(e);
  out[threadIdx.x] = make_uint4(t.hi[0], t.hi[1], t.lo[0], t.lo[1]);
}

// Chunk dots of thread i: chunks q[i * kRows + n] with scale bytes s[...], x at
// x + i * kTokens * kXStride (kTokens padded chunk vectors of kXStride floats); DotChunks into
// old_acc and DotChunksMxFp4Table into new_acc (both [i][kRows][kTokens], starting from the
// same nonzero accumulators).
constexpr int kXStride = PaddedStride(model::WeightFormat::kMxFp4);  // 36 floats

template <int kRows, int kTokens>
__global__ void ChunkDots(const uint4* q, const uint8_t* s, const float* x, int n, int T,
                          float* old_acc, float* new_acc) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  RawChunk ch[kRows];
  for (int r = 0; r < kRows; ++r) {
    ch[r].q = q[i * kRows + r];
    ch[r].s = E8m0ToF32(s[i * kRows + r]);
  }
  const float* xs = x + static_cast<int64_t>(i) * kTokens * kXStride;
  float a_old[kRows][kTokens], a_new[kRows][kTokens];
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) a_old[r][t] = a_new[r][t] = 0.25f * (r - t);
  }
  DotChunks<model::WeightFormat::kMxFp4, kRows, kTokens>(ch, xs, kXStride, T, a_old);
  DotChunksMxFp4Table<kRows, kTokens>(ch, xs, kXStride, T, a_new);
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTokens; ++t) {
      old_acc[(i * kRows + r) * kTokens + t] = a_old[r][t];
      new_acc[(i * kRows + r) * kTokens + t] = a_new[r][t];
    }
  }
}

// Fp4x4ToBf16x4 on both 16-bit halves of each sweep word, laid out like Fp4x8ToBf16x8.
__global__ void DecodeFourAtATime(uint32_t scale_byte, uint4* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kWords) return;
  const E2m1Bf16Table table = MakeE2m1Bf16TableFromE8m0(scale_byte);
  const uint2 lo = Fp4x4ToBf16x4(SweepWord(i), table);
  const uint2 hi = Fp4x4ToBf16x4(SweepWord(i) >> 16, table);
  out[i] = make_uint4(lo.x, lo.y, hi.x, hi.y);
}

__device__ uint32_t PackBf16Pair(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (low half) = lo
  uint32_t bits;
  memcpy(&bits, &v, sizeof(bits));
  return bits;
}

// The decode LinearMma used before: fp16 trick, times (scale * ValueScale), bf16 rounding.
__global__ void DecodeOldPath(uint32_t scale_byte, uint4* out) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kWords) return;
  const float s =
      E8m0ToF32(static_cast<uint8_t>(scale_byte)) * ValueScale(model::WeightFormat::kMxFp4);
  const uint32_t word = SweepWord(i);
  uint32_t r[4];
  for (int p = 0; p < 4; ++p) {
    const float2 v = Fp4PairToFloat2(word >> (8 * p));
    r[p] = PackBf16Pair(v.x * s, v.y * s);
  }
  out[i] = make_uint4(r[0], r[1], r[2], r[3]);
}

// bf16 bits of e2m1(nibble) * 2^e on the host, from the value table. For e in the contract
// range the product is a normal float with at most 2 significant bits, so its bf16 is the
// top half of its float bits (checked).
uint16_t ReferenceBf16(uint32_t nibble, int e) {
  static constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float v = std::ldexp(kE2m1[nibble & 7u], e);
  if (nibble & 8u) v = -v;
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  EXPECT_EQ(bits & 0xFFFFu, 0u) << "reference not exact in bf16: nibble " << nibble << " e " << e;
  return static_cast<uint16_t>(bits >> 16);
}

// The 4 words the decode should give for `word` (column j = nibble j; low half = even).
void ReferenceWords(uint32_t word, const uint16_t (&table)[16], uint32_t (&out)[4]) {
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = table[(word >> (8 * i)) & 0xFu];
    const uint32_t hi = table[(word >> (8 * i + 4)) & 0xFu];
    out[i] = lo | (hi << 16);
  }
}

std::string Hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Number of words of `got` (n words of the sweep, complemented when `complement`) that
// differ from the reference at exponent e; describes the first one in *first.
int64_t CountMismatches(const std::vector<uint4>& got, int64_t offset, bool complement, int e,
                        std::string* first) {
  uint16_t table[16];
  for (uint32_t n = 0; n < 16; ++n) table[n] = ReferenceBf16(n, e);
  int64_t bad = 0;
  for (uint32_t i = 0; i < kWords; ++i) {
    const uint32_t word = complement ? ~SweepWord(i) : SweepWord(i);
    uint32_t want[4];
    ReferenceWords(word, table, want);
    const uint4& g = got[offset + i];
    const uint32_t have[4] = {g.x, g.y, g.z, g.w};
    for (int k = 0; k < 4; ++k) {
      if (have[k] == want[k]) continue;
      if (bad++ == 0) {
        *first = "e " + std::to_string(e) + " word " + Hex(word) + " out word " +
                 std::to_string(k) + ": got " + Hex(have[k]) + " want " + Hex(want[k]);
      }
      break;
    }
  }
  return bad;
}

class CudaFp4Test : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      (void)cudaGetLastError();
      const char* require = std::getenv("DEEPINFER_REQUIRE_GPU");
      if (require != nullptr && std::strcmp(require, "") != 0 && std::strcmp(require, "0") != 0) {
        FAIL() << "no CUDA device found (DEEPINFER_REQUIRE_GPU=1)";
      }
      GTEST_SKIP() << "no CUDA device";
    }
    ASSERT_EQ(cudaMalloc(&out_, 2 * kWords * sizeof(uint4)), cudaSuccess);
  }
  void TearDown() override {
    if (out_ != nullptr) cudaFree(out_);
  }

  // Fills out_ with 0xAB bytes, runs `launch`, copies `words` uint4 back.
  template <typename Launch>
  std::vector<uint4> Run(int64_t words, Launch launch) {
    std::vector<uint4> host(words);
    EXPECT_EQ(cudaMemset(out_, 0xAB, words * sizeof(uint4)), cudaSuccess);
    launch();
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(host.data(), out_, words * sizeof(uint4), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

  static constexpr int kBlocks = kWords / kThreads;
  uint4* out_ = nullptr;
};

// bf16 pattern `b` times 2^e by its exponent field (b a normal bf16 or a zero).
uint32_t ScaleBf16Bits(uint32_t b, int e) {
  if ((b & 0x7FFFu) == 0) return b;
  return (b & 0x8000u) | static_cast<uint32_t>(static_cast<int>(b & 0x7FFFu) + 128 * e);
}

TEST_F(CudaFp4Test, KnownWords) {
  // Magnitudes 0..7 in columns 0..7, then the same with the sign bit (0x8 is -0).
  const uint32_t words[2] = {0x76543210u, 0xFEDCBA98u};
  const uint32_t want_e0[2][4] = {{0x3F000000u, 0x3FC03F80u, 0x40404000u, 0x40C04080u},
                                  {0xBF008000u, 0xBFC0BF80u, 0xC040C000u, 0xC0C0C080u}};
  for (int w = 0; w < 2; ++w) {
    for (int e : {0, -3, 7, kMinExp, kMaxExp}) {
      const std::vector<uint4> got = Run(1, [&] { DecodeOne<<<1, 1>>>(words[w], e, out_); });
      const uint32_t have[4] = {got[0].x, got[0].y, got[0].z, got[0].w};
      for (int k = 0; k < 4; ++k) {
        const uint32_t want = ScaleBf16Bits(want_e0[w][k] & 0xFFFFu, e) |
                              (ScaleBf16Bits(want_e0[w][k] >> 16, e) << 16);
        EXPECT_EQ(Hex(have[k]), Hex(want)) << "word " << Hex(words[w]) << " e " << e << " k " << k;
      }
    }
  }
}

// Every 16-bit nibble pattern in each half of the word, every exponent of the contract.
TEST_F(CudaFp4Test, AllWordsAllExponentsBitExact) {
  for (int e = kMinExp; e <= kMaxExp; ++e) {
    const std::vector<uint4> got =
        Run(kWords, [&] { DecodeWithExponent<<<kBlocks, kThreads>>>(e, out_); });
    std::string first;
    const int64_t bad = CountMismatches(got, 0, /*complement=*/false, e, &first);
    ASSERT_EQ(bad, 0) << bad << " of " << kWords << " words wrong; first: " << first;
  }
}

// The table built once from an E8m0 byte and reused for two words gives the same bits.
TEST_F(CudaFp4Test, SharedTableFromE8m0BitExact) {
  for (int byte = 127 + kMinExp; byte <= 127 + kMaxExp; ++byte) {
    const std::vector<uint4> got =
        Run(2 * kWords, [&] { DecodeWithSharedTable<<<kBlocks, kThreads>>>(byte, out_); });
    for (int part = 0; part < 2; ++part) {
      std::string first;
      const int64_t bad = CountMismatches(got, part * kWords, part == 1, byte - 127, &first);
      ASSERT_EQ(bad, 0) << bad << " of " << kWords << " words wrong (byte " << byte
                        << ", complement " << part << "); first: " << first;
    }
  }
}

// Bitwise the same as the fp16-trick decode LinearMma used, for every scale byte where that
// path's fp32 scale (2^(byte-127) * 2^14) is finite: bytes 2 .. 240.
TEST_F(CudaFp4Test, SameBitsAsOldDecode) {
  for (int byte = 127 + kMinExp; byte <= 240; ++byte) {
    const std::vector<uint4> old_bits =
        Run(kWords, [&] { DecodeOldPath<<<kBlocks, kThreads>>>(byte, out_); });
    const std::vector<uint4> new_bits =
        Run(2 * kWords, [&] { DecodeWithSharedTable<<<kBlocks, kThreads>>>(byte, out_); });
    int64_t bad = 0;
    std::string first;
    for (int i = 0; i < kWords; ++i) {
      const uint4 a = old_bits[i], b = new_bits[i];
      if (a.x != b.x || a.y != b.y || a.z != b.z || a.w != b.w) {
        if (bad++ == 0) {
          first = "word " + Hex(SweepWord(i)) + ": old " + Hex(a.x) + " " + Hex(a.y) + " " +
                  Hex(a.z) + " " + Hex(a.w) + " new " + Hex(b.x) + " " + Hex(b.y) + " " + Hex(b.z) +
                  " " + Hex(b.w);
        }
      }
    }
    ASSERT_EQ(bad, 0) << "byte " << byte << ": " << bad << " words differ; first " << first;
  }
}

// The compile-time table (host) holds the reference bf16 bytes of every magnitude: runs
// without a GPU.
TEST(E2m1Bf16TableConstant, MatchesReferenceForEveryExponent) {
  for (int e = kMinExp; e <= kMaxExp; ++e) {
    const E2m1Bf16Table t = E2m1Bf16TableConstant(e);
    for (uint32_t m = 0; m < 8; ++m) {
      const uint32_t want = ReferenceBf16(m, e);
      const uint32_t hi = (t.hi[m / 4] >> (8 * (m % 4))) & 0xFFu;
      const uint32_t lo = (t.lo[m / 4] >> (8 * (m % 4))) & 0xFFu;
      ASSERT_EQ(Hex((hi << 8) | lo), Hex(want)) << "e " << e << " magnitude " << m;
    }
  }
}

// The device-built table (MakeE2m1Bf16Table) equals the compile-time one for every exponent.
TEST_F(CudaFp4Test, DeviceTableEqualsConstantTable) {
  constexpr int kExps = kMaxExp - kMinExp + 1;
  const std::vector<uint4> got = Run(kExps, [&] { BuildTables<<<1, 256>>>(out_); });
  for (int i = 0; i < kExps; ++i) {
    const E2m1Bf16Table t = E2m1Bf16TableConstant(kMinExp + i);
    EXPECT_EQ(Hex(got[i].x), Hex(t.hi[0])) << "e " << kMinExp + i;
    EXPECT_EQ(Hex(got[i].y), Hex(t.hi[1])) << "e " << kMinExp + i;
    EXPECT_EQ(Hex(got[i].z), Hex(t.lo[0])) << "e " << kMinExp + i;
    EXPECT_EQ(Hex(got[i].w), Hex(t.lo[1])) << "e " << kMinExp + i;
  }
}

// DotChunksMxFp4Table gives bitwise the fp32 accumulators of DotChunks<kMxFp4> (random
// nibbles, scale bytes 2^-20 .. 2^4, normal x), for T below, at and past kTokens.
template <int kRows, int kTokens>
void ExpectChunkDotsBitwiseEqual(uint64_t seed) {
  constexpr int kN = 1 << 14;
  std::mt19937_64 rng(seed);
  std::vector<uint4> q(kN * kRows);
  for (uint4& v : q) {
    v = make_uint4(static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                   static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()));
  }
  std::vector<uint8_t> s(kN * kRows);
  for (uint8_t& b : s) b = static_cast<uint8_t>(107 + rng() % 25);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kN) * kTokens * kXStride);
  for (float& v : x) v = normal(rng);
  uint4* dq = nullptr;
  uint8_t* ds = nullptr;
  float *dx = nullptr, *d_old = nullptr, *d_new = nullptr;
  const size_t acc_floats = static_cast<size_t>(kN) * kRows * kTokens;
  ASSERT_EQ(cudaMalloc(&dq, q.size() * sizeof(uint4)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ds, s.size()), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dx, x.size() * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_old, acc_floats * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&d_new, acc_floats * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dq, q.data(), q.size() * sizeof(uint4), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpy(ds, s.data(), s.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice),
            cudaSuccess);
  for (int T = 1; T <= kTokens + 1; ++T) {
    ASSERT_EQ(cudaMemset(d_old, 0xFF, acc_floats * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemset(d_new, 0xAB, acc_floats * sizeof(float)), cudaSuccess);
    ChunkDots<kRows, kTokens><<<kN / kThreads, kThreads>>>(dq, ds, dx, kN, T, d_old, d_new);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    std::vector<uint32_t> old_bits(acc_floats), new_bits(acc_floats);
    ASSERT_EQ(cudaMemcpy(old_bits.data(), d_old, acc_floats * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(new_bits.data(), d_new, acc_floats * 4, cudaMemcpyDeviceToHost),
              cudaSuccess);
    int64_t bad = 0, first = -1, live = 0, changed = 0;
    for (size_t i = 0; i < acc_floats; ++i) {
      if (old_bits[i] != new_bits[i] && bad++ == 0) first = static_cast<int64_t>(i);
      const int r = static_cast<int>(i / kTokens % kRows), t = static_cast<int>(i % kTokens);
      if (t >= T) continue;
      const float start = 0.25f * (r - t);
      float got;
      std::memcpy(&got, &old_bits[i], 4);
      ++live;
      changed += got != start;
    }
    EXPECT_EQ(bad, 0) << "rows " << kRows << " tokens " << kTokens << " T " << T << ": first at "
                      << first << " old " << Hex(first < 0 ? 0 : old_bits[first]) << " new "
                      << Hex(first < 0 ? 0 : new_bits[first]);
    EXPECT_GT(changed, live * 9 / 10) << "the dots did run (T " << T << ")";
  }
  cudaFree(dq), cudaFree(ds), cudaFree(dx), cudaFree(d_old), cudaFree(d_new);
}

TEST_F(CudaFp4Test, TableChunkDotsEqualDotChunksBitwise) {
  ExpectChunkDotsBitwiseEqual<4, 2>(1);  // k_moe_grouped: gate/up (2 x 2 rows), down (4 rows)
  ExpectChunkDotsBitwiseEqual<2, 2>(2);
  ExpectChunkDotsBitwiseEqual<4, 1>(3);
  ExpectChunkDotsBitwiseEqual<1, 8>(4);
}

// Unit-table decode times the bf16x2 power of two: every word, E8m0 bytes 2 .. 252.
TEST_F(CudaFp4Test, DecodeThenMultiplyBitExact) {
  for (int byte = 127 + kMinExp; byte <= 127 + kMaxExp; ++byte) {
    const std::vector<uint4> got =
        Run(kWords, [&] { DecodeThenMultiply<<<kBlocks, kThreads>>>(byte, out_); });
    std::string first;
    const int64_t bad = CountMismatches(got, 0, /*complement=*/false, byte - 127, &first);
    ASSERT_EQ(bad, 0) << bad << " of " << kWords << " words wrong (byte " << byte
                      << "); first: " << first;
  }
}

// Beyond the contract the multiply still rounds like IEEE: byte 1 (0.5 * 2^-126 is a bf16
// subnormal), bytes 253, 254 (4 and 6 times 2^126, 2 .. 6 times 2^127 overflow to inf).
TEST_F(CudaFp4Test, DecodeThenMultiplyEdgeBytes) {
  for (int byte : {1, 253, 254}) {
    const std::vector<uint4> got =
        Run(kWords, [&] { DecodeThenMultiply<<<kBlocks, kThreads>>>(byte, out_); });
    std::string first;
    const int64_t bad = CountMismatches(got, 0, /*complement=*/false, byte - 127, &first);
    EXPECT_EQ(bad, 0) << bad << " of " << kWords << " words wrong (byte " << byte
                      << "); first: " << first;
  }
}

// The 4-value decode: every word (both halves), E8m0 bytes 2 .. 252.
TEST_F(CudaFp4Test, FourAtATimeBitExact) {
  for (int byte = 127 + kMinExp; byte <= 127 + kMaxExp; ++byte) {
    const std::vector<uint4> got =
        Run(kWords, [&] { DecodeFourAtATime<<<kBlocks, kThreads>>>(byte, out_); });
    std::string first;
    const int64_t bad = CountMismatches(got, 0, /*complement=*/false, byte - 127, &first);
    ASSERT_EQ(bad, 0) << bad << " of " << kWords << " words wrong (byte " << byte
                      << "); first: " << first;
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda
