// config.json parsing (see model_config.h). Validation lives in model_config_validate.cc.
#include "io/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace deepinfer::io {
namespace {

using base::InvalidArgumentError;
using base::Status;
using base::StatusOr;
using nlohmann::json;

// Reads typed fields of one JSON object, remembering the first error. Messages name the
// field with its path, e.g. "text_config.hidden_size: expected an integer, got "abc"".
class FieldReader {
 public:
  FieldReader(const json& object, std::string prefix)
      : object_(object), prefix_(std::move(prefix)) {}

  template <typename T>
  void Required(const char* key, T* out) {
    Read(key, out, /*required=*/true);
  }
  template <typename T>
  void Optional(const char* key, T* out) {
    Read(key, out, /*required=*/false);
  }
  bool Has(const char* key) const {
    const auto it = object_.find(key);
    return it != object_.end() && !it->is_null();
  }
  const Status& status() const { return status_; }
  void Fail(const char* key, std::string_view what) {
    if (status_.ok()) status_ = InvalidArgumentError(fmt::format("{}{}: {}", prefix_, key, what));
  }

 private:
  template <typename T>
  void Read(const char* key, T* out, bool required) {
    if (!status_.ok()) return;
    const auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) {
      if (required) Fail(key, "missing");
      return;
    }
    Convert(key, *it, out);
  }

  template <typename Int>
  requires std::is_integral_v<Int> &&
      (!std::is_same_v<Int, bool>)void Convert(const char* key, const json& value, Int* out) {
    if (!value.is_number_integer()) return Fail(key, "expected an integer, got " + value.dump());
    const int64_t v = value.get<int64_t>();
    if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Fail(key, "integer out of range");
    }
    if (v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max()) {
      return Fail(key, fmt::format("integer {} out of range", v));
    }
    *out = static_cast<Int>(v);
  }
  void Convert(const char* key, const json& value, bool* out) {
    if (!value.is_boolean()) return Fail(key, "expected a boolean, got " + value.dump());
    *out = value.get<bool>();
  }
  void Convert(const char* key, const json& value, double* out) {
    if (!value.is_number()) return Fail(key, "expected a number, got " + value.dump());
    *out = value.get<double>();
  }
  void Convert(const char* key, const json& value, std::optional<double>* out) {
    double v = 0;
    Convert(key, value, &v);
    if (status_.ok()) *out = v;
  }
  void Convert(const char* key, const json& value, std::string* out) {
    if (!value.is_string()) return Fail(key, "expected a string, got " + value.dump());
    *out = value.get<std::string>();
  }
  template <typename T>
  void Convert(const char* key, const json& value, std::vector<T>* out) {
    if (!value.is_array()) return Fail(key, "expected an array, got " + value.dump());
    std::vector<T> result(value.size());
    for (size_t i = 0; i < value.size() && status_.ok(); ++i) {
      const std::string element_key = fmt::format("{}[{}]", key, i);
      Convert(element_key.c_str(), value[i], &result[i]);
    }
    if (status_.ok()) *out = std::move(result);
  }

  const json& object_;
  std::string prefix_;
  Status status_;
};

Status ReadRopeScaling(const json& value, RopeScaling* out) {
  if (!value.is_object()) {
    return InvalidArgumentError("text_config.rope_scaling: expected an object");
  }
  FieldReader r(value, "text_config.rope_scaling.");
  r.Required("rope_type", &out->rope_type);
  r.Optional("factor", &out->factor);
  r.Optional("beta_fast", &out->beta_fast);
  r.Optional("beta_slow", &out->beta_slow);
  r.Optional("original_max_position_embeddings", &out->original_max_position_embeddings);
  return r.status();
}

