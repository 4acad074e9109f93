#include "backend/cuda/cuda_model_test_util.h"

#include <gtest/gtest.h>

#include <span>

#include "io/model_config.h"
#include "model/demo_model.h"
#include "model/engram_hash.h"

namespace deepinfer::backend::cuda::testing {

std::vector<int32_t> DemoPrompt(int n, int salt) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(i == 0 ? 0 : (i * 7919 + salt * 104729) % 120000 + 10);
  return ids;
}

base::StatusOr<std::unique_ptr<model::Model>> LoadDemoModel(const std::filesystem::path& dir,
                                                            uint64_t seed,
                                                            model::Backend* backend) {
  std::filesystem::remove_all(dir);
  model::DemoModelOptions options;
  options.seed = seed;
  options.size.index_n_heads = 16;
  options.size.index_head_dim = 32;
  DI_RETURN_IF_ERROR(model::WriteDemoModel(dir, options));
  DI_ASSIGN_OR_RETURN(const auto config, io::LoadModelConfig(dir / "config.json"));
  DI_ASSIGN_OR_RETURN(auto engram, model::DeriveEngramHashConstants(
                                       config.text_config, (dir / "tokenizer.json").string()));
  return model::Model::Load(dir, backend, std::move(engram));
}

std::vector<float> DecodeTwo(model::Model& m, model::SequenceState& a, model::SequenceState& b,
                             int steps, const std::function<void(int)>& before_step) {
  std::vector<float> logits;
  for (int s = 0; s < steps; ++s) {
    if (before_step) before_step(s);
    const std::vector<int32_t> ta = {100 + 13 * s}, tb = {5000 + 31 * s};
    model::ForwardBatch step;
    step.chunks.push_back({&a, std::span(ta), a.length, false});
    step.chunks.push_back({&b, std::span(tb), b.length, false});
    auto out = m.Forward(step);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
  }
  return logits;
}

}  // namespace deepinfer::backend::cuda::testing
