// config.json -> a typed ModelConfig for DeepSeek-V4.1 (shared/specs/model.md §1.1).
//
// Field names follow the JSON keys (snake_case). ParseModelConfig fills the struct and then
// runs ValidateModelConfig (the constraints of model.md §6); every error names the field,
// e.g. "config.json: text_config.kv_source_layer_ids: layer 3 (ratio 2) has no KV source at
// or before it". DeepSeek-V4-Flash configs (model_type "deepseek_v4", §1.2) are recognised
// and rejected with an Unimplemented "not supported" error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"

namespace deepinfer::io {

struct RopeScaling {
  std::string rope_type;  // "yarn" (empty = no scaling)
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 0;
};

struct TextConfig {
  std::string model_type;  // "deepseek_v41_text"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;  // width of each residual stream
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 1;
  int64_t head_dim = 0;
  int64_t qk_rope_head_dim = 0;  // RoPE on the LAST qk_rope_head_dim channels of a head
  int64_t q_lora_rank = 0;
  int64_t o_lora_rank = 0;
  int o_groups = 0;
  std::string hidden_act = "silu";
  double swiglu_limit = 10.0;
  double rms_norm_eps = 1e-6;
  bool attention_bias = false;
  double attention_dropout = 0.0;
  double initializer_range = 0.02;
  bool use_cache = true;
  bool tie_word_embeddings = false;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double compress_rope_theta = 160000.0;
  RopeScaling rope_scaling;
  int n_routed_experts = 0;
  int n_shared_experts = 0;
  int num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  std::string scoring_func;  // "sqrtsoftplus"
  std::string topk_method;   // "noaux_tc"
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  int64_t sliding_window = 0;
  // num_hidden_layers + num_nextn_predict_layers entries; backbone entries in {0, 1, 2}.
  std::vector<int> compress_ratios;
  std::vector<int> kv_source_layer_ids;     // ascending
  std::vector<int> index_source_layer_ids;  // ascending
  int index_n_heads = 0;
  int64_t index_head_dim = 0;
  int64_t index_topk = 0;
  int candidate_source_layer_id = -1;  // -1: none
  int64_t candidate_topk_blocks = 0;
  int64_t candidate_block_size = 0;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  std::vector<int> engram_layer_ids;           // ascending
  std::vector<int64_t> engram_num_embeddings;  // table rows per Engram layer
  int engram_max_ngram_size = 0;
  int64_t engram_vocab_size = 0;
  int engram_n_heads = 0;
  int64_t engram_head_dim = 0;
  int64_t engram_pad_token_id = 0;
  int64_t engram_compressed_vocab_size = 0;
  int num_nextn_predict_layers = 0;
  int dspark_block_size = 0;
  int64_t dspark_noise_token_id = 0;
  std::vector<int> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 0;
  int dspark_n_routed_experts = 0;
  int dspark_num_experts_per_tok = 0;
  double gate_temp = 1.0;
  bool output_router_logits = false;
  double router_aux_loss_coef = 0.001;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  int64_t pad_token_id = 2;
};

struct VisionConfig {
  bool present = false;
  std::string model_type;  // "deepseek_v41_vision"
  int num_hidden_layers = 0;
  int64_t hidden_size = 0;
  int num_attention_heads = 0;
  int64_t intermediate_size = 0;
  int64_t patch_size = 0;
  int64_t downsample_ratio = 0;
  double rope_theta = 10000.0;
  int64_t max_image_tokens = 0;
  int64_t min_pixels = 0;
  std::optional<double> max_wh_ratio;  // null in the release
};

struct QuantizationConfig {
  bool present = false;           // absent: every weight is stored unquantised (BF16)
  std::string quant_method;       // "fp8"
  std::string activation_scheme;  // "dynamic"
  int64_t weight_block_n = 32;    // weight_block_size[0] (rows)
  int64_t weight_block_k = 32;    // weight_block_size[1] (columns)
  std::string scale_fmt;          // "ue8m0"
  std::string expert_dtype;       // "fp4" (experts packed e2m1, per-32 E8M0 scales)
};

struct ModelConfig {
  std::vector<std::string> architectures;  // ["DeepseekV41ForCausalLM"]
  std::string model_type;                  // "deepseek_v41"
  std::string dtype;                       // "bfloat16"
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  int64_t pad_token_id = 2;
  int64_t image_token_id = -1;
  bool tie_word_embeddings = false;
  QuantizationConfig quantization_config;
  TextConfig text_config;
  VisionConfig vision_config;

  // ---- derived helpers (valid after validation) ----
  const TextConfig& text() const { return text_config; }
  int num_layers() const { return text_config.num_hidden_layers; }
  int CompressRatio(int layer) const;
  bool IsKvSource(int layer) const;
  bool IsIndexSource(int layer) const;
  bool IsCandidateSource(int layer) const { return layer == text_config.candidate_source_layer_id; }
  // An index source after the candidate source: scores only inside the candidate mask.
  bool IsReindexSource(int layer) const;
  bool IsEngramLayer(int layer) const { return EngramIndex(layer) >= 0; }
  // Position of `layer` in engram_layer_ids, or -1.
  int EngramIndex(int layer) const;
  // The KV source whose compressed cache layer `layer` reads: the most recent KV source at
  // or before it; -1 for ratio-0 layers (window only).
  int KvSourceOf(int layer) const;
  // The index source whose top-k layer `layer` uses: the most recent index source at or
  // before it; -1 for ratio-0 layers or when there is none.
  int IndexSourceOf(int layer) const;

  int64_t nope_head_dim() const { return text_config.head_dim - text_config.qk_rope_head_dim; }
  int64_t q_proj_dim() const { return text_config.num_attention_heads * text_config.head_dim; }
  // Input width of one output group: heads_per_group * head_dim.
  int64_t o_group_in_dim() const { return q_proj_dim() / text_config.o_groups; }
  int64_t o_proj_dim() const { return text_config.o_groups * text_config.o_lora_rank; }
  int64_t hc_mix_dim() const { return (2 + text_config.hc_mult) * text_config.hc_mult; }
  int64_t hc_stream_dim() const { return text_config.hc_mult * text_config.hidden_size; }
  int64_t engram_hash_columns() const {
    return static_cast<int64_t>(text_config.engram_max_ngram_size - 1) * text_config.engram_n_heads;
  }
  int64_t engram_lookup_dim() const { return engram_hash_columns() * text_config.engram_head_dim; }
  int64_t index_q_dim() const { return text_config.index_n_heads * text_config.index_head_dim; }
  int64_t shared_expert_dim() const {
    return text_config.n_shared_experts * text_config.moe_intermediate_size;
  }
};

// Parses a config.json text. `label` names the source in messages ("DIR/config.json").
base::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view label);
// Reads and parses a config.json file.
base::StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path);
// The model.md §6 constraints. Messages name the field (without the file label).
base::Status ValidateModelConfig(const ModelConfig& config);
// One-paragraph architecture summary for `deepinfer inspect`.
std::string DescribeModelConfig(const ModelConfig& config);

}  // namespace deepinfer::io
