// TopK and CandidateMask on the GPU against the CPU reference: the index arrays and masks
// must be identical (order contract: larger value first, ties by lower index, -0.0 == +0.0,
// -1 for -inf values and for slots beyond min(k, n)). Rows are drawn to hit every path of
// the radix select: distinct values, heavy exact ties at the cut, values that differ only
// in their low mantissa bits, -inf tails, all -inf rows and rows no longer than k.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"

namespace deepinfer::backend::cuda::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// How a row of scores is drawn.
enum class RowKind {
  kNormal,      // distinct values (almost surely)
  kTied,        // small multiples of 0.25, +-0.0, some +-inf: many exact ties
  kFewValues,   // only {-1, 0, -0, 1}: the cut falls inside a huge tie group
  kNearbyBits,  // values 1.0 + a few ulps, and their negatives: only low bits differ
  kInfTail,     // normal values, then -inf beyond a random visible length
  kAllNegInf,   // every value -inf
};

const char* KindName(RowKind kind) {
  switch (kind) {
    case RowKind::kNormal:
      return "normal";
    case RowKind::kTied:
      return "tied";
    case RowKind::kFewValues:
      return "few-values";
    case RowKind::kNearbyBits:
      return "nearby-bits";
    case RowKind::kInfTail:
      return "inf-tail";
    case RowKind::kAllNegInf:
      return "all-neg-inf";
  }
  return "?";
}

constexpr RowKind kAllKinds[] = {RowKind::kNormal,     RowKind::kTied,    RowKind::kFewValues,
                                 RowKind::kNearbyBits, RowKind::kInfTail, RowKind::kAllNegInf};

float FromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// First mismatch of two index arrays viewed as [rows, k], or success.
::testing::AssertionResult SameIds(const std::vector<int32_t>& actual,
                                   const std::vector<int32_t>& expected, int64_t k) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      return ::testing::AssertionFailure() << "row " << i / k << " slot " << i % k << ": got "
                                           << actual[i] << ", expected " << expected[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// First mismatch of two masks viewed as [rows, n], or success.
::testing::AssertionResult SameMask(const std::vector<uint8_t>& actual,
                                    const std::vector<uint8_t>& expected, int64_t n) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " vs expected " << expected.size();
  }
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      return ::testing::AssertionFailure() << "row " << i / n << " entry " << i % n << ": got "
                                           << int{actual[i]} << ", expected " << int{expected[i]};
    }
  }
  return ::testing::AssertionSuccess();
}

