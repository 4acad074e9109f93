// The TMA-bulk-fed streaming Linear (kernels_bulk.h: LinearBulkMany) against the register-fed
// one (kernels_stream.h), BITWISE: LinearStream, LinearStreamMany and LinearStreamGrouped for
// T = 1, 3, 8 (one token tile) over K from one step to 8192, row counts giving splits 1, 2, 4
// and 8, row offsets, padded and accumulated y, several targets, grouped weights, both scale
// branches (ue8m0 bytes above and below 134), every compiled ring shape (also warps with fewer
// steps than the ring holds); its applicability rules; a DISABLED_Bench of the decode shapes.
// The tensor-map rings (kTensor*: one cp.async.bulk.tensor per stage) run through the same
// comparisons, plus weights whose base is only 16-byte aligned, the map cache, recording on a
// StreamTape (op by op, captured, replayed), and (no GPU
// needed: LinearBulkHostTest) the tensor view, the map key and the env choice of the ring.
//
// The activations in fragment order (LinearBulkMany's input) are taken from LinearStream's own
// scratch: with the fusion threshold at 0, LinearStream quantises x with QuantizeStreamKernel
// into its scratch, which for T <= 8 is exactly that layout (uint4 (st * 4 + q) * 32 + 4n + c,
// tokens T..7 zeros). The comparisons are therefore of the two weight paths on identical B
// operands.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iterator>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_fp8_test_util.h"
#include "backend/cuda/kernels_bulk.h"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/launch_sink.h"
#include "backend/cuda/stream_tape.h"

namespace deepinfer::backend::cuda::testing {
namespace {

// Sets the bulk ring shape for a scope, then restores the default.
class RingOverride {
 public:
  explicit RingOverride(kernels::BulkRing ring) { kernels::SetLinearBulkRing(ring); }
  ~RingOverride() { kernels::SetLinearBulkRing(kernels::BulkRing::kDefault); }
};

constexpr kernels::BulkRing kAllRings[] = {
    kernels::BulkRing::kEager3x2,  kernels::BulkRing::kEager2x2,      kernels::BulkRing::kLazy3x2,
    kernels::BulkRing::kLazy2x3,   kernels::BulkRing::kTensor3x2,     kernels::BulkRing::kTensor2x4,
    kernels::BulkRing::kTensor6x1, kernels::BulkRing::kTensorBlock3x2};
constexpr const char* kRingNames[] = {"eager3x2",  "eager2x2",  "lazy3x2",   "lazy2x3",
                                      "tensor3x2", "tensor2x4", "tensor6x1", "tblock3x2"};
static_assert(std::size(kAllRings) == std::size(kRingNames));
// The process default (per-row copies unless DEEPINFER_LINEAR_BULK_TMA2D is set) and every
// tensor-map ring: the rings the shape-by-shape comparisons run.
constexpr kernels::BulkRing kDefaultAndTensorRings[] = {
    kernels::BulkRing::kDefault, kernels::BulkRing::kTensor3x2, kernels::BulkRing::kTensor2x4,
    kernels::BulkRing::kTensor6x1, kernels::BulkRing::kTensorBlock3x2};

std::string RingName(kernels::BulkRing ring) {
  for (size_t i = 0; i < std::size(kAllRings); ++i) {
    if (kAllRings[i] == ring) return kRingNames[i];
  }
  return "default";
}

class CudaLinearBulkTest : public CudaFp8Test {
 protected:
  // DEEPINFER_LINEAR_STREAM_BULK=1 makes LinearStream itself launch the bulk kernel (read once
  // by k_linear_stream.cu): the reference would be the kernel under test.
  void SetUp() override {
    CudaFp8Test::SetUp();
    const char* env = std::getenv("DEEPINFER_LINEAR_STREAM_BULK");
    if (env != nullptr && std::atoi(env) == 1) {
      GTEST_SKIP() << "DEEPINFER_LINEAR_STREAM_BULK=1: LinearStream is the bulk kernel itself";
    }
  }

  // x [T, K] (device) quantised into fragment order for one token tile (device, 16 * K bytes),
  // by LinearStream's two-kernel path on a 16-row weight of K columns (see the file comment).
  const void* Fragments(const float* dx, int64_t T, int64_t K) {
    const HostWeight dummy = MakeFp8Weight(16, K, 112, 124);
    kernels::SetLinearStreamFuseMaxTokens(0);
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
    float* y = PoisonedFloats(T * 16);
    const cudaError_t e =
        kernels::LinearStream(dummy.device, 0, 16, dx, T, K, y, 16, false, scratch, gpu_->stream());
    kernels::SetLinearStreamFuseMaxTokens(-1);
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    EXPECT_EQ(kernels::LinearStreamScratchBytes(T, K), 16 * K);  // one token tile
    return scratch;
  }

  // The bulk target of rows [row0, row0 + n_rows) of an ungrouped weight.
  static kernels::BulkTarget Target(const HostWeight& w, int64_t row0, int64_t n_rows, float* y,
                                    int64_t ldy, bool accumulate) {
    return kernels::BulkTarget{static_cast<const uint8_t*>(w.device.data),
                               w.device.scale,
                               w.device.cols,
                               row0,
                               n_rows,
                               w.device.rows,
                               0,
                               y,
                               ldy,
                               accumulate};
  }

