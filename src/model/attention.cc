// Model: attention with window KV, the compressor and the lightning indexer
// (model.md §2.3-§2.5, goldens README "What the reference computes").
#include <algorithm>
#include <cmath>
#include <string>

#include "base/check.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "model/state_blocks.h"

namespace deepinfer::model {
namespace {

int GroupIndex(const io::ModelConfig& cfg, int kv_source) {
  const auto& ids = cfg.text().kv_source_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), kv_source);
  CHECK(it != ids.end()) << "layer " << kv_source << " is not a KV source";
  return static_cast<int>(it - ids.begin());
}

}  // namespace

void Model::Compress(int layer, ChunkContext& ctx, const float* u, KvGroupState& group) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t T = ctx.T, D = t.hidden_size, d = t.head_dim, r = group.ratio;
  const int64_t rd = t.qk_rope_head_dim;
  DeviceFloats c(backend_, (group.n_pending + T) * d);
  DeviceFloats latent;
  int64_t n_new = 0;
  if (r == 1) {
    backend_->Linear(u, T, D, w.comp_wkv, 0, d, c.data(), d);
    n_new = T;
    latent = DeviceFloats(backend_, n_new * d);
    backend_->RmsNorm(c.data(), T, d, d, w.comp_norm.data(), static_cast<float>(t.rms_norm_eps),
                      latent.data(), d);
  } else {
    // Rows: the pending tokens of the open group, then this chunk's tokens.
    const int64_t np = group.n_pending, total = np + T;
    DeviceFloats z(backend_, total * d);
    backend_->CopyDevice(c.data(), group.pending_c.data(), np * d * sizeof(float));
    backend_->CopyDevice(z.data(), group.pending_z.data(), np * d * sizeof(float));
    backend_->Linear(u, T, D, w.comp_wkv, 0, d, c.data() + np * d, d);
    backend_->Linear(u, T, D, w.comp_wgate, 0, d, z.data() + np * d, d);
    n_new = total / r;
    latent = DeviceFloats(backend_, std::max<int64_t>(n_new, 1) * d);
    if (n_new > 0) {
      DeviceFloats pooled(backend_, n_new * d);
      backend_->GatedPool(c.data(), z.data(), n_new, r, d, pooled.data());
      backend_->RmsNorm(pooled.data(), n_new, d, d, w.comp_norm.data(),
                        static_cast<float>(t.rms_norm_eps), latent.data(), d);
    }
    group.n_pending = total - n_new * r;
    backend_->CopyDevice(group.pending_c.data(), c.data() + n_new * r * d,
                         group.n_pending * d * sizeof(float));
    backend_->CopyDevice(group.pending_z.data(), z.data() + n_new * r * d,
                         group.n_pending * d * sizeof(float));
  }
  if (n_new == 0) return;
  // Entry g sits at position g * ratio (the group's first token).
  std::vector<int32_t> host_pos(n_new);
  for (int64_t i = 0; i < n_new; ++i) {
    host_pos[i] = static_cast<int32_t>((group.n_entries() + i) * r);
  }
  DeviceInts pos(backend_, n_new);
  backend_->CopyToDevice(pos.data(), host_pos.data(), n_new * sizeof(int32_t));

  const StateBlocks& blocks = ctx.state->blocks;
  const int64_t first = group.n_entries();
  DeviceFloats entries(backend_, n_new * d);
  backend_->CopyDevice(entries.data(), latent.data(), n_new * d * sizeof(float));
  backend_->Rope(entries.data(), n_new, d, 1, d, d - rd, rd / 2, pos.data(),
                 compress_inv_freq_.data(), false);
  if (d % 16 == 0) backend_->FakeQuant(entries.data(), n_new, d, d, FakeQuantKind::kFp4Block16E4m3);
  WriteGroupRows(backend_, blocks, group, GroupRows::kEntries, d, first, entries.data(), n_new);

  if (w.idx_wk.valid()) {
    const int64_t ihd = t.index_head_dim;
    DeviceFloats k0(backend_, n_new * ihd), k(backend_, n_new * ihd);
    backend_->Linear(latent.data(), n_new, d, w.idx_wk, 0, ihd, k0.data(), ihd);
    backend_->RmsNorm(k0.data(), n_new, ihd, ihd, w.idx_k_norm.data(),
                      static_cast<float>(t.rms_norm_eps), k.data(), ihd);
    backend_->Rope(k.data(), n_new, ihd, 1, ihd, ihd - rd, rd / 2, pos.data(),
                   compress_inv_freq_.data(), false);
    if (ihd % 32 == 0)
      backend_->FakeQuant(k.data(), n_new, ihd, ihd, FakeQuantKind::kFp4Block32Pow2);
    WriteGroupRows(backend_, blocks, group, GroupRows::kIndexKeys, ihd, first, k.data(), n_new);
  }
  group.entry_count += n_new;
}

