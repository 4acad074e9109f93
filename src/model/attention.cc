// Model: attention with window KV, the compressor and the lightning indexer
// (model.md §2.3-§2.5, goldens README "What the reference computes").
#include <algorithm>
#include <bit>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "base/check.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "model/state_blocks.h"

namespace deepinfer::model {
namespace {

// RoPE (forward) on the last rd channels of each of x's rows * heads heads of head_dim values,
// then the FakeQuant `kind` of every head where the kind's block divides head_dim: one
// backend call (Backend::RopeFakeQuant), else the RoPE alone.
void RopeAndFakeQuant(Backend* backend, float* x, int64_t rows, int64_t heads, int64_t head_dim,
                      int64_t rd, const int32_t* pos, const float* inv_freq, FakeQuantKind kind) {
  const int64_t block = FakeQuantBlock(kind);
  if (head_dim % block == 0) {
    backend->RopeFakeQuant(x, rows, heads, head_dim, head_dim - rd, rd / 2, pos, inv_freq, kind);
  } else {
    backend->Rope(x, rows, heads * head_dim, heads, head_dim, head_dim - rd, rd / 2, pos, inv_freq,
                  false);
  }
}

int GroupIndex(const io::ModelConfig& cfg, int kv_source) {
  const auto& ids = cfg.text().kv_source_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), kv_source);
  CHECK(it != ids.end()) << "layer " << kv_source << " is not a KV source";
  return static_cast<int>(it - ids.begin());
}

}  // namespace

int64_t LaunchBucket(int64_t n) {
  if (n <= 0) return 0;
  int64_t step = 512;
  while (step * 16 <= n) step *= 2;  // once doubled, step * 8 <= n
  return (n + step - 1) / step * step;
}

int64_t PagedBlockSlots(int64_t blocks) {
  return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(blocks, 1))));
}

