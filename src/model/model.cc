#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <numeric>
#include <string>

#include "base/check.h"
#include "base/logging.h"
#include "model/model_internal.h"
#include "model/state_blocks.h"

namespace deepinfer::model {

using base::Status;
using base::StatusOr;

namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

std::vector<float> RopeInvFreq(int64_t rope_dim, double theta, const io::RopeScaling* yarn) {
  const int64_t half = rope_dim / 2;
  std::vector<float> pos_freq(half), inv(half);
  for (int64_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rope_dim);
    pos_freq[i] = std::pow(static_cast<float>(theta), exponent);
    inv[i] = 1.0f / pos_freq[i];
  }
  if (yarn == nullptr || yarn->rope_type != "yarn") return inv;
  const double L0 = static_cast<double>(yarn->original_max_position_embeddings);
  auto correction_dim = [&](double beta) {
    return static_cast<double>(rope_dim) * std::log(L0 / (beta * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
  };
  double low = std::max(std::floor(correction_dim(yarn->beta_fast)), 0.0);
  double high =
      std::min(std::ceil(correction_dim(yarn->beta_slow)), static_cast<double>(rope_dim - 1));
  if (low == high) high += 0.001;
  const float factor = static_cast<float>(yarn->factor);
  for (int64_t i = 0; i < half; ++i) {
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) /
                 (static_cast<float>(high) - static_cast<float>(low));
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrapolation = 1.0f - ramp;
    const float inv_interp = 1.0f / (factor * pos_freq[i]);
    inv[i] = inv_interp * (1.0f - extrapolation) + inv[i] * extrapolation;
  }
  return inv;
}

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Load(const std::filesystem::path& dir, Backend* backend,
                                             std::optional<EngramHashConstants> engram) {
  std::unique_ptr<Model> m(new Model());
  m->backend_ = backend;
  DI_ASSIGN_OR_RETURN(m->config_, io::LoadModelConfig(dir / "config.json"));
  const io::TextConfig& t = m->config_.text();
  if (t.scoring_func != "sqrtsoftplus") {
    return base::UnimplementedError("scoring_func '" + t.scoring_func + "' is not supported");
  }
  DI_ASSIGN_OR_RETURN(m->checkpoint_, io::Checkpoint::Open(dir));
  LOG_INFO("binding {} tensors of {}", m->checkpoint_->num_tensors(), dir.string());
  DI_ASSIGN_OR_RETURN(m->weights_, BindWeights(*m->checkpoint_, m->config_, backend));
  if (!t.engram_layer_ids.empty()) {
    if (!engram.has_value()) {
      return base::InvalidArgumentError("config has Engram layers but no hash constants given");
    }
    DI_RETURN_IF_ERROR(ValidateEngramHashConstants(
        *engram, static_cast<int>(t.engram_layer_ids.size()), t.engram_max_ngram_size,
        t.engram_n_heads, t.engram_num_embeddings));
    if (static_cast<int64_t>(engram->token_map.size()) < t.vocab_size) {
      return base::InvalidArgumentError("Engram token_map shorter than vocab_size");
    }
    m->engram_hash_ = std::move(engram);
    std::vector<WeightRef> tables;
    for (int l : t.engram_layer_ids) tables.push_back(m->weights_->layers[l].engram->table);
    m->engram_table_ = std::make_unique<LocalEngramTable>(backend, std::move(tables));
  }
  m->dispatcher_ = std::make_unique<LocalExpertDispatcher>(backend);
  MoeOptions moe;
  moe.top_k = t.num_experts_per_tok;
  moe.renormalise = t.norm_topk_prob;
  moe.routed_scale = static_cast<float>(t.routed_scaling_factor);
  moe.swiglu_limit = static_cast<float>(t.swiglu_limit);
  moe.gate_temp = static_cast<float>(t.gate_temp);
  if (!(moe.gate_temp > 0.0f)) return base::InvalidArgumentError("gate_temp must be > 0");
  m->moe_ = std::make_unique<MoeLayer>(backend, m->dispatcher_.get(), moe);
  m->main_inv_freq_ = RopeInvFreq(t.qk_rope_head_dim, t.rope_theta, nullptr);
  m->compress_inv_freq_ = RopeInvFreq(t.qk_rope_head_dim, t.compress_rope_theta, &t.rope_scaling);
  return m;
}

StatusOr<int64_t> Model::StateBlockFloats(int block_tokens) const {
  const io::TextConfig& t = config_.text();
  if (block_tokens <= 0) {
    return base::InvalidArgumentError("block_tokens " + std::to_string(block_tokens) +
                                      " must be positive");
  }
  int64_t floats = 0;
  for (int src : t.kv_source_layer_ids) {
    const int ratio = config_.CompressRatio(src);
    if (ratio <= 0 || block_tokens % ratio != 0) {
      return base::InvalidArgumentError("block_tokens " + std::to_string(block_tokens) +
                                        " is not a multiple of the compress ratio " +
                                        std::to_string(ratio) + " of layer " + std::to_string(src));
    }
    const bool keys = weights_->layers[src].attn.idx_wk.valid();
    floats += (block_tokens / ratio) * (t.head_dim + (keys ? t.index_head_dim : 0));
  }
  return std::max<int64_t>(floats, 1);
}

int Model::DefaultBlockTokens() const {
  int64_t lcm = 1;
  for (int src : config_.text().kv_source_layer_ids) {
    lcm = std::lcm(lcm, static_cast<int64_t>(std::max(config_.CompressRatio(src), 1)));
  }
  return static_cast<int>(lcm * ((16 + lcm - 1) / lcm));
}

SequenceState Model::NewSequence() const {
  return NewSequenceWithBlocks(DefaultBlockTokens(), /*self_allocating=*/true);
}

StatusOr<SequenceState> Model::NewPagedSequence(int block_tokens) const {
  DI_RETURN_IF_ERROR(StateBlockFloats(block_tokens).status());
  return NewSequenceWithBlocks(block_tokens, /*self_allocating=*/false);
}

SequenceState Model::NewSequenceWithBlocks(int block_tokens, bool self_allocating) const {
  const io::TextConfig& t = config_.text();
  SequenceState s;
  s.windows.resize(t.num_hidden_layers);
  for (WindowRing& w : s.windows) {
    w.kv = DeviceFloats(backend_, t.sliding_window * t.head_dim);
    w.pos.assign(t.sliding_window, -1);
  }
  int64_t offset = 0;
  for (int src : t.kv_source_layer_ids) {
    KvGroupState g;
    g.source_layer = src;
    g.ratio = config_.CompressRatio(src);
    g.entries_per_block = block_tokens / std::max(g.ratio, 1);
    g.has_keys = weights_->layers[src].attn.idx_wk.valid();
    g.entry_offset = offset;
    offset += g.entries_per_block * t.head_dim;
    g.key_offset = offset;
    if (g.has_keys) offset += g.entries_per_block * t.index_head_dim;
    g.pending_c = DeviceFloats(backend_, std::max(g.ratio - 1, 1) * t.head_dim);
    g.pending_z = DeviceFloats(backend_, std::max(g.ratio - 1, 1) * t.head_dim);
    s.groups.push_back(std::move(g));
  }
  s.blocks.block_tokens = block_tokens;
  s.blocks.block_floats = std::max<int64_t>(offset, 1);
  s.blocks.self_allocating = self_allocating;
  return s;
}

Status Model::ValidateBatch(const ForwardBatch& batch) const {
  const int64_t vocab = config_.text().vocab_size;
  for (const ForwardChunk& chunk : batch.chunks) {
    if (chunk.state == nullptr) return base::InvalidArgumentError("forward chunk without state");
    if (chunk.start_pos != chunk.state->length) {
      return base::InvalidArgumentError("forward chunk starts at position " +
                                        std::to_string(chunk.start_pos) + " but the sequence has " +
                                        std::to_string(chunk.state->length) + " tokens");
    }
    if (chunk.tokens.empty()) return base::InvalidArgumentError("empty forward chunk");
    if (chunk.all_logits && chunk.output != ChunkOutput::kLogits) {
      return base::InvalidArgumentError("all_logits on a chunk that returns no logits");
    }
    if (chunk.state->length + static_cast<int64_t>(chunk.tokens.size()) >
        std::min<int64_t>(config_.text().max_position_embeddings, int64_t{1} << 30)) {
      return base::OutOfRangeError("sequence longer than max_position_embeddings");
    }
    for (int32_t id : chunk.tokens) {
      if (id < 0 || id >= vocab) {
        return base::InvalidArgumentError("token id " + std::to_string(id) +
                                          " outside the vocabulary of " + std::to_string(vocab));
      }
    }
  }
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (batch.chunks[i].state == batch.chunks[j].state) {
        return base::InvalidArgumentError("two chunks of one batch share a sequence state");
      }
    }
  }
  return Status::Ok();
}

