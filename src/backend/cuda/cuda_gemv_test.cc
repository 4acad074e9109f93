// The fused dequantise + GEMV (k_gemv.cu, LinearGemv / LinearGemvGrouped) against a CPU
// emulation of its documented summation order, BITWISE, under every launch shape the test
// hook can force (rows per warp, ring depth, x staging): the launch shape must never change
// an output bit. The emulation itself is checked against the CPU backend's Linear (tight
// tolerance), so a wrong emulation cannot hide a wrong kernel.
//
// Tests: --gtest_filter='CudaGemvTest.*'; bench (the lead's A/B of the launch shapes):
// --gtest_also_run_disabled_tests --gtest_filter='CudaGemvBench.*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::kernels {
// Defined in k_gemv.cu (test hook; see there): forces rows per warp (0 = default), ring depth
// (1 or 4; 0 = default) and the scalar x staging of later LinearGemv calls; (0, 0, false)
// removes the override (so under DEEPINFER_CUDA_GEMV_LEGACY=1 "default" is the legacy shape).
void SetGemvLaunchForTesting(int rows_per_warp, int depth, bool legacy_staging);
}  // namespace deepinfer::backend::cuda::kernels

namespace deepinfer::backend::cuda::testing {
namespace {

using model::WeightFormat;

// A launch shape of the GEMV (arguments of SetGemvLaunchForTesting).
struct LaunchShape {
  const char* name;
  int rows_per_warp;
  int depth;
  bool legacy_staging;
};

// rows 4 (RowsPerWarp: 2 at 3+ tokens) / depth 1 / scalar staging: the launch shape of before
// session 13 (DEEPINFER_CUDA_GEMV_LEGACY=1).
constexpr LaunchShape kShapes[] = {
    {"default", 0, 0, false},
    {"legacy", 4, 1, true},
    {"default rows, depth 1", 0, 1, false},
    {"default rows, depth 4", 0, 4, false},
    {"rows 4, depth 4", 4, 4, false},
    {"rows 4, depth 4, scalar staging", 4, 4, true},
    {"rows 4, depth 1, float4 staging", 4, 1, false},
    {"rows 2, depth 4", 2, 4, false},
    {"rows 2, depth 1", 2, 1, false},
    {"rows 1, depth 4", 1, 4, false},
    {"rows 1, depth 1, scalar staging", 1, 1, true},
};

// The format's name (model/backend.h), for traces and bench lines.
std::string FormatName(WeightFormat f) { return std::string(model::WeightFormatName(f)); }

// Values of one 16-byte chunk (as k_gemv.cu's ChunkValues).
int ChunkValues(WeightFormat f) {
  return f == WeightFormat::kMxFp4  ? 32
         : f == WeightFormat::kF32  ? 4
         : f == WeightFormat::kBF16 ? 8
                                    : 16;
}

// A stored weight on the host.
struct HostWeight {
  WeightFormat format;
  int64_t rows, cols;
  std::vector<uint8_t> data, scale;
};

float E4m3ToFloat(uint8_t b) {
  const int exp = (b >> 3) & 0xF, man = b & 0x7;
  const float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9)  // subnormal: m/8 * 2^-6
                             : std::ldexp(1.0f + man / 8.0f, exp - 7);
  return (b & 0x80) ? -mag : mag;
}

// e2m1 nibble times 2^-14 (the kernel's Dequant4 value: 1 / ValueScale), -0 for 0x8.
float E2m1Times2PowMinus14(uint8_t nibble) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = std::ldexp(kMag[nibble & 7], -14);
  return (nibble & 8) ? -mag : mag;
}

