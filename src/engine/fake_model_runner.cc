#include "engine/fake_model_runner.h"

#include "engine/sampling.h"
#include "fmt/format.h"

namespace deepinfer::engine {
namespace {

uint64_t SlotStep(uint64_t hash, int64_t position, TokenId token) {
  return Mix64(hash ^
               Mix64((static_cast<uint64_t>(position) << 32) ^ static_cast<uint32_t>(token)));
}

uint64_t BlocksStep(uint64_t hash, TokenId token) {
  return Mix64(hash + static_cast<uint32_t>(token) + 1);
}

}  // namespace

FakeModelRunner::FakeModelRunner(int vocab_size, int32_t num_slots, int32_t num_blocks,
                                 int block_tokens)
    : vocab_size_(vocab_size),
      block_tokens_(block_tokens),
      slots_(static_cast<size_t>(num_slots)),
      blocks_(static_cast<size_t>(num_blocks),
              std::vector<TokenId>(static_cast<size_t>(block_tokens), -1)) {}

std::vector<float> FakeModelRunner::Logits(uint64_t slot_hash, uint64_t blocks_hash) const {
  const uint64_t seed = Mix64(slot_hash ^ Mix64(blocks_hash));
  std::vector<float> logits(static_cast<size_t>(vocab_size_));
  for (int v = 0; v < vocab_size_; ++v) {
    // Uniform in [0, 8): peaked enough that sampling at temperature 1 is not uniform.
    logits[static_cast<size_t>(v)] =
        static_cast<float>(Mix64(seed + static_cast<uint64_t>(v)) >> 40) * 0x1.0p-21f;
  }
  return logits;
}

std::vector<float> FakeModelRunner::ReferenceLogits(std::span<const TokenId> tokens) const {
  uint64_t slot_hash = 0;
  uint64_t blocks_hash = 0;
  for (size_t p = 0; p < tokens.size(); ++p) {
    slot_hash = SlotStep(slot_hash, static_cast<int64_t>(p), tokens[p]);
    blocks_hash = BlocksStep(blocks_hash, tokens[p]);
  }
  return Logits(slot_hash, blocks_hash);
}

base::Status FakeModelRunner::RunChunk(const ScheduledChunk& chunk, std::vector<float>* logits) {
  if (chunk.slot < 0 || static_cast<size_t>(chunk.slot) >= slots_.size()) {
    return base::InternalError(
        fmt::format("sequence {}: slot {} out of range", chunk.seq_id, chunk.slot));
  }
  Slot& slot = slots_[static_cast<size_t>(chunk.slot)];
  if (chunk.start_position == 0) slot = Slot{};
  if (slot.next_position != chunk.start_position) {
    return base::InternalError(
        fmt::format("sequence {}: slot {} holds {} tokens, chunk starts at {}", chunk.seq_id,
                    chunk.slot, slot.next_position, chunk.start_position));
  }
  const int64_t end = chunk.end_position();
  if (static_cast<int64_t>(chunk.block_table.size()) * block_tokens_ < end) {
    return base::InternalError(
        fmt::format("sequence {}: block table of {} blocks cannot hold {} tokens", chunk.seq_id,
                    chunk.block_table.size(), end));
  }
  for (int64_t p = chunk.start_position; p < end; ++p) {
    const TokenId token = chunk.tokens[static_cast<size_t>(p - chunk.start_position)];
    slot.hash = SlotStep(slot.hash, p, token);
    const kv::BlockId b = chunk.block_table[static_cast<size_t>(p / block_tokens_)];
    blocks_[static_cast<size_t>(b)][static_cast<size_t>(p % block_tokens_)] = token;
  }
  slot.next_position = end;
  if (chunk.samples.empty()) return base::Status::Ok();
  uint64_t blocks_hash = 0;
  for (int64_t p = 0; p < end; ++p) {
    const kv::BlockId b = chunk.block_table[static_cast<size_t>(p / block_tokens_)];
    blocks_hash = BlocksStep(
        blocks_hash, blocks_[static_cast<size_t>(b)][static_cast<size_t>(p % block_tokens_)]);
  }
  *logits = Logits(slot.hash, blocks_hash);
  return base::Status::Ok();
}

base::StatusOr<StepOutput> FakeModelRunner::Execute(const StepPlan& plan) {
  if (num_steps_++ == fail_at_step_) return base::InternalError("injected step failure");
  StepOutput out;
  std::vector<float> logits;
  for (const ScheduledChunk& chunk : plan.chunks) {
    DI_RETURN_IF_ERROR(RunChunk(chunk, &logits));
    for (const SampleTarget& target : chunk.samples) {
      SampleContext ctx{target.seed, target.sample_index, chunk.end_position(), chunk.prompt,
                        chunk.output};
      Sampled s = SampleToken(logits, *chunk.params, ctx);
      out.tokens.push_back({target.seq_id, s.token, s.logprob, std::move(s.top_logprobs)});
    }
  }
  for (const kv::StateCopy& copy : plan.copies_after) {
    slots_[static_cast<size_t>(copy.dst_slot)] = slots_[static_cast<size_t>(copy.src_slot)];
    if (copy.dst_block != kv::kNoBlock) {
      blocks_[static_cast<size_t>(copy.dst_block)] = blocks_[static_cast<size_t>(copy.src_block)];
    }
  }
  return out;
}

}  // namespace deepinfer::engine
