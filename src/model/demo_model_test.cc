#include "model/demo_model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "io/inspect.h"
#include "model/engram_hash.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;

const std::string kTokenizer =
    std::string(DEEPINFER_SHARED_DIR) + "/tokenizers/deepseek-v4.1/tokenizer.json";

// One demo model (seed 0) shared by the tests of the suite; generating takes seconds.
class DemoModelTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    suite_root_ =
        new fs::path(fs::temp_directory_path() / ("demo_model_test_" + std::to_string(::getpid())));
    fs::remove_all(*suite_root_);
    DemoModelOptions options;
    options.tokenizer_json = kTokenizer;
    shared_status_ = new base::Status(WriteDemoModel(*suite_root_ / "seed0", options));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*suite_root_);
    delete suite_root_;
    delete shared_status_;
  }
  void SetUp() override {
    ASSERT_TRUE(shared_status_->ok()) << *shared_status_;
    root_ = *suite_root_ / testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  static fs::path SharedDir() { return *suite_root_ / "seed0"; }

  fs::path Generate(const std::string& name, uint64_t seed) {
    DemoModelOptions options;
    options.seed = seed;
    options.tokenizer_json = kTokenizer;
    const fs::path dir = root_ / name;
    const base::Status status = WriteDemoModel(dir, options);
    EXPECT_TRUE(status.ok()) << status;
    return dir;
  }

  fs::path root_;
  static fs::path* suite_root_;
  static base::Status* shared_status_;
};

fs::path* DemoModelTest::suite_root_ = nullptr;
base::Status* DemoModelTest::shared_status_ = nullptr;

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes(fs::file_size(path), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(in.good()) << path;
  return bytes;
}

TEST_F(DemoModelTest, ValidatesAgainstSchemaWithEveryFeature) {
  const fs::path dir = SharedDir();
  auto report = io::InspectModel(dir);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->check.ok()) << io::FormatInspectReport(*report);
  EXPECT_EQ(report->check.num_checked,
            static_cast<int64_t>(io::ExpectedTensors(report->config).size()));
  EXPECT_TRUE(report->check.unchecked.empty());

  const io::ModelConfig& c = report->config;
  EXPECT_EQ(c.text_config.vocab_size, 129280);
  // Ratio 0, 2 and 1 layers; two ratio-2 KV groups and a ratio-1 group.
  EXPECT_EQ(c.text_config.compress_ratios, (std::vector<int>{0, 0, 2, 2, 2, 2, 1, 1}));
  EXPECT_EQ(c.text_config.kv_source_layer_ids, (std::vector<int>{2, 4, 6}));
  EXPECT_TRUE(c.IsCandidateSource(6));
  EXPECT_TRUE(c.IsReindexSource(7));
  EXPECT_FALSE(c.IsKvSource(3));  // a layer reusing its source's compressed KV
  EXPECT_TRUE(c.IsEngramLayer(1));
  EXPECT_TRUE(c.IsEngramLayer(4) && c.IsKvSource(4));  // Engram on a KV source
  EXPECT_EQ(c.text_config.n_shared_experts, 1);
  EXPECT_EQ(report->config.quantization_config.expert_dtype, "fp4");

  // The Engram constants derive from the shipped tokenizer and agree with the config.
  auto engram = DeriveEngramConstants(c.text_config, (dir / "tokenizer.json").string());
  ASSERT_TRUE(engram.ok()) << engram.status();
  EXPECT_EQ(engram->compressed_vocab_size, 99092);
  EXPECT_EQ(ReadAll(dir / "tokenizer.json"), ReadAll(kTokenizer));

  // Storage like the release; E8M0 scales never 255.
  auto checkpoint = io::Checkpoint::Open(dir);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ((*checkpoint)->Find("layers.0.attn.wq_a.weight")->dtype, tensor::DType::kF8E4M3);
  EXPECT_EQ((*checkpoint)->Find("layers.0.ffn.experts.0.w1.weight")->dtype, tensor::DType::kI8);
  EXPECT_EQ((*checkpoint)->Find("embed.weight")->dtype, tensor::DType::kBF16);
  EXPECT_EQ((*checkpoint)->Find("layers.0.hc_attn_fn")->dtype, tensor::DType::kF32);
  int64_t scale_bytes = 0;
  for (const std::string& name : (*checkpoint)->TensorNames()) {
    if (name.size() < 6 || name.substr(name.size() - 6) != ".scale") continue;
    auto bytes = (*checkpoint)->Bytes(name);
    ASSERT_TRUE(bytes.ok());
    for (const uint8_t b : *bytes) ASSERT_NE(b, tensor::kE8M0NaN) << name;
    scale_bytes += static_cast<int64_t>(bytes->size());
  }
  EXPECT_GT(scale_bytes, 0);
}

