// PrefetchL2 (k_prefetch.cu) and CudaBackend::PrefetchWeights: the request plan on the host,
// and on the device that a prefetch launches, fails nothing and changes no byte, and that a
// Linear after the hint gives the bits it gives without it (eager, recorded and replayed as a
// CUDA graph). What a prefetch buys is measured by the decode bench, not here.
//
// --gtest_filter='CudaPrefetch*:PrefetchPlanTest.*'
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernels_prefetch.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using kernels::kPrefetchChunkBytes;
using kernels::PrefetchL2Requests;
using kernels::PrefetchRange;

const void* At(uintptr_t address) { return reinterpret_cast<const void*>(address); }

TEST(PrefetchPlanTest, RequestsCoverTheAlignedInteriorInChunks) {
  const PrefetchRange exact[] = {{At(0x10000), 3 * kPrefetchChunkBytes}};
  EXPECT_EQ(PrefetchL2Requests(exact, 1), 3);
  const PrefetchRange one_more[] = {{At(0x10000), 3 * kPrefetchChunkBytes + 16}};
  EXPECT_EQ(PrefetchL2Requests(one_more, 1), 4);
  // [0x10008, 0x10028) holds the aligned 16 bytes [0x10010, 0x10020) only.
  const PrefetchRange unaligned[] = {{At(0x10008), 32}};
  EXPECT_EQ(PrefetchL2Requests(unaligned, 1), 1);
  const PrefetchRange too_small[] = {{At(0x10001), 20}, {At(0x10000), 0}, {At(0x10000), -5}};
  EXPECT_EQ(PrefetchL2Requests(too_small, 3), 0);
  const PrefetchRange two[] = {{At(0x10000), kPrefetchChunkBytes}, {At(0x90000), 100}};
  EXPECT_EQ(PrefetchL2Requests(two, 2), 2);
  EXPECT_EQ(PrefetchL2Requests(two, 0), 0);
  EXPECT_EQ(PrefetchL2Requests(two, kernels::kMaxPrefetchRanges + 1), 0);
}

TEST(PrefetchPlanTest, BadArgumentsAreErrorsWithoutALaunch) {
  const PrefetchRange r[] = {{At(0x10000), 64}};
  EXPECT_EQ(kernels::PrefetchL2(r, -1, false, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::PrefetchL2(r, kernels::kMaxPrefetchRanges + 1, false, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kernels::PrefetchL2(nullptr, 1, false, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::PrefetchL2(nullptr, 0, false, nullptr), cudaSuccess);
}

class CudaPrefetchTest : public CudaFp8Test {};

TEST_F(CudaPrefetchTest, PrefetchChangesNoByte) {
  const int64_t n = 3 * (int64_t{1} << 20) + 77;
  const std::vector<uint8_t> host = Bytes(n, 0, 255);
  uint8_t* dev = BytesToGpu(host);
  for (bool evict_last : {false, true}) {
    SCOPED_TRACE(evict_last ? "evict_last" : "default policy");
    // Whole, unaligned, tiny, empty, past-a-chunk and eight ranges at once.
    const PrefetchRange ranges[] = {{dev, n},
                                    {dev + 3, n - 3},
                                    {dev + 5, 40},
                                    {dev + 100, 0},
                                    {dev + 16, kPrefetchChunkBytes + 48},
                                    {dev + 1000, 5000},
                                    {dev + n / 2, n / 2},
                                    {dev, 16}};
    for (int count : {1, 2, 3, 4, 8}) {
      EXPECT_EQ(kernels::PrefetchL2(ranges, count, evict_last, gpu_->stream()), cudaSuccess);
    }
    EXPECT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  EXPECT_TRUE(BytesFromGpu(dev, n) == host) << "a prefetch changed device memory";
}

// The hint before a Linear, five times in a row (the backend records the ops and replays a
// repeated sequence as a CUDA graph), against the same Linear without hints: bitwise.
TEST_F(CudaPrefetchTest, LinearAfterTheHintBitwise) {
  gpu_->set_fp8_activations(true);
  gpu_->set_batch_invariant(false);
  gpu_->set_linear_stream_max_tokens(kernels::kStreamMaxTokens);
  const int64_t N = 1024, K = 2048;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  const HostWeight other = MakeWeight(WeightFormat::kFp8Block32, 256, K);
  for (int64_t T : {1, 8}) {
    SCOPED_TRACE(::testing::Message() << "T=" << T);
    const std::vector<float> x = Activations(T, K);
    const float* dx = ToGpu(x);
    gpu_->set_l2_prefetch(0, 0, false);
    float* y_ref = PoisonedFloats(T * N);
    gpu_->Linear(dx, T, K, w.ref, 0, N, y_ref, N, false);
    const std::vector<float> expected = FromGpu(y_ref, T * N);
    for (bool evict_last : {false, true}) {
      gpu_->set_l2_prefetch(int64_t{1} << 20, 32, evict_last);  // budget below the weight's
      const model::WeightRef* const hinted[] = {&other.ref, &w.ref};
      for (int rep = 0; rep < 5; ++rep) {
        float* y = PoisonedFloats(T * N);
        gpu_->PrefetchWeights(hinted, 2, T);
        gpu_->Linear(dx, T, K, w.ref, 0, N, y, N, false);
        EXPECT_TRUE(BitExact(FromGpu(y, T * N), expected)) << "rep " << rep;
      }
    }
    // Past the row limit the hint is ignored; still the same bits.
    gpu_->set_l2_prefetch(int64_t{64} << 20, 0, false);
    const model::WeightRef* const hinted[] = {&w.ref};
    float* y = PoisonedFloats(T * N);
    gpu_->PrefetchWeights(hinted, 1, T);
    gpu_->Linear(dx, T, K, w.ref, 0, N, y, N, false);
    EXPECT_TRUE(BitExact(FromGpu(y, T * N), expected));
  }
  EXPECT_TRUE(gpu_->Synchronize().ok());
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
