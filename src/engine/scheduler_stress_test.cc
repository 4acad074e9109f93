// 500 random requests with random priorities, n, sampling, arrivals and cancellations on a
// tiny pool: every request must end (no deadlock / livelock), completed ones must generate
// exactly what they generate alone, and no block or slot may leak.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "engine/fake_model_runner.h"
#include "engine/scheduler.h"
#include "engine/test_util.h"

namespace deepinfer::engine {
namespace {

constexpr int kVocab = 40;
constexpr int kBlockTokens = 4;
constexpr int32_t kBlocks = 24;
constexpr int32_t kSlots = 6;
constexpr int64_t kMaxLen = 48;

Request RandomRequest(RequestId id, std::mt19937_64& rng) {
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Request r;
  r.id = id;
  r.prompt.resize(static_cast<size_t>(uniform(1, 30)));
  for (TokenId& t : r.prompt) t = uniform(0, kVocab - 1);
  r.priority = uniform(0, 2);
  r.params.max_tokens = uniform(1, 16);
  r.params.n = uniform(0, 9) == 0 ? 3 : (uniform(0, 4) == 0 ? 2 : 1);
  if (r.params.n == 3) {  // keep it admissible: 3 * ceil(len / 4) <= 24
    r.prompt.resize(std::min<size_t>(r.prompt.size(), 20));
    r.params.max_tokens = std::min(r.params.max_tokens, 12);
  }
  if (uniform(0, 1) == 0) {
    r.params.temperature = 0.0f;
  } else {
    r.params.temperature = 0.8f;
    r.params.top_k = uniform(0, 10);
    r.params.top_p = uniform(0, 1) ? 0.9f : 1.0f;
    r.params.seed = static_cast<uint64_t>(uniform(0, 1 << 20));
  }
  if (uniform(0, 3) == 0) r.params.stop_token_ids = {uniform(0, kVocab - 1)};
  return r;
}

TEST(SchedulerStressTest, RandomRequestsCancellationsTinyMemory) {
  std::mt19937_64 rng(20261130);
  kv::StateManager kv(testing::TestLayout(kBlockTokens), kBlocks, kSlots);
  FakeModelRunner runner(kVocab, kSlots, kBlocks, kBlockTokens);
  SchedulerConfig config;
  config.max_tokens_per_step = 12;
  config.max_model_len = kMaxLen;
  config.vocab_size = kVocab;
  config.eos_token_ids = {1};
  Scheduler scheduler(config, &kv);

  std::map<RequestId, Request> submitted;
  std::set<RequestId> live;
  std::map<RequestId, RequestResult> done;
  int cancelled = 0;
  RequestId next = 0;
  int64_t steps = 0;
  while (next < 500 || scheduler.HasUnfinished()) {
    ASSERT_LT(steps, 100000) << "no progress: livelock";
    for (int k = std::uniform_int_distribution<int>(0, 3)(rng); k > 0 && next < 500; --k) {
      Request r = RandomRequest(next++, rng);
      ASSERT_TRUE(scheduler.AddRequest(r).ok()) << r.id;
      submitted[r.id] = r;
      live.insert(r.id);
    }
    if (!live.empty() && std::uniform_int_distribution<int>(0, 19)(rng) == 0) {
      auto it = live.begin();
      std::advance(it, std::uniform_int_distribution<size_t>(0, live.size() - 1)(rng));
      auto result = scheduler.Cancel(*it);
      ASSERT_TRUE(result.has_value());
      live.erase(it);
      ++cancelled;
    }
    StepPlan plan = scheduler.Schedule();
    ++steps;
    if (scheduler.HasUnfinished()) {
      ASSERT_FALSE(plan.empty()) << "stalled at step " << steps;
    }
    std::set<kv::SlotId> slots;
    for (const ScheduledChunk& c : plan.chunks) {
      ASSERT_TRUE(slots.insert(c.slot).second) << "slot used twice in one step";
      if (c.samples.size() > 1) continue;  // a fork: blocks become shared after the step
      for (int64_t p = c.start_position; p < c.end_position(); ++p) {
        ASSERT_EQ(kv.pool().ref_count(c.block_table[static_cast<size_t>(p / kBlockTokens)]), 1)
            << "write into a shared block";
      }
    }
    auto out = runner.Execute(plan);
    ASSERT_TRUE(out.ok()) << out.status();
    StepUpdate update = scheduler.Update(plan, *out);
    for (RequestResult& r : update.finished) {
      live.erase(r.id);
      done[r.id] = std::move(r);
    }
  }
  // No leaks.
  EXPECT_EQ(kv.num_free_blocks(), kBlocks);
  EXPECT_EQ(kv.num_free_slots(), kSlots);
  EXPECT_EQ(kv.num_sequences(), 0);
  EXPECT_EQ(static_cast<int>(done.size()) + cancelled, 500);
  EXPECT_GT(cancelled, 10);
  EXPECT_GT(scheduler.Stats().num_preemptions, 10) << "memory should have been tight";
  // Completed requests generated exactly what they generate alone.
  for (const auto& [id, result] : done) {
    const Request& r = submitted[id];
    ASSERT_EQ(result.samples.size(), static_cast<size_t>(r.params.n));
    for (const SampleResult& s : result.samples) {
      const uint64_t seed = r.params.seed.value_or(0);
      EXPECT_EQ(s.tokens,
                testing::ReferenceTokens(runner, r, s.index, seed, config.eos_token_ids, kMaxLen))
          << "request " << id << " sample " << s.index;
    }
  }
}

}  // namespace
}  // namespace deepinfer::engine
