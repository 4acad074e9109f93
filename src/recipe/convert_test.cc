#include "recipe/convert.h"

#include <gtest/gtest.h>

namespace deepinfer::recipe {
namespace {

base::StatusOr<ConvertedRequest> Convert(Protocol protocol, std::string_view body,
                                         bool strict = false) {
  ConvertOptions options;
  options.strict_recipe = strict;
  return ConvertRequestText(protocol, body, options);
}

void ExpectBadRequest(Protocol protocol, std::string_view body, std::string_view message) {
  auto converted = Convert(protocol, body);
  ASSERT_FALSE(converted.ok()) << body;
  EXPECT_EQ(converted.status().code(), base::StatusCode::kInvalidArgument);
  EXPECT_EQ(converted.status().message(), message) << body;
}

constexpr Protocol kChat = Protocol::kChatCompletions;
constexpr Protocol kResponses = Protocol::kResponses;
constexpr Protocol kMessages = Protocol::kMessages;

TEST(ConvertChatTest, ValidationErrors) {
  ExpectBadRequest(kChat, R"({"model":"m","messages":[]})", "Empty input messages");
  ExpectBadRequest(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_p":0})",
                   "top_p must be in (0, 1]");
  ExpectBadRequest(
      kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"presence_penalty":2.5})",
      "presence_penalty must be in [-2, 2]");
  ExpectBadRequest(
      kChat,
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"seed":9223372036854775808})",
      "seed must be in [0, 2^63)");
  ExpectBadRequest(kChat,
                   R"({"model":"m","messages":[{"role":"user","content":"x"},
                       {"role":"assistant","tool_calls":[]}]})",
                   "Invalid 'messages[1].tool_calls': empty array. Expected an array with minimum "
                   "length 1, but got an empty array instead.");
  ExpectBadRequest(kChat,
                   R"({"model":"m","messages":[{"role":"user","content":"x"},
                       {"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]},
                       {"role":"tool","tool_call_id":"b","content":"r"}]})",
                   "An assistant message with 'tool_calls' must be followed by tool messages "
                   "responding to each 'tool_call_id'. Unexpected tool_call_id: b");
  ExpectBadRequest(
      kChat,
      R"({"model":"m","messages":[{"role":"assistant","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]})",
      "Image in assistant message is unsupported");
}

TEST(ConvertChatTest, MalformedBodiesAreBadRequestsNotCrashes) {
  for (std::string_view body :
       {R"([])", R"({"model":3,"messages":[]})", R"({"model":"m"})",
        R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})",
        R"({"model":"m","messages":[{"role":"user","content":{"a":1}}]})",
        R"({"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":-1})",
        R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})",
        R"({"model":"m","messages":[{"role":"user","content":"x"}],"tool_choice":"sometimes"})"}) {
    auto converted = Convert(kChat, body);
    ASSERT_FALSE(converted.ok()) << body;
    EXPECT_EQ(converted.status().code(), base::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(converted.status().message().rfind("invalid request body: ", 0), 0u)
        << converted.status().message();
  }
  auto broken = Convert(kChat, "{\"model\":");
  ASSERT_FALSE(broken.ok());
  EXPECT_EQ(broken.status().message().rfind("invalid JSON request: ", 0), 0u);
}

TEST(ConvertChatTest, DeepNestingIsRejectedNotACrash) {
  const std::string deep(100000, '[');
  auto converted = Convert(kChat, R"({"model":"m","messages":)" + deep);
  ASSERT_FALSE(converted.ok());
  EXPECT_EQ(converted.status().code(), base::StatusCode::kInvalidArgument);

  Json body = Json::parse(R"({"model":"m","messages":[{"role":"user","content":"x"}]})");
  Json nested = Json::array();
  for (int i = 0; i < 1000; ++i) nested = Json::array({std::move(nested)});
  body["metadata"] = nested;
  EXPECT_FALSE(ConvertRequest(kChat, body).ok());
}

