#include "io/checkpoint_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

namespace deepinfer::io {
namespace {

using tensor::DType;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t kFp4ScaleBlock = 32;     // MXFP4: one E8M0 scale per 32 values of a row
constexpr int64_t kEngramScaleBlock = 32;  // Engram rows: one scale per 32 channels

class SchemaBuilder {
 public:
  explicit SchemaBuilder(const ModelConfig& config) : config_(config) {}

  void Plain(std::string name, DType dtype, std::vector<int64_t> shape) {
    Push(std::move(name), dtype, std::move(shape), TensorEncoding::kPlain);
  }
  // An FP8 block-quantised matrix [n, k] (BF16 when the checkpoint is unquantised).
  void Fp8Matrix(const std::string& prefix, int64_t n, int64_t k) {
    const QuantizationConfig& q = config_.quantization_config;
    if (!q.present) return Plain(prefix + ".weight", DType::kBF16, {n, k});
    Plain(prefix + ".weight", DType::kF8E4M3, {n, k});
    Push(prefix + ".scale", DType::kF8E8M0,
         {CeilDiv(n, q.weight_block_n), CeilDiv(k, q.weight_block_k)},
         TensorEncoding::kBlockScales);
  }
  // A routed-expert matrix [n, k]: packed e2m1 [n, k/2] + per-row scales [n, ceil(k/32)].
  void Fp4Matrix(const std::string& prefix, int64_t n, int64_t k) {
    if (!config_.quantization_config.present)
      return Plain(prefix + ".weight", DType::kBF16, {n, k});
    Push(prefix + ".weight", DType::kI8, {n, k / 2}, TensorEncoding::kPackedFp4);
    Push(prefix + ".scale", DType::kF8E8M0, {n, CeilDiv(k, kFp4ScaleBlock)},
         TensorEncoding::kBlockScales);
  }
  // An Engram table [rows, d] with per-row, per-32-channel scales.
  void EngramTable(const std::string& prefix, int64_t rows, int64_t d) {
    if (!config_.quantization_config.present)
      return Plain(prefix + ".weight", DType::kBF16, {rows, d});
    Plain(prefix + ".weight", DType::kF8E4M3, {rows, d});
    Push(prefix + ".scale", DType::kF8E8M0, {rows, CeilDiv(d, kEngramScaleBlock)},
         TensorEncoding::kBlockScales);
  }

  std::vector<ExpectedTensor> Take() { return std::move(tensors_); }

 private:
  void Push(std::string name, DType dtype, std::vector<int64_t> shape, TensorEncoding encoding) {
    const ModelPart part = ClassifyTensorName(name);
    tensors_.push_back({std::move(name), dtype, std::move(shape), part, encoding});
  }