Status ReadTextConfig(const json& value, TextConfig* t) {
  if (!value.is_object()) return InvalidArgumentError("text_config: expected an object");
  FieldReader r(value, "text_config.");
  r.Optional("model_type", &t->model_type);
  r.Required("vocab_size", &t->vocab_size);
  r.Required("hidden_size", &t->hidden_size);
  r.Required("num_hidden_layers", &t->num_hidden_layers);
  r.Required("num_attention_heads", &t->num_attention_heads);
  r.Optional("num_key_value_heads", &t->num_key_value_heads);
  r.Required("head_dim", &t->head_dim);
  r.Required("qk_rope_head_dim", &t->qk_rope_head_dim);
  r.Required("q_lora_rank", &t->q_lora_rank);
  r.Required("o_lora_rank", &t->o_lora_rank);
  r.Required("o_groups", &t->o_groups);
  r.Optional("hidden_act", &t->hidden_act);
  r.Optional("swiglu_limit", &t->swiglu_limit);
  r.Required("rms_norm_eps", &t->rms_norm_eps);
  r.Optional("attention_bias", &t->attention_bias);
  r.Optional("attention_dropout", &t->attention_dropout);
  r.Optional("initializer_range", &t->initializer_range);
  r.Optional("use_cache", &t->use_cache);
  r.Optional("tie_word_embeddings", &t->tie_word_embeddings);
  r.Required("max_position_embeddings", &t->max_position_embeddings);
  r.Required("rope_theta", &t->rope_theta);
  r.Required("compress_rope_theta", &t->compress_rope_theta);
  r.Required("n_routed_experts", &t->n_routed_experts);
  r.Required("n_shared_experts", &t->n_shared_experts);
  r.Required("num_experts_per_tok", &t->num_experts_per_tok);
  r.Required("moe_intermediate_size", &t->moe_intermediate_size);
  r.Required("scoring_func", &t->scoring_func);
  r.Optional("topk_method", &t->topk_method);
  r.Optional("norm_topk_prob", &t->norm_topk_prob);
  r.Required("routed_scaling_factor", &t->routed_scaling_factor);
  r.Required("sliding_window", &t->sliding_window);
  r.Required("compress_ratios", &t->compress_ratios);
  r.Required("kv_source_layer_ids", &t->kv_source_layer_ids);
  r.Required("index_source_layer_ids", &t->index_source_layer_ids);
  r.Required("index_n_heads", &t->index_n_heads);
  r.Required("index_head_dim", &t->index_head_dim);
  r.Required("index_topk", &t->index_topk);
  r.Optional("candidate_source_layer_id", &t->candidate_source_layer_id);
  r.Optional("candidate_topk_blocks", &t->candidate_topk_blocks);
  r.Optional("candidate_block_size", &t->candidate_block_size);
  r.Required("hc_mult", &t->hc_mult);
  r.Required("hc_sinkhorn_iters", &t->hc_sinkhorn_iters);
  r.Required("hc_eps", &t->hc_eps);
  r.Optional("engram_layer_ids", &t->engram_layer_ids);
  const bool has_engram = !t->engram_layer_ids.empty();
  auto engram = [&](const char* key, auto* out) {
    has_engram ? r.Required(key, out) : r.Optional(key, out);
  };
  engram("engram_num_embeddings", &t->engram_num_embeddings);
  engram("engram_max_ngram_size", &t->engram_max_ngram_size);
  engram("engram_vocab_size", &t->engram_vocab_size);
  engram("engram_n_heads", &t->engram_n_heads);
  engram("engram_head_dim", &t->engram_head_dim);
  engram("engram_pad_token_id", &t->engram_pad_token_id);
  engram("engram_compressed_vocab_size", &t->engram_compressed_vocab_size);
  r.Optional("num_nextn_predict_layers", &t->num_nextn_predict_layers);
  r.Optional("dspark_block_size", &t->dspark_block_size);
  r.Optional("dspark_noise_token_id", &t->dspark_noise_token_id);
  r.Optional("dspark_target_layer_ids", &t->dspark_target_layer_ids);
  r.Optional("dspark_markov_rank", &t->dspark_markov_rank);
  r.Optional("dspark_n_routed_experts", &t->dspark_n_routed_experts);
  r.Optional("dspark_num_experts_per_tok", &t->dspark_num_experts_per_tok);
  r.Optional("gate_temp", &t->gate_temp);
  r.Optional("output_router_logits", &t->output_router_logits);
  r.Optional("router_aux_loss_coef", &t->router_aux_loss_coef);
  r.Optional("bos_token_id", &t->bos_token_id);
  r.Optional("eos_token_id", &t->eos_token_id);
  r.Optional("pad_token_id", &t->pad_token_id);
  DI_RETURN_IF_ERROR(r.status());
  if (r.Has("rope_scaling"))
    DI_RETURN_IF_ERROR(ReadRopeScaling(value["rope_scaling"], &t->rope_scaling));
  return Status::Ok();
}