// Value k of stored row r divided by ValueScale (what Dequant4 gives).
float StoredValue(const HostWeight& w, int64_t r, int64_t k) {
  const int64_t i = r * w.cols + k;
  switch (w.format) {
    case WeightFormat::kF32: {
      float v;
      std::memcpy(&v, w.data.data() + 4 * i, 4);
      return v;
    }
    case WeightFormat::kBF16: {
      uint16_t b;
      std::memcpy(&b, w.data.data() + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(b) << 16;
      float v;
      std::memcpy(&v, &bits, 4);
      return v;
    }
    case WeightFormat::kFp8Block32:
    case WeightFormat::kFp8Row32:
      return E4m3ToFloat(w.data[i]);
    case WeightFormat::kMxFp4:
      return E2m1Times2PowMinus14((w.data[i / 2] >> (4 * (i % 2))) & 0xF);
  }
  return NAN;
}

// The power-of-two scale of chunk c of row r (as LoadRawChunk).
float ChunkScale(const HostWeight& w, int64_t r, int64_t c) {
  const int64_t scale_cols = (w.cols + 31) / 32;
  switch (w.format) {
    case WeightFormat::kFp8Block32:
      return std::ldexp(1.0f, w.scale[(r / 32) * scale_cols + (c * 16) / 32] - 127);
    case WeightFormat::kFp8Row32:
      return std::ldexp(1.0f, w.scale[r * scale_cols + (c * 16) / 32] - 127);
    case WeightFormat::kMxFp4:
      return std::ldexp(1.0f, w.scale[r * (w.cols / 32) + c] - 127);
    default:
      return 1.0f;
  }
}

// k_gemv.cu's OrderSplit: warps per row group for a pass of kTok tokens over n_rows rows.
int OrderSplit(int tok, int64_t n_rows) {
  const int rows_per_warp = tok >= 4 ? 2 : 4;
  int split = 1;
  auto blocks_for = [&](int s) {
    const int64_t rows_per_block = (8 / s) * rows_per_warp;
    return (n_rows + rows_per_block - 1) / rows_per_block;
  };
  while (split < 8 && blocks_for(split) < 2 * 132) split *= 2;
  return split;
}

// One chunk's DotChunks term folded into a lane sum: part = 0 + e_0 + e_1 + ... over groups
// of 4 values, e = v3 x3 + (v2 x2 + (v0 x0 + v1 x1)) with the fused multiply-adds nvcc
// forms for `v0 * x.x + v1 * x.y + v2 * x.z + v3 * x.w`, then acc = fma(part * ValueScale, s,
// acc).
float AddChunk(const HostWeight& w, int64_t r, int64_t c, const float* x, float acc) {
  const int n = ChunkValues(w.format);
  float part = 0.0f;
  for (int g = 0; g < n / 4; ++g) {
    const int64_t k = c * n + 4 * g;
    const float v0 = StoredValue(w, r, k), v1 = StoredValue(w, r, k + 1);
    const float v2 = StoredValue(w, r, k + 2), v3 = StoredValue(w, r, k + 3);
    const float e =
        std::fmaf(v3, x[k + 3], std::fmaf(v2, x[k + 2], std::fmaf(v0, x[k], v1 * x[k + 1])));
    part = part + e;
  }
  const float value_scale = w.format == WeightFormat::kMxFp4 ? 16384.0f : 1.0f;
  return std::fmaf(part * value_scale, ChunkScale(w, r, c), acc);
}

// The GEMV's documented summation order (k_gemv.cu file comment) on the CPU: y as
// LinearGemvGrouped(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, group_rows, xgs) leaves it.
void EmulateGemv(const HostWeight& w, int64_t row0, int64_t n_rows, const std::vector<float>& x,
                 int64_t T, int64_t ldx, std::vector<float>& y, int64_t ldy, bool accumulate,
                 int64_t group_rows, int64_t x_group_stride) {
  const int64_t chunks = w.cols / ChunkValues(w.format);
  for (int64_t t0 = 0; t0 < T;) {
    const int left = static_cast<int>(std::min<int64_t>(T - t0, 8));
    const int tok = left == 1 ? 1 : left == 2 ? 2 : left <= 4 ? 4 : 8;
    const int split = OrderSplit(tok, n_rows);
    for (int64_t i = 0; i < n_rows; ++i) {
      for (int64_t t = t0; t < t0 + left; ++t) {
        const float* xt = x.data() + t * ldx + (i / group_rows) * x_group_stride;
        float parts[8];
        for (int p = 0; p < split; ++p) {
          float lanes[32];
          for (int l = 0; l < 32; ++l) {
            lanes[l] = 0.0f;
            for (int64_t c = 32 * p + l; c < chunks; c += 32 * split) {
              lanes[l] = AddChunk(w, row0 + i, c, xt, lanes[l]);
            }
          }
          for (int offset = 16; offset > 0; offset >>= 1) {  // WarpSum's butterfly
            float next[32];
            for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ offset];
            std::memcpy(lanes, next, sizeof(lanes));
          }
          parts[p] = lanes[0];
        }
        float sum = parts[0];
        if (split > 1) {
          sum = 0.0f;
          for (int p = 0; p < split; ++p) sum += parts[p];
        }
        float& out = y[t * ldy + i];
        out = accumulate ? out + sum : sum;
      }
    }
    t0 += left;
  }
}

// Bitwise equality of two whole buffers (pads included); names the first differences.
::testing::AssertionResult SameBits(const std::vector<float>& got, const std::vector<float>& want,
                                    int64_t ld) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "size differs";
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ < 5) {
      first << "\n  token " << i / ld << " col " << i % ld << ": got " << got[i] << " want "
            << want[i];
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " differ:" << first.str();
}

