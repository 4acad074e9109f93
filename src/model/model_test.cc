// Model API behaviour on the tiny golden checkpoints: input validation, batching, logits
// selection, Engram hashing across chunks, and load errors that name the tensor.
#include "model/model.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "io/safetensors_writer.h"
#include "model/golden_check.h"

namespace deepinfer::model {
namespace {

const std::filesystem::path kTinyA =
    std::filesystem::path(DEEPINFER_SHARED_DIR) / "goldens/v41/tiny_a";

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engram = LoadGoldenEngramConstants(kTinyA / "engram_hash.safetensors");
    ASSERT_TRUE(engram.ok()) << engram.status();
    engram_ = *engram;
    auto model = Model::Load(kTinyA, &backend_, engram_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
  }
  backend::cpu::CpuBackend backend_;
  EngramHashConstants engram_;
  std::unique_ptr<Model> model_;
};

TEST_F(ModelTest, RejectsBadChunks) {
  SequenceState s = model_->NewSequence();
  std::vector<int32_t> ids = {0, 5, 7};
  ForwardBatch wrong_pos;
  wrong_pos.chunks.push_back({&s, ids, 3, false});
  EXPECT_EQ(model_->Forward(wrong_pos).status().code(), base::StatusCode::kInvalidArgument);
  std::vector<int32_t> bad_ids = {0, 512};
  ForwardBatch bad;
  bad.chunks.push_back({&s, bad_ids, 0, false});
  auto r = model_->Forward(bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("512"), std::string::npos);
  ForwardBatch empty;
  empty.chunks.push_back({&s, {}, 0, false});
  EXPECT_FALSE(model_->Forward(empty).ok());
  EXPECT_EQ(s.length, 0);  // nothing was consumed
}

TEST_F(ModelTest, BatchOfTwoSequencesEqualsSeparateRuns) {
  std::vector<int32_t> a = {0, 11, 23, 35, 47, 59, 61, 73, 85, 97, 101};
  std::vector<int32_t> b = {0, 400, 300, 200, 100};
  auto run_alone = [&](const std::vector<int32_t>& ids) {
    SequenceState s = model_->NewSequence();
    ForwardBatch batch;
    batch.chunks.push_back({&s, ids, 0, false});
    auto out = model_->Forward(batch);
    EXPECT_TRUE(out.ok());
    return out->logits;
  };
  SequenceState sa = model_->NewSequence(), sb = model_->NewSequence();
  ForwardBatch batch;
  batch.chunks.push_back({&sa, a, 0, false});
  batch.chunks.push_back({&sb, b, 0, true});
  auto out = model_->Forward(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t V = 512;
  ASSERT_EQ(out->rows, 1 + static_cast<int64_t>(b.size()));
  ASSERT_EQ(out->vocab, V);
  const std::vector<float> alone_a = run_alone(a), alone_b = run_alone(b);
  EXPECT_EQ(std::vector<float>(out->logits.begin(), out->logits.begin() + V), alone_a);
  EXPECT_EQ(std::vector<float>(out->logits.end() - V, out->logits.end()), alone_b);
  EXPECT_EQ(sa.length, static_cast<int64_t>(a.size()));
  EXPECT_EQ(sb.length, static_cast<int64_t>(b.size()));
  EXPECT_EQ(sa.recent_tokens, (std::vector<int32_t>{85, 97, 101}));
  // Ratio-2 groups: 11 tokens -> 5 entries, 1 pending; ratio-1 group: 11 entries.
  EXPECT_EQ(sa.groups[0].n_entries(), 5);
  EXPECT_EQ(sa.groups[0].n_pending, 1);
  EXPECT_EQ(sa.groups[1].n_entries(), 11);
}

// tiny_a: sources 2 (ratio 2, indexer) and 5 (ratio 1). A block of 16 tokens holds 8 + 16
// entries [64] plus their index keys [32] where the source has an indexer.
TEST_F(ModelTest, PagedStateLayoutAndCallerOwnedBlocks) {
  EXPECT_EQ(model_->DefaultBlockTokens(), 16);
  EXPECT_EQ(model_->StateBlockFloats(15).status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(model_->NewPagedSequence(0).status().code(), base::StatusCode::kInvalidArgument);
  auto floats = model_->StateBlockFloats(16);
  ASSERT_TRUE(floats.ok());
  int64_t expected = 0;
  SequenceState standalone = model_->NewSequence();
  for (const KvGroupState& g : standalone.groups) {
    expected += (16 / g.ratio) * (64 + (g.has_keys ? 32 : 0));
  }
  EXPECT_EQ(*floats, expected);
  EXPECT_EQ(standalone.blocks.block_floats, expected);

  // 40 tokens in 3 chunks, standalone (self-allocated blocks) vs caller-owned blocks of 8
  // tokens: bitwise equal logits; a caller table that is too short is refused untouched.
  std::vector<int32_t> ids(40);
  for (int i = 0; i < 40; ++i) ids[i] = (i * 37 + 11) % 512;
  auto paged = model_->NewPagedSequence(8);
  ASSERT_TRUE(paged.ok()) << paged.status();
  std::vector<DeviceFloats> memory;
  for (int i = 0; i < 5; ++i) memory.emplace_back(&backend_, paged->blocks.block_floats);
  for (auto [start, n] : {std::pair{0, 17}, std::pair{17, 16}, std::pair{33, 7}}) {
    const std::span<const int32_t> chunk(ids.data() + start, n);
    ForwardBatch a, b;
    a.chunks.push_back({&standalone, chunk, start, false});
    b.chunks.push_back({&*paged, chunk, start, false});
    const size_t needed = static_cast<size_t>((start + n + 7) / 8);
    paged->blocks.table.clear();
    for (size_t i = 0; i + 1 < needed; ++i) paged->blocks.table.push_back(memory[i].data());
    auto refused = model_->Forward(b);
    EXPECT_EQ(refused.status().code(), base::StatusCode::kInvalidArgument);
    EXPECT_EQ(paged->length, start);
    paged->blocks.table.push_back(memory[needed - 1].data());
    auto out_a = model_->Forward(a);
    auto out_b = model_->Forward(b);
    ASSERT_TRUE(out_a.ok() && out_b.ok());
    EXPECT_TRUE(out_a->logits == out_b->logits) << "chunk at " << start;
  }
  EXPECT_EQ(standalone.blocks.owned.size(), 3u);  // 40 tokens / 16 per block
  EXPECT_TRUE(paged->blocks.owned.empty());
}

TEST(EngramRowIdsTest, ChunkedHistoryMatchesOneShot) {
  auto engram = LoadGoldenEngramConstants(kTinyA / "engram_hash.safetensors");
  ASSERT_TRUE(engram.ok());
  std::vector<int32_t> ids = {0, 370, 419, 37, 313, 304, 290, 271, 87, 64};
  std::vector<int64_t> whole, part, joined;
  ComputeEngramRowIds(*engram, {}, ids, &whole);
  for (size_t at = 0; at < ids.size(); at += 3) {
    const size_t n = std::min<size_t>(3, ids.size() - at);
    ComputeEngramRowIds(*engram, std::span(ids).first(at), std::span(ids).subspan(at, n), &part);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, whole);
  // Position 0 hashes pad ids only after the token itself; every id is inside its column.
  const int cols = engram->columns();
  for (int l = 0; l < engram->n_layers; ++l) {
    for (int c = 0; c < cols; ++c) {
      const int64_t id = whole[l * cols + c];
      EXPECT_GE(id, engram->offsets[l * cols + c]);
      EXPECT_LT(id, engram->offsets[l * cols + c] + engram->primes[l * cols + c]);
    }
  }
}

// Copies tiny_a into `dir` without tensor `drop` and with the first byte of `poison` set
// to 255 (an E8M0 NaN).
void WriteModifiedTinyA(const std::filesystem::path& dir, const std::string& drop,
                        const std::string& poison) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(kTinyA / "config.json", dir / "config.json");
  auto ckpt = io::Checkpoint::Open(kTinyA);
  ASSERT_TRUE(ckpt.ok());
  io::SafetensorsWriter writer;
  for (const std::string& name : (*ckpt)->TensorNames()) {
    if (name == drop) continue;
    const io::SafetensorsTensorInfo* info = (*ckpt)->Find(name);
    auto bytes = (*ckpt)->Bytes(name);
    ASSERT_TRUE(bytes.ok());
    std::vector<uint8_t> copy(bytes->begin(), bytes->end());
    if (name == poison) copy[0] = 255;
    ASSERT_TRUE(writer.Add(name, info->dtype, info->shape.ToVector(), copy).ok()) << name;
  }
  ASSERT_TRUE(writer.WriteFile(dir / "model.safetensors").ok());
}

TEST(ModelLoadTest, BadTensorsAreNamed) {
  const auto dir = std::filesystem::temp_directory_path() / "deepinfer_model_load_test";
  auto engram = LoadGoldenEngramConstants(kTinyA / "engram_hash.safetensors");
  ASSERT_TRUE(engram.ok());
  backend::cpu::CpuBackend backend;
  WriteModifiedTinyA(dir, "layers.3.attn.wo_a.scale", "");
  auto missing = Model::Load(dir, &backend, *engram);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("layers.3.attn.wo_a.scale"), std::string::npos)
      << missing.status();
  WriteModifiedTinyA(dir, "", "layers.0.attn.wq_a.scale");
  auto nan_scale = Model::Load(dir, &backend, *engram);
  ASSERT_FALSE(nan_scale.ok());
  EXPECT_NE(nan_scale.status().message().find("layers.0.attn.wq_a.scale"), std::string::npos)
      << nan_scale.status();
  // Without Engram constants a config with Engram layers is refused.
  EXPECT_FALSE(Model::Load(kTinyA, &backend, std::nullopt).ok());
  std::filesystem::remove_all(dir);
}

TEST(RopeTest, InverseFrequenciesMatchGoldens) {
  auto goldens = io::SafetensorsFile::Open(kTinyA / "goldens.safetensors");
  ASSERT_TRUE(goldens.ok());
  auto cfg = io::LoadModelConfig(kTinyA / "config.json");
  ASSERT_TRUE(cfg.ok());
  const auto& t = cfg->text();
  const std::vector<float> main = RopeInvFreq(t.qk_rope_head_dim, t.rope_theta, nullptr);
  const std::vector<float> comp =
      RopeInvFreq(t.qk_rope_head_dim, t.compress_rope_theta, &t.rope_scaling);
  auto gm = (*goldens)->Get("rope.main_inv_freq");
  auto gc = (*goldens)->Get("rope.compress_inv_freq");
  ASSERT_TRUE(gm.ok() && gc.ok());
  ASSERT_EQ(static_cast<int64_t>(main.size()), gm->NumElements());
  for (size_t i = 0; i < main.size(); ++i) {
    EXPECT_EQ(main[i], gm->data<float>()[i]) << i;
    EXPECT_EQ(comp[i], gc->data<float>()[i]) << i;
  }
}

}  // namespace
}  // namespace deepinfer::model
