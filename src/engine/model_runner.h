// ModelRunner: executes one scheduler step on some model + backend.
//
// Contract of Execute(plan):
//   * for each chunk, run the model on its tokens at their positions, reading and extending
//     the sequence's state (slot + blocks of block_table); a chunk starting at position 0
//     starts from an empty state (reset the slot);
//   * for each SampleTarget, sample one token from the logits after the chunk's last token
//     with engine/sampling.h (params, prompt, output, seed, sample_index, position =
//     chunk.end_position()), so results do not depend on the batch composition;
//   * then apply plan.copies_after (slot copy + optional partial-block copy);
//   * return one SampledToken per SampleTarget, in plan order.
// Chunks of one plan touch disjoint slots and never write to blocks shared by several
// sequences (complete blocks are immutable). An error fails the whole step.
#pragma once

#include "base/statusor.h"
#include "engine/step.h"

namespace deepinfer::engine {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual int vocab_size() const = 0;
  virtual base::StatusOr<StepOutput> Execute(const StepPlan& plan) = 0;
};

}  // namespace deepinfer::engine
