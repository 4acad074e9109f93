#include "engine/engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>

#include "engine/fake_model_runner.h"
#include "engine/test_util.h"

namespace deepinfer::engine {
namespace {

constexpr int kVocab = 64;
constexpr int kBlockTokens = 4;

EngineConfig Config(int32_t blocks = 64, int32_t slots = 8) {
  EngineConfig c;
  c.layout = testing::TestLayout(kBlockTokens);
  c.num_blocks = blocks;
  c.num_slots = slots;
  c.scheduler.max_tokens_per_step = 16;
  c.scheduler.max_model_len = 128;
  return c;
}

std::unique_ptr<Engine> MakeEngine(FakeModelRunner** runner_out = nullptr,
                                   EngineConfig config = Config()) {
  auto runner =
      std::make_unique<FakeModelRunner>(kVocab, config.num_slots, config.num_blocks, kBlockTokens);
  if (runner_out) *runner_out = runner.get();
  auto engine = Engine::Create(config, std::move(runner));
  CHECK(engine.ok()) << engine.status();
  return std::move(engine).value();
}

Request MixedRequest(int i) {
  Request r;
  r.prompt.resize(static_cast<size_t>(3 + (i * 7) % 23));
  for (size_t k = 0; k < r.prompt.size(); ++k) {
    r.prompt[k] = static_cast<TokenId>((i * 13 + static_cast<int>(k) * 5) % kVocab);
  }
  r.params.max_tokens = 4 + i % 9;
  if (i % 2) {
    r.params.temperature = 0.7f;
    r.params.seed = 1000 + static_cast<uint64_t>(i);
  } else {
    r.params.temperature = 0.0f;
  }
  return r;
}

TEST(EngineTest, BatchedResultsEqualAloneResults) {
  FakeModelRunner* runner = nullptr;
  auto engine = MakeEngine(&runner);
  std::vector<Request> requests;
  for (int i = 0; i < 16; ++i) requests.push_back(MixedRequest(i));
  const std::vector<EngineResult> batched = engine->Generate(requests);
  ASSERT_EQ(batched.size(), 16u);
  for (int i = 0; i < 16; ++i) {
    const Request& r = requests[static_cast<size_t>(i)];
    const EngineResult& got = batched[static_cast<size_t>(i)];
    ASSERT_TRUE(got.result.status.ok()) << got.result.status;
    ASSERT_EQ(got.result.samples.size(), 1u);
    EXPECT_EQ(got.result.samples[0].tokens,
              testing::ReferenceTokens(*runner, r, 0, r.params.seed.value_or(0), {}, 128))
        << "request " << i;
    // Alone, through a fresh engine.
    auto alone_engine = MakeEngine();
    const EngineResult alone = alone_engine->Generate({r})[0];
    EXPECT_EQ(alone.result.samples[0].tokens, got.result.samples[0].tokens) << "request " << i;
  }
  const EngineCounters c = engine->Counters();
  EXPECT_EQ(c.requests_submitted, 16);
  EXPECT_EQ(c.requests_finished, 16);
  EXPECT_EQ(c.free_blocks, c.total_blocks);
  EXPECT_GT(c.steps, 0);
}

TEST(EngineTest, StreamingCallbackAndTimings) {
  auto engine = MakeEngine();
  Request r = MixedRequest(2);
  r.params.max_tokens = 6;
  std::vector<TokenEvent> events;  // written on the engine thread, read after get()
  Submission sub = engine->Submit(r, [&](const TokenEvent& e) { events.push_back(e); });
  EngineResult res = sub.result.get();
  ASSERT_EQ(events.size(), 6u);
  std::vector<TokenId> streamed;
  for (const TokenEvent& e : events) {
    EXPECT_EQ(e.request_id, sub.id);
    streamed.push_back(e.token);
  }
  EXPECT_EQ(streamed, res.result.samples[0].tokens);
  EXPECT_EQ(events.back().finish_reason, FinishReason::kLength);
  EXPECT_EQ(events.front().finish_reason, FinishReason::kNone);
  EXPECT_GT(res.timings.first_scheduled_ns, 0);
  EXPECT_GE(res.timings.QueueSeconds(), 0.0);
  EXPECT_GE(res.timings.TtftSeconds(), res.timings.QueueSeconds());
  EXPECT_EQ(res.timings.InterTokenSeconds().size(), 5u);
  EXPECT_GE(res.timings.finished_ns, res.timings.first_token_ns);
}

TEST(EngineTest, CancelFromAnotherThreadMidGeneration) {
  auto engine = MakeEngine();
  Request r = MixedRequest(4);
  r.params.max_tokens = 100;
  std::atomic<int> seen{0};
  Engine* e = engine.get();
  RequestId id = 0;
  std::mutex m;
  std::unique_lock<std::mutex> hold(m);  // id is written before the callback reads it
  Submission sub = e->Submit(r, [&](const TokenEvent& ev) {
    if (++seen == 3) {
      std::lock_guard<std::mutex> l(m);
      e->Cancel(ev.request_id);
    }
  });
  id = sub.id;
  hold.unlock();
  EngineResult res = sub.result.get();
  EXPECT_EQ(res.result.samples[0].finish_reason, FinishReason::kCancelled);
  EXPECT_LT(res.result.samples[0].tokens.size(), 100u);
  EXPECT_GE(res.result.samples[0].tokens.size(), 3u);
  const EngineCounters c = engine->Counters();
  EXPECT_EQ(c.requests_cancelled, 1);
  EXPECT_EQ(c.free_blocks, c.total_blocks);
  EXPECT_GT(id, 0);
}

TEST(EngineTest, DoneCallbackFiresForEveryOutcome) {
  auto engine = MakeEngine();
  std::mutex m;
  std::vector<std::pair<RequestId, FinishReason>> done;
  const auto on_done = [&](const EngineResult& r) {
    std::lock_guard<std::mutex> lock(m);
    done.emplace_back(r.result.id, r.result.samples.empty() ? FinishReason::kNone
                                                            : r.result.samples[0].finish_reason);
  };
  Request bad;  // empty prompt: rejected
  Submission s1 = engine->Submit(bad, {}, on_done);
  Request slow = MixedRequest(6);
  slow.params.max_tokens = 120;
  slow.prompt.resize(4);
  Engine* e = engine.get();  // cancels itself at its first token: cannot finish first
  Submission s2 = engine->Submit(
      slow, [e](const TokenEvent& ev) { e->Cancel(ev.request_id); }, on_done);
  Submission s3 = engine->Submit(MixedRequest(1), {}, on_done);
  s1.result.get();
  s2.result.get();
  s3.result.get();
  std::lock_guard<std::mutex> lock(m);
  ASSERT_EQ(done.size(), 3u);
  std::map<RequestId, FinishReason> by_id(done.begin(), done.end());
  EXPECT_EQ(by_id[s1.id], FinishReason::kNone);  // rejected: no samples
  EXPECT_EQ(by_id[s2.id], FinishReason::kCancelled);
  EXPECT_EQ(by_id[s3.id], FinishReason::kLength);
}

TEST(EngineTest, InvalidRequestCompletesWithError) {
  auto engine = MakeEngine();
  Request r;
  r.prompt = {1, kVocab + 5};
  EngineResult res = engine->Submit(r).result.get();
  EXPECT_EQ(res.result.status.code(), base::StatusCode::kInvalidArgument);
  EXPECT_TRUE(res.result.samples.empty());
  EXPECT_EQ(engine->Counters().requests_rejected, 1);
  // The engine still serves valid requests.
  EXPECT_TRUE(engine->Generate({MixedRequest(1)})[0].result.status.ok());
}

TEST(EngineTest, RunnerFailureAbortsThatStepsRequestsOnly) {
  FakeModelRunner* runner = nullptr;
  auto engine = MakeEngine(&runner);
  runner->FailAtStep(0);
  EngineResult res = engine->Generate({MixedRequest(3)})[0];
  EXPECT_EQ(res.result.status.code(), base::StatusCode::kInternal);
  EXPECT_EQ(res.result.samples[0].finish_reason, FinishReason::kAborted);
  EXPECT_EQ(engine->Counters().requests_aborted, 1);
  EngineResult ok = engine->Generate({MixedRequest(3)})[0];
  EXPECT_TRUE(ok.result.status.ok());
  EXPECT_EQ(engine->Counters().free_blocks, engine->Counters().total_blocks);
}

TEST(EngineTest, DestructorCancelsUnfinished) {
  std::future<EngineResult> f;
  {
    auto engine = MakeEngine();
    Request r = MixedRequest(5);
    r.params.max_tokens = 120;
    r.prompt.resize(4);
    f = engine->Submit(r).result;
  }
  EngineResult res = f.get();
  ASSERT_FALSE(res.result.samples.empty());
  EXPECT_NE(res.result.samples[0].finish_reason, FinishReason::kNone);
}

TEST(EngineTest, CreateRejectsBadConfig) {
  EngineConfig c = Config();
  c.scheduler.max_tokens_per_step = 2;  // < slots
  auto engine = Engine::Create(c, std::make_unique<FakeModelRunner>(kVocab, 8, 64, 4));
  EXPECT_EQ(engine.status().code(), base::StatusCode::kInvalidArgument);
  c = Config();
  c.layout.block_tokens = 3;  // not a multiple of ratio 2
  EXPECT_FALSE(Engine::Create(c, std::make_unique<FakeModelRunner>(kVocab, 8, 64, 3)).ok());
  EXPECT_FALSE(Engine::Create(Config(), nullptr).ok());
}

}  // namespace
}  // namespace deepinfer::engine
