#include "kv/state_manager.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace deepinfer::kv {
namespace {

StateLayout SmallLayout(int block_tokens) {
  StateLayout l;
  l.num_window_layers = 2;
  l.window = 4;
  l.window_row_bytes = 8;
  l.groups = {{.source_layer = 0,
               .ratio = 2,
               .entry_bytes = 4,
               .index_key_bytes = 1,
               .partial_row_bytes = 8}};
  l.block_tokens = block_tokens;
  return l;
}

std::vector<int32_t> Iota(int n, int start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(StateManagerTest, ReserveCommitFree) {
  StateManager m(SmallLayout(4), /*num_blocks=*/4, /*num_slots=*/2);
  ASSERT_TRUE(m.Add(7).ok());
  EXPECT_EQ(m.slot(7), 0);
  EXPECT_EQ(m.BlocksNeeded(7, 9), 3);
  ASSERT_TRUE(m.Reserve(7, 9));
  EXPECT_EQ(m.block_table(7), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_FALSE(m.Reserve(7, 17));  // needs 2 more, 1 free: nothing allocated
  EXPECT_EQ(m.block_table(7).size(), 3u);
  m.Commit(7, Iota(9));
  EXPECT_EQ(m.num_committed_tokens(7), 9);
  ASSERT_EQ(m.block_keys(7).size(), 2u);  // blocks 0 and 1 complete
  EXPECT_EQ(m.pool().key(0), m.block_keys(7)[0]);
  EXPECT_FALSE(m.pool().key(2).has_value());
  m.Free(7);
  EXPECT_EQ(m.num_free_blocks(), 4);
  EXPECT_EQ(m.num_free_slots(), 2);
  EXPECT_FALSE(m.Contains(7));
}

TEST(StateManagerTest, SlotsExhausted) {
  StateManager m(SmallLayout(4), 4, 1);
  ASSERT_TRUE(m.Add(1).ok());
  EXPECT_EQ(m.Add(2).code(), base::StatusCode::kResourceExhausted);
  EXPECT_EQ(m.Add(1).code(), base::StatusCode::kAlreadyExists);
}

TEST(StateManagerTest, ForkSharesCompleteBlocksAndCopiesPartial) {
  StateManager m(SmallLayout(4), 8, 3);
  ASSERT_TRUE(m.Add(1).ok());
  ASSERT_TRUE(m.Reserve(1, 10));  // blocks 0,1,2; tokens 8,9 in block 2 (partial)
  auto copy = m.Fork(1, 2, 10);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(*copy, (StateCopy{.src_slot = 0, .dst_slot = 1, .src_block = 2, .dst_block = 3}));
  EXPECT_EQ(m.block_table(2), (std::vector<BlockId>{0, 1, 3}));
  EXPECT_EQ(m.pool().ref_count(0), 2);
  EXPECT_EQ(m.pool().ref_count(2), 1);
  // A fork on a block boundary copies the slot only.
  ASSERT_TRUE(m.Reserve(1, 12));
  auto copy2 = m.Fork(1, 3, 12);
  ASSERT_TRUE(copy2.ok());
  EXPECT_EQ(copy2->dst_block, kNoBlock);
  EXPECT_EQ(m.block_table(3), (std::vector<BlockId>{0, 1, 2}));
  EXPECT_EQ(m.pool().ref_count(0), 3);
  // Same tokens -> same keys on shared blocks.
  const std::vector<int32_t> tokens = Iota(12, 100);
  m.Commit(1, tokens);
  m.Commit(3, tokens);
  EXPECT_EQ(m.block_keys(1), m.block_keys(3));
  m.Free(1);
  m.Free(2);
  EXPECT_EQ(m.pool().ref_count(0), 1);
  m.Free(3);
  EXPECT_EQ(m.num_free_blocks(), 8);
  EXPECT_EQ(m.num_free_slots(), 3);
}

TEST(StateManagerTest, ForkWithoutResourcesChangesNothing) {
  StateManager m(SmallLayout(4), 1, 2);
  ASSERT_TRUE(m.Add(1).ok());
  ASSERT_TRUE(m.Reserve(1, 3));
  auto copy = m.Fork(1, 2, 3);  // needs a block for the partial one: none free
  EXPECT_EQ(copy.status().code(), base::StatusCode::kResourceExhausted);
  EXPECT_FALSE(m.Contains(2));
  EXPECT_EQ(m.pool().ref_count(0), 1);
  EXPECT_EQ(m.num_free_slots(), 1);
}

}  // namespace
}  // namespace deepinfer::kv