void Model::Compress(int layer, BatchContext& b, const float* u, int gi) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t R = b.rows, D = t.hidden_size, d = t.head_dim;
  const int64_t rd = t.qk_rope_head_dim;
  const float eps = static_cast<float>(t.rms_norm_eps);
  const int64_t r = b.chunks.front().state->groups[gi].ratio;
  // Compressor inputs of every row at once.
  DeviceFloats c_all(backend_, R * d), z_all;
  backend_->Linear(u, R, D, w.comp_wkv, 0, d, c_all.data(), d);
  // New entries of all chunks, chunk after chunk: n_new[i] rows starting at first_new[i].
  std::vector<int64_t> n_new(b.chunks.size()), first_new(b.chunks.size());
  std::vector<int32_t> host_pos;
  DeviceFloats latent;
  int64_t total_new = 0;
  if (r == 1) {
    latent = DeviceFloats(backend_, R * d);
    backend_->RmsNorm(c_all.data(), R, d, d, w.comp_norm.data(), eps, latent.data(), d);
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      n_new[i] = b.chunks[i].T;
      first_new[i] = b.chunks[i].row0;
    }
    total_new = R;
  } else {
    z_all = DeviceFloats(backend_, R * d);
    backend_->Linear(u, R, D, w.comp_wgate, 0, d, z_all.data(), d);
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      const KvGroupState& g = b.chunks[i].state->groups[gi];
      n_new[i] = (g.n_pending + b.chunks[i].T) / r;
      first_new[i] = total_new;
      total_new += n_new[i];
    }
    DeviceFloats pooled(backend_, std::max<int64_t>(total_new, 1) * d);
    // Staging, so that one GatedPool covers every chunk: first the rows each chunk pools (the
    // first n_new[i] * r of its pending tokens then its new tokens) for all chunks, in chunk
    // order (chunk i's at row first_new[i] * r), then every chunk's leftover rows (its next
    // pending tokens, chunk i's at row pool_rows + tail_at[i]). Filled and drained with one
    // batched copy each; every chunk adds the same number of copies (0-byte ones included),
    // so the lists' length depends on the chunk count only (README "Decode-shape contract").
    const int64_t pool_rows = total_new * r;
    std::vector<int64_t> tail_at(b.chunks.size() + 1, 0);
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      const int64_t rows = b.chunks[i].state->groups[gi].n_pending + b.chunks[i].T;
      tail_at[i + 1] = tail_at[i] + rows - n_new[i] * r;
    }
    DeviceFloats cc(backend_, (pool_rows + tail_at.back()) * d);
    DeviceFloats zz(backend_, (pool_rows + tail_at.back()) * d);
    const int64_t row_bytes = d * static_cast<int64_t>(sizeof(float));
    std::vector<DeviceCopy> copies;
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      const ChunkContext& c = b.chunks[i];
      const KvGroupState& group = c.state->groups[gi];
      const int64_t np = group.n_pending, pooled_here = n_new[i] * r;
      // Rows [start, start + rows) of the chunk's sequence (pending, then new) from src (c)
      // and src_z (z): the part below pooled_here to the pool rows, the rest to the tail.
      auto stage = [&](const float* src_c, const float* src_z, int64_t start, int64_t rows) {
        const int64_t to_pool = std::clamp<int64_t>(pooled_here - start, 0, rows);
        const int64_t pool_row = first_new[i] * r + start;
        const int64_t tail_row = pool_rows + tail_at[i] + start + to_pool - pooled_here;
        for (auto [dst, src] : {std::pair{cc.data(), src_c}, std::pair{zz.data(), src_z}}) {
          copies.push_back({dst + pool_row * d, src, to_pool * row_bytes});
          copies.push_back({dst + std::max<int64_t>(tail_row, 0) * d, src + to_pool * d,
                            (rows - to_pool) * row_bytes});
        }
      };
      stage(group.pending_c.data(), group.pending_z.data(), 0, np);
      stage(c_all.data() + c.row0 * d, z_all.data() + c.row0 * d, np, c.T);
    }
    backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
    if (total_new > 0) backend_->GatedPool(cc.data(), zz.data(), total_new, r, d, pooled.data());
    copies.clear();
    for (size_t i = 0; i < b.chunks.size(); ++i) {
      KvGroupState& group = b.chunks[i].state->groups[gi];
      group.n_pending = tail_at[i + 1] - tail_at[i];
      const int64_t tail = (pool_rows + tail_at[i]) * d;
      copies.push_back({group.pending_c.data(), cc.data() + tail, group.n_pending * row_bytes});
      copies.push_back({group.pending_z.data(), zz.data() + tail, group.n_pending * row_bytes});
    }
    backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
    latent = DeviceFloats(backend_, std::max<int64_t>(total_new, 1) * d);
    if (total_new > 0) {
      backend_->RmsNorm(pooled.data(), total_new, d, d, w.comp_norm.data(), eps, latent.data(), d);
    }
  }
  if (total_new == 0) return;
  // Entry g sits at position g * ratio (the group's first token). For r == 1 the new rows
  // are the batch rows, so first_new is the row offset and the layout matches.
  host_pos.assign(total_new, 0);
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    const int64_t first = b.chunks[i].state->groups[gi].n_entries();
    for (int64_t j = 0; j < n_new[i]; ++j) {
      host_pos[first_new[i] + j] = static_cast<int32_t>((first + j) * r);
    }
  }
  DeviceInts pos(backend_, total_new);
  backend_->CopyToDevice(pos.data(), host_pos.data(), total_new * sizeof(int32_t));

  DeviceFloats entries(backend_, total_new * d);
  backend_->CopyDevice(entries.data(), latent.data(), total_new * d * sizeof(float));
  RopeAndFakeQuant(backend_, entries.data(), total_new, 1, d, rd, pos.data(),
                   compress_inv_freq_.data(), FakeQuantKind::kFp4Block16E4m3);
  DeviceFloats keys;
  const int64_t ihd = t.index_head_dim;
  if (w.idx_wk.valid()) {
    DeviceFloats k0(backend_, total_new * ihd);
    keys = DeviceFloats(backend_, total_new * ihd);
    backend_->Linear(latent.data(), total_new, d, w.idx_wk, 0, ihd, k0.data(), ihd);
    backend_->RmsNorm(k0.data(), total_new, ihd, ihd, w.idx_k_norm.data(), eps, keys.data(), ihd);
    RopeAndFakeQuant(backend_, keys.data(), total_new, 1, ihd, rd, pos.data(),
                     compress_inv_freq_.data(), FakeQuantKind::kFp4Block32Pow2);
  }
  std::vector<DeviceCopy> writes;
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    if (n_new[i] == 0) continue;
    KvGroupState& group = b.chunks[i].state->groups[gi];
    const StateBlocks& blocks = b.chunks[i].state->blocks;
    const int64_t first = group.n_entries();
    AppendWriteGroupRows(blocks, group, GroupRows::kEntries, d, first,
                         entries.data() + first_new[i] * d, n_new[i], &writes);
    if (keys.data() != nullptr) {
      AppendWriteGroupRows(blocks, group, GroupRows::kIndexKeys, ihd, first,
                           keys.data() + first_new[i] * ihd, n_new[i], &writes);
    }
    group.entry_count += n_new[i];
  }
  backend_->CopyDeviceMany(writes.data(), static_cast<int64_t>(writes.size()));
}