TEST(ConvertChatTest, ExtensionsPassThroughToSampling) {
  auto converted = Convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "n":3,"logprobs":true,"top_logprobs":5,"seed":7,"top_k":40,"frequency_penalty":0.5,
      "response_format":{"type":"json_schema","json_schema":{"name":"s","schema":{"type":"object"}}}})");
  ASSERT_TRUE(converted.ok()) << converted.status();
  const SamplingParams& sampling = converted->sampling;
  EXPECT_EQ(sampling.n, 3u);
  EXPECT_TRUE(sampling.logprobs);
  EXPECT_EQ(sampling.top_logprobs, 5u);
  EXPECT_EQ(sampling.seed, 7u);
  EXPECT_EQ(sampling.top_k, 40);
  EXPECT_EQ(sampling.frequency_penalty, 0.5f);
  EXPECT_EQ(sampling.response_format_type, "json_schema");
  EXPECT_EQ(sampling.json_schema["name"], "s");
  // The prompt stays text: JSON-schema enforcement is the engine's job.
  EXPECT_EQ(converted->conversation.response_format, ResponseFormat::kText);

  ExpectBadRequest(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":0})",
                   "n must be in [1, 128]");
  auto strict = Convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"n":2})",
                        /*strict=*/true);
  ASSERT_FALSE(strict.ok());
  EXPECT_EQ(strict.status().message(), "Invalid n value (currently only n = 1 is supported)");
}

TEST(ConvertChatTest, ReasoningContentOnAssistantIsKept) {
  auto converted = Convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"a"},
      {"role":"assistant","content":"b","reasoning_content":"thought"},
      {"role":"user","content":"c"}]})");
  ASSERT_TRUE(converted.ok()) << converted.status();
  ASSERT_EQ(converted->conversation.messages.size(), 3u);
  EXPECT_EQ(converted->conversation.messages[1].reasoning_content, "thought");
}

TEST(ConvertChatTest, IncludeUsageFollowsStreamOptions) {
  auto streaming =
      Convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],"stream":true})");
  ASSERT_TRUE(streaming.ok());
  EXPECT_FALSE(streaming->include_usage);
  auto with_usage = Convert(kChat, R"({"model":"m","messages":[{"role":"user","content":"x"}],
      "stream":true,"stream_options":{"include_usage":true}})");
  ASSERT_TRUE(with_usage.ok());
  EXPECT_TRUE(with_usage->include_usage);
}

TEST(ConvertResponsesTest, ValidationErrors) {
  ExpectBadRequest(kResponses, R"({"model":"m","input":[]})",
                   "Input items array must not be empty");
  ExpectBadRequest(kResponses, R"({"model":"m"})", "Either input or instructions must be provided");
  ExpectBadRequest(kResponses, R"({"model":"m","input":"x","max_output_tokens":0})",
                   "max_output_tokens must be greater than zero");
  ExpectBadRequest(
      kResponses,
      R"({"model":"m","input":[{"type":"function_call_output","call_id":"c9","output":"r"}]})",
      "No tool call found for tool output with call_id c9.");
  ExpectBadRequest(
      kResponses,
      R"({"model":"m","input":[{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
                       {"type":"message","role":"user","content":"next"}]})",
      "No tool output found for tool call c1.");
  ExpectBadRequest(
      kResponses, R"({"model":"m","input":"x","text":{"format":{"type":"json_object"}}})",
      "Response input messages must contain the word 'json' to use text.format of type "
      "json_object");
  ExpectBadRequest(
      kResponses,
      R"({"model":"m","input":[{"role":"user","content":[{"type":"input_image","file_id":"f"}]}]})",
      "input[0].content[0]: file_id is not supported. Pass the image as a base64 data "
      "url instead.");
}

TEST(ConvertResponsesTest, CallsAreGroupedAndSortedByCallId) {
  auto converted = Convert(kResponses, R"({"model":"m","input":[
      {"role":"user","content":"q"},
      {"type":"function_call","call_id":"b","name":"f","arguments":"{}"},
      {"type":"function_call","call_id":"a","name":"g","arguments":"{}"},
      {"type":"function_call_output","call_id":"b","output":"rb"},
      {"type":"function_call_output","call_id":"a","output":"ra"}]})");
  ASSERT_TRUE(converted.ok()) << converted.status();
  const auto& messages = converted->conversation.messages;
  ASSERT_EQ(messages.size(), 4u);
  ASSERT_TRUE(messages[1].tool_calls.has_value());
  EXPECT_EQ((*messages[1].tool_calls)[0].id, "a");
  EXPECT_EQ((*messages[1].tool_calls)[1].id, "b");
  EXPECT_EQ(messages[2].content, "ra");
  EXPECT_EQ(messages[3].content, "rb");
}

