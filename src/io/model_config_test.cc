#include "io/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "io/io_test_util.h"

namespace deepinfer::io {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::filesystem::path V41FlashConfigPath() {
  return testing::SourceDir() / "src" / "io" / "testdata" / "deepseek_v41_flash_config.json";
}

json LoadJson(const std::filesystem::path& path) { return json::parse(testing::ReadText(path)); }

TEST(ModelConfigTest, ParsesGoldenTinyA) {
  auto config = LoadModelConfig(testing::GoldenDir("tiny_a") / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelConfig& c = *config;
  const TextConfig& t = c.text_config;
  EXPECT_EQ(c.model_type, "deepseek_v41");
  EXPECT_THAT(c.architectures, ElementsAre("DeepseekV41ForCausalLM"));
  EXPECT_EQ(c.image_token_id, 511);
  EXPECT_EQ(t.num_hidden_layers, 8);
  EXPECT_EQ(t.hidden_size, 128);
  EXPECT_EQ(t.head_dim, 64);
  EXPECT_EQ(t.qk_rope_head_dim, 16);
  EXPECT_THAT(t.compress_ratios, ElementsAre(0, 0, 2, 2, 2, 1, 1, 1));
  EXPECT_THAT(t.kv_source_layer_ids, ElementsAre(2, 5));
  EXPECT_THAT(t.index_source_layer_ids, ElementsAre(2, 5, 7));
  EXPECT_EQ(t.candidate_source_layer_id, 5);
  EXPECT_THAT(t.engram_num_embeddings, ElementsAre(630, 834));
  EXPECT_EQ(t.engram_compressed_vocab_size, 396);
  EXPECT_EQ(t.rms_norm_eps, 1e-20);
  EXPECT_EQ(t.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(t.rope_scaling.factor, 16);
  EXPECT_EQ(t.rope_scaling.original_max_position_embeddings, 65536);
  EXPECT_TRUE(c.quantization_config.present);
  EXPECT_EQ(c.quantization_config.weight_block_n, 32);
  EXPECT_EQ(c.quantization_config.expert_dtype, "fp4");
  EXPECT_TRUE(c.vision_config.present);
  EXPECT_FALSE(c.vision_config.max_wh_ratio.has_value());
  // Derived helpers.
  EXPECT_EQ(c.KvSourceOf(0), -1);
  EXPECT_EQ(c.KvSourceOf(3), 2);
  EXPECT_EQ(c.KvSourceOf(5), 5);
  EXPECT_EQ(c.KvSourceOf(7), 5);
  EXPECT_EQ(c.IndexSourceOf(4), 2);
  EXPECT_EQ(c.IndexSourceOf(6), 5);
  EXPECT_EQ(c.IndexSourceOf(7), 7);
  EXPECT_TRUE(c.IsReindexSource(7));
  EXPECT_FALSE(c.IsReindexSource(5));
  EXPECT_TRUE(c.IsCandidateSource(5));
  EXPECT_EQ(c.EngramIndex(3), 1);
  EXPECT_EQ(c.EngramIndex(2), -1);
  EXPECT_EQ(c.o_group_in_dim(), 128);
  EXPECT_EQ(c.o_proj_dim(), 128);
  EXPECT_EQ(c.hc_mix_dim(), 24);
  EXPECT_EQ(c.engram_lookup_dim(), 192);
  EXPECT_EQ(c.nope_head_dim(), 48);
}

TEST(ModelConfigTest, ParsesGoldenTinyB) {
  auto config = LoadModelConfig(testing::GoldenDir("tiny_b") / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  const TextConfig& t = config->text_config;
  EXPECT_EQ(t.num_hidden_layers, 10);
  EXPECT_EQ(t.hidden_size, 160);
  EXPECT_THAT(t.kv_source_layer_ids, ElementsAre(2, 4, 6));
  EXPECT_EQ(t.candidate_topk_blocks, 2048);
  EXPECT_EQ(config->KvSourceOf(5), 4);
  EXPECT_EQ(config->KvSourceOf(9), 6);
  EXPECT_EQ(config->IndexSourceOf(9), 8);
  EXPECT_TRUE(config->IsKvSource(4));
  EXPECT_TRUE(config->IsEngramLayer(4));
}

TEST(ModelConfigTest, ParsesReleaseV41FlashConfig) {
  auto config = LoadModelConfig(V41FlashConfigPath());
  ASSERT_TRUE(config.ok()) << config.status();
  const ModelConfig& c = *config;
  const TextConfig& t = c.text_config;
  EXPECT_EQ(t.vocab_size, 129280);
  EXPECT_EQ(t.hidden_size, 5120);
  EXPECT_EQ(t.num_hidden_layers, 40);
  EXPECT_EQ(t.compress_ratios.size(), 43u);
  EXPECT_EQ(t.n_routed_experts, 384);
  EXPECT_EQ(t.num_nextn_predict_layers, 3);
  EXPECT_THAT(t.dspark_target_layer_ids, ElementsAre(37, 38, 39));
  EXPECT_THAT(t.engram_num_embeddings, ElementsAre(384006168, 384016682));
  EXPECT_EQ(c.image_token_id, 129264);
  EXPECT_EQ(c.vision_config.hidden_size, 1024);
  EXPECT_EQ(c.vision_config.min_pixels, 295936);
  // model.md §1.4 derived dims.
  EXPECT_EQ(c.nope_head_dim(), 448);
  EXPECT_EQ(c.q_proj_dim(), 32768);
  EXPECT_EQ(c.o_group_in_dim(), 4096);
  EXPECT_EQ(c.o_proj_dim(), 8192);
  EXPECT_EQ(c.hc_mix_dim(), 24);
  EXPECT_EQ(c.hc_stream_dim(), 20480);
  EXPECT_EQ(c.engram_hash_columns(), 24);
  EXPECT_EQ(c.engram_lookup_dim(), 6144);
  // Schedule: layers 21..23 use KV source 20 and index source 20; 25 uses index source 24.
  EXPECT_EQ(c.KvSourceOf(23), 20);
  EXPECT_EQ(c.IndexSourceOf(25), 24);
  EXPECT_EQ(c.KvSourceOf(13), 8);
  EXPECT_EQ(c.KvSourceOf(1), -1);
  EXPECT_TRUE(c.IsReindexSource(24));
  EXPECT_FALSE(c.IsReindexSource(20));
  EXPECT_THAT(DescribeModelConfig(c), HasSubstr("KV sources: [2,8,14,20]"));
}

TEST(ModelConfigTest, V4FlashIsRecognisedButUnsupported) {
  auto config = LoadModelConfig(testing::SourceDir() / "src" / "io" / "testdata" /
                                "deepseek_v4_flash_config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), base::StatusCode::kUnimplemented);
  EXPECT_THAT(config.status().message(), HasSubstr("DeepSeek-V4-Flash"));
  EXPECT_THAT(config.status().message(), HasSubstr("not supported"));
}

TEST(ModelConfigTest, FileErrors) {
  EXPECT_EQ(LoadModelConfig("/nonexistent/config.json").status().code(),
            base::StatusCode::kNotFound);
  auto bad = ParseModelConfig("{not json", "cfg.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("cfg.json: malformed JSON"));
  EXPECT_THAT(ParseModelConfig("[]", "cfg.json").status().message(),
              HasSubstr("cfg.json: top level is not an object"));
  EXPECT_THAT(ParseModelConfig(R"({"model_type": "llama"})", "cfg.json").status().message(),
              HasSubstr("model_type: unsupported 'llama'"));
  EXPECT_THAT(ParseModelConfig(R"({"model_type": "deepseek_v41"})", "cfg.json").status().message(),
              HasSubstr("text_config: missing"));
}

// Each invalid config: a mutation of the release config and the expected message.
struct InvalidCase {
  const char* label;
  std::function<void(json&)> mutate;
  const char* expected;
};

class InvalidConfigTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidConfigTest, ReportsTheField) {
  json root = LoadJson(V41FlashConfigPath());
  GetParam().mutate(root);
  auto config = ParseModelConfig(root.dump(), "config.json");
  ASSERT_FALSE(config.ok()) << GetParam().label;
  EXPECT_EQ(config.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_THAT(config.status().message(),
              HasSubstr(std::string("config.json: ") + GetParam().expected));
}

json& Text(json& root) { return root["text_config"]; }

INSTANTIATE_TEST_SUITE_P(
    Fields, InvalidConfigTest,
    ::testing::Values(
        InvalidCase{"missing hidden_size", [](json& r) { Text(r).erase("hidden_size"); },
                    "text_config.hidden_size: missing"},
        InvalidCase{"string hidden_size", [](json& r) { Text(r)["hidden_size"] = "5120"; },
                    "text_config.hidden_size: expected an integer, got \"5120\""},
        InvalidCase{"float layers", [](json& r) { Text(r)["num_hidden_layers"] = 40.5; },
                    "text_config.num_hidden_layers: expected an integer"},
        InvalidCase{"zero heads", [](json& r) { Text(r)["num_attention_heads"] = 0; },
                    "text_config.num_attention_heads: must be > 0, got 0"},
        InvalidCase{"hidden not /32 (MXFP4 experts)",
                    [](json& r) { Text(r)["hidden_size"] = 5000; },
                    "text_config.hidden_size: 5000 is not a multiple of 32"},
        InvalidCase{"expert width not /32",
                    [](json& r) { Text(r)["moe_intermediate_size"] = 2300; },
                    "text_config.moe_intermediate_size: 2300 is not a multiple of 32"},
        InvalidCase{"rope > head", [](json& r) { Text(r)["qk_rope_head_dim"] = 1024; },
                    "text_config.qk_rope_head_dim: 1024 must be even and <= head_dim 512"},
        InvalidCase{"o_groups", [](json& r) { Text(r)["o_groups"] = 7; },
                    "text_config.o_groups: 7 does not divide num_attention_heads 64"},
        InvalidCase{"kv heads", [](json& r) { Text(r)["num_key_value_heads"] = 8; },
                    "text_config.num_key_value_heads: must be 1"},
        InvalidCase{"topk > experts", [](json& r) { Text(r)["num_experts_per_tok"] = 400; },
                    "text_config.num_experts_per_tok: 400 exceeds n_routed_experts 384"},
        InvalidCase{"scoring", [](json& r) { Text(r)["scoring_func"] = "sigmoid"; },
                    "text_config.scoring_func: unsupported 'sigmoid'"},
        InvalidCase{"ratios length",
                    [](json& r) {
                      Text(r)["compress_ratios"].erase(Text(r)["compress_ratios"].size() - 1);
                    },
                    "text_config.compress_ratios: has 42 entries, expected num_hidden_layers + "
                    "num_nextn_predict_layers = 43"},
        InvalidCase{"ratio value", [](json& r) { Text(r)["compress_ratios"][5] = 4; },
                    "text_config.compress_ratios: entry 5 is 4, expected 0, 1 or 2"},
        InvalidCase{"dspark ratio", [](json& r) { Text(r)["compress_ratios"][41] = 1; },
                    "text_config.compress_ratios: entry 41 is 1, expected 0 (DSpark layer)"},
        InvalidCase{"no kv source before",
                    [](json& r) {
                      Text(r)["kv_source_layer_ids"] = {8, 14, 20};
                      Text(r)["index_source_layer_ids"] = {8, 14, 20, 24, 28, 32, 36};
                    },
                    "text_config.kv_source_layer_ids: layer 2 (ratio 2) has no KV source at or "
                    "before it"},
        InvalidCase{"kv source ratio 0", [](json& r) { Text(r)["compress_ratios"][2] = 0; },
                    "text_config.kv_source_layer_ids: layer 2 has compress ratio 0"},
        InvalidCase{
            "kv source not index source",
            [](json& r) { Text(r)["index_source_layer_ids"] = {2, 8, 20, 24, 28, 32, 36}; },
            "text_config.index_source_layer_ids: KV source layer 14 is not an index source"},
        InvalidCase{"unsorted",
                    [](json& r) {
                      Text(r)["kv_source_layer_ids"] = {2, 14, 8, 20};
                    },
                    "text_config.kv_source_layer_ids: not strictly ascending at 8"},
        InvalidCase{
            "out of range",
            [](json& r) { Text(r)["index_source_layer_ids"] = {2, 8, 14, 20, 24, 28, 32, 40}; },
            "text_config.index_source_layer_ids: layer 40 outside [0, 40)"},
        InvalidCase{"candidate not index",
                    [](json& r) { Text(r)["candidate_source_layer_id"] = 21; },
                    "text_config.candidate_source_layer_id: layer 21 is not an index source"},
        InvalidCase{"engram lengths", [](json& r) { Text(r)["engram_num_embeddings"] = {5}; },
                    "text_config.engram_num_embeddings: has 1 entries but engram_layer_ids has 2"},
        InvalidCase{"engram ngram", [](json& r) { Text(r)["engram_max_ngram_size"] = 1; },
                    "text_config.engram_max_ngram_size: must be >= 2, got 1"},
        InvalidCase{"engram vocab", [](json& r) { Text(r).erase("engram_compressed_vocab_size"); },
                    "text_config.engram_compressed_vocab_size: missing"},
        InvalidCase{"dspark target",
                    [](json& r) {
                      Text(r)["dspark_target_layer_ids"] = {37, 38, 45};
                    },
                    "text_config.dspark_target_layer_ids: layer 45 outside [0, 40)"},
        InvalidCase{"rope scaling", [](json& r) { Text(r)["rope_scaling"] = 3; },
                    "text_config.rope_scaling: expected an object"},
        InvalidCase{"quant method",
                    [](json& r) { r["quantization_config"]["quant_method"] = "awq"; },
                    "quantization_config.quant_method: unsupported 'awq'"},
        InvalidCase{"quant blocks",
                    [](json& r) { r["quantization_config"]["weight_block_size"] = {32}; },
                    "quantization_config.weight_block_size: expected 2 entries"},
        InvalidCase{"expert dtype",
                    [](json& r) { r["quantization_config"]["expert_dtype"] = "fp8"; },
                    "quantization_config.expert_dtype: unsupported 'fp8'"},
        InvalidCase{"vision", [](json& r) { r["vision_config"]["patch_size"] = 0; },
                    "vision_config.patch_size: must be > 0, got 0"},
        InvalidCase{"text model type", [](json& r) { Text(r)["model_type"] = "deepseek_v4"; },
                    "text_config.model_type: unsupported 'deepseek_v4'"},
        InvalidCase{"array element", [](json& r) { Text(r)["kv_source_layer_ids"][1] = "x"; },
                    "text_config.kv_source_layer_ids[1]: expected an integer"}));

TEST(ModelConfigTest, EngramIsOptional) {
  json root = LoadJson(V41FlashConfigPath());
  for (const char* key : {"engram_layer_ids", "engram_num_embeddings", "engram_max_ngram_size",
                          "engram_vocab_size", "engram_n_heads", "engram_head_dim",
                          "engram_pad_token_id", "engram_compressed_vocab_size"}) {
    Text(root).erase(key);
  }
  auto config = ParseModelConfig(root.dump(), "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->IsEngramLayer(1));
}

}  // namespace
}  // namespace deepinfer::io
