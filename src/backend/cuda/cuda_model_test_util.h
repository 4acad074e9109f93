// What the end-to-end model tests on the GPU share (cuda_goldens_test): a random demo
// checkpoint whose indexer the tensor-core (paged) kernels take, and decode steps of two
// sequences.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "base/statusor.h"
#include "model/backend.h"
#include "model/model.h"

namespace deepinfer::backend::cuda::testing {

// Prompt of `n` deterministic token ids (the first one 0, like a BOS).
std::vector<int32_t> DemoPrompt(int n, int salt);

// Writes the demo checkpoint (model::WriteDemoModel, seed `seed`, indexer 16 heads x 32: a
// multiple of 16, so the tensor-core indexer applies) into `dir` and loads it on `backend`.
base::StatusOr<std::unique_ptr<model::Model>> LoadDemoModel(const std::filesystem::path& dir,
                                                            uint64_t seed, model::Backend* backend);

// `steps` decode steps of `a` and `b` in one batch (fixed next tokens); the logits of every
// step appended in order. before_step(s), if given, runs before step s.
std::vector<float> DecodeTwo(model::Model& m, model::SequenceState& a, model::SequenceState& b,
                             int steps, const std::function<void(int)>& before_step = {});

}  // namespace deepinfer::backend::cuda::testing
