#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "engine/fake_model_runner.h"
#include "engine/test_util.h"

namespace deepinfer::engine {
namespace {

using testing::Describe;
using testing::ReferenceTokens;
using testing::TestLayout;

constexpr int kVocab = 32;

std::vector<TokenId> Prompt(int n, int start = 3) {
  std::vector<TokenId> p(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    p[static_cast<size_t>(i)] = static_cast<TokenId>((start + i * 5) % kVocab);
  return p;
}

Request MakeRequest(RequestId id, int prompt_len, int max_tokens, int priority = 0) {
  Request r;
  r.id = id;
  r.prompt = Prompt(prompt_len, static_cast<int>(id));
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.priority = priority;
  return r;
}

// A scheduler + fake runner over a small pool, stepping manually.
class Harness {
 public:
  Harness(int32_t num_blocks, int32_t num_slots, int32_t budget, int block_tokens = 4,
          int64_t max_model_len = 64, std::vector<TokenId> eos = {})
      : kv_(TestLayout(block_tokens), num_blocks, num_slots),
        runner_(kVocab, num_slots, num_blocks, block_tokens) {
    SchedulerConfig c;
    c.max_tokens_per_step = budget;
    c.max_model_len = max_model_len;
    c.vocab_size = kVocab;
    c.eos_token_ids = std::move(eos);
    config_ = c;
    scheduler_ = std::make_unique<Scheduler>(c, &kv_);
  }

  base::Status Add(Request r) {
    requests_[r.id] = r;
    return scheduler_->AddRequest(std::move(r));
  }

  // Runs one step; returns its description.
  std::string Step() {
    StepPlan plan = scheduler_->Schedule();
    auto out = runner_.Execute(plan);
    EXPECT_TRUE(out.ok()) << out.status();
    StepUpdate u = scheduler_->Update(plan, *out);
    for (RequestResult& r : u.finished) results_[r.id] = std::move(r);
    return Describe(plan);
  }

  void RunToEnd(int max_steps = 1000) {
    for (int i = 0; i < max_steps && scheduler_->HasUnfinished(); ++i) Step();
    ASSERT_FALSE(scheduler_->HasUnfinished());
  }

  std::vector<TokenId> Reference(RequestId id, int sample_index = 0, uint64_t seed = 0) const {
    return ReferenceTokens(runner_, requests_.at(id), sample_index, seed, config_.eos_token_ids,
                           config_.max_model_len);
  }

  kv::StateManager kv_;
  FakeModelRunner runner_;
  SchedulerConfig config_;
  std::unique_ptr<Scheduler> scheduler_;
  std::map<RequestId, Request> requests_;
  std::map<RequestId, RequestResult> results_;
};

TEST(SchedulerTest, ChunkedPrefillThenDecodeFirst) {
  Harness h(/*num_blocks=*/16, /*num_slots=*/4, /*budget=*/8);
  ASSERT_TRUE(h.Add(MakeRequest(1, 10, 3)).ok());
  ASSERT_TRUE(h.Add(MakeRequest(2, 5, 2)).ok());
  EXPECT_EQ(h.Step(), "1:0+8[0,1]");                    // budget spent on request 1
  EXPECT_EQ(h.Step(), "1:8+2[0,1,2]*1 2:0+5[3,4]*1");   // 1 finishes its prompt, 2 admitted
  EXPECT_EQ(h.Step(), "1:10+1[0,1,2]*1 2:5+1[3,4]*1");  // decodes; 2 reaches max_tokens
  EXPECT_EQ(h.kv_.num_free_blocks(), 16 - 3);
  EXPECT_EQ(h.Step(), "1:11+1[0,1,2]*1");
  EXPECT_FALSE(h.scheduler_->HasUnfinished());
  EXPECT_EQ(h.kv_.num_free_blocks(), 16);
  EXPECT_EQ(h.kv_.num_free_slots(), 4);
  ASSERT_EQ(h.results_.size(), 2u);
  EXPECT_EQ(h.results_[1].samples[0].tokens, h.Reference(1));
  EXPECT_EQ(h.results_[1].samples[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(h.results_[2].samples[0].tokens, h.Reference(2));
}

TEST(SchedulerTest, PreemptionOrderAndRecompute) {
  // 4 blocks of 4 tokens; three requests of 4 + 8 tokens each fit alone, not together.
  Harness h(/*num_blocks=*/4, /*num_slots=*/3, /*budget=*/8);
  for (RequestId id : {1, 2, 3}) ASSERT_TRUE(h.Add(MakeRequest(id, 4, 8)).ok());
  std::vector<std::string> trace;
  for (int i = 0; i < 12; ++i) trace.push_back(h.Step());
  const std::vector<std::string> expected = {
      "1:0+4[0]*1 2:0+4[1]*1",      // budget 8 admits two prompts; 3 waits
      "1:4+1[0,2]*1 2:4+1[1,3]*1",  // pool full now
      "1:5+1[0,2]*1 2:5+1[1,3]*1",
      "1:6+1[0,2]*1 2:6+1[1,3]*1",
      "1:7+1[0,2]*1 2:7+1[1,3]*1",
      "1:8+1[0,2,1]*1",  // 1 needs a block: preempts 2 (worst), takes its first freed block
      "1:9+1[0,2,1]*1 2:0+4[3]",  // 2 re-admitted for what fits: 4 of its 9 tokens
      "1:10+1[0,2,1]*1",          // 2 cannot grow: waits holding its block; 1 reaches 8 tokens
      "2:4+5[3,0,2]*1 3:0+3[1]",  // 2 completes its recompute and samples; 3 gets 3 tokens
      "2:9+1[3,0,2]*1 3:3+1[1]*1",
      "2:10+1[3,0,2]*1",  // 3's decode needs a block, nobody worse to preempt: preempts itself
      "3:0+5[1,3]*1",     // 2 finished; 3 recomputes prompt + its 1 generated token
  };
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(trace[i], expected[i]) << "step " << i;
  h.RunToEnd();
  EXPECT_GE(h.scheduler_->Stats().num_preemptions, 1);
  for (RequestId id : {1, 2, 3}) EXPECT_EQ(h.results_[id].samples[0].tokens, h.Reference(id)) << id;
  EXPECT_EQ(h.kv_.num_free_blocks(), 4);
}

TEST(SchedulerTest, HigherPriorityPreemptsLower) {
  Harness h(/*num_blocks=*/3, /*num_slots=*/2, /*budget=*/8);
  ASSERT_TRUE(h.Add(MakeRequest(1, 4, 6, /*priority=*/0)).ok());
  EXPECT_EQ(h.Step(), "1:0+4[0]*1");
  ASSERT_TRUE(h.Add(MakeRequest(2, 8, 1, /*priority=*/5)).ok());
  EXPECT_EQ(h.Step(), "1:4+1[0,1]*1 2:0+4[2]");  // only one block left for 2
  EXPECT_EQ(h.Step(), "2:4+4[2,0]*1");           // 2 preempts 1 (reserve of 1's decode released)
  EXPECT_EQ(h.scheduler_->Stats().num_preemptions, 1);
  h.RunToEnd();
  EXPECT_EQ(h.results_[1].samples[0].tokens, h.Reference(1));
  EXPECT_EQ(h.results_[2].samples[0].tokens, h.Reference(2));
}

TEST(SchedulerTest, ParallelSamplesForkSharedPrompt) {
  Harness h(/*num_blocks=*/16, /*num_slots=*/4, /*budget=*/16);
  Request r = MakeRequest(1, 6, 4);
  r.params.temperature = 1.0f;
  r.params.seed = 77;
  r.params.n = 3;
  ASSERT_TRUE(h.Add(r).ok());
  // Prompt once; block 0 (complete) shared, the partial block 1 copied to 2 and 3.
  EXPECT_EQ(h.Step(), "1:0+6[0,1]*3 copy(slot 0->1, block 1->2) copy(slot 0->2, block 1->3)");
  EXPECT_EQ(h.kv_.pool().ref_count(0), 3);
  EXPECT_EQ(h.kv_.pool().ref_count(1), 1);
  EXPECT_EQ(h.Step(), "1:6+1[0,1]*1 1:6+1[0,2]*1 1:6+1[0,3]*1");
  h.RunToEnd();
  const RequestResult& res = h.results_[1];
  ASSERT_EQ(res.samples.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(res.samples[static_cast<size_t>(i)].index, i);
    EXPECT_EQ(res.samples[static_cast<size_t>(i)].tokens, h.Reference(1, i, 77)) << "sample " << i;
  }
  EXPECT_NE(res.samples[0].tokens, res.samples[1].tokens);
  EXPECT_EQ(h.kv_.num_free_blocks(), 16);
  EXPECT_EQ(h.kv_.num_free_slots(), 4);
}

TEST(SchedulerTest, ForkOnBlockBoundarySharesEverything) {
  Harness h(16, 4, 16);
  Request r = MakeRequest(1, 8, 2);
  r.params.n = 2;
  ASSERT_TRUE(h.Add(r).ok());
  EXPECT_EQ(h.Step(), "1:0+8[0,1]*2 copy(slot 0->1, block -1->-1)");
  EXPECT_EQ(h.kv_.pool().ref_count(1), 2);
  EXPECT_EQ(h.Step(), "1:8+1[0,1,2]*1 1:8+1[0,1,3]*1");
  h.RunToEnd();
  EXPECT_EQ(h.results_[1].samples[1].tokens, h.Reference(1, 1));  // greedy: same as sample 0
}

TEST(SchedulerTest, CancelFreesEverythingImmediately) {
  Harness h(8, 2, 8);
  ASSERT_TRUE(h.Add(MakeRequest(1, 10, 5)).ok());
  Request r = MakeRequest(2, 3, 5);
  r.params.n = 2;
  ASSERT_TRUE(h.Add(r).ok());
  h.Step();
  h.Step();
  EXPECT_LT(h.kv_.num_free_blocks(), 8);
  auto c1 = h.scheduler_->Cancel(1);
  ASSERT_TRUE(c1.has_value());
  EXPECT_EQ(c1->samples[0].finish_reason, FinishReason::kCancelled);
  auto c2 = h.scheduler_->Cancel(2);
  ASSERT_TRUE(c2.has_value());
  ASSERT_EQ(c2->samples.size(), 2u);
  EXPECT_EQ(c2->samples[1].finish_reason, FinishReason::kCancelled);
  EXPECT_FALSE(h.scheduler_->Cancel(2).has_value());
  EXPECT_EQ(h.kv_.num_free_blocks(), 8);
  EXPECT_EQ(h.kv_.num_free_slots(), 2);
  EXPECT_EQ(h.kv_.num_sequences(), 0);
  EXPECT_FALSE(h.scheduler_->HasUnfinished());
  EXPECT_TRUE(h.scheduler_->Schedule().empty());
}

TEST(SchedulerTest, StopConditions) {
  // Find the first greedy token of request 1 on the fake model and use it as EOS.
  Harness probe(8, 2, 8);
  ASSERT_TRUE(probe.Add(MakeRequest(1, 4, 3)).ok());
  const std::vector<TokenId> ref = probe.Reference(1);
  ASSERT_EQ(ref.size(), 3u);
  {
    Harness h(8, 2, 8, 4, 64, {ref[0]});
    ASSERT_TRUE(h.Add(MakeRequest(1, 4, 3)).ok());
    h.RunToEnd();
    EXPECT_EQ(h.results_[1].samples[0].tokens, std::vector<TokenId>{ref[0]});
    EXPECT_EQ(h.results_[1].samples[0].finish_reason, FinishReason::kStop);
  }
  {
    Harness h(8, 2, 8, 4, 64, {ref[0]});
    Request r = MakeRequest(1, 4, 3);
    r.params.ignore_eos = true;
    ASSERT_TRUE(h.Add(r).ok());
    h.RunToEnd();
    EXPECT_EQ(h.results_[1].samples[0].tokens, ref);
    EXPECT_EQ(h.results_[1].samples[0].finish_reason, FinishReason::kLength);
  }
  {
    Harness h(8, 2, 8);
    Request r = MakeRequest(1, 4, 3);
    r.params.stop_token_ids = {ref[1]};
    ASSERT_TRUE(h.Add(r).ok());
    h.RunToEnd();
    EXPECT_EQ(h.results_[1].samples[0].tokens, (std::vector<TokenId>{ref[0], ref[1]}));
    EXPECT_EQ(h.results_[1].samples[0].finish_reason, FinishReason::kStop);
  }
  {
    Harness h(8, 2, 8);
    Request r = MakeRequest(1, 4, 3);
    r.stop_hook = [](std::span<const TokenId> out) { return out.size() == 2; };
    ASSERT_TRUE(h.Add(r).ok());
    h.RunToEnd();
    EXPECT_EQ(h.results_[1].samples[0].tokens.size(), 2u);
    EXPECT_EQ(h.results_[1].samples[0].finish_reason, FinishReason::kStop);
  }
  {
    Harness h(8, 2, 8, 4, /*max_model_len=*/6);
    ASSERT_TRUE(h.Add(MakeRequest(1, 4, 3)).ok());
    h.RunToEnd();
    EXPECT_EQ(h.results_[1].samples[0].tokens.size(), 2u);  // 4 + 2 = max_model_len
    EXPECT_EQ(h.results_[1].samples[0].finish_reason, FinishReason::kLength);
  }
}

TEST(SchedulerTest, RejectsBadRequests) {
  Harness h(/*num_blocks=*/4, /*num_slots=*/2, /*budget=*/8, 4, /*max_model_len=*/32);
  EXPECT_EQ(h.Add(MakeRequest(1, 0, 1)).code(), base::StatusCode::kInvalidArgument);
  Request r = MakeRequest(2, 3, 1);
  r.prompt[1] = kVocab;
  EXPECT_EQ(h.Add(r).code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.Add(MakeRequest(3, 32, 1)).code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(h.Add(MakeRequest(4, 10, 7)).code(), base::StatusCode::kResourceExhausted);  // 17 > 16
  r = MakeRequest(5, 2, 1);
  r.params.n = 3;
  EXPECT_EQ(h.Add(r).code(), base::StatusCode::kResourceExhausted);  // 3 slots needed
  r = MakeRequest(6, 2, 1);
  r.params.temperature = -1.0f;
  base::Status s = h.Add(r);
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("request 6"), std::string::npos) << s;
  EXPECT_TRUE(h.Add(MakeRequest(7, 10, 6)).ok());
  EXPECT_EQ(h.Add(MakeRequest(7, 1, 1)).code(), base::StatusCode::kAlreadyExists);
  EXPECT_EQ(h.scheduler_->num_requests(), 1);
}

TEST(SchedulerTest, LogprobsReturnedPerToken) {
  Harness h(8, 2, 8);
  Request r = MakeRequest(1, 4, 3);
  r.params.top_logprobs = 5;
  ASSERT_TRUE(h.Add(r).ok());
  h.RunToEnd();
  const SampleResult& s = h.results_[1].samples[0];
  ASSERT_EQ(s.logprobs.size(), 3u);
  ASSERT_EQ(s.top_logprobs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(s.top_logprobs[i].size(), 5u);
    // Greedy: the sampled token is the most likely one.
    EXPECT_EQ(s.top_logprobs[i][0].token, s.tokens[i]);
    EXPECT_FLOAT_EQ(s.top_logprobs[i][0].logprob, s.logprobs[i]);
    EXPECT_LT(s.logprobs[i], 0.0f);
  }
}

}  // namespace
}  // namespace deepinfer::engine
