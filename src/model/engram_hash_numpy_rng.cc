#include "model/engram_hash_numpy_rng.h"

#include "base/check.h"

namespace deepinfer::model {
namespace {

// SeedSequence constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5;
constexpr uint32_t kMultA = 0x931e8875;
constexpr uint32_t kInitB = 0x8b51f9dd;
constexpr uint32_t kMultB = 0x58f38ded;
constexpr uint32_t kMixMultL = 0xca01f9dd;
constexpr uint32_t kMixMultR = 0x4973f715;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t HashMix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t Mix(uint32_t x, uint32_t y) {
  uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

// The integer entropy as little-endian 32-bit words (0 -> one zero word).
std::vector<uint32_t> EntropyWords(uint64_t entropy) {
  std::vector<uint32_t> words;
  do {
    words.push_back(static_cast<uint32_t>(entropy));
    entropy >>= 32;
  } while (entropy != 0);
  return words;
}

constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;

}  // namespace

std::vector<uint32_t> NumpySeedSequenceState(uint64_t entropy, int n_words) {
  const std::vector<uint32_t> words = EntropyWords(entropy);
  uint32_t pool[kPoolSize];
  uint32_t hash_const = kInitA;
  for (int i = 0; i < kPoolSize; ++i) {
    pool[i] = HashMix(i < static_cast<int>(words.size()) ? words[i] : 0, hash_const);
  }
  for (int src = 0; src < kPoolSize; ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) pool[dst] = Mix(pool[dst], HashMix(pool[src], hash_const));
    }
  }
  for (size_t src = kPoolSize; src < words.size(); ++src) {
    for (int dst = 0; dst < kPoolSize; ++dst) {
      pool[dst] = Mix(pool[dst], HashMix(words[src], hash_const));
    }
  }
  std::vector<uint32_t> state(n_words);
  uint32_t out_const = kInitB;
  for (int i = 0; i < n_words; ++i) {
    uint32_t value = pool[i % kPoolSize];
    value ^= out_const;
    out_const *= kMultB;
    value *= out_const;
    value ^= value >> kXShift;
    state[i] = value;
  }
  return state;
}

NumpyDefaultRng::NumpyDefaultRng(uint64_t seed) {
  // PCG64 seeding: four uint64 words (pairs of uint32, low word first); words 0,1 are the
  // 128-bit initial state (high, low), words 2,3 the stream selector (high, low).
  const std::vector<uint32_t> s = NumpySeedSequenceState(seed, 8);
  uint64_t w[4];
  for (int i = 0; i < 4; ++i) w[i] = s[2 * i] | (static_cast<uint64_t>(s[2 * i + 1]) << 32);
  const unsigned __int128 init_state = (static_cast<unsigned __int128>(w[0]) << 64) | w[1];
  const unsigned __int128 stream = (static_cast<unsigned __int128>(w[2]) << 64) | w[3];
  increment_ = (stream << 1) | 1;
  state_ = 0;
  state_ = state_ * kPcgMultiplier + increment_;
  state_ += init_state;
  state_ = state_ * kPcgMultiplier + increment_;
}

uint64_t NumpyDefaultRng::NextUint64() {
  state_ = state_ * kPcgMultiplier + increment_;
  const uint64_t high = static_cast<uint64_t>(state_ >> 64);
  const uint64_t low = static_cast<uint64_t>(state_);
  const unsigned rotation = static_cast<unsigned>(high >> 58);
  const uint64_t xored = high ^ low;
  return (xored >> rotation) | (xored << ((64 - rotation) & 63));
}

uint32_t NumpyDefaultRng::NextUint32() {
  if (has_uint32_) {
    has_uint32_ = false;
    return buffered_uint32_;
  }
  const uint64_t next = NextUint64();
  has_uint32_ = true;
  buffered_uint32_ = static_cast<uint32_t>(next >> 32);
  return static_cast<uint32_t>(next);
}

// Lemire's nearly-divisionless method: a value in [0, range_inclusive].
uint64_t NumpyDefaultRng::BoundedLemire64(uint64_t range_inclusive) {
  const uint64_t range_exclusive = range_inclusive + 1;
  unsigned __int128 m = static_cast<unsigned __int128>(NextUint64()) * range_exclusive;
  uint64_t leftover = static_cast<uint64_t>(m);
  if (leftover < range_exclusive) {
    const uint64_t threshold = (UINT64_MAX - range_inclusive) % range_exclusive;
    while (leftover < threshold) {
      m = static_cast<unsigned __int128>(NextUint64()) * range_exclusive;
      leftover = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

uint32_t NumpyDefaultRng::BoundedLemire32(uint32_t range_inclusive) {
  const uint32_t range_exclusive = range_inclusive + 1;
  uint64_t m = static_cast<uint64_t>(NextUint32()) * range_exclusive;
  uint32_t leftover = static_cast<uint32_t>(m);
  if (leftover < range_exclusive) {
    const uint32_t threshold = (UINT32_MAX - range_inclusive) % range_exclusive;
    while (leftover < threshold) {
      m = static_cast<uint64_t>(NextUint32()) * range_exclusive;
      leftover = static_cast<uint32_t>(m);
    }
  }
  return static_cast<uint32_t>(m >> 32);
}

std::vector<int64_t> NumpyDefaultRng::Integers(int64_t low, int64_t high, int64_t count) {
  CHECK_LT(low, high) << "NumpyDefaultRng::Integers needs low < high";
  CHECK_GE(count, 0);
  // numpy: rng = (high - 1) - low as uint64, values = low + bounded(rng).
  const uint64_t range = static_cast<uint64_t>(high - 1) - static_cast<uint64_t>(low);
  std::vector<int64_t> out(count);
  for (int64_t i = 0; i < count; ++i) {
    uint64_t draw;
    if (range == 0) {
      draw = 0;
    } else if (range <= UINT32_MAX) {
      draw = range == UINT32_MAX ? NextUint32() : BoundedLemire32(static_cast<uint32_t>(range));
    } else if (range == UINT64_MAX) {
      draw = NextUint64();
    } else {
      draw = BoundedLemire64(range);
    }
    out[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + draw);
  }
  return out;
}

}  // namespace deepinfer::model