class CudaGemvTest : public CudaVsCpuTest {
 protected:
  void TearDown() override {
    kernels::SetGemvLaunchForTesting(0, 0, false);
    CudaVsCpuTest::TearDown();
  }

  HostWeight MakeWeight(WeightFormat f, int64_t rows, int64_t cols) {
    HostWeight w{f, rows, cols, {}, {}};
    RandomWeightBytes(f, rows, cols, &w.data, &w.scale);
    return w;
  }

  kernels::DeviceWeight ToDevice(const HostWeight& w) {
    kernels::DeviceWeight d;
    d.format = w.format;
    d.rows = w.rows;
    d.cols = w.cols;
    d.data = BytesToGpu(w.data);
    d.scale = w.scale.empty() ? nullptr : BytesToGpu(w.scale);
    return d;
  }

  // One case: rows [row0, row0 + n_rows) of a [N, K] weight, T tokens, x and y padded
  // (ldx = width + ldx_pad, x width = groups * K for grouped weights), under every launch
  // shape. x_offset shifts x by that many floats (breaks 16-byte alignment when odd).
  void CheckCase(WeightFormat f, int64_t T, int64_t K, int64_t N, int64_t row0, int64_t n_rows,
                 int64_t ldx_pad, int64_t ldy_pad, bool accumulate, int64_t group_rows = 0,
                 int64_t x_offset = 0) {
    const bool grouped = group_rows > 0;
    const int64_t g = grouped ? group_rows : n_rows;
    const int64_t x_group_stride = grouped ? K : 0;
    const int64_t width = grouped ? (n_rows / group_rows) * K : K;
    SCOPED_TRACE(::testing::Message()
                 << FormatName(f) << " T=" << T << " K=" << K << " N=" << N << " rows " << row0
                 << "+" << n_rows << " ldx pad " << ldx_pad << " x offset " << x_offset
                 << (accumulate ? " accumulate" : "") << (grouped ? " grouped " : "")
                 << (grouped ? std::to_string(group_rows) : std::string()) << " (seed " << seed_
                 << ")");
    const HostWeight w = MakeWeight(f, N, K);
    const kernels::DeviceWeight dw = ToDevice(w);
    const int64_t ldx = width + ldx_pad, ldy = n_rows + ldy_pad;
    const std::vector<float> x = Normal(T * ldx);
    const std::vector<float> y0 = Normal(T * ldy);  // accumulate base and pad values
    std::vector<float> want = y0;
    if (!accumulate) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < n_rows; ++i) want[t * ldy + i] = NAN;  // the GPU's poison
      }
    }
    const std::vector<float> y_start = want;
    EmulateGemv(w, row0, n_rows, x, T, ldx, want, ldy, accumulate, g, x_group_stride);
    if (!grouped)
      CheckEmulationAgainstCpu(w, row0, n_rows, x, T, ldx, y_start, want, ldy, accumulate);

    std::vector<float> x_shifted(x_offset, 0.0f);
    x_shifted.insert(x_shifted.end(), x.begin(), x.end());
    const float* x_dev = ToGpu(x_shifted) + x_offset;
    for (const LaunchShape& shape : kShapes) {
      SCOPED_TRACE(shape.name);
      kernels::SetGemvLaunchForTesting(shape.rows_per_warp, shape.depth, shape.legacy_staging);
      float* y = ToGpu(y_start);
      ASSERT_EQ(kernels::LinearGemvGrouped(dw, row0, n_rows, x_dev, T, ldx, y, ldy, accumulate, g,
                                           x_group_stride, gpu_->stream()),
                cudaSuccess);
      EXPECT_TRUE(SameBits(FromGpu(y, T * ldy), want, ldy));
    }
    kernels::SetGemvLaunchForTesting(0, 0, false);
  }

  // The emulation computes the product the CPU backend computes (up to fp32 rounding).
  void CheckEmulationAgainstCpu(const HostWeight& w, int64_t row0, int64_t n_rows,
                                const std::vector<float>& x, int64_t T, int64_t ldx,
                                const std::vector<float>& y_start,
                                const std::vector<float>& emulated, int64_t ldy, bool accumulate) {
    const model::WeightRef ref{
        std::string("gemv.") + FormatName(w.format), w.format, w.rows, w.cols, w.data.data(),
        w.scale.empty() ? nullptr : w.scale.data()};
    std::vector<float> cpu = y_start;
    cpu_.Linear(x.data(), T, ldx, ref, row0, n_rows, cpu.data(), ldy, accumulate);
    const double tol = std::max(1e-5, 2e-6 * std::sqrt(static_cast<double>(w.cols)));
    EXPECT_TRUE(RelL2Close(emulated, cpu, tol)) << "emulation vs CPU backend";
    EXPECT_TRUE(AllClose(emulated, cpu, 1e-3, 1e-3 * MaxAbs(cpu))) << "emulation vs CPU backend";
  }
};

