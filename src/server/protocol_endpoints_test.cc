// The recipe-backed endpoints end to end over loopback: real Engine + ScriptedModelRunner
// (the only replaced part) + recipe conversion/parsing + HTTP/SSE.
#include "server/protocol_endpoints.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/engine.h"
#include "kv/state_layout.h"
#include "server/engine_service.h"
#include "server/scripted_model_runner.h"
#include "server/test_client.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {
namespace {

using testing::RawResponse;
using testing::Request;

const tokenizer::Tokenizer& Tok() {
  static const auto* tokenizer =
      tokenizer::Tokenizer::FromFile(tokenizer::DefaultTokenizerPath())->release();
  return *tokenizer;
}

const std::string kModel = R"("model":"deepseek-ai/DeepSeek-V4.1-Flash-1017")";
const std::string kToolCall =
    "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get_weather\">\n<｜DSML｜ parameter "
    "name=\"location\" string=\"true\">Paris</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ "
    "calls>";

class ProtocolEndpointsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<ScriptRule> rules = {
        {"think", "Let me think.</think>The answer is 42."},
        {"weather", "I should call a tool.</think>\n\n" + kToolCall},
        {"plain", "Just text, no reasoning. STOP and more"},
    };
    rules.push_back({"forever", std::string(2000, 'a')});  // ~250 tokens at 5 ms per step
    auto runner = std::make_unique<ScriptedModelRunner>(&Tok(), rules, "Hello there.",
                                                        /*step_delay_ms=*/5);
    engine::EngineConfig config;
    auto layout = kv::MakePackedStateLayout(kv::V41FlashStateLayoutConfig(), 64);
    ASSERT_TRUE(layout.ok());
    config.layout = *layout;
    config.num_blocks = 64;
    config.num_slots = 4;
    config.scheduler.max_tokens_per_step = 512;
    config.scheduler.max_model_len = 2048;
    config.scheduler.eos_token_ids = {1};
    auto engine = engine::Engine::Create(config, std::move(runner));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    service_ = std::make_unique<EngineGenerationService>(
        engine_.get(), EngineServiceOptions{2048, layout->BlockBytes()});
    ApiServerOptions options;
    options.http.port = 0;
    server_ = std::make_unique<ApiServer>(options, service_.get(), &Tok());
    RegisterProtocolEndpoints(*server_);
    ASSERT_TRUE(server_->Start().ok());
    server_->SetReady(true);
  }
  void TearDown() override {
    server_.reset();
    service_.reset();
    engine_.reset();
  }

  RawResponse Post(const std::string& path, const std::string& body) {
    auto response = Request(server_->port(), "POST", path, body);
    EXPECT_TRUE(response.has_value());
    return response.value_or(RawResponse{});
  }

  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<EngineGenerationService> service_;
  std::unique_ptr<ApiServer> server_;
};

// Splits an SSE body into (event type or "", data) pairs; checks the framing.
std::vector<std::pair<std::string, std::string>> SseEvents(const std::string& body) {
  std::vector<std::pair<std::string, std::string>> events;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    EXPECT_NE(end, std::string::npos);
    if (end == std::string::npos) break;
    std::string frame = body.substr(pos, end - pos);
    pos = end + 2;
    std::string type;
    if (frame.rfind("event: ", 0) == 0) {
      const size_t newline = frame.find('\n');
      type = frame.substr(7, newline - 7);
      frame.erase(0, newline + 1);
    }
    EXPECT_EQ(frame.rfind("data: ", 0), 0u) << frame;
    events.emplace_back(type, frame.substr(6));
  }
  return events;
}

TEST_F(ProtocolEndpointsTest, ChatSeparatesReasoningFromContent) {
  const RawResponse response =
      Post("/v1/chat/completions",
           "{" + kModel + R"(,"messages":[{"role":"user","content":"please think"}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  const Json body = Json::parse(response.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["model"], "deepseek-ai/DeepSeek-V4.1-Flash-1017");
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["message"]["reasoning_content"], "Let me think.");
  EXPECT_EQ(choice["message"]["content"], "The answer is 42.");
  EXPECT_EQ(choice["finish_reason"], "stop");
  // EOS ends the text and is not counted by the recipe's usage.
  const int64_t completion =
      static_cast<int64_t>(Tok().Encode("Let me think.</think>The answer is 42.").size());
  EXPECT_EQ(body["usage"]["completion_tokens"], completion);
  EXPECT_GT(body["usage"]["prompt_tokens"].get<int>(), 5);
}

TEST_F(ProtocolEndpointsTest, ChatStreamsChunksThenDone) {
  const RawResponse response =
      Post("/v1/chat/completions",
           "{" + kModel + R"(,"stream":true,"messages":[{"role":"user","content":"think"}]})");
  ASSERT_EQ(response.status, 200);
  EXPECT_EQ(response.headers.at("content-type"), "text/event-stream");
  const auto events = SseEvents(response.body);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back().second, "[DONE]");
  const Json first = Json::parse(events.front().second);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string reasoning, content;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i].second);
    const Json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("reasoning_content") && delta["reasoning_content"].is_string()) {
      reasoning += delta["reasoning_content"].get<std::string>();
    }
    if (delta.contains("content") && delta["content"].is_string()) {
      content += delta["content"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "Let me think.");
  EXPECT_EQ(content, "The answer is 42.");
  const Json last = Json::parse(events[events.size() - 2].second);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last["usage"].is_object());
}

