// The FP8-activation mode's kept bf16 weight copies (CudaBackend::set_fp8_bf16_copy,
// WeightCache::DerivedCopy, kind kBf16): a Linear / LinearGrouped / LinearMany of more token rows
// than LinearStream takes multiplies an exact bf16 copy of its FP8 weight with cuBLAS. Against the
// CPU reference on fake-quantised activations (the FP8 tests' per-element bound); one copy
// per weight, made once and freed with the weight; none below the threshold, in
// batch-invariant mode or past the budget (then bitwise the LinearFp8 kernel).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernels_stream.h"

namespace deepinfer::backend::cuda::testing {
namespace {

constexpr size_t kBudget = size_t{1} << 30;

class CudaFp8CopyTest : public CudaFp8Test {
 protected:
  void SetUp() override {
    CudaFp8Test::SetUp();  // pins LinearFp8; the tests below turn the copies on
    if (gpu_ == nullptr) return;
    EnableManyTokenPaths(kBudget);
  }

  // y [T, ldy] of the backend's Linear of rows [row0, row0 + n_rows) onto the device copy of y0.
  std::vector<float> BackendLinear(const HostWeight& w, int64_t row0, int64_t n_rows,
                                   const std::vector<float>& x, int64_t T, std::vector<float> y0,
                                   int64_t ldy, bool accumulate) {
    float* y = ToGpu(y0);
    gpu_->Linear(ToGpu(x), T, w.device.cols, w.ref, row0, n_rows, y, ldy, accumulate);
    EXPECT_TRUE(gpu_->Synchronize().ok());
    return FromGpu(y, T * ldy);
  }
};

// Row ranges inside the weight, padded and accumulated y, T from just past the stream to a
// prefill-sized call: within the bound; one copy of the whole weight, made by the first call.
TEST_F(CudaFp8CopyTest, LinearOnTheCopyMatchesCpu) {
  const int64_t N = 512, K = 1024;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  const size_t copy_bytes = size_t{N} * K * 2;
  struct Case {
    int64_t T, row0, n_rows, ldy_pad;
    bool accumulate;
  };
  for (const Case& c : {Case{33, 0, N, 0, false}, Case{64, 32, 448, 3, true},
                        Case{200, 16, 480, 0, false}, Case{600, 0, N, 1, true}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << c.T << " rows " << c.row0 << "+" << c.n_rows);
    const int64_t ldy = c.n_rows + c.ldy_pad;
    const std::vector<float> x = Activations(c.T, K);
    const std::vector<float> y0 = Normal(c.T * ldy);
    const std::vector<float> got =
        BackendLinear(w, c.row0, c.n_rows, x, c.T, y0, ldy, c.accumulate);
    ExpectLinearMatchesCpu(w, c.row0, c.n_rows, FakeQuantized(x, c.T, K), c.T, y0, ldy,
                           c.accumulate, got, "bf16 copy");
    EXPECT_EQ(gpu_->bf16_copy_bytes(), copy_bytes);
  }
  gpu_->ForgetWeights();
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});  // freed with its weight
}

// No copy where the copies do not apply; there the backend is bitwise LinearFp8 (or the
// stream). Turning them on again makes the copy.
TEST_F(CudaFp8CopyTest, NoCopyBelowTheThresholdInvariantModeOrPastTheBudget) {
  const int64_t N = 256, K = 512, T = 48;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  const std::vector<float> x = Activations(T, K);
  const std::vector<float> fp8 = RunLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false);
  // The stream's rows (T <= 32) never copy.
  BackendLinear(w, 0, N, x, kernels::kStreamMaxTokens, std::vector<float>(32 * N), N, false);
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
  gpu_->set_batch_invariant(true);
  EXPECT_TRUE(BitExact(BackendLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false), fp8));
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
  gpu_->set_batch_invariant(false);
  gpu_->set_fp8_bf16_copy(CudaBackend::kFp8Bf16CopyMinTokens, size_t{N} * K * 2 - 1);
  EXPECT_TRUE(BitExact(BackendLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false), fp8));
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
  gpu_->set_fp8_bf16_copy(0, kBudget);  // threshold 0: never
  EXPECT_TRUE(BitExact(BackendLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false), fp8));
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{0});
  gpu_->set_fp8_bf16_copy(CudaBackend::kFp8Bf16CopyMinTokens, size_t{N} * K * 2);
  const std::vector<float> copied =
      BackendLinear(w, 0, N, x, T, std::vector<float>(T * N), N, false);
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{N} * K * 2);
  EXPECT_FALSE(BitExact(copied, fp8));  // another summation order: the copy path ran
  ExpectLinearMatchesCpu(w, 0, N, FakeQuantized(x, T, K), T, std::vector<float>(T * N), N, false,
                         copied, "bf16 copy at the budget");
}

// Block-diagonal weights (wo_a): all groups in one batched GEMM on the copy.
TEST_F(CudaFp8CopyTest, GroupedOnTheCopyMatchesCpu) {
  const int64_t groups = 4, R = 128, K = 512, N = groups * R;
  const HostWeight w = MakeWeight(WeightFormat::kFp8Block32, N, K);
  for (int64_t T : {40, 520}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, groups * K);
    float* y = PoisonedFloats(T * N);
    gpu_->LinearGrouped(ToGpu(x), T, groups * K, K, w.ref, groups, y, N);
    ASSERT_TRUE(gpu_->Synchronize().ok());
    ExpectGroupedMatchesCpu(w, groups, FakeQuantized(x, T, groups * K), T, FromGpu(y, T * N));
    EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{N} * K * 2);
  }
}

// Several weights of one x past the stream: each output bitwise its own Linear (on its copy).
TEST_F(CudaFp8CopyTest, LinearManyEqualsLinearEach) {
  const int64_t K = 1024;
  const HostWeight a = MakeWeight(WeightFormat::kFp8Block32, 256, K);
  const HostWeight b = MakeWeight(WeightFormat::kFp8Block32, 96, K);
  ExpectLinearManyEqualsLinearEach(a, b, 40);
  EXPECT_EQ(gpu_->bf16_copy_bytes(), size_t{256 + 96} * K * 2);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