  // y [T, ldy] of LinearBulkMany with the one target on the device copy of y0.
  std::vector<float> RunBulk(const HostWeight& w, int64_t row0, int64_t n_rows, const void* xf,
                             int64_t T, const std::vector<float>& y0, int64_t ldy,
                             bool accumulate) {
    float* y = ToGpu(y0);
    const kernels::BulkTarget t = Target(w, row0, n_rows, y, ldy, accumulate);
    EXPECT_TRUE(kernels::LinearBulkApplicable(&t, 1, xf, static_cast<int>(T)));
    const cudaError_t e = kernels::LinearBulkMany(&t, 1, xf, static_cast<int>(T), gpu_->stream());
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return FromGpu(y, T * ldy);
  }

  // y [T, ldy] of kernels::LinearStream (default dispatch) on the device copy of y0.
  std::vector<float> RunStream(const HostWeight& w, int64_t row0, int64_t n_rows, const float* dx,
                               int64_t T, const std::vector<float>& y0, int64_t ldy,
                               bool accumulate) {
    const int64_t K = w.device.cols;
    uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
    float* y = ToGpu(y0);
    const cudaError_t e = kernels::LinearStream(w.device, row0, n_rows, dx, T, K, y, ldy,
                                                accumulate, scratch, gpu_->stream());
    EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
    return FromGpu(y, T * ldy);
  }

