#include "engine/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "fmt/format.h"

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

// ---- The fast path against a straightforward full-sort reference of the contract ----

// Ids by value descending, ties by lower id (a full stable sort).
std::vector<TokenId> ReferenceOrder(const std::vector<double>& value) {
  std::vector<TokenId> order(value.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](TokenId a, TokenId b) { return value[a] > value[b]; });
  return order;
}

// Steps 6-9 of sampling.h, literally: weights w = exp((l - max) / T) (probabilities
// w / total) and which tokens are kept.
struct ReferenceKept {
  std::vector<double> w;
  double total = 0.0;  // sum of w in id order
  std::vector<bool> kept;
};

ReferenceKept ReferenceKeep(const std::vector<float>& logits, const SamplingParams& params) {
  const size_t n = logits.size();
  const double max = *std::max_element(logits.begin(), logits.end());
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  ReferenceKept r{std::vector<double>(n), 0.0, std::vector<bool>(n, false)};
  for (size_t t = 0; t < n; ++t) {
    r.w[t] = std::exp((static_cast<double>(logits[t]) - max) * inv_t);
    r.total += r.w[t];
  }
  const std::vector<TokenId> order = ReferenceOrder(r.w);
  const bool top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < n;
  size_t keep = top_k ? static_cast<size_t>(params.top_k) : n;
  if (params.top_p < 1.0f) {
    double mass = r.total;  // top_k off: every token, id order
    if (top_k) {
      mass = 0.0;  // top_k on: the top_k prefix, most probable first
      for (size_t i = 0; i < keep; ++i) mass += r.w[order[i]];
    }
    const double target = static_cast<double>(params.top_p) * mass;
    double cum = 0.0;
    size_t i = 0;
    while (i < keep) {
      cum += r.w[order[i++]];
      if (cum >= target) break;
    }
    keep = i;
  }
  double max_kept = 0.0;
  for (size_t i = 0; i < keep; ++i) max_kept = std::max(max_kept, r.w[order[i]]);
  const double min_weight = static_cast<double>(params.min_p) * max_kept;
  for (size_t i = 0; i < keep; ++i) r.kept[order[i]] = r.w[order[i]] >= min_weight;
  return r;
}

std::vector<double> ReferenceTruncatedProbs(const std::vector<float>& logits,
                                            const SamplingParams& params) {
  const ReferenceKept r = ReferenceKeep(logits, params);
  std::vector<double> p(logits.size(), 0.0);
  for (size_t t = 0; t < p.size(); ++t) p[t] = r.kept[t] ? r.w[t] / r.total : 0.0;
  return p;
}

Sampled ReferenceSample(const std::vector<float>& raw, const SamplingParams& params,
                        const SampleContext& ctx) {
  std::vector<float> logits = raw;
  ApplyBiasAndPenalties(logits, params, ctx.prompt, ctx.output);
  Sampled out;
  if (params.temperature == 0.0f) {
    out.token =
        static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  } else {
    const ReferenceKept r = ReferenceKeep(logits, params);
    double mass = 0.0;  // kept tokens, id order
    for (size_t t = 0; t < r.w.size(); ++t) mass += r.kept[t] ? r.w[t] : 0.0;
    const double target = CounterUniform(ctx.seed, ctx.sample_index, ctx.position) * mass;
    double cum = 0.0;
    out.token = -1;
    for (size_t t = 0; t < r.w.size(); ++t) {
      if (!r.kept[t] || r.w[t] <= 0.0) continue;
      cum += r.w[t];
      out.token = static_cast<TokenId>(t);
      if (cum > target) break;
    }
  }
  if (params.logprobs || params.top_logprobs > 0) {
    const double max = *std::max_element(raw.begin(), raw.end());
    double sum = 0.0;
    for (float l : raw) sum += std::exp(static_cast<double>(l) - max);
    const double log_sum = std::log(sum) + max;
    std::vector<double> lp(raw.size());
    for (size_t t = 0; t < raw.size(); ++t) lp[t] = static_cast<double>(raw[t]) - log_sum;
    out.logprob = static_cast<float>(lp[static_cast<size_t>(out.token)]);
    const std::vector<TokenId> order = ReferenceOrder(lp);
    const size_t k = std::min(static_cast<size_t>(params.top_logprobs), raw.size());
    for (size_t i = 0; i < k; ++i) {
      out.top_logprobs.push_back({order[i], static_cast<float>(lp[order[i]])});
    }
  }
  return out;
}

