// Output parsing through the protocol generators: chunk-boundary invariance, DSML spellings,
// stop sequences across chunk borders, token input.
#include <gtest/gtest.h>

#include "recipe/convert.h"
#include "recipe/stream_processor.h"

namespace deepinfer::recipe {
namespace {

ConvertedRequest Request(Protocol protocol, std::string_view body) {
  auto converted = ConvertRequestText(protocol, body);
  EXPECT_TRUE(converted.ok()) << converted.status();
  return std::move(converted).value();
}

StreamProcessorOptions Options() {
  StreamProcessorOptions options;
  options.response_id = "id";
  options.model = "m";
  options.created = 1;
  options.accumulate = true;
  return options;
}

// The non-streaming response for output delivered in `pieces`.
std::string Complete(const ConvertedRequest& request, const std::vector<std::string>& pieces,
                     BackendFinish finish = BackendFinish::kStop) {
  StreamProcessor processor(request, Options());
  processor.OnReady("fp", {10, 2});
  for (const std::string& piece : pieces) processor.OnText(piece, 1);
  processor.OnFinish(finish);
  return WriteJson(processor.FinalResponse());
}

// Drops the usage (completion_tokens counts pieces) so that splits compare equal.
std::string WithoutUsage(std::string text) {
  Json value = Json::parse(text);
  value.erase("usage");
  return WriteJson(value);
}

// Splits `text` into two pieces at every byte position and into single bytes; every
// delivery must give the same accumulated response.
void ExpectSplitInvariant(const ConvertedRequest& request, const std::string& text) {
  const std::string whole = WithoutUsage(Complete(request, {text}));
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(WithoutUsage(Complete(request, {text.substr(0, cut), text.substr(cut)})), whole)
        << "cut at " << cut;
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  EXPECT_EQ(WithoutUsage(Complete(request, bytes)), whole);
}

constexpr std::string_view kChatTools =
    R"({"model":"m","messages":[{"role":"user","content":"q"}],"thinking":{"type":"disabled"},
        "tools":[{"type":"function","function":{"name":"ship","parameters":{"type":"object"}}}]})";

std::string ToolBlock(std::string_view block, std::string_view invoke, std::string_view param) {
  const std::string p(param);
  const std::string open = "<｜DSML｜" + p;
  const std::string close = "</｜DSML｜" + p + ">";
  return "<｜DSML｜" + std::string(block) + ">\n<｜DSML｜" + std::string(invoke) +
         " name=\"ship\">\n" + open + " name=\"shipping address\" string=\"true\">Paris\n日本" +
         close + "\n" + open + " name=\" string= mode \" string=\"false\">{\"enabled\":true}" +
         close + "\n" + open + " name=\"count\" string=\"false\">2" + close + "\n" + open +
         " name=\"\" string=\"true\">empty \"key\"" + close + "\n</｜DSML｜" + std::string(invoke) +
         ">\n</｜DSML｜" + std::string(block) + ">";
}

TEST(StreamTest, ToolCallsParseInBothDsmlSpellings) {
  const ConvertedRequest request = Request(Protocol::kChatCompletions, kChatTools);
  for (const std::string& text : {ToolBlock(" calls", " invoke", " parameter"),
                                  ToolBlock("tool_calls", "invoke", "parameter")}) {
    Json response = Json::parse(Complete(request, {"\n\n" + text + "ignored tail"}));
    const Json& choice = response["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    EXPECT_EQ(choice["message"]["content"], "");
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
    const Json& function = choice["message"]["tool_calls"][0]["function"];
    EXPECT_EQ(function["name"], "ship");
    Json arguments = Json::parse(function["arguments"].get<std::string>());
    EXPECT_EQ(
        WriteJson(arguments),
        R"({"shipping address":"Paris\n日本"," string= mode ":{"enabled":true},"count":2,"":"empty \"key\""})");
  }
}

TEST(StreamTest, ChatResultIsIndependentOfChunkBoundaries) {
  const ConvertedRequest thinking = Request(
      Protocol::kChatCompletions, R"({"model":"m","messages":[{"role":"user","content":"q"}]})");
  ExpectSplitInvariant(thinking, "\nLet me think.\n</think>\n\nThe answer</think> is 42.");
  const ConvertedRequest tools = Request(Protocol::kChatCompletions, kChatTools);
  ExpectSplitInvariant(tools, "Calling.\n\n" + ToolBlock(" calls", " invoke", " parameter"));
  ExpectSplitInvariant(tools, ToolBlock("tool_calls", "invoke", "parameter"));
}

TEST(StreamTest, ResponsesAndMessagesAreIndependentOfChunkBoundaries) {
  const ConvertedRequest responses = Request(
      Protocol::kResponses,
      R"({"model":"m","input":"q","tools":[{"type":"function","name":"ship","parameters":{"type":"object"}}]})");
  ExpectSplitInvariant(responses,
                       "plan</think>ok\n" + ToolBlock(" calls", " invoke", " parameter"));
  const ConvertedRequest messages = Request(
      Protocol::kMessages,
      R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"}],"stop_sequences":["STOP"]})");
  ExpectSplitInvariant(messages, "why</think>because STOP never");
}

