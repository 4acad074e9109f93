// Launch latency of dependent kernel chains (the shape of a decode step: ~280 small kernels,
// each reading the previous one's output): plain launches, programmatic dependent launch
// (PDL: griddepcontrol.launch_dependents / wait, sm_90) and a captured CUDA graph of the same
// chain. The correctness test checks that a PDL chain still sees every predecessor's writes;
// DISABLED_Bench prints microseconds per kernel for the three (run on the GPU machine with
// --gtest_also_run_disabled_tests). The backend's kernels with PDL on and off:
// cuda_pdl_chain_test.cu.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_launch_test_util.cuh"

namespace deepinfer::backend::cuda::testing {
namespace {

constexpr int kThreads = 256;

// out[i] = in[i] + 1 (every element depends on the previous kernel's output).
__global__ void __launch_bounds__(kThreads) ChainKernel(const float* in, float* out, int n) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    out[i] = in[i] + 1.0f;
  }
}

// Keeps the GPU busy while the host enqueues a timed chain, so that the events measure the
// device-side cost of the launches, not the host's issue rate.
__global__ void SpinKernel(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

enum class Mode { kPlain, kPdl };

cudaError_t LaunchChain(Mode mode, float* a, float* b, int n, int blocks, int kernels,
                        cudaStream_t stream) {
  for (int k = 0; k < kernels; ++k) {
    const float* in = k % 2 == 0 ? a : b;
    float* out = k % 2 == 0 ? b : a;
    if (mode == Mode::kPlain) {
      ChainKernel<<<blocks, kThreads, 0, stream>>>(in, out, n);
    } else {
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(blocks);
      config.blockDim = dim3(kThreads);
      config.stream = stream;
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attribute.val.programmaticStreamSerializationAllowed = 1;
      config.attrs = &attribute;
      config.numAttrs = 1;
      const cudaError_t e = cudaLaunchKernelEx(&config, ChainKernel, in, out, n);
      if (e != cudaSuccess) return e;
    }
  }
  return cudaGetLastError();
}

// 301 kernels of 4 blocks, each adding 1 to its predecessor's output: every element is 301.
TEST_F(CudaLaunchTest, PdlChainSeesEveryPredecessor) {
  const int n = 1 << 16, kernels = 301;
  Alloc(n);
  ASSERT_EQ(LaunchChain(Mode::kPdl, a_, b_, n, 4, kernels, stream_), cudaSuccess);
  const std::vector<float> got = Result(n, kernels);
  int bad = 0;
  for (int i = 0; i < n; ++i) bad += got[i] != static_cast<float>(kernels);
  EXPECT_EQ(bad, 0) << "first " << got[0];
}

TEST_F(CudaLaunchTest, DISABLED_Bench) {
  const int kernels = 280;
  for (const int n : {5120, 5120 * 64, 5120 * 1024}) {
    for (const int blocks : {4, 132}) {
      Alloc(n);
      cudaEvent_t start, stop;
      cudaEventCreate(&start);
      cudaEventCreate(&stop);
      auto time = [&](auto&& enqueue) {
        for (int warm = 0; warm < 2; ++warm) enqueue();
        SpinKernel<<<1, 1, 0, stream_>>>(30'000'000);  // ~15 ms, longer than the enqueueing
        cudaEventRecord(start, stream_);
        const int reps = 3;
        for (int r = 0; r < reps; ++r) enqueue();
        cudaEventRecord(stop, stream_);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        return ms * 1000.0 / reps / kernels;
      };
      const double plain =
          time([&] { LaunchChain(Mode::kPlain, a_, b_, n, blocks, kernels, stream_); });
      const double pdl =
          time([&] { LaunchChain(Mode::kPdl, a_, b_, n, blocks, kernels, stream_); });
      double graph_us = -1, graph_pdl_us = -1;
      for (Mode mode : {Mode::kPlain, Mode::kPdl}) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        ASSERT_EQ(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), cudaSuccess);
        LaunchChain(mode, a_, b_, n, blocks, kernels, stream_);
        ASSERT_EQ(cudaStreamEndCapture(stream_, &graph), cudaSuccess);
        ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
        const double us = time([&] { cudaGraphLaunch(exec, stream_); });
        (mode == Mode::kPlain ? graph_us : graph_pdl_us) = us;
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
      }
      std::printf(
          "chain of %d kernels, %8d floats, %3d blocks: plain %.2f us/kernel, pdl %.2f, graph "
          "%.2f, graph+pdl %.2f\n",
          kernels, n, blocks, plain, pdl, graph_us, graph_pdl_us);
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      cudaFree(a_);
      cudaFree(b_);
      a_ = b_ = nullptr;
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
