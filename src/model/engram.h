// Engram conditional memory (model.md §2.6): n-gram hashing of the token history into
// table row ids, and the table lookup interface.
//
// The hash is a pure function of EngramHashConstants (derived from the tokenizer and the
// config by model/engram_hash.{h,cc}, or read explicitly from a golden case's
// engram_hash.safetensors) and the token history of the sequence.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "model/backend.h"

namespace deepinfer::model {

struct EngramHashConstants {
  // token id -> compressed id ([vocab]).
  std::vector<int32_t> token_map;
  // Compressed id used before the sequence start (= token_map[engram_pad_token_id]).
  int64_t pad_id = 0;
  int n_layers = 0;   // number of Engram layers (engram_layer_ids.size())
  int max_ngram = 0;  // engram_max_ngram_size (n-grams 2..max_ngram)
  int n_heads = 0;    // engram_n_heads
  // [n_layers, max_ngram] odd multipliers; multiplier i applies to token t-i.
  std::vector<int64_t> multipliers;
  // [n_layers, columns], columns = (max_ngram-1)*n_heads, column c = (n-2)*n_heads + h.
  std::vector<int64_t> primes;
  std::vector<int64_t> offsets;  // row offset of each column in its layer's table

  int columns() const { return (max_ngram - 1) * n_heads; }
};

// Checks sizes against each other and against the expected layer count / table sizes.
// `table_rows[i]` = rows of Engram layer i's table (engram_num_embeddings).
base::Status ValidateEngramHashConstants(const EngramHashConstants& c, int n_layers, int max_ngram,
                                         int n_heads, std::span<const int64_t> table_rows);

// Row ids for each token of a chunk: out [T, n_layers, columns] (offset included).
// `history` holds the raw token ids that precede the chunk in the sequence (oldest first;
// only the last max_ngram-1 matter; fewer at the sequence start, where the pad id is used).
// Compressed ids: x = token_map[id]; H_n = XOR_{i<n} x_{t-i} * multiplier[i] (int64,
// wrapping); row = floor_mod(H_n, prime[c]) + offset[c].
void ComputeEngramRowIds(const EngramHashConstants& c, std::span<const int32_t> history,
                         std::span<const int32_t> tokens, std::vector<int64_t>* out);

// Where the Engram tables live. The release's tables are ~98 GB each: they may sit in host
// memory, on another rank, or be paged; the model only asks for rows.
class EngramTable {
 public:
  virtual ~EngramTable() = default;
  // out[i, :] = dequantised row row_ids[i] of Engram layer `engram_index` (fp32, head_dim
  // values, backend memory).
  virtual void Gather(int engram_index, const int64_t* row_ids, int64_t n, float* out) = 0;
};

// Tables read from the checkpoint's memory-mapped `layers.L.engram.embed` tensors.
class LocalEngramTable final : public EngramTable {
 public:
  LocalEngramTable(Backend* backend, std::vector<WeightRef> tables)
      : backend_(backend), tables_(std::move(tables)) {}
  void Gather(int engram_index, const int64_t* row_ids, int64_t n, float* out) override {
    backend_->GatherRows(tables_.at(engram_index), row_ids, n, out);
  }

 private:
  Backend* backend_;
  std::vector<WeightRef> tables_;
};

}  // namespace deepinfer::model
