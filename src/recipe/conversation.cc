#include "recipe/conversation.h"

#include <utility>

namespace deepinfer::recipe {

Message Message::System(std::string content) {
  Message message;
  message.role = Role::kSystem;
  message.content = std::move(content);
  return message;
}

Message Message::User(std::string content, std::vector<ImageSource> images) {
  Message message;
  message.role = Role::kUser;
  message.content = std::move(content);
  message.images = std::move(images);
  return message;
}

Message Message::Assistant(std::string content, std::string reasoning,
                           std::optional<std::vector<ToolCall>> tool_calls) {
  Message message;
  message.role = Role::kAssistant;
  message.content = std::move(content);
  message.reasoning_content = std::move(reasoning);
  message.tool_calls = std::move(tool_calls);
  return message;
}

Message Message::Tool(std::string content, std::vector<ImageSource> images, std::string id) {
  Message message;
  message.role = Role::kTool;
  message.content = std::move(content);
  message.images = std::move(images);
  message.tool_call_id = std::move(id);
  return message;
}

Message Message::LatestReminder(std::string content) {
  Message message;
  message.role = Role::kLatestReminder;
  message.content = std::move(content);
  return message;
}

const char* ImageDetailName(ImageDetail detail) {
  switch (detail) {
    case ImageDetail::kLow:
      return "low";
    case ImageDetail::kHigh:
      return "high";
    case ImageDetail::kOriginal:
      return "original";
    case ImageDetail::kAuto:
      return "auto";
  }
  return "high";
}

const char* ReasoningEffortName(ReasoningEffort effort) {
  switch (effort) {
    case ReasoningEffort::kLow:
      return "low";
    case ReasoningEffort::kHigh:
      return "high";
    case ReasoningEffort::kXhigh:
      return "xhigh";
    case ReasoningEffort::kMax:
      return "max";
  }
  return "high";
}

Json DumpImages(const std::vector<ImageSource>& images) {
  Json out = Json::array();
  for (const ImageSource& image : images) {
    Json item = Json::object();
    switch (image.kind) {
      case ImageSource::Kind::kUrl:
        item["kind"] = "url";
        item["url"] = image.data;
        break;
      case ImageSource::Kind::kDataUrl:
        item["kind"] = "data_url";
        item["data_url"] = image.data;
        break;
      case ImageSource::Kind::kBytes:
        item["kind"] = "bytes";
        item["len"] = image.data.size();
        break;
    }
    item["detail"] = ImageDetailName(image.detail);
    out.push_back(std::move(item));
  }
  return out;
}

namespace {

template <typename T>
Json OptionalJson(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// Single-precision values are dumped as the double they widen to (0.7f -> 0.699999988...).
Json OptionalFloat(const std::optional<float>& value) {
  return value ? Json(static_cast<double>(*value)) : Json(nullptr);
}

Json DumpMessage(const Message& message) {
  Json out = Json::object();
  switch (message.role) {
    case Role::kSystem:
      out["role"] = "system";
      out["content"] = message.content;
      break;
    case Role::kUser:
      out["role"] = "user";
      out["content"] = message.content;
      out["images"] = DumpImages(message.images);
      break;
    case Role::kAssistant: {
      out["role"] = "assistant";
      out["content"] = message.content;
      out["reasoning_content"] =
          message.reasoning_content.empty() ? Json(nullptr) : Json(message.reasoning_content);
      Json calls = nullptr;
      if (message.tool_calls) {
        calls = Json::array();
        for (const ToolCall& call : *message.tool_calls) {
          calls.push_back(
              Json{{"id", call.id}, {"name", call.name}, {"arguments", call.arguments}});
        }
      }
      out["tool_calls"] = std::move(calls);
      break;
    }
    case Role::kTool:
      out["role"] = "tool";
      out["content"] = message.content;
      out["tool_call_id"] = message.tool_call_id;
      out["images"] = DumpImages(message.images);
      break;
    case Role::kLatestReminder:
      out["role"] = "latest_reminder";
      out["content"] = message.content;
      break;
  }
  return out;
}

const char* ToolChoiceName(ToolChoice choice) {
  switch (choice) {
    case ToolChoice::kAuto:
      return "auto";
    case ToolChoice::kNone:
      return "none";
    case ToolChoice::kRequired:
      return "required";
  }
  return "auto";
}

Json DumpConversationOnly(const Conversation& conversation) {
  Json messages = Json::array();
  for (const Message& message : conversation.messages) messages.push_back(DumpMessage(message));
  Json tools = Json::array();
  for (const ToolDefinition& tool : conversation.tools) {
    Json item = Json::object();
    item["name"] = tool.name;
    item["description"] = OptionalJson(tool.description);
    item["parameters"] = tool.parameters;
    item["strict"] = OptionalJson(tool.strict);
    tools.push_back(std::move(item));
  }
  Json out = Json::object();
  out["messages"] = std::move(messages);
  out["thinking_mode"] = conversation.thinking_mode;
  out["tools"] = std::move(tools);
  out["tool_choice"] = ToolChoiceName(conversation.tool_choice);
  out["reasoning_effort"] = conversation.reasoning_effort
                                ? Json(ReasoningEffortName(*conversation.reasoning_effort))
                                : Json(nullptr);
  out["response_format"] =
      conversation.response_format == ResponseFormat::kJsonObject ? "json_object" : "text";
  return out;
}

const char* ReasoningStageName(ReasoningStage stage) {
  switch (stage) {
    case ReasoningStage::kStart:
      return "start";
    case ReasoningStage::kReasoning:
      return "reasoning";
    case ReasoningStage::kContent:
      return "content";
  }
  return "start";
}

}  // namespace

Json DumpConversion(const ConvertedRequest& request) {
  const InferenceOptions& inference = request.inference_options;
  Json inference_json = Json::object();
  inference_json["max_tokens"] = OptionalJson(inference.max_tokens);
  inference_json["temperature"] = OptionalFloat(inference.temperature);
  inference_json["top_p"] = OptionalFloat(inference.top_p);
  inference_json["thinking_budget_tokens"] = OptionalJson(inference.thinking_budget_tokens);
  inference_json["disable_parallel_tool_use"] = OptionalJson(inference.disable_parallel_tool_use);

  const ParsingOptions& parsing = request.parsing_options;
  Json parsing_json = Json::object();
  parsing_json["parse_tool_calls"] = parsing.parse_tool_calls;
  parsing_json["tool_call_initial_stage"] = parsing.tool_call_initial_stage;
  parsing_json["parse_json_output"] = parsing.parse_json_output;
  parsing_json["reasoning_initial_stage"] =
      parsing.reasoning_initial_stage ? Json(ReasoningStageName(*parsing.reasoning_initial_stage))
                                      : Json(nullptr);
  parsing_json["stop_sequences"] = parsing.stop_sequences;

  Json out = Json::object();
  out["conversation"] = DumpConversationOnly(request.conversation);
  out["inference_options"] = std::move(inference_json);
  out["parsing_options"] = std::move(parsing_json);
  out["model"] = request.model;
  out["stream"] = request.stream;
  return out;
}

}  // namespace deepinfer::recipe
