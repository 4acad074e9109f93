// End to end on the CUDA backend: a random V4.1 checkpoint whose indexer shape the
// tensor-core kernels take (16 heads x 32; the golden checkpoints' 8 x 32 is not), run as a
// batch of two sequences (prefill, then decode steps), once with the index keys read in
// place (Backend::IndexerScoresPaged) and once gathered first (IndexerScoresVarlen): the
// logits must be bitwise the same, and the paged run must really have taken the paged op.
// Likewise the attention's selected compressed entries read in place (SparseAttentionArgs::
// comp_bases) against gathered first (GatherSelectedRows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_model_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "model/model.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaModelPagedTest = CudaVsCpuTest;

// All logits of: two sequences prefilled together (37 and 22 tokens), then `steps` decode
// steps of both in one batch (fixed next tokens), in order.
std::vector<float> RunTwoSequences(model::Model& m, int steps) {
  model::SequenceState a = m.NewSequence(), b = m.NewSequence();
  const std::vector<int32_t> pa = DemoPrompt(37, 1), pb = DemoPrompt(22, 2);
  model::ForwardBatch prefill;
  prefill.chunks.push_back({&a, std::span(pa), 0, false});
  prefill.chunks.push_back({&b, std::span(pb), 0, false});
  auto out = m.Forward(prefill);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {};
  std::vector<float> logits = out->logits;
  const std::vector<float> decoded = DecodeTwo(m, a, b, steps);
  logits.insert(logits.end(), decoded.begin(), decoded.end());
  return logits;
}

TEST_F(CudaModelPagedTest, PagedIndexKeysGiveTheGatheredLogitsBitwise) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_cuda_model_paged";
  auto m = LoadDemoModel(dir, /*seed=*/11, gpu_.get());
  ASSERT_TRUE(m.ok()) << m.status();
  // Decode rows of both ratio-2 and ratio-1 groups take the paged kernel.
  ASSERT_TRUE(gpu_->IndexerPagedApplicable(2, 16, 32, 2));

  const int steps = 12;  // the ratio-2 groups gain entries on every other step
  gpu_->set_paged_indexer(true);
  gpu_->SetOpTiming(true);
  const std::vector<float> paged = RunTwoSequences(**m, steps);
  bool took_paged = false;
  for (const OpTiming& op : gpu_->TakeOpTimings()) took_paged |= op.label == "IndexerScoresPaged";
  gpu_->SetOpTiming(false);
  EXPECT_TRUE(took_paged);

  gpu_->set_paged_indexer(false);
  const std::vector<float> gathered = RunTwoSequences(**m, steps);
  gpu_->set_paged_indexer(true);
  ASSERT_TRUE(gpu_->Synchronize().ok());

  const int64_t vocab = (*m)->config().text().vocab_size;
  ASSERT_EQ(paged.size(), static_cast<size_t>(2 * (steps + 1) * vocab));
  ASSERT_EQ(paged.size(), gathered.size());
  EXPECT_EQ(std::memcmp(paged.data(), gathered.data(), paged.size() * sizeof(float)), 0);
  for (float v : paged) ASSERT_TRUE(std::isfinite(v));
  std::filesystem::remove_all(dir);
}

// How many ops labelled `label` the backend ran since the last TakeOpTimings.
int CountOps(CudaBackend& gpu, const std::string& label) {
  int n = 0;
  for (const OpTiming& op : gpu.TakeOpTimings()) n += op.label == label ? 1 : 0;
  return n;
}

TEST_F(CudaModelPagedTest, PagedSelectedEntriesGiveTheGatheredLogitsBitwise) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_cuda_model_paged_attn";
  auto m = LoadDemoModel(dir, /*seed=*/12, gpu_.get());
  ASSERT_TRUE(m.ok()) << m.status();
  const int steps = 12;
  gpu_->SetOpTiming(true);
  gpu_->set_paged_attention(true);
  ASSERT_TRUE(gpu_->SparseAttentionReadsPagedEntries());
  const std::vector<float> paged = RunTwoSequences(**m, steps);
  EXPECT_EQ(CountOps(*gpu_, "GatherSelectedRows"), 0);
  gpu_->set_paged_attention(false);
  const std::vector<float> gathered = RunTwoSequences(**m, steps);
  // Decode rows select fewer entries than their sequences hold, so without the paged read
  // the model gathers them: the two runs differ in that path.
  EXPECT_GT(CountOps(*gpu_, "GatherSelectedRows"), 0);
  gpu_->set_paged_attention(true);
  gpu_->SetOpTiming(false);
  ASSERT_TRUE(gpu_->Synchronize().ok());
  ASSERT_EQ(paged.size(), gathered.size());
  ASSERT_FALSE(paged.empty());
  EXPECT_EQ(std::memcmp(paged.data(), gathered.data(), paged.size() * sizeof(float)), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
