// ModelRunnerV41: executes StepPlans on the V4.1 model (model::Model over any backend).
//
// The model keeps each sequence's state in a model::SequenceState (its own growing arrays);
// this runner maps the scheduler's slots to SequenceStates: a chunk starting at position 0
// creates a fresh state in its slot, later chunks continue it, copies_after deep-copy it.
// Block tables are not read: on this path kv blocks are the memory budget (accounting),
// while the bytes live in the SequenceState. (Paged storage inside the model is future work;
// the StateLayout bytes match what a paged backend would hold.)
//
// All chunks of a step go to one Model::Forward call; each sequence's logits depend only
// on its own tokens and chunking, never on the other chunks of the batch.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "engine/model_runner.h"
#include "io/model_config.h"
#include "kv/state_layout.h"
#include "model/model.h"

namespace deepinfer::engine {

class ModelRunnerV41 : public ModelRunner {
 public:
  // Sees the logits row after each chunk's last token (tests: batch invariance).
  using LogitsObserver =
      std::function<void(const ScheduledChunk& chunk, std::span<const float> logits)>;

  // `model` and `backend` (the one the model was loaded with) must outlive the runner.
  ModelRunnerV41(model::Model* model, model::Backend* backend, int32_t num_slots);

  int vocab_size() const override;
  base::StatusOr<StepOutput> Execute(const StepPlan& plan) override;
  void SetLogitsObserver(LogitsObserver observer) { observer_ = std::move(observer); }

 private:
  model::SequenceState CopyState(const model::SequenceState& src) const;

  model::Model* model_;
  model::Backend* backend_;
  std::vector<std::optional<model::SequenceState>> slots_;
  LogitsObserver observer_;
};

// The kv layout of a model config, in the release's packed formats (kv/state_layout.h).
base::StatusOr<kv::StateLayout> StateLayoutForModel(const io::ModelConfig& config,
                                                    int block_tokens);

}  // namespace deepinfer::engine
