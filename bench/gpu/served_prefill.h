// Prefill as the engine serves it (issue 9): one request through MakeModelEngine with a given
// chunked-prefill budget (max_tokens_per_step), so the prompt runs as ceil(prompt / budget)
// forward steps of at most `budget` tokens -- against gpu_model_bench's one-chunk prefill.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/model_engine.h"

namespace deepinfer::bench {

// One untimed request of `prompt` random token ids (max_tokens 1, greedy), then a timed one:
// {"prompt", "budget", "steps" (ceil(prompt / budget)), "ttft_ms" (arrival to first token),
// "tokens_per_s" (prompt / ttft)} or {"prompt", "budget", "error"}. The engine (and its state
// pools) exists only during the call; `loaded` is reused afterwards.
nlohmann::ordered_json ServedPrefill(const engine::LoadedModel& loaded, int64_t prompt,
                                     int64_t budget);

}  // namespace deepinfer::bench
