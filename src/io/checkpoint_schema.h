// The expected tensors of a DeepSeek-V4.1 checkpoint (shared/specs/model.md §4.2) as a
// function of the config, and a comparison against what a checkpoint holds.
//
// Covers the text backbone and globals (embed, norm, head). DSpark (`mtp.*`) and vision
// (`vision.*`, `aligner.*`, `image_*`) tensors come from unverified sources (model.md §2.10,
// §2.12): they are not listed here; CheckTensorsAgainstSchema reports them as "unchecked".
//
// Quantised storage (quantization_config present, the release's format):
//   FP8 matrix [N, K]: F8_E4M3 weight + F8_E8M0 `.scale` [ceil(N/bn), ceil(K/bk)]
//   FP4 expert [N, K]: I8 weight [N, K/2] (packed e2m1) + F8_E8M0 `.scale` [N, ceil(K/32)]
//   Engram table [rows, d]: F8_E4M3 weight + F8_E8M0 `.scale` [rows, ceil(d/32)]
// Without quantization_config every such weight is a BF16 [N, K] tensor with no scale.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "io/model_config.h"
#include "tensor/dtype.h"

namespace deepinfer::io {

// Which part of the model a tensor belongs to (for parameter counts).
enum class ModelPart { kBackbone, kExperts, kEngram, kDSpark, kVision };
inline constexpr int kNumModelParts = 5;
std::string_view ModelPartName(ModelPart part);  // "backbone", "experts", "Engram", ...
// Classifies a checkpoint name by its prefix: `mtp.` -> DSpark; `vision.`, `aligner.`,
// `image_` -> vision; `layers.L.ffn.experts.` -> experts; `layers.L.engram.` -> Engram;
// everything else -> backbone.
ModelPart ClassifyTensorName(std::string_view name);

enum class TensorEncoding {
  kPlain,        // elements are the parameters
  kPackedFp4,    // I8 bytes holding two e2m1 parameters each
  kBlockScales,  // F8_E8M0 scales (not parameters)
};

struct ExpectedTensor {
  std::string name;
  tensor::DType dtype;
  std::vector<int64_t> shape;
  ModelPart part;
  TensorEncoding encoding = TensorEncoding::kPlain;
  // Logical parameter count (packed FP4: 2 per byte; scales: 0).
  int64_t NumParameters() const;
};

// Every expected tensor of the text backbone, in a stable order (globals, then layer 0..L-1).
// The config must have passed ValidateModelConfig.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

struct ActualTensor {
  std::string name;
  tensor::DType dtype;
  std::vector<int64_t> shape;
};

struct TensorMismatch {
  std::string name;
  std::string expected;  // "f8_e4m3[64, 128]"
  std::string actual;
};

struct SchemaCheckResult {
  std::vector<std::string> missing;  // expected, not present (sorted)
  std::vector<std::string> extra;    // present, not expected and not unchecked (sorted)
  std::vector<TensorMismatch> mismatched;
  std::vector<std::string> unchecked;  // DSpark / vision tensors (sorted)
  int64_t num_checked = 0;             // expected tensors found with the right dtype and shape
  bool ok() const { return missing.empty() && extra.empty() && mismatched.empty(); }
};

// DSpark tensors count as unchecked when num_nextn_predict_layers > 0 and as extra otherwise;
// vision tensors are always unchecked.
SchemaCheckResult CheckTensorsAgainstSchema(const ModelConfig& config,
                                            const std::vector<ExpectedTensor>& expected,
                                            const std::vector<ActualTensor>& actual);

// "f8_e4m3[64, 128]"
std::string DescribeTensorType(tensor::DType dtype, const std::vector<int64_t>& shape);

}  // namespace deepinfer::io
