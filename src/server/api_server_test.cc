#include "server/api_server.h"

#include <gtest/gtest.h>

#include <thread>

#include "server/fake_generation_service.h"
#include "server/test_client.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {
namespace {

using testing::RawConnection;
using testing::RawResponse;
using testing::Request;

const tokenizer::Tokenizer& SharedTokenizer() {
  static const auto* tokenizer = [] {
    auto loaded = tokenizer::Tokenizer::FromFile(tokenizer::DefaultTokenizerPath());
    EXPECT_TRUE(loaded.ok()) << loaded.status().ToString();
    return loaded->release();
  }();
  return *tokenizer;
}

class ApiServerTest : public ::testing::Test {
 protected:
  void StartServer() {
    const ApiServerOptions options;
    StartServer(options);
  }
  void StartWithStep(std::chrono::microseconds step) {
    const ApiServerOptions options;
    StartServer(options, step);
  }
  void StartServer(const ApiServerOptions& options_in,
                   std::chrono::microseconds step = std::chrono::microseconds(0)) {
    ApiServerOptions options = options_in;
    const auto& tokenizer = SharedTokenizer();
    FakeGenerationOptions fake;
    fake.script = [this, &tokenizer](std::span<const TokenId>) {
      std::vector<TokenId> ids = tokenizer.Encode(script_text_);
      if (script_eos_) ids.push_back(EosTokenId(tokenizer));
      return ids;
    };
    fake.step_interval = step;
    fake.context_length = 64;
    service_ = std::make_unique<FakeGenerationService>(fake);
    options.http.port = 0;
    server_ = std::make_unique<ApiServer>(options, service_.get(), &tokenizer);
    ASSERT_TRUE(server_->Start().ok());
    server_->SetReady(true);
  }

  std::optional<RawResponse> Post(const std::string& path, const std::string& body,
                                  const std::string& headers = "") {
    return Request(server_->port(), "POST", path, body, headers);
  }

  std::string script_text_ = "Hello world, this is a test.";
  bool script_eos_ = true;
  std::unique_ptr<FakeGenerationService> service_;
  std::unique_ptr<ApiServer> server_;
};

Json ParseBody(const RawResponse& response) { return Json::parse(response.body); }

TEST_F(ApiServerTest, HealthIs503UntilReady) {
  StartServer();
  server_->SetReady(false);
  auto response = Request(server_->port(), "GET", "/health");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 503);
  server_->SetReady(true);
  response = Request(server_->port(), "GET", "/health");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, R"({"status":"ok"})");
}

TEST_F(ApiServerTest, ListsTheServedModel) {
  ApiServerOptions options;
  options.served_model_name = "my-model";
  StartServer(options);
  auto response = Request(server_->port(), "GET", "/v1/models");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  const Json body = ParseBody(*response);
  EXPECT_EQ(body["object"], "list");
  ASSERT_EQ(body["data"].size(), 1u);
  EXPECT_EQ(body["data"][0]["id"], "my-model");
  EXPECT_EQ(Request(server_->port(), "GET", "/v1/models/my-model")->status, 200);
  EXPECT_EQ(Request(server_->port(), "GET", "/v1/models/other")->status, 404);
}

TEST_F(ApiServerTest, ApiKeyIsRequiredExceptForHealth) {
  ApiServerOptions options;
  options.api_key = "sekrit";
  StartServer(options);
  const uint16_t port = server_->port();
  auto response = Request(port, "GET", "/v1/models");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 401);
  EXPECT_EQ(ParseBody(*response)["error"]["type"], "authentication_error");
  EXPECT_EQ(Request(port, "GET", "/v1/models", "", "Authorization: Bearer wrong\r\n")->status, 401);
  EXPECT_EQ(Request(port, "GET", "/v1/models", "", "Authorization: Bearer sekrit\r\n")->status,
            200);
  EXPECT_EQ(Request(port, "GET", "/v1/models", "", "x-api-key: sekrit\r\n")->status, 200);
  EXPECT_EQ(Request(port, "GET", "/health")->status, 200);
  EXPECT_EQ(Request(port, "GET", "/metrics")->status, 401);
}

