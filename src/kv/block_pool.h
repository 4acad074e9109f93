// BlockPool: fixed-size state blocks with a FIFO free list and reference counts.
//
// A block holds the compressed state (compressed KV entries + indexer keys of every
// KV-source group) of `block_tokens` consecutive raw tokens of one sequence; the backend owns
// the memory (num_blocks * StateLayout::BlockBytes()) and addresses it by BlockId. This class
// is bookkeeping only and is not thread-safe (the scheduler thread owns it).
//
// Free-list order is deterministic: initially 0, 1, ..., n-1; a block whose reference count
// drops to 0 is appended at the tail, so the least recently freed block is reused first (the
// order a prefix cache wants for LRU eviction of cached free blocks).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "kv/block_key.h"

namespace deepinfer::kv {

using BlockId = int32_t;
inline constexpr BlockId kNoBlock = -1;

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(blocks_.size()); }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_used() const { return num_blocks() - num_free(); }

  // Takes the head of the free list with reference count 1; kNoBlock if none is free.
  BlockId Allocate();
  // Adds a reference to an in-use block (sharing a complete block between sequences).
  void Retain(BlockId id);
  // Drops a reference; at zero the block (and its key) returns to the free-list tail.
  void Release(BlockId id);
  int32_t ref_count(BlockId id) const;

  // Content key of a complete (immutable) block; set once, equal on re-set.
  void SetKey(BlockId id, BlockKey key);
  std::optional<BlockKey> key(BlockId id) const;

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockKey> key;
  };
  const Block& Get(BlockId id) const;

  std::vector<Block> blocks_;
  std::deque<BlockId> free_;
};

}  // namespace deepinfer::kv
