// Test fixture and comparisons for the CUDA-vs-CPU kernel tests.
//
// Every test gets a fresh CudaBackend and the CPU reference backend, and draws fresh random
// inputs (the seed is printed with each failure; DEEPINFER_TEST_SEED=<n> replays one).
// Without a CUDA device the tests are skipped, unless DEEPINFER_REQUIRE_GPU=1 (set by
// tools/gpu/run-gpu-tests.sh) makes that a failure. DEEPINFER_CUDA_TEST_SMALL=1 skips the
// real-V4.1-size cases (for compute-sanitizer runs).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"

namespace deepinfer::backend::cuda::testing {

class CudaVsCpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // True when only small shapes should run (DEEPINFER_CUDA_TEST_SMALL=1).
  static bool SmallOnly();

  // --- random inputs -----------------------------------------------------------------
  std::vector<float> Normal(int64_t n, float stddev = 1.0f);
  std::vector<float> Uniform(int64_t n, float lo, float hi);
  std::vector<int32_t> Ints(int64_t n, int32_t lo, int32_t hi);  // inclusive
  std::vector<uint8_t> Bytes(int64_t n, int lo, int hi);         // inclusive
  // e4m3 bytes without the NaN codes 0x7F / 0xFF.
  std::vector<uint8_t> Fp8Bytes(int64_t n);
  // bf16 bits of normal(0, stddev) values.
  std::vector<uint16_t> Bf16Bits(int64_t n, float stddev = 1.0f);
  // The stored bytes of a random [rows, cols] weight in `format` (model/backend.h): fp32 /
  // bf16 normal(0, 0.1); e4m3 without NaN codes with ue8m0 scales 112..124 (per 32 x 32 block
  // for kFp8Block32, per row and 32 columns for kFp8Row32); e2m1 nibbles with scales 118..124
  // per row and 32 columns (kMxFp4, cols even). `scale` is empty for fp32 / bf16.
  void RandomWeightBytes(model::WeightFormat format, int64_t rows, int64_t cols,
                         std::vector<uint8_t>* data, std::vector<uint8_t>* scale);

  // --- device arrays (freed after the test) ------------------------------------------
  float* ToGpu(const std::vector<float>& host);
  int32_t* ToGpu(const std::vector<int32_t>& host);
  uint8_t* BytesToGpu(const std::vector<uint8_t>& host);
  float* PoisonedFloats(int64_t n);   // NaN-filled
  int32_t* PoisonedInts(int64_t n);   // 0xABABABAB-filled
  uint8_t* PoisonedBytes(int64_t n);  // 0xAB-filled
  // Copies back after synchronising; a backend error fails the test.
  std::vector<float> FromGpu(const float* dev, int64_t n);
  std::vector<int32_t> FromGpu(const int32_t* dev, int64_t n);
  std::vector<uint8_t> BytesFromGpu(const uint8_t* dev, int64_t n);

  // Device microseconds per call of `call` (which enqueues on gpu_'s stream), averaged over
  // 200 calls after 10 warm-up calls; -1 (and a test failure) on a CUDA or backend error.
  // For the DISABLED_ timing tests.
  double DeviceMicrosPerCall(const std::function<void()>& call);

  std::unique_ptr<CudaBackend> gpu_;
  cpu::CpuBackend cpu_;
  std::mt19937_64 rng_;
  uint64_t seed_ = 0;

 private:
  void* AllocBytes(int64_t bytes);
  std::vector<void*> allocations_;
};

// |actual - expected| <= atol + rtol * |expected| elementwise; infinities must match
// exactly; NaN in `actual` never passes.
::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                    const std::vector<float>& expected, double rtol, double atol);
// ||actual - expected||_2 / ||expected||_2 <= tol over the finite entries, with the
// non-finite entries identical; NaN in `actual` never passes.
::testing::AssertionResult RelL2Close(const std::vector<float>& actual,
                                      const std::vector<float>& expected, double tol);
// Identical float bit patterns.
::testing::AssertionResult BitExact(const std::vector<float>& actual,
                                    const std::vector<float>& expected);
float MaxAbs(const std::vector<float>& v);

// The CPU reference of RoutedExperts, per token t and slot i in order:
// y[t] += Linear(w2, SwiGlu(Linear(w1, x_t), Linear(w3, x_t)) * weights[t, i]). With
// fp8_activations, x_t and the SwiGLU output are fake-quantised (kFp8Block32Pow2's formula per
// quant_block values: 32, or 128 for the block-128 paths) first, as the CUDA FP8-activation
// mode quantises its GEMM inputs.
std::vector<float> RoutedExpertsReference(cpu::CpuBackend& cpu,
                                          const std::vector<model::ExpertWeights>& table, int64_t D,
                                          int64_t I, const std::vector<float>& x, int64_t T,
                                          const std::vector<int32_t>& ids,
                                          const std::vector<float>& weights, int64_t k, float limit,
                                          bool fp8_activations, int quant_block = 32);

// Sets (value non-null) or unsets an environment variable for its lifetime (restores the
// previous value).
class ScopedEnv {
 public:
  ScopedEnv(const char* var, const char* value) : var_(var) {
    if (const char* old = std::getenv(var)) previous_ = old;
    if (value != nullptr) {
      setenv(var, value, 1);
    } else {
      unsetenv(var);
    }
  }
  ~ScopedEnv() {
    if (previous_) {
      setenv(var_, previous_->c_str(), 1);
    } else {
      unsetenv(var_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* var_;
  std::optional<std::string> previous_;
};

}  // namespace deepinfer::backend::cuda::testing
