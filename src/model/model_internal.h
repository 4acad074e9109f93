// Per-forward scratch shared by the pieces of Model (model.cc, attention.cc). Internal.
//
// One Forward runs all its chunks together: every per-row op (norms, mHC, linears, MoE) sees
// the rows of all chunks at once ([rows, ...], chunk after chunk), so each weight is read
// once per step however many sequences the step holds. Only what depends on a sequence's
// own state (window ring, compressed entries, indexer scores and top-k, sparse attention)
// runs per chunk, on that chunk's slice of rows.
#pragma once

#include <cstdint>
#include <vector>

#include "model/device_array.h"
#include "model/model.h"

namespace deepinfer::model {

// Launch-shape buckets. A GPU backend replays a captured decode step only when the step
// issues the same calls with the same integer arguments and buffer sizes as an earlier one
// (only uploaded contents may differ), so the sizes that grow with the context are rounded
// up to buckets: in steady decode (same batch, T = 1 each) two steps differ only where a
// bucket boundary or the ratio-2 compressor's parity lies between them.
//
// LaunchBucket(n): n rounded up to a multiple of max(512, 2^j), 2^j the largest power of two
// with 2^j * 8 <= n, i.e. at most 511 extra below n = 8192 and less than n / 8 above (eight
// buckets per doubling). Used for the indexer's score-row width (padded columns score -inf:
// they are never kept by the candidate mask nor picked by the top-k) and for the rows of the
// gathered index-key buffer. 0 stays 0.
int64_t LaunchBucket(int64_t n);
// Per-row block slots of a paged addressing table for up to `blocks` blocks: the next power
// of two (>= 1). Kernels read only the slots below ceil(count / rows_per_block).
int64_t PagedBlockSlots(int64_t blocks);

struct Model::ChunkContext {
  SequenceState* state = nullptr;
  int64_t T = 0;                  // tokens of this chunk
  int64_t row0 = 0;               // its first row in the batch
  std::vector<int32_t> host_pos;  // [T]
  const int32_t* pos = nullptr;   // [T] backend memory (a slice of BatchContext::pos)
};

// Per-row block addressing of one group's paged rows for this forward, uploaded once (one
// copy) and shared by the group's layers (rows only grow at the group's source layer, which
// comes first): bases [rows * blocks] (float addresses as int64), count [rows] (the row's
// group rows), then per-row ranges comp_offset [rows] (= row * k) and comp_len [rows] (= k)
// where k > 0 (the selected-entry gather).
struct Model::PagedAddressing {
  DeviceInts buf;  // empty until a layer of the group needs it
  int64_t blocks = 0, rows_per_block = 0, k = 0;
  bool aligned16 = true;  // every base is 16-byte aligned
  const int64_t* bases() const { return reinterpret_cast<const int64_t*>(buf.data()); }
  const int32_t* count(int64_t rows) const { return buf.data() + 2 * rows * blocks; }
  const int32_t* ranges(int64_t rows) const { return count(rows) + rows; }
};

struct Model::BatchContext {
  int64_t rows = 0;                  // sum of the chunks' T
  DeviceInts pos;                    // [rows] absolute positions
  DeviceFloats x;                    // residual streams [rows, hc, D]
  std::vector<int64_t> engram_ids;   // [rows, n_engram_layers, columns]
  std::vector<ChunkContext> chunks;  // in batch order
  // Top-k published by the most recent index source of this forward: [rows, n_select] entry
  // ids of group `selection_group` (each chunk's own ids, -1 = empty slot; n_select is the
  // largest of the chunks' min(index_topk, entries)).
  DeviceInts selection;
  int64_t n_select = 0;
  int selection_group = -1;
  int selection_serial = 0;  // incremented at each new selection
  // Candidate-block mask published by the candidate source: [rows, LaunchBucket(mask_entries)]
  // bytes, mask_entries the largest of the chunks' key counts (a later index layer of the
  // group applies it only for the same count).
  DeviceInts candidate_mask;  // byte storage
  int64_t mask_entries = -1;
  int mask_group = -1;
  // Per KV-source group: every chunk's entries gathered into one buffer (chunk after chunk,
  // chunk i's rows from comp_offsets[gi][i]); empty until an attention layer needs them.
  std::vector<DeviceFloats> comp_entries;
  std::vector<std::vector<int64_t>> comp_offsets;
  std::vector<DeviceInts> comp_ranges;  // per group: comp_offset [rows], then comp_len [rows]
  // Or, when it moves fewer rows (decode: k selected of many entries), only the selected
  // entries of group sel_group for selection number sel_serial: [rows * n_select, head_dim],
  // with the selection remapped to slots (Backend::GatherSelectedRows) and per-row ranges.
  DeviceFloats sel_entries;
  DeviceInts sel_remapped;
  int sel_group = -1;
  int sel_serial = -1;
  std::vector<PagedAddressing> sel_addressing;  // entries, for GatherSelectedRows
  std::vector<PagedAddressing> key_addressing;  // index keys, for IndexerScoresPaged
  // Window rows of the varlen attention, the same in every layer (each ring holds the last
  // min(length, window) positions): chunk i's cached rows start at window_at[i], then its new
  // rows; window_meta holds window_pos [window_rows], window_start [rows], window_len [rows].
  int64_t window_rows = -1;  // -1: not laid out yet
  std::vector<int64_t> window_at;
  DeviceInts window_meta;
  // Likewise every chunk's index keys (for the varlen indexer), with per-row key ranges
  // (int32: key_offset [rows], then key_len [rows]).
  std::vector<DeviceFloats> index_keys;
  std::vector<DeviceInts> index_key_ranges;
};

}  // namespace deepinfer::model
