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
//  * `groups[i]` — one per KV source (kv_source_layer_ids[i]):
//      - `entries`  compressed KV, one row per completed group g (head_dim values,
//        FP4-representable), row g covers positions g*ratio .. g*ratio+ratio-1;
//      - `index_keys` the indexer key of each entry (index_head_dim values).
//    Both are APPEND-ONLY and IMMUTABLE once written: a prefix of N tokens owns exactly
//    rows [0, N / ratio) of every group, so an identical prompt prefix can share them.
//      - `pending_c`, `pending_z`, `n_pending`: the < ratio trailing tokens of an incomplete
//        group (compressor inputs, fp32). SMALL and MUTABLE.
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

struct KvGroupState {
  int source_layer = -1;
  int ratio = 0;
  DeviceRows entries;     // [n_entries, head_dim]
  DeviceRows index_keys;  // [n_entries, index_head_dim] (empty if the source has no indexer)
  DeviceFloats pending_c, pending_z;  // [ratio-1, head_dim]
  int64_t n_pending = 0;
  int64_t n_entries() const { return entries.rows(); }
};

struct SequenceState {
  int64_t length = 0;
  std::vector<WindowRing> windows;     // per layer
  std::vector<KvGroupState> groups;    // per KV source, in kv_source_layer_ids order
  std::vector<int32_t> recent_tokens;  // Engram history (last max_ngram-1 ids)
};

}  // namespace deepinfer::model
