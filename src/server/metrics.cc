#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace deepinfer::server {
namespace {

std::string FormatBound(double bound) { return fmt::format("{}", bound); }

void Header(std::string* out, const char* name, const char* type, const char* help) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  const size_t bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  ++counts_[bucket];
  sum_ += value;
  ++count_;
}

void Histogram::Render(const std::string& name, std::string* out) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, FormatBound(bounds_[i]), cumulative);
  }
  *out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  *out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, count_);
}

ServerMetrics::ServerMetrics()
    : ttft_({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
             10.0, 20.0, 40.0, 80.0}),
      itl_({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
            0.75, 1.0, 2.5, 5.0}),
      e2e_({0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,  5.0,
            10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0}),
      overhead_({1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2,
                 5e-2, 0.1}) {}

void ServerMetrics::CountRequest(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}
void ServerMetrics::ObserveTimeToFirstToken(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.Observe(seconds);
}
void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard lock(mutex_);
  itl_.Observe(seconds);
}
void ServerMetrics::ObserveEndToEnd(double seconds) {
  std::lock_guard lock(mutex_);
  e2e_.Observe(seconds);
}
void ServerMetrics::ObserveTokenOverhead(double seconds) {
  std::lock_guard lock(mutex_);
  overhead_.Observe(seconds);
}
void ServerMetrics::AddPromptTokens(int64_t n) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += n;
}
void ServerMetrics::AddGenerationTokens(int64_t n) {
  std::lock_guard lock(mutex_);
  generation_tokens_ += n;
}

int64_t ServerMetrics::RequestCount(const std::string& endpoint, int status) const {
  std::lock_guard lock(mutex_);
  const auto it = requests_.find({endpoint, status});
  return it == requests_.end() ? 0 : it->second;
}

std::string ServerMetrics::Render(int64_t running, int64_t queued,
                                  const GenerationStats& engine) const {
  std::lock_guard lock(mutex_);
  std::string out;
  Header(&out, "deepinfer_http_requests_total", "counter", "HTTP requests by endpoint and status.");
  for (const auto& [key, count] : requests_) {
    out += fmt::format("deepinfer_http_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n",
                       key.first, key.second, count);
  }
  Header(&out, "deepinfer_time_to_first_token_seconds", "histogram",
         "Time from request arrival to the first generated token.");
  ttft_.Render("deepinfer_time_to_first_token_seconds", &out);
  Header(&out, "deepinfer_inter_token_latency_seconds", "histogram",
         "Time between consecutive generated tokens of one request.");
  itl_.Render("deepinfer_inter_token_latency_seconds", &out);
  Header(&out, "deepinfer_e2e_request_latency_seconds", "histogram",
         "Time from request arrival to its last byte.");
  e2e_.Render("deepinfer_e2e_request_latency_seconds", &out);
  Header(&out, "deepinfer_server_token_overhead_seconds", "histogram",
         "Server time per generated token from the engine callback to the queued write.");
  overhead_.Render("deepinfer_server_token_overhead_seconds", &out);
  Header(&out, "deepinfer_prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  out += fmt::format("deepinfer_prompt_tokens_total {}\n", prompt_tokens_);
  Header(&out, "deepinfer_generation_tokens_total", "counter", "Generated tokens.");
  out += fmt::format("deepinfer_generation_tokens_total {}\n", generation_tokens_);
  const std::pair<const char*, int64_t> gauges[] = {
      {"deepinfer_requests_running", running},
      {"deepinfer_requests_queued", queued},
      {"deepinfer_engine_requests_running", engine.running},
      {"deepinfer_engine_requests_waiting", engine.waiting},
      {"deepinfer_state_memory_used_bytes", engine.state_memory_used_bytes},
      {"deepinfer_state_memory_total_bytes", engine.state_memory_total_bytes},
  };
  for (const auto& [name, value] : gauges) {
    Header(&out, name, "gauge", "Current value.");
    out += fmt::format("{} {}\n", name, value);
  }
  return out;
}

}  // namespace deepinfer::server
