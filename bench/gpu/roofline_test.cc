// The roofline model against hand-computed figures for a one-layer V4.1-Flash-shaped config.
#include "roofline.h"

#include <gtest/gtest.h>

namespace deepinfer::bench {
namespace {

io::ModelConfig OneFlashLayer(std::vector<int> ratios) {
  io::ModelConfig c;
  io::TextConfig& t = c.text_config;
  t.vocab_size = 129280;
  t.hidden_size = 5120;
  t.num_hidden_layers = static_cast<int>(ratios.size());
  t.num_attention_heads = 64;
  t.head_dim = 512;
  t.qk_rope_head_dim = 64;
  t.q_lora_rank = 1280;
  t.o_lora_rank = 1024;
  t.o_groups = 8;
  t.n_routed_experts = 384;
  t.n_shared_experts = 1;
  t.num_experts_per_tok = 6;
  t.moe_intermediate_size = 2304;
  t.sliding_window = 128;
  t.compress_ratios = ratios;
  t.index_n_heads = 32;
  t.index_head_dim = 128;
  t.index_topk = 512;
  t.hc_mult = 4;
  return c;
}

TEST(RooflineTest, ExpertCounts) {
  EXPECT_DOUBLE_EQ(ExpectedDistinctExperts(384, 6, 1), 6.0);
  EXPECT_NEAR(ExpectedDistinctExperts(384, 6, 2), 12.0 - 36.0 / 384, 1e-9);
  EXPECT_NEAR(ExpectedDistinctExperts(384, 6, 100000), 384.0, 1e-6);
  // 3 x (2304 x 5120 / 2 + 2304 x 5120 / 32)
  EXPECT_DOUBLE_EQ(ExpertBytes(OneFlashLayer({0})), 18800640.0);
}

TEST(RooflineTest, WindowOnlyLayerDecode) {
  const io::ModelConfig c = OneFlashLayer({0});
  const StepCost s = DecodeStepCost(c, 1, 1000);
  // wq_a 6560000 + wq_b 41984000 + wkv 2624000 + wo_a 33587200 + wo_b 41984000
  // + mHC 3932160 + router 3932160 + shared expert 35424000 = 170027520 dense bytes.
  const double dense = 170027520.0, experts = 6 * 18800640.0;
  const double head = 2.0 * 129280 * 5120, embed = 2.0 * 5120;
  EXPECT_DOUBLE_EQ(s.expert_bytes, experts);
  EXPECT_DOUBLE_EQ(s.weight_bytes, dense + experts + head + embed);
  EXPECT_DOUBLE_EQ(s.state_bytes, 128 * 528.0);  // the window: 128 FP8 rows
  EXPECT_DOUBLE_EQ(s.attn_flops, 4.0 * 64 * 128 * 512);
  // Batch 4 reads the same dense weights once; state, FLOPs and embeddings scale by 4.
  const StepCost s4 = DecodeStepCost(c, 4, 1000);
  EXPECT_DOUBLE_EQ(s4.state_bytes, 4 * s.state_bytes);
  EXPECT_DOUBLE_EQ(s4.attn_flops, 4 * s.attn_flops);
  EXPECT_NEAR(s4.gemm_flops, 4 * s.gemm_flops, 1e-6 * s.gemm_flops);
  EXPECT_DOUBLE_EQ(s4.weight_bytes - s4.expert_bytes - 4 * embed,
                   s.weight_bytes - s.expert_bytes - embed);
}

TEST(RooflineTest, CompressedAndIndexedLayer) {
  io::ModelConfig c = OneFlashLayer({1});
  c.text_config.kv_source_layer_ids = {0};
  c.text_config.index_source_layer_ids = {0};
  const StepCost s = DecodeStepCost(c, 1, 32767);  // 32768 tokens after the step
  // 128 window rows + 512 selected entries (288 B) + 32768 index keys (68 B).
  EXPECT_DOUBLE_EQ(s.state_bytes, 128 * 528.0 + 512 * 288.0 + 32768 * 68.0);
  EXPECT_DOUBLE_EQ(s.attn_flops, 4.0 * 64 * (128 + 512) * 512 + 2.0 * 32 * 32768 * 128);
  // Ratio 2 halves the entries: still 512 selected, 16384 keys.
  io::ModelConfig c2 = OneFlashLayer({2});
  c2.text_config.kv_source_layer_ids = {0};
  c2.text_config.index_source_layer_ids = {0};
  EXPECT_DOUBLE_EQ(DecodeStepCost(c2, 1, 32767).state_bytes,
                   128 * 528.0 + 512 * 288.0 + 16384 * 68.0);
}

TEST(RooflineTest, PrefillReadsEveryExpertOnce) {
  const io::ModelConfig c = OneFlashLayer({0});
  const StepCost p = PrefillCost(c, 4096);
  EXPECT_NEAR(p.expert_bytes, 384 * 18800640.0, 1.0);
  const StepCost d = DecodeStepCost(c, 1, 0);
  // GEMM FLOPs: 4096 rows through the layer, one row through the head.
  const double head_flops = 2.0 * 129280 * 5120;
  EXPECT_NEAR(p.gemm_flops - head_flops, 4096 * (d.gemm_flops - head_flops), 1e-9 * p.gemm_flops);
}

}  // namespace
}  // namespace deepinfer::bench