  // Bulk vs LinearStream on the same x, bitwise, for the current ring shape; returns the split.
  int ExpectBulkEqualsStream(const HostWeight& w, int64_t row0, int64_t n_rows, int64_t T,
                             int64_t ldy_pad, bool accumulate) {
    const int64_t K = w.device.cols, ldy = n_rows + ldy_pad;
    const int split = kernels::LinearStreamSplit(n_rows, K);
    SCOPED_TRACE(::testing::Message() << "T=" << T << " K=" << K << " rows " << row0 << "+"
                                      << n_rows << " of " << w.device.rows << " ldy=" << ldy
                                      << (accumulate ? " accumulate" : "") << " split " << split);
    const float* dx = ToGpu(Activations(T, K));
    const void* xf = Fragments(dx, T, K);
    const std::vector<float> y0 = Normal(T * ldy);
    const std::vector<float> stream = RunStream(w, row0, n_rows, dx, T, y0, ldy, accumulate);
    const std::vector<float> bulk = RunBulk(w, row0, n_rows, xf, T, y0, ldy, accumulate);
    EXPECT_TRUE(BitExact(bulk, stream));
    // Not vacuous: the written rows changed (y0 is normal(0, 1), the sums are not 0).
    int changed = 0;
    for (int64_t i = 0; i < T * ldy; ++i) changed += bulk[i] != y0[i];
    EXPECT_GE(changed, T * n_rows * 9 / 10);
    return split;
  }
};

// One target: K from one step (128) to 8192, 16 .. 5120 rows (splits 1, 2, 4, 8), row
// offsets inside the weight, padded / accumulated y, T = 1, 3, 8.
TEST_F(CudaLinearBulkTest, EqualsLinearStreamBitwise) {
  struct Shape {
    int64_t K, N, row0, n_rows;
    bool real;  // real V4.1 size (skipped with DEEPINFER_CUDA_TEST_SMALL)
  };
  const Shape shapes[] = {{128, 16, 0, 16, false},       // one step, one row group: split 1
                          {128, 64, 16, 48, false},      // one step, 3 row groups from row 16
                          {640, 96, 16, 80, false},      // 5 steps: split 1
                          {1280, 16, 0, 16, false},      // split 2 (5 steps per part)
                          {1280, 512, 32, 448, false},   // 28 row groups, split 2
                          {2048, 48, 0, 48, false},      // split 4
                          {5120, 48, 0, 48, false},      // split 8 (5 steps per part)
                          {5120, 1280, 0, 1280, true},   // wq_a: split 8
                          {1280, 5120, 0, 5120, true},   // split 2, 80 blocks
                          {8192, 5120, 0, 5120, true},   // wo_b: split 4
                          {5120, 576, 0, 576, false},    // wkv
                          {8192, 160, 48, 112, false}};  // split 8, 8 steps per part, row0 48
  for (kernels::BulkRing ring : kDefaultAndTensorRings) {
    const RingOverride use(ring);
    SCOPED_TRACE("ring " + RingName(ring));
    std::set<int> splits;
    for (const Shape& s : shapes) {
      if (s.real && SmallOnly()) continue;
      const HostWeight w = MakeFp8Weight(s.N, s.K, 112, 124);
      for (int64_t T : {1, 3, 8}) {
        splits.insert(ExpectBulkEqualsStream(w, s.row0, s.n_rows, T, T == 3 ? 5 : 0, T == 3));
      }
    }
    EXPECT_EQ(splits, (std::set<int>{1, 2, 4, 8}));
  }
}

// ue8m0 bytes up to 134 take one bf16 multiply, above two; warps mixing both.
TEST_F(CudaLinearBulkTest, BothScaleBranchesBitwise) {
  const int ranges[][2] = {{126, 142}, {135, 150}, {100, 110}};
  for (kernels::BulkRing ring : kDefaultAndTensorRings) {
    const RingOverride use(ring);
    SCOPED_TRACE("ring " + RingName(ring));
    for (const auto& range : ranges) {
      const HostWeight w = MakeFp8Weight(128, 1280, range[0], range[1]);
      for (int64_t T : {1, 3, 8}) ExpectBulkEqualsStream(w, 0, 128, T, 0, T == 8);
    }
  }
}

// Every compiled ring: parts shorter than the ring (1, 2, 4, 5 steps), step counts that leave
// the last fill partly full (stages of 2, 3 and 4 steps: 1, 2 or 3 steps left), weights of
// fewer steps than a stage (K = 128, 256, 384 against the tensor 2 x 4 ring), several laps of
// the ring; for the block-box ring (split 1: K < 1024 here) blocks with 1, 3, 4, 5 and 8
// active warps (the last block of 208 rows: 5).
TEST_F(CudaLinearBulkTest, EveryRingShapeBitwise) {
  struct Shape {
    int64_t K, N;
  };
  const Shape shapes[] = {{128, 64},  {256, 32},  {384, 32},    {640, 48},  {896, 16},
                          {1920, 32}, {4096, 16}, {2304, 1024}, {1408, 48}, {896, 208}};
  for (kernels::BulkRing ring : kAllRings) {
    const RingOverride use(ring);
    SCOPED_TRACE("ring " + RingName(ring));
    for (const Shape& s : shapes) {
      const HostWeight w = MakeFp8Weight(s.N, s.K, 120, 140);
      for (int64_t T : {1, 8}) ExpectBulkEqualsStream(w, 0, s.N, T, 1, T == 1);
    }
  }
}

// Several targets in one launch = LinearStreamMany (and so each target's own call), bitwise:
// two row ranges of one weight (the second accumulated into a padded y), a weight of other
// scales from row 16, a 2048-row weight of another split.
TEST_F(CudaLinearBulkTest, ManyEqualsLinearStreamManyBitwise) {
  const int64_t K = kManyK;
  const ManyWeights weights = MakeManyWeights();
  const std::vector<ManyOut> outs = ManyOuts(weights);
  for (kernels::BulkRing ring : kDefaultAndTensorRings) {
    const RingOverride use(ring);
    for (int n : {2, 3, 4}) {
      for (int64_t T : {1, 3, 8}) {
        SCOPED_TRACE(::testing::Message()
                     << "ring " << RingName(ring) << " targets " << n << " T=" << T);
        const float* dx = ToGpu(Activations(T, K));
        const void* xf = Fragments(dx, T, K);
        std::vector<std::vector<float>> y0;
        std::vector<float*> y_stream, y_bulk;
        std::vector<kernels::LinearStreamTarget> stream_targets;
        std::vector<kernels::BulkTarget> bulk_targets;
        for (int i = 0; i < n; ++i) {
          const ManyOut& o = outs[i];
          y0.push_back(Normal(T * o.ldy));
          y_stream.push_back(ToGpu(y0.back()));
          y_bulk.push_back(ToGpu(y0.back()));
          stream_targets.push_back(
              {&o.w->device, o.row0, o.n_rows, y_stream.back(), o.ldy, o.accumulate});
          bulk_targets.push_back(
              Target(*o.w, o.row0, o.n_rows, y_bulk.back(), o.ldy, o.accumulate));
        }
        uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
        ASSERT_EQ(
            kernels::LinearStreamMany(stream_targets.data(), n, dx, T, K, scratch, gpu_->stream()),
            cudaSuccess);
        ASSERT_TRUE(kernels::LinearBulkApplicable(bulk_targets.data(), n, xf, static_cast<int>(T)));
        ASSERT_EQ(kernels::LinearBulkMany(bulk_targets.data(), n, xf, static_cast<int>(T),
                                          gpu_->stream()),
                  cudaSuccess);
        for (int i = 0; i < n; ++i) {
          const int64_t size = T * outs[i].ldy;
          EXPECT_TRUE(BitExact(FromGpu(y_bulk[i], size), FromGpu(y_stream[i], size)))
              << "output " << i;
        }
      }
    }
  }
}

// Block-diagonal weights (8 groups of 64 rows; x step offset g * K / 128 per group) =
// LinearStreamGrouped, bitwise.
TEST_F(CudaLinearBulkTest, GroupedEqualsLinearStreamGroupedBitwise) {
  const int64_t groups = 8, R = 64;
  for (kernels::BulkRing ring : kDefaultAndTensorRings) {
    const RingOverride use(ring);
    for (int64_t K : {512, 1280}) {
      const int64_t N = groups * R;
      const HostWeight w = MakeFp8Weight(N, K, 110, 140);
      for (int64_t T : {1, 3, 8}) {
        SCOPED_TRACE(::testing::Message() << "ring " << RingName(ring) << " K=" << K << " T=" << T);
        const float* dx = ToGpu(Activations(T, groups * K));
        const void* xf = Fragments(dx, T, groups * K);
        uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, groups * K));
        float* y_stream = PoisonedFloats(T * N);
        ASSERT_EQ(kernels::LinearStreamGrouped(w.device, groups, dx, T, groups * K, y_stream, N,
                                               scratch, gpu_->stream()),
                  cudaSuccess);
        float* y_bulk = PoisonedFloats(T * N);
        kernels::BulkTarget t = Target(w, 0, N, y_bulk, N, false);
        t.group_rows = R;
        t.group_steps = K / 128;
        ASSERT_EQ(kernels::LinearBulkMany(&t, 1, xf, static_cast<int>(T), gpu_->stream()),
                  cudaSuccess);
        const std::vector<float> bulk = FromGpu(y_bulk, T * N);
        EXPECT_TRUE(BitExact(bulk, FromGpu(y_stream, T * N)));
        for (float v : bulk) ASSERT_FALSE(std::isnan(v)) << "an output left unwritten";
      }
    }
  }
}