Status ReadVisionConfig(const json& value, VisionConfig* v) {
  if (!value.is_object()) return InvalidArgumentError("vision_config: expected an object");
  v->present = true;
  FieldReader r(value, "vision_config.");
  r.Optional("model_type", &v->model_type);
  r.Required("num_hidden_layers", &v->num_hidden_layers);
  r.Required("hidden_size", &v->hidden_size);
  r.Required("num_attention_heads", &v->num_attention_heads);
  r.Required("intermediate_size", &v->intermediate_size);
  r.Required("patch_size", &v->patch_size);
  r.Required("downsample_ratio", &v->downsample_ratio);
  r.Optional("rope_theta", &v->rope_theta);
  r.Optional("max_image_tokens", &v->max_image_tokens);
  r.Optional("min_pixels", &v->min_pixels);
  r.Optional("max_wh_ratio", &v->max_wh_ratio);
  return r.status();
}

Status ReadQuantizationConfig(const json& value, QuantizationConfig* q) {
  if (!value.is_object()) return InvalidArgumentError("quantization_config: expected an object");
  q->present = true;
  FieldReader r(value, "quantization_config.");
  r.Required("quant_method", &q->quant_method);
  r.Optional("activation_scheme", &q->activation_scheme);
  std::vector<int64_t> block;
  r.Required("weight_block_size", &block);
  r.Optional("scale_fmt", &q->scale_fmt);
  r.Optional("expert_dtype", &q->expert_dtype);
  DI_RETURN_IF_ERROR(r.status());
  if (block.size() != 2) {
    return InvalidArgumentError("quantization_config.weight_block_size: expected 2 entries");
  }
  q->weight_block_n = block[0];
  q->weight_block_k = block[1];
  return Status::Ok();
}

bool Contains(const std::vector<std::string>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

// Recognised-but-unsupported architectures get Unimplemented; anything else not V4.1 is
// InvalidArgument.
Status CheckArchitecture(const ModelConfig& config, const json& root) {
  if (config.model_type == "deepseek_v4" ||
      Contains(config.architectures, "DeepseekV4ForCausalLM")) {
    return base::UnimplementedError(
        "model_type 'deepseek_v4' (DeepSeek-V4-Flash) is a recognised architecture but not "
        "supported yet; deepinfer runs DeepSeek-V4.1 (model_type 'deepseek_v41')");
  }
  if (config.model_type != "deepseek_v41") {
    return InvalidArgumentError(
        fmt::format("model_type: unsupported '{}' (expected 'deepseek_v41')", config.model_type));
  }
  if (!root.contains("text_config")) return InvalidArgumentError("text_config: missing");
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view label) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return InvalidArgumentError(fmt::format("{}: malformed JSON: {}", label, e.what()));
  }
  if (!root.is_object()) {
    return InvalidArgumentError(fmt::format("{}: top level is not an object", label));
  }
  ModelConfig config;
  FieldReader r(root, "");
  r.Optional("architectures", &config.architectures);
  r.Required("model_type", &config.model_type);
  r.Optional("dtype", &config.dtype);
  r.Optional("bos_token_id", &config.bos_token_id);
  r.Optional("eos_token_id", &config.eos_token_id);
  r.Optional("pad_token_id", &config.pad_token_id);
  r.Optional("image_token_id", &config.image_token_id);
  r.Optional("tie_word_embeddings", &config.tie_word_embeddings);
  Status status = r.status();
  if (status.ok()) status = CheckArchitecture(config, root);
  if (status.ok()) status = ReadTextConfig(root["text_config"], &config.text_config);
  if (status.ok() && r.Has("vision_config")) {
    status = ReadVisionConfig(root["vision_config"], &config.vision_config);
  }
  if (status.ok() && r.Has("quantization_config")) {
    status = ReadQuantizationConfig(root["quantization_config"], &config.quantization_config);
  }
  if (status.ok()) status = ValidateModelConfig(config);
  if (!status.ok()) return Status(status.code(), fmt::format("{}: {}", label, status.message()));
  return config;
}

StatusOr<ModelConfig> LoadModelConfig(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::NotFoundError(fmt::format("{}: cannot open", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return ParseModelConfig(text.str(), path.string());
}

}  // namespace deepinfer::io
