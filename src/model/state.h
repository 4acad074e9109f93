// Per-sequence decode state of the V4.1 text backbone (model.md §2.9).
//
// Everything a later forward of the same sequence needs, and nothing else (mHC keeps no
// state: the pre-mix is recomputed per token). Layout and mutability, for paging and
// prefix sharing by the engine:
//
//  * `windows[layer]` — every layer's sliding-window ring of the last `sliding_window`
//    window-KV rows (fp32 values that are exactly e4m3 x pow2-scale representable). SMALL
//    and MUTABLE: slot p % window is overwritten by position p. Not shareable across
//    sequences once they diverge (copy on fork: window * head_dim floats per layer).
//  * `groups[i]` — one per KV source (kv_source_layer_ids[i]): the compressed KV entries
//    (one [head_dim] row per completed group g, FP4-representable; row g covers positions
//    g*ratio .. g*ratio+ratio-1) and the indexer key of each entry ([index_head_dim]) live
//    in the sequence's BLOCKS (below); `n_entries()` counts them. Both are APPEND-ONLY and
//    IMMUTABLE once written: a prefix of N tokens owns exactly rows [0, N / ratio) of every
//    group, so an identical prompt prefix can share them.
//      - `pending_c`, `pending_z`, `n_pending`: the < ratio trailing tokens of an incomplete
//        group (compressor inputs, fp32). SMALL and MUTABLE.
//  * `blocks` — the paged compressed state (StateBlocks below).
//  * `recent_tokens` — the Engram hash history: the last engram_max_ngram_size-1 token ids.
//    SMALL and MUTABLE. Empty for a new sequence (the hash pads before the start).
//  * `length` — tokens consumed so far = the position of the next token.
#pragma once

#include <cstdint>
#include <vector>

#include "model/device_array.h"

namespace deepinfer::model {

struct WindowRing {
  DeviceFloats kv;           // [window, head_dim]
  std::vector<int32_t> pos;  // [window] position held by each slot, -1 = empty (host)
};

// One KV-source group. Its rows sit in every block of the sequence at fixed offsets:
// entry e lives in block e / entries_per_block, row e % entries_per_block.
struct KvGroupState {
  int source_layer = -1;
  int ratio = 0;
  int64_t entries_per_block = 0;  // block_tokens / ratio
  int64_t entry_offset = 0;       // floats from a block's base to this group's entry rows
  int64_t key_offset = 0;         // floats from a block's base to its index-key rows (if has_keys)
  bool has_keys = false;          // the source layer has an indexer
  int64_t entry_count = 0;
  DeviceFloats pending_c, pending_z;  // [ratio-1, head_dim]
  int64_t n_pending = 0;
  int64_t n_entries() const { return entry_count; }
};

// Paged compressed state. A block covers `block_tokens` raw tokens (a multiple of every
// ratio) and holds, for each group in order, its entries_per_block entry rows [head_dim]
// then (if has_keys) its index-key rows [index_head_dim]: `block_floats` fp32 values in
// backend memory. `table[i]` is the base of the block covering tokens [i*B, (i+1)*B).
//
// Two owners: a standalone sequence (Model::NewSequence) allocates its blocks itself into
// `owned` as it grows; an engine sequence (Model::NewPagedSequence) gets `table` filled by
// its runner from the request's block table before each Forward (the blocks belong to the
// runner's pool and may be shared with other sequences: complete blocks are never written).
struct StateBlocks {
  int block_tokens = 0;
  int64_t block_floats = 0;
  bool self_allocating = true;
  std::vector<float*> table;
  std::vector<DeviceFloats> owned;  // standalone only: the blocks `table` points to
};

struct SequenceState {
  int64_t length = 0;
  std::vector<WindowRing> windows;     // per layer
  std::vector<KvGroupState> groups;    // per KV source, in kv_source_layer_ids order
  StateBlocks blocks;                  // compressed entries + index keys of every group
  std::vector<int32_t> recent_tokens;  // Engram history (last max_ngram-1 ids)
};

}  // namespace deepinfer::model
