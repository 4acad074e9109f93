// End to end through the Engine on the V4.1 golden checkpoints (../shared/goldens/v41):
// greedy continuations equal the goldens' greedy_tokens, and a request's logits are bitwise
// identical alone and batched.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/factory.h"
#include "engine/engine.h"
#ifdef DEEPINFER_ENGINE_HAS_CHAT
#include "engine/chat_prompt.h"
#endif
#include "engine/model_engine.h"
#include "engine/model_runner_v41.h"
#include "fmt/format.h"
#include "io/safetensors.h"
#include "model/golden_check.h"
#include "model/model.h"

namespace deepinfer::engine {
namespace {

// DEEPINFER_GOLDENS_DIR overrides where the cases are (e.g. on the GPU machine), and
// DEEPINFER_TEST_BACKEND which backend runs them ("cpu" by default; "cuda" on a GPU).
std::filesystem::path GoldensDir() {
  const char* env = std::getenv("DEEPINFER_GOLDENS_DIR");
  return env ? std::filesystem::path(env)
             : std::filesystem::path(DEEPINFER_SHARED_DIR) / "goldens/v41";
}
const std::filesystem::path kGoldens = GoldensDir();

std::string TestBackendName() {
  const char* env = std::getenv("DEEPINFER_TEST_BACKEND");
  return env ? env : "cpu";
}

class EngineGoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto backend = backend::CreateBackend(TestBackendName());
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_owner_ = std::move(*backend);
    const std::filesystem::path dir = kGoldens / GetParam();
    auto engram = model::LoadGoldenEngramConstants(dir / "engram_hash.safetensors");
    ASSERT_TRUE(engram.ok()) << engram.status();
    auto m = model::Model::Load(dir, backend_owner_.get(), *engram);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    auto goldens = io::SafetensorsFile::Open(dir / "goldens.safetensors");
    ASSERT_TRUE(goldens.ok()) << goldens.status();
    for (int p = 0; p < 3; ++p) {
      auto ids = (*goldens)->Get(fmt::format("prompt.{}.input_ids", p));
      auto greedy = (*goldens)->Get(fmt::format("prompt.{}.greedy_tokens", p));
      ASSERT_TRUE(ids.ok() && greedy.ok());
      prompts_.emplace_back(ids->template data<int32_t>(),
                            ids->template data<int32_t>() + ids->NumElements());
      greedy_.emplace_back(greedy->template data<int32_t>(),
                           greedy->template data<int32_t>() + greedy->NumElements());
    }
  }

  // An engine over the model; `runner_out` sees the runner (for a logits observer).
  std::unique_ptr<Engine> MakeEngine(int32_t budget, int32_t slots,
                                     ModelRunnerV41** runner_out = nullptr, int32_t blocks = 256) {
    EngineConfig c;
    auto layout = StateLayoutForModel(model_->config(), 16);
    CHECK(layout.ok()) << layout.status();
    c.layout = *layout;
    c.num_blocks = blocks;
    c.num_slots = slots;
    c.scheduler.max_tokens_per_step = budget;
    c.scheduler.max_model_len = 1024;
    c.scheduler.eos_token_ids = {static_cast<TokenId>(model_->config().eos_token_id)};
    auto runner = std::make_unique<ModelRunnerV41>(model_.get(), backend_owner_.get(), slots);
    if (runner_out) *runner_out = runner.get();
    auto engine = Engine::Create(c, std::move(runner));
    CHECK(engine.ok()) << engine.status();
    return std::move(engine).value();
  }

  static Request Greedy(std::vector<TokenId> prompt, int max_tokens) {
    Request r;
    r.prompt = std::move(prompt);
    r.params.temperature = 0.0f;
    r.params.max_tokens = max_tokens;
    r.params.ignore_eos = true;
    return r;
  }

  std::unique_ptr<model::Backend> backend_owner_;  // outlives model_ (declared first)
  std::unique_ptr<model::Model> model_;
  std::vector<std::vector<TokenId>> prompts_, greedy_;
};

