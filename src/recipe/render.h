// Prompt rendering for DeepSeek V4 and V4.1 (spec §2.3-§2.9): Conversation -> prompt text
// (with BOS and the generation suffix) and the image sources in prompt order.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "recipe/conversation.h"

namespace deepinfer::recipe {

enum class Encoding { kV4, kV41 };

// Special-token spellings (byte-exact; `｜` is U+FF5C, `▁` is U+2581).
inline constexpr std::string_view kBosToken = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEosToken = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kSystemToken = "<｜System｜>";
inline constexpr std::string_view kUserToken = "<｜User｜>";
inline constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsmlToken = "｜DSML｜";
inline constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
inline constexpr std::string_view kImageToken = "<｜image｜>";
inline constexpr int32_t kImageTokenId = 129264;

struct RenderedPrompt {
  std::string prompt;
  std::vector<ImageSource> image_sources;  // from user and tool messages, in prompt order
};

RenderedPrompt RenderPrompt(const Conversation& conversation, Encoding encoding = Encoding::kV41);

// Python-style JSON of {"name", "description", "parameters"} as used in the tools section.
std::string ToolSchemaLine(const ToolDefinition& tool);

// The DSML block of an assistant turn's tool calls ("<｜DSML｜ calls>\n...</｜DSML｜ calls>").
std::string RenderToolCallsBlock(const std::vector<ToolCall>& calls, Encoding encoding);

}  // namespace deepinfer::recipe