enum class RowKind { kNormal, kTies, kNegInf, kFlat, kPeaked };

// One row of `n` logits of the given kind (always at least one finite logit).
std::vector<float> RandomRow(std::mt19937_64& rng, size_t n, RowKind kind) {
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<float> row(n);
  for (float& l : row) l = normal(rng);
  switch (kind) {
    case RowKind::kNormal:
      break;
    case RowKind::kTies:  // few distinct values: long runs of equal probabilities
      for (float& l : row) l = std::round(l);
      break;
    case RowKind::kNegInf:  // about a third masked out
      for (size_t t = 1; t < n; ++t) {
        if (unit(rng) < 0.35f) row[t] = -std::numeric_limits<float>::infinity();
      }
      break;
    case RowKind::kFlat:  // nearly flat, with a block of exact ties
      for (size_t t = 0; t < n; ++t) row[t] = t % 3 == 0 ? 0.5f : 0.01f * normal(rng);
      break;
    case RowKind::kPeaked:
      for (size_t i = 0; i < 3 && i < n; ++i) row[(i * 7919) % n] = 12.0f - 2.0f * i;
      break;
  }
  return row;
}

template <class T>
T Pick(std::mt19937_64& rng, std::initializer_list<T> values) {
  std::uniform_int_distribution<size_t> index(0, values.size() - 1);
  return *(values.begin() + index(rng));
}

SamplingParams RandomParams(std::mt19937_64& rng, int n) {
  SamplingParams p;
  p.temperature = Pick(rng, {1e-4f, 0.05f, 0.7f, 1.0f, 1.5f, 100.0f});
  p.top_k = Pick(rng, {0, 0, 1, 3, 40, n - 1, n, n + 5});
  p.top_p = Pick(rng, {1.0f, 1.0f, 0.9999f, 0.95f, 0.5f, 0.1f, 1e-3f});
  p.min_p = Pick(rng, {0.0f, 0.0f, 0.01f, 0.05f, 0.5f, 1.0f});
  p.top_logprobs = Pick(rng, {0, 0, 1, 5, 20});
  p.logprobs = Pick(rng, {false, true});
  return p;
}

void ExpectSameAsReference(const std::vector<float>& logits, const SamplingParams& params,
                           const SampleContext& ctx, const std::string& what) {
  const Sampled fast = SampleToken(logits, params, ctx);
  const Sampled ref = ReferenceSample(logits, params, ctx);
  ASSERT_EQ(fast.token, ref.token) << what;
  ASSERT_EQ(fast.logprob, ref.logprob) << what;
  ASSERT_EQ(fast.top_logprobs, ref.top_logprobs) << what;
  if (params.temperature > 0.0f && params.logit_bias.empty()) {
    ASSERT_EQ(TruncatedProbs(logits, params), ReferenceTruncatedProbs(logits, params)) << what;
  }
}

