// StateManager: per-sequence state = one slot (bounded state) + a block table (paged
// compressed state), on top of a BlockPool and a slot free list.
//
// Lifecycle of a sequence s:
//   Add(s)                       takes a slot (window rings, partial-group buffers, Engram
//                                history); the runner resets it when a step starts at
//                                position 0.
//   Reserve(s, n)                makes the block table cover tokens [0, n) (all or nothing).
//   Commit(s, tokens)            after a step: state now covers tokens[0, size); newly
//                                complete blocks get their chained BlockKey.
//   Fork(parent, child, n)       child shares the parent's complete blocks of [0, n) by
//                                reference count, gets its own slot and, if n is not on a block
//                                boundary, a fresh block for the partial last one; the returned
//                                StateCopy must be applied by the runner after the step that
//                                brings the parent to n tokens.
//   Free(s)                      releases the slot and every block reference.
// Complete blocks are immutable (the runner only writes at positions >= the committed
// count, which lie in the partial last block or later), hence shareable without copy-on-write.
// Not thread-safe: owned by the scheduler thread.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "base/statusor.h"
#include "kv/block_key.h"
#include "kv/block_pool.h"
#include "kv/state_layout.h"

namespace deepinfer::kv {

using SeqId = int64_t;
using SlotId = int32_t;
inline constexpr SlotId kNoSlot = -1;

// Copy of a sequence's mutable state to a forked child: slot contents, and the partial last
// block if any (dst_block == kNoBlock when the fork point is on a block boundary).
struct StateCopy {
  SlotId src_slot = kNoSlot;
  SlotId dst_slot = kNoSlot;
  BlockId src_block = kNoBlock;
  BlockId dst_block = kNoBlock;
  friend bool operator==(const StateCopy&, const StateCopy&) = default;
};

class StateManager {
 public:
  // CHECKs that layout.Validate() is OK and the counts are >= 0.
  StateManager(const StateLayout& layout, int32_t num_blocks, int32_t num_slots);

  const StateLayout& layout() const { return layout_; }
  int block_tokens() const { return layout_.block_tokens; }
  int32_t BlocksForTokens(int64_t num_tokens) const;

  int32_t num_blocks() const { return pool_.num_blocks(); }
  int32_t num_free_blocks() const { return pool_.num_free(); }
  int32_t num_slots() const { return num_slots_; }
  int32_t num_free_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }
  const BlockPool& pool() const { return pool_; }

  // Takes a slot for a new sequence. ResourceExhausted if no slot is free; AlreadyExists if
  // `seq` is present.
  base::Status Add(SeqId seq);
  bool Contains(SeqId seq) const { return seqs_.count(seq) != 0; }

  // Blocks Reserve(seq, num_tokens) would have to allocate.
  int32_t BlocksNeeded(SeqId seq, int64_t num_tokens) const;
  // Grows the block table to cover num_tokens tokens. Returns false, allocating nothing, if
  // the pool has too few free blocks.
  bool Reserve(SeqId seq, int64_t num_tokens);
  // Records that the state covers tokens[0, tokens.size()) and keys newly complete blocks.
  // CHECKs that the table covers them.
  void Commit(SeqId seq, std::span<const int32_t> tokens);

  // Blocks a Fork(parent, ..., num_tokens) needs (0 or 1).
  int32_t ForkBlocksNeeded(int64_t num_tokens) const;
  // See the header comment. ResourceExhausted (and no change) if no slot or block is free.
  base::StatusOr<StateCopy> Fork(SeqId parent, SeqId child, int64_t num_tokens);

  // Releases everything `seq` holds; no-op if absent.
  void Free(SeqId seq);

  SlotId slot(SeqId seq) const;
  const std::vector<BlockId>& block_table(SeqId seq) const;
  const std::vector<BlockKey>& block_keys(SeqId seq) const;  // one per complete block
  int64_t num_committed_tokens(SeqId seq) const;

 private:
  struct Sequence {
    SlotId slot = kNoSlot;
    std::vector<BlockId> blocks;
    std::vector<BlockKey> keys;
    int64_t committed_tokens = 0;
  };
  const Sequence& Get(SeqId seq) const;
  Sequence& Get(SeqId seq);

  StateLayout layout_;
  BlockPool pool_;
  int32_t num_slots_;
  std::deque<SlotId> free_slots_;
  std::unordered_map<SeqId, Sequence> seqs_;
};

}  // namespace deepinfer::kv
