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
    // Batch-invariant mode: the bitwise tests compare runs with different batches and chunks.
    auto backend = backend::CreateBackend(TestBackendName(), {.batch_invariant = true});
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
    auto runner = std::make_unique<ModelRunnerV41>(model_.get(), backend_owner_.get(), slots,
                                                   /*block_tokens=*/16, blocks);
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

// The step budget without a user setting: large prompt chunks on CUDA, the former 512 on CPU.
TEST(DefaultStepTokenBudgetTest, ByBackendName) {
  EXPECT_EQ(DefaultStepTokenBudget("cuda"), kCudaStepTokenBudget);
  EXPECT_EQ(DefaultStepTokenBudget("cuda:3"), kCudaStepTokenBudget);
  EXPECT_EQ(DefaultStepTokenBudget("cpu"), kCpuStepTokenBudget);
  EXPECT_EQ(DefaultStepTokenBudget(""), kCpuStepTokenBudget);
  EXPECT_EQ(DefaultStepTokenBudget("cudax"), kCpuStepTokenBudget);  // not a backend name
  EXPECT_GT(kCudaStepTokenBudget, kCpuStepTokenBudget);
}

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

// Drives ModelRunnerV41 with hand-made plans over a kv::StateManager (what the scheduler does
// for n > 1): a parent prefills `prompt_len` tokens and forks a child at the end of the prompt.
// The child must share the parent's complete blocks (same ids, refcount 2, one piece of runner
// memory each) and only get a copy of the partial last block; both then decode different
// tokens across a block boundary, and every logits row must equal, bitwise, a standalone
// unforked model sequence fed the same tokens. Freeing both returns every block.
TEST_P(EngineGoldenTest, ForkSharesCompletePromptBlocks) {
  constexpr int kBlockTokens = 16;
  constexpr int32_t kBlocks = 32;
  std::vector<TokenId> base;
  for (const auto& p : prompts_) base.insert(base.end(), p.begin(), p.end());
  for (const int64_t prompt_len : {int64_t{37}, int64_t{48}}) {
    SCOPED_TRACE(prompt_len);
    ASSERT_GE(static_cast<int64_t>(base.size()), prompt_len);
    const std::vector<TokenId> prompt(base.begin(), base.begin() + prompt_len);
    auto layout = StateLayoutForModel(model_->config(), kBlockTokens);
    ASSERT_TRUE(layout.ok()) << layout.status();
    kv::StateManager kv(*layout, kBlocks, /*num_slots=*/2);
    ModelRunnerV41 runner(model_.get(), backend_owner_.get(), 2, kBlockTokens, kBlocks);
    std::vector<std::vector<float>> rows;  // logits of the last step, chunk order
    runner.SetLogitsObserver([&](const ScheduledChunk&, std::span<const float> logits) {
      rows.emplace_back(logits.begin(), logits.end());
    });
    const auto chunk = [&](kv::SeqId seq, int64_t start, std::vector<TokenId> tokens) {
      EXPECT_TRUE(kv.Reserve(seq, start + static_cast<int64_t>(tokens.size())));
      ScheduledChunk c;
      c.seq_id = seq;
      c.slot = kv.slot(seq);
      c.start_position = start;
      c.tokens = std::move(tokens);
      c.block_table = kv.block_table(seq);
      return c;
    };

    // Prefill the parent (seq 0) and fork the child (seq 1) after it, as the scheduler does.
    ASSERT_TRUE(kv.Add(0).ok());
    StepPlan prefill;
    prefill.chunks.push_back(chunk(0, 0, prompt));
    kv.Commit(0, prompt);
    auto copy = kv.Fork(0, 1, prompt_len);
    ASSERT_TRUE(copy.ok()) << copy.status();
    prefill.copies_after.push_back(*copy);
    ASSERT_TRUE(runner.Execute(prefill).ok());
    ASSERT_EQ(rows.size(), 1u);
    const std::vector<float> prompt_logits = rows[0];

    const int64_t complete = prompt_len / kBlockTokens;
    const bool partial = prompt_len % kBlockTokens != 0;
    const auto& parent_table = kv.block_table(0);
    const auto& child_table = kv.block_table(1);
    ASSERT_EQ(static_cast<int64_t>(child_table.size()), complete + (partial ? 1 : 0));
    for (int64_t i = 0; i < complete; ++i) {
      EXPECT_EQ(child_table[i], parent_table[i]) << "block " << i;
      EXPECT_EQ(kv.pool().ref_count(parent_table[i]), 2) << "block " << i;
    }
    if (partial) {
      EXPECT_NE(child_table.back(), parent_table.back());
    }
    const int32_t prompt_blocks = kv.BlocksForTokens(prompt_len);
    const int32_t used = kBlocks - kv.num_free_blocks();
    EXPECT_EQ(used, prompt_blocks + (partial ? 1 : 0));
    EXPECT_LT(used, 2 * prompt_blocks);  // a deep copy would hold two full tables
    EXPECT_EQ(runner.num_materialized_blocks(), used);

    // Decode 20 steps (crossing a block boundary): parent and child feed different tokens.
    std::vector<TokenId> parent_tokens = prompt, child_tokens = prompt;
    std::vector<std::vector<float>> parent_logits, child_logits;
    for (int step = 0; step < 20; ++step) {
      const TokenId a = static_cast<TokenId>(3 + step), b = static_cast<TokenId>(40 + 2 * step);
      StepPlan decode;
      decode.chunks.push_back(chunk(0, static_cast<int64_t>(parent_tokens.size()), {a}));
      decode.chunks.push_back(chunk(1, static_cast<int64_t>(child_tokens.size()), {b}));
      rows.clear();
      ASSERT_TRUE(runner.Execute(decode).ok());
      ASSERT_EQ(rows.size(), 2u);
      parent_tokens.push_back(a);
      child_tokens.push_back(b);
      kv.Commit(0, parent_tokens);
      kv.Commit(1, child_tokens);
      parent_logits.push_back(rows[0]);
      child_logits.push_back(rows[1]);
    }
    for (int64_t i = 0; i < complete; ++i) {
      EXPECT_EQ(kv.pool().ref_count(kv.block_table(0)[i]), 2) << "block " << i;
    }

    // Unforked reference: a standalone sequence per branch, same tokens, same chunking.
    const auto reference = [&](const std::vector<TokenId>& tokens,
                               const std::vector<std::vector<float>>& got) {
      model::SequenceState s = model_->NewSequence();
      model::ForwardBatch first;
      first.chunks.push_back(
          {&s, std::span<const TokenId>(tokens.data(), prompt.size()), 0, false});
      auto out = model_->Forward(first);
      ASSERT_TRUE(out.ok()) << out.status();
      EXPECT_TRUE(out->logits == prompt_logits) << "prompt logits differ";
      for (size_t i = prompt.size(); i < tokens.size(); ++i) {
        model::ForwardBatch one;
        one.chunks.push_back(
            {&s, std::span<const TokenId>(&tokens[i], 1), static_cast<int64_t>(i), false});
        auto step = model_->Forward(one);
        ASSERT_TRUE(step.ok()) << step.status();
        EXPECT_TRUE(step->logits == got[i - prompt.size()]) << "position " << i;
      }
    };
    reference(parent_tokens, parent_logits);
    reference(child_tokens, child_logits);

    kv.Free(0);
    kv.Free(1);
    EXPECT_EQ(kv.num_free_blocks(), kBlocks);
  }
}

