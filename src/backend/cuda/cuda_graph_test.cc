// CUDA graphs (StreamTape): recorded stream work replayed as a captured graph must give the
// bits of the same ops issued one by one, must read each step's new host data, and must
// never replay a graph for different work.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda::testing {
namespace {

class CudaGraphTest : public CudaVsCpuTest {
 protected:
  static constexpr int64_t kRows = 8, kCols = 512, kN = kRows * kCols;

  void SetUp() override {
    CudaVsCpuTest::SetUp();
    if (gpu_ == nullptr) return;
    x_ = gpu_->AllocFloats(kN);
    y_ = gpu_->AllocFloats(kN);
    norm_ = ToGpu(Uniform(kCols, 0.5f, 1.5f));
    gpu_->set_min_graph_kernels(1);
    gpu_->set_graph_segment_kernels(0);  // one tape per step (SegmentsRampUpAfterEachSync: on)
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
  void TearDown() override {
    if (gpu_ != nullptr) {
      gpu_->Free(x_);
      gpu_->Free(y_);
    }
    CudaVsCpuTest::TearDown();
  }

  // One "step": upload `input`, 3 rounds of scale / add / RmsNorm (PDL launches), read back.
  std::vector<float> Step(const std::vector<float>& input, float scale) {
    gpu_->CopyToDevice(x_, input.data(), kN * sizeof(float));
    for (int round = 0; round < 3; ++round) {
      gpu_->Scale(x_, kN, scale);
      gpu_->Add(x_, x_, kN, y_);
      gpu_->RmsNorm(y_, kRows, kCols, kCols, norm_, 1e-6f, x_, kCols);
    }
    return FromGpu(x_, kN);
  }

  float* x_ = nullptr;
  float* y_ = nullptr;
  float* norm_ = nullptr;
};

TEST_F(CudaGraphTest, ReplaysWithEachStepsHostDataBitwise) {
  ASSERT_TRUE(gpu_->graphs());
  const int steps = 6;
  std::vector<std::vector<float>> inputs, graphed;
  for (int s = 0; s < steps; ++s) inputs.push_back(Normal(kN));
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < steps; ++s) graphed.push_back(Step(inputs[s], 1.5f));
  const StreamTape::Stats after = gpu_->graph_stats();
  // Step 1: first sighting, issued op by op; step 2: captured and launched; then replays.
  EXPECT_EQ(after.eager_flushes - before.eager_flushes, 1);
  EXPECT_EQ(after.graph_captures - before.graph_captures, 1);
  EXPECT_EQ(after.graph_launches - before.graph_launches, steps - 1);
  const int64_t kernels_per_step = after.eager_kernels - before.eager_kernels;
  EXPECT_GE(kernels_per_step, 9);
  EXPECT_EQ(after.graph_kernels - before.graph_kernels, (steps - 1) * kernels_per_step);

  gpu_->set_graphs(false);
  for (int s = 0; s < steps; ++s) {
    const std::vector<float> eager = Step(inputs[s], 1.5f);
    EXPECT_TRUE(BitExact(graphed[s], eager)) << "step " << s;
    if (s > 0) {
      EXPECT_NE(graphed[s][0], graphed[s - 1][0]);  // new data reached the graph
    }
  }
  EXPECT_EQ(gpu_->graph_stats().graph_launches, after.graph_launches);  // off: no graphs
}

// A side branch (Backend::BeginSideBranch): the captured graph branches, and every step's
// result is bitwise that of the same ops issued one by one in order.
TEST_F(CudaGraphTest, SideBranchBecomesAGraphBranchBitwise) {
  float* a = gpu_->AllocFloats(kN);
  float* b = gpu_->AllocFloats(kN);
  float* c = gpu_->AllocFloats(kN);
  auto step = [&](const std::vector<float>& input) {
    gpu_->CopyToDevice(x_, input.data(), kN * sizeof(float));
    gpu_->BeginSideBranch(kRows);  // a = 2 RmsNorm(x), twice normed
    gpu_->RmsNorm(x_, kRows, kCols, kCols, norm_, 1e-6f, a, kCols);
    gpu_->Scale(a, kN, 2.0f);
    gpu_->RmsNorm(a, kRows, kCols, kCols, norm_, 1e-6f, a, kCols);
    gpu_->EndSideBranch();  // b = (x + x) / 2 + x
    gpu_->Add(x_, x_, kN, b);
    gpu_->Scale(b, kN, 0.5f);
    gpu_->Add(b, x_, kN, b);
    gpu_->JoinSideBranch();
    gpu_->Add(a, b, kN, c);
    return FromGpu(c, kN);
  };
  const int steps = 5;
  std::vector<std::vector<float>> inputs, graphed;
  for (int s = 0; s < steps; ++s) inputs.push_back(Normal(kN));
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < steps; ++s) graphed.push_back(step(inputs[s]));
  const StreamTape::Stats after = gpu_->graph_stats();
  // The first step's arena addresses may differ (blocks released at the join are new then):
  // one or two steps op by op, then one capture and replays.
  EXPECT_EQ(after.graph_captures - before.graph_captures, 1);
  EXPECT_EQ(after.forked_graphs - before.forked_graphs, 1);
  EXPECT_GE(after.graph_launches - before.graph_launches, steps - 2);
  EXPECT_LE(after.eager_flushes - before.eager_flushes, 2);
  gpu_->set_graphs(false);
  for (int s = 0; s < steps; ++s) EXPECT_TRUE(BitExact(graphed[s], step(inputs[s]))) << s;
  EXPECT_EQ(gpu_->graph_stats().forked_graphs, after.forked_graphs);
  gpu_->Free(a);
  gpu_->Free(b);
  gpu_->Free(c);
}

