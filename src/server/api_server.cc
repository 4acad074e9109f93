#include "server/api_server.h"

#include <fmt/format.h>

#include <chrono>
#include <random>
#include <thread>

#include "base/logging.h"
#include "server/api_errors.h"

namespace deepinfer::server {
namespace {

constexpr const char* kJsonContentType = "application/json";

// Constant-time comparison (the key must not leak through timing).
bool SecretEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

// One admitted generation: the GenerationSink of the service, driving the adapter.
class ApiServer::Call final : public GenerationSink {
 public:
  Call(ApiServer* server, std::string path, std::unique_ptr<OutputAdapter> adapter,
       std::shared_ptr<ResponseChannel> channel, Clock::time_point arrival, int64_t prompt_tokens)
      : server_(server),
        path_(std::move(path)),
        adapter_(std::move(adapter)),
        channel_(std::move(channel)),
        arrival_(arrival),
        prompt_tokens_(prompt_tokens) {}

  // The service accepted the request as `id`.
  void Started(int64_t id) {
    std::lock_guard lock(mutex_);
    id_ = id;
    EnsureBegun();
    if (cancel_requested_ && !finished_) server_->service_->Cancel(id);
  }

  // The client disconnected or the server is stopping.
  void RequestCancel() {
    std::lock_guard lock(mutex_);
    cancel_requested_ = true;
    if (id_ && !finished_) server_->service_->Cancel(*id_);
  }
  bool cancel_requested() {
    std::lock_guard lock(mutex_);
    return cancel_requested_;
  }

  void OnTokens(std::span<const TokenId> tokens) override {
    std::lock_guard lock(mutex_);
    if (finished_ || output_complete_) return;
    EnsureBegun();
    const auto now = Clock::now();
    if (!first_token_) {
      server_->metrics_.ObserveTimeToFirstToken(
          std::chrono::duration<double>(now - arrival_).count());
      first_token_ = true;
    } else {
      const double gap = std::chrono::duration<double>(now - last_token_).count() /
                         static_cast<double>(tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) server_->metrics_.ObserveInterTokenLatency(gap);
    }
    last_token_ = now;
    const bool complete = adapter_->OnTokens(tokens, *channel_);
    const double spent = std::chrono::duration<double>(Clock::now() - now).count();
    for (size_t i = 0; i < tokens.size(); ++i) {
      server_->metrics_.ObserveTokenOverhead(spent / static_cast<double>(tokens.size()));
    }
    if (complete) {
      output_complete_ = true;
      if (id_) server_->service_->Cancel(*id_);
    }
  }

  void OnFinish(GenerationFinish finish, const base::Status& status) override {
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      finished_ = true;
      EnsureBegun();
      if (output_complete_) finish = GenerationFinish::kStop;
      int http_status = adapter_->Finish(finish, status, *channel_);
      if (finish == GenerationFinish::kCancelled && channel_->disconnected()) http_status = 499;
      server_->metrics_.CountRequest(path_, http_status);
      server_->metrics_.ObserveEndToEnd(
          std::chrono::duration<double>(Clock::now() - arrival_).count());
      server_->metrics_.AddPromptTokens(prompt_tokens_);
      server_->metrics_.AddGenerationTokens(adapter_->completion_tokens());
      channel_.reset();
    }
    server_->CallFinished(self_);
    self_.reset();
  }

  // Keeps the call alive until OnFinish (the service holds it only as a sink).
  void set_self(std::shared_ptr<Call> self) { self_ = std::move(self); }
  const std::string& path() const { return path_; }
  const std::shared_ptr<ResponseChannel>& channel() const { return channel_; }

 private:
  void EnsureBegun() {
    if (begun_) return;
    begun_ = true;
    adapter_->Begin(*channel_);
  }

