// make_bench_model's library at --scale tiny: a valid config, exactly the expected tensors,
// no NaN codes, a forward with finite logits on the CPU backend, determinism in the seed.
#include "bench/gpu/bench_model_spec.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <set>

#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/engram_hash.h"
#include "model/model.h"

namespace deepinfer::bench {
namespace {

namespace fs = std::filesystem;

class BenchModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new fs::path(fs::temp_directory_path() /
                         ("bench_model_spec_test_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*root_);
    delete root_;
  }
  // Generates (once per name) a tiny checkpoint with `seed` and `threads`.
  static fs::path Generate(const std::string& name, uint64_t seed, int threads) {
    const fs::path dir = *root_ / name;
    if (!fs::exists(dir / "model.safetensors")) {
      BenchModelOptions options;
      options.scale = BenchScale::kTiny;
      options.seed = seed;
      options.threads = threads;
      const auto summary = WriteBenchModel(dir, options);
      EXPECT_TRUE(summary.ok()) << summary.status().ToString();
      if (summary.ok()) {
        EXPECT_EQ(summary->total_bytes, fs::file_size(dir / "model.safetensors"));
      }
    }
    return dir;
  }
  static fs::path* root_;
};
fs::path* BenchModelTest::root_ = nullptr;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(BenchModelConfigTest, RealPresetHasTheReleaseShapesAndSchedule) {
  const std::string text = BenchModelConfigJson(BenchScale::kReal, 99092).dump();
  const auto config = io::ParseModelConfig(text, "real");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const io::TextConfig& t = config->text();
  EXPECT_EQ(t.num_hidden_layers, 4);
  EXPECT_EQ(t.hidden_size, 5120);
  EXPECT_EQ(t.num_attention_heads, 64);
  EXPECT_EQ(t.head_dim, 512);
  EXPECT_EQ(t.n_routed_experts, 384);
  EXPECT_EQ(t.moe_intermediate_size, 2304);
  EXPECT_EQ(t.num_experts_per_tok, 6);
  EXPECT_EQ(t.compress_ratios, (std::vector<int>{0, 2, 1, 1}));
  EXPECT_EQ(t.kv_source_layer_ids, (std::vector<int>{1, 2}));
  EXPECT_EQ(t.index_source_layer_ids, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(t.candidate_source_layer_id, 2);
  EXPECT_TRUE(config->IsReindexSource(3));
  EXPECT_EQ(t.engram_layer_ids, (std::vector<int>{0}));
  ASSERT_EQ(t.engram_num_embeddings.size(), 1u);
  // 24 primes just above 100000.
  EXPECT_GT(t.engram_num_embeddings[0], 24 * 100000);
  EXPECT_LT(t.engram_num_embeddings[0], 24 * 101000);
  // ~32 GB, dominated by 4 x 384 x 3 MXFP4 experts.
  const CheckpointPlan plan = PlanCheckpoint(*config);
  EXPECT_GT(plan.data_bytes, 30e9);
  EXPECT_LT(plan.data_bytes, 36e9);
  const auto by_class = BytesByClass(plan);
  EXPECT_EQ(by_class.at("fp4"), 4ull * 384 * 3 * 2304 * 5120 / 2);
}

TEST(BenchModelConfigTest, RejectsUnknownScaleAndPreset) {
  EXPECT_FALSE(ParseBenchScale("huge").ok());
  EXPECT_TRUE(ParseBenchScale("tiny").ok());
  EXPECT_FALSE(CheckBenchPreset("flash40").ok());
}

TEST_F(BenchModelTest, HoldsExactlyTheExpectedTensorsWithoutNaNCodes) {
  const fs::path dir = Generate("a", 7, 2);
  const auto config = io::LoadModelConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const auto file = io::SafetensorsFile::Open(dir / "model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::vector<io::ActualTensor> actual;
  for (const auto& info : (*file)->tensors()) {
    actual.push_back({info.name, info.dtype, info.shape.ToVector()});
  }
  const std::vector<io::ExpectedTensor> expected = io::ExpectedTensors(*config);
  const io::SchemaCheckResult check = io::CheckTensorsAgainstSchema(*config, expected, actual);
  EXPECT_TRUE(check.ok());
  EXPECT_EQ(check.num_checked, static_cast<int64_t>(expected.size()));
  EXPECT_EQ(actual.size(), expected.size());
  EXPECT_TRUE(fs::exists(dir / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir / "generation_config.json"));
  int64_t fp8_bytes = 0;
  for (const auto& info : (*file)->tensors()) {
    const std::span<const uint8_t> bytes = (*file)->Bytes(info);
    if (info.dtype == tensor::DType::kF8E4M3) {
      for (const uint8_t b : bytes) ASSERT_NE(b & 0x7F, 0x7F) << info.name;
      fp8_bytes += static_cast<int64_t>(bytes.size());
    }
    if (info.dtype == tensor::DType::kF8E8M0) {
      EXPECT_TRUE(io::CheckE8M0Bytes(bytes, info.name).ok()) << info.name;
    }
  }
  EXPECT_GT(fp8_bytes, 0);
  const auto verified = VerifyBenchModel(dir);
  ASSERT_TRUE(verified.ok()) << verified.status().ToString();
  EXPECT_EQ(*verified, static_cast<int64_t>(expected.size()));
}

TEST_F(BenchModelTest, VerifyNamesAMissingTensor) {
  const fs::path dir = Generate("a", 7, 2);
  const fs::path broken = *root_ / "broken";
  fs::create_directories(broken);
  for (const char* name : {"config.json", "tokenizer.json"})
    fs::copy_file(dir / name, broken / name);
  // A checkpoint with one tensor only.
  io::SafetensorsWriter writer;
  const std::vector<uint8_t> bytes(256 * 2, 0);
  ASSERT_TRUE(writer.Add("norm.weight", tensor::DType::kBF16, {256}, bytes).ok());
  ASSERT_TRUE(writer.WriteFile(broken / "model.safetensors").ok());
  const auto verified = VerifyBenchModel(broken);
  ASSERT_FALSE(verified.ok());
  EXPECT_NE(verified.status().message().find("missing"), std::string::npos)
      << verified.status().ToString();
}

TEST_F(BenchModelTest, ForwardOnTheCpuGivesFiniteLogitsWithASaneSpread) {
  const fs::path dir = Generate("a", 7, 2);
  const auto config = io::LoadModelConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const auto engram =
      model::DeriveEngramHashConstants(config->text_config, (dir / "tokenizer.json").string());
  ASSERT_TRUE(engram.ok()) << engram.status().ToString();
  backend::cpu::CpuBackend backend;
  auto loaded = model::Model::Load(dir, &backend, *engram);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  model::Model& m = **loaded;
  model::SequenceState seq = m.NewSequence();
  const std::vector<int32_t> tokens = {0, 1000, 2345, 77, 90000, 12, 5, 6000};
  model::ForwardBatch batch;
  batch.chunks.push_back({&seq, tokens, seq.length, true});
  const auto out = m.Forward(batch);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->rows, static_cast<int64_t>(tokens.size()));
  ASSERT_EQ(out->vocab, 129280);
  double sum = 0.0, sum_sq = 0.0;
  for (const float v : out->logits) {
    ASSERT_TRUE(std::isfinite(v));
    sum += v;
    sum_sq += static_cast<double>(v) * v;
  }
  const double n = static_cast<double>(out->logits.size());
  const double stddev = std::sqrt(std::max(0.0, sum_sq / n - (sum / n) * (sum / n)));
  EXPECT_GT(stddev, 1e-3);
  EXPECT_LT(stddev, 1e3);
}

TEST_F(BenchModelTest, SameSeedSameBytesWhateverTheThreadsOtherSeedDiffers) {
  const std::string a = ReadFile(Generate("a", 7, 2) / "model.safetensors");
  const std::string same = ReadFile(Generate("same", 7, 1) / "model.safetensors");
  const std::string other = ReadFile(Generate("other", 8, 2) / "model.safetensors");
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == same);
  ASSERT_EQ(a.size(), other.size());
  EXPECT_FALSE(a == other);
  EXPECT_EQ(ReadFile(Generate("a", 7, 2) / "config.json"),
            ReadFile(Generate("other", 8, 2) / "config.json"));
}

}  // namespace
}  // namespace deepinfer::bench