// Launches back to back on one stream (PDL: the next grid issues its first bulk copies while
// the previous one runs, and reads y only after it completed): four accumulating calls onto
// the same y, then one overwriting call, each ring; equal to the same LinearStream sequence.
TEST_F(CudaLinearBulkTest, BackToBackLaunchesBitwise) {
  const int64_t K = 2560, N = 640, T = 5;
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  const float* dx = ToGpu(Activations(T, K));
  const void* xf = Fragments(dx, T, K);
  const std::vector<float> y0 = Normal(T * N);
  auto sequence = [&](const std::function<void(float*, bool)>& call) {
    float* y = ToGpu(y0);
    for (int i = 0; i < 4; ++i) call(y, true);
    const std::vector<float> accumulated = FromGpu(y, T * N);
    call(y, false);
    return std::pair{accumulated, FromGpu(y, T * N)};
  };
  uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, K));
  const auto stream = sequence([&](float* y, bool accumulate) {
    kernels::LinearStream(w.device, 0, N, dx, T, K, y, N, accumulate, scratch, gpu_->stream());
  });
  for (kernels::BulkRing ring : kAllRings) {
    const RingOverride use(ring);
    SCOPED_TRACE("ring " + RingName(ring));
    const auto bulk = sequence([&](float* y, bool accumulate) {
      const kernels::BulkTarget t = Target(w, 0, N, y, N, accumulate);
      EXPECT_EQ(kernels::LinearBulkMany(&t, 1, xf, static_cast<int>(T), gpu_->stream()),
                cudaSuccess);
    });
    EXPECT_TRUE(BitExact(bulk.first, stream.first)) << "after 4 accumulating calls";
    EXPECT_TRUE(BitExact(bulk.second, stream.second)) << "after the overwriting call";
  }
}

// What the tensor maps need of the weight's base: 16-byte alignment only. Weights starting 16
// and 48 bytes into an allocation (so not 128- or 1024-byte aligned), whole and from row 32,
// every tensor ring, bitwise against LinearStream on the same shifted weight.
TEST_F(CudaLinearBulkTest, SixteenByteAlignedWeightsBitwise) {
  const HostWeight w = MakeFp8Weight(144, 1408, 112, 130);
  for (int64_t shift : {16, 48}) {
    HostWeight shifted = w;
    shifted.device.data = static_cast<const uint8_t*>(w.device.data) + shift;
    shifted.device.rows = 128;  // the shifted rows 0..127 lie inside the allocation
    for (kernels::BulkRing ring : kDefaultAndTensorRings) {
      const RingOverride use(ring);
      SCOPED_TRACE(::testing::Message() << "ring " << RingName(ring) << " shift " << shift);
      for (int64_t T : {1, 8}) {
        ExpectBulkEqualsStream(shifted, 0, 128, T, 0, false);
        ExpectBulkEqualsStream(shifted, 32, 96, T, 2, true);
      }
    }
  }
}