TEST_F(ApiServerTest, ErrorShapeFollowsTheApi) {
  StartServer();
  server_->AddPostEndpoint("/v1/messages", [](ApiServer& s, Json, const HttpRequest&,
                                              std::shared_ptr<ResponseChannel> channel) {
    s.RespondJson(*channel, "/v1/messages", Json{{"ok", true}});
  });
  auto openai = Post("/v1/completions", "{not json");
  ASSERT_TRUE(openai);
  EXPECT_EQ(openai->status, 400);
  const Json openai_body = ParseBody(*openai);
  EXPECT_EQ(openai_body["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(openai_body["error"].contains("param"));
  EXPECT_EQ(openai_body["error"]["message"].get<std::string>().rfind("invalid JSON request", 0),
            0u);
  auto anthropic = Post("/v1/messages", "{not json");
  ASSERT_TRUE(anthropic);
  EXPECT_EQ(anthropic->status, 400);
  const Json anthropic_body = ParseBody(*anthropic);
  EXPECT_EQ(anthropic_body["type"], "error");
  EXPECT_EQ(anthropic_body["error"]["type"], "invalid_request_error");
}

TEST_F(ApiServerTest, RejectsBadBodies) {
  StartServer();
  EXPECT_EQ(Post("/v1/completions", "[1,2]")->status, 400);
  auto utf8 = Post("/v1/completions", "{\"model\":\"\xC3\x28\"}");
  ASSERT_TRUE(utf8);
  EXPECT_EQ(utf8->status, 400);
  EXPECT_NE(utf8->body.find("not valid UTF-8"), std::string::npos);
  auto model = Post("/v1/completions", R"({"model":"gpt-9","prompt":"x"})");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 404);
  EXPECT_EQ(ParseBody(*model)["error"]["param"], "model");
  auto type =
      Post("/v1/completions", R"({"model":"deepseek-ai/DeepSeek-V4.1-Flash-1017","prompt":"x",)"
                              R"("max_tokens":"ten"})");
  ASSERT_TRUE(type);
  EXPECT_EQ(type->status, 400);
  EXPECT_EQ(ParseBody(*type)["error"]["param"], "max_tokens");
  EXPECT_EQ(Request(server_->port(), "GET", "/nowhere")->status, 404);
  EXPECT_EQ(Request(server_->port(), "DELETE", "/v1/models")->status, 405);
}

const std::string kModel = R"("model":"deepseek-ai/DeepSeek-V4.1-Flash-1017")";

TEST_F(ApiServerTest, CompletionNonStreaming) {
  StartServer();
  auto response = Post("/v1/completions", "{" + kModel + R"(,"prompt":"Say hi","max_tokens":50})");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200) << response->body;
  const Json body = ParseBody(*response);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["choices"][0]["text"], script_text_);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const int64_t expected_tokens =
      static_cast<int64_t>(SharedTokenizer().Encode(script_text_).size()) + 1;  // + EOS
  EXPECT_EQ(body["usage"]["completion_tokens"], expected_tokens);
  EXPECT_EQ(body["usage"]["prompt_tokens"], SharedTokenizer().Encode("Say hi").size());
}

