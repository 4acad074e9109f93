// The e4m3 wgmma form of the few-token streaming Linear (k_linear_e4m3.cu, switched on here with
// kernels::SetLinearStreamE4m3): against the CPU reference on fake-quantised activations with the
// FP8 tests' bound, across all four token tiles, splits of K over clusters (1, 2, 4, 6 and 8
// blocks), row offsets, padded and accumulated y, grouped weights; independent of T and of the
// other tokens and targets (bitwise); another summation than the bf16 form (so the tests prove
// the form ran); the bf16 form where the rows are not multiples of 64.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_linear_stream_test.h"
#include "backend/cuda/kernels_stream.h"

namespace deepinfer::backend::cuda::testing {
namespace {

class CudaLinearE4m3Test : public CudaLinearStreamTest {
 protected:
  void SetUp() override {
    CudaLinearStreamTest::SetUp();
    kernels::SetLinearStreamE4m3(1);
  }

  static kernels::E4m3StreamTarget TargetOf(const HostWeight& w, int64_t row0, int64_t n_rows) {
    kernels::E4m3StreamTarget t;
    t.w = static_cast<const uint8_t*>(w.device.data);
    t.scale = w.device.scale;
    t.K = w.device.cols;
    t.row0 = row0;
    t.n_rows = n_rows;
    t.group_rows = w.device.rows;
    t.y = reinterpret_cast<float*>(16);  // any non-null output: applicability only
    t.ldy = n_rows;
    return t;
  }