TEST(ConvertResponsesTest, JsonSchemaFormatPassesThrough) {
  auto converted = Convert(kResponses, R"({"model":"m","input":"x","top_logprobs":2,
      "text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object"},"strict":true}}})");
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->sampling.response_format_type, "json_schema");
  EXPECT_EQ(WriteJson(converted->sampling.json_schema),
            R"({"name":"s","schema":{"type":"object"},"strict":true})");
  EXPECT_TRUE(converted->sampling.logprobs);
  EXPECT_EQ(converted->sampling.top_logprobs, 2u);
  EXPECT_EQ(converted->conversation.response_format, ResponseFormat::kText);
}

TEST(ConvertResponsesTest, ReasoningItemsBecomeAssistantReasoning) {
  auto converted = Convert(kResponses, R"({"model":"m","input":[
      {"role":"user","content":"q"},
      {"type":"reasoning","content":[{"type":"reasoning_text","text":"think"}],"encrypted_content":"zz"},
      {"role":"assistant","content":"answer"},
      {"role":"user","content":"more"}]})");
  ASSERT_TRUE(converted.ok()) << converted.status();
  const auto& messages = converted->conversation.messages;
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1].reasoning_content, "think");
  EXPECT_EQ(messages[1].content, "answer");
}

TEST(ConvertMessagesTest, ValidationErrors) {
  ExpectBadRequest(
      kMessages,
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"stop_sequences":[""]})",
      "stop_sequences must contain at most 16 non-empty strings");
  ExpectBadRequest(kMessages, R"({"model":"m","messages":[{"role":"user","content":[]}]})",
                   "messages.0: all messages must have non-empty content");
  ExpectBadRequest(kMessages,
                   R"({"model":"m","messages":[{"role":"user","content":"x"}],
                       "tools":[{"name":"f","input_schema":{"type":"object"}}],
                       "tool_choice":{"type":"tool","name":"g"}})",
                   "tool_choice: no tool named 'g' was specified");
  ExpectBadRequest(kMessages,
                   R"({"model":"m","messages":[{"role":"user","content":"x"},
                       {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},
                       {"role":"user","content":"no result"}]})",
                   "messages.2: `tool_use` ids were found without `tool_result` blocks immediately "
                   "after: t1. Each `tool_use` block must have a corresponding `tool_result` block "
                   "in the next message.");
  ExpectBadRequest(
      kMessages,
      R"({"model":"m","messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"@@"}}]}]})",
      "messages.0.content[0]: base64 decode error");
}

TEST(ConvertMessagesTest, SystemRoleBecomesReminderAndToolInputIsPythonJson) {
  auto converted = Convert(kMessages, R"({"model":"m","max_tokens":10,"messages":[
      {"role":"user","content":"x"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{"a":[1,2]}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"ok"}]}]},
      {"role":"system","content":"be nice"}]})");
  ASSERT_TRUE(converted.ok()) << converted.status();
  const auto& messages = converted->conversation.messages;
  ASSERT_EQ(messages.size(), 4u);
  EXPECT_EQ((*messages[1].tool_calls)[0].arguments, R"({"a": [1, 2]})");
  EXPECT_EQ(messages[2].role, Role::kTool);
  EXPECT_EQ(messages[2].content, "ok");
  EXPECT_EQ(messages[3].content, "<system-reminder>\nbe nice\n</system-reminder>");
}

TEST(ErrorResponseTest, OpenAiShapeAndStatus) {
  ErrorResponse bad = ErrorResponseFor(base::InvalidArgumentError("Empty input messages"));
  EXPECT_EQ(bad.http_status, 400);
  EXPECT_EQ(
      WriteJson(bad.body),
      R"({"error":{"message":"Empty input messages","type":"invalid_request_error","param":null,"code":"invalid_request_error"}})");
  ErrorResponse internal = ErrorResponseFor(base::InternalError("boom"));
  EXPECT_EQ(internal.http_status, 500);
  EXPECT_EQ(internal.body["error"]["type"], "internal_error");
}

}  // namespace
}  // namespace deepinfer::recipe
