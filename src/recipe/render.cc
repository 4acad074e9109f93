#include "recipe/render.h"

#include <algorithm>
#include <unordered_map>

namespace deepinfer::recipe {
namespace {

// DSML tag names per encoding.
struct DsmlTags {
  std::string_view block;
  std::string_view invoke;
  std::string_view parameter;
};

DsmlTags TagsFor(Encoding encoding) {
  if (encoding == Encoding::kV4) return {"tool_calls", "invoke", "parameter"};
  return {" calls", " invoke", " parameter"};
}

std::string Open(std::string_view tag) { return "<" + std::string(kDsmlToken) + std::string(tag); }
std::string Close(std::string_view tag) {
  return "</" + std::string(kDsmlToken) + std::string(tag) + ">";
}

constexpr std::string_view kV4HighEffort =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in "
    "your thinking and comprehensively decompose the problem to resolve the root cause, rigorously "
    "stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\nExplicitly write out your entire deliberation process, documenting every "
    "intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no "
    "assumption is left unchecked.\n\n";
constexpr std::string_view kV4MaxEffort =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\nYou MUST "
    "reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively "
    "decompose the problem into its most fundamental components, trace every causal chain to its "
    "root, and resolve the underlying cause rather than any surface symptom.\nDo not stop "
    "reasoning until you have independently verified the solution from multiple angles and are "
    "certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

std::string EffortPrefix(const Conversation& conversation, Encoding encoding) {
  if (!conversation.thinking_mode) return "";
  const ReasoningEffort effort = conversation.reasoning_effort.value_or(ReasoningEffort::kHigh);
  if (encoding == Encoding::kV4) {
    if (effort == ReasoningEffort::kLow) return "";
    return std::string(effort == ReasoningEffort::kMax ? kV4MaxEffort : kV4HighEffort);
  }
  const int level = effort == ReasoningEffort::kLow   ? 50
                    : effort == ReasoningEffort::kMax ? 100
                                                      : 75;
  return "Reasoning Effort: " + std::to_string(level) +
         " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

std::string ToolsSection(const std::vector<ToolDefinition>& tools, Encoding encoding) {
  const DsmlTags tags = TagsFor(encoding);
  const std::string block_open = Open(tags.block) + ">";
  const std::string invoke_open = Open(tags.invoke);
  const std::string param_open = Open(tags.parameter);
  std::string out =
      "## Tools\n\nYou have access to a set of tools to help answer the user's "
      "question. You can invoke tools by writing a \"";
  out += block_open;
  out += "\" block like the following:\n\n";
  out += block_open + "\n";
  out += invoke_open + " name=\"$TOOL_NAME\">\n";
  out += param_open + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE" +
         Close(tags.parameter) + "\n";
  out += "...\n";
  out += Close(tags.invoke) + "\n";
  out += invoke_open + " name=\"$TOOL_NAME2\">\n";
  out += "...\n";
  out += Close(tags.invoke) + "\n";
  out += Close(tags.block) + "\n\n";
  out +=
      "String parameters should be specified as is and set `string=\"true\"`. For all other types "
      "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
      "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output "
      "your complete reasoning inside <think>...</think> BEFORE any tool calls or final "
      "response.\n\nOtherwise, output directly after </think> with tool calls or final "
      "response.\n\n### Available Tool Schemas\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    if (i > 0) out += "\n";
    out += ToolSchemaLine(tools[i]);
  }
  out +=
      "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
      "tool calls.\n";
  return out;
}

constexpr std::string_view kJsonFormatSection =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
    "{\"type\": \"json_object\"}";

void AppendJoined(std::string* target, const std::string& addition) {
  if (!target->empty() && !addition.empty()) target->append("\n\n");
  target->append(addition);
}

// Spec §2.3 step 1 for V4: leading systems merge, later systems become user turns.
std::vector<Message> NormalizeSystems(const std::vector<Message>& messages, Encoding encoding) {
  if (encoding == Encoding::kV41) return messages;
  std::vector<Message> out;
  bool seen_non_system = false;
  for (const Message& message : messages) {
    if (message.role != Role::kSystem) {
      seen_non_system = true;
      out.push_back(message);
    } else if (!seen_non_system) {
      if (!out.empty()) {
        AppendJoined(&out.back().content, message.content);
      } else {
        out.push_back(message);
      }
    } else if (!message.content.empty()) {
      out.push_back(Message::User(message.content));
    }
  }
  return out;
}

std::vector<Message> MergeUsers(std::vector<Message> messages) {
  std::vector<Message> out;
  for (Message& message : messages) {
    if (message.role == Role::kUser && !out.empty() && out.back().role == Role::kUser) {
      Message& last = out.back();
      last.content += "\n\n" + message.content;
      for (ImageSource& image : message.images) last.images.push_back(std::move(image));
      continue;
    }
    out.push_back(std::move(message));
  }
  return out;
}

// Re-sorts the tool results of each run of user/tool turns into the order of the calls of the
// preceding assistant turn (stable; unknown ids rank first).
void ReorderToolResults(std::vector<Message>* messages) {
  const std::vector<ToolCall>* calls = nullptr;
  size_t i = 0;
  while (i < messages->size()) {
    Message& message = (*messages)[i];
    if (message.role == Role::kAssistant) {
      calls = message.tool_calls ? &*message.tool_calls : nullptr;
      ++i;
      continue;
    }
    if (message.role != Role::kUser && message.role != Role::kTool) {
      ++i;
      continue;
    }
    size_t end = i;
    std::vector<size_t> tool_slots;
    while (end < messages->size() &&
           ((*messages)[end].role == Role::kUser || (*messages)[end].role == Role::kTool)) {
      if ((*messages)[end].role == Role::kTool) tool_slots.push_back(end);
      ++end;
    }
    if (tool_slots.size() > 1 && calls != nullptr) {
      std::unordered_map<std::string, size_t> rank;
      for (size_t k = 0; k < calls->size(); ++k) rank.emplace((*calls)[k].id, k);
      std::vector<Message> tools;
      for (size_t slot : tool_slots) tools.push_back(std::move((*messages)[slot]));
      std::stable_sort(tools.begin(), tools.end(), [&](const Message& a, const Message& b) {
        auto ra = rank.find(a.tool_call_id);
        auto rb = rank.find(b.tool_call_id);
        return (ra == rank.end() ? 0 : ra->second) < (rb == rank.end() ? 0 : rb->second);
      });
      for (size_t k = 0; k < tool_slots.size(); ++k)
        (*messages)[tool_slots[k]] = std::move(tools[k]);
    }
    i = end;
  }
}

void InjectSystemSections(const Conversation& conversation, Encoding encoding,
                          std::vector<Message>* messages) {
  const bool with_tools =
      conversation.tool_choice != ToolChoice::kNone && !conversation.tools.empty();
  const bool with_json = conversation.response_format == ResponseFormat::kJsonObject;
  if (!with_tools && !with_json) return;
  if (messages->empty() || messages->front().role != Role::kSystem) {
    messages->insert(messages->begin(), Message::System(""));
  }
  std::string& content = messages->front().content;
  if (with_tools) content += "\n\n" + ToolsSection(conversation.tools, encoding);
  if (with_json) content += "\n\n" + std::string(kJsonFormatSection);
}

void RenderAssistant(const Conversation& conversation, const Message& message, size_t index,
                     Encoding encoding, std::string* out) {
  out->append(kAssistantToken);
  if (conversation.thinking_mode && index > 0) {
    out->append(kThinkStart);
    out->append(message.reasoning_content);
  }
  out->append(kThinkEnd);
  out->append(message.content);
  if (message.tool_calls && !message.tool_calls->empty()) {
    out->append("\n\n");
    out->append(RenderToolCallsBlock(*message.tool_calls, encoding));
  }
  out->append(kEosToken);
}

}  // namespace

std::string ToolSchemaLine(const ToolDefinition& tool) {
  Json schema = Json::object();
  schema["name"] = tool.name;
  schema["description"] = tool.description.value_or("");
  schema["parameters"] = tool.parameters;
  return WriteJson(schema, JsonStyle::kPython);
}

std::string RenderToolCallsBlock(const std::vector<ToolCall>& calls, Encoding encoding) {
  const DsmlTags tags = TagsFor(encoding);
  std::string out = Open(tags.block) + ">\n";
  for (size_t c = 0; c < calls.size(); ++c) {
    const ToolCall& call = calls[c];
    if (c > 0) out += "\n";
    out += Open(tags.invoke) + " name=\"" + call.name + "\">\n";
    Json arguments;
    const bool is_object = ParseJson(call.arguments, &arguments) && arguments.is_object();
    auto append_param = [&](const std::string& key, bool is_string, const std::string& value) {
      out += Open(tags.parameter) + " name=\"" + key + "\" string=\"" +
             (is_string ? "true" : "false") + "\">" + value + Close(tags.parameter);
    };
    if (is_object) {
      bool first = true;
      for (const auto& [key, value] : arguments.items()) {
        if (!first) out += "\n";
        first = false;
        if (value.is_string()) {
          append_param(key, true, value.get<std::string>());
        } else {
          append_param(key, false, WriteJson(value, JsonStyle::kPython));
        }
      }
    } else {
      append_param("arguments", true, call.arguments);
    }
    out += "\n" + Close(tags.invoke);
  }
  out += "\n" + Close(tags.block);
  return out;
}

RenderedPrompt RenderPrompt(const Conversation& conversation, Encoding encoding) {
  std::vector<Message> messages = MergeUsers(NormalizeSystems(conversation.messages, encoding));
  ReorderToolResults(&messages);
  InjectSystemSections(conversation, encoding, &messages);

  const std::string_view system_token = encoding == Encoding::kV41 ? kSystemToken : "";
  const std::string effort = EffortPrefix(conversation, encoding);
  RenderedPrompt rendered;
  std::string& out = rendered.prompt;
  out.append(kBosToken);
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& message = messages[i];
    if (i == 0 && (!effort.empty() || message.role == Role::kSystem)) {
      out.append(system_token);
      out.append(effort);
    }
    const bool follows_user =
        i > 0 && (messages[i - 1].role == Role::kUser || messages[i - 1].role == Role::kTool);
    switch (message.role) {
      case Role::kSystem:
        if (i > 0) out.append(system_token);
        out.append(message.content);
        break;
      case Role::kUser:
        out.append(follows_user ? std::string_view("\n\n") : kUserToken);
        out.append(message.content);
        break;
      case Role::kTool:
        out.append(follows_user ? std::string_view("\n\n") : kUserToken);
        out.append("<tool_result>");
        out.append(message.content);
        out.append("</tool_result>");
        break;
      case Role::kLatestReminder:
        out.append(kLatestReminderToken);
        out.append(message.content);
        break;
      case Role::kAssistant:
        RenderAssistant(conversation, message, i, encoding, &out);
        break;
    }
    if (message.role == Role::kUser || message.role == Role::kTool) {
      for (const ImageSource& image : message.images) rendered.image_sources.push_back(image);
    }
  }
  out.append(kAssistantToken);
  out.append(conversation.thinking_mode ? kThinkStart : kThinkEnd);
  if (conversation.tool_choice == ToolChoice::kRequired && !conversation.tools.empty()) {
    out.append("\n\n");
    out.append(Open(TagsFor(encoding).block));
    out.append(">\n");
  }
  return rendered;
}

}  // namespace deepinfer::recipe
