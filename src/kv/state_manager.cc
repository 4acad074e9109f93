#include "kv/state_manager.h"

#include <algorithm>

#include "base/check.h"
#include "fmt/format.h"

namespace deepinfer::kv {

StateManager::StateManager(const StateLayout& layout, int32_t num_blocks, int32_t num_slots)
    : layout_(layout), pool_(num_blocks), num_slots_(num_slots) {
  CHECK_OK(layout.Validate());
  CHECK_GE(num_slots, 0);
  for (SlotId s = 0; s < num_slots; ++s) free_slots_.push_back(s);
}

int32_t StateManager::BlocksForTokens(int64_t num_tokens) const {
  return static_cast<int32_t>((num_tokens + block_tokens() - 1) / block_tokens());
}

const StateManager::Sequence& StateManager::Get(SeqId seq) const {
  auto it = seqs_.find(seq);
  CHECK(it != seqs_.end()) << "unknown sequence " << seq;
  return it->second;
}

StateManager::Sequence& StateManager::Get(SeqId seq) {
  auto it = seqs_.find(seq);
  CHECK(it != seqs_.end()) << "unknown sequence " << seq;
  return it->second;
}

base::Status StateManager::Add(SeqId seq) {
  if (Contains(seq)) return base::AlreadyExistsError(fmt::format("sequence {} exists", seq));
  if (free_slots_.empty()) {
    return base::ResourceExhaustedError(fmt::format("no free state slot for sequence {}", seq));
  }
  Sequence s;
  s.slot = free_slots_.front();
  free_slots_.pop_front();
  seqs_.emplace(seq, std::move(s));
  return base::Status::Ok();
}

int32_t StateManager::BlocksNeeded(SeqId seq, int64_t num_tokens) const {
  const int32_t have = static_cast<int32_t>(Get(seq).blocks.size());
  return std::max(BlocksForTokens(num_tokens) - have, 0);
}

bool StateManager::Reserve(SeqId seq, int64_t num_tokens) {
  const int32_t needed = BlocksNeeded(seq, num_tokens);
  if (needed > pool_.num_free()) return false;
  Sequence& s = Get(seq);
  for (int32_t i = 0; i < needed; ++i) s.blocks.push_back(pool_.Allocate());
  return true;
}

void StateManager::Commit(SeqId seq, std::span<const int32_t> tokens) {
  Sequence& s = Get(seq);
  const int64_t n = static_cast<int64_t>(tokens.size());
  CHECK_LE(BlocksForTokens(n), static_cast<int32_t>(s.blocks.size()))
      << "commit of " << n << " tokens beyond the reserved table of sequence " << seq;
  s.committed_tokens = n;
  const size_t complete = static_cast<size_t>(n / block_tokens());
  while (s.keys.size() < complete) {
    const size_t i = s.keys.size();
    const BlockKey parent = i == 0 ? kRootBlockKey : s.keys[i - 1];
    const BlockKey key =
        ChainBlockKey(parent, tokens.subspan(i * static_cast<size_t>(block_tokens()),
                                             static_cast<size_t>(block_tokens())));
    pool_.SetKey(s.blocks[i], key);
    s.keys.push_back(key);
  }
}

int32_t StateManager::ForkBlocksNeeded(int64_t num_tokens) const {
  return num_tokens % block_tokens() != 0 ? 1 : 0;
}

base::StatusOr<StateCopy> StateManager::Fork(SeqId parent, SeqId child, int64_t num_tokens) {
  const Sequence& p = Get(parent);
  CHECK_LE(BlocksForTokens(num_tokens), static_cast<int32_t>(p.blocks.size()))
      << "fork point beyond the parent's reserved table";
  if (Contains(child)) return base::AlreadyExistsError(fmt::format("sequence {} exists", child));
  if (free_slots_.empty() || ForkBlocksNeeded(num_tokens) > pool_.num_free()) {
    return base::ResourceExhaustedError(
        fmt::format("no slot/block to fork sequence {} into {}", parent, child));
  }
  const size_t complete = static_cast<size_t>(num_tokens / block_tokens());
  Sequence c;
  c.blocks.assign(p.blocks.begin(), p.blocks.begin() + static_cast<std::ptrdiff_t>(complete));
  for (BlockId b : c.blocks) pool_.Retain(b);
  c.keys.assign(p.keys.begin(), p.keys.begin() + std::min(complete, p.keys.size()));
  c.committed_tokens = std::min(p.committed_tokens, num_tokens);
  StateCopy copy;
  copy.src_slot = p.slot;
  c.slot = free_slots_.front();
  free_slots_.pop_front();
  copy.dst_slot = c.slot;
  if (ForkBlocksNeeded(num_tokens) == 1) {
    copy.src_block = p.blocks[complete];
    copy.dst_block = pool_.Allocate();
    c.blocks.push_back(copy.dst_block);
  }
  seqs_.emplace(child, std::move(c));
  return copy;
}

void StateManager::Free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (BlockId b : it->second.blocks) pool_.Release(b);
  free_slots_.push_back(it->second.slot);
  seqs_.erase(it);
}

SlotId StateManager::slot(SeqId seq) const { return Get(seq).slot; }
const std::vector<BlockId>& StateManager::block_table(SeqId seq) const { return Get(seq).blocks; }
const std::vector<BlockKey>& StateManager::block_keys(SeqId seq) const { return Get(seq).keys; }
int64_t StateManager::num_committed_tokens(SeqId seq) const { return Get(seq).committed_tokens; }

}  // namespace deepinfer::kv