  // CheckStream on a shape the e4m3 form takes.
  void CheckE4m3(int64_t T, int64_t K, int64_t N, int64_t row0, int64_t n_rows, int64_t ldy_pad,
                 bool accumulate, int scale_lo = 112, int scale_hi = 124) {
    SCOPED_TRACE("e4m3 split " + std::to_string(kernels::LinearE4m3Split(n_rows, K)));
    const HostWeight probe = MakeFp8Weight(N, K, scale_lo, scale_hi);
    ASSERT_TRUE(kernels::LinearE4m3Applicable(TargetOf(probe, row0, n_rows), T));
    CheckStream(T, K, N, row0, n_rows, ldy_pad, accumulate, scale_lo, scale_hi);
  }
};

TEST_F(CudaLinearE4m3Test, SplitsFollowTheShape) {
  EXPECT_EQ(kernels::LinearE4m3Split(32768, 1280), 1);  // wq_b: 512 tiles of 40 steps
  EXPECT_EQ(kernels::LinearE4m3Split(1280, 5120), 8);   // wq_a: 20 tiles, 20 steps a block
  EXPECT_EQ(kernels::LinearE4m3Split(5120, 8192), 6);   // wo_b: 256 steps, <= 48 a block
  EXPECT_EQ(kernels::LinearE4m3Split(5120, 2304), 2);   // shared w2: 36 steps a block
  EXPECT_EQ(kernels::LinearE4m3Split(64, 8192), 6);     // no more than 8 blocks a cluster
  EXPECT_EQ(kernels::LinearE4m3Split(64, 512), 2);      // no block below 8 steps
  EXPECT_EQ(kernels::LinearE4m3Split(64, 128), 1);
}

TEST_F(CudaLinearE4m3Test, MatchesCpu) {
  for (int64_t T : {1, 2, 7, 8, 9, 16, 17, 24, 31, 32}) {
    CheckE4m3(T, 128, 64, 0, 64, 0, false);       // one block, 4 steps
    CheckE4m3(T, 512, 256, 64, 192, 3, true);     // row offset, padded y, accumulate; split 2
    CheckE4m3(T, 1280, 512, 128, 384, 0, false);  // split 4
  }
  CheckE4m3(5, 4096, 128, 0, 128, 1, true);            // split 8
  CheckE4m3(29, 4096, 128, 0, 128, 1, true);           // the same, four token tiles
  CheckE4m3(3, 8192, 64, 0, 64, 0, false);             // split 6: parts of 42 and 43 steps
  CheckE4m3(21, 8192, 64, 0, 64, 0, true);             // the same, three token tiles
  CheckE4m3(12, 1408, 128, 0, 128, 0, false);          // 44 steps, split 4 of 11: not whole rings
  CheckE4m3(3, 512, 128, 0, 128, 0, false, 126, 142);  // other scales
  CheckE4m3(32, 512, 128, 0, 128, 0, true, 100, 150);
}

TEST_F(CudaLinearE4m3Test, RealV41Shapes) {
  if (SmallOnly()) GTEST_SKIP() << "DEEPINFER_CUDA_TEST_SMALL";
  CheckE4m3(1, 8192, 5120, 0, 5120, 0, false);     // wo_b
  CheckE4m3(4, 5120, 1280, 0, 1280, 0, false);     // wq_a
  CheckE4m3(16, 1280, 4096, 0, 4096, 0, false);    // indexer wq_b
  CheckE4m3(2, 2304, 5120, 0, 5120, 0, true);      // shared expert w2
  CheckE4m3(32, 8192, 5120, 0, 5120, 0, false);    // wo_b, four token tiles
  CheckE4m3(24, 1280, 32768, 0, 32768, 0, false);  // wq_b, three token tiles
}

// A token's row does not depend on T or on the other tokens (bitwise).
TEST_F(CudaLinearE4m3Test, TokenRowsIndependentOfTBitwise) {
  const int64_t K = 2048, N = 320;
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  const std::vector<float> x = Activations(32, K);
  auto run = [&](int64_t T) {
    const std::vector<float> xt(x.begin(), x.begin() + T * K);
    return RunStream(w, 0, N, xt, T, std::vector<float>(T * N), N, false);
  };
  auto rows = [&](const std::vector<float>& y, int64_t t0, int64_t t1) {
    return std::vector<float>(y.begin() + t0 * N, y.begin() + t1 * N);
  };
  const std::vector<float> all32 = run(32);
  for (int64_t t : {0, 5, 9, 17, 31}) {
    const std::vector<float> one(x.begin() + t * K, x.begin() + (t + 1) * K);
    const std::vector<float> got = RunStream(w, 0, N, one, 1, std::vector<float>(N), N, false);
    EXPECT_TRUE(BitExact(got, rows(all32, t, t + 1))) << "token " << t;
  }
  for (int64_t T : {3, 12, 20}) EXPECT_TRUE(BitExact(run(T), rows(all32, 0, T))) << "T=" << T;
}

// The e4m3 form ran: within the bound of the CPU (above) but not the bf16 form's bits; rows that
// are not multiples of 64 take the bf16 form (its bits).
TEST_F(CudaLinearE4m3Test, OtherBitsThanTheBf16FormWhereApplicable) {
  const int64_t K = 1024, N = 256, T = 9;
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  const std::vector<float> x = Activations(T, K);
  const std::vector<float> e4m3 = RunStream(w, 0, N, x, T, std::vector<float>(T * N), N, false);
  const std::vector<float> e4m3_16 =
      RunStream(w, 16, 64, x, T, std::vector<float>(T * 64), 64, false);
  kernels::SetLinearStreamE4m3(0);
  const std::vector<float> bf16 = RunStream(w, 0, N, x, T, std::vector<float>(T * N), N, false);
  const std::vector<float> bf16_16 =
      RunStream(w, 16, 64, x, T, std::vector<float>(T * 64), 64, false);
  EXPECT_FALSE(BitExact(e4m3, bf16));
  EXPECT_TRUE(BitExact(e4m3_16, bf16_16));  // row0 16: not the e4m3 form's
}

TEST_F(CudaLinearE4m3Test, GroupedMatchesCpu) {
  const int64_t groups = 8, R = 64, K = 512, N = groups * R;
  const HostWeight w = MakeFp8Weight(N, K, 110, 140);
  for (int64_t T : {1, 5, 16, 23, 32}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, groups * K);
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, groups * K));
    float* y = PoisonedFloats(T * N);
    ASSERT_EQ(kernels::LinearStreamGrouped(w.device, groups, ToGpu(x), T, groups * K, y, N, scratch,
                                           gpu_->stream()),
              cudaSuccess);
    ExpectGroupedMatchesCpu(w, groups, FakeQuantized(x, T, groups * K), T, FromGpu(y, T * N));
  }
}

// Several weights of different splits over one x (LinearStreamMany: one pack, then a launch per
// run of equal splits: here three): every output bitwise its own call.
TEST_F(CudaLinearE4m3Test, ManyEqualsSeparateCallsBitwise) {
  const int64_t K = 1280, big = 17408;  // 272 tiles of 64 rows: split 1; the others split 4
  const HostWeight a = MakeFp8Weight(256, K, 112, 124), b = MakeFp8Weight(64, K, 126, 142),
                   c = MakeFp8Weight(big, K, 112, 124);
  struct Out {
    const HostWeight* w;
    int64_t row0, n_rows, ldy;
    bool accumulate;
  };
  const Out outs[] = {{&a, 0, 128, 128, false},
                      {&c, 0, big, big, false},
                      {&a, 128, 128, 131, true},
                      {&b, 0, 64, 64, false}};
  EXPECT_EQ(kernels::LinearE4m3Split(128, K), 4);
  EXPECT_EQ(kernels::LinearE4m3Split(64, K), 4);
  EXPECT_EQ(kernels::LinearE4m3Split(big, K), 1);
  for (int64_t T : {1, 9, 24, 32}) {
    SCOPED_TRACE("T=" + std::to_string(T));
    const std::vector<float> x = Activations(T, K);
    std::vector<std::vector<float>> y0;
    std::vector<float*> dy;
    std::vector<kernels::LinearStreamTarget> targets;
    for (const Out& o : outs) {
      y0.push_back(Normal(T * o.ldy));
      dy.push_back(ToGpu(y0.back()));
      targets.push_back({&o.w->device, o.row0, o.n_rows, dy.back(), o.ldy, o.accumulate});
    }
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
    ASSERT_EQ(kernels::LinearStreamMany(targets.data(), 4, ToGpu(x), T, K, scratch, gpu_->stream()),
              cudaSuccess);
    for (size_t i = 0; i < 4; ++i) {
      const Out& o = outs[i];
      const std::vector<float> alone =
          RunStream(*o.w, o.row0, o.n_rows, x, T, y0[i], o.ldy, o.accumulate);
      EXPECT_TRUE(BitExact(FromGpu(dy[i], T * o.ldy), alone)) << "output " << i;
    }
  }
}

