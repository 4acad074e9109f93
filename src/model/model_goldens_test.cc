// End-to-end tests of the V4.1 forward against shared/goldens/v41 (tiny_a, tiny_b).
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

class GoldenCaseTest : public ::testing::TestWithParam<std::string> {
 protected:
  std::filesystem::path dir() const { return kGoldens / GetParam(); }
  std::unique_ptr<Model> LoadModel() {
    auto engram = LoadGoldenEngramConstants(dir() / "engram_hash.safetensors");
    EXPECT_TRUE(engram.ok()) << engram.status();
    auto model = Model::Load(dir(), &backend_, *engram);
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? std::move(*model) : nullptr;
  }
  backend::cpu::CpuBackend backend_;
};

// Every activation of prompt 0's prefill against intermediates.safetensors, layer by layer
// (the first mismatch names the layer and tensor).
TEST_P(GoldenCaseTest, IntermediatesMatchLayerByLayer) {
  auto model = LoadModel();
  ASSERT_NE(model, nullptr);
  auto inter = io::SafetensorsFile::Open(dir() / "intermediates.safetensors");
  ASSERT_TRUE(inter.ok()) << inter.status();
  std::map<std::string, std::vector<float>> seen;
  model->SetTrace([&](std::string_view name, const float* data, int64_t rows, int64_t cols) {
    seen[std::string(name)].assign(data, data + rows * cols);
  });
  auto ids_view = (*inter)->Get("input_ids");
  ASSERT_TRUE(ids_view.ok());
  std::vector<int32_t> ids(ids_view->data<int32_t>(),
                           ids_view->data<int32_t>() + ids_view->NumElements());
  SequenceState state = model->NewSequence();
  ForwardBatch batch;
  batch.chunks.push_back({&state, ids, 0, true});
  ASSERT_TRUE(model->Forward(batch).ok());
  int compared = 0;
  for (const auto& info : (*inter)->tensors()) {
    if (info.name == "input_ids" || info.name == "logits") continue;
    auto it = seen.find(info.name);
    ASSERT_NE(it, seen.end()) << "engine did not produce " << info.name;
    auto view = (*inter)->Get(info.name);
    ASSERT_TRUE(view.ok());
    const float* golden = view->data<float>();
    const int64_t n = view->NumElements();
    ASSERT_EQ(static_cast<int64_t>(it->second.size()), n) << info.name;
    double max_diff = 0.0, max_ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      max_diff = std::max(max_diff, std::fabs(double(it->second[i]) - golden[i]));
      max_ref = std::max(max_ref, std::fabs(double(golden[i])));
    }
    EXPECT_LE(max_diff, 1e-3 * std::max(1.0, max_ref)) << info.name;
    ++compared;
  }
  EXPECT_GT(compared, 10);
}

TEST_P(GoldenCaseTest, AllChecksPass) {
  auto result = RunGoldenCase(dir(), &backend_);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const GoldenCheck& c : result->checks) EXPECT_TRUE(c.passed) << c.name << ": " << c.summary;
  EXPECT_GE(result->checks.size(), 18u);
}

INSTANTIATE_TEST_SUITE_P(V41, GoldenCaseTest, ::testing::Values("tiny_a", "tiny_b"));

}  // namespace
}  // namespace deepinfer::model
