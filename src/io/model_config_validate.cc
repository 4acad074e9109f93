// ModelConfig validation (model.md §6), derived helpers and the summary text.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "io/model_config.h"

namespace deepinfer::io {
namespace {

using base::InvalidArgumentError;
using base::Status;

Status FieldError(std::string_view field, std::string_view what) {
  return InvalidArgumentError(fmt::format("{}: {}", field, what));
}

Status RequirePositive(std::string_view field, int64_t value) {
  if (value <= 0) return FieldError(field, fmt::format("must be > 0, got {}", value));
  return Status::Ok();
}

Status RequireMultiple(std::string_view field, int64_t value, int64_t divisor) {
  if (value % divisor != 0) {
    return FieldError(field, fmt::format("{} is not a multiple of {}", value, divisor));
  }
  return Status::Ok();
}

// Strictly ascending layer ids inside [0, num_layers).
Status RequireLayerList(std::string_view field, const std::vector<int>& ids, int num_layers) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= num_layers) {
      return FieldError(field, fmt::format("layer {} outside [0, {})", ids[i], num_layers));
    }
    if (i > 0 && ids[i] <= ids[i - 1]) {
      return FieldError(field, fmt::format("not strictly ascending at {}", ids[i]));
    }
  }
  return Status::Ok();
}

bool ListHas(const std::vector<int>& ids, int layer) {
  return std::find(ids.begin(), ids.end(), layer) != ids.end();
}

// The largest id in `ids` that is <= layer, or -1.
int MostRecentAtOrBefore(const std::vector<int>& ids, int layer) {
  int found = -1;
  for (int id : ids) {
    if (id <= layer) found = id;
  }
  return found;
}

Status ValidateDims(const TextConfig& t) {
  DI_RETURN_IF_ERROR(RequirePositive("text_config.vocab_size", t.vocab_size));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.hidden_size", t.hidden_size));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.num_hidden_layers", t.num_hidden_layers));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.num_attention_heads", t.num_attention_heads));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.head_dim", t.head_dim));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.qk_rope_head_dim", t.qk_rope_head_dim));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.q_lora_rank", t.q_lora_rank));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.o_lora_rank", t.o_lora_rank));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.o_groups", t.o_groups));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.n_routed_experts", t.n_routed_experts));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.num_experts_per_tok", t.num_experts_per_tok));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.moe_intermediate_size", t.moe_intermediate_size));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.sliding_window", t.sliding_window));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.hc_mult", t.hc_mult));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.hc_sinkhorn_iters", t.hc_sinkhorn_iters));
  if (t.n_shared_experts < 0) return FieldError("text_config.n_shared_experts", "must be >= 0");
  if (t.num_key_value_heads != 1) {
    return FieldError(
        "text_config.num_key_value_heads",
        fmt::format("must be 1 (one shared K=V latent), got {}", t.num_key_value_heads));
  }
  if (t.qk_rope_head_dim > t.head_dim || t.qk_rope_head_dim % 2 != 0) {
    return FieldError(
        "text_config.qk_rope_head_dim",
        fmt::format("{} must be even and <= head_dim {}", t.qk_rope_head_dim, t.head_dim));
  }
  // FP8 block scales use ceil(n/32), and the reference skips a fake-quant point whose vector
  // length is not a multiple of its block (model.md §6), so head_dim, q_lora_rank,
  // index_head_dim, ... need not be multiples of 32. Routed experts are MXFP4 with one scale
  // per 32 values along K (hidden_size for w1/w3, moe_intermediate_size for w2): those must be.
  DI_RETURN_IF_ERROR(RequireMultiple("text_config.hidden_size", t.hidden_size, 32));
  DI_RETURN_IF_ERROR(
      RequireMultiple("text_config.moe_intermediate_size", t.moe_intermediate_size, 32));
  if (t.num_attention_heads % t.o_groups != 0) {
    return FieldError("text_config.o_groups",
                      fmt::format("{} does not divide num_attention_heads {}", t.o_groups,
                                  t.num_attention_heads));
  }
  if (t.num_experts_per_tok > t.n_routed_experts) {
    return FieldError(
        "text_config.num_experts_per_tok",
        fmt::format("{} exceeds n_routed_experts {}", t.num_experts_per_tok, t.n_routed_experts));
  }
  if (t.rms_norm_eps <= 0) return FieldError("text_config.rms_norm_eps", "must be > 0");
  if (t.scoring_func != "sqrtsoftplus") {
    return FieldError("text_config.scoring_func",
                      fmt::format("unsupported '{}' (expected 'sqrtsoftplus')", t.scoring_func));
  }
  if (!t.topk_method.empty() && t.topk_method != "noaux_tc") {
    return FieldError("text_config.topk_method",
                      fmt::format("unsupported '{}' (expected 'noaux_tc')", t.topk_method));
  }
  if (t.hidden_act != "silu") {
    return FieldError("text_config.hidden_act",
                      fmt::format("unsupported '{}' (expected 'silu')", t.hidden_act));
  }
  if (!t.model_type.empty() && t.model_type != "deepseek_v41_text") {
    return FieldError("text_config.model_type",
                      fmt::format("unsupported '{}' (expected 'deepseek_v41_text')", t.model_type));
  }
  return Status::Ok();
}