// The map cache: a new view is encoded once (tensor 3x2: its 2-step box and its 1-step box),
// later launches of the same view add none (also another row range of the same extent, and
// tensor 6x1 whose stage box is the 1-step box), a 4-step box or another row extent adds
// views, the per-row rings none, the block-box ring its two 128-row views.
TEST_F(CudaLinearBulkTest, TensorMapCacheEncodesEachViewOnce) {
  // A shape no other test (nor an earlier repetition of this one) uses: no cached views.
  static int repetition = 0;
  const int64_t N = 208 + 16 * repetition++, K = 768, T = 2;
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  const float* dx = ToGpu(Activations(T, K));
  const void* xf = Fragments(dx, T, K);
  float* y = PoisonedFloats(T * N);
  auto added = [&](kernels::BulkRing ring, int64_t row0, int64_t n_rows) {
    const RingOverride use(ring);
    const kernels::BulkTarget t = Target(w, row0, n_rows, y, n_rows, false);
    const int64_t before = kernels::LinearBulkTensorMapsCached();
    EXPECT_EQ(kernels::LinearBulkMany(&t, 1, xf, static_cast<int>(T), gpu_->stream()), cudaSuccess);
    return kernels::LinearBulkTensorMapsCached() - before;
  };
  EXPECT_EQ(added(kernels::BulkRing::kTensor3x2, 0, N), 2);
  EXPECT_EQ(added(kernels::BulkRing::kTensor3x2, 0, N), 0);
  EXPECT_EQ(added(kernels::BulkRing::kTensor3x2, 16, N - 16), 0);  // same extent N
  EXPECT_EQ(added(kernels::BulkRing::kTensor6x1, 0, N), 0);
  EXPECT_EQ(added(kernels::BulkRing::kTensor2x4, 0, N), 1);
  EXPECT_EQ(added(kernels::BulkRing::kTensor3x2, 0, N - 112), 2);  // another extent: other views
  EXPECT_EQ(added(kernels::BulkRing::kEager3x2, 0, N), 0);
  // The block-box ring (6 steps: split 1): the 16-row maps (cached) and the 128-row ones.
  ASSERT_EQ(kernels::LinearStreamSplit(N, K), 1);
  EXPECT_EQ(added(kernels::BulkRing::kTensorBlock3x2, 0, N), 2);
  EXPECT_EQ(added(kernels::BulkRing::kTensorBlock3x2, 0, N), 0);
  EXPECT_EQ(cudaStreamSynchronize(gpu_->stream()), cudaSuccess);
}

// Through a StreamTape (the decode step's recorder and its CUDA graphs), every tensor ring:
// the launch is recorded (its 64-byte aligned parameter kept at a 16-byte offset of the tape),
// issued op by op, then captured into a graph, then replayed from it (the tape's bytes equal
// each time, although the caller's target has other padding bytes each time); y bitwise
// LinearStream's after each. K = 768: split 1, so the block-box ring runs its own kernel.
// `from`'s fields over an object whose every other byte (padding) is `fill`: what a caller's
// indeterminate padding may hold.
void CopyWithPadding(const kernels::BulkTarget& from, unsigned char fill, kernels::BulkTarget* to) {
  std::memset(to, fill, sizeof(*to));
  kernels::CopyBulkTargetFields(from, to);
}

TEST_F(CudaLinearBulkTest, TensorRingsThroughStreamTapeBitwise) {
  const int64_t K = 768, N = 384, T = 3;
  ASSERT_EQ(kernels::LinearStreamSplit(N, K), 1);
  const HostWeight w = MakeFp8Weight(N, K, 112, 124);
  const float* dx = ToGpu(Activations(T, K));
  const void* xf = Fragments(dx, T, K);
  const std::vector<float> expected = RunStream(w, 0, N, dx, T, Normal(T * N), N, false);
  const kernels::BulkRing rings[] = {kernels::BulkRing::kTensor3x2, kernels::BulkRing::kTensor2x4,
                                     kernels::BulkRing::kTensor6x1,
                                     kernels::BulkRing::kTensorBlock3x2};
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the inputs, made on the backend's stream
  {
    StreamTape tape(stream);
    kernels::launch::RegisterSink(stream, &tape);
    for (kernels::BulkRing ring : rings) {
      const RingOverride use(ring);
      float* y = PoisonedFloats(T * N);
      // The poison is a Fill the backend records on its own tape: issue it now (else it runs
      // at FromGpu's copy, after this test's kernel: runs 121-124 saw y all NaN at flush 0).
      ASSERT_TRUE(gpu_->Synchronize().ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      for (int flush = 0; flush < 3; ++flush) {
        SCOPED_TRACE(::testing::Message() << "ring " << RingName(ring) << " flush " << flush);
        ASSERT_EQ(cudaMemsetAsync(y, 0xff, T * N * sizeof(float), stream), cudaSuccess);
        // Other padding bytes each flush: the recorded parameter must not carry them (else
        // the second and third flushes would miss the graph).
        kernels::BulkTarget t;
        CopyWithPadding(Target(w, 0, N, y, N, false),
                        static_cast<unsigned char>(0x35 * (flush + 1)), &t);
        kernels::launch::SetRecordingStream(stream);
        const cudaError_t e = kernels::LinearBulkMany(&t, 1, xf, static_cast<int>(T), stream);
        kernels::launch::SetRecordingStream(nullptr);
        EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
        EXPECT_EQ(tape.recorded_kernels(), 1);
        ASSERT_EQ(tape.Flush(), cudaSuccess);
        ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        EXPECT_TRUE(BitExact(FromGpu(y, T * N), expected));
      }
    }
    const int64_t n = static_cast<int64_t>(std::size(rings));
    EXPECT_EQ(tape.stats().eager_flushes, n);
    EXPECT_EQ(tape.stats().graph_captures, n);
    EXPECT_EQ(tape.stats().graph_launches, 2 * n);  // the captured run and the replay
    kernels::launch::UnregisterSink(stream);
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST_F(CudaLinearBulkTest, Applicability) {
  const HostWeight w = MakeFp8Weight(128, 256, 112, 124);
  float* y = PoisonedFloats(8 * 128);
  const void* xf = PoisonedBytes(16 * 256);
  const kernels::BulkTarget ok = Target(w, 0, 128, y, 128, false);
  const kernels::BulkTarget five[5] = {ok, ok, ok, ok, ok};
  EXPECT_TRUE(kernels::LinearBulkApplicable(&ok, 1, xf, 1));
  EXPECT_TRUE(kernels::LinearBulkApplicable(&ok, 1, xf, 8));
  EXPECT_TRUE(kernels::LinearBulkApplicable(five, 4, xf, 5));
  EXPECT_FALSE(kernels::LinearBulkApplicable(five, 5, xf, 1));  // more than 4 targets
  EXPECT_FALSE(kernels::LinearBulkApplicable(five, 0, xf, 1));  // none
  EXPECT_FALSE(kernels::LinearBulkApplicable(&ok, 1, xf, 0));   // no tokens
  EXPECT_FALSE(kernels::LinearBulkApplicable(&ok, 1, xf, 9));   // two token tiles
  EXPECT_FALSE(kernels::LinearBulkApplicable(&ok, 1, nullptr, 1));
  EXPECT_FALSE(kernels::LinearBulkApplicable(&ok, 1, static_cast<const uint8_t*>(xf) + 8,
                                             1));  // xf not 16-byte aligned
  auto with = [&](auto change) {
    kernels::BulkTarget t = ok;
    change(t);
    return kernels::LinearBulkApplicable(&t, 1, xf, 1);
  };
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.w = nullptr; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.w += 8; }));  // not 16-byte aligned
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.scale = nullptr; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.y = nullptr; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.K = 96; }));  // K % 128
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.K = 0; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.row0 = 8; }));  // row0 % 16
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.row0 = -16; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.n_rows = 40; }));  // n_rows % 16
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.n_rows = 0; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.group_rows = 0; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.group_steps = -1; }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) {  // groups of 8 rows
    t.group_rows = 8;
    t.group_steps = 2;
  }));
  EXPECT_TRUE(with([](kernels::BulkTarget& t) {
    t.group_rows = 32;
    t.group_steps = 2;
  }));
  EXPECT_FALSE(with([](kernels::BulkTarget& t) { t.ldy = 100; }));  // ldy < n_rows
  kernels::BulkTarget bad = ok;
  bad.row0 = 8;
  EXPECT_EQ(kernels::LinearBulkMany(&bad, 1, xf, 1, gpu_->stream()), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::LinearBulkMany(&ok, 1, xf, 9, gpu_->stream()), cudaErrorInvalidValue);
}

