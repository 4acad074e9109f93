// CopyDeviceMany: many copies of mixed sizes and alignments in one launch land exactly where
// one-by-one copies would, and untouched bytes stay untouched.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels_copy.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaCopyTest = CudaVsCpuTest;

// Both ways of uploading the descriptors: the upload kernel (kernels::UploadPinned, the
// default) and the copy engine (set_upload_kernel(false)).
TEST_F(CudaCopyTest, ManyCopiesOfMixedSizesAndAlignments) {
  const int64_t n = 1 << 16;
  const std::vector<uint8_t> src_host = Bytes(n, 0, 255);
  uint8_t* src = BytesToGpu(src_host);
  for (const bool kernel : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "upload kernel " << kernel);
    gpu_->set_upload_kernel(kernel);
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
  gpu_->set_upload_kernel(true);
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

// UploadPinned: page-locked host bytes land exactly at the destination (16-byte and odd
// destinations, lengths with and without a partial last chunk, up to the kernel's limit), the
// bytes around it stay untouched; over the limit or from an unaligned source it refuses.
TEST_F(CudaCopyTest, UploadPinnedMatchesTheHostBytes) {
  const int64_t n = kernels::kMaxUploadKernelBytes + 64;
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, n, cudaHostAllocDefault), cudaSuccess);
  const std::vector<uint8_t> host = Bytes(n, 0, 255);
  std::memcpy(pinned, host.data(), n);
  uint8_t* dst = PoisonedBytes(n);
  std::vector<uint8_t> expected(n, 0xAB);
  for (const auto& [offset, bytes] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 16},
           {16, 1},
           {33, 15},
           {64, 17},
           {130, 100},
           {4096, 4099},
           {n - kernels::kMaxUploadKernelBytes, kernels::kMaxUploadKernelBytes}}) {
    SCOPED_TRACE(::testing::Message() << "offset " << offset << " bytes " << bytes);
    ASSERT_EQ(kernels::UploadPinned(dst + offset, pinned, bytes, gpu_->stream()), cudaSuccess);
    for (int64_t i = 0; i < bytes; ++i) expected[offset + i] = host[i];
    EXPECT_EQ(BytesFromGpu(dst, n), expected);
  }
  EXPECT_EQ(kernels::UploadPinned(dst, pinned, kernels::kMaxUploadKernelBytes + 1, gpu_->stream()),
            cudaErrorInvalidValue);
  EXPECT_EQ(kernels::UploadPinned(dst, static_cast<uint8_t*>(pinned) + 4, 32, gpu_->stream()),
            cudaErrorInvalidValue);
  ASSERT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);
  cudaFreeHost(pinned);
}

// CopyToDevice through the upload kernel (the default) and through the copy engine
// (set_upload_kernel(false)) lands the same bytes, from pageable caller memory of any size.
TEST_F(CudaCopyTest, CopyToDeviceEitherWay) {
  for (const bool kernel : {true, false}) {
    gpu_->set_upload_kernel(kernel);
    for (const int64_t bytes : {int64_t{3}, int64_t{4096}, int64_t{200000}}) {
      SCOPED_TRACE(::testing::Message() << "kernel " << kernel << " bytes " << bytes);
      const std::vector<uint8_t> host = Bytes(bytes, 0, 255);
      uint8_t* dst = PoisonedBytes(bytes + 1);
      gpu_->CopyToDevice(dst + 1, host.data(), bytes);
      std::vector<uint8_t> expected(bytes + 1, 0xAB);
      std::memcpy(expected.data() + 1, host.data(), bytes);
      EXPECT_EQ(BytesFromGpu(dst, bytes + 1), expected);
    }
  }
  gpu_->set_upload_kernel(true);
}

// GatherSelectedRows against the CPU: rows through a block table (d = 512 takes the float4
// path, d = 6 the scalar one), empty slots, ids past a token's count.
TEST_F(CudaCopyTest, GatherSelectedRowsMatchesCpu) {
  for (int64_t d : {512, 6}) {
    const int64_t T = 5, k = 7, per_block = 4, max_blocks = 3;
    const std::vector<float> rows = Normal(T * max_blocks * per_block * d);
    const float* dev_rows = ToGpu(rows);
    std::vector<int32_t> count(T), selection(T * k);
    std::vector<int64_t> host_bases(T * max_blocks), dev_bases(T * max_blocks);
    for (int64_t t = 0; t < T; ++t) {
      count[t] = static_cast<int32_t>(1 + (t * 5) % (max_blocks * per_block));
      for (int64_t blk = 0; blk < max_blocks; ++blk) {
        const int64_t at = ((t * max_blocks + (max_blocks - 1 - blk)) * per_block) * d;  // shuffled
        host_bases[t * max_blocks + blk] = reinterpret_cast<int64_t>(rows.data() + at);
        dev_bases[t * max_blocks + blk] = reinterpret_cast<int64_t>(dev_rows + at);
      }
      for (int64_t s = 0; s < k; ++s) {
        selection[t * k + s] = static_cast<int32_t>((s * 3 + t) % (count[t] + 3)) - 1;
      }
    }
    std::vector<float> expected(T * k * d, 0.0f);
    std::vector<int32_t> expected_map(T * k, 0);
    cpu_.GatherSelectedRows(selection.data(), T, k, host_bases.data(), max_blocks, count.data(),
                            per_block, d, expected.data(), expected_map.data());
    std::vector<int32_t> bases_words(2 * T * max_blocks);
    std::memcpy(bases_words.data(), dev_bases.data(), dev_bases.size() * sizeof(int64_t));
    float* out = PoisonedFloats(T * k * d);
    int32_t* map = PoisonedInts(T * k);
    gpu_->GatherSelectedRows(ToGpu(selection), T, k,
                             reinterpret_cast<const int64_t*>(ToGpu(bases_words)), max_blocks,
                             ToGpu(count), per_block, d, out, map);
    const std::vector<int32_t> got_map = FromGpu(map, T * k);
    EXPECT_EQ(got_map, expected_map) << "d " << d;
    const std::vector<float> got = FromGpu(out, T * k * d);
    for (int64_t slot = 0; slot < T * k; ++slot) {
      if (expected_map[slot] < 0 || expected_map[slot] >= k) continue;  // rows left as they are
      for (int64_t i = 0; i < d; ++i) {
        ASSERT_EQ(got[slot * d + i], expected[slot * d + i]) << "d " << d << " slot " << slot;
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