void Model::GatherBatchIndexKeys(BatchContext& b, int gi) {
  const int64_t ihd = config_.text().index_head_dim;
  const size_t n_groups = b.chunks.front().state->groups.size();
  b.index_keys.resize(n_groups);
  b.index_key_ranges.resize(n_groups);
  // Entries are append-only and only the source layer (which comes first) adds them, so keys
  // gathered earlier in this forward are still complete.
  if (b.index_keys[gi].data() != nullptr) return;
  std::vector<int32_t> ranges(2 * b.rows);
  std::vector<DeviceCopy> copies;
  int64_t total = 0;
  for (const ChunkContext& c : b.chunks) {
    const KvGroupState& group = c.state->groups[gi];
    const int64_t n = group.has_keys ? group.n_entries() : 0;
    for (int64_t r = c.row0; r < c.row0 + c.T; ++r) {
      ranges[r] = static_cast<int32_t>(total);
      ranges[b.rows + r] = static_cast<int32_t>(n);
    }
    total += n;
  }
  // Launch shape: the buffer's rows are bucketed, and each chunk's copies (one per block) are
  // padded with empty ones to PagedBlockSlots of its blocks.
  b.index_keys[gi] = DeviceFloats(backend_, LaunchBucket(std::max<int64_t>(total, 1)) * ihd);
  int64_t at = 0;
  for (const ChunkContext& c : b.chunks) {
    const KvGroupState& group = c.state->groups[gi];
    const int64_t n = group.has_keys ? group.n_entries() : 0;
    if (n == 0) continue;
    float* dst = b.index_keys[gi].data() + at * ihd;
    AppendGatherGroupRows(c.state->blocks, group, GroupRows::kIndexKeys, ihd, n, dst, &copies);
    const int64_t blocks = GroupBlocksFor(group, n);
    for (int64_t i = blocks; i < PagedBlockSlots(blocks); ++i) {
      copies.push_back({dst + n * ihd, copies.back().src, 0});
    }
    at += n;
  }
  backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
  b.index_key_ranges[gi] = DeviceInts(backend_, 2 * b.rows);
  backend_->CopyToDevice(b.index_key_ranges[gi].data(), ranges.data(),
                         ranges.size() * sizeof(int32_t));
}

