// Per-forward scratch shared by the pieces of Model (model.cc, attention.cc). Internal.
#pragma once

#include <cstdint>
#include <vector>

#include "model/device_array.h"
#include "model/model.h"

namespace deepinfer::model {

struct Model::ChunkContext {
  SequenceState* state = nullptr;
  int64_t T = 0;
  std::vector<int32_t> host_pos;    // [T]
  DeviceInts pos;                   // [T]
  DeviceFloats x;                   // residual streams [T, hc, D]
  std::vector<int64_t> engram_ids;  // [T, n_engram_layers, columns]

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

}  // namespace deepinfer::model
