// The measurement switches of kernel_census.h: kernel names for the census, the skip patterns
// (a matching launch recorded on a StreamTape is dropped, others run), and the census summary.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/cuda/kernel_census.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/stream_tape.h"

namespace deepinfer::backend::cuda {
namespace {

template <int kValue>
__global__ void CensusProbeKernel(int* out) {
  if (threadIdx.x == 0) *out = kValue;
}

__global__ void OtherProbeKernel(int* out) {
  if (threadIdx.x == 0) *out += 1;
}

const void* Func(void (*kernel)(int*)) { return reinterpret_cast<const void*>(kernel); }

TEST(KernelCensusTest, ShortensDemangledNames) {
  EXPECT_EQ(ShortenDemangled("void a::b::(anonymous namespace)::RmsNormKernel(float const*, long)"),
            "RmsNormKernel");
  EXPECT_EQ(ShortenDemangled("void a::k::LinearStreamKernel<1, false>(a::k::Args)"),
            "LinearStreamKernel<1, false>");
  EXPECT_EQ(ShortenDemangled("void a::GemvKernel<(a::model::WeightFormat)1, 4>(float*)"),
            "GemvKernel<(a::model::WeightFormat)1, 4>");
  EXPECT_EQ(ShortenDemangled("Plain"), "Plain");
}

TEST(KernelCensusTest, SplitsPatternsAtCommas) {
  EXPECT_EQ(SplitKernelPatterns("HcMix,, Rope,"), (std::vector<std::string>{"HcMix", "Rope"}));
  EXPECT_TRUE(SplitKernelPatterns("").empty());
}

TEST(KernelCensusTest, NamesAndCountsKernels) {
  EXPECT_EQ(KernelShortName(Func(CensusProbeKernel<3>)), "CensusProbeKernel<3>");
  EXPECT_NE(KernelSymbol(Func(OtherProbeKernel)).find("OtherProbeKernel"), std::string::npos);
  KernelCensus census;
  census.Add(Func(CensusProbeKernel<3>));
  census.Add(Func(OtherProbeKernel));
  census.Add(Func(CensusProbeKernel<3>));
  EXPECT_EQ(census.Summary(), "3 kernels: 2x CensusProbeKernel<3>, 1x OtherProbeKernel");
  EXPECT_EQ(KernelCensus().Summary(), "0 kernels:");
}

// Records CensusProbeKernel<7> then OtherProbeKernel on a tape, flushes, returns *out
// (which starts at 1).
int RecordAndRun(cudaStream_t stream, StreamTape& tape, int* out, int64_t* recorded) {
  const int one = 1;
  EXPECT_EQ(cudaMemcpyAsync(out, &one, sizeof(int), cudaMemcpyHostToDevice, stream), cudaSuccess);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(1);
  config.blockDim = dim3(32);
  config.stream = stream;
  kernels::launch::SetRecordingStream(stream);
  EXPECT_EQ(kernels::launch::LaunchKernel(config, CensusProbeKernel<7>, out), cudaSuccess);
  EXPECT_EQ(kernels::launch::LaunchKernel(config, OtherProbeKernel, out), cudaSuccess);
  kernels::launch::SetRecordingStream(nullptr);
  *recorded = tape.recorded_kernels();
  EXPECT_EQ(tape.Flush(), cudaSuccess);
  int host = -1;
  EXPECT_EQ(cudaMemcpyAsync(&host, out, sizeof(int), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return host;
}

TEST(KernelCensusTest, SkipPatternsDropOnlyMatchingRecordedLaunches) {
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    cudaGetLastError();
    GTEST_SKIP() << "no CUDA device";
  }
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  int* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, sizeof(int)), cudaSuccess);
  {
    StreamTape tape(stream);
    kernels::launch::RegisterSink(stream, &tape);
    int64_t recorded = 0;
    EXPECT_EQ(RecordAndRun(stream, tape, out, &recorded), 8);  // 7, then + 1
    EXPECT_EQ(recorded, 2);
    {
      const ScopedKernelSkipPatterns skip({"NoSuchKernel", "CensusProbe"});
      EXPECT_TRUE(KernelSkippedForMeasurement(Func(CensusProbeKernel<7>)));
      EXPECT_FALSE(KernelSkippedForMeasurement(Func(OtherProbeKernel)));
      EXPECT_EQ(RecordAndRun(stream, tape, out, &recorded), 2);  // 1 + 1: the probe dropped
      EXPECT_EQ(recorded, 1);
    }
    EXPECT_FALSE(KernelSkippedForMeasurement(Func(CensusProbeKernel<7>)));
    EXPECT_EQ(RecordAndRun(stream, tape, out, &recorded), 8);
    EXPECT_EQ(recorded, 2);
    kernels::launch::UnregisterSink(stream);
  }
  EXPECT_EQ(cudaFree(out), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

}  // namespace
}  // namespace deepinfer::backend::cuda