StatusOr<ForwardOutput> Model::Forward(const ForwardBatch& batch) {
  forward_start_ = std::chrono::steady_clock::now();
  ForwardOutput out;
  out.vocab = config_.text().vocab_size;
  out.logits = std::move(spare_logits_);  // recycled storage: size set in Logits
  spare_logits_ = {};
  // Validate every chunk before touching any state, so a bad batch changes nothing.
  DI_RETURN_IF_ERROR(ValidateBatch(batch));
  for (const ForwardChunk& chunk : batch.chunks) {
    DI_RETURN_IF_ERROR(
        EnsureBlocks(backend_, chunk.state->blocks,
                     chunk.state->length + static_cast<int64_t>(chunk.tokens.size())));
  }
  HostPhase("validate+blocks");
  if (batch.chunks.empty()) {
    out.logits.clear();
  } else {
    ForwardAll(batch, &out);  // sizes out.logits (Logits)
  }
  // Ops report nothing themselves; an asynchronous backend (CUDA) surfaces its first error
  // here, so a failed step never returns plausible-looking logits.
  DI_RETURN_IF_ERROR(
      backend_->Synchronize().WithContext("backend " + std::string(backend_->name())));
  HostPhase("synchronize");
  if (host_profile_) {
    std::string line;
    for (const auto& [label, ms] : host_phases_) line += fmt::format(" {} {:.2f}", label, ms);
    LOG_INFO("forward host ms (cumulative):{}", line);
    host_phases_.clear();
  }
  return out;
}

