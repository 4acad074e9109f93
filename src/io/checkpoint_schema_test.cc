#include "io/checkpoint_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "io/checkpoint.h"
#include "io/io_test_util.h"

namespace deepinfer::io {
namespace {

using tensor::DType;
using ::testing::ElementsAre;

ModelConfig ReleaseConfig() {
  auto config = LoadModelConfig(testing::SourceDir() / "src" / "io" / "testdata" /
                                "deepseek_v41_flash_config.json");
  CHECK(config.ok()) << config.status();
  return *config;
}

std::map<std::string, const ExpectedTensor*> ByName(const std::vector<ExpectedTensor>& tensors) {
  std::map<std::string, const ExpectedTensor*> map;
  for (const ExpectedTensor& t : tensors) map[t.name] = &t;
  return map;
}

void ExpectTensor(const std::map<std::string, const ExpectedTensor*>& map, const std::string& name,
                  DType dtype, std::vector<int64_t> shape) {
  const auto it = map.find(name);
  ASSERT_NE(it, map.end()) << name;
  EXPECT_EQ(it->second->dtype, dtype) << name;
  EXPECT_EQ(it->second->shape, shape) << name;
}

TEST(CheckpointSchemaTest, ReleaseShapesMatchModelMdTable) {
  const auto tensors = ExpectedTensors(ReleaseConfig());
  const auto map = ByName(tensors);
  EXPECT_EQ(map.size(), tensors.size()) << "names must be unique";
  ExpectTensor(map, "embed.weight", DType::kBF16, {129280, 5120});
  ExpectTensor(map, "head.weight", DType::kBF16, {129280, 5120});
  ExpectTensor(map, "layers.0.hc_attn_fn", DType::kF32, {24, 20480});
  ExpectTensor(map, "layers.0.hc_ffn_scale", DType::kF32, {3});
  ExpectTensor(map, "layers.0.attn.wq_a.weight", DType::kF8E4M3, {1280, 5120});
  ExpectTensor(map, "layers.0.attn.wq_a.scale", DType::kF8E8M0, {40, 160});
  ExpectTensor(map, "layers.0.attn.wq_b.scale", DType::kF8E8M0, {1024, 40});
  ExpectTensor(map, "layers.0.attn.wkv.scale", DType::kF8E8M0, {16, 160});
  ExpectTensor(map, "layers.0.attn.wo_a.weight", DType::kF8E4M3, {8192, 4096});
  ExpectTensor(map, "layers.0.attn.wo_a.scale", DType::kF8E8M0, {256, 128});
  ExpectTensor(map, "layers.0.attn.wo_b.scale", DType::kF8E8M0, {160, 256});
  ExpectTensor(map, "layers.0.attn.attn_sink", DType::kF32, {64});
  ExpectTensor(map, "layers.0.ffn.gate.weight", DType::kBF16, {384, 5120});
  ExpectTensor(map, "layers.0.ffn.gate.bias_vl", DType::kF32, {384});
  ExpectTensor(map, "layers.0.ffn.shared_experts.w2.scale", DType::kF8E8M0, {160, 72});
  ExpectTensor(map, "layers.39.ffn.experts.383.w1.weight", DType::kI8, {2304, 2560});
  ExpectTensor(map, "layers.39.ffn.experts.383.w1.scale", DType::kF8E8M0, {2304, 160});
  ExpectTensor(map, "layers.39.ffn.experts.383.w2.weight", DType::kI8, {5120, 1152});
  ExpectTensor(map, "layers.39.ffn.experts.383.w2.scale", DType::kF8E8M0, {5120, 72});
  ExpectTensor(map, "layers.20.attn.compressor.wkv.weight", DType::kBF16, {512, 5120});
  ExpectTensor(map, "layers.14.attn.compressor.wgate.weight", DType::kBF16, {512, 5120});
  ExpectTensor(map, "layers.8.attn.indexer.wk.weight", DType::kBF16, {128, 512});
  ExpectTensor(map, "layers.8.attn.indexer.k_norm.weight", DType::kBF16, {128});
  ExpectTensor(map, "layers.36.attn.indexer.wq_b.weight", DType::kF8E4M3, {4096, 1280});
  ExpectTensor(map, "layers.36.attn.indexer.wq_b.scale", DType::kF8E8M0, {128, 40});
  ExpectTensor(map, "layers.36.attn.indexer.weights_proj.weight", DType::kBF16, {32, 5120});
  ExpectTensor(map, "layers.14.engram.embed.weight", DType::kF8E4M3, {384016682, 256});
  ExpectTensor(map, "layers.14.engram.embed.scale", DType::kF8E8M0, {384016682, 8});
  ExpectTensor(map, "layers.1.engram.wkv.weight", DType::kF8E4M3, {25600, 6144});
  ExpectTensor(map, "layers.1.engram.wkv.scale", DType::kF8E8M0, {800, 192});
  ExpectTensor(map, "layers.1.engram.q_weight", DType::kBF16, {4, 5120});
  // Role-dependent tensors are absent where the role is absent.
  EXPECT_FALSE(map.contains("layers.20.attn.compressor.wgate.weight"));  // ratio 1
  EXPECT_FALSE(map.contains("layers.21.attn.compressor.wkv.weight"));    // not a KV source
  EXPECT_FALSE(map.contains("layers.24.attn.indexer.wk.weight"));        // index, not KV source
  EXPECT_FALSE(map.contains("layers.23.attn.indexer.wq_b.weight"));
  EXPECT_FALSE(map.contains("layers.2.engram.embed.weight"));
}

TEST(CheckpointSchemaTest, ReleaseParameterCountsMatchModelMdArithmetic) {
  std::array<int64_t, kNumModelParts> params{};
  for (const ExpectedTensor& t : ExpectedTensors(ReleaseConfig())) {
    params[static_cast<int>(t.part)] += t.NumParameters();
  }
  const int64_t experts = params[static_cast<int>(ModelPart::kExperts)];
  const int64_t engram = params[static_cast<int>(ModelPart::kEngram)];
  const int64_t backbone = params[static_cast<int>(ModelPart::kBackbone)];
  EXPECT_EQ(experts, int64_t{40} * 384 * 3 * 5120 * 2304);  // 543.6B
  // Engram tables (196.6B) plus the small wkv / q / k weights.
  const int64_t tables = (int64_t{384006168} + 384016682) * 256;
  EXPECT_EQ(engram, tables + 2 * (int64_t{25600} * 6144 + 2 * 4 * 5120));
  // model.md §1.4: backbone excluding Engram tables and DSpark ≈ 551.9B.
  const double backbone_total = static_cast<double>(backbone + experts + engram - tables);
  EXPECT_NEAR(backbone_total / 1e9, 551.9, 0.3);
}

TEST(CheckpointSchemaTest, UnquantisedConfigUsesBf16WithoutScales) {
  ModelConfig config = ReleaseConfig();
  config.quantization_config = QuantizationConfig{};
  const auto tensors = ExpectedTensors(config);
  const auto map = ByName(tensors);
  ExpectTensor(map, "layers.0.attn.wq_a.weight", DType::kBF16, {1280, 5120});
  ExpectTensor(map, "layers.0.ffn.experts.0.w2.weight", DType::kBF16, {5120, 2304});
  EXPECT_FALSE(map.contains("layers.0.attn.wq_a.scale"));
}

TEST(CheckpointSchemaTest, ClassifiesNames) {
  EXPECT_EQ(ClassifyTensorName("layers.3.ffn.experts.7.w1.weight"), ModelPart::kExperts);
  EXPECT_EQ(ClassifyTensorName("layers.3.ffn.shared_experts.w1.weight"), ModelPart::kBackbone);
  EXPECT_EQ(ClassifyTensorName("layers.14.engram.embed.weight"), ModelPart::kEngram);
  EXPECT_EQ(ClassifyTensorName("mtp.0.main_proj.weight"), ModelPart::kDSpark);
  EXPECT_EQ(ClassifyTensorName("vision.blocks.0.wqkv.weight"), ModelPart::kVision);
  EXPECT_EQ(ClassifyTensorName("image_newline"), ModelPart::kVision);
  EXPECT_EQ(ClassifyTensorName("embed.weight"), ModelPart::kBackbone);
  EXPECT_EQ(ModelPartName(ModelPart::kEngram), "Engram");
}

TEST(CheckpointSchemaTest, ReportsMissingExtraMismatchedAndUnchecked) {
  ModelConfig config = ReleaseConfig();
  const std::vector<ExpectedTensor> expected = {
      {"a", DType::kBF16, {2, 3}, ModelPart::kBackbone},
      {"b", DType::kF32, {4}, ModelPart::kBackbone},
      {"c", DType::kF32, {4}, ModelPart::kBackbone},
  };
  const std::vector<ActualTensor> actual = {
      {"a", DType::kBF16, {2, 3}},  {"b", DType::kF16, {4}},       {"z", DType::kU8, {1}},
      {"mtp.0.x", DType::kU8, {1}}, {"vision.y", DType::kU8, {1}},
  };
  SchemaCheckResult result = CheckTensorsAgainstSchema(config, expected, actual);
  EXPECT_FALSE(result.ok());
  EXPECT_EQ(result.num_checked, 1);
  EXPECT_THAT(result.missing, ElementsAre("c"));
  EXPECT_THAT(result.extra, ElementsAre("z"));
  ASSERT_EQ(result.mismatched.size(), 1u);
  EXPECT_EQ(result.mismatched[0].expected, "f32[4]");
  EXPECT_EQ(result.mismatched[0].actual, "f16[4]");
  EXPECT_THAT(result.unchecked, ElementsAre("mtp.0.x", "vision.y"));
  // Without DSpark layers in the config, mtp.* tensors are extra.
  config.text_config.num_nextn_predict_layers = 0;
  result = CheckTensorsAgainstSchema(config, expected, actual);
  EXPECT_THAT(result.extra, ElementsAre("mtp.0.x", "z"));
}

TEST(CheckpointSchemaTest, GoldenCheckpointsMatchExactly) {
  for (const char* name : {"tiny_a", "tiny_b"}) {
    auto config = LoadModelConfig(testing::GoldenDir(name) / "config.json");
    ASSERT_TRUE(config.ok()) << config.status();
    auto checkpoint = Checkpoint::Open(testing::GoldenDir(name));
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    std::vector<ActualTensor> actual;
    for (const std::string& tensor_name : (*checkpoint)->TensorNames()) {
      const SafetensorsTensorInfo* info = (*checkpoint)->Find(tensor_name);
      actual.push_back({tensor_name, info->dtype, info->shape.ToVector()});
    }
    const auto expected = ExpectedTensors(*config);
    const SchemaCheckResult result = CheckTensorsAgainstSchema(*config, expected, actual);
    EXPECT_TRUE(result.ok()) << name;
    EXPECT_EQ(result.num_checked, static_cast<int64_t>(expected.size()));
    EXPECT_EQ(expected.size(), (*checkpoint)->num_tensors());
  }
}

}  // namespace
}  // namespace deepinfer::io