class CudaTopKTest : public CudaVsCpuTest {
 protected:
  // T rows of n scores of the given kind.
  std::vector<float> Rows(RowKind kind, int64_t T, int64_t n) {
    std::vector<float> s(T * n);
    switch (kind) {
      case RowKind::kNormal:
        s = Normal(T * n);
        break;
      case RowKind::kTied: {
        const std::vector<int32_t> v = Ints(T * n, -20, 20);
        for (int64_t i = 0; i < T * n; ++i) {
          if (v[i] < -17) {
            s[i] = -kInf;
          } else if (v[i] == 0) {
            s[i] = (i % 2) ? -0.0f : 0.0f;
          } else if (v[i] > 18) {
            s[i] = kInf;
          } else {
            s[i] = static_cast<float>(v[i]) * 0.25f;
          }
        }
        break;
      }
      case RowKind::kFewValues: {
        const std::vector<int32_t> v = Ints(T * n, 0, 3);
        constexpr float kValues[] = {-1.0f, 0.0f, -0.0f, 1.0f};
        for (int64_t i = 0; i < T * n; ++i) s[i] = kValues[v[i]];
        break;
      }
      case RowKind::kNearbyBits: {
        const std::vector<int32_t> v = Ints(T * n, -3000, 3000);
        for (int64_t i = 0; i < T * n; ++i) {
          const float mag = FromBits(0x3F800000u + static_cast<uint32_t>(std::abs(v[i])));
          s[i] = v[i] < 0 ? -mag : mag;
        }
        break;
      }
      case RowKind::kInfTail: {
        s = Normal(T * n);
        const std::vector<int32_t> visible = Ints(T, 0, static_cast<int32_t>(n));
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t g = visible[t]; g < n; ++g) s[t * n + g] = -kInf;
        }
        break;
      }
      case RowKind::kAllNegInf:
        std::fill(s.begin(), s.end(), -kInf);
        break;
    }
    return s;
  }

  // Runs TopK on both backends (GPU output poisoned) and compares exactly.
  void CheckTopK(RowKind kind, int64_t T, int64_t n, int64_t k) {
    SCOPED_TRACE(::testing::Message()
                 << KindName(kind) << " T " << T << " n " << n << " k " << k << " seed " << seed_);
    const std::vector<float> s = Rows(kind, T, n);
    std::vector<int32_t> expected(T * k);
    cpu_.TopK(s.data(), T, n, k, expected.data());
    int32_t* idx = PoisonedInts(T * k);
    gpu_->TopK(ToGpu(s), T, n, k, idx);
    EXPECT_TRUE(SameIds(FromGpu(idx, T * k), expected, k));
  }

  // Indexer-like scores for CandidateMask: row t sees (q_pos[t] + 1) / ratio entries, the
  // rest is -inf. Runs both backends (GPU mask poisoned) and compares exactly.
  void CheckCandidateMask(RowKind kind, int64_t n, int64_t ratio, int64_t block, int64_t keep,
                          const std::vector<int32_t>& q_pos) {
    const int64_t T = static_cast<int64_t>(q_pos.size());
    SCOPED_TRACE(::testing::Message()
                 << KindName(kind) << " T " << T << " n " << n << " ratio " << ratio << " block "
                 << block << " keep " << keep << " seed " << seed_);
    std::vector<float> s = Rows(kind, T, n);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t visible = std::min<int64_t>(n, (int64_t{q_pos[t]} + 1) / ratio);
      for (int64_t g = visible; g < n; ++g) s[t * n + g] = -kInf;
    }
    std::vector<uint8_t> expected(T * n);
    cpu_.CandidateMask(s.data(), T, n, q_pos.data(), ratio, block, keep, expected.data());
    uint8_t* mask = PoisonedBytes(T * n);
    gpu_->CandidateMask(ToGpu(s), T, n, ToGpu(q_pos), ratio, block, keep, mask);
    EXPECT_TRUE(SameMask(BytesFromGpu(mask, T * n), expected, n));
  }
};

// Row lengths around k (n < k, n = k, n = k + 1) and up to 32768, every row kind, T = 1, 7
// and 32 in turn.
TEST_F(CudaTopKTest, MatchesCpuExactly) {
  const int64_t max_n = SmallOnly() ? 4096 : 32768;
  const int64_t Ts[] = {1, 7, 32};
  int64_t case_no = 0;
  for (int64_t k : {1, 4, 64, 512, 2048}) {
    std::vector<int64_t> lengths = {1, 2, 3, k, k + 1, 2 * k + 5, 2048, 16384, max_n};
    if (k > 1) lengths.push_back(k - 1);
    for (int64_t n : lengths) {
      if (n > max_n) continue;
      for (RowKind kind : kAllKinds) CheckTopK(kind, Ts[case_no++ % 3], n, k);
    }
  }
}

// Decode shapes (index_topk 512 over 2K..16K indexer scores), all three T.
TEST_F(CudaTopKTest, DecodeShapes) {
  for (int64_t T : {1, 7, 32}) {
    for (int64_t n : {2048, 5000, 16384}) {
      for (RowKind kind : {RowKind::kNormal, RowKind::kTied, RowKind::kInfTail}) {
        CheckTopK(kind, T, n, 512);
      }
    }
  }
}

