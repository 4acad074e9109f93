#include "recipe/render.h"

#include <gtest/gtest.h>

namespace deepinfer::recipe {
namespace {

Conversation HistoryConversation(bool thinking) {
  Conversation conversation;
  conversation.thinking_mode = thinking;
  conversation.reasoning_effort = thinking ? std::optional(ReasoningEffort::kHigh) : std::nullopt;
  conversation.messages.push_back(Message::User("q"));
  conversation.messages.push_back(Message::Assistant(
      "", "plan", std::vector<ToolCall>{{"c1", "f", R"({"s": "x", "n": 2})"}, {"c2", "g", "[1]"}}));
  conversation.messages.push_back(Message::Tool("r2", {}, "c2"));
  conversation.messages.push_back(Message::Tool("r1", {}, "c1"));
  return conversation;
}

TEST(RenderTest, V41AndV4DsmlSpellings) {
  const Conversation conversation = HistoryConversation(/*thinking=*/false);
  const std::string v41 = RenderPrompt(conversation, Encoding::kV41).prompt;
  const std::string v4 = RenderPrompt(conversation, Encoding::kV4).prompt;
  EXPECT_EQ(v41,
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n"
            "<｜DSML｜ invoke name=\"f\">\n"
            "<｜DSML｜ parameter name=\"s\" string=\"true\">x</｜DSML｜ parameter>\n"
            "<｜DSML｜ parameter name=\"n\" string=\"false\">2</｜DSML｜ parameter>\n"
            "</｜DSML｜ invoke>\n"
            "<｜DSML｜ invoke name=\"g\">\n"
            "<｜DSML｜ parameter name=\"arguments\" string=\"true\">[1]</｜DSML｜ parameter>\n"
            "</｜DSML｜ invoke>\n"
            "</｜DSML｜ calls><｜end▁of▁sentence｜>"
            "<｜User｜><tool_result>r1</tool_result>\n\n<tool_result>r2</tool_result>"
            "<｜Assistant｜></think>");
  EXPECT_NE(
      v4.find("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"s\""),
      std::string::npos);
  EXPECT_NE(v4.find("</｜DSML｜parameter>\n</｜DSML｜invoke>"), std::string::npos);
  EXPECT_EQ(v4.find("｜DSML｜ "), std::string::npos);
}

TEST(RenderTest, DeeplyNestedArgumentsRenderRaw) {
  Conversation conversation;
  conversation.thinking_mode = false;
  const std::string deep(100000, '[');
  conversation.messages.push_back(Message::User("q"));
  conversation.messages.push_back(
      Message::Assistant("", "", std::vector<ToolCall>{{"c1", "f", deep}}));
  conversation.messages.push_back(Message::Tool("r", {}, "c1"));
  const std::string prompt = RenderPrompt(conversation).prompt;
  EXPECT_NE(prompt.find("<｜DSML｜ parameter name=\"arguments\" string=\"true\">" + deep),
            std::string::npos);
}

TEST(RenderTest, ThinkingHistoryKeepsReasoning) {
  const std::string prompt = RenderPrompt(HistoryConversation(/*thinking=*/true)).prompt;
  EXPECT_NE(prompt.find("<｜Assistant｜><think>plan</think>\n\n<｜DSML｜ calls>"),
            std::string::npos);
  EXPECT_TRUE(prompt.ends_with("<｜Assistant｜><think>"));
  EXPECT_TRUE(prompt.starts_with("<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 "));
}

TEST(RenderTest, RequiredToolChoicePrefillsTheBlockOpener) {
  Conversation conversation;
  conversation.thinking_mode = false;
  conversation.tool_choice = ToolChoice::kRequired;
  conversation.tools.push_back({"f", std::nullopt, Json::object(), std::nullopt});
  conversation.messages.push_back(Message::User("q"));
  EXPECT_TRUE(RenderPrompt(conversation, Encoding::kV41)
                  .prompt.ends_with("<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n"));
  EXPECT_TRUE(RenderPrompt(conversation, Encoding::kV4)
                  .prompt.ends_with("<｜Assistant｜></think>\n\n<｜DSML｜tool_calls>\n"));
}

TEST(RenderTest, V4MergesLeadingSystemsAndDemotesLaterOnes) {
  Conversation conversation;
  conversation.thinking_mode = false;
  conversation.messages.push_back(Message::System("a"));
  conversation.messages.push_back(Message::System("b"));
  conversation.messages.push_back(Message::User("q"));
  conversation.messages.push_back(Message::System("late"));
  EXPECT_EQ(RenderPrompt(conversation, Encoding::kV4).prompt,
            "<｜begin▁of▁sentence｜>a\n\nb<｜User｜>q\n\nlate<｜Assistant｜></think>");
  EXPECT_EQ(RenderPrompt(conversation, Encoding::kV41).prompt,
            "<｜begin▁of▁sentence｜><｜System｜>a<｜System｜>b<｜User｜>q<｜System｜>late"
            "<｜Assistant｜></think>");
}

TEST(RenderTest, EffortLevels) {
  Conversation conversation;
  conversation.messages.push_back(Message::User("q"));
  conversation.reasoning_effort = ReasoningEffort::kLow;
  EXPECT_NE(RenderPrompt(conversation).prompt.find("Reasoning Effort: 50 "), std::string::npos);
  EXPECT_EQ(RenderPrompt(conversation, Encoding::kV4).prompt,
            "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜><think>");
  conversation.reasoning_effort = ReasoningEffort::kMax;
  EXPECT_NE(RenderPrompt(conversation).prompt.find("Reasoning Effort: 100 "), std::string::npos);
  EXPECT_NE(RenderPrompt(conversation, Encoding::kV4).prompt.find("Beyond maximum — exhaustive"),
            std::string::npos);
}

TEST(RenderTest, ImageSourcesInPromptOrder) {
  Conversation conversation;
  conversation.thinking_mode = false;
  ImageSource a{ImageSource::Kind::kUrl, "http://a", ImageDetail::kLow};
  ImageSource b{ImageSource::Kind::kDataUrl, "data:image/png;base64,AA==", ImageDetail::kHigh};
  conversation.messages.push_back(Message::User("<｜image｜>", {a}));
  conversation.messages.push_back(Message::User("<｜image｜>", {b}));
  const RenderedPrompt rendered = RenderPrompt(conversation);
  EXPECT_EQ(rendered.prompt,
            "<｜begin▁of▁sentence｜><｜User｜><｜image｜>\n\n<｜image｜><｜Assistant｜></think>");
  ASSERT_EQ(rendered.image_sources.size(), 2u);
  EXPECT_EQ(rendered.image_sources[0].data, "http://a");
  EXPECT_EQ(rendered.image_sources[1].detail, ImageDetail::kHigh);
}

}  // namespace
}  // namespace deepinfer::recipe
