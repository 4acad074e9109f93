#include "kv/block_key.h"

#include <xxhash.h>

#include <bit>

namespace deepinfer::kv {

BlockKey ChainBlockKey(BlockKey parent, std::span<const int32_t> block_tokens) {
  static_assert(std::endian::native == std::endian::little, "keys assume little-endian ids");
  return XXH3_64bits_withSeed(block_tokens.data(), block_tokens.size_bytes(), parent);
}

}  // namespace deepinfer::kv
