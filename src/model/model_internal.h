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

struct Model::ChunkContext {
  SequenceState* state = nullptr;
  int64_t T = 0;                  // tokens of this chunk
  int64_t row0 = 0;               // its first row in the batch
  std::vector<int32_t> host_pos;  // [T]
  const int32_t* pos = nullptr;   // [T] backend memory (a slice of BatchContext::pos)

  // Top-k published by the most recent index source of this forward ([T, n_select]
  // entry ids of group `selection_group`, -1 = empty slot).
  DeviceInts selection;
  int64_t n_select = 0;
  int selection_group = -1;
  // Candidate-block mask published by the candidate source ([T, mask_entries] bytes).
  DeviceInts candidate_mask;  // byte storage
  int64_t mask_entries = -1;
  int mask_group = -1;
  // Per KV-source group: its entries / index keys gathered from the blocks (contiguous scratch
  // for the attention and indexer ops) and how many rows each holds (-1: not gathered yet).
  std::vector<DeviceFloats> gathered_entries, gathered_keys;
  std::vector<int64_t> gathered_entry_rows, gathered_key_rows;
};

struct Model::BatchContext {
  int64_t rows = 0;                  // sum of the chunks' T
  DeviceInts pos;                    // [rows] absolute positions
  DeviceFloats x;                    // residual streams [rows, hc, D]
  std::vector<int64_t> engram_ids;   // [rows, n_engram_layers, columns]
  std::vector<ChunkContext> chunks;  // in batch order
};

}  // namespace deepinfer::model