// cuBLAS GEMMs in both lanes (each lane its own handle and workspace): bitwise op by op.
TEST_F(CudaGraphTest, CublasInBothLanesBitwise) {
  const int64_t T = 64, K = 256, N = 512;
  std::vector<uint16_t> w_bits(N * K);
  const std::vector<float> w_values = Normal(N * K);
  for (int64_t i = 0; i < N * K; ++i) {
    uint32_t u;
    std::memcpy(&u, &w_values[i], 4);
    w_bits[i] = static_cast<uint16_t>(u >> 16);
  }
  const model::WeightRef w{"graph bf16", model::WeightFormat::kBF16, N, K, w_bits.data(), nullptr};
  float* x = ToGpu(Normal(T * K));
  float* y0 = gpu_->AllocFloats(T * N);
  float* y1 = gpu_->AllocFloats(T * N);
  gpu_->set_fp8_activations(true);  // a BF16 weight past the GEMV: one cuBLAS GEMM
  auto step = [&](float scale) {
    gpu_->Scale(x, T * K, scale);
    gpu_->BeginSideBranch(kRows);
    gpu_->Linear(x, T, K, w, 0, N, y0, N, false);
    gpu_->EndSideBranch();
    gpu_->Linear(x, T, K, w, 0, N, y1, N, false);
    gpu_->Scale(y1, T * N, 0.25f);
    gpu_->JoinSideBranch();
    gpu_->Add(y0, y1, T * N, y0);
    return FromGpu(y0, T * N);
  };
  std::vector<std::vector<float>> graphed;
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < 4; ++s) graphed.push_back(step(1.0f));
  EXPECT_GE(gpu_->graph_stats().forked_graphs - before.forked_graphs, 1);
  EXPECT_GE(gpu_->graph_stats().graph_launches - before.graph_launches, 2);
  gpu_->set_graphs(false);
  for (int s = 0; s < 4; ++s) EXPECT_TRUE(BitExact(graphed[s], step(1.0f))) << s;
  gpu_->set_fp8_activations(false);
}

// A synchronisation inside a side branch issues everything recorded so far in order, and the
// rest of the branch then runs in order as well: bitwise op by op, no branching graph.
TEST_F(CudaGraphTest, FlushInsideABranchRunsInOrder) {
  float* a = gpu_->AllocFloats(kN);
  float* b = gpu_->AllocFloats(kN);
  auto step = [&](const std::vector<float>& input, std::vector<float>* mid) {
    gpu_->CopyToDevice(x_, input.data(), kN * sizeof(float));
    gpu_->BeginSideBranch(kRows);
    gpu_->RmsNorm(x_, kRows, kCols, kCols, norm_, 1e-6f, a, kCols);
    *mid = FromGpu(a, kN);  // reads back: the tape is issued here, inside the branch
    gpu_->Scale(a, kN, 2.0f);
    gpu_->EndSideBranch();
    gpu_->Add(x_, x_, kN, b);
    gpu_->JoinSideBranch();
    gpu_->Add(a, b, kN, b);
    return FromGpu(b, kN);
  };
  const int steps = 4;
  std::vector<std::vector<float>> inputs, graphed, mids(steps);
  for (int s = 0; s < steps; ++s) inputs.push_back(Normal(kN));
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < steps; ++s) graphed.push_back(step(inputs[s], &mids[s]));
  EXPECT_EQ(gpu_->graph_stats().forked_graphs, before.forked_graphs);
  EXPECT_GE(gpu_->graph_stats().graph_launches - before.graph_launches, 2);
  gpu_->set_graphs(false);
  for (int s = 0; s < steps; ++s) {
    std::vector<float> mid;
    EXPECT_TRUE(BitExact(graphed[s], step(inputs[s], &mid))) << s;
    EXPECT_TRUE(BitExact(mids[s], mid)) << s;
  }
  gpu_->Free(a);
  gpu_->Free(b);
}

