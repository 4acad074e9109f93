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

}  // namespace
}  // namespace deepinfer::engine