void Model::HostPhase(const char* label) {
  if (!host_profile_) return;
  host_phases_.emplace_back(label, std::chrono::duration<double, std::milli>(
                                       std::chrono::steady_clock::now() - forward_start_)
                                       .count());
}

void Model::Emit(const std::string& name, const float* data, int64_t rows, int64_t cols) {
  if (!trace_) return;
  std::vector<float> host(rows * cols);
  backend_->CopyToHost(host.data(), data, rows * cols * sizeof(float));
  trace_(name, host.data(), rows, cols);
}

void Model::EngramLayer(int layer, BatchContext& b) {
  const io::TextConfig& t = config_.text();
  const EngramWeights& w = *weights_->layers[layer].engram;
  const int idx = config_.EngramIndex(layer);
  const int64_t T = b.rows, D = t.hidden_size, hc = t.hc_mult;
  const int64_t cols = engram_hash_->columns(), n_layers = engram_hash_->n_layers;
  std::vector<int64_t> ids(T * cols);
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t c = 0; c < cols; ++c) {
      ids[i * cols + c] = b.engram_ids[(i * n_layers + idx) * cols + c];
    }
  }
  DeviceFloats rows(backend_, T * cols * t.engram_head_dim);
  engram_table_->Gather(idx, ids.data(), T * cols, rows.data());
  const int64_t K = cols * t.engram_head_dim;
  DeviceFloats key(backend_, T * hc * D), value(backend_, T * D);
  const LinearOut key_value[] = {{&w.wkv, 0, hc * D, key.data(), hc * D, false},
                                 {&w.wkv, hc * D, D, value.data(), D, false}};
  backend_->LinearMany(rows.data(), T, K, key_value, 2);
  backend_->EngramGate(b.x.data(), key.data(), value.data(), w.q_weight.data(), w.k_weight.data(),
                       T, hc, D, static_cast<float>(t.rms_norm_eps));
  Emit("layers." + std::to_string(layer) + ".engram_out", b.x.data(), T, hc * D);
}

