// The plain data the scheduler and a ModelRunner exchange each step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/types.h"
#include "kv/block_pool.h"
#include "kv/state_manager.h"

namespace deepinfer::engine {

// Sample one token after the last position of a chunk for sequence `seq_id`.
struct SampleTarget {
  SeqId seq_id = 0;
  int sample_index = 0;  // 0..n-1 within the request
  uint64_t seed = 0;     // effective seed (request seed or derived from the engine seed)
};

// One sequence's share of a step: the tokens at positions [start_position, start_position +
// tokens.size()). For a decode step tokens.size() == 1.
struct ScheduledChunk {
  RequestId request_id = 0;
  SeqId seq_id = 0;
  kv::SlotId slot = kv::kNoSlot;  // bounded state; reset by the runner if start_position == 0
  int64_t start_position = 0;
  std::vector<TokenId> tokens;
  std::vector<kv::BlockId> block_table;  // covers positions [0, start_position + size)
  // Empty for a non-final prefill chunk; one entry normally; n entries for the chunk that
  // completes the prompt of an n > 1 request (all sampled from the same logits).
  std::vector<SampleTarget> samples;
  // Valid during ModelRunner::Execute (owned by the scheduler).
  const SamplingParams* params = nullptr;
  std::span<const TokenId> prompt;  // the request's prompt (repetition penalty)
  std::span<const TokenId> output;  // tokens generated so far by this sequence (penalties)

  int64_t end_position() const { return start_position + static_cast<int64_t>(tokens.size()); }
};

struct StepPlan {
  int64_t step = 0;
  std::vector<ScheduledChunk> chunks;  // at most one per sequence
  // State copies for forked sequences, applied by the runner AFTER this step's forward.
  std::vector<kv::StateCopy> copies_after;

  int64_t num_tokens() const;
  bool empty() const { return chunks.empty(); }
};

struct SampledToken {
  SeqId seq_id = 0;
  TokenId token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
};

struct StepOutput {
  std::vector<SampledToken> tokens;  // one per SampleTarget of the plan, in plan order
};

inline int64_t StepPlan::num_tokens() const {
  int64_t n = 0;
  for (const ScheduledChunk& c : chunks) n += static_cast<int64_t>(c.tokens.size());
  return n;
}

}  // namespace deepinfer::engine
