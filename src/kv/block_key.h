// BlockKey: content key of a complete block, chained over the token prefix.
//
//   key(block i) = XXH3_64(token ids of block i as little-endian int32, seed = key(block i-1))
//   key(block -1) = kRootBlockKey
// so equal keys mean (up to hash collisions) the same whole token prefix, which is what
// prefix reuse (a later issue) looks up: key -> block + snapshot of the bounded state.
#pragma once

#include <cstdint>
#include <span>

namespace deepinfer::kv {

using BlockKey = uint64_t;
inline constexpr BlockKey kRootBlockKey = 0x6465657069366b76ULL;  // "deepi6kv"

BlockKey ChainBlockKey(BlockKey parent, std::span<const int32_t> block_tokens);

}  // namespace deepinfer::kv
