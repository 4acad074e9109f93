#include "engine/model_runner_v41.h"

#include "engine/sampling.h"
#include "fmt/format.h"

namespace deepinfer::engine {

ModelRunnerV41::ModelRunnerV41(model::Model* model, model::Backend* backend, int32_t num_slots)
    : model_(model), backend_(backend), slots_(static_cast<size_t>(num_slots)) {}

int ModelRunnerV41::vocab_size() const {
  return static_cast<int>(model_->config().text_config.vocab_size);
}

model::SequenceState ModelRunnerV41::CopyState(const model::SequenceState& src) const {
  const auto copy_floats = [this](const model::DeviceFloats& a) {
    model::DeviceFloats b;
    if (a.size() > 0) {
      b = model::DeviceFloats(backend_, a.size());
      backend_->CopyDevice(b.data(), a.data(), a.size() * static_cast<int64_t>(sizeof(float)));
    }
    return b;
  };
  const auto copy_rows = [this](const model::DeviceRows& a) {
    model::DeviceRows b(backend_, a.width());
    b.Append(a.data(), a.rows());
    return b;
  };
  model::SequenceState dst;
  dst.length = src.length;
  dst.recent_tokens = src.recent_tokens;
  for (const model::WindowRing& w : src.windows) {
    dst.windows.push_back({copy_floats(w.kv), w.pos});
  }
  for (const model::KvGroupState& g : src.groups) {
    model::KvGroupState c;
    c.source_layer = g.source_layer;
    c.ratio = g.ratio;
    c.entries = copy_rows(g.entries);
    c.index_keys = copy_rows(g.index_keys);
    c.pending_c = copy_floats(g.pending_c);
    c.pending_z = copy_floats(g.pending_z);
    c.n_pending = g.n_pending;
    dst.groups.push_back(std::move(c));
  }
  return dst;
}

base::StatusOr<StepOutput> ModelRunnerV41::Execute(const StepPlan& plan) {
  model::ForwardBatch batch;
  for (const ScheduledChunk& chunk : plan.chunks) {
    if (chunk.slot < 0 || static_cast<size_t>(chunk.slot) >= slots_.size()) {
      return base::InternalError(
          fmt::format("sequence {}: slot {} out of range", chunk.seq_id, chunk.slot));
    }
    std::optional<model::SequenceState>& state = slots_[static_cast<size_t>(chunk.slot)];
    if (chunk.start_position == 0) state = model_->NewSequence();
    if (!state.has_value() || state->length != chunk.start_position) {
      return base::InternalError(
          fmt::format("sequence {}: slot {} holds {} tokens, chunk starts at {}", chunk.seq_id,
                      chunk.slot, state ? state->length : -1, chunk.start_position));
    }
    batch.chunks.push_back({&*state, chunk.tokens, chunk.start_position, false});
  }
  DI_ASSIGN_OR_RETURN(model::ForwardOutput forward, model_->Forward(batch));
  if (forward.rows != static_cast<int64_t>(plan.chunks.size()) || forward.vocab != vocab_size()) {
    return base::InternalError(fmt::format("model returned {} x {} logits for {} chunks",
                                           forward.rows, forward.vocab, plan.chunks.size()));
  }
  StepOutput out;
  for (size_t i = 0; i < plan.chunks.size(); ++i) {
    const ScheduledChunk& chunk = plan.chunks[i];
    const std::span<const float> logits(
        forward.logits.data() + i * static_cast<size_t>(forward.vocab),
        static_cast<size_t>(forward.vocab));
    if (observer_) observer_(chunk, logits);
    for (const SampleTarget& target : chunk.samples) {
      const SampleContext ctx{target.seed, target.sample_index, chunk.end_position(), chunk.prompt,
                              chunk.output};
      Sampled s = SampleToken(logits, *chunk.params, ctx);
      out.tokens.push_back({target.seq_id, s.token, s.logprob, std::move(s.top_logprobs)});
    }
  }
  for (const kv::StateCopy& copy : plan.copies_after) {
    const auto& src = slots_[static_cast<size_t>(copy.src_slot)];
    if (!src.has_value()) return base::InternalError("fork from an empty slot");
    slots_[static_cast<size_t>(copy.dst_slot)] = CopyState(*src);
  }
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