TEST_F(ProtocolEndpointsTest, ChatToolCall) {
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":)"
      R"({"type":"object","properties":{"location":{"type":"string"}}}}}])";
  const RawResponse response =
      Post("/v1/chat/completions",
           "{" + kModel + "," + tools +
               R"(,"messages":[{"role":"user","content":"weather in Paris?"}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  const Json body = Json::parse(response.body);
  const Json& message = body["choices"][0]["message"];
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], R"({"location": "Paris"})");
  EXPECT_EQ(message["reasoning_content"], "I should call a tool.");
}

TEST_F(ProtocolEndpointsTest, ChatStopSequence) {
  const RawResponse response = Post(
      "/v1/chat/completions",
      "{" + kModel +
          R"(,"stop":["STOP"],"thinking":{"type":"disabled"},"messages":[{"role":"user","content":"plain"}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  const Json body = Json::parse(response.body);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Just text, no reasoning. ");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
}

TEST_F(ProtocolEndpointsTest, MessagesStreamEventOrder) {
  const RawResponse response = Post(
      "/v1/messages",
      "{" + kModel +
          R"(,"max_tokens":100,"stream":true,"thinking":{"type":"enabled","budget_tokens":50},)"
          R"("messages":[{"role":"user","content":"think"}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  std::vector<std::string> types;
  std::string text, thinking;
  for (const auto& [type, data] : SseEvents(response.body)) {
    types.push_back(type);
    const Json event = Json::parse(data);
    EXPECT_EQ(event["type"], type);
    if (type == "content_block_delta" && event["delta"]["type"] == "text_delta") {
      text += event["delta"]["text"].get<std::string>();
    }
    if (type == "content_block_delta" && event["delta"]["type"] == "thinking_delta") {
      thinking += event["delta"]["thinking"].get<std::string>();
    }
  }
  ASSERT_GE(types.size(), 8u);
  EXPECT_EQ(types[0], "message_start");
  EXPECT_EQ(types[1], "content_block_start");
  EXPECT_EQ(types[2], "ping");
  EXPECT_EQ(types[types.size() - 2], "message_delta");
  EXPECT_EQ(types.back(), "message_stop");
  EXPECT_EQ(thinking, "Let me think.");
  EXPECT_EQ(text, "The answer is 42.");
}

TEST_F(ProtocolEndpointsTest, ResponsesNonStreaming) {
  const RawResponse response = Post("/v1/responses", "{" + kModel + R"(,"input":"please think"})");
  ASSERT_EQ(response.status, 200) << response.body;
  const Json body = Json::parse(response.body);
  EXPECT_EQ(body["object"], "response");
  EXPECT_EQ(body["status"], "completed");
  ASSERT_EQ(body["output"].size(), 2u);
  EXPECT_EQ(body["output"][0]["type"], "reasoning");
  EXPECT_EQ(body["output"][1]["type"], "message");
  EXPECT_EQ(body["output"][1]["content"][0]["text"], "The answer is 42.");
}

TEST_F(ProtocolEndpointsTest, CountTokens) {
  const RawResponse response =
      Post("/v1/messages/count_tokens",
           "{" + kModel + R"(,"messages":[{"role":"user","content":"Hello"}]})");
  ASSERT_EQ(response.status, 200) << response.body;
  // spec §6 vector 1: the Messages prompt for "Hello" is 31 tokens.
  EXPECT_EQ(Json::parse(response.body)["input_tokens"], 31);
}

TEST_F(ProtocolEndpointsTest, ConversionErrorsUseEachApisShape) {
  const RawResponse chat = Post("/v1/chat/completions", "{" + kModel + R"(,"messages":[]})");
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(Json::parse(chat.body)["error"]["type"], "invalid_request_error");
  const RawResponse messages = Post("/v1/messages", "{" + kModel + R"(,"max_tokens":"x"})");
  EXPECT_EQ(messages.status, 400);
  const Json body = Json::parse(messages.body);
  EXPECT_EQ(body["type"], "error");
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
}

TEST_F(ProtocolEndpointsTest, DisconnectCancelsAndFreesStateMemory) {
  const int32_t total_blocks = 64;  // config.num_blocks (counters refresh after a step)
  {
    testing::RawConnection connection(server_->port());
    const std::string body =
        "{" + kModel + R"(,"stream":true,"messages":[{"role":"user","content":"forever"}]})";
    ASSERT_TRUE(connection.Send("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body));
    auto headers = connection.ReadHeaders();
    ASSERT_TRUE(headers);
    EXPECT_EQ(headers->status, 200);
    for (int i = 0; i < 400 && engine_->Counters().free_blocks == total_blocks; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_LT(engine_->Counters().free_blocks, total_blocks);  // the request holds state
  }                                                            // the client goes away mid-stream
  for (int i = 0; i < 400 && engine_->Counters().requests_cancelled == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const engine::EngineCounters counters = engine_->Counters();
  EXPECT_EQ(counters.requests_cancelled, 1);
  EXPECT_EQ(counters.free_blocks, total_blocks);
  EXPECT_EQ(counters.running_sequences, 0);
  for (int i = 0; i < 400 && server_->requests_in_flight() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(server_->requests_in_flight(), 0);
}

TEST_F(ProtocolEndpointsTest, MaxTokensPastTheContextIs400) {
  const RawResponse response =
      Post("/v1/chat/completions",
           "{" + kModel + R"(,"max_tokens":5000,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(response.status, 400);
  EXPECT_EQ(Json::parse(response.body)["error"]["param"], "max_tokens");
}

}  // namespace
}  // namespace deepinfer::server
