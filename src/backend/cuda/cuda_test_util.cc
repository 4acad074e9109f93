#include "backend/cuda/cuda_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

#include "backend/cpu/numerics.h"
#include "base/check.h"

namespace deepinfer::backend::cuda::testing {
namespace {

bool EnvFlag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "") != 0 && std::strcmp(v, "0") != 0;
}

}  // namespace

bool CudaVsCpuTest::SmallOnly() { return EnvFlag("DEEPINFER_CUDA_TEST_SMALL"); }

void CudaVsCpuTest::SetUp() {
  if (CudaBackend::DeviceCount() == 0) {
    if (EnvFlag("DEEPINFER_REQUIRE_GPU")) {
      FAIL() << "no CUDA device found (DEEPINFER_REQUIRE_GPU=1)";
    }
    GTEST_SKIP() << "no CUDA device";
  }
  auto backend = CudaBackend::Create(0);
  ASSERT_TRUE(backend.ok()) << backend.status();
  gpu_ = std::move(backend).value();
  const char* fixed = std::getenv("DEEPINFER_TEST_SEED");
  seed_ = fixed ? std::strtoull(fixed, nullptr, 10) : std::random_device{}();
  rng_.seed(seed_);
  ::testing::Test::RecordProperty("seed", std::to_string(seed_));
  std::cout << "[ seed     ] DEEPINFER_TEST_SEED=" << seed_ << "\n";
}

void CudaVsCpuTest::TearDown() {
  if (!gpu_) return;
  for (void* p : allocations_) gpu_->Free(p);
  allocations_.clear();
  const base::Status status = gpu_->Synchronize();
  EXPECT_TRUE(status.ok()) << status << " (seed " << seed_ << ")";
  gpu_.reset();
}

std::vector<float> CudaVsCpuTest::Normal(int64_t n, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng_);
  return v;
}

std::vector<float> CudaVsCpuTest::Uniform(int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng_);
  return v;
}

std::vector<int32_t> CudaVsCpuTest::Ints(int64_t n, int32_t lo, int32_t hi) {
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(rng_);
  return v;
}

std::vector<uint8_t> CudaVsCpuTest::Bytes(int64_t n, int lo, int hi) {
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<uint8_t> v(n);
  for (uint8_t& x : v) x = static_cast<uint8_t>(dist(rng_));
  return v;
}

std::vector<uint8_t> CudaVsCpuTest::Fp8Bytes(int64_t n) {
  std::vector<uint8_t> v = Bytes(n, 0, 255);
  for (uint8_t& x : v) {
    if ((x & 0x7F) == 0x7F) x = static_cast<uint8_t>(x - 1);  // 0x7F/0xFF are NaN
  }
  return v;
}

std::vector<uint16_t> CudaVsCpuTest::Bf16Bits(int64_t n, float stddev) {
  const std::vector<float> f = Normal(n, stddev);
  std::vector<uint16_t> v(n);
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, &f[i], 4);
    v[i] = static_cast<uint16_t>(bits >> 16);
  }
  return v;
}

void CudaVsCpuTest::RandomWeightBytes(model::WeightFormat format, int64_t rows, int64_t cols,
                                      std::vector<uint8_t>* data, std::vector<uint8_t>* scale) {
  using model::WeightFormat;
  const int64_t scale_cols = (cols + 31) / 32;
  scale->clear();
  switch (format) {
    case WeightFormat::kF32: {
      const std::vector<float> v = Normal(rows * cols, 0.1f);
      data->resize(v.size() * 4);
      std::memcpy(data->data(), v.data(), data->size());
      break;
    }
    case WeightFormat::kBF16: {
      const std::vector<uint16_t> b = Bf16Bits(rows * cols, 0.1f);
      data->resize(b.size() * 2);
      std::memcpy(data->data(), b.data(), data->size());
      break;
    }
    case WeightFormat::kFp8Block32:
      *data = Fp8Bytes(rows * cols);
      *scale = Bytes(((rows + 31) / 32) * scale_cols, 112, 124);
      break;
    case WeightFormat::kFp8Row32:
      *data = Fp8Bytes(rows * cols);
      *scale = Bytes(rows * scale_cols, 112, 124);
      break;
    case WeightFormat::kMxFp4:
      *data = Bytes(rows * cols / 2, 0, 255);
      *scale = Bytes(rows * (cols / 32), 118, 124);
      break;
  }
}

