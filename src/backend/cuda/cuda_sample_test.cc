// ArgmaxRows on the GPU against the CPU reference's left-to-right scan: identical indices
// for rows with distinct values, exact ties, NaNs (first or elsewhere), all -inf, signed
// zeros, at the V4.1 vocabulary size, with aligned (float4) and unaligned (scalar) rows.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

class CudaArgmaxTest : public CudaVsCpuTest {
 protected:
  // Rows of n values at stride ld, of every kind in turn (row r gets kind r % 7).
  std::vector<float> Rows(int64_t rows, int64_t n, int64_t ld) {
    std::vector<float> x(rows * ld, 1e30f);  // past n: larger than any value, must be ignored
    for (int64_t r = 0; r < rows; ++r) {
      float* v = x.data() + r * ld;
      const std::vector<float> normal = Normal(n);
      const std::vector<int32_t> at = Ints(3, 0, static_cast<int32_t>(n - 1));
      for (int64_t i = 0; i < n; ++i) v[i] = normal[i];
      switch (r % 7) {
        case 0:  // distinct values
          break;
        case 1:  // the maximum three times: the first wins
          for (int32_t i : at) v[i] = 9.0f;
          break;
        case 2:  // NaN first: 0
          v[0] = kNan;
          v[at[0]] = 9.0f;
          break;
        case 3:  // NaNs elsewhere are skipped
          for (int64_t i = 1; i < n; i += 3) v[i] = kNan;
          break;
        case 4:  // every value -inf: 0
          for (int64_t i = 0; i < n; ++i) v[i] = -kInf;
          break;
        case 5:  // few distinct values, so +-0 ties everywhere
          for (int64_t i = 0; i < n; ++i) v[i] = (i % 3 == 0) ? -0.0f : 0.0f;
          break;
        case 6:  // the last value is the maximum (the row's scalar tail)
          v[n - 1] = 9.0f;
          break;
      }
    }
    return x;
  }

  void Check(int64_t rows, int64_t n, int64_t ld) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " ld " +
                 std::to_string(ld) + " seed " + std::to_string(seed_));
    const std::vector<float> x = Rows(rows, n, ld);
    std::vector<int32_t> expected(rows, -1);
    cpu_.ArgmaxRows(x.data(), rows, n, ld, expected.data());
    int32_t* out = PoisonedInts(rows);
    gpu_->ArgmaxRows(ToGpu(x), rows, n, ld, out);
    const std::vector<int32_t> got = FromGpu(out, rows);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(got[r], expected[r]) << "row " << r << " (kind " << r % 7 << ")";
    }
  }
};

TEST_F(CudaArgmaxTest, MatchesTheCpuScanExactly) {
  for (int64_t n : {1, 2, 5, 31, 1000, 4099}) Check(9, n, n);
  Check(14, 1000, 1003);  // odd stride: rows are not 16-byte aligned (scalar path)
  Check(14, 1001, 1004);  // aligned rows with a scalar tail
}

TEST_F(CudaArgmaxTest, VocabularyRows) {
  const int64_t vocab = 129280;
  Check(1, vocab, vocab);
  if (!SmallOnly()) Check(40, vocab, vocab);
}

// Device time per call at the V4.1 vocabulary (B = 1, 32, 256 rows).
TEST_F(CudaArgmaxTest, DISABLED_Bench) {
  const int64_t vocab = 129280;
  for (int64_t rows : {1, 32, 256}) {
    const float* x = ToGpu(Normal(rows * vocab));
    int32_t* out = PoisonedInts(rows);
    const double us = DeviceMicrosPerCall([&] { gpu_->ArgmaxRows(x, rows, vocab, vocab, out); });
    std::printf("ArgmaxRows rows=%lld n=%lld: %.2f us/call (%.0f GB/s)\n",
                static_cast<long long>(rows), static_cast<long long>(vocab), us,
                rows * vocab * 4 / us / 1e3);
    EXPECT_GT(us, 0.0);
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