// Past kSideBranchMaxRows rows the hints are ignored: the graphs do not branch.
TEST_F(CudaGraphTest, NoSideLaneForLargeBatches) {
  float* a = gpu_->AllocFloats(kN);
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < 4; ++s) {
    gpu_->BeginSideBranch(CudaBackend::kSideBranchMaxRows + 1);
    gpu_->Scale(x_, kN, 1.0f);
    gpu_->EndSideBranch();
    gpu_->Add(y_, y_, kN, a);
    gpu_->JoinSideBranch();
    ASSERT_TRUE(gpu_->Synchronize().ok());
  }
  const StreamTape::Stats after = gpu_->graph_stats();
  EXPECT_GE(after.graph_captures - before.graph_captures, 1);
  EXPECT_EQ(after.forked_graphs, before.forked_graphs);
  gpu_->Free(a);
}

// Memory freed in either branch is not handed out before the join; after it, it is.
TEST_F(CudaGraphTest, BlocksFreedInABranchWaitForTheJoin) {
  gpu_->BeginSideBranch(kRows);
  float* side = gpu_->AllocFloats(kN);
  gpu_->Fill(side, kN, 1.0f);
  gpu_->Free(side);
  gpu_->EndSideBranch();
  float* main = gpu_->AllocFloats(kN);
  EXPECT_NE(main, side);
  gpu_->Fill(main, kN, 2.0f);
  gpu_->JoinSideBranch();
  gpu_->Free(main);
  float* first = gpu_->AllocFloats(kN);
  float* second = gpu_->AllocFloats(kN);
  EXPECT_TRUE((first == side && second == main) || (first == main && second == side));
  gpu_->Free(first);
  gpu_->Free(second);
  ASSERT_TRUE(gpu_->Synchronize().ok());
}

TEST_F(CudaGraphTest, DifferentWorkIsNeverReplayedFromAnotherGraph) {
  const std::vector<float> input = Normal(kN);
  for (int s = 0; s < 3; ++s) Step(input, 1.5f);  // the 1.5 tape is now a cached graph
  const StreamTape::Stats before = gpu_->graph_stats();
  const std::vector<float> other = Step(input, 2.0f);  // another scalar: another tape
  const StreamTape::Stats after = gpu_->graph_stats();
  EXPECT_EQ(after.graph_launches, before.graph_launches);
  EXPECT_EQ(after.eager_flushes, before.eager_flushes + 1);
  gpu_->set_graphs(false);
  EXPECT_TRUE(BitExact(other, Step(input, 2.0f)));
}

