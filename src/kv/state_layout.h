// StateLayout: how much per-sequence decode state a V4.1-style model needs, by kind.
//
// V4.1 state is not a plain per-token KV cache (model spec §2.9):
//   * every attention layer keeps a ring of the last `window` window-KV rows (bounded);
//   * every KV-source group (compress ratio r >= 1) grows by one compressed KV entry and one
//     indexer key per r tokens (unbounded, paged in blocks);
//   * ratio-r groups with r > 1 buffer up to r-1 tokens' (c, z) rows in fp32 (bounded);
//   * Engram keeps the last (max_ngram - 1) token ids (bounded).
// The bounded parts form a per-sequence "slot"; the unbounded part lives in blocks of
// `block_tokens` raw tokens (see kv/README.md). This header is a plain struct so that the
// engine can fill it from any model config without kv depending on model headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/statusor.h"

namespace deepinfer::kv {

// One KV-source group: a compressor layer whose compressed KV (and index keys) are shared by
// the following layers of the same ratio.
struct KvSourceGroup {
  int source_layer = 0;           // backbone layer id owning the compressor
  int ratio = 1;                  // tokens per compressed entry (>= 1)
  int64_t entry_bytes = 0;        // one compressed KV entry (release: 288 B, FP4 + e4m3 scales)
  int64_t index_key_bytes = 0;    // one indexer key (release: 68 B, FP4 + ue8m0); 0 if none
  int64_t partial_row_bytes = 0;  // one buffered token's (c, z) rows (release: 2*512*4 B)
};

struct StateLayout {
  int num_window_layers = 0;     // layers with a window ring (backbone + draft layers)
  int window = 0;                // ring length in tokens (sliding_window)
  int64_t window_row_bytes = 0;  // one window-KV row (release: 512 e4m3 + 16 ue8m0 = 528 B)
  std::vector<KvSourceGroup> groups;
  int engram_history_tokens = 0;  // token ids kept for Engram n-grams (max_ngram - 1)
  int block_tokens = 64;          // raw tokens covered by one block

  // Compressed bytes one block holds: sum over groups of (block_tokens / ratio) *
  // (entry_bytes + index_key_bytes).
  int64_t BlockBytes() const;
  // Bounded per-sequence state: window rings + partial-group buffers + Engram history.
  int64_t SlotBytes() const;
  // Average compressed bytes per token (BlockBytes / block_tokens), for documentation.
  double CompressedBytesPerToken() const;

  // OK iff sizes are positive and block_tokens is a multiple of every group's ratio (so a
  // block boundary is always a compressed-group boundary and the partial-group buffer is
  // empty there — what makes a complete block an immutable, shareable unit).
  base::Status Validate() const;
  std::string DebugString() const;
};

// The model quantities a layout is derived from (names follow the V4.1 text_config).
struct StateLayoutConfig {
  int num_hidden_layers = 0;
  int num_draft_layers = 0;  // DSpark layers (each has a window ring); 0 if not run
  int sliding_window = 0;
  int head_dim = 0;                      // window / compressed KV latent width
  int index_head_dim = 0;                // 0 if the model has no indexer
  std::vector<int> compress_ratios;      // per backbone layer
  std::vector<int> kv_source_layer_ids;  // layers owning a compressor
  int engram_max_ngram_size = 0;         // 0 if no Engram layers
};

// Byte sizes of one stored row in the release's packed cache formats (model spec §2.8-2.9).
int64_t PackedWindowRowBytes(int head_dim);        // e4m3 + one ue8m0 per 32
int64_t PackedCompressedEntryBytes(int head_dim);  // e2m1 + one e4m3 per 16
int64_t PackedIndexKeyBytes(int index_head_dim);   // e2m1 + one ue8m0 per 32

// A layout with the release's packed formats and fp32 partial-group buffers.
base::StatusOr<StateLayout> MakePackedStateLayout(const StateLayoutConfig& config,
                                                  int block_tokens);

// The DeepSeek-V4.1-Flash text_config of model spec §1.1 (no DSpark layers).
StateLayoutConfig V41FlashStateLayoutConfig();

}  // namespace deepinfer::kv