void Model::GatherBatchEntries(BatchContext& b, int gi) {
  const int64_t d = config_.text().head_dim;
  b.comp_entries.resize(b.chunks.front().state->groups.size());
  b.comp_offsets.resize(b.comp_entries.size());
  std::vector<int64_t>& offsets = b.comp_offsets[gi];
  offsets.assign(b.chunks.size() + 1, 0);
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    offsets[i + 1] = offsets[i] + b.chunks[i].state->groups[gi].n_entries();
  }
  b.comp_entries[gi] = DeviceFloats(backend_, std::max<int64_t>(offsets.back(), 1) * d);
  std::vector<DeviceCopy> copies;
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    const ChunkContext& c = b.chunks[i];
    const KvGroupState& group = c.state->groups[gi];
    AppendGatherGroupRows(c.state->blocks, group, GroupRows::kEntries, d, group.n_entries(),
                          b.comp_entries[gi].data() + offsets[i] * d, &copies);
  }
  backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
  std::vector<int32_t> ranges(2 * b.rows);
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    const ChunkContext& c = b.chunks[i];
    for (int64_t r = c.row0; r < c.row0 + c.T; ++r) {
      ranges[r] = static_cast<int32_t>(offsets[i]);
      ranges[b.rows + r] = static_cast<int32_t>(offsets[i + 1] - offsets[i]);
    }
  }
  b.comp_ranges.resize(b.comp_entries.size());
  b.comp_ranges[gi] = DeviceInts(backend_, 2 * b.rows);
  backend_->CopyToDevice(b.comp_ranges[gi].data(), ranges.data(), ranges.size() * sizeof(int32_t));
}

bool Model::SelectedGatherPays(const BatchContext& b, int gi) const {
  int64_t entries = 0;
  for (const ChunkContext& c : b.chunks) entries += c.state->groups[gi].n_entries();
  return b.rows * b.n_select < entries;
}

namespace {

// Group gi's rows of kind `which` per sequence: its entries, or its index keys (none where the
// group keeps no keys).
int64_t PagedRowCount(const KvGroupState& g, GroupRows which) {
  return which == GroupRows::kIndexKeys && !g.has_keys ? 0 : g.n_entries();
}

}  // namespace

void Model::UploadPagedAddressing(const BatchContext& b, int gi, GroupRows which, int64_t k,
                                  PagedAddressing& out) {
  const int64_t R = b.rows;
  int64_t most_blocks = 1;
  for (const ChunkContext& c : b.chunks) {
    const KvGroupState& g = c.state->groups[gi];
    most_blocks = std::max(most_blocks, GroupBlocksFor(g, PagedRowCount(g, which)));
  }
  // Bucketed (launch shape): the table's row stride changes only at powers of two.
  const int64_t max_blocks = PagedBlockSlots(most_blocks);
  // One host image of the device layout: bases (2 int32 words each), count, ranges.
  const int64_t range_words = k > 0 ? 2 * R : 0;
  std::vector<int32_t> host(2 * R * max_blocks + R + range_words, 0);
  auto* bases = reinterpret_cast<int64_t*>(host.data());
  int32_t* count = host.data() + 2 * R * max_blocks;
  int32_t* ranges = count + R;
  out.aligned16 = true;
  for (const ChunkContext& c : b.chunks) {
    const KvGroupState& g = c.state->groups[gi];
    out.rows_per_block = g.entries_per_block;  // the same for every sequence of one model
    const int64_t n = PagedRowCount(g, which), blocks = GroupBlocksFor(g, n);
    for (int64_t r = c.row0; r < c.row0 + c.T; ++r) {
      for (int64_t blk = 0; blk < blocks; ++blk) {
        bases[r * max_blocks + blk] =
            reinterpret_cast<int64_t>(GroupBlockRows(c.state->blocks, g, which, blk));
        out.aligned16 &= bases[r * max_blocks + blk] % 16 == 0;
      }
      count[r] = static_cast<int32_t>(n);
      if (k > 0) {
        ranges[r] = static_cast<int32_t>(r * k);
        ranges[R + r] = static_cast<int32_t>(k);
      }
    }
  }
  out.buf = DeviceInts(backend_, static_cast<int64_t>(host.size()));
  backend_->CopyToDevice(out.buf.data(), host.data(), host.size() * sizeof(int32_t));
  out.blocks = max_blocks;
  out.k = k;
}

void Model::EnsureSelectedAddressing(BatchContext& b, int gi) {
  if (static_cast<int>(b.sel_addressing.size()) <= gi) b.sel_addressing.resize(gi + 1);
  PagedAddressing& s = b.sel_addressing[gi];
  if (s.buf.data() != nullptr && s.k == b.n_select) return;
  UploadPagedAddressing(b, gi, GroupRows::kEntries, b.n_select, s);
}