TEST_F(CudaGraphTest, StreamAccessorIssuesRecordedWorkFirst) {
  gpu_->Fill(x_, kN, 3.0f);  // recorded, not yet issued
  std::vector<float> host(kN, 0.0f);
  cudaStream_t stream = gpu_->stream();
  ASSERT_EQ(cudaMemcpyAsync(host.data(), x_, kN * sizeof(float), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (float v : host) ASSERT_EQ(v, 3.0f);
}

TEST_F(CudaGraphTest, OpTimingIssuesEveryOpDirectly) {
  const std::vector<float> input = Normal(kN);
  gpu_->SetOpTiming(true);
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < 3; ++s) Step(input, 1.5f);
  const StreamTape::Stats after = gpu_->graph_stats();
  gpu_->TakeOpTimings();
  gpu_->SetOpTiming(false);
  EXPECT_EQ(after.graph_launches, before.graph_launches);
  EXPECT_EQ(after.eager_flushes, before.eager_flushes);
}

// With segments on, a step's 10 kernels (the upload, kernels::UploadPinned, and 9) are issued
// as a first segment of 8 (the ramp's start) and a second of 2, each its own graph, replayed
// every step with the step's data.
TEST_F(CudaGraphTest, SegmentsRampUpAfterEachSync) {
  gpu_->set_upload_kernel(true);  // the upload is a kernel whatever the environment says
  gpu_->set_graph_segment_kernels(32);
  const int steps = 5;
  std::vector<std::vector<float>> inputs, graphed;
  for (int s = 0; s < steps; ++s) inputs.push_back(Normal(kN));
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < steps; ++s) graphed.push_back(Step(inputs[s], 1.5f));
  const StreamTape::Stats after = gpu_->graph_stats();
  EXPECT_EQ(after.eager_flushes - before.eager_flushes, 2);    // step 1: both segments
  EXPECT_EQ(after.graph_captures - before.graph_captures, 2);  // step 2: both captured
  EXPECT_EQ(after.graph_launches - before.graph_launches, 2 * (steps - 1));
  EXPECT_EQ(after.eager_kernels - before.eager_kernels, 10);
  gpu_->set_graphs(false);
  for (int s = 0; s < steps; ++s) EXPECT_TRUE(BitExact(graphed[s], Step(inputs[s], 1.5f)));
}

// A backend that recorded on this thread and is destroyed on another: later launches on this
// thread (here on a new stream, which may reuse the gone stream's handle) go to the driver,
// never to the destroyed tape.
TEST_F(CudaGraphTest, LaunchesAfterTheRecordingBackendIsGoneGoToTheDriver) {
  auto other = CudaBackend::Create(gpu_->device());
  ASSERT_TRUE(other.ok()) << other.status();
  float* y = (*other)->AllocFloats(kN);  // an op: this thread now records the other's stream
  (*other)->Free(y);
  std::thread([&] { other->reset(); }).join();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(kernels::Fill(x_, kN, 2.0f, stream), cudaSuccess);
  std::vector<float> host(kN, 0.0f);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), x_, kN * sizeof(float), cudaMemcpyDeviceToHost, stream),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
  for (float v : host) ASSERT_EQ(v, 2.0f);
}

// A weight whose host bytes change between two recorded Linears is uploaded again; the old
// device copy, which the first (recorded, not yet issued) Linear reads, must be freed only
// after the tape holding that Linear was issued (WeightCache's before-free hook).
TEST_F(CudaGraphTest, WeightReuploadIssuesRecordedWorkFirst) {
  const int64_t rows = 64, cols = 128;
  const std::vector<uint16_t> original = Bf16Bits(rows * cols, 0.1f);
  std::vector<uint16_t> w = original;
  const model::WeightRef ref{"test.w", model::WeightFormat::kBF16, rows, cols, w.data(), nullptr};
  const float* in = ToGpu(Normal(kRows * cols));
  float* y1 = gpu_->AllocFloats(kRows * rows);
  float* y2 = gpu_->AllocFloats(kRows * rows);
  auto run = [&](bool graphs) {
    gpu_->set_graphs(graphs);
    w = original;
    gpu_->Linear(in, kRows, cols, ref, 0, rows, y1, rows, false);
    w[0] ^= 0x0100;  // other bytes at the same address: a new upload
    gpu_->Linear(in, kRows, cols, ref, 0, rows, y2, rows, false);
    return std::pair{FromGpu(y1, kRows * rows), FromGpu(y2, kRows * rows)};
  };
  const auto recorded = run(true);
  const auto direct = run(false);
  EXPECT_TRUE(BitExact(recorded.first, direct.first));
  EXPECT_TRUE(BitExact(recorded.second, direct.second));
  EXPECT_FALSE(BitExact(direct.first, direct.second));  // the change reached the second Linear
  gpu_->Free(y1);
  gpu_->Free(y2);
}

TEST_F(CudaGraphTest, SmallTapesStayOpByOp) {
  gpu_->set_min_graph_kernels(100);
  const std::vector<float> input = Normal(kN);
  const StreamTape::Stats before = gpu_->graph_stats();
  for (int s = 0; s < 4; ++s) Step(input, 1.5f);
  const StreamTape::Stats after = gpu_->graph_stats();
  EXPECT_EQ(after.graph_captures, before.graph_captures);
  EXPECT_EQ(after.eager_flushes, before.eager_flushes + 4);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
