#include "engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "base/check.h"
#include "fmt/format.h"

namespace deepinfer::engine {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double CounterUniform(uint64_t seed, int sample_index, int64_t position) {
  uint64_t h = Mix64(seed);
  h = Mix64(h ^ static_cast<uint64_t>(sample_index));
  h = Mix64(h ^ static_cast<uint64_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

bool IsPlainGreedy(const SamplingParams& params) {
  return params.temperature == 0.0f && params.logit_bias.empty() &&
         params.repetition_penalty == 1.0f && params.frequency_penalty == 0.0f &&
         params.presence_penalty == 0.0f && !params.logprobs && params.top_logprobs <= 0;
}

void ApplyBiasAndPenalties(std::span<float> logits, const SamplingParams& params,
                           std::span<const TokenId> prompt, std::span<const TokenId> output) {
  const auto in_vocab = [&](TokenId t) {
    CHECK(t >= 0 && static_cast<size_t>(t) < logits.size()) << "token id " << t;
    return static_cast<size_t>(t);
  };
  for (const auto& [token, bias] : params.logit_bias) logits[in_vocab(token)] += bias;
  if (params.repetition_penalty != 1.0f) {
    std::vector<bool> seen(logits.size(), false);
    for (TokenId t : prompt) seen[in_vocab(t)] = true;
    for (TokenId t : output) seen[in_vocab(t)] = true;
    for (size_t t = 0; t < logits.size(); ++t) {
      if (!seen[t]) continue;
      logits[t] = logits[t] > 0 ? logits[t] / params.repetition_penalty
                                : logits[t] * params.repetition_penalty;
    }
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::unordered_map<TokenId, int> counts;
    for (TokenId t : output) ++counts[t];
    for (const auto& [t, count] : counts) {
      logits[in_vocab(t)] -=
          params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    }
  }
}

namespace {

TokenId Argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t t = 1; t < logits.size(); ++t) {
    if (logits[t] > logits[best]) best = t;
  }
  return static_cast<TokenId>(best);
}

// Token ids ordered most probable first, ties by lower id.
std::vector<TokenId> ByDescendingProb(std::span<const double> probs) {
  std::vector<TokenId> order(probs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](TokenId a, TokenId b) {
    return probs[static_cast<size_t>(a)] > probs[static_cast<size_t>(b)];
  });
  return order;
}

std::vector<double> LogSoftmax(std::span<const float> logits) {
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_sum = std::log(sum) + max;
  std::vector<double> out(logits.size());
  for (size_t t = 0; t < logits.size(); ++t) out[t] = static_cast<double>(logits[t]) - log_sum;
  return out;
}

void FillLogprobs(std::span<const float> raw, const SamplingParams& params, Sampled* out) {
  if (!params.logprobs && params.top_logprobs <= 0) return;
  const std::vector<double> lp = LogSoftmax(raw);
  out->logprob = static_cast<float>(lp[static_cast<size_t>(out->token)]);
  const int k = std::min<int>(params.top_logprobs, static_cast<int>(raw.size()));
  if (k <= 0) return;
  const std::vector<TokenId> order = ByDescendingProb(lp);
  for (int i = 0; i < k; ++i) {
    const TokenId t = order[static_cast<size_t>(i)];
    out->top_logprobs.push_back({t, static_cast<float>(lp[static_cast<size_t>(t)])});
  }
}

}  // namespace

std::vector<double> TruncatedProbs(std::span<const float> logits, const SamplingParams& params) {
  const double inv_t = 1.0 / static_cast<double>(params.temperature);
  const double max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (size_t t = 0; t < logits.size(); ++t) {
    p[t] = std::exp((static_cast<double>(logits[t]) - max) * inv_t);
    sum += p[t];
  }
  for (double& v : p) v /= sum;
  const bool need_order =
      (params.top_k > 0 && static_cast<size_t>(params.top_k) < p.size()) || params.top_p < 1.0f;
  if (need_order) {
    const std::vector<TokenId> order = ByDescendingProb(p);
    size_t keep = order.size();
    if (params.top_k > 0) keep = std::min(keep, static_cast<size_t>(params.top_k));
    if (params.top_p < 1.0f) {
      double mass = 0.0;
      for (size_t i = 0; i < keep; ++i) mass += p[static_cast<size_t>(order[i])];
      const double target = static_cast<double>(params.top_p) * mass;
      double cum = 0.0;
      size_t i = 0;
      while (i < keep) {
        cum += p[static_cast<size_t>(order[i])];
        ++i;
        if (cum >= target) break;
      }
      keep = i;
    }
    for (size_t i = keep; i < order.size(); ++i) p[static_cast<size_t>(order[i])] = 0.0;
  }
  if (params.min_p > 0.0f) {
    const double threshold =
        static_cast<double>(params.min_p) * *std::max_element(p.begin(), p.end());
    for (double& v : p) {
      if (v < threshold) v = 0.0;
    }
  }
  return p;
}

Sampled SampleToken(std::span<const float> logits, const SamplingParams& params,
                    const SampleContext& context) {
  CHECK(!logits.empty());
  std::vector<float> work(logits.begin(), logits.end());
  ApplyBiasAndPenalties(work, params, context.prompt, context.output);
  Sampled out;
  if (params.temperature <= 0.0f) {
    out.token = Argmax(work);
  } else {
    const std::vector<double> p = TruncatedProbs(work, params);
    const double total = std::accumulate(p.begin(), p.end(), 0.0);
    const double target =
        CounterUniform(context.seed, context.sample_index, context.position) * total;
    double cum = 0.0;
    out.token = -1;
    for (size_t t = 0; t < p.size(); ++t) {
      if (p[t] <= 0.0) continue;
      cum += p[t];
      out.token = static_cast<TokenId>(t);
      if (cum > target) break;
    }
    CHECK_GE(out.token, 0) << "no token kept";
  }
  FillLogprobs(logits, params, &out);
  return out;
}

base::Status SamplingParams::Validate(int vocab_size) const {
  const auto bad = [](std::string_view field, auto value) {
    return base::InvalidArgumentError(
        fmt::format("sampling parameter {} = {} is out of range", field, value));
  };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return bad("temperature", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", min_p);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return bad("presence_penalty", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return bad("frequency_penalty", frequency_penalty);
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return bad("repetition_penalty", repetition_penalty);
  }
  if (n < 1) return bad("n", n);
  if (max_tokens < 1) return bad("max_tokens", max_tokens);
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) return bad("top_logprobs", top_logprobs);
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) return bad("logit_bias token id", token);
    if (!std::isfinite(bias)) return bad("logit_bias value", bias);
  }
  for (TokenId t : stop_token_ids) {
    if (t < 0 || t >= vocab_size) return bad("stop_token_ids entry", t);
  }
  return base::Status::Ok();
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kAborted:
      return "aborted";
  }
  return "unknown";
}

}  // namespace deepinfer::engine
