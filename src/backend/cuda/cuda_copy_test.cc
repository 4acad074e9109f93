// CopyDeviceMany: many copies of mixed sizes and alignments in one launch land exactly where
// one-by-one copies would, and untouched bytes stay untouched.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaCopyTest = CudaVsCpuTest;

TEST_F(CudaCopyTest, ManyCopiesOfMixedSizesAndAlignments) {
  const int64_t n = 1 << 16;
  const std::vector<uint8_t> src_host = Bytes(n, 0, 255);
  uint8_t* src = BytesToGpu(src_host);
  uint8_t* dst = PoisonedBytes(n);
  std::vector<uint8_t> expected(n, 0xAB);
  std::vector<model::DeviceCopy> copies;
  // (dst offset, src offset, bytes): 16-byte aligned, 4-byte aligned, odd, empty, large.
  const std::vector<std::array<int64_t, 3>> ranges = {
      {0, 4096, 2048}, {2048, 0, 16},       {2068, 100, 44}, {2200, 7, 13},
      {3000, 50, 0},   {4096, 8192, 40000}, {44200, 3, 1},   {50000, 60000, 5536}};
  for (const auto& [d, s, b] : ranges) {
    copies.push_back({dst + d, src + s, b});
    for (int64_t i = 0; i < b; ++i) expected[d + i] = src_host[s + i];
  }
  gpu_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
  EXPECT_EQ(BytesFromGpu(dst, n), expected);
}

TEST_F(CudaCopyTest, OneCopyAndNoCopies) {
  const std::vector<float> x = Normal(1000);
  float* src = ToGpu(x);
  float* dst = PoisonedFloats(1000);
  gpu_->CopyDeviceMany(nullptr, 0);
  std::vector<model::DeviceCopy> one = {{dst, src, 1000 * sizeof(float)}};
  gpu_->CopyDeviceMany(one.data(), 1);
  EXPECT_EQ(FromGpu(dst, 1000), x);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