// --- host side, no GPU needed ---------------------------------------------------------------

// A target over fake device addresses (the host functions never dereference them).
kernels::BulkTarget FakeTarget(int64_t K, int64_t row0, int64_t n_rows) {
  return kernels::BulkTarget{reinterpret_cast<const uint8_t*>(uintptr_t{0x7f0000001000}),
                             reinterpret_cast<const uint8_t*>(uintptr_t{0x7f0000800000}),
                             K,
                             row0,
                             n_rows,
                             row0 + n_rows,
                             0,
                             reinterpret_cast<float*>(uintptr_t{0x7f0001000000}),
                             n_rows,
                             false};
}

bool SameView(const kernels::BulkTensorView& a, const kernels::BulkTensorView& b) {
  return a.rank == b.rank && a.base == b.base && a.dims[0] == b.dims[0] && a.dims[1] == b.dims[1] &&
         a.dims[2] == b.dims[2] && a.strides[0] == b.strides[0] && a.strides[1] == b.strides[1] &&
         a.box[0] == b.box[0] && a.box[1] == b.box[1] && a.box[2] == b.box[2];
}

bool HasView(const kernels::BulkTarget& t, int box_steps) {
  kernels::BulkTensorView v{};
  return kernels::LinearBulkTensorView(t, box_steps, &v);
}