// Positions, embeddings (expanded to hc identical streams) and Engram ids of every row.
void Model::StartBatch(const ForwardBatch& batch, BatchContext& b) {
  const io::TextConfig& t = config_.text();
  const int64_t D = t.hidden_size, hc = t.hc_mult;
  std::vector<int32_t> all_pos;
  std::vector<int64_t> ids;
  for (const ForwardChunk& chunk : batch.chunks) {
    ChunkContext c;
    c.state = chunk.state;
    c.T = static_cast<int64_t>(chunk.tokens.size());
    c.row0 = b.rows;
    for (int64_t i = 0; i < c.T; ++i)
      c.host_pos.push_back(static_cast<int32_t>(chunk.start_pos + i));
    all_pos.insert(all_pos.end(), c.host_pos.begin(), c.host_pos.end());
    ids.insert(ids.end(), chunk.tokens.begin(), chunk.tokens.end());
    if (engram_hash_) {
      std::vector<int64_t> chunk_ids;
      ComputeEngramRowIds(*engram_hash_, chunk.state->recent_tokens, chunk.tokens, &chunk_ids);
      b.engram_ids.insert(b.engram_ids.end(), chunk_ids.begin(), chunk_ids.end());
    }
    b.rows += c.T;
    b.chunks.push_back(std::move(c));
  }
  b.pos = DeviceInts(backend_, b.rows);
  backend_->CopyToDevice(b.pos.data(), all_pos.data(), b.rows * sizeof(int32_t));
  for (ChunkContext& c : b.chunks) c.pos = b.pos.data() + c.row0;

  DeviceFloats e(backend_, b.rows * D);
  backend_->GatherRows(weights_->embed, ids.data(), b.rows, e.data());
  // x viewed as [rows * hc, D]: row (i, k) is a copy of embedding row i.
  std::vector<int32_t> expand(b.rows * hc);
  for (int64_t i = 0; i < b.rows * hc; ++i) expand[i] = static_cast<int32_t>(i / hc);
  b.x = DeviceFloats(backend_, b.rows * hc * D);
  backend_->GatherTokenRows(e.data(), D, expand.data(), b.rows * hc, D, b.x.data());
}

// The head over each chunk's last row (or all its rows): one GEMM for the whole batch. Head
// rows are the kLogits chunks' rows (chunk order), then one row per kGreedyToken chunk,
// whose argmax is taken on the backend so that only its id is copied back.
void Model::Logits(const ForwardBatch& batch, BatchContext& b, const float* h, ForwardOutput* out) {
  const io::TextConfig& t = config_.text();
  const int64_t D = t.hidden_size, V = t.vocab_size;
  std::vector<int32_t> rows;
  std::vector<size_t> greedy_chunks;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    if (batch.chunks[i].output != ChunkOutput::kLogits) continue;
    const ChunkContext& c = b.chunks[i];
    const int64_t n = batch.chunks[i].all_logits ? c.T : 1;
    for (int64_t r = c.row0 + c.T - n; r < c.row0 + c.T; ++r)
      rows.push_back(static_cast<int32_t>(r));
  }
  const int64_t n_logits = static_cast<int64_t>(rows.size());
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    if (batch.chunks[i].output != ChunkOutput::kGreedyToken) continue;
    rows.push_back(static_cast<int32_t>(b.chunks[i].row0 + b.chunks[i].T - 1));
    greedy_chunks.push_back(i);
  }
  out->tokens.assign(batch.chunks.size(), -1);
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) {
    out->logits.clear();
    out->host_issue_seconds = SecondsSince(forward_start_);
    return;
  }
  DeviceFloats picked(backend_, n * D);
  backend_->GatherTokenRows(h, D, rows.data(), n, D, picked.data());
  DeviceFloats logits(backend_, n * V);
  backend_->Linear(picked.data(), n, D, weights_->head, 0, V, logits.data(), V);
  const int64_t n_greedy = n - n_logits;
  DeviceInts greedy(backend_, std::max<int64_t>(n_greedy, 1));
  if (n_greedy > 0) {
    backend_->ArgmaxRows(logits.data() + n_logits * V, n_greedy, V, V, greedy.data());
  }
  // The rows go to the caller's buffer when it is large enough, else to out->logits, whose
  // recycled storage is reused without zero-filling (every float is overwritten below).
  const bool to_caller = batch.logits_out != nullptr && batch.logits_capacity >= n_logits * V;
  HostPhase("head");
  out->logits.resize(to_caller ? 0 : n_logits * V);
  float* dst = to_caller ? batch.logits_out : out->logits.data();
  HostPhase("resize");
  out->host_issue_seconds = SecondsSince(forward_start_);
  if (n_greedy > 0) {
    std::vector<int32_t> ids(n_greedy);
    backend_->CopyToHost(ids.data(), greedy.data(), n_greedy * sizeof(int32_t));
    for (int64_t j = 0; j < n_greedy; ++j) out->tokens[greedy_chunks[j]] = ids[j];
  }
  if (n_logits > 0) {
    backend_->CopyToHost(dst, logits.data(), n_logits * V * sizeof(float));
  }
  out->rows = n_logits;
}