TEST_F(ApiServerTest, CompletionStreamingUsesSseFraming) {
  StartServer();
  auto response = Post("/v1/completions", "{" + kModel +
                                              R"(,"prompt":"Say hi","stream":true,)"
                                              R"("stream_options":{"include_usage":true}})");
  ASSERT_TRUE(response);
  ASSERT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["content-type"], "text/event-stream");
  EXPECT_EQ(response->headers.count("cache-control"), 0u);
  // Every event is "data: ...\n\n"; the last is [DONE].
  std::string text;
  std::vector<Json> chunks;
  size_t pos = 0;
  const std::string& body = response->body;
  while (pos < body.size()) {
    ASSERT_EQ(body.compare(pos, 6, "data: "), 0) << body.substr(pos);
    const size_t end = body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    const std::string payload = body.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (payload == "[DONE]") {
      EXPECT_EQ(pos, body.size());
      break;
    }
    chunks.push_back(Json::parse(payload));
  }
  ASSERT_GE(chunks.size(), 3u);
  for (size_t i = 0; i + 1 < chunks.size(); ++i) {
    if (!chunks[i]["choices"].empty()) text += chunks[i]["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, script_text_);
  EXPECT_EQ(chunks[chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chunks.back()["choices"].empty());
  EXPECT_GT(chunks.back()["usage"]["completion_tokens"].get<int>(), 5);
}

TEST_F(ApiServerTest, CompletionStopsAtStopStringAndLength) {
  StartServer();
  auto stopped = Post("/v1/completions", "{" + kModel + R"(,"prompt":"x","stop":[", this"]})");
  ASSERT_TRUE(stopped);
  EXPECT_EQ(ParseBody(*stopped)["choices"][0]["text"], "Hello world");
  EXPECT_EQ(ParseBody(*stopped)["choices"][0]["finish_reason"], "stop");
  auto length = Post("/v1/completions", "{" + kModel + R"(,"prompt":"x","max_tokens":2})");
  ASSERT_TRUE(length);
  EXPECT_EQ(ParseBody(*length)["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(ParseBody(*length)["usage"]["completion_tokens"], 2);
}

TEST_F(ApiServerTest, PromptPastTheContextIs400) {
  StartServer();
  auto response = Post("/v1/completions", "{" + kModel + R"(,"prompt":"x","max_tokens":100})");
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 400);
  EXPECT_NE(ParseBody(*response)["error"]["message"].get<std::string>().find("context length"),
            std::string::npos);
}

TEST_F(ApiServerTest, FullQueueGets429WithRetryAfter) {
  ApiServerOptions options;
  options.max_running_requests = 1;
  options.max_queued_requests = 1;
  StartServer(options, std::chrono::milliseconds(20));
  const std::string body = "{" + kModel + R"(,"prompt":"x","max_tokens":40,"stream":true})";
  // Two slow streams occupy the running slot and the queue slot.
  RawConnection first(server_->port()), second(server_->port());
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ASSERT_TRUE(first.Send(request));
  for (int i = 0; i < 100 && server_->requests_in_flight() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(second.Send(request));
  for (int i = 0; i < 100 && server_->requests_in_flight() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto rejected = Post("/v1/completions", body);
  ASSERT_TRUE(rejected);
  EXPECT_EQ(rejected->status, 429);
  EXPECT_EQ(rejected->headers["retry-after"], "1");
  EXPECT_EQ(ParseBody(*rejected)["error"]["type"], "rate_limit_error");
  // The admitted ones still complete.
  auto a = first.ReadResponse();
  auto b = second.ReadResponse();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(b->status, 200);
}

TEST_F(ApiServerTest, ClientDisconnectCancelsTheGeneration) {
  StartWithStep(std::chrono::milliseconds(20));
  script_eos_ = false;
  script_text_ = std::string(200, 'a');
  {
    RawConnection connection(server_->port());
    const std::string body = "{" + kModel + R"(,"prompt":"x","max_tokens":50,"stream":true})";
    ASSERT_TRUE(connection.Send("POST /v1/completions HTTP/1.1\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body));
    auto headers = connection.ReadHeaders();
    ASSERT_TRUE(headers);
    EXPECT_EQ(headers->status, 200);
  }
  for (int i = 0; i < 400 && service_->cancelled_count() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(service_->cancelled_count(), 1);
  for (int i = 0; i < 400 && server_->requests_in_flight() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server_->requests_in_flight(), 0);
  EXPECT_EQ(server_->metrics().RequestCount("/v1/completions", 499), 1);
}

TEST_F(ApiServerTest, MetricsCountRequests) {
  StartServer();
  ASSERT_EQ(Post("/v1/completions", "{" + kModel + R"(,"prompt":"x"})")->status, 200);
  // The request's metrics are recorded right after its last bytes are written and the
  // running gauge drops on an I/O thread, so a scrape may briefly precede them: poll.
  std::string text;
  for (int i = 0; i < 400; ++i) {
    auto response = Request(server_->port(), "GET", "/metrics");
    ASSERT_TRUE(response);
    ASSERT_EQ(response->status, 200);
    text = response->body;
    if (text.find("deepinfer_e2e_request_latency_seconds_count 1") != std::string::npos &&
        text.find("deepinfer_requests_running 0") != std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(
      text.find("deepinfer_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 1"),
      std::string::npos);
  EXPECT_NE(text.find("deepinfer_time_to_first_token_seconds_count 1"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_e2e_request_latency_seconds_count 1"), std::string::npos);
  const size_t generated = SharedTokenizer().Encode(script_text_).size() + 1;  // + EOS
  EXPECT_NE(text.find("deepinfer_generation_tokens_total " + std::to_string(generated) + "\n"),
            std::string::npos);
  EXPECT_NE(text.find("deepinfer_requests_running 0"), std::string::npos);
}

TEST_F(ApiServerTest, ShutdownLetsInFlightRequestsFinish) {
  StartWithStep(std::chrono::milliseconds(10));
  RawConnection connection(server_->port());
  const std::string body = "{" + kModel + R"(,"prompt":"x","max_tokens":30})";
  ASSERT_TRUE(connection.Send("POST /v1/completions HTTP/1.1\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body));
  for (int i = 0; i < 100 && server_->requests_in_flight() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::thread reader([&] {
    auto response = connection.ReadResponse();
    ASSERT_TRUE(response);
    EXPECT_EQ(response->status, 200);
  });
  EXPECT_TRUE(server_->Shutdown(std::chrono::seconds(10)));
  reader.join();
}

TEST_F(ApiServerTest, ShutdownCancelsPastTheDeadline) {
  StartWithStep(std::chrono::milliseconds(50));
  script_eos_ = false;
  script_text_ = std::string(200, 'a');
  RawConnection connection(server_->port());
  const std::string body = "{" + kModel + R"(,"prompt":"x","max_tokens":60,"stream":true})";
  ASSERT_TRUE(connection.Send("POST /v1/completions HTTP/1.1\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body));
  for (int i = 0; i < 100 && server_->requests_in_flight() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_FALSE(server_->Shutdown(std::chrono::milliseconds(100)));
  EXPECT_EQ(service_->cancelled_count(), 1);
  EXPECT_EQ(server_->requests_in_flight(), 0);
}

}  // namespace
}  // namespace deepinfer::server