void Model::EnsureIndexKeyAddressing(BatchContext& b, int gi) {
  if (static_cast<int>(b.key_addressing.size()) <= gi) b.key_addressing.resize(gi + 1);
  PagedAddressing& s = b.key_addressing[gi];
  if (s.buf.data() != nullptr) return;
  UploadPagedAddressing(b, gi, GroupRows::kIndexKeys, 0, s);
}

bool Model::SelectedAddressingAligned(BatchContext& b, int gi) {
  EnsureSelectedAddressing(b, gi);
  const int64_t d = config_.text().head_dim;
  return b.sel_addressing[gi].aligned16 && (d * sizeof(float)) % 16 == 0;
}

void Model::GatherSelectedEntries(BatchContext& b, int gi) {
  if (b.sel_group == gi && b.sel_serial == b.selection_serial) return;
  const int64_t R = b.rows, k = b.n_select, d = config_.text().head_dim;
  EnsureSelectedAddressing(b, gi);
  const PagedAddressing& s = b.sel_addressing[gi];
  b.sel_entries = DeviceFloats(backend_, R * k * d);
  b.sel_remapped = DeviceInts(backend_, R * k);
  backend_->GatherSelectedRows(b.selection.data(), R, k, s.bases(), s.blocks, s.count(R),
                               s.rows_per_block, d, b.sel_entries.data(), b.sel_remapped.data());
  b.sel_group = gi;
  b.sel_serial = b.selection_serial;
}

void Model::LayOutWindows(BatchContext& b) {
  const int64_t W = config_.text().sliding_window, R = b.rows;
  b.window_rows = 0;
  for (const ChunkContext& c : b.chunks) {
    b.window_at.push_back(b.window_rows);
    b.window_rows += std::min<int64_t>(c.state->length, W) + c.T;
  }
  // window_pos [window_rows], then per row window_start and window_len [R each].
  std::vector<int32_t> meta(b.window_rows + 2 * R);
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    const ChunkContext& c = b.chunks[i];
    const int64_t at = b.window_at[i], n_cached = std::min<int64_t>(c.state->length, W);
    const int64_t oldest = c.state->length - n_cached;
    for (int64_t j = 0; j < n_cached; ++j) meta[at + j] = static_cast<int32_t>(oldest + j);
    std::copy(c.host_pos.begin(), c.host_pos.end(), meta.begin() + at + n_cached);
    for (int64_t r = c.row0; r < c.row0 + c.T; ++r) {
      meta[b.window_rows + r] = static_cast<int32_t>(at);
      meta[b.window_rows + R + r] = static_cast<int32_t>(n_cached + c.T);
    }
  }
  b.window_meta = DeviceInts(backend_, static_cast<int64_t>(meta.size()));
  backend_->CopyToDevice(b.window_meta.data(), meta.data(), meta.size() * sizeof(int32_t));
}

Model::IndexerQueries Model::IndexerQuery(int layer, BatchContext& b, const float* u,
                                          const float* q_r) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t R = b.rows, D = t.hidden_size, nh = t.index_n_heads, ihd = t.index_head_dim;
  IndexerQueries q{DeviceFloats(backend_, R * nh * ihd), DeviceFloats(backend_, R * nh)};
  backend_->Linear(q_r, R, t.q_lora_rank, w.idx_wq_b, 0, nh * ihd, q.qi.data(), nh * ihd);
  RopeAndFakeQuant(backend_, q.qi.data(), R, nh, ihd, t.qk_rope_head_dim, b.pos.data(),
                   compress_inv_freq_.data(), FakeQuantKind::kFp4Block32Pow2);
  backend_->Linear(u, R, D, w.idx_weights_proj, 0, nh, q.hw.data(), nh);
  backend_->Scale(q.hw.data(), R * nh, 1.0f / std::sqrt(static_cast<float>(nh)));
  return q;
}