// Seeded n <= 3 requests on a pool too small for all of them (forks, preemption of parents
// and children, recompute): every sample equals the request run alone on a large pool, and
// the pool ends with every block free.
TEST_P(EngineGoldenTest, ForksUnderPreemptionEqualAloneAndFreeEveryBlock) {
  std::vector<TokenId> base;
  for (const auto& p : prompts_) base.insert(base.end(), p.begin(), p.end());
  std::vector<Request> requests;
  for (int i = 0; i < 8; ++i) {
    const size_t len = 10 + 9 * static_cast<size_t>(i);
    ASSERT_GE(base.size(), len);
    Request r = Greedy(std::vector<TokenId>(base.begin(), base.begin() + len), 20);
    r.params.n = 1 + i % 3;
    r.params.temperature = 0.9f;
    r.params.seed = static_cast<uint64_t>(100 + i);
    requests.push_back(r);
  }
  auto engine = MakeEngine(/*budget=*/32, /*slots=*/6, nullptr, /*blocks=*/16);
  const auto batched = engine->Generate(requests);
  const EngineCounters counters = engine->Counters();
  EXPECT_GT(counters.preemptions, 0);
  EXPECT_EQ(counters.free_blocks, counters.total_blocks);
  EXPECT_EQ(counters.total_blocks, 16);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto alone_engine = MakeEngine(/*budget=*/512, /*slots=*/4);
    const auto alone = alone_engine->Generate({requests[i]})[0];
    ASSERT_TRUE(batched[i].result.status.ok()) << batched[i].result.status;
    ASSERT_EQ(batched[i].result.samples.size(), alone.result.samples.size()) << i;
    for (size_t k = 0; k < alone.result.samples.size(); ++k) {
      EXPECT_EQ(batched[i].result.samples[k].tokens, alone.result.samples[k].tokens)
          << "request " << i << " sample " << k;
    }
  }
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
