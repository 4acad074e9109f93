// Selection keys shared by the top-k (k_topk.cu) and the MoE router (k_route.cu): a float as
// an order-preserving uint32, and (key, id) pairs packed into one uint64 whose order is the
// selection order (larger key first, then lower id), so a selection step is one compare.
#pragma once

#include <cstdint>

namespace deepinfer::backend::cuda::kernels {

inline constexpr unsigned kFullWarp = 0xffffffffu;

// Order-preserving map float -> uint32 (larger float, larger key); -0.0 maps as +0.0.
__device__ __forceinline__ uint32_t OrderedKey(float v) {
  uint32_t bits = __float_as_uint(v);
  if ((bits & 0x7fffffffu) == 0) bits = 0;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

// (key, id) packed so that a larger pair comes first in the output order: key descending,
// then id ascending. Every real pair is > 0 (the low word is ~id >= 2^31), so 0 pads.
__device__ __forceinline__ uint64_t PackPair(uint32_t key, int64_t id) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}
__device__ __forceinline__ uint32_t PairKey(uint64_t p) { return static_cast<uint32_t>(p >> 32); }
__device__ __forceinline__ int32_t PairId(uint64_t p) {
  return static_cast<int32_t>(~static_cast<uint32_t>(p));
}

}  // namespace deepinfer::backend::cuda::kernels