TEST_P(EngineGoldenTest, GreedyBatchedEqualsGoldens) {
  auto engine = MakeEngine(/*budget=*/512, /*slots=*/4);
  std::vector<Request> requests;
  for (const auto& p : prompts_) requests.push_back(Greedy(p, 16));
  const auto results = engine->Generate(requests);
  for (size_t p = 0; p < results.size(); ++p) {
    ASSERT_TRUE(results[p].result.status.ok()) << results[p].result.status;
    EXPECT_EQ(results[p].result.samples[0].tokens, greedy_[p]) << "prompt " << p;
  }
}

TEST_P(EngineGoldenTest, GreedyWithChunkedPrefillAndPreemptionEqualsGoldens) {
  // 8 tokens per step: prompts arrive in chunks between decodes; 6 blocks of 16 tokens hold
  // the longest request (96 tokens) alone but not all three, so some are preempted and recomputed.
  auto engine = MakeEngine(/*budget=*/8, /*slots=*/3, nullptr, /*blocks=*/6);
  std::vector<Request> requests;
  for (const auto& p : prompts_) requests.push_back(Greedy(p, 16));
  const auto results = engine->Generate(requests);
  for (size_t p = 0; p < results.size(); ++p) {
    EXPECT_EQ(results[p].result.samples[0].tokens, greedy_[p]) << "prompt " << p;
  }
  EXPECT_GT(engine->Counters().preemptions, 0);
}

TEST_P(EngineGoldenTest, ParallelSamplesShareThePrompt) {
  auto engine = MakeEngine(/*budget=*/64, /*slots=*/4);
  Request r = Greedy(prompts_[1], 16);
  r.params.n = 3;  // greedy: every fork must continue exactly like the goldens
  const auto result = engine->Generate({r})[0];
  ASSERT_EQ(result.result.samples.size(), 3u);
  for (const SampleResult& s : result.result.samples) EXPECT_EQ(s.tokens, greedy_[1]) << s.index;
}

// 16 mixed-length prompts: every logits row (after each prompt and each generated token) of
// each request is bitwise identical run alone (prompt in one chunk) or batched with the 15
// others under a 16-token step budget (prompts split into chunks, interleaved with decodes).
TEST_P(EngineGoldenTest, BatchAndChunkingInvarianceBitwise) {
  std::vector<Request> requests;
  for (int i = 0; i < 16; ++i) {
    const auto& base = prompts_[static_cast<size_t>(i % 3)];
    const size_t len = 5 + static_cast<size_t>(i * 7) % (base.size() - 5);
    Request r = Greedy(std::vector<TokenId>(base.begin(), base.begin() + len), 4 + i % 5);
    r.params.temperature = 0.8f;  // seeded sampling: tokens must match too
    r.params.seed = static_cast<uint64_t>(i);
    requests.push_back(r);
  }
  using Key = std::pair<RequestId, int64_t>;  // (request id, position after the chunk)
  const auto run = [&](const std::vector<Request>& batch, std::map<Key, std::vector<float>>* rows,
                       int32_t budget = 1024) {
    ModelRunnerV41* runner = nullptr;
    auto engine = MakeEngine(budget, /*slots=*/16, &runner);
    std::mutex m;
    runner->SetLogitsObserver([&](const ScheduledChunk& c, std::span<const float> logits) {
      std::lock_guard<std::mutex> lock(m);
      (*rows)[{c.request_id, c.end_position()}].assign(logits.begin(), logits.end());
    });
    return engine->Generate(batch);
  };
  std::map<Key, std::vector<float>> batched_rows;
  // Batched with a 16-token budget: prompts are also split into different chunks than alone.
  const auto batched = run(requests, &batched_rows, /*budget=*/16);
  for (size_t i = 0; i < requests.size(); ++i) {
    std::map<Key, std::vector<float>> alone_rows;
    const auto alone = run({requests[i]}, &alone_rows);
    EXPECT_EQ(alone[0].result.samples[0].tokens, batched[i].result.samples[0].tokens) << i;
    const RequestId batched_id = batched[i].result.id;
    ASSERT_FALSE(alone_rows.empty());
    for (const auto& [key, row] : alone_rows) {
      auto it = batched_rows.find({batched_id, key.second});
      ASSERT_NE(it, batched_rows.end()) << "request " << i << " position " << key.second;
      EXPECT_TRUE(it->second == row)
          << "request " << i << " position " << key.second << ": logits differ bitwise";
    }
  }
}

