// Runtime tests: device memory, copies, errors becoming a Status, and the elementwise ops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/device_arena.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaRuntimeTest = CudaVsCpuTest;

TEST(DeviceArenaTest, SizeClassesRoundUp) {
  EXPECT_EQ(DeviceArena::RoundUp(0), 512u);
  EXPECT_EQ(DeviceArena::RoundUp(1), 512u);
  EXPECT_EQ(DeviceArena::RoundUp(513), 1024u);
  EXPECT_EQ(DeviceArena::RoundUp(64 * 1024), 64u * 1024);
  EXPECT_EQ(DeviceArena::RoundUp(64 * 1024 + 1), 80u * 1024);  // 64K + 16K steps
  EXPECT_EQ(DeviceArena::RoundUp(1000000), 1048576u);          // steps of 128K above 512K
  for (size_t n : {size_t{3}, size_t{70000}, size_t{1} << 20, (size_t{1} << 30) + 7}) {
    EXPECT_GE(DeviceArena::RoundUp(n), n);
    EXPECT_LE(DeviceArena::RoundUp(n), n + n / 4 + 512);
  }
}

TEST(CudaBackendNoDeviceTest, CreateRejectsMissingDevice) {
  // Never crashes: without a device Create returns an error naming the device.
  auto b = CudaBackend::Create(CudaBackend::DeviceCount());  // one past the last device
  EXPECT_FALSE(b.ok());
}

TEST_F(CudaRuntimeTest, AllocReturnsZeroedMemory) {
  float* p = gpu_->AllocFloats(1000);
  ASSERT_NE(p, nullptr);
  std::vector<float> host(1000, 1.0f);
  gpu_->CopyToHost(host.data(), p, 1000 * sizeof(float));
  for (float v : host) ASSERT_EQ(v, 0.0f);
  gpu_->Free(p);
  EXPECT_TRUE(gpu_->status().ok()) << gpu_->status();
}

TEST_F(CudaRuntimeTest, CopyRoundTripAndOverlappingDeviceCopy) {
  const std::vector<float> x = Normal(4097);
  float* d = ToGpu(x);
  EXPECT_TRUE(BitExact(FromGpu(d, 4097), x));
  // memmove semantics: shift right by 10 elements inside one buffer.
  gpu_->CopyDevice(d + 10, d, 4000 * sizeof(float));
  std::vector<float> expected = x;
  std::memmove(expected.data() + 10, expected.data(), 4000 * sizeof(float));
  EXPECT_TRUE(BitExact(FromGpu(d, 4097), expected));
}

TEST_F(CudaRuntimeTest, FillAddScale) {
  for (int64_t n : {1, 31, 1000, 1 << 20}) {
    const std::vector<float> a = Normal(n), b = Normal(n);
    float* y = PoisonedFloats(n);
    gpu_->Add(ToGpu(a), ToGpu(b), n, y);
    gpu_->Scale(y, n, -0.375f);
    std::vector<float> expected(n);
    cpu_.Add(a.data(), b.data(), n, expected.data());
    cpu_.Scale(expected.data(), n, -0.375f);
    EXPECT_TRUE(BitExact(FromGpu(y, n), expected)) << "n " << n;
    gpu_->Fill(y, n, 2.5f);
    EXPECT_TRUE(BitExact(FromGpu(y, n), std::vector<float>(n, 2.5f)));
  }
}

TEST_F(CudaRuntimeTest, FreeOfForeignPointerBecomesStatus) {
  int host_value = 0;
  gpu_->Free(&host_value);
  EXPECT_EQ(gpu_->status().code(), base::StatusCode::kInvalidArgument) << gpu_->status();
  // Later ops are skipped and copies to the host never return plausible data.
  float out = 1.0f;
  float* p = gpu_->AllocFloats(1);
  EXPECT_EQ(p, nullptr);
  gpu_->CopyToHost(&out, &host_value, sizeof(float));
  EXPECT_TRUE(std::isnan(out));
  gpu_.reset();  // skip TearDown's status check: this backend failed on purpose
}

TEST_F(CudaRuntimeTest, BadSelectionIdBecomesStatus) {
  const int64_t d = 64;
  model::SparseAttentionArgs a;
  const std::vector<int32_t> pos = {5}, window_pos = {5}, sel = {7};
  a.q = ToGpu(Normal(d));
  a.q_pos = ToGpu(pos);
  a.tokens = 1, a.heads = 1, a.head_dim = d;
  a.window_kv = ToGpu(Normal(d));
  a.window_pos = ToGpu(window_pos);
  a.n_window = 1, a.window = 4;
  a.comp_kv = ToGpu(Normal(2 * d));
  a.n_comp = 2;  // id 7 is out of range
  a.selection = ToGpu(sel);
  a.n_select = 1;
  a.sinks = ToGpu(Normal(1));
  a.out = PoisonedFloats(d);
  gpu_->SparseAttention(a);
  const base::Status s = gpu_->Synchronize();
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument) << s;
  gpu_.reset();
}

TEST_F(CudaRuntimeTest, WeightsUploadOnceInStoredPrecision) {
  const std::vector<uint8_t> w = Fp8Bytes(64 * 96), scale = Bytes(2 * 3, 120, 130);
  model::WeightRef ref{"w", model::WeightFormat::kFp8Block32, 64, 96, w.data(), scale.data()};
  ASSERT_TRUE(gpu_->UploadWeight(ref).ok()) << gpu_->status();
  EXPECT_EQ(gpu_->weight_bytes(), 64u * 96 + 6);
  ASSERT_TRUE(gpu_->UploadWeight(ref).ok());
  EXPECT_EQ(gpu_->weight_bytes(), 64u * 96 + 6);  // cached, not uploaded twice
  const std::vector<uint8_t> packed = Bytes(10 * 32, 0, 255), s4 = Bytes(10 * 2, 120, 130);
  model::WeightRef fp4{"e", model::WeightFormat::kMxFp4, 10, 64, packed.data(), s4.data()};
  ASSERT_TRUE(gpu_->UploadWeight(fp4).ok());
  EXPECT_EQ(gpu_->weight_bytes(), 64u * 96 + 6 + 320 + 20);  // packed nibbles stay packed
}

TEST_F(CudaRuntimeTest, ReuploadsWhenHostBytesAtTheSameAddressChange) {
  std::vector<uint8_t> w = Fp8Bytes(40 * 64);
  const std::vector<uint8_t> scale = Bytes(2 * 2, 118, 124);
  const model::WeightRef ref{"w", model::WeightFormat::kFp8Block32, 40, 64, w.data(), scale.data()};
  const std::vector<float> x = Normal(64);
  float* gx = ToGpu(x);
  for (int round = 0; round < 2; ++round) {
    // A new "mapping" at the same address: another finite e4m3 value (a bit flip could make the
    // NaN codes 0x7F / 0xFF; run 171 drew one).
    if (round == 1) w[0] = w[0] == 0x38 ? 0x40 : 0x38;  // 1.0 or 2.0
    std::vector<float> expected(40);
    cpu_.Linear(x.data(), 1, 64, ref, 0, 40, expected.data(), 40, false);
    float* y = PoisonedFloats(40);
    gpu_->Linear(gx, 1, 64, ref, 0, 40, y, 40, false);
    // fp32-level agreement (the tensor-core path sums in another order); a stale weight would
    // differ by O(0.1).
    EXPECT_TRUE(AllClose(FromGpu(y, 40), expected, 1e-5, 5e-5)) << "round " << round;
  }
  gpu_->ForgetWeights();
  EXPECT_EQ(gpu_->weight_bytes(), 0u);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