void* CudaVsCpuTest::AllocBytes(int64_t bytes) {
  float* p = gpu_->AllocFloats((bytes + 3) / 4);
  EXPECT_NE(p, nullptr) << gpu_->status();
  allocations_.push_back(p);
  return p;
}

float* CudaVsCpuTest::ToGpu(const std::vector<float>& host) {
  auto* p = static_cast<float*>(AllocBytes(host.size() * sizeof(float)));
  gpu_->CopyToDevice(p, host.data(), host.size() * sizeof(float));
  return p;
}

int32_t* CudaVsCpuTest::ToGpu(const std::vector<int32_t>& host) {
  auto* p = static_cast<int32_t*>(AllocBytes(host.size() * sizeof(int32_t)));
  gpu_->CopyToDevice(p, host.data(), host.size() * sizeof(int32_t));
  return p;
}

uint8_t* CudaVsCpuTest::BytesToGpu(const std::vector<uint8_t>& host) {
  auto* p = static_cast<uint8_t*>(AllocBytes(host.size()));
  gpu_->CopyToDevice(p, host.data(), host.size());
  return p;
}

float* CudaVsCpuTest::PoisonedFloats(int64_t n) {
  auto* p = static_cast<float*>(AllocBytes(n * sizeof(float)));
  gpu_->Fill(p, n, std::numeric_limits<float>::quiet_NaN());
  return p;
}

int32_t* CudaVsCpuTest::PoisonedInts(int64_t n) {
  return ToGpu(std::vector<int32_t>(n, static_cast<int32_t>(0xABABABABu)));
}

uint8_t* CudaVsCpuTest::PoisonedBytes(int64_t n) {
  return BytesToGpu(std::vector<uint8_t>(n, 0xAB));
}

std::vector<float> CudaVsCpuTest::FromGpu(const float* dev, int64_t n) {
  std::vector<float> host(n);
  gpu_->CopyToHost(host.data(), dev, n * sizeof(float));
  const base::Status status = gpu_->status();
  EXPECT_TRUE(status.ok()) << status << " (seed " << seed_ << ")";
  return host;
}

std::vector<int32_t> CudaVsCpuTest::FromGpu(const int32_t* dev, int64_t n) {
  std::vector<int32_t> host(n);
  gpu_->CopyToHost(host.data(), dev, n * sizeof(int32_t));
  const base::Status status = gpu_->status();
  EXPECT_TRUE(status.ok()) << status << " (seed " << seed_ << ")";
  return host;
}

std::vector<uint8_t> CudaVsCpuTest::BytesFromGpu(const uint8_t* dev, int64_t n) {
  std::vector<uint8_t> host(n);
  gpu_->CopyToHost(host.data(), dev, n);
  const base::Status status = gpu_->status();
  EXPECT_TRUE(status.ok()) << status << " (seed " << seed_ << ")";
  return host;
}

float MaxAbs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

