// Token sampling from one row of logits, deterministic per (seed, sample index, position).
//
// Order of operations (each optional step is skipped at its neutral value):
//   1. logprobs / top_logprobs: log_softmax of the RAW logits (before bias, penalties,
//      temperature and truncation; vLLM's default "raw" logprobs).
//   2. logit_bias: l[t] += bias.
//   3. repetition_penalty r (tokens in prompt or output): l > 0 ? l / r : l * r.
//   4. frequency / presence penalties (generated tokens only):
//      l[t] -= frequency * count(t) + presence * (count(t) > 0).
//   5. temperature == 0: the argmax (lowest id on ties) is returned; done.
//   6. p = softmax(l / temperature) (in double). Steps 7-10 compare and sum the weights
//      w = exp((l - max l) / temperature) (double; the most probable weighs exactly 1), which
//      the normalisation p = w / sum(w) does not change. "The ranking" below is the order
//      probability descending, ties by lower id (a strict total order).
//   7. top_k (1 <= k < vocab; otherwise off): keep the first k tokens of the ranking.
//   8. top_p (< 1): keep the shortest prefix of the ranking (at least one token) whose mass,
//      summed in ranking order, is >= top_p * M, where M, the remaining mass, is: with top_k
//      on, the mass of the top_k prefix summed in ranking order; with top_k off, the mass of
//      the whole row summed in id order (so the ranking is only needed as far as the prefix
//      reaches; the two orders differ only in rounding).
//   9. min_p: keep tokens with p >= min_p * max p (i.e. w >= min_p).
//  10. u = Uniform(seed, sample_index, position) in [0, 1); walk the kept tokens in id order
//      and return the first whose cumulative kept mass exceeds u * (total kept mass, id order).
// Cost: O(vocab) exp and scans, plus sorting only the ranked prefix that top_k / top_p /
// top_logprobs reach (a nearly flat row with top_p near 1 may rank most of the row).
// Thread-safe (no shared state; per-thread scratch buffers are reused between calls).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/types.h"

namespace deepinfer::engine {

struct SampleContext {
  uint64_t seed = 0;
  int sample_index = 0;
  int64_t position = 0;             // position of the token being sampled
  std::span<const TokenId> prompt;  // repetition penalty
  std::span<const TokenId> output;  // penalties
};

struct Sampled {
  TokenId token = 0;
  float logprob = 0.0f;                    // raw log-probability of `token` (if requested)
  std::vector<TokenLogprob> top_logprobs;  // most likely first, ties by lower id
};

// `logits` has vocab_size entries; CHECKs params.Validate() was honoured by the caller
// (token ids in range).
Sampled SampleToken(std::span<const float> logits, const SamplingParams& params,
                    const SampleContext& context);

// True when SampleToken reduces to the argmax of the raw logits with nothing else returned:
// temperature 0, no logit bias, no penalties, no logprobs. Such a token may be taken on the
// backend (model::Backend::ArgmaxRows: the same scan, the lowest id on ties).
bool IsPlainGreedy(const SamplingParams& params);

// Counter-based uniform in [0, 1) (53 bits) from splitmix64 of (seed, sample_index,
// position): a pure function, so sampling is independent of batching and threads.
double CounterUniform(uint64_t seed, int sample_index, int64_t position);

// splitmix64 finaliser (exposed for seed derivation).
uint64_t Mix64(uint64_t x);

// The steps 2-4 above applied in place (exposed for tests).
void ApplyBiasAndPenalties(std::span<float> logits, const SamplingParams& params,
                           std::span<const TokenId> prompt, std::span<const TokenId> output);

// Steps 6-9: p = w / sum(w) for the kept tokens, 0 for removed ones (so the kept ones need not
// sum to 1), exposed for tests.
std::vector<double> TruncatedProbs(std::span<const float> logits, const SamplingParams& params);

}  // namespace deepinfer::engine