// The stage view (box_steps > 1): 3D {128 bytes, rows 0 .. row0 + n_rows, K / 128 steps},
// strides {K, 128}, box {128, 16, box_steps}; the step view (box_steps 1): 2D {K, rows},
// stride K, box {128, 16}; box_steps from 1 to min(8, K / 128).
TEST(LinearBulkHostTest, TensorViewOfATarget) {
  const kernels::BulkTarget t = FakeTarget(5120, 32, 96);
  kernels::BulkTensorView v{};
  ASSERT_TRUE(kernels::LinearBulkTensorView(t, 1, &v));
  EXPECT_EQ(v.rank, 2);
  EXPECT_EQ(v.base, static_cast<const void*>(t.w));
  EXPECT_EQ(v.dims[0], 5120u);
  EXPECT_EQ(v.dims[1], 128u);  // row0 + n_rows
  EXPECT_EQ(v.dims[2], 0u);
  EXPECT_EQ(v.strides[0], 5120u);
  EXPECT_EQ(v.strides[1], 0u);
  EXPECT_EQ(v.box[0], 128u);
  EXPECT_EQ(v.box[1], 16u);
  EXPECT_EQ(v.box[2], 0u);
  ASSERT_TRUE(kernels::LinearBulkTensorView(t, 2, &v));
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.base, static_cast<const void*>(t.w));
  EXPECT_EQ(v.dims[0], 128u);
  EXPECT_EQ(v.dims[1], 128u);  // row0 + n_rows
  EXPECT_EQ(v.dims[2], 40u);
  EXPECT_EQ(v.strides[0], 5120u);
  EXPECT_EQ(v.strides[1], 128u);
  EXPECT_EQ(v.box[0], 128u);
  EXPECT_EQ(v.box[1], 16u);
  EXPECT_EQ(v.box[2], 2u);
  EXPECT_TRUE(HasView(t, 1));
  EXPECT_TRUE(HasView(t, kernels::kBulkMaxBoxSteps));
  EXPECT_FALSE(HasView(t, 0));
  EXPECT_FALSE(HasView(t, kernels::kBulkMaxBoxSteps + 1));
  EXPECT_TRUE(HasView(FakeTarget(256, 0, 16), 2));
  EXPECT_FALSE(HasView(FakeTarget(256, 0, 16), 3));  // more steps than the weight has
  EXPECT_FALSE(kernels::LinearBulkTensorView(t, 2, nullptr));
  // 128-row boxes (the block-box ring); no other row counts.
  ASSERT_TRUE(kernels::LinearBulkTensorView(t, 2, &v, 128));
  EXPECT_EQ(v.box[1], 128u);
  EXPECT_EQ(v.dims[1], 128u);
  ASSERT_TRUE(kernels::LinearBulkTensorView(FakeTarget(5120, 0, 48), 1, &v, 128));
  EXPECT_EQ(v.box[1], 128u);  // more rows than the extent: the box's rest reads as zeros
  EXPECT_EQ(v.dims[1], 48u);
  kernels::BulkTensorView untouched{};
  EXPECT_FALSE(kernels::LinearBulkTensorView(t, 2, &untouched, 32));
  EXPECT_FALSE(kernels::LinearBulkTensorView(t, 1, &untouched, 0));
  EXPECT_EQ(untouched.rank, 0);
}

// What a map needs of the target, and that LinearBulkApplicable asks the same (every ring
// takes the same targets): base 16-byte aligned, K a multiple of 128 (so the row stride is a
// multiple of 16), row0 + n_rows and K at most INT32_MAX (int box coordinates).
TEST(LinearBulkHostTest, TensorViewNeedsWhatApplicabilityChecks) {
  const int64_t kMax = INT32_MAX;
  const void* xf = reinterpret_cast<const void*>(uintptr_t{0x7f0002000000});
  auto both = [&](const kernels::BulkTarget& t) {
    const bool view = HasView(t, 1);
    EXPECT_EQ(view, kernels::LinearBulkApplicable(&t, 1, xf, 1));
    return view;
  };
  kernels::BulkTarget t = FakeTarget(1280, 0, 64);
  EXPECT_TRUE(both(t));
  t.w += 16;  // 16-byte aligned: enough
  EXPECT_TRUE(both(t));
  t.w -= 8;
  EXPECT_FALSE(both(t));
  EXPECT_FALSE(both(FakeTarget(1280 + 16, 0, 64)));  // row stride a multiple of 16, not 128
  EXPECT_TRUE(both(FakeTarget((kMax + 1) - 128, 0, 16)));
  EXPECT_FALSE(both(FakeTarget(kMax + 1, 0, 16)));
  EXPECT_TRUE(both(FakeTarget(128, (kMax - 31) / 16 * 16, 16)));  // last row INT32_MAX - 16
  EXPECT_FALSE(both(FakeTarget(128, (kMax + 1) / 16 * 16 - 16, 32)));
}

// The view is the map cache's key: it depends on the weight (base, K), the rows read (extent
// row0 + n_rows) and the box, not on y, ldy, accumulation, scales or groups.
TEST(LinearBulkHostTest, ViewIsTheMapKey) {
  kernels::BulkTensorView a{}, b{};
  const kernels::BulkTarget t = FakeTarget(2048, 0, 256);
  ASSERT_TRUE(kernels::LinearBulkTensorView(t, 2, &a));
  kernels::BulkTarget u = t;
  u.row0 = 128;
  u.n_rows = 128;
  u.y += 4096;
  u.ldy = 300;
  u.accumulate = true;
  u.scale += 64;
  u.group_rows = 64;
  u.group_steps = 16;
  ASSERT_TRUE(kernels::LinearBulkTensorView(u, 2, &b));
  EXPECT_TRUE(SameView(a, b));
  auto differs = [&](kernels::BulkTarget v, int box_steps) {
    kernels::BulkTensorView c{};
    EXPECT_TRUE(kernels::LinearBulkTensorView(v, box_steps, &c));
    return !SameView(a, c);
  };
  EXPECT_TRUE(differs(t, 1));
  EXPECT_TRUE(differs(FakeTarget(2048, 0, 240), 2));
  EXPECT_TRUE(differs(FakeTarget(4096, 0, 256), 2));
  kernels::BulkTarget moved = t;
  moved.w += 2048;
  EXPECT_TRUE(differs(moved, 2));
}

