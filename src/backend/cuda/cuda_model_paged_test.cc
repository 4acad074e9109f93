// End to end on the CUDA backend: a random V4.1 checkpoint whose indexer shape the
// tensor-core kernels take (16 heads x 32; the golden checkpoints' 8 x 32 is not), run as a
// batch of two sequences (prefill, then decode steps), once with the index keys read in
// place (Backend::IndexerScoresPaged) and once gathered first (IndexerScoresVarlen): the
// logits must be bitwise the same, and the paged run must really have taken the paged op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "io/model_config.h"
#include "model/demo_model.h"
#include "model/engram_hash.h"
#include "model/model.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using CudaModelPagedTest = CudaVsCpuTest;

// Prompt of `n` deterministic token ids (the first one 0, like a BOS).
std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i == 0 ? 0 : (i * 7919 + salt * 104729) % 120000 + 10);
  return ids;
}

// All logits of: two sequences prefilled together (37 and 22 tokens), then `steps` decode
// steps of both in one batch (fixed next tokens), in order.
std::vector<float> RunTwoSequences(model::Model& m, int steps) {
  model::SequenceState a = m.NewSequence(), b = m.NewSequence();
  const std::vector<int32_t> pa = Prompt(37, 1), pb = Prompt(22, 2);
  std::vector<float> logits;
  model::ForwardBatch prefill;
  prefill.chunks.push_back({&a, std::span(pa), 0, false});
  prefill.chunks.push_back({&b, std::span(pb), 0, false});
  auto out = m.Forward(prefill);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return logits;
  logits.insert(logits.end(), out->logits.begin(), out->logits.end());
  for (int s = 0; s < steps; ++s) {
    const std::vector<int32_t> ta = {100 + 13 * s}, tb = {5000 + 31 * s};
    model::ForwardBatch step;
    step.chunks.push_back({&a, std::span(ta), a.length, false});
    step.chunks.push_back({&b, std::span(tb), b.length, false});
    out = m.Forward(step);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
  }
  return logits;
}

TEST_F(CudaModelPagedTest, PagedIndexKeysGiveTheGatheredLogitsBitwise) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_cuda_model_paged";
  std::filesystem::remove_all(dir);
  model::DemoModelOptions options;
  options.seed = 11;
  options.size.index_n_heads = 16;  // a multiple of 16: the tensor-core indexer applies
  options.size.index_head_dim = 32;
  ASSERT_TRUE(model::WriteDemoModel(dir, options).ok());
  auto config = io::LoadModelConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto engram =
      model::DeriveEngramHashConstants(config->text_config, (dir / "tokenizer.json").string());
  ASSERT_TRUE(engram.ok()) << engram.status();
  auto m = model::Model::Load(dir, gpu_.get(), *engram);
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

}  // namespace
}  // namespace deepinfer::backend::cuda::testing