TEST_F(DemoModelTest, LoadsAndRunsPrefillAndDecodeWithFiniteLogits) {
  const fs::path dir = SharedDir();
  auto config = io::LoadModelConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto engram = DeriveEngramHashConstants(config->text_config, (dir / "tokenizer.json").string());
  ASSERT_TRUE(engram.ok()) << engram.status();
  backend::cpu::CpuBackend backend;
  auto model = Model::Load(dir, &backend, *engram);
  ASSERT_TRUE(model.ok()) << model.status();

  // 40 tokens: past the window (32), many compressed groups, top-k (16) active.
  std::vector<int32_t> prompt = {0};
  for (int i = 1; i < 40; ++i) prompt.push_back(1000 + 2311 * i % 120000);
  SequenceState state = (*model)->NewSequence();
  ForwardBatch prefill;
  prefill.chunks.push_back({&state, prompt, 0, /*all_logits=*/true});
  auto out = (*model)->Forward(prefill);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->rows, 40);
  ASSERT_EQ(out->vocab, 129280);
  int non_finite = 0;
  for (const float v : out->logits) non_finite += !std::isfinite(v);
  EXPECT_EQ(non_finite, 0);
  float spread = 0.0f;
  for (int64_t v = 0; v < out->vocab; ++v) spread = std::max(spread, std::fabs(out->logits[v]));
  EXPECT_GT(spread, 0.0f);  // not all-zero logits

  const std::vector<int32_t> next = {42};
  ForwardBatch decode;
  decode.chunks.push_back({&state, next, 40, false});
  auto step = (*model)->Forward(decode);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->rows, 1);
  for (const float v : step->logits) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(DemoModelTest, DeterministicFromSeed) {
  const fs::path a = SharedDir();
  const fs::path b = Generate("b", 0);
  const fs::path c = Generate("c", 1);
  for (const char* file : {"config.json", "model.safetensors", "model.safetensors.index.json",
                           "generation_config.json"}) {
    EXPECT_EQ(ReadAll(a / file), ReadAll(b / file)) << file;
  }
  EXPECT_NE(ReadAll(a / "model.safetensors"), ReadAll(c / "model.safetensors"));
  EXPECT_EQ(ReadAll(a / "config.json"), ReadAll(c / "config.json"));
}

TEST_F(DemoModelTest, RefusesNonEmptyDirectoryAndWrongTokenizer) {
  fs::create_directories(root_ / "full");
  std::ofstream(root_ / "full" / "x") << "x";
  DemoModelOptions options;
  options.tokenizer_json = kTokenizer;
  EXPECT_EQ(WriteDemoModel(root_ / "full", options).code(), base::StatusCode::kAlreadyExists);
  options.tokenizer_json = std::string(DEEPINFER_SHARED_DIR) + "/goldens/v41/tiny_a/tokenizer.json";
  const base::Status status = WriteDemoModel(root_ / "tiny", options);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("129280"), std::string::npos) << status;
}

TEST_F(DemoModelTest, EnsureDemoModelGeneratesOnceIntoCache) {
  const char* old = std::getenv("DEEPINFER_CACHE_DIR");
  const std::string saved = old ? old : "";
  setenv("DEEPINFER_CACHE_DIR", (root_ / "cache").c_str(), 1);
  auto first = EnsureDemoModel();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(fs::path(*first), root_ / "cache" / ("demo-v41-" + std::to_string(kDemoModelVersion)));
  EXPECT_TRUE(fs::exists(fs::path(*first) / "model.safetensors"));
  const auto written = fs::last_write_time(fs::path(*first) / "model.safetensors");
  auto second = EnsureDemoModel();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(fs::last_write_time(fs::path(*second) / "model.safetensors"), written);
  // Nothing temporary left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(root_ / "cache")) entries += e.exists();
  EXPECT_EQ(entries, 1);
  if (old) {
    setenv("DEEPINFER_CACHE_DIR", saved.c_str(), 1);
  } else {
    unsetenv("DEEPINFER_CACHE_DIR");
  }
}

TEST(DemoModelCacheDirTest, EnvironmentOrder) {
  const auto restore = [](const char* name, const char* value) {
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  };
  const char* names[] = {"DEEPINFER_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::string saved[3];
  bool had[3];
  for (int i = 0; i < 3; ++i) {
    const char* v = std::getenv(names[i]);
    had[i] = v != nullptr;
    saved[i] = v ? v : "";
  }
  setenv("DEEPINFER_CACHE_DIR", "/c", 1);
  setenv("XDG_CACHE_HOME", "/x", 1);
  setenv("HOME", "/h", 1);
  EXPECT_EQ(DeepinferCacheDir().value(), fs::path("/c"));
  unsetenv("DEEPINFER_CACHE_DIR");
  EXPECT_EQ(DeepinferCacheDir().value(), fs::path("/x/deepinfer"));
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(DeepinferCacheDir().value(), fs::path("/h/.cache/deepinfer"));
  unsetenv("HOME");
  EXPECT_FALSE(DeepinferCacheDir().ok());
  for (int i = 0; i < 3; ++i) restore(names[i], had[i] ? saved[i].c_str() : nullptr);
}

}  // namespace
}  // namespace deepinfer::model