void Model::IndexerSelect(int layer, BatchContext& b, const IndexerQueries& q, int gi) {
  const io::TextConfig& t = config_.text();
  const int64_t R = b.rows, nh = t.index_n_heads, ihd = t.index_head_dim;
  auto entries = [&](const ChunkContext& c) {
    const KvGroupState& group = c.state->groups[gi];
    return group.has_keys ? group.n_entries() : 0;
  };
  int64_t most = 0;
  for (const ChunkContext& c : b.chunks) most = std::max(most, entries(c));
  b.selection_group = gi;
  b.n_select = std::min<int64_t>(t.index_topk, most);
  if (b.n_select == 0) return;
  const int64_t k = b.n_select;
  b.selection = DeviceInts(backend_, R * k);
  ++b.selection_serial;
  const DeviceFloats& qi = q.qi;
  const DeviceFloats& hw = q.hw;

  // Scores of every row against its own sequence's keys (one varlen call), padded to the
  // largest group and then to its launch bucket (`width` columns): entries past a sequence's
  // own are never visible to it, so they score -inf, the candidate mask never keeps them and
  // the top-k turns them into -1, exactly as a per-sequence call would. (The mask's extra
  // blocks are all -inf: they rank after every real block, and a kept -inf block marks
  // nothing; the top-k's k stays min(index_topk, most).) The mask and the top-k then run
  // once for the whole batch.
  // Where the backend can, it reads each row's keys in place from its blocks; otherwise the
  // keys are gathered into one buffer first. The same scores either way.
  const int64_t ratio = b.chunks.front().state->groups[gi].ratio;
  const int64_t width = LaunchBucket(most);
  DeviceFloats scores(backend_, R * width);
  const float index_scale = 1.0f / std::sqrt(static_cast<float>(ihd));
  if (backend_->IndexerPagedApplicable(R, nh, ihd, ratio)) {
    EnsureIndexKeyAddressing(b, gi);
    const PagedAddressing& keys = b.key_addressing[gi];
    backend_->IndexerScoresPaged(qi.data(), hw.data(), R, nh, ihd, keys.bases(), keys.blocks,
                                 keys.rows_per_block, keys.count(R), width, b.pos.data(), ratio,
                                 index_scale, scores.data());
  } else {
    GatherBatchIndexKeys(b, gi);
    const int32_t* ranges = b.index_key_ranges[gi].data();
    backend_->IndexerScoresVarlen(qi.data(), hw.data(), R, nh, ihd, b.index_keys[gi].data(), ranges,
                                  ranges + R, width, b.pos.data(), ratio, index_scale,
                                  scores.data());
  }
  const int cand = t.candidate_source_layer_id;
  if (cand >= 0 && layer == cand) {
    b.candidate_mask = DeviceInts(backend_, (R * width + 3) / 4);
    b.mask_entries = most;
    b.mask_group = gi;
    backend_->CandidateMask(scores.data(), R, width, b.pos.data(), ratio, t.candidate_block_size,
                            t.candidate_topk_blocks,
                            reinterpret_cast<uint8_t*>(b.candidate_mask.data()));
  } else if (cand >= 0 && layer > cand && b.mask_group == gi && b.mask_entries == most) {
    backend_->ApplyMask(scores.data(), reinterpret_cast<const uint8_t*>(b.candidate_mask.data()), R,
                        width);
  }
  // k >= every sequence's min(index_topk, entries): its own top-k, then -1 padding.
  backend_->TopK(scores.data(), R, width, k, b.selection.data());
}