TEST_F(CudaLinearE4m3Test, Applicability) {
  const HostWeight w = MakeFp8Weight(256, 512, 112, 124);
  EXPECT_TRUE(kernels::LinearE4m3Applicable(TargetOf(w, 0, 256), 1));
  EXPECT_TRUE(kernels::LinearE4m3Applicable(TargetOf(w, 64, 128), 32));
  EXPECT_FALSE(kernels::LinearE4m3Applicable(TargetOf(w, 0, 256), 33));
  EXPECT_FALSE(kernels::LinearE4m3Applicable(TargetOf(w, 16, 64), 1));  // row0 % 64
  EXPECT_FALSE(kernels::LinearE4m3Applicable(TargetOf(w, 0, 96), 1));   // n_rows % 64
  kernels::E4m3StreamTarget grouped = TargetOf(w, 0, 256);
  grouped.grouped = true;
  grouped.group_rows = 32;
  EXPECT_FALSE(kernels::LinearE4m3Applicable(grouped, 1));  // a group of 32 rows
  grouped.group_rows = 128;
  EXPECT_TRUE(kernels::LinearE4m3Applicable(grouped, 1));
  const HostWeight wide = MakeFp8Weight(64, 12544, 112, 124);  // 392 steps > 8 x 48
  EXPECT_FALSE(kernels::LinearE4m3Applicable(TargetOf(wide, 0, 64), 1));
  EXPECT_LE(kernels::LinearE4m3ScratchBytes(32, 4096), kernels::LinearStreamScratchBytes(32, 4096));
  EXPECT_LE(kernels::LinearE4m3ScratchBytes(1, 4096), kernels::LinearStreamScratchBytes(1, 4096));
}

// Device time of the V4.1-Flash decode Linears, e4m3 form against the bf16 form (run with
// --gtest_also_run_disabled_tests): achieved GB/s on the weight bytes.
TEST_F(CudaLinearE4m3Test, DISABLED_Bench) {
  struct Shape {
    const char* name;
    int64_t rows, K, groups;
  };
  const Shape shapes[] = {{"wq_a", 1280, 5120, 1},      {"wq_b", 32768, 1280, 1},
                          {"wkv", 512, 5120, 1},        {"wo_a", 8192, 4096, 8},
                          {"wo_b", 5120, 8192, 1},      {"shared_w1", 2304, 5120, 1},
                          {"shared_w2", 5120, 2304, 1}, {"idx_wq_b", 8192, 1280, 1}};
  const char* only = std::getenv("DEEPINFER_BENCH_SHAPE");  // one shape by name (profilers)
  for (const Shape& s : shapes) {
    if (only != nullptr && std::string(only) != s.name) continue;
    const HostWeight w = MakeFp8Weight(s.rows, s.K, 112, 124);
    const double bytes = double(s.rows) * s.K * (1.0 + 1.0 / 1024.0);
    const int64_t x_cols = s.K * s.groups;
    for (int64_t T : {1, 2, 8, 16, 32}) {
      const float* dx = ToGpu(Activations(T, x_cols));
      float* y = PoisonedFloats(T * s.rows);
      uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, x_cols));
      auto time = [&](int e4m3) {
        kernels::SetLinearStreamE4m3(e4m3);
        return DeviceMicrosPerCall([&] {
          if (s.groups > 1) {
            kernels::LinearStreamGrouped(w.device, s.groups, dx, T, x_cols, y, s.rows, scratch,
                                         gpu_->stream());
          } else {
            kernels::LinearStream(w.device, 0, s.rows, dx, T, s.K, y, s.rows, false, scratch,
                                  gpu_->stream());
          }
        });
      };
      const double bf16 = time(0), e4m3 = time(1);
      std::printf(
          "%-10s T=%2lld split %d: e4m3 %8.2f us (%5.0f GB/s)  bf16 %8.2f us (%5.0f GB/s)\n",
          s.name, static_cast<long long>(T),
          kernels::LinearE4m3Split(s.rows / s.groups * s.groups, s.K), e4m3, bytes / e4m3 * 1e-3,
          bf16, bytes / bf16 * 1e-3);
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
