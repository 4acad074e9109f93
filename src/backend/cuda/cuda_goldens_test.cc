// End to end: the V4.1 golden cases (shared/goldens/v41) run by the model on the CUDA
// backend, with the same checks and tolerances as `deepinfer check-goldens` on the CPU.
// A separate binary from the kernel tests, so that a crash here cannot hide their results.
// DEEPINFER_GOLDENS_DIR overrides the folder (default DEEPINFER_SHARED_DIR/goldens/v41).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "backend/cuda/cuda_test_util.h"
#include "model/golden_check.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaGoldensTest = CudaVsCpuTest;

std::filesystem::path GoldensDir() {
  const char* dir = std::getenv("DEEPINFER_GOLDENS_DIR");
  return dir ? std::filesystem::path(dir)
             : std::filesystem::path(DEEPINFER_SHARED_DIR) / "goldens" / "v41";
}

TEST_F(CudaGoldensTest, EveryGoldenCasePassesOnTheGpu) {
  const auto cases = model::FindGoldenCases(GoldensDir());
  if (cases.empty()) GTEST_SKIP() << "no golden cases under " << GoldensDir();
  for (const auto& dir : cases) {
    SCOPED_TRACE(dir.string());
    auto result = model::RunGoldenCase(dir, gpu_.get());
    ASSERT_TRUE(result.ok()) << result.status();
    const base::Status status = gpu_->Synchronize();
    ASSERT_TRUE(status.ok()) << status;
    for (const auto& check : result->checks) {
      EXPECT_TRUE(check.passed) << result->case_name << " " << check.name << ": " << check.summary;
    }
    std::cout << (result->passed() ? "[ golden   ] PASS " : "[ golden   ] FAIL ")
              << result->case_name << " (" << result->checks.size() << " checks)\n";
  }
}

// The same cases on the CPU reference, so that a GPU failure can be told apart from a
// model failure in the same run.
TEST(CpuGoldensReferenceTest, EveryGoldenCasePassesOnTheCpu) {
  const auto cases = model::FindGoldenCases(GoldensDir());
  if (cases.empty()) GTEST_SKIP() << "no golden cases under " << GoldensDir();
  cpu::CpuBackend cpu;
  for (const auto& dir : cases) {
    SCOPED_TRACE(dir.string());
    auto result = model::RunGoldenCase(dir, &cpu);
    ASSERT_TRUE(result.ok()) << result.status();
    for (const auto& check : result->checks) {
      EXPECT_TRUE(check.passed) << result->case_name << " " << check.name << ": " << check.summary;
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