Status ValidateSchedule(const TextConfig& t) {
  const int layers = t.num_hidden_layers;
  if (t.num_nextn_predict_layers < 0) {
    return FieldError("text_config.num_nextn_predict_layers", "must be >= 0");
  }
  const size_t expected = static_cast<size_t>(layers + t.num_nextn_predict_layers);
  if (t.compress_ratios.size() != expected) {
    return FieldError("text_config.compress_ratios",
                      fmt::format("has {} entries, expected num_hidden_layers + "
                                  "num_nextn_predict_layers = {}",
                                  t.compress_ratios.size(), expected));
  }
  for (size_t l = 0; l < t.compress_ratios.size(); ++l) {
    const int ratio = t.compress_ratios[l];
    const bool backbone = l < static_cast<size_t>(layers);
    if (backbone ? (ratio < 0 || ratio > 2) : ratio != 0) {
      return FieldError("text_config.compress_ratios",
                        fmt::format("entry {} is {}, expected {}", l, ratio,
                                    backbone ? "0, 1 or 2" : "0 (DSpark layer)"));
    }
  }
  DI_RETURN_IF_ERROR(
      RequireLayerList("text_config.kv_source_layer_ids", t.kv_source_layer_ids, layers));
  DI_RETURN_IF_ERROR(
      RequireLayerList("text_config.index_source_layer_ids", t.index_source_layer_ids, layers));
  for (int source : t.kv_source_layer_ids) {
    if (t.compress_ratios[source] == 0) {
      return FieldError("text_config.kv_source_layer_ids",
                        fmt::format("layer {} has compress ratio 0", source));
    }
    if (!ListHas(t.index_source_layer_ids, source)) {
      return FieldError("text_config.index_source_layer_ids",
                        fmt::format("KV source layer {} is not an index source", source));
    }
  }
  for (int l = 0; l < layers; ++l) {
    if (t.compress_ratios[l] > 0 && MostRecentAtOrBefore(t.kv_source_layer_ids, l) < 0) {
      return FieldError("text_config.kv_source_layer_ids",
                        fmt::format("layer {} (ratio {}) has no KV source at or before it", l,
                                    t.compress_ratios[l]));
    }
  }
  for (int source : t.index_source_layer_ids) {
    if (MostRecentAtOrBefore(t.kv_source_layer_ids, source) < 0) {
      return FieldError("text_config.index_source_layer_ids",
                        fmt::format("index source {} has no KV source at or before it", source));
    }
  }
  if (!t.index_source_layer_ids.empty()) {
    DI_RETURN_IF_ERROR(RequirePositive("text_config.index_n_heads", t.index_n_heads));
    DI_RETURN_IF_ERROR(RequirePositive("text_config.index_head_dim", t.index_head_dim));
    DI_RETURN_IF_ERROR(RequirePositive("text_config.index_topk", t.index_topk));
  }
  if (t.candidate_source_layer_id >= 0) {
    if (!ListHas(t.index_source_layer_ids, t.candidate_source_layer_id)) {
      return FieldError(
          "text_config.candidate_source_layer_id",
          fmt::format("layer {} is not an index source", t.candidate_source_layer_id));
    }
    DI_RETURN_IF_ERROR(
        RequirePositive("text_config.candidate_topk_blocks", t.candidate_topk_blocks));
    DI_RETURN_IF_ERROR(RequirePositive("text_config.candidate_block_size", t.candidate_block_size));
  } else if (t.candidate_source_layer_id != -1) {
    return FieldError("text_config.candidate_source_layer_id",
                      fmt::format("invalid layer {}", t.candidate_source_layer_id));
  }
  for (int target : t.dspark_target_layer_ids) {
    if (target < 0 || target >= layers) {
      return FieldError("text_config.dspark_target_layer_ids",
                        fmt::format("layer {} outside [0, {})", target, layers));
    }
  }
  return Status::Ok();
}

