#include "served_prefill.h"

#include <cstdio>
#include <random>
#include <vector>

namespace deepinfer::bench {

using nlohmann::ordered_json;

ordered_json ServedPrefill(const engine::LoadedModel& loaded, int64_t prompt, int64_t budget) {
  ordered_json r = {{"prompt", prompt}, {"budget", budget}};
  engine::ModelEngineOptions options;
  options.num_slots = 2;
  options.max_tokens_per_step = static_cast<int32_t>(budget);
  options.max_model_len = prompt + 8;
  options.block_tokens = 256;
  auto engine = engine::MakeModelEngine(loaded, options);
  if (!engine.ok()) {
    r["error"] = engine.status().ToString();
    return r;
  }
  std::mt19937 rng(77);
  std::uniform_int_distribution<int32_t> id(
      3, static_cast<int32_t>(loaded.model->config().text().vocab_size) - 2);
  double ttft_ms = 0;
  for (int round = 0; round < 2; ++round) {  // round 0 untimed (scratch growth, cuBLAS setup)
    engine::Request request;
    request.prompt.resize(static_cast<size_t>(prompt));
    for (auto& t : request.prompt) t = id(rng);
    request.params.temperature = 0.0f;
    request.params.max_tokens = 1;
    request.params.ignore_eos = true;
    std::vector<engine::Request> batch;
    batch.push_back(std::move(request));
    const std::vector<engine::EngineResult> out = (*engine)->Generate(std::move(batch));
    if (out.size() != 1 || out[0].timings.first_token_ns == 0) {
      r["error"] = "the request produced no token";
      return r;
    }
    ttft_ms = static_cast<double>(out[0].timings.first_token_ns - out[0].timings.arrival_ns) / 1e6;
  }
  r["steps"] = (prompt + budget - 1) / budget;
  r["ttft_ms"] = ttft_ms;
  r["tokens_per_s"] = static_cast<double>(prompt) / (ttft_ms / 1e3);
  std::printf("served prefill P=%-6lld budget %-6lld %8.1f ms  %9.1f tok/s\n",
              static_cast<long long>(prompt), static_cast<long long>(budget), ttft_ms,
              r["tokens_per_s"].get<double>());
  return r;
}

}  // namespace deepinfer::bench