TEST(StreamTest, JsonModeIsIndependentOfChunkBoundaries) {
  const ConvertedRequest request = Request(
      Protocol::kChatCompletions,
      R"({"model":"m","messages":[{"role":"user","content":"json"}],"thinking":{"type":"disabled"},
          "response_format":{"type":"json_object"}})");
  // Text around the JSON becomes one space per received piece (as in the reference), so only
  // the JSON itself is independent of the chunking.
  const std::string text = "Sure: ```json\n{\"a\": [1, 2]}\n``` done";
  auto json_of = [&](const std::vector<std::string>& pieces) {
    std::string content = Json::parse(Complete(request, pieces))["choices"][0]["message"]["content"]
                              .get<std::string>();
    const size_t first = content.find_first_not_of(' ');
    const size_t last = content.find_last_not_of(' ');
    return first == std::string::npos ? std::string() : content.substr(first, last - first + 1);
  };
  EXPECT_EQ(json_of({text}), R"({"a": [1, 2]})");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    EXPECT_EQ(json_of({text.substr(0, cut), text.substr(cut)}), R"({"a": [1, 2]})") << cut;
  }
  EXPECT_EQ(Json::parse(Complete(request, {text}))["choices"][0]["message"]["content"],
            R"( {"a": [1, 2]} )");
}

TEST(StreamTest, StopSequenceAcrossChunkBorders) {
  const ConvertedRequest request =
      Request(Protocol::kMessages,
              R"({"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"}],
          "thinking":{"type":"disabled"},"stop_sequences":["STOP"]})");
  StreamProcessor processor(request, Options());
  processor.OnText("Answer S", 2);
  processor.OnText("T", 1);
  processor.OnText("OP tail", 2);
  processor.OnText("never read", 2);
  EXPECT_TRUE(processor.done());
  const Json response = processor.FinalResponse();
  EXPECT_EQ(WriteJson(response["content"]), R"([{"type":"text","text":"Answer "}])");
  EXPECT_EQ(response["stop_reason"], "stop_sequence");
  EXPECT_EQ(response["stop_sequence"], "STOP");
  EXPECT_EQ(response["usage"]["output_tokens"], 5);
}

TEST(StreamTest, ChatStreamShapes) {
  ConvertedRequest request =
      Request(Protocol::kChatCompletions,
              R"({"model":"m","messages":[{"role":"user","content":"q"}],"stream":true})");
  StreamProcessorOptions options = Options();
  options.accumulate = false;
  StreamProcessor processor(request, std::move(options));
  processor.OnText("r</think>a", 3);
  processor.OnFinish(BackendFinish::kLength);
  const std::vector<Json> events = processor.TakeEvents();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_FALSE(events[0].contains("usage"));  // stream without include_usage
  EXPECT_EQ(WriteJson(events[0]["choices"][0]["delta"]),
            R"({"role":"assistant","content":null,"reasoning_content":""})");
  EXPECT_EQ(events[3]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(events[3]["usage"]["completion_tokens"], 3);
  EXPECT_EQ(SseFrame(Protocol::kChatCompletions, events[1]).rfind("data: {\"id\":\"id\"", 0), 0u);
  EXPECT_EQ(SseDone(Protocol::kChatCompletions), "data: [DONE]\n\n");
}

// Decodes ids as single bytes; ids >= 256 are errors.
class ByteDecoder : public TokenDecoder {
 public:
  base::StatusOr<std::string> Push(int32_t id) override {
    if (id < 0 || id >= 256) return base::OutOfRangeError("bad id");
    pending_.push_back(static_cast<char>(id));
    const unsigned char lead = static_cast<unsigned char>(pending_[0]);
    const size_t need = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
    if (pending_.size() < need) return std::string();
    return std::exchange(pending_, std::string());
  }

 private:
  std::string pending_;
};

TEST(StreamTest, TokenInputBuffersIncompleteCharacters) {
  const ConvertedRequest request = Request(
      Protocol::kChatCompletions,
      R"({"model":"m","messages":[{"role":"user","content":"q"}],"thinking":{"type":"disabled"}})");
  StreamProcessorOptions options = Options();
  options.decoder = std::make_unique<ByteDecoder>();
  StreamProcessor processor(request, std::move(options));
  for (unsigned char byte : std::string("a日")) ASSERT_TRUE(processor.OnToken(byte).ok());
  EXPECT_FALSE(processor.OnToken(999).ok());
  EXPECT_TRUE(processor.done());
  const std::vector<Json> events = processor.TakeEvents();
  ASSERT_EQ(events.size(), 3u);  // start, "a", "日" (no finish after an error)
  EXPECT_EQ(events[2]["choices"][0]["delta"]["content"], "日");

  StreamProcessor without_decoder(request, Options());
  const base::Status status = without_decoder.OnToken(1);
  EXPECT_EQ(status.message(), "token chunk received without a tokenizer");
}

TEST(StreamTest, ResponsesIncompleteOnLength) {
  const ConvertedRequest request =
      Request(Protocol::kResponses, R"({"model":"m","input":"q","reasoning":{"effort":"none"}})");
  const Json response = Json::parse(Complete(request, {"partial"}, BackendFinish::kLength));
  EXPECT_EQ(response["status"], "incomplete");
  EXPECT_EQ(WriteJson(response["incomplete_details"]), R"({"reason":"max_output_tokens"})");
  EXPECT_EQ(response["output"][0]["status"], "incomplete");
  EXPECT_EQ(response["output"][0]["content"][0]["text"], "partial");
}

}  // namespace
}  // namespace deepinfer::recipe
