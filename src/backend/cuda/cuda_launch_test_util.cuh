// The fixture of the launch tests (cuda_launch_test.cu: chain latency; cuda_pdl_chain_test.cu:
// the backend's kernels with programmatic dependent launch on and off): a CUDA stream, and
// two device float buffers for the latency chains. Include from .cu test files only.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

namespace deepinfer::backend::cuda::testing {

class CudaLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      if (std::getenv("DEEPINFER_REQUIRE_GPU") != nullptr) FAIL() << "no CUDA device";
      GTEST_SKIP() << "no CUDA device";
    }
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (a_ != nullptr) cudaFree(a_);
    if (b_ != nullptr) cudaFree(b_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void Alloc(int n) {
    ASSERT_EQ(cudaMalloc(&a_, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b_, n * sizeof(float)), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(a_, 0, n * sizeof(float), stream_), cudaSuccess);
  }
  std::vector<float> Result(int n, int kernels) {
    std::vector<float> host(n);
    const float* last = kernels % 2 == 0 ? a_ : b_;
    EXPECT_EQ(
        cudaMemcpyAsync(host.data(), last, n * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    return host;
  }

  cudaStream_t stream_ = nullptr;
  float* a_ = nullptr;
  float* b_ = nullptr;
};

}  // namespace deepinfer::backend::cuda::testing