  const ModelConfig& config_;
  std::vector<ExpectedTensor> tensors_;
};

void AddAttention(const ModelConfig& c, int layer, SchemaBuilder& b) {
  const TextConfig& t = c.text_config;
  const std::string p = fmt::format("layers.{}.attn.", layer);
  b.Fp8Matrix(p + "wq_a", t.q_lora_rank, t.hidden_size);
  b.Plain(p + "q_norm.weight", DType::kBF16, {t.q_lora_rank});
  b.Fp8Matrix(p + "wq_b", c.q_proj_dim(), t.q_lora_rank);
  b.Fp8Matrix(p + "wkv", t.head_dim, t.hidden_size);
  b.Plain(p + "kv_norm.weight", DType::kBF16, {t.head_dim});
  b.Fp8Matrix(p + "wo_a", c.o_proj_dim(), c.o_group_in_dim());
  b.Fp8Matrix(p + "wo_b", t.hidden_size, c.o_proj_dim());
  b.Plain(p + "attn_sink", DType::kF32, {t.num_attention_heads});
  if (c.IsKvSource(layer)) {
    b.Plain(p + "compressor.wkv.weight", DType::kBF16, {t.head_dim, t.hidden_size});
    if (c.CompressRatio(layer) > 1) {
      b.Plain(p + "compressor.wgate.weight", DType::kBF16, {t.head_dim, t.hidden_size});
    }
    b.Plain(p + "compressor.norm.weight", DType::kBF16, {t.head_dim});
  }
  if (c.IsIndexSource(layer)) {
    if (c.IsKvSource(layer)) {
      b.Plain(p + "indexer.wk.weight", DType::kBF16, {t.index_head_dim, t.head_dim});
      b.Plain(p + "indexer.k_norm.weight", DType::kBF16, {t.index_head_dim});
    }
    b.Fp8Matrix(p + "indexer.wq_b", c.index_q_dim(), t.q_lora_rank);
    b.Plain(p + "indexer.weights_proj.weight", DType::kBF16, {t.index_n_heads, t.hidden_size});
  }
}

void AddFfn(const ModelConfig& c, int layer, SchemaBuilder& b) {
  const TextConfig& t = c.text_config;
  const std::string p = fmt::format("layers.{}.ffn.", layer);
  b.Plain(p + "gate.weight", DType::kBF16, {t.n_routed_experts, t.hidden_size});
  b.Plain(p + "gate.bias", DType::kF32, {t.n_routed_experts});
  b.Plain(p + "gate.bias_vl", DType::kF32, {t.n_routed_experts});
  if (t.n_shared_experts > 0) {
    b.Fp8Matrix(p + "shared_experts.w1", c.shared_expert_dim(), t.hidden_size);
    b.Fp8Matrix(p + "shared_experts.w2", t.hidden_size, c.shared_expert_dim());
    b.Fp8Matrix(p + "shared_experts.w3", c.shared_expert_dim(), t.hidden_size);
  }
  for (int e = 0; e < t.n_routed_experts; ++e) {
    const std::string ep = fmt::format("{}experts.{}.", p, e);
    b.Fp4Matrix(ep + "w1", t.moe_intermediate_size, t.hidden_size);
    b.Fp4Matrix(ep + "w2", t.hidden_size, t.moe_intermediate_size);
    b.Fp4Matrix(ep + "w3", t.moe_intermediate_size, t.hidden_size);
  }
}

void AddEngram(const ModelConfig& c, int layer, SchemaBuilder& b) {
  const TextConfig& t = c.text_config;
  const int index = c.EngramIndex(layer);
  if (index < 0) return;
  const std::string p = fmt::format("layers.{}.engram.", layer);
  b.EngramTable(p + "embed", t.engram_num_embeddings[index], t.engram_head_dim);
  // One key per stream plus one shared value.
  b.Fp8Matrix(p + "wkv", (t.hc_mult + 1) * t.hidden_size, c.engram_lookup_dim());
  b.Plain(p + "q_weight", DType::kBF16, {t.hc_mult, t.hidden_size});
  b.Plain(p + "k_weight", DType::kBF16, {t.hc_mult, t.hidden_size});
}

void AddLayer(const ModelConfig& c, int layer, SchemaBuilder& b) {
  const TextConfig& t = c.text_config;
  const std::string p = fmt::format("layers.{}.", layer);
  b.Plain(p + "attn_norm.weight", DType::kBF16, {t.hidden_size});
  b.Plain(p + "ffn_norm.weight", DType::kBF16, {t.hidden_size});
  for (const char* site : {"attn", "ffn"}) {
    b.Plain(fmt::format("{}hc_{}_fn", p, site), DType::kF32, {c.hc_mix_dim(), c.hc_stream_dim()});
    b.Plain(fmt::format("{}hc_{}_base", p, site), DType::kF32, {c.hc_mix_dim()});
    b.Plain(fmt::format("{}hc_{}_scale", p, site), DType::kF32, {3});
  }
  AddAttention(c, layer, b);
  AddFfn(c, layer, b);
  AddEngram(c, layer, b);
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

}  // namespace

std::string_view ModelPartName(ModelPart part) {
  switch (part) {
    case ModelPart::kBackbone:
      return "backbone";
    case ModelPart::kExperts:
      return "experts";
    case ModelPart::kEngram:
      return "Engram";
    case ModelPart::kDSpark:
      return "DSpark";
    case ModelPart::kVision:
      return "vision";
  }
  return "?";
}

ModelPart ClassifyTensorName(std::string_view name) {
  if (StartsWith(name, "mtp.")) return ModelPart::kDSpark;
  if (StartsWith(name, "vision.") || StartsWith(name, "aligner.") || StartsWith(name, "image_")) {
    return ModelPart::kVision;
  }
  if (StartsWith(name, "layers.")) {
    const size_t dot = name.find('.', 7);
    if (dot != std::string_view::npos) {
      const std::string_view rest = name.substr(dot + 1);
      if (StartsWith(rest, "ffn.experts.")) return ModelPart::kExperts;
      if (StartsWith(rest, "engram.")) return ModelPart::kEngram;
    }
  }
  return ModelPart::kBackbone;
}

int64_t ExpectedTensor::NumParameters() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  switch (encoding) {
    case TensorEncoding::kPlain:
      return n;
    case TensorEncoding::kPackedFp4:
      return 2 * n;
    case TensorEncoding::kBlockScales:
      return 0;
  }
  return n;
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config) {
  const TextConfig& t = config.text_config;
  SchemaBuilder b(config);
  b.Plain("embed.weight", DType::kBF16, {t.vocab_size, t.hidden_size});
  b.Plain("norm.weight", DType::kBF16, {t.hidden_size});
  b.Plain("head.weight", DType::kBF16, {t.vocab_size, t.hidden_size});
  for (int layer = 0; layer < t.num_hidden_layers; ++layer) AddLayer(config, layer, b);
  return b.Take();
}

std::string DescribeTensorType(tensor::DType dtype, const std::vector<int64_t>& shape) {
  return fmt::format("{}[{}]", tensor::DTypeName(dtype), fmt::join(shape, ", "));
}

SchemaCheckResult CheckTensorsAgainstSchema(const ModelConfig& config,
                                            const std::vector<ExpectedTensor>& expected,
                                            const std::vector<ActualTensor>& actual) {
  std::map<std::string_view, const ActualTensor*> present;
  for (const ActualTensor& a : actual) present.emplace(a.name, &a);
  SchemaCheckResult result;
  std::map<std::string_view, bool> expected_names;
  for (const ExpectedTensor& e : expected) {
    expected_names.emplace(e.name, true);
    const auto it = present.find(e.name);
    if (it == present.end()) {
      result.missing.push_back(e.name);
      continue;
    }
    const ActualTensor& a = *it->second;
    if (a.dtype != e.dtype || a.shape != e.shape) {
      result.mismatched.push_back(
          {e.name, DescribeTensorType(e.dtype, e.shape), DescribeTensorType(a.dtype, a.shape)});
    } else {
      ++result.num_checked;
    }
  }
  const bool has_dspark = config.text_config.num_nextn_predict_layers > 0;
  for (const ActualTensor& a : actual) {
    if (expected_names.contains(a.name)) continue;
    const ModelPart part = ClassifyTensorName(a.name);
    if (part == ModelPart::kVision || (part == ModelPart::kDSpark && has_dspark)) {
      result.unchecked.push_back(a.name);
    } else {
      result.extra.push_back(a.name);
    }
  }
  std::sort(result.missing.begin(), result.missing.end());
  std::sort(result.extra.begin(), result.extra.end());
  std::sort(result.unchecked.begin(), result.unchecked.end());
  std::sort(result.mismatched.begin(), result.mismatched.end(),
            [](const TensorMismatch& x, const TensorMismatch& y) { return x.name < y.name; });
  return result;
}

}  // namespace deepinfer::io
