// Tuning and measurement knobs of the CUDA kernels read from the environment (host only).
#pragma once

#include <cstdint>
#include <cstdlib>

namespace deepinfer::backend::cuda {

// The integer of environment variable `name` clamped to [lo, hi], or `fallback` when unset.
// Callers read it once, into a function-local static.
inline int EnvIntClamped(const char* name, int fallback, int lo, int hi) {
  const char* env = std::getenv(name);
  const int v = env != nullptr ? std::atoi(env) : fallback;
  return v < lo ? lo : v > hi ? hi : v;
}

// The integer of environment variable `name` when it is set to a whole decimal number in
// [lo, hi], else `fallback` (unset, empty, malformed or out of range). Reads the environment on
// every call (tests and A/B runs switch such knobs between calls).
inline int64_t EnvIntOr(const char* name, int64_t fallback, int64_t lo, int64_t hi) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  return *end == '\0' && v >= lo && v <= hi ? static_cast<int64_t>(v) : fallback;
}

}  // namespace deepinfer::backend::cuda
