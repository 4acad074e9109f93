// config.json of the demo model (field names and order as the release / the goldens).
#include "model/demo_model.h"
#include "model/engram_hash.h"

namespace deepinfer::model {
namespace {

constexpr int kNumLayers = 8;
const std::vector<int> kCompressRatios = {0, 0, 2, 2, 2, 2, 1, 1};
const std::vector<int> kKvSources = {2, 4, 6};
const std::vector<int> kIndexSources = {2, 4, 6, 7};
constexpr int kCandidateSource = 6;
const std::vector<int> kEngramLayers = {1, 4};
constexpr int kEngramMaxNgram = 4;

nlohmann::ordered_json QuantizationConfig() {
  nlohmann::ordered_json q;
  q["quant_method"] = "fp8";
  q["activation_scheme"] = "dynamic";
  q["weight_block_size"] = {32, 32};
  q["scale_fmt"] = "ue8m0";
  q["expert_dtype"] = "fp4";
  return q;
}

nlohmann::ordered_json VisionConfig() {
  nlohmann::ordered_json v;
  v["model_type"] = "deepseek_v41_vision";
  v["num_hidden_layers"] = 32;
  v["hidden_size"] = 1024;
  v["num_attention_heads"] = 16;
  v["intermediate_size"] = 2816;
  v["patch_size"] = 14;
  v["downsample_ratio"] = 3;
  v["rope_theta"] = 10000;
  v["max_image_tokens"] = 1024;
  v["min_pixels"] = 295936;
  v["max_wh_ratio"] = nullptr;
  return v;
}

std::vector<int64_t> EngramTableRows(const DemoModelSize& s) {
  const int64_t n_layers = static_cast<int64_t>(kEngramLayers.size());
  const int64_t columns = (kEngramMaxNgram - 1) * s.engram_n_heads;
  const std::vector<int64_t> primes =
      EngramPrimes(n_layers, kEngramMaxNgram, s.engram_n_heads, s.engram_vocab_size);
  const std::vector<int64_t> offsets = EngramOffsets(primes, columns);
  std::vector<int64_t> rows;
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    const int64_t last = (layer + 1) * columns - 1;
    rows.push_back(offsets[last] + primes[last]);
  }
  return rows;
}

nlohmann::ordered_json TextConfig(const DemoModelSize& s, int64_t compressed_vocab_size) {
  nlohmann::ordered_json t;
  t["model_type"] = "deepseek_v41_text";
  t["vocab_size"] = kDemoVocabSize;
  t["hidden_size"] = s.hidden_size;
  t["num_hidden_layers"] = kNumLayers;
  t["num_attention_heads"] = s.num_attention_heads;
  t["num_key_value_heads"] = 1;
  t["head_dim"] = s.head_dim;
  t["qk_rope_head_dim"] = s.qk_rope_head_dim;
  t["q_lora_rank"] = s.q_lora_rank;
  t["o_lora_rank"] = s.o_lora_rank;
  t["o_groups"] = s.o_groups;
  t["hidden_act"] = "silu";
  t["swiglu_limit"] = 10.0;
  t["rms_norm_eps"] = 1e-20;
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["initializer_range"] = 0.02;
  t["use_cache"] = true;
  t["tie_word_embeddings"] = false;
  t["max_position_embeddings"] = 1048576;
  t["rope_theta"] = 10000.0;
  t["compress_rope_theta"] = 160000.0;
  t["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 16},
                       {"beta_fast", 32},
                       {"beta_slow", 1},
                       {"original_max_position_embeddings", 65536}};
  t["n_routed_experts"] = s.n_routed_experts;
  t["n_shared_experts"] = 1;
  t["num_experts_per_tok"] = s.num_experts_per_tok;
  t["moe_intermediate_size"] = s.moe_intermediate_size;
  t["scoring_func"] = "sqrtsoftplus";
  t["topk_method"] = "noaux_tc";
  t["norm_topk_prob"] = true;
  t["routed_scaling_factor"] = 1.5;
  t["sliding_window"] = s.sliding_window;
  t["compress_ratios"] = kCompressRatios;
  t["kv_source_layer_ids"] = kKvSources;
  t["index_source_layer_ids"] = kIndexSources;
  t["index_n_heads"] = s.index_n_heads;
  t["index_head_dim"] = s.index_head_dim;
  t["index_topk"] = s.index_topk;
  t["candidate_source_layer_id"] = kCandidateSource;
  t["candidate_topk_blocks"] = s.candidate_topk_blocks;
  t["candidate_block_size"] = s.candidate_block_size;
  t["hc_mult"] = 4;
  t["hc_sinkhorn_iters"] = 20;
  t["hc_eps"] = 1e-06;
  t["engram_layer_ids"] = kEngramLayers;
  t["engram_num_embeddings"] = EngramTableRows(s);
  t["engram_max_ngram_size"] = kEngramMaxNgram;
  t["engram_vocab_size"] = s.engram_vocab_size;
  t["engram_n_heads"] = s.engram_n_heads;
  t["engram_head_dim"] = s.engram_head_dim;
  t["engram_pad_token_id"] = 2;
  t["engram_compressed_vocab_size"] = compressed_vocab_size;
  // No DSpark layers (no mtp.* tensors), like the goldens.
  t["num_nextn_predict_layers"] = 0;
  t["dspark_block_size"] = 5;
  t["dspark_noise_token_id"] = 128799;
  t["dspark_target_layer_ids"] = nlohmann::ordered_json::array();
  t["dspark_markov_rank"] = 32;
  t["dspark_n_routed_experts"] = s.n_routed_experts;
  t["dspark_num_experts_per_tok"] = s.num_experts_per_tok;
  t["bos_token_id"] = 0;
  t["eos_token_id"] = 1;
  t["pad_token_id"] = 2;
  return t;
}

}  // namespace

DemoModelSize DemoModelSize::Medium() {
  DemoModelSize s;
  s.hidden_size = 1024;
  s.num_attention_heads = 8;
  s.q_lora_rank = 256;
  s.o_groups = 4;
  s.o_lora_rank = 256;
  s.moe_intermediate_size = 512;
  s.sliding_window = 64;
  s.index_n_heads = 8;
  s.engram_head_dim = 64;
  return s;
}

nlohmann::ordered_json DemoModelConfigJson(const DemoModelSize& size,
                                           int64_t compressed_vocab_size) {
  nlohmann::ordered_json c;
  c["architectures"] = {"DeepseekV41ForCausalLM"};
  c["model_type"] = "deepseek_v41";
  c["dtype"] = "bfloat16";
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["pad_token_id"] = 2;
  c["image_token_id"] = 129264;
  c["tie_word_embeddings"] = false;
  c["quantization_config"] = QuantizationConfig();
  c["text_config"] = TextConfig(size, compressed_vocab_size);
  c["vision_config"] = VisionConfig();
  return c;
}

}  // namespace deepinfer::model