  ApiServer* server_;
  std::string path_;
  std::unique_ptr<OutputAdapter> adapter_;
  std::shared_ptr<ResponseChannel> channel_;
  Clock::time_point arrival_;
  Clock::time_point last_token_;
  int64_t prompt_tokens_;
  std::mutex mutex_;
  std::optional<int64_t> id_;
  bool begun_ = false;
  bool first_token_ = false;
  bool finished_ = false;
  bool output_complete_ = false;
  bool cancel_requested_ = false;
  std::shared_ptr<Call> self_;
};

ApiServer::ApiServer(ApiServerOptions options, GenerationService* service,
                     const tokenizer::Tokenizer* tokenizer)
    : options_(std::move(options)),
      service_(service),
      tokenizer_(tokenizer),
      admission_(options_.max_running_requests, options_.max_queued_requests) {
  std::random_device random;
  id_seed_ = (static_cast<uint64_t>(random()) << 32) ^ random();
  created_unix_ = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  http_ = std::make_unique<HttpServer>(
      options_.http,
      [this](HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
        Handle(std::move(request), std::move(channel));
      },
      [this](int status, std::string_view path, std::string_view message) {
        metrics_.CountRequest("other", status);
        return ErrorBody(ErrorStyleForPath(path), status, message);
      });
  RegisterCompletionsEndpoint(*this);
}

ApiServer::~ApiServer() {
  // Calls point back at this server: cancel and wait for them before tearing down.
  draining_ = true;
  hard_stop_ = true;
  CancelAllCalls();
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    {
      std::lock_guard lock(calls_mutex_);
      if (calls_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  http_->Stop();
  http_->Join();
}

void ApiServer::CancelAllCalls() {
  std::vector<std::shared_ptr<Call>> calls;
  {
    std::lock_guard lock(calls_mutex_);
    calls.assign(calls_.begin(), calls_.end());
  }
  for (const auto& call : calls) call->RequestCancel();
}

base::Status ApiServer::Start() { return http_->Start(); }
uint16_t ApiServer::port() const { return http_->port(); }

void ApiServer::AddPostEndpoint(const std::string& path, PostHandler handler) {
  post_endpoints_[path] = std::move(handler);
}

std::string ApiServer::NewResponseId() {
  const uint64_t n = id_counter_.fetch_add(1);
  // splitmix64 of the counter, keyed by a per-process seed: unique and unpredictable enough.
  uint64_t x = id_seed_ + n * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return fmt::format("{:016x}{:08x}", x, static_cast<uint32_t>(n));
}

void ApiServer::Respond(ResponseChannel& channel, const std::string& path, int status,
                        const std::string& content_type, std::string body,
                        ResponseChannel::Headers headers) {
  metrics_.CountRequest(path, status);
  channel.Send(status, content_type, std::move(body), std::move(headers));
}

void ApiServer::RespondJson(ResponseChannel& channel, const std::string& path, const Json& body,
                            int status) {
  Respond(channel, path, status, kJsonContentType, Dump(body));
}

void ApiServer::RespondError(ResponseChannel& channel, const std::string& path, int status,
                             std::string_view message, std::optional<std::string_view> param) {
  ResponseChannel::Headers headers;
  if (status == 429 || status == 503) {
    headers.emplace_back("Retry-After", std::to_string(options_.retry_after_seconds));
  }
  if (status == 401 && ErrorStyleForPath(path) == ErrorStyle::kOpenAI) {
    headers.emplace_back("WWW-Authenticate", "Bearer");
  }
  Respond(channel, path, status, kJsonContentType,
          ErrorBody(ErrorStyleForPath(path), status, message, param), std::move(headers));
}

bool ApiServer::Authorized(const HttpRequest& request) const {
  if (options_.api_key.empty()) return true;
  const std::string_view authorization = request.Header("authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() > kBearer.size() && authorization.substr(0, kBearer.size()) == kBearer &&
      SecretEquals(authorization.substr(kBearer.size()), options_.api_key)) {
    return true;
  }
  const std::string_view x_api_key = request.Header("x-api-key");
  return !x_api_key.empty() && SecretEquals(x_api_key, options_.api_key);
}

void ApiServer::Handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
  if (request.path != "/health" && !Authorized(request)) {
    return RespondError(*channel, request.path, 401,
                        "Incorrect API key provided: use 'Authorization: Bearer KEY' or "
                        "'x-api-key: KEY'");
  }
  if (request.method == "GET") return HandleGet(request, *channel);
  if (request.method == "POST") return HandlePost(request, std::move(channel));
  RespondError(*channel, request.path, 405, fmt::format("method {} not allowed", request.method));
}

void ApiServer::HandleGet(const HttpRequest& request, ResponseChannel& channel) {
  const std::string& path = request.path;
  if (path == "/health") {
    if (!ready_) return RespondError(channel, path, 503, "the model is loading");
    if (draining_) return RespondError(channel, path, 503, "the server is shutting down");
    return RespondJson(channel, path, Json{{"status", "ok"}});
  }
  const Json model = {{"id", options_.served_model_name},
                      {"object", "model"},
                      {"created", created_unix_},
                      {"owned_by", "deepinfer"},
                      {"type", "model"},
                      {"display_name", options_.served_model_name},
                      {"created_at", "1970-01-01T00:00:00Z"}};
  if (path == "/v1/models") {
    return RespondJson(channel, path,
                       Json{{"object", "list"},
                            {"data", Json::array({model})},
                            {"first_id", options_.served_model_name},
                            {"last_id", options_.served_model_name},
                            {"has_more", false}});
  }
  if (path.rfind("/v1/models/", 0) == 0) {
    if (path.substr(11) == options_.served_model_name) return RespondJson(channel, path, model);
    return RespondError(channel, "/v1/models/{id}", 404,
                        fmt::format("The model '{}' does not exist", path.substr(11)));
  }
  if (path == "/metrics") {
    return Respond(channel, path, 200, "text/plain; version=0.0.4",
                   metrics_.Render(admission_.running(), admission_.queued(), service_->Stats()));
  }
  if (post_endpoints_.count(path) != 0) {
    return RespondError(channel, path, 405, fmt::format("use POST for {}", path));
  }
  RespondError(channel, "other", 404, fmt::format("no route for GET {}", path));
}

void ApiServer::HandlePost(const HttpRequest& request, std::shared_ptr<ResponseChannel> channel) {
  const auto arrival = Clock::now();
  const std::string& path = request.path;
  const auto endpoint = post_endpoints_.find(path);
  if (endpoint == post_endpoints_.end()) {
    return RespondError(*channel, "other", 404, fmt::format("no route for POST {}", path));
  }
  if (draining_) return RespondError(*channel, path, 503, "the server is shutting down");
  if (!IsValidUtf8(request.body)) {
    return RespondError(*channel, path, 400, "the request body is not valid UTF-8");
  }
  Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    // Re-parse with exceptions only to get the parser's position for the message.
    std::string detail = "malformed JSON";
    try {
      const Json reparsed = Json::parse(request.body);
      (void)reparsed;
    } catch (const Json::exception& error) {
      detail = error.what();
    }
    return RespondError(*channel, path, 400, fmt::format("invalid JSON request: {}", detail));
  }
  if (!body.is_object()) {
    return RespondError(*channel, path, 400, "the request body must be a JSON object");
  }
  if (const auto model = body.find("model"); model != body.end()) {
    if (!model->is_string())
      return RespondError(*channel, path, 400, "model must be a string", "model");
    if (model->get<std::string>() != options_.served_model_name) {
      return RespondError(*channel, path, 404,
                          fmt::format("The model '{}' does not exist (this server serves '{}')",
                                      model->get<std::string>(), options_.served_model_name),
                          "model");
    }
  }
  (void)arrival;
  endpoint->second(*this, std::move(body), request, std::move(channel));
}

void ApiServer::Generate(const std::string& path, GenerationRequest request,
                         std::unique_ptr<OutputAdapter> adapter,
                         std::shared_ptr<ResponseChannel> channel, Clock::time_point arrival) {
  if (!ready_) return RespondError(*channel, path, 503, "the model is loading");
  auto call = std::make_shared<Call>(this, path, std::move(adapter), channel, arrival,
                                     static_cast<int64_t>(request.prompt.size()));
  channel->OnDisconnect([weak = std::weak_ptr<Call>(call)] {
    if (auto locked = weak.lock()) locked->RequestCancel();
  });
  auto start = [this, call, request = std::move(request)]() mutable {
    StartCall(call, std::move(request));
  };
  if (admission_.Enter(std::move(start)) == Admission::Result::kRejected) {
    RespondError(*channel, path, 429,
                 fmt::format("too many requests: {} running and {} queued; retry later",
                             admission_.running(), admission_.queued()));
  }
}

void ApiServer::StartCall(const std::shared_ptr<Call>& call, GenerationRequest request) {
  const auto& channel = call->channel();
  if (hard_stop_ || call->cancel_requested()) {
    if (!channel->disconnected()) {
      RespondError(*channel, call->path(), 503, "the server is shutting down");
    }
    admission_.Leave();
    return;
  }
  {
    std::lock_guard lock(calls_mutex_);
    calls_.insert(call);
  }
  call->set_self(call);
  auto id = service_->Submit(std::move(request), call);
  if (!id.ok()) {
    call->set_self(nullptr);
    {
      std::lock_guard lock(calls_mutex_);
      calls_.erase(call);
    }
    const int status = id.status().code() == base::StatusCode::kInvalidArgument ? 400 : 500;
    RespondError(*channel, call->path(), status, id.status().message());
    admission_.Leave();
    return;
  }
  call->Started(*id);
}

void ApiServer::CallFinished(const std::shared_ptr<Call>& call) {
  // Leave on an I/O thread: the next queued request must not start on the service's thread.
  // Posted under the lock so that the destructor (waiting for calls_ to empty) cannot tear
  // the HTTP server down in between.
  std::lock_guard lock(calls_mutex_);
  http_->Post([this] { admission_.Leave(); });
  calls_.erase(call);
}

bool ApiServer::Shutdown(std::chrono::milliseconds deadline) {
  draining_ = true;
  http_->StopAccepting();
  const auto until = Clock::now() + deadline;
  while (requests_in_flight() > 0 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const bool clean = requests_in_flight() == 0;
  if (!clean) {
    LOG_INFO("shutdown: cancelling {} unfinished requests", requests_in_flight());
    hard_stop_ = true;
    CancelAllCalls();
    const auto grace = Clock::now() + std::chrono::seconds(5);
    while (requests_in_flight() > 0 && Clock::now() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // Let the last responses flush before closing the sockets.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  http_->Stop();
  http_->Join();
  return clean;
}

}  // namespace deepinfer::server