void Model::BatchAttention(int layer, BatchContext& b, const float* q, const float* kv_new,
                           float* o) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t R = b.rows, H = t.num_attention_heads, d = t.head_dim, W = t.sliding_window;
  const int ratio = config_.CompressRatio(layer);
  if (b.window_rows < 0) LayOutWindows(b);
  // This layer's window rows: each chunk's ring in position order (oldest first, slot p % W
  // holds position p: at most two runs), then its new rows.
  DeviceFloats window_kv(backend_, b.window_rows * d);
  std::vector<DeviceCopy> copies;
  const size_t row_bytes = d * sizeof(float);
  for (size_t i = 0; i < b.chunks.size(); ++i) {
    const ChunkContext& c = b.chunks[i];
    const WindowRing& ring = c.state->windows[layer];
    const int64_t length = c.state->length, n_cached = std::min<int64_t>(length, W);
    const int64_t oldest = length - n_cached, first_slot = oldest % W;
    const int64_t run1 = std::min(n_cached, W - first_slot);
    float* dst = window_kv.data() + b.window_at[i] * d;
    // Always both runs (the second 0 bytes when the ring does not wrap), so that the list's
    // length does not change from step to step (launch shape).
    copies.push_back(
        {dst, ring.kv.data() + first_slot * d, static_cast<int64_t>(run1 * row_bytes)});
    copies.push_back(
        {dst + run1 * d, ring.kv.data(), static_cast<int64_t>((n_cached - run1) * row_bytes)});
    copies.push_back(
        {dst + n_cached * d, kv_new + c.row0 * d, static_cast<int64_t>(c.T * row_bytes)});
    for (int64_t j = 0; j < n_cached; ++j) DCHECK_EQ(ring.pos[(oldest + j) % W], oldest + j);
  }
  backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));

  SparseAttentionArgs args;
  const int gi = ratio > 0 ? GroupIndex(config_, config_.KvSourceOf(layer)) : -1;
  const bool selected = ratio > 0 && b.selection_group == gi && b.n_select > 0;
  const bool few_selected = selected && SelectedGatherPays(b, gi);
  if (few_selected && backend_->SparseAttentionReadsPagedEntries() &&
      SelectedAddressingAligned(b, gi)) {
    // The selected entries read in place through the sequences' block tables: the rows of the
    // gather below in the same order, so the same bits, without the gather.
    const PagedAddressing& s = b.sel_addressing[gi];
    args.comp_bases = s.bases();
    args.comp_max_blocks = s.blocks;
    args.comp_rows_per_block = s.rows_per_block;
    args.comp_len = s.count(R);
    args.selection = b.selection.data();
    args.n_select = b.n_select;
  } else if (few_selected) {
    // The same rows in the same slots, so the attention's result is the same bits.
    GatherSelectedEntries(b, gi);
    args.comp_kv = b.sel_entries.data();
    args.n_comp = R * b.n_select;
    args.selection = b.sel_remapped.data();
    args.n_select = b.n_select;
    args.comp_offset = b.sel_addressing[gi].ranges(R);
    args.comp_len = b.sel_addressing[gi].ranges(R) + R;
  } else if (selected) {
    if (static_cast<int>(b.comp_entries.size()) <= gi || b.comp_entries[gi].data() == nullptr) {
      GatherBatchEntries(b, gi);
    }
    args.comp_kv = b.comp_entries[gi].data();
    args.n_comp = b.comp_offsets[gi].back();
    args.selection = b.selection.data();
    args.n_select = b.n_select;
    args.comp_offset = b.comp_ranges[gi].data();
    args.comp_len = b.comp_ranges[gi].data() + R;
  }
  args.q = q;
  args.q_pos = b.pos.data();
  args.tokens = R;
  args.heads = H;
  args.head_dim = d;
  args.window_kv = window_kv.data();
  args.window_pos = b.window_meta.data();
  args.n_window = b.window_rows;
  args.window = W;
  args.window_start = b.window_meta.data() + b.window_rows;
  args.window_len = b.window_meta.data() + b.window_rows + R;
  args.sinks = w.sinks.data();
  args.scale = 1.0f / std::sqrt(static_cast<float>(d));
  args.out = o;
  backend_->SparseAttention(args);

  // Remember each chunk's last min(T, W) window rows (slot p % W holds position p): at most
  // two contiguous slot ranges per chunk.
  copies.clear();
  for (ChunkContext& c : b.chunks) {
    WindowRing& ring = c.state->windows[layer];
    const int64_t keep = std::min(c.T, W);
    for (int64_t i = c.T - keep; i < c.T;) {
      const int64_t slot = c.host_pos[i] % W;
      const int64_t run = std::min(c.T - i, W - slot);
      copies.push_back({ring.kv.data() + slot * d, kv_new + (c.row0 + i) * d,
                        static_cast<int64_t>(run * row_bytes)});
      for (int64_t j = 0; j < run; ++j) ring.pos[slot + j] = c.host_pos[i + j];
      i += run;
    }
  }
  backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
}

