// Chunking invariance on a random V4.1 checkpoint with settings the goldens do not ship:
// an odd sliding window, and a selective indexer/candidate filter on bigger dims. (There are
// no reference logits for it; one-shot prefill must equal chunked prefill and decode.)
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_backend.h"
#include "io/model_config.h"
#include "model/demo_model.h"
#include "model/engram_hash.h"
#include "model/golden_check.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

// Writes a random checkpoint of `size`, then checks that one-shot prefill equals chunked
// prefill (chunks of 1 and 5) and that every logit is finite.
void ExpectChunkingInvariant(const DemoModelSize& size, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("deepinfer_model_variants_" + name);
  std::filesystem::remove_all(dir);
  DemoModelOptions options;
  options.seed = 7;
  options.tokenizer_json =
      std::string(DEEPINFER_SHARED_DIR) + "/tokenizers/deepseek-v4.1/tokenizer.json";
  options.size = size;
  const auto written = WriteDemoModel(dir, options);
  ASSERT_TRUE(written.ok()) << written;
  auto config = io::LoadModelConfig(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status();
  auto engram = DeriveEngramHashConstants(config->text_config, (dir / "tokenizer.json").string());
  ASSERT_TRUE(engram.ok()) << engram.status();
  backend::cpu::CpuBackend backend;
  auto model = Model::Load(dir, &backend, *engram);
  ASSERT_TRUE(model.ok()) << model.status();

  std::vector<int32_t> ids;
  for (int i = 0; i < 29; ++i) ids.push_back(i == 0 ? 0 : (i * 7919 + 13) % 120000 + 10);
  auto run = [&](size_t chunk) {
    SequenceState s = (*model)->NewSequence();
    std::vector<float> logits;
    for (size_t at = 0; at < ids.size(); at += chunk) {
      const size_t n = std::min(chunk, ids.size() - at);
      ForwardBatch batch;
      batch.chunks.push_back({&s, std::span(ids).subspan(at, n), s.length, true});
      auto out = (*model)->Forward(batch);
      EXPECT_TRUE(out.ok()) << out.status();
      if (!out.ok()) break;
      logits.insert(logits.end(), out->logits.begin(), out->logits.end());
    }
    return logits;
  };
  const std::vector<float> one = run(ids.size());
  const int64_t V = (*model)->config().text().vocab_size;
  for (size_t chunk : {1, 5}) {
    const std::vector<float> many = run(chunk);
    ASSERT_EQ(one.size(), many.size());
    const LogitsComparison c =
        CompareLogits("chunked", many.data(), one.data(), static_cast<int64_t>(one.size()) / V, V);
    EXPECT_LE(c.max_abs, 1e-5) << "chunk " << chunk;
    for (float v : many) ASSERT_TRUE(std::isfinite(v));
  }
  std::filesystem::remove_all(dir);
}

TEST(ModelVariantsTest, OddWindowSelectiveIndexerIsChunkingInvariant) {
  DemoModelSize size;
  size.hidden_size = 128;
  size.head_dim = 96;  // 3 x 32: every fake-quant point on
  size.qk_rope_head_dim = 16;
  size.sliding_window = 7;
  size.index_topk = 3;
  size.candidate_topk_blocks = 2;
  size.candidate_block_size = 2;
  ExpectChunkingInvariant(size, "odd_window");
}

// Sizes that are not multiples of the quantisation blocks (only the MXFP4 experts' K must be):
// FP8 block scales use ceil(n/32) and the fake-quant points whose vector length is not a
// multiple of their block are skipped (head_dim 72: window-KV FP8 off, compressed-KV FP4 off
// as 72 = 4.5 x 16; index_head_dim 40: indexer FP4 off).
TEST(ModelVariantsTest, SizesOffTheQuantBlocksAreChunkingInvariant) {
  DemoModelSize size;
  size.hidden_size = 96;
  size.head_dim = 72;
  size.qk_rope_head_dim = 8;
  size.q_lora_rank = 40;
  size.o_lora_rank = 48;
  size.moe_intermediate_size = 64;
  size.index_head_dim = 40;
  size.sliding_window = 5;
  size.index_topk = 4;
  ExpectChunkingInvariant(size, "off_blocks");
}

}  // namespace
}  // namespace deepinfer::model