// The path `deepinfer generate` takes: LoadModelForEngine (the goldens' WordLevel tokenizer is
// not loadable: token ids only) + MakeModelEngine.
TEST_P(EngineGoldenTest, LoadModelForEngineGreedyEqualsGoldens) {
  auto loaded = LoadModelForEngine((kGoldens / GetParam()).string(), TestBackendName());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto engine = MakeModelEngine(*loaded, ModelEngineOptions{});
  ASSERT_TRUE(engine.ok()) << engine.status();
  const auto result = (*engine)->Generate({Greedy(prompts_[0], 16)})[0];
  EXPECT_EQ(result.result.samples[0].tokens, greedy_[0]);
}

// No model named: DEEPINFER_HF_MODEL_DIR wins over the demo model; a missing directory is a
// clear NotFound, not a crash.
TEST_P(EngineGoldenTest, LoadModelForEngineHonoursHfModelDirEnv) {
  const std::string dir = (kGoldens / GetParam()).string();
  ASSERT_EQ(setenv("DEEPINFER_HF_MODEL_DIR", dir.c_str(), 1), 0);
  auto loaded = LoadModelForEngine("", TestBackendName());
  auto missing = LoadModelForEngine("/nonexistent/model/dir", TestBackendName());
  unsetenv("DEEPINFER_HF_MODEL_DIR");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->dir, dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), base::StatusCode::kNotFound);
}

#ifdef DEEPINFER_CLI_PATH
// `deepinfer generate --prompts-file F --json` on the golden checkpoint: one JSON line per
// request, in input order, with the goldens' greedy token_ids.
TEST_P(EngineGoldenTest, CliGenerateJsonEqualsGoldens) {
  const std::string file = ::testing::TempDir() + "/prompts_" + GetParam() + ".jsonl";
  {
    std::ofstream out(file);
    for (const auto& p : prompts_) {
      out << nlohmann::json{{"prompt_token_ids", p}, {"max_tokens", 16}}.dump() << "\n";
    }
  }
  const std::string cmd = std::string(DEEPINFER_CLI_PATH) + " generate --model " +
                          (kGoldens / GetParam()).string() + " --prompts-file " + file +
                          " --json --backend " + TestBackendName() + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) output.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << output;
  std::istringstream lines(output);
  std::string line;
  size_t i = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(i, greedy_.size()) << output;
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("index").get<size_t>(), i);
    EXPECT_EQ(j.at("token_ids").get<std::vector<TokenId>>(), greedy_[i]) << "prompt " << i;
    ++i;
  }
  EXPECT_EQ(i, greedy_.size());
}
#endif

#ifdef DEEPINFER_ENGINE_HAS_CHAT
TEST(ChatPromptTest, EncodesThroughTheRecipe) {
  auto tok = tokenizer::Tokenizer::FromFile(tokenizer::DefaultTokenizerPath());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const nlohmann::ordered_json messages = {{{"role", "user"}, {"content", "Hi"}}};
  auto ids = EncodeChatMessages(**tok, messages);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ((*ids)[0], 0);  // BOS
  auto text = (*tok)->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->rfind("<｜begin▁of▁sentence｜>", 0), 0u) << *text;
  EXPECT_NE(text->find("<｜User｜>Hi<｜Assistant｜>"), std::string::npos) << *text;
  auto bad = EncodeChatMessages(**tok, nlohmann::ordered_json::array());
  EXPECT_EQ(bad.status().code(), base::StatusCode::kInvalidArgument);
}
#endif

INSTANTIATE_TEST_SUITE_P(Goldens, EngineGoldenTest, ::testing::Values("tiny_a", "tiny_b"));

}  // namespace
}  // namespace deepinfer::engine
