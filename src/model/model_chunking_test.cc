// One-shot prefill vs chunked prefill (chunks of 1, 3, 7 tokens) on the golden checkpoints:
// every activation and the logits agree.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "io/safetensors.h"
#include "model/golden_check.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

const std::filesystem::path kGoldens = std::filesystem::path(DEEPINFER_SHARED_DIR) / "goldens/v41";

using Trace = std::map<std::string, std::vector<float>>;

// Runs `ids` in chunks of `chunk` tokens, concatenating every traced activation by row.
std::vector<float> RunTraced(Model& model, const std::vector<int32_t>& ids, size_t chunk,
                             Trace* trace) {
  model.SetTrace([trace](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    auto& v = (*trace)[std::string(name)];
    v.insert(v.end(), data, data + rows * cols);
  });
  SequenceState state = model.NewSequence();
  std::vector<float> logits;
  for (size_t at = 0, n = 0; at < ids.size(); at += n) {
    n = std::min(chunk, ids.size() - at);
    ForwardBatch batch;
    batch.chunks.push_back({&state, std::span(ids).subspan(at, n), state.length, true});
    auto out = model.Forward(batch);
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) break;
    logits.insert(logits.end(), out->logits.begin(), out->logits.end());
  }
  model.SetTrace(nullptr);
  return logits;
}

class ChunkingTest : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(ChunkingTest, ChunkedPrefillMatchesOneShot) {
  const auto [case_name, chunk] = GetParam();
  const auto dir = kGoldens / case_name;
  backend::cpu::CpuBackend backend;
  auto engram = LoadGoldenEngramConstants(dir / "engram_hash.safetensors");
  ASSERT_TRUE(engram.ok()) << engram.status();
  auto model = Model::Load(dir, &backend, *engram);
  ASSERT_TRUE(model.ok()) << model.status();
  auto goldens = io::SafetensorsFile::Open(dir / "goldens.safetensors");
  ASSERT_TRUE(goldens.ok());
  for (int p = 0; p < 3; ++p) {
    auto view = (*goldens)->Get("prompt." + std::to_string(p) + ".input_ids");
    ASSERT_TRUE(view.ok());
    std::vector<int32_t> ids(view->data<int32_t>(), view->data<int32_t>() + view->NumElements());
    Trace one, many;
    const std::vector<float> a = RunTraced(**model, ids, ids.size(), &one);
    const std::vector<float> b = RunTraced(**model, ids, chunk, &many);
    ASSERT_EQ(a.size(), b.size());
    const int64_t V = (*model)->config().text().vocab_size;
    const LogitsComparison c =
        CompareLogits("chunked", b.data(), a.data(), static_cast<int64_t>(a.size()) / V, V);
    EXPECT_TRUE(c.passed) << "prompt " << p << " chunk " << chunk << ": max_abs " << c.max_abs
                          << " median " << c.median_row << " " << c.detail;
    // The CPU backend is chunking-invariant (double-accumulated GEMMs, position-ordered
    // attention sums): every activation agrees to within double-rounding noise, so no
    // fake-quant flip can separate the two paths.
    EXPECT_LE(c.max_abs, 1e-5) << "prompt " << p << " chunk " << chunk;
    ASSERT_EQ(one.size(), many.size());
    for (const auto& [name, va] : one) {
      const std::vector<float>& vb = many[name];
      ASSERT_EQ(va.size(), vb.size()) << name;
      double worst = 0.0;
      for (size_t i = 0; i < va.size(); ++i)
        worst = std::max(worst, double(std::fabs(va[i] - vb[i])));
      EXPECT_LE(worst, 1e-5) << name << " prompt " << p << " chunk " << chunk;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(V41, ChunkingTest,
                         ::testing::Combine(::testing::Values("tiny_a", "tiny_b"),
                                            ::testing::Values(1, 3, 7)));

}  // namespace
}  // namespace deepinfer::model