// DEEPINFER_LINEAR_BULK_TMA2D's values.
TEST(LinearBulkHostTest, RingFromEnv) {
  EXPECT_EQ(kernels::LinearBulkRingFromEnv(nullptr), kernels::BulkRing::kEager3x2);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv(""), kernels::BulkRing::kEager3x2);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("0"), kernels::BulkRing::kEager3x2);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("1"), kernels::BulkRing::kTensor3x2);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("2"), kernels::BulkRing::kTensor2x4);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("3"), kernels::BulkRing::kTensor6x1);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("4"), kernels::BulkRing::kTensorBlock3x2);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("5"), kernels::BulkRing::kEager3x2);
  EXPECT_EQ(kernels::LinearBulkRingFromEnv("yes"), kernels::BulkRing::kEager3x2);
}

// Device time per call and GB/s of the weight bytes (data + scales) of the V4.1-Flash decode
// Linears: LinearStreamMany (default dispatch: fused quantisation at T <= 2, else
// QuantizeStreamKernel + the stream kernel), the bulk kernel on ready fragments for every ring
// shape, and the quantisation alone (LinearStream of a 16-row weight, two kernels): bulk +
// that is the bulk path's full cost. Run with --gtest_also_run_disabled_tests
// --gtest_filter='CudaLinearBulkTest.DISABLED_Bench'.
TEST_F(CudaLinearBulkTest, DISABLED_Bench) {
  struct Shape {
    const char* name;
    int64_t rows, K;
    int64_t rows2;  // a second target of the same K (0: none)
  };
  const Shape shapes[] = {{"wq_a", 1280, 5120, 0},       {"wq_a+wkv", 1280, 5120, 576},
                          {"wkv", 576, 5120, 0},         {"wq_b", 32768, 1280, 0},
                          {"wo_b", 5120, 8192, 0},       {"shared w1+w3", 2304, 5120, 2304},
                          {"shared w2", 5120, 2304, 0},  {"idx wq_b", 8192, 1280, 0},
                          {"engram wkv", 25600, 6144, 0}};
  for (const Shape& s : shapes) {
    const HostWeight w = MakeFp8Weight(s.rows, s.K, 112, 124);
    const HostWeight w2 = MakeFp8Weight(s.rows2 > 0 ? s.rows2 : 16, s.K, 112, 124);
    const int n = s.rows2 > 0 ? 2 : 1;
    const double bytes = double(s.rows + s.rows2) * s.K * (1.0 + 1.0 / 1024.0);
    const HostWeight dummy = MakeFp8Weight(16, s.K, 112, 124);
    for (int64_t T : {1, 8}) {
      const float* dx = ToGpu(Activations(T, s.K));
      const void* xf = Fragments(dx, T, s.K);
      float* y = PoisonedFloats(T * s.rows);
      float* y2 = PoisonedFloats(T * (s.rows2 + 16));
      uint8_t* scratch = PoisonedBytes(kernels::LinearStreamScratchBytes(T, s.K));
      const kernels::LinearStreamTarget st[2] = {{&w.device, 0, s.rows, y, s.rows, false},
                                                 {&w2.device, 0, s.rows2, y2, s.rows2, false}};
      const kernels::BulkTarget bt[2] = {Target(w, 0, s.rows, y, s.rows, false),
                                         Target(w2, 0, s.rows2, y2, s.rows2, false)};
      const double us_stream = DeviceMicrosPerCall(
          [&] { kernels::LinearStreamMany(st, n, dx, T, s.K, scratch, gpu_->stream()); });
      double us_bulk[std::size(kAllRings)];
      for (size_t i = 0; i < std::size(kAllRings); ++i) {
        const RingOverride use(kAllRings[i]);
        us_bulk[i] = DeviceMicrosPerCall(
            [&] { kernels::LinearBulkMany(bt, n, xf, static_cast<int>(T), gpu_->stream()); });
      }
      kernels::SetLinearStreamFuseMaxTokens(0);
      const double us_quant = DeviceMicrosPerCall([&] {
        kernels::LinearStream(dummy.device, 0, 16, dx, T, s.K, y, 16, false, scratch,
                              gpu_->stream());
      });
      kernels::SetLinearStreamFuseMaxTokens(-1);
      std::printf("%-13s T=%lld split %d: stream %7.2f us (%5.0f GB/s)  quant+16 rows %5.2f us |",
                  s.name, static_cast<long long>(T), kernels::LinearStreamSplit(s.rows, s.K),
                  us_stream, bytes / us_stream * 1e-3, us_quant);
      for (size_t i = 0; i < std::size(kAllRings); ++i) {
        std::printf("  %s %7.2f us (%5.0f GB/s)", kRingNames[i], us_bulk[i],
                    bytes / us_bulk[i] * 1e-3);
      }
      std::printf("\n");
    }
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
