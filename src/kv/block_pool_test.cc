#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace deepinfer::kv {
namespace {

TEST(BlockPoolTest, FifoFreeListAndRefCounts) {
  BlockPool pool(3);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.Allocate(), 0);
  EXPECT_EQ(pool.Allocate(), 1);
  EXPECT_EQ(pool.Allocate(), 2);
  EXPECT_EQ(pool.Allocate(), kNoBlock);
  pool.Retain(1);
  EXPECT_EQ(pool.ref_count(1), 2);
  pool.Release(1);
  EXPECT_EQ(pool.num_free(), 0);
  pool.Release(2);
  pool.Release(1);
  pool.Release(0);
  EXPECT_EQ(pool.num_free(), 3);
  // Freed in order 2, 1, 0: reused in that order.
  EXPECT_EQ(pool.Allocate(), 2);
  EXPECT_EQ(pool.Allocate(), 1);
  EXPECT_EQ(pool.Allocate(), 0);
}

TEST(BlockPoolTest, KeyClearedOnFree) {
  BlockPool pool(1);
  BlockId b = pool.Allocate();
  pool.SetKey(b, 42);
  EXPECT_EQ(pool.key(b), 42u);
  pool.SetKey(b, 42);  // same content: fine
  pool.Release(b);
  EXPECT_FALSE(pool.key(b).has_value());
}

TEST(BlockPoolDeathTest, DoubleReleaseChecks) {
  BlockPool pool(1);
  BlockId b = pool.Allocate();
  pool.Release(b);
  EXPECT_DEATH(pool.Release(b), "double release");
}

TEST(BlockKeyTest, ChainDependsOnWholePrefix) {
  std::vector<int32_t> a = {1, 2, 3, 4};
  std::vector<int32_t> b = {1, 2, 3, 5};
  const BlockKey ka = ChainBlockKey(kRootBlockKey, a);
  EXPECT_EQ(ka, ChainBlockKey(kRootBlockKey, a));
  EXPECT_NE(ka, ChainBlockKey(kRootBlockKey, b));
  // Same block tokens after different parents give different keys.
  EXPECT_NE(ChainBlockKey(ka, a), ChainBlockKey(ChainBlockKey(kRootBlockKey, b), a));
}

}  // namespace
}  // namespace deepinfer::kv
