#include "engine/model_runner_v41.h"

#include <algorithm>

#include "base/check.h"
#include "base/thread_pool.h"
#include "engine/sampling.h"
#include "fmt/format.h"

namespace deepinfer::engine {

ModelRunnerV41::ModelRunnerV41(model::Model* model, model::Backend* backend, int32_t num_slots,
                               int block_tokens, int32_t num_blocks)
    : model_(model),
      backend_(backend),
      block_tokens_(block_tokens),
      blocks_(static_cast<size_t>(std::max(num_blocks, 0))),
      slots_(static_cast<size_t>(num_slots)) {
  auto floats = model_->StateBlockFloats(block_tokens);
  CHECK(floats.ok()) << floats.status();
  block_floats_ = *floats;
}

int ModelRunnerV41::vocab_size() const {
  return static_cast<int>(model_->config().text_config.vocab_size);
}

int32_t ModelRunnerV41::num_materialized_blocks() const {
  int32_t n = 0;
  for (const model::DeviceFloats& b : blocks_) n += b.size() > 0 ? 1 : 0;
  return n;
}

float* ModelRunnerV41::BlockData(kv::BlockId id) {
  if (id < 0 || static_cast<size_t>(id) >= blocks_.size()) return nullptr;
  model::DeviceFloats& block = blocks_[static_cast<size_t>(id)];
  if (block.size() == 0) block = model::DeviceFloats(backend_, block_floats_);
  return block.data();
}

base::Status ModelRunnerV41::MapBlocks(const ScheduledChunk& chunk, model::SequenceState& state) {
  std::vector<float*>& table = state.blocks.table;
  table.clear();
  for (kv::BlockId id : chunk.block_table) {
    float* data = BlockData(id);
    if (data == nullptr) {
      return base::InternalError(fmt::format("sequence {}: block {} outside the pool of {}",
                                             chunk.seq_id, id, blocks_.size()));
    }
    table.push_back(data);
  }
  return base::Status::Ok();
}

// Everything but the blocks: window rings, partial-group buffers, counts, Engram history.
model::SequenceState ModelRunnerV41::CopyMutableState(const model::SequenceState& src) const {
  const auto copy_floats = [this](const model::DeviceFloats& a) {
    model::DeviceFloats b;
    if (a.size() > 0) {
      b = model::DeviceFloats(backend_, a.size());
      backend_->CopyDevice(b.data(), a.data(), a.size() * static_cast<int64_t>(sizeof(float)));
    }
    return b;
  };
  model::SequenceState dst;
  dst.length = src.length;
  dst.recent_tokens = src.recent_tokens;
  for (const model::WindowRing& w : src.windows) {
    dst.windows.push_back({copy_floats(w.kv), w.pos});
  }
  for (const model::KvGroupState& g : src.groups) {
    model::KvGroupState c = {.source_layer = g.source_layer,
                             .ratio = g.ratio,
                             .entries_per_block = g.entries_per_block,
                             .entry_offset = g.entry_offset,
                             .key_offset = g.key_offset,
                             .has_keys = g.has_keys,
                             .entry_count = g.entry_count,
                             .pending_c = copy_floats(g.pending_c),
                             .pending_z = copy_floats(g.pending_z),
                             .n_pending = g.n_pending};
    dst.groups.push_back(std::move(c));
  }
  dst.blocks.block_tokens = src.blocks.block_tokens;
  dst.blocks.block_floats = src.blocks.block_floats;
  dst.blocks.self_allocating = false;
  return dst;
}

// A fork: the child shares the parent's complete blocks (its block table, refcounted by the
// StateManager, already names them); only the mutable state and the partial last block are
// copied. The child's table is mapped from its own block table at its next chunk.
base::Status ModelRunnerV41::ApplyCopy(const kv::StateCopy& copy) {
  const auto in_range = [this](kv::SlotId s) {
    return s >= 0 && static_cast<size_t>(s) < slots_.size();
  };
  if (!in_range(copy.src_slot) || !in_range(copy.dst_slot)) {
    return base::InternalError(
        fmt::format("fork from slot {} to slot {}: out of range", copy.src_slot, copy.dst_slot));
  }
  const auto& src = slots_[static_cast<size_t>(copy.src_slot)];
  if (!src.has_value()) return base::InternalError("fork from an empty slot");
  if (copy.dst_block != kv::kNoBlock) {
    const float* from = BlockData(copy.src_block);
    float* to = BlockData(copy.dst_block);
    if (from == nullptr || to == nullptr) {
      return base::InternalError(fmt::format("fork copies block {} to {}: outside the pool of {}",
                                             copy.src_block, copy.dst_block, blocks_.size()));
    }
    backend_->CopyDevice(to, from, block_floats_ * static_cast<int64_t>(sizeof(float)));
  }
  slots_[static_cast<size_t>(copy.dst_slot)] = CopyMutableState(*src);
  return base::Status::Ok();
}

model::ChunkOutput ModelRunnerV41::OutputFor(const ScheduledChunk& chunk) const {
  if (observer_) return model::ChunkOutput::kLogits;
  if (chunk.samples.empty()) return model::ChunkOutput::kNothing;
  return IsPlainGreedy(*chunk.params) ? model::ChunkOutput::kGreedyToken
                                      : model::ChunkOutput::kLogits;
}

base::StatusOr<StepOutput> ModelRunnerV41::Execute(const StepPlan& plan) {
  model::ForwardBatch batch;
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.slot < 0 || static_cast<size_t>(chunk.slot) >= slots_.size()) {
      return base::InternalError(
          fmt::format("sequence {}: slot {} out of range", chunk.seq_id, chunk.slot));
    }
    std::optional<model::SequenceState>& state = slots_[static_cast<size_t>(chunk.slot)];
    if (chunk.start_position == 0) {
      DI_ASSIGN_OR_RETURN(state, model_->NewPagedSequence(block_tokens_));
    }
    if (!state.has_value() || state->length != chunk.start_position) {
      return base::InternalError(
          fmt::format("sequence {}: slot {} holds {} tokens, chunk starts at {}", chunk.seq_id,
                      chunk.slot, state ? state->length : -1, chunk.start_position));
    }
    DI_RETURN_IF_ERROR(MapBlocks(chunk, *state));
    batch.chunks.push_back({&*state, chunk.tokens, chunk.start_position, false, OutputFor(chunk)});
  }
  int64_t logits_rows = 0;
  for (const model::ForwardChunk& c : batch.chunks) {
    logits_rows += c.output == model::ChunkOutput::kLogits ? 1 : 0;
  }
  if (logits_rows > 0) {
    batch.logits_out = host_logits_.Reserve(logits_rows * vocab_size());
    batch.logits_capacity = batch.logits_out != nullptr ? host_logits_.capacity() : 0;
  }
  DI_ASSIGN_OR_RETURN(model::ForwardOutput forward, model_->Forward(batch));
  const float* logits_base = forward.logits.empty() && batch.logits_out != nullptr
                                 ? batch.logits_out
                                 : forward.logits.data();
  if (forward.rows != logits_rows || forward.vocab != vocab_size() ||
      forward.tokens.size() != plan.chunks.size()) {
    return base::InternalError(
        fmt::format("model returned {} x {} logits and {} tokens for {} chunks", forward.rows,
                    forward.vocab, forward.tokens.size(), plan.chunks.size()));
  }
  // Plan order: out.tokens[i] is the i-th SampleTarget of the plan. The observer sees each
  // chunk's logits on this thread in chunk order; the rows are then sampled in parallel
  // (SampleToken is a pure, thread-safe function of its row and context).
  struct SampleJob {
    std::span<const float> logits;
    const ScheduledChunk* chunk;
    const SampleTarget* target;
    size_t index;  // into out.tokens
  };
  StepOutput out;
  std::vector<SampleJob> jobs;
  int64_t row = 0;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& chunk = plan.chunks[i];
    if (batch.chunks[i].output == model::ChunkOutput::kGreedyToken) {
      // Every target of the chunk is plain greedy: the argmax is the whole of SampleToken.
      for (const SampleTarget& target : chunk.samples) {
        out.tokens.push_back({target.seq_id, forward.tokens[i], 0.0f, {}});
      }
      continue;
    }
    if (batch.chunks[i].output == model::ChunkOutput::kNothing) continue;
    const std::span<const float> logits(logits_base + row++ * static_cast<size_t>(forward.vocab),
                                        static_cast<size_t>(forward.vocab));
    if (observer_) observer_(chunk, logits);
    for (const SampleTarget& target : chunk.samples) {
      jobs.push_back({logits, &chunk, &target, out.tokens.size()});
      out.tokens.push_back({target.seq_id, 0, 0.0f, {}});
    }
  }
  base::ThreadPool::Default().ParallelFor(
      static_cast<int64_t>(jobs.size()), 1, [&](int64_t begin, int64_t end) {
        for (int64_t j = begin; j < end; ++j) {
          const SampleJob& job = jobs[static_cast<size_t>(j)];
          const ScheduledChunk& chunk = *job.chunk;
          const SampleContext ctx{job.target->seed, job.target->sample_index, chunk.end_position(),
                                  chunk.prompt, chunk.output};
          Sampled s = SampleToken(job.logits, *chunk.params, ctx);
          SampledToken& token = out.tokens[job.index];
          token.token = s.token;
          token.logprob = s.logprob;
          token.top_logprobs = std::move(s.top_logprobs);
        }
      });
  model_->Recycle(std::move(forward));
  for (const kv::StateCopy& copy : plan.copies_after) DI_RETURN_IF_ERROR(ApplyCopy(copy));
  return out;
}

base::StatusOr<kv::StateLayout> StateLayoutForModel(const io::ModelConfig& config,
                                                    int block_tokens) {
  const io::TextConfig& t = config.text_config;
  kv::StateLayoutConfig c;
  c.num_hidden_layers = t.num_hidden_layers;
  c.num_draft_layers = 0;  // DSpark is not run by the engine yet
  c.sliding_window = static_cast<int>(t.sliding_window);
  c.head_dim = static_cast<int>(t.head_dim);
  c.index_head_dim = static_cast<int>(t.index_head_dim);
  c.compress_ratios = t.compress_ratios;
  c.kv_source_layer_ids = t.kv_source_layer_ids;
  c.engram_max_ngram_size = t.engram_layer_ids.empty() ? 0 : t.engram_max_ngram_size;
  return kv::MakePackedStateLayout(c, block_tokens);
}

}  // namespace deepinfer::engine
