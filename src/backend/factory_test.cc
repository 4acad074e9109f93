#include "backend/factory.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace deepinfer::backend {
namespace {

TEST(BackendFactoryTest, CreatesCpu) {
  auto backend = CreateBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->name(), "cpu");
  auto names = AvailableBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
}

TEST(BackendFactoryTest, RejectsUnknownNames) {
  for (const char* name : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CPU"}) {
    auto backend = CreateBackend(name);
    ASSERT_FALSE(backend.ok()) << name;
    EXPECT_EQ(backend.status().code(), base::StatusCode::kInvalidArgument) << name;
  }
}

TEST(BackendFactoryTest, CudaNames) {
  EXPECT_TRUE(IsCudaBackendName("cuda"));
  EXPECT_TRUE(IsCudaBackendName("cuda:0"));
  EXPECT_TRUE(IsCudaBackendName("cuda:12"));
  for (const char* name : {"cpu", "", "cuda:", "cuda:-1", "cuda:x", "cudax", "cuda:1x"}) {
    EXPECT_FALSE(IsCudaBackendName(name)) << name;
  }
}

TEST(BackendFactoryTest, MissingCudaDeviceIsUnavailableNotACrash) {
  // No machine has 1000 devices; with or without a CUDA build this is Unavailable.
  auto backend = CreateBackend("cuda:999");
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), base::StatusCode::kUnavailable);
}

TEST(BackendFactoryTest, CpuTakesBatchInvarianceButNotFp8Activations) {
  EXPECT_TRUE(CreateBackend("cpu", {.batch_invariant = true}).ok());
  auto fp8 = CreateBackend("cpu", {.fp8_activations = true});
  ASSERT_FALSE(fp8.ok());
  EXPECT_EQ(fp8.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(fp8.status().ToString().find("FP8"), std::string::npos) << fp8.status();
  auto copies = CreateBackend("cpu", {.fp8_expert_copy_gib = 8.0});
  ASSERT_FALSE(copies.ok());
  EXPECT_EQ(copies.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_TRUE(CreateBackend("cpu", {.fp8_expert_copy_gib = 0.0}).ok());
}

}  // namespace
}  // namespace deepinfer::backend