namespace {

// Rows [0, n) of one group's entries or keys, gathered into `scratch` unless it already holds
// them (entries are append-only, so n rows gathered earlier in this chunk are still valid).
const float* Gather(Backend* backend, const StateBlocks& blocks, const KvGroupState& group,
                    GroupRows which, int64_t width, DeviceFloats& scratch, int64_t& rows) {
  const int64_t n = group.n_entries();
  if (rows != n) {
    scratch = DeviceFloats(backend, std::max<int64_t>(n, 1) * width);
    GatherGroupRows(backend, blocks, group, which, width, n, scratch.data());
    rows = n;
  }
  return scratch.data();
}

}  // namespace

const float* Model::GatheredEntries(ChunkContext& ctx, int gi) {
  const size_t n_groups = ctx.state->groups.size();
  ctx.gathered_entries.resize(n_groups);
  ctx.gathered_entry_rows.resize(n_groups, -1);
  return Gather(backend_, ctx.state->blocks, ctx.state->groups[gi], GroupRows::kEntries,
                config_.text().head_dim, ctx.gathered_entries[gi], ctx.gathered_entry_rows[gi]);
}

const float* Model::GatheredIndexKeys(ChunkContext& ctx, int gi) {
  const size_t n_groups = ctx.state->groups.size();
  ctx.gathered_keys.resize(n_groups);
  ctx.gathered_key_rows.resize(n_groups, -1);
  return Gather(backend_, ctx.state->blocks, ctx.state->groups[gi], GroupRows::kIndexKeys,
                config_.text().index_head_dim, ctx.gathered_keys[gi], ctx.gathered_key_rows[gi]);
}

void Model::Indexer(int layer, ChunkContext& ctx, const float* u, const float* q_r,
                    KvGroupState& group) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t T = ctx.T, D = t.hidden_size, nh = t.index_n_heads, ihd = t.index_head_dim;
  const int64_t rd = t.qk_rope_head_dim;
  const int64_t n = group.has_keys ? group.n_entries() : 0;
  const int gi = GroupIndex(config_, group.source_layer);
  ctx.selection_group = gi;
  ctx.n_select = std::min<int64_t>(t.index_topk, n);
  if (ctx.n_select == 0) return;

  DeviceFloats qi(backend_, T * nh * ihd), hw(backend_, T * nh);
  backend_->Linear(q_r, T, t.q_lora_rank, w.idx_wq_b, 0, nh * ihd, qi.data(), nh * ihd);
  backend_->Rope(qi.data(), T, nh * ihd, nh, ihd, ihd - rd, rd / 2, ctx.pos.data(),
                 compress_inv_freq_.data(), false);
  if (ihd % 32 == 0)
    backend_->FakeQuant(qi.data(), T * nh, ihd, ihd, FakeQuantKind::kFp4Block32Pow2);
  backend_->Linear(u, T, D, w.idx_weights_proj, 0, nh, hw.data(), nh);
  backend_->Scale(hw.data(), T * nh, 1.0f / std::sqrt(static_cast<float>(nh)));

  DeviceFloats scores(backend_, T * n);
  backend_->IndexerScores(qi.data(), hw.data(), T, nh, ihd, GatheredIndexKeys(ctx, gi), n,
                          ctx.pos.data(), group.ratio, 1.0f / std::sqrt(static_cast<float>(ihd)),
                          scores.data());
  const int cand = t.candidate_source_layer_id;
  if (cand >= 0 && layer == cand) {
    ctx.candidate_mask = DeviceInts(backend_, (T * n + 3) / 4);
    ctx.mask_entries = n;
    ctx.mask_group = gi;
    backend_->CandidateMask(scores.data(), T, n, ctx.pos.data(), group.ratio,
                            t.candidate_block_size, t.candidate_topk_blocks,
                            reinterpret_cast<uint8_t*>(ctx.candidate_mask.data()));
  } else if (cand >= 0 && layer > cand && ctx.mask_group == gi && ctx.mask_entries == n) {
    backend_->ApplyMask(scores.data(), reinterpret_cast<const uint8_t*>(ctx.candidate_mask.data()),
                        T, n);
  }
  ctx.selection = DeviceInts(backend_, T * ctx.n_select);
  backend_->TopK(scores.data(), T, n, ctx.n_select, ctx.selection.data());
}

