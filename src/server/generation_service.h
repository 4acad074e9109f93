// The narrow interface between the HTTP layer and whatever generates tokens ("the generation
// service"): submit a tokenized prompt with sampling parameters, receive the generated token
// ids as they come, a single finish notification, and cancel at any time.
//
// Implementations: EngineGenerationService (the real continuous-batching engine) and
// FakeGenerationService (an in-process script, for tests and benchmarks of the HTTP layer).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/statusor.h"

namespace deepinfer::server {

using TokenId = int32_t;

struct GenerationParams {
  int max_tokens = 16;       // >= 1
  float temperature = 1.0f;  // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;  // <= 0: off
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;
  std::vector<TokenId> stop_token_ids;  // generation ends after emitting one (e.g. EOS)
  bool ignore_eos = false;
};

struct GenerationRequest {
  std::vector<TokenId> prompt;
  GenerationParams params;
};

enum class GenerationFinish {
  kStop,       // a stop token (included in the last OnTokens) or the caller's stop
  kLength,     // max_tokens reached
  kCancelled,  // Cancel() was called
  kError,      // see the status
};

// Receives one request's output. Calls for one request never overlap and arrive in order:
// zero or more OnTokens, then exactly one OnFinish (also after Cancel). Calls come from the
// service's own thread: keep them short and never call back into the service from them
// except Cancel.
class GenerationSink {
 public:
  virtual ~GenerationSink() = default;
  virtual void OnTokens(std::span<const TokenId> tokens) = 0;
  virtual void OnFinish(GenerationFinish finish, const base::Status& status) = 0;
};

struct GenerationStats {
  int64_t running = 0;  // requests being generated
  int64_t waiting = 0;  // requests queued inside the service
  int64_t state_memory_used_bytes = 0;
  int64_t state_memory_total_bytes = 0;
};

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Queues the request; returns its id. An error (e.g. the prompt does not fit the context)
  // means the sink will never be called.
  virtual base::StatusOr<int64_t> Submit(GenerationRequest request,
                                         std::shared_ptr<GenerationSink> sink) = 0;
  // Idempotent; unknown or finished ids are ignored. The sink gets OnFinish(kCancelled)
  // unless the request already finished.
  virtual void Cancel(int64_t id) = 0;
  virtual GenerationStats Stats() const = 0;
  // Longest prompt + output in tokens; 0 when unknown.
  virtual int64_t context_length() const = 0;
};

}  // namespace deepinfer::server