Status ValidateEngram(const TextConfig& t) {
  DI_RETURN_IF_ERROR(
      RequireLayerList("text_config.engram_layer_ids", t.engram_layer_ids, t.num_hidden_layers));
  if (t.engram_layer_ids.empty()) return Status::Ok();
  if (t.engram_num_embeddings.size() != t.engram_layer_ids.size()) {
    return FieldError("text_config.engram_num_embeddings",
                      fmt::format("has {} entries but engram_layer_ids has {}",
                                  t.engram_num_embeddings.size(), t.engram_layer_ids.size()));
  }
  for (int64_t rows : t.engram_num_embeddings) {
    DI_RETURN_IF_ERROR(RequirePositive("text_config.engram_num_embeddings", rows));
  }
  if (t.engram_max_ngram_size < 2) {
    return FieldError("text_config.engram_max_ngram_size",
                      fmt::format("must be >= 2, got {}", t.engram_max_ngram_size));
  }
  DI_RETURN_IF_ERROR(RequirePositive("text_config.engram_n_heads", t.engram_n_heads));
  DI_RETURN_IF_ERROR(RequirePositive("text_config.engram_head_dim", t.engram_head_dim));
  DI_RETURN_IF_ERROR(
      RequirePositive("text_config.engram_compressed_vocab_size", t.engram_compressed_vocab_size));
  return Status::Ok();
}

Status ValidateQuantization(const QuantizationConfig& q) {
  if (!q.present) return Status::Ok();
  if (q.quant_method != "fp8") {
    return FieldError("quantization_config.quant_method",
                      fmt::format("unsupported '{}' (expected 'fp8')", q.quant_method));
  }
  DI_RETURN_IF_ERROR(RequirePositive("quantization_config.weight_block_size", q.weight_block_n));
  DI_RETURN_IF_ERROR(RequirePositive("quantization_config.weight_block_size", q.weight_block_k));
  if (!q.scale_fmt.empty() && q.scale_fmt != "ue8m0") {
    return FieldError("quantization_config.scale_fmt",
                      fmt::format("unsupported '{}' (expected 'ue8m0')", q.scale_fmt));
  }
  if (q.expert_dtype != "fp4") {
    return FieldError("quantization_config.expert_dtype",
                      fmt::format("unsupported '{}' (expected 'fp4')", q.expert_dtype));
  }
  return Status::Ok();
}

Status ValidateVision(const VisionConfig& v) {
  if (!v.present) return Status::Ok();
  DI_RETURN_IF_ERROR(RequirePositive("vision_config.num_hidden_layers", v.num_hidden_layers));
  DI_RETURN_IF_ERROR(RequirePositive("vision_config.hidden_size", v.hidden_size));
  DI_RETURN_IF_ERROR(RequirePositive("vision_config.num_attention_heads", v.num_attention_heads));
  DI_RETURN_IF_ERROR(RequirePositive("vision_config.intermediate_size", v.intermediate_size));
  DI_RETURN_IF_ERROR(RequirePositive("vision_config.patch_size", v.patch_size));
  DI_RETURN_IF_ERROR(RequirePositive("vision_config.downsample_ratio", v.downsample_ratio));
  return Status::Ok();
}

}  // namespace

