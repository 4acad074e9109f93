#include "model/engram_hash.h"

#include <limits>
#include <set>
#include <string>

#include "base/check.h"
#include "model/engram_hash_numpy_rng.h"

namespace deepinfer::model {
namespace {

uint64_t MulMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t PowMod(uint64_t base, uint64_t exponent, uint64_t m) {
  uint64_t result = 1;
  base %= m;
  while (exponent > 0) {
    if (exponent & 1) result = MulMod(result, base, m);
    base = MulMod(base, base, m);
    exponent >>= 1;
  }
  return result;
}

// One Miller-Rabin round: false if `a` proves n (odd, > 2) composite.
bool PassesRound(uint64_t n, uint64_t a, uint64_t d, int s) {
  uint64_t x = PowMod(a, d, n);
  if (x == 1 || x == n - 1) return true;
  for (int r = 1; r < s; ++r) {
    x = MulMod(x, x, n);
    if (x == n - 1) return true;
  }
  return false;
}

std::string Field(const char* name) { return std::string("text_config.") + name; }

}  // namespace

bool IsPrime64(uint64_t n) {
  if (n < 2) return false;
  // The first 12 primes are a deterministic witness set for all n < 3.3e24.
  static constexpr uint64_t kWitnesses[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
  for (const uint64_t p : kWitnesses) {
    if (n % p == 0) return n == p;
  }
  uint64_t d = n - 1;
  int s = 0;
  while ((d & 1) == 0) {
    d >>= 1;
    ++s;
  }
  for (const uint64_t a : kWitnesses) {
    if (!PassesRound(n, a, d, s)) return false;
  }
  return true;
}

std::vector<int64_t> EngramPrimes(int64_t n_layers, int64_t max_ngram_size, int64_t n_heads,
                                  int64_t engram_vocab_size) {
  std::vector<int64_t> primes;
  std::set<int64_t> used;
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    for (int64_t n = 2; n <= max_ngram_size; ++n) {
      int64_t candidate = engram_vocab_size - 1;
      for (int64_t head = 0; head < n_heads; ++head) {
        do {
          ++candidate;
        } while (!IsPrime64(static_cast<uint64_t>(candidate)) || used.count(candidate) != 0);
        used.insert(candidate);
        primes.push_back(candidate);
      }
    }
  }
  return primes;
}

std::vector<int64_t> EngramOffsets(std::span<const int64_t> primes, int64_t n_columns) {
  CHECK_GT(n_columns, 0);
  CHECK_EQ(primes.size() % static_cast<size_t>(n_columns), 0u);
  std::vector<int64_t> offsets(primes.size());
  int64_t total = 0;
  for (size_t i = 0; i < primes.size(); ++i) {
    if (i % static_cast<size_t>(n_columns) == 0) total = 0;
    offsets[i] = total;
    total += primes[i];
  }
  return offsets;
}

std::vector<int64_t> EngramMultipliers(std::span<const int> layer_ids, int64_t max_ngram_size,
                                       int64_t compressed_vocab_size) {
  CHECK_GT(compressed_vocab_size, 0);
  const int64_t bound =
      std::max<int64_t>(1, std::numeric_limits<int64_t>::max() / compressed_vocab_size / 2);
  std::vector<int64_t> multipliers;
  for (const int layer_id : layer_ids) {
    NumpyDefaultRng rng(10007ULL * static_cast<uint64_t>(layer_id));
    for (const int64_t v : rng.Integers(0, bound, max_ngram_size)) multipliers.push_back(2 * v + 1);
  }
  return multipliers;
}

base::StatusOr<DerivedEngramConstants> DeriveEngramConstants(
    const io::TextConfig& config, std::span<const EngramVocabEntry> vocab) {
  const int64_t n_layers = static_cast<int64_t>(config.engram_layer_ids.size());
  if (n_layers == 0) {
    return base::InvalidArgumentError(Field("engram_layer_ids") + " is empty: no Engram layers");
  }
  if (config.engram_max_ngram_size < 2) {
    return base::InvalidArgumentError(Field("engram_max_ngram_size") + " must be >= 2");
  }
  if (config.engram_n_heads < 1) {
    return base::InvalidArgumentError(Field("engram_n_heads") + " must be >= 1");
  }
  if (config.engram_vocab_size < 1 || config.engram_vocab_size > (int64_t{1} << 62)) {
    return base::InvalidArgumentError(Field("engram_vocab_size") + " must be in [1, 2^62]");
  }
  // Bounds far above any real config, so that a corrupt config cannot make the prime search
  // run for hours.
  if (config.engram_max_ngram_size > 64 || config.engram_n_heads > 4096 || n_layers > 4096 ||
      n_layers * (config.engram_max_ngram_size - 1) * config.engram_n_heads > (1 << 16)) {
    return base::InvalidArgumentError(
        "Engram hash columns: engram_layer_ids x (engram_max_ngram_size - 1) x engram_n_heads "
        "is too large");
  }
  for (const int id : config.engram_layer_ids) {
    if (id < 0) return base::InvalidArgumentError(Field("engram_layer_ids") + " has a negative id");
  }
  if (vocab.empty()) return base::InvalidArgumentError("tokenizer vocabulary is empty");

  DerivedEngramConstants out;
  out.n_layers = n_layers;
  out.max_ngram_size = config.engram_max_ngram_size;
  out.n_columns = (out.max_ngram_size - 1) * config.engram_n_heads;

  CompressedTokenMap map = BuildCompressedTokenMap(vocab);
  if (map.compressed_vocab_size != config.engram_compressed_vocab_size) {
    return base::InvalidArgumentError("the tokenizer-derived compressed vocabulary has " +
                                      std::to_string(map.compressed_vocab_size) + " entries but " +
                                      Field("engram_compressed_vocab_size") + " is " +
                                      std::to_string(config.engram_compressed_vocab_size) +
                                      " (wrong tokenizer for this checkpoint?)");
  }
  const int64_t pad_token = config.engram_pad_token_id;
  if (pad_token < 0 || pad_token >= static_cast<int64_t>(map.token_map.size())) {
    return base::InvalidArgumentError(Field("engram_pad_token_id") + " " +
                                      std::to_string(pad_token) + " is outside the vocabulary");
  }
  out.compressed_vocab_size = map.compressed_vocab_size;
  out.pad_id = map.token_map[pad_token];
  out.token_map = std::move(map.token_map);

  out.primes =
      EngramPrimes(n_layers, out.max_ngram_size, config.engram_n_heads, config.engram_vocab_size);
  out.offsets = EngramOffsets(out.primes, out.n_columns);
  out.multipliers =
      EngramMultipliers(config.engram_layer_ids, out.max_ngram_size, out.compressed_vocab_size);

  if (config.engram_num_embeddings.size() != static_cast<size_t>(n_layers)) {
    return base::InvalidArgumentError(Field("engram_num_embeddings") + " has " +
                                      std::to_string(config.engram_num_embeddings.size()) +
                                      " entries, expected one per Engram layer");
  }
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    const int64_t last = (layer + 1) * out.n_columns - 1;
    const int64_t rows = out.offsets[last] + out.primes[last];
    if (rows != config.engram_num_embeddings[layer]) {
      return base::InvalidArgumentError(Field("engram_num_embeddings") + "[" +
                                        std::to_string(layer) + "] is " +
                                        std::to_string(config.engram_num_embeddings[layer]) +
                                        " but the primes sum to " + std::to_string(rows));
    }
  }
  return out;
}

