// Prometheus metrics of the API server (text exposition format 0.0.4). Thread-safe.
//
// Exposed (all names prefixed deepinfer_):
//   http_requests_total{endpoint,status}            counter
//   time_to_first_token_seconds                     histogram
//   inter_token_latency_seconds                     histogram
//   e2e_request_latency_seconds                     histogram
//   server_token_overhead_seconds                   histogram
//   prompt_tokens_total, generation_tokens_total    counters
//   requests_running, requests_queued               gauges (server admission)
//   engine_requests_running, engine_requests_waiting, state_memory_used_bytes,
//   state_memory_total_bytes                        gauges (from the generation service)
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/generation_service.h"

namespace deepinfer::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  // Appends the _bucket/_sum/_count lines of metric `name`.
  void Render(const std::string& name, std::string* out) const;
  int64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), plus +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void CountRequest(const std::string& endpoint, int status);
  void ObserveTimeToFirstToken(double seconds);
  void ObserveInterTokenLatency(double seconds);
  void ObserveEndToEnd(double seconds);
  // Server time spent turning generated tokens into response bytes (protocol parsing, JSON,
  // SSE framing, queueing the write), per token.
  void ObserveTokenOverhead(double seconds);
  void AddPromptTokens(int64_t n);
  void AddGenerationTokens(int64_t n);

  int64_t RequestCount(const std::string& endpoint, int status) const;

  // Whole exposition text; gauges are passed in by the caller.
  std::string Render(int64_t running, int64_t queued, const GenerationStats& engine) const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  Histogram ttft_;
  Histogram itl_;
  Histogram e2e_;
  Histogram overhead_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
};

}  // namespace deepinfer::server
