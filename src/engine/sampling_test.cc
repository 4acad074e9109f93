#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace deepinfer::engine {
namespace {

SamplingParams Greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(SamplingTest, GreedyArgmaxLowestIdOnTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(SampleToken(logits, Greedy(), {}).token, 1);
}

TEST(SamplingTest, LogitBiasChangesArgmax) {
  SamplingParams p = Greedy();
  p.logit_bias = {{3, 1.5f}};
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f};
  EXPECT_EQ(SampleToken(logits, p, {}).token, 3);
}

TEST(SamplingTest, PenaltiesExact) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  std::vector<float> logits = {2.0f, -2.0f, 4.0f, 1.0f, 8.0f};
  const std::vector<TokenId> prompt = {0};
  const std::vector<TokenId> output = {1, 2, 2};
  ApplyBiasAndPenalties(logits, p, prompt, output);
  EXPECT_FLOAT_EQ(logits[0], 1.0f);                  // prompt: repetition only
  EXPECT_FLOAT_EQ(logits[1], -4.0f - 0.5f - 0.25f);  // negative: times 2
  EXPECT_FLOAT_EQ(logits[2], 2.0f - 1.0f - 0.25f);   // count 2
  EXPECT_FLOAT_EQ(logits[3], 1.0f);
  EXPECT_FLOAT_EQ(logits[4], 8.0f);
}

TEST(SamplingTest, TopKMaskExact) {
  SamplingParams p;
  p.top_k = 2;
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, -1.0f};
  const std::vector<double> probs = TruncatedProbs(logits, p);
  EXPECT_EQ(probs[0], 0.0);
  EXPECT_GT(probs[1], 0.0);
  EXPECT_EQ(probs[2], 0.0);
  EXPECT_GT(probs[3], 0.0);
  EXPECT_EQ(probs[4], 0.0);
}

TEST(SamplingTest, TopPMaskExact) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 via log2 logits.
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p;
  p.top_p = 0.75f;  // 0.5 + 0.25 reaches 0.75: two tokens
  std::vector<double> probs = TruncatedProbs(logits, p);
  EXPECT_GT(probs[0], 0.0);
  EXPECT_GT(probs[1], 0.0);
  EXPECT_EQ(probs[2], 0.0);
  EXPECT_EQ(probs[3], 0.0);
  p.top_p = 0.76f;  // needs a third token; the tie goes to the lower id
  probs = TruncatedProbs(logits, p);
  EXPECT_GT(probs[2], 0.0);
  EXPECT_EQ(probs[3], 0.0);
  p.top_p = 0.1f;  // always keeps at least the top token
  probs = TruncatedProbs(logits, p);
  EXPECT_GT(probs[0], 0.0);
  EXPECT_EQ(probs[1], 0.0);
}

TEST(SamplingTest, MinPMaskExact) {
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p;
  p.min_p = 0.49f;  // keep p >= 0.245
  const std::vector<double> probs = TruncatedProbs(logits, p);
  EXPECT_NEAR(probs[0], 0.5, 1e-6);
  EXPECT_NEAR(probs[1], 0.25, 1e-6);
  EXPECT_EQ(probs[2], 0.0);
  EXPECT_EQ(probs[3], 0.0);
}

TEST(SamplingTest, SeededSamplingIsAPureFunction) {
  std::vector<float> logits(50);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) * 0.3f;
  SamplingParams p;
  p.seed = 1234;
  for (int64_t pos = 0; pos < 20; ++pos) {
    const SampleContext ctx{1234, 0, pos, {}, {}};
    EXPECT_EQ(SampleToken(logits, p, ctx).token, SampleToken(logits, p, ctx).token);
  }
  // Different sample indices give (somewhere) different tokens.
  int differ = 0;
  for (int64_t pos = 0; pos < 20; ++pos) {
    differ += SampleToken(logits, p, {1234, 0, pos, {}, {}}).token !=
              SampleToken(logits, p, {1234, 1, pos, {}, {}}).token;
  }
  EXPECT_GT(differ, 0);
}

TEST(SamplingTest, DistributionMatchesSoftmax) {
  // p = (0.5, 0.25, 0.125, 0.125); 20000 draws over positions with a fixed seed.
  const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
  SamplingParams p;
  std::vector<int> counts(4, 0);
  const int n = 20000;
  for (int64_t pos = 0; pos < n; ++pos)
    ++counts[static_cast<size_t>(SampleToken(logits, p, {7, 0, pos, {}, {}}).token)];
  const std::vector<double> expected = {0.5, 0.25, 0.125, 0.125};
  for (size_t t = 0; t < 4; ++t) {
    // 5 standard deviations of a binomial proportion.
    const double sd = std::sqrt(expected[t] * (1 - expected[t]) / n);
    EXPECT_NEAR(counts[t] / static_cast<double>(n), expected[t], 5 * sd) << "token " << t;
  }
}

TEST(SamplingTest, TemperatureSharpens) {
  const std::vector<float> logits = {1.0f, 0.0f};
  SamplingParams hot, cold;
  hot.temperature = 2.0f;
  cold.temperature = 0.25f;
  const double p_hot = TruncatedProbs(logits, hot)[0];
  const double p_cold = TruncatedProbs(logits, cold)[0];
  EXPECT_NEAR(p_hot, 1.0 / (1.0 + std::exp(-0.5)), 1e-12);
  EXPECT_NEAR(p_cold, 1.0 / (1.0 + std::exp(-4.0)), 1e-12);
}

TEST(SamplingTest, LogprobsAreRawAndTopSorted) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), std::log(3.0f), std::log(1.0f)};
  SamplingParams p = Greedy();
  p.logit_bias = {{0, 10.0f}};  // changes the choice, not the reported logprobs
  p.top_logprobs = 3;
  const Sampled s = SampleToken(logits, p, {});
  EXPECT_EQ(s.token, 0);
  EXPECT_NEAR(s.logprob, std::log(1.0 / 8.0), 1e-6);
  ASSERT_EQ(s.top_logprobs.size(), 3u);
  EXPECT_EQ(s.top_logprobs[0].token, 1);
  EXPECT_EQ(s.top_logprobs[1].token, 2);
  EXPECT_EQ(s.top_logprobs[2].token, 0);  // ties 0 vs 3: lower id
  EXPECT_NEAR(s.top_logprobs[0].logprob, std::log(3.0 / 8.0), 1e-6);
}

TEST(SamplingTest, ValidateNamesTheField) {
  SamplingParams p;
  p.top_p = 0.0f;
  base::Status s = p.Validate(10);
  EXPECT_EQ(s.code(), base::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_p"), std::string::npos);
  p = SamplingParams{};
  p.top_logprobs = 21;
  EXPECT_FALSE(p.Validate(10).ok());
  p = SamplingParams{};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_FALSE(p.Validate(10).ok());
  EXPECT_TRUE(SamplingParams{}.Validate(10).ok());
}

TEST(SamplingTest, CounterUniformRangeAndSpread) {
  double sum = 0.0;
  for (int64_t i = 0; i < 10000; ++i) {
    const double u = CounterUniform(99, 0, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / 10000, 0.5, 0.02);
}

}  // namespace
}  // namespace deepinfer::engine
