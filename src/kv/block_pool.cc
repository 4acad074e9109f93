#include "kv/block_pool.h"

#include "base/check.h"

namespace deepinfer::kv {

BlockPool::BlockPool(int32_t num_blocks) : blocks_(static_cast<size_t>(num_blocks)) {
  CHECK_GE(num_blocks, 0);
  for (BlockId id = 0; id < num_blocks; ++id) free_.push_back(id);
}

const BlockPool::Block& BlockPool::Get(BlockId id) const {
  CHECK(id >= 0 && id < num_blocks()) << "block id " << id << " out of range";
  return blocks_[static_cast<size_t>(id)];
}

BlockId BlockPool::Allocate() {
  if (free_.empty()) return kNoBlock;
  BlockId id = free_.front();
  free_.pop_front();
  Block& b = blocks_[static_cast<size_t>(id)];
  CHECK_EQ(b.ref_count, 0);
  b.ref_count = 1;
  return id;
}

void BlockPool::Retain(BlockId id) {
  CHECK_GT(Get(id).ref_count, 0) << "retain of free block " << id;
  ++blocks_[static_cast<size_t>(id)].ref_count;
}

void BlockPool::Release(BlockId id) {
  CHECK_GT(Get(id).ref_count, 0) << "double release of block " << id;
  Block& b = blocks_[static_cast<size_t>(id)];
  if (--b.ref_count == 0) {
    b.key.reset();
    free_.push_back(id);
  }
}

int32_t BlockPool::ref_count(BlockId id) const { return Get(id).ref_count; }

void BlockPool::SetKey(BlockId id, BlockKey key) {
  CHECK_GT(Get(id).ref_count, 0);
  Block& b = blocks_[static_cast<size_t>(id)];
  CHECK(!b.key.has_value() || *b.key == key) << "block " << id << " re-keyed with other content";
  b.key = key;
}

std::optional<BlockKey> BlockPool::key(BlockId id) const { return Get(id).key; }

}  // namespace deepinfer::kv