void Model::Attention(int layer, ChunkContext& ctx, const float* u, float* out) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t T = ctx.T, D = t.hidden_size, H = t.num_attention_heads, d = t.head_dim;
  const int64_t rd = t.qk_rope_head_dim, W = t.sliding_window;
  const int ratio = config_.CompressRatio(layer);
  const float* inv_freq = ratio > 0 ? compress_inv_freq_.data() : main_inv_freq_.data();
  const float eps = static_cast<float>(t.rms_norm_eps);

  DeviceFloats q_r0(backend_, T * t.q_lora_rank), q_r(backend_, T * t.q_lora_rank);
  backend_->Linear(u, T, D, w.wq_a, 0, t.q_lora_rank, q_r0.data(), t.q_lora_rank);
  backend_->RmsNorm(q_r0.data(), T, t.q_lora_rank, t.q_lora_rank, w.q_norm.data(), eps, q_r.data(),
                    t.q_lora_rank);
  DeviceFloats q(backend_, T * H * d);
  backend_->Linear(q_r.data(), T, t.q_lora_rank, w.wq_b, 0, H * d, q.data(), H * d);
  backend_->Rope(q.data(), T, H * d, H, d, d - rd, rd / 2, ctx.pos.data(), inv_freq, false);

  // Window KV of this chunk: kv_norm, RoPE, FP8 fake-quant.
  WindowRing& ring = ctx.state->windows[layer];
  int64_t n_cached = 0;
  for (int32_t p : ring.pos) n_cached += p >= 0 ? 1 : 0;
  const int64_t n_window = n_cached + T;
  DeviceFloats kv0(backend_, T * d), window_kv(backend_, n_window * d);
  std::vector<int32_t> window_pos;
  window_pos.reserve(n_window);
  // Cached rows in position order (so the attention sums run in the same order however the
  // sequence was chunked).
  std::vector<int64_t> slots;
  for (int64_t s = 0; s < W; ++s) {
    if (ring.pos[s] >= 0) slots.push_back(s);
  }
  std::sort(slots.begin(), slots.end(),
            [&](int64_t a, int64_t b) { return ring.pos[a] < ring.pos[b]; });
  for (int64_t s : slots) {
    backend_->CopyDevice(window_kv.data() + window_pos.size() * d, ring.kv.data() + s * d,
                         d * sizeof(float));
    window_pos.push_back(ring.pos[s]);
  }
  float* kv = window_kv.data() + n_cached * d;
  backend_->Linear(u, T, D, w.wkv, 0, d, kv0.data(), d);
  backend_->RmsNorm(kv0.data(), T, d, d, w.kv_norm.data(), eps, kv, d);
  backend_->Rope(kv, T, d, 1, d, d - rd, rd / 2, ctx.pos.data(), inv_freq, false);
  if (d % 32 == 0) backend_->FakeQuant(kv, T, d, d, FakeQuantKind::kFp8Block32Pow2);
  Emit(ctx, "layers." + std::to_string(layer) + ".window_kv", kv, T, d);
  window_pos.insert(window_pos.end(), ctx.host_pos.begin(), ctx.host_pos.end());
  DeviceInts window_pos_dev(backend_, n_window);
  backend_->CopyToDevice(window_pos_dev.data(), window_pos.data(), n_window * sizeof(int32_t));

  SparseAttentionArgs args;
  if (ratio > 0) {
    const int src = config_.KvSourceOf(layer);
    KvGroupState& group = ctx.state->groups[GroupIndex(config_, src)];
    if (src == layer) Compress(layer, ctx, u, group);
    if (config_.IsIndexSource(layer)) Indexer(layer, ctx, u, q_r.data(), group);
    if (ctx.selection_group == GroupIndex(config_, src) && ctx.n_select > 0) {
      args.comp_kv = GatheredEntries(ctx, GroupIndex(config_, src));
      args.n_comp = group.n_entries();
      args.selection = ctx.selection.data();
      args.n_select = ctx.n_select;
    }
  }
  DeviceFloats o(backend_, T * H * d);
  args.q = q.data();
  args.q_pos = ctx.pos.data();
  args.tokens = T;
  args.heads = H;
  args.head_dim = d;
  args.window_kv = window_kv.data();
  args.window_pos = window_pos_dev.data();
  args.n_window = n_window;
  args.window = W;
  args.sinks = w.sinks.data();
  args.scale = 1.0f / std::sqrt(static_cast<float>(d));
  args.out = o.data();
  backend_->SparseAttention(args);
  backend_->Rope(o.data(), T, H * d, H, d, d - rd, rd / 2, ctx.pos.data(), inv_freq, true);

  // Grouped output projection: group g maps its heads' outputs through rows
  // g*o_lora .. (g+1)*o_lora-1 of wo_a; then wo_b.
  const int64_t G = t.o_groups, R = t.o_lora_rank, group_in = H * d / G;
  DeviceFloats z(backend_, T * G * R);
  for (int64_t g = 0; g < G; ++g) {
    backend_->Linear(o.data() + g * group_in, T, H * d, w.wo_a, g * R, R, z.data() + g * R, G * R);
  }
  backend_->Linear(z.data(), T, G * R, w.wo_b, 0, D, out, D);

  // Remember this chunk's window KV (slot p % W holds position p).
  for (int64_t i = 0; i < T; ++i) {
    const int64_t slot = ctx.host_pos[i] % W;
    backend_->CopyDevice(ring.kv.data() + slot * d, kv + i * d, d * sizeof(float));
    ring.pos[slot] = ctx.host_pos[i];
  }
}

}  // namespace deepinfer::model
