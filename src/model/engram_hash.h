// Engram hashing constants (model.md §2.6), derived for any V4.1 config + tokenizer exactly
// as upstream transformers does (build_compressed_token_map, EngramLayout.from_config,
// compute_hash_multipliers):
//   token_map   [vocab]                      token id -> compressed id (engram_hash_token_map.h)
//   pad_id                                    token_map[engram_pad_token_id]
//   multipliers [n_layers, max_ngram]         2 v + 1, v = numpy default_rng(10007 * layer_id)
//                                             .integers(0, (2^63-1) // compressed_vocab // 2)
//   primes      [n_layers, (max_ngram-1)*heads] column c = (n-2)*heads + h: for each layer in
//                                             order, each n, each head: the next prime not yet
//                                             used, searching upward from engram_vocab_size
//                                             (restarting there for every n)
//   offsets     same shape                    exclusive prefix sums of a layer's primes
// Row id of column c for hash H_n: (H_n mod primes[c]) + offsets[c].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/statusor.h"
#include "io/model_config.h"
#include "model/engram.h"
#include "model/engram_hash_token_map.h"

namespace deepinfer::model {

struct DerivedEngramConstants {
  int64_t n_layers = 0;        // len(engram_layer_ids)
  int64_t max_ngram_size = 0;  // engram_max_ngram_size
  int64_t n_columns = 0;       // (max_ngram_size - 1) * engram_n_heads
  int64_t compressed_vocab_size = 0;
  int64_t pad_id = 0;
  std::vector<int32_t> token_map;    // [vocab]
  std::vector<int64_t> multipliers;  // [n_layers * max_ngram_size], row-major
  std::vector<int64_t> primes;       // [n_layers * n_columns], row-major
  std::vector<int64_t> offsets;      // [n_layers * n_columns], row-major
};

// Deterministic primality for every 64-bit value (Miller-Rabin with a proven base set).
bool IsPrime64(uint64_t n);

// primes [n_layers * (max_ngram-1) * n_heads] per the rule above.
std::vector<int64_t> EngramPrimes(int64_t n_layers, int64_t max_ngram_size, int64_t n_heads,
                                  int64_t engram_vocab_size);
// offsets: per-layer exclusive prefix sums of `primes` (rows of `n_columns`).
std::vector<int64_t> EngramOffsets(std::span<const int64_t> primes, int64_t n_columns);
// multipliers [layer_ids.size() * max_ngram_size].
std::vector<int64_t> EngramMultipliers(std::span<const int> layer_ids, int64_t max_ngram_size,
                                       int64_t compressed_vocab_size);

// Everything, from the text config and the tokenizer's vocabulary. Errors (messages name
// the field): no Engram layers, bad sizes, a compressed vocab size that differs from
// engram_compressed_vocab_size (upstream refuses that too: every multiplier depends on it),
// table sizes that differ from engram_num_embeddings, a pad id outside the vocabulary.
base::StatusOr<DerivedEngramConstants> DeriveEngramConstants(
    const io::TextConfig& config, std::span<const EngramVocabEntry> vocab);
// Same, reading the vocabulary from a tokenizer.json (LoadEngramVocab).
base::StatusOr<DerivedEngramConstants> DeriveEngramConstants(
    const io::TextConfig& config, const std::string& tokenizer_json_path);

// The model's form (model/engram.h). `n_heads` = engram_n_heads.
EngramHashConstants ToEngramHashConstants(const DerivedEngramConstants& derived, int n_heads);

// Convenience for the model loader: config + tokenizer.json -> EngramHashConstants.
base::StatusOr<EngramHashConstants> DeriveEngramHashConstants(
    const io::TextConfig& config, const std::string& tokenizer_json_path);

}  // namespace deepinfer::model