// The three kernel variants -- keys cached in 4 registers (n <= 4096), in 16 (n <= 16384
// and T <= 128), or re-read from global memory in batches of 8 (otherwise) -- on both sides
// of each limit, with k = 512 and k = 1, every row kind.
TEST_F(CudaTopKTest, KernelVariantLimits) {
  struct Case {
    int64_t T, n;
  };
  for (const Case& c : {Case{2, 4096}, Case{2, 4097}, Case{3, 16384}, Case{3, 16385},
                        Case{128, 5000}, Case{129, 5000}, Case{2, 20000}}) {
    for (int64_t k : {1, 512}) {
      for (RowKind kind : kAllKinds) CheckTopK(kind, c.T, c.n, k);
    }
  }
}

// A row's output does not depend on T (the variant chosen): 160 rows of 9000 tie-heavy
// scores (global-memory variant) and their first 1, 8 and 128 rows (16-register variant).
TEST_F(CudaTopKTest, SameIdsAtEveryT) {
  const int64_t T = 160, n = 9000, k = 512;
  const float* scores = ToGpu(Rows(RowKind::kTied, T, n));
  int32_t* all = PoisonedInts(T * k);
  gpu_->TopK(scores, T, n, k, all);
  const std::vector<int32_t> batch = FromGpu(all, T * k);
  for (int64_t rows : {1, 8, 128}) {
    SCOPED_TRACE(::testing::Message() << "first " << rows << " rows alone, seed " << seed_);
    int32_t* idx = PoisonedInts(rows * k);
    gpu_->TopK(scores, rows, n, k, idx);
    EXPECT_TRUE(SameIds(FromGpu(idx, rows * k),
                        std::vector<int32_t>(batch.begin(), batch.begin() + rows * k), k));
  }
}

// The largest supported selection (kMaxTopK) and k far beyond n.
TEST_F(CudaTopKTest, LargestSelectionAndShortRows) {
  for (RowKind kind : kAllKinds) {
    CheckTopK(kind, 3, 4096, 4096);
    CheckTopK(kind, 2, 4097, 4096);
    CheckTopK(kind, 2, 9000, 4096);
    CheckTopK(kind, 4, 100, 2048);
    CheckTopK(kind, 40, 33, 8);
  }
}

// A tie group straddles the cut after the last radix pass: 600 copies of one value above
// 400 smaller ones, k = 512 takes the 512 copies of lowest index.
TEST_F(CudaTopKTest, CutInsideExactTieGroup) {
  const int64_t n = 1000, k = 512;
  std::vector<float> s(n);
  for (int64_t i = 0; i < n; ++i) s[i] = (i * 7919) % n < 600 ? 0.5f : -0.25f;
  std::vector<int32_t> expected(k);
  cpu_.TopK(s.data(), 1, n, k, expected.data());
  int32_t* idx = PoisonedInts(k);
  gpu_->TopK(ToGpu(s), 1, n, k, idx);
  const std::vector<int32_t> got = FromGpu(idx, k);
  EXPECT_TRUE(SameIds(got, expected, k));
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));  // one value: ascending ids
}

// -0.0 and +0.0 are one value: their order is by index only.
TEST_F(CudaTopKTest, SignedZerosAreEqual) {
  const std::vector<float> s = {-0.0f, 0.0f, -0.0f, -kInf, 0.0f, -1.0f, -0.0f};
  const int64_t n = static_cast<int64_t>(s.size()), k = 9;
  int32_t* idx = PoisonedInts(k);
  gpu_->TopK(ToGpu(s), 1, n, k, idx);
  EXPECT_EQ(FromGpu(idx, k), (std::vector<int32_t>{0, 1, 2, 4, 6, 5, -1, -1, -1}));
}

