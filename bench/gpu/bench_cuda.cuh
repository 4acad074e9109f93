// Shared by the standalone GPU bench programs (gpu_ceilings, gpu_fp8_block_gemm): error checks
// that exit with a message naming the program and the call, and a CUDA-event timer.
//
// The including file defines `constexpr char kProgram[] = "<program name>";` before including
// this header (the checks print it).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace deepinfer::bench {

// Prints "<program>: <call> failed: <reason> (file:line)" and exits 1 (the checks below).
[[noreturn]] inline void DieOnFailure(const char* program, const char* call, const char* reason,
                                      const char* file, int line) {
  std::fprintf(stderr, "%s: %s failed: %s (%s:%d)\n", program, call, reason, file, line);
  std::exit(1);
}

}  // namespace deepinfer::bench

// Any CUDA / cuBLAS(Lt) error: DieOnFailure with the call's text and the library's reason.
#define CUDA_CHECK(expr)                                                                    \
  do {                                                                                      \
    const cudaError_t err_ = (expr);                                                        \
    if (err_ != cudaSuccess) {                                                              \
      ::deepinfer::bench::DieOnFailure(kProgram, #expr, cudaGetErrorString(err_), __FILE__, \
                                       __LINE__);                                           \
    }                                                                                       \
  } while (0)

#define CUBLAS_CHECK(expr)                                                                      \
  do {                                                                                          \
    const cublasStatus_t st_ = (expr);                                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                         \
      ::deepinfer::bench::DieOnFailure(kProgram, #expr, cublasLtGetStatusString(st_), __FILE__, \
                                       __LINE__);                                               \
    }                                                                                           \
  } while (0)

namespace deepinfer::bench {

// Median milliseconds of one call of `fn` (which enqueues its work on `stream`): kWarmup
// untimed calls, then `repeats` calls each between two CUDA events.
struct Timer {
  static constexpr int kWarmup = 3;
  cudaStream_t stream = nullptr;
  int repeats = 20;

  template <typename Fn>
  double MedianMs(Fn&& fn) const {
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    for (int i = 0; i < kWarmup; ++i) fn();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> ms(static_cast<size_t>(repeats));
    for (float& t : ms) {
      CUDA_CHECK(cudaEventRecord(start, stream));
      fn();
      CUDA_CHECK(cudaEventRecord(stop, stream));
      CUDA_CHECK(cudaEventSynchronize(stop));
      CUDA_CHECK(cudaEventElapsedTime(&t, start, stop));
    }
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

}  // namespace deepinfer::bench
