// Stream order around programmatic dependent launch (pdl.cuh): a kernel launched with the PDL
// attribute right after a cudaMemsetAsync or cudaMemcpyAsync on the same stream must see
// that operation's bytes (the backend zero-fills buffers and copies host data before the
// kernels that then write or read them). Buffers large enough (256 MiB) that the memset or
// copy is still running when the kernel could start. Both hold on the H200 (run 124), with PDL
// on and off.
//
// --gtest_filter='CudaPdlOrderTest.*'
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::testing {
namespace {

class CudaPdlOrderTest : public CudaVsCpuTest {
 protected:
  static constexpr int64_t kFloats = int64_t{64} << 20;  // 256 MiB

  // How many of the kFloats values at `dev` are not `want` (copied back whole).
  static int64_t Mismatches(const float* dev, float want) {
    std::vector<float> host(kFloats);
    EXPECT_EQ(cudaMemcpy(host.data(), dev, kFloats * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    int64_t bad = 0;
    for (float v : host) bad += v == want ? 0 : 1;
    return bad;
  }
};

TEST_F(CudaPdlOrderTest, KernelAfterMemsetSeesTheMemset) {
  float* y = PoisonedFloats(kFloats);
  cudaStream_t s = gpu_->stream();
  for (int rep = 0; rep < 3; ++rep) {
    ASSERT_EQ(cudaMemsetAsync(y, 0xff, kFloats * sizeof(float), s), cudaSuccess);  // NaNs
    ASSERT_EQ(kernels::Fill(y, kFloats, 1.0f, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(Mismatches(y, 1.0f), 0) << "rep " << rep << ": the memset landed after the kernel";
  }
}

TEST_F(CudaPdlOrderTest, KernelAfterDeviceCopySeesTheCopy) {
  float* src = PoisonedFloats(kFloats);  // NaN
  float* y = PoisonedFloats(kFloats);
  cudaStream_t s = gpu_->stream();
  ASSERT_EQ(kernels::Fill(src, kFloats, 2.0f, s), cudaSuccess);
  for (int rep = 0; rep < 3; ++rep) {
    ASSERT_EQ(kernels::Fill(y, kFloats, 0.0f, s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(y, src, kFloats * sizeof(float), cudaMemcpyDeviceToDevice, s),
              cudaSuccess);
    // y *= 3 right after the copy: 6 everywhere only if the kernel read the copied values.
    ASSERT_EQ(kernels::Scale(y, kFloats, 3.0f, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(Mismatches(y, 6.0f), 0) << "rep " << rep << ": the kernel ran before the copy";
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
