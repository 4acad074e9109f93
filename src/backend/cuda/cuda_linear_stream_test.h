// The fixture of the few-token streaming Linear tests (cuda_linear_stream_test.cc: the bf16 form,
// cuda_linear_e4m3_test.cc: the e4m3 wgmma form of kernels_stream.h).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernels_stream.h"

namespace deepinfer::backend::cuda::testing {

class CudaLinearStreamTest : public CudaFp8Test {
 protected:
  // The bf16 form of kernels_stream.h; cuda_linear_e4m3_test.cc switches the e4m3 form on.
  void SetUp() override {
    CudaFp8Test::SetUp();
    kernels::SetLinearStreamE4m3(0);
  }
  void TearDown() override {
    kernels::SetLinearStreamE4m3(-1);
    CudaFp8Test::TearDown();
  }

  // y [T, ldy] from kernels::LinearStream on the device copy of y0.
  std::vector<float> RunStream(const HostWeight& w, int64_t row0, int64_t n_rows,
                               const std::vector<float>& x, int64_t T, std::vector<float> y0,
                               int64_t ldy, bool accumulate) {
    const int64_t K = w.device.cols;
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
    float* y = ToGpu(y0);
    const cudaError_t e = kernels::LinearStream(w.device, row0, n_rows, ToGpu(x), T, K, y, ldy,
                                                accumulate, scratch, gpu_->stream());
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return FromGpu(y, T * ldy);
  }

  // The bound of CheckLinear (cuda_fp8_test_util.h) for LinearStream.
  void CheckStream(int64_t T, int64_t K, int64_t N, int64_t row0, int64_t n_rows, int64_t ldy_pad,
                   bool accumulate, int scale_lo = 112, int scale_hi = 124) {
    SCOPED_TRACE(::testing::Message()
                 << "T=" << T << " K=" << K << " N=" << N << " rows " << row0 << "+" << n_rows
                 << (accumulate ? " accumulate" : "") << " scales " << scale_lo << ".." << scale_hi
                 << " split " << kernels::LinearStreamSplit(n_rows, K));
    const HostWeight w = MakeFp8Weight(N, K, scale_lo, scale_hi);
    ASSERT_TRUE(kernels::LinearStreamApplicable(w.device, row0, n_rows, T));
    const int64_t ldy = n_rows + ldy_pad;
    const std::vector<float> x = Activations(T, K);
    const std::vector<float> xq = FakeQuantized(x, T, K);
    const std::vector<float> y0 = Normal(T * ldy);
    const std::vector<float> got = RunStream(w, row0, n_rows, x, T, y0, ldy, accumulate);
    ExpectLinearMatchesCpu(w, row0, n_rows, xq, T, y0, ldy, accumulate, got, "stream");
  }
};

}  // namespace deepinfer::backend::cuda::testing
