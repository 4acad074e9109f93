#include "kv/state_layout.h"

#include <algorithm>

#include "fmt/format.h"

namespace deepinfer::kv {

int64_t StateLayout::BlockBytes() const {
  int64_t bytes = 0;
  for (const KvSourceGroup& g : groups) {
    bytes += (block_tokens / g.ratio) * (g.entry_bytes + g.index_key_bytes);
  }
  return bytes;
}

int64_t StateLayout::SlotBytes() const {
  int64_t bytes = int64_t{num_window_layers} * window * window_row_bytes;
  for (const KvSourceGroup& g : groups) bytes += int64_t{g.ratio - 1} * g.partial_row_bytes;
  bytes += int64_t{engram_history_tokens} * static_cast<int64_t>(sizeof(int32_t));
  return bytes;
}

double StateLayout::CompressedBytesPerToken() const {
  return block_tokens > 0 ? static_cast<double>(BlockBytes()) / block_tokens : 0.0;
}

base::Status StateLayout::Validate() const {
  if (block_tokens <= 0) return base::InvalidArgumentError("StateLayout: block_tokens must be > 0");
  if (num_window_layers < 0 || window < 0 || window_row_bytes < 0 || engram_history_tokens < 0) {
    return base::InvalidArgumentError("StateLayout: negative window/engram size");
  }
  for (const KvSourceGroup& g : groups) {
    if (g.ratio < 1) {
      return base::InvalidArgumentError(
          fmt::format("StateLayout: group of layer {} has ratio {} < 1", g.source_layer, g.ratio));
    }
    if (block_tokens % g.ratio != 0) {
      return base::InvalidArgumentError(
          fmt::format("StateLayout: block_tokens {} is not a multiple of ratio {} (layer {})",
                      block_tokens, g.ratio, g.source_layer));
    }
    if (g.entry_bytes <= 0 || g.index_key_bytes < 0 || g.partial_row_bytes < 0) {
      return base::InvalidArgumentError(
          fmt::format("StateLayout: bad byte sizes for group of layer {}", g.source_layer));
    }
  }
  return base::Status::Ok();
}

std::string StateLayout::DebugString() const {
  std::string s = fmt::format(
      "StateLayout{{window_layers={} window={} row={}B block_tokens={} block={}B slot={}B "
      "compressed={:.1f}B/token groups=[",
      num_window_layers, window, window_row_bytes, block_tokens, BlockBytes(), SlotBytes(),
      CompressedBytesPerToken());
  for (const KvSourceGroup& g : groups) {
    s += fmt::format(" (layer {} ratio {} entry {}B key {}B)", g.source_layer, g.ratio,
                     g.entry_bytes, g.index_key_bytes);
  }
  return s + " ]}";
}

int64_t PackedWindowRowBytes(int head_dim) { return head_dim + (head_dim + 31) / 32; }
int64_t PackedCompressedEntryBytes(int head_dim) { return head_dim / 2 + (head_dim + 15) / 16; }
int64_t PackedIndexKeyBytes(int index_head_dim) {
  return index_head_dim / 2 + (index_head_dim + 31) / 32;
}

base::StatusOr<StateLayout> MakePackedStateLayout(const StateLayoutConfig& config,
                                                  int block_tokens) {
  if (static_cast<int>(config.compress_ratios.size()) < config.num_hidden_layers) {
    return base::InvalidArgumentError(fmt::format(
        "StateLayoutConfig: compress_ratios has {} entries, need num_hidden_layers = {}",
        config.compress_ratios.size(), config.num_hidden_layers));
  }
  StateLayout layout;
  layout.num_window_layers = config.num_hidden_layers + config.num_draft_layers;
  layout.window = config.sliding_window;
  layout.window_row_bytes = PackedWindowRowBytes(config.head_dim);
  layout.engram_history_tokens = std::max(config.engram_max_ngram_size - 1, 0);
  layout.block_tokens = block_tokens;
  for (int layer : config.kv_source_layer_ids) {
    if (layer < 0 || layer >= config.num_hidden_layers) {
      return base::InvalidArgumentError(
          fmt::format("StateLayoutConfig: kv_source_layer_id {} out of range", layer));
    }
    KvSourceGroup g;
    g.source_layer = layer;
    g.ratio = config.compress_ratios[layer];
    g.entry_bytes = PackedCompressedEntryBytes(config.head_dim);
    g.index_key_bytes = config.index_head_dim > 0 ? PackedIndexKeyBytes(config.index_head_dim) : 0;
    g.partial_row_bytes = int64_t{2} * config.head_dim * static_cast<int64_t>(sizeof(float));
    layout.groups.push_back(g);
  }
  DI_RETURN_IF_ERROR(layout.Validate());
  return layout;
}

StateLayoutConfig V41FlashStateLayoutConfig() {
  StateLayoutConfig c;
  c.num_hidden_layers = 40;
  c.sliding_window = 128;
  c.head_dim = 512;
  c.index_head_dim = 128;
  c.compress_ratios = {0, 0};
  c.compress_ratios.insert(c.compress_ratios.end(), 18, 2);
  c.compress_ratios.insert(c.compress_ratios.end(), 20, 1);
  c.kv_source_layer_ids = {2, 8, 14, 20};
  c.engram_max_ngram_size = 4;
  return c;
}

}  // namespace deepinfer::kv