TEST(SamplingReferenceTest, RandomRowsAndParamsMatchTheFullSortReference) {
  std::mt19937_64 rng(2026);
  const RowKind kinds[] = {RowKind::kNormal, RowKind::kTies, RowKind::kNegInf, RowKind::kFlat,
                           RowKind::kPeaked};
  int cases = 0;
  for (size_t n : {1, 2, 5, 64, 300, 3000}) {
    for (RowKind kind : kinds) {
      for (int rep = 0; rep < 24; ++rep) {
        const std::vector<float> row = RandomRow(rng, n, kind);
        const SamplingParams params = RandomParams(rng, static_cast<int>(n));
        const SampleContext ctx{rng(), rep % 3, static_cast<int64_t>(rng() % 100000), {}, {}};
        ExpectSameAsReference(
            row, params, ctx,
            fmt::format("n {} kind {} rep {} T {} k {} p {} min_p {}", n, static_cast<int>(kind),
                        rep, params.temperature, params.top_k, params.top_p, params.min_p));
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 6 * 5 * 24);
}

TEST(SamplingReferenceTest, FlatRowsGrowTheRankedPrefixToTheWholeRow) {
  // A nearly flat row of 20000: top_p needs most of the row (the growth path and the
  // long kept-set walk); top_k 5000 keeps more than the short sorted walk handles.
  std::mt19937_64 rng(5);
  for (int rep = 0; rep < 6; ++rep) {
    const std::vector<float> row = RandomRow(rng, 20000, rep % 2 ? RowKind::kFlat : RowKind::kTies);
    SamplingParams p;
    p.temperature = rep < 3 ? 100.0f : 1.0f;
    p.top_p = Pick(rng, {0.95f, 0.9999f, 0.5f});
    p.top_k = rep == 4 ? 5000 : 0;
    p.min_p = rep == 5 ? 0.3f : 0.0f;
    p.top_logprobs = 20;
    for (int64_t pos = 0; pos < 4; ++pos) {
      ExpectSameAsReference(row, p, {99, 0, pos, {}, {}}, fmt::format("rep {} pos {}", rep, pos));
    }
  }
}

TEST(SamplingReferenceTest, HugeTemperaturesRankWeightsThatDifferInTheLastBits) {
  // Logits a few float ulps apart at temperature 1e6..1e8: the weights are 1 - tiny and
  // differ only in their lowest mantissa bits, with many exact ties. Long ranked prefixes
  // (top_p 0.5 / 0.9999, top_k 3000 / 5000) take the radix-sorted paths.
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<int> ulps(0, 300);
  const size_t n = 12000;
  for (int rep = 0; rep < 8; ++rep) {
    std::vector<float> row(n);
    for (float& l : row) {
      l = 1.0f;
      for (int u = ulps(rng); u > 0; --u) l = std::nextafter(l, 2.0f);
    }
    SamplingParams p;
    p.temperature = rep % 2 ? 1e8f : 1e6f;
    p.top_p = rep < 4 ? 0.5f : 0.9999f;
    p.top_k = rep % 4 < 2 ? 0 : (rep < 4 ? 3000 : 5000);
    for (int64_t pos = 0; pos < 3; ++pos) {
      ExpectSameAsReference(row, p, {5, 0, pos, {}, {}}, fmt::format("rep {} pos {}", rep, pos));
    }
  }
}

TEST(SamplingReferenceTest, BiasAndPenaltiesMatchTheReference) {
  std::mt19937_64 rng(11);
  std::uniform_int_distribution<TokenId> token(0, 999);
  std::vector<TokenId> prompt(300), output(200);
  for (TokenId& t : prompt) t = token(rng);
  for (TokenId& t : output) t = token(rng);
  for (int rep = 0; rep < 40; ++rep) {
    const std::vector<float> row =
        RandomRow(rng, 1000, rep % 2 ? RowKind::kTies : RowKind::kNormal);
    SamplingParams p = RandomParams(rng, 1000);
    p.temperature = rep % 5 == 0 ? 0.0f : p.temperature;  // greedy with logprobs too
    p.repetition_penalty = 1.3f;
    p.frequency_penalty = 0.4f;
    p.presence_penalty = -0.2f;
    p.logit_bias = {{token(rng), 5.0f}, {token(rng), -100.0f}};
    ExpectSameAsReference(row, p, {7, 1, rep, prompt, output}, fmt::format("rep {}", rep));
  }
}

TEST(SamplingReferenceTest, ConcurrentCallsGiveTheSequentialResults) {
  // SampleToken keeps per-thread scratch: rows sampled on several threads at once must give
  // exactly the sequential answers.
  std::mt19937_64 rng(3);
  std::vector<std::vector<float>> rows;
  for (int i = 0; i < 8; ++i) rows.push_back(RandomRow(rng, 5000, RowKind::kNormal));
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.top_logprobs = 5;
  std::vector<Sampled> sequential, parallel(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    sequential.push_back(SampleToken(rows[i], p, {1, 0, static_cast<int64_t>(i), {}, {}}));
  }
  std::vector<std::thread> threads;
  for (size_t i = 0; i < rows.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int rep = 0; rep < 20; ++rep) {
        parallel[i] = SampleToken(rows[i], p, {1, 0, static_cast<int64_t>(i), {}, {}});
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(parallel[i].token, sequential[i].token) << i;
    EXPECT_EQ(parallel[i].top_logprobs, sequential[i].top_logprobs) << i;
  }
}

}  // namespace
}  // namespace deepinfer::engine
