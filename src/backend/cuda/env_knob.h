// Tuning and measurement knobs of the CUDA kernels read from the environment (host only).
#pragma once

#include <cstdlib>

namespace deepinfer::backend::cuda {

// The integer of environment variable `name` clamped to [lo, hi], or `fallback` when unset.
// Callers read it once, into a function-local static.
inline int EnvIntClamped(const char* name, int fallback, int lo, int hi) {
  const char* env = std::getenv(name);
  const int v = env != nullptr ? std::atoi(env) : fallback;
  return v < lo ? lo : v > hi ? hi : v;
}

}  // namespace deepinfer::backend::cuda