void Model::ForwardAll(const ForwardBatch& batch, ForwardOutput* out) {
  const io::TextConfig& t = config_.text();
  const int64_t D = t.hidden_size, hc = t.hc_mult;
  const float eps = static_cast<float>(t.rms_norm_eps);
  const float hc_eps = static_cast<float>(t.hc_eps);
  BatchContext b;
  StartBatch(batch, b);
  HostPhase("start");
  const int64_t T = b.rows;
  // Incoming pre-mix: one-hot on stream 0.
  DeviceFloats carry_pre(backend_, T * hc);
  {
    std::vector<float> one_hot(T * hc, 0.0f);
    for (int64_t i = 0; i < T; ++i) one_hot[i * hc] = 1.0f;
    backend_->CopyToDevice(carry_pre.data(), one_hot.data(), one_hot.size() * sizeof(float));
  }
  DeviceFloats a_pre(backend_, T * hc), a_post(backend_, T * hc), a_comb(backend_, T * hc * hc);
  DeviceFloats f_post(backend_, T * hc), f_comb(backend_, T * hc * hc);
  DeviceFloats u0(backend_, T * D), u(backend_, T * D), y(backend_, T * D);
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const LayerWeights& lw = weights_->layers[l];
    const std::string name = "layers." + std::to_string(l) + ".";
    if (lw.engram) EngramLayer(l, b);
    backend_->HcMix(b.x.data(), T, hc, D, lw.hc_attn.view(), eps, hc_eps, t.hc_sinkhorn_iters,
                    a_pre.data(), a_post.data(), a_comb.data());
    backend_->HcCollapseNorm(b.x.data(), carry_pre.data(), T, hc, D, lw.attn_norm.data(), eps,
                             u0.data(), u.data());
    Emit(name + "attn_in", u0.data(), T, D);
    Attention(l, b, u.data(), y.data());
    Emit(name + "attn_out", y.data(), T, D);
    backend_->HcExpand(y.data(), a_post.data(), a_comb.data(), T, hc, D, b.x.data());
    // carry_pre receives this layer's FFN-site pre (used by the next collapse after this).
    backend_->HcMix(b.x.data(), T, hc, D, lw.hc_ffn.view(), eps, hc_eps, t.hc_sinkhorn_iters,
                    carry_pre.data(), f_post.data(), f_comb.data());
    backend_->HcCollapseNorm(b.x.data(), a_pre.data(), T, hc, D, lw.ffn_norm.data(), eps, u0.data(),
                             u.data());
    Emit(name + "ffn_in", u0.data(), T, D);
    moe_->Forward(lw.ffn, u.data(), T, D, y.data());
    Emit(name + "ffn_out", y.data(), T, D);
    backend_->HcExpand(y.data(), f_post.data(), f_comb.data(), T, hc, D, b.x.data());
    Emit(name + "streams_out", b.x.data(), T, hc * D);
    HostPhase("layer");
  }
  backend_->HcCollapseNorm(b.x.data(), carry_pre.data(), T, hc, D, weights_->norm.data(), eps,
                           u0.data(), u.data());
  Emit("final_norm_out", u.data(), T, D);
  Logits(batch, b, u.data(), out);

  // Sequence bookkeeping (window rings and KV groups were updated by the layers).
  const size_t keep = static_cast<size_t>(std::max(t.engram_max_ngram_size - 1, 0));
  for (const ForwardChunk& chunk : batch.chunks) {
    SequenceState& s = *chunk.state;
    s.length += static_cast<int64_t>(chunk.tokens.size());
    s.recent_tokens.insert(s.recent_tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
    if (s.recent_tokens.size() > keep) {
      s.recent_tokens.erase(s.recent_tokens.begin(), s.recent_tokens.end() - keep);
    }
  }
}

}  // namespace deepinfer::model