base::StatusOr<DerivedEngramConstants> DeriveEngramConstants(
    const io::TextConfig& config, const std::string& tokenizer_json_path) {
  DI_ASSIGN_OR_RETURN(const std::vector<EngramVocabEntry> vocab,
                      LoadEngramVocab(tokenizer_json_path));
  auto derived = DeriveEngramConstants(config, vocab);
  if (!derived.ok()) return derived.status().WithContext(tokenizer_json_path);
  return derived;
}

EngramHashConstants ToEngramHashConstants(const DerivedEngramConstants& derived, int n_heads) {
  CHECK_EQ(derived.n_columns, (derived.max_ngram_size - 1) * n_heads);
  EngramHashConstants c;
  c.token_map = derived.token_map;
  c.pad_id = derived.pad_id;
  c.n_layers = static_cast<int>(derived.n_layers);
  c.max_ngram = static_cast<int>(derived.max_ngram_size);
  c.n_heads = n_heads;
  c.multipliers = derived.multipliers;
  c.primes = derived.primes;
  c.offsets = derived.offsets;
  return c;
}

base::StatusOr<EngramHashConstants> DeriveEngramHashConstants(
    const io::TextConfig& config, const std::string& tokenizer_json_path) {
  DI_ASSIGN_OR_RETURN(const DerivedEngramConstants derived,
                      DeriveEngramConstants(config, tokenizer_json_path));
  return ToEngramHashConstants(derived, config.engram_n_heads);
}

}  // namespace deepinfer::model
