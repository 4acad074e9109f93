// The OpenAI / Anthropic compatible API server: routing, authentication, request checks,
// admission control, metrics, health, graceful shutdown; endpoints that generate hand a
// GenerationRequest plus an OutputAdapter to Generate().
//
// Routes built in: GET /health, GET /v1/models, GET /v1/models/{id}, GET /metrics,
// POST /v1/completions. The recipe-backed endpoints (chat completions, responses, messages,
// count_tokens) are registered with AddPostEndpoint by RegisterProtocolEndpoints().
//
// Checks applied to every POST before its handler: auth (401), draining (503), body is valid
// UTF-8 (400), body is a JSON object (400), "model" names the served model (404).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "base/status.h"
#include "server/admission.h"
#include "server/generation_service.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/output_adapter.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::server {

using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

inline constexpr const char* kDefaultServedModelName = "deepseek-ai/DeepSeek-V4.1-Flash-1017";

struct ApiServerOptions {
  HttpServerOptions http;
  std::string served_model_name = kDefaultServedModelName;
  std::string api_key;             // empty: no authentication
  int max_running_requests = 512;  // generations admitted at once
  int max_queued_requests = 4096;  // waiting for admission; beyond: 429
  int retry_after_seconds = 1;     // Retry-After of a 429
};

class ApiServer {
 public:
  // `service` and `tokenizer` must outlive the server.
  ApiServer(ApiServerOptions options, GenerationService* service,
            const tokenizer::Tokenizer* tokenizer);
  ~ApiServer();

  // Binds and serves. Until SetReady(true), /health answers 503 and generation endpoints 503.
  base::Status Start();
  uint16_t port() const;
  void SetReady(bool ready) { ready_ = ready; }

  // Graceful stop: stop accepting, let in-flight requests finish for up to `deadline`, cancel
  // the rest, close connections. Returns true if nothing had to be cancelled.
  bool Shutdown(std::chrono::milliseconds deadline);

  // A POST endpoint; the handler receives the parsed body (a JSON object with a valid model).
  using PostHandler = std::function<void(ApiServer& server, Json body, const HttpRequest& request,
                                         std::shared_ptr<ResponseChannel> channel)>;
  void AddPostEndpoint(const std::string& path, PostHandler handler);

  // --- for endpoint handlers ---
  // Sends a complete response and counts it in the metrics under `path`.
  void Respond(ResponseChannel& channel, const std::string& path, int status,
               const std::string& content_type, std::string body,
               ResponseChannel::Headers headers = {});
  void RespondJson(ResponseChannel& channel, const std::string& path, const Json& body,
                   int status = 200);
  void RespondError(ResponseChannel& channel, const std::string& path, int status,
                    std::string_view message, std::optional<std::string_view> param = {});
  // Admission -> Submit -> adapter. Answers 429 (queue full), 400 (rejected by the service,
  // e.g. too long for the context) or 503 (shutting down) itself.
  void Generate(const std::string& path, GenerationRequest request,
                std::unique_ptr<OutputAdapter> adapter, std::shared_ptr<ResponseChannel> channel,
                Clock::time_point arrival);

  const std::string& served_model_name() const { return options_.served_model_name; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  GenerationService& service() { return *service_; }
  ServerMetrics& metrics() { return metrics_; }
  int64_t requests_in_flight() const { return admission_.running() + admission_.queued(); }
  // Unique id suffix for responses ("chatcmpl-<id>", ...): 24 hex digits.
  std::string NewResponseId();

 private:
  class Call;
  void Handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel);
  void HandleGet(const HttpRequest& request, ResponseChannel& channel);
  void HandlePost(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel);
  bool Authorized(const HttpRequest& request) const;
  void StartCall(const std::shared_ptr<Call>& call, GenerationRequest request);
  void CallFinished(const std::shared_ptr<Call>& call);
  void CancelAllCalls();

  ApiServerOptions options_;
  GenerationService* service_;
  const tokenizer::Tokenizer* tokenizer_;
  ServerMetrics metrics_;
  Admission admission_;
  std::map<std::string, PostHandler> post_endpoints_;
  std::unique_ptr<HttpServer> http_;
  std::atomic<bool> ready_{false};
  std::atomic<bool> draining_{false};
  std::atomic<bool> hard_stop_{false};
  std::atomic<uint64_t> id_counter_{0};
  uint64_t id_seed_ = 0;
  int64_t created_unix_ = 0;
  std::mutex calls_mutex_;
  std::set<std::shared_ptr<Call>> calls_;  // admitted and not finished
};

// Registers POST /v1/completions (raw prompt, OpenAI legacy completions).
void RegisterCompletionsEndpoint(ApiServer& server);

}  // namespace deepinfer::server