::testing::AssertionResult AllClose(const std::vector<float>& actual,
                                    const std::vector<float>& expected, double rtol, double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < actual.size(); ++i) {
    const float a = actual[i], e = expected[i];
    bool ok;
    if (std::isnan(a)) {
      ok = false;
    } else if (!std::isfinite(e) || !std::isfinite(a)) {
      ok = a == e;
    } else {
      ok = std::fabs(double(a) - double(e)) <= atol + rtol * std::fabs(double(e));
    }
    if (!ok && bad++ < 5) first << "\n  [" << i << "] got " << a << " expected " << e;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ (rtol " << rtol << ", atol " << atol
         << "):" << first.str();
}

::testing::AssertionResult RelL2Close(const std::vector<float>& actual,
                                      const std::vector<float>& expected, double tol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const float a = actual[i], e = expected[i];
    if (std::isnan(a) || (!std::isfinite(e) && a != e) || (std::isfinite(e) && !std::isfinite(a))) {
      return ::testing::AssertionFailure() << "element " << i << " is " << a << ", expected " << e;
    }
    if (!std::isfinite(e)) continue;
    diff += (double(a) - e) * (double(a) - e);
    norm += double(e) * e;
  }
  const double rel = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  if (rel <= tol) return ::testing::AssertionSuccess() << "rel L2 " << rel;
  return ::testing::AssertionFailure() << "relative L2 error " << rel << " > " << tol;
}

::testing::AssertionResult BitExact(const std::vector<float>& actual,
                                    const std::vector<float>& expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  int64_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0 && bad++ < 5) {
      first << "\n  [" << i << "] got " << actual[i] << " expected " << expected[i];
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ bitwise:" << first.str();
}

double CudaVsCpuTest::DeviceMicrosPerCall(const std::function<void()>& call) {
  const auto failed = [](const char* what) {
    ADD_FAILURE() << "timing failed: " << what;
    return -1.0;
  };
  for (int i = 0; i < 10; ++i) call();
  if (!gpu_->Synchronize().ok()) return failed("warm-up");
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) {
    return failed("cudaEventCreate");
  }
  constexpr int kIters = 200;
  cudaEventRecord(start, gpu_->stream());
  for (int i = 0; i < kIters; ++i) call();
  cudaEventRecord(stop, gpu_->stream());
  float ms = -1.0f;
  const bool timed = cudaEventSynchronize(stop) == cudaSuccess &&
                     cudaEventElapsedTime(&ms, start, stop) == cudaSuccess;
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!timed || !gpu_->Synchronize().ok()) return failed("timed calls");
  return 1000.0 * ms / kIters;
}

std::vector<float> RoutedExpertsReference(cpu::CpuBackend& cpu,
                                          const std::vector<model::ExpertWeights>& table, int64_t D,
                                          int64_t I, const std::vector<float>& x, int64_t T,
                                          const std::vector<int32_t>& ids,
                                          const std::vector<float>& weights, int64_t k, float limit,
                                          bool fp8_activations, int quant_block) {
  CHECK(quant_block == 32 || quant_block == 128) << quant_block;
  // Rows of n values (n % quant_block == 0) fake-quantised per quant_block values.
  auto quantise = [&](float* rows, int64_t n_rows, int64_t n) {
    if (quant_block == 32)
      return cpu.FakeQuant(rows, n_rows, n, n, model::FakeQuantKind::kFp8Block32Pow2);
    for (int64_t b = 0; b < n_rows * n; b += quant_block)
      cpu::FakeQuantFp8Pow2Block(rows + b, quant_block);
  };
  std::vector<float> in = x;
  if (fp8_activations) quantise(in.data(), T, D);
  std::vector<float> y(T * D, 0.0f), gate(I), up(I), h(I), out(D);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < k; ++i) {
      const model::ExpertWeights& e = table[ids[t * k + i]];
      cpu.Linear(in.data() + t * D, 1, D, e.w1, 0, I, gate.data(), I, false);
      cpu.Linear(in.data() + t * D, 1, D, e.w3, 0, I, up.data(), I, false);
      cpu.SwiGlu(gate.data(), up.data(), 1, I, limit, &weights[t * k + i], h.data());
      if (fp8_activations) quantise(h.data(), 1, I);
      cpu.Linear(h.data(), 1, I, e.w2, 0, D, out.data(), D, false);
      for (int64_t d = 0; d < D; ++d) y[t * D + d] += out[d];
    }
  }
  return y;
}

}  // namespace deepinfer::backend::cuda::testing