void Model::Attention(int layer, BatchContext& b, const float* u, float* out) {
  const io::TextConfig& t = config_.text();
  const AttentionWeights& w = weights_->layers[layer].attn;
  const int64_t R = b.rows, D = t.hidden_size, H = t.num_attention_heads, d = t.head_dim;
  const int64_t rd = t.qk_rope_head_dim;
  const int ratio = config_.CompressRatio(layer);
  const float* inv_freq = ratio > 0 ? compress_inv_freq_.data() : main_inv_freq_.data();
  const float eps = static_cast<float>(t.rms_norm_eps);

  // The two projections of u (q's low rank and this step's window KV) in one call.
  DeviceFloats q_r0(backend_, R * t.q_lora_rank), q_r(backend_, R * t.q_lora_rank);
  DeviceFloats kv0(backend_, R * d), kv(backend_, R * d);
  const LinearOut u_outs[] = {{&w.wq_a, 0, t.q_lora_rank, q_r0.data(), t.q_lora_rank, false},
                              {&w.wkv, 0, d, kv0.data(), d, false}};
  backend_->LinearMany(u, R, D, u_outs, 2);
  backend_->RmsNorm(q_r0.data(), R, t.q_lora_rank, t.q_lora_rank, w.q_norm.data(), eps, q_r.data(),
                    t.q_lora_rank);
  DeviceFloats q(backend_, R * H * d);

  // Side branch (Backend::BeginSideBranch): this step's window KV of every row (kv_norm,
  // RoPE, FP8 fake-quant) and the compressor (reading u and kv0, writing kv and the
  // sequences' compressed state), concurrent with q's projection and the indexer's queries
  // (reading q_r and u, writing q, qi and hw). The indexer's selection follows the join.
  backend_->BeginSideBranch(R);
  backend_->RmsNorm(kv0.data(), R, d, d, w.kv_norm.data(), eps, kv.data(), d);
  RopeAndFakeQuant(backend_, kv.data(), R, 1, d, rd, b.pos.data(), inv_freq,
                   FakeQuantKind::kFp8Block32Pow2);
  Emit("layers." + std::to_string(layer) + ".window_kv", kv.data(), R, d);
  const int src = ratio > 0 ? config_.KvSourceOf(layer) : -1;
  const int gi = ratio > 0 ? GroupIndex(config_, src) : -1;
  if (ratio > 0 && src == layer) Compress(layer, b, u, gi);
  backend_->EndSideBranch();
  backend_->Linear(q_r.data(), R, t.q_lora_rank, w.wq_b, 0, H * d, q.data(), H * d);
  backend_->Rope(q.data(), R, H * d, H, d, d - rd, rd / 2, b.pos.data(), inv_freq, false);
  const bool index = ratio > 0 && config_.IsIndexSource(layer);
  std::optional<IndexerQueries> queries;
  if (index) queries = IndexerQuery(layer, b, u, q_r.data());
  backend_->JoinSideBranch();
  // The selection reads the keys the compressor wrote this step.
  if (index) IndexerSelect(layer, b, *queries, gi);

  DeviceFloats o(backend_, R * H * d);
  BatchAttention(layer, b, q.data(), kv.data(), o.data());
  backend_->Rope(o.data(), R, H * d, H, d, d - rd, rd / 2, b.pos.data(), inv_freq, true);

  // Grouped output projection: group g maps its heads' outputs through rows
  // g*o_lora .. (g+1)*o_lora-1 of wo_a; then wo_b.
  const int64_t G = t.o_groups, Rk = t.o_lora_rank, group_in = H * d / G;
  DeviceFloats z(backend_, R * G * Rk);
  CHECK_EQ(w.wo_a.rows, G * Rk) << w.wo_a.name;
  backend_->LinearGrouped(o.data(), R, H * d, group_in, w.wo_a, G, z.data(), G * Rk);
  backend_->Linear(z.data(), R, G * Rk, w.wo_b, 0, D, out, D);
}

}  // namespace deepinfer::model
