// Cross-sequence batching and synthetic contexts: a Forward holding chunks of several
// sequences (prefill and decode, different lengths, standalone and synthetic) gives each
// sequence exactly the logits of running it alone (CPU reference: per-row work is independent
// of the other rows), and FillSyntheticContext leaves a state a real sequence could have.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/golden_check.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

// tiny_a has a candidate filter that drops blocks and index_topk 4; tiny_b keeps every block
// and selects 64: batching must be exact for both.
class ModelBatchTest : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::filesystem::path dir =
        std::filesystem::path(DEEPINFER_SHARED_DIR) / "goldens/v41" / GetParam();
    auto engram = LoadGoldenEngramConstants(dir / "engram_hash.safetensors");
    ASSERT_TRUE(engram.ok()) << engram.status();
    auto model = Model::Load(dir, &backend_, *engram);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(*model);
    values_.resize(1000);
    for (size_t i = 0; i < values_.size(); ++i) values_[i] = std::sin(0.37f * i);
  }
  SequenceState Synthetic(int64_t length) {
    auto s = model_->NewSequence(32);
    EXPECT_TRUE(s.ok()) << s.status();
    const std::vector<int32_t> recent = {5, 6, 7};
    EXPECT_TRUE(model_
                    ->FillSyntheticContext(*s, length, values_.data(),
                                           static_cast<int64_t>(values_.size()), recent)
                    .ok());
    return std::move(*s);
  }
  std::vector<float> Run(std::vector<ForwardChunk> chunks) {
    ForwardBatch batch;
    batch.chunks = std::move(chunks);
    auto out = model_->Forward(batch);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->logits : std::vector<float>{};
  }

  backend::cpu::CpuBackend backend_;
  std::unique_ptr<Model> model_;
  std::vector<float> values_;
};

TEST_P(ModelBatchTest, MixedBatchEqualsSeparateRuns) {
  const std::vector<int32_t> prompt = {0, 11, 23, 35, 47, 59, 61, 73, 85, 97, 101, 7, 9};
  const std::vector<int32_t> history = {0, 400, 300, 200, 100, 50, 25, 12, 6, 3, 4, 8};
  const std::vector<int32_t> one = {77}, two = {88};
  const int64_t V = model_->config().text().vocab_size;
  // Alone: a prefill (all logits), a decode after a real history, a synthetic-context decode.
  std::vector<float> alone;
  {
    SequenceState a = model_->NewSequence();
    auto l = Run({{&a, prompt, 0, true}});
    alone.insert(alone.end(), l.begin(), l.end());
    SequenceState b = model_->NewSequence();
    Run({{&b, history, 0, false}});
    l = Run({{&b, one, b.length, false}});
    alone.insert(alone.end(), l.begin(), l.end());
    SequenceState c = Synthetic(301);
    l = Run({{&c, two, c.length, false}});
    alone.insert(alone.end(), l.begin(), l.end());
  }
  SequenceState a = model_->NewSequence();
  SequenceState b = model_->NewSequence();
  Run({{&b, history, 0, false}});
  SequenceState c = Synthetic(301);
  const std::vector<float> together =
      Run({{&a, prompt, 0, true}, {&b, one, b.length, false}, {&c, two, c.length, false}});
  ASSERT_EQ(together.size(), alone.size());
  ASSERT_EQ(together.size(), (prompt.size() + 2) * V);
  for (size_t i = 0; i < alone.size(); ++i) {
    ASSERT_EQ(together[i], alone[i]) << "logit " << i << " (row " << i / V << ")";
  }
  EXPECT_EQ(a.length, 13);
  EXPECT_EQ(b.length, 13);
  EXPECT_EQ(c.length, 302);
}

// Recycled logits storage (Model::Recycle) of a larger earlier output: the next outputs have
// exactly their own rows, with the same values as without recycling (smaller, then larger
// than the recycled size, then an empty batch).
TEST_P(ModelBatchTest, RecycledLogitsStorageGivesExactOutputs) {
  const std::vector<int32_t> prompt = {0, 11, 23, 35, 47, 59, 61};
  const int64_t V = model_->config().text().vocab_size;
  SequenceState fresh = model_->NewSequence();
  const std::vector<float> expected_prefill = Run({{&fresh, prompt, 0, true}});
  const std::vector<int32_t> next = {9};
  const std::vector<float> expected_decode = Run({{&fresh, next, fresh.length, false}});

  SequenceState s = model_->NewSequence();
  ForwardBatch big;
  big.chunks = {{&s, prompt, 0, true}};
  auto first = model_->Forward(big);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->logits, expected_prefill);
  model_->Recycle(std::move(*first));  // 7 rows of storage come back
  ForwardBatch small;
  small.chunks = {{&s, next, s.length, false}};
  auto second = model_->Forward(small);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->rows, 1);
  ASSERT_EQ(second->logits.size(), static_cast<size_t>(V));
  EXPECT_EQ(second->logits, expected_decode);
  model_->Recycle(std::move(*second));
  auto empty = model_->Forward(ForwardBatch{});
  if (empty.ok()) {
    EXPECT_TRUE(empty->logits.empty());
  }
  SequenceState t = model_->NewSequence();
  ForwardBatch again;
  again.chunks = {{&t, prompt, 0, true}};
  auto third = model_->Forward(again);  // larger than whatever storage is left
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->logits, expected_prefill);
}

