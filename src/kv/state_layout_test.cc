#include "kv/state_layout.h"

#include <gtest/gtest.h>

namespace deepinfer::kv {
namespace {

TEST(StateLayoutTest, V41FlashPackedBytes) {
  auto layout = MakePackedStateLayout(V41FlashStateLayoutConfig(), 64);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->num_window_layers, 40);
  EXPECT_EQ(layout->window_row_bytes, 528);
  ASSERT_EQ(layout->groups.size(), 4u);
  EXPECT_EQ(layout->groups[0].ratio, 2);
  EXPECT_EQ(layout->groups[3].ratio, 1);
  EXPECT_EQ(layout->groups[0].entry_bytes, 288);
  EXPECT_EQ(layout->groups[0].index_key_bytes, 68);
  // 3 ratio-2 groups * 32 entries * 356 B + 1 ratio-1 group * 64 entries * 356 B.
  EXPECT_EQ(layout->BlockBytes(), 56960);
  EXPECT_DOUBLE_EQ(layout->CompressedBytesPerToken(), 890.0);
  // 40 rings * 128 * 528 B + 3 partial rows of 4096 B + 3 Engram ids.
  EXPECT_EQ(layout->SlotBytes(), 2703360 + 12288 + 12);
}

TEST(StateLayoutTest, TinyAGoldenConfig) {
  StateLayoutConfig c;
  c.num_hidden_layers = 8;
  c.sliding_window = 8;
  c.head_dim = 64;
  c.index_head_dim = 32;
  c.compress_ratios = {0, 0, 2, 2, 2, 1, 1, 1};
  c.kv_source_layer_ids = {2, 5};
  c.engram_max_ngram_size = 4;
  auto layout = MakePackedStateLayout(c, 16);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->window_row_bytes, 66);
  EXPECT_EQ(layout->groups[0].entry_bytes, 36);
  EXPECT_EQ(layout->groups[0].index_key_bytes, 17);
  EXPECT_EQ(layout->BlockBytes(), 8 * 53 + 16 * 53);
  EXPECT_EQ(layout->SlotBytes(), 8 * 8 * 66 + 512 + 12);
}

TEST(StateLayoutTest, RejectsBlockNotMultipleOfRatio) {
  auto layout = MakePackedStateLayout(V41FlashStateLayoutConfig(), 63);
  EXPECT_EQ(layout.status().code(), base::StatusCode::kInvalidArgument);
}

TEST(StateLayoutTest, RejectsBadKvSourceLayer) {
  StateLayoutConfig c = V41FlashStateLayoutConfig();
  c.kv_source_layer_ids.push_back(40);
  EXPECT_FALSE(MakePackedStateLayout(c, 64).ok());
  c = V41FlashStateLayoutConfig();
  c.compress_ratios.resize(10);
  EXPECT_FALSE(MakePackedStateLayout(c, 64).ok());
}

}  // namespace
}  // namespace deepinfer::kv
