// Bit-exact replica of NumPy's `numpy.random.default_rng(seed)` (SeedSequence -> PCG64,
// XSL-RR output) and of `Generator.integers(low, high, size, dtype=np.int64)` with the
// default (Lemire, unmasked) bounded-integer algorithm. Engram's hash multipliers are
// defined by these draws (model.md §2.6), so every bit matters.
//
// Checked against NumPy 2.x outputs in src/model/testdata/numpy_rng_goldens.json
// (made by tools/reference/make_numpy_rng_goldens.py).
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer::model {

class NumpyDefaultRng {
 public:
  // Same stream as numpy.random.default_rng(seed) for a non-negative integer seed.
  explicit NumpyDefaultRng(uint64_t seed);

  // One raw PCG64 output (numpy's bit_generator.random_raw()).
  uint64_t NextUint64();
  // numpy's next_uint32: the low half of a fresh 64-bit output, the high half is kept for
  // the following call.
  uint32_t NextUint32();

  // Generator.integers(low, high, size=count, dtype=np.int64), high exclusive.
  // Requires low < high.
  std::vector<int64_t> Integers(int64_t low, int64_t high, int64_t count);

 private:
  uint64_t BoundedLemire64(uint64_t range_inclusive);
  uint32_t BoundedLemire32(uint32_t range_inclusive);

  unsigned __int128 state_ = 0;
  unsigned __int128 increment_ = 0;
  bool has_uint32_ = false;
  uint32_t buffered_uint32_ = 0;
};

// NumPy SeedSequence(entropy).generate_state(n_words, np.uint32) for an integer entropy
// with no spawn key and the default pool size 4.
std::vector<uint32_t> NumpySeedSequenceState(uint64_t entropy, int n_words);

}  // namespace deepinfer::model
