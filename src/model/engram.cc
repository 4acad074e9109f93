#include "model/engram.h"

#include <string>

#include "base/check.h"

namespace deepinfer::model {

base::Status ValidateEngramHashConstants(const EngramHashConstants& c, int n_layers, int max_ngram,
                                         int n_heads, std::span<const int64_t> table_rows) {
  auto fail = [](const std::string& what) {
    return base::InvalidArgumentError("Engram hash constants: " + what);
  };
  if (c.n_layers != n_layers || c.max_ngram != max_ngram || c.n_heads != n_heads) {
    return fail("layers/ngram/heads " + std::to_string(c.n_layers) + "/" +
                std::to_string(c.max_ngram) + "/" + std::to_string(c.n_heads) +
                " do not match the config " + std::to_string(n_layers) + "/" +
                std::to_string(max_ngram) + "/" + std::to_string(n_heads));
  }
  if (max_ngram < 2 || n_heads < 1) return fail("engram_max_ngram_size must be >= 2");
  const size_t cols = static_cast<size_t>(c.columns());
  if (c.multipliers.size() != static_cast<size_t>(n_layers * max_ngram)) {
    return fail("multipliers has " + std::to_string(c.multipliers.size()) + " values");
  }
  if (c.primes.size() != n_layers * cols || c.offsets.size() != n_layers * cols) {
    return fail("primes/offsets have the wrong size");
  }
  if (c.token_map.empty()) return fail("empty token_map");
  if (table_rows.size() != static_cast<size_t>(n_layers)) {
    return fail("table count does not match engram_layer_ids");
  }
  for (int l = 0; l < n_layers; ++l) {
    for (size_t j = 0; j < cols; ++j) {
      const int64_t p = c.primes[l * cols + j], off = c.offsets[l * cols + j];
      if (p <= 0 || off < 0 || off + p > table_rows[l]) {
        return fail("layer " + std::to_string(l) + " column " + std::to_string(j) + ": prime " +
                    std::to_string(p) + " at offset " + std::to_string(off) +
                    " exceeds the table's " + std::to_string(table_rows[l]) + " rows");
      }
    }
  }
  return base::Status::Ok();
}

void ComputeEngramRowIds(const EngramHashConstants& c, std::span<const int32_t> history,
                         std::span<const int32_t> tokens, std::vector<int64_t>* out) {
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int cols = c.columns();
  out->assign(T * c.n_layers * cols, 0);
  // Compressed ids of history (last max_ngram-1) followed by the chunk.
  const int64_t back = c.max_ngram - 1;
  const int64_t n_hist = std::min<int64_t>(back, static_cast<int64_t>(history.size()));
  std::vector<int64_t> x;
  x.reserve(n_hist + T);
  auto map = [&](int32_t id) -> int64_t {
    CHECK(id >= 0 && static_cast<size_t>(id) < c.token_map.size()) << "token id " << id;
    return c.token_map[id];
  };
  for (int64_t i = history.size() - n_hist; i < static_cast<int64_t>(history.size()); ++i) {
    x.push_back(map(history[i]));
  }
  for (int32_t id : tokens) x.push_back(map(id));
  for (int64_t t = 0; t < T; ++t) {
    const int64_t cur = n_hist + t;  // index in x
    for (int l = 0; l < c.n_layers; ++l) {
      const int64_t* mult = c.multipliers.data() + l * c.max_ngram;
      uint64_t h = 0;
      for (int i = 0; i < c.max_ngram; ++i) {
        const int64_t xi = cur - i >= 0 ? x[cur - i] : c.pad_id;
        h ^= static_cast<uint64_t>(xi) * static_cast<uint64_t>(mult[i]);
        const int n = i + 1;
        if (n < 2) continue;
        for (int head = 0; head < c.n_heads; ++head) {
          const int col = (n - 2) * c.n_heads + head;
          const int64_t p = c.primes[l * cols + col];
          int64_t r = static_cast<int64_t>(h) % p;
          if (r < 0) r += p;
          (*out)[(t * c.n_layers + l) * cols + col] = r + c.offsets[l * cols + col];
        }
      }
    }
  }
}

}  // namespace deepinfer::model