constexpr WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16,
                                     WeightFormat::kFp8Block32, WeightFormat::kFp8Row32,
                                     WeightFormat::kMxFp4};

// An odd number of chunks (327) per row: multi-step lanes with ragged ends, several x slices
// at T = 5 and 8 for every format; 37 rows (not a multiple of any block's rows) from row 3.
TEST_F(CudaGemvTest, EveryFormatAndTokenCountMatchesTheOrderBitwise) {
  for (const WeightFormat f : kFormats) {
    const int64_t K = 327 * ChunkValues(f);
    for (const int64_t T : {1, 2, 3, 5, 8}) {
      CheckCase(f, T, K, 45, 3, 37, 5, 2, /*accumulate=*/false);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(CudaGemvTest, AccumulateAndMultiPassMatchTheOrderBitwise) {
  for (const WeightFormat f : kFormats) {
    const int64_t K = 33 * ChunkValues(f);
    // Passes: 9 = 8 + 1, 11 = 8 + 3 (a 4-token pass), 17 = 8 + 8 + 1.
    for (const int64_t T : {1, 4, 9, 11, 17}) {
      CheckCase(f, T, K, 70, 0, 70, 0, 3, /*accumulate=*/true);
      if (HasFatalFailure()) return;
    }
  }
}

// x rows not 16-byte aligned (odd ldx, or x shifted by one float): the scalar staging.
TEST_F(CudaGemvTest, UnalignedXMatchesTheOrderBitwise) {
  for (const WeightFormat f : {WeightFormat::kBF16, WeightFormat::kMxFp4}) {
    const int64_t K = 65 * ChunkValues(f);
    for (const int64_t T : {1, 3}) {
      CheckCase(f, T, K, 40, 1, 38, 1, 0, false);
      CheckCase(f, T, K, 40, 0, 40, 4, 0, false, 0, /*x_offset=*/1);
      if (HasFatalFailure()) return;
    }
  }
}

// Grouped weights (block-diagonal, as wo_a): 3 groups of 64 rows, each reading its own K
// columns of x.
TEST_F(CudaGemvTest, GroupedMatchesTheOrderBitwise) {
  for (const WeightFormat f : kFormats) {
    const int64_t K = 41 * ChunkValues(f);
    for (const int64_t T : {1, 2, 3, 8}) {
      CheckCase(f, T, K, 192, 0, 192, 4, 1, /*accumulate=*/false, /*group_rows=*/64);
      if (HasFatalFailure()) return;
    }
  }
}

// Every split: 8 rows (split 8) .. 8500 rows (split 1 at one token, many blocks, the
// shallow ring by default); rows 1000 at 2 tokens (split 8, 250 blocks).
TEST_F(CudaGemvTest, EverySplitMatchesTheOrderBitwise) {
  const int64_t K = 37 * 8;  // BF16: 37 chunks
  for (const int64_t rows : {8, 300, 1000, 2200, 4300, 8500}) {
    for (const int64_t T : {1, 2}) {
      CheckCase(WeightFormat::kBF16, T, K, rows, 0, rows, 0, 0, false);
      if (HasFatalFailure()) return;
    }
  }
}

// V4.1 decode shapes (5120 columns), mostly at one token, against the emulation.
TEST_F(CudaGemvTest, RealShapesMatchTheOrderBitwise) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  CheckCase(WeightFormat::kBF16, 1, 5120, 384, 0, 384, 0, 0, false);
  CheckCase(WeightFormat::kBF16, 1, 5120, 512, 0, 512, 0, 0, false);
  CheckCase(WeightFormat::kF32, 1, 5120, 64, 0, 64, 0, 0, false);
  CheckCase(WeightFormat::kF32, 8, 5120, 8, 0, 8, 0, 0, false);
  CheckCase(WeightFormat::kFp8Block32, 4, 5120, 128, 0, 128, 0, 0, false);
  CheckCase(WeightFormat::kMxFp4, 2, 5120, 96, 0, 96, 0, 0, false);
}

// Device time of the GEMV at the decode shapes under the default and the older launch shapes
// (per call, CUDA events over 200 back-to-back calls: consecutive launches overlap through
// PDL as in a decode step). Run with --gtest_also_run_disabled_tests
// --gtest_filter='CudaGemvBench.*'.
class CudaGemvBench : public CudaGemvTest {
 protected:
  kernels::DeviceWeight FilledWeight(WeightFormat f, int64_t rows, int64_t cols) {
    kernels::DeviceWeight w;
    w.format = f;
    w.rows = rows;
    w.cols = cols;
    const int64_t bytes = rows * cols *
                          (f == WeightFormat::kF32    ? 4
                           : f == WeightFormat::kBF16 ? 2
                                                      : 1) /
                          (f == WeightFormat::kMxFp4 ? 2 : 1);
    float* data = gpu_->AllocFloats(bytes / 4 + 1);
    gpu_->Fill(data, bytes / 4 + 1, 0.01f);  // bytes 0A D7 23 3C (finite in every format)
    w.data = data;
    allocated_.push_back(data);
    if (f != WeightFormat::kF32 && f != WeightFormat::kBF16) {
      const int64_t scale_floats = rows * ((cols + 31) / 32) / 4 + 1;  // covers every layout
      float* scale = gpu_->AllocFloats(scale_floats);
      uint32_t bits = 0x78787878u;  // e8m0 120 = 2^-7
      float pattern;
      std::memcpy(&pattern, &bits, 4);
      gpu_->Fill(scale, scale_floats, pattern);
      w.scale = reinterpret_cast<const uint8_t*>(scale);
      allocated_.push_back(scale);
    }
    return w;
  }

  void TearDown() override {
    if (gpu_) {
      for (float* p : allocated_) gpu_->Free(p);
    }
    allocated_.clear();
    CudaGemvTest::TearDown();
  }

  // `calls` weights of rows x K in a row (different weights, as consecutive model Linears).
  void Bench(WeightFormat f, int64_t rows, int64_t K, int calls, std::vector<int64_t> tokens) {
    std::vector<kernels::DeviceWeight> ws;
    for (int i = 0; i < calls; ++i) ws.push_back(FilledWeight(f, rows, K));
    const double bytes = static_cast<double>(calls) * rows * K *
                         (f == WeightFormat::kF32    ? 4.0
                          : f == WeightFormat::kBF16 ? 2.0
                                                     : 1.0) /
                         (f == WeightFormat::kMxFp4 ? 2.0 : 1.0);
    const float* x = ToGpu(Normal(8 * K));
    float* y = PoisonedFloats(8 * rows);
    for (const int64_t T : tokens) {
      for (const LaunchShape& shape : kShapes) {
        // Rows per warp below 4 exist at 1-2 token passes only (else the same as rows 4).
        if (T > 2 && (shape.rows_per_warp == 1 || shape.rows_per_warp == 2)) continue;
        if (T == 2 && shape.rows_per_warp == 1) continue;
        kernels::SetGemvLaunchForTesting(shape.rows_per_warp, shape.depth, shape.legacy_staging);
        const double us = DeviceMicrosPerCall([&] {
          for (const kernels::DeviceWeight& w : ws) {
            EXPECT_EQ(kernels::LinearGemv(w, 0, rows, x, T, K, y, rows, false, gpu_->stream()),
                      cudaSuccess);
          }
        });
        std::printf("GEMV %-20s %d x %6lld x %-5lld T=%lld  %-40s %8.2f us  %6.0f GB/s\n",
                    FormatName(f).c_str(), calls, static_cast<long long>(rows),
                    static_cast<long long>(K), static_cast<long long>(T), shape.name, us,
                    bytes / (us * 1e3));
      }
    }
    kernels::SetGemvLaunchForTesting(0, 0, false);
  }

  std::vector<float*> allocated_;
};

TEST_F(CudaGemvBench, DISABLED_DecodeShapes) {
  Bench(WeightFormat::kBF16, 384, 5120, 1, {1, 4, 8});  // ffn.gate (router)
  Bench(WeightFormat::kBF16, 512, 5120, 2, {1, 4, 8});  // compressor wkv + wgate
  Bench(WeightFormat::kF32, 64, 5120, 1, {1, 4, 8});
  Bench(WeightFormat::kF32, 8, 5120, 1, {1, 4, 8});
  Bench(WeightFormat::kBF16, 32, 5120, 1, {1, 4, 8});
  Bench(WeightFormat::kBF16, 4096, 5120, 1, {1, 8});  // mid-size (split 2 at one token)
  Bench(WeightFormat::kFp8Block32, 1024, 5120, 1, {1, 8});
  Bench(WeightFormat::kMxFp4, 4096, 5120, 1, {1});
  Bench(WeightFormat::kBF16, 129280, 5120, 1, {1});  // the head (split 1: shallow ring)
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