// V4.1 candidate blocks: block 8, keep 2048, ratio 1 and 2 (and 4), rows whose positions
// give different visible lengths: nothing visible, a partial block, the newest block at
// several places, more visible than n (no forced block), and rows with more than 2048
// visible blocks (blocks are dropped).
TEST_F(CudaTopKTest, CandidateMaskMatchesCpuExactly) {
  const int64_t block = 8, keep = 2048;
  std::vector<int64_t> lengths = {1, 13, 2048, 16384};
  if (!SmallOnly()) lengths.push_back(20000);
  if (!SmallOnly()) lengths.push_back(32768);
  for (int64_t ratio : {1, 2, 4}) {
    for (int64_t n : lengths) {
      std::vector<int32_t> q_pos;
      for (int64_t visible : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{9}, n / 3, n / 2 + 5,
                              n - 1, n, n + 100, int64_t{16385}, int64_t{16391}}) {
        for (int64_t extra : {int64_t{0}, ratio - 1}) {
          // (q_pos + 1) / ratio == visible (1 / ratio when visible is 0).
          q_pos.push_back(static_cast<int32_t>(std::max<int64_t>(0, visible * ratio - 1 + extra)));
        }
      }
      for (RowKind kind : {RowKind::kNormal, RowKind::kTied, RowKind::kFewValues}) {
        CheckCandidateMask(kind, n, ratio, block, keep, q_pos);
      }
    }
  }
}

// Small block/keep combinations: keep < n_blocks, keep > n_blocks, block 1.
TEST_F(CudaTopKTest, CandidateMaskSmallShapes) {
  struct Case {
    int64_t n, ratio, block, keep;
  };
  for (const Case& c : std::vector<Case>{{37, 2, 4, 3},
                                         {9, 1, 4, 8},
                                         {64, 2, 8, 2},
                                         {100, 1, 1, 17},
                                         {1000, 1, 8, 1},
                                         {5000, 2, 8, 64}}) {
    std::vector<int32_t> q_pos;
    for (int32_t p : {0, 1, 2, 5, 30, 77, 150, 1999, 4000, 12000}) q_pos.push_back(p);
    for (RowKind kind : {RowKind::kNormal, RowKind::kTied, RowKind::kFewValues}) {
      CheckCandidateMask(kind, c.n, c.ratio, c.block, c.keep, q_pos);
    }
  }
}

// Device time per TopK call at decode shapes (k = 512 of the indexer's 2K..32K scores per
// row, T = 1, 8, 32) and per CandidateMask call at V4.1 shapes (block 8, keep 2048).
TEST_F(CudaTopKTest, DISABLED_BenchDecodeSelection) {
  const int64_t k = 512, block = 8, keep = 2048, ratio = 4;
  for (int64_t T : {1, 8, 32}) {
    for (int64_t n : {2048, 4096, 16384, 32768}) {
      const float* scores = ToGpu(Normal(T * n));
      int32_t* idx = PoisonedInts(T * k);
      const double topk_us = DeviceMicrosPerCall([&] { gpu_->TopK(scores, T, n, k, idx); });
      std::printf("TopK T=%lld n=%lld k=%lld: %.2f us/call\n", static_cast<long long>(T),
                  static_cast<long long>(n), static_cast<long long>(k), topk_us);
      EXPECT_GT(topk_us, 0.0);
    }
    if (T == 8) continue;  // CandidateMask as before: T = 1 and 32
    for (int64_t entries : {int64_t{16384}, int64_t{32768}}) {
      std::vector<int32_t> q_pos(T);
      for (int64_t t = 0; t < T; ++t) q_pos[t] = static_cast<int32_t>(ratio * entries - T + t);
      const float* s = ToGpu(Normal(T * entries));
      const int32_t* pos = ToGpu(q_pos);
      uint8_t* mask = PoisonedBytes(T * entries);
      const double mask_us = DeviceMicrosPerCall(
          [&] { gpu_->CandidateMask(s, T, entries, pos, ratio, block, keep, mask); });
      std::printf("CandidateMask T=%lld n=%lld block=%lld keep=%lld: %.2f us/call\n",
                  static_cast<long long>(T), static_cast<long long>(entries),
                  static_cast<long long>(block), static_cast<long long>(keep), mask_us);
      EXPECT_GT(mask_us, 0.0);
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
