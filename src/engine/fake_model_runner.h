// FakeModelRunner: a deterministic stand-in for a model, for tests and scheduler benchmarks.
//
// It simulates V4.1's two kinds of state so that scheduling bugs change the output:
//   * per slot: a running hash of every (position, token) the sequence has seen (like the
//     window rings), reset when a chunk starts at position 0;
//   * per block: the token written at each of its `block_tokens` offsets (like the
//     compressed entries), read back through the block table.
// The logits after a chunk are a hash of (slot hash, hash of the tokens read from the block
// table for positions [0, end)), so a request's outputs depend only on its own tokens — the
// same alone or batched, preempted or not — iff slots, block tables, sharing and fork copies
// are right. Inconsistent plans (slot at the wrong position, table too short) fail the step
// with Internal.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model_runner.h"

namespace deepinfer::engine {

class FakeModelRunner : public ModelRunner {
 public:
  FakeModelRunner(int vocab_size, int32_t num_slots, int32_t num_blocks, int block_tokens);

  int vocab_size() const override { return vocab_size_; }
  base::StatusOr<StepOutput> Execute(const StepPlan& plan) override;

  // The logits a sequence with exactly these tokens gets after its last token.
  std::vector<float> ReferenceLogits(std::span<const TokenId> tokens) const;

  // Makes Execute fail with Internal at this step index (for error-path tests); -1 = never.
  void FailAtStep(int64_t step) { fail_at_step_ = step; }
  int64_t num_executed_steps() const { return num_steps_; }

 private:
  struct Slot {
    uint64_t hash = 0;
    int64_t next_position = 0;
  };
  std::vector<float> Logits(uint64_t slot_hash, uint64_t blocks_hash) const;
  base::Status RunChunk(const ScheduledChunk& chunk, std::vector<float>* logits);

  int vocab_size_;
  int block_tokens_;
  std::vector<Slot> slots_;
  std::vector<std::vector<TokenId>> blocks_;
  int64_t num_steps_ = 0;
  int64_t fail_at_step_ = -1;
};

}  // namespace deepinfer::engine