Status ValidateModelConfig(const ModelConfig& config) {
  const TextConfig& t = config.text_config;
  DI_RETURN_IF_ERROR(ValidateDims(t));
  DI_RETURN_IF_ERROR(ValidateSchedule(t));
  DI_RETURN_IF_ERROR(ValidateEngram(t));
  DI_RETURN_IF_ERROR(ValidateQuantization(config.quantization_config));
  DI_RETURN_IF_ERROR(ValidateVision(config.vision_config));
  return Status::Ok();
}

int ModelConfig::CompressRatio(int layer) const {
  CHECK(layer >= 0 && static_cast<size_t>(layer) < text_config.compress_ratios.size())
      << "layer " << layer;
  return text_config.compress_ratios[layer];
}

bool ModelConfig::IsKvSource(int layer) const {
  return ListHas(text_config.kv_source_layer_ids, layer);
}

bool ModelConfig::IsIndexSource(int layer) const {
  return ListHas(text_config.index_source_layer_ids, layer);
}

bool ModelConfig::IsReindexSource(int layer) const {
  return IsIndexSource(layer) && text_config.candidate_source_layer_id >= 0 &&
         layer > text_config.candidate_source_layer_id;
}

int ModelConfig::EngramIndex(int layer) const {
  const auto& ids = text_config.engram_layer_ids;
  const auto it = std::find(ids.begin(), ids.end(), layer);
  return it == ids.end() ? -1 : static_cast<int>(it - ids.begin());
}

int ModelConfig::KvSourceOf(int layer) const {
  if (CompressRatio(layer) == 0) return -1;
  return MostRecentAtOrBefore(text_config.kv_source_layer_ids, layer);
}

int ModelConfig::IndexSourceOf(int layer) const {
  if (CompressRatio(layer) == 0) return -1;
  return MostRecentAtOrBefore(text_config.index_source_layer_ids, layer);
}

std::string DescribeModelConfig(const ModelConfig& c) {
  const TextConfig& t = c.text_config;
  std::string out = fmt::format(
      "architecture: {} ({})\n"
      "layers: {}  hidden: {} x {} streams  vocab: {}\n"
      "attention: {} heads x {} (rope {}), q_lora {}, o_groups {} x o_lora {}, window {}\n"
      "compress_ratios: [{}]\n"
      "KV sources: [{}]  index sources: [{}]  candidate source: {} ({} blocks x {})\n"
      "indexer: {} heads x {}, topk {}\n"
      "MoE: {} routed experts (top-{}) + {} shared, intermediate {}, {}\n"
      "Engram layers: [{}] (max n-gram {}, {} heads x {})\n"
      "DSpark: {} draft layers, targets [{}]\n",
      fmt::join(c.architectures, ","), c.model_type, t.num_hidden_layers, t.hidden_size, t.hc_mult,
      t.vocab_size, t.num_attention_heads, t.head_dim, t.qk_rope_head_dim, t.q_lora_rank,
      t.o_groups, t.o_lora_rank, t.sliding_window, fmt::join(t.compress_ratios, ","),
      fmt::join(t.kv_source_layer_ids, ","), fmt::join(t.index_source_layer_ids, ","),
      t.candidate_source_layer_id, t.candidate_topk_blocks, t.candidate_block_size, t.index_n_heads,
      t.index_head_dim, t.index_topk, t.n_routed_experts, t.num_experts_per_tok, t.n_shared_experts,
      t.moe_intermediate_size, t.scoring_func, fmt::join(t.engram_layer_ids, ","),
      t.engram_max_ngram_size, t.engram_n_heads, t.engram_head_dim, t.num_nextn_predict_layers,
      fmt::join(t.dspark_target_layer_ids, ","));
  const QuantizationConfig& q = c.quantization_config;
  out += q.present
             ? fmt::format("quantization: {} {}x{} blocks, scales {}, experts {}\n", q.quant_method,
                           q.weight_block_n, q.weight_block_k, q.scale_fmt, q.expert_dtype)
             : "quantization: none\n";
  const VisionConfig& v = c.vision_config;
  out += v.present
             ? fmt::format("vision: {} layers, hidden {}, {} heads, patch {}\n",
                           v.num_hidden_layers, v.hidden_size, v.num_attention_heads, v.patch_size)
             : "vision: none\n";
  return out;
}

}  // namespace deepinfer::io