// One batch with a chunk of each ChunkOutput: logits rows only for the kLogits chunk (equal
// to an all-logits run), the kGreedyToken chunk's id equal to the argmax of its logits, and
// the kNothing chunk's state advanced exactly (its next logits equal the plain run's).
TEST_P(ModelBatchTest, ChunkOutputsGreedyAndNothing) {
  const std::vector<int32_t> prompt = {0, 11, 23, 35, 47, 59, 61};
  const std::vector<int32_t> one = {77}, two = {88}, next = {9};
  const int64_t V = model_->config().text().vocab_size;
  auto first_max = [&](const float* row) {
    int64_t best = 0;
    for (int64_t t = 1; t < V; ++t) best = row[t] > row[best] ? t : best;
    return static_cast<int32_t>(best);
  };
  // Reference: every chunk returns logits.
  SequenceState a0 = model_->NewSequence(), b0 = model_->NewSequence();
  SequenceState c0 = model_->NewSequence();
  Run({{&b0, prompt, 0, false}});
  const std::vector<float> ref =
      Run({{&a0, prompt, 0, false}, {&b0, one, b0.length, false}, {&c0, prompt, 0, false}});
  ASSERT_EQ(static_cast<int64_t>(ref.size()), 3 * V);
  const std::vector<float> ref_next = Run({{&a0, next, a0.length, false}});

  SequenceState a = model_->NewSequence(), b = model_->NewSequence(), c = model_->NewSequence();
  Run({{&b, prompt, 0, false}});
  ForwardBatch batch;
  batch.chunks = {{&a, prompt, 0, false, ChunkOutput::kNothing},
                  {&b, one, b.length, false, ChunkOutput::kGreedyToken},
                  {&c, prompt, 0, false, ChunkOutput::kLogits}};
  auto out = model_->Forward(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->rows, 1);
  ASSERT_EQ(static_cast<int64_t>(out->logits.size()), V);
  for (int64_t i = 0; i < V; ++i) ASSERT_EQ(out->logits[i], ref[2 * V + i]) << "logit " << i;
  EXPECT_EQ(out->tokens, (std::vector<int32_t>{-1, first_max(ref.data() + V), -1}));
  EXPECT_EQ(a.length, 7);
  EXPECT_EQ(Run({{&a, next, a.length, false}}), ref_next);

  // No chunk wants logits: no head runs, nothing is copied; all_logits needs kLogits.
  ForwardBatch quiet;
  quiet.chunks = {{&c, two, c.length, false, ChunkOutput::kNothing}};
  auto none = model_->Forward(quiet);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->rows, 0);
  EXPECT_TRUE(none->logits.empty());
  EXPECT_EQ(none->tokens, (std::vector<int32_t>{-1}));
  ForwardBatch bad;
  bad.chunks = {{&c, two, c.length, true, ChunkOutput::kGreedyToken}};
  EXPECT_EQ(model_->Forward(bad).status().code(), base::StatusCode::kInvalidArgument);
}

// ForwardBatch::logits_out: rows land in the caller's buffer (ForwardOutput::logits empty)
// when it is large enough, else in ForwardOutput::logits as usual.
TEST_P(ModelBatchTest, LogitsIntoCallerBuffer) {
  const std::vector<int32_t> prompt = {0, 11, 23, 35, 47, 59, 61};
  const int64_t V = model_->config().text().vocab_size;
  SequenceState ref_state = model_->NewSequence();
  const std::vector<float> expected = Run({{&ref_state, prompt, 0, true}});
  ASSERT_EQ(static_cast<int64_t>(expected.size()), 7 * V);
  std::vector<float> buffer(8 * V, -5.0f);
  SequenceState s = model_->NewSequence();
  ForwardBatch batch;
  batch.chunks = {{&s, prompt, 0, true}};
  batch.logits_out = buffer.data();
  batch.logits_capacity = 8 * V;
  auto out = model_->Forward(batch);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->rows, 7);
  EXPECT_TRUE(out->logits.empty());
  EXPECT_EQ(std::vector<float>(buffer.begin(), buffer.begin() + 7 * V), expected);
  EXPECT_EQ(buffer[7 * V], -5.0f);  // nothing past the rows
  SequenceState t = model_->NewSequence();
  batch.chunks = {{&t, prompt, 0, true}};
  batch.logits_capacity = 7 * V - 1;  // too small: the output vector is used
  auto fallback = model_->Forward(batch);
  ASSERT_TRUE(fallback.ok()) << fallback.status();
  EXPECT_EQ(fallback->logits, expected);
}

TEST_P(ModelBatchTest, SyntheticContextState) {
  const io::TextConfig& t = model_->config().text();
  SequenceState s = Synthetic(301);
  EXPECT_EQ(s.length, 301);
  EXPECT_EQ(s.recent_tokens, (std::vector<int32_t>{5, 6, 7}));
  for (const KvGroupState& g : s.groups) {
    const int r = std::max(g.ratio, 1);
    EXPECT_EQ(g.n_entries(), 301 / r);
    EXPECT_EQ(g.n_pending, g.ratio > 1 ? 301 % r : 0);
  }
  for (const WindowRing& ring : s.windows) {
    for (int64_t p = 301 - t.sliding_window; p < 301; ++p) {
      EXPECT_EQ(ring.pos[p % t.sliding_window], p);
    }
  }
  // A step after it runs and gives finite logits; a used sequence is refused.
  const std::vector<int32_t> tok = {42};
  const std::vector<float> logits = Run({{&s, tok, s.length, false}});
  ASSERT_EQ(static_cast<int64_t>(logits.size()), t.vocab_size);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
  EXPECT_FALSE(
      model_->FillSyntheticContext(s, 10, values_.data(), 10, std::vector<int32_t>{}).ok());
  EXPECT_FALSE(model_->NewSequence(7).ok());  // not a multiple of the ratio 2
}

INSTANTIATE_TEST_SUITE_P(Goldens, ModelBatchTest, ::testing::Values("tiny_a", "tiny_b"));

}  // namespace
}  // namespace deepinfer::model
