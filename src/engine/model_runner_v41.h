// ModelRunnerV41: executes StepPlans on the V4.1 model (model::Model over any backend).
//
// State: each scheduler slot maps to a model::SequenceState holding the small mutable part
// (window rings, partial-group buffers, Engram history). The compressed KV entries and index
// keys live in this runner's block pool: `num_blocks` fixed-size blocks of backend memory,
// block id b = the kv::BlockId the scheduler's StateManager allocated (each block's memory is
// allocated on first use and reused after). Before the forward, each chunk's block table
// (ids) is turned into block base pointers in its SequenceState (model/state.h StateBlocks),
// so a block the StateManager shares between sequences (n > 1 forks, later a prefix cache)
// is one piece of memory read by all of them. A chunk at position 0 starts a fresh state.
// copies_after (forks) copy the slot's mutable part and the partial last block only.
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
  // Sees the logits row after each chunk's last token (tests: batch invariance). Without an
  // observer, a chunk that samples nothing runs no head, and a chunk whose samples are all
  // plain greedy (IsPlainGreedy) has its argmax taken on the backend (ids, not logits, are
  // copied back).
  using LogitsObserver =
      std::function<void(const ScheduledChunk& chunk, std::span<const float> logits)>;

  // `model` and `backend` (the one the model was loaded with) must outlive the runner.
  // `block_tokens` and `num_blocks` must equal the engine's kv layout / pool (CHECKs that
  // block_tokens is valid for the model: model::Model::StateBlockFloats).
  ModelRunnerV41(model::Model* model, model::Backend* backend, int32_t num_slots, int block_tokens,
                 int32_t num_blocks);

  int vocab_size() const override;
  base::StatusOr<StepOutput> Execute(const StepPlan& plan) override;
  void SetLogitsObserver(LogitsObserver observer) { observer_ = std::move(observer); }

  int block_tokens() const { return block_tokens_; }
  int64_t block_floats() const { return block_floats_; }
  // Blocks whose memory has been allocated so far (<= num_blocks).
  int32_t num_materialized_blocks() const;

 private:
  float* BlockData(kv::BlockId id);
  base::Status MapBlocks(const ScheduledChunk& chunk, model::SequenceState& state);
  base::Status ApplyCopy(const kv::StateCopy& copy);
  model::SequenceState CopyMutableState(const model::SequenceState& src) const;
  // What the model returns for `chunk` (see SetLogitsObserver).
  model::ChunkOutput OutputFor(const ScheduledChunk& chunk) const;

  model::Model* model_;
  model::Backend* backend_;
  int block_tokens_;
  int64_t block_floats_ = 0;
  std::vector<model::DeviceFloats> blocks_;  // by BlockId; empty until first use
  std::vector<std::optional<model::SequenceState>> slots_;
  LogitsObserver observer_;
  // The logits rows of a step (page-locked on a GPU), reused between steps.
  model::HostFloats host_logits_{backend_};
};

// The kv layout of a model config, in the release's packed formats (kv/state_layout.h).
base::StatusOr<kv::StateLayout> StateLayoutForModel(const io::ModelConfig& config,
                                                    int block_tokens);

}  // namespace deepinfer::engine
