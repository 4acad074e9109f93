// Request-level vocabulary of the engine: ids, sampling parameters, requests, results.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kv/state_manager.h"

namespace deepinfer::engine {

using RequestId = int64_t;
using SeqId = kv::SeqId;
using TokenId = int32_t;

inline constexpr int kMaxTopLogprobs = 20;

// Sampling knobs of one request (OpenAI / vLLM semantics; see sampling.h for the exact
// order in which they apply).
struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax, lowest id on ties)
  int top_k = 0;                    // <= 0: disabled
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2], on generated tokens
  float frequency_penalty = 0.0f;   // [-2, 2], on generated tokens
  float repetition_penalty = 1.0f;  // > 0, on prompt and generated tokens (1 = off)
  std::vector<std::pair<TokenId, float>> logit_bias;  // added to the raw logits
  std::optional<uint64_t> seed;  // set: tokens depend only on (seed, sample index, position)
  int n = 1;                     // parallel samples sharing the prompt
  int max_tokens = 16;           // generated tokens per sample
  std::vector<TokenId> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;  // return the log-probability of each sampled token
  int top_logprobs = 0;   // also the k most likely tokens (0..20); implies logprobs

  // InvalidArgument naming the field if out of range; token ids must be < vocab_size.
  base::Status Validate(int vocab_size) const;
};

// Called after each generated token with the sample's generated ids so far; returning true
// stops the sample with FinishReason::kStop (the hook for stop strings from the recipe
// parser). Runs on the engine thread; must be cheap and must not call into the engine.
using StopHook = std::function<bool(std::span<const TokenId> output)>;

struct Request {
  RequestId id = 0;
  std::vector<TokenId> prompt;
  SamplingParams params;
  int priority = 0;  // larger runs first; ties by arrival order
  StopHook stop_hook;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kAborted };
std::string_view FinishReasonName(FinishReason reason);  // "stop", "length", ...

struct TokenLogprob {
  TokenId token = 0;
  float logprob = 0.0f;
  friend bool operator==(const TokenLogprob&, const TokenLogprob&) = default;
};

// One sample's generated tokens.
struct SampleResult {
  int index = 0;
  std::vector<TokenId> tokens;
  std::vector<float> logprobs;                          // if requested: one per token
  std::vector<std::vector<TokenLogprob>> top_logprobs;  // if requested: one list per token
  FinishReason finish_reason = FinishReason::kNone;
};

struct RequestResult {
  RequestId id = 0;
  base::Status status;                // non-OK only for kAborted samples (e.g. out of memory)
  std::vector<SampleResult> samples;  // n entries, by sample index
};

}  // namespace deepinfer::engine
